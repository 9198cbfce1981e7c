/*
 * gw_engine.c: the software NIC engine of gpuwrite's emulated mode.
 *
 * Each worker thread owns a set of completion queues and the queue pairs that
 * complete into them, so a CQ is only ever written by one thread. A pass of a worker:
 *   1. advance the link model to now (receiver drain, credit returns);
 *   2. for each QP: read its doorbell record, fetch and validate the newly posted WQEs
 *      into descriptors (errors become descriptors too, so completions stay in order);
 *   3. for each QP: move its head descriptors onto the link as credits and rate allow,
 *      deliver their bytes into the destination region, and write completions.
 * Pushed payloads stay in the staging region (the GPU's slots) until their message is
 * delivered or dropped; only then are the slots returned to the GPU, in order.
 */
#define _GNU_SOURCE
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

uint32_t gw_load_acquire_u32(const void *addr) { return load_acq32(addr); }
void gw_store_release_u32(void *addr, uint32_t value) { store_rel32(addr, value); }

uint64_t gw_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#include <stdarg.h>
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

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

static int cuda_load(struct cuda_api *api, const char *path, char *err, size_t errlen)
{
    api->lib = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) {
        set_err(err, errlen, "cannot load the CUDA driver (%s): %s", path ? path : "libcuda.so.1",
                dlerror());
        return -1;
    }
    api->ctx_set_current = (cu_ctx_set_current_fn)dlsym(api->lib, "cuCtxSetCurrent");
    api->stream_create = (cu_stream_create_fn)dlsym(api->lib, "cuStreamCreate");
    api->memcpy_dtoh_async = (cu_memcpy_dtoh_async_fn)dlsym(api->lib, "cuMemcpyDtoHAsync_v2");
    api->stream_sync = (cu_stream_sync_fn)dlsym(api->lib, "cuStreamSynchronize");
    if (!api->ctx_set_current || !api->stream_create || !api->memcpy_dtoh_async ||
        !api->stream_sync) {
        set_err(err, errlen, "the CUDA driver lacks a function the engine needs");
        return -1;
    }
    return 0;
}

/* ---- internal state ---------------------------------------------------------------- */

struct mr {
    _Atomic uint32_t valid;
    uint32_t key;
    uint64_t addr;
    uint64_t length;
    uint32_t access;
    uint32_t kind;
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
    uint8_t nsge;
    uint8_t inline_data;
    uint8_t held;                 /* counted in held_msgs/held_bytes */
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

    uint32_t state;
    uint16_t ci_fetch;            /* next BB to fetch */
    uint16_t ci_done;             /* BBs completed (ring space the GPU may reuse) */
    uint16_t last_pi;
    uint64_t db_ns;               /* when the last doorbell-record advance was seen */
    uint32_t stage_cursor;        /* staging slots consumed by fetched messages */
    uint32_t stage_freed;         /* staging slots returned to the GPU */
    uint16_t push_seq;
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
    } agent_tickets[64];
    uint32_t agent_pending;
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

static void link_init(struct link *l, const struct gw_link_config *cfg)
{
    memset(l, 0, sizeof(*l));
    l->limited = cfg->rate_gbps > 0;
    l->ns_per_byte = l->limited ? 8.0 / cfg->rate_gbps : 0.0;
    l->mtu = cfg->mtu_bytes ? cfg->mtu_bytes : 4096;
    l->credits_limited = l->limited && cfg->rx_credits > 0;
    l->credits = cfg->rx_credits;
    double drain = cfg->drain_gbps > 0 ? cfg->drain_gbps : cfg->rate_gbps;
    l->drain_blocks_per_ns = drain / 8.0 / GW_CREDIT_BLOCK_BYTES;
    l->credit_latency_ns = cfg->credit_latency_ns;
    l->last_ns = gw_now_ns();
}

static inline uint32_t blocks_for(uint32_t bytes)
{
    return (bytes + GW_CREDIT_BLOCK_BYTES - 1) / GW_CREDIT_BLOCK_BYTES;
}

/* The receiver drains at its rate unless stalled; drained blocks return as credits
 * after the credit latency. */
static void link_advance(struct link *l, uint64_t now, int stalled)
{
    if (!l->credits_limited)
        return;
    if (!stalled && l->rx_occupied > 0 && now > l->last_ns) {
        l->drain_acc += (double)(now - l->last_ns) * l->drain_blocks_per_ns;
        uint64_t n = (uint64_t)l->drain_acc;
        if (n > l->rx_occupied)
            n = l->rx_occupied;
        if (n > 0) {
            l->rx_occupied -= n;
            l->drain_acc -= (double)n;
            uint32_t last = (l->ring_tail - 1) & (CREDIT_RING - 1);
            if (((l->ring_tail + 1) & (CREDIT_RING - 1)) == l->ring_head)
                l->ring[last].blocks += (uint32_t)n;   /* ring full: merge into the newest */
            else {
                l->ring[l->ring_tail].at_ns = now + l->credit_latency_ns;
                l->ring[l->ring_tail].blocks = (uint32_t)n;
                l->ring_tail = (l->ring_tail + 1) & (CREDIT_RING - 1);
            }
        }
        if (l->rx_occupied == 0)
            l->drain_acc = 0;
    }
    l->last_ns = now;
    while (l->ring_head != l->ring_tail && l->ring[l->ring_head].at_ns <= now) {
        l->credits += l->ring[l->ring_head].blocks;
        l->ring_head = (l->ring_head + 1) & (CREDIT_RING - 1);
    }
}

enum { SEND_OK = 0, SEND_BUSY = 1, SEND_NO_CREDITS = 2 };

/* Puts one packet on the wire if the link is free and (unless reserved) credits exist. */
static int link_send(struct link *l, struct gw_counters *c, uint64_t now, uint32_t bytes,
                     int reserved)
{
    if (!l->limited)
        return SEND_OK;
    if (now < l->free_at_ns)
        return SEND_BUSY;
    uint32_t need = blocks_for(bytes);
    if (l->credits_limited && !reserved) {
        if (l->credits < (int64_t)need)
            return SEND_NO_CREDITS;
        l->credits -= need;
    }
    if (l->credits_limited)
        l->rx_occupied += need;
    uint64_t ser = (uint64_t)((double)bytes * l->ns_per_byte + 0.5);
    l->free_at_ns = (l->free_at_ns > now ? l->free_at_ns : now) + ser;
    count(&c->link_packets, 1);
    count(&c->link_busy_ns, ser);
    return SEND_OK;
}

/* ---- memory regions ---------------------------------------------------------------- */

static struct mr *mr_lookup(struct gw_engine *e, uint32_t key)
{
    uint32_t index = key >> 8;
    if (index >= e->cfg.max_mrs)
        return NULL;
    struct mr *m = &e->mrs[index];
    if (!atomic_load_explicit(&m->valid, memory_order_acquire) || m->key != key)
        return NULL;
    return m;
}

static int in_bounds(const struct mr *m, uint64_t addr, uint64_t length)
{
    return addr >= m->addr && length <= m->length && addr - m->addr <= m->length - length;
}

/* ---- completions ------------------------------------------------------------------- */

/* Writes one CQE; returns 0 when the CQ has no free entry (the caller retries later). */
static int write_cqe(struct worker *w, struct qp *q, const struct desc *d)
{
    struct cq *cq = q->cq;
    /* Re-read the GPU's consumer index only when the CQ looks full: it is a cache miss. */
    if (((cq->pi - cq->consumer) & 0xffffff) >= cq->ncqe) {
        cq->consumer = be32_get((gw_be32){load_acq32(&cq->dbrec->set_ci)}) & 0xffffff;
        if (((cq->pi - cq->consumer) & 0xffffff) >= cq->ncqe) {
            count(&w->c.cq_full_stalls, 1);
            return 0;
        }
    }
    uint8_t *slot = cq->cqes + (size_t)(cq->pi & (cq->ncqe - 1)) * GW_CQE_SIZE;
    uint8_t owner = (uint8_t)((cq->pi / cq->ncqe) & 1);
    uint8_t opcode;
    uint64_t now = gw_now_ns();
    memset(slot, 0, 60);
    if (d->status == DESC_OK) {
        struct gw_cqe64 *cqe = (struct gw_cqe64 *)slot;
        cqe->byte_cnt = be32_make(d->bytes_total);
        cqe->timestamp = be64_make(now);
        cqe->sop_drop_qpn = be32_make(q->qpn & 0xffffff);
        opcode = GW_CQE_REQ;
    } else {
        struct gw_err_cqe *cqe = (struct gw_err_cqe *)slot;
        cqe->syndrome = d->syndrome;
        cqe->vendor_err_synd = d->reason;
        cqe->s_wqe_opcode_qpn = be32_make(((uint32_t)d->opcode << 24) | (q->qpn & 0xffffff));
        opcode = GW_CQE_REQ_ERR;
        count(&w->c.error_cqes, 1);
    }
    /* The last word (wqe_counter, signature, op_own) is published after the body. */
    uint8_t tail[4];
    gw_be16 counter = be16_make(d->wqe_index);
    memcpy(tail, &counter, 2);
    tail[2] = 0;
    tail[3] = (uint8_t)(opcode << 4 | owner);
    uint32_t word;
    memcpy(&word, tail, 4);
    store_rel32(slot + 60, word);
    cq->pi++;
    count(&w->c.cqes, 1);
    if (d->db_ns) {
        count(&w->c.turnaround_ns, now - d->db_ns);
        count(&w->c.turnarounds, 1);
    }
    return 1;
}

/* ---- fetching and validating WQEs --------------------------------------------------- */

static inline uint8_t *sq_bb(struct qp *q, uint32_t index)
{
    return q->sq + (size_t)(index & (q->sq_bbs - 1)) * GW_SEND_WQE_BB;
}

/* Reads the 16-byte segment number `seg` of the WQE starting at BB `first`. */
static void read_seg(struct qp *q, uint16_t first, uint32_t seg, void *out)
{
    uint32_t bb = first + seg / 4;
    memcpy(out, sq_bb(q, bb) + (seg % 4) * GW_SEND_WQE_DS, GW_SEND_WQE_DS);
}

static void desc_fail(struct desc *d, uint8_t syndrome, uint8_t reason)
{
    d->status = DESC_ERROR;
    d->syndrome = syndrome;
    d->reason = reason;
}

/* Validates the staging header in front of a pushed payload and claims its slots. */
static int claim_staging(struct qp *q, struct desc *d, const struct sge *s)
{
    if (q->staging_key == 0 || s->addr < q->stage_addr + GW_STAGE_HDR_BYTES)
        return -1;
    uint64_t ring_bytes = (uint64_t)q->stage_slots * q->stage_slot_bytes;
    uint64_t off = s->addr - GW_STAGE_HDR_BYTES - q->stage_addr;   /* the header's offset */
    if (off % GW_STAGE_HDR_BYTES || off + GW_STAGE_HDR_BYTES + s->length > ring_bytes)
        return -1;
    struct gw_stage_hdr hdr;
    memcpy(&hdr, (const void *)(uintptr_t)(s->addr - GW_STAGE_HDR_BYTES), sizeof(hdr));
    if (hdr.flags & ~GW_STAGE_F_ALIGNED)
        return -1;
    uint64_t lead = hdr.flags & GW_STAGE_F_ALIGNED ? GW_STAGE_ALIGN_BYTES - GW_STAGE_HDR_BYTES : 0;
    if (off < lead || (off - lead) % q->stage_slot_bytes)
        return -1;
    off -= lead;                                                    /* the first slot's */
    uint32_t need = (uint32_t)((lead + GW_STAGE_HDR_BYTES + (uint64_t)s->length +
                                q->stage_slot_bytes - 1) / q->stage_slot_bytes);
    /* The GPU's padding rule (device verbs' ring_pad): a run that does not fit between
     * the cursor and the ring's end starts at slot 0, and the slots skipped at the end
     * belong to the message (returned with it). Nothing else is accepted. */
    uint32_t pos = q->stage_cursor % q->stage_slots;
    uint32_t pad = pos + need > q->stage_slots ? q->stage_slots - pos : 0;
    if (hdr.magic_seq != (GW_STAGE_MAGIC | q->push_seq) || hdr.byte_count != s->length ||
        need > q->stage_slots || hdr.slots != pad + need || hdr.wqe_index != d->wqe_index)
        return -1;
    if (off / q->stage_slot_bytes != (pad ? 0 : pos))
        return -1;
    q->stage_cursor += hdr.slots;
    q->push_seq++;
    d->stage_slots = hdr.slots;
    d->pushed = 1;
    return 0;
}

/* mlx5 carries inline payloads in RDMA writes and sends only. */
static int opcode_allows_inline(uint8_t opcode)
{
    return opcode == GW_OPCODE_RDMA_WRITE || opcode == GW_OPCODE_RDMA_WRITE_IMM ||
           opcode == GW_OPCODE_SEND;
}

/* Turns the WQE at BB ci_fetch into a descriptor; returns its size in BBs, or 0 if the
 * doorbell has not yet covered all of it. */
static uint32_t fetch_wqe(struct gw_engine *e, struct worker *w, struct qp *q, struct desc *d,
                          uint32_t posted)
{
    struct gw_wqe_ctrl_seg ctrl;
    read_seg(q, q->ci_fetch, 0, &ctrl);
    uint32_t opmod_idx_opcode = be32_get(ctrl.opmod_idx_opcode);
    uint32_t qpn_ds = be32_get(ctrl.qpn_ds);
    uint32_t ds = qpn_ds & 0x3f;
    memset(d, 0, offsetof(struct desc, sge));
    d->opcode = (uint8_t)(opmod_idx_opcode & 0xff);
    d->wqe_index = q->ci_fetch;
    d->signaled = (ctrl.fm_ce_se & GW_WQE_CTRL_CQ_UPDATE) != 0;
    d->nbb = 1;

    if (ds == 0 || ds > GW_MAX_WQE_DS) {
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_BAD_DS);
        return 1;
    }
    uint32_t nbb = (ds * GW_SEND_WQE_DS + GW_SEND_WQE_BB - 1) / GW_SEND_WQE_BB;
    if (nbb > posted) {
        /* The doorbell covers fewer BBs than the WQE claims: malformed. */
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_BAD_DS);
        return 1;
    }
    d->nbb = (uint16_t)nbb;
    if (((opmod_idx_opcode >> 8) & 0xffff) != q->ci_fetch) {
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_BAD_WQE_INDEX);
        return nbb;
    }
    if ((qpn_ds >> 8) != q->qpn) {
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_BAD_QPN);
        return nbb;
    }
    switch (d->opcode) {
    case GW_OPCODE_NOP:
        return nbb;
    case GW_OPCODE_RDMA_WRITE:
    case GW_OPCODE_RDMA_WRITE_IMM:
        break;
    case GW_OPCODE_SEND:
        /* The emulated NIC has no receive queues: say so rather than pretend. */
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_UNSUPPORTED);
        return nbb;
    default:
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_BAD_OPCODE);
        return nbb;
    }
    if (ds < 3) {
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_BAD_DS);
        return nbb;
    }
    struct gw_wqe_raddr_seg raddr;
    read_seg(q, q->ci_fetch, 1, &raddr);

    /* Gather list: data segments, or one inline segment. */
    uint64_t total = 0;
    union {
        struct gw_wqe_inline_seg inl;
        uint8_t seg[GW_SEND_WQE_DS];
    } first;
    read_seg(q, q->ci_fetch, 2, first.seg);
    uint32_t first_bc = be32_get(first.inl.byte_count);
    if ((first_bc & GW_INLINE_SEG_FLAG) && opcode_allows_inline(d->opcode)) {
        /* An inline segment as mlx5 posters write it: at least one byte (libmlx5 writes
         * no inline segment for an empty payload) and exactly the segments it needs. A
         * pointer segment of 2^31 bytes reads as an empty inline one: a length error. */
        uint32_t len = first_bc & ~(uint32_t)GW_INLINE_SEG_FLAG;
        uint32_t need_ds = (2 * GW_SEND_WQE_DS + 4 + len + GW_SEND_WQE_DS - 1) / GW_SEND_WQE_DS;
        if (len == 0 || len > GW_MAX_INLINE_BYTES || ds != need_ds) {
            desc_fail(d, GW_SYND_LOCAL_LENGTH_ERR, GW_REASON_LENGTH);
            return nbb;
        }
        /* Inline bytes stay in the SQ: the GPU reuses ring space only after completion.
         * They may wrap past the ring's end, so they are read per BB at send time. */
        d->inline_data = 1;
        d->inline_src = NULL;
        total = len;
        count(&w->c.bytes_inline, len);
    } else {
        uint32_t nsge = ds - 2;
        for (uint32_t i = 0; i < nsge; i++) {
            struct gw_wqe_data_seg seg;
            read_seg(q, q->ci_fetch, 2 + i, &seg);
            uint32_t len = be32_get(seg.byte_count);
            uint32_t lkey = be32_get(seg.lkey);
            uint64_t addr = be64_get(seg.addr);
            if (len & GW_INLINE_SEG_FLAG) {
                desc_fail(d, GW_SYND_LOCAL_LENGTH_ERR, GW_REASON_LENGTH);
                return nbb;
            }
            struct mr *m = mr_lookup(e, lkey);
            if (!m) {
                desc_fail(d, GW_SYND_LOCAL_PROT_ERR, GW_REASON_BAD_LKEY);
                return nbb;
            }
            if (!in_bounds(m, addr, len)) {
                desc_fail(d, GW_SYND_LOCAL_PROT_ERR, GW_REASON_LOCAL_BOUNDS);
                return nbb;
            }
            d->sge[i].addr = addr;
            d->sge[i].length = len;
            d->sge[i].kind = m->kind;
            d->sge_key[i] = lkey;
            total += len;
        }
        d->nsge = (uint8_t)nsge;
    }
    if (total > 0x7fffffffu) {
        desc_fail(d, GW_SYND_LOCAL_LENGTH_ERR, GW_REASON_LENGTH);
        return nbb;
    }
    d->bytes_total = (uint32_t)total;

    uint32_t rkey = be32_get(raddr.rkey);
    uint64_t remote = be64_get(raddr.raddr);
    struct mr *dst = mr_lookup(e, rkey);
    if (!dst || dst->kind == GW_MEM_STAGING) {
        desc_fail(d, GW_SYND_REMOTE_ACCESS_ERR, GW_REASON_BAD_RKEY);
        return nbb;
    }
    if (!(dst->access & GW_ACCESS_REMOTE_WRITE)) {
        desc_fail(d, GW_SYND_REMOTE_ACCESS_ERR, GW_REASON_REMOTE_ACCESS);
        return nbb;
    }
    if (!in_bounds(dst, remote, total)) {
        desc_fail(d, GW_SYND_REMOTE_ACCESS_ERR, GW_REASON_REMOTE_BOUNDS);
        return nbb;
    }
    if (dst->kind != GW_MEM_HOST) {
        desc_fail(d, GW_SYND_REMOTE_OP_ERR, GW_REASON_UNSUPPORTED);
        return nbb;
    }
    d->dst = (uint8_t *)(uintptr_t)remote;
    d->dst_key = rkey;

    /* A pushed payload must sit where the GPU's slot protocol says it does. */
    uint32_t staged = 0;
    for (uint32_t i = 0; i < d->nsge; i++) {
        if (d->sge[i].kind != GW_MEM_STAGING)
            continue;
        if (staged++ || claim_staging(q, d, &d->sge[i]) != 0) {
            desc_fail(d, GW_SYND_LOCAL_PROT_ERR, GW_REASON_BAD_STAGING);
            return nbb;
        }
    }
    if (d->pushed)
        count(&w->c.bytes_pushed, total);
    return nbb;
}

/* ---- delivering bytes ---------------------------------------------------------------- */

/* The copy streams of nic_pull's stand-in: one per worker index (at most COPY_STREAMS),
 * made once per process and CUDA context and kept for its life. Each engine (one per
 * run) used to make its own and never destroy them, so a sweep of runs piled up streams. */
enum { COPY_STREAMS = 16 };

static struct {
    pthread_mutex_t lock;
    void *ctx;
    void *streams[COPY_STREAMS];
} copy_pool = {PTHREAD_MUTEX_INITIALIZER, NULL, {NULL}};

static void *copy_stream(struct gw_engine *e, struct worker *w)
{
    if (w->stream)
        return w->stream;
    pthread_mutex_lock(&copy_pool.lock);
    if (copy_pool.ctx != e->cfg.cuda_context) {
        /* A new context (the old one's streams went with it). */
        memset(copy_pool.streams, 0, sizeof(copy_pool.streams));
        copy_pool.ctx = e->cfg.cuda_context;
    }
    void **slot = &copy_pool.streams[w->index % COPY_STREAMS];
    if (!*slot && e->cuda.stream_create(slot, CU_STREAM_NON_BLOCKING) != 0)
        *slot = NULL;
    w->stream = *slot;
    pthread_mutex_unlock(&copy_pool.lock);
    return w->stream;
}

/* ---- nic_pull through the GPU-resident agent (gw_pull_req in gw_engine.h) ----------
 * A NIC reads GPU memory with read requests that cross PCIe one way and completions
 * that bring the data back; the agent does the same: the engine writes a request into
 * mapped host memory, a persistent GPU block polls it, copies the bytes into the
 * engine's buffer with 16-byte vectors and publishes completion with a release store.
 * No CUDA driver call per pull (about 9 us of host-side cost for the copy engine's). */

static int agent_enabled(const struct gw_engine *e)
{
    return e->cfg.pull_ring != NULL;
}

static int agent_usable(const struct gw_engine *e, void *dst, uint64_t src)
{
    /* The agent copies 4-byte words; other alignments, and addresses the tag would
     * overwrite, go to the copy engine. */
    uint64_t d = (uint64_t)(uintptr_t)dst;
    return agent_enabled(e) && ((d | src) & 3) == 0 && ((d | src) >> GW_PULL_ADDR_BITS) == 0;
}

static volatile uint32_t *agent_done_word(struct gw_engine *e, uint64_t t)
{
    return (volatile uint32_t *)e->cfg.pull_done + (t & (e->cfg.pull_slots - 1));
}

/* Whether the agent has answered ticket t: its slot's done word has reached t + 1 (a
 * slot is reused only once its ticket was answered, so the word never passes a ticket
 * still waited for by more than a lap). */
static int agent_answered(struct gw_engine *e, uint64_t t)
{
    uint32_t seen = __atomic_load_n(agent_done_word(e, t), __ATOMIC_ACQUIRE);
    return (int32_t)(seen - (uint32_t)(t + 1)) >= 0;
}

/* Waits for ticket t's answer; 0, or -1 after the timeout: the agent is gone (its kernel
 * ended, or never started) or stuck. */
static int agent_wait(struct gw_engine *e, uint64_t t)
{
    uint64_t start = gw_now_ns();
    for (uint32_t spins = 0;; spins++) {
        if (agent_answered(e, t))
            return 0;
        if ((spins & 255) == 255 && gw_now_ns() - start > e->cfg.pull_timeout_ns)
            return -1;
    }
}

/* ---- late pulls: a timed-out pull the agent may still answer ----------------------
 * The engine fails a pull the agent leaves unanswered for pull_timeout_ns, but the agent
 * may only be slow: its answer would copy into the destination after the WQE's error
 * completion, when the application may have deregistered and freed it. A NIC never
 * writes after the error completion. So the engine remembers each late pull's
 * destination until the agent answers it (the agent answers tickets in order, each in
 * its slot's done word), and a region a late pull points into is not let go of
 * (gw_engine_remove_mr returns -3; the caller keeps its memory). */

static void late_clear(struct gw_engine *e)
{
    e->nlate = 0;
    e->late_overflow = 0;
}

static int late_remembered(const struct gw_engine *e)
{
    return e->nlate > 0 || e->late_overflow;
}

static void late_add(struct gw_engine *e, const struct agent_ticket *a)
{
    pthread_mutex_lock(&e->late_lock);
    if (!late_remembered(e) || a->ticket > e->late_last)
        e->late_last = a->ticket;
    if (e->nlate < LATE_PULLS_MAX)
        e->late[e->nlate++] = *a;
    else
        e->late_overflow = 1;
    pthread_mutex_unlock(&e->late_lock);
}

/* Late pulls not yet answered whose destination meets [addr, addr + len) (len 0: all);
 * forgets those answered. */
uint32_t gw_engine_late_pulls(struct gw_engine *e, uint64_t addr, uint64_t len)
{
    pthread_mutex_lock(&e->late_lock);
    uint32_t n = 0;
    if (late_remembered(e) && agent_answered(e, e->late_last))
        late_clear(e);   /* in order: the last one answered, every earlier one was */
    for (uint32_t k = 0; k < e->nlate;) {
        struct agent_ticket *l = &e->late[k];
        if (agent_answered(e, l->ticket)) {
            *l = e->late[--e->nlate];
            continue;
        }
        if (len == 0 || (l->dst < addr + len && addr < l->dst + l->len))
            n++;
        k++;
    }
    if (e->late_overflow)
        n++;     /* those not remembered may point anywhere until the last is answered */
    pthread_mutex_unlock(&e->late_lock);
    return n;
}

/* Forgets every late pull: the agent is being detached, which its owner does only once
 * the agent answered the stop request (so every earlier one) or its kernel has ended. */
static void late_forget(struct gw_engine *e)
{
    pthread_mutex_lock(&e->late_lock);
    late_clear(e);
    pthread_mutex_unlock(&e->late_lock);
}

/* Claims a ticket and writes its request. The slot's previous ticket (pull_slots before)
 * must have been answered; returns UINT64_MAX if it was not within the timeout. */
static uint64_t agent_post(struct gw_engine *e, uint64_t dst, uint64_t src, uint32_t len)
{
    uint64_t t = atomic_fetch_add(&e->agent_next, 1);
    uint32_t slots = e->cfg.pull_slots;
    if (t >= slots && agent_wait(e, t - slots) != 0)
        return UINT64_MAX;
    struct gw_pull_req *r = (struct gw_pull_req *)e->cfg.pull_ring + (t & (slots - 1));
    uint64_t tag = ((t / slots + 1) & 0xFFFF) << GW_PULL_ADDR_BITS;
    /* Each word is whole and tagged (gw_engine.h), so the agent may read them in any
     * order; the ticket word is released last, and the agent's acquire of it orders its
     * reads of GPU memory after this engine's acquire of the doorbell. */
    __atomic_store_n(&r->tag_src, tag | src, __ATOMIC_RELAXED);
    __atomic_store_n(&r->tag_dst, tag | dst, __ATOMIC_RELAXED);
    __atomic_store_n(&r->ticket_nbytes, (t + 1) << 32 | len, __ATOMIC_RELEASE);
    return t;
}

static int quiesce(struct gw_engine *e, uint64_t gen);
static uint64_t bump_gen(struct gw_engine *e);

/* Attaches an agent (ring != NULL) or detaches it (ring == NULL); -1 for a bad ring, -2
 * when running workers did not let go of the old ring within quiesce's limit. */
int gw_engine_set_pull_agent(struct gw_engine *e, void *ring, void *done, uint32_t slots,
                             uint64_t timeout_ns)
{
    if (ring && (slots == 0 || slots > 65536 || (slots & (slots - 1)) || !done))
        return -1;
    pthread_mutex_lock(&e->lock);
    if (e->cfg.pull_ring) {
        /* Workers may be inside a pass that saw the old ring: its posts and waits still
         * read pull_done and pull_slots, so those change only once every worker has
         * finished a pass begun after the ring was withdrawn. */
        __atomic_store_n(&e->cfg.pull_ring, NULL, __ATOMIC_RELEASE);
        if (quiesce(e, bump_gen(e)) != 0) {
            pthread_mutex_unlock(&e->lock);
            return -2;
        }
    }
    late_forget(e);
    e->cfg.pull_done = done;
    e->cfg.pull_slots = slots;
    e->cfg.pull_timeout_ns = timeout_ns ? timeout_ns : 1000000000ull;
    atomic_store(&e->agent_next, 0);
    __atomic_store_n(&e->cfg.pull_ring, ring, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int gw_engine_stop_pull_agent(struct gw_engine *e)
{
    if (!agent_enabled(e))
        return 0;
    uint64_t t = agent_post(e, 0, 0, GW_PULL_STOP_BYTES);
    return t == UINT64_MAX || agent_wait(e, t) != 0 ? -1 : 0;
}

uint64_t gw_engine_agent_pulls(struct gw_engine *e, uint64_t *failed)
{
    if (failed)
        *failed = atomic_load(&e->agent_failed);
    return atomic_load(&e->agent_pulls);
}

/* Queues a copy of GPU memory to the destination, to the agent or on the worker's copy
 * stream; the bytes are there after pull_wait. */
static int pull_start(struct gw_engine *e, struct worker *w, void *dst, uint64_t src,
                      uint32_t len)
{
    if (agent_usable(e, dst, src) && w->agent_pending < 64) {
        uint64_t t = agent_post(e, (uint64_t)(uintptr_t)dst, src, len);
        if (t == UINT64_MAX) {
            atomic_fetch_add(&e->agent_failed, 1);
            return -1;
        }
        w->agent_tickets[w->agent_pending++] = (struct agent_ticket){t, (uint64_t)(uintptr_t)dst, len};
        return 0;
    }
    if (!e->have_cuda) {
        /* CUDA simulator: "GPU memory" is host memory. */
        memcpy(dst, (const void *)(uintptr_t)src, len);
        return 0;
    }
    if (e->cuda.ctx_set_current(e->cfg.cuda_context) != 0 || !copy_stream(e, w))
        return -1;
    return e->cuda.memcpy_dtoh_async(dst, src, len, w->stream) != 0 ? -1 : 0;
}

static int pull_wait(struct gw_engine *e, struct worker *w)
{
    int rc = 0;
    for (uint32_t k = 0; k < w->agent_pending; k++) {
        if (agent_wait(e, w->agent_tickets[k].ticket) != 0) {
            late_add(e, &w->agent_tickets[k]);
            atomic_fetch_add(&e->agent_failed, 1);
            rc = -1;
        } else {
            atomic_fetch_add(&e->agent_pulls, 1);
        }
    }
    w->agent_pending = 0;
    if (!e->have_cuda || !w->stream)
        return rc;
    return e->cuda.stream_sync(w->stream) != 0 ? -1 : rc;
}

static int pull_device(struct gw_engine *e, struct worker *w, void *dst, uint64_t src,
                       uint32_t len)
{
    if (pull_start(e, w, dst, src, len) != 0)
        return -1;
    return pull_wait(e, w);
}

/* Copies message bytes [off, off + len) into the destination. */
static int deliver_range(struct gw_engine *e, struct worker *w, struct qp *q, struct desc *d,
                         uint32_t off, uint32_t len)
{
    if (d->inline_data) {
        /* Inline payload starts 4 bytes into segment 2; copy per BB, minding the wrap. */
        uint32_t pos = 2 * GW_SEND_WQE_DS + 4 + off;
        uint32_t done = 0;
        while (done < len) {
            uint32_t bb = (pos + done) / GW_SEND_WQE_BB;
            uint32_t in_bb = (pos + done) % GW_SEND_WQE_BB;
            uint32_t n = GW_SEND_WQE_BB - in_bb;
            if (n > len - done)
                n = len - done;
            memcpy(d->dst + off + done, sq_bb(q, d->wqe_index + bb) + in_bb, n);
            done += n;
        }
        return 0;
    }
    uint32_t base = 0;
    for (uint32_t i = 0; i < d->nsge && len > 0; i++) {
        const struct sge *s = &d->sge[i];
        if (off >= base + s->length) {
            base += s->length;
            continue;
        }
        uint32_t start = off - base;
        uint32_t n = s->length - start;
        if (n > len)
            n = len;
        if (s->kind == GW_MEM_DEVICE) {
            if (!d->pulled && pull_device(e, w, d->dst + off, s->addr + start, n) != 0)
                return -1;
            count(&w->c.bytes_pulled, n);
        } else {
            gw_copy(&e->copy, d->dst + off, (const void *)(uintptr_t)(s->addr + start), n);
            if (s->kind == GW_MEM_HOST)
                count(&w->c.bytes_host_read, n);
        }
        off += n;
        len -= n;
        base += s->length;
    }
    return 0;
}

/* GPU-memory sources are pulled whole when the message's first packet is scheduled: one
 * copy-engine transfer per message rather than per packet. */
static int pull_whole(struct gw_engine *e, struct worker *w, struct desc *d)
{
    uint32_t off = 0;
    for (uint32_t i = 0; i < d->nsge; i++) {
        if (d->sge[i].kind == GW_MEM_DEVICE &&
            pull_device(e, w, d->dst + off, d->sge[i].addr, d->sge[i].length) != 0)
            return -1;
        off += d->sge[i].length;
    }
    d->pulled = 1;
    return 0;
}

/* With an unlimited link every fetched message goes out at once, so the pulls of up to
 * PULL_AHEAD of a QP's fetched messages are queued together and waited for once: a NIC
 * keeps many DMA reads in flight, and one stream synchronisation per message (several
 * microseconds, serialised in the driver across workers) made the stand-in's small-
 * message rate a measure of the CUDA driver rather than of the copy engine. */
enum { PULL_AHEAD = 64 };

static void pull_ahead(struct gw_engine *e, struct worker *w, struct qp *q)
{
    struct desc *queued[PULL_AHEAD];
    uint32_t n = 0;
    int failed = 0;
    /* Descriptors before pull_next have been looked at: pulled, or nothing to pull. */
    if ((int32_t)(q->pull_next - q->desc_head) < 0)
        q->pull_next = q->desc_head;
    for (; q->pull_next != q->desc_tail && n < PULL_AHEAD && !failed; q->pull_next++) {
        struct desc *d = &q->descs[q->pull_next % q->sq_bbs];
        if (d->status != DESC_OK || d->pulled || d->bytes_dropped)
            continue;
        uint32_t off = 0;
        int device = 0;
        for (uint32_t i = 0; i < d->nsge && !failed; i++) {
            if (d->sge[i].kind == GW_MEM_DEVICE) {
                device = 1;
                failed = pull_start(e, w, d->dst + off, d->sge[i].addr, d->sge[i].length) != 0;
            }
            off += d->sge[i].length;
        }
        if (failed)
            desc_fail(d, GW_SYND_LOCAL_PROT_ERR, GW_REASON_PULL_FAILED);
        else if (device)
            queued[n++] = d;
    }
    if (n == 0)
        return;
    int ok = pull_wait(e, w) == 0;
    for (uint32_t k = 0; k < n; k++) {
        if (ok)
            queued[k]->pulled = 1;
        else
            desc_fail(queued[k], GW_SYND_LOCAL_PROT_ERR, GW_REASON_PULL_FAILED);
    }
}

/* ---- per-QP service ------------------------------------------------------------------ */

static uint32_t desc_count(const struct qp *q) { return q->desc_tail - q->desc_head; }

/* Held: pushed bytes in the staging region, accepted but not yet on the link. */
static void update_held(struct worker *w, int64_t msgs, int64_t bytes)
{
    count_set(&w->c.held_msgs, w->c.held_msgs + msgs);
    count_set(&w->c.held_bytes, w->c.held_bytes + bytes);
    if (w->c.held_bytes > w->c.held_bytes_max)
        count_set(&w->c.held_bytes_max, w->c.held_bytes);
}

/* Drop policy: a pushed message's packets take credits as they arrive; from the first
 * packet that finds none, the rest of the message is lost. */
static void drop_on_arrival(struct gw_engine *e, struct worker *w, struct desc *d)
{
    struct link *l = &e->link;
    if (!l->credits_limited)
        return;
    uint32_t off = 0;
    while (off < d->bytes_total) {
        uint32_t n = d->bytes_total - off < l->mtu ? d->bytes_total - off : l->mtu;
        uint32_t need = blocks_for(n);
        if (l->credits < (int64_t)need)
            break;
        l->credits -= need;
        off += n;
    }
    d->bytes_dropped = d->bytes_total - off;
    if (d->bytes_dropped) {
        count(&w->c.dropped_bytes, d->bytes_dropped);
        count(&w->c.dropped_msgs, 1);
    }
}

static uint32_t fetch_new(struct gw_engine *e, struct worker *w, struct qp *q, uint32_t budget)
{
    uint16_t pi = (uint16_t)be32_get((gw_be32){load_acq32(&q->dbrec->send_counter)});
    if (pi != q->last_pi) {
        count(&w->c.doorbells, 1);
        q->last_pi = pi;
        q->db_ns = gw_now_ns();
    }
    uint32_t outstanding = (uint16_t)(pi - q->ci_done);
    if (outstanding > q->sq_bbs) {
        /* The GPU wrote past WQEs the NIC had not completed: their bytes are gone. */
        count(&w->c.ring_overflows, 1);
        if (desc_count(q) < q->sq_bbs) {
            struct desc *d = &q->descs[q->desc_tail % q->sq_bbs];
            memset(d, 0, offsetof(struct desc, sge));
            d->wqe_index = q->ci_fetch;
            d->nbb = (uint16_t)(pi - q->ci_fetch);
            desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_RING_OVERFLOW);
            q->desc_tail++;
        }
        q->ci_fetch = pi;
        q->state = GW_QPS_ERR;
        store_rel32(&q->status->qp_state, GW_QPS_ERR);
        return 1;
    }
    if (q->ci_fetch != pi) {
        /* Start the cache misses this doorbell will cause in parallel rather than one
         * after another: the first WQE, the next staging slot, the next CQE. */
        __builtin_prefetch(sq_bb(q, q->ci_fetch), 0, 3);
        if (q->staging_key) {
            const uint8_t *slot = (const uint8_t *)(uintptr_t)q->stage_addr +
                                  (size_t)(q->stage_cursor % q->stage_slots) * q->stage_slot_bytes;
            __builtin_prefetch(slot, 0, 3);
            __builtin_prefetch(slot + 64, 0, 3);
        }
        __builtin_prefetch(q->cq->cqes + (size_t)(q->cq->pi & (q->cq->ncqe - 1)) * GW_CQE_SIZE,
                           1, 3);
    }
    uint32_t fetched = 0;
    while (q->ci_fetch != pi && fetched < budget && desc_count(q) < q->sq_bbs) {
        struct desc *d = &q->descs[q->desc_tail % q->sq_bbs];
        uint32_t posted = (uint16_t)(pi - q->ci_fetch);
        uint32_t nbb = fetch_wqe(e, w, q, d, posted);
        d->db_ns = q->db_ns;
        if (d->status == DESC_OK && q->state == GW_QPS_ERR)
            desc_fail(d, GW_SYND_WR_FLUSH_ERR, GW_REASON_FLUSHED);
        else if (d->status == DESC_OK && d->pushed && e->cfg.policy == GW_POLICY_DROP)
            drop_on_arrival(e, w, d);
        if (d->status == DESC_OK && d->pushed) {
            update_held(w, 1, d->bytes_total - d->bytes_dropped);
            d->held = 1;
        }
        q->ci_fetch = (uint16_t)(q->ci_fetch + nbb);
        q->desc_tail++;
        fetched++;
        count(&w->c.wqes, 1);
    }
    if (fetched)
        store_rel32(&q->status->sq_consumed, q->ci_fetch);
    return fetched;
}

/* Completes the head descriptor: CQE if signaled or failed, staging slots returned. */
static int retire(struct gw_engine *e, struct worker *w, struct qp *q, struct desc *d)
{
    (void)e;
    if (d->status == DESC_OK && d->bytes_dropped)
        desc_fail(d, GW_SYND_TRANSPORT_RETRY_EXC_ERR, GW_REASON_DROPPED);
    if ((d->signaled || d->status != DESC_OK) && !write_cqe(w, q, d))
        return 0;
    if (d->status == DESC_OK) {
        count(&w->c.msgs_delivered, 1);
    } else if (d->reason == GW_REASON_FLUSHED) {
        count(&w->c.flushed_wqes, 1);
    }
    if (d->status != DESC_OK && d->reason != GW_REASON_FLUSHED &&
        d->reason != GW_REASON_DROPPED && q->state != GW_QPS_ERR) {
        q->state = GW_QPS_ERR;
        store_rel32(&q->status->qp_state, GW_QPS_ERR);
    }
    if (d->pushed) {
        if (d->held) {
            /* Accepted bytes not yet sent are discarded with the failed message. */
            uint32_t left = d->bytes_total - d->bytes_dropped - d->bytes_done;
            update_held(w, -1, -(int64_t)left);
            if (left) {
                count(&w->c.dropped_bytes, left);
                if (!d->bytes_dropped)
                    count(&w->c.dropped_msgs, 1);
            }
        }
        q->stage_freed += d->stage_slots;
        if (!(q->flags & GW_QP_F_STAGE_CREDITS_IN_CQE))
            store_rel32(&q->status->stage_freed, q->stage_freed);
    }
    q->ci_done = (uint16_t)(q->ci_done + d->nbb);
    q->desc_head++;
    return 1;
}

/* Moves the QP's head message forward by at most one packet (round-robin fairness),
 * or all of it when the link is unlimited. Returns nonzero if anything happened. */
static int progress(struct gw_engine *e, struct worker *w, struct qp *q, uint64_t now)
{
    int did = 0;
    if (!e->link.limited && q->state != GW_QPS_ERR)
        pull_ahead(e, w, q);
    for (int guard = 0; guard < 64 && desc_count(q) > 0; guard++) {
        struct desc *d = &q->descs[q->desc_head % q->sq_bbs];
        if (d->status == DESC_OK && q->state == GW_QPS_ERR)
            desc_fail(d, GW_SYND_WR_FLUSH_ERR, GW_REASON_FLUSHED);
        uint32_t to_send = d->bytes_total - d->bytes_dropped;
        if (d->status == DESC_OK && d->bytes_done < to_send) {
            struct link *l = &e->link;
            uint32_t remaining = to_send - d->bytes_done;
            uint32_t n = l->limited && remaining > l->mtu ? l->mtu : remaining;
            /* Under drop, pushed packets took their credits when they arrived. */
            int reserved = e->cfg.policy == GW_POLICY_DROP && d->pushed;
            int r = link_send(l, &w->c, now, n, reserved);
            if (r == SEND_NO_CREDITS) {
                count(&w->c.credit_stalls, 1);
                return did;
            }
            if (r == SEND_BUSY)
                return did;
            did = 1;
            if ((!d->pulled && pull_whole(e, w, d) != 0) ||
                deliver_range(e, w, q, d, d->bytes_done, n) != 0) {
                desc_fail(d, GW_SYND_LOCAL_PROT_ERR, GW_REASON_PULL_FAILED);
            } else {
                d->bytes_done += n;
                count(&w->c.bytes_delivered, n);
                if (d->held)
                    update_held(w, 0, -(int64_t)n);
                if (l->limited && d->bytes_done < to_send)
                    return did;
            }
        }
        if (!retire(e, w, q, d))
            return did;
        did = 1;
        if (e->link.limited)
            return did;
    }
    return did;
}

static void qp_reset_state(struct qp *q)
{
    /* The doorbell record restarts with the rings (as libmlx5 zeroes it on a move to
     * RESET); cleared here, in the same step, so that a running worker never compares
     * an old producer index with new counters (a false ring overflow) or the reverse. */
    store_rel32(&q->dbrec->send_counter, 0);
    q->state = GW_QPS_RTS;
    q->ci_fetch = q->ci_done = q->last_pi = 0;
    q->stage_cursor = q->stage_freed = 0;
    q->push_seq = 0;
    q->desc_head = q->desc_tail = q->pull_next = 0;
}

/* ---- invalidation: deregistration and QP destruction against in-flight WQEs ------ */

/*
 * Keys and bounds are checked when a WQE is fetched; a region can be deregistered
 * after that, while its WQE waits for the link. A real NIC invalidates its translation
 * entries and answers later accesses with a protection error; here a removal bumps the
 * engine generation `gen` and waits until each worker has finished a pass begun after
 * the bump (quiesce). A worker that starts a pass under a new generation first fails
 * every fetched WQE whose regions are gone (revalidate). So once gw_engine_remove_mr
 * returns, no worker is inside a pass that could still write into the region, and no
 * later pass will. The common path pays one acquire load and one release store per
 * pass, not a lock or a check per packet.
 */
static void revalidate(struct gw_engine *e, struct worker *w)
{
    uint32_t n = atomic_load_explicit(&w->nqps, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        struct qp *q = atomic_load_explicit(&w->qps[i], memory_order_acquire);
        for (uint32_t k = q->desc_head; k != q->desc_tail; k++) {
            struct desc *d = &q->descs[k % q->sq_bbs];
            if (d->status != DESC_OK || !d->dst)
                continue;
            if (!mr_lookup(e, d->dst_key)) {
                desc_fail(d, GW_SYND_REMOTE_ACCESS_ERR, GW_REASON_RKEY_INVALIDATED);
                continue;
            }
            for (uint32_t j = 0; j < d->nsge; j++)
                if (!mr_lookup(e, d->sge_key[j])) {
                    desc_fail(d, GW_SYND_LOCAL_PROT_ERR, GW_REASON_LKEY_INVALIDATED);
                    break;
                }
        }
    }
}

/* Waits until every worker thread has finished a pass begun at generation `gen` or
 * later. Called with e->lock held; returns -1 if a worker did not answer in time
 * (the caller must then keep the memory alive). */
static int quiesce(struct gw_engine *e, uint64_t gen)
{
    if (!atomic_load(&e->running))
        return 0;   /* no worker threads; gw_engine_poll takes e->lock */
    uint64_t deadline = gw_now_ns() + 10000000000ull;
    for (uint32_t i = 0; i < e->cfg.workers; i++)
        while (atomic_load_explicit(&e->workers[i].gen_done, memory_order_acquire) < gen) {
            if (gw_now_ns() > deadline)
                return -1;
            sched_yield();
        }
    return 0;
}

static uint64_t bump_gen(struct gw_engine *e)
{
    return atomic_fetch_add(&e->gen, 1) + 1;
}

static int worker_pass(struct worker *w)
{
    struct gw_engine *e = w->engine;
    uint64_t gen = atomic_load_explicit(&e->gen, memory_order_acquire);
    if (gen != w->gen_seen) {
        revalidate(e, w);
        w->gen_seen = gen;
    }
    uint64_t now = e->link.limited ? gw_now_ns() : 0;
    int did = 0;
    if (w->index == 0)
        link_advance(&e->link, now, atomic_load_explicit(&e->stalled, memory_order_relaxed));
    uint32_t n = atomic_load_explicit(&w->nqps, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        struct qp *q = atomic_load_explicit(&w->qps[i], memory_order_acquire);
        if (atomic_load_explicit(&q->reset_request, memory_order_acquire)) {
            qp_reset_state(q);
            atomic_store_explicit(&q->reset_request, 0, memory_order_release);
        }
        did |= fetch_new(e, w, q, 32) > 0;
        did |= progress(e, w, q, now);
    }
    if (e->link.credits_limited && w->index == 0) {
        count_set(&w->c.credits_available, (uint64_t)(e->link.credits > 0 ? e->link.credits : 0));
        count_set(&w->c.rx_occupied_blocks, e->link.rx_occupied);
    }
    atomic_store_explicit(&w->gen_done, gen, memory_order_release);
    return did;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct gw_engine *e = w->engine;
    uint32_t idle = 0;
    while (atomic_load_explicit(&e->running, memory_order_acquire)) {
        if (worker_pass(w)) {
            idle = 0;
            continue;
        }
        if (e->cfg.idle_sleep_ns && ++idle > 1024) {
            struct timespec ts = {0, e->cfg.idle_sleep_ns};
            nanosleep(&ts, NULL);
        } else {
            __builtin_ia32_pause();
        }
    }
    return NULL;
}

/* ---- the public API ------------------------------------------------------------------ */

static int is_pow2(uint32_t x) { return x && !(x & (x - 1)); }

/* 0 (no model) or a finite rate in range: serialisation times stay far below 2^64 ns. */
static int rate_ok(double gbps)
{
    return gbps == 0.0 || (isfinite(gbps) && gbps >= GW_RATE_MIN_KBPS / 1e6 && gbps <= GW_RATE_MAX_GBPS);
}

struct gw_engine *gw_engine_create(const struct gw_engine_config *config, char *err, size_t errlen)
{
    if (config->policy != GW_POLICY_HOLD && config->policy != GW_POLICY_DROP) {
        set_err(err, errlen, "policy %u is not one of hold (0) or drop (1)", config->policy);
        return NULL;
    }
    if (config->workers < 1 || config->workers > 64) {
        set_err(err, errlen, "workers=%u: allowed 1 to 64", config->workers);
        return NULL;
    }
    if (config->link.rate_gbps > 0 && config->workers != 1) {
        set_err(err, errlen,
                "a modelled link (rate_gbps=%g) needs workers=1, got workers=%u: the link "
                "is one shared resource",
                config->link.rate_gbps, config->workers);
        return NULL;
    }
    if (!rate_ok(config->link.rate_gbps) || !rate_ok(config->link.drain_gbps)) {
        set_err(err, errlen, "rate_gbps=%g, drain_gbps=%g: each must be 0 (unlimited / the "
                "link rate) or from %g to %g Gb/s", config->link.rate_gbps,
                config->link.drain_gbps, GW_RATE_MIN_KBPS / 1e6, (double)GW_RATE_MAX_GBPS);
        return NULL;
    }
    if (config->link.mtu_bytes > 4096 || config->link.credit_latency_ns > GW_MAX_CREDIT_LATENCY_NS) {
        set_err(err, errlen, "mtu_bytes=%u (at most 4096), credit_latency_ns=%llu (at most "
                "%u): out of range", config->link.mtu_bytes,
                (unsigned long long)config->link.credit_latency_ns, GW_MAX_CREDIT_LATENCY_NS);
        return NULL;
    }
    if (config->max_qps < 1 || config->max_qps > GW_MAX_QPS || config->max_cqs < 1 ||
        config->max_cqs > GW_MAX_QPS + 1 || config->max_mrs < 1 ||
        config->max_mrs > GW_MAX_MRS) {
        set_err(err, errlen, "max_qps=%u, max_cqs=%u, max_mrs=%u: allowed 1 to %u queue pairs, "
                "1 to %u CQs, 1 to %u regions", config->max_qps, config->max_cqs,
                config->max_mrs, GW_MAX_QPS, GW_MAX_QPS + 1, GW_MAX_MRS);
        return NULL;
    }
    if (config->idle_sleep_ns >= 1000000000u) {
        set_err(err, errlen, "idle_sleep_ns=%u: allowed 0 to 999999999", config->idle_sleep_ns);
        return NULL;
    }
    if (config->copy_threads > GW_MAX_COPY_THREADS) {
        set_err(err, errlen, "copy_threads=%u: allowed 0 to %u", config->copy_threads,
                GW_MAX_COPY_THREADS);
        return NULL;
    }
    if (config->link.rate_gbps > 0 && config->link.rx_credits > 0 &&
        (config->link.mtu_bytes ? config->link.mtu_bytes : 4096) >
            (uint64_t)config->link.rx_credits * GW_CREDIT_BLOCK_BYTES) {
        set_err(err, errlen,
                "rx_credits=%u blocks (%u bytes) cannot hold one %u-byte packet",
                config->link.rx_credits, config->link.rx_credits * GW_CREDIT_BLOCK_BYTES,
                config->link.mtu_bytes);
        return NULL;
    }
    struct gw_engine *e = calloc(1, sizeof(*e));
    if (!e) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    e->cfg = *config;
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->late_lock, NULL);
    e->workers = calloc(config->workers, sizeof(struct worker));
    e->mrs = calloc(config->max_mrs, sizeof(struct mr));
    e->cqs = calloc(config->max_cqs, sizeof(struct cq));
    e->qps = calloc(config->max_qps, sizeof(struct qp));
    if (!e->workers || !e->mrs || !e->cqs || !e->qps) {
        set_err(err, errlen, "out of memory");
        gw_engine_destroy(e);
        return NULL;
    }
    for (uint32_t i = 0; i < config->workers; i++) {
        e->workers[i].engine = e;
        e->workers[i].index = i;
        e->workers[i].qps = calloc(config->max_qps, sizeof(struct qp *));
        if (!e->workers[i].qps) {
            set_err(err, errlen, "out of memory");
            gw_engine_destroy(e);
            return NULL;
        }
    }
    link_init(&e->link, &config->link);
    if (config->cuda_context) {
        if (cuda_load(&e->cuda, config->libcuda_path, err, errlen) != 0) {
            gw_engine_destroy(e);
            return NULL;
        }
        e->have_cuda = 1;
    }
    return e;
}

int gw_engine_add_cq(struct gw_engine *e, const struct gw_cq_desc *desc, char *err, size_t errlen)
{
    if (desc->cqn >= e->cfg.max_cqs) {
        set_err(err, errlen, "cqn %u out of range: allowed 0 to %u", desc->cqn, e->cfg.max_cqs - 1);
        return -1;
    }
    if (!is_pow2(desc->ncqe)) {
        set_err(err, errlen, "ncqe=%u must be a power of two", desc->ncqe);
        return -1;
    }
    if (!desc->cqes || !desc->dbrec) {
        set_err(err, errlen, "cq %u: its ring and doorbell record must be given", desc->cqn);
        return -1;
    }
    pthread_mutex_lock(&e->lock);
    struct cq *cq = &e->cqs[desc->cqn];
    if (cq->cqes) {
        pthread_mutex_unlock(&e->lock);
        set_err(err, errlen, "cqn %u is in use", desc->cqn);
        return -1;
    }
    cq->cqn = desc->cqn;
    cq->ncqe = desc->ncqe;
    cq->cqes = desc->cqes;
    cq->dbrec = desc->dbrec;
    cq->pi = 0;
    cq->consumer = 0;
    pthread_mutex_unlock(&e->lock);
    return 0;
}

static int cq_in_use_by_qp(struct gw_engine *e, const struct cq *cq)
{
    for (uint32_t i = 0; i < e->cfg.max_qps; i++)
        if (e->qps[i].in_use && e->qps[i].cq == cq)
            return 1;
    return 0;
}

int gw_engine_remove_cq(struct gw_engine *e, uint32_t cqn)
{
    if (cqn >= e->cfg.max_cqs)
        return -1;
    pthread_mutex_lock(&e->lock);
    struct cq *cq = &e->cqs[cqn];
    int rc = -1;
    if (cq->cqes && !cq_in_use_by_qp(e, cq)) {
        memset(cq, 0, sizeof(*cq));
        rc = 0;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int gw_engine_add_qp(struct gw_engine *e, const struct gw_qp_desc *desc, char *err, size_t errlen)
{
    if (desc->cqn >= e->cfg.max_cqs || !e->cqs[desc->cqn].cqes) {
        set_err(err, errlen, "qp %u names cq %u, which is not registered", desc->qpn, desc->cqn);
        return -1;
    }
    if (!desc->sq || !desc->dbrec || !desc->status) {
        set_err(err, errlen, "qp %u: its ring, doorbell record and status line must be given",
                desc->qpn);
        return -1;
    }
    if (!is_pow2(desc->sq_bbs) || desc->sq_bbs > 32768) {
        set_err(err, errlen, "sq_bbs=%u: must be a power of two up to 32768", desc->sq_bbs);
        return -1;
    }
    if (desc->qpn == 0 || desc->qpn > 0xffffff) {
        set_err(err, errlen, "qpn=%u: allowed 1 to 0xffffff", desc->qpn);
        return -1;
    }
    if (desc->staging_key && (!desc->stage_slots || !desc->stage_slot_bytes ||
                              desc->stage_slot_bytes % 16)) {
        set_err(err, errlen, "staging of %u slots of %u bytes: both must be nonzero, slots a "
                "multiple of 16 bytes", desc->stage_slots, desc->stage_slot_bytes);
        return -1;
    }
    pthread_mutex_lock(&e->lock);
    struct qp *q = NULL;
    for (uint32_t i = 0; i < e->cfg.max_qps; i++) {
        if (e->qps[i].in_use && e->qps[i].qpn == desc->qpn) {
            pthread_mutex_unlock(&e->lock);
            set_err(err, errlen, "qpn %u is in use", desc->qpn);
            return -1;
        }
        if (!q && !e->qps[i].in_use)
            q = &e->qps[i];
    }
    if (!q) {
        pthread_mutex_unlock(&e->lock);
        set_err(err, errlen, "the engine holds max_qps=%u queue pairs already", e->cfg.max_qps);
        return -1;
    }
    memset(q, 0, sizeof(*q));
    q->qpn = desc->qpn;
    q->cq = &e->cqs[desc->cqn];
    q->sq_bbs = desc->sq_bbs;
    q->sq = desc->sq;
    q->dbrec = desc->dbrec;
    q->status = desc->status;
    q->staging_key = desc->staging_key;
    q->stage_slots = desc->stage_slots;
    q->stage_slot_bytes = desc->stage_slot_bytes;
    q->stage_addr = desc->stage_addr;
    q->flags = desc->flags;
    q->descs = calloc(desc->sq_bbs, sizeof(struct desc));
    if (!q->descs) {
        pthread_mutex_unlock(&e->lock);
        set_err(err, errlen, "out of memory");
        return -1;
    }
    qp_reset_state(q);
    store_rel32(&q->status->qp_state, GW_QPS_RTS);
    struct worker *w = &e->workers[desc->cqn % e->cfg.workers];
    q->worker = w;
    q->in_use = 1;
    e->nqps_total++;
    uint32_t n = atomic_load_explicit(&w->nqps, memory_order_relaxed);
    atomic_store_explicit(&w->qps[n], q, memory_order_release);
    atomic_store_explicit(&w->nqps, n + 1, memory_order_release);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int gw_engine_add_mr(struct gw_engine *e, uint32_t key, uint64_t addr, uint64_t length,
                     uint32_t access, uint32_t mem_kind, char *err, size_t errlen)
{
    uint32_t index = key >> 8;
    if (index >= e->cfg.max_mrs) {
        set_err(err, errlen, "key 0x%x has index %u: allowed below max_mrs=%u", key, index,
                e->cfg.max_mrs);
        return -1;
    }
    if (mem_kind > GW_MEM_STAGING) {
        set_err(err, errlen, "memory kind %u: allowed host (0), device (1), staging (2)", mem_kind);
        return -1;
    }
    if (access & ~(uint32_t)GW_ACCESS_ALL) {
        set_err(err, errlen, "access=0x%x has unknown bits 0x%x: allowed local write (1), remote "
                "write (2), remote read (4)", access, access & ~(uint32_t)GW_ACCESS_ALL);
        return -1;
    }
    if (length == 0 || !addr || addr + length < addr) {
        set_err(err, errlen, "region [0x%llx, +%llu): must be nonempty, at a nonzero address, "
                "and not wrap the address space", (unsigned long long)addr,
                (unsigned long long)length);
        return -1;
    }
    pthread_mutex_lock(&e->lock);
    struct mr *m = &e->mrs[index];
    if (atomic_load(&m->valid)) {
        pthread_mutex_unlock(&e->lock);
        set_err(err, errlen, "key index %u is in use", index);
        return -1;
    }
    m->key = key;
    m->addr = addr;
    m->length = length;
    m->access = access;
    m->kind = mem_kind;
    atomic_store_explicit(&m->valid, 1, memory_order_release);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int gw_engine_remove_mr(struct gw_engine *e, uint32_t key)
{
    pthread_mutex_lock(&e->lock);
    struct mr *m = mr_lookup(e, key);
    if (!m) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    atomic_store_explicit(&m->valid, 0, memory_order_release);
    int rc = quiesce(e, bump_gen(e)) == 0 ? 0 : -2;
    /* A late pull that points into the region gets one more timeout to be answered. */
    uint64_t deadline = gw_now_ns() + e->cfg.pull_timeout_ns;
    while (rc == 0 && gw_engine_late_pulls(e, m->addr, m->length) > 0) {
        if (gw_now_ns() >= deadline)
            rc = -3;
        else
            sched_yield();
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* Destroying a QP first moves it to the error state and flushes what was posted to it
 * (IBV_WC_WR_FLUSH_ERR completions, as for a QP moved to error before ibv_destroy_qp);
 * from then on the engine no longer reads its rings: WQEs posted later never complete.
 * Runs in the caller's thread once no worker holds the QP; its counts go to e->ctl. */
static uint32_t flush_detached(struct gw_engine *e, struct qp *q)
{
    struct worker tmp;
    memset(&tmp, 0, sizeof(tmp));
    tmp.engine = e;
    tmp.index = q->worker->index;
    q->state = GW_QPS_ERR;
    store_rel32(&q->status->qp_state, GW_QPS_ERR);
    /* One fetch takes everything the doorbell covers: at most sq_bbs BBs are posted and
     * not completed, and the descriptor ring holds sq_bbs (a ring overflow adds one). */
    fetch_new(e, &tmp, q, UINT32_MAX);
    uint32_t lost = 0;
    while (desc_count(q) > 0) {
        struct desc *d = &q->descs[q->desc_head % q->sq_bbs];
        if (d->status == DESC_OK)
            desc_fail(d, GW_SYND_WR_FLUSH_ERR, GW_REASON_FLUSHED);
        if (!retire(e, &tmp, q, d)) {
            /* The CQ is full: the rest are flushed without a completion, and counted. */
            lost = desc_count(q);
            count(&tmp.c.flushed_wqes, lost);
            break;
        }
    }
    enum { N = sizeof(struct gw_counters) / sizeof(uint64_t) };
    uint64_t *dst = (uint64_t *)&e->ctl;
    const uint64_t *src = (const uint64_t *)&tmp.c;
    for (int k = 0; k < N; k++)
        __atomic_fetch_add(&dst[k], src[k], __ATOMIC_RELAXED);
    return lost;
}

int gw_engine_remove_qp(struct gw_engine *e, uint32_t qpn)
{
    pthread_mutex_lock(&e->lock);
    struct qp *q = NULL;
    for (uint32_t i = 0; i < e->cfg.max_qps && !q; i++)
        if (e->qps[i].in_use && e->qps[i].qpn == qpn)
            q = &e->qps[i];
    if (!q) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    /* Unlink it from its worker (the last entry moves into its place; a pass that reads
     * the array meanwhile sees a QP twice or the removed one once, both harmless). */
    struct worker *w = q->worker;
    uint32_t n = atomic_load_explicit(&w->nqps, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load_explicit(&w->qps[i], memory_order_relaxed) == q) {
            struct qp *last = atomic_load_explicit(&w->qps[n - 1], memory_order_relaxed);
            atomic_store_explicit(&w->qps[i], last, memory_order_release);
            atomic_store_explicit(&w->nqps, n - 1, memory_order_release);
            break;
        }
    if (quiesce(e, bump_gen(e)) != 0) {
        /* A worker may still hold it: its slot and descriptors stay taken. */
        pthread_mutex_unlock(&e->lock);
        return -2;
    }
    flush_detached(e, q);
    free(q->descs);
    q->descs = NULL;
    q->in_use = 0;
    e->nqps_total--;
    pthread_mutex_unlock(&e->lock);
    return 0;
}

/* An idle copy helper spins this long before it sleeps: one message in flight at a time
 * leaves gaps of a few to a few hundred microseconds, and a futex wake-up costs tens. */
enum { COPY_SPIN_NS = 2000000 };

int gw_engine_start(struct gw_engine *e, char *err, size_t errlen)
{
    pthread_mutex_lock(&e->lock);
    if (atomic_load(&e->running)) {
        pthread_mutex_unlock(&e->lock);
        set_err(err, errlen, "the engine is already running");
        return -1;
    }
    if (gw_copy_pool_start(&e->copy, e->cfg.copy_threads, COPY_SPIN_NS) != 0) {
        set_err(err, errlen, "cannot start the engine's %u copy threads", e->cfg.copy_threads);
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    atomic_store(&e->running, 1);
    for (uint32_t i = 0; i < e->cfg.workers; i++) {
        if (pthread_create(&e->workers[i].thread, NULL, worker_main, &e->workers[i]) != 0) {
            set_err(err, errlen, "cannot start engine thread %u", i);
            atomic_store(&e->running, 0);
            for (uint32_t j = 0; j < i; j++)
                pthread_join(e->workers[j].thread, NULL);
            gw_copy_pool_stop(&e->copy);
            pthread_mutex_unlock(&e->lock);
            return -1;
        }
    }
    e->started = 1;
    pthread_mutex_unlock(&e->lock);
    return 0;
}

void gw_engine_stop(struct gw_engine *e)
{
    pthread_mutex_lock(&e->lock);
    if (e->started) {
        atomic_store(&e->running, 0);
        for (uint32_t i = 0; i < e->cfg.workers; i++)
            pthread_join(e->workers[i].thread, NULL);
        /* After the workers: none is inside a copy that needs the helpers. */
        gw_copy_pool_stop(&e->copy);
        e->started = 0;
    }
    pthread_mutex_unlock(&e->lock);
}

int gw_engine_running(struct gw_engine *e) { return atomic_load(&e->running); }

int gw_engine_poll(struct gw_engine *e, uint32_t passes)
{
    pthread_mutex_lock(&e->lock);
    if (atomic_load(&e->running)) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    int did = 0;
    for (uint32_t p = 0; p < passes; p++)
        for (uint32_t i = 0; i < e->cfg.workers; i++)
            did |= worker_pass(&e->workers[i]);
    pthread_mutex_unlock(&e->lock);
    return did;
}

void gw_engine_destroy(struct gw_engine *e)
{
    if (!e)
        return;
    gw_engine_stop(e);
    if (e->qps)
        for (uint32_t i = 0; i < e->cfg.max_qps; i++)
            free(e->qps[i].descs);
    if (e->workers)
        for (uint32_t i = 0; i < e->cfg.workers; i++)
            free(e->workers[i].qps);
    free(e->workers);
    free(e->mrs);
    free(e->cqs);
    free(e->qps);
    if (e->cuda.lib)
        dlclose(e->cuda.lib);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->late_lock);
    free(e);
}

void gw_engine_read_counters(struct gw_engine *e, struct gw_counters *out)
{
    memset(out, 0, sizeof(*out));
    enum { N = sizeof(struct gw_counters) / sizeof(uint64_t) };
    uint64_t *dst = (uint64_t *)out;
    for (uint32_t i = 0; i <= e->cfg.workers; i++) {
        const uint64_t *src = (const uint64_t *)(i < e->cfg.workers ? &e->workers[i].c : &e->ctl);
        for (int k = 0; k < N; k++)
            dst[k] += __atomic_load_n(&src[k], __ATOMIC_RELAXED);
    }
}

void gw_engine_set_receiver_stall(struct gw_engine *e, int stalled)
{
    atomic_store(&e->stalled, stalled ? 1 : 0);
}

int gw_engine_qp_reset(struct gw_engine *e, uint32_t qpn)
{
    pthread_mutex_lock(&e->lock);
    int rc = -1;
    for (uint32_t i = 0; i < e->cfg.max_qps; i++) {
        struct qp *q = &e->qps[i];
        if (!q->in_use || q->qpn != qpn)
            continue;
        if (!atomic_load(&e->running)) {
            qp_reset_state(q);
        } else {
            atomic_store_explicit(&q->reset_request, 1, memory_order_release);
            uint64_t deadline = gw_now_ns() + 1000000000ull;
            while (atomic_load_explicit(&q->reset_request, memory_order_acquire))
                if (gw_now_ns() > deadline) {
                    pthread_mutex_unlock(&e->lock);
                    return -2;
                }
        }
        store_rel32(&q->status->stage_freed, 0);
        store_rel32(&q->status->sq_consumed, 0);
        store_rel32(&q->status->qp_state, GW_QPS_RTS);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* ---- the floor: a bare doorbell ping-pong responder ---------------------------------- */

struct gw_pong {
    pthread_t thread;
    _Atomic int running;
    uint32_t *ping;
    uint32_t *pong;
    uint64_t answer_delay_ns;
};

static void *pong_main(void *arg)
{
    struct gw_pong *p = arg;
    /* Answer whenever ping differs from pong: the GPU may ring before this thread runs. */
    uint32_t answered = load_acq32(p->pong);
    while (atomic_load_explicit(&p->running, memory_order_relaxed)) {
        uint32_t v = load_acq32(p->ping);
        if (v != answered) {
            if (p->answer_delay_ns) {
                uint64_t seen = gw_now_ns();
                while (gw_now_ns() - seen < p->answer_delay_ns)
                    __builtin_ia32_pause();
            }
            store_rel32(p->pong, v);
            answered = v;
        } else {
            __builtin_ia32_pause();
        }
    }
    return NULL;
}

struct gw_pong *gw_pong_start(void *ping, void *pong)
{
    return gw_pong_start_delayed(ping, pong, 0);
}

struct gw_pong *gw_pong_start_delayed(void *ping, void *pong, uint64_t answer_delay_ns)
{
    struct gw_pong *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->ping = ping;
    p->pong = pong;
    p->answer_delay_ns = answer_delay_ns;
    atomic_store(&p->running, 1);
    if (pthread_create(&p->thread, NULL, pong_main, p) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

void gw_pong_stop(struct gw_pong *p)
{
    if (!p)
        return;
    atomic_store(&p->running, 0);
    pthread_join(p->thread, NULL);
    free(p);
}
