"""nic_pull's turnaround taken apart, one pull in flight (session 43): the engine's share
of a 64-byte pull (doorbell seen to completion written, ``engine_split_us``) against the
bench's least answer (``reverse_floor_us``: a host thread's ping answered by one GPU warp
that copies 64 bytes from an L2-resident source, fences and answers), with the agent's
block of 512 threads or of 32, with its helper blocks or without, and the source left in
L2 or evicted from it (every pull then reads HBM, as the sweep's do).

    python3 pull_steps.py ROUND >> out.jsonl

With ``threads`` after ROUND: 64-byte, 64 KiB and 1 MiB pulls (source evicted) with agent
blocks of 32 to 512 threads (four blocks), to see what a smaller block costs the large
pulls that its copy serves, and whether a 64-byte pull's cost grows with the block's warps.
"""
import json
import sys

from gpuwrite.bench.suite import engine_split_us, reverse_floor_us
from gpuwrite.paths import pull_agent, runner

MESSAGES = 400
REAL_INIT = pull_agent.PullAgent.__init__


def _agent_shape(threads: int, blocks: int) -> None:
    def init(self, ctx, **kw):
        kw.setdefault("threads", threads)
        kw.setdefault("blocks", blocks)
        REAL_INIT(self, ctx, **kw)
    pull_agent.PullAgent.__init__ = init


def main(rnd: int) -> None:
    for payload in (0, 64):
        print(json.dumps({"round": rnd, "what": f"reverse_{payload}B",
                          "us": round(reverse_floor_us(2000, payload), 3)}), flush=True)
    for threads, blocks in ((512, 4), (32, 4), (512, 1)):
        _agent_shape(threads, blocks)
        for l2 in ("as_uploaded", "evicted"):
            for size in (64, 4096):
                r = runner.run("nic_pull", [size] * MESSAGES, n_qps=1, wait_each=True,
                               block_threads=32, source_l2=l2)
                split = engine_split_us(r)
                print(json.dumps({"round": rnd, "what": "pull", "threads": threads,
                                  "blocks": blocks, "source_l2": l2, "size": size,
                                  "ok": r.delivered == r.messages and not r.qp_errors,
                                  "p50_us": round(r.latency_p50_us, 3),
                                  "engine_us": round(split["engine"], 3),
                                  "gpu_us": round(split["gpu"], 3)}), flush=True)
    pull_agent.PullAgent.__init__ = REAL_INIT


def threads(rnd: int) -> None:
    for th in (32, 64, 128, 256, 512):
        _agent_shape(th, 4)
        for size in (64, 65536, 1 << 20):
            r = runner.run("nic_pull", [size] * (MESSAGES if size < 65536 else 25), n_qps=1,
                           wait_each=True, block_threads=32, source_l2="evicted",
                           chunk_bytes=max(size, 65536))
            split = engine_split_us(r)
            print(json.dumps({"round": rnd, "what": "pull_threads", "threads": th, "size": size,
                              "ok": r.delivered == r.messages and not r.qp_errors,
                              "p50_us": round(r.latency_p50_us, 3),
                              "engine_us": round(split["engine"], 3)}), flush=True)
    pull_agent.PullAgent.__init__ = REAL_INIT


if __name__ == "__main__":
    (threads if sys.argv[2:] == ["threads"] else main)(int(sys.argv[1]))
