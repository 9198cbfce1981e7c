"""``gpuwrite demo``: every data path end to end, every byte checked."""
from __future__ import annotations

import inspect

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import (add_json_flag, check_range, check_result_path, console, parse_sizes,
                                 print_json, print_path_results, provenance, write_rows)
from gpuwrite.experiments.spec import EMULATED_MAX_PAYLOAD_BYTES, EMULATED_MAX_QPS

ALL_PATHS = "gpu_push,gpu_push_inline,nic_pull,host_staged"
MAX_MESSAGES = 1_000_000
# The emulated NIC's queue table, and the payload a run may hold (three times over), as
# for a sweep file's emulated points.
MAX_QPS, MAX_PAYLOAD_BYTES = EMULATED_MAX_QPS, EMULATED_MAX_PAYLOAD_BYTES
MAX_SEED = 2**32 - 1    # numpy's default_rng takes any integer >= 0; 32 bits is plenty


def _inline_limit() -> str:
    """The emulated engine's inline limit, as help text: stated in one place, the C header."""
    try:
        from gpuwrite import layouts as L
    except ImportError:   # the C side is not built; --help still works
        return "gpuwrite.layouts.MAX_INLINE_BYTES"
    return f"{L.MAX_INLINE_BYTES} B (gpuwrite.layouts.MAX_INLINE_BYTES)"


def register(sub) -> None:
    p = sub.add_parser("demo", help="run each data path for mixed-size messages over several "
                       "QPs and verify every delivered byte")
    p.add_argument("-n", "--messages", type=int, default=None,
                   help=f"messages per path, 1 to {MAX_MESSAGES:,} (default 2000 on a GPU, 400 on the "
                        "CUDA simulator)")
    p.add_argument("-q", "--qps", type=int, default=8, help=f"queue pairs, 1 to {MAX_QPS} (default 8)")
    p.add_argument("--batch", type=int, default=4, help="WQEs per doorbell (default 4)")
    # default None: the default leaves gpu_push_inline out (with a note) at sizes it cannot
    # carry; named paths, the same four too, are checked (their text told them apart before)
    p.add_argument("--paths", default=None, help=f"comma-separated paths (default {ALL_PATHS})")
    p.add_argument("-s", "--sizes", default=None,
                   help="comma-separated message sizes to mix (4096, 4K, 1MiB), any length (default "
                        "64 B to 64 KiB; gpu_push_inline's default mix is 16 to 448 B, and it takes "
                        f"no message above {_inline_limit()}; with larger --sizes it is left out)")
    p.add_argument("--policy", default="hold", choices=["hold", "drop"])
    p.add_argument("--seed", type=int, default=1, help=f"payload and size-mix seed, 0 to {MAX_SEED}")
    p.add_argument("--out", help="also write the results, with how they were made, to this file "
                                 "(.parquet or .csv)")
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args) -> int:
    from gpuwrite import layouts as L
    from gpuwrite.cudaenv import SIMULATOR, world
    from gpuwrite.paths import runner

    named = args.paths is not None     # --paths given: every path it names is checked
    args.paths = ALL_PATHS if args.paths is None else args.paths
    paths = list(dict.fromkeys(s.strip() for s in args.paths.split(",") if s.strip()))   # each once
    if not paths:
        raise UsageError(f"--paths={args.paths!r} is not allowed; allowed: one or more of "
                         f"{', '.join(runner.PATHS)}, comma-separated")
    for p in paths:
        if p not in runner.PATHS:
            raise UsageError(f"--paths: path {p!r} is not allowed; allowed: {', '.join(runner.PATHS)}",
                             value=p, allowed=", ".join(runner.PATHS))
    n = check_range("--messages", args.messages, 1, MAX_MESSAGES) if args.messages is not None \
        else (400 if SIMULATOR else 2000)
    check_range("--qps", args.qps, 1, MAX_QPS)
    # a signaled WQE must always fit in flight: the runner's rule for its default send queue
    sq_bbs = inspect.signature(runner.run).parameters["sq_bbs"].default
    check_range("--batch", args.batch, 1, sq_bbs // (2 * L.MAX_WQE_BBS))
    check_range("--seed", args.seed, 0, MAX_SEED)
    choices, notes = None, []
    if args.sizes is not None:
        choices = parse_sizes(args.sizes, "--sizes", maximum=MAX_PAYLOAD_BYTES)
        if "gpu_push_inline" in paths and max(choices) > L.MAX_INLINE_BYTES and not named:
            paths.remove("gpu_push_inline")
            notes.append(f"gpu_push_inline left out: --sizes has sizes above its inline limit of "
                         f"{L.MAX_INLINE_BYTES} B")
        if "gpu_push_inline" in paths and max(choices) > L.MAX_INLINE_BYTES:
            raise UsageError(f"--sizes={args.sizes!r} is not allowed with gpu_push_inline; allowed: sizes up "
                             f"to the inline limit of {L.MAX_INLINE_BYTES} B (a WQE of {L.MAX_WQE_BBS} "
                             "basic blocks), or --paths without gpu_push_inline",
                             value=args.sizes, allowed=f"sizes <= {L.MAX_INLINE_BYTES}")
    largest = max(choices) if choices else max(runner.DEMO_SIZES)
    if n * largest > MAX_PAYLOAD_BYTES:
        raise UsageError(f"--messages={n} with messages of up to {largest:,} B is not allowed "
                         f"({n * largest:,} B of payload); allowed: messages x largest size <= "
                         f"{MAX_PAYLOAD_BYTES:,} B", value=n, allowed=f"<= {MAX_PAYLOAD_BYTES // largest:,}")
    check_result_path(args.out)
    parameters = {"paths": paths, "notes": notes, "messages": n, "qps": args.qps, "batch": args.batch, "policy": args.policy,
                  "seed": args.seed, "sizes": choices}
    results = []
    if not args.json:
        console.print(f"[bold]gpuwrite demo[/bold] on {world()}", soft_wrap=True)
        if SIMULATOR and args.messages is None:
            console.print("(simulator: 400 messages per path; pass --messages for more)")
        for note in notes:
            console.print(note, highlight=False)
    from gpuwrite.cli.common import progress, require_capable_gpu
    require_capable_gpu()
    with progress(as_json=args.json) as bar:    # on stderr: stdout keeps the JSON
        task = bar.add_task("paths", total=len(paths))
        for p in paths:
            bar.update(task, description=f"{p}: {n} messages")
            try:
                r = runner.run(p, runner.default_sizes(p, n, args.seed, choices), n_qps=args.qps,
                               batch=args.batch, policy=args.policy, seed=args.seed)
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
            results.append(r)
            bar.advance(task)
    ok = all(r.delivered == r.messages for r in results)
    from gpuwrite.experiments.backends import device_name
    made = provenance("demo", parameters, device_name())
    if args.out:
        write_rows([r.row() for r in results], args.out, made)
    if args.json:
        print_json({"world": world(), "all_delivered": ok, "provenance": made,
                    "results": [r.row() for r in results], **({"out": args.out} if args.out else {})})
        return 0 if ok else 1
    print_path_results(results, "emulated")
    if SIMULATOR:
        console.print("Timings on the CUDA simulator measure Python threads, not a GPU.")
    console.print("[green]every delivered byte matched what was sent[/green]" if ok else
                  "[red]some messages were not delivered intact[/red]")
    console.print(f"gpuwrite {made['gpuwrite_version']}, commit {made['git_commit'] or '-'}, {made['device']}, "
                  f"{made['date']}" + (f"; wrote {args.out}" if args.out else ""), highlight=False)
    return 0 if ok else 1
