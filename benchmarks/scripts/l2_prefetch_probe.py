"""Session 32, a lead for issue 14: does an L2 prefetch of a push's source, issued before
its bookkeeping, take the HBM latency off a push's critical path? (Run in session 33 on two
H200s, ``benchmarks/h200-2026-11-28-session33-l2-probe-call*.jsonl``: 0 to 430 ns saved at
256 B to 16 KiB after the 400 ns stand-in, up to 0.7 us lost at 64 and 256 KiB with 256
threads; through the pushes themselves no gain at the points that miss, BENCHMARKS.md,
session 33.)

Since session 31 the sweep's sends read their sources from HBM, as their bounds' copies
do. A 64-byte push loads its payload before its bookkeeping (``push_small``), but 256 B
loads its second 128 B after it and a warp's copy (1 KiB and up) starts only after the
leader's reservation, so each waits a whole HBM read after the bookkeeping: on the H100
gpu_push with 32 threads took 3.94 us at 256 B and 3.87 at 1 KiB against 3.52 at 64 B
(bounds 3.14 and 3.23 us; BENCHMARKS.md, session 32), and one warp copies from HBM at 7.8
GB/s against 14.5 from L2, its loads in flight too few to cover HBM's latency.

This measures one block copying ``size`` bytes of a source no kernel has read (L2 written
over before the launch) into mapped host memory with ``copy_bytes``, ending in a system
fence (as a push's doorbell release waits for its stores), after a spin of ``delay_ns``
standing in for a push's bookkeeping (0, and 400 ns: about the reservation's steps in
session 12's breakdown), with the source:

  * ``none``: not prefetched (what every path does today);
  * ``lines``: each thread issues ``prefetch.global.L2`` for its share of the 128-byte
    lines before the delay;
  * ``bulk``: thread 0 issues Hopper's ``cp.async.bulk.prefetch.L2.global`` for the whole
    range before the delay (one instruction; the copy engine fetches it).

If ``lines`` or ``bulk`` with a 400 ns delay beats ``none`` by about an HBM read (0.5 to
0.8 us) at 256 B to 4 KiB, and a warp's 16 KiB to 64 KiB copy approaches its L2 rate, the
lead is to issue the prefetch in ``send_messages`` and ``api._post`` before the
reservation (and to measure the one-warp ceiling with the same prefetching copy, so that
the bound stays the copy the push does). Prints one JSON line per configuration.

    python3 benchmarks/scripts/l2_prefetch_probe.py OUT.jsonl      # a GPU, about a minute
"""
from __future__ import annotations

import json
import sys

import numpy as np

from gpuwrite.cudaenv import SIMULATOR, cuda

SIZES = (256, 1024, 4096, 16384, 65536, 262144)
THREADS = (32, 256)
DELAYS_NS = (0, 400)
MODES = ("none", "lines", "bulk")
REPS = 64


def _intrinsics():
    """``prefetch.global.L2`` of one address and ``cp.async.bulk.prefetch.L2.global`` of a
    range, as inline PTX (kept here, not in gpuwrite.device.intrinsics, so that the
    emulated code and its GPU tables stay as they are until the lead is taken)."""
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    @intrinsic
    def prefetch_l2(typingctx, address):
        sig = types.void(types.uint64)

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64)])
            asm = ir.InlineAsm(fnty, "prefetch.global.L2 [$0];", "l", side_effect=True)
            builder.call(asm, [args[0]])
            return context.get_dummy_value()
        return sig, codegen

    @intrinsic
    def bulk_prefetch_l2(typingctx, address, nbytes):
        sig = types.void(types.uint64, types.uint32)

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.IntType(32)])
            asm = ir.InlineAsm(fnty, "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r",
                               side_effect=True)
            builder.call(asm, [args[0], args[1]])
            return context.get_dummy_value()
        return sig, codegen

    return prefetch_l2, bulk_prefetch_l2


def _kernel(mode: int):
    """One block; copy k reads the source from byte k * size, times in ``out[k]`` (ns)."""
    from numba import uint32, uint64

    from gpuwrite.device.copy import copy_bytes
    from gpuwrite.device.intrinsics import address_of, fence_sys, globaltimer_ns

    prefetch_l2, bulk_prefetch_l2 = _intrinsics()

    @cuda.jit
    def probe(dst, src, nbytes, reps, delay_ns, out):
        rank = cuda.threadIdx.x
        nranks = cuda.blockDim.x
        for k in range(reps):
            word = k * (nbytes // 4)
            cuda.syncthreads()
            t0 = globaltimer_ns()
            base = address_of(src, word)
            if mode == 1:
                line = rank * 128
                while line < nbytes:
                    prefetch_l2(uint64(base + line))
                    line += nranks * 128
            elif mode == 2:
                if rank == 0:
                    bulk_prefetch_l2(uint64(base), uint32(nbytes))
            while globaltimer_ns() - t0 < delay_ns:        # both int64
                pass
            copy_bytes(dst, 0, src, word, nbytes, rank, nranks)
            fence_sys()
            cuda.syncthreads()
            if rank == 0:
                out[k] = globaltimer_ns() - t0
    return probe


def main(out_path: str) -> int:
    if SIMULATOR:
        print("l2_prefetch_probe: needs a GPU (the simulator has no L2 and no PTX)",
              file=sys.stderr)
        return 2
    from gpuwrite.host.memory import evict_l2, mapped

    kernels = {name: _kernel(i) for i, name in enumerate(MODES)}
    with open(out_path, "w") as f:
        for size in SIZES:
            dst = mapped((size // 4,), np.uint32)
            src = cuda.to_device(np.arange((REPS + 1) * size // 4, dtype=np.uint32))
            want = np.arange(REPS * size // 4, (REPS + 1) * size // 4, dtype=np.uint32)
            for threads in THREADS:
                for delay in DELAYS_NS:
                    for name, kernel in kernels.items():
                        out = cuda.device_array(REPS, dtype=np.int64)
                        try:
                            kernel[1, threads](dst.kernel, src, size, 1, delay, out)  # compile
                            cuda.synchronize()
                        except Exception as exc:       # an instruction this GPU or NVVM lacks
                            row = {"mode": name, "size": size, "threads": threads,
                                   "delay_ns": delay, "error": str(exc)[:300]}
                        else:
                            evict_l2()
                            kernel[1, threads](dst.kernel, src, size, REPS, delay, out)
                            cuda.synchronize()
                            ns = out.copy_to_host()[4:]        # the first few warm the clock
                            # The last copy's bytes: the probe copies, it does not only time.
                            kernel[1, threads](dst.kernel, src[REPS * size // 4:], size, 1,
                                               0, out)
                            cuda.synchronize()
                            row = {"mode": name, "size": size, "threads": threads,
                                   "delay_ns": delay, "p50_ns": float(np.median(ns)),
                                   "min_ns": int(ns.min()), "max_ns": int(ns.max()),
                                   "gbytes_after_delay": size / max(np.median(ns) - delay,
                                                                    1.0),
                                   "bytes_ok": bool(np.array_equal(dst.host, want))}
                        f.write(json.dumps(row) + "\n")
                        f.flush()
                        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
