"""The attributes that take an RC queue pair from RESET to RTS, as ibverbs names them.

One place says what a testbed QP is connected with: :class:`QpConnection` (the peer's
QP number and PSN, its LID/GID, the MTU, the retry policy). ``init_attrs``,
``rtr_attrs`` and ``rts_attrs`` give each transition's ``struct ibv_qp_attr`` fields and
``attr_mask`` (the same sets pyverbs' ``QP.to_init/to_rtr/to_rts`` use for RC);
``devx.py`` turns them into the PRM's QP context fields for DevX modify commands, and
``to_pyverbs`` into pyverbs ``QPAttr`` objects (the tests compare the two).

Defaults are those of rdma-core's pyverbs tests (tests/base.py: TIMEOUT 14, RETRY_CNT 7,
RNR_RETRY 7, MIN_RNR_TIMER 12, MAX_RD_ATOMIC 1, MAX_DEST_RD_ATOMIC 1).
"""
from __future__ import annotations

from dataclasses import dataclass

# enum ibv_qp_state (rdma-core libibverbs/verbs.h)
IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS = 0, 1, 2, 3
# enum ibv_qp_attr_mask (verbs.h)
IBV_QP_STATE = 1 << 0
IBV_QP_ACCESS_FLAGS = 1 << 3
IBV_QP_PKEY_INDEX = 1 << 4
IBV_QP_PORT = 1 << 5
IBV_QP_AV = 1 << 7
IBV_QP_PATH_MTU = 1 << 8
IBV_QP_TIMEOUT = 1 << 9
IBV_QP_RETRY_CNT = 1 << 10
IBV_QP_RNR_RETRY = 1 << 11
IBV_QP_RQ_PSN = 1 << 12
IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13
IBV_QP_MIN_RNR_TIMER = 1 << 15
IBV_QP_SQ_PSN = 1 << 16
IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17
IBV_QP_DEST_QPN = 1 << 20
# enum ibv_access_flags (verbs.h)
IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ = 1, 2, 4
# enum ibv_mtu (verbs.h): IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5; the PRM's QPC mtu field
# uses the same codes.
MTU_CODES = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}

INIT_MASK = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
RTR_MASK = (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
RTS_MASK = (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC)

# InfiniBand Architecture Specification vol. 1, 9.7.6.1.3: the local ACK timeout is
# 4.096 us * 2^timeout (timeout 0 means infinite).
ACK_TIMEOUT_UNIT_NS = 4096.0


def ack_timeout_ns(timeout: int) -> float:
    """Time the requester waits for an ACK before retrying (``timeout`` 1..31)."""
    if not 1 <= timeout <= 31:
        raise ValueError(f"timeout={timeout}: allowed 1 to 31 (0 would wait forever)")
    return ACK_TIMEOUT_UNIT_NS * (1 << timeout)


def retry_exhausted_ns(timeout: int, retry_cnt: int) -> float:
    """Longest time before a silent peer turns into a ``transport_retry_exc_err`` CQE:
    the first try and ``retry_cnt`` retries, each waiting one ACK timeout."""
    return ack_timeout_ns(timeout) * (retry_cnt + 1)


@dataclass(frozen=True)
class QpConnection:
    """Everything one RC QP needs to reach RTS, our side and the peer's."""

    remote_qpn: int
    remote_psn: int           # the peer's first send PSN: our receive PSN
    local_psn: int            # our first send PSN
    mtu_bytes: int = 4096
    port_num: int = 1
    remote_lid: int = 0
    remote_gid: str | None = None   # set: a GRH is used (RoCE always, IB across subnets)
    sgid_index: int = 0
    hop_limit: int = 64       # rdma-core tests' PacketConsts.TTL_HOP_LIMIT
    traffic_class: int = 0
    sl: int = 0
    remote_mac: str | None = None   # RoCE: the next hop's MAC (devx.TestbedNic.next_hop_mac)
    access_flags: int = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ
    timeout: int = 14
    retry_cnt: int = 7
    rnr_retry: int = 7
    min_rnr_timer: int = 12
    max_rd_atomic: int = 1
    max_dest_rd_atomic: int = 1

    def __post_init__(self):
        for name in ("remote_qpn", "remote_psn", "local_psn"):
            value = getattr(self, name)
            if not 0 <= value < 1 << 24:
                raise ValueError(f"{name}={value}: must fit 24 bits")
        if self.mtu_bytes not in MTU_CODES:
            raise ValueError(f"mtu_bytes={self.mtu_bytes}: allowed {', '.join(map(str, MTU_CODES))}")
        ack_timeout_ns(self.timeout)
        for name, high in (("retry_cnt", 7), ("rnr_retry", 7), ("min_rnr_timer", 31), ("sl", 15)):
            if not 0 <= getattr(self, name) <= high:
                raise ValueError(f"{name}={getattr(self, name)}: allowed 0 to {high}")
        if self.remote_gid is None and not 0 < self.remote_lid < 0xC000:
            raise ValueError(f"remote_lid={self.remote_lid}: without a GID the peer needs a "
                             "unicast LID (1 to 0xbfff)")

    @property
    def is_global(self) -> bool:
        return self.remote_gid is not None


def init_attrs(c: QpConnection) -> tuple[dict, int]:
    """RESET -> INIT: port, P_Key index, remote access rights."""
    return ({"qp_state": IBV_QPS_INIT, "pkey_index": 0, "port_num": c.port_num,
             "qp_access_flags": c.access_flags}, INIT_MASK)


def ah_attr(c: QpConnection) -> dict:
    """The address vector of the peer (``struct ibv_ah_attr``)."""
    ah = {"dlid": c.remote_lid, "sl": c.sl, "src_path_bits": 0, "port_num": c.port_num,
          "is_global": int(c.is_global)}
    if c.is_global:
        ah["grh"] = {"dgid": c.remote_gid, "sgid_index": c.sgid_index, "hop_limit": c.hop_limit,
                     "traffic_class": c.traffic_class, "flow_label": 0}
    return ah


def rtr_attrs(c: QpConnection) -> tuple[dict, int]:
    """INIT -> RTR: the peer's address, QP number and PSN; MTU; responder resources."""
    return ({"qp_state": IBV_QPS_RTR, "path_mtu": MTU_CODES[c.mtu_bytes],
             "dest_qp_num": c.remote_qpn, "rq_psn": c.remote_psn,
             "max_dest_rd_atomic": c.max_dest_rd_atomic, "min_rnr_timer": c.min_rnr_timer,
             "ah_attr": ah_attr(c)}, RTR_MASK)


def rts_attrs(c: QpConnection) -> tuple[dict, int]:
    """RTR -> RTS: our send PSN and the retry policy (how soon a dead peer is an error)."""
    return ({"qp_state": IBV_QPS_RTS, "timeout": c.timeout, "retry_cnt": c.retry_cnt,
             "rnr_retry": c.rnr_retry, "sq_psn": c.local_psn, "max_rd_atomic": c.max_rd_atomic},
            RTS_MASK)


def to_pyverbs(attrs: dict):
    """A pyverbs ``QPAttr`` holding ``attrs`` (needs pyverbs; no device)."""
    from pyverbs.addr import GID, AHAttr, GlobalRoute
    from pyverbs.qp import QPAttr

    qp_attr = QPAttr(qp_state=attrs["qp_state"])
    for name, value in attrs.items():
        if name == "ah_attr":
            kwargs = {k: v for k, v in value.items() if k != "grh"}
            if "grh" in value:
                grh = value["grh"]
                kwargs["gr"] = GlobalRoute(dgid=GID(grh["dgid"]), sgid_index=grh["sgid_index"],
                                           hop_limit=grh["hop_limit"],
                                           traffic_class=grh["traffic_class"],
                                           flow_label=grh["flow_label"])
            qp_attr.ah_attr = AHAttr(**kwargs)
        elif name != "qp_state":
            setattr(qp_attr, name, value)
    return qp_attr
