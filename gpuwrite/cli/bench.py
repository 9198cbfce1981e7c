"""``gpuwrite bench``: floor, ceilings and every data path, side by side, on a real GPU."""
from __future__ import annotations

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import add_json_flag, console, print_json, table


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure the floor, the ceilings and each data path on "
                       "this GPU, and print ratios against the targets")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args) -> int:
    from gpuwrite.bench.suite import run_suite
    from gpuwrite.cudaenv import SIMULATOR, world

    if SIMULATOR:
        raise UsageError("bench needs a real GPU; this machine has none (NUMBA_ENABLE_CUDASIM=1)."
                         " Run `gpuwrite demo` here, and bench on a GPU machine")
    with console.status("benchmarking", spinner="dots") as status:
        out = run_suite(quick=args.quick,
                        progress=None if args.json else lambda m: status.update(m))
    out["world"] = world()
    if args.json:
        print_json(out)
        return 0
    console.print(f"[bold]gpuwrite bench[/bold] on {out['world']}")
    console.print(f"floor (doorbell ping-pong): {out['floor_pingpong_us']:.2f} us;  "
                  f"bulk GPU stores to host: {out['bulk_store_gbytes']:.1f} GB/s")
    rows = [[p, v["p50_us"], v["p99_us"], v["ratio_to_floor"], f"{v['delivered']}/{v['messages']}"]
            for p, v in out["latency_64B"].items()]
    console.print(table("64-byte latency, post to completion", ["path", "p50 us", "p99 us",
                        "x floor", "delivered"], rows))
    rows = [[d, out["floor_by_poll_delay_us"][d], out["gpu_push_64B_by_poll_delay_us"][d]]
            for d in out["floor_by_poll_delay_us"]]
    console.print(table("pause before the first poll (floor and gpu_push 64 B, p50)",
                        ["pause ns", "floor us", "gpu_push us"], rows))
    bd = out["latency_breakdown_ns"]
    console.print("gpu_push 64 B, step medians (ns): " +
                  ", ".join(f"{k} {v:.0f}" for k, v in bd.items()))
    rows = [[p, v["gbytes"], v["ratio_to_bulk_store"], ", ".join(f"{g:.1f}" for g in v["runs_gbytes"]),
             f"{v['wqe_bytes'] >> 10} KiB", f"{v['delivered']}/{v['messages']}"]
            for p, v in out["bandwidth_1MiB"].items()]
    console.print(table("1 MiB messages: bandwidth (median of the runs)",
                        ["path", "GB/s", "x bulk store", "runs GB/s", "bytes per WQE", "delivered"],
                        rows))
    rows = [[p, v["mpps"], f"{v['delivered']}/{v['messages']}"] for p, v in out["rate_64B"].items()]
    console.print(table("64-byte message rate", ["path", "M msg/s", "delivered"], rows))
    for k, ok in out["verdict"].items():
        console.print(f"target {k}: {'[green]met[/green]' if ok else '[red]missed[/red]'}")
    return 0
