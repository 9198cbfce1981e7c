"""Every data path delivers every byte, in order per QP, on the simulator and on a GPU."""
import numpy as np
import pytest
from numba import uint32

from gwtest import ACCESS_RW, BYTES_BY_PATH, small
from gpuwrite import layouts as L
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.host.verbs import Context, ProtectionDomain
from gpuwrite.host.wqe import HostPoster, rdma_write, rdma_write_inline
from gpuwrite.paths import kernels as K, runner


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", runner.PATHS)
def test_every_path_delivers_every_byte(path):
    n = small(2000, 48)
    sizes = runner.default_sizes(path, n, seed=3)
    r = runner.run(path, sizes, n_qps=3, batch=4, chunk_bytes=8192, seed=11)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == n
    assert r.bytes == int(np.sum(sizes))
    assert r.errors == 0 and r.dropped == 0
    assert r.counters["msgs_delivered"] >= n         # chunked messages are several WQEs
    assert r.counters["bytes_delivered"] == int(np.sum(sizes))
    # every completion has the engine's turnaround (doorbell seen to CQE written) counted
    assert r.counters["turnarounds"] == r.counters["cqes"] > 0
    assert r.counters["turnaround_ns"] > 0
    # The kernel the runner launched was made for this path (kernels.send_messages_for):
    # the engine moved every byte the path's way and none another's.
    moved = {k: r.counters.get(k, 0) for k in BYTES_BY_PATH.values()}
    assert moved == {k: int(np.sum(sizes)) if k == BYTES_BY_PATH[path] else 0 for k in moved}
    # Every result says what stood in for hardware on its path, and host_staged's says
    # that its second PCIe crossing (the NIC's read of the bounce ring) costs nothing here.
    assert r.emulation
    if path == "host_staged":
        assert "second PCIe crossing" in r.emulation and "model counts it" in r.emulation


def _wqe_bbs(path: str, size_bytes: int) -> int:
    """Basic blocks of the one WQE that carries a message of ``size_bytes`` on ``path``."""
    if path != "gpu_push_inline":
        return 1
    return len(rdma_write_inline(0, 0, bytes(size_bytes), 0, 0)) // L.WQE_BB


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", runner.PATHS)
def test_completions_arrive_in_posting_order_per_qp(path, monkeypatch):
    """Every message signaled, none waited for before the next is posted (many WQEs in
    flight per QP): each QP's CQ, read back after the run, holds one successful completion
    per message in posting order: its WQE index and byte count, one after the other."""
    made = []
    create = ProtectionDomain.create_queues

    def keep(pd, *args, **kwargs):
        made.append(create(pd, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ProtectionDomain, "create_queues", keep)
    n, n_qps = small(400, 24), 2
    sizes = runner.default_sizes(path, n, seed=5)
    with Context() as ctx:
        r = runner.run(path, sizes, n_qps=n_qps, batch=1, wait_each=False, context=ctx)
        (qs,) = made
        cqes = qs.cq.host.view(np.uint8).reshape(n_qps, qs.ncqe, L.CQE_SIZE).copy()
    assert r.qp_errors == {} and r.delivered == n
    for q in range(n_qps):
        expect = [int(x) for x in sizes[q::n_qps]]      # the workload deals sizes round-robin
        entries = cqes[q].copy().view(L.CQE64)[:, 0]
        written = entries[(entries["op_own"] >> 4) != L.CQE_INVALID]
        assert len(written) == len(expect), f"qp {q}: {len(written)} completions"
        assert ((written["op_own"] >> 4) == L.CQE_REQ).all()
        assert [int(c) for c in written["byte_cnt"]] == expect, f"qp {q}: out of order"
        first_bb = np.cumsum([0] + [_wqe_bbs(path, s) for s in expect[:-1]])
        assert [int(c) for c in written["wqe_counter"]] == first_bb.tolist()
        assert ((written["sop_drop_qpn"] & 0xFFFFFF) == int(qs.qpns[q])).all()


# The first runner.run in a pytest worker compiles send_messages: 30 to 38 s of ptxas on an
# H100 host alone (BENCHMARKS.md, session 19), more with eight workers compiling at once.
# A hang still fails in two minutes.
RUNNER_TIMEOUT_S = 120


@pytest.mark.timeout(RUNNER_TIMEOUT_S)
@pytest.mark.parametrize("path", ["gpu_push", "nic_pull"])
@pytest.mark.parametrize("batch", [1, 4])
def test_the_last_wqe_of_every_batch_asks_for_a_completion(path, batch):
    """One CQE per batch per QP, whichever thread of the block writes the flags word."""
    per_qp = 12
    r = runner.run(path, [64] * (2 * per_qp), n_qps=2, batch=batch, block_threads=8)
    assert r.delivered == r.messages
    assert r.counters["cqes"] == 2 * per_qp // batch


@pytest.mark.timeout(20)
def test_engine_delivers_a_prefix_in_order(nic):
    """Polled one pass at a time, delivered messages always form a prefix of those posted."""
    pd = nic.alloc_pd()
    src = np.arange(64 * 40, dtype=np.uint32).view(np.uint8)
    dst = np.zeros_like(src)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=64, ncqe=64)
    p = HostPoster(qs)
    for k in range(40):
        p.write(rdma_write(p.pi, p.qpn, smr.address + 64 * k, smr.lkey, 64,
                           dmr.address + 64 * k, dmr.rkey, signaled=True))
    p.ring()
    seen = []
    while len(seen) < 40:
        nic.poll(1)
        done = [k for k in range(40) if np.array_equal(dst[64 * k:64 * k + 64],
                                                       src[64 * k:64 * k + 64])]
        assert done == list(range(len(done)))
        while (c := p.poll()) is not None:
            assert c.ok
            seen.append(c.wqe_counter)
    assert seen == list(range(40))


@pytest.mark.timeout(RUNNER_TIMEOUT_S)
def test_a_poll_delay_changes_when_completions_are_polled_not_what_arrives():
    r = runner.run("gpu_push", [64, 256, 4096], n_qps=1, wait_each=True, poll_delay_ns=2000)
    assert r.delivered == r.messages == 3 and r.qp_errors == {}
    assert np.all(r.latencies_ns >= 2000)     # every wait let the pause pass first


def test_every_queue_set_pauses_the_default_before_its_first_poll_unless_told():
    """A read sent at once after a doorbell reaches host memory before the emulated NIC has
    answered and costs a whole PCIe round trip (BENCHMARKS.md, session 23): QueueSets,
    runs and put sessions pause DEFAULT_POLL_DELAY_NS unless given another pause; 0 polls
    at once."""
    from gpuwrite.device import api
    from gpuwrite.device import verbs as dv
    from gpuwrite.host.verbs import DEFAULT_POLL_DELAY_NS, Context

    assert 0 < DEFAULT_POLL_DELAY_NS <= 1000
    with Context() as ctx:
        pd = ctx.alloc_pd()
        assert (pd.create_queues(2).info_host[:, dv.I_POLL_DELAY_NS] == DEFAULT_POLL_DELAY_NS).all()
        assert (pd.create_queues(1, poll_delay_ns=0).info_host[:, dv.I_POLL_DELAY_NS] == 0).all()
    with api.Session(1) as s:
        assert (s.queues.info_host[:, dv.I_POLL_DELAY_NS] == DEFAULT_POLL_DELAY_NS).all()
    with api.Session(1, poll_delay_ns=0) as s:
        assert (s.queues.info_host[:, dv.I_POLL_DELAY_NS] == 0).all()
    with pytest.raises(ValueError, match="poll_delay_ns=0: options of the emulated NIC"):
        api.Session(1, world="testbed", poll_delay_ns=0)


def test_the_first_poll_pause_moves_toward_where_completions_land():
    """``next_poll_adj`` (I_POLL_ADAPT): 16 ns shorter after a wait whose first poll found
    its completion, 64 ns longer after one whose first poll did not, the pause (start +
    adjustment) kept within 0 .. 8 us; a miss costs a whole PCIe read, so the pause goes
    down four times slower than up."""
    adj = dv.next_poll_adj.py_func
    assert adj(0, 300, True) == -16 and adj(0, 300, False) == 64
    assert adj(-300, 300, True) == -300          # never below no pause at all
    assert adj(-290, 300, True) == -300
    assert adj(7700, 300, False) == 7700         # never above 8 us
    assert adj(7650, 300, False) == 7700
    pause = 300
    for found in [True] * 5 + [False] + [True] * 3:
        pause = 300 + adj(pause - 300, 300, found)
    assert pause == 300 - 8 * 16 + 64


@pytest.mark.timeout(RUNNER_TIMEOUT_S)
def test_an_adapting_pause_is_kept_per_qp_and_a_fixed_one_is_not_moved():
    """With poll_adapt (the default) every wait for all of a QP's WQEs moves its pause
    (S_POLL_ADJ, kept for the next kernel) by a whole step; with poll_adapt=False it stays
    as given; the info row says which."""
    with Context() as ctx:
        pd = ctx.alloc_pd()
        assert pd.create_queues(1).info_host[0, dv.I_POLL_ADAPT] == 1
        src = cuda.to_device(np.arange(16, dtype=np.uint32))
        dst = np.zeros(16 * 8, dtype=np.uint32)
        dmr = pd.reg_mr(dst, access=ACCESS_RW)
        status = cuda.to_device(np.ones(1, np.int64))
        for adapt in (True, False):
            qs = pd.create_queues(1, poll_delay_ns=500, poll_adapt=adapt)
            assert qs.info_host[0, dv.I_POLL_ADAPT] == int(adapt)
            ctx.start()
            for k in range(4):      # four kernels, one push and one wait each
                _push_and_wait[1, 1](qs.device_args, src, dmr.address + 256 * adapt + 64 * k,
                                     dmr.rkey, status)
                cuda.synchronize()
                assert status.copy_to_host()[0] == 0
            ctx.stop()
            moved = int(qs.state.copy_to_host()[0, dv.S_POLL_ADJ])
            if adapt:
                # four waits, each 16 down or 64 up: -64, 16, 96, 176 or 256
                assert -64 <= moved <= 256 and (moved + 64) % 80 == 0
            else:
                assert moved == 0
        assert (dst.reshape(-1, 16) == np.arange(16)).all()


@cuda.jit
def _push_and_wait(Q, src, raddr, rkey, status):
    """One 64-byte push on QP 0 and a wait for it (thread 0)."""
    if cuda.threadIdx.x == 0:
        st = dv.post_small(Q, 0, False, src, 0, 64, raddr, rkey, True, 2_000_000_000)
        if st == 0:
            st = dv.wait_done(Q, 0, Q[dv.Q_STATE][0, dv.S_PI], 2_000_000_000)
        status[0] = st


def test_poll_delay_is_checked():
    with pytest.raises(ValueError, match="poll_delay_ns=-1: allowed 0 to 100000"):
        runner.run("gpu_push", [64], poll_delay_ns=-1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["gpu_push", "host_staged"])
@pytest.mark.parametrize("batch", [1, 3])
def test_small_pushes_and_block_pushes_interleave_in_order(batch, path):
    """Payloads that one thread pushes alone (multiples of 16 bytes up to 256, 16-byte
    aligned source) and those the block copies (others), mixed on the same QPs: into
    the staging ring (gpu_push) or the bounce ring (host_staged, dv.staged_small and
    dv.staged_mid)."""
    # After a 20- or 260-byte message the next source word is no longer 16-byte aligned,
    # so a 64-byte message goes either way depending on what came before it.
    sizes = [64, 20, 64, 48, 256, 260, 16, 80, 272, 112, 4, 64] * small(8, 2)
    r = runner.run(path, sizes, n_qps=2, batch=batch, block_threads=8, seed=5)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == len(sizes)
    assert r.counters["bytes_delivered"] == sum(sizes)
    assert r.errors == 0 and r.dropped == 0


@cuda.jit
def _one_thread_ok(src, cases, out):
    """The device verbs' answers for each (source word, size) case: push_small_ok and
    push_mid_ok (an inline write's one-thread tests too)."""
    if cuda.threadIdx.x == 0:
        for k in range(cases.shape[0]):
            out[k, 0] = dv.push_small_ok(src, cases[k, 0], cases[k, 1])
            out[k, 1] = dv.push_mid_ok(src, cases[k, 0], cases[k, 1])


def test_which_payloads_one_thread_pushes():
    """dv.push_small: any 1 to 64-byte payload from any word; beyond it dv.push_mid: any
    65 to 128-byte payload from any word, and whole 16-byte words from a 16-byte aligned
    source to 256 bytes."""
    cases = np.array([[0, 64], [4, 64], [8, 16], [0, 60], [2, 64], [1, 16], [0, 0], [0, 80],
                      [0, 256], [4, 128], [0, 72], [2, 128], [0, 100], [1, 65], [3, 127],
                      [0, 272], [1, 256], [0, 129], [2, 144], [0, 252]],
                     dtype=np.int64)
    src = cuda.to_device(np.zeros(256, dtype=np.uint32))   # allocations are 256-byte aligned
    out = cuda.to_device(np.zeros((len(cases), 2), dtype=np.int64))
    _one_thread_ok[1, 1](src, cuda.to_device(cases), out)
    got = [tuple(row) for row in out.copy_to_host().tolist()]
    assert got == [(1, 0)] * 6 + [(0, 0)] + [(0, 1)] * 8 + [(0, 0)] * 5


def test_the_hosts_kernel_scope_reads_the_device_verbs_alike():
    """``kernels.kernel_scope`` (the runner's choice of sending kernel) calls a one-message
    table "thread" exactly where the kernel's own tests take its message on one thread
    (dv.push_small_ok, dv.push_mid_ok, asked on the device of the buffer itself, where the
    host asks the same predicates of the table's sizes and addresses; an inline write takes
    a push's tests, dv.inline_small and dv.inline_mid): every size 1 to 300 bytes from
    source words 0 to 3 of one buffer, for the pushed paths and the inline one. A
    message split into WQEs smaller than itself, and every nic_pull table, is the block's."""
    cases = np.array([[w, n] for w in range(4) for n in range(1, 301)], dtype=np.int64)
    src = cuda.to_device(np.zeros(1024, dtype=np.uint32))
    out = cuda.to_device(np.zeros((len(cases), 2), dtype=np.int64))
    _one_thread_ok[1, 1](src, cuda.to_device(cases), out)
    dev = out.copy_to_host()
    with Context() as ctx:
        address = ctx.alloc_pd().reg_mr(src).address

    def host(path, w, n, chunk=65536):
        msgs = np.array([[n, w, 0]], dtype=np.int64)
        return K.kernel_scope(path, msgs, address, chunk)

    for (w, n), (one_small, one_mid) in zip(cases.tolist(), dev.tolist()):
        assert host("gpu_push", w, n) == host("host_staged", w, n) == \
            host("gpu_push_inline", w, n) == ("thread" if one_small or one_mid else "block"), (w, n)
        assert host("nic_pull", w, n) == "block"
    assert host("gpu_push", 0, 64, chunk=60) == "block"
    tables = np.array([[64, 0, 0], [48, 16, 64], [4096, 28, 112]], dtype=np.int64)
    assert K.kernel_scope("gpu_push", tables[:2], address, 65536) == "thread"
    assert K.kernel_scope("host_staged", tables, address, 65536) == "block"
    assert K.kernel_scope("gpu_push", tables[:0], address, 65536) == "block"


def test_a_scope_not_made_for_a_path_is_refused_by_name():
    """``send_messages_for`` names the scope and what it is made for: no one-thread kernel
    for nic_pull (its WQEs are the block's), no other scope."""
    with pytest.raises(ValueError, match=r"scope='thread' on path='nic_pull': that scope is "
                                         r"made for gpu_push, gpu_push_inline, host_staged"):
        K.send_messages_for("nic_pull", "thread")
    with pytest.raises(ValueError, match=r"scope='warp': allowed block, thread"):
        K.send_messages_for("gpu_push", "warp")


@pytest.mark.timeout(RUNNER_TIMEOUT_S)
@pytest.mark.parametrize("sizes", [[64, 4096, 64], [64, 1024, 64]])
def test_the_one_thread_kernel_refuses_a_message_it_cannot_post_alone(monkeypatch, sizes):
    """The kernel made for one-thread tables, given a table ``kernel_scope`` would not have
    given it (a message for the block, or for the first warp), fails that message with its
    own status (the threads that would copy it have left), sends nothing after it and
    delivers what came before it."""
    monkeypatch.setattr(K, "kernel_scope", lambda *args: "thread")
    r = runner.run("gpu_push", sizes, n_qps=1, wait_each=True, block_threads=8)
    (err,) = r.qp_errors.values()
    assert err["status"] == dv.ERROR_NAMES[dv.E_NOT_ALONE] and err["messages_sent"] == 2, err
    assert r.delivered == 1 and r.kernel == "thread"


@pytest.mark.parametrize("path", ["gpu_push", "host_staged"])
@pytest.mark.parametrize("threads", [4, 32])
def test_one_thread_pushes_of_65_to_256_bytes_land_exactly(threads, path):
    """Every whole-vector size dv.push_mid (dv.staged_mid) takes, sizes of 65 to 128 bytes
    that are not whole 16-byte words, which it takes too, and its neighbours the warp takes
    (past 128 bytes not whole 16-byte words, or from a source word that is not 16-byte
    aligned), each checked with the canary after it, batched and one at a time."""
    sizes = [16 * k for k in range(5, 17)] + [68, 100, 240, 252, 256, 20, 256, 272, 144, 65,
                                               127, 128, 129]
    for wait_each in (False, True):
        r = runner.run(path, sizes, n_qps=1, block_threads=threads, wait_each=wait_each,
                       batch=3)
        assert r.qp_errors == {} and r.errors == 0
        assert r.delivered == r.messages == len(sizes)
        assert r.counters[BYTES_BY_PATH[path]] == sum(sizes)


@pytest.mark.parametrize("threads", [1, 32])
def test_host_staged_small_writes_into_a_bounce_row_off_the_vector(threads):
    """A bounce ring need only be a multiple of 4 bytes, so QP 1's row of a 65,540-byte
    ring starts 4 bytes past a 16-byte boundary: the one-thread and first-warp writes
    (dv.staged_small, dv.staged_mid, the warp's store_preloaded) store it word by word
    there, where 16-byte stores would be misaligned (the simulator checks every vector
    access), and every byte lands."""
    sizes = [64, 48, 256, 144, 1024, 2048, 16] * 2
    r = runner.run("host_staged", sizes, n_qps=2, block_threads=threads, bounce_bytes=65540,
                   wait_each=True)
    assert r.qp_errors == {} and r.errors == 0
    assert r.delivered == r.messages == len(sizes)
    assert r.counters["bytes_host_read"] == sum(sizes)


def test_small_inline_writes_wrap_the_send_queue_exactly():
    """The one-thread inline post (dv.inline_small) for 16 to 64 bytes, and the block path
    for a size it does not take (100 B, not whole 16-byte words): every byte lands, also
    where a WQE's second BB wraps to the start of a 64-BB send queue: after one 16-byte
    write (one BB) every 32 to 64-byte write (two BBs) starts on an odd BB, the 32nd of
    them on the last."""
    sizes = [16] + [64, 48, 32, 64] * 10 + [100, 64] * 3
    r = runner.run("gpu_push_inline", sizes, n_qps=1, sq_bbs=64, wait_each=False, batch=3)
    assert r.delivered == len(sizes) and not r.qp_errors, (r.delivered, r.qp_errors)


@cuda.jit
def _inline_units(sq, pi, nbytes):
    """The unit stores of dv.inline_small (five) and dv.inline_mid's first nine (its
    registers' eight and the one after) for a payload of ``nbytes`` whose word k holds
    k + 1, into ``sq`` (a ring of 4 BBs) at producer index ``pi``."""
    if cuda.threadIdx.x == 0:
        chunks = (nbytes + 15) >> 4
        units = dv.inline_units(nbytes)
        nw = (nbytes + 3) >> 2
        w = uint32(0xEEEE)
        for u in range(9):
            v = (uint32(4 * u + 1) if 4 * u < nw else uint32(0),
                 uint32(4 * u + 2) if 4 * u + 1 < nw else uint32(0),
                 uint32(4 * u + 3) if 4 * u + 2 < nw else uint32(0),
                 uint32(4 * u + 4) if 4 * u + 3 < nw else uint32(0))
            w = dv._inline_unit(sq, 3, pi, u, w, v, chunks, units)


@pytest.mark.parametrize("pi", [0, 3])
def test_an_inline_wqe_writes_its_own_units_and_nothing_past_them(pi):
    """dv._inline_unit (dv.inline_small's and dv.inline_mid's stores): for every size 1 to
    128 bytes, the data segment holds the header word and the payload's words in order
    from word 9 of the WQE, zeros to the end of its last 16-byte unit, and nothing at or
    past the WQE's end (the next BB may be a WQE the NIC has not read yet); at producer
    index 3 of a 4-BB ring the WQE's later BBs are the ring's first."""
    for n in range(1, 129):
        sq = np.full(64, 0xCCCCCCCC, dtype=np.uint32)
        d = cuda.to_device(sq)
        _inline_units[1, 1](d, pi, n)
        got = d.copy_to_host()
        bbs = [(pi + b) % 4 for b in range(3)]
        wqe = np.concatenate([got[b * 16:b * 16 + 16] for b in bbs])
        nw = (n + 3) // 4
        end = 8 + 4 * ((4 + n + 15) // 16)          # the WQE's last word + 1
        want = np.array([0xEEEE] + list(range(1, nw + 1)) + [0] * (end - 9 - nw), dtype=np.uint32)
        assert list(wqe[8:end]) == list(want), n
        assert np.all(wqe[end:] == 0xCCCCCCCC) and np.all(wqe[:8] == 0xCCCCCCCC), n
        assert np.all(got[(pi + 3) % 4 * 16:][:16] == 0xCCCCCCCC), n


def _sizes_from_every_word_offset(low: int = 1, high: int = 64) -> list[int]:
    """Sizes ``low`` to ``high`` bytes in a row after one word, and back down: messages
    tile the source word by word, so every size starts at another word offset, whole
    16-byte sizes among them off the 16-byte vector, and most end inside a word."""
    sizes = [4] + list(range(low, high + 1)) + list(range(high, low - 1, -7))
    at = np.cumsum([0] + [(n + 3) // 4 for n in sizes])[:-1]
    assert any(n % 16 == 0 and w % 4 for n, w in zip(sizes, at))   # whole vectors, off the vector
    return sizes


@pytest.mark.parametrize("path", ["gpu_push", "host_staged"])
def test_one_thread_pushes_of_any_size_to_64_bytes_from_any_word_land_exactly(path):
    """dv.push_small and dv.staged_small read any 1 to 64-byte payload from any word before
    their bookkeeping (word loads where it is not whole aligned vectors) and store it as
    whole vectors into its claim: every byte lands and the bytes after each message in its
    last word keep the canary, batched and one at a time, on the one-thread kernel."""
    sizes = _sizes_from_every_word_offset()
    for wait_each in (False, True):
        r = runner.run(path, sizes, n_qps=1, block_threads=32, wait_each=wait_each, batch=3)
        assert r.qp_errors == {} and r.errors == 0, r.qp_errors
        assert r.delivered == r.messages == len(sizes) and r.kernel == "thread"
        assert r.counters[BYTES_BY_PATH[path]] == sum(sizes)


@pytest.mark.parametrize("path", ["gpu_push", "host_staged", "gpu_push_inline"])
def test_one_thread_posts_of_65_to_128_bytes_from_any_word_land_exactly(path):
    """dv.push_mid, dv.staged_mid and dv.inline_mid read any 65 to 128-byte payload from any
    word into registers before their bookkeeping (word loads where it is not whole aligned
    vectors) and store it as whole vectors (an inline write's shifted by its header word):
    every byte lands and the bytes after each message in its last word keep the canary,
    batched and one at a time, on the one-thread kernel (a 64-BB send queue for the inline
    writes, wrapped several times)."""
    sizes = _sizes_from_every_word_offset(65, 128)
    for wait_each in (False, True):
        r = runner.run(path, sizes, n_qps=1, block_threads=32, wait_each=wait_each, batch=3,
                       sq_bbs=64)
        assert r.qp_errors == {} and r.errors == 0, r.qp_errors
        assert r.delivered == r.messages == len(sizes) and r.kernel == "thread"
        assert r.counters[BYTES_BY_PATH[path]] == sum(sizes)


@pytest.mark.parametrize("threads", [1, 32])
def test_inline_writes_of_any_size_to_64_bytes_from_any_word_land_exactly(threads):
    """dv.inline_small takes every size 1 to 64 bytes from any source word: word loads
    where the payload is not whole 16-byte words from an aligned source
    (``_sizes_from_every_word_offset``; the canary checks the bytes after each), in a 64-BB
    ring wrapped several times, batched and one at a time."""
    sizes = _sizes_from_every_word_offset()
    for wait_each in (False, True):
        r = runner.run("gpu_push_inline", sizes, n_qps=1, sq_bbs=64, block_threads=threads,
                       wait_each=wait_each, batch=3)
        assert r.qp_errors == {} and r.errors == 0, r.qp_errors
        assert r.delivered == r.messages == len(sizes) and r.kernel == "thread"
        assert r.counters["bytes_delivered"] == sum(sizes)


def _inline_sizes_wrapping_every_boundary(ring_bbs: int) -> list[int]:
    """Inline sizes (one-thread ones: 16 to 256 bytes of whole 16-byte words) whose WQEs,
    posted in order from BB 0 of a ring of ``ring_bbs``, wrap its end at every boundary a
    mid inline WQE has: for each size of 80 to 256 bytes (two to five BBs) and each of its
    BB boundaries, one WQE that starts that many BBs before the ring's end. Writes of the
    most BBs that fit the gap (the smallest size of each BB count) move the producer index
    between them."""
    one = list(range(16, 257, 16))
    filler = {}
    for n in reversed(one):
        filler[_wqe_bbs("gpu_push_inline", n)] = n
    sizes, pi = [], 0
    for n in one[4:]:
        for before in range(1, _wqe_bbs("gpu_push_inline", n)):
            while (gap := -(pi + before) % ring_bbs):
                fill = filler[min(gap, max(filler))]
                sizes.append(fill)
                pi += _wqe_bbs("gpu_push_inline", fill)
            sizes.append(n)
            pi += _wqe_bbs("gpu_push_inline", n)
    return sizes


@pytest.mark.parametrize("threads", [1, 32])
def test_mid_inline_writes_wrap_the_send_queue_exactly(threads):
    """The one-thread inline post of 80 to 256 bytes (dv.inline_mid: two to five BBs, the
    first 128 bytes from registers, the rest through shared memory), batched and one at a
    time, with the block's writes (100 B, not whole 16-byte words) after them: every byte
    lands, also where a WQE wraps the send queue at each of its BB boundaries."""
    sizes = _inline_sizes_wrapping_every_boundary(32) + [64, 100, 256, 100, 240]
    for wait_each in (False, True):
        r = runner.run("gpu_push_inline", sizes, n_qps=1, sq_bbs=32, block_threads=threads,
                       wait_each=wait_each, batch=2)
        assert r.qp_errors == {} and r.errors == 0, r.qp_errors
        assert r.delivered == r.messages == len(sizes)
        assert r.counters["bytes_delivered"] == sum(sizes)


def test_workers_for_a_context_given_is_refused_not_ignored():
    """The engine threads of a context are set when it is made: a run handed a context
    with another ``workers`` names both, where it once ran with the context's silently."""
    with Context(workers=1) as ctx:
        with pytest.raises(ValueError, match=r"workers=2: the context given runs 1 engine"):
            runner.run("gpu_push", [64], n_qps=1, context=ctx, workers=2)
        r = runner.run("gpu_push", [64], n_qps=1, context=ctx, workers=1)
        assert r.delivered == 1
    with pytest.raises(ValueError, match="workers"):
        runner.run("gpu_push", [64], n_qps=1, workers=0)


@pytest.mark.parametrize("path", ["gpu_push", "nic_pull"])
def test_a_run_with_its_source_evicted_from_l2_delivers_every_byte(path):
    """``source_l2="evicted"`` writes over the GPU's L2 between the source's upload and the
    kernel (before the pull agent's persistent kernel starts, which a device-wide wait
    would hang on); every byte still arrives. Anything else is refused by name. (On the
    simulator, which has no L2, the eviction is a no-op: this checks the plumbing.)"""
    r = runner.run(path, [64, 4096, 100], n_qps=1, wait_each=True, source_l2="evicted")
    assert r.delivered == r.messages == 3 and not r.qp_errors
    with pytest.raises(ValueError, match=r"source_l2='hot': allowed as_uploaded, evicted"):
        runner.run(path, [64], n_qps=1, source_l2="hot")


def _with_bad_rkey(kernel_for):
    """``K.send_messages_for`` whose kernels get a remote key the engine never handed out:
    every write ends in an error completion (a remote access error)."""
    def made(path, scope="block"):
        kernel = kernel_for(path, scope)

        class Launcher:
            def __getattr__(self, name):       # compile(), as the runner's preload asks
                return getattr(kernel, name)

            def __getitem__(self, config):
                def launch(Q, msgs, qp_first, src, params, *rest):
                    p = params.copy_to_host()
                    p[K.P_RKEY] ^= 0x5A5A00
                    params.copy_to_device(p)
                    return kernel[config](Q, msgs, qp_first, src, params, *rest)
                return launch
        return Launcher()
    return made


@pytest.mark.timeout(RUNNER_TIMEOUT_S)
@pytest.mark.parametrize("path,sizes,threads", [
    ("gpu_push", [64, 4096, 64], 32),           # one thread's, then the block's
    ("host_staged", [256, 1024, 64], 32),       # one thread's (staged_mid), then the first
                                                # warp's
    ("gpu_push", [64, 48, 128, 256, 4096], 32),  # one thread's and the first warp's, then
                                                # the block's
    ("nic_pull", [64, 4096, 65536], 32),        # pulls
    ("gpu_push", [4096, 64, 64], 32),           # the block's first
    ("host_staged", [64, 64, 48], 32),          # a one-thread table: the kernel made for it
    ("gpu_push", [512, 64, 2048], 64),          # the first warp's, the second warp idle
])
def test_a_failure_ends_every_thread_of_the_block(path, sizes, threads, monkeypatch):
    """Thread 0 posts small writes alone, the first warp or the block copies larger
    payloads, and a one-thread table runs on the kernel whose other threads have left: a
    failure in any of them ends every thread of the block (none waits at a barrier that
    another never reaches), with the error named and the messages counted up to the one
    that failed."""
    monkeypatch.setattr(K, "send_messages_for", _with_bad_rkey(K.send_messages_for))
    r = runner.run(path, sizes, n_qps=1, wait_each=True, block_threads=threads, timeout_s=5)
    (err,) = r.qp_errors.values()
    assert err["status"] == dv.ERROR_NAMES[dv.E_CQE_ERROR], err
    assert (err["syndrome"], err["reason"]) == ("remote_access_err", "bad_rkey"), err
    assert err["messages_sent"] == 1, err
    assert r.delivered == 0


@pytest.mark.timeout(RUNNER_TIMEOUT_S)
def test_the_runner_sends_each_table_on_the_narrowest_kernel(monkeypatch):
    """A table of messages thread 0 posts alone goes to ``send_messages_for(path,
    "thread")`` (its other threads leave at once: 0.3 us off each 64-byte push on an H200,
    BENCHMARKS.md, session 40); a table with one message the first warp or the block copies,
    an inline one that is not whole 16-byte words past 128 bytes and every nic_pull table to
    the "block" kernel. Each delivers
    every byte and says which kernel ran."""
    asked = []
    real = K.send_messages_for
    monkeypatch.setattr(K, "send_messages_for",
                        lambda path, scope="block": asked.append((path, scope)) or real(path, scope))
    cases = [("gpu_push", [64, 48, 16], "thread"), ("host_staged", [256, 128, 64], "thread"),
             ("gpu_push_inline", [64, 32], "thread"), ("gpu_push", [512, 64, 2048], "block"),
             ("host_staged", [1024, 100, 16], "block"), ("gpu_push", [64, 4096], "block"),
             ("gpu_push_inline", [64, 128, 256, 8, 20], "thread"),
             ("gpu_push_inline", [64, 100], "thread"), ("gpu_push_inline", [64, 200], "block"),
             ("nic_pull", [64] * 4, "block")]
    for path, sizes, scope in cases:
        r = runner.run(path, sizes, n_qps=1, wait_each=True, block_threads=64)
        assert r.delivered == r.messages and not r.qp_errors, (path, r.qp_errors)
        assert r.counters["bytes_delivered"] == sum(sizes), path
        assert asked[-1] == (path, scope) and r.kernel == scope, (asked[-1], r.kernel)
