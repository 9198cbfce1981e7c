/* gw_pong.c: the floor of every latency, a thread that answers a doorbell and does
 * nothing else (gw_pong_start in gw_engine.h), and the reverse trip, the host pinging a
 * GPU thread (gw_ping_run). */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

/* ---- the floor: a bare doorbell ping-pong responder ---------------------------------- */

struct gw_pong {
    pthread_t thread;
    _Atomic int running;
    uint32_t *ping;
    uint32_t *pong;
    uint64_t answer_delay_ns;
    uint32_t lines;
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
            for (uint32_t j = 0; j < p->lines; j++)
                store_rel32(p->pong + j * GW_PONG_LINE_WORDS, v);
            answered = v;
        } else {
            __builtin_ia32_pause();
        }
    }
    return NULL;
}

struct gw_pong *gw_pong_start(void *ping, void *pong, uint64_t answer_delay_ns, uint32_t lines)
{
    if (lines < 1 || lines > GW_PONG_MAX_LINES)
        return NULL;
    struct gw_pong *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->ping = ping;
    p->pong = pong;
    p->answer_delay_ns = answer_delay_ns;
    p->lines = lines;
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

/* ---- the reverse floor: the host pings, a GPU thread answers ------------------------ */

uint32_t gw_ping_run(void *ping, void *pong, uint32_t iters, uint64_t timeout_ns,
                     uint64_t *rtt_ns)
{
    for (uint32_t k = 0; k < iters; k++) {
        uint64_t t0 = gw_now_ns();
        store_rel32(ping, k + 1);
        while (load_acq32(pong) != k + 1) {
            if (gw_now_ns() - t0 > timeout_ns)
                return k;
            __builtin_ia32_pause();
        }
        rtt_ns[k] = gw_now_ns() - t0;
    }
    return iters;
}
