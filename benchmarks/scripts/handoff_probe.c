/* Session 27: what a hand-off between CPU threads costs on the device host, against what the
 * engine's copy pool (csrc/gw_copy.c) pays for one (about 1.1 us with six helpers, 0.75 with
 * three: BENCHMARKS.md, session 25).
 *
 *   1. one-way latency between two cores: a ping-pong on two cache lines;
 *   2. a fork-join that copies nothing, three ways: (a) the helpers each see a job word
 *      and each store a done word on a line of its own; (b) as (a), then each claims a
 *      piece with a compare-and-swap of one shared word and counts itself done on one
 *      shared counter (the pool's protocol); (c) the pool itself, gw_copy of 64 bytes per
 *      piece;
 *   3. copies of 4 to 64 KiB whose source another thread has just written: one thread,
 *      the pool, and (a) with each helper copying a fixed piece.
 * Medians and p90 of 20000 (1, 2) or 2000 (3) rounds, ns.
 *
 *   cc -O2 -Icsrc -o /tmp/hp benchmarks/scripts/handoff_probe.c csrc/gw_copy.c -lpthread
 *   /tmp/hp */
#define _GNU_SOURCE
#include <stdint.h>
#include <stddef.h>
#include "gw_layouts.h"
#include "gw_engine.h"
#include "gw_copy.h"
#include "probe_clock.h"

#include <emmintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE 128
#define MAXH 8

static void report(const char *what, uint64_t *ns, int n)
{
    qsort(ns, n, sizeof(*ns), cmp_u64);
    printf("%-44s p50 %6llu  p90 %6llu  max %7llu\n", what, (unsigned long long)ns[n / 2],
           (unsigned long long)ns[n * 9 / 10], (unsigned long long)ns[n - 1]);
    fflush(stdout);
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

struct line { _Alignas(LINE) _Atomic uint64_t v; };

static struct line g_job, g_claim, g_left, g_stop, g_done[MAXH];
static uint8_t *g_src, *g_dst;
static size_t g_bytes, g_piece;
static int g_mode;   /* 0: done words; 1: claim + shared counter; 2: pieces, done words */

struct helper { int id, cpu; };

static void *helper_main(void *arg)
{
    struct helper *h = arg;
    pin(h->cpu);
    uint64_t seen = 0;
    while (!atomic_load_explicit(&g_stop.v, memory_order_relaxed)) {
        uint64_t job = atomic_load_explicit(&g_job.v, memory_order_acquire);
        if (job == seen) {
            _mm_pause();
            continue;
        }
        seen = job;
        if (g_mode == 1) {
            uint64_t c = atomic_load_explicit(&g_claim.v, memory_order_acquire);
            while ((c >> 16) == job && (c & 0xFFFF) > 0 &&
                   !atomic_compare_exchange_weak(&g_claim.v, &c, c - 1))
                ;
            atomic_fetch_sub_explicit(&g_left.v, 1, memory_order_release);
        } else {
            if (g_mode == 2) {
                size_t off = (size_t)(h->id + 1) * g_piece;
                size_t n = g_bytes > off ? (g_bytes - off < g_piece ? g_bytes - off : g_piece) : 0;
                if (n)
                    gw_copy_one(g_dst + off, g_src + off, n);
            }
            atomic_store_explicit(&g_done[h->id].v, job, memory_order_release);
        }
    }
    return NULL;
}

/* The source's writer: dirties it in its own cache before each copy. */
static struct line g_ask, g_written;
static void *writer_main(void *arg)
{
    pin(*(int *)arg);
    uint64_t seen = 0;
    while (!atomic_load_explicit(&g_stop.v, memory_order_relaxed)) {
        uint64_t ask = atomic_load_explicit(&g_ask.v, memory_order_acquire);
        if (ask == seen) {
            _mm_pause();
            continue;
        }
        seen = ask;
        memset(g_src, (int)(ask & 0xff), g_bytes);
        atomic_store_explicit(&g_written.v, ask, memory_order_release);
    }
    return NULL;
}

static void dirty_source(uint64_t k)
{
    atomic_store_explicit(&g_ask.v, k, memory_order_release);
    while (atomic_load_explicit(&g_written.v, memory_order_acquire) != k)
        _mm_pause();
    uint64_t t = now_ns();
    while (now_ns() - t < 3000)
        _mm_pause();
}

static uint64_t g_jobs;

static uint64_t fork_join(int helpers)
{
    uint64_t job = ++g_jobs;
    uint64_t t0 = now_ns();
    if (g_mode == 1) {
        atomic_store_explicit(&g_left.v, helpers, memory_order_relaxed);
        atomic_store_explicit(&g_claim.v, job << 16 | helpers, memory_order_release);
    }
    atomic_store_explicit(&g_job.v, job, memory_order_release);
    if (g_mode == 2)
        gw_copy_one(g_dst, g_src, g_piece < g_bytes ? g_piece : g_bytes);
    if (g_mode == 1) {
        while (atomic_load_explicit(&g_left.v, memory_order_acquire) != 0)
            _mm_pause();
    } else {
        for (int h = 0; h < helpers; h++)
            while (atomic_load_explicit(&g_done[h].v, memory_order_acquire) != job)
                _mm_pause();
    }
    return now_ns() - t0;
}

int main(void)
{
    enum { ROUNDS = 20000, COPIES = 2000 };
    static uint64_t ns[ROUNDS];
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    printf("%d CPUs\n", ncpu);
    pin(2);
    g_src = aligned_alloc(4096, 1 << 20);
    g_dst = aligned_alloc(4096, 1 << 20);
    memset(g_src, 1, 1 << 20);
    memset(g_dst, 0, 1 << 20);

    /* 1: one-way latency, CPU 2 to each other CPU (the helpers take 3 up) */
    for (int j = 0; j < ncpu && j < 16; j++) {
        if (j == 2)
            continue;
        struct helper h = {0, j};
        g_mode = 0;
        atomic_store(&g_stop.v, 0);
        atomic_store(&g_done[0].v, g_jobs);
        pthread_t t;
        pthread_create(&t, NULL, helper_main, &h);
        for (int k = 0; k < ROUNDS; k++)
            ns[k] = fork_join(1) / 2;
        atomic_store(&g_stop.v, 1);
        pthread_join(t, NULL);
        char what[64];
        snprintf(what, sizeof(what), "one way, CPU 2 <-> CPU %d", j);
        report(what, ns, ROUNDS);
    }

    /* 2 and 3 */
    int counts[] = {1, 3, 6};
    int writer_cpu = 1;
    for (int c = 0; c < 3; c++) {
        int H = counts[c];
        struct helper hs[MAXH];
        pthread_t ts[MAXH], wt;
        atomic_store(&g_stop.v, 0);
        for (int h = 0; h < H; h++) {
            hs[h].id = h;
            hs[h].cpu = 3 + h;
            atomic_store(&g_done[h].v, g_jobs);
            pthread_create(&ts[h], NULL, helper_main, &hs[h]);
        }
        pthread_create(&wt, NULL, writer_main, &writer_cpu);
        char what[80];
        for (g_mode = 0; g_mode < 2; g_mode++) {
            for (int k = 0; k < ROUNDS; k++)
                ns[k] = fork_join(H);
            snprintf(what, sizeof(what), "fork-join %d helpers, %s", H,
                     g_mode ? "claim + shared counter" : "done words");
            report(what, ns, ROUNDS);
        }
        g_mode = 2;
        size_t sizes[] = {4096, 16384, 65536};
        for (int s = 0; s < 3; s++) {
            g_bytes = sizes[s];
            g_piece = ((g_bytes + H) / (H + 1) + 63) & ~(size_t)63;
            for (int k = 0; k < COPIES; k++) {
                dirty_source(++g_jobs + 1000000);
                ns[k] = fork_join(H);
            }
            snprintf(what, sizeof(what), "%zu B, %d helpers, fixed pieces", g_bytes, H);
            report(what, ns, COPIES);
            for (int k = 0; k < COPIES; k++) {
                dirty_source(++g_jobs + 1000000);
                uint64_t t0 = now_ns();
                gw_copy_one(g_dst, g_src, g_bytes);
                ns[k] = now_ns() - t0;
            }
            snprintf(what, sizeof(what), "%zu B, one thread", g_bytes);
            report(what, ns, COPIES);
        }
        atomic_store(&g_stop.v, 1);
        for (int h = 0; h < H; h++)
            pthread_join(ts[h], NULL);
        pthread_join(wt, NULL);

        /* the pool itself, its helpers on the same CPUs */
        struct gw_copy_pool pool;
        uint16_t cpus[MAXH];
        for (int h = 0; h < H; h++)
            cpus[h] = (uint16_t)(3 + h);
        atomic_store(&g_stop.v, 0);
        gw_copy_pool_start(&pool, H, 2000000, 256, cpus);
        pthread_create(&wt, NULL, writer_main, &writer_cpu);
        for (int k = 0; k < ROUNDS; k++) {
            uint64_t t0 = now_ns();
            gw_copy(&pool, g_dst, g_src + 65536, 64 * (H + 1), NULL);
            ns[k] = now_ns() - t0;
        }
        snprintf(what, sizeof(what), "gw_copy pool %d helpers, 64 B pieces", H);
        report(what, ns, ROUNDS);
        for (int s = 0; s < 3; s++) {
            g_bytes = sizes[s];
            for (int k = 0; k < COPIES; k++) {
                dirty_source(++g_jobs + 1000000);
                uint64_t t0 = now_ns();
                gw_copy(&pool, g_dst, g_src, g_bytes, NULL);
                ns[k] = now_ns() - t0;
            }
            snprintf(what, sizeof(what), "%zu B, gw_copy pool %d helpers", g_bytes, H);
            report(what, ns, COPIES);
        }
        atomic_store(&g_stop.v, 1);
        pthread_join(wt, NULL);
        gw_copy_pool_stop(&pool);
    }
    return 0;
}
