/* Parallel host-memory copy for the engine's deliveries (see gw_copy.h). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stddef.h>
#include "gw_layouts.h"
#include "gw_engine.h"
#include "gw_copy.h"

#include <emmintrin.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Large copies use non-temporal stores: the destination is not read for ownership
 * first, which saves a third of the memory traffic of a staging->destination copy (the
 * GPU's PCIe writes share the same DRAM). The sfence makes them visible before whatever
 * the caller publishes next (a completion). */
enum { NT_MIN_BYTES = 4096 };

void gw_copy_one(void *dst, const void *src, size_t n)
{
    if (n < NT_MIN_BYTES || ((uintptr_t)dst & 15)) {
        memcpy(dst, src, n);
        return;
    }
    __m128i *d = dst;
    const __m128i *s = src;
    size_t blocks = n / 64;
    for (size_t k = 0; k < blocks; k++, d += 4, s += 4) {
        __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
        __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
        _mm_stream_si128(d, a);
        _mm_stream_si128(d + 1, b);
        _mm_stream_si128(d + 2, c);
        _mm_stream_si128(d + 3, e);
    }
    memcpy(d, s, n % 64);
    _mm_sfence();
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

_Static_assert(GW_MAX_COPY_THREADS + 1 <= 0xFFFF, "a job's piece count fits 16 bits of the claim word");

/* Copies pieces of job `job` until none is left to claim. */
static void take_pieces(struct gw_copy_pool *p, uint32_t job)
{
    uint64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(v >> 32) != job)
            break;
        uint32_t k = (uint32_t)v & 0xFFFF, pieces = (uint32_t)(v >> 16) & 0xFFFF;
        if (k >= pieces)
            break;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* The acquire of the swap that claimed piece k of this job sees the job's fields,
         * and the submitter leaves them as they are until this piece is counted done. */
        size_t off = (size_t)k * p->piece;
        size_t n = p->bytes - off < p->piece ? p->bytes - off : p->piece;
        gw_copy_one(p->dst + off, p->src + off, n);   /* fences its own streaming stores */
        atomic_fetch_sub_explicit(&p->left, 1, memory_order_release);
        v = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *helper_main(void *arg)
{
    struct gw_copy_pool *p = arg;
    uint32_t seen = atomic_load_explicit(&p->job, memory_order_acquire);
    while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
        uint32_t job = atomic_load_explicit(&p->job, memory_order_acquire);
        if (job != seen) {
            seen = job;
            take_pieces(p, job);
            continue;
        }
        /* Idle: spin (a job's pieces must start within a microsecond to help), then
         * sleep on the futex so an idle engine costs no CPU. */
        uint64_t start = now_ns();
        int woke = 0;
        while (now_ns() - start < p->spin_ns) {
            for (int k = 0; k < 64; k++) {
                if (atomic_load_explicit(&p->job, memory_order_relaxed) != seen ||
                    atomic_load_explicit(&p->stop, memory_order_relaxed)) {
                    woke = 1;
                    break;
                }
                _mm_pause();
            }
            if (woke)
                break;
        }
        if (woke)
            continue;
        atomic_fetch_add(&p->sleepers, 1);
        /* The kernel compares the word with `seen` under its lock: a job published
         * after this load and before the wait makes the wait return at once. */
        syscall(SYS_futex, (uint32_t *)&p->job, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
        atomic_fetch_sub(&p->sleepers, 1);
    }
    return NULL;
}

int gw_thread_create(pthread_t *tid, void *(*fn)(void *), void *arg, int cpu, const char *name)
{
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return rc;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        rc = pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
    }
    if (rc == 0)
        rc = pthread_create(tid, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc == 0)
        pthread_setname_np(*tid, name);   /* a name is a convenience: its failure is not */
    return rc;
}

int gw_copy_pool_start(struct gw_copy_pool *p, uint32_t threads, uint64_t spin_ns,
                       size_t split_bytes, const uint16_t *cpus)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->submit, NULL);
    p->spin_ns = spin_ns;
    p->split_bytes = split_bytes;
    p->piece_min = split_bytes / 4;
    if (threads > GW_MAX_COPY_THREADS)
        threads = GW_MAX_COPY_THREADS;
    for (uint32_t i = 0; i < threads; i++) {
        char name[24];
        snprintf(name, sizeof(name), "gw-copy-%u", i);
        if (gw_thread_create(&p->tid[i], helper_main, p, cpus ? cpus[i] : -1, name) != 0) {
            p->threads = i;
            gw_copy_pool_stop(p);
            return -1;
        }
        p->threads = i + 1;
    }
    return 0;
}

void gw_copy_pool_stop(struct gw_copy_pool *p)
{
    if (p->threads == 0)
        return;
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    atomic_fetch_add_explicit(&p->job, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)&p->job, FUTEX_WAKE_PRIVATE, GW_MAX_COPY_THREADS, NULL, NULL, 0);
    for (uint32_t i = 0; i < p->threads; i++)
        pthread_join(p->tid[i], NULL);
    p->threads = 0;
}

int gw_copy(struct gw_copy_pool *p, void *dst, const void *src, size_t n)
{
    /* A WQE may write a region from itself, its source and destination overlapping: a
     * forward copy (memcpy, the streaming loop, pieces in parallel) would then read bytes
     * it has already written. The NIC reads before it writes: the bytes as they were. */
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (n && d < s + n && s < d + n) {
        memmove(dst, src, n);
        return 0;
    }
    if (!p || p->threads == 0 || n < p->split_bytes || ((uintptr_t)dst & 15) ||
        pthread_mutex_trylock(&p->submit) != 0) {
        gw_copy_one(dst, src, n);
        return 0;
    }
    /* A piece per thread (the caller's included), 64-byte multiples so every piece but
     * the last streams whole lines. */
    size_t piece = (n + p->threads) / (p->threads + 1);
    if (piece < p->piece_min)
        piece = p->piece_min;
    piece = (piece + 63) & ~(size_t)63;
    uint32_t job = atomic_load_explicit(&p->job, memory_order_relaxed) + 1;
    uint32_t pieces = (uint32_t)((n + piece - 1) / piece);   /* <= threads + 1 */
    p->dst = dst;
    p->src = src;
    p->bytes = n;
    p->piece = piece;
    atomic_store_explicit(&p->left, pieces, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint64_t)job << 32 | (uint64_t)pieces << 16,
                          memory_order_release);
    atomic_store_explicit(&p->job, job, memory_order_release);
    if (atomic_load(&p->sleepers))
        syscall(SYS_futex, (uint32_t *)&p->job, FUTEX_WAKE_PRIVATE, GW_MAX_COPY_THREADS, NULL,
                NULL, 0);
    take_pieces(p, job);
    /* Helpers that claimed a piece finish it; the acquire pairs with their release. */
    while (atomic_load_explicit(&p->left, memory_order_acquire) != 0)
        _mm_pause();
    pthread_mutex_unlock(&p->submit);
    return 1;
}
