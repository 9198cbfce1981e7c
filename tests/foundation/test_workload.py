"""Messages of any byte length: the workload both runners build, the byte-exact check of
what arrived, and every path delivering lengths that are not whole words."""
import numpy as np
import pytest

from gwtest import small
from gpuwrite import layouts as L
from gpuwrite.paths import runner, workload


def test_both_ranks_build_the_same_workload():
    a = workload.build("gpu_push", [64, 256, 4096, 64, 128], 2, seed=3)
    b = workload.build("gpu_push", [64, 256, 4096, 64, 128], 2, seed=3)
    for x, y in ((a.msgs, b.msgs), (a.qp_of, b.qp_of), (a.payload, b.payload)):
        assert np.array_equal(x, y)
    assert list(a.qp_of) == [0, 0, 0, 1, 1]
    assert len(a.payload) == (64 + 256 + 4096 + 64 + 128) // 4
    assert a.qp_first(2).tolist() == [0, 3, 5]


def test_odd_lengths_start_on_a_word_and_span_whole_words():
    wl = workload.build("gpu_push", [5, 1, 8, 7], 1, seed=1)
    assert wl.sizes.tolist() == [5, 1, 8, 7]
    assert wl.words.tolist() == [2, 1, 2, 2]
    assert wl.msgs[:, 1].tolist() == [0, 2, 3, 5]          # source words
    assert wl.msgs[:, 2].tolist() == [0, 8, 12, 20]        # destination byte offsets
    assert len(wl.payload) == 7


def _deliver(wl, dst, extra=0):
    """Copies every message's bytes (and ``extra`` more) the way a path would."""
    out, src = dst.view(np.uint8), wl.payload.view(np.uint8)
    for size, word, _ in wl.msgs:
        out[4 * word:4 * word + size + extra] = src[4 * word:4 * word + size + extra]


def test_arrived_is_byte_exact_and_guards_the_rest_of_the_last_word():
    wl = workload.build("gpu_push", [5, 1, 8, 7, 3], 1, seed=2)
    dst = wl.destination()
    assert not wl.arrived(dst).any()
    _deliver(wl, dst)
    assert wl.arrived(dst).all()
    # One byte of message 0 wrong: only message 0 fails.
    dst.view(np.uint8)[3] ^= 0x40
    assert wl.arrived(dst).tolist() == [False, True, True, True, True]
    # A path that delivers whole last words writes past a 5-byte message's end.
    dst = wl.destination()
    _deliver(wl, dst, extra=3)
    ok = wl.arrived(dst)
    assert ok.tolist() == [s % 4 == 0 for s in wl.sizes]
    assert wl.untouched(wl.destination(), 0) and not wl.untouched(dst, 0)


@pytest.mark.parametrize("bad, match", [
    ([64, 0], "message size 0 bytes: sizes must be positive"),
    ([64, -4], "message size -4 bytes"),
    ([1.5], "whole numbers of bytes"),
    ([], "non-empty list"),
])
def test_bad_sizes_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        workload.build("gpu_push", bad, 1, 1)


def test_inline_sizes_and_paths_are_checked():
    with pytest.raises(ValueError, match="too large for an inline WQE"):
        workload.build("gpu_push_inline", [512], 1, 1)
    with pytest.raises(ValueError, match="path='gpu_pull': allowed gpu_push, "):
        workload.build("gpu_pull", [64], 1, 1)
    with pytest.raises(ValueError, match="n_qps=0"):
        workload.build("gpu_push", [64], 0, 1)


@pytest.mark.parametrize("path", runner.PATHS)
def test_every_path_delivers_lengths_that_are_not_whole_words(path):
    """Exactly ``size`` bytes arrive: the rest of each message's last word keeps the
    canary (``Workload.arrived``), on the one-thread, block and chunked paths alike."""
    sizes = [1, 3, 5, 13, 66, 255, 64, 301, 2, 1001] * small(4, 1)
    if path == "gpu_push_inline":
        sizes = [s for s in sizes if s <= L.MAX_INLINE_BYTES]
    r = runner.run(path, sizes, n_qps=2, batch=3, chunk_bytes=256, block_threads=8, seed=9)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == len(sizes)
    assert r.counters["bytes_delivered"] == sum(sizes)
    assert r.errors == 0 and r.dropped == 0
