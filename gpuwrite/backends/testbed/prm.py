"""The DevX command layouts testbed mode sends to an mlx5 NIC (ConnectX PRM).

A DevX command is a big-endian bit string. Each :class:`Layout` lists its fields in
order as ``(name, width in bits)`` or ``(name, Layout)``; nothing else states an offset.
The tables are transcribed from rdma-core's ``tests/mlx5_prm_structs.py`` (the scapy
classes its own DevX tests send: SwCqc, CreateCqIn, SwAds, SwQpc, CreateQpIn, ModifyQpIn
and their outputs), field for field with the same names; tests/testbed/test_prm.py packs
the same values with both and compares the bytes.

The command builders at the end take the ibverbs-level attribute sets of ``qp_attrs``
so that one description of a connection feeds both the DevX commands and pyverbs.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gpuwrite.backends.testbed import qp_attrs as qa

# Command opcodes (PRM; rdma-core tests/mlx5_prm_structs.py DevxOps).
MLX5_CMD_OP_CREATE_CQ = 0x400
MLX5_CMD_OP_CREATE_QP = 0x500
MLX5_CMD_OP_RST2INIT_QP = 0x502
MLX5_CMD_OP_INIT2RTR_QP = 0x503
MLX5_CMD_OP_RTR2RTS_QP = 0x504
MLX5_CMD_OP_2ERR_QP = 0x507
MLX5_CMD_OP_2RST_QP = 0x50A
MLX5_QPC_ST_RC = 0x0
MLX5_QPC_PM_STATE_MIGRATED = 0x3
MLX5_QPC_RQ_TYPE_ZERO_LEN = 0x3       # a QP with no receive queue (RDMA writes only)
# The QP's timestamp format. DEFAULT is what rdma-core's DevX tests set; Linux
# (mlx5_get_qp_default_ts, include/linux/mlx5/qp.h) sets FREE_RUNNING instead on a device
# whose RoCE caps lack qp_ts_format (older firmware), which may refuse DEFAULT.
MLX5_QPC_TS_FORMAT_FREE_RUNNING = 0x0
MLX5_QPC_TS_FORMAT_DEFAULT = 0x1
TS_FORMAT_NAMES = {MLX5_QPC_TS_FORMAT_FREE_RUNNING: "free-running",
                   MLX5_QPC_TS_FORMAT_DEFAULT: "default"}
MLX5_CQC_CQE_SZ_64 = 0x0
# log2 of the largest message: NVSHMEM's IBGDA_LOG_MAX_MSG_SIZE (ibgda.cpp: "30 is max
# allowed on IB QPs"), 1 GiB. rdma-core's DevX tests use 20 (1 MiB), too small for the
# bandwidth sweeps. ``log_msg_max`` lowers it to the port's ``max_msg_sz``.
LOG_MSG_MAX = 30
# RoCE v2 UDP source ports (Linux include/rdma/ib_verbs.h): IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
# is 0xC000; the flow label is 20 bits (IB_GRH_FLOWLABEL_MASK).
ROCE_V2_UDP_SPORT_MIN = 0xC000
GRH_FLOW_LABEL_MASK = 0xFFFFF

# Command status codes (rdma-core providers/mlx5/mlx5_ifc.h, MLX5_CMD_STAT_*); the first
# byte of every command output.
CMD_STATUS = {
    0x0: "ok", 0x1: "int_err", 0x2: "bad_op_err", 0x3: "bad_param_err",
    0x4: "bad_sys_state_err", 0x5: "bad_res_err", 0x6: "res_busy", 0x8: "lim_err",
    0x9: "bad_res_state_err", 0xA: "ix_err", 0xF: "no_res_err", 0x10: "bad_qp_state_err",
    0x30: "bad_pkt_err", 0x40: "bad_size_outs_cqes_err", 0x50: "bad_inp_len_err",
    0x51: "bad_outp_len_err",
}


@dataclass(frozen=True)
class Layout:
    """A PRM structure: fields in order, each a width in bits or a nested Layout."""

    name: str
    fields: tuple

    @cached_property
    def bits(self) -> int:
        return sum(f.bits if isinstance(f, Layout) else f for _, f in self.fields)

    @property
    def size_bytes(self) -> int:
        return self.bits // 8

    @cached_property
    def offsets(self) -> dict[str, tuple[int, int]]:
        """Dotted field name -> (bit offset from the first byte's top bit, width)."""
        out, here = {}, 0
        for name, f in self.fields:
            if isinstance(f, Layout):
                for sub, (off, width) in f.offsets.items():
                    out[f"{name}.{sub}"] = (here + off, width)
                here += f.bits
            else:
                out[name] = (here, f)
                here += f
        return out

    def pack(self, values: dict | None = None, **kwargs) -> bytes:
        """The bytes of this structure with ``values`` (nested dicts for nested layouts,
        or dotted names) and every other field zero."""
        flat = dict(_flatten(values or {}))
        flat.update(_flatten(kwargs))
        word = 0
        for name, value in flat.items():
            if name not in self.offsets:
                raise ValueError(f"{self.name} has no field {name!r}")
            off, width = self.offsets[name]
            value = int(value)
            if not 0 <= value < 1 << width:
                raise ValueError(f"{self.name}.{name}={value:#x} does not fit {width} bits")
            word |= value << (self.bits - off - width)
        return word.to_bytes(self.size_bytes, "big")

    def unpack(self, data: bytes) -> dict[str, int]:
        """Every field's value (dotted names), from the first ``size_bytes`` of ``data``."""
        if len(data) < self.size_bytes:
            raise ValueError(f"{self.name} needs {self.size_bytes} bytes; got {len(data)}")
        word = int.from_bytes(bytes(data[:self.size_bytes]), "big")
        return {name: (word >> (self.bits - off - width)) & ((1 << width) - 1)
                for name, (off, width) in self.offsets.items()}


def _flatten(values: dict, prefix: str = ""):
    for name, value in values.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def _bytes(n: int) -> int:
    return 8 * n


SW_CQC = Layout("cqc", (
    ("status", 4), ("as_notify", 1), ("initiator_src_dct", 1), ("dbr_umem_valid", 1),
    ("reserved1", 1), ("cqe_sz", 3), ("cc", 1), ("reserved2", 1),
    ("scqe_break_moderation_en", 1), ("oi", 1), ("cq_period_mode", 2),
    ("cqe_compression_en", 1), ("mini_cqe_res_format", 2), ("st", 4), ("reserved3", 8),
    ("dbr_umem_id", 32), ("reserved4", 20), ("page_offset", 6), ("reserved5", 6),
    ("reserved6", 3), ("log_cq_size", 5), ("uar_page", 24), ("reserved7", 4),
    ("cq_period", 12), ("cq_max_count", 16), ("reserved8", 24), ("c_eqn", 8),
    ("reserved9", 3), ("log_page_size", 5), ("reserved10", 24), ("reserved11", _bytes(4)),
    ("reserved12", 8), ("last_notified_index", 24), ("reserved13", 8),
    ("last_solicit_index", 24), ("reserved14", 8), ("consumer_counter", 24),
    ("reserved15", 8), ("producer_counter", 24), ("local_partition_id", 12),
    ("process_id", 20), ("reserved16", 16), ("thread_id", 16),
    ("db_record_addr_63_32", 32), ("db_record_addr_31_3", 29), ("reserved17", 3),
))

CREATE_CQ_IN = Layout("create_cq_in", (
    ("opcode", 16), ("uid", 16), ("reserved1", 16), ("op_mod", 16), ("reserved2", 8),
    ("cqn", 24), ("reserved3", _bytes(4)), ("sw_cqc", SW_CQC),
    ("e_mtt_pointer_or_cq_umem_offset", 64), ("cq_umem_id", 32), ("cq_umem_valid", 1),
    ("reserved4", 31), ("reserved5", _bytes(176)),
))

CREATE_CQ_OUT = Layout("create_cq_out", (
    ("status", 8), ("reserved1", 24), ("syndrome", 32), ("reserved2", 8), ("cqn", 24),
    ("reserved3", _bytes(4)),
))

SW_ADS = Layout("ads", (
    ("fl", 1), ("free_ar", 1), ("reserved1", 14), ("pkey_index", 16), ("reserved2", 8),
    ("grh", 1), ("mlid", 7), ("rlid", 16), ("ack_timeout", 5), ("reserved3", 3),
    ("src_addr_index", 8), ("log_rtm", 4), ("stat_rate", 4), ("hop_limit", 8),
    ("reserved4", 4), ("tclass", 8), ("flow_label", 20), ("rgid_rip", 128),
    ("reserved5", 4), ("f_dscp", 1), ("f_ecn", 1), ("reserved6", 1), ("f_eth_prio", 1),
    ("ecn", 2), ("dscp", 6), ("udp_sport", 16), ("dei_cfi_reserved_from_prm_041", 1),
    ("eth_prio", 3), ("sl", 4), ("vhca_port_num", 8), ("rmac", 48),
))

SW_QPC = Layout("qpc", (
    ("state", 4), ("lag_tx_port_affinity", 4), ("st", 8), ("reserved1", 3), ("pm_state", 2),
    ("reserved2", 1), ("req_e2e_credit_mode", 2), ("offload_type", 4),
    ("end_padding_mode", 2), ("reserved3", 2), ("wq_signature", 1), ("block_lb_mc", 1),
    ("atomic_like_write_en", 1), ("latency_sensitive", 1), ("dual_write", 1),
    ("drain_sigerr", 1), ("multi_path", 1), ("reserved4", 1), ("pd", 24), ("mtu", 3),
    ("log_msg_max", 5), ("reserved5", 1), ("log_rq_size", 4), ("log_rq_stride", 3),
    ("no_sq", 1), ("log_sq_size", 4), ("reserved6", 1), ("retry_mode", 2), ("ts_format", 2),
    ("data_in_order", 1), ("rlkey", 1), ("ulp_stateless_offload_mode", 4),
    ("counter_set_id", 8), ("uar_page", 24), ("send_dbr_mode", 2), ("reserved7", 1),
    ("full_handshake", 1), ("cnak_reverse_sl", 4), ("user_index", 24), ("reserved8", 3),
    ("log_page_size", 5), ("remote_qpn", 24), ("primary_address_path", SW_ADS),
    ("secondary_address_path", SW_ADS), ("log_ack_req_freq", 4), ("reserved9", 4),
    ("log_sra_max", 3), ("extended_rnr_retry_valid", 1), ("reserved10", 1),
    ("retry_count", 3), ("rnr_retry", 3), ("extended_retry_count_valid", 1), ("fre", 1),
    ("cur_rnr_retry", 3), ("cur_retry_count", 3), ("extended_log_rnr_retry", 5),
    ("extended_cur_rnr_retry", 16), ("packet_pacing_rate_limit_index", 16),
    ("reserved11", 8), ("next_send_psn", 24), ("reserved12", 8), ("cqn_snd", 24),
    ("reserved13", 8), ("deth_sqpn", 24), ("reserved14", 8), ("extended_retry_count", 8),
    ("reserved15", 8), ("extended_cur_retry_count", 8), ("reserved16", 8),
    ("last_acked_psn", 24), ("reserved17", 8), ("ssn", 24), ("reserved18", 8),
    ("log_rra_max", 3), ("reserved19", 1), ("atomic_mode", 4), ("rre", 1), ("rwe", 1),
    ("rae", 1), ("reserved20", 1), ("page_offset", 6), ("reserved21", 3),
    ("cd_slave_receive", 1), ("cd_slave_send", 1), ("cd_master", 1), ("reserved22", 3),
    ("min_rnr_nak", 5), ("next_rcv_psn", 24), ("reserved23", 8), ("xrcd", 24),
    ("reserved24", 8), ("cqn_rcv", 24), ("dbr_addr", 64), ("q_key", 32), ("reserved25", 5),
    ("rq_type", 3), ("srqn_rmpn_xrqn", 24), ("reserved26", 8), ("rmsn", 24),
    ("hw_sq_wqebb_counter", 16), ("sw_sq_wqebb_counter", 16), ("hw_rq_counter", 32),
    ("sw_rq_counter", 32), ("reserved27", 8), ("roce_adp_retrans_rtt", 24),
    ("reserved28", 15), ("cgs", 1), ("cs_req", 8), ("cs_res", 8), ("dc_access_key", 64),
    ("rdma_active", 1), ("comm_est", 1), ("suspended", 1), ("dbr_umem_valid", 1),
    ("reserved29", 4), ("send_msg_psn", 24), ("reserved30", 8), ("rcv_msg_psn", 24),
    ("rdma_va", 64), ("rdma_key", 32), ("dbr_umem_id", 32),
))

CREATE_QP_IN = Layout("create_qp_in", (
    ("opcode", 16), ("uid", 16), ("reserved1", 16), ("op_mod", 16), ("reserved2", 8),
    ("input_qpn", 24), ("reserved3", 1), ("cmd_on_behalf", 1), ("reserved4", 14),
    ("vhca_id", 16), ("opt_param_mask", 32), ("reserved5", _bytes(4)), ("sw_qpc", SW_QPC),
    ("e_mtt_pointer_or_wq_umem_offset", 64), ("wq_umem_id", 32), ("wq_umem_valid", 1),
    ("reserved6", 31),
))

CREATE_QP_OUT = Layout("create_qp_out", (
    ("status", 8), ("reserved1", 24), ("syndrome", 32), ("reserved2", 8), ("qpn", 24),
    ("reserved3", _bytes(4)),
))

MODIFY_QP_IN = Layout("modify_qp_in", (
    ("opcode", 16), ("uid", 16), ("vhca_tunnel_id", 16), ("op_mod", 16), ("reserved2", 8),
    ("qpn", 24), ("reserved3", 32), ("opt_param_mask", 32), ("ece", 32), ("sw_qpc", SW_QPC),
    ("reserved4", _bytes(16)),
))

MODIFY_QP_OUT = Layout("modify_qp_out", (
    ("status", 8), ("reserved1", 24), ("syndrome", 32), ("reserved2", _bytes(8)),
))


class DevxCommandError(RuntimeError):
    """The NIC refused a DevX command: the message names it, its status and syndrome."""

    def __init__(self, message: str, status: int = 0, syndrome: int = 0):
        super().__init__(message)
        self.status, self.syndrome = status, syndrome


def check_output(layout: Layout, out: bytes, what: str) -> dict:
    """Decodes a command output; raises DevxCommandError unless its status is ok."""
    fields = layout.unpack(out)
    if fields["status"]:
        raise DevxCommandError(f"{what}: status {CMD_STATUS.get(fields['status'], hex(fields['status']))}"
                               f" (0x{fields['status']:x}), syndrome 0x{fields['syndrome']:08x}",
                               fields["status"], fields["syndrome"])
    return fields


def gid_to_int(gid: str) -> int:
    """'fe80:0000:...:0001' (8 groups, as pyverbs prints GIDs) -> a 128-bit integer."""
    groups = gid.split(":")
    if len(groups) != 8:
        raise ValueError(f"GID {gid!r}: expected 8 colon-separated groups of 4 hex digits")
    return int("".join(g.zfill(4) for g in groups), 16)


def mac_to_int(mac: str) -> int:
    parts = mac.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"MAC {mac!r}: expected 6 colon-separated bytes")
    value = int("".join(parts), 16)
    if value == 0:
        raise ValueError(f"MAC {mac!r}: the zero address reaches no port")
    return value


def log_msg_max(port_max_msg_bytes: int | None) -> int:
    """The QPC's log_msg_max: LOG_MSG_MAX, or less where the port's max_msg_sz is smaller."""
    if port_max_msg_bytes is None or port_max_msg_bytes <= 0:
        return LOG_MSG_MAX
    return min(LOG_MSG_MAX, port_max_msg_bytes.bit_length() - 1)


def roce_v2_udp_sport(local_qpn: int, remote_qpn: int) -> int:
    """A RoCE v2 UDP source port for a QP pair, as the Linux kernel picks one for a verbs QP
    without a flow label: ``rdma_calc_flow_label`` (a hash of both QP numbers) folded by
    ``rdma_flow_label_to_udp_sport`` into 0xC000..0xFFFF. Port 0 would give every QP the
    same ECMP hash, and some switches drop it; distinct QP pairs get distinct ports."""
    v = local_qpn * remote_qpn
    v ^= v >> 20
    v ^= v >> 40
    label = v & GRH_FLOW_LABEL_MASK
    low = (label & 0x3FFF) ^ ((label & 0xFC000) >> 14)
    return low | ROCE_V2_UDP_SPORT_MIN


def log2_ceil(n: int) -> int:
    """The PRM's log fields for counts (log_rra_max, log_sra_max): ceil(log2(n))."""
    if n < 1:
        raise ValueError(f"{n}: must be at least 1")
    return (n - 1).bit_length()


# --- the commands testbed mode sends -----------------------------------------------------

def create_cq_in(*, log_cq_size: int, uar_page: int, eqn: int, umem_id: int, umem_offset: int,
                 dbr_umem_id: int, dbr_offset: int) -> bytes:
    """A CQ of 64-byte CQEs whose ring and doorbell record live in registered UMEMs."""
    if dbr_offset % 8:
        raise ValueError(f"dbr_offset={dbr_offset}: a doorbell record is 8-byte aligned")
    return CREATE_CQ_IN.pack(
        opcode=MLX5_CMD_OP_CREATE_CQ, cq_umem_valid=1, cq_umem_id=umem_id,
        e_mtt_pointer_or_cq_umem_offset=umem_offset,
        sw_cqc={"cqe_sz": MLX5_CQC_CQE_SZ_64, "log_cq_size": log_cq_size, "uar_page": uar_page,
                "c_eqn": eqn, "dbr_umem_valid": 1, "dbr_umem_id": dbr_umem_id,
                "db_record_addr_63_32": dbr_offset >> 32,
                "db_record_addr_31_3": (dbr_offset & 0xFFFFFFFF) >> 3})


def create_qp_in(*, pdn: int, cqn: int, uar_page: int, log_sq_size: int, umem_id: int,
                 umem_offset: int, dbr_umem_id: int, dbr_offset: int,
                 ts_format: int = MLX5_QPC_TS_FORMAT_DEFAULT) -> bytes:
    """An RC QP with a send queue only (zero-length RQ: the peer only RDMA-writes)."""
    return CREATE_QP_IN.pack(
        opcode=MLX5_CMD_OP_CREATE_QP, wq_umem_valid=1, wq_umem_id=umem_id,
        e_mtt_pointer_or_wq_umem_offset=umem_offset,
        sw_qpc={"st": MLX5_QPC_ST_RC, "pm_state": MLX5_QPC_PM_STATE_MIGRATED, "pd": pdn,
                "log_sq_size": log_sq_size, "rq_type": MLX5_QPC_RQ_TYPE_ZERO_LEN,
                "ts_format": ts_format, "uar_page": uar_page,
                "cqn_snd": cqn, "cqn_rcv": cqn, "dbr_umem_valid": 1,
                "dbr_umem_id": dbr_umem_id, "dbr_addr": dbr_offset})


def rst2init_in(qpn: int, attrs: dict) -> bytes:
    """RESET -> INIT from ``qp_attrs.init_attrs``."""
    access = attrs["qp_access_flags"]
    return MODIFY_QP_IN.pack(opcode=MLX5_CMD_OP_RST2INIT_QP, qpn=qpn, sw_qpc={
        "rwe": int(bool(access & qa.IBV_ACCESS_REMOTE_WRITE)),
        "rre": int(bool(access & qa.IBV_ACCESS_REMOTE_READ)),
        "primary_address_path": {"vhca_port_num": attrs["port_num"],
                                 "pkey_index": attrs["pkey_index"]}})


def init2rtr_in(qpn: int, attrs: dict, remote_mac: str | None = None, *, udp_sport: int = 0,
                max_msg_log: int = LOG_MSG_MAX) -> bytes:
    """INIT -> RTR from ``qp_attrs.rtr_attrs``; ``remote_mac`` (next hop) for RoCE;
    ``udp_sport`` for RoCE v2 only (rdma-core tests/mlx5_base.py: "UDP sport must be
    reserved for roce v1 and v1.5"), so a non-zero ``udp_sport`` marks a RoCE v2 path.

    The address path is filled as the Linux kernel's ``mlx5_set_path``
    (drivers/infiniband/hw/mlx5/qp.c) fills ``struct mlx5_ifc_ads_bits`` for a verbs QP:
    on InfiniBand ``rlid``, ``sl`` and ``grh`` (set where a GRH is used); on RoCE
    (``remote_mac`` given) ``rmac``, the SL in ``eth_prio`` (3 bits; ``sl`` and ``grh``
    stay zero, as does ``rlid``) and, for RoCE v2, ``dscp = traffic_class >> 2``. A RoCE
    path must carry a GRH (mlx5_set_path returns -EINVAL otherwise). The GRH fields
    (``src_addr_index``, ``hop_limit``, ``tclass``, ``flow_label``, ``rgid_rip``) are set
    on both link layers."""
    ah = attrs["ah_attr"]
    path = {"vhca_port_num": ah["port_num"]}
    roce = remote_mac is not None
    if roce:
        if not ah["is_global"]:
            raise ValueError("a RoCE path needs a GRH (the peer's GID)")
        path["rmac"] = mac_to_int(remote_mac)
        path["eth_prio"] = ah["sl"]
        if udp_sport:
            path["udp_sport"] = udp_sport
            path["dscp"] = ah["grh"]["traffic_class"] >> 2
    else:
        if udp_sport:
            raise ValueError("udp_sport is for RoCE v2 paths only (no remote_mac given)")
        path.update(rlid=ah["dlid"], sl=ah["sl"], grh=int(bool(ah["is_global"])))
    if ah["is_global"]:
        grh = ah["grh"]
        path.update(rgid_rip=gid_to_int(grh["dgid"]), src_addr_index=grh["sgid_index"],
                    hop_limit=grh["hop_limit"], tclass=grh["traffic_class"],
                    flow_label=grh["flow_label"])
    return MODIFY_QP_IN.pack(opcode=MLX5_CMD_OP_INIT2RTR_QP, qpn=qpn, sw_qpc={
        "mtu": attrs["path_mtu"], "log_msg_max": max_msg_log, "remote_qpn": attrs["dest_qp_num"],
        "next_rcv_psn": attrs["rq_psn"], "min_rnr_nak": attrs["min_rnr_timer"],
        "log_rra_max": log2_ceil(attrs["max_dest_rd_atomic"]), "primary_address_path": path})


def rtr2rts_in(qpn: int, attrs: dict, port_num: int) -> bytes:
    """RTR -> RTS from ``qp_attrs.rts_attrs``."""
    return MODIFY_QP_IN.pack(opcode=MLX5_CMD_OP_RTR2RTS_QP, qpn=qpn, sw_qpc={
        "retry_count": attrs["retry_cnt"], "rnr_retry": attrs["rnr_retry"],
        "next_send_psn": attrs["sq_psn"], "log_sra_max": log2_ceil(attrs["max_rd_atomic"]),
        "primary_address_path": {"vhca_port_num": port_num, "ack_timeout": attrs["timeout"]}})
