"""``gpuwrite testbed``: the demo's workloads on real mlx5 NICs between two hosts.

    mpirun -n 2 -H hostA,hostB gpuwrite testbed            # MPI bootstrap
    gpuwrite testbed --listen 0.0.0.0:18515                 # on host A (rank 0, sends)
    gpuwrite testbed --connect hostA:18515                  # on host B (rank 1, target)
    gpuwrite testbed --selftest [--json]                    # one host: bring-up, step by step

Results come out in the emulated demo's table (and ``--json`` rows). Where this machine
cannot run testbed mode (no RDMA device, no pyverbs, no GPU) it says why in one line and
exits with status 3. Bad input (a port that is not one, ``--batch 0``, ``--listen`` with
``--connect``) is a usage error, exit 2, checked before anything else (under ``--json``
as ``{"error", "value", "allowed"}``).
"""
from __future__ import annotations

import re
import sys

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import add_json_flag, console, print_json, print_path_results
from gpuwrite.cli.demo import MAX_PAYLOAD_BYTES, MAX_SEED   # the same payload, size mix and bound


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
    p.add_argument("--selftest", action="store_true",
                   help="bring up one loopback QP on this host step by step and report each step "
                        "(passed / failed with errno and syndrome / skipped); exit 1 on a failure")
    add_json_flag(p)
    p.set_defaults(func=main)


MAX_QPS = 1024
MAX_BATCH = 256         # WQEs per doorbell: at most the runner's send queue (sq_bbs=256)
MAX_BOOTSTRAP_TIMEOUT_S = 86_400.0   # a day; a socket takes no timeout past time_t (inf, 1e30)


class _BadInput(Exception):
    def __init__(self, message: str, value, allowed: str):
        super().__init__(message)
        self.value, self.allowed = value, allowed


def _check_inputs(args) -> list[str]:
    """Every input checked before any device is probed; returns the paths."""
    from gpuwrite.backends.testbed.bootstrap import BootstrapError, parse_endpoint
    from gpuwrite.backends.testbed.runner import PATHS

    paths = list(dict.fromkeys(s.strip() for s in args.paths.split(",") if s.strip()))   # each once
    if not paths:
        raise _BadInput(f"--paths {args.paths!r} names no path", args.paths, ", ".join(PATHS))
    for p in paths:
        if p not in PATHS:
            raise _BadInput(f"--paths: path {p!r} is not allowed", p, ", ".join(PATHS))
    for flag, value, low, high in (("--messages", args.messages, 1, 10_000_000),
                                   ("--qps", args.qps, 1, MAX_QPS),
                                   ("--batch", args.batch, 1, MAX_BATCH),
                                   ("--port", args.port, 1, 255),
                                   ("--gid-index", args.gid_index, 0, 255),
                                   ("--seed", args.seed, 0, MAX_SEED)):
        if not low <= value <= high:
            raise _BadInput(f"{flag} {value}: allowed {low} to {high}", value, f"{low} to {high}")
    # Each message's payload has its own bytes in one registered buffer, as in demo: the
    # same bound on messages x largest size (a larger one fails its allocation late).
    from gpuwrite.paths.runner import DEMO_SIZES, INLINE_SIZES

    largest = max(max(INLINE_SIZES if p == "gpu_push_inline" else DEMO_SIZES) for p in paths)
    if args.messages * largest > MAX_PAYLOAD_BYTES:
        allowed = f"<= {MAX_PAYLOAD_BYTES // largest:,}"
        raise _BadInput(f"--messages {args.messages} with messages of up to {largest:,} B is "
                        f"{args.messages * largest:,} B of payload; allowed: messages x largest "
                        f"size <= {MAX_PAYLOAD_BYTES:,} B, here {allowed}", args.messages, allowed)
    if not 0 < args.bootstrap_timeout <= MAX_BOOTSTRAP_TIMEOUT_S:
        raise _BadInput(f"--bootstrap-timeout {args.bootstrap_timeout:g}: allowed more than 0 and at most "
                        f"{MAX_BOOTSTRAP_TIMEOUT_S:g} seconds", args.bootstrap_timeout,
                        f"more than 0, at most {MAX_BOOTSTRAP_TIMEOUT_S:g}")
    if args.device is not None and not args.device.strip():
        raise _BadInput(f"--device {args.device!r} names no device (leave it out for the first mlx5 one)",
                        args.device, "an RDMA device name, e.g. mlx5_0")
    if args.listen is not None and args.connect is not None:
        raise _BadInput(f"--listen {args.listen!r} and --connect {args.connect!r}: give one (rank 0 "
                        "listens, rank 1 connects)", [args.listen, args.connect], "one of --listen, --connect")
    if args.selftest and (args.listen is not None or args.connect is not None):
        raise _BadInput("--selftest runs on one host: it takes no --listen/--connect",
                        args.listen or args.connect, "no peer")
    for flag, value in (("--listen", args.listen), ("--connect", args.connect)):
        if value is not None:
            try:
                parse_endpoint(value, flag)
            except BootstrapError as exc:
                raise _BadInput(str(exc), value, "HOST:PORT with a port from 1 to 65535") from None
    return paths


def main(args) -> int:
    try:
        paths = _check_inputs(args)
    except _BadInput as exc:
        # what is allowed, in the line too where the message does not say it ("--paths ''
        # names no path" named no path that is allowed)
        line = str(exc) if re.search(r"[;:(]\s*allowed", str(exc)) else f"{exc}; allowed: {exc.allowed}"
        if args.json:   # the one error line, and the JSON error with what testbed adds to it
            print(f"gpuwrite testbed: error: {line}", file=sys.stderr)
            print_json({"mode": "testbed", "ran": False, "error": line, "value": exc.value,
                        "allowed": exc.allowed, "exit_status": 2})
            return 2
        raise UsageError(line, value=exc.value, allowed=exc.allowed) from None
    if args.selftest:
        return _selftest(args)
    from gpuwrite.backends.testbed import EXIT_UNAVAILABLE, probe
    from gpuwrite.paths.runner import default_sizes

    availability = probe(args.device)
    if not availability.ok:
        _not_run(args, availability.reason)
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


def _not_run(args, reason: str, mode: str = "testbed") -> None:
    """Says why testbed mode cannot run here (exit 3 follows)."""
    if args.json:
        print_json({"mode": mode, "ran": False, "reason": reason})
    else:
        command = "testbed --selftest" if mode == "testbed-selftest" else "testbed"
        console.print(f"gpuwrite {command}: not run: {reason}", highlight=False, soft_wrap=True)


def _selftest(args) -> int:
    from gpuwrite.backends.testbed import EXIT_UNAVAILABLE, probe
    from gpuwrite.backends.testbed import selftest as st

    availability = probe(args.device, need_gpu=False)
    if not availability.ok:
        _not_run(args, availability.reason, "testbed-selftest")
        return EXIT_UNAVAILABLE
    device = args.device or next(d for d in availability.devices if d.startswith("mlx5"))

    def echo(line: str) -> None:
        if not args.json:
            console.print(line, highlight=False, soft_wrap=True)

    if not args.json:
        console.print(f"gpuwrite testbed --selftest: {device} port {args.port} GID index "
                      f"{args.gid_index}, one loopback QP", highlight=False, soft_wrap=True)
    report = st.run(device, args.port, args.gid_index, echo=echo)
    if args.json:
        print_json(report.to_dict())
    else:
        console.print(f"released: {', '.join(report.released) or 'nothing'}", highlight=False,
                      soft_wrap=True)
        if report.release_error:
            console.print(f"release failed: {report.release_error}", highlight=False, soft_wrap=True)
        if report.ok:
            console.print("selftest passed (skipped steps are listed above with their reason)")
        else:
            console.print(st.BUG_REPORT, highlight=False, soft_wrap=True)
    return 0 if report.ok else 1
