"""Producer-consumer pipeline: one kernel put_signals tiles, another polls and consumes.

The producer's block ``b`` drives QP ``b`` and sends tiles ``b, b + P, ...``: tile ``t``
into slot ``t`` of the receive region, then signal ``t`` (value ``t + 1``). The
consumer's block ``c`` takes tiles ``c, c + C, ...``: its thread 0 waits for the tile's
signal (``api.wait_signal``), then the block adds up the tile's words (the "consume"
step, standing in for a GEMM that would read the activation). As in pipeline-parallel
training, the consumer never waits for the whole transfer, only for its tile's signal.

On a GPU the consumer is launched first, on its own stream, and polls while the
producer runs on another. The CUDA simulator runs one kernel at a time, so there the
producer runs first and the consumer finds its signals set (the simulator's ordering
test is in tests/foundation/test_api.py: a consumer block polls while the NIC is still
delivering). The run checks every byte of every tile, the canary after each, every
signal and every sum, and reports the time from the producer's first put to the last
tile seen, per path.

Testbed mode (``--world testbed``): the same kernels and Session calls on one local mlx5
NIC, each producer's QP connected to itself; the NIC writes the tiles and signals into
this host's pinned memory through its loopback (the world line says so).

    python3 -m experiments.apps.pipeline --tiles 256 --tile-bytes 65536 --json
"""
from __future__ import annotations

import sys

import numpy as np
from numba import int64, uint64

from experiments.apps import common
from gpuwrite.cudaenv import SIMULATOR, cuda, preload
from gpuwrite.device import api
from gpuwrite.device.intrinsics import globaltimer_ns
from gpuwrite.kernel_cache import cached

SLOTS = api.slots_shape(1)
CANARY = 0xDEADBEEF
# Producer parameters (int64): where tiles go and the keys.
R_DST_ADDR, R_RKEY, R_LKEY, R_SIG_ADDR, R_SIG_RKEY, R_TILE_BYTES, R_TILES = range(7)


@cached
@cuda.jit(**api.KERNEL_OPTIONS)
def produce(Q, cfg, tiles, prm, path, t_start, status):
    sh = cuda.shared.array(SLOTS, int64)
    b = cuda.blockIdx.x
    h = api.open_block(Q, cfg, b, sh)       # this block drives QP b
    if b == 0 and cuda.threadIdx.x == 0:
        t_start[0] = globaltimer_ns()
    tile_words = (prm[R_TILE_BYTES] + 3) // 4
    st = api.OK
    t = b
    while t < prm[R_TILES] and st == api.OK:
        st = api.put_signal(h, tiles, t * tile_words, prm[R_TILE_BYTES],
                            prm[R_DST_ADDR] + t * tile_words * 4, prm[R_RKEY], prm[R_LKEY],
                            path, prm[R_SIG_ADDR] + 8 * t, prm[R_SIG_RKEY], t + 1)
        t += cuda.gridDim.x
    done = api.quiet(h)
    api.close(h)
    if cuda.threadIdx.x == 0:
        status[b] = st if st != api.OK else done


@cached
@cuda.jit(**api.KERNEL_OPTIONS)
def consume(recv, sig, tile_words, timeout_ns, sums, t_seen, status):
    ready = cuda.shared.array(1, int64)
    c = cuda.blockIdx.x
    t = c
    while t < sums.shape[0]:
        if cuda.threadIdx.x == 0:
            ready[0] = api.wait_signal(sig, t, t + 1, timeout_ns)
            t_seen[t] = globaltimer_ns()
        cuda.syncthreads()                  # the tile's words are read after the signal
        if ready[0] != api.OK:
            if cuda.threadIdx.x == 0:
                status[c] = ready[0]
            return                          # the whole block leaves together
        acc = uint64(0)
        k = cuda.threadIdx.x
        while k < tile_words:
            acc += uint64(recv[t * tile_words + k])
            k += cuda.blockDim.x
        cuda.atomic.add(sums, t, acc)
        cuda.syncthreads()                  # ready[0] is rewritten for the next tile
        t += cuda.gridDim.x


def run(tiles: int = 6, tile_bytes: int = 1000, producers: int = 2, consumers: int = 2,
        threads: int | None = None, paths=common.PATH_CHOICES, repeats: int | None = None,
        world_name: str = "emulated", seed: int = 9, session_kwargs: dict | None = None,
        pull_agent: str | None = None, workers: int | None = None) -> dict:
    """Runs the pipeline ``repeats`` times per path, in rounds of every path in turn
    (after a warm-up of each on a GPU), checking everything each time; returns the table
    the CLI prints. ``pull_agent``: see ``common.pull_agent_for``; ``workers``: the
    emulated NIC's threads (``common.default_workers``)."""
    if tiles < 1 or tile_bytes < 1 or producers < 1 or consumers < 1:
        raise ValueError(f"tiles={tiles}, tile_bytes={tile_bytes}, producers={producers}, "
                         f"consumers={consumers}: each at least 1")
    threads = threads or (32 if SIMULATOR else 256)
    repeats = common.default_repeats(repeats)
    tile_words = (tile_bytes + 3) // 4
    payload = np.random.default_rng(seed).integers(0, 2**32, size=tiles * tile_words,
                                                   dtype=np.uint32)
    session = api.Session(producers, world=world_name,
                          **common.session_options(world_name, pull_agent, session_kwargs, workers))
    want = payload.reshape(tiles, tile_words).copy()
    if tile_bytes % 4:   # the bytes after a tile's end keep the canary
        keep = np.full(tile_words, CANARY, dtype=np.uint32).view(np.uint8)
        rows = want.view(np.uint8).reshape(tiles, tile_words * 4)
        rows[:, tile_bytes:] = keep[tile_bytes:]
    want_sums = want.astype(np.uint64).sum(axis=1)
    out = {"world": common.header(), "tiles": tiles, "tile_bytes": tile_bytes,
           "producers": producers, "consumers": consumers, "bytes_moved": tiles * tile_bytes,
           "thresholds": {"rules": [list(x) for x in session.thresholds.rules],
                          "source": session.thresholds.source},
           "concurrent": not SIMULATOR, "paths": {}}
    with session:
        src, src_mr = session.source(payload)
        recv, recv_mr = session.receive(tiles * tile_words, fill=CANARY)
        sig, sig_mr = session.receive(2 * tiles)
        prm = np.zeros(7, dtype=np.int64)
        prm[[R_DST_ADDR, R_RKEY, R_LKEY, R_SIG_ADDR, R_SIG_RKEY, R_TILE_BYTES, R_TILES]] = (
            recv_mr.address, recv_mr.rkey, src_mr.lkey, sig_mr.address, sig_mr.rkey,
            tile_bytes, tiles)
        d_prm = cuda.to_device(prm)
        timeout_ns = int(session.cfg_host[api.C_TIMEOUT_NS])

        def outputs():
            """Fresh per run: sums, t_seen, t_start, producer and consumer status."""
            return tuple(cuda.to_device(np.zeros(n, dtype=dt)) for n, dt in (
                (tiles, np.uint64), (tiles, np.int64), (1, np.int64), (producers, np.int64),
                (consumers, np.int64)))

        # Both kernels are compiled and loaded before any GPU pull agent runs
        # (Session.agent_running) and before the consumer waits for the producer's signals
        # (loading a module waits for the context's running kernels, and a first launch's
        # compilation takes seconds: more than a signal wait allows on a busy machine).
        sums, t_seen, t_start, p_status, c_status = outputs()
        preload(consume, recv.kernel, sig.kernel, tile_words, timeout_ns, sums, t_seen, c_status)
        preload(produce, session.Q, session.cfg, src, d_prm, 0, t_start, p_status)
        session.start()
        out["world"] = common.header(session)

        def one_run(path: str) -> dict:
            """One run of the pipeline by ``path``: its time and its checks."""
            recv.host[:] = np.uint32(CANARY)
            sig.host[:] = 0
            sums, t_seen, t_start, p_status, c_status = outputs()
            c_args = (recv.kernel, sig.kernel, tile_words, timeout_ns, sums, t_seen, c_status)
            p_args = (session.Q, session.cfg, src, d_prm, api.PATH_IDS[path], t_start, p_status)
            if SIMULATOR:
                produce[producers, threads](*p_args)
                consume[consumers, threads](*c_args)
            else:
                s_consumer, s_producer = cuda.stream(), cuda.stream()
                with session.agent_running():
                    consume[consumers, threads, s_consumer](*c_args)
                    produce[producers, threads, s_producer](*p_args)
                    common.sync(s_consumer, s_producer)
            ps, cs = p_status.copy_to_host(), c_status.copy_to_host()
            got = recv.host.reshape(tiles, tile_words)
            sig_ok = np.array_equal(sig.host.view(np.uint64), np.arange(1, tiles + 1))
            bytes_ok = np.array_equal(got, want)
            sums_ok = np.array_equal(sums.copy_to_host(), want_sums)
            seen = t_seen.copy_to_host()
            return {"seconds": (int(seen.max()) - int(t_start.copy_to_host()[0])) / 1e9,
                    "verified": bool(sig_ok and bytes_ok and sums_ok and not ps.any() and not cs.any()),
                    "producer_errors": session.qp_errors(ps),
                    "consumer_errors": {int(c): api.error_name(v) for c, v in enumerate(cs) if v}}

        live = []
        for path in paths:
            if path == "gpu_push_inline" and tile_bytes > api._MAX_INLINE:
                out["paths"][path] = {"skipped": f"tiles of {tile_bytes} bytes; an inline WQE "
                                                 f"holds {api._MAX_INLINE}"}
            else:
                live.append(path)
        for path, (warm, timed) in common.in_rounds(live, repeats, one_run).items():
            runs = warm + timed
            seconds = common.median([r["seconds"] for r in timed])
            out["paths"][path] = {
                "seconds": seconds, "runs_seconds": [r["seconds"] for r in timed],
                "gbytes_per_s": tiles * tile_bytes / seconds / 1e9 if seconds > 0 else None,
                "verified": all(r["verified"] for r in runs),
                "producer_errors": {k: v for r in runs for k, v in r["producer_errors"].items()},
                "consumer_errors": {k: v for r in runs for k, v in r["consumer_errors"].items()}}
        out["paths"] = {path: out["paths"][path] for path in paths}     # in the order asked
    return common.verdict(out, "the producer runs before the consumer (one kernel at a "
                               "time) and times are a Python interpreter's; only the checks "
                               "mean anything here")


def main(argv=None) -> int:
    parser = common.base_parser("Producer-consumer pipeline: put_signal tiles, poll the "
                                "signals in another kernel, per path.")
    parser.add_argument("--tiles", type=common.positive, default=6 if SIMULATOR else 256)
    parser.add_argument("--tile-bytes", type=common.positive,
                        default=1000 if SIMULATOR else 65536)
    parser.add_argument("--producers", type=common.positive, default=2 if SIMULATOR else 8,
                        help="producer blocks (one QP each)")
    parser.add_argument("--consumers", type=common.positive, default=2 if SIMULATOR else 8,
                        help="consumer blocks")
    args = common.parse_args(parser, argv)

    def table(out):
        print(f"{args.tiles} tiles of {args.tile_bytes} B, {args.producers} producer and "
              f"{args.consumers} consumer blocks")
        for path, row in out["paths"].items():
            if "skipped" in row:
                print(f"  {path:16s} skipped: {row['skipped']}")
                continue
            errors = {**row["producer_errors"], **row["consumer_errors"]}
            print(f"  {path:16s} {row['seconds'] * 1e6:10.1f} us  "
                  f"{row['gbytes_per_s'] or 0:7.2f} GB/s  verified={row['verified']}"
                  + (f"  errors={errors}" if errors else ""))

    return common.emit(lambda: run(args.tiles, args.tile_bytes, args.producers, args.consumers,
                                   paths=args.paths, repeats=args.repeats,
                                   world_name=args.world, pull_agent=args.pull_agent,
                                   workers=args.workers),
                       args.json, table)


if __name__ == "__main__":
    sys.exit(common.main_of(main, "python3 -m experiments.apps.pipeline")())
