"""Session 31: the put bench's 64-byte rate kernel with its path and scope compile-time
constants (``bench.put_stream_kernel``) against the same loop with both kernel arguments
(``bench.put_stream``, what the rate pairs ran until then) and against send_messages, in
turn on one host, the order rotating each round. Each kernel has one untimed run of the
timed length first. Prints one JSON line per run: round, kernel, M msg/s, every byte.
Usage: python3 benchmarks/scripts/put_rate_ab.py OUT.jsonl [rounds]
"""
import json
import sys

from experiments.apps import bench
from gpuwrite.bench import suite
from gpuwrite.paths import runner

N_QPS, PER_QP = 256, 4000


def _put(constant: bool) -> dict:
    r = bench.put_stream_run(N_QPS, PER_QP, 64, threads=32, batch=16, warp_scope=True,
                             workers=suite.RATE_WORKERS, path_constant=constant,
                             **bench.SMALL_RINGS)
    return {"mpps": r["mpps"], "all_bytes": r["delivered"] == r["messages"]}


def _sm() -> dict:
    r = runner.run("gpu_push", [64] * (N_QPS * PER_QP), n_qps=N_QPS, batch=16,
                   block_threads=32, workers=suite.RATE_WORKERS)
    return {"mpps": suite.message_rate_mpps(r), "all_bytes": r.delivered == r.messages}


KERNELS = {"put_constant": lambda: _put(True), "put_argument": lambda: _put(False),
           "send_messages": _sm}


def main(out_path: str, rounds: int = 6) -> None:
    names = list(KERNELS)
    for name in names:                      # warm-up: compile, and one run of each
        KERNELS[name]()
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            order = names[rnd % 3:] + names[:rnd % 3]
            for name in order:
                row = dict(round=rnd, kernel=name, place=order.index(name), **KERNELS[name]())
                out.write(json.dumps(row) + "\n")
                out.flush()


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
