"""``gpuwrite bench``: floor, ceilings and every data path, side by side, on a real GPU."""
from __future__ import annotations

import re

from gpuwrite.cli import NoGPUError, UsageError
from gpuwrite.cli.common import add_json_flag, console, parse_sizes, print_json, status, table


class BenchInputError(UsageError):
    """A bad option value, naming what was given and what is allowed (``value`` and
    ``allowed`` also go into the JSON error)."""

    def __init__(self, what: str, value, allowed: str):
        Exception.__init__(self, f"{what}={value!r} is not allowed; allowed: {allowed}")
        self.value = value
        self.allowed = allowed


def _list(text: str, what: str, parse, allowed: str) -> list:
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise BenchInputError(what, text, allowed)
    return [parse(t.strip()) for t in items]


def _positive_int(what: str, text: str, most: int | None = None, allowed: str | None = None) -> int:
    value = int(text) if re.fullmatch(r"\s*\d+\s*", text or "") else 0
    if value < 1 or (most is not None and value > most):
        raise BenchInputError(what, text, allowed or ("a whole number >= 1" if most is None else f"1 to {most:,}"))
    return value


# Upper bounds of the counts: the demo's (the emulated NIC's queue table, and messages
# per run), and runs of a repeated figure (the default is 5).
MAX_REPEATS = 1000


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure the floor, the ceilings and each data path on "
                       "this GPU, and judge every run against the targets")
    p.add_argument("--quick", action="store_true", help="fewer messages and 2 repeats")
    p.add_argument("-s", "--sizes", default=None,
                   help="latency-vs-size sweep sizes, comma-separated: 64,4K,1MiB "
                   "(default 64 B to 1 MiB by 4x)")
    p.add_argument("-p", "--paths", default=None,
                   help="paths of the sweep, comma-separated (default: all four)")
    p.add_argument("-q", "--qps", default="1",
                   help="QPs of the sweep, each with one message in flight (default 1)")
    p.add_argument("-n", "--iters", default=None,
                   help="messages per point (the sweep sends fewer of the largest sizes) and "
                   "per 64-byte latency run")
    p.add_argument("-t", "--threads", default=None,
                   help="threads per block of the sweep, comma-separated, at most 512 (default 32,256)")
    p.add_argument("-r", "--repeats", default=None,
                   help="runs of every repeated figure (default 5; --quick 2)")
    p.add_argument("--sweep-only", action="store_true",
                   help="only the latency-vs-size sweep, not the three foundation targets")
    add_json_flag(p)
    p.set_defaults(func=main)


def _options(args) -> dict:
    from gpuwrite.paths.kernels import MAX_BLOCK_THREADS
    from gpuwrite.paths.runner import PATHS

    opts: dict = {}
    if args.sizes is not None:
        opts["sizes"] = tuple(parse_sizes(args.sizes, "--sizes", maximum=1 << 30))
    if args.paths is not None:
        paths = _list(args.paths, "--paths", str, ", ".join(PATHS))
        for p in paths:
            if p not in PATHS:
                raise BenchInputError("--paths: path", p, ", ".join(PATHS))
        opts["paths"] = tuple(dict.fromkeys(paths))     # each once
        from gpuwrite.paths.runner import INLINE_SIZES
        # named with sizes it cannot carry, inline would be left out of the sweep silently
        too_large = [n for n in opts.get("sizes", ()) if n > INLINE_SIZES[-1]]
        if "gpu_push_inline" in paths and too_large:
            raise BenchInputError("--sizes", too_large[0], f"at most {INLINE_SIZES[-1]} B with "
                                  "--paths gpu_push_inline (the sweep's inline payloads)")
    if args.threads is not None:
        most = MAX_BLOCK_THREADS
        allowed = f"1 to {most} threads per block (the sending kernel's registers)"
        threads = _list(args.threads, "--threads", lambda t: _positive_int("--threads", t, allowed=allowed), allowed)
        for t in threads:
            if t > most:
                raise BenchInputError("--threads", t, allowed)
        opts["threads"] = tuple(threads)
    from gpuwrite.cli.demo import MAX_MESSAGES, MAX_QPS
    opts["n_qps"] = _positive_int("--qps", args.qps, MAX_QPS)
    if args.iters is not None:
        opts["iters"] = _positive_int("--iters", args.iters, MAX_MESSAGES)
    if args.repeats is not None:
        opts["repeats"] = _positive_int("--repeats", args.repeats, MAX_REPEATS)
    opts["sweep_only"] = args.sweep_only
    return opts


def main(args) -> int:
    opts = _options(args)
    from gpuwrite.bench.suite import run_suite
    from gpuwrite.cudaenv import SIMULATOR, world

    if SIMULATOR:
        raise NoGPUError("bench needs a real GPU; this machine has none (NUMBA_ENABLE_CUDASIM=1). "
                         "Run `gpuwrite demo` here, and bench on a GPU machine",
                         value="NUMBA_ENABLE_CUDASIM=1", allowed="a CUDA GPU")
    from gpuwrite.cli.common import require_capable_gpu
    require_capable_gpu()
    with status("benchmarking") as spinner:     # on stderr: stdout keeps --json's document
        out = run_suite(quick=args.quick,
                        progress=lambda m: spinner.update(m), **opts)
    out["world"] = world()
    from gpuwrite.experiments.store import provenance
    out.update(provenance())
    if args.json:
        print_json(out)
        return 0
    _print(out)
    return 0


def _mmm(d: dict, fmt: str = "{:.2f}") -> str:
    """min / median / max of a repeated figure."""
    return " / ".join(fmt.format(d[k]) for k in ("min", "median", "max"))


def _workers(rows: dict) -> str:
    """", N engine workers" where the bench recorded them (files from before session 17
    did not), and ", pinned" where each ran on a CPU of its own (from session 18)."""
    counts = {v["workers"] for v in rows.values() if "workers" in v}
    if len(counts) != 1:
        return ""
    pinned = [bool(v.get("engine_cpus")) for v in rows.values() if "engine_cpus" in v]
    return f", {counts.pop()} engine workers" + (", pinned" if pinned and all(pinned) else "")


def _engine_side(engine: dict | None) -> list[str]:
    """The rate table's engine columns (min / median / max); "-" for files from before
    session 18, which did not record them."""
    if not engine:
        return ["-", "-"]
    return [_mmm(engine["turnaround_us"]), _mmm(engine["rings_per_look"])]


def _copies(out: dict) -> str:
    """The copy ceilings: one warp's and one 256-thread block's, of a source read for the
    first time (the messages' case) and from L2; from session 30 also of a first-read
    source evicted from L2 first (from HBM: the sweep's bounds); files from before session
    19 have only the copy from L2."""
    def two(key):
        fresh = out.get(f"{key}_fresh_gbytes")
        hbm = out.get(f"{key}_hbm_gbytes")
        l2 = out[f"{key}_gbytes"]
        if fresh is None:
            return f"{l2:.1f}"
        if hbm is None:
            return f"{fresh:.1f} (from L2 {l2:.1f})"
        return f"{hbm:.1f} from HBM (just uploaded {fresh:.1f}, from L2 {l2:.1f})"
    return (f", one warp: {two('warp_copy')} GB/s;  one 256-thread block: "
            f"{two('block256_copy')} GB/s")


def _runs_met(pt: dict) -> str:
    """A sweep point's runs met: "k/n <= T x", or, where some runs beat their bound and
    were not judged (session 30 on), "k/j judged <= T x (m beat the bound)"."""
    n = len(pt["runs"])
    judged = pt.get("runs_judged", n)
    if judged == n:
        return f"{pt['runs_met']}/{n} <= {pt['target_ratio']}x"
    return (f"{pt['runs_met']}/{judged} judged <= {pt['target_ratio']}x "
            f"({n - judged} beat the bound)")


def _least_says(miss: dict) -> str:
    """What a 64-byte miss's own repeat's least says of it (files from session 42 on):
    the least against the floor and the push above it, and where the least is itself over
    the target, that no push that orders its stores before its doorbell met it there."""
    if "least_ratio" not in miss:
        return ""
    from gpuwrite.bench.suite import TARGET_LATENCY_RATIO
    text = (f"; that repeat's least {miss['least_ratio']:.2f}x the floor, the push "
            f"{miss['over_least_us']:+.2f} us from it")
    if miss["least_ratio"] > TARGET_LATENCY_RATIO:
        text += " (the target below the least there)"
    return text


# What a sweep point's least is, by its ``least_kind``.
LEAST_WORDS = {
    "pull": "floor + the 64-byte reverse trip + the rest's copy",
    "copy": "floor + size / the copy of the one block that sends it",
    "stores": "the floor's ping-pong after the stores a push of that size orders before its "
              "doorbell, by the threads its kernel uses",
}


def _least_cell(pt: dict) -> str:
    """The sweep table's least column: its ratio to the bound, and which least it is where
    the point's push least was measured (``least_kind`` "stores")."""
    if "least_ratio" not in pt:
        return ""
    return f"{pt['least_ratio']:.2f}" + (" st" if pt.get("least_kind") == "stores" else "")


def _least_stores_lines(sweep: list[dict]) -> list[str]:
    """The measured push leasts (``least_stores_us``) against each point's bound, min /
    median / max over the sweep's repeats, a line per path; none where the file has none
    (before session 36; host_staged's since session 37). "st" in the table marks the
    points whose least they are."""
    from gpuwrite.experiments.style import bytes_label
    lines = []
    for path in dict.fromkeys(pt["path"] for pt in sweep if "least_stores_us" in pt):
        each = "; ".join(
            f"{bytes_label(pt['size_bytes'])} {pt['threads']} thr "
            + " / ".join(f"{pt['least_stores_us'][k] / pt['bound_us']:.2f}"
                         for k in ("min", "median", "max"))
            for pt in sweep if pt["path"] == path and "least_stores_us" in pt)
        lines.append(f"least st, {path}: {LEAST_WORDS['stores']} (its payload from registers"
                     + ("" if path == "gpu_push" else "; no staging header")
                     + f"), measured before each sweep repeat, x the point's bound: {each}")
    return lines


def _agent_lines(sweep: list) -> list[str]:
    """The engine's round trip to the pull agent at each nic_pull point that recorded it
    (``agent_us``, since session 43: request written to answer seen, the medians of its
    runs), and what a miss charged to ``agent`` means."""
    pts = [pt for pt in sweep if "agent_us" in pt]
    if not pts:
        return []
    cells = ", ".join(f"{pt['size_bytes']} B {pt['threads']} thr {pt['agent_us']['median']:.2f}"
                      for pt in pts)
    lines = [f"  nic_pull's round trip from the engine to the pull agent (request written to "
             f"answer seen), median us: {cells}"]
    if any(r.get("lost_in", {}).get("step") == "agent" for pt in pts for r in pt["runs"]):
        lines.append("  lost in agent: that round trip, a host-GPU round trip a NIC's read does "
                     "not make (the stand-in's); lost in pull: the rest of the engine's read")
    return lines


def _sweep_why(pt: dict) -> str:
    """Where a sweep point's missed runs lost their time: the steps named, and how many of
    its runs were a whole completion-poll read later than its fastest, and how many lost
    their time in the engine against it."""
    lost = sorted({r["lost_in"]["step"] for r in pt["runs"] if "lost_in" in r})
    late = len(pt.get("runs_a_poll_read_later", []))
    slow = len(pt.get("runs_engine_slow", []))
    busy = len(pt.get("runs_host_busy", []))
    parts = [", ".join(lost)] if lost else []
    if late:
        parts.append(f"{late} run{'s' if late > 1 else ''} a poll read later")
    if slow:
        parts.append(f"{slow} run{'s' if slow > 1 else ''} the engine slow")
    if busy:
        parts.append(f"{busy} run{'s' if busy > 1 else ''} the host busy")
    return "; ".join(parts)


def _host_cols(v: dict) -> list[str]:
    """The host columns of a repeated figure's row: steal (ms, summed over the CPUs) and
    this process's involuntary context switches, min / median / max over its runs; "-"
    where the file predates session 30 or the host gave no steal figure."""
    from gpuwrite.bench.suite import spread
    loads = v.get("host")
    if not loads:
        return ["-", "-"]
    steal = [h["steal_ms"] for h in loads]
    sw = [h["involuntary_switches"] for h in loads]
    return ["-" if None in steal else _mmm(spread(steal), "{:.0f}"), _mmm(spread(sw), "{:.0f}")]


def _host_says(h: dict | None) -> str:
    """One run's host, in words: steal and involuntary switches."""
    if not h:
        return ""
    steal = "no steal figure" if h["steal_ms"] is None else f"steal {h['steal_ms']:.0f} ms"
    k = h.get("kernel")         # the sending kernel's span (files from session 31 on)
    if k and k["steal_ms"] is not None:
        steal += f" ({k['steal_ms']:.0f} in the kernel's {k['span_ms']:.1f} ms)"
    return f"; host: {steal}, {h['involuntary_switches']} involuntary switches"


def _engine_slow_copies(pt: dict) -> str | None:
    """For a sweep point whose runs the engine slowed: its split copies in those runs
    against its fastest run (the worker's wait on its copy helpers per split delivery, and
    the share of helpers' pieces it copied itself), or None where nothing was split."""
    from gpuwrite.bench.suite import slow_runs
    slow = pt.get("runs_engine_slow") or []
    copies = [r.get("copy") for r in pt["runs"]]
    if not slow or not any(copies):
        return None
    best, _ = slow_runs([r["p50_us"] for r in pt["runs"]])

    def say(k):
        c = copies[k]
        return "none split" if not c else \
            f"wait {c['wait_us']:.1f} us, {100 * c['late_share']:.0f} % late"
    return (f"{pt['path']} {pt['size_bytes']} B {pt['threads']} thr: the engine-slow runs' "
            "split copies (the worker's wait on its helpers per delivery, the helpers' pieces "
            "it copied itself): " + "; ".join(f"run {k + 1} {say(k)}" for k in slow) +
            f"; fastest run {best + 1} {say(best)}")


def _cached_note(out: dict) -> str:
    """How the engine stored mid-size deliveries in this run (Context's
    cached_dst_max_bytes; absent from results before session 28)."""
    limit = out.get("engine_cached_dst_max_bytes")
    if limit is None:
        return ""
    if limit == 0:
        return "; every delivery of 4 KiB or more streamed (non-temporal stores)"
    return (f"; those of 4 to 32 KiB into regions up to {limit / (1 << 20):.1f} MiB (an "
            "eighth of the L3) stored through the cache, larger ones streamed")


def _gpu_state(gs: dict | None) -> str | None:
    """The GPU's clocks over the bench, in one line (files from session 31 on)."""
    if not gs:
        return None
    from gpuwrite.bench.gpustate import held_back
    states = [gs.get("start"), *gs.get("sweep_repeats", []), gs.get("end")]
    read = [s for s in states if s and "sm_mhz" in s]
    if not read:
        why = next((s["unavailable"] for s in states if s and "unavailable" in s), "no reading")
        return f"GPU clocks: not recorded ({why})"
    # An idle GPU (before the first kernel) parks its clock: such a reading says nothing
    # of the clock the runs had.
    busy = [s for s in read if "gpu_idle" not in s["clock_event_reasons"]]
    idle = f", {len(read) - len(busy)} of them idle" if len(busy) < len(read) else ""
    sm = sorted(s["sm_mhz"] for s in busy or read)
    held = sorted({r for s in read for r in held_back(s)})
    return (f"GPU clocks (NVML, {len(read)} readings: start, before each sweep repeat, end"
            f"{idle}): SM {sm[0]} to {sm[-1]} MHz{' when idle' if not busy else ''} of "
            f"{read[0]['sm_max_mhz']}, "
            f"{min(s['temperature_c'] for s in read)} to {max(s['temperature_c'] for s in read)} C; "
            + (f"held back by {', '.join(held)}" if held else "nothing held the clock back"))


def _stand_in_lines(sweep: list[dict]) -> list[str]:
    """One line per path and block: the engine's delivery of a WQE (its turnaround less its
    fixed cost, median) against the wire it stands for, at each size where it cost more.
    A message sent as smaller WQEs is named by both sizes ("1 MiB as 256 KiB WQEs"), so
    that two points of one WQE size read apart."""
    from gpuwrite.experiments.style import bytes_label
    by: dict = {}
    for pt in sweep:
        si = pt.get("stand_in")
        if si and si["costs_more"]:
            wqe = bytes_label(pt["wqe_bytes"])
            size = pt.get("size_bytes", pt["wqe_bytes"])
            what = wqe if size == pt["wqe_bytes"] else f"{bytes_label(size)} as {wqe} WQEs"
            by.setdefault((pt["path"], pt["threads"], si["link_gbps"]), []).append(
                f"{what} {si['delivery_us']['median']:.2f} us against "
                f"{si['wire_us']:.2f} ({si['over_wire']:.1f}x)")
    return [f"{path}, {th} threads: the engine's delivery of a WQE (its turnaround less its "
            f"fixed cost, median) cost more than the {gbps:.0f} Gb/s wire it stands for "
            f"(network.rate_gbps, the model's assumption): " + ", ".join(parts)
            for (path, th, gbps), parts in by.items()]


def _print(out: dict) -> None:
    console.print(f"[bold]gpuwrite bench[/bold] on {out['world']}; every repeated figure as "
                  f"min / median / max of {out['repeats']} runs"
                  + (f"; gpuwrite {out.get('gpuwrite_version')} at {out['git_commit']}"
                     if out.get("git_commit") else ""))
    console.print(f"floor (doorbell ping-pong): {out['floor_pingpong_us']:.2f} us;  bulk GPU "
                  f"stores to host: {out['bulk_store_gbytes']:.1f} GB/s;  vector copy to "
                  f"host{_copies(out)}")
    fr = out.get("floor_readers")
    if fr:
        gain = out["floor_pingpong_us"] - fr["us"]["median"]
        console.print(f"floor with {fr['readers']} readers (warps polling the answer on lines of "
                      f"their own, {fr['spacing_ns']} ns apart): {_mmm(fr['us'])} us, "
                      f"{gain:.2f} us less than the floor's one reader polling at once; "
                      "gpuwrite's waits poll one CQE word with one reader after a first-poll "
                      "pause, and lanes polling that word found a completion no sooner "
                      "(BENCHMARKS.md, session 39); a CQ in GPU memory, as a testbed NIC "
                      "writes it, is polled without a PCIe read")
    if "floor_reverse_us" in out:
        console.print(f"reverse floor (the host pings a GPU warp, as the engine asks the pull "
                      f"agent): {_mmm(out['floor_reverse_us'])} us; answering with 64 bytes "
                      f"copied and fenced first: {_mmm(out['floor_reverse_64B_us'])} us")
    if "bulk_store_runs_gbytes" in out:
        console.print(f"bulk GPU stores to host measured {len(out['bulk_store_runs_gbytes']['runs'])}"
                      f" times at the start: {_mmm(out['bulk_store_runs_gbytes'], '{:.1f}')} "
                      "GB/s (the highest is the ceiling)")
    sc = out.get("sweep_ceilings_gbytes")
    if sc:
        hbm = "warp_copy_hbm_gbytes" in sc
        console.print("one-block copies of a first-read source" + (" (from HBM: evicted from "
                      "L2 first)" if hbm else "") + ", measured again before each "
                      "sweep repeat (the start's included), min / median / max GB/s: one warp "
                      f"{_mmm(sc.get('warp_copy_hbm_gbytes', sc.get('warp_copy_fresh_gbytes')), '{:.1f}')}"
                      ", one 256-thread block "
                      f"{_mmm(sc.get('block256_copy_hbm_gbytes', sc.get('block256_copy_fresh_gbytes')), '{:.1f}')}"
                      + (f"; bulk stores {_mmm(sc['bulk_store_gbytes'], '{:.1f}')}"
                         if "bulk_store_gbytes" in sc else "") + "; the sweep's bounds "
                      "and leasts use the highest (one warp's copy reads about 8 GB/s from "
                      "HBM on the H100 hosts, 16 from L2; "
                      + ("the sweep's sends read their sources from HBM too, L2 written over "
                         "before each run; " if out.get("sweep_source_l2") == "evicted" else
                         "the sweep's sends read their sources as their upload left them, "
                         "partly in L2; ")
                      + "a run that beats its bound by 5 % is not judged)")
    if "sweep_floor_runs_us" in out:
        console.print("the floor measured again before each sweep repeat (each the median of "
                      f"three): {_mmm(out['sweep_floor_runs_us'])} us; each sweep run is "
                      "judged against its own repeat's, a point's bound shows their median")
    gs = _gpu_state(out.get("gpu_state"))
    if gs:
        console.print(gs)
    if "engine_copy_threads" in out:
        console.print(f"emulated NIC: deliveries of 32 KiB or more copied by the worker and "
                      f"{out['engine_copy_threads']} helper threads" + _cached_note(out))
    if "latency_64B" in out:
        rows = [[p, _mmm(v["p50_us"]), _mmm(v["ratio_to_floor"]), f"{v['delivered']}/{v['messages']}",
                 v.get("kernel", "-")]
                for p, v in out["latency_64B"].items()]
        console.print(table("64-byte latency, post to completion (32 threads)",
                            ["path", "p50 us", "x floor", "delivered", "kernel"], rows))
        samples = out.get("floor_samples_us")
        if samples:
            flat = [x for s in samples for x in s]
            console.print(f"  each repeat judged against the median of its {len(samples[0])} "
                          f"floor ping-pongs: {_mmm(out['floor_runs_us'])} us (single "
                          f"ping-pongs {min(flat):.2f} to {max(flat):.2f})")
        push = out["latency_64B"]["gpu_push"]
        if "least_us" in push:
            console.print(f"  gpu_push's least (the floor's ping-pong after the stores a 64-byte "
                          f"push orders before its doorbell): {_mmm(push['least_us'])} us, "
                          f"{_mmm(push['least_ratio'])}x the floor")
        from gpuwrite.bench.suite import whole_reads
        for miss in push["misses"]:
            grew = miss["lost_in"]["grew_by"]
            reads = whole_reads(grew, out.get("poll_read_us"))
            note = f" (about {reads} completion-poll read{'s' if reads > 1 else ''})" if reads else ""
            console.print(f"  run {miss['run'] + 1} missed ({miss['ratio']:.2f}x): the "
                          f"{miss['lost_in']['step']} side took {grew:.2f} us "
                          f"more than its share of the floor{note}{_host_says(miss.get('host'))}"
                          f"{_least_says(miss)}")
        by_pause = out.get("gpu_push_64B_by_poll_delay_us")
        if by_pause:
            pause = out.get("gpu_push_poll_delay_ns", 0)
            how = ("starts at {} ns and follows its completions" if out.get("gpu_push_poll_adapt")
                   else "is {} ns").format(pause)
            console.print(f"  gpu_push's pause before its first completion poll {how} (the "
                          "QueueSet's default; the floor polls at once); by pause held fixed "
                          "(ns: us): " +
                          ", ".join(f"{d}: {v:.2f}" for d, v in by_pause.items()) +
                          "; the floor by pause: " +
                          ", ".join(f"{d}: {v:.2f}" for d, v in out["floor_by_poll_delay_us"].items()) +
                          f"; each side at its best pause: {out['latency_best_pause_each_ratio']:.2f}x")
        stairs = out.get("floor_by_answer_delay_us")
        if stairs:
            console.print("floor with the host answering late (delay ns: us): " +
                          ", ".join(f"{d}: {v:.2f}" for d, v in stairs.items()) +
                          "  (the completion poll is a chain of PCIe reads: NIC-side time "
                          "costs whole read round trips)")
        bd = out["latency_breakdown_ns"]
        console.print("gpu_push 64 B, step medians (ns, median run): " +
                      ", ".join(f"{k} {v['median']:.0f}" for k, v in bd.items()))
        rows = [[p, _mmm(v["gbytes"], "{:.1f}"), _mmm(v["ratio_to_bulk_store"]),
                 f"{v['wqe_bytes'] >> 10} KiB", *_host_cols(v),
                 f"{v['delivered']}/{v['messages']}"]
                for p, v in out["bandwidth_1MiB"].items()]
        for path, x in out.get("bulk_store_below_paths", {}).items():
            console.print(f"[red]  {path}'s best bandwidth run beat the bulk-store ceiling "
                          f"({x:.2f}x): the ceiling's measurement ran slow, and every ratio "
                          "against it reads too kind[/red]")
        console.print(table("1 MiB messages: bandwidth" + _workers(out["bandwidth_1MiB"]),
                            ["path", "GB/s", "x bulk store", "bytes per WQE", "steal ms",
                             "invol. switches", "delivered"], rows))
        rows = [[p, _mmm(v["mpps"], "{:.1f}"), *_engine_side(v.get("engine")),
                 *_host_cols(v), f"{v['delivered']}/{v['messages']}"]
                for p, v in out["rate_64B"].items()]
        console.print(table("64-byte message rate" + _workers(out["rate_64B"]),
                            ["path", "M msg/s", "engine turnaround us", "rings a look",
                             "steal ms", "invol. switches", "delivered"], rows))
        console.print("  steal: CPU time the hypervisor gave other guests during each run, "
                      "summed over the CPUs; involuntary switches: this process's threads "
                      "(the engine's included) preempted by the guest's scheduler")
    rows = []
    for pt in out["sweep"]:
        why = _sweep_why(pt)
        rows.append([pt["path"], pt["size_bytes"], pt["threads"], _mmm(pt["p50_us"]),
                     pt["bound_us"], _mmm(pt["ratio"]),
                     _least_cell(pt),
                     pt["engine_us"]["median"],
                     "" if pt["target_ratio"] is None else
                     _runs_met(pt)
                     + (f" (lost in: {why})" if why else "")])
    console.print(table("latency vs size, one message in flight (bound = floor + size / ceiling)",
                        ["path", "bytes", "thr", "p50 us", "bound us", "x bound",
                         "least, x bound", "engine us", "runs met"], rows))
    split = sorted({(pt["path"], pt["wqe_bytes"]) for pt in out["sweep"]
                    if pt.get("wqe_bytes", pt["size_bytes"]) < pt["size_bytes"]})
    for path, wqe in split:
        console.print(f"  {path}: larger messages sent as {wqe >> 10} KiB WQEs, each rung when "
                      "written (the engine delivers one while the block writes the next)")
    if any(r.get("lost_in", {}).get("step") == "stores" for pt in out["sweep"] for r in pt["runs"]):
        console.print("  lost in stores: the stores a push orders before its doorbell (its measured "
                      "least, least st, less the floor) took more than the bound allows for "
                      "moving its bytes: time in the hardware's stores and their ordering, not in "
                      "gpuwrite's bookkeeping")
    for line in _agent_lines(out["sweep"]):
        console.print(line)
    if any(pt.get("runs_engine_slow") for pt in out["sweep"]):
        console.print("  the engine slow: slower than the point's fastest run by a fifth or more, "
                      "at least half of it in the engine's turnaround (doorbell seen to CQE "
                      "written): time in the emulated NIC, a host thread, not on the GPU")
    if any(pt.get("runs_host_busy") for pt in out["sweep"]):
        console.print("  the host busy: slower than the point's fastest run by a fifth or "
                      "more, with steal time where the fastest had none or at least twice "
                      "its involuntary context switches (and 10 more)")
    for pt in out["sweep"]:
        line = _engine_slow_copies(pt)
        if line:
            console.print("  " + line)
    if "poll_read_us" in out:
        console.print(f"  a poll read later: slower than the point's fastest run by about a whole "
                      f"completion-poll read ({out['poll_read_us']:.2f} us, the floor's rise when "
                      "the host answers late): the poll's phase, not the path's work")
    for line in _stand_in_lines(out["sweep"]):
        console.print("  " + line)
    for path in sorted({pt["path"] for pt in out["sweep"]}):
        console.print(f"  {path}: {next(pt['emulation'] for pt in out['sweep'] if pt['path'] == path)}")
    for line in _least_stores_lines(out["sweep"]):
        console.print("  " + line)
    below = out.get("targets_below_least", {})
    from gpuwrite.bench.suite import sweep_key
    kinds = {sweep_key(pt): pt.get("least_kind") for pt in out["sweep"]}
    for k, ok in out["verdict"].items():
        if k.startswith("latency"):
            least, of = "the floor's ping-pong after a push's stores and release", "the floor"
        else:
            # Files before session 36 name no kind: their push leasts were the block's copy.
            kind = kinds.get(k) or ("pull" if " nic_pull " in k else "copy")
            least, of = LEAST_WORDS[kind], "the bound"
        why = f" (below the least: {least} = {below[k]:.2f}x {of})" if k in below else ""
        if ok is None:
            console.print(f"target {k}: [yellow]not judged[/yellow] (every run beat its bound: "
                          "its source read faster than the ceiling's copy from HBM)")
            continue
        console.print(f"target {k}: {'[green]met[/green]' if ok else '[red]missed[/red]'}{why}")
