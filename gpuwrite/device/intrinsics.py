"""Memory-ordering and timer intrinsics for device code, each beside its simulator twin.

On a GPU each is one PTX instruction emitted through a Numba ``@intrinsic`` as inline
assembly with a ``memory`` clobber and side effects, so the compiler neither hoists a
poll out of its loop nor moves other memory accesses across it. Under Numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``) the twin is plain Python on the same array; on
x86 hosts an aligned 32-bit numpy load or store is single-copy atomic, and the GIL
orders simulator threads against each other.

Words shared with another agent (the NIC engine, the host) must only be touched
through these: a plain load in a spin loop is hoisted by the compiler and spins forever,
and ``cuda.atomic.add(a, i, 0)`` as a poll is a read-modify-write that can overwrite a
concurrent store from the host (see MACHINE-NOTES.md).
"""
from __future__ import annotations

import time

from gpuwrite.cudaenv import SIMULATOR, cuda

__all__ = [
    "ld_acquire_sys_u32", "st_release_sys_u32", "st_relaxed_sys_u32", "st_relaxed_sys_u64", "fence_sys",
    "globaltimer_ns", "backoff", "ld_v4_u32", "st_v4_u32", "st_u8", "address_of", "bswap32",
    "warp_sync", "ld_acquire_sys_u64", "ld_acquire_gpu_u64", "words_at", "cp_async16",
    "cp_async_wait_all",
]

if SIMULATOR:
    import numpy as np

    def ld_acquire_sys_u32(arr, index):
        """Load arr[index] with system-scope acquire: later accesses stay after it."""
        return int(arr[index])

    def st_release_sys_u32(arr, index, value):
        """Store arr[index] with system-scope release: earlier accesses land first."""
        arr[index] = value

    def ld_acquire_sys_u64(arr, index):
        """64-bit load of arr[index] with system-scope acquire."""
        return int(arr[index])

    def ld_acquire_gpu_u64(arr, index):
        """64-bit load of arr[index] with GPU-scope acquire (a word other blocks write)."""
        return int(arr[index])

    def words_at(address, nwords):
        """The ``nwords`` 32-bit words at ``address`` (4-byte aligned) as an array."""
        import ctypes
        return np.ctypeslib.as_array((ctypes.c_uint32 * max(int(nwords), 1)).from_address(
            int(address)))

    def st_relaxed_sys_u32(arr, index, value):
        """Store a 32-bit word visible system-wide, with no ordering of its own."""
        arr[index] = int(value) & 0xFFFFFFFF

    def st_relaxed_sys_u64(arr, index, value):
        """Store a 64-bit word visible system-wide, with no ordering (doorbell register)."""
        arr[index] = int(value) & 0xFFFFFFFFFFFFFFFF

    def fence_sys():
        """Order all earlier memory accesses before later ones, system-wide."""

    def cp_async16(dst, dst_index, src, src_index):
        """Starts a copy of 16 bytes from src[src_index] (global memory) to dst[dst_index]
        (a shared array), both 16-byte aligned, that holds no register while it is in
        flight: the bytes are in ``dst`` once ``cp_async_wait_all`` returns. (The
        simulator copies them at once.)"""
        _check_aligned16(src, src_index)
        _check_aligned16(dst, dst_index)
        for k in range(4):
            dst[dst_index + k] = src[src_index + k]

    def cp_async_wait_all():
        """Waits until every ``cp_async16`` this thread started has landed."""

    @cuda.jit(device=True)
    def warp_sync(lanes):
        """Barrier of the first warp's ``lanes`` threads. The simulator has no warp
        barrier: this is the block's, so callers use it only in blocks of <= 32 threads."""
        cuda.syncthreads()

    def globaltimer_ns():
        """Nanoseconds on a clock shared by all threads (the GPU's %globaltimer)."""
        return time.perf_counter_ns()

    def backoff(ns):
        """Pause a polling thread: lets the simulator's other threads run."""
        time.sleep(0)

    def _check_aligned16(arr, index):
        # A GPU faults on a misaligned vector access; the simulator says so instead.
        if address_of(arr, index) % 16:
            raise ValueError(f"16-byte access at word {index} is not 16-byte aligned "
                             f"(address {address_of(arr, index):#x})")

    def ld_v4_u32(arr, index):
        """Four consecutive 32-bit words from arr[index] (16-byte aligned), one load."""
        _check_aligned16(arr, index)
        return (arr[index], arr[index + 1], arr[index + 2], arr[index + 3])

    def st_v4_u32(arr, index, a, b, c, d):
        """Stores four 32-bit words at arr[index] (16-byte aligned) in one store."""
        _check_aligned16(arr, index)
        for k, v in enumerate((a, b, c, d)):
            arr[index + k] = int(v) & 0xFFFFFFFF

    def st_u8(arr, index, byte, value):
        """Stores one byte, byte ``byte`` (0 to 3) of the 32-bit word arr[index]."""
        arr.view(np.uint8)[4 * index + byte] = int(value) & 0xFF

    def bswap32(x):
        """The low 32 bits of ``x`` byte-swapped (device words are little-endian, mlx5
        fields big-endian)."""
        x = int(x) & 0xFFFFFFFF
        return ((x & 0xFF) << 24) | ((x & 0xFF00) << 8) | ((x >> 8) & 0xFF00) | (x >> 24)

    def address_of(arr, index):
        """The address of arr[index]."""
        a = np.asarray(arr)
        return a.ctypes.data + index * a.itemsize

else:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.extending import intrinsic

    def _element_pointer(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        index = context.cast(builder, args[1], sig.args[1], types.intp)
        return cgutils.get_item_pointer(context, builder, aryty, ary, [index], wraparound=False)

    @intrinsic
    def ld_acquire_sys_u32(typingctx, arr, index):
        """Load arr[index] with system-scope acquire: later accesses stay after it."""
        sig = types.uint32(arr, index)

        def codegen(context, builder, sig, args):
            ptr = _element_pointer(context, builder, sig, args)
            fnty = ir.FunctionType(ir.IntType(32), [ptr.type])
            asm = ir.InlineAsm(fnty, "ld.acquire.sys.global.u32 $0, [$1];", "=r,l,~{memory}",
                               side_effect=True)
            return builder.call(asm, [ptr])

        return sig, codegen

    def _load_u64_intrinsic(ptx: str, doc: str):
        def load(typingctx, arr, index):
            sig = types.uint64(arr, index)

            def codegen(context, builder, sig, args):
                ptr = _element_pointer(context, builder, sig, args)
                fnty = ir.FunctionType(ir.IntType(64), [ptr.type])
                return builder.call(ir.InlineAsm(fnty, ptx, "=l,l,~{memory}", side_effect=True),
                                    [ptr])

            return sig, codegen

        load.__doc__ = doc
        return intrinsic(load)

    ld_acquire_sys_u64 = _load_u64_intrinsic(
        "ld.acquire.sys.global.u64 $0, [$1];", "64-bit load of arr[index] with system-scope acquire.")
    ld_acquire_gpu_u64 = _load_u64_intrinsic(
        "ld.acquire.gpu.global.u64 $0, [$1];",
        "64-bit load of arr[index] with GPU-scope acquire (a word other blocks write).")

    @intrinsic
    def words_at(typingctx, address, nwords):
        """The ``nwords`` 32-bit words at ``address`` (a GPU or mapped host address,
        4-byte aligned) as a 1-D uint32 array, for ``copy_bytes`` (the pull agent copies
        between addresses the engine names)."""
        aryty = types.Array(types.uint32, 1, "C")
        sig = aryty(address, nwords)

        def codegen(context, builder, sig, args):
            ptr = builder.inttoptr(context.cast(builder, args[0], sig.args[0], types.uint64),
                                   ir.PointerType(ir.IntType(32)))
            ary = context.make_array(aryty)(context, builder)
            n = context.cast(builder, args[1], sig.args[1], types.intp)
            four = context.get_constant(types.intp, 4)
            context.populate_array(ary, data=ptr, shape=cgutils.pack_array(builder, [n]),
                                   strides=cgutils.pack_array(builder, [four]), itemsize=four,
                                   meminfo=None)
            return ary._getvalue()

        return sig, codegen

    def _store_codegen(ptx: str, bits: int, numba_type, constraint: str):
        """Codegen of a store intrinsic: one PTX store of arr[index] with a memory clobber."""

        def codegen(context, builder, sig, args):
            ptr = _element_pointer(context, builder, sig, args)
            val = context.cast(builder, args[2], sig.args[2], numba_type)
            fnty = ir.FunctionType(ir.VoidType(), [ptr.type, ir.IntType(bits)])
            asm = ir.InlineAsm(fnty, ptx, f"l,{constraint},~{{memory}}", side_effect=True)
            builder.call(asm, [ptr, val])
            return context.get_dummy_value()

        return codegen

    @intrinsic
    def st_release_sys_u32(typingctx, arr, index, value):
        """Store arr[index] with system-scope release: earlier accesses land first."""
        return types.void(arr, index, value), _store_codegen(
            "st.release.sys.global.u32 [$0], $1;", 32, types.uint32, "r")

    @intrinsic
    def st_relaxed_sys_u32(typingctx, arr, index, value):
        """Store a 32-bit word visible system-wide, with no ordering of its own."""
        return types.void(arr, index, value), _store_codegen(
            "st.relaxed.sys.global.u32 [$0], $1;", 32, types.uint32, "r")

    @intrinsic
    def st_relaxed_sys_u64(typingctx, arr, index, value):
        """Store a 64-bit word visible system-wide, with no ordering (doorbell register)."""
        return types.void(arr, index, value), _store_codegen(
            "st.relaxed.sys.global.u64 [$0], $1;", 64, types.uint64, "l")

    @intrinsic
    def fence_sys(typingctx):
        """Order all earlier memory accesses before later ones, system-wide."""
        sig = types.void()

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(ir.InlineAsm(fnty, "fence.acq_rel.sys;", "~{memory}", side_effect=True), [])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def cp_async16(typingctx, dst, dst_index, src, src_index):
        """Starts a copy of 16 bytes from src[src_index] (global memory) to dst[dst_index]
        (a shared array), both 16-byte aligned: ``cp.async`` (sm_80 on), which holds no
        register while the read is in flight, so a thread can start a payload's read
        before bookkeeping that needs all its registers. The bytes are in ``dst`` once
        ``cp_async_wait_all`` returns."""
        sig = types.void(dst, dst_index, src, src_index)

        def codegen(context, builder, sig, args):
            d = _element_pointer(context, builder, types.void(sig.args[0], sig.args[1]),
                                 args[:2])
            s = _element_pointer(context, builder, types.void(sig.args[2], sig.args[3]),
                                 args[2:])
            fnty = ir.FunctionType(ir.VoidType(), [d.type, s.type])
            ptx = ("{\n .reg .u64 gw_sh64;\n .reg .u32 gw_sh32;\n .reg .u64 gw_gl;\n"
                   " cvta.to.shared.u64 gw_sh64, $0;\n cvt.u32.u64 gw_sh32, gw_sh64;\n"
                   " cvta.to.global.u64 gw_gl, $1;\n"
                   " cp.async.cg.shared.global [gw_sh32], [gw_gl], 16;\n}")
            builder.call(ir.InlineAsm(fnty, ptx, "l,l,~{memory}", side_effect=True), [d, s])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def cp_async_wait_all(typingctx):
        """Waits until every ``cp_async16`` this thread started has landed."""
        sig = types.void()

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(ir.InlineAsm(fnty, "cp.async.wait_all;", "~{memory}",
                                      side_effect=True), [])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def globaltimer_ns(typingctx):
        """Nanoseconds on a clock shared by all SMs (%globaltimer), as an int64: timeouts
        compare it with int64 values, and a uint64 would turn those compares into
        floating point."""
        sig = types.int64()

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(64), [])
            asm = ir.InlineAsm(fnty, "mov.u64 $0, %globaltimer;", "=l", side_effect=True)
            return builder.call(asm, [])

        return sig, codegen

    def _global(builder, ptr):
        """``ptr`` in the global address space, so that PTX gets ``ld.global``/``st.global``
        rather than generic accesses. For the arrays kernels are handed (GPU memory, and
        pinned host memory mapped into the GPU, which the GPU reaches through the global
        window as the ``.global`` polls above do); never for shared or local arrays."""
        return builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, addrspace=1))

    def _vector_pointer(context, builder, sig, args):
        """arr[index] as a pointer to four 32-bit words (the caller ensures 16-byte alignment)."""
        ptr = _element_pointer(context, builder, sig, args)
        return builder.bitcast(ptr, ir.PointerType(ir.VectorType(ir.IntType(32), 4)))

    @intrinsic
    def ld_v4_u32(typingctx, arr, index):
        """Four consecutive 32-bit words from arr[index] (16-byte aligned), one load.

        An ordinary LLVM load of a 4-word vector (``ld.global.v4.u32``): the compiler
        may issue it early and overlap its latency with other work."""
        rt = types.UniTuple(types.uint32, 4)

        def codegen(context, builder, sig, args):
            vec = builder.load(_vector_pointer(context, builder, sig, args), align=16)
            return context.make_tuple(builder, rt, [builder.extract_element(vec, ir.Constant(
                ir.IntType(32), k)) for k in range(4)])

        return rt(arr, index), codegen

    @intrinsic
    def st_v4_u32(typingctx, arr, index, a, b, c, d):
        """Stores four 32-bit words at arr[index] (16-byte aligned) in one store.

        An ordinary LLVM store of a 4-word vector (``st.global.v4.u32``), weak like any
        plain store: a later release store orders it. One bus write where four word
        stores from one thread would be four. Being ordinary, it lets the compiler keep
        values in registers across it and schedule the loads of unrelated memory (the
        QP state in shared memory) ahead of it; inline assembly would not, as LLVM must
        assume it touches any memory."""
        sig = types.void(arr, index, a, b, c, d)

        def codegen(context, builder, sig, args):
            vec = ir.Constant(ir.VectorType(ir.IntType(32), 4), None)
            for k in range(4):
                word = context.cast(builder, args[2 + k], sig.args[2 + k], types.uint32)
                vec = builder.insert_element(vec, word, ir.Constant(ir.IntType(32), k))
            builder.store(vec, _vector_pointer(context, builder, sig, args), align=16)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def st_u8(typingctx, arr, index, byte, value):
        """Stores one byte, byte ``byte`` (0 to 3) of the 32-bit word arr[index]
        (``st.global.u8``): the last word of a copy whose length is not a multiple of 4
        is written byte by byte, so the bytes after it, someone else's, stay as they were.
        An ordinary store, like ``st_v4_u32``."""
        sig = types.void(arr, index, byte, value)

        def codegen(context, builder, sig, args):
            i8 = ir.IntType(8)
            word = builder.bitcast(_element_pointer(context, builder, sig, args), i8.as_pointer())
            at = builder.gep(word, [context.cast(builder, args[2], sig.args[2], types.intp)])
            builder.store(builder.trunc(context.cast(builder, args[3], sig.args[3], types.uint32), i8),
                          _global(builder, at), align=1)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def bswap32(typingctx, x):
        """The low 32 bits of ``x`` byte-swapped, as an int64 (one PRMT instruction; the
        shift-and-mask form it replaces was about ten per field, on one thread)."""
        if not isinstance(x, types.Integer):
            return None
        sig = types.int64(x)

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            word = builder.trunc(args[0], i32) if args[0].type.width > 32 else \
                builder.zext(args[0], i32) if args[0].type.width < 32 else args[0]
            return builder.zext(builder.bswap(word), ir.IntType(64))

        return sig, codegen

    @intrinsic
    def address_of(typingctx, arr, index):
        """The address of arr[index]."""
        sig = types.uint64(arr, index)

        def codegen(context, builder, sig, args):
            return builder.ptrtoint(_element_pointer(context, builder, sig, args), ir.IntType(64))

        return sig, codegen

    @cuda.jit(device=True, inline=True)
    def warp_sync(lanes):
        """Barrier of the first warp's ``lanes`` threads (``bar.warp.sync``): like a block
        barrier, it orders their memory accesses, so a release by lane 0 after it covers
        every lane's stores before it."""
        cuda.syncwarp(0xFFFFFFFF if lanes >= 32 else (1 << lanes) - 1)

    @cuda.jit(device=True, inline=True)
    def backoff(ns):
        """Pause a polling thread briefly, leaving issue slots to other warps."""
        cuda.nanosleep(ns)
