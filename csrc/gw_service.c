/* gw_service.c: the software NIC engine's per-QP service and its workers: head messages
 * moved onto the link and their bytes delivered; each worker's pass and loop (the pass
 * is described at the top of gw_engine.c). */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

/* ---- delivering bytes ---------------------------------------------------------------- */

/* Whether a host-memory copy of n bytes into d's destination is stored through the cache
 * rather than streamed (gw_engine_config.cached_dst_max_bytes). A region that fits the
 * last-level cache was most likely written there recently, and streaming its lines
 * writes them back to DRAM: a lone 16 KiB delivery took 0.9 us longer streamed (H100
 * host, BENCHMARKS.md, session 15). Into a region larger than the cache the lines are
 * cold, and a cached store would read each first: Fig. 4's throughput into 256 MiB fell
 * 4 to 10 % with cached stores (session 16). Split copies keep streaming. */
static inline int store_cached(const struct gw_engine *e, const struct desc *d, uint32_t n)
{
    return d->dst_cached && n >= GW_COPY_STREAM_MIN && n < GW_CACHED_COPY_MAX &&
           !gw_copy_splits(&e->copy, n);
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
            if (!d->pulled)
                return -1;       /* progress pulls a message whole before it delivers any */
            count(&w->c.bytes_pulled, n);
        } else {
            const void *src = (const void *)(uintptr_t)(s->addr + start);
            if (store_cached(e, d, n)) {
                /* memmove: a WQE may write a region from itself (gw_copy does the same). */
                memmove(d->dst + off, src, n);
                count(&w->c.copies_cached, 1);
            } else {
                struct gw_copy_split sp;
                if (gw_copy(&e->copy, d->dst + off, src, n, &sp)) {
                    count(&w->c.copies_split, 1);
                    count(&w->c.copy_pieces, sp.pieces);
                    count(&w->c.copy_pieces_late, sp.late);
                    count(&w->c.copy_wait_ns, sp.wait_ns);
                }
            }
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

/* Moves the QP's head message forward by at most one packet (round-robin fairness),
 * or all of it when the link is unlimited. Returns nonzero if anything happened. */
static int progress(struct gw_engine *e, struct worker *w, struct qp *q, uint64_t now)
{
    int did = 0;
    if (!e->link.limited && q->state != GW_QPS_ERR) {
        pull_ahead(e, w, q);
        /* With no worker thread (gw_engine_poll) no later pass is sure to come and take
         * the answers: they are waited for here, as every pull was before session 45. */
        if (!atomic_load_explicit(&e->running, memory_order_relaxed))
            pull_drain(e, w);
    }
    for (int guard = 0; guard < 64 && desc_count(q) > 0; guard++) {
        struct desc *d = &q->descs[q->desc_head % q->sq_bbs];
        if (d->pulls_out)
            return did;          /* its pulls are in flight: it completes after them */
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
        if (!retire(w, q, d))
            return did;
        did = 1;
        if (e->link.limited)
            return did;
    }
    return did;
}

/* ---- the workers: a pass over their QPs, and the loop of a worker thread ------------- */

int worker_pass(struct worker *w)
{
    struct gw_engine *e = w->engine;
    uint64_t gen = atomic_load_explicit(&e->gen, memory_order_acquire);
    if (gen != w->gen_seen) {
        revalidate(e, w);
        w->gen_seen = gen;
    }
    uint64_t now = e->link.limited ? gw_now_ns() : 0;
    int did = pull_answers(e, w);
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

void *worker_main(void *arg)
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
    pull_drain(e, w);   /* the engine stops: no pull of its is left to land later */
    return NULL;
}
