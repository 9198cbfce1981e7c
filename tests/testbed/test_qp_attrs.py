"""QP state-transition attributes against pyverbs' own objects (where pyverbs imports)."""
import pytest

from gpuwrite.backends.testbed import qp_attrs as qa
from gpuwrite.backends.testbed._pyverbs import PyverbsMissing, import_pyverbs

try:
    import_pyverbs()
except PyverbsMissing as exc:
    pytest.skip(f"pyverbs does not import here: {exc}", allow_module_level=True)

import pyverbs.enums as e  # noqa: E402
from pyverbs.addr import GID, AHAttr, GlobalRoute  # noqa: E402
from pyverbs.qp import QPAttr  # noqa: E402

GID_TEXT = "fe80:0000:0000:0000:0202:c9ff:fe00:0001"
QPATTR_FIELDS = ("qp_state", "path_mtu", "dest_qp_num", "rq_psn", "sq_psn", "max_dest_rd_atomic",
                 "max_rd_atomic", "min_rnr_timer", "timeout", "retry_cnt", "rnr_retry",
                 "port_num", "pkey_index", "qp_access_flags")
AH_FIELDS = ("dlid", "sl", "src_path_bits", "port_num", "is_global", "dgid", "sgid_index",
             "hop_limit", "traffic_class", "flow_label")


def test_constants_are_pyverbs_enums():
    for name in ("IBV_QP_STATE", "IBV_QP_ACCESS_FLAGS", "IBV_QP_PKEY_INDEX", "IBV_QP_PORT",
                 "IBV_QP_AV", "IBV_QP_PATH_MTU", "IBV_QP_TIMEOUT", "IBV_QP_RETRY_CNT",
                 "IBV_QP_RNR_RETRY", "IBV_QP_RQ_PSN", "IBV_QP_MAX_QP_RD_ATOMIC",
                 "IBV_QP_MIN_RNR_TIMER", "IBV_QP_SQ_PSN", "IBV_QP_MAX_DEST_RD_ATOMIC",
                 "IBV_QP_DEST_QPN", "IBV_QPS_INIT", "IBV_QPS_RTR", "IBV_QPS_RTS",
                 "IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ"):
        assert getattr(qa, name) == int(getattr(e, name)), name
    assert qa.MTU_CODES == {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024,
                            2048: e.IBV_MTU_2048, 4096: e.IBV_MTU_4096}


def test_masks_are_the_rc_sets_pyverbs_modifies_with():
    """pyverbs/qp.pyx QP._get_comp_mask, IBV_QPT_RC, | IBV_QP_STATE."""
    assert qa.INIT_MASK == e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS | e.IBV_QP_STATE
    assert qa.RTR_MASK == (e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                           | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER | e.IBV_QP_STATE)
    assert qa.RTS_MASK == (e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN
                           | e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_STATE)


def rdma_core_rc_attr(rqpn, rpsn, psn, port, gid_index, lid):
    """A QPAttr as rdma-core's tests/base.py RoCETrafficResources.to_rts builds it (its
    constants: PATH_MTU=IBV_MTU_1024, MAX_DEST_RD_ATOMIC=1, MAX_RD_ATOMIC=1,
    set_rnr_attributes: MIN_RNR_TIMER=12, TIMEOUT=14, RETRY_CNT=7, RNR_RETRY=7)."""
    attr = QPAttr(qp_state=e.IBV_QPS_RTR)
    attr.path_mtu = e.IBV_MTU_1024
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    attr.max_rd_atomic = 1
    gr = GlobalRoute(dgid=GID(GID_TEXT), sgid_index=gid_index)
    attr.ah_attr = AHAttr(port_num=port, is_global=1, gr=gr, dlid=lid)
    attr.dest_qp_num, attr.rq_psn, attr.sq_psn = rqpn, rpsn, psn
    return attr


def test_rtr_and_rts_sets_equal_rdma_cores_qpattr():
    conn = qa.QpConnection(remote_qpn=0x1A2B3C, remote_psn=0xABCDE, local_psn=0x12345, mtu_bytes=1024,
                           port_num=1, remote_lid=0x21, remote_gid=GID_TEXT, sgid_index=3,
                           hop_limit=1)   # GlobalRoute's default hop limit
    theirs = rdma_core_rc_attr(0x1A2B3C, 0xABCDE, 0x12345, 1, 3, 0x21)
    rtr, rtr_mask = qa.rtr_attrs(conn)
    rts, rts_mask = qa.rts_attrs(conn)
    for attrs, mask in ((rtr, rtr_mask), (rts, rts_mask)):
        ours = qa.to_pyverbs(attrs)
        for name, bit in (("path_mtu", e.IBV_QP_PATH_MTU), ("dest_qp_num", e.IBV_QP_DEST_QPN),
                          ("rq_psn", e.IBV_QP_RQ_PSN), ("max_dest_rd_atomic", e.IBV_QP_MAX_DEST_RD_ATOMIC),
                          ("min_rnr_timer", e.IBV_QP_MIN_RNR_TIMER), ("timeout", e.IBV_QP_TIMEOUT),
                          ("retry_cnt", e.IBV_QP_RETRY_CNT), ("rnr_retry", e.IBV_QP_RNR_RETRY),
                          ("sq_psn", e.IBV_QP_SQ_PSN), ("max_rd_atomic", e.IBV_QP_MAX_QP_RD_ATOMIC)):
            if mask & bit:      # each transition sets (and the NIC reads) only its masked fields
                assert getattr(ours, name) == getattr(theirs, name), name
        if mask & e.IBV_QP_AV:
            for name in AH_FIELDS:
                assert getattr(ours.ah_attr, name) == getattr(theirs.ah_attr, name), name
    assert rtr["qp_state"] == e.IBV_QPS_RTR and rts["qp_state"] == e.IBV_QPS_RTS


def test_init_set_and_lid_only_address_in_pyverbs():
    conn = qa.QpConnection(remote_qpn=5, remote_psn=6, local_psn=7, remote_lid=0x99, port_num=2)
    init = qa.to_pyverbs(qa.init_attrs(conn)[0])
    assert (init.qp_state, init.port_num, init.pkey_index) == (e.IBV_QPS_INIT, 2, 0)
    assert init.qp_access_flags == (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                                    | e.IBV_ACCESS_REMOTE_READ)
    rtr = qa.to_pyverbs(qa.rtr_attrs(conn)[0])
    assert (rtr.ah_attr.is_global, rtr.ah_attr.dlid, rtr.ah_attr.port_num, rtr.path_mtu) == \
        (0, 0x99, 2, e.IBV_MTU_4096)


def test_retry_timing_and_validation():
    assert qa.ack_timeout_ns(14) == pytest.approx(67.108864e6)
    assert qa.retry_exhausted_ns(14, 7) == pytest.approx(8 * 67.108864e6)
    with pytest.raises(ValueError, match="timeout=0"):
        qa.ack_timeout_ns(0)
    with pytest.raises(ValueError, match="remote_qpn=16777216"):
        qa.QpConnection(remote_qpn=1 << 24, remote_psn=0, local_psn=0, remote_lid=1)
    with pytest.raises(ValueError, match="unicast LID"):
        qa.QpConnection(remote_qpn=1, remote_psn=0, local_psn=0)
