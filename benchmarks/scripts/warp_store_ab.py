"""Session 26, same-host A/B: is the first warp's path slow (0.7 us over one thread at
256 B, BENCHMARKS.md session 25) because of the code between its two warp barriers?
mid_branch_ab.py found that the lanes loading (lane 0 storing) and the lanes storing
(lane 0 loading) are each as fast as one thread; only the lanes doing both, through
``store_preloaded`` and its ``copy_bytes`` fallback, are slow.

  A     as committed at the time (f5f3e3c: push_mid for 80 to 256 B)
  W0    without the push_mid branch: 256 B takes the warp path
  F1    W0 with a straight-line store of whole aligned vectors before store_preloaded
  F2    W0 without the warp path's copy_bytes fallback (never taken here: 32 lanes hold
        2 KiB)
  F3    F1 and F2
  F3A   F3 with the push_mid branch (for 1 and 2 KiB: A against F3A)
  F3S   F3A with lane 0's reservation handed over by shuffles

32 and 256 threads, five rounds in turn, 2000 messages each, p50 us.
Usage: python3 benchmarks/scripts/warp_store_ab.py OUT.jsonl"""
import sys
import types as pytypes

from gpuwrite.cudaenv import cuda
from gpuwrite.device.copy import store_preloaded
from gpuwrite.device.intrinsics import address_of, st_v4_u32
from gpuwrite.paths import kernels as K

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import mid_branch_ab as MB  # noqa: E402
from _ab import run_rounds  # noqa: E402


@cuda.jit(device=True)
def store_fast(dst, dst_word, x, nbytes, rank, nranks):
    if (nbytes & 15) == 0 and (address_of(dst, dst_word) & 15) == 0:
        nvec = nbytes >> 4
        if rank < nvec:
            st_v4_u32(dst, dst_word + 4 * rank, x[0][0], x[0][1], x[0][2], x[0][3])
        if rank + nranks < nvec:
            st_v4_u32(dst, dst_word + 4 * (rank + nranks), x[1][0], x[1][1], x[1][2], x[1][3])
        if rank + 2 * nranks < nvec:
            st_v4_u32(dst, dst_word + 4 * (rank + 2 * nranks), x[2][0], x[2][1], x[2][2],
                      x[2][3])
        if rank + 3 * nranks < nvec:
            st_v4_u32(dst, dst_word + 4 * (rank + 3 * nranks), x[3][0], x[3][1], x[3][2],
                      x[3][3])
        return
    store_preloaded(dst, dst_word, x, nbytes, rank, nranks)


FALLBACK = """                        elif status == 0:
                            copy_bytes(q[dv.Q_STAGE][0], sh[1], src, src_word, n, tid, lanes)
"""
FALLBACK_S = FALLBACK.replace("sh[1]", "word")
STORE = "store_preloaded(q[dv.Q_STAGE][0], sh[1], x, n, tid, lanes)"
STORE_S = STORE.replace("sh[1]", "word")


def variant(v: str):
    s = MB.K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    assert s.count(MB.MID) == 1 and s.count(MB.WARP) == 1 and s.count(FALLBACK) == 1
    if v in ("W0", "F1", "F2", "F3"):
        s = s.replace(MB.MID, "                if small:\n")
    if v == "F3S":
        s = s.replace(MB.WARP, MB.SHUFFLE)
        fb, store = FALLBACK_S, STORE_S
    else:
        fb, store = FALLBACK, STORE
    assert s.count(fb) == 1 and s.count(store) == 1
    if v in ("F1", "F3", "F3A", "F3S"):
        s = s.replace(store, store.replace("store_preloaded", "store_fast"))
    if v in ("F2", "F3", "F3A", "F3S"):
        s = s.replace(fb, "")
    mod = pytypes.ModuleType("ws_" + v)
    mod.__file__ = K.__file__
    mod.__dict__["store_fast"] = store_fast
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


PLAN = {256: ("W0", "F1", "F2", "F3", "A"), 1024: ("A", "F3A", "F3S"),
        2048: ("A", "F3A", "F3S")}


def main(out_path: str) -> None:
    ks = {v: variant(v) for v in ("A", "W0", "F1", "F2", "F3", "F3A", "F3S")}
    run_rounds(ks, PLAN, out_path)


if __name__ == "__main__":
    main(sys.argv[1])
