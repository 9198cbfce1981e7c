"""The device copy (gpuwrite.device.copy): exact bytes, nothing outside, 16-byte vectors.

Each kernel launch copies a table of cases, every one into its own region of a
destination filled with random canary bytes; afterwards the whole destination must equal
the canaries with exactly each case's bytes replaced.
"""
import numpy as np
import pytest
from sm90ptx import compile_sm90

from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device.copy import UNROLL, copy_bytes, preload, preload_fits, store_preloaded

# CPU-bound copies of many lengths and offsets on the simulator (no device waits): on a
# loaded 2-core machine they need more than the foundation tests' 60 s default.
pytestmark = pytest.mark.timeout(300)

# Region per case: the copy starts 0 to 3 words into a 16-byte aligned region and is
# followed by at least 16 canary bytes.
_LEAD_WORDS = 4


@cuda.jit
def _copy_cases(dst, src, cases):
    for c in range(cases.shape[0]):
        copy_bytes(dst, cases[c, 2], src, cases[c, 1], cases[c, 0],
                   cuda.threadIdx.x, cuda.blockDim.x)


@cuda.jit
def _copy_cases_ranks_in_turn(dst, src, cases, nranks):
    # One thread plays every rank of a group of nranks in turn: each rank's share of a copy
    # is its own, so this lands what nranks threads would, without nranks simulator threads.
    for c in range(cases.shape[0]):
        for rank in range(nranks):
            copy_bytes(dst, cases[c, 2], src, cases[c, 1], cases[c, 0], rank, nranks)


@cuda.jit
def _preload_cases(dst, src, cases):
    for c in range(cases.shape[0]):
        if preload_fits(cases[c, 0], cuda.blockDim.x):
            x = preload(src, cases[c, 1], cases[c, 0], cuda.threadIdx.x, cuda.blockDim.x)
            store_preloaded(dst, cases[c, 2], x, cases[c, 0], cuda.threadIdx.x, cuda.blockDim.x)


def _cases(lengths, src_offsets, dst_offsets):
    """(nbytes, src_word, dst_word) rows, regions laid out one after another; the source
    words come from one shared random source, starting at each offset mod 4."""
    rows = []
    dst_at = 0
    for n in lengths:
        for so in src_offsets:
            for do in dst_offsets:
                rows.append((n, so, dst_at + do))
                dst_at += (_LEAD_WORDS + (n + 3) // 4 + 4 + 3) // 4 * 4
    return np.array(rows, dtype=np.int64), dst_at


def _aligned(nwords, fill):
    """A uint32 array of ``nwords`` whose first word is 16-byte aligned."""
    raw = np.empty(nwords + 4, dtype=np.uint32)
    skip = (-raw.ctypes.data % 16) // 4
    out = raw[skip:skip + nwords]
    out[:] = fill
    return out


def _check(lengths, src_offsets=range(4), dst_offsets=range(4), threads=32, seed=0,
           kernel=_copy_cases, ranks=None):
    rng = np.random.default_rng(seed)
    cases, dst_words = _cases(lengths, src_offsets, dst_offsets)
    src = _aligned(max(lengths) // 4 + 8, rng.integers(0, 2**32, max(lengths) // 4 + 8,
                                                       dtype=np.uint32))
    canary = _aligned(dst_words, rng.integers(0, 2**32, dst_words, dtype=np.uint32))
    d_dst = cuda.to_device(canary)
    d_src = cuda.to_device(src)
    if ranks is None:
        kernel[1, threads](d_dst, d_src, cuda.to_device(cases))
    else:
        _copy_cases_ranks_in_turn[1, 1](d_dst, d_src, cuda.to_device(cases), ranks)
    got = d_dst.copy_to_host().view(np.uint8)
    want = canary.copy().view(np.uint8)
    for n, sw, dw in cases:
        want[dw * 4:dw * 4 + n] = src.view(np.uint8)[sw * 4:sw * 4 + n]
    bad = np.nonzero(got != want)[0]
    if len(bad):
        # Name the first case that went wrong, and whether inside or outside its bytes.
        b = int(bad[0])
        for n, sw, dw in cases:
            if b < (dw + (n + 3) // 4 + 4) * 4:
                where = "inside" if dw * 4 <= b < dw * 4 + n else "outside (a canary)"
                pytest.fail(f"copy of {n} bytes from word {sw} to word {dw} on {threads} "
                            f"threads: byte {b - dw * 4} {where} differs")
    assert len(cases) == len(list(lengths)) * len(list(src_offsets)) * len(list(dst_offsets))


# Every head/body/tail split of up to three vectors (lengths to 52 bytes, every source and
# destination word offset), around the end of a round of four vectors a thread on 32
# threads (2 KiB) and of eight (4 KiB), and past it into the round of four after it and
# the single vectors (6 KiB and the edges of 8 KiB); and lengths that leave a thread seven
# vectors after its last round of eight, with 32 threads (3200 B: 200 vectors) and with the
# simulator's 3 (4160 B: 260), where a round that started one vector early would overrun.
SHORT_LENGTHS = range(1, 53)
LONG_LENGTHS = (61, 64, 67, 2047, 2048, 2049, 2063, 3200, 4093, 4094, 4095, 4096, 4160, 6160,
                8191, 8192)


# A whole warp (32 threads) on the CUDA simulator deadlocks in this harness when gpuwrite is
# imported from site-packages (numba-cuda 0.30's simulator lock; it passes from a checkout,
# not yet explained): there the exhaustive lengths run with 1 and 3 threads, and the 32-lane
# copy is covered by test_paths_deliver_every_byte_with_the_vector_copy[32-*]; on a GPU, 32.
WARP_THREADS = [] if SIMULATOR else [32]


@pytest.mark.parametrize("threads", [1, 3, *WARP_THREADS])
def test_exact_bytes_and_canaries_short(threads):
    _check(SHORT_LENGTHS, threads=threads)


# Several simulator threads making thousands of nested device calls hung once in CI inside
# numba-cuda 0.30's simulator (kernelapi.swapped_cuda_module's per-module lock, a thread
# stopped while another waited for it; session 8): on the simulator the 3-thread case runs
# with the slow tests, on a GPU always. The long lengths with 3 threads hung there again
# in session 29's CI rehearsal (300 s, where a run takes 2 s).
_SIM_SLOW = [pytest.mark.slow] if SIMULATOR else []


@pytest.mark.parametrize("threads", [1, pytest.param(3, marks=_SIM_SLOW)] if SIMULATOR else [32])
def test_exact_bytes_and_canaries_long(threads):
    _check(LONG_LENGTHS, dst_offsets=(0, 1), threads=threads)


@pytest.mark.parametrize("threads", [1, pytest.param(3, marks=_SIM_SLOW)])
def test_preloaded_copy_exact_bytes_and_canaries(threads):
    """Loads first, stores later (the pushes' preload): every length up to its limit."""
    _check(range(1, 64 * threads + 1), threads=threads, kernel=_preload_cases)


@pytest.mark.parametrize("ranks", [256, 257, 512])
def test_groups_on_each_side_of_the_deep_copy_limit(ranks):
    """Groups of up to DEEP_GROUP_MAX threads keep eight loads in flight, larger ones four:
    exact bytes on both sides, around one round of four and of eight of each group (the
    group's ranks played in turn by one thread)."""
    from gpuwrite.device.copy import DEEP_GROUP_MAX
    assert DEEP_GROUP_MAX == 256
    four, eight = 64 * ranks, 128 * ranks
    _check((61, four - 4, four + 20, eight + 4, eight + four + 12), src_offsets=(0, 1),
           dst_offsets=(0, 3), threads=ranks, ranks=ranks)


def test_zero_bytes_writes_nothing():
    _check([0], threads=4)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [32, 128])
def test_every_length_to_4k(threads):
    _check(range(1, 4097), dst_offsets=(0, 1), threads=threads)


_PTX_SCRIPT = r"""
from gpuwrite.device.copy import copy_bytes
def kernel(dst, dst_word, src, src_word, nbytes):
    copy_bytes(dst, dst_word, src, src_word, nbytes, cuda.threadIdx.x, cuda.blockDim.x)
ptx, _ = cuda.compile_ptx(kernel, (u32[::1], i64, u32[::1], i64, i64), cc=(9, 0))
sys.stdout.write(ptx)
"""


def _loops(ptx: str):
    """The PTX of each loop: the lines from a label to the branch back to it."""
    lines = ptx.splitlines()
    out = []
    for k, line in enumerate(lines):
        if line.startswith("$L") and line.rstrip().endswith(":"):
            label = line.strip()[:-1]
            for j in range(k + 1, len(lines)):
                if "bra" in lines[j] and lines[j].rstrip().endswith(label + ";"):
                    out.append(lines[k:j + 1])
                    break
    return out


def test_ptx_has_16_byte_loads_in_flight_and_stores():
    ptx = compile_sm90(_PTX_SCRIPT, timeout=300)
    # Some loop holds UNROLL 16-byte global loads, all before its first 16-byte store.
    best = 0
    for body in _loops(ptx):
        loads = [k for k, ln in enumerate(body) if "ld.global.v4." in ln or "ld.global.b128" in ln]
        stores = [k for k, ln in enumerate(body) if "st.global.v4." in ln or "st.global.b128" in ln]
        if stores:
            best = max(best, sum(1 for k in loads if k < stores[0]))
    assert best >= UNROLL, f"no copy loop issues {UNROLL} 16-byte global loads before its stores"


# Sizes on each side of the one-thread (256 B) and one-warp (2 KiB) push limits, odd
# lengths (a partial last word) and a source that is not 16-byte aligned after them.
_PATH_SIZES = [1, 3, 64, 255, 256, 257, 1001, 2048, 2049, 5003]


@pytest.mark.parametrize("path", ["gpu_push", "host_staged"])
@pytest.mark.parametrize("threads", [4, 32])
def test_paths_deliver_every_byte_with_the_vector_copy(path, threads):
    from gpuwrite.paths import runner
    r = runner.run(path, _PATH_SIZES, n_qps=1, block_threads=threads, seed=3)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == len(_PATH_SIZES)


def test_inline_payloads_wrap_the_send_queue():
    """Inline WQEs of several BBs around a 16-BB ring: payloads cross its end."""
    from gpuwrite.paths import runner
    sizes = [448, 5, 300, 447, 64, 129] * 3
    r = runner.run("gpu_push_inline", sizes, n_qps=1, sq_bbs=32, block_threads=4, seed=4)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == len(sizes)


# --- `gpuwrite bench`'s options (its sizes sweep the copy); they could live with the CLI
# tests, which another helper owns.

@pytest.mark.parametrize("text, nbytes", [("64", 64), ("4K", 4096), ("4KiB", 4096),
                                          ("1MiB", 1 << 20), ("1m", 1 << 20), (" 2 kb ", 2048)])
def test_bench_sizes_take_binary_units(text, nbytes):
    import argparse

    from gpuwrite.cli import bench
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    assert bench._options(parser.parse_args(["bench", "-s", text]))["sizes"] == (nbytes,)


@pytest.mark.parametrize("argv, value", [(["-s", "4X"], "4X"), (["-n", "0"], "0"),
                                         (["-p", "gpu_pull"], "gpu_pull"),
                                         (["-t", "1024"], 1024), (["-s", ","], ",")])
def test_bench_bad_options_are_named_in_json(argv, value, capsys):
    import json

    from gpuwrite.cli import main
    assert main(["bench", *argv, "--json"]) == 2
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["value"] == value and data["allowed"] and str(value) in data["error"]
    assert data["exit_status"] == 2 and len(err.strip().splitlines()) == 1
