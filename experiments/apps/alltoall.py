"""All-to-all among N ranks in one process, as an MoE token dispatch.

Each rank holds ``tokens`` tokens of ``token_bytes``, each routed to one rank (the rank
of its expert, drawn from a seed), sorted by destination so that the tokens for one
rank are one run of the send buffer. Rank ``s`` sends its run for rank ``d`` with one
``put_signal``: the data into slot ``s`` of rank ``d``'s receive region, then an 8-byte
signal (the token count + 1) into rank ``d``'s signal region, which a receiver would
poll. Pair ``(s, d)`` has its own QP, driven by one warp; a block of ``WARPS`` warps
drives ``WARPS`` QPs, so rank ``s`` is the blocks of its ``N`` pairs.

Emulated mode: every rank's receive and signal regions are separate registered regions
of pinned host memory (the NIC's destination); the send buffers are one registered
GPU allocation. The run checks every byte of every slot (and that the rest of a slot
still holds the canary) and every signal, and reports the time per path and its ratio
to the bytes moved over the bulk GPU-store bandwidth (the push ceiling).

Testbed mode (``--world testbed``): the same kernel and Session calls on one local mlx5
NIC, each pair's QP connected to itself; the receive regions are this host's pinned
memory, written by the NIC through its loopback (the world line says so).

    python3 -m experiments.apps.alltoall --ranks 8 --tokens 1024 --token-bytes 4096 --json
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from numba import int64

from experiments.apps import common
from gpuwrite.cudaenv import SIMULATOR, cuda, preload
from gpuwrite.device import api
from gpuwrite.kernel_cache import cached

WARPS = 2                       # QPs per block: one per warp
SLOTS = api.slots_shape(WARPS)  # shared-memory rows for the block's handles
CANARY = 0xDEADBEEF
# Columns of the plan: one row per (source, destination) pair, row = s * N + d = its QP.
P_SRC_WORD, P_BYTES, P_DST_ADDR, P_RKEY, P_LKEY, P_SIG_ADDR, P_SIG_RKEY, P_SIG_VALUE = range(8)
P_COLS = 8


@cached
@cuda.jit(**api.KERNEL_OPTIONS)
def dispatch(Q, cfg, send, plan, path, status):
    sh = cuda.shared.array(SLOTS, int64)
    pair = cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32
    if pair >= plan.shape[0]:
        return                              # a whole warp leaves together
    h = api.open_warp(Q, cfg, pair, sh)     # this warp drives the pair's QP
    p = plan[pair]
    st = api.put_signal(h, send, p[P_SRC_WORD], p[P_BYTES], p[P_DST_ADDR], p[P_RKEY],
                        p[P_LKEY], path, p[P_SIG_ADDR], p[P_SIG_RKEY], p[P_SIG_VALUE])
    done = api.quiet(h)                     # every byte and the signal have landed
    api.close(h)
    if cuda.threadIdx.x % 32 == 0:
        status[pair] = st if st != api.OK else done


@dataclass(frozen=True)
class Routing:
    """Who sends what: ``counts[s, d]`` tokens from rank s to rank d; ``src_word[s, d]``
    where that run starts in the send buffer (runs start on a word)."""

    ranks: int
    token_bytes: int
    counts: np.ndarray
    src_word: np.ndarray
    send: np.ndarray            # uint32 words, every rank's runs

    @property
    def run_bytes(self) -> np.ndarray:
        return self.counts * self.token_bytes

    @property
    def slot_words(self) -> int:
        """Words of one receive slot: the largest run."""
        return max(1, int((self.run_bytes.max() + 3) // 4))


def route(ranks: int, tokens: int, token_bytes: int, seed: int = 5) -> Routing:
    """Each rank's tokens to uniformly drawn ranks, and a random payload."""
    if ranks < 2 or ranks * ranks > 4096:
        raise ValueError(f"ranks={ranks}: allowed 2 to 64 (one QP per pair)")
    if tokens < 1 or token_bytes < 1:
        raise ValueError(f"tokens={tokens}, token_bytes={token_bytes}: both at least 1")
    rng = np.random.default_rng(seed)
    dest = rng.integers(0, ranks, size=(ranks, tokens))
    counts = np.stack([np.bincount(dest[s], minlength=ranks) for s in range(ranks)])
    words = (counts * token_bytes + 3) // 4
    src_word = np.concatenate([[0], np.cumsum(words.ravel())[:-1]]).reshape(ranks, ranks)
    send = rng.integers(0, 2**32, size=max(1, int(words.sum())), dtype=np.uint32)
    return Routing(ranks, token_bytes, counts.astype(np.int64), src_word.astype(np.int64), send)


class AllToAll:
    """The buffers and plan of one all-to-all on an api.Session (N x N QPs)."""

    def __init__(self, session: api.Session, routing: Routing):
        r = routing
        self.session, self.routing = session, r
        self.send, send_mr = session.source(r.send)
        # Rank d's receive region: N slots, one per source; its signal region: N uint64.
        self.recv = [session.receive(r.ranks * r.slot_words, fill=CANARY) for _ in range(r.ranks)]
        self.sig = [session.receive(2 * r.ranks) for _ in range(r.ranks)]
        plan = np.zeros((r.ranks * r.ranks, P_COLS), dtype=np.int64)
        for s in range(r.ranks):
            for d in range(r.ranks):
                buf, mr = self.recv[d]
                sig_buf, sig_mr = self.sig[d]
                plan[s * r.ranks + d] = (r.src_word[s, d], r.run_bytes[s, d],
                                         mr.address + s * r.slot_words * 4, mr.rkey, send_mr.lkey,
                                         sig_mr.address + s * 8, sig_mr.rkey, r.counts[s, d] + 1)
        self.plan = cuda.to_device(plan)
        self.status = cuda.to_device(np.zeros(r.ranks * r.ranks, dtype=np.int64))

    def reset(self) -> None:
        for buf, _ in self.recv:
            buf.host[:] = np.uint32(CANARY)
        for buf, _ in self.sig:
            buf.host[:] = 0

    def _args(self, path: str) -> tuple:
        return (self.session.Q, self.session.cfg, self.send, self.plan, api.PATH_IDS[path],
                self.status)

    def preload(self) -> None:
        """Compiles and loads the kernel now (``cudaenv.preload``): loading waits for the
        context's running kernels, a GPU pull agent among them."""
        preload(dispatch, *self._args("gpu_push"))

    def launch(self, path: str) -> None:
        pairs = self.routing.ranks ** 2
        dispatch[(pairs + WARPS - 1) // WARPS, 32 * WARPS](*self._args(path))

    def check(self) -> dict:
        """Every byte of every slot, the canary after each run, every signal. Waits for the
        launched kernel first: on a GPU a launch returns at once."""
        common.sync()
        r = self.routing
        send_bytes = r.send.view(np.uint8)
        canary = np.full(r.slot_words, CANARY, dtype=np.uint32).view(np.uint8)
        bad_pairs = []
        for d in range(r.ranks):
            got = self.recv[d][0].host.view(np.uint8).reshape(r.ranks, r.slot_words * 4)
            sig = self.sig[d][0].host.view(np.uint64)
            for s in range(r.ranks):
                n = int(r.run_bytes[s, d])
                want = send_bytes[r.src_word[s, d] * 4:r.src_word[s, d] * 4 + n]
                ok = np.array_equal(got[s, :n], want) and np.array_equal(got[s, n:], canary[n:])
                if not ok or int(sig[s]) != r.counts[s, d] + 1:
                    bad_pairs.append((s, d))
        status = self.status.copy_to_host()
        return {"pairs": r.ranks ** 2, "bad_pairs": bad_pairs,
                "errors": self.session.qp_errors(status)}


def _auto_choices(thresholds: api.Thresholds, routing: Routing) -> dict:
    """How many pairs ``auto`` sends on each path (the host's twin of ``api.path_for``)."""
    out: dict = {}
    for n in routing.run_bytes.ravel():
        path = thresholds.path_for(int(n))
        out[path] = out.get(path, 0) + 1
    return out


def run(ranks: int = 4, tokens: int = 16, token_bytes: int = 64, paths=common.PATH_CHOICES,
        repeats: int | None = None, world_name: str = "emulated", seed: int = 5,
        session_kwargs: dict | None = None, pull_agent: str | None = None,
        workers: int | None = None) -> dict:
    """Runs the all-to-all ``repeats`` times per path, in rounds of every path in turn
    (after a warm-up of each on a GPU), checking every byte each time; returns the table
    the CLI prints. ``pull_agent``: see ``common.pull_agent_for``;
    ``workers``: the emulated NIC's threads (``common.default_workers``)."""
    r = route(ranks, tokens, token_bytes, seed)
    repeats = common.default_repeats(repeats)
    kwargs = common.session_options(world_name, pull_agent, session_kwargs, workers)
    session = api.Session(ranks * ranks, world=world_name, **kwargs)
    out = {"world": common.header(), "ranks": ranks, "tokens_per_rank": tokens,
           "token_bytes": token_bytes, "bytes_moved": int(r.run_bytes.sum()),
           "largest_pair_bytes": int(r.run_bytes.max()),
           "thresholds": {"rules": [list(x) for x in session.thresholds.rules],
                          "source": session.thresholds.source},
           "auto_pairs_per_path": _auto_choices(session.thresholds, r), "paths": {}}
    gbytes, source = common.bulk_store_gbytes()
    out["bulk_store_gbytes"], out["bulk_store_source"] = gbytes, source
    ideal_s = out["bytes_moved"] / (gbytes * 1e9) if gbytes == gbytes else float("nan")
    with session:
        a2a = AllToAll(session, r)
        a2a.preload()           # before any GPU pull agent runs (Session.agent_running)
        session.start()
        out["world"] = common.header(session)
        live = []
        for path in paths:
            if path == "gpu_push_inline" and r.run_bytes.max() > api._MAX_INLINE:
                out["paths"][path] = {"skipped": f"pairs of up to {int(r.run_bytes.max())} "
                                                 f"bytes; an inline WQE holds {api._MAX_INLINE}"}
            else:
                live.append(path)

        def one_run(path: str) -> tuple[float, dict]:
            """One all-to-all by ``path``: its time and its check of every byte."""
            a2a.reset()
            with session.agent_running(), common.Timer() as t:
                a2a.launch(path)
            return t.seconds, a2a.check()

        for path, (warm, timed) in common.in_rounds(live, repeats, one_run).items():
            seconds = common.median([t for t, _ in timed])
            checks = [c for _, c in warm + timed]       # the warm-up is checked too
            bad = sorted({p for c in checks for p in c["bad_pairs"]})
            errors = {k: v for c in checks for k, v in c["errors"].items()}
            out["paths"][path] = {
                "seconds": seconds, "runs_seconds": [t for t, _ in timed],
                "gbytes_per_s": out["bytes_moved"] / seconds / 1e9,
                "ratio_to_bulk_store_time": seconds / ideal_s if ideal_s == ideal_s else None,
                "verified": not bad and not errors, "bad_pairs": bad[:10], "errors": errors}
        out["paths"] = {path: out["paths"][path] for path in paths}     # in the order asked
    return common.verdict(out, "times are a Python interpreter's, not a GPU's; only the "
                               "byte checks mean anything here")


def main(argv=None) -> int:
    parser = common.base_parser("All-to-all among N ranks in one process (MoE dispatch) "
                                "through the put/signal/quiet API, per path.")
    parser.add_argument("--ranks", type=common.positive, default=2 if SIMULATOR else 8)
    parser.add_argument("--tokens", type=common.positive, default=4 if SIMULATOR else 1024,
                        help="tokens per rank")
    parser.add_argument("--token-bytes", type=common.positive, default=62 if SIMULATOR else 4096)
    args = common.parse_args(parser, argv)
    if args.ranks < 2 or args.ranks > 64:
        parser.error(f"--ranks {args.ranks}: allowed 2 to 64")

    def table(out):
        print(f"{args.ranks} ranks x {args.tokens} tokens of {args.token_bytes} B: "
              f"{out['bytes_moved']} bytes; bulk store {out['bulk_store_gbytes']:.1f} GB/s "
              f"({out['bulk_store_source']})")
        for path, row in out["paths"].items():
            if "skipped" in row:
                print(f"  {path:16s} skipped: {row['skipped']}")
                continue
            print(f"  {path:16s} {row['seconds'] * 1e6:10.1f} us  {row['gbytes_per_s']:7.2f} GB/s  "
                  f"x{row['ratio_to_bulk_store_time']:.2f} of bytes/bulk-store  "
                  f"verified={row['verified']}" + (f"  errors={row['errors']}" if row["errors"] else ""))

    return common.emit(lambda: run(args.ranks, args.tokens, args.token_bytes, args.paths,
                                   args.repeats, args.world, pull_agent=args.pull_agent,
                                   workers=args.workers),
                       args.json, table)


if __name__ == "__main__":
    sys.exit(common.main_of(main, "python3 -m experiments.apps.alltoall")())
