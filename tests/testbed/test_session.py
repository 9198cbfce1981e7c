"""api.Session(world="testbed") on the strict fake of pyverbs/DevX (fakeverbs.py): the
bring-up order, the release order (also after a failure half way), the registrations'
access flags and addresses, and the apps' unchanged kernels through the fake NIC."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from childenv import child_env
from fakeverbs import CONSTANTS, FakeNic, FakeRDMAError, World
from gpuwrite.backends.testbed import Availability, devx, prm
from gpuwrite.backends.testbed import api as tb_api
from gpuwrite.backends.testbed import session as tb_session
from gpuwrite.cudaenv import SIMULATOR
from gpuwrite.device import api
from gpuwrite.host.memory import describe

# The repository's apps (experiments/apps), which two tests run through the fake NIC: on
# the path here, so that this file passes alone as in the whole suite (where
# tests/experiments/test_apps.py, collected first, put it there).
sys.path.append(str(Path(__file__).resolve().parents[2]))

# The fake NIC is a CPU thread: it reads what a WQE names as host memory. GPU memory is
# host memory only under the CUDA simulator; on a real GPU a pull from it would read a
# device address as a host pointer.
reads_gpu_memory = pytest.mark.skipif(
    not SIMULATOR, reason="the fake NIC (a CPU thread) reads GPU memory only on the CUDA simulator")

SMALL = dict(sq_bbs=64, stage_slots=16, stage_slot_bytes=256, chunk_bytes=1024,
             bounce_bytes=4096, timeout_s=10.0, thresholds=api.Thresholds.fixed("gpu_push"))


@pytest.fixture
def world(monkeypatch):
    """A fake NIC that ``api.Session(world="testbed")`` finds and opens."""
    w = World()
    monkeypatch.setattr(tb_session, "probe", lambda device=None: Availability(None, ("mlx5_0",)))
    monkeypatch.setattr(tb_api, "load", w.verbs)
    return w


def session(n_qps=2, **kwargs):
    args = {**SMALL, "testbed": {"ring_memory": "host"}, **kwargs}
    return api.Session(n_qps, world="testbed", **args)


def _opcodes(world):
    names = {prm.MLX5_CMD_OP_CREATE_CQ: "CREATE_CQ", prm.MLX5_CMD_OP_CREATE_QP: "CREATE_QP",
             prm.MLX5_CMD_OP_RST2INIT_QP: "RST2INIT", prm.MLX5_CMD_OP_INIT2RTR_QP: "INIT2RTR",
             prm.MLX5_CMD_OP_RTR2RTS_QP: "RTR2RTS"}
    return [names[int.from_bytes(c[:2], "big")] for c in world.commands]


def _assert_released_in_reverse(world):
    made = [what for kind, what in world.log if kind == "make"]
    released = [what for kind, what in world.log if kind == "release"]
    assert released == made[::-1] and not world.live


def test_session_brings_up_loopback_qps_in_the_nics_order_and_releases_in_reverse(world):
    s = session(3)
    qpns = [int(q) for q in s.queues.qpns]
    # CQs before the QPs that name them; each QP RESET -> INIT -> RTR -> RTS once made
    # (the fake refuses a transition out of order: bad_qp_state_err).
    assert _opcodes(world)[:6] == ["CREATE_CQ"] * 3 + ["CREATE_QP"] * 3
    modifies = [prm.MODIFY_QP_IN.unpack(c) for c in world.commands[6:]]
    per_qp = {q: [name for name, m in zip(_opcodes(world)[6:], modifies) if m["qpn"] == q]
              for q in qpns}
    assert per_qp == {q: ["RST2INIT", "INIT2RTR", "RTR2RTS"] for q in qpns}
    rtr = [m for name, m in zip(_opcodes(world)[6:], modifies) if name == "INIT2RTR"]
    # Each QP is its own peer: its QPN, its PSN, this port's MAC.
    assert [m["sw_qpc.remote_qpn"] for m in rtr] == qpns
    assert [m["sw_qpc.next_rcv_psn"] for m in rtr] == [int(p) for p in s.queues.psns]
    assert {m["sw_qpc.primary_address_path.rmac"] for m in rtr} == {0x020000000007}
    assert {q["state"] for q in world.queues["qp"].values()} == {"rts"}
    assert s.Q[0].shape[0] == 3 and s.cfg_host[api.C_CHUNK_BYTES] == 1024
    s.source(np.arange(16, dtype=np.uint32))
    s.receive(16)
    assert "connected to itself" in s.describe() and "loopback" in s.describe()
    s.close()
    _assert_released_in_reverse(world)


@pytest.mark.parametrize("opcode,nth,step", [
    (prm.MLX5_CMD_OP_CREATE_CQ, 1, "create the CQs"),
    (prm.MLX5_CMD_OP_CREATE_QP, 2, "create the QPs"),
    (prm.MLX5_CMD_OP_RST2INIT_QP, 0, "QP 0 RST2INIT (connected to itself)"),
    (prm.MLX5_CMD_OP_INIT2RTR_QP, 1, "QP 1 INIT2RTR (connected to itself)"),
    (prm.MLX5_CMD_OP_RTR2RTS_QP, 2, "QP 2 RTR2RTS (connected to itself)"),
    (None, 0, "resolve the loopback MAC (address handle)"),
    (None, 0, "register the bounce ring"),
])
def test_a_failed_bring_up_step_is_named_and_everything_made_is_released_in_reverse(
        world, monkeypatch, opcode, nth, step):
    world.fail_on, world.fail_nth = opcode, nth
    if step.startswith("resolve"):
        world.mac = None
    if step == "register the bounce ring":
        def refuse(self):
            raise FakeRDMAError("Failed to register a MR", 12)
        monkeypatch.setattr(devx.TestbedQueueSet, "register_bounce", refuse)
    with pytest.raises(devx.TestbedError) as exc:
        session(3)
    assert f"step '{step}' failed" in str(exc.value) and "\n" not in str(exc.value)
    _assert_released_in_reverse(world)
    assert any(kind == "release" for kind, _ in world.log)


def test_registrations_have_the_access_the_nic_needs_and_the_gpus_addresses(world):
    c = CONSTANTS
    with session() as s:
        words = np.arange(40, dtype=np.uint32)
        src, src_mr = s.source(words)
        buf, buf_mr = s.receive(10, fill=7)
        mrs = world.mrs
        assert mrs[src_mr.lkey]["access"] == c.ACCESS_LOCAL_WRITE
        # Remote writes, and nothing else: no remote read, and never relaxed ordering,
        # which would let put_signal's signal pass its data.
        assert mrs[buf_mr.rkey]["access"] == c.ACCESS_LOCAL_WRITE | c.ACCESS_REMOTE_WRITE
        # The MR's address space is the address kernels compute from the arrays.
        assert src_mr.address == describe(src)[0] == mrs[src_mr.lkey]["iova"]
        assert buf_mr.address == buf.address == mrs[buf_mr.rkey]["iova"]
        assert (mrs[src_mr.lkey]["length"], buf_mr.length) == (160, 40)
        assert np.array_equal(src.copy_to_host(), words) and set(buf.host) == {7}
        assert "nvidia_peermem" in src_mr.registration      # no dma-buf on the simulator
    _assert_released_in_reverse(world)


def test_memory_under_an_mr_the_nic_would_not_release_is_kept_not_freed(world):
    s = session()
    buf, mr = s.receive(8)
    stuck = next(o for o in world.live.values() if getattr(o, "lkey", None) == mr.rkey)
    stuck.close = lambda: (_ for _ in ()).throw(FakeRDMAError("mr busy", 16))
    before = len(tb_session.RETAINED)
    with pytest.raises(devx.TestbedError, match="receive MR: FakeRDMAError: mr busy"):
        s.close()
    kept = tb_session.RETAINED[before:]
    assert any(getattr(r, "_keep", None) is buf for r in kept)      # its memory stays
    assert [o.what for o in world.live.values()] == [stuck.what]    # every other release ran
    del tb_session.RETAINED[before:]


class FakeGpu:
    """GPU memory exported as a dma-buf, standing in host memory (the fake NIC reads it)."""

    def __init__(self, world):
        self.world, self.blocks, self.freed = world, {}, []

    def export(self, nbytes):
        memory = np.zeros(-(-nbytes // 65536) * 65536, dtype=np.uint8)
        fd = os.open(os.devnull, os.O_RDONLY)
        self.blocks[memory.ctypes.data] = memory
        self.world.dmabufs[fd] = memory.ctypes.data
        return devx.GpuDmabuf(memory.ctypes.data, fd, memory.nbytes, 0)

    def copy_in(self, address, words):
        self.blocks[address][:words.nbytes] = words.view(np.uint8)

    def free(self, address):
        self.freed.append(address)


@reads_gpu_memory
def test_nic_pull_from_a_dmabuf_source_carries_the_gpu_address_and_its_lkey(world):
    """The pipeline app's kernels, unchanged, pull their tiles from a dma-buf MR: the WQE
    names the array's GPU address with the MR's lkey, which the fake NIC accepts only if
    the MR is addressed from that address (iova), not from the dma-buf offset."""
    from experiments.apps import pipeline

    gpu = FakeGpu(world)
    with FakeNic(world) as nic:
        out = pipeline.run(tiles=3, tile_bytes=200, producers=2, consumers=1, threads=32,
                           paths=("nic_pull",), world_name="testbed",
                           session_kwargs={**SMALL, "testbed": {"ring_memory": "host", "gpu": gpu}})
    assert not nic.errors and not nic.violations, (nic.errors, nic.violations)
    assert out["all_verified"], out["paths"]
    assert "iova = its GPU address" in out["world"] and "connected to itself" in out["world"]
    assert gpu.freed == list(gpu.blocks) and not world.live      # MR first, then the memory
    made = [w for k, w in world.log if k == "make"]
    released = [w for k, w in world.log if k == "release"]
    assert released == made[::-1]


@reads_gpu_memory
def test_alltoall_runs_unchanged_on_testbed_through_the_fake_nic(world):
    """Every path of the all-to-all app: its kernel and Session calls as in emulated mode,
    the WQEs executed by the fake NIC (keys and ranges checked), every byte and signal
    checked by the app."""
    from experiments.apps import alltoall

    with FakeNic(world) as nic:
        out = alltoall.run(ranks=2, tokens=3, token_bytes=60, world_name="testbed",
                           session_kwargs={**SMALL, "thresholds": None})
    assert not nic.errors and not nic.violations, (nic.errors, nic.violations)
    assert set(out["paths"]) == {"gpu_push", "gpu_push_inline", "nic_pull", "host_staged", "auto"}
    assert out["all_verified"], out["paths"]
    assert out["world"].startswith("world: testbed: mlx5_0 port 1 (ethernet), 4 RC QPs each "
                                   "connected to itself")
    _assert_released_in_reverse(world)


def test_testbed_options_are_checked():
    with pytest.raises(ValueError, match=r"policy='drop', workers=2: options of the emulated NIC"):
        api.Session(1, world="testbed", policy="drop", workers=2)
    with pytest.raises(ValueError, match="options of world='testbed'"):
        api.Session(1, testbed={"device": "mlx5_0"})
    with pytest.raises(ValueError, match="testbed options 'devcie': allowed device, port, "):
        api.Session(1, world="testbed", testbed={"devcie": "mlx5_0"})


def test_without_a_nic_session_says_why_in_one_line_and_the_app_exits_3():
    from gpuwrite.backends.testbed import probe

    if probe().ok:
        pytest.skip("an RDMA NIC is present")
    with pytest.raises(api.TestbedNotReady) as exc:
        api.Session(2, world="testbed")
    assert exc.value.reason.startswith("testbed mode unavailable: ") and "\n" not in exc.value.reason
    # -P and child_env: the child imports the gpuwrite this test imported (an installed
    # copy, under README's `pytest -P`), and finds experiments/ in the checkout after it.
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-P", "-m", "experiments.apps.alltoall", "--world",
                          "testbed", "--json"], capture_output=True, text=True, timeout=120,
                         env=child_env(root), cwd=root)
    assert run.returncode == 3, run.stderr
    assert json.loads(run.stdout) == {"skipped": exc.value.reason}
