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
