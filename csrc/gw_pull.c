/*
 * gw_pull.c: nic_pull's stand-ins in the software NIC engine. A message whose source is
 * GPU memory is read by the GPU-resident pull agent, or else by the copy engine on a
 * stream of the CUDA driver (loaded only when the engine must pull from GPU memory);
 * under the CUDA simulator "GPU memory" is host memory and is copied directly.
 */
#define _GNU_SOURCE
#include "gw_engine_internal.h"

/* ---- the CUDA driver, loaded only when the engine must pull from GPU memory ------ */

int cuda_load(struct cuda_api *api, const char *path, char *err, size_t errlen)
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

/* ---- the copy engine's streams ------------------------------------------------------ */

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

/* The agent's ring, or NULL where none is attached. A pull loads it once and posts into
 * what it loaded: a detach (gw_engine_set_pull_agent) may clear it between a worker's
 * check and its post, and a second load would then give NULL. The old ring stays valid
 * until every worker has finished the pass that saw it (quiesce). */
static struct gw_pull_req *agent_ring(const struct gw_engine *e)
{
    return (struct gw_pull_req *)__atomic_load_n(&e->cfg.pull_ring, __ATOMIC_ACQUIRE);
}

/* Whether the agent can copy this pull of message d's: into a destination the GPU can
 * store into (GW_MR_GPU_MAPPED), in 4-byte words (other alignments, and addresses the
 * tag would overwrite, go to the copy engine). */
static int agent_copies(const struct desc *d, void *dst, uint64_t src)
{
    uint64_t a = (uint64_t)(uintptr_t)dst;
    return d->dst_gpu_mapped && ((a | src) & 3) == 0 && ((a | src) >> GW_PULL_ADDR_BITS) == 0;
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

/* Waits for ticket t's answer until `deadline` (gw_now_ns); 0, or -1 if it has not come:
 * the agent is gone (its kernel ended, or never started) or stuck. */
static int agent_wait_until(struct gw_engine *e, uint64_t t, uint64_t deadline)
{
    for (uint32_t spins = 0;; spins++) {
        if (agent_answered(e, t))
            return 0;
        if ((spins & 255) == 255 && gw_now_ns() > deadline)
            return -1;
    }
}

static int agent_wait(struct gw_engine *e, uint64_t t)
{
    return agent_wait_until(e, t, gw_now_ns() + e->cfg.pull_timeout_ns);
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
static uint64_t agent_post(struct gw_engine *e, struct gw_pull_req *ring, uint64_t dst,
                           uint64_t src, uint32_t len)
{
    uint64_t t = atomic_fetch_add(&e->agent_next, 1);
    uint32_t slots = e->cfg.pull_slots;
    if (t >= slots && agent_wait(e, t - slots) != 0)
        return UINT64_MAX;
    struct gw_pull_req *r = ring + (t & (slots - 1));
    uint64_t tag = ((t / slots + 1) & 0xFFFF) << GW_PULL_ADDR_BITS;
    /* Each word is whole and tagged (gw_engine.h), so the agent may read them in any
     * order; the ticket word is released last, and the agent's acquire of it orders its
     * reads of GPU memory after this engine's acquire of the doorbell. */
    __atomic_store_n(&r->tag_src, tag | src, __ATOMIC_RELAXED);
    __atomic_store_n(&r->tag_dst, tag | dst, __ATOMIC_RELAXED);
    __atomic_store_n(&r->ticket_nbytes, (t + 1) << 32 | len, __ATOMIC_RELEASE);
    return t;
}

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
    struct gw_pull_req *ring = agent_ring(e);
    if (!ring)
        return 0;
    uint64_t t = agent_post(e, ring, 0, 0, GW_PULL_STOP_BYTES);
    return t == UINT64_MAX || agent_wait(e, t) != 0 ? -1 : 0;
}

uint64_t gw_engine_agent_pulls(struct gw_engine *e, uint64_t *failed)
{
    if (failed)
        *failed = atomic_load(&e->agent_failed);
    return atomic_load(&e->agent_pulls);
}

/* ---- a pull: to the agent, else on the copy engine ---------------------------------- */

/*
 * A NIC keeps many DMA reads in flight, of every QP it serves, and completes a QP's work
 * requests in order. So does the engine: a pull posted to the agent stays in the worker's
 * agent_tickets, and its descriptor counts it in pulls_out, until the agent answers it;
 * meanwhile the worker goes on fetching and serving its other QPs, and takes the answers
 * at the start of each pass (pull_reap). A descriptor with a pull in flight is not
 * delivered or retired, so its completion, error or not, comes after the agent's write.
 * Before descriptors are revalidated, reset or flushed, and when a worker stops, its
 * pulls are waited for (pull_drain): no write of the agent's lands in a destination the
 * engine no longer answers for, except a late one (late_add), whose region is then not
 * let go of. (Until session 45 a worker waited for each QP's pulls before serving the
 * next QP: four QPs with a 4 KiB pull each in flight took 20 us where one took 8, on an
 * H200, BENCHMARKS.md.)
 */

enum { PULL_BY_AGENT = 0, PULL_BY_COPY_ENGINE = 1 };

/* Queues a copy of GPU memory to message owner's destination, to the agent (counted in
 * owner's pulls_out) or on the worker's copy stream (there after pull_sync); returns
 * which, or -1. */
static int pull_start(struct gw_engine *e, struct worker *w, struct desc *owner, void *dst,
                      uint64_t src, uint32_t len)
{
    struct gw_pull_req *ring = agent_ring(e);
    if (ring && agent_copies(owner, dst, src) && w->agent_pending < AGENT_TICKETS_MAX) {
        uint64_t t = agent_post(e, ring, (uint64_t)(uintptr_t)dst, src, len);
        if (t == UINT64_MAX) {
            atomic_fetch_add(&e->agent_failed, 1);
            return -1;
        }
        w->agent_tickets[w->agent_pending++] =
            (struct agent_ticket){t, (uint64_t)(uintptr_t)dst, len, gw_now_ns(), owner};
        owner->pulls_out++;
        return PULL_BY_AGENT;
    }
    if (!e->have_cuda) {
        /* CUDA simulator: "GPU memory" is host memory (and may overlap the destination,
         * as in gw_copy). */
        memmove(dst, (const void *)(uintptr_t)src, len);
        return PULL_BY_COPY_ENGINE;
    }
    if (e->cuda.ctx_set_current(e->cfg.cuda_context) != 0 || !copy_stream(e, w))
        return -1;
    return e->cuda.memcpy_dtoh_async(dst, src, len, w->stream) != 0 ? -1 : PULL_BY_COPY_ENGINE;
}

/* Waits for the copy engine's queued pulls: 0, or -1 if its stream failed (it has no
 * outcome per pull). */
static int pull_sync(struct gw_engine *e, struct worker *w)
{
    if (!e->have_cuda || !w->stream)
        return 0;
    return e->cuda.stream_sync(w->stream) != 0 ? -1 : 0;
}

/* A descriptor none of whose pulls is in flight: its bytes are in place, or it fails
 * with pull_failed (unless it had failed already: the first reason stays). */
static void pull_settle(struct desc *d)
{
    if (!d->pull_failed)
        d->pulled = 1;
    else if (d->status == DESC_OK)
        desc_fail(d, GW_SYND_LOCAL_PROT_ERR, GW_REASON_PULL_FAILED);
}

/* Takes the agent's answers to this worker's pulls, oldest first (the agent answers in
 * ticket order, so none after an unanswered one is answered either); with `block`, waits
 * for every one. A pull unanswered pull_timeout_ns after it was posted fails its
 * descriptor and is remembered as late (late_add). */
static void pull_reap(struct gw_engine *e, struct worker *w, int block)
{
    uint32_t k = 0;
    for (; k < w->agent_pending; k++) {
        struct agent_ticket *a = &w->agent_tickets[k];
        uint64_t deadline = a->posted_ns + e->cfg.pull_timeout_ns;
        int answered = block ? agent_wait_until(e, a->ticket, deadline) == 0
                             : agent_answered(e, a->ticket);
        /* Unanswered and not blocking: not yet late, by a clock read every 64 passes. */
        if (!answered && !block && ((++w->reap_passes & 63) || gw_now_ns() <= deadline))
            break;
        if (answered) {
            atomic_fetch_add(&e->agent_pulls, 1);
            /* The agent's round trip as the engine sees it: from the request's post to
             * the pass that saw its answer. */
            count(&w->c.pull_agent_ns, gw_now_ns() - a->posted_ns);
            count(&w->c.pull_agent_answers, 1);
        } else {
            late_add(e, a);
            atomic_fetch_add(&e->agent_failed, 1);
            if (a->owner)
                a->owner->pull_failed = 1;
        }
        if (a->owner && --a->owner->pulls_out == 0)
            pull_settle(a->owner);
    }
    memmove(w->agent_tickets, w->agent_tickets + k,
            (w->agent_pending - k) * sizeof(w->agent_tickets[0]));
    w->agent_pending -= k;
}

int pull_answers(struct gw_engine *e, struct worker *w)
{
    if (w->agent_pending == 0)
        return 0;
    pull_reap(e, w, 0);
    return 1;
}

void pull_drain(struct gw_engine *e, struct worker *w)
{
    pull_reap(e, w, 1);
}

/* Posts the pulls of descriptor d's GPU-memory sources; returns whether any went to the
 * copy engine. A pull that cannot be posted fails d (pull_failed) and posts no more.
 * A NIC places a QP's writes in order, the later over the earlier where they overlap; a
 * pull on the copy engine lands when the worker syncs its stream, ahead of pulls still
 * at the agent, so those (of earlier messages) are waited for first. */
static int pull_post(struct gw_engine *e, struct worker *w, struct desc *d)
{
    int copy_engine = 0;
    uint32_t off = 0;
    for (uint32_t i = 0; i < d->nsge && !d->pull_failed; i++) {
        if (d->sge[i].kind == GW_MEM_DEVICE) {
            uint8_t *dst = d->dst + off;
            /* To the copy engine although the agent runs (agent_copies: a destination
             * the GPU cannot store into, an address not 4-byte aligned), or no ticket
             * left (a guard: pull_ahead posts a message only where its pulls fit, and
             * pull_whole's find none in flight): the agent's pulls in flight land first. */
            if (w->agent_pending > 0 && (!agent_copies(d, dst, d->sge[i].addr) ||
                                         w->agent_pending >= AGENT_TICKETS_MAX))
                pull_drain(e, w);
            int by = pull_start(e, w, d, dst, d->sge[i].addr, d->sge[i].length);
            d->pull_failed = by < 0;
            copy_engine |= by == PULL_BY_COPY_ENGINE;
        }
        off += d->sge[i].length;
    }
    return copy_engine;
}

/* GPU-memory sources are pulled whole when the message's first packet is scheduled: one
 * copy-engine transfer per message rather than per packet. Waits for them (and for every
 * other pull of the worker's). */
int pull_whole(struct gw_engine *e, struct worker *w, struct desc *d)
{
    if (pull_post(e, w, d) && pull_sync(e, w) != 0)
        d->pull_failed = 1;
    pull_drain(e, w);
    pull_settle(d);
    return d->pull_failed ? -1 : 0;
}

/* With an unlimited link every fetched message goes out at once, so the pulls of up to
 * PULL_AHEAD of a QP's fetched messages are posted together: the agent's are waited for
 * by later passes (pull_reap), the copy engine's by one stream synchronisation here (one
 * per message, several microseconds serialised in the driver across workers, made the
 * stand-in's small-message rate a measure of the CUDA driver rather than of the copy
 * engine). A message whose pulls would not fit the worker's agent_tickets waits for a
 * later pass, rather than going to the copy engine. While an agent is attached, a
 * message's copy-engine pulls are waited for before the next message's are posted: the
 * agent would land a later message's bytes before the copy engine lands the earlier's
 * (pull_post's drain keeps the other order). */
enum { PULL_AHEAD = 64 };

/* Whether d (with `device` GPU-memory sources) has bytes the engine itself places when it
 * delivers d, still to place: inline, staged or host-memory sources. A NIC places a QP's
 * writes in order; a pull lands when the agent or the copy engine copies it, so no later
 * message's pull is posted before such bytes are placed. */
static int places_later(const struct desc *d, uint32_t device)
{
    return d->status == DESC_OK && d->bytes_done < d->bytes_total - d->bytes_dropped &&
           (d->inline_data || device < d->nsge);
}

/* Waits for the copy engine's pulls of the n messages in `synced`; each fails alone (a
 * NIC's reads complete one by one: a message whose bytes arrived is not failed with a
 * later one's) and is settled once none of its pulls is left at the agent either. */
static void pull_sync_settle(struct gw_engine *e, struct worker *w, struct desc **synced,
                             uint32_t n)
{
    int failed = pull_sync(e, w) != 0;
    for (uint32_t k = 0; k < n; k++) {
        synced[k]->pull_failed |= failed;
        if (synced[k]->pulls_out == 0)
            pull_settle(synced[k]);
    }
}

void pull_ahead(struct gw_engine *e, struct worker *w, struct qp *q)
{
    /* Messages with a pull on the copy engine, not yet waited for. */
    struct desc *synced[PULL_AHEAD];
    uint32_t n = 0, posted = 0;
    /* Descriptors before pull_next have been looked at: posted, or nothing to pull. */
    if ((int32_t)(q->pull_next - q->desc_head) < 0)
        q->pull_next = q->desc_head;
    while (q->pull_next != q->desc_tail && posted < PULL_AHEAD) {
        struct desc *d = &q->descs[q->pull_next % q->sq_bbs];
        if (d->status != DESC_OK && d->reason != GW_REASON_DROPPED)
            break;               /* its completion puts the QP in error: what follows is
                                  * flushed, and none of its bytes may land */
        uint32_t device = 0;
        for (uint32_t i = 0; i < d->nsge; i++)
            device += d->sge[i].kind == GW_MEM_DEVICE;
        if (d->status == DESC_OK && !d->pulled && !d->pulls_out && !d->bytes_dropped &&
            device > 0) {
            if (w->agent_pending + device > AGENT_TICKETS_MAX && w->agent_pending > 0)
                break;           /* posted by a later pass, once answers free tickets */
            posted++;
            if (pull_post(e, w, d)) {
                synced[n++] = d;
                if (agent_ring(e)) {
                    pull_sync_settle(e, w, synced, n);
                    n = 0;
                }
            } else if (d->pulls_out == 0)
                pull_settle(d);  /* it failed before any pull was posted */
        }
        if (places_later(d, device))
            break;               /* the engine places its other bytes when it delivers
                                  * it: no later message's pull may land first (pull_next
                                  * stays, and is looked at again until it is placed) */
        q->pull_next++;
        if (d->pull_failed)
            break;               /* the agent is gone or the driver failed: no more now */
    }
    if (n > 0)
        pull_sync_settle(e, w, synced, n);
}
