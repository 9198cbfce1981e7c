/* gw_cq.c: the software NIC engine's completions: a head descriptor retired, its CQE
 * written, its staging slots returned (see gw_engine_internal.h). */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

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

/* A pushed message leaves the staging region unsent (failed, or discarded by a reset):
 * its accepted bytes not yet on the link are no longer held but dropped. */
void release_held(struct worker *w, const struct desc *d)
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
int retire(struct worker *w, struct qp *q, struct desc *d)
{
    if (d->status == DESC_OK && d->bytes_dropped)
        desc_fail(d, GW_SYND_TRANSPORT_RETRY_EXC_ERR, GW_REASON_DROPPED);
    /* Behind a failure that put the QP in error a NIC executes nothing: a later work
     * request completes flushed, also one whose own check (a key, a bound, a region
     * deregistered since) would have failed. Its keys were checked when it was fetched,
     * before the earlier failure retired; its reason is the earlier failure's consequence
     * here, as on a NIC. The overflow descriptor keeps its reason: it says why the WQEs
     * it covers are gone. */
    if (d->status != DESC_OK && q->state == GW_QPS_ERR && d->reason != GW_REASON_FLUSHED &&
        d->reason != GW_REASON_RING_OVERFLOW)
        desc_fail(d, GW_SYND_WR_FLUSH_ERR, GW_REASON_FLUSHED);
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
