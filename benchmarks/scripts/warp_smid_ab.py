"""Session 30: is one warp's bimodal copy rate (about 8 or 12 GB/s into mapped host memory,
BENCHMARKS.md) a property of the SM its block lands on, of the source's allocation, or of
neither?

One 32-thread block copies 1 MiB of a first-read source into mapped host memory with the
verbs' copy (``copy_bytes``), one launch a copy; thread 0 records the SM it ran on (%smid)
and the copy's span (%globaltimer), each thread's stores fenced before its end. Three ways,
in turn: (a) 60 launches, each a new 1 MiB range of one 64 MiB allocation; (b) 20
launches, each from a new allocation uploaded just before; (c) 20 launches of one range
again and again (from L2 after the first: the control).
Usage: python3 benchmarks/scripts/warp_smid_ab.py OUT.jsonl
"""
import sys

import numpy as np
from _ab import emit
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from gpuwrite.cudaenv import cuda
from gpuwrite.device.copy import copy_bytes
from gpuwrite.device.intrinsics import fence_sys, globaltimer_ns
from gpuwrite.host.memory import mapped

MIB = 1 << 20


@intrinsic
def smid(typingctx):
    """The SM this thread runs on (%smid)."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        return builder.call(ir.InlineAsm(fnty, "mov.u32 $0, %smid;", "=r", side_effect=True), [])
    return types.int32(), codegen


@cuda.jit
def one_copy(dst, src, start_word, nbytes, rec):
    if cuda.threadIdx.x == 0:
        rec[0] = smid()
        rec[1] = globaltimer_ns()
    cuda.syncthreads()
    copy_bytes(dst, 0, src, start_word, nbytes, cuda.threadIdx.x, cuda.blockDim.x)
    fence_sys()          # each thread's stores have reached host memory
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        rec[2] = globaltimer_ns()


def timed(dst, src, start_word, rec):
    one_copy[1, 32](dst.kernel, src, start_word, MIB, rec)
    cuda.synchronize()
    r = rec.copy_to_host()
    return int(r[0]), MIB / (r[2] - r[1])     # GB/s (bytes per ns)


def main(out_path: str) -> None:
    dst = mapped((MIB // 4,), np.uint32)
    rec = cuda.device_array(3, dtype=np.int64)
    big = cuda.to_device(np.arange(64 * MIB // 4, dtype=np.uint32))
    timed(dst, big, 0, rec)                      # compile and warm
    with open(out_path, "w") as out:
        for k in range(1, 61):
            sm, gb = timed(dst, big, k % 64 * (MIB // 4), rec)
            emit(out, way="ranges", k=k, smid=sm, gbytes=round(gb, 2),
                 src=big.device_ctypes_pointer.value + k % 64 * MIB)
        for k in range(20):
            src = cuda.to_device(np.arange(MIB // 4, dtype=np.uint32) + k)
            sm, gb = timed(dst, src, 0, rec)
            emit(out, way="allocations", k=k, smid=sm, gbytes=round(gb, 2),
                 src=src.device_ctypes_pointer.value)
        for k in range(20):
            sm, gb = timed(dst, big, 0, rec)
            emit(out, way="same_range", k=k, smid=sm, gbytes=round(gb, 2))


if __name__ == "__main__":
    main(sys.argv[1])
