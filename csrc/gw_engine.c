/*
 * gw_engine.c: the software NIC engine of gpuwrite's emulated mode: its public API
 * (gw_engine.h) and the helpers every part uses.
 *
 * Each worker thread owns a set of completion queues and the queue pairs that
 * complete into them, so a CQ is only ever written by one thread. A pass of a worker
 * (gw_service.c):
 *   1. advance the link model to now (receiver drain, credit returns; gw_link.c);
 *   2. for each QP: read its doorbell record, fetch and validate the newly posted WQEs
 *      into descriptors (errors become descriptors too, so completions stay in order;
 *      gw_wqe.c);
 *   3. for each QP: move its head descriptors onto the link as credits and rate allow,
 *      deliver their bytes into the destination region, and write completions (gw_cq.c).
 * Pushed payloads stay in the staging region (the GPU's slots) until their message is
 * delivered or dropped; only then are the slots returned to the GPU, in order.
 *
 * The other parts live beside this file (gw_engine_internal.h lists them).
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
    if (!e) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    memset(e, 0, sizeof(*e));
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
    q->pd = desc->pd;
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
                     uint32_t access, uint32_t mem_kind, uint32_t flags, uint32_t pd,
                     char *err, size_t errlen)
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
    if (flags & ~(uint32_t)GW_MR_FLAGS_ALL) {
        set_err(err, errlen, "flags=0x%x has unknown bits 0x%x: allowed GPU-mapped (1)", flags,
                flags & ~(uint32_t)GW_MR_FLAGS_ALL);
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
    m->flags = flags;
    m->pd = pd;
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
    /* As a NIC closed under live QPs: what was posted to them is flushed, so a kernel
     * waiting on one sees its error completions, not a timeout; no byte lands. */
    if (e->qps)
        for (uint32_t i = 0; i < e->cfg.max_qps; i++)
            if (e->qps[i].in_use && e->qps[i].descs)
                flush_detached(e, &e->qps[i]);
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
