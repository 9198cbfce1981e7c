/*
 * gw_engine_internal.h: what the pieces of the software NIC engine share. Internal to
 * csrc/ (not read by cffi: ffi_build.py's HEADERS are the interface).
 *
 *   gw_engine.c      the public API (gw_engine.h: the engine, its regions, CQs and QPs,
 *                    start and stop, poll, counters) and the helpers every part uses;
 *   gw_wqe.c         doorbells and fetching and validating WQEs into descriptors: regions'
 *                    keys and bounds, staging claims, the drop policy on arrival;
 *   gw_service.c     per-QP service: head messages onto the link, their bytes delivered;
 *                    the workers' pass and loop;
 *   gw_cq.c          completions: a head descriptor retired, its CQE written, its staging
 *                    slots returned;
 *   gw_invalidate.c  invalidation: regions deregistered and QPs reset or destroyed while
 *                    their WQEs are in flight;
 *   gw_link.c        the link model: rate, credit-based flow control, a receiver that stalls;
 *   gw_pull.c        nic_pull's stand-ins: the GPU-resident pull agent (and its late pulls)
 *                    and the copy engine, through the CUDA driver loaded at run time;
 *   gw_pong.c        the floor's doorbell ping-pong responder.
 * (The copy pool of large deliveries, gw_copy.c, has its own header: gw_copy.h.)
 *
 * A function one file defines for another is declared here GW_INTERNAL (hidden): not
 * exported from the extension, so no symbol of the same name elsewhere can interpose.
 * Define _GNU_SOURCE before including this header.
 */
#ifndef GW_ENGINE_INTERNAL_H
#define GW_ENGINE_INTERNAL_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <pthread.h>
#include <time.h>
#include <dlfcn.h>
#include <math.h>
#include <sched.h>

#include "gw_layouts.h"
#include "gw_engine.h"
#include "gw_copy.h"

#define GW_INTERNAL __attribute__((visibility("hidden")))

/* ---- byte order and shared-memory access --------------------------------------- */

static inline uint16_t be16_get(gw_be16 v) { return __builtin_bswap16(v.be); }
static inline uint32_t be32_get(gw_be32 v) { return __builtin_bswap32(v.be); }
static inline uint64_t be64_get(gw_be64 v) { return __builtin_bswap64(v.be); }
static inline gw_be16 be16_make(uint16_t x) { gw_be16 v = {__builtin_bswap16(x)}; return v; }
static inline gw_be32 be32_make(uint32_t x) { gw_be32 v = {__builtin_bswap32(x)}; return v; }
static inline gw_be64 be64_make(uint64_t x) { gw_be64 v = {__builtin_bswap64(x)}; return v; }

/* Words written by another agent (the GPU) are read with acquire loads. */
static inline uint32_t load_acq32(const void *p)
{
    return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
}

/* Words another agent polls are published with release stores, after their payload. */
static inline void store_rel32(void *p, uint32_t v)
{
    __atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE);
}

/* Writes the error message of a public call (gw_engine.c). */
GW_INTERNAL void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the CUDA driver, loaded only when the engine must pull from GPU memory ------ */

typedef int (*cu_ctx_set_current_fn)(void *ctx);
typedef int (*cu_stream_create_fn)(void **stream, unsigned int flags);
typedef int (*cu_memcpy_dtoh_async_fn)(void *dst, uint64_t src, size_t bytes, void *stream);
typedef int (*cu_stream_sync_fn)(void *stream);

struct cuda_api {
    void *lib;
    cu_ctx_set_current_fn ctx_set_current;
    cu_stream_create_fn stream_create;
    cu_memcpy_dtoh_async_fn memcpy_dtoh_async;
    cu_stream_sync_fn stream_sync;
};

enum { CU_STREAM_NON_BLOCKING = 1 };

GW_INTERNAL int cuda_load(struct cuda_api *api, const char *path, char *err, size_t errlen);

/* ---- internal state ---------------------------------------------------------------- */

struct mr {
    _Atomic uint32_t valid;
    uint32_t key;
    uint64_t addr;
    uint64_t length;
    uint32_t access;
    uint32_t kind;
    uint32_t flags;               /* GW_MR_* */
    uint32_t pd;                  /* its protection domain */
};

struct cq {
    uint32_t cqn;
    uint32_t ncqe;
    uint8_t *cqes;
    struct gw_cq_dbrec *dbrec;
    uint32_t pi;
    uint32_t consumer;            /* last consumer index read from the doorbell record */
};

enum { MAX_SGE = GW_MAX_WQE_DS - 2 };

struct sge {
    uint64_t addr;
    uint32_t length;
    uint32_t kind;
};

enum desc_status { DESC_OK = 0, DESC_ERROR = 1 };

/* One fetched WQE, waiting for the link. */
struct desc {
    uint16_t wqe_index;
    uint8_t opcode;
    uint8_t signaled;
    uint8_t status;
    uint8_t syndrome;
    uint8_t reason;
    uint8_t pushed;
    uint8_t pulled;               /* GPU-memory sources already copied to the destination */
    uint8_t pull_failed;          /* a pull of its sources failed (settled: pull_settle) */
    uint16_t pulls_out;           /* its pulls posted to the agent and not yet answered */
    uint8_t nsge;
    uint8_t inline_data;
    uint8_t held;                 /* counted in held_msgs/held_bytes */
    uint8_t dst_cached;           /* the destination region fits the cache (cached_dst_max_bytes) */
    uint8_t dst_gpu_mapped;       /* the GPU can store into the destination (GW_MR_GPU_MAPPED) */
    uint16_t nbb;
    uint32_t bytes_total;
    uint32_t bytes_done;          /* sent or dropped so far */
    uint32_t bytes_dropped;
    uint32_t stage_slots;
    uint64_t db_ns;               /* when the doorbell that covered this WQE was seen */
    uint32_t dst_key;             /* rkey of the destination region, checked again after a
                                   * deregistration (revalidate) */
    uint8_t *dst;
    const uint8_t *inline_src;
    struct sge sge[MAX_SGE];
    uint32_t sge_key[MAX_SGE];    /* lkey of each gather entry, likewise */
};

struct qp {
    uint32_t qpn;
    struct cq *cq;
    uint32_t sq_bbs;
    uint8_t *sq;
    struct gw_qp_dbrec *dbrec;
    struct gw_nic_status *status;
    uint32_t staging_key;
    uint32_t stage_slots;
    uint32_t stage_slot_bytes;
    uint64_t stage_addr;
    uint32_t flags;               /* GW_QP_F_* */
    uint32_t pd;                  /* its protection domain: its lkeys must name regions of it */

    uint32_t state;
    uint16_t ci_fetch;            /* next BB to fetch */
    uint16_t ci_done;             /* BBs completed (ring space the GPU may reuse) */
    uint16_t last_pi;
    uint64_t db_ns;               /* when the last doorbell-record advance was seen */
    uint32_t stage_cursor;        /* staging slots consumed by fetched messages */
    uint32_t stage_freed;         /* staging slots returned to the GPU */
    uint16_t push_seq;
    uint8_t overflow_pending;     /* a ring overflow waits for room for its descriptor */
    struct desc *descs;           /* ring of sq_bbs descriptors */
    uint32_t desc_head, desc_tail;
    uint32_t pull_next;           /* next descriptor pull_ahead looks at */
    _Atomic int reset_request;
    int in_use;                   /* slot of e->qps taken (QPs can be destroyed) */
    struct worker *worker;        /* the worker that services it */
};

enum { CREDIT_RING = 1 << 14 };

struct credit_return {
    uint64_t at_ns;
    uint32_t blocks;
};

struct link {
    int limited;
    double ns_per_byte;
    uint32_t mtu;
    int credits_limited;
    int64_t credits;
    uint64_t rx_occupied;
    double drain_blocks_per_ns;
    double drain_acc;
    uint64_t last_ns;
    uint64_t credit_latency_ns;
    uint64_t free_at_ns;
    struct credit_return ring[CREDIT_RING];
    uint32_t ring_head, ring_tail;
};

/* Late pulls the engine remembers one by one; beyond these it remembers only the last. */
enum { LATE_PULLS_MAX = 256 };

/* Pulls one worker keeps posted to the agent and not yet answered (gw_pull.c): a
 * message whose pulls would exceed them is posted by a later pass. */
enum { AGENT_TICKETS_MAX = 64 };

struct worker {
    struct gw_engine *engine;
    uint32_t index;
    pthread_t thread;
    struct qp *_Atomic *qps;
    _Atomic uint32_t nqps;
    void *stream;
    struct gw_counters c;
    struct agent_ticket {         /* pulls this worker posted to the agent, not yet seen done */
        uint64_t ticket, dst;
        uint32_t len;
        uint64_t posted_ns;       /* when its request was written (its timeout, pull_agent_ns) */
        struct desc *owner;       /* the descriptor it fills (its pulls_out), or NULL */
    } agent_tickets[AGENT_TICKETS_MAX];   /* in ticket order */
    uint32_t agent_pending;
    uint32_t reap_passes;         /* pull_reap's looks without a clock read */
    uint64_t gen_seen;            /* engine generation this worker last revalidated against */
    _Atomic uint64_t gen_done;    /* generation of the last pass it finished */
};

struct gw_engine {
    struct gw_engine_config cfg;
    struct worker *workers;
    struct mr *mrs;
    struct cq *cqs;
    struct qp *qps;
    uint32_t nqps_total;
    struct link link;
    struct cuda_api cuda;
    int have_cuda;
    _Atomic int running;
    _Atomic int stalled;
    int started;
    /* Control operations (add/remove, start/stop, poll) are serialised by `lock`;
     * workers never take it. A removal bumps `gen` and waits until every worker has
     * finished a pass begun after the bump (see quiesce). */
    pthread_mutex_t lock;
    _Atomic uint64_t agent_next;  /* the pull agent's next ticket */
    _Atomic uint64_t agent_pulls;
    _Atomic uint64_t agent_failed;
    /* Pulls the agent left unanswered past the timeout (see late_add). */
    pthread_mutex_t late_lock;
    struct agent_ticket late[LATE_PULLS_MAX];
    uint32_t nlate;
    int late_overflow;            /* more than LATE_PULLS_MAX: every region counts as hit */
    uint64_t late_last;           /* the highest late ticket, while any is remembered */
    _Atomic uint64_t gen;
    struct gw_counters ctl;       /* counted by control operations (flush on QP destroy) */
    struct gw_copy_pool copy;     /* helpers of large deliveries, while the workers run */
};

/* ---- counters -------------------------------------------------------------------- */

static inline void count(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, *c + n, __ATOMIC_RELAXED);
}

static inline void count_set(uint64_t *c, uint64_t v)
{
    __atomic_store_n(c, v, __ATOMIC_RELAXED);
}

/* ---- the link: rate, credit-based flow control, a receiver that can stall --------- */

static inline uint32_t blocks_for(uint32_t bytes)
{
    return (bytes + GW_CREDIT_BLOCK_BYTES - 1) / GW_CREDIT_BLOCK_BYTES;
}

enum { SEND_OK = 0, SEND_BUSY = 1, SEND_NO_CREDITS = 2 };

/* gw_link.c */
GW_INTERNAL void link_init(struct link *l, const struct gw_link_config *cfg);
GW_INTERNAL void link_advance(struct link *l, uint64_t now, int stalled);
GW_INTERNAL int link_send(struct link *l, struct gw_counters *c, uint64_t now, uint32_t bytes,
                          int reserved);

/* ---- a failed WQE: its descriptor carries the error to its completion ------------ */

static inline void desc_fail(struct desc *d, uint8_t syndrome, uint8_t reason)
{
    d->status = DESC_ERROR;
    d->syndrome = syndrome;
    d->reason = reason;
}

/* ---- memory regions ------------------------------------------------------------------ */

static inline struct mr *mr_lookup(struct gw_engine *e, uint32_t key)
{
    uint32_t index = key >> 8;
    if (index >= e->cfg.max_mrs)
        return NULL;
    struct mr *m = &e->mrs[index];
    if (!atomic_load_explicit(&m->valid, memory_order_acquire) || m->key != key)
        return NULL;
    return m;
}

/* ---- the send queue and its descriptors ---------------------------------------------- */

static inline uint8_t *sq_bb(struct qp *q, uint32_t index)
{
    return q->sq + (size_t)(index & (q->sq_bbs - 1)) * GW_SEND_WQE_BB;
}

static inline uint32_t desc_count(const struct qp *q) { return q->desc_tail - q->desc_head; }

/* Held: pushed bytes in the staging region, accepted but not yet on the link. */
static inline void update_held(struct worker *w, int64_t msgs, int64_t bytes)
{
    count_set(&w->c.held_msgs, w->c.held_msgs + msgs);
    count_set(&w->c.held_bytes, w->c.held_bytes + bytes);
    if (w->c.held_bytes > w->c.held_bytes_max)
        count_set(&w->c.held_bytes_max, w->c.held_bytes);
}

/* ---- nic_pull (gw_pull.c) ------------------------------------------------------------ */

/* Takes the agent's answers to the worker's pulls without waiting; nonzero while any
 * was pending (the worker is not idle). */
GW_INTERNAL int pull_answers(struct gw_engine *e, struct worker *w);
/* Waits for every pull the worker has posted to the agent (each until its timeout). */
GW_INTERNAL void pull_drain(struct gw_engine *e, struct worker *w);
GW_INTERNAL int pull_whole(struct gw_engine *e, struct worker *w, struct desc *d);
GW_INTERNAL void pull_ahead(struct gw_engine *e, struct worker *w, struct qp *q);

/* ---- doorbells and fetching WQEs (gw_wqe.c) ------------------------------------------ */

GW_INTERNAL uint32_t fetch_new(struct gw_engine *e, struct worker *w, struct qp *q,
                               uint32_t budget);

/* ---- completions (gw_cq.c) ----------------------------------------------------------- */

GW_INTERNAL void release_held(struct worker *w, const struct desc *d);
GW_INTERNAL int retire(struct worker *w, struct qp *q, struct desc *d);

/* ---- the workers (gw_service.c) ------------------------------------------------------ */

GW_INTERNAL int worker_pass(struct worker *w);
GW_INTERNAL void *worker_main(void *arg);

/* ---- invalidation (gw_invalidate.c) -------------------------------------------------- */

GW_INTERNAL void revalidate(struct gw_engine *e, struct worker *w);
GW_INTERNAL int quiesce(struct gw_engine *e, uint64_t gen);
GW_INTERNAL uint64_t bump_gen(struct gw_engine *e);
GW_INTERNAL void qp_reset_state(struct qp *q);
GW_INTERNAL uint32_t flush_detached(struct gw_engine *e, struct qp *q);

#endif
