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
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Large copies use non-temporal stores: the destination is not read for ownership
 * first, which saves a third of the memory traffic of a staging->destination copy (the
 * GPU's PCIe writes share the same DRAM). The sfence makes them visible before whatever
 * the caller publishes next (a completion). */
enum { NT_MIN_BYTES = GW_COPY_STREAM_MIN };

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

_Static_assert(GW_MAX_COPY_THREADS + 1 <= 0xFFFF, "a job's piece count fits 16 bits of seq");

/* Copies piece k (>= 1) of job `job` if its state is still below claimed for that job and
 * this thread's compare-and-swap claims it; then marks it copied. Returns 1 if this thread
 * copied it, 0 if another had claimed it. */
static int take_piece(struct gw_copy_pool *p, uint32_t k, uint64_t job)
{
    struct gw_copy_slot *s = &p->slot[k];
    uint64_t v = atomic_load_explicit(&s->state, memory_order_relaxed);
    if (v >= job << 1 ||
        !atomic_compare_exchange_strong_explicit(&s->state, &v, job << 1, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return 0;
    /* Claimed: the job's fields are this job's (the acquire of `seq` that named it saw
     * them), and the submitter leaves them as they are until this piece is marked. */
    size_t off = (size_t)k * p->piece;
    size_t n = p->bytes - off < p->piece ? p->bytes - off : p->piece;
    gw_copy_one(p->dst + off, p->src + off, n);   /* fences its own streaming stores */
    atomic_store_explicit(&s->state, job << 1 | 1, memory_order_release);
    return 1;
}

static void *helper_main(void *arg)
{
    struct gw_copy_pool *p = ((struct gw_copy_pool **)arg)[0];
    uint32_t k = (uint32_t)(uintptr_t)((void **)arg)[1];   /* the piece this helper takes */
    free(arg);
    uint64_t seen = atomic_load_explicit(&p->seq, memory_order_acquire) >> 16;
    while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
        uint64_t seq = atomic_load_explicit(&p->seq, memory_order_acquire);
        if (seq >> 16 != seen) {
            seen = seq >> 16;
            if (k < (seq & 0xFFFF))
                take_piece(p, k, seen);
            continue;
        }
        /* Idle: spin (a job's pieces must start within a microsecond to help), then
         * sleep on the futex so an idle engine costs no CPU. */
        uint64_t start = now_ns();
        int woke = 0;
        while (now_ns() - start < p->spin_ns) {
            for (int r = 0; r < 64; r++) {
                if (atomic_load_explicit(&p->seq, memory_order_relaxed) >> 16 != seen ||
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
        /* The kernel compares the word with the job seen under its lock: a job published
         * after the increment is either woken for (the submitter sees this sleeper) or
         * makes the wait return at once (its word is already the new job's). */
        syscall(SYS_futex, (uint32_t *)&p->wake, FUTEX_WAIT_PRIVATE, (uint32_t)seen, NULL,
                NULL, 0);
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
        void **arg = malloc(2 * sizeof(void *));    /* the pool, and piece i + 1 */
        int rc = -1;
        if (arg) {
            arg[0] = p;
            arg[1] = (void *)(uintptr_t)(i + 1);
            rc = gw_thread_create(&p->tid[i], helper_main, arg, cpus ? cpus[i] : -1, name);
            if (rc != 0)
                free(arg);
        }
        if (rc != 0) {
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
    atomic_fetch_add_explicit(&p->wake, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)&p->wake, FUTEX_WAKE_PRIVATE, GW_MAX_COPY_THREADS, NULL, NULL, 0);
    for (uint32_t i = 0; i < p->threads; i++)
        pthread_join(p->tid[i], NULL);
    p->threads = 0;
}

int gw_copy(struct gw_copy_pool *p, void *dst, const void *src, size_t n,
            struct gw_copy_split *split)
{
    /* A WQE may write a region from itself, its source and destination overlapping: a
     * forward copy (memcpy, the streaming loop, pieces in parallel) would then read bytes
     * it has already written. The NIC reads before it writes: the bytes as they were. */
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (n && d < s + n && s < d + n) {
        memmove(dst, src, n);
        return 0;
    }
    if (!gw_copy_splits(p, n) || ((uintptr_t)dst & 15) ||
        pthread_mutex_trylock(&p->submit) != 0) {
        gw_copy_one(dst, src, n);
        return 0;
    }
    /* A piece per thread (the caller's included), 64-byte multiples so every piece but
     * the last streams whole lines. Piece k >= 1 is helper k - 1's. */
    size_t piece = (n + p->threads) / (p->threads + 1);
    if (piece < p->piece_min)
        piece = p->piece_min;
    piece = (piece + 63) & ~(size_t)63;
    uint32_t pieces = (uint32_t)((n + piece - 1) / piece);   /* <= threads + 1 */
    uint64_t job = ++p->jobs;
    p->dst = dst;
    p->src = src;
    p->bytes = n;
    p->piece = piece;
    atomic_store_explicit(&p->seq, job << 16 | pieces, memory_order_release);
    /* Sequentially consistent, as the helpers' increment of `sleepers` is: a helper that
     * counted itself asleep before this store is seen below and woken. */
    atomic_store(&p->wake, (uint32_t)job);
    if (atomic_load(&p->sleepers))
        syscall(SYS_futex, (uint32_t *)&p->wake, FUTEX_WAKE_PRIVATE, GW_MAX_COPY_THREADS, NULL,
                NULL, 0);
    gw_copy_one(dst, src, piece < n ? piece : n);
    /* Every other piece: taken here if its helper has not claimed it yet, else waited
     * for; the acquire pairs with the helper's release of "copied". */
    uint64_t own_done = now_ns();
    uint32_t late = 0;
    for (uint32_t k = 1; k < pieces; k++) {
        late += (uint32_t)take_piece(p, k, job);
        while (atomic_load_explicit(&p->slot[k].state, memory_order_acquire) != (job << 1 | 1))
            _mm_pause();
    }
    pthread_mutex_unlock(&p->submit);
    if (split) {
        split->pieces = pieces - 1;
        split->late = late;
        split->wait_ns = now_ns() - own_done;
    }
    return 1;
}
