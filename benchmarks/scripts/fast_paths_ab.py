"""Session 26, same-host A/B (after warp_store_ab.py): the preload and the store of whole
aligned 16-byte vectors as straight-line predicated code, ahead of the general code of
``preload`` / ``store_preloaded`` (per-word loads and stores, byte stores of a last
partial word), in the first warp's path and in the block path.

  A     as committed at the time (f5f3e3c; from 8284ee9 on, A holds the change itself)
  W0F3  warp_store_ab's F3 at 256 B (no push_mid branch; straight-line stores)
  W0H   W0F3 with the straight-line preload too
  AF    A with both, wherever the kernel preloads (warp and block paths)

32 and 256 threads, five rounds in turn, 2000 messages each (1000 at 16 KiB), p50 us.
Usage: python3 benchmarks/scripts/fast_paths_ab.py OUT.jsonl"""
import sys

from gpuwrite.cudaenv import cuda
from gpuwrite.device.copy import load16_if, preload
from gpuwrite.device.intrinsics import address_of

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import warp_store_ab as WS  # noqa: E402
from _ab import run_rounds  # noqa: E402


@cuda.jit(device=True)
def preload_fast(src, src_word, nbytes, rank, nranks):
    if (nbytes & 15) == 0 and (address_of(src, src_word) & 15) == 0:
        nvec = nbytes >> 4
        return (load16_if(src, src_word + 4 * rank, rank < nvec),
                load16_if(src, src_word + 4 * (rank + nranks), rank + nranks < nvec),
                load16_if(src, src_word + 4 * (rank + 2 * nranks), rank + 2 * nranks < nvec),
                load16_if(src, src_word + 4 * (rank + 3 * nranks), rank + 3 * nranks < nvec))
    return preload(src, src_word, nbytes, rank, nranks)


def variant(v: str):
    base = {"W0F3": "F3", "W0H": "F3", "AF": "F3A", "A": "A"}[v]
    k = WS.variant(base)
    g = k.py_func.__globals__
    if v in ("W0H", "AF"):
        g["preload"] = preload_fast
    if v == "AF":
        g["store_preloaded"] = WS.store_fast     # the block path's stores too
    return k


PLAN = {256: ("W0F3", "W0H"), 1024: ("A", "AF"), 4096: ("A", "AF"), 16384: ("A", "AF")}


def main(out_path: str) -> None:
    ks = {v: variant(v) for v in ("A", "W0F3", "W0H", "AF")}
    run_rounds(ks, PLAN, out_path, messages=lambda size: 1000 if size > 4096 else 2000)


if __name__ == "__main__":
    main(sys.argv[1])
