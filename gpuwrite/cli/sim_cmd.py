"""``gpuwrite sim CONFIG``: run a simulation described by a TOML file.

The file holds ``seed``, a ``[params]`` table (as ``Params.to_toml`` writes it, sections
``[params.nic]`` and so on) and a ``[workload]`` table; see experiments/model/*.toml.
"""
from __future__ import annotations

import json
from pathlib import Path

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import _clean, check_not_input, print_json, provenance, write_rows
from gpuwrite.cli.sweep import check_dir
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import SimConfig


# One line on throughput_gbps against drained_gbps, printed with them (text and --json).
DRAINED_NOTE = ("throughput_gbps counts delivered bytes until they reach the remote NIC, drained_gbps until the "
                "receiver drained them: into a slow receiver a short run's throughput can pass its drain rate "
                "while its buffer fills; drained_gbps cannot")


def _beside(data: dict, key: str, extra: dict) -> dict:
    """``data`` with ``extra``'s items right after ``key`` (the JSON and the table keep that
    order)."""
    out = {}
    for name, value in data.items():
        out[name] = value
        if name == key:
            out.update(extra)
    return out


def load_config(args) -> SimConfig:
    from gpuwrite.model.checks import read_toml

    path = Path(args.config)
    if not str(args.config).strip() or not path.is_file():
        raise UsageError(f"CONFIG {args.config!r} is not allowed; allowed: an existing TOML file",
                         value=str(args.config), allowed="an existing TOML file")
    try:
        raw = read_toml(path, "CONFIG")     # a file that cannot be read is named too
    except ParamError as exc:
        raise UsageError(str(exc), value=exc.value, allowed=exc.allowed) from None
    try:
        data = SimConfig.from_dict(raw).to_dict()     # the model checks its own inputs
        if args.seed is not None:
            data["seed"] = args.seed
        if args.messages is not None:
            data["workload"]["n_messages"] = args.messages
        return SimConfig.from_dict(data)
    except ParamError as exc:
        raise UsageError(f"{args.config}: {exc}") from None


def cmd_sim(args) -> int:
    from gpuwrite.model.sim import simulate_config

    config = load_config(args)
    if args.out is not None:    # --out DIR gets DIR/config.toml: not the CONFIG it reads
        check_not_input(args.out, "--out", {"CONFIG": args.config}, written=Path(args.out) / "config.toml")
    out = check_dir(args.out, "--out") if args.out is not None else None
    try:
        if args.json:
            result = simulate_config(config)
        else:
            from rich.console import Console
            with Console(stderr=True).status(f"simulating {config.workload.n_messages:,} messages"):
                result = simulate_config(config)
        summary = result.summary
    except ParamError as exc:
        raise UsageError(f"{args.config}: {exc}") from None
    # beside throughput: what the receiver took, not the link
    data = _beside({key: (value.item() if hasattr(value, "item") else value) for key, value in summary.items()},
                   "throughput_gbps", {"drained_gbps": result.drained_gbps})
    data["provenance"] = provenance("sim", config.to_dict(), "model")
    if out is not None:
        result.messages.to_parquet(out / "messages.parquet")
        result.timeseries().to_parquet(out / "timeseries.parquet")
        (out / "summary.json").write_text(json.dumps(_clean(data), indent=2))   # NaN (none delivered): null
        write_rows([{k: v for k, v in data.items() if k != "provenance"}], out / "summary.parquet",
                   data["provenance"])
        (out / "config.toml").write_text(config.to_toml())
        data["out"] = str(out)
    if args.json:
        print_json(_beside(data, "drained_gbps", {"drained_note": DRAINED_NOTE}))   # on stdout only
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gpuwrite sim {args.config}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in data.items():
        if key == "provenance":
            continue
        table.add_row(key, f"{value:,.2f}" if isinstance(value, float) else str(value))
    Console().print(table)
    Console().print(DRAINED_NOTE, soft_wrap=True)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("sim", help="run a simulation from a TOML config", description=__doc__.splitlines()[0])
    parser.add_argument("config", metavar="CONFIG", help="TOML file: seed, [params], [workload]")
    parser.add_argument("--seed", type=int, help="override the config's seed")
    parser.add_argument("--messages", type=int, help="override workload.n_messages")
    parser.add_argument("--out", help="directory for messages.parquet, timeseries.parquet, "
                        "summary.json and summary.parquet (the summary, the latter with its "
                        "provenance), and config.toml (the configuration as run, overrides "
                        "included)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=cmd_sim)
