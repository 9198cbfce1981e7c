"""What the first warp's push path (257 B to 2 KiB; 65 B to 2 KiB before dv.push_mid)
loses against one thread (session 25): send_messages for gpu_push as committed (A) and
with 256 B sent through the warp path (W0), lane 0 posting all of it between the warp's two
barriers (W1), lane 0's reservation handed to the lanes by shuffles instead of shared memory
and the first barrier (W5), and without the second barrier (W6: a diagnostic only; nothing
then orders the lanes' stores before the doorbell). 256 B and 1 KiB, 32 and 256 threads,
five rounds in turn, 2000 messages each, p50 us.
Usage: python3 benchmarks/scripts/warp_path_ab.py OUT.jsonl"""
import sys
import types as pytypes

from gpuwrite.paths import kernels as K

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ab import run_rounds  # noqa: E402

K_SRC = open(K.__file__).read()
MID = "                if small or (path == PUSH and dv.push_mid_ok(src, src_word, n)):\n"
RES = """                        if tid == 0:
                            st, word = dv.push_reserve(q, 0, n, raddr, rkey, signaled, timeout)
                            sh[0] = st
                            sh[1] = word
                        warp_sync(lanes)
                        status = sh[0]
                        if status == 0 and pre:
                            store_preloaded(q[dv.Q_STAGE][0], sh[1], x, n, tid, lanes)
                        elif status == 0:
                            copy_bytes(q[dv.Q_STAGE][0], sh[1], src, src_word, n, tid, lanes)
                        warp_sync(lanes)
"""


def variant(v: str):
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    assert s.count(MID) == 1 and s.count(RES) == 1
    if v != "A":
        s = s.replace(MID, "                if small:\n")
    if v == "W1":
        s = s.replace(RES, """                        if tid == 0:
                            status = dv.push_mid(q, 0, src, src_word, n, raddr, rkey, signaled,
                                                 timeout)
                        warp_sync(lanes)
                        warp_sync(lanes)
""")
    elif v == "W5":
        s = s.replace(RES, """                        st = 0
                        word = 0
                        if tid == 0:
                            st, word = dv.push_reserve(q, 0, n, raddr, rkey, signaled, timeout)
                        status = cuda.shfl_sync(0xFFFFFFFF, st, 0)
                        word = cuda.shfl_sync(0xFFFFFFFF, word, 0)
                        if status == 0 and pre:
                            store_preloaded(q[dv.Q_STAGE][0], word, x, n, tid, lanes)
                        elif status == 0:
                            copy_bytes(q[dv.Q_STAGE][0], word, src, src_word, n, tid, lanes)
                        warp_sync(lanes)
""")
    elif v == "W6":
        s = s.replace(RES, RES[:RES.rindex("                        warp_sync(lanes)\n")])
    mod = pytypes.ModuleType("wp_" + v)
    mod.__file__ = K.__file__
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


def main(out_path: str) -> None:
    ks = {v: variant(v) for v in ("A", "W0", "W1", "W5", "W6")}
    # W1 (lane 0 posting it all) holds at most 256 B
    run_rounds(ks, {256: tuple(ks), 1024: ("A", "W0", "W5", "W6")}, out_path)


if __name__ == "__main__":
    main(sys.argv[1])
