"""Session 41: send_messages made for tables the first warp posts whole (``kernel_scope``
"warp": threads past the first warp leave after the set-up) against the block kernel on
the same tables, and three ways for the first warp to meet at the end of a message while
lane 0 rings and waits:

  block      the block kernel: every thread stays, a block barrier per message
  warp-bar   the warp kernel: ``bar.sync 1, 32`` (a named barrier of the first warp)
  warp-sync  the warp kernel with ``bar.warp.sync`` instead
  warp-spin  the warp kernel with lanes 1 to 31 polling a shared word (nanosleep between
             reads) instead of any barrier: no lane is parked at a barrier while lane 0
             waits for its completion (session 40: lanes parked at a barrier cost a
             64-byte push 0.2 to 0.3 us; is it the barrier or the divergence?)

gpu_push and host_staged at 512, 1024 and 2048 bytes (the first warp's sizes), 32 and 256
threads, one message in flight, 2000 messages, sources as uploaded, the order rotating by
round. Only warp-bar is the package's code; the other two are built here by replacing its
end-of-message barrier in the kernel's source.

Ran at 7bafa54 (the warp scope and ``intrinsics.warp0_barrier`` are in that commit only:
the scope was not kept, so the script runs against that checkout).
Usage: python3 benchmarks/scripts/warp_kernel_ab.py OUT.jsonl [rounds]
"""
import sys
import types as pytypes

from _ab import emit

from gpuwrite.device.intrinsics import backoff
from gpuwrite.paths import kernels as K, runner

PATHS = ("gpu_push", "host_staged")
SIZES = (512, 1024, 2048)
BARRIER = "                    warp0_barrier()\n"
SPIN = """                    if tid == 0:
                        cuda.threadfence_block()
                        cuda.atomic.max(flag, 0, m + 1)
                    else:
                        while cuda.atomic.max(flag, 0, 0) < m + 1:
                            backoff(64)
                        cuda.threadfence_block()
"""


def variant(path: str, name: str):
    """The warp kernel of ``path`` with its end-of-message barrier replaced."""
    src = open(K.__file__).read()
    assert src.count(BARRIER) == 1
    if name == "warp-sync":
        src = src.replace(BARRIER, "                    warp_sync(min(32, cuda.blockDim.x))\n")
    else:
        src = src.replace(BARRIER, SPIN)
        head = "        sh = cuda.shared.array(4, dtype=int64)\n"
        assert src.count(head) == 1
        src = src.replace(head, head + "        flag = cuda.shared.array(1, dtype=int64)\n"
                                       "        if tid == 0:\n            flag[0] = 0\n")
    src = src.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    mod = pytypes.ModuleType("kernels_" + name.replace("-", "_"))
    mod.__file__ = K.__file__
    mod.backoff = backoff       # nanosleep on a GPU
    exec(compile(src, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PATH_IDS[path], K.WARP)


def main(argv):
    out_path = argv[0]
    rounds = int(argv[1]) if len(argv) > 1 else 3
    kernels = {}
    for path in PATHS:
        kernels[path, "block"] = (K.send_messages_for(path, "block"), "block")
        kernels[path, "warp-bar"] = (K.send_messages_for(path, "warp"), "warp")
        for name in ("warp-sync", "warp-spin"):
            kernels[path, name] = (variant(path, name), "warp")
    names = ["block", "warp-bar", "warp-sync", "warp-spin"]
    real_for, real_scope = K.send_messages_for, K.kernel_scope

    def run(path, name, size, threads, n):
        kern, scope = kernels[path, name]
        K.send_messages_for = lambda p, s="block": kern
        K.kernel_scope = lambda *args: scope
        try:
            return runner.run(path, [size] * n, n_qps=1, wait_each=True, block_threads=threads)
        finally:
            K.send_messages_for, K.kernel_scope = real_for, real_scope

    for key in kernels:                  # compiled and loaded before any round
        run(key[0], key[1], 1024, 32, 20)
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for th in (32, 256):
                for path in PATHS:
                    for size in SIZES:
                        for name in order:
                            r = run(path, name, size, th, 2000)
                            emit(out, round=rnd, v=name, path=path, size=size, threads=th,
                                 p50=round(r.latency_p50_us, 3), p99=round(r.latency_p99_us, 3),
                                 delivered=r.delivered, kernel=r.kernel)


if __name__ == "__main__":
    main(sys.argv[1:])
