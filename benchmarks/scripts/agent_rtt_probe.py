"""The pull agent's round trip without the engine (session 43): a host C thread writes each
request into the agent's ring exactly as the engine's ``agent_post`` does (csrc/gw_pull.c:
the tagged source and destination words, then the ticket word released) and spins on its
done word, one request at a time; the agent kernel runs alone on the GPU, as
``PullAgent`` launches it (four blocks of 512 threads), and as one block of one warp. Set
beside the bench's least answer (``reverse_floor_us``: one warp answering a host thread's
ping after copying 64 bytes) and the engine's turnaround of a 64-byte nic_pull, it says
whether the pull's time above that least lies in the agent or in the engine. With a
random pause before each request (``jitter_ns``) the requests land at any phase of the
agent's polls, as the engine's do, where back to back each lands as its poll reads.

    python3 agent_rtt_probe.py ROUND >> out.jsonl
"""
import functools
import json
import sys
import tempfile

import numpy as np
from cffi import FFI

from gpuwrite._gw_cffi import lib as gw
from gpuwrite.bench.suite import engine_split_us, reverse_floor_us
from gpuwrite.cudaenv import cuda
from gpuwrite.host.memory import evict_l2, mapped
from gpuwrite.paths import pull_agent as pa
from gpuwrite.paths import runner

_C = r"""
#include <stdint.h>
#include <time.h>
struct req { uint64_t ticket_nbytes, tag_src, tag_dst, pad; };
static uint64_t now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* Posts tickets first .. first + n - 1 one at a time (each waited for); rtt[k] in ns.
   With jitter_ns, each post waits a pseudo-random 0 to jitter_ns after the last answer, so
   that requests land at any phase of the agent's polls (as the engine's do: a sender's
   round trip lies between them). Returns how many were answered within timeout_ns each. */
uint32_t agent_rtt(void *ring, void *done, uint32_t slots, uint64_t first, uint32_t n,
                   uint64_t src, uint64_t dst, uint32_t len, uint32_t stride,
                   uint64_t timeout_ns, uint64_t jitter_ns, uint64_t *rtt) {
    struct req *r = (struct req *)ring;
    volatile uint32_t *d = (volatile uint32_t *)done;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (uint32_t k = 0; k < n; k++) {
        if (jitter_ns) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t until = now_ns() + (rng >> 33) % jitter_ns;
            while (now_ns() < until)
                ;
        }
        uint64_t t = first + k;
        struct req *q = r + (t & (slots - 1));
        uint64_t tag = ((t / slots + 1) & 0xFFFF) << 48;
        uint64_t off = (uint64_t)(k % 64) * stride;
        uint64_t t0 = now_ns();
        __atomic_store_n(&q->tag_src, tag | (src + off), __ATOMIC_RELAXED);
        __atomic_store_n(&q->tag_dst, tag | (dst + off), __ATOMIC_RELAXED);
        __atomic_store_n(&q->ticket_nbytes, (t + 1) << 32 | len, __ATOMIC_RELEASE);
        for (;;) {
            uint32_t seen = __atomic_load_n(&d[t & (slots - 1)], __ATOMIC_ACQUIRE);
            if ((int32_t)(seen - (uint32_t)(t + 1)) >= 0) break;
            if (now_ns() - t0 > timeout_ns) return k;
        }
        rtt[k] = now_ns() - t0;
    }
    return n;
}
"""
_CDEF = """uint32_t agent_rtt(void *ring, void *done, uint32_t slots, uint64_t first, uint32_t n,
                   uint64_t src, uint64_t dst, uint32_t len, uint32_t stride,
                   uint64_t timeout_ns, uint64_t jitter_ns, uint64_t *rtt);"""


@functools.lru_cache(maxsize=None)
def _build():
    """The probe's C, compiled once a process."""
    ffi = FFI()
    ffi.cdef(_CDEF)
    ffi.set_source("_agent_rtt_probe", _C, extra_compile_args=["-O2"])
    tmp = tempfile.mkdtemp()
    so = ffi.compile(tmpdir=tmp)
    import importlib.util
    spec = importlib.util.spec_from_file_location("_agent_rtt_probe", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


def agent_rtt_us(blocks: int, threads: int, n: int = 2000, nbytes: int = 64,
                 evict: bool = False, jitter_ns: int = 0) -> dict:
    """Round trips (us, the first tenth dropped) of ``n`` pulls of ``nbytes`` each: their
    median and mean."""
    ffi, lib = _build()
    slots = 64
    ring, done = mapped((slots, 4), np.uint64), mapped((slots,), np.uint32)
    stride = max(256, -(-nbytes // 256) * 256)
    src = cuda.to_device(np.arange(stride * 64 // 4, dtype=np.uint32))
    dst = mapped((stride * 64 // 4,), np.uint32)
    outcome = cuda.to_device(np.zeros(4, dtype=np.int64))
    ctl = cuda.to_device(np.zeros(4, dtype=np.int64))
    desc = cuda.to_device(np.zeros((pa.AGENT_BATCH + 1, 4), dtype=np.int64))
    if evict:
        evict_l2()
    pa._agent[blocks, threads](ring.kernel, done.kernel, int(5e9), pa.SPLIT_BYTES,
                               pa.MIN_CHUNK_BYTES, ctl, desc, outcome)
    rtt = ffi.new("uint64_t[]", n)
    got = lib.agent_rtt(ffi.cast("void *", ring.address), ffi.cast("void *", done.address),
                        slots, 0, n, src.__cuda_array_interface__["data"][0], dst.address,
                        nbytes, stride, 2_000_000_000, jitter_ns, rtt)
    stop = ffi.new("uint64_t[]", 1)
    lib.agent_rtt(ffi.cast("void *", ring.address), ffi.cast("void *", done.address), slots,
                  n, 1, 0, 0, gw.GW_PULL_STOP_BYTES, 0, 2_000_000_000, 0, stop)
    cuda.synchronize()
    if got < n:
        raise RuntimeError(f"the agent answered {got} of {n}")
    ns = np.frombuffer(ffi.buffer(rtt), dtype=np.uint64)[n // 10:] / 1e3
    return {"median_us": round(float(np.median(ns)), 3), "mean_us": round(float(np.mean(ns)), 3)}


def main(rnd: int) -> None:
    def out(**kw):
        print(json.dumps({"round": rnd, **kw}), flush=True)

    out(what="reverse_64B", us=round(reverse_floor_us(2000, 64), 3))
    for blocks, threads in ((4, 512), (1, 32)):
        for jitter in (0, 2400):
            out(what="agent_direct", blocks=blocks, threads=threads, jitter_ns=jitter,
                **agent_rtt_us(blocks, threads, evict=True, jitter_ns=jitter))
    r = runner.run("nic_pull", [64] * 400, n_qps=1, wait_each=True, block_threads=32,
                   source_l2="evicted")
    out(what="engine_pull_64B", p50_us=round(r.latency_p50_us, 3),
        engine_us=round(engine_split_us(r)["engine"], 3))
    r = runner.run("gpu_push", [64] * 400, n_qps=1, wait_each=True, block_threads=32)
    out(what="engine_push_64B", p50_us=round(r.latency_p50_us, 3),
        engine_us=round(engine_split_us(r)["engine"], 3))


if __name__ == "__main__":
    main(int(sys.argv[1]))
