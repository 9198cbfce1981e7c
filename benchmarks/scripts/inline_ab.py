"""Inline writes one message in flight, p50 us, by size and block, against gpu_push of the
same sizes: session 42's one-thread inline posts (dv.inline_small for any 1 to 64 bytes,
dv.inline_small and dv.inline_mid for whole aligned vectors to 256 bytes) against the code
before them, which gave 80 to 256-byte and odd-sized inline writes to the block's copy
(``wqe_rdma_write_inline``, two block barriers after its stores to host memory); and the
one-thread push of a payload that is not whole aligned vectors, read before the bookkeeping
(``_load_small``) against after it (``copy_bytes`` on one thread, until 84e9121).

Run once per code version, in turn, each process on the package its PYTHONPATH finds:
    python3 inline_ab.py LABEL ROUND [SIZES] >> out.jsonl
(SIZES: bytes, comma-separated; the default below). Session 42's third A/B: 65 to 256-byte
payloads that are not whole aligned vectors on one thread (``dv.push_mid`` and
``dv.inline_mid`` from any word: word loads, and ``cp.async`` of words past 128 bytes;
``mid_any_words.patch``, applied to ``3f202dc``, not merged: slower past 128 bytes)
against the first warp's and the block's. Session 43's, sizes ``64,72,100,127,128,256``:
one thread for 65 to 128 bytes from any word, in registers (main since ``6f2806a``),
against ``d61e136``.
"""
import json
import sys

from gpuwrite.paths import runner

SIZES = (8, 20, 64, 100, 128, 256)
THREADS = (32, 256)
REPEATS = 3
MESSAGES = 2000


def main(label: str, rnd: int, sizes=SIZES) -> None:
    for rep in range(REPEATS):
        for th in THREADS:
            for size in sizes:
                for path in ("gpu_push_inline", "gpu_push"):
                    r = runner.run(path, [size] * MESSAGES, n_qps=1, wait_each=True,
                                   block_threads=th)
                    ok = r.delivered == r.messages and not r.qp_errors
                    print(json.dumps({"label": label, "round": rnd, "repeat": rep, "path": path,
                                      "size": size, "threads": th, "ok": ok,
                                      "kernel": getattr(r, "kernel", None),
                                      "p50_us": round(r.latency_p50_us, 3)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]),
         tuple(int(s) for s in sys.argv[3].split(",")) if len(sys.argv) > 3 else SIZES)
