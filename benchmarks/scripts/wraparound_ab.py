"""Session 26: what Numba's negative-index wraparound costs the push path. Every
``arr[i]`` with a signed index compiles to ``i < 0 ? i + n : i`` (three 64-bit operations
before the access); one warp runs the kernel's bookkeeping, so each operation on the
critical path is paid in full. NW compiles the kernels with the wraparound left out
(Numba's ``fix_integer_index`` patched in this process: a diagnostic, not a way to build
gpuwrite); A as committed. A process compiles one of the two (device functions are
compiled once per process), so the script is run as A, NW, A, NW in turn.

64 B to 4 KiB, 32 and 256 threads, two rounds, 2000 messages each, p50 us.
Usage: python3 benchmarks/scripts/wraparound_ab.py A|NW OUT.jsonl"""
import json
import sys


def main(mode: str, out_path: str) -> None:
    if mode == "NW":
        from numba.cuda.np import arrayobj
        types = arrayobj.types

        def no_wrap(context, builder, idxty, idx, size):
            return context.cast(builder, idx, idxty, types.intp if idxty.signed else types.uintp)

        arrayobj.fix_integer_index = no_wrap
    from gpuwrite.paths import runner
    out = open(out_path, "a")
    for rnd in range(2):
        for th in (32, 256):
            for size in (64, 256, 1024, 4096):
                r = runner.run("gpu_push", [size] * 2000, n_qps=1, wait_each=True,
                               block_threads=th, stage_slot_bytes=256)
                row = dict(mode=mode, round=rnd, size=size, threads=th, p50=r.latency_p50_us,
                           delivered=r.delivered, messages=r.messages)
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(row, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
