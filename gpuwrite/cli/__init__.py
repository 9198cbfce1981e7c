"""The ``gpuwrite`` command line: one sub-command per module in this package.

Each module named in ``COMMANDS`` defines ``register(subparsers)`` which adds its
parser and sets ``func`` to a callable taking the parsed arguments and returning an
exit code. Every command accepts ``--json``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("demo", "bench", "model_cmd", "sim_cmd", "sweep", "figures", "calibrate", "doctor",
            "testbed")


class UsageError(Exception):
    """Bad input from the user: the message names the value and what is allowed."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuwrite",
        description="Prototype and evaluate GPU-initiated DMA writes into RDMA NICs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"gpuwrite.cli.{name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"gpuwrite {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
