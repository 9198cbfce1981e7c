"""DevX command bytes: gpuwrite's PRM layouts against rdma-core's own scapy classes.

rdma-core's DevX tests (tests/mlx5_base.py) build these commands with the scapy classes
of tests/mlx5_prm_structs.py. gpuwrite carries no copy of rdma-core's code; the file is
read from where it already is: an rdma-core checkout named by GW_RDMA_CORE_SRC, else the
copy Debian's python3-pyverbs installs (/usr/share/doc/rdma-core/tests/
mlx5_prm_structs.py.gz; scripts/install-system-deps.sh installs that package, so CI has
it). Every field of every layout is given a random value and both sides' bytes are
compared; then the commands testbed mode sends are decoded back. The last two tests need
no reference and run everywhere.

Older rdma-core releases name fewer QPC bits: rdma-core 44 (Debian 12) has a 3-bit
``reserved7`` where 691953d8 has ``send_dbr_mode`` (2 bits) and ``reserved7`` (1 bit).
A field gpuwrite names that the reference does not must lie inside one of the
reference's reserved fields (and is packed as zero there).
"""
import gzip
import importlib.util
import os
import random
import tempfile

import pytest

from gpuwrite.backends.testbed import prm
from gpuwrite.backends.testbed import qp_attrs as qa

DEBIAN_PRM_STRUCTS = "/usr/share/doc/rdma-core/tests/mlx5_prm_structs.py.gz"


def _load(path: str):
    spec = importlib.util.spec_from_file_location("rdma_core_prm_structs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ref():
    pytest.importorskip("scapy", reason="scapy is not installed (pip install scapy): it runs "
                        "rdma-core's PRM classes")
    src = os.environ.get("GW_RDMA_CORE_SRC", "")
    path = os.path.join(src, "tests", "mlx5_prm_structs.py")
    if src and os.path.isfile(path):
        return _load(path)
    if os.path.isfile(DEBIAN_PRM_STRUCTS):
        with tempfile.TemporaryDirectory() as tmp:
            plain = os.path.join(tmp, "mlx5_prm_structs.py")
            with gzip.open(DEBIAN_PRM_STRUCTS) as packed, open(plain, "wb") as out:
                out.write(packed.read())
            return _load(plain)
    pytest.skip(f"no rdma-core PRM classes: set GW_RDMA_CORE_SRC to an rdma-core checkout, or "
                f"install python3-pyverbs (it ships {DEBIAN_PRM_STRUCTS})")


def scapy_offsets(cls, prefix="") -> dict[str, tuple[int, int]]:
    """Dotted field name -> (bit offset, width) of a scapy class, nested packets expanded."""
    out, here = {}, 0
    for f in cls.fields_desc:
        sub = getattr(f, "cls", None)
        if sub is not None:
            inner = scapy_offsets(sub)
            out.update({f"{prefix}{f.name}.{k}": (here + o, w) for k, (o, w) in inner.items()})
            here += sum(w for _, w in inner.values())
            continue
        out[f"{prefix}{f.name}"] = (here, _bits(f))
        here += _bits(f)
    return out


def _bits(f) -> int:
    if f.__class__.__name__ == "BitField":
        return f.size
    if f.__class__.__name__ == "FieldListField":      # rgid_rip: four 32-bit words
        return len(f.default) * _bits(f.field)
    if f.__class__.__name__ == "StrFixedLenField":    # reserved bytes
        return 8 * f.length_from(None)
    return 8 * f.sz                          # Byte/Short/Int/Long/MAC/IP6 fields


def reference_names(ours: prm.Layout, theirs) -> set[str]:
    """Our fields the reference also names; asserts every other one sits in a reserved field."""
    ref_fields = scapy_offsets(theirs)
    known = set()
    for name, (off, width) in ours.offsets.items():
        if name.rsplit(".", 1)[-1].startswith("reserved"):
            continue
        if name in ref_fields:
            assert ref_fields[name] == (off, width), name
            known.add(name)
        else:
            assert any(r.rsplit(".", 1)[-1].startswith("reserved") and o <= off and off + width <= o + w
                       for r, (o, w) in ref_fields.items()), f"{name} is neither named nor reserved there"
    return known


PAIRS = [(prm.SW_CQC, "SwCqc"), (prm.CREATE_CQ_IN, "CreateCqIn"), (prm.CREATE_CQ_OUT, "CreateCqOut"),
         (prm.SW_ADS, "SwAds"), (prm.SW_QPC, "SwQpc"), (prm.CREATE_QP_IN, "CreateQpIn"),
         (prm.CREATE_QP_OUT, "CreateQpOut"), (prm.MODIFY_QP_IN, "ModifyQpIn"),
         (prm.MODIFY_QP_OUT, "ModifyQpOut")]
NESTED = {"sw_cqc": "SwCqc", "sw_qpc": "SwQpc", "primary_address_path": "SwAds",
          "secondary_address_path": "SwAds"}


def random_values(layout: prm.Layout, rng: random.Random, known: set[str], prefix="") -> dict:
    out = {}
    for name, field in layout.fields:
        if isinstance(field, prm.Layout):
            out[name] = random_values(field, rng, known, f"{prefix}{name}.")
        elif f"{prefix}{name}" in known:
            out[name] = rng.getrandbits(field)
    return out


def scapy_packet(ref, cls, values: dict):
    kwargs = {}
    for name, value in values.items():
        if isinstance(value, dict):
            kwargs[name] = scapy_packet(ref, getattr(ref, NESTED[name]), value)
        elif name == "rgid_rip":
            kwargs[name] = [(value >> (96 - 32 * k)) & 0xFFFFFFFF for k in range(4)]
        elif name == "rmac":
            kwargs[name] = ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
        else:
            kwargs[name] = value
    return cls(**kwargs)


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=[p[0].name for p in PAIRS])
def test_every_field_packs_like_rdma_core(ref, ours, theirs):
    theirs = getattr(ref, theirs)
    assert ours.size_bytes == len(bytes(theirs()))
    known = reference_names(ours, theirs)
    rng = random.Random(ours.name)
    for _ in range(20):
        values = random_values(ours, rng, known)
        assert ours.pack(values) == bytes(scapy_packet(ref, theirs, values))
        unpacked = ours.unpack(ours.pack(values))
        assert {k: unpacked[k] for k in known} == dict(prm._flatten(values))


CONN = qa.QpConnection(remote_qpn=0x1A2B3C, remote_psn=0xABCDEF, local_psn=0x123456,
                       mtu_bytes=4096, port_num=1, remote_lid=0x21,
                       remote_gid="fe80:0000:0000:0000:0202:c9ff:fe00:0001", sgid_index=3,
                       max_rd_atomic=4, max_dest_rd_atomic=16)


def test_create_commands_match_rdma_cores_devx_test_construction(ref):
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
        (prm.MLX5_CMD_OP_INIT2RTR_QP, 5, 0x1A2B3C, 0xABCDEF, 12, 4, 30)
    # A RoCE path (a MAC given): no rlid and no grh bit (see test_address_path_follows_mlx5_set_path).
    assert (path["rlid"], path["grh"], path["src_addr_index"], path["hop_limit"],
            path["rgid_rip"], path["rmac"]) == \
        (0, 0, 3, 64, 0xFE800000000000000202C9FFFE000001, 0x02C900000001)
    rts, _ = qa.rts_attrs(CONN)
    f = prm.MODIFY_QP_IN.unpack(prm.rtr2rts_in(qpn, rts, CONN.port_num))
    assert (f["opcode"], f["sw_qpc.retry_count"], f["sw_qpc.rnr_retry"], f["sw_qpc.next_send_psn"],
            f["sw_qpc.log_sra_max"], f["sw_qpc.primary_address_path.ack_timeout"]) == \
        (prm.MLX5_CMD_OP_RTR2RTS_QP, 7, 7, 0x123456, 2, 14)


def _rtr_path(conn, **kwargs) -> dict:
    rtr, _ = qa.rtr_attrs(conn)
    f = prm.MODIFY_QP_IN.unpack(prm.init2rtr_in(0x4711, rtr, **kwargs))
    return {k.split(".", 2)[2]: v for k, v in f.items() if k.startswith("sw_qpc.primary_address_path.")}


def test_address_path_follows_mlx5_set_path():
    """Linux drivers/infiniband/hw/mlx5/qp.c, mlx5_set_path: on RoCE the SL goes to
    eth_prio (``MLX5_SET(ads, path, eth_prio, sl & 0x7)``), RoCE v2 gets
    ``dscp = traffic_class >> 2``, and rlid, sl and the grh bit are InfiniBand-only."""
    gid = "fe80:0000:0000:0000:0202:c9ff:fe00:0001"
    roce = qa.QpConnection(remote_qpn=0x10, remote_psn=1, local_psn=2, remote_gid=gid, sl=3,
                           traffic_class=0x68)
    v2 = _rtr_path(roce, remote_mac="02:c9:00:00:00:01", udp_sport=0xC123)
    assert (v2["eth_prio"], v2["sl"], v2["dscp"], v2["grh"], v2["rlid"], v2["udp_sport"],
            v2["tclass"]) == (3, 0, 0x68 >> 2, 0, 0, 0xC123, 0x68)
    v1 = _rtr_path(roce, remote_mac="02:c9:00:00:00:01")
    assert (v1["eth_prio"], v1["sl"], v1["dscp"], v1["grh"], v1["udp_sport"]) == (3, 0, 0, 0, 0)
    ib_global = qa.QpConnection(remote_qpn=0x10, remote_psn=1, local_psn=2, remote_lid=0x21,
                                remote_gid=gid, sl=3, traffic_class=0x68)
    ib = _rtr_path(ib_global)
    assert (ib["sl"], ib["eth_prio"], ib["dscp"], ib["grh"], ib["rlid"], ib["rmac"],
            ib["rgid_rip"]) == (3, 0, 0, 1, 0x21, 0, prm.gid_to_int(gid))
    ib_local = _rtr_path(qa.QpConnection(remote_qpn=0x10, remote_psn=1, local_psn=2,
                                         remote_lid=0x21, sl=5))
    assert (ib_local["sl"], ib_local["grh"], ib_local["rlid"], ib_local["rgid_rip"]) == (5, 0, 0x21, 0)
    with pytest.raises(ValueError, match="RoCE path needs a GRH"):
        _rtr_path(qa.QpConnection(remote_qpn=0x10, remote_psn=1, local_psn=2, remote_lid=0x21),
                  remote_mac="02:c9:00:00:00:01")
    with pytest.raises(ValueError, match="RoCE v2 paths only"):
        _rtr_path(ib_global, udp_sport=0xC123)


def test_command_errors_name_status_and_syndrome():
    out = prm.MODIFY_QP_OUT.pack(status=0x10, syndrome=0xDEAD)
    with pytest.raises(prm.DevxCommandError, match="INIT2RTR: status bad_qp_state_err .0x10., syndrome 0x0000dead"):
        prm.check_output(prm.MODIFY_QP_OUT, out, "INIT2RTR")
    assert prm.check_output(prm.CREATE_QP_OUT, prm.CREATE_QP_OUT.pack(qpn=0x42), "create")["qpn"] == 0x42
    with pytest.raises(ValueError, match="does not fit 24 bits"):
        prm.MODIFY_QP_IN.pack(qpn=1 << 24)
    with pytest.raises(ValueError, match="has no field 'qnp'"):
        prm.MODIFY_QP_IN.pack(qnp=1)
