"""Session 27: does the completion poll's quantum shrink when several loads of the word
are in flight at once?

The floor's ping-pong (``bench.suite._pingpong``) and the verbs' completion poll read a
word of mapped host memory with a chain of system-scope acquire loads, one in flight at a
time (an acquire load holds back the thread's later accesses until it returns, about
1.1 us on an H100 host), so a round trip grows in whole reads as the host answers later
(the bench's "staircase"). Variants of the ping-pong's poll, each run against the same
host C thread answering ``delay`` ns after it sees the ping:

- ``acq``: the chain of acquire loads (what the floor and the verbs do);
- ``rlx``: a chain of relaxed loads, one in flight (is a relaxed read itself shorter?);
- ``pipeK_S``: K relaxed loads in flight, issued S ns apart, the oldest checked before it
  is issued again (DeepEP's ``ibgda_poll_cq`` polls a CQE with relaxed loads too); a
  round trip should then grow in steps of S, not of a whole read;
- ``pipeK_S_d``: the same, but the loads still in flight when the answer is seen return
  before the next round's clock starts. Without it (the first run of this script) the
  next round's release store, which waits for every earlier load, paid for them: 2, 4 and
  8 loads in flight took 4.2, 6.2 and 10 us a round trip against the chain's 3.2.

Writes one JSON line per (round, variant, delay): p10, p50, p90 of the round trips (us),
and the kernel's whole time per round (``per_round_us``, launch included: what the loads
left in flight cost the next round shows there).
Usage: python3 benchmarks/scripts/poll_quantum_ab.py OUT.jsonl [rounds]
"""
import json
import sys
import time

import numpy as np
from llvmlite import ir
from numba import cuda, types
from numba.core.extending import intrinsic

from gpuwrite.device.intrinsics import (_element_pointer, globaltimer_ns,
                                        ld_acquire_sys_u32, st_release_sys_u32)
from gpuwrite.bench.suite import answered_pingpong_ns


# Here, not in gpuwrite.device.intrinsics beside its acquire twin: that module is part of the
# emulated fingerprint, and a new function there would mark every stored GPU table stale.
@intrinsic
def ld_relaxed_sys_u32(typingctx, arr, index):
    sig = types.uint32(arr, index)

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig, args)
        fnty = ir.FunctionType(ir.IntType(32), [ptr.type])
        return builder.call(ir.InlineAsm(fnty, "ld.relaxed.sys.global.u32 $0, [$1];",
                                         "=r,l,~{memory}", side_effect=True), [ptr])

    return sig, codegen


def _chain_kernel(load):
    """The floor's ping-pong with its poll a chain of ``load``s, one in flight."""
    @cuda.jit
    def pingpong(ping, pong, iters, out_ns, timeout_ns, spacing, drain):
        if cuda.threadIdx.x != 0:
            return
        for k in range(iters):
            t0 = globaltimer_ns()
            st_release_sys_u32(ping, 0, k + 1)
            while load(pong, 0) != k + 1:
                if globaltimer_ns() - t0 > timeout_ns:
                    out_ns[k] = -1
                    return
            out_ns[k] = globaltimer_ns() - t0

    return pingpong


pp_acq = _chain_kernel(ld_acquire_sys_u32)
pp_rlx = _chain_kernel(ld_relaxed_sys_u32)


@cuda.jit(device=True)
def _until(t0, t):
    while globaltimer_ns() - t0 < t:
        pass


_PIPE = '''
@cuda.jit
def pp_pipe{K}(ping, pong, iters, out_ns, timeout_ns, spacing, drain):
    if cuda.threadIdx.x != 0:
        return
    sink = 0
    for k in range(iters):
        want = k + 1
        if drain and sink == 0xFFFFFFFF:     # drain: the last round's loads return first
            out_ns[k] = -2
        t0 = globaltimer_ns()
        st_release_sys_u32(ping, 0, want)
{prologue}
        t = {K} * spacing
        seen = False
        while not seen and globaltimer_ns() - t0 <= timeout_ns:
{body}
        out_ns[k] = globaltimer_ns() - t0 if seen else -1
        sink = {sink}
'''


def _pipe_kernel(k: int):
    pro = "\n".join(f"        v{j} = ld_relaxed_sys_u32(pong, 0)\n        _until(t0, {j + 1} * spacing)"
                    for j in range(k))
    body = "\n".join(
        f"            if v{j} == want:\n                seen = True\n                break\n"
        f"            v{j} = ld_relaxed_sys_u32(pong, 0)\n            t += spacing\n"
        f"            _until(t0, t)" for j in range(k))
    ns = dict(globals())
    exec(_PIPE.format(K=k, prologue=pro, body=body, sink=" + ".join(f"v{j}" for j in range(k))), ns)
    return ns[f"pp_pipe{k}"]


def round_trips(kernel, iters, delay_ns, spacing=0, drain=False):
    """p10, p50 and p90 of the round trips (us, the first tenth left out) and the
    kernel's whole time per round (us)."""
    took = []

    def launch(ping, pong, out):
        t = time.perf_counter()
        kernel[1, 32](ping.kernel, pong.kernel, iters, out, 2_000_000_000, spacing, drain)
        cuda.synchronize()
        took.append((time.perf_counter() - t) / iters * 1e6)

    ns = answered_pingpong_ns(iters, launch, delay_ns)[iters // 10:]
    return [float(np.percentile(ns, q) / 1e3) for q in (10, 50, 90)] + took


def main():
    out_path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    pipes = {k: _pipe_kernel(k) for k in (2, 4, 8)}
    variants = [("acq", pp_acq, 0, False), ("rlx", pp_rlx, 0, False),
                ("pipe2_550", pipes[2], 550, False), ("pipe4_300", pipes[4], 300, False)]
    for k, s in ((2, 550), (4, 300), (4, 200), (8, 150)):
        variants.append((f"pipe{k}_{s}_d", pipes[k], s, True))
    for name, kern, s, f in variants:        # compile and warm each
        round_trips(kern, 200, 0, s, f)
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for delay in (0, 100, 200, 300, 400, 500, 600, 800, 1000, 1200):
                for name, kern, s, f in variants:
                    p10, p50, p90, per_round = round_trips(kern, 2000, delay, s, f)
                    row = dict(round=rnd, v=name, delay=delay, p10=p10, p50=p50, p90=p90,
                               per_round_us=per_round)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(row, flush=True)


if __name__ == "__main__":
    main()
