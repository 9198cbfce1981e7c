"""Helpers shared by the commands: JSON output and rich tables."""
from __future__ import annotations

import json
import math
import sys

from rich.console import Console
from rich.table import Table

console = Console(stderr=False)


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _clean(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value


def print_json(obj) -> None:
    json.dump(_clean(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")


def table(title: str, columns: list[str], rows: list[list]) -> Table:
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right" if c not in ("path", "what") else "left")
    for r in rows:
        t.add_row(*[f"{v:.2f}" if isinstance(v, float) else str(v) for v in r])
    return t


def print_path_results(results, mode: str) -> None:
    """The table of data-path results (``PathResult``), each path's emulation or testbed
    note, and every QP error, as ``demo`` and ``testbed`` print them."""
    rows = [[r.path, r.messages, r.delivered, r.dropped, r.errors, r.bytes, r.latency_p50_us,
             r.latency_p99_us, r.throughput_gbps] for r in results]
    console.print(table(f"data paths ({mode} mode)", ["path", "messages", "delivered", "dropped",
                        "errors", "bytes", "lat p50 us", "lat p99 us", "Gb/s"], rows))
    for r in results:
        console.print(f"  {r.path}: {r.emulation}")
        for qpn, e in r.qp_errors.items():
            console.print(f"  [red]{r.path} qp {qpn}: {e}[/red]")
