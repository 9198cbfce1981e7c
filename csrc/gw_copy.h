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

struct gw_copy_pool {
    uint32_t threads;                 /* helpers; 0: the pool is off */
    /* Copies shorter than split_bytes are not split, and no piece is shorter than a
     * quarter of it. Handing pieces out costs about a microsecond more than one thread
     * takes for 8 KiB: on an H100 host, split deliveries of 4 to 16 KiB took 1.3 to 1.5
     * us longer than whole ones, also with every shared word on a cache line of its own
     * and a claim word per piece (BENCHMARKS.md, session 25). */
    size_t split_bytes, piece_min;
    pthread_t tid[GW_MAX_COPY_THREADS];
    pthread_mutex_t submit;           /* one job at a time; a busy pool: the caller copies alone */
    /* The job: set by the submitter before it publishes `claim`. */
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes, piece;
    /* (job << 32 | pieces << 16 | next piece): a helper claims a piece with a
     * compare-and-swap of the whole word, so a claim that succeeds names a piece that
     * exists in the job it names, and one that wakes late never takes a piece of a later
     * job. The count is in the word, not a field of its own beside it: read there, a
     * helper that had seen job J's last piece claimed could read job J + 1's count while
     * the submitter wrote it (ThreadSanitizer, session 26) and, its swap landing before
     * J + 1's claim word, copy a piece of J + 1 that was not yet handed out and count it
     * done: the submitter would then publish J + 1 before its last piece had landed. */
    _Atomic uint64_t claim;
    _Atomic uint32_t left;            /* pieces of the job not yet copied */
    _Atomic uint32_t job;             /* futex word: helpers sleep on it */
    _Atomic uint32_t sleepers;
    _Atomic int stop;
    uint64_t spin_ns;                 /* an idle helper spins this long before sleeping */
};

/* Starts `threads` helpers (0 leaves the pool off) that split copies of at least
 * `split_bytes`; with `cpus`, helper i runs only on CPU cpus[i]. Returns 0, or -1 if a
 * thread could not be started (the pool is then off and every copy is single-threaded). */
int gw_copy_pool_start(struct gw_copy_pool *p, uint32_t threads, uint64_t spin_ns,
                       size_t split_bytes, const uint16_t *cpus);
void gw_copy_pool_stop(struct gw_copy_pool *p);

/* Copies n bytes; with a running pool and n >= its split_bytes, the helpers and the
 * caller copy pieces of it in parallel. Returns once every byte is in place and globally
 * visible (the non-temporal stores are fenced): 1 if the copy was split, else 0 (too
 * short, an unaligned destination, overlapping ends, or the pool busy with another
 * worker's copy). */
int gw_copy(struct gw_copy_pool *p, void *dst, const void *src, size_t n);

/* pthread_create, the thread confined to CPU `cpu` from its first instruction when cpu
 * >= 0 (an engine thread that busy-polls and shares a CPU runs at half speed; one
 * that migrates loses its caches), and named `name` (at most 15 characters; what top -H,
 * perf and /proc/PID/task/TID/comm show). Returns pthread_create's error number. */
int gw_thread_create(pthread_t *tid, void *(*fn)(void *), void *arg, int cpu, const char *name);

/* The single-threaded copy gw_copy uses for each piece. */
void gw_copy_one(void *dst, const void *src, size_t n);

#endif
