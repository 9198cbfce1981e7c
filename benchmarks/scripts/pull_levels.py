"""nic_pull's two p50 levels (session 48): the stored Fig. 5 runs and the benches of sessions
46 to 48 put a 64-byte pull's p50 near 8.0 or near 8.4 us by run. Each run here: 2,000
64-byte pulls, one in flight, 256 threads, as Fig. 5's; with the completion poll's
adaptive pause (the default) and without it (the first poll after a fixed pause), in turn.
Per run: the p50, quantiles of the whole distribution, the engine's mean turnaround and its
mean round trip to the pull agent (request written to answer seen).

    python3 pull_levels.py ROUNDS >> out.jsonl
"""
import json
import sys

import numpy as np

from gpuwrite.bench.suite import agent_wait_us, mean_turnaround_us
from gpuwrite.paths import runner


def main(rounds: int) -> None:
    for rnd in range(rounds):
        for adapt in (True, False):
            r = runner.run("nic_pull", [64] * 2000, n_qps=1, wait_each=True, block_threads=256,
                           poll_adapt=adapt)
            assert r.delivered == r.messages, r
            lat = np.asarray(r.latencies_ns, dtype=float) / 1e3
            print(json.dumps(dict(
                round=rnd, poll_adapt=adapt, p50_us=r.latency_p50_us,
                quantiles_us={q: round(float(np.quantile(lat, q / 100)), 3)
                              for q in (5, 25, 50, 75, 95)},
                engine_us=mean_turnaround_us(r.counters), agent_us=agent_wait_us(r.counters))),
                flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
