"""Session 26, same-host A/B of send_messages for gpu_push: what push_mid's branch costs a
64-byte message, what a shuffle hand-off gains the first warp's path, and where the warp
path's extra 0.7 us at 256 B lies (loads or stores).

  A    as committed (f5f3e3c; with --after, 8284ee9)
  N    without the push_mid branch (``if small:``): 64 B
  S    A with lane 0's reservation handed to the lanes by shuffles (no shared memory, no
       first warp barrier): 1 KiB and 2 KiB
  W0   N's warp path at 256 B (the lanes load and store)
  LS   the lanes load, lane 0 stores all of it (through shared memory)
  SL   lane 0 loads all of it (as push_mid), the lanes store it (through shared memory)

32 and 256 threads, five rounds in turn, 2000 messages each, p50 us.
With ``--after`` (run on the tree after fast_paths_ab.py's straight-line preload and store
were adopted): A against N only, at 64, 128, 256 and 1024 B.
Usage: python3 benchmarks/scripts/mid_branch_ab.py [--after] OUT.jsonl"""
import sys
import types as pytypes

from gpuwrite.paths import kernels as K

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ab import run_rounds  # noqa: E402

from warp_path_ab import K_SRC, MID, RES  # noqa: E402  (the kernel's text they replace)

# The first warp's path: its preload, then warp_path_ab's lines from the reservation on.
WARP = """                        pre = preload_fits(n, lanes)
                        x = preload(src, src_word, n if pre else 0, tid, lanes)
""" + RES
SHUFFLE = """                        pre = preload_fits(n, lanes)
                        x = preload(src, src_word, n if pre else 0, tid, lanes)
                        st = 0
                        word = 0
                        if tid == 0:
                            st, word = dv.push_reserve(q, 0, n, raddr, rkey, signaled, timeout)
                        mask = 0xFFFFFFFF if lanes >= 32 else (1 << lanes) - 1
                        status = cuda.shfl_sync(mask, st, 0)
                        word = cuda.shfl_sync(mask, word, 0)
                        if status == 0 and pre:
                            store_preloaded(q[dv.Q_STAGE][0], word, x, n, tid, lanes)
                        elif status == 0:
                            copy_bytes(q[dv.Q_STAGE][0], word, src, src_word, n, tid, lanes)
                        warp_sync(lanes)
"""
# 256 B only (16 vectors): the diagnostics hold the payload in 64 words of shared memory.
LANES_LOAD = """                        x = preload(src, src_word, n, tid, lanes)
                        if tid < 16:
                            shbuf[4 * tid] = x[0][0]
                            shbuf[4 * tid + 1] = x[0][1]
                            shbuf[4 * tid + 2] = x[0][2]
                            shbuf[4 * tid + 3] = x[0][3]
                        if tid == 0:
                            st, word = dv.push_reserve(q, 0, n, raddr, rkey, signaled, timeout)
                            sh[0] = st
                            sh[1] = word
                        warp_sync(lanes)
                        status = sh[0]
                        if tid == 0 and status == 0:
                            stage = q[dv.Q_STAGE][0]
                            for v in range(16):
                                st_v4_u32(stage, sh[1] + 4 * v, shbuf[4 * v], shbuf[4 * v + 1],
                                          shbuf[4 * v + 2], shbuf[4 * v + 3])
                        warp_sync(lanes)
"""
LANE0_LOADS = """                        if tid == 0:
                            a = ld_v4_u32(src, src_word)
                            b = ld_v4_u32(src, src_word + 4)
                            c = ld_v4_u32(src, src_word + 8)
                            d = ld_v4_u32(src, src_word + 12)
                            e = ld_v4_u32(src, src_word + 16)
                            f = ld_v4_u32(src, src_word + 20)
                            g = ld_v4_u32(src, src_word + 24)
                            h = ld_v4_u32(src, src_word + 28)
                            st, word = dv.push_reserve(q, 0, n, raddr, rkey, signaled, timeout)
                            sh[0] = st
                            sh[1] = word
                            for v in range(8, 16):
                                y = ld_v4_u32(src, src_word + 4 * v)
                                for k in range(4):
                                    shbuf[4 * v + k] = y[k]
                            for k in range(4):
                                shbuf[k] = a[k]
                                shbuf[4 + k] = b[k]
                                shbuf[8 + k] = c[k]
                                shbuf[12 + k] = d[k]
                                shbuf[16 + k] = e[k]
                                shbuf[20 + k] = f[k]
                                shbuf[24 + k] = g[k]
                                shbuf[28 + k] = h[k]
                        warp_sync(lanes)
                        status = sh[0]
                        if tid < 16 and status == 0:
                            st_v4_u32(q[dv.Q_STAGE][0], sh[1] + 4 * tid, shbuf[4 * tid],
                                      shbuf[4 * tid + 1], shbuf[4 * tid + 2], shbuf[4 * tid + 3])
                        warp_sync(lanes)
"""
SH = "        sh = cuda.shared.array(4, dtype=int64)\n"


def variant(v: str):
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    assert s.count(MID) == 1 and s.count(WARP) == 1 and s.count(SH) == 1
    s = s.replace("from numba import int64\n", "from numba import int64, uint32\nfrom gpuwrite."
                  "device.intrinsics import ld_v4_u32, st_v4_u32\n")
    s = s.replace(SH, SH + "        shbuf = cuda.shared.array(64, dtype=uint32)\n")
    if v != "A" and v != "S":
        s = s.replace(MID, "                if small:\n")
    s = s.replace(WARP, {"S": SHUFFLE, "LS": LANES_LOAD, "SL": LANE0_LOADS}.get(v, WARP))
    mod = pytypes.ModuleType("mb_" + v)
    mod.__file__ = K.__file__
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


PLAN = {64: ("A", "N"), 256: ("A", "W0", "LS", "SL"), 1024: ("A", "S"), 2048: ("A", "S")}


PLAN_AFTER = {64: ("A", "N"), 128: ("A", "N"), 256: ("A", "N"), 1024: ("A", "N")}


def main(out_path: str, plan=PLAN) -> None:
    names = sorted({v for vs in plan.values() for v in vs})
    run_rounds({v: variant(v) for v in names}, plan, out_path)


if __name__ == "__main__":
    if sys.argv[1] == "--after":
        main(sys.argv[2], PLAN_AFTER)
    else:
        main(sys.argv[1])
