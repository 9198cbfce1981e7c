/*
 * gw_layouts.h: every byte layout shared by the GPU, the NIC and the host.
 *
 * This header is the single source of truth. The software NIC engine (gw_engine.c and
 * the files beside it, through gw_engine_internal.h) includes it; Python derives its
 * numpy dtypes and field offsets from it through cffi (gpuwrite/layouts.py), and the
 * device verbs take their offsets from there.
 *
 * Work-queue and completion layouts follow the mlx5 definitions (rdma-core,
 * providers/mlx5/mlx5dv.h and the ConnectX PRM): 64-byte send WQE basic blocks made of
 * 16-byte segments, 64-byte CQEs, big-endian fields. Big-endian fields have their own
 * wrapper types (gw_be16/32/64) so that C code cannot use one as a native integer by
 * accident, and so that the Python side can tell them apart when it builds dtypes.
 *
 * This file is parsed by cffi's cdef as well as compiled: keep it free of macros with
 * arguments, of #include and of static inline code. Constants are enums.
 */

typedef struct { uint16_t be; } gw_be16;
typedef struct { uint32_t be; } gw_be32;
typedef struct { uint64_t be; } gw_be64;

enum {
    GW_SEND_WQE_BB = 64,          /* mlx5: MLX5_SEND_WQE_BB, one basic block */
    GW_SEND_WQE_DS = 16,          /* mlx5: MLX5_SEND_WQE_DS, one data segment unit */
    GW_CQE_SIZE = 64,             /* mlx5: struct mlx5_cqe64 */
    GW_MAX_WQE_BBS = 8,           /* gpuwrite: a WQE spans at most 8 BBs (512 bytes) */
    GW_MAX_WQE_DS = 32,           /* = GW_MAX_WQE_BBS * GW_SEND_WQE_BB / GW_SEND_WQE_DS */
    GW_INLINE_SEG_FLAG = 0x80000000,  /* mlx5: MLX5_INLINE_SEG, in byte_count */
    GW_MAX_INLINE_BYTES = 476,    /* 512 - ctrl 16 - raddr 16 - inline header 4 */
    GW_CREDIT_BLOCK_BYTES = 64,   /* InfiniBand link-level flow-control credit block */
};

/* WQE opcodes (mlx5: MLX5_OPCODE_*). */
enum {
    GW_OPCODE_NOP = 0x00,
    GW_OPCODE_RDMA_WRITE = 0x08,
    GW_OPCODE_RDMA_WRITE_IMM = 0x09,
    GW_OPCODE_SEND = 0x0a,
};

/* fm_ce_se bits (mlx5: MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_SOLICITED, fence). */
enum {
    GW_WQE_CTRL_CQ_UPDATE = 0x08,
    GW_WQE_CTRL_SOLICITED = 0x02,
    GW_WQE_CTRL_FENCE = 0x80,
};

/* Control segment: the first 16 bytes of every WQE (mlx5: struct mlx5_wqe_ctrl_seg). */
struct gw_wqe_ctrl_seg {
    gw_be32 opmod_idx_opcode;     /* opmod << 24 | wqe index << 8 | opcode */
    gw_be32 qpn_ds;               /* qpn << 8 | number of 16-byte segments */
    uint8_t signature;
    uint8_t dci_stream_channel_id[2];  /* big-endian; mlx5 packs it at byte 9 */
    uint8_t fm_ce_se;
    gw_be32 imm;                  /* immediate data, already big-endian */
};

/* Remote-address segment (mlx5: struct mlx5_wqe_raddr_seg). */
struct gw_wqe_raddr_seg {
    gw_be64 raddr;
    gw_be32 rkey;
    gw_be32 reserved;
};

/* Data (scatter/gather) segment (mlx5: struct mlx5_wqe_data_seg). */
struct gw_wqe_data_seg {
    gw_be32 byte_count;
    gw_be32 lkey;
    gw_be64 addr;
};

/* Inline segment header (mlx5: struct mlx5_wqe_inline_seg); payload bytes follow it. */
struct gw_wqe_inline_seg {
    gw_be32 byte_count;           /* length | GW_INLINE_SEG_FLAG */
};

/* One 64-byte send WQE basic block, seen as the segments of an RDMA write. */
struct gw_wqe_rdma_write {
    struct gw_wqe_ctrl_seg ctrl;
    struct gw_wqe_raddr_seg raddr;
    struct gw_wqe_data_seg data;
    uint8_t pad[16];
};

/* CQE opcodes, in the high nibble of op_own (mlx5: MLX5_CQE_*). */
enum {
    GW_CQE_REQ = 0x0,
    GW_CQE_RESP_WR_IMM = 0x1,
    GW_CQE_REQ_ERR = 0xd,
    GW_CQE_RESP_ERR = 0xe,
    GW_CQE_INVALID = 0xf,
};

/*
 * Error syndromes (mlx5: MLX5_CQE_SYNDROME_*, every one mlx5dv.h names; the test
 * tests/testbed/test_cqe.py checks each value against the installed mlx5dv.h).
 */
enum {
    GW_SYND_LOCAL_LENGTH_ERR = 0x01,
    GW_SYND_LOCAL_QP_OP_ERR = 0x02,
    GW_SYND_LOCAL_PROT_ERR = 0x04,
    GW_SYND_WR_FLUSH_ERR = 0x05,
    GW_SYND_MW_BIND_ERR = 0x06,
    GW_SYND_BAD_RESP_ERR = 0x10,
    GW_SYND_LOCAL_ACCESS_ERR = 0x11,
    GW_SYND_REMOTE_INVAL_REQ_ERR = 0x12,
    GW_SYND_REMOTE_ACCESS_ERR = 0x13,
    GW_SYND_REMOTE_OP_ERR = 0x14,
    GW_SYND_TRANSPORT_RETRY_EXC_ERR = 0x15,
    GW_SYND_RNR_RETRY_EXC_ERR = 0x16,
    GW_SYND_REMOTE_ABORTED_ERR = 0x22,
};

/*
 * gpuwrite's reason for an error completion, carried in vendor_err_synd. The mlx5
 * syndrome says the class (remote access, local protection...); the reason says which
 * check failed, so a test or a researcher can tell a bad rkey from an out-of-bounds write.
 */
enum {
    GW_REASON_NONE = 0,
    GW_REASON_BAD_RKEY = 1,
    GW_REASON_REMOTE_BOUNDS = 2,
    GW_REASON_REMOTE_ACCESS = 3,
    GW_REASON_BAD_LKEY = 4,
    GW_REASON_LOCAL_BOUNDS = 5,
    GW_REASON_BAD_OPCODE = 6,
    GW_REASON_BAD_DS = 7,
    GW_REASON_RING_OVERFLOW = 8,
    GW_REASON_BAD_QPN = 9,
    GW_REASON_BAD_WQE_INDEX = 10,
    GW_REASON_BAD_STAGING = 11,
    GW_REASON_LENGTH = 12,
    GW_REASON_DROPPED = 13,
    GW_REASON_FLUSHED = 14,
    GW_REASON_PULL_FAILED = 15,
    GW_REASON_UNSUPPORTED = 16,
    GW_REASON_RKEY_INVALIDATED = 17,  /* destination deregistered while the WQE was in flight */
    GW_REASON_LKEY_INVALIDATED = 18,  /* a source region likewise */
};

/* Requester completion (mlx5: struct mlx5_cqe64, fields gpuwrite uses named). */
struct gw_cqe64 {
    uint8_t rsvd0[32];
    gw_be32 srqn_uidx;
    gw_be32 imm_inval_pkey;
    uint8_t app;
    uint8_t app_op;
    gw_be16 app_info;
    gw_be32 byte_cnt;             /* bytes the WQE moved */
    gw_be64 timestamp;            /* engine clock, ns, when the completion was written */
    gw_be32 sop_drop_qpn;         /* qpn in the low 24 bits */
    gw_be16 wqe_counter;          /* index of the completed WQE's first BB */
    uint8_t signature;
    uint8_t op_own;               /* opcode << 4 | owner bit */
};

/* Error completion, the same 64 bytes seen as mlx5: struct mlx5_err_cqe. */
struct gw_err_cqe {
    uint8_t rsvd0[32];
    gw_be32 srqn;
    uint8_t rsvd1[16];
    uint8_t hw_err_synd;
    uint8_t hw_synd_type;
    uint8_t vendor_err_synd;      /* gpuwrite: a GW_REASON_* */
    uint8_t syndrome;             /* a GW_SYND_* */
    gw_be32 s_wqe_opcode_qpn;     /* failed WQE's opcode << 24 | qpn */
    gw_be16 wqe_counter;
    uint8_t signature;
    uint8_t op_own;
};

/* QP doorbell record (mlx5: dbrec[MLX5_RCV_DBR], dbrec[MLX5_SND_DBR]). */
struct gw_qp_dbrec {
    gw_be32 recv_counter;
    gw_be32 send_counter;         /* producer index in BBs, low 16 bits */
};

/* CQ doorbell record (mlx5: dbrec[MLX5_CQ_SET_CI], dbrec[MLX5_CQ_ARM_DB]). */
struct gw_cq_dbrec {
    gw_be32 set_ci;               /* consumer index, low 24 bits */
    gw_be32 arm_sn_ci;
};

/*
 * Staging-slot header: 16 bytes in front of every gpu_push message in the staging
 * region (gpuwrite's own, little-endian: only GPU and NIC engine read it). The data
 * segment of the WQE points at the payload that follows this header.
 *
 * A small message's header starts its first slot, so header and payload share one
 * 128-byte line. A message of GW_STAGE_ALIGN_MIN_BYTES or more (in slots that are a
 * multiple of 128 bytes) is GW_STAGE_F_ALIGNED: its header ends at byte 128 of the slot,
 * so the payload starts on a 128-byte boundary and every full-warp store of it is one
 * whole-line PCIe write rather than two partial ones.
 */
enum {
    GW_STAGE_MAGIC = 0x47570000,  /* "GW" in the high half, sequence in the low half */
    GW_STAGE_HDR_BYTES = 16,
    GW_STAGE_ALIGN_BYTES = 128,
    GW_STAGE_ALIGN_MIN_BYTES = 512,
    GW_STAGE_F_ALIGNED = 1,       /* header at slot + 112, payload at slot + 128 */
};
struct gw_stage_hdr {
    uint32_t magic_seq;           /* GW_STAGE_MAGIC | (message sequence & 0xffff) */
    uint32_t byte_count;          /* payload bytes after the header */
    uint32_t slots;               /* slots this message holds, wrap padding included */
    uint16_t wqe_index;           /* BB index of the WQE that sends it */
    uint16_t flags;               /* GW_STAGE_F_* */
};

/*
 * Words the NIC publishes to the GPU for each QP (GPU-visible memory). The GPU reads
 * them with ld.acquire.sys; the NIC writes them with release stores.
 */
struct gw_nic_status {
    uint32_t stage_freed;         /* staging slots returned to the GPU, cumulative */
    uint32_t sq_consumed;         /* BBs the NIC has fetched, cumulative */
    uint32_t qp_state;            /* a GW_QPS_* */
    uint32_t pad[13];             /* one 64-byte line per QP */
};

enum {
    GW_QPS_RESET = 0,
    GW_QPS_RTS = 3,
    GW_QPS_ERR = 6,
};

/* Memory-region access flags (ibverbs: IBV_ACCESS_*). */
enum {
    GW_ACCESS_LOCAL_WRITE = 1,
    GW_ACCESS_REMOTE_WRITE = 2,
    GW_ACCESS_REMOTE_READ = 4,
};

/* Where a registered region lives, which decides how the NIC engine reads it. */
enum {
    GW_MEM_HOST = 0,              /* host memory: the engine reads and writes it directly */
    GW_MEM_DEVICE = 1,            /* GPU memory: the engine pulls it through the copy engine */
    GW_MEM_STAGING = 2,           /* the NIC's staging region (push paths) */
};

/* Policies for pushed data that finds no link credits. */
enum {
    GW_POLICY_HOLD = 0,
    GW_POLICY_DROP = 1,
};
