/* A pool of helper threads that split one large host-memory copy between them.
 *
 * The emulated NIC delivers a pushed message by copying it from the staging region to
 * its destination; that copy stands in for the link (400 Gb/s is 50 GB/s) and the
 * receiving NIC's DMA writes. One CPU thread copies pinned host memory at about 8 to 12
 * GB/s, so a single-threaded copy made the stand-in cost several times the step it
 * stands for. Internal to the engine (not part of the cffi interface). */
#ifndef GW_COPY_H
#define GW_COPY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Include gw_engine.h first (GW_MAX_COPY_THREADS; it has no include guard: cffi reads it). */

/* One cache line (two: the adjacent-line prefetcher pairs lines) per word that a thread
 * writes and others poll, so that no write invalidates a word another thread spins on. */
#define GW_COPY_LINE 128

struct gw_copy_slot {
    /* Piece k's state for job J (k >= 1; the submitter copies piece 0 itself): below
     * J << 1 free, J << 1 claimed, J << 1 | 1 copied. Its home helper (k - 1) claims it with
     * a compare-and-swap; the submitter, its own piece done, takes any piece still free
     * the same way, so a helper that is late (asleep, descheduled) delays no copy. */
    _Alignas(GW_COPY_LINE) _Atomic uint64_t state;
};

struct gw_copy_pool {
    uint32_t threads;                 /* helpers; 0: the pool is off */
    /* Copies shorter than split_bytes are not split, and no piece is shorter than a
     * quarter of it. Below 32 KiB a split did not pay in the engine on the H100 hosts,
     * with either pool: 8 KiB split took 1 us longer than whole, 16 KiB the same
     * (BENCHMARKS.md, sessions 25 and 27). */
    size_t split_bytes, piece_min;
    uint64_t spin_ns;                 /* an idle helper spins this long before sleeping */
    pthread_t tid[GW_MAX_COPY_THREADS];
    pthread_mutex_t submit;           /* one job at a time; a busy pool: the caller copies alone */
    uint64_t jobs;                    /* the submitter's job counter (under `submit`) */
    /* The job: set by the submitter before it publishes `seq`, read by a helper only
     * once it has claimed a piece of that job, and left as it is until every piece is
     * copied. */
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes, piece;
    /* (job << 16 | pieces): what the idle helpers poll, alone on its line. */
    _Alignas(GW_COPY_LINE) _Atomic uint64_t seq;
    _Alignas(GW_COPY_LINE) _Atomic uint32_t wake;   /* futex word (the job's low 32 bits) */
    _Atomic uint32_t sleepers;
    _Atomic int stop;
    struct gw_copy_slot slot[GW_MAX_COPY_THREADS + 1];
    /* Why not one claim counter and one pieces-left counter shared by every thread (the
     * pool until session 27): each helper's compare-and-swap and decrement then waits its
     * turn for the same two lines, and the helpers polling the job word beside them lose
     * it at each. On an H100 host (16 vCPUs, 0.19 to 0.21 us one way between two cores)
     * a job of six helpers and 64-byte pieces took 2.0 us that way and 0.96 us this way
     * (benchmarks/scripts/handoff_probe.c, BENCHMARKS.md, session 27). */
};

/* Starts `threads` helpers (0 leaves the pool off) that split copies of at least
 * `split_bytes`; with `cpus`, helper i runs only on CPU cpus[i]. Returns 0, or -1 if a
 * thread could not be started (the pool is then off and every copy is single-threaded). */
int gw_copy_pool_start(struct gw_copy_pool *p, uint32_t threads, uint64_t spin_ns,
                       size_t split_bytes, const uint16_t *cpus);
void gw_copy_pool_stop(struct gw_copy_pool *p);

/* Whether the pool splits a copy of n bytes by its size (gw_copy also copies whole one
 * whose destination is unaligned, whose ends overlap, or that finds the pool busy): one
 * test for gw_copy and for the engine's choice of how to store what the pool leaves whole. */
static inline int gw_copy_splits(const struct gw_copy_pool *p, size_t n)
{
    return p && p->threads != 0 && n >= p->split_bytes;
}

/* What one split copy cost its submitter beyond its own piece: how many pieces it handed
 * to helpers, how many of those it copied itself because their helper had not claimed
 * them when it came to them (asleep, descheduled, still on an earlier job), and how long
 * it waited, after its own piece, for the helpers' pieces to be copied. */
struct gw_copy_split {
    uint32_t pieces, late;
    uint64_t wait_ns;
};

/* Copies n bytes; with a running pool and n >= its split_bytes, the helpers and the
 * caller copy pieces of it in parallel. Returns once every byte is in place and globally
 * visible (the non-temporal stores are fenced): 1 if the copy was split (then `split`, if
 * not NULL, says what the split cost), else 0 (too short, an unaligned destination,
 * overlapping ends, or the pool busy with another worker's copy; `split` is untouched). */
int gw_copy(struct gw_copy_pool *p, void *dst, const void *src, size_t n,
            struct gw_copy_split *split);

/* pthread_create, the thread confined to CPU `cpu` from its first instruction when cpu
 * >= 0 (an engine thread that busy-polls and shares a CPU runs at half speed; one
 * that migrates loses its caches), and named `name` (at most 15 characters; what top -H,
 * perf and /proc/PID/task/TID/comm show). Returns pthread_create's error number. */
int gw_thread_create(pthread_t *tid, void *(*fn)(void *), void *arg, int cpu, const char *name);

/* The single-threaded copy gw_copy uses for each piece. */
void gw_copy_one(void *dst, const void *src, size_t n);

#endif
