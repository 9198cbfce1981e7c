"""(Session 40: ran at `4f7b39e` and `a56e53b`, whose kernels.py it calls "after"; that change
was reverted in `5354ea0`, so at a later commit "after" is the kernel as committed.)
Session 40: send_messages with a block barrier after every message (before) against one
only before a message the block takes part in (after: thread 0 posts pulls and one-thread
pushes alone, ``alone`` in gpuwrite/paths/kernels.py). The kernels of both, in turn, one
message in flight, sources evicted from L2 as in the sweep, the order alternating by round;
then the 64-byte rate (256 QPs, batches of 16, blocks of 32, as the bench) of each.

Usage: python3 benchmarks/scripts/alone_ab.py OUT.jsonl BEFORE_KERNELS.py [rounds]
(BEFORE_KERNELS.py: gpuwrite/paths/kernels.py as it was, e.g. ``git show 6b0e1c2:...``)
"""
import importlib.util
import sys

from _ab import block_scope, emit, run_rounds

from gpuwrite.bench.suite import RATE_BATCH, RATE_WORKERS, message_rate_mpps
from gpuwrite.paths import kernels as K, runner

# The variants below are put in place of the block kernel (K._BY_PATH): every table goes to
# it, as every table went to send_messages when this ran (kernels.kernel_scope, since then).
K.kernel_scope = block_scope

PLAN = {"gpu_push": (64, 256, 1024, 4096), "host_staged": (64, 256, 1024),
        "nic_pull": (64, 65536)}


def main(argv):
    out_path, before_path = argv[0], argv[1]
    rounds = int(argv[2]) if len(argv) > 2 else 3
    spec = importlib.util.spec_from_file_location("kernels_before", before_path)
    before = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    kernels, plan = {}, {}
    for path, sizes in PLAN.items():
        for name, mod in (("before", before), ("after", K)):
            kernels[f"{path}/{name}"] = (mod._send_messages(K.PATH_IDS[path]),
                                         {"path": path, "source_l2": "evicted"})
        for size in sizes:
            plan.setdefault(size, []).extend([f"{path}/before", f"{path}/after"])
    run_rounds(kernels, plan, out_path + ".lat", rounds=rounds, alternate=True,
               messages=lambda size: 2000 if size <= 4096 else 400)
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            names = ("before", "after") if rnd % 2 == 0 else ("after", "before")
            for name in names:
                K._BY_PATH["gpu_push"] = kernels[f"gpu_push/{name}"][0]
                try:
                    r = runner.run("gpu_push", [64] * (256 * 2000), n_qps=256, batch=RATE_BATCH,
                                   block_threads=32, workers=RATE_WORKERS)
                finally:
                    K._BY_PATH.pop("gpu_push", None)
                emit(out, round=rnd, v=name, rate_mpps=round(message_rate_mpps(r), 1),
                     delivered=r.delivered, messages=r.messages)


if __name__ == "__main__":
    main(sys.argv[1:])
