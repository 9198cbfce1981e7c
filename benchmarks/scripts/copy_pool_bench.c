/* The engine's copy pool alone (csrc/gw_copy.c), on the host CPU, session 25: how long one
 * copy of 4 to 64 KiB takes whole (the worker alone) and split among the helpers, one copy
 * every few microseconds as in a latency sweep, the source rewritten before each copy by
 * another thread (as the GPU's writes leave it: not in the copying core's cache).
 *
 * Build and run (from the repository root):
 *   cc -O2 -Icsrc -o /tmp/cpb benchmarks/scripts/copy_pool_bench.c csrc/gw_copy.c -lpthread
 *   /tmp/cpb [helpers] [gap_ns] [copies]
 * Prints one line per (size, mode): median / p90 / max ns of `copies` (2000) copies, how
 * many were split, and of the pieces handed to helpers how many the submitter copied
 * itself, their helper not having claimed them yet (with a gap longer than the helpers'
 * 2 ms spin they are asleep at each copy, and most are). Every
 * copy's destination is checked once gw_copy returns (outside the timed span): a byte not
 * yet in place ends the run with status 1 (tests/foundation/test_copy_pool.py runs it so).
 * scripts/sanitize_check.sh (SANITIZE=thread) also builds it with -fsanitize=thread, as the
 * copy pool's race driver: the submitter, the helpers and the source's writer race here. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stddef.h>
#include "gw_layouts.h"
#include "gw_engine.h"
#include "gw_copy.h"
#include "probe_clock.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A writer thread dirties the source in its own cache before each copy. */
static uint8_t *g_src;
static size_t g_bytes;
static _Atomic uint32_t g_ask, g_done;

static void *writer(void *arg)
{
    (void)arg;
    uint32_t seen = 0;
    for (;;) {
        uint32_t ask = atomic_load_explicit(&g_ask, memory_order_acquire);
        if (ask == seen)
            continue;
        if (ask == UINT32_MAX)
            return NULL;
        seen = ask;
        memset(g_src, (int)(ask & 0xff), g_bytes);
        atomic_store_explicit(&g_done, ask, memory_order_release);
    }
}

int main(int argc, char **argv)
{
    uint32_t helpers = argc > 1 ? (uint32_t)atoi(argv[1]) : 6;
    uint64_t gap_ns = argc > 2 ? (uint64_t)atoll(argv[2]) : 5000;
    enum { MAXREPS = 2000, MAXB = 1 << 20 };
    int REPS = argc > 3 ? atoi(argv[3]) : MAXREPS;
    if (REPS < 1 || REPS > MAXREPS) {
        fprintf(stderr, "copies=%d: allowed 1 to %d\n", REPS, MAXREPS);
        return 2;
    }
    uint8_t *src = aligned_alloc(4096, MAXB), *dst = aligned_alloc(4096, MAXB);
    memset(src, 1, MAXB);
    memset(dst, 0, MAXB);
    g_src = src;
    struct gw_copy_pool pool;
    if (gw_copy_pool_start(&pool, helpers, 2000000, 1024, NULL) != 0) {
        fprintf(stderr, "pool start failed\n");
        return 1;
    }
    pthread_t w;
    gw_thread_create(&w, writer, NULL, -1, "writer");
    static uint64_t t[MAXREPS];
    const size_t sizes[] = {4096, 8192, 16384, 32768, 65536};
    printf("helpers %u, gap %llu ns\n", helpers, (unsigned long long)gap_ns);
    uint32_t ask = 0;
    for (int s = 0; s < 5; s++) {
        for (int split = 0; split < 2; split++) {
            pool.split_bytes = split ? 1024 : (size_t)1 << 30;
            pool.piece_min = split ? 1024 : (size_t)1 << 28;
            g_bytes = sizes[s];
            int shared = 0;
            unsigned long long pieces = 0, late = 0;
            for (int r = 0; r < REPS; r++) {
                atomic_store_explicit(&g_ask, ++ask, memory_order_release);
                while (atomic_load_explicit(&g_done, memory_order_acquire) != ask)
                    ;
                uint64_t t0 = now_ns();
                struct gw_copy_split sp;
                int was_split = gw_copy(&pool, dst, src, sizes[s], &sp);
                t[r] = now_ns() - t0;
                shared += was_split;
                if (was_split) {
                    pieces += sp.pieces;
                    late += sp.late;
                }
                /* The last byte of every 64-byte line first, then every byte: a check
                 * of every byte in turn is slower than a helper's copy, and would give a
                 * piece still being copied the time to land. */
                for (size_t b = 63; b < sizes[s]; b += 64) {
                    if (dst[b] != (uint8_t)ask) {
                        fprintf(stderr, "copy %d of %zu B (%s): byte %zu is %u, not %u, when "
                                "gw_copy returned\n", r, sizes[s], split ? "split" : "whole",
                                b, dst[b], (uint8_t)ask);
                        return 1;
                    }
                }
                for (size_t b = 0; b < sizes[s]; b++) {
                    if (dst[b] != (uint8_t)ask) {
                        fprintf(stderr, "copy %d of %zu B (%s): byte %zu is %u, not %u, when "
                                "gw_copy returned\n", r, sizes[s], split ? "split" : "whole",
                                b, dst[b], (uint8_t)ask);
                        return 1;
                    }
                }
                uint64_t until = now_ns() + gap_ns;
                while (now_ns() < until)
                    ;
            }
            qsort(t, REPS, sizeof t[0], cmp_u64);
            printf("%6zu B %s: median %6llu  p90 %6llu  max %7llu ns  (split %d of %d; "
                   "late %llu of %llu pieces)\n",
                   sizes[s], split ? "split" : "whole", (unsigned long long)t[REPS / 2],
                   (unsigned long long)t[REPS * 9 / 10], (unsigned long long)t[REPS - 1],
                   shared, REPS, late, pieces);
        }
    }
    atomic_store(&g_ask, UINT32_MAX);
    pthread_join(w, NULL);
    gw_copy_pool_stop(&pool);
    return 0;
}
