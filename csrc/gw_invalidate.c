/* gw_invalidate.c: the software NIC engine's invalidation: regions deregistered and QPs
 * reset or destroyed while their WQEs are in flight (see gw_engine_internal.h). */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

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
void revalidate(struct gw_engine *e, struct worker *w)
{
    /* First every pull in flight lands (or is late): a region is let go of only after
     * this pass, and a QP's descriptors are discarded only after it. */
    pull_drain(e, w);
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

/* ---- a QP reset or destroyed: the WQEs it fetched discarded or flushed --------------- */

void qp_reset_state(struct qp *q)
{
    /* WQEs fetched and not completed are discarded without completions, as a move to
     * RESET discards a real QP's work requests; counted as flushed, and the pushed bytes
     * they held as dropped, so that nothing is lost silently. Runs in the QP's worker,
     * or with no worker thread running; first the worker's pulls in flight land (a QP
     * being created has no worker yet, nor pulls). */
    if (q->worker)
        pull_drain(q->worker->engine, q->worker);
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

/* Destroying a QP first moves it to the error state and flushes what was posted to it
 * (IBV_WC_WR_FLUSH_ERR completions, as for a QP moved to error before ibv_destroy_qp);
 * from then on the engine no longer reads its rings: WQEs posted later never complete.
 * Runs in the caller's thread once no worker holds the QP; its counts go to e->ctl. */
uint32_t flush_detached(struct gw_engine *e, struct qp *q)
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
        if (!retire(&tmp, q, d)) {
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
