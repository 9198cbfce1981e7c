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
 *
 * The link model, nic_pull's stand-ins and the ping-pong responder live beside this
 * file (gw_engine_internal.h lists the pieces).
 */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

/* ---- byte order and shared-memory access --------------------------------------- */

uint32_t gw_load_acquire_u32(const void *addr) { return load_acq32(addr); }
void gw_store_release_u32(void *addr, uint32_t value) { store_rel32(addr, value); }

uint64_t gw_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


#include <stdarg.h>
void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
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
            if (gw_copy(&e->copy, d->dst + off, (const void *)(uintptr_t)(s->addr + start), n))
                count(&w->c.copies_split, 1);
            if (s->kind == GW_MEM_HOST)
                count(&w->c.bytes_host_read, n);
        }
        off += n;
        len -= n;
        base += s->length;
    }
    return 0;
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
    if ((outstanding > q->sq_bbs && q->ci_fetch != pi) || q->overflow_pending) {
        /* The GPU wrote past WQEs the NIC had not completed: their bytes are gone. (Once
         * ci_fetch has reached the doorbell, a descriptor covers them: nothing new.) */
        if (!q->overflow_pending) {
            count(&w->c.ring_overflows, 1);
            q->overflow_pending = 1;
            q->state = GW_QPS_ERR;
            store_rel32(&q->status->qp_state, GW_QPS_ERR);
        }
        /* One error descriptor covers the BBs from ci_fetch to the doorbell, so that its
         * completion says why and ci_done reaches the doorbell. With the descriptor ring
         * full (its heads waiting for credits or CQ space) it waits for room: dropping
         * it lost the reason and left ci_done behind, and counted an overflow per pass. */
        if (desc_count(q) >= q->sq_bbs)
            return 0;
        struct desc *d = &q->descs[q->desc_tail % q->sq_bbs];
        memset(d, 0, offsetof(struct desc, sge));
        d->wqe_index = q->ci_fetch;
        d->nbb = (uint16_t)(pi - q->ci_fetch);
        desc_fail(d, GW_SYND_LOCAL_QP_OP_ERR, GW_REASON_RING_OVERFLOW);
        q->desc_tail++;
        q->ci_fetch = pi;
        q->overflow_pending = 0;
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

/* A pushed message leaves the staging region unsent (failed, or discarded by a reset):
 * its accepted bytes not yet on the link are no longer held but dropped. */
static void release_held(struct worker *w, const struct desc *d)
{
    if (!d->held)
        return;
    uint32_t left = d->bytes_total - d->bytes_dropped - d->bytes_done;
    update_held(w, -1, -(int64_t)left);
    if (left) {
        count(&w->c.dropped_bytes, left);
        if (!d->bytes_dropped)
            count(&w->c.dropped_msgs, 1);
    }
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
        release_held(w, d);
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
    /* WQEs fetched and not completed are discarded without completions, as a move to
     * RESET discards a real QP's work requests; counted as flushed, and the pushed bytes
     * they held as dropped, so that nothing is lost silently. Runs in the QP's worker,
     * or with no worker thread running. */
    for (uint32_t k = q->desc_head; k != q->desc_tail; k++) {
        const struct desc *d = &q->descs[k % q->sq_bbs];
        count(&q->worker->c.flushed_wqes, 1);
        release_held(q->worker, d);
    }
    /* The doorbell record restarts with the rings (as libmlx5 zeroes it on a move to
     * RESET); cleared here, in the same step, so that a running worker never compares
     * an old producer index with new counters (a false ring overflow) or the reverse. */
    store_rel32(&q->dbrec->send_counter, 0);
    q->state = GW_QPS_RTS;
    q->ci_fetch = q->ci_done = q->last_pi = 0;
    q->stage_cursor = q->stage_freed = 0;
    q->push_seq = 0;
    q->overflow_pending = 0;
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
 * later pass will. With no worker thread running (gw_engine_poll, a stopped engine),
 * quiesce revalidates at once: the key may be registered again before the next pass.
 * The common path pays one acquire load and one release store per pass, not a lock or
 * a check per packet.
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
int quiesce(struct gw_engine *e, uint64_t gen)
{
    if (!atomic_load(&e->running)) {
        /* No worker thread (gw_engine_poll takes e->lock): revalidate now, not at the
         * next pass, by which time the key may name a new registration and a WQE aimed
         * at the old one would pass as valid and write into memory already let go of. */
        for (uint32_t i = 0; i < e->cfg.workers; i++) {
            revalidate(e, &e->workers[i]);
            e->workers[i].gen_seen = gen;
        }
        return 0;
    }
    uint64_t deadline = gw_now_ns() + 10000000000ull;
    for (uint32_t i = 0; i < e->cfg.workers; i++)
        while (atomic_load_explicit(&e->workers[i].gen_done, memory_order_acquire) < gen) {
            if (gw_now_ns() > deadline)
                return -1;
            sched_yield();
        }
    return 0;
}

uint64_t bump_gen(struct gw_engine *e)
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

_Static_assert(sizeof(((struct gw_engine_config *)0)->thread_cpu) / sizeof(uint16_t) ==
                   GW_MAX_WORKERS + GW_MAX_COPY_THREADS,
               "thread_cpu holds one CPU for each worker and each copy helper");

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
    if (config->workers < 1 || config->workers > GW_MAX_WORKERS) {
        set_err(err, errlen, "workers=%u: allowed 1 to %d", config->workers, GW_MAX_WORKERS);
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
    if (config->copy_split_bytes &&
        (config->copy_split_bytes < GW_COPY_SPLIT_MIN || config->copy_split_bytes > GW_COPY_SPLIT_MAX)) {
        set_err(err, errlen, "copy_split_bytes=%u: allowed 0 (the default, %u) or %u to %u",
                config->copy_split_bytes, GW_COPY_SPLIT_DEFAULT, GW_COPY_SPLIT_MIN,
                GW_COPY_SPLIT_MAX);
        return NULL;
    }
    if (config->pin_threads) {
        for (uint32_t i = 0; i < config->workers + config->copy_threads; i++)
            if (config->thread_cpu[i] > GW_MAX_CPU) {
                set_err(err, errlen, "thread_cpu[%u]=%u: allowed 0 to %d", i,
                        config->thread_cpu[i], GW_MAX_CPU);
                return NULL;
            }
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
    /* Aligned as its copy pool's lines are (gw_copy.h); calloc promises 16 bytes. */
    struct gw_engine *e = aligned_alloc(_Alignof(struct gw_engine), sizeof(*e));
    if (e)
        memset(e, 0, sizeof(*e));
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
    if (!is_pow2(desc->ncqe) || desc->ncqe > GW_MAX_CQE) {
        set_err(err, errlen, "ncqe=%u must be a power of two up to %u", desc->ncqe, GW_MAX_CQE);
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
    /* One QP per CQ: a destroyed QP's flush completions are written from the caller's
     * thread (gw_engine_remove_qp), where a worker could be writing another QP's into the
     * same CQ at the same time. */
    if (cq_in_use_by_qp(e, &e->cqs[desc->cqn])) {
        pthread_mutex_unlock(&e->lock);
        set_err(err, errlen, "qp %u names cq %u, which serves another queue pair: allowed a CQ "
                "no queue pair uses (the emulated NIC gives each its own)", desc->qpn, desc->cqn);
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
     * not completed, and the descriptor ring holds sq_bbs (a ring overflow takes one). */
    fetch_new(e, &tmp, q, UINT32_MAX);
    uint32_t lost = 0;
    while (desc_count(q) > 0) {
        struct desc *d = &q->descs[q->desc_head % q->sq_bbs];
        if (d->status == DESC_OK)
            desc_fail(d, GW_SYND_WR_FLUSH_ERR, GW_REASON_FLUSHED);
        if (!retire(e, &tmp, q, d)) {
            /* The CQ is full: the rest are flushed without a completion, and counted,
             * the pushed bytes they held as dropped. */
            lost = desc_count(q);
            count(&tmp.c.flushed_wqes, lost);
            for (uint32_t k = q->desc_head; k != q->desc_tail; k++)
                release_held(&tmp, &q->descs[k % q->sq_bbs]);
            break;
        }
    }
    /* A flush only lowers what is held (tmp's held counts wrap below zero and add up to
     * the right sum); the high-water mark stays the worker's. */
    tmp.c.held_bytes_max = 0;
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
    const uint16_t *cpu = e->cfg.pin_threads ? e->cfg.thread_cpu : NULL;
    if (gw_copy_pool_start(&e->copy, e->cfg.copy_threads, COPY_SPIN_NS,
                           e->cfg.copy_split_bytes ? e->cfg.copy_split_bytes
                                                   : GW_COPY_SPLIT_DEFAULT,
                           cpu ? cpu + e->cfg.workers : NULL) != 0) {
        set_err(err, errlen, "cannot start the engine's %u copy threads%s", e->cfg.copy_threads,
                cpu ? " on the CPUs given (is each one in this process's affinity mask?)" : "");
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    atomic_store(&e->running, 1);
    for (uint32_t i = 0; i < e->cfg.workers; i++) {
        char name[24];    /* i < GW_MAX_WORKERS: "gw-worker-63" fits the 15 a name may have */
        snprintf(name, sizeof(name), "gw-worker-%u", i);
        int rc = gw_thread_create(&e->workers[i].thread, worker_main, &e->workers[i],
                                  cpu ? cpu[i] : -1, name);
        if (rc != 0) {
            if (cpu)
                set_err(err, errlen, "cannot start engine thread %u on CPU %u: %s", i, cpu[i],
                        strerror(rc));
            else
                set_err(err, errlen, "cannot start engine thread %u: %s", i, strerror(rc));
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
