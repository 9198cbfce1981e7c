"""Session 37: host_staged's small and medium writes by one thread and the first warp.

Until session 37 every host_staged message took the block path (thread 0 reserves, a block
barrier, the block copies, a barrier after its stores to host memory, thread 0 writes the
WQE), where gpu_push posts up to 256 B from one thread and up to 2 KiB from the first
warp: on session 36's H200 a 64-byte host_staged write took 3.71 to 3.74 us against
gpu_push's 3.36 to 3.42, though in emulated mode the two write host memory the same way.
Same-host A/B, one message in flight, sources evicted from L2 as in the sweep, the order
rotating by round: host_staged as committed (STG: ``dv.staged_small``, ``dv.staged_mid``,
the first warp, and ``bounce_reserve`` keeping its ring position), STG with the bounce
ring's position taken modulo its size as before (STG_MOD), host_staged by the block path
at every size (BLK), both as before (OLD: the code of session 36), and gpu_push as
committed (PUSH, the reference), 64 B to 4 KiB (4 KiB: the block path in all), 32 and 256
threads. The first call of the session (``...-session37-staged-ab.jsonl``) ran STG with
the modulo, BLK and PUSH only.
Usage: python3 benchmarks/scripts/staged_small_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import run_rounds
from mid_preload_ab import replace_once, send_kernel

from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

# bounce_reserve as it was before session 37: its ring position taken modulo the ring.
_POS = """    res = state[i, S_BOUNCE_RES]
    pos = state[i, S_BOUNCE_POS]
    freed = state[i, S_BOUNCE_FREE]
    pad = ring_pad(pos, ring, nwords)
    if (nwords > ring) | (freed < ring_free_target(res, pad, nwords, ring)):
        if nwords > ring:
            return E_TOO_LARGE, 0
        st = _poll_cq_until(Q, i, S_BOUNCE_FREE, ring_free_target(res, pad, nwords, ring),
                            timeout_ns, E_TIMEOUT_BOUNCE, _SPACE_POLL_MAX_NS)
        if st != OK:
            return st, 0
    state[i, S_BOUNCE_RES] = res + pad + nwords
    first = 0 if pad else pos
    end = first + nwords
    state[i, S_BOUNCE_POS] = 0 if end == ring else end
    return OK, first
"""
_MODULO = """    if nwords > ring:
        return E_TOO_LARGE, 0
    res = state[i, S_BOUNCE_RES]
    pos = res % ring
    pad = ring_pad(pos, ring, nwords)
    st = _poll_cq_until(Q, i, S_BOUNCE_FREE, ring_free_target(res, pad, nwords, ring), timeout_ns,
                        E_TIMEOUT_BOUNCE, _SPACE_POLL_MAX_NS)
    if st != OK:
        return st, 0
    state[i, S_BOUNCE_RES] = res + pad + nwords
    return OK, (pos + pad) % ring
"""
# host_staged by the block path at every size, as before session 37.
_BLOCK = (("                pushed = path == PUSH or path == STAGED\n",
           "                pushed = path == PUSH\n"),
          ("                small = path != PULL and dv.small_ok(",
           "                small = (path == PUSH or path == INLINE) and dv.small_ok("))


def staged_kernel(tag: str, block_path: bool, modulo: bool):
    """send_messages for host_staged from the package's sources, with the block path at
    every size and/or the modulo bounce_reserve."""
    vsrc = open(V.__file__).read()
    if modulo:
        vsrc = replace_once(vsrc, _POS, _MODULO)
    ksrc = open(K.__file__).read()
    for a, b in _BLOCK if block_path else ():
        ksrc = replace_once(ksrc, a, b)
    return send_kernel(vsrc, ksrc, tag, K.STAGED)


def main(out_path: str, rounds: int = 4) -> None:
    staged = {"source_l2": "evicted", "path": "host_staged"}
    kernels = {"STG": (K._send_messages(K.STAGED), staged),
               "STG_MOD": (staged_kernel("stg_mod", False, True), staged),
               "BLK": (staged_kernel("blk", True, False), staged),
               "OLD": (staged_kernel("old", True, True), staged),
               "PUSH": (K._send_messages(K.PUSH), {"source_l2": "evicted"})}
    names = list(kernels)
    run_rounds(kernels, {n: names for n in (64, 128, 256, 1024, 4096)}, out_path,
               rounds=rounds, rotate=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
