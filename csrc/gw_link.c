/* gw_link.c: the software NIC engine's link model (see gw_engine_internal.h). */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

/* ---- the link: rate, credit-based flow control, a receiver that can stall --------- */

void link_init(struct link *l, const struct gw_link_config *cfg)
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

/* The receiver drains at its rate unless stalled; drained blocks return as credits
 * after the credit latency. */
void link_advance(struct link *l, uint64_t now, int stalled)
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

/* Puts one packet on the wire if the link is free and (unless reserved) credits exist. */
int link_send(struct link *l, struct gw_counters *c, uint64_t now, uint32_t bytes,
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
