"""Session 28: what the engine's page walks on the destination cost a lone delivery.

The latency sweep's destination is one buffer of 1000 messages, each message written once,
so every delivery of 4 KiB or more stores into host pages the engine's thread has not
touched since the buffer was filled: a TLB miss per 4 KiB page (a two-level walk in a KVM
guest). A NIC writing remote memory pays none of the host CPU's page walks. Here, in turn
on one host: the runner's destination as committed (A: ``cuda.mapped_array``, 4 KiB pages
unless the host's transparent huge pages say "always"), and a destination of 2 MiB pages
(H: anonymous memory with ``MADV_HUGEPAGE``, pinned and mapped with cuMemHostRegister);
each with the sweep's staging ring and with one of 64 messages (B). Prints the host's THP
setting and how much of H's buffer the kernel backed with huge pages.
Each row also has the median latency of messages by their index modulo 4 (at 1 KiB, four
messages share a 4 KiB page).
Usage: python3 benchmarks/scripts/dst_pages_ab.py OUT.jsonl [rounds] [size,size,...]
"""
import mmap
import sys

import numpy as np
from _ab import emit
from numba import cuda
from numba.cuda.cudadrv import devicearray

from gpuwrite import layouts as L
from gpuwrite.bench.suite import engine_split_us
from gpuwrite.host import memory
from gpuwrite.paths import runner

HUGE = 2 << 20
_KEEP = []   # the mmaps and pins of H's buffers outlive the runs (a diagnostic, one process)


def mapped_huge(shape, dtype):
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    size = -(-nbytes // HUGE) * HUGE
    m = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = np.frombuffer(m, dtype=np.uint8)
    addr = base.ctypes.data
    off = (-addr) % HUGE
    m.madvise(mmap.MADV_HUGEPAGE, off, size)
    raw = base[off:off + size]
    raw[...] = 0   # fault in (huge pages where the kernel has them)
    ctx = cuda.current_context()
    pm = ctx.mempin(raw, raw.ctypes.data, size, mapped=True)
    npary = np.ndarray(shape=shape, dtype=dtype, buffer=raw[:nbytes])
    view = np.ndarray.view(npary, type=devicearray.MappedNDArray)
    view.device_setup(pm, stream=0)
    _KEEP.append((m, pm, raw))
    return memory.Mapped(view, np.ndarray.view(view, np.ndarray))


def anon_huge_kib() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return -1


def main(out_path: str, rounds: int = 3, sizes=(4096, 16384, 65536)) -> None:
    print("THP:", open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(),
          "| defrag:", open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip())
    before = anon_huge_kib()
    probe = mapped_huge((16 << 20,), np.uint8)
    print("AnonHugePages grew by", anon_huge_kib() - before, "KiB for a 16 MiB buffer")
    del probe
    committed = runner.mapped
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in (32, 256):
                for size in sizes:
                    need = L.stage_slots_needed(size, 256)
                    for name in ("A", "H", "AB", "HB"):
                        runner.mapped = mapped_huge if name.startswith("H") else committed
                        kw = dict(stage_slots=64 * need) if name.endswith("B") else {}
                        try:
                            r = runner.run("gpu_push", [size] * 1000, n_qps=1, wait_each=True,
                                           block_threads=th, stage_slot_bytes=256, **kw)
                        finally:
                            runner.mapped = committed
                        assert r.delivered == r.messages
                        lat = np.asarray(r.latencies_ns, dtype=float) / 1e3
                        row = dict(round=rnd, v=name, size=size, threads=th,
                                   p50=round(r.latency_p50_us, 2),
                                   mean=round(float(lat.mean()), 2),
                                   engine=round(engine_split_us(r)["engine"], 2),
                                   by_mod4=[round(float(np.median(lat[k::4])), 2)
                                            for k in range(4)])
                        emit(out, **row)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3,
         *([tuple(int(s) for s in sys.argv[3].split(","))] if len(sys.argv) > 3 else []))
