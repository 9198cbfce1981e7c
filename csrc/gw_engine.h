/*
 * gw_engine.h: the host API of the software NIC engine (emulated mode).
 *
 * The engine is a set of C threads that play an RDMA NIC: they poll the doorbell
 * records of the queue pairs registered with them, fetch and validate WQEs, hold
 * pushed payloads in the staging region, schedule messages onto a modelled link with
 * credit-based flow control, deliver bytes into registered memory regions (checking
 * keys, bounds and access rights) and write CQEs. Memory is allocated by the caller
 * (Python, through CUDA); the engine is handed addresses.
 *
 * Parsed by cffi's cdef as well as compiled: no macros with arguments, no includes.
 */

struct gw_engine;

struct gw_link_config {
    double rate_gbps;             /* link rate; 0 means unlimited (no link model) */
    uint32_t mtu_bytes;           /* packet payload size */
    uint32_t rx_credits;          /* receiver buffer in 64-byte credit blocks; 0: unlimited */
    uint64_t credit_latency_ns;   /* from the receiver draining a block to its credit returning */
    double drain_gbps;            /* receiver drain rate; 0 means as fast as the link */
};

struct gw_engine_config {
    uint32_t policy;              /* GW_POLICY_HOLD or GW_POLICY_DROP */
    uint32_t workers;             /* engine threads; QPs are spread by their CQ number */
    uint32_t max_qps;
    uint32_t max_cqs;
    uint32_t max_mrs;
    uint32_t idle_sleep_ns;       /* 0: spin without sleeping (lowest latency) */
    uint32_t copy_threads;        /* helpers that split large deliveries (gw_copy.h); 0: none */
    uint32_t copy_split_bytes;    /* deliveries this large are split; 0: GW_COPY_SPLIT_DEFAULT */
    /* An unsplit delivery of GW_COPY_STREAM_MIN to GW_CACHED_COPY_MAX bytes into a region
     * no longer than this is stored through the cache, not streamed: the region fits
     * the host's last-level cache, where its lines likely are. 0: every delivery of
     * GW_COPY_STREAM_MIN or more streams. */
    uint64_t cached_dst_max_bytes;
    /* Nonzero: worker i runs only on CPU thread_cpu[i], copy helper j only on CPU
     * thread_cpu[workers + j] (GW_MAX_WORKERS + GW_MAX_COPY_THREADS entries); zero: the
     * scheduler places every engine thread. */
    uint32_t pin_threads;
    uint16_t thread_cpu[96];
    struct gw_link_config link;
    void *cuda_context;           /* CUcontext for pulls from GPU memory; NULL: memcpy */
    const char *libcuda_path;     /* where to dlopen the CUDA driver when cuda_context is set */
    /* nic_pull's GPU-resident stand-in (gw_engine_set_pull_agent); zero: the copy engine */
    void *pull_ring;              /* pull_slots struct gw_pull_req, mapped host memory */
    void *pull_done;              /* pull_slots uint32 completion words, mapped host memory */
    uint32_t pull_slots;          /* power of two, at most 65536 */
    uint64_t pull_timeout_ns;     /* a pull not answered in this long fails (PULL_FAILED) */
};

/* One request to the pull agent (a persistent GPU block, gpuwrite.paths.pull_agent): copy
 * nbytes from GPU address src to host address dst. Ticket t uses slot t % pull_slots, on
 * lap t / pull_slots. Every 8-byte word carries the ticket or the lap, so the agent reads a
 * slot with plain 8-byte loads in one PCIe round trip and needs no ordering between them:
 * a word that still holds an older request's (or the zeros of a ring never used) is not
 * ready. Laps are tagged from 1, so zeroed memory never matches. The agent answers by a release store of the low 32
 * bits of t + 1 into done[slot]. */
struct gw_pull_req {
    uint64_t ticket_nbytes;       /* (t + 1) << 32 | nbytes */
    uint64_t tag_src;             /* ((t / pull_slots + 1) & 0xFFFF) << 48 | src */
    uint64_t tag_dst;             /* ((t / pull_slots + 1) & 0xFFFF) << 48 | dst */
    uint64_t pad;
};

enum {
    GW_PULL_STOP_BYTES = 0xFFFFFFFF,   /* a request of this size stops the agent */
    GW_PULL_ADDR_BITS = 48,
};

/* Everything the engine counts. Read at any time with gw_engine_read_counters. */
struct gw_counters {
    uint64_t doorbells;           /* doorbell-record advances seen */
    uint64_t wqes;                /* WQEs fetched */
    uint64_t cqes;                /* completions written (errors included) */
    uint64_t error_cqes;
    uint64_t msgs_delivered;
    uint64_t bytes_delivered;
    uint64_t bytes_pushed;        /* payload bytes that arrived in the staging region */
    uint64_t bytes_pulled;        /* payload bytes read from GPU memory (copy engine) */
    uint64_t bytes_host_read;     /* payload bytes read from host memory (host_staged) */
    uint64_t bytes_inline;        /* payload bytes carried inside WQEs */
    uint64_t held_msgs;           /* pushed messages waiting in the staging region now */
    uint64_t held_bytes;          /* their payload bytes now */
    uint64_t held_bytes_max;      /* the most ever held at once */
    uint64_t dropped_msgs;
    uint64_t dropped_bytes;
    uint64_t credit_stalls;       /* scheduler rounds where a message waited for link credits */
    uint64_t cq_full_stalls;      /* rounds where a completion waited for CQ space */
    uint64_t ring_overflows;
    uint64_t flushed_wqes;
    uint64_t link_packets;
    uint64_t link_busy_ns;        /* serialisation time of all packets sent */
    uint64_t credits_available;   /* link credits the sender holds now */
    uint64_t rx_occupied_blocks;  /* receiver buffer blocks in use now */
    uint64_t turnaround_ns;       /* summed over completions: doorbell seen to CQE written */
    uint64_t turnarounds;         /* completions in turnaround_ns */
    uint64_t copies_split;        /* deliveries the copy helpers shared (copy_split_bytes) */
    uint64_t copy_pieces;         /* pieces of those handed to helpers (the worker's own not) */
    uint64_t copy_pieces_late;    /* of them, copied by the worker: unclaimed when it came */
    uint64_t copy_wait_ns;        /* summed: the worker's own piece done to every piece done */
    uint64_t copies_cached;       /* deliveries stored through the cache (cached_dst_max_bytes) */
    uint64_t pull_agent_ns;       /* summed over pulls the agent answered: request posted to
                                   * answer seen by the engine (its round trip to the agent) */
    uint64_t pull_agent_answers;  /* pulls in pull_agent_ns */
};

struct gw_cq_desc {
    uint32_t cqn;
    uint32_t ncqe;                /* power of two */
    void *cqes;                   /* ncqe * 64 bytes, GPU-visible */
    void *dbrec;                  /* struct gw_cq_dbrec, GPU-visible */
};

struct gw_qp_desc {
    uint32_t qpn;
    uint32_t cqn;
    uint32_t sq_bbs;              /* send-queue size in 64-byte basic blocks, power of two */
    void *sq;                     /* sq_bbs * 64 bytes, GPU-visible */
    void *dbrec;                  /* struct gw_qp_dbrec, GPU-visible */
    void *status;                 /* struct gw_nic_status, GPU-visible */
    uint32_t staging_key;         /* lkey of this QP's staging region; 0 if none */
    uint32_t stage_slots;
    uint32_t stage_slot_bytes;
    uint64_t stage_addr;          /* address the GPU writes the staging region at */
    uint32_t flags;               /* GW_QP_F_* */
    uint32_t pd;                  /* protection domain number (gw_engine_add_mr's pd) */
};

enum {
    /* Publish no staging credits in the status line: the GPU counts them from its
     * completions, as it must with a real NIC, which has no such line. */
    GW_QP_F_STAGE_CREDITS_IN_CQE = 1,
};

/* Limits of the configuration and of registrations (Python checks the same values). */
enum {
    GW_RATE_MIN_KBPS = 1,             /* link and drain rates: 0 (none) or 1 kb/s ... */
    GW_RATE_MAX_GBPS = 100000,        /* ... to 100000 Gb/s, finite */
    GW_MAX_CREDIT_LATENCY_NS = 1000000000,
    GW_MAX_QPS = 65536,
    GW_MAX_WORKERS = 64,              /* gw_engine_config.workers */
    GW_MAX_COPY_THREADS = 32,     /* gw_engine_config.copy_threads */
    GW_COPY_SPLIT_MIN = 1024,         /* gw_engine_config.copy_split_bytes: 1 KiB ... */
    GW_COPY_SPLIT_MAX = 1073741824,   /* ... to 1 GiB */
    GW_COPY_SPLIT_DEFAULT = 32768,
    GW_COPY_STREAM_MIN = 4096,        /* deliveries this large stream (non-temporal stores) */
    GW_CACHED_COPY_MAX = 32768,       /* ... unless below this, into a region that fits the
                                       * cache (gw_engine_config.cached_dst_max_bytes) */
    GW_MAX_CPU = 1023,                /* gw_engine_config.thread_cpu: below CPU_SETSIZE */
    GW_MAX_MRS = 16777216,            /* a key is index << 8 | 8 random bits, 32 bits in all */
    GW_MAX_CQE = 4194304,             /* CQ entries (mlx5: log_max_cq_sz 22); the consumer
                                       * index has 24 bits, so a CQ of 2^24 never looks full */
    GW_ACCESS_ALL = 7,                /* every GW_ACCESS_* bit */
    /* gw_engine_add_mr's flags: host memory the GPU can store into at the same addresses
     * (pinned and mapped under unified addressing, or any memory where the GPU reaches
     * pageable memory). The pull agent writes a pull's bytes straight into its
     * destination; into other host memory the copy engine pulls (a GPU store to an
     * address it has no mapping for faults, and the fault ends the CUDA context). */
    GW_MR_GPU_MAPPED = 1,
    GW_MR_FLAGS_ALL = 1,
};

struct gw_engine *gw_engine_create(const struct gw_engine_config *config, char *err, size_t errlen);
int gw_engine_add_cq(struct gw_engine *engine, const struct gw_cq_desc *cq, char *err, size_t errlen);
int gw_engine_add_qp(struct gw_engine *engine, const struct gw_qp_desc *qp, char *err, size_t errlen);
/* A region of protection domain `pd`: a WQE's local segments (lkeys) must name regions
 * of its QP's domain, or it completes with a local protection error. */
int gw_engine_add_mr(struct gw_engine *engine, uint32_t key, uint64_t addr, uint64_t length,
                     uint32_t access, uint32_t mem_kind, uint32_t flags, uint32_t pd,
                     char *err, size_t errlen);
/* Returns once no engine thread can write into (or read from) the region again: WQEs
 * that still target it complete with a protection error. -1: unknown key; -2: an
 * engine thread did not answer in 10 s; -3: the pull agent has not answered a pull into
 * the region that timed out, and still may (for both, keep the memory alive). */
int gw_engine_remove_mr(struct gw_engine *engine, uint32_t key);
/* Destroys a QP: what was posted to it is flushed (IBV_WC_WR_FLUSH_ERR completions as
 * far as its CQ has room), then the engine never reads its rings again. Same codes. */
int gw_engine_remove_qp(struct gw_engine *engine, uint32_t qpn);
/* Frees a CQ number no QP uses any more; -1 if unknown or still in use. */
int gw_engine_remove_cq(struct gw_engine *engine, uint32_t cqn);
int gw_engine_start(struct gw_engine *engine, char *err, size_t errlen);
void gw_engine_stop(struct gw_engine *engine);
void gw_engine_destroy(struct gw_engine *engine);
/* Runs one pass of every worker in the caller's thread (engine not started): for tests. */
int gw_engine_poll(struct gw_engine *engine, uint32_t passes);
void gw_engine_read_counters(struct gw_engine *engine, struct gw_counters *out);
/* Pulls from GPU memory go to the agent serving ring/done (NULL ring: the copy engine
 * again). Call while no pull is in flight. */
int gw_engine_set_pull_agent(struct gw_engine *engine, void *ring, void *done, uint32_t slots,
                             uint64_t timeout_ns);
/* Pulls the agent left unanswered past the timeout (their WQEs failed with PULL_FAILED)
 * and has still not answered, whose destination meets [addr, addr + len); len 0: all.
 * While one is counted the agent may still write there. Detaching the agent (a NULL
 * ring) forgets them: detach only an agent that answered the stop request or ended. */
uint32_t gw_engine_late_pulls(struct gw_engine *engine, uint64_t addr, uint64_t len);
/* Posts the request that ends the agent's loop and waits for its answer; 0, or -1 if
 * none came within the pull timeout (the agent is gone or stuck). */
int gw_engine_stop_pull_agent(struct gw_engine *engine);
/* Pulls answered by the agent, and those that failed (timeout, refusal). */
uint64_t gw_engine_agent_pulls(struct gw_engine *engine, uint64_t *failed);
void gw_engine_set_receiver_stall(struct gw_engine *engine, int stalled);
int gw_engine_qp_reset(struct gw_engine *engine, uint32_t qpn);
int gw_engine_running(struct gw_engine *engine);
uint64_t gw_now_ns(void);
/* Host-side twins of the device's acquire/release accesses, for host-posted WQEs. */
uint32_t gw_load_acquire_u32(const void *addr);
void gw_store_release_u32(void *addr, uint32_t value);

/* The floor of every latency: a thread that answers each new value of *ping by storing
 * it to *pong (acquire load, release store), as a doorbell/completion pair would;
 * answer_delay_ns after it saw it (0: at once; more: a NIC that takes that long between
 * doorbell and completion, how the completion poll's phase moves latency), into `lines`
 * words GW_PONG_LINE_WORDS apart (each on a 128-byte line of its own; pong must hold
 * them), so that several GPU warps can each poll a line of their own (the floor with
 * several readers, gpuwrite bench). NULL if lines is not 1 to GW_PONG_MAX_LINES. */
struct gw_pong;
enum { GW_PONG_LINE_WORDS = 32, GW_PONG_MAX_LINES = 8 };
struct gw_pong *gw_pong_start(void *ping, void *pong, uint64_t answer_delay_ns, uint32_t lines);
void gw_pong_stop(struct gw_pong *pong);
/* The reverse trip: for k = 1..iters, stores k to *ping (release) and waits (acquire
 * loads) for *pong to hold k, rtt_ns[k - 1] the time from store to answer seen. The least
 * time in which a host thread playing the NIC hears back from the GPU, as nic_pull's
 * request to the GPU pull agent must. Returns the round trips answered: fewer than iters
 * if one took more than timeout_ns. */
uint32_t gw_ping_run(void *ping, void *pong, uint32_t iters, uint64_t timeout_ns,
                     uint64_t *rtt_ns);
