"""send_messages (gpu_push, made for its path) with a message's clock started later, to
split its latency (session 24): A from the row loads (as committed), J after the payload's
loads are issued, K after the reservation's warp barrier, I after the payload's stores and
the second barrier, B just before the doorbell, E as A without the copy_bytes branch of the
warp path. Each variant is the kernel's source with one line added, compiled on its own.
Usage: python3 benchmarks/scripts/send_split.py OUT.json"""
import json, sys, types as pytypes
from _ab import block_scope
from gpuwrite.paths import kernels as K, runner

# The variants below are put in place of the block kernel (K._BY_PATH): every table goes to
# it, as every table went to send_messages when this ran (kernels.kernel_scope, since then).
K.kernel_scope = block_scope

SRC = open(K.__file__).read()


def ind(text: str) -> str:
    """``text`` indented four more spaces (the kernel is defined inside _send_messages)."""
    return "".join("    " + line if line.strip() else line for line in text.splitlines(True))


DB = ind("        if status == 0 and end_of_batch and tid == 0:\n            dv.flush_doorbell(q, 0)\n")
L156 = ind("                    x = preload(src, src_word, n if pre else 0, tid, lanes)\n")
L161 = ind("                    warp_sync(lanes)\n                    status = sh[0]\n")
L167 = ind("                    warp_sync(lanes)\n                    if tid == 0 and status == 0 and not last:\n")
STAMP = "                    if tid == 0:\n                        t_post[m] = globaltimer_ns()\n"
COPY_BRANCH = ("                    if status == 0 and pre:\n"
               "                        store_preloaded(q[dv.Q_STAGE][0], sh[1], x, n, tid, lanes)\n"
               "                    elif status == 0:\n"
               "                        copy_bytes(q[dv.Q_STAGE][0], sh[1], src, src_word, n, tid, lanes)\n")


def variant(v: str):
    s = SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    for x in (DB, L156, L161, L167, ind(COPY_BRANCH)):
        assert s.count(x) == 1, x
    if v == "B":
        s = s.replace(DB, ind("        if status == 0 and end_of_batch and tid == 0:\n"
                              "            t_post[m] = globaltimer_ns()\n"
                              "            dv.flush_doorbell(q, 0)\n"))
    elif v == "E":
        s = s.replace(L156, ind("                    x = preload(src, src_word, n, tid, lanes)\n"))
        s = s.replace(ind(COPY_BRANCH), ind(
            "                    if status == 0:\n"
            "                        store_preloaded(q[dv.Q_STAGE][0], sh[1], x, n, tid, lanes)\n"))
    elif v == "J":
        s = s.replace(L156, L156 + ind(STAMP))
    elif v == "K":
        s = s.replace(L161, L161 + ind(STAMP))
    elif v == "I":
        s = s.replace(L167, ind("                    warp_sync(lanes)\n") + ind(STAMP) + ind(
            "                    if tid == 0 and status == 0 and not last:\n"))
    mod = pytypes.ModuleType("sm_" + v)
    mod.__file__ = K.__file__
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


if __name__ == "__main__":
    ks = {v: variant(v) for v in "ABEJKI"}
    rows = []
    for rep in range(3):
        for size in (256, 1024):
            for v in "ABEJKI":
                K._BY_PATH["gpu_push"] = ks[v]   # what runner.run launches for gpu_push
                r = runner.run("gpu_push", [size] * 1500, n_qps=1, wait_each=True, block_threads=32)
                rows.append((size, v, r.latency_p50_us))
                print(rows[-1], flush=True)
    K._BY_PATH.pop("gpu_push")
    json.dump(rows, open(sys.argv[1], "w"))
