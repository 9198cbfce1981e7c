/* gw_wqe.c: the software NIC engine's doorbells and WQE fetch: the WQEs a QP's doorbell
 * record covers, each validated into a descriptor (regions' keys and bounds, staging
 * claims, the drop policy on arrival). See gw_engine_internal.h. */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

/* ---- memory regions ---------------------------------------------------------------- */

static int in_bounds(const struct mr *m, uint64_t addr, uint64_t length)
{
    return addr >= m->addr && length <= m->length && addr - m->addr <= m->length - length;
}

/* ---- fetching and validating WQEs --------------------------------------------------- */

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
            if (!m || m->pd != q->pd) {
                /* A region of another protection domain is, to this QP, no region at
                 * all: a NIC completes both with a local protection error. */
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
    d->dst_cached = dst->length <= e->cfg.cached_dst_max_bytes;
    d->dst_gpu_mapped = (dst->flags & GW_MR_GPU_MAPPED) != 0;

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

/* ---- doorbells: the WQEs a doorbell record covers, fetched into descriptors ---------- */

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

uint32_t fetch_new(struct gw_engine *e, struct worker *w, struct qp *q, uint32_t budget)
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
