"""The engine's parallel delivery copy (csrc/gw_copy.c): with copy helpers, every byte of
a large RDMA write lands where it should and nothing around it changes, whatever the
size (split into pieces or not), the alignment and the number of workers sharing the
helpers. The engine runs on its own threads here (the helpers start with it)."""
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from gwtest import ACCESS_RW, canaried
from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.host.verbs import COPY_SPLIT_BYTES, Context, VerbsError
from gpuwrite.host.wqe import HostPoster, rdma_write

pytestmark = pytest.mark.timeout(60)

# Around the default split threshold (32 KiB) and a lower one (4 KiB, pieces of 1 KiB),
# not a multiple of the piece alignment, several pieces, and more pieces than helpers.
SIZES = (4095, 4096, 4097, 9000, 32767, 32768, 32769, 100_003, 1 << 20)
# Each write's destination starts on a 64-byte boundary (plus the QP's shift).
DST_OFFS = np.concatenate([[0], np.cumsum([(n + 63) // 64 * 64 for n in SIZES])])
SRC_OFFS = np.concatenate([[0], np.cumsum(SIZES)])


def _completions(posters, count, on_completion, deadline_s=20.0):
    """Polls every poster until ``count`` completions; ``on_completion(k, j, c)`` runs as
    soon as QP k's j-th completion is seen (a completion promises its bytes are there)."""
    got = {id(p): [] for p in posters}
    end = time.monotonic() + deadline_s
    while sum(map(len, got.values())) < count and time.monotonic() < end:
        for k, p in enumerate(posters):
            while (c := p.poll()) is not None:
                on_completion(k, len(got[id(p)]), c)
                got[id(p)].append(c)
    return [got[id(p)] for p in posters]


@pytest.mark.parametrize("workers, split", [(1, None), (2, None), (1, 4096), (2, 4096)])
def test_split_deliveries_land_exactly(workers, split):
    rng = np.random.default_rng(5)
    total = sum(SIZES) + 64
    with Context(workers=workers, copy_threads=3, copy_split_bytes=split) as ctx:
        assert ctx.copy_split_bytes == (split or COPY_SPLIT_BYTES)
        pd = ctx.alloc_pd()
        src = rng.integers(0, 256, total, dtype=np.uint8)
        smr = pd.reg_mr(src)
        qs = pd.create_queues(2, sq_bbs=16, ncqe=16)     # two QPs: two CQs, two workers
        posters, dsts = [HostPoster(qs, i) for i in range(2)], []
        for k, p in enumerate(posters):
            # QP 1 writes 16-byte aligned destinations; QP 0 starts each 3 bytes in (the
            # unaligned case copies alone).
            shift = 3 if k == 0 else 0
            whole, dst, guard = canaried(int(DST_OFFS[-1]) + 64)
            dmr = pd.reg_mr(dst, access=ACCESS_RW)
            dsts.append((whole, dst, guard, shift))
            for n, s_off, d_off in zip(SIZES, SRC_OFFS, DST_OFFS):
                p.write(rdma_write(p.pi, p.qpn, smr.address + int(s_off), smr.lkey, n,
                                   dmr.address + int(d_off) + shift, dmr.rkey))
        late = []

        def check(k, j, c):
            # The message's last bytes, read the moment its completion is seen.
            whole, dst, guard, shift = dsts[k]
            n, s_off, d_off = SIZES[j], SRC_OFFS[j], DST_OFFS[j] + shift
            tail = min(n, 4096)
            if c.ok and not np.array_equal(dst[d_off + n - tail:d_off + n],
                                           src[s_off + n - tail:s_off + n]):
                late.append((k, j))

        ctx.start()
        for p in posters:
            p.ring()
        got = _completions(posters, 2 * len(SIZES), check)
        ctx.stop()
        # QP 1's aligned deliveries from the threshold up were split (with two workers, one
        # that finds the helpers busy with the other's copies alone); QP 0's never are.
        split_ones = sum(n >= ctx.copy_split_bytes for n in SIZES)
        counters = ctx.counters()
        shared = counters["copies_split"]
        assert shared == split_ones if workers == 1 else 1 <= shared <= split_ones
        # Each split delivery handed its helpers every piece but the worker's own, and
        # counts those the worker copied itself and how long it waited for the rest.
        threshold = ctx.copy_split_bytes
        handed = [_pieces(n, 3, threshold // 4) - 1 for n in SIZES if n >= threshold]
        if workers == 1:
            assert counters["copy_pieces"] == sum(handed)
        else:
            assert min(handed) <= counters["copy_pieces"] <= sum(handed)
        assert counters["copy_pieces_late"] <= counters["copy_pieces"]
        assert counters["copy_wait_ns"] > 0
    assert late == [], "completions seen before their bytes were in place"
    for (whole, dst, guard, shift), comps in zip(dsts, got):
        assert [c.ok for c in comps] == [True] * len(SIZES)
        want = np.full_like(dst, 0xA5)
        for n, s_off, d_off in zip(SIZES, SRC_OFFS, DST_OFFS):
            want[d_off + shift:d_off + shift + n] = src[s_off:s_off + n]
        assert np.array_equal(dst, want)
        assert (whole[:guard] == 0xA5).all() and (whole[guard + len(dst):] == 0xA5).all()
    assert ctx.copy_threads == 3


# Below, at and above the band of sizes stored through the cache (4 KiB to 32 KiB), one
# that the helpers split at 8 KiB, and one 3 bytes into its line.
CACHED_SIZES = (2048, 4096, 9000, 32767, 32768, 40_000)


@pytest.mark.parametrize("helpers, split", [(0, None), (3, 8192)])
@pytest.mark.parametrize("room", ["fits", "too_large", "off"])
def test_mid_size_deliveries_into_a_small_region_go_through_the_cache(helpers, split, room):
    """A delivery of 4 KiB to 32 KiB that is not split, into a region no longer than
    cached_dst_max_bytes, is stored through the cache (counted in copies_cached); into a
    larger region, or with the limit 0, it streams as every other one does. Every byte
    lands either way, and nothing around the destination changes."""
    rng = np.random.default_rng(17)
    offs = np.concatenate([[0], np.cumsum([(n + 63) // 64 * 64 for n in CACHED_SIZES])])
    region = int(offs[-1]) + 64
    limit = {"fits": region, "too_large": region - 1, "off": 0}[room]
    with Context(copy_threads=helpers, copy_split_bytes=split,
                 cached_dst_max_bytes=limit) as ctx:
        assert ctx.cached_dst_max_bytes == limit
        pd = ctx.alloc_pd()
        src = rng.integers(0, 256, sum(CACHED_SIZES), dtype=np.uint8)
        smr = pd.reg_mr(src)
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
        p = HostPoster(qs, 0)
        whole, dst, guard = canaried(region)
        assert dst.nbytes == region
        dmr = pd.reg_mr(dst, access=ACCESS_RW)
        s_off = 0
        for n, d_off in zip(CACHED_SIZES, offs):
            shift = 3 if n == 9000 else 0
            p.write(rdma_write(p.pi, p.qpn, smr.address + s_off, smr.lkey, n,
                               dmr.address + int(d_off) + shift, dmr.rkey))
            s_off += n
        ctx.start()
        p.ring()
        got = _completions([p], len(CACHED_SIZES), lambda *a: None)[0]
        ctx.stop()
        counters = ctx.counters()
    assert [c.ok for c in got] == [True] * len(CACHED_SIZES)
    want = np.full_like(dst, 0xA5)
    s_off = 0
    for n, d_off in zip(CACHED_SIZES, offs):
        shift = 3 if n == 9000 else 0
        want[d_off + shift:d_off + shift + n] = src[s_off:s_off + n]
        s_off += n
    assert np.array_equal(dst, want)
    assert (whole[:guard] == 0xA5).all() and (whole[guard + len(dst):] == 0xA5).all()
    split_at = split or COPY_SPLIT_BYTES
    cached = sum(4096 <= n < 32768 and (helpers == 0 or n < split_at) for n in CACHED_SIZES)
    assert counters["copies_cached"] == (cached if room == "fits" else 0)
    assert cached == (3 if helpers == 0 else 1)   # the band as this test means it


def test_cached_dst_max_bytes_is_validated():
    for bad in (-1, 1 << 63, 1.5, True, "4M"):
        with pytest.raises(ValueError, match=f"cached_dst_max_bytes={bad!r}: allowed"):
            Context(cached_dst_max_bytes=bad)


def test_copy_threads_are_validated():
    with pytest.raises(ValueError, match="copy_threads=33: allowed 0 to 32"):
        Context(copy_threads=33)
    with pytest.raises((ValueError, VerbsError), match="copy_threads"):
        Context(copy_threads=-1)


def test_copy_split_bytes_is_validated():
    for bad in (1023, 1 << 31, 4096.0, True):
        with pytest.raises(ValueError, match=f"copy_split_bytes={bad!r}: allowed .*1024 to "
                                             "1073741824 .the smallest delivery"):
            Context(copy_split_bytes=bad)
    # the engine's own check, for a config that did not come through Context
    cfg = ffi.new("struct gw_engine_config *")
    cfg.policy, cfg.workers, cfg.max_qps, cfg.max_cqs, cfg.max_mrs = 0, 1, 1, 2, 2
    cfg.copy_split_bytes = 1000
    err = ffi.new("char[]", 256)
    assert lib.gw_engine_create(cfg, err, 256) == ffi.NULL
    assert ffi.string(err).decode() == \
        "copy_split_bytes=1000: allowed 0 (the default, 32768) or 1024 to 1073741824"


def test_an_engine_with_helpers_stops_and_starts_again():
    with Context(copy_threads=2) as ctx:
        for _ in range(3):
            ctx.start()
            ctx.stop()


def test_many_split_deliveries_in_a_row():
    """Job after job through the pool (each split into pieces, the helpers racing the
    submitter for them, two workers taking turns at it): every byte of every write lands,
    and the deliveries the helpers shared are counted."""
    rng = np.random.default_rng(11)
    rounds, per_round = 12, 8
    sizes = rng.integers(4096, 40_000, size=(2, rounds, per_round)) // 16 * 16
    with Context(workers=2, copy_threads=3, copy_split_bytes=4096) as ctx:
        pd = ctx.alloc_pd()
        src = rng.integers(0, 256, int(sizes.max()) * per_round, dtype=np.uint8)
        smr = pd.reg_mr(src)
        qs = pd.create_queues(2, sq_bbs=16, ncqe=16)
        posters = [HostPoster(qs, i) for i in range(2)]
        dsts = [np.zeros(int(sizes[k].sum(axis=1).max()), dtype=np.uint8) for k in range(2)]
        dmrs = [pd.reg_mr(d, access=ACCESS_RW) for d in dsts]
        ctx.start()
        for r in range(rounds):
            for k, p in enumerate(posters):
                dsts[k][:] = 0
                off = 0
                for n in sizes[k, r]:
                    p.write(rdma_write(p.pi, p.qpn, smr.address + off, smr.lkey, int(n),
                                       dmrs[k].address + off, dmrs[k].rkey))
                    off += int(n)
                p.ring()
            got = _completions(posters, 2 * per_round, lambda *a: None)
            assert [[c.ok for c in g] for g in got] == [[True] * per_round] * 2
            for k in range(2):
                total = int(sizes[k, r].sum())
                assert np.array_equal(dsts[k][:total], src[:total]), (r, k)
        ctx.stop()
        assert 0 < ctx.counters()["copies_split"] <= sizes.size


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("helpers", [1, 3])
def test_a_split_copy_returns_only_once_every_piece_is_copied(tmp_path, helpers):
    """The pool on its own, built with ThreadSanitizer into its driver
    (benchmarks/scripts/copy_pool_bench.c), which checks every byte of each copy the
    moment gw_copy returns: a submitter that returned with a helper's piece claimed but not
    yet copied (a window of about one hand-off, too short to catch by looking) is a race
    between the helper's stores and the driver's check, which ThreadSanitizer reports
    whatever the timing."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "copy_pool_tsan"
    # Without a sanitizer runtime preloaded (scripts/sanitize_check.sh preloads ASan into
    # this process): a ThreadSanitizer binary does not start beside another runtime.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    build = subprocess.run([cc, "-fsanitize=thread", "-g", "-O1", f"-I{ROOT / 'csrc'}", "-o",
                            str(exe), str(ROOT / "benchmarks/scripts/copy_pool_bench.c"),
                            str(ROOT / "csrc/gw_copy.c"), "-lpthread"],
                           capture_output=True, text=True, env=env)
    if build.returncode != 0 and "tsan" in build.stderr.lower():
        pytest.skip(f"{cc} cannot link ThreadSanitizer here")
    assert build.returncode == 0, build.stderr
    tsan = {**env, "TSAN_OPTIONS": "halt_on_error=1"}
    run = subprocess.run([str(exe), str(helpers), "0", "60"], capture_output=True, text=True,
                         timeout=50, env=tsan)
    assert run.returncode == 0 and "ThreadSanitizer" not in run.stderr, run.stderr[-3000:]
    assert run.stdout.count("split 60 of 60") == 5
    # Every split copy handed its helpers all pieces but the submitter's own; of those,
    # the late ones (copied by the submitter itself) are counted, never more than handed.
    split_lines = [ln for ln in run.stdout.splitlines() if " split: " in ln]
    assert len(split_lines) == 5
    for ln in split_lines:
        size = int(ln.split()[0])
        late, handed = map(int, re.search(r"late (\d+) of (\d+) pieces", ln).groups())
        assert handed == 60 * (_pieces(size, helpers, piece_min=1024) - 1), ln
        assert late <= handed, ln
    # Copies 3 ms apart: the helpers (2 ms of spinning) are asleep at each, and the
    # submitter, its own piece copied before a futex wake-up, takes pieces itself.
    run = subprocess.run([str(exe), str(helpers), "3000000", "10"], capture_output=True,
                         text=True, timeout=50, env=tsan)
    assert run.returncode == 0 and "ThreadSanitizer" not in run.stderr, run.stderr[-3000:]
    lates = [int(m) for m in re.findall(r"split: .*late (\d+) of", run.stdout)]
    assert len(lates) == 5 and sum(lates) > 0, run.stdout


def _pieces(n: int, helpers: int, piece_min: int) -> int:
    """The pieces gw_copy cuts a copy of ``n`` bytes into (csrc/gw_copy.c): one per
    thread, the submitter's included, none shorter than ``piece_min`` (the pool's: a
    quarter of its split threshold; copy_pool_bench.c sets its own), each a multiple of
    64 bytes."""
    piece = max((n + helpers) // (helpers + 1), piece_min)
    piece = (piece + 63) // 64 * 64
    return -(-n // piece)


def test_the_cache_limit_defaults_to_an_eighth_of_the_l3(monkeypatch):
    from gpuwrite.host import verbs
    monkeypatch.setattr(verbs.os, "sysconf", lambda name: 96 << 20)
    assert verbs.last_level_cache_bytes() == 96 << 20
    assert verbs.default_cached_dst_max_bytes() == 12 << 20
    with Context() as ctx:
        assert ctx.cached_dst_max_bytes == 12 << 20
    # Where the OS names no L3 (sysconf 0 and no sysfs entry): 0, every delivery streams.
    monkeypatch.setattr(verbs.os, "sysconf", lambda name: 0)
    real_open = open

    def no_sysfs(path, *a, **k):
        if str(path).startswith("/sys/devices/system/cpu/"):
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", no_sysfs)
    assert verbs.default_cached_dst_max_bytes() == 0

    # sysconf silent, sysfs says it (as "32768K")
    import io

    def sysfs_says(path, *a, **k):
        if str(path) == "/sys/devices/system/cpu/cpu0/cache/index3/size":
            return io.StringIO("32768K\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", sysfs_says)
    assert verbs.last_level_cache_bytes() == 32 << 20
