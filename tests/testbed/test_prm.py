"""DevX command bytes: gpuwrite's PRM layouts against rdma-core's own scapy classes.

rdma-core's DevX tests (tests/mlx5_base.py) build these commands with the scapy classes
of tests/mlx5_prm_structs.py. That file is read from an rdma-core checkout named by
GW_RDMA_CORE_SRC (gpuwrite does not carry a copy of rdma-core's code); without one these
tests skip. Every field of every layout is given a random value and both sides' bytes are
compared; then the commands testbed mode sends are decoded back.
"""
import importlib.util
import os
import random

import pytest

from gpuwrite.backends.testbed import prm
from gpuwrite.backends.testbed import qp_attrs as qa

scapy = pytest.importorskip("scapy", reason="scapy is not installed (pip install scapy): it "
                            "runs rdma-core's PRM classes")


def _rdma_core_prm_structs():
    src = os.environ.get("GW_RDMA_CORE_SRC", "")
    path = os.path.join(src, "tests", "mlx5_prm_structs.py")
    if not src or not os.path.isfile(path):
        pytest.skip("set GW_RDMA_CORE_SRC to an rdma-core checkout (checked against "
                    "linux-rdma/rdma-core 691953d8) to compare with its PRM classes",
                    allow_module_level=True)
    spec = importlib.util.spec_from_file_location("rdma_core_prm_structs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _rdma_core_prm_structs()

PAIRS = [(prm.SW_CQC, ref.SwCqc), (prm.CREATE_CQ_IN, ref.CreateCqIn),
         (prm.CREATE_CQ_OUT, ref.CreateCqOut), (prm.SW_ADS, ref.SwAds), (prm.SW_QPC, ref.SwQpc),
         (prm.CREATE_QP_IN, ref.CreateQpIn), (prm.CREATE_QP_OUT, ref.CreateQpOut),
         (prm.MODIFY_QP_IN, ref.ModifyQpIn), (prm.MODIFY_QP_OUT, ref.ModifyQpOut)]
NESTED = {"sw_cqc": ref.SwCqc, "sw_qpc": ref.SwQpc, "primary_address_path": ref.SwAds,
          "secondary_address_path": ref.SwAds}


def random_values(layout: prm.Layout, rng: random.Random) -> dict:
    out = {}
    for name, field in layout.fields:
        if isinstance(field, prm.Layout):
            out[name] = random_values(field, rng)
        elif not name.startswith("reserved"):
            out[name] = rng.getrandbits(field)
    return out


def scapy_packet(cls, values: dict):
    kwargs = {}
    for name, value in values.items():
        if isinstance(value, dict):
            kwargs[name] = scapy_packet(NESTED[name], value)
        elif name == "rgid_rip":
            kwargs[name] = [(value >> (96 - 32 * k)) & 0xFFFFFFFF for k in range(4)]
        elif name == "rmac":
            kwargs[name] = ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
        else:
            kwargs[name] = value
    return cls(**kwargs)


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=[p[0].name for p in PAIRS])
def test_every_field_packs_like_rdma_core(ours, theirs):
    assert ours.size_bytes == len(bytes(theirs()))
    rng = random.Random(ours.name)
    for _ in range(20):
        values = random_values(ours, rng)
        assert ours.pack(values) == bytes(scapy_packet(theirs, values))
        assert {k: v for k, v in ours.unpack(ours.pack(values)).items()
                if not k.rsplit(".", 1)[-1].startswith("reserved")} == dict(prm._flatten(values))


CONN = qa.QpConnection(remote_qpn=0x1A2B3C, remote_psn=0xABCDEF, local_psn=0x123456,
                       mtu_bytes=4096, port_num=1, remote_lid=0x21,
                       remote_gid="fe80:0000:0000:0000:0202:c9ff:fe00:0001", sgid_index=3,
                       max_rd_atomic=4, max_dest_rd_atomic=16)


def test_create_commands_match_rdma_cores_devx_test_construction():
    """The create commands as rdma-core's Mlx5DevxRcResources builds them, plus what
    gpuwrite adds (zero-length RQ, umem offsets, doorbell-record offsets)."""
    ours = prm.create_cq_in(log_cq_size=8, uar_page=0x1234, eqn=7, umem_id=0x55, umem_offset=0x3000,
                            dbr_umem_id=0x56, dbr_offset=0x40)
    theirs = ref.CreateCqIn(cq_umem_valid=1, cq_umem_id=0x55, e_mtt_pointer_or_cq_umem_offset=0x3000,
                            sw_cqc=ref.SwCqc(c_eqn=7, uar_page=0x1234, log_cq_size=8, dbr_umem_valid=1,
                                             dbr_umem_id=0x56, db_record_addr_31_3=0x40 >> 3))
    assert ours == bytes(theirs)
    ours = prm.create_qp_in(pdn=0x99, cqn=0x401, uar_page=0x1234, log_sq_size=8, umem_id=0x57,
                            umem_offset=0x8000, dbr_umem_id=0x58, dbr_offset=0x48)
    qpc = ref.SwQpc(st=ref.DevxOps.MLX5_QPC_ST_RC, pd=0x99,
                    pm_state=ref.DevxOps.MLX5_QPC_PM_STATE_MIGRATED, log_sq_size=8, ts_format=0x1,
                    rq_type=3, uar_page=0x1234, cqn_snd=0x401, cqn_rcv=0x401, dbr_umem_id=0x58,
                    dbr_umem_valid=1, dbr_addr=0x48)
    assert ours == bytes(ref.CreateQpIn(sw_qpc=qpc, wq_umem_id=0x57, wq_umem_valid=1,
                                        e_mtt_pointer_or_wq_umem_offset=0x8000))


def test_modify_commands_carry_the_qp_attributes():
    qpn = 0x4711
    init, _ = qa.init_attrs(CONN)
    f = prm.MODIFY_QP_IN.unpack(prm.rst2init_in(qpn, init))
    assert (f["opcode"], f["qpn"], f["sw_qpc.rwe"], f["sw_qpc.rre"],
            f["sw_qpc.primary_address_path.vhca_port_num"]) == (prm.MLX5_CMD_OP_RST2INIT_QP, qpn, 1, 1, 1)
    rtr, _ = qa.rtr_attrs(CONN)
    f = prm.MODIFY_QP_IN.unpack(prm.init2rtr_in(qpn, rtr, remote_mac="02:c9:00:00:00:01"))
    path = {k.split(".", 2)[2]: v for k, v in f.items() if k.startswith("sw_qpc.primary_address_path.")}
    assert (f["opcode"], f["sw_qpc.mtu"], f["sw_qpc.remote_qpn"], f["sw_qpc.next_rcv_psn"],
            f["sw_qpc.min_rnr_nak"], f["sw_qpc.log_rra_max"], f["sw_qpc.log_msg_max"]) == \
        (prm.MLX5_CMD_OP_INIT2RTR_QP, 5, 0x1A2B3C, 0xABCDEF, 12, 4, 20)
    assert (path["rlid"], path["grh"], path["src_addr_index"], path["hop_limit"],
            path["rgid_rip"], path["rmac"]) == \
        (0x21, 1, 3, 64, 0xFE800000000000000202C9FFFE000001, 0x02C900000001)
    rts, _ = qa.rts_attrs(CONN)
    f = prm.MODIFY_QP_IN.unpack(prm.rtr2rts_in(qpn, rts, CONN.port_num))
    assert (f["opcode"], f["sw_qpc.retry_count"], f["sw_qpc.rnr_retry"], f["sw_qpc.next_send_psn"],
            f["sw_qpc.log_sra_max"], f["sw_qpc.primary_address_path.ack_timeout"]) == \
        (prm.MLX5_CMD_OP_RTR2RTS_QP, 7, 7, 0x123456, 2, 14)


def test_command_errors_name_status_and_syndrome():
    out = prm.MODIFY_QP_OUT.pack(status=0x10, syndrome=0xDEAD)
    with pytest.raises(prm.DevxCommandError, match="INIT2RTR: status bad_qp_state_err .0x10., syndrome 0x0000dead"):
        prm.check_output(prm.MODIFY_QP_OUT, out, "INIT2RTR")
    assert prm.check_output(prm.CREATE_QP_OUT, prm.CREATE_QP_OUT.pack(qpn=0x42), "create")["qpn"] == 0x42
    with pytest.raises(ValueError, match="does not fit 24 bits"):
        prm.MODIFY_QP_IN.pack(qpn=1 << 24)
    with pytest.raises(ValueError, match="has no field 'qnp'"):
        prm.MODIFY_QP_IN.pack(qnp=1)
