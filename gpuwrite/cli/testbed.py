"""``gpuwrite testbed``: the demo's workloads on real mlx5 NICs between two hosts.

    mpirun -n 2 -H hostA,hostB gpuwrite testbed            # MPI bootstrap
    gpuwrite testbed --listen 0.0.0.0:18515                 # on host A (rank 0, sends)
    gpuwrite testbed --connect hostA:18515                  # on host B (rank 1, target)

Results come out in the emulated demo's table (and ``--json`` rows). Where this machine
cannot run testbed mode (no RDMA device, no pyverbs, no GPU) it says why in one line and
exits with status 3.
"""
from __future__ import annotations

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import add_json_flag, console, print_json, print_path_results


def register(sub) -> None:
    p = sub.add_parser("testbed", help="run the data paths on real mlx5 NICs between two hosts "
                       "(GPU-written WQEs and doorbells); says why not where it cannot")
    p.add_argument("--paths", default="gpu_push,gpu_push_inline,nic_pull,host_staged",
                   help="comma-separated paths")
    p.add_argument("--messages", type=int, default=2000, help="messages per path (default 2000)")
    p.add_argument("--qps", type=int, default=4, help="queue pairs (default 4)")
    p.add_argument("--batch", type=int, default=4, help="WQEs per doorbell (default 4)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default=None, help="RDMA device (default: the first mlx5 one)")
    p.add_argument("--port", type=int, default=1)
    p.add_argument("--gid-index", type=int, default=0)
    p.add_argument("--ring-memory", choices=("auto", "gpu", "host"), default="auto",
                   help="where SQ/CQ rings live (default: GPU memory where dma-buf works)")
    p.add_argument("--listen", metavar="HOST:PORT", help="TCP bootstrap, this host is rank 0")
    p.add_argument("--connect", metavar="HOST:PORT", help="TCP bootstrap, this host is rank 1")
    p.add_argument("--bootstrap-timeout", type=float, default=60.0, help="seconds (default 60)")
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args) -> int:
    from gpuwrite.backends.testbed import EXIT_UNAVAILABLE, probe
    from gpuwrite.paths.runner import default_sizes

    paths = [s.strip() for s in args.paths.split(",") if s.strip()]
    from gpuwrite.backends.testbed.runner import PATHS
    for p in paths:
        if p not in PATHS:
            raise UsageError(f"path {p!r} is not one of {', '.join(PATHS)}")
    if args.messages < 1 or args.qps < 1:
        raise UsageError(f"--messages={args.messages} and --qps={args.qps} must both be at least 1")
    availability = probe(args.device)
    if not availability.ok:
        if args.json:
            print_json({"mode": "testbed", "ran": False, "reason": availability.reason})
        else:
            console.print(f"gpuwrite testbed: not run: {availability.reason}", highlight=False,
                          soft_wrap=True)
        return EXIT_UNAVAILABLE

    from gpuwrite.backends.testbed import runner
    from gpuwrite.backends.testbed.bootstrap import BootstrapError, from_environment

    try:
        boot = from_environment(args.listen, args.connect, args.bootstrap_timeout)
    except BootstrapError as exc:
        raise UsageError(str(exc)) from None
    results = []
    with boot:
        for p in paths:
            try:
                r = runner.run(p, default_sizes(p, args.messages, args.seed), boot, device=args.device,
                               port=args.port, gid_index=args.gid_index, n_qps=args.qps,
                               batch=args.batch, seed=args.seed, ring_memory=args.ring_memory)
            except (ValueError, BootstrapError) as exc:
                raise UsageError(f"{p}: {exc}") from None
            if r is not None:
                results.append(r)
    if boot.rank != 0:
        if not args.json:
            console.print(f"rank {boot.rank}: target of rank 0's writes; results are printed there")
        return 0
    ok = all(r.delivered == r.messages for r in results)
    if args.json:
        print_json({"mode": "testbed", "ran": True, "world": results[0].world if results else "",
                    "all_delivered": ok, "results": [r.row() for r in results]})
        return 0 if ok else 1
    print_path_results(results, "testbed")
    return 0 if ok else 1
