"""What would break first contact with a ConnectX NIC (issue 17), checked on a strict fake
of pyverbs/DevX (fakeverbs.py), and the selftest's steps, order and cleanup."""
import json
import mmap
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from fakeverbs import FakeRDMAError, World
from gpuwrite.backends.testbed import api, devx, prm
from gpuwrite.backends.testbed import qp_attrs as qa
from gpuwrite.backends.testbed import selftest as st
from gpuwrite.cudaenv import SIMULATOR

PAGE = mmap.PAGESIZE


def queue_set(world, n_qps=2, **kwargs):
    nic = devx.TestbedNic("mlx5_0", verbs=world.verbs())
    qs = devx.TestbedQueueSet(nic, n_qps, sq_bbs=64, ncqe=64, stage_slots=4, stage_slot_bytes=256,
                              bounce_bytes=4096, ring_memory="host", seed=3, **kwargs)
    return nic, qs


def loopback(qs, i, mac="02:00:00:00:00:07"):
    return qa.QpConnection(remote_qpn=int(qs.qpns[i]), remote_psn=1, local_psn=2,
                           remote_gid=qs.nic.gid, remote_mac=mac)


# 1. destruction order -------------------------------------------------------------------

def test_close_releases_each_qp_before_its_cq_then_uars_then_umems():
    world = World()
    nic, qs = queue_set(world)
    qs.close()        # the fake refuses (EBUSY) a CQ with a live QP, a UAR/UMEM still named
    nic.close()
    assert not world.live
    released = [what for kind, what in world.log if kind == "release"]
    kinds = [w.split()[0] for w in released]
    first_cq, last_qp = kinds.index("cq"), len(kinds) - 1 - kinds[::-1].index("qp")
    assert last_qp < kinds.index("uar") and max(i for i, k in enumerate(kinds) if k == "cq") < kinds.index("uar")
    assert max(i for i, k in enumerate(kinds) if k == "uar") < kinds.index("umem")
    assert kinds[-2:] == ["pd", "context"] and first_cq > kinds.index("qp")


def test_a_refused_release_is_reported_after_every_other_release_and_never_hides_the_error():
    world = World()
    nic, qs = queue_set(world)
    stuck = qs.cqs[0]
    stuck.close = lambda: (_ for _ in ()).throw(FakeRDMAError("cq busy", 16))
    with pytest.raises(devx.TestbedError, match="CREATE_CQ 0: FakeRDMAError: cq busy"):
        qs.close()
    assert [o for o in world.live.values() if o is not stuck and "umem" not in o.what
            and "uar" not in o.what and o.what not in ("pd", "context")] == []
    first = ValueError("the run's own error")
    devx.close_quietly(SimpleNamespace(close=lambda: (_ for _ in ()).throw(devx.TestbedError("late"))), first)
    assert first.__notes__ == ["late"]


# 2. pyverbs enum spellings --------------------------------------------------------------

def test_enum_values_resolve_from_either_pyverbs_spelling():
    members = {name: 1 << k for k, (name, *_rest) in enumerate(api.ENUMS)}
    old = SimpleNamespace(**{member: members[name] for name, _, _, member in api.ENUMS},
                          _MLX5DV_UAR_ALLOC_TYPE_BF=0, _MLX5DV_UAR_ALLOC_TYPE_NC=1)
    new = SimpleNamespace(_MLX5DV_UAR_ALLOC_TYPE_BF=0, _MLX5DV_UAR_ALLOC_TYPE_NC=1)
    for name, _, enum_type, member in api.ENUMS:     # Cython >= 3.1: only Type.MEMBER
        target = new if enum_type is None else getattr(new, enum_type, None) or SimpleNamespace()
        setattr(target, member, members[name])
        if enum_type is not None:
            setattr(new, enum_type, target)
    for module in (old, new):
        c = api.resolve_constants(module, module)
        assert {name: getattr(c, name) for name in members} == members
    with pytest.raises(api.EnumMissing, match="neither IBV_PORT_ACTIVE nor ibv_port_state.IBV_PORT_ACTIVE"):
        api.enum_value(SimpleNamespace(), "ibv_port_state", "IBV_PORT_ACTIVE")


def test_installed_pyverbs_resolves_every_constant():
    from gpuwrite.backends.testbed._pyverbs import PyverbsMissing

    try:
        verbs = api.load()
    except PyverbsMissing as exc:
        pytest.skip(str(exc))
    assert verbs.c.CONTEXT_FLAGS_DEVX == 1 and verbs.c.ACCESS_ZERO_BASED == 32


# 3. RoCE v2 UDP source port, 4. next-hop MAC, 7. LOG_MSG_MAX ----------------------------

def _init2rtr(world):
    return [prm.MODIFY_QP_IN.unpack(c) for c in world.commands
            if int.from_bytes(c[:2], "big") == prm.MLX5_CMD_OP_INIT2RTR_QP]


@pytest.mark.parametrize("link_layer,roce_v2", [(2, True), (2, False), (1, True)])
def test_udp_sport_is_set_for_roce_v2_only_and_log_msg_max_is_30(link_layer, roce_v2):
    world = World(link_layer=link_layer, roce_v2=roce_v2)
    nic, qs = queue_set(world)
    with nic, qs:
        qs.connect([loopback(qs, i) for i in range(2)])
    fields = _init2rtr(world)
    sports = [f["sw_qpc.primary_address_path.udp_sport"] for f in fields]
    if roce_v2 and link_layer == 2:     # an IB port never gets one, whatever its GID type reads
        assert all(0xC000 <= s <= 0xFFFF for s in sports) and len(set(sports)) == 2
        assert sports[0] == prm.roce_v2_udp_sport(int(qs.qpns[0]), int(qs.qpns[0]))
    else:
        assert sports == [0, 0]
    macs = [f["sw_qpc.primary_address_path.rmac"] for f in fields]
    assert macs == ([0x020000000007] * 2 if link_layer == 2 else [0, 0])
    assert [f["sw_qpc.log_msg_max"] for f in fields] == [30, 30]


def test_udp_sport_follows_the_kernels_flow_label_hash_and_log_msg_max_follows_the_port():
    # rdma_calc_flow_label(0x11, 0x22) = 0x242, rdma_flow_label_to_udp_sport = 0xC242
    assert prm.roce_v2_udp_sport(0x11, 0x22) == 0xC242
    assert prm.roce_v2_udp_sport(0xABCDE, 0x12345) == prm.roce_v2_udp_sport(0x12345, 0xABCDE)
    assert prm.LOG_MSG_MAX == 30
    assert (prm.log_msg_max(1 << 31), prm.log_msg_max(1 << 20), prm.log_msg_max(None)) == (30, 20, 30)


def test_roce_refuses_a_missing_next_hop_mac_instead_of_sending_zero():
    world = World(mac=None)
    nic, qs = queue_set(world)
    with nic, qs:
        with pytest.raises(devx.TestbedError, match="RoCE needs the next hop's Ethernet address"):
            qs.connection_commands(0, loopback(qs, 0, mac=None))
        with pytest.raises(devx.TestbedError, match="cannot resolve the Ethernet address of GID "
                                                    "fe80:.*no neighbour"):
            nic.next_hop_mac(nic.gid)
    with pytest.raises(ValueError, match="zero address"):
        prm.mac_to_int("00:00:00:00:00:00")


# 5. the GPU's doorbell UAR ---------------------------------------------------------------

@pytest.mark.parametrize("dedicated", [True, False])
def test_gpu_doorbell_uar_is_dedicated_else_blueflame_never_the_shared_nc_page(dedicated):
    world = World(dedicated_uar=dedicated)
    nic, qs = queue_set(world)
    with nic, qs:
        c = nic.verbs.c
        assert qs.qp_uar.flags == (c.UAR_ALLOC_TYPE_NC_DEDICATED if dedicated else c.UAR_ALLOC_TYPE_BF)
        assert qs.qp_uar_kind == ("nc_dedicated" if dedicated else "bf")
        assert qs.qp_uar is not qs.cq_uar
        assert qs.uar_mapping.host_base == qs.qp_uar.base_addr
        create_qp = [prm.CREATE_QP_IN.unpack(cmd) for cmd in world.commands
                     if int.from_bytes(cmd[:2], "big") == prm.MLX5_CMD_OP_CREATE_QP]
        assert {f["sw_qpc.uar_page"] for f in create_qp} == {qs.qp_uar.page_id}


# 6. device memory mapped from its page start ---------------------------------------------

def test_dm_window_registers_the_mapping_from_its_page_start_and_adds_the_offset():
    from gpuwrite.backends.testbed.dm import DeviceMemoryError

    base = 0x7F0000000000
    w = devx.dm_gpu_window(base + 0x40, 3072, 3072, 4096)
    assert (w.base, w.span_bytes, w.offset) == (base, 4096, 0x40)
    with pytest.raises(DeviceMemoryError, match="starts 1088 bytes into its page; the 4096-byte "
                                                "mapping holds 3008 bytes"):
        devx.dm_gpu_window(base + 0x440, 3072, 3072, 4096)


def test_staging_in_unaligned_device_memory_and_the_printed_host_fallback(capsys, monkeypatch):
    registered = []

    def recording(address, length, io_memory=True, real=devx.map_io_into_gpu):
        registered.append((address, length, io_memory))
        return real(address, length, io_memory)
    monkeypatch.setattr(devx, "map_io_into_gpu", recording)
    world = World(dm_offset=0x40)
    nic, qs = queue_set(world)
    with nic, qs:
        address, length, io_memory = registered[-1]   # the staging registration: the mapping exactly
        assert address % PAGE == 0 and length == PAGE
        # The fake's pages are ordinary host memory: CUDA refuses IOMEMORY for them.
        assert [r[2] for r in registered] == [False, False]
        stage_address = qs.stage.__cuda_array_interface__["data"][0] if hasattr(
            qs.stage, "__cuda_array_interface__") else qs.stage._ary.ctypes.data
        assert qs.stage_mapping.host_base % PAGE == 0 and qs.stage_mapping.length == PAGE
        assert stage_address == qs.stage_mapping.host_base + 0x40 and qs.stage_note is None
    world = World(dm_offset=PAGE - 0x400)      # 1 KiB left in the mapping; staging needs 2 KiB
    nic, qs = queue_set(world)
    with nic, qs:
        assert "gpu_push stages in pinned host memory instead" in qs.stage_note
        assert qs.stage_memory.startswith("host") and int(qs.info_host[0, 7]) == qs.stage_mr.lkey
    assert "no public code maps MEMIC into a GPU" in capsys.readouterr().err


# 8. dma-buf fd, mapping-type flag, NOTES item 1 ------------------------------------------

def test_dmabuf_fd_is_closed_after_registration_even_when_it_fails():
    for outcome in ("ok", "fail"):
        read_end, write_end = os.pipe()
        os.close(read_end)
        buf = devx.GpuDmabuf(0x10000, write_end, 1 << 16, 0)

        def make(fd):
            assert fd == write_end
            if outcome == "fail":
                raise FakeRDMAError("umem", 22)
            return "umem"
        if outcome == "ok":
            assert buf.register(make) == "umem"
        else:
            with pytest.raises(FakeRDMAError):
                buf.register(make)
        with pytest.raises(OSError):
            os.fstat(write_end)
        assert buf.fd == -1


class FakeDriver:
    CUmemRangeHandleType = SimpleNamespace(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD=1)
    CUpointer_attribute = SimpleNamespace(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS=6)

    def __init__(self, pcie_flag_known, pcie_flag_accepted):
        if pcie_flag_known:
            self.CUmemRangeFlags = SimpleNamespace(CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE=1)
        self.accepted = pcie_flag_accepted
        self.tried, self.freed = [], []

    def cuMemAlloc(self, size):
        return 0, 0x7000_0000_0000

    def cuMemFree(self, address):
        self.freed.append(address)

    def cuMemGetHandleForAddressRange(self, address, size, kind, flags):
        self.tried.append(flags)
        return (1, -1) if flags == 1 and not self.accepted else (0, 42)

    def cuPointerSetAttribute(self, *args):
        return (0,)


@pytest.mark.parametrize("known,accepted,tried,used", [
    (True, True, [1], 1), (True, False, [1, 0], 0), (False, False, [0], 0)])
def test_dmabuf_export_asks_for_the_pcie_mapping_first(known, accepted, tried, used):
    driver = FakeDriver(known, accepted)
    buf = devx.export_dmabuf(driver, 5000)
    assert driver.tried == tried and buf.flags == used and buf.size_bytes == 1 << 16
    assert buf.fd == 42 and not driver.freed


def test_notes_item_1_matches_the_doorbell_code():
    import inspect

    from gpuwrite.device import verbs as dv

    notes = (Path(devx.__file__).parent / "NOTES.md").read_text()
    item = re.search(r"^1\. (.*?)(?=^2\. )", notes, re.S | re.M).group(1)
    source = inspect.getsource(dv.ring_doorbell.py_func if hasattr(dv.ring_doorbell, "py_func")
                               else dv.ring_doorbell)
    assert "fence_sys()" in source and "fence.acq_rel.sys" in item and "done" in item.lower()
    assert "st.mmio" in item and ("st.mmio" in source) == ("st.mmio is used" in item)


# the selftest ------------------------------------------------------------------------------

def _run(world, **kwargs):
    lines = []
    report = st.run("mlx5_0", verbs=world.verbs(), completion_timeout_s=0.2, echo=lines.append, **kwargs)
    return report, lines


def test_selftest_runs_the_steps_in_order_stops_at_the_first_failure_and_releases_everything():
    world = World()
    report, lines = _run(world)           # no NIC behind the fake: the NOP never completes
    names = [s.step for s in report.steps]
    assert names == [name for name, _ in st.STEPS] and len(lines) == len(names)
    status = {s.step: s.status for s in report.steps}
    nop = names.index("post a NOP from the CPU")
    assert all(status[n] == "passed" for n in names[:nop] if n != "register GPU memory as a UMEM (dma-buf)")
    # Where GPU memory can be exported as a dma-buf (an H100 with cuda-bindings, session
    # 13) the fake registers it; on the simulator there is none.
    umem = next(s for s in report.steps if s.step == "register GPU memory as a UMEM (dma-buf)")
    if umem.status == "passed":
        assert not SIMULATOR and "dma-buf flags" in umem.detail, umem
    else:
        assert umem.status == "skipped" and "no GPU memory exported as a dma-buf" in umem.detail
    assert report.steps[nop].status == "failed" and "no completion within 0.2 s" in report.steps[nop].detail
    assert all(s.status == "skipped" and "'post a NOP from the CPU' failed" in s.detail
               for s in report.steps[nop + 1:])
    assert not world.live and report.release_error is None and not report.ok
    assert report.released[-2:] == ["protection domain", "context"]
    assert report.to_dict()["bug_report"].startswith("Please open an issue with")
    assert lines[nop].startswith(" failed  post a NOP from the CPU")


def test_selftest_failure_lines_carry_errno_and_the_firmware_syndrome():
    world = World(fail_on=prm.MLX5_CMD_OP_INIT2RTR_QP)
    report, _ = _run(world)
    failed = [s for s in report.steps if s.status == "failed"]
    assert [s.step for s in failed] == ["INIT -> RTR"]
    assert (failed[0].status_code, failed[0].syndrome) == (0x3, 0x1234ABCD)
    assert "bad_param_err" in failed[0].detail and not world.live
    world = World(fail_on=prm.MLX5_CMD_OP_CREATE_QP, fail_nth=None)
    report, _ = _run(world)
    failed = [s for s in report.steps if s.status == "failed"]
    assert [s.step for s in failed] == ["create the QP"] and failed[0].errno == 22
    assert "errno 22" in failed[0].detail and not world.live
    assert "with the default timestamp format" in failed[0].detail     # both tries named
    assert json.loads(json.dumps(report.to_dict()))["steps"][6]["errno"] == 22


def test_selftest_passes_every_cpu_step_against_a_fake_nic():
    """The selftest's own WQEs, doorbell record and doorbell, executed by a fake NIC."""
    from fakeverbs import FakeNic

    world = World()
    with FakeNic(world) as nic:
        report, lines = _run(world)
    assert not nic.errors
    status = {s.step: s.status for s in report.steps}
    assert status["post a NOP from the CPU"] == status["RDMA write from the CPU"] == "passed"
    if SIMULATOR:   # a simulated kernel cannot reach a NIC's doorbell; a GPU reaches the fake's
        assert status["RDMA write from the GPU"] == "skipped"
        assert "cannot reach the NIC's doorbell" in report.steps[-2].detail
    else:
        assert status["RDMA write from the GPU"] == "passed"
    assert report.ok and not world.live and report.to_dict()["bug_report"] is None


def test_selftest_gpu_kernel_continues_the_cpus_queue_on_the_simulator():
    """The GPU step's kernel (device verbs: WQE, doorbell record, doorbell, poll_cq) on the
    CUDA simulator after the CPU steps, against the fake NIC: the step is skipped without
    a GPU, so this is where its kernel runs here."""
    import numpy as np
    from fakeverbs import FakeNic

    world = World()
    t = st.Selftest("mlx5_0", 1, 0, world.verbs(), 2.0)
    with FakeNic(world) as fake:
        try:
            for name, step in st.STEPS:
                if name == "RDMA write from the GPU":
                    break
                try:
                    step(t)
                except st.Skip:
                    pass
            t.dst.host[:] = 0
            out = st.gpu_post_and_poll(t.qs, t.poster, t.src.address, t.src_mr.lkey, t.dst.address,
                                       t.dst_mr.rkey, 2.0)
            assert int(out[0]) == 1 and np.array_equal(t.src.host, t.dst.host)
        finally:
            t.release()
    assert not fake.errors and not world.live


# 7. the QP's timestamp format ------------------------------------------------------------

def _create_qp_formats(world):
    return [prm.CREATE_QP_IN.unpack(cmd)["sw_qpc.ts_format"] for cmd in world.commands
            if int.from_bytes(cmd[:2], "big") == prm.MLX5_CMD_OP_CREATE_QP]


def test_qps_are_made_with_the_default_timestamp_format_where_the_device_takes_it():
    world = World()
    nic, qs = queue_set(world)
    with nic, qs:
        assert set(_create_qp_formats(world)) == {prm.MLX5_QPC_TS_FORMAT_DEFAULT}
        assert qs.ts_format == prm.MLX5_QPC_TS_FORMAT_DEFAULT


def test_a_device_refusing_the_default_timestamp_format_gets_free_running_qps():
    """Older firmware may refuse ts_format DEFAULT (EINVAL): the first QP is asked again
    with FREE_RUNNING, as Linux sets there, and every later QP is made with it."""
    world = World(refuse_ts_format=prm.MLX5_QPC_TS_FORMAT_DEFAULT)
    nic, qs = queue_set(world)
    with nic, qs:
        formats = _create_qp_formats(world)
        assert formats[0] == prm.MLX5_QPC_TS_FORMAT_DEFAULT
        assert set(formats[1:]) == {prm.MLX5_QPC_TS_FORMAT_FREE_RUNNING}
        assert len(formats) == qs.n_qps + 1 and len(qs.qps) == qs.n_qps
        assert qs.ts_format == prm.MLX5_QPC_TS_FORMAT_FREE_RUNNING
    assert not world.live


@pytest.mark.parametrize("fail_errno,nth", [(12, 0), (22, 1)])
def test_other_create_qp_failures_are_not_retried(fail_errno, nth):
    """Only an EINVAL for the first QP is taken for the timestamp format: ENOMEM, or a
    later QP's EINVAL, fails the bring-up at once, and what was made is released."""
    world = World(fail_on=prm.MLX5_CMD_OP_CREATE_QP, fail_nth=nth, fail_errno=fail_errno)
    nic = devx.TestbedNic("mlx5_0", verbs=world.verbs())
    with nic, pytest.raises(devx.TestbedError) as exc:
        devx.TestbedQueueSet(nic, 2, sq_bbs=64, ncqe=64, stage_slots=4, stage_slot_bytes=256,
                             bounce_bytes=4096, ring_memory="host", seed=3)
    assert exc.value.errno == fail_errno
    assert len(_create_qp_formats(world)) == nth + 1
    assert "timestamp format" not in str(exc.value)
    assert not world.live


def test_an_eq_number_past_the_cq_contexts_field_is_a_named_error_not_a_truncation():
    world = World()
    nic = devx.TestbedNic("mlx5_0", verbs=world.verbs())
    nic.eqn = 256
    with nic, pytest.raises(devx.TestbedError, match="EQ number 256"):
        devx.TestbedQueueSet(nic, 2, sq_bbs=64, ncqe=64, stage_slots=4, stage_slot_bytes=256,
                             bounce_bytes=4096, ring_memory="host", seed=3)
    assert not world.live
