"""``gpuwrite demo``: every data path end to end, every byte checked."""
from __future__ import annotations

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import add_json_flag, console, print_json, print_path_results


def register(sub) -> None:
    p = sub.add_parser("demo", help="run each data path for mixed-size messages over several "
                       "QPs and verify every delivered byte")
    p.add_argument("--messages", type=int, default=None,
                   help="messages per path (default 2000 on a GPU, 400 on the CUDA simulator)")
    p.add_argument("--qps", type=int, default=8, help="queue pairs (default 8)")
    p.add_argument("--batch", type=int, default=4, help="WQEs per doorbell (default 4)")
    p.add_argument("--paths", default="gpu_push,gpu_push_inline,nic_pull,host_staged",
                   help="comma-separated paths")
    p.add_argument("--sizes", default=None,
                   help="comma-separated message sizes in bytes to mix, any length (default "
                        "64 B to 64 KiB; up to 448 B for gpu_push_inline)")
    p.add_argument("--policy", default="hold", choices=["hold", "drop"])
    p.add_argument("--seed", type=int, default=1)
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args) -> int:
    from gpuwrite.cudaenv import SIMULATOR, world
    from gpuwrite.paths import runner

    paths = [s.strip() for s in args.paths.split(",") if s.strip()]
    for p in paths:
        if p not in runner.PATHS:
            raise UsageError(f"path {p!r} is not one of {', '.join(runner.PATHS)}")
    n = args.messages or (400 if SIMULATOR else 2000)
    choices = None
    if args.sizes is not None:
        try:
            choices = [int(v) for v in args.sizes.split(",") if v.strip()]
        except ValueError:
            choices = []
        if not choices:
            raise UsageError(f"--sizes={args.sizes!r}: comma-separated whole numbers of bytes")
    if n < 1 or args.qps < 1:
        raise UsageError(f"--messages={n} and --qps={args.qps} must both be at least 1")
    results = []
    if not args.json:
        console.print(f"[bold]gpuwrite demo[/bold] on {world()}")
        if SIMULATOR and args.messages is None:
            console.print("(simulator: 400 messages per path; pass --messages for more)")
    from rich.progress import Progress
    with Progress(transient=True, disable=args.json) as progress:
        task = progress.add_task("paths", total=len(paths))
        for p in paths:
            progress.update(task, description=f"{p}: {n} messages")
            try:
                r = runner.run(p, runner.default_sizes(p, n, args.seed, choices), n_qps=args.qps,
                               batch=args.batch, policy=args.policy, seed=args.seed)
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
            results.append(r)
            progress.advance(task)
    ok = all(r.delivered == r.messages for r in results)
    if args.json:
        print_json({"world": world(), "all_delivered": ok, "results": [r.row() for r in results]})
        return 0 if ok else 1
    print_path_results(results, "emulated")
    if SIMULATOR:
        console.print("Timings on the CUDA simulator measure Python threads, not a GPU.")
    console.print("[green]every delivered byte matched what was sent[/green]" if ok else
                  "[red]some messages were not delivered intact[/red]")
    return 0 if ok else 1
