"""Issue 14's mid sizes, four measurements in one call (session 25); p50 us of one message in
flight (wait_each), every point in turn with the others, three rounds.

E1  the engine's copy: gpu_push and host_staged, 4 to 64 KiB, 32 and 256 threads, with the
    copy helpers splitting deliveries from 32 (the default until now), 16, 8 or 4 KiB
    (``Context(copy_split_bytes=...)``): p50, the engine's turnaround and the deliveries
    split.
E2  one thread for payloads up to 256 B: ``push_small`` with all its 16-byte loads issued
    before its bookkeeping (P16: up to 256 B; P8: up to 128 B; P8x2: up to 256 B, the
    first 128 loaded before the bookkeeping and the rest after it), against the first
    warp's path (A, as committed), 64 to 256 B.
E3  code size: A with the block path cut out of the kernel (S; only small and warp pushes
    remain), 64 to 1024 B; if S is faster at the same sizes, the size of the kernel costs.
E4  the block path's steps: A and B (the clock started just before the doorbell, as in
    send_split.py), 4 and 16 KiB: what the GPU spends before the doorbell.

Each variant is the source of session 25's start (``514c78c``) with a few lines replaced,
compiled on its own; the replacements expect that source (E2's push_small body is gone
since ``dv.push_mid`` came of it). Results: BENCHMARKS.md, session 25;
``benchmarks/h100-2026-11-27-session25-mid-sizes-*.jsonl``.
Usage: python3 benchmarks/scripts/mid_sizes.py OUT.jsonl [E1,E2,E3,E4]"""
import json
import sys
import types as pytypes

from _ab import block_scope

from gpuwrite.bench.suite import engine_split_us
from gpuwrite.device import verbs as V
from gpuwrite.host.verbs import Context
from gpuwrite.paths import kernels as K, runner

# The variants below are put in place of the block kernel (K._BY_PATH): every table goes to
# it, as every table went to send_messages when this ran (kernels.kernel_scope, since then).
K.kernel_scope = block_scope

K_SRC = open(K.__file__).read()
V_SRC = open(V.__file__).read()

PUSH_SMALL_BODY = """    first64 = _load64(src, src_word, chunks)
    st, word = push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns)
    if st != OK:
        return st
    stage = Q[Q_STAGE][i]
    if not fast:
        copy_bytes(stage, word, src, src_word, nbytes, 0, 1)
        return OK
    _store64(stage, word, first64, chunks)
    k = 4
    while k < chunks:   # beyond 64 bytes: 64 bytes at a time, loads before stores
        _store64(stage, word + 4 * k, _load64(src, src_word + 4 * k, chunks - k), chunks - k)
        k += 4
    return OK
"""


def _push_small_all_loads(rounds: int, first: int | None = None) -> str:
    """push_small's body with ``first`` (default all) of its ``rounds`` 64-byte loads issued
    before the bookkeeping, the rest issued after it, before the first ones are stored."""
    first = rounds if first is None else first
    loads = "".join(f"    x{r} = _load64(src, src_word + {16 * r}, chunks - {4 * r})\n"
                    for r in range(first))
    stores = "".join(f"    _store64(stage, word + {16 * r}, x{r}, chunks - {4 * r})\n"
                     for r in range(first))
    late_loads = "".join(f"    x{r} = _load64(src, src_word + {16 * r}, chunks - {4 * r})\n"
                         for r in range(first, rounds))
    late_stores = "".join(f"    _store64(stage, word + {16 * r}, x{r}, chunks - {4 * r})\n"
                          for r in range(first, rounds))
    return (loads + "    st, word = push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns)\n"
            "    if st != OK:\n        return st\n    stage = Q[Q_STAGE][i]\n"
            "    if not fast:\n        copy_bytes(stage, word, src, src_word, nbytes, 0, 1)\n"
            "        return OK\n" + late_loads + stores + late_stores + "    return OK\n")


def verbs_variant(small_bytes: int, first: int | None = None):
    s = V_SRC
    assert s.count(PUSH_SMALL_BODY) == 1 and s.count("SMALL_PUSH_BYTES = 64\n") == 1
    s = s.replace("SMALL_PUSH_BYTES = 64\n", f"SMALL_PUSH_BYTES = {small_bytes}\n")
    s = s.replace(PUSH_SMALL_BODY, _push_small_all_loads(small_bytes // 64, first))
    mod = pytypes.ModuleType(f"verbs_p{small_bytes}_{first}")
    mod.__file__ = V.__file__
    exec(compile(s, V.__file__, "exec"), mod.__dict__)
    return mod


def ind(text: str) -> str:
    return "".join("    " + line if line.strip() else line for line in text.splitlines(True))


DB = ind("        if status == 0 and end_of_batch and tid == 0:\n            dv.flush_doorbell(q, 0)\n")
BLOCK_START = "                # Payloads the block can hold in registers are loaded before thread 0 reserves\n"
BLOCK_END = "            if status == 0 and end_of_batch and tid == 0:\n"


def kernel_variant(v: str, verbs=None):
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    assert s.count(DB) == 1 and s.count(BLOCK_START) == 1
    if v == "B":
        s = s.replace(DB, ind("        if status == 0 and end_of_batch and tid == 0:\n"
                              "            t_post[m] = globaltimer_ns()\n"
                              "            dv.flush_doorbell(q, 0)\n"))
    elif v == "S":
        a = s.index(BLOCK_START)
        b = s.index(BLOCK_END, a)
        s = s[:a] + ("                status = -99   # no block path in this variant\n"
                     "                break\n") + s[b:]
    mod = pytypes.ModuleType("sm_" + v)
    mod.__file__ = K.__file__
    if verbs is not None:
        s = s.replace("from gpuwrite.device import verbs as dv\n", "dv = VERBS\n")
        mod.__dict__["VERBS"] = verbs
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


def point(path, size, threads, n, **kw):
    r = runner.run(path, [size] * n, n_qps=1, wait_each=True, block_threads=threads,
                   chunk_bytes=max(size, 65536), stage_slot_bytes=256, **kw)
    assert r.delivered == r.messages, (path, size, threads, r.delivered, r.messages, r.qp_errors)
    return r


def main(out_path: str, only: str = "E1,E2,E3,E4") -> None:
    which = set(only.split(","))
    out = open(out_path, "w")

    def emit(**row):
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(row, flush=True)

    kernels = {"A": kernel_variant("A")}
    if "E4" in which:
        kernels["B"] = kernel_variant("B")
    if "E3" in which:
        kernels["S"] = kernel_variant("S")
    if "E2" in which:
        kernels.update({"P16": kernel_variant("A", verbs_variant(256)),
                        "P8x2": kernel_variant("A", verbs_variant(256, 2)),
                        "P8": kernel_variant("A", verbs_variant(128))})
    small = [v for v in ("A", "S", "P16", "P8x2", "P8") if v in kernels]
    for rnd in range(3):
        # E2, E3: small pushes
        for th in (32, 256) if which & {"E2", "E3"} else ():
            for size in (64, 128, 192, 256, 1024):
                for v in small:
                    if v.startswith("P") and size > 256 or v == "P8" and size > 128:
                        continue
                    K._BY_PATH["gpu_push"] = kernels[v]
                    r = point("gpu_push", size, th, 1500)
                    emit(e="E2/E3", round=rnd, variant=v, size=size, threads=th,
                         p50=r.latency_p50_us, p99=r.latency_p99_us,
                         engine=engine_split_us(r)["engine"])
        # E4: the block path's steps
        for th in (32, 256) if "E4" in which else ():
            for size in (4096, 16384):
                for v in ("A", "B"):
                    K._BY_PATH["gpu_push"] = kernels[v]
                    r = point("gpu_push", size, th, 400)
                    emit(e="E4", round=rnd, variant=v, size=size, threads=th,
                         p50=r.latency_p50_us, engine=engine_split_us(r)["engine"])
        K._BY_PATH.pop("gpu_push", None)
        # E1: the engine's copy split
        for path in ("gpu_push", "host_staged") if "E1" in which else ():
            for th in (32, 256):
                for size in (4096, 8192, 16384, 32768, 65536):
                    for split in (32768, 16384, 8192, 4096):
                        with Context(copy_split_bytes=split) as ctx:
                            r = point(path, size, th, 200 if size <= 16384 else 80, context=ctx)
                        emit(e="E1", round=rnd, path=path, size=size, threads=th, split=split,
                             p50=r.latency_p50_us, engine=engine_split_us(r)["engine"],
                             copies_split=r.counters["copies_split"],
                             copy_threads=ctx.copy_threads)
    out.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
