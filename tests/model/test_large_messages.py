"""Large messages: the PCIe accounting counts TLPs arithmetically (head, whole chunks,
tail) instead of listing them, so its cost does not grow with the size, and a 1 GiB
message's latency takes well under a second (it took 25 to 130 s when every TLP and
completion was a list entry). The counts must match the lists they replace."""
import collections
import itertools
import random
import time

import pytest

from gpuwrite import MAX_MESSAGE_BYTES
from gpuwrite.model import paths, pcie
from gpuwrite.model.params import Params

GIB = 1 << 30


@pytest.mark.parametrize("path", ["gpu_push", "nic_pull", "host_staged"])
def test_one_gib_latency_is_quick(path):
    started = time.perf_counter()
    latency = paths.latency_ns(path, "same_switch", GIB, Params())
    elapsed = time.perf_counter() - started
    assert latency > 0
    assert elapsed < 5.0, f"{path}: a 1 GiB latency took {elapsed:.1f} s"


def test_largest_message_wire_bytes_by_arithmetic():
    link = pcie.LinkConfig()        # MPS 256, MRRS 512, RCB 64, completions at MPS
    size = MAX_MESSAGE_BYTES
    started = time.perf_counter()
    read = pcie.wire_bytes(link, "read", size, 1)
    write = pcie.wire_bytes(link, "write", size, 1)
    assert time.perf_counter() - started < 0.5
    # start 1: a short head up to the boundary, whole chunks, a tail of 1 byte
    requests = 1 + (size - 511) // 512 + 1
    completions = 2 * (requests - 2) + 2 + 1        # head 511 B: 255 (to the RCB) + 256
    assert read == pcie.WireBytes(size, size + completions * 20, requests * 24, requests + completions)
    tlps = 1 + (size - 255) // 256 + 1
    assert write == pcie.WireBytes(size, size + tlps * 24, 0, tlps)


def _links():
    for mps, mrrs, rcb, chunks in itertools.product(pcie.MPS_BYTES, pcie.MRRS_BYTES, pcie.RCB_BYTES, (False, True)):
        yield pcie.LinkConfig(mps_bytes=mps, mrrs_bytes=mrrs, rcb_bytes=rcb, rcb_chunks=chunks)


def test_counts_match_the_lists():
    rng = random.Random(7)
    sizes = [0, 1, 3, 63, 64, 65, 255, 256, 257, 4095, 4096, 4097, 20000]
    starts = [0, 1, 63, 64, 4095]
    for link in _links():
        cases = [(rng.choice(sizes), rng.choice(starts)) for _ in range(6)]
        cases += [(rng.randrange(1, 1 << 14), rng.randrange(0, 1 << 20)) for _ in range(4)]
        for size, start in cases:
            completions = pcie.completion_sizes(link, size, start)
            runs = collections.Counter()
            for payload, count in pcie.completion_runs(link, size, start):
                runs[payload] += count
            assert runs == collections.Counter(completions), (link, size, start)
            assert pcie.completion_count(link, size, start) == len(completions)
            assert pcie.read_request_count(link, size, start) == len(pcie.read_request_sizes(link, size, start))
            assert pcie.write_tlp_count(link, size, start) == len(pcie.write_tlp_sizes(link, size, start))
            assert sum(completions) == size


@pytest.mark.parametrize("size, start, chunk", [
    (0, 0, 64), (1, 0, 64), (64, 0, 64), (65, 0, 64), (64, 1, 64), (63, 1, 64), (200, 63, 64),
    (4096, 4095, 4096), (10_000, 100, 512),
])
def test_split_runs_expand_to_the_pieces(size, start, chunk):
    pieces = []
    position, end = start, start + size
    while position < end:     # the definition: cut at every multiple of chunk
        cut = min(end, (position // chunk + 1) * chunk)
        pieces.append(cut - position)
        position = cut
    runs = pcie.split_aligned_runs(size, start, chunk)
    assert [piece for piece, count in runs for _ in range(count)] == pieces
    assert pcie.split_aligned(size, start, chunk) == pieces
    assert len(runs) <= 3
