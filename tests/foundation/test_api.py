"""The put/signal/quiet device API (gpuwrite.device.api) on the CUDA simulator.

Each kernel here is what a user would write: open a QP at a scope, put, quiet, close.
Deliveries are checked byte by byte against a canary-filled destination; ordering and
completion are checked from the device while the emulated NIC is still delivering
(a slow modelled link keeps it busy).
"""
import time

import numpy as np
import pytest
from numba import int64

from gwtest import BYTES_BY_PATH
from gpuwrite.cudaenv import SIMULATOR, cuda, preload
from gpuwrite.device import api
from gpuwrite.device import verbs as dv
from gpuwrite.device.intrinsics import ld_acquire_sys_u32
from gpuwrite.host.verbs import LinkConfig
from gpuwrite.paths import kernels as K

CANARY = 0xDEADBEEF
PATHS = ("gpu_push", "gpu_push_inline", "nic_pull", "host_staged")
SLOTS2 = api.slots_shape(2)
# Plan columns: source word, bytes, destination address.
M_SRC, M_BYTES, M_DST = range(3)
# A 20 kb/s modelled link: the NIC needs ~0.1 s per message of a few hundred bytes, longer than a
# kernel takes to post them, so the device looks while data is still arriving.
SLOW_GBPS = 2e-5


@cuda.jit(device=True)
def _put_plan(h, src, plan, qp, keys, path):
    """QP ``qp``'s messages of the plan, in order, then quiet; the first error."""
    st = api.OK
    for m in range(plan.shape[1]):
        if st == api.OK:
            st = api.put(h, src, plan[qp, m, M_SRC], plan[qp, m, M_BYTES], plan[qp, m, M_DST],
                         keys[0], keys[1], path)
    done = api.quiet(h)
    api.close(h)
    return st if st != api.OK else done


@cuda.jit
def _send_block(Q, cfg, src, plan, keys, path, status):
    sh = cuda.shared.array(SLOTS2, int64)
    qp = cuda.blockIdx.x
    st = _put_plan(api.open_block(Q, cfg, qp, sh), src, plan, qp, keys, path)
    if cuda.threadIdx.x == 0:
        status[qp] = st


@cuda.jit
def _send_warp(Q, cfg, src, plan, keys, path, status):
    sh = cuda.shared.array(SLOTS2, int64)
    qp = cuda.blockIdx.x * 2 + cuda.threadIdx.x // 32    # two warps, two QPs per block
    st = _put_plan(api.open_warp(Q, cfg, qp, sh), src, plan, qp, keys, path)
    if cuda.threadIdx.x % 32 == 0:
        status[qp] = st


@cuda.jit
def _send_thread(Q, cfg, src, plan, keys, path, status):
    sh = cuda.shared.array(SLOTS2, int64)
    t = cuda.threadIdx.x
    if t < 2:                                           # two threads, a QP each
        qp = cuda.blockIdx.x * 2 + t
        status[qp] = _put_plan(api.open_thread(Q, cfg, qp, sh, t), src, plan, qp, keys, path)


SCOPES = {"thread": (_send_thread, 1, 32), "warp": (_send_warp, 1, 64), "block": (_send_block, 2, 8)}


class Layout:
    """Messages of the given sizes per QP, each in its own word-aligned range of one
    destination, then ``repeat`` messages to one shared range (per QP) whose last
    writer must win: a NIC that reordered a QP's writes would leave an earlier one."""

    def __init__(self, n_qps, sizes, repeat=3, seed=3):
        rows, word = [], 0
        for q in range(n_qps):
            row = []
            for n in sizes:
                row.append([word, n, word])
                word += (n + 3) // 4
            order_word = word
            word += (sizes[-1] + 3) // 4
            src = word
            for _ in range(repeat):
                row.append([src, sizes[-1], order_word])
                src += (sizes[-1] + 3) // 4
            word = src
            rows.append(row)
        self.plan = np.array(rows, dtype=np.int64)
        self.words = word
        self.payload = np.random.default_rng(seed).integers(0, 2**32, word, dtype=np.uint32)

    def want(self) -> np.ndarray:
        """The destination's expected bytes: every message in its range (later messages
        over earlier ones), the canary everywhere else."""
        out = np.full(self.words, CANARY, dtype=np.uint32).view(np.uint8)
        src = self.payload.view(np.uint8)
        for row in self.plan:
            for s, n, d in row:
                out[d * 4:d * 4 + n] = src[s * 4:s * 4 + n]
        return out


def _run(kernel, grid, threads, path, sizes, thresholds=None, chunk_bytes=256, link=None,
         n_qps=2, sq_bbs=256, pull_agent="copy_engine", workers=1):
    layout = Layout(n_qps, sizes)
    with api.Session(n_qps, thresholds=thresholds or api.Thresholds.fixed("gpu_push"),
                     chunk_bytes=chunk_bytes, link=link, timeout_s=20, sq_bbs=sq_bbs,
                     pull_agent=pull_agent, workers=workers) as s:
        src, smr = s.source(layout.payload)
        dst, dmr = s.receive(layout.words, fill=CANARY)
        plan = layout.plan.copy()
        plan[:, :, M_DST] = dmr.address + plan[:, :, M_DST] * 4
        keys = cuda.to_device(np.array([dmr.rkey, smr.lkey], dtype=np.int64))
        status = cuda.to_device(np.full(n_qps, 99, dtype=np.int64))
        args = (s.Q, s.cfg, src, cuda.to_device(plan), keys, api.PATH_IDS[path], status)
        preload(kernel, *args)      # before the GPU pull agent, where there is one, starts
        s.start()
        with s.agent_running():
            kernel[grid, threads](*args)
            # The legacy stream, not the device: a GPU pull agent runs beside the kernel.
            cuda.default_stream().synchronize()
        st = status.copy_to_host()
        counters = {**s.context.counters(), "agent": s.agent_report(),
                    "bounce_res": s.queues.gpu_state()[:, dv.S_BOUNCE_RES].tolist()}
        return layout, dst.host.view(np.uint8).copy(), st, counters, s.qp_errors(st)


@pytest.mark.parametrize("scope", list(SCOPES))
@pytest.mark.parametrize("path", PATHS)
def test_put_delivers_exact_bytes_in_qp_order(scope, path):
    kernel, grid, threads = SCOPES[scope]
    # Sizes of every kind: partial words, one-thread pushes (16-byte multiples), and one
    # longer than the 256-byte chunk (split into WQEs on gpu_push and host_staged).
    sizes = [1, 7, 64, 100, 300] if path != "gpu_push_inline" else [1, 7, 64, 100, 300, 476]
    layout, got, status, counters, errors = _run(kernel, grid, threads, path, sizes)
    assert list(status) == [api.OK, api.OK], (errors, counters)
    assert np.array_equal(got, layout.want())
    assert counters[BYTES_BY_PATH[path]] == int(layout.plan[:, :, M_BYTES].sum()), counters
    # gpu_push and host_staged split a message into WQEs of at most chunk_bytes (256 here);
    # the other paths post one WQE a message.
    n = layout.plan[:, :, M_BYTES]
    wqes = int(np.sum(-(-n // 256))) if path in ("gpu_push", "host_staged") else n.size
    assert counters["wqes"] == wqes, counters


def test_host_staged_puts_claim_whole_vectors_of_the_bounce_ring():
    """Every host_staged WQE of a put takes whole 16-byte vectors of the bounce ring, the
    leader's claims (100 B, 300 B as 256 + 44) as the one-thread puts' (20 B): each run
    then starts on a vector, where a later small put's 16-byte stores can go."""
    layout, got, status, counters, errors = _run(_send_block, 1, 8, "host_staged",
                                                 [100, 300, 20], n_qps=1)
    assert list(status) == [api.OK], errors
    assert np.array_equal(got, layout.want())
    # 100 -> 7 vectors, 256 -> 16, 44 -> 3, and 20 -> 2 for each of four 20-byte puts.
    assert counters["bounce_res"] == [4 * (7 + 16 + 3 + 4 * 2)]


def test_inline_payloads_wrap_the_send_queue():
    # 300-byte inline WQEs take 6 BBs: in a 64-BB ring the 11th starts at BB 60 and its
    # payload runs past the ring's end into BB 0.
    layout, got, status, counters, errors = _run(_send_block, 1, 8, "gpu_push_inline",
                                                 [300] * 11, n_qps=1, sq_bbs=64)
    assert list(status) == [api.OK], errors
    assert np.array_equal(got, layout.want())


def test_path_numbers_are_the_kernels():
    assert {k: v for k, v in api.PATH_IDS.items() if k != "auto"} == K.PATH_IDS


@cuda.jit
def _path_for(cfg, sizes, out):
    for k in range(sizes.shape[0]):
        out[k] = api.path_for(cfg, sizes[k])


def test_auto_takes_the_threshold_path():
    rules = api.Thresholds(((100, "gpu_push_inline"), (1000, "host_staged"), (4000, "gpu_push"),
                            (1 << 40, "nic_pull")))
    sizes = [1, 100, 101, 1000, 1001, 4000, 4001, 9000]
    cfg = np.zeros(api.C_COLS, dtype=np.int64)
    rules.to_cfg(cfg)
    out = cuda.to_device(np.zeros(len(sizes), dtype=np.int64))
    _path_for[1, 1](cuda.to_device(cfg), cuda.to_device(np.array(sizes, dtype=np.int64)), out)
    got = [api.PATH_NAMES[int(p)] for p in out.copy_to_host()]
    assert got == [rules.path_for(n) for n in sizes] == [
        "gpu_push_inline", "gpu_push_inline", "host_staged", "host_staged", "gpu_push",
        "gpu_push", "nic_pull", "nic_pull"]
    # And a kernel putting with AUTO moves each message's bytes the way its rule says.
    layout, got_bytes, status, counters, errors = _run(
        _send_block, 1, 8, "auto", [60, 100, 101, 1000, 1001, 4001], thresholds=rules,
        chunk_bytes=4096, n_qps=1)
    assert list(status) == [api.OK], errors
    assert np.array_equal(got_bytes, layout.want())
    per_path = {}
    for _, n, _ in layout.plan[0]:
        per_path[rules.path_for(n)] = per_path.get(rules.path_for(n), 0) + n
    assert counters["bytes_inline"] == per_path["gpu_push_inline"]
    assert counters["bytes_host_read"] == per_path["host_staged"]
    assert counters["bytes_pushed"] == per_path["gpu_push"]
    assert counters["bytes_pulled"] == per_path["nic_pull"]


def _launch(s, kernel, grid, block, *args):
    """Runs ``kernel`` on session ``s`` as a researcher's code should: loaded before the GPU
    pull agent starts (where nic_pull has one), the agent running beside it, and a wait
    for the legacy stream only (a whole-device synchronize would wait for the agent).
    Before, these tests pulled with the copy engine beside a whole-device synchronize, and
    one timed out once on an H100 (session 16; the cause was not established)."""
    preload(kernel, *args)
    s.start()
    with s.agent_running():
        kernel[grid, block](*args)
        cuda.default_stream().synchronize()     # the engine must outlive the kernel


@cuda.jit
def _signal_race(Q, cfg, src, prm, path, recv, sig, out):
    """Block 0 put_signals messages and leaves without waiting; block 1 (which the
    simulator runs after block 0, while the NIC is still delivering) waits for each
    signal and then compares the message's words with the source."""
    sh = cuda.shared.array(SLOTS2, int64)
    n_msgs, words, dst, rkey, lkey, sig_addr, sig_rkey, timeout = \
        prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7]
    if cuda.blockIdx.x == 0:
        h = api.open_block(Q, cfg, 0, sh)
        st = api.OK
        for m in range(n_msgs):
            if st == api.OK:
                st = api.put_signal(h, src, m * words, words * 4, dst + m * words * 4, rkey,
                                    lkey, path, sig_addr + 8 * m, sig_rkey, m + 1)
        api.close(h)
        if cuda.threadIdx.x == 0:
            out[0] = st
        return
    if cuda.threadIdx.x != 0:
        return
    # Whether the last signal was still unset when the consumer began: the race is live.
    out[2] = 1 if ld_acquire_sys_u32(sig, 2 * (n_msgs - 1)) == 0 else 0
    bad = 0
    for m in range(n_msgs):
        st = api.wait_signal(sig, m, m + 1, timeout)
        if st != api.OK:
            out[1] = st
            return
        for k in range(words):
            if ld_acquire_sys_u32(recv, m * words + k) != src[m * words + k]:
                bad += 1
    out[3] = bad


@pytest.mark.parametrize("path,words", [("gpu_push", 64), ("gpu_push", 65), ("nic_pull", 64),
                                        ("host_staged", 64), ("gpu_push_inline", 100)])
def test_put_signal_never_shows_the_signal_before_the_data(path, words):
    """gpu_push with 64 words goes by the one-thread push, with 65 by the block copy."""
    n_msgs = 6
    payload = np.random.default_rng(11).integers(1, 2**32, n_msgs * words, dtype=np.uint32)
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"),
                     link=LinkConfig(rate_gbps=SLOW_GBPS), chunk_bytes=1024, timeout_s=30) as s:
        src, smr = s.source(payload)
        recv, rmr = s.receive(n_msgs * words)
        sig, sig_mr = s.receive(2 * n_msgs)
        prm = np.array([n_msgs, words, rmr.address, rmr.rkey, smr.lkey, sig_mr.address,
                        sig_mr.rkey, int(20e9)], dtype=np.int64)
        out = cuda.mapped_array(4, dtype=np.int64)
        out[:] = 0
        _launch(s, _signal_race, 2, 4, s.Q, s.cfg, src, cuda.to_device(prm), api.PATH_IDS[path],
                recv.kernel, sig.kernel, out)
    assert list(out[:2]) == [api.OK, api.OK], [api.error_name(x) for x in out[:2]]
    assert out[2] == 1, "the NIC had delivered every signal before the consumer began"
    assert out[3] == 0, f"{out[3]} words read after their signal were not the data"


@pytest.mark.skipif(SIMULATOR, reason="the GPU pull agent runs beside the kernel: a real GPU only")
@pytest.mark.parametrize("scope,workers", [("warp", 1), ("block", 1), ("block", 2)])
def test_nic_pull_answered_by_the_gpu_agent_delivers_exact_bytes(scope, workers):
    # workers=2: the QPs spread over two engine workers, both posting to the one ring.
    kernel, grid, threads = SCOPES[scope]
    layout, got, st, counters, errors = _run(kernel, grid, threads, "nic_pull",
                                             (4, 62, 256, 1000, 4096), pull_agent="gpu",
                                             workers=workers)
    assert list(st) == [api.OK, api.OK], errors
    assert np.array_equal(got, layout.want())
    plan_msgs = layout.plan.shape[0] * layout.plan.shape[1]
    agent = counters["agent"]
    assert agent["engine_answered"] == agent["pulls"] == plan_msgs and agent["engine_failed"] == 0


def test_pull_agent_choices_are_checked():
    with pytest.raises(ValueError, match=r"pull_agent='agent': allowed gpu, copy_engine"):
        api.Session(1, pull_agent="agent")
    if SIMULATOR:
        with pytest.raises(ValueError, match="the CUDA simulator runs one kernel at a time"):
            api.Session(1, pull_agent="gpu")
    with api.Session(1) as s:
        assert "nic_pull is pulled by the copy engine" in s.describe() and s.agent_report() is None


@cuda.jit
def _quiet_then_look(Q, cfg, src, prm, path, recv, out):
    """Puts messages, records whether the last had landed before quiet (it must not
    have, or the test shows nothing), quiets, and counts the words not yet landed."""
    sh = cuda.shared.array(SLOTS2, int64)
    n_msgs, words, dst, rkey, lkey = prm[0], prm[1], prm[2], prm[3], prm[4]
    h = api.open_block(Q, cfg, 0, sh)
    st = api.OK
    for m in range(n_msgs):
        if st == api.OK:
            st = api.put(h, src, m * words, words * 4, dst + m * words * 4, rkey, lkey, path)
    if st == api.OK:
        st = api.flush(h)
    if cuda.threadIdx.x == 0:
        last = n_msgs * words - 1
        out[0] = 1 if ld_acquire_sys_u32(recv, last) == src[last] else 0
    done = api.quiet(h)
    api.close(h)
    if cuda.threadIdx.x == 0:
        missing = 0
        for k in range(n_msgs * words):
            if ld_acquire_sys_u32(recv, k) != src[k]:
                missing += 1
        out[1] = missing
        out[2] = done if st == api.OK else st


@pytest.mark.parametrize("path", ["gpu_push", "nic_pull", "host_staged"])
def test_quiet_returns_only_when_every_put_completed(path):
    n_msgs, words = 6, 128
    payload = np.random.default_rng(13).integers(1, 2**32, n_msgs * words, dtype=np.uint32)
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"),
                     link=LinkConfig(rate_gbps=SLOW_GBPS), timeout_s=30) as s:
        src, smr = s.source(payload)
        recv, rmr = s.receive(n_msgs * words)
        prm = np.array([n_msgs, words, rmr.address, rmr.rkey, smr.lkey], dtype=np.int64)
        out = cuda.mapped_array(3, dtype=np.int64)
        out[:] = -1
        _launch(s, _quiet_then_look, 1, 8, s.Q, s.cfg, src, cuda.to_device(prm), api.PATH_IDS[path],
             recv.kernel, out)
    assert out[2] == api.OK, api.error_name(out[2])
    assert out[0] == 0, "the last message had landed before quiet: nothing to wait for"
    assert out[1] == 0, f"{out[1]} words had not landed when quiet returned"


@cuda.jit
def _put_twice(Q, cfg, src, prm, path, out):
    """Two puts and a quiet; records each one's status (the second shows stickiness)."""
    sh = cuda.shared.array(SLOTS2, int64)
    h = api.open_block(Q, cfg, 0, sh)
    a = api.put(h, src, 0, 64, prm[0], prm[1], prm[2], path)
    b = api.put(h, src, 0, 64, prm[0], prm[3], prm[2], api.GPU_PUSH)
    c = api.quiet(h)
    api.close(h)
    if cuda.threadIdx.x == 0:
        out[0], out[1], out[2] = a, b, c


def _put_twice_run(path, rkey_first_ok=True):
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"), timeout_s=5) as s:
        src, smr = s.source(np.arange(16, dtype=np.uint32))
        dst, dmr = s.receive(16)
        bad_rkey = dmr.rkey ^ 0x55
        prm = np.array([dmr.address, dmr.rkey if rkey_first_ok else bad_rkey, smr.lkey,
                        dmr.rkey], dtype=np.int64)
        out = cuda.to_device(np.full(3, 99, dtype=np.int64))
        _launch(s, _put_twice, 1, 4, s.Q, s.cfg, src, cuda.to_device(prm), path, out)
        got = out.copy_to_host()
        return got, s.qp_errors([got[2]]), dst.host.copy()


def test_a_bad_rkey_ends_quiet_with_the_named_error_completion():
    got, errors, dst = _put_twice_run(api.GPU_PUSH, rkey_first_ok=False)
    assert got[0] == api.OK                       # put is non-blocking: the NIC finds it later
    assert got[2] == dv.E_CQE_ERROR
    assert errors[0]["status"] == api.error_name(dv.E_CQE_ERROR)
    assert errors[0]["syndrome"] == "remote_access_err", errors
    assert not dst.any()                          # no byte landed


def test_quiet_gives_up_after_the_session_timeout_with_its_error():
    """A NIC that never answers (its engine is not started): the puts are posted and quiet
    ends with the named timeout, after the session's timeout_s, not never."""
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"), timeout_s=0.3) as s:
        src, smr = s.source(np.arange(16, dtype=np.uint32))
        dst, dmr = s.receive(16)
        prm = np.array([dmr.address, dmr.rkey, smr.lkey, dmr.rkey], dtype=np.int64)
        out = cuda.to_device(np.full(3, 99, dtype=np.int64))
        started = time.monotonic()
        _put_twice[1, 4](s.Q, s.cfg, src, cuda.to_device(prm), api.GPU_PUSH, out)
        got = out.copy_to_host()
        took = time.monotonic() - started
    assert list(got) == [api.OK, api.OK, dv.E_TIMEOUT_CQE]
    assert took < 60, took
    assert not dst.host.any()                     # nothing was delivered


@cuda.jit
def _put_negative(Q, cfg, src, out):
    sh = cuda.shared.array(SLOTS2, int64)
    h = api.open_warp(Q, cfg, 0, sh)
    a = api.put(h, src, 0, -4, 0, 0, 0, api.GPU_PUSH)
    b = api.quiet(h)
    api.close(h)
    if cuda.threadIdx.x == 0:
        out[0], out[1] = a, b


def test_a_negative_size_is_an_error():
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push")) as s:
        src, _ = s.source(np.zeros(4, dtype=np.uint32))
        out = cuda.to_device(np.zeros(2, dtype=np.int64))
        s.start()
        _put_negative[1, 32](s.Q, s.cfg, src, out)
        assert list(out.copy_to_host()) == [api.E_BAD_SIZE] * 2
    assert "negative message size" in api.error_name(api.E_BAD_SIZE)


def test_an_unknown_path_is_an_error_and_it_sticks():
    got, errors, dst = _put_twice_run(7)
    assert list(got) == [api.E_BAD_PATH] * 3      # the second put and quiet keep the first
    assert "unknown path" in errors[0]["status"]
    assert not dst.any()


@cuda.jit
def _wait_unset(sig, timeout_ns, out):
    out[0] = api.wait_signal(sig, 0, 1, timeout_ns)


def test_wait_signal_times_out_with_its_error():
    sig = cuda.mapped_array(2, dtype=np.uint32)
    sig[:] = 0
    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    _wait_unset[1, 1](sig, 2_000_000, out)
    assert out.copy_to_host()[0] == api.E_TIMEOUT_SIGNAL
    assert api.error_name(api.E_TIMEOUT_SIGNAL) == "timed out waiting for a signal"


def test_thresholds_validate_themselves():
    with pytest.raises(ValueError, match="rule path 'gpu_pushy'"):
        api.Thresholds(((100, "gpu_pushy"),))
    with pytest.raises(ValueError, match="rules must grow"):
        api.Thresholds(((100, "gpu_push"), (100, "nic_pull")))
    with pytest.raises(ValueError, match="inline WQE holds at most 476"):
        api.Thresholds(((1000, "gpu_push_inline"), (2000, "gpu_push")))
    with pytest.raises(ValueError, match="last rule takes every larger"):
        api.Thresholds(((100, "gpu_push"), (200, "gpu_push_inline")))
    with pytest.raises(ValueError, match="1 to 8"):
        api.Thresholds(())


def test_model_thresholds_follow_the_model_winner():
    pytest.importorskip("pandas")         # gpuwrite.model's simulator needs it
    from gpuwrite.model import Params, rank_paths

    import pathlib

    h200 = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "calibration" / \
        "nvidia-h200-2026-11-21.toml"
    assert api.Thresholds(api.FALLBACK_RULES).rules == \
        api.Thresholds.from_model(calibration=str(h200)).rules    # as its comment says

    t = api.Thresholds.from_model(calibration=None)
    assert "model defaults" in t.source
    for size in (4, 64, 219, 220, 221, 4096, 1 << 20, 3 << 20, 4 << 20):
        ranked = [e["path"] for e in rank_paths("same_switch", size, Params())
                  if e["path"] != "gpu_push_inline" or size <= 476]
        assert t.path_for(size) == ranked[0], (size, t.rules)
    # Each crossover is found to within 1/64 of its size: the rule's last size is won by
    # its path, a size that much larger is not.
    for max_bytes, path in t.rules[:-1]:
        step = max(1, max_bytes // api.CROSSOVER_RESOLUTION)
        first = [e["path"] for e in rank_paths("same_switch", max_bytes, Params())][0]
        after = [e["path"] for e in rank_paths("same_switch", max_bytes + step, Params())][0]
        assert first == path != after


def test_session_refuses_bad_settings_by_name():
    with pytest.raises(ValueError, match="chunk_bytes=66"):
        api.Session(1, chunk_bytes=66, thresholds=api.Thresholds.fixed("gpu_push"))
    with pytest.raises(ValueError, match="sq_bbs=32"):
        api.Session(1, sq_bbs=32, thresholds=api.Thresholds.fixed("gpu_push"))
    with pytest.raises(ValueError, match="world='cloud'"):
        api.Session(1, world="cloud")
    with pytest.raises(ValueError, match="n_handles=0"):
        api.slots_shape(0)


def test_testbed_world_says_why_it_cannot_run():
    from gpuwrite.backends.testbed import probe

    if probe().ok:
        pytest.skip("an RDMA NIC is present: this checks the no-NIC message")
    with pytest.raises(api.TestbedNotReady, match="testbed mode unavailable: no"):
        api.Session(1, world="testbed", thresholds=api.Thresholds.fixed("gpu_push"))


def test_the_readme_example_runs():
    """The README's "Write your own kernel" example, as printed there."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("## Write your own kernel", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md: Write your own kernel", "exec"), {"__name__": "readme"})


def _calibration_file(folder, name, measured, device, simulator=False):
    (folder / name).write_text(f'[device]\nname = "{device}"\nsimulator = {str(simulator).lower()}\n'
                               f'measured_at_utc = "{measured}"\n[params.nic]\nprocessing_ns = 100.0\n')


def test_auto_takes_the_calibration_of_this_gpu_or_none(tmp_path, monkeypatch):
    """One GPU's crossovers are not another's: ``auto`` applies the newest calibration of
    the GPU it runs on, the model's defaults where none is stored (on an H200 the newest
    file was an H100's, and its thresholds came from there)."""
    _calibration_file(tmp_path, "a.toml", "2026-11-21T00:00:00Z", "NVIDIA H200")
    _calibration_file(tmp_path, "b.toml", "2026-11-27T00:00:00Z", "NVIDIA H100 80GB HBM3")
    _calibration_file(tmp_path, "c.toml", "2026-11-28T00:00:00Z", "NVIDIA H200", simulator=True)
    assert api.newest_calibration(str(tmp_path), device="NVIDIA H200").endswith("a.toml")
    assert api.newest_calibration(str(tmp_path), device="NVIDIA H100 80GB HBM3").endswith("b.toml")
    assert api.newest_calibration(str(tmp_path), device="NVIDIA A100-SXM4-80GB") is None
    assert api.newest_calibration(str(tmp_path)).endswith("b.toml")     # no device: the newest of a GPU
    pytest.importorskip("pandas")         # gpuwrite.model's simulator needs it
    # the folder here, not the checkout's (an installed package has none)
    newest = api.newest_calibration
    monkeypatch.setattr(api, "newest_calibration",
                        lambda folder=None, device=None: newest(str(tmp_path), device))
    monkeypatch.setattr(api, "_MODEL_CACHE", {})
    monkeypatch.setattr(api, "_this_gpu", lambda: "NVIDIA A100-SXM4-80GB")
    t = api.Thresholds.from_model()
    assert t.source.endswith("model defaults (no calibration of the NVIDIA A100-SXM4-80GB stored)")
    assert t.rules == api.Thresholds.from_model(calibration=None).rules
    monkeypatch.setattr(api, "_this_gpu", lambda: None)
    api._MODEL_CACHE.clear()              # computed once per process: the GPU does not change
    assert api.Thresholds.from_model().source.endswith("calibration b.toml (another machine's: the simulator "
                                                       "has no GPU of its own)")


# ---- misuse: each call of a program on one handle, and what it returned ----------------
SLOTS1 = api.slots_shape(1)
OP_PUT, OP_PUT_SIGNAL, OP_QUIET, OP_FLUSH, OP_CLOSE = range(5)


@cuda.jit
def _program(Q, cfg, src, ops, lkey, out):
    """Runs ``ops`` (rows: op, path, src_word, nbytes, raddr, rkey, sig_raddr, sig_rkey,
    sig_value) on one block-scope handle of QP 0; ``out[k]`` is op k's status."""
    sh = cuda.shared.array(SLOTS1, int64)
    h = api.open_block(Q, cfg, 0, sh)
    for k in range(ops.shape[0]):
        op = ops[k, 0]
        st = api.OK
        if op == OP_PUT:
            st = api.put(h, src, ops[k, 2], ops[k, 3], ops[k, 4], ops[k, 5], lkey, ops[k, 1])
        elif op == OP_PUT_SIGNAL:
            st = api.put_signal(h, src, ops[k, 2], ops[k, 3], ops[k, 4], ops[k, 5], lkey,
                                ops[k, 1], ops[k, 6], ops[k, 7], ops[k, 8])
        elif op == OP_QUIET:
            st = api.quiet(h)
        elif op == OP_FLUSH:
            st = api.flush(h)
        else:
            api.close(h)
        if cuda.threadIdx.x == 0:
            out[k] = st


def _op(op, path=api.GPU_PUSH, src_word=0, nbytes=0, raddr=0, rkey=0, sig_raddr=0, sig_rkey=0,
        sig_value=0):
    return [op, path, src_word, nbytes, raddr, rkey, sig_raddr, sig_rkey, sig_value]


def _run_program(s, src, smr, ops):
    """``_program`` on session ``s``; the statuses, one per op."""
    ops = np.array(ops, dtype=np.int64).reshape(-1, 9)
    out = cuda.to_device(np.full(len(ops), 99, dtype=np.int64))
    _launch(s, _program, 1, 4, s.Q, s.cfg, src, cuda.to_device(ops), smr.lkey, out)
    return [int(x) for x in out.copy_to_host()]


def test_a_zero_byte_put_leaves_quiet_a_completion_to_wait_for():
    """A put of 0 bytes posts nothing. When it came as the QP's unsignaled WQEs reached a
    quarter of the SQ (16 of 64 BBs), it recorded a completion asked for at the producer
    index anyway: quiet then did not ask for one at the last WQE, and timed out."""
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"), sq_bbs=64,
                     timeout_s=2) as s:
        src, smr = s.source(np.arange(1, 33, dtype=np.uint32))
        dst, dmr = s.receive(17 * 32)
        ops = [_op(OP_PUT, nbytes=100, raddr=dmr.address + 128 * m, rkey=dmr.rkey)
               for m in range(17)]
        ops += [_op(OP_PUT, nbytes=0, raddr=dmr.address, rkey=dmr.rkey), _op(OP_QUIET)]
        got = _run_program(s, src, smr, ops)
        assert got == [api.OK] * len(ops), [api.error_name(x) for x in got]
        rows = dst.host.reshape(17, 32)
        assert (rows[:, :25] == np.arange(1, 26, dtype=np.uint32)).all()
        assert not rows[:, 25:].any()


def test_a_put_after_close_is_refused_and_the_next_kernel_loses_nothing():
    """close writes the QP's state back for the next kernel; a put after it went on in
    the closed handle's rows: it was posted, and the next kernel, starting from the state
    close stored, wrote its own WQE over it and took its completion for its own: its put
    and quiet said OK and its bytes never landed."""
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"), timeout_s=2) as s:
        src, smr = s.source(np.arange(1, 5, dtype=np.uint32))
        dst, dmr = s.receive(3 * 4)
        put = [_op(OP_PUT, nbytes=16, raddr=dmr.address + 16 * k, rkey=dmr.rkey) for k in range(3)]
        got = _run_program(s, src, smr, [put[0], _op(OP_QUIET), _op(OP_CLOSE), put[1],
                                         _op(OP_FLUSH), _op(OP_QUIET), _op(OP_CLOSE)])
        assert got == [api.OK] * 3 + [api.E_CLOSED] * 3 + [api.OK], \
            [api.error_name(x) for x in got]
        assert _run_program(s, src, smr, [put[2], _op(OP_QUIET), _op(OP_CLOSE)]) == [api.OK] * 3
        rows = dst.host.reshape(3, 4)
        assert (rows[0] == [1, 2, 3, 4]).all() and not rows[1].any()
        assert (rows[2] == [1, 2, 3, 4]).all()
    assert "closed" in api.error_name(api.E_CLOSED)


@pytest.mark.parametrize("path", PATHS)
def test_a_payload_outside_the_source_array_is_refused_by_name(path):
    """A negative source word, or a source shorter than the payload: the copying paths
    sent other memory's bytes (on the simulator, the array's last words for a negative
    word, an IndexError for a short one) and nic_pull left it to the NIC."""
    p = api.PATH_IDS[path]
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"), timeout_s=2) as s:
        src, smr = s.source(np.arange(1, 9, dtype=np.uint32))     # 8 words, 32 bytes
        dst, dmr = s.receive(8)
        put = lambda word, n: _op(OP_PUT, p, word, n, dmr.address, dmr.rkey)     # noqa: E731
        for word, n in ((-1, 4), (0, 33), (4, 17), (8, 1)):
            got = _run_program(s, src, smr, [put(word, n), put(0, 4), _op(OP_QUIET)])
            assert got == [api.E_BAD_SOURCE] * 3, (word, n, [api.error_name(x) for x in got])
        assert not dst.host.any()
        # The source's last bytes, and an empty payload at its end, are in range.
        assert _run_program(s, src, smr, [put(4, 16), put(8, 0), _op(OP_QUIET)]) == [api.OK] * 3
        assert list(dst.host[:4]) == [5, 6, 7, 8]
    assert "outside the source array" in api.error_name(api.E_BAD_SOURCE)


def test_a_nic_pull_message_over_one_wqe_is_too_large_not_truncated():
    """nic_pull posts a message as one WQE, whose byte count is 32 bits: a put of
    2^32 + 4 bytes went as 4 bytes and said OK. (The sources here are short: the size
    is refused before the source is looked at; 2^31 - 1 bytes reaches that check.)"""
    with api.Session(1, thresholds=api.Thresholds.fixed("nic_pull"), timeout_s=2) as s:
        src, smr = s.source(np.arange(1, 9, dtype=np.uint32))
        dst, dmr = s.receive(8)
        put = lambda path, n: _op(OP_PUT, path, 0, n, dmr.address, dmr.rkey)     # noqa: E731
        for path in (api.NIC_PULL, api.AUTO):
            for n in ((1 << 32) + 4, 1 << 31):
                got = _run_program(s, src, smr, [put(path, n), _op(OP_QUIET)])
                assert got == [dv.E_TOO_LARGE] * 2, (path, n, [api.error_name(x) for x in got])
        assert _run_program(s, src, smr, [put(api.NIC_PULL, api.MAX_WQE_BYTES)]) == \
            [api.E_BAD_SOURCE]
        assert not dst.host.any()
    assert "nic_pull" in api.error_name(dv.E_TOO_LARGE)


@pytest.mark.parametrize("max_bytes", [float("nan"), float("inf"), 100.5, "100", True, -5, 0,
                                       (1 << 62) + 1])
def test_a_rule_size_that_is_no_whole_number_of_bytes_is_refused_by_name(max_bytes):
    """NaN and inf raised int()'s own errors (inf an OverflowError); 100.5, "100" and True
    were kept as given (the host's path_for then compared a size with a string), and a
    size past int64 failed in numpy when a Session wrote the rules into cfg."""
    with pytest.raises(ValueError, match=r"rule max_bytes .*: allowed an integer from 1 to "
                                         r"4611686018427387904"):
        api.Thresholds(((max_bytes, "gpu_push"),))
    assert api.Thresholds(((np.int64(100), "gpu_push"), (1 << 62, "nic_pull"))).path_for(101) == \
        "nic_pull"


def test_source_and_receive_refuse_what_they_would_change_by_name():
    """source() cast with np.ascontiguousarray(dtype=uint32): floats were truncated,
    negative and wider values wrapped, booleans taken as words and a 2-D array kept 2-D;
    receive() truncated nwords=2.5 and fill=1.5 and took nwords="3"."""
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push")) as s:
        for words, what in ((np.array([1.5, 2.7]), "dtype float64"),
                            (np.array([True]), "dtype bool"),
                            (np.zeros((2, 2), np.uint32), r"shape \(2, 2\)"),
                            (np.array([-1, 5]), "values -1 to 5"),
                            (np.array([1 << 40], np.uint64), "values 1099511627776 to")):
            with pytest.raises(ValueError, match=what):
                s.source(words)
        dev, _ = s.source([0, 7, 2**32 - 1])
        assert list(dev.copy_to_host()) == [0, 7, 2**32 - 1]
        for bad in (2.5, "3", True, 0, -1):
            with pytest.raises(ValueError, match=rf"nwords={bad!r}: allowed an integer of at least 1"):
                s.receive(bad)
        for bad in (1.5, -1, 2**32):
            with pytest.raises(ValueError, match=rf"fill={bad!r}: allowed an integer from 0"):
                s.receive(4, fill=bad)
        buf, _ = s.receive(np.int64(3), fill=np.uint32(2**32 - 1))
        assert list(buf.host) == [2**32 - 1] * 3


def test_session_refuses_more_bad_settings_by_name():
    """Each of these failed deep inside (OverflowError writing cfg, ZeroDivisionError
    sizing the staging ring, TypeError comparing a string, IndexError in qp_errors), or
    was replaced without a word (bounce_bytes=0 became the default)."""
    fixed = api.Thresholds.fixed("gpu_push")
    for timeout_s in (float("inf"), 1e12, float("nan"), "5", 1e-12, -1):
        with pytest.raises(ValueError, match=rf"timeout_s={timeout_s!r}: must be > 0; allowed"):
            api.Session(1, thresholds=fixed, timeout_s=timeout_s)
    with pytest.raises(ValueError, match="stage_slot_bytes=0"):
        api.Session(1, thresholds=fixed, stage_slot_bytes=0)
    with pytest.raises(ValueError, match="bounce_bytes=0"):
        api.Session(1, thresholds=fixed, bounce_bytes=0)
    # Floats were taken: 65536.0 sized the bounce ring as a float, refused under its name;
    # ring_each_bytes=1.5 became 1 in cfg.
    for name, value in (("chunk_bytes", 65536.0), ("chunk_bytes", 2**31 + 4), ("chunk_bytes", 60),
                        ("ring_each_bytes", 1.5), ("ring_each_bytes", -1), ("sq_bbs", 256.0),
                        ("sq_bbs", 32)):
        with pytest.raises(ValueError, match=rf"^{name}={value!r}: a whole"):
            api.Session(1, thresholds=fixed, **{name: value})
    with api.Session(2, thresholds=fixed, timeout_s=1e-9) as s:
        assert s.cfg_host[api.C_TIMEOUT_NS] == 1
        assert s.qp_errors([api.OK, api.E_CLOSED])[1]["status"] == api.error_name(api.E_CLOSED)
        with pytest.raises(ValueError, match="status: 3 entries; allowed at most one per QP"):
            s.qp_errors([api.OK, api.OK, dv.E_CQE_ERROR])


def test_every_code_a_call_can_return_has_a_name_in_api():
    """README's table of codes names each one as ``api.<name>``: every code in
    ``api.ERROR_NAMES`` other than the kernels' own E_NOT_ALONE (a put never sends from a
    one-thread kernel) is a constant of ``api`` with that value, and each has a meaning."""
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    rows = re.findall(r"^\| (-\d+) \| `(E_[A-Z_]+)` \|", readme.read_text(), re.M)
    assert len(rows) >= 10
    for code, name in rows:
        assert getattr(api, name) == int(code), name
        assert api.error_name(int(code)) != api.error_name(-99)     # not "unknown status"
