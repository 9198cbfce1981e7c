"""Session 37: nothing to host memory before a barrier that the payload's stores follow.

A barrier after a store to host memory waits for it (0.2 to 0.5 us, BENCHMARKS.md run 13).
Until session 37 the first warp's path had lane 0 write the staging header and the WQE
(gpu_push; host_staged the WQE) before the warp barrier that hands the lanes their word,
so a push waited for host stores at two barriers; the block path wrote gpu_push's header
before its first barrier. Call 2 of the session showed host_staged by the block path,
which writes its WQE only after the payload, 0.25 to 0.33 us faster at 256 B and 1 KiB than
by the first warp. Now lane 0 (thread 0) only claims space before the barrier and writes
header and WQE after its share of the payload. Same-host A/B, one message in flight,
sources evicted from L2 as in the sweep, the order rotating by round:
  PUSH       gpu_push as committed
  PUSH_OLD   gpu_push with the header and WQE written before the first barrier, as before
  PUSH_W     gpu_push with the first warp from 129 B (one thread to 128 B only)
  STG        host_staged as committed
  STG_OLD    host_staged with the WQE written before the warp barrier, as at 9583e75
  STG_BLK    host_staged by the block path from 257 B (one thread to 256 B)
64 B to 4 KiB, 32 and 256 threads.
Usage: python3 benchmarks/scripts/store_order_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import run_rounds
from mid_preload_ab import replace_once, send_kernel

from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

_WARP_NEW = """                        first = 0
                        slots = 0
                        if tid == 0:
                            if path == STAGED:
                                st, word = dv.staged_claim(q, 0, n, timeout)
                            else:
                                st, word, first, slots = dv.push_claim(q, 0, n, timeout)
                            sh[0] = st
                            sh[1] = word
                        warp_sync(lanes)
                        status = sh[0]
                        word = sh[1]
                        ring = q[dv.Q_BOUNCE][0] if path == STAGED else q[dv.Q_STAGE][0]
                        if status == 0 and pre:
                            store_preloaded(ring, word, x, n, tid, lanes)
                        elif status == 0:
                            copy_bytes(ring, word, src, src_word, n, tid, lanes)
                        if tid == 0 and status == 0 and path == STAGED:
                            dv.staged_describe(q, 0, word, n, raddr, rkey)
                        elif tid == 0 and status == 0:
                            dv.push_describe(q, 0, first, n, slots, raddr, rkey, signaled)
                        warp_sync(lanes)
"""
_WARP_OLD = """                        if tid == 0:
                            if path == STAGED:
                                st, word = dv.staged_reserve(q, 0, n, raddr, rkey, timeout)
                            else:
                                st, word = dv.push_reserve(q, 0, n, raddr, rkey, signaled,
                                                           timeout)
                            sh[0] = st
                            sh[1] = word
                        warp_sync(lanes)
                        status = sh[0]
                        ring = q[dv.Q_BOUNCE][0] if path == STAGED else q[dv.Q_STAGE][0]
                        if status == 0 and pre:
                            store_preloaded(ring, sh[1], x, n, tid, lanes)
                        elif status == 0:
                            copy_bytes(ring, sh[1], src, src_word, n, tid, lanes)
                        warp_sync(lanes)
"""
_BLOCK_CLAIM_NEW = """                    if path == PUSH:
                        st, word, first, slots = dv.push_claim(q, 0, n, timeout)
"""
_BLOCK_CLAIM_OLD = """                    if path == PUSH:
                        st, word, first, slots = dv.push_claim(q, 0, n, timeout)
                        if st == 0:
                            dv.stage_header(q, 0, first, n, slots, state[0, dv.S_PI])
"""
_BLOCK_WQE_NEW = """                    if tid == 0 and path == PUSH:
                        dv.push_describe(q, 0, first, n, slots, raddr, rkey, signaled)
"""
_BLOCK_WQE_OLD = """                    if tid == 0 and path == PUSH:
                        dv.wqe_rdma_write(q, 0, dv.stage_address(q, 0, word),
                                          q[dv.Q_INFO][0, dv.I_STAGE_LKEY], n, raddr, rkey,
                                          dv.stage_signal(q, 0, signaled), dv.stage_aux(q, 0))
"""
_MID = "                if small or (pushed and dv.push_mid_ok(src, src_word, n)):\n"
_WARP_IF = "                if pushed and n <= WARP_PUSH_BYTES and \\\n"


def variant(path: int, tag: str, edits) -> object:
    """send_messages for ``path`` from the package's kernels.py with ``edits`` (old, new)."""
    src = open(K.__file__).read()
    for a, b in edits:
        src = replace_once(src, a, b)
    return send_kernel(open(V.__file__).read(), src, tag, path)


def main(out_path: str, rounds: int = 3) -> None:
    old = ((_WARP_NEW, _WARP_OLD), (_BLOCK_CLAIM_NEW, _BLOCK_CLAIM_OLD),
           (_BLOCK_WQE_NEW, _BLOCK_WQE_OLD))
    push = {"source_l2": "evicted"}
    staged = dict(push, path="host_staged")
    kernels = {
        "PUSH": (K._send_messages(K.PUSH), push),
        "PUSH_OLD": (variant(K.PUSH, "push_old", old), push),
        "PUSH_W": (variant(K.PUSH, "push_w", [(_MID, _MID.replace(
            "dv.push_mid_ok(src, src_word, n)", "n <= 128 and dv.push_mid_ok(src, src_word, n)"))]),
            push),
        "STG": (K._send_messages(K.STAGED), staged),
        "STG_OLD": (variant(K.STAGED, "stg_old", old), staged),
        "STG_BLK": (variant(K.STAGED, "stg_blk", [(_WARP_IF, _WARP_IF.replace(
            "if pushed and", "if path == PUSH and"))]), staged),
    }
    names = list(kernels)
    run_rounds(kernels, {n: names for n in (64, 128, 256, 512, 1024, 2048, 4096)}, out_path,
               rounds=rounds, rotate=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
