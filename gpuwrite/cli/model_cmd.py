"""``gpuwrite model``: single analytical answers from the model.

    gpuwrite model path    --path gpu_push --topology across_root_ports --size 4096
    gpuwrite model compare --sizes 64,4K,64K [--topology across_sockets]
    gpuwrite model pcie    --operation read --size 512 [--mps 256 --rcb 64 --start 32]
    gpuwrite model topology [--preset NAME | --sysfs /sys/devices]
    gpuwrite model params  [--config FILE] [--dump FILE]
    gpuwrite model buffer  --share 0.95 [--topology NAME] [--stall-period NS --stall-duration NS]
"""
from __future__ import annotations

import argparse

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import (check_not_input, check_number, check_result_path, check_writable, parse_size,
                                 parse_sizes, print_json, provenance, write_rows)
from gpuwrite.model import checks, paths, pcie, sysfs
from gpuwrite.model import topology as topo
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import PATHS, Params


# The link options of machine_options: (option, key of Params.link).
LINK_OPTIONS = (("gen", "generation"), ("width", "width"), ("mps", "mps_bytes"), ("mrrs", "mrrs_bytes"),
                ("rcb", "rcb_bytes"))


def _typed(value) -> str:
    """A number as it was most likely typed: 1e-300, 0.95, 1 (not 1.0), 100000."""
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def _option_error(exc: ParamError, options: dict) -> UsageError:
    """``exc`` (a ParamError naming a model parameter) as an error naming the option that
    set it: ``options`` maps a parameter's name to (option, value as typed, bytes or None
    where the value is a size read from text). A parameter no option set is left as the
    model named it (a --config file's value)."""
    if exc.name not in options:
        return UsageError(str(exc), value=exc.value, allowed=exc.allowed)
    option, typed, size = options[exc.name]
    shown = f" ({size:,} bytes)" if size is not None and str(size) != str(typed) else ""
    return UsageError(f"{option}={typed} is not allowed{shown}; allowed: {exc.allowed}", value=typed,
                      allowed=exc.allowed)


def _link_options(args, prefix: str) -> dict:
    """{model parameter: (option, value as typed, None)} of the link options given."""
    return {prefix + key: (f"--{option}", getattr(args, option), None) for option, key in LINK_OPTIONS
            if getattr(args, option, None) is not None}


def _param_files(args) -> tuple[dict | None, dict | None]:
    """The tables of ``--config`` and of ``--calibration`` (its ``[params]``), each file
    read once; None where the option is not given. A calibration file must hold
    measurements of a real GPU: an empty file, or one that ``gpuwrite calibrate
    --allow-simulator`` wrote (Python's timings), is refused."""
    from gpuwrite.experiments.inputs import calibration_table
    from gpuwrite.model.checks import read_toml

    config, calibration = getattr(args, "config", None), getattr(args, "calibration", None)
    if config is not None:      # "" too: an empty name is refused, not ignored
        config = read_toml(config, "--config")
    if calibration is not None:  # the checks every consumer of a calibration file makes
        calibration = calibration_table(calibration, "--calibration")
    return config, calibration


def _params(args, files: tuple[dict | None, dict | None] | None = None) -> Params:
    """The model's parameters: its defaults, the ``--config`` file, the ``--calibration``
    file over it (``files``: ``_param_files(args)``, read here when not given), then the
    options. The model checks the values; an error in a file names the option and the file."""
    try:
        config, calibration = files if files is not None else _param_files(args)
        params = Params()
        for option, table in (("--config", config), ("--calibration", calibration)):
            if table is None:
                continue
            try:
                params = Params.from_dict(table) if option == "--config" else params.updated(table)
            except ParamError as exc:
                raise UsageError(f"{option} {getattr(args, option[2:])}: {exc}", value=exc.value,
                                 allowed=exc.allowed) from None
        overrides = {}
        if getattr(args, "path", None):
            overrides["path"] = args.path
        if getattr(args, "topology", None) and args.topology != "all":
            overrides["topology"] = args.topology
        link = {key: getattr(args, option) for option, key in LINK_OPTIONS if getattr(args, option, None) is not None}
        if link:
            overrides["link"] = link
        return params.updated(overrides) if overrides else params
    except ParamError as exc:
        raise _option_error(exc, _link_options(args, "link.")) from None


def _emit(args, data, table) -> int:
    if args.json:
        print_json(data)    # strict JSON: a value the model cannot give (NaN, inf) is null
    else:
        from rich.console import Console
        Console().print(table)
    return 0


def _table(title, columns):
    from rich.table import Table
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def cmd_path(args) -> int:
    params = _params(args)
    size = parse_size(args.size, "--size")
    try:
        topology = params.build_topology()
        timing = paths.path_timing(params.path, topology, size, params)
        name, busy_ns = paths.bottleneck(params.path, topology, size, params)
        rate = paths.throughput_gbps(params.path, topology, size, params)
        wire = paths.pcie_bytes(params.path, topology, size, params)
    except ParamError as exc:
        raise _option_error(exc, {"size_bytes": ("--size", args.size, size)}) from None
    gpu, nic = params.endpoints(topology)
    data = {
        "path": params.path, "topology": params.topology, "size_bytes": size,
        "path_class": topo.classify(topology, gpu, nic),
        "latency_ns": timing.latency_ns, "throughput_gbps": rate, "bottleneck": name,
        "bottleneck_busy_ns_per_message": busy_ns, "pcie_bytes_per_message": wire,
        "steps": [{"step": s.name, "latency_ns": s.latency_ns, "stage": s.stage} for s in timing.steps],
    }
    table = _table(f"{params.path} on {params.topology}, {size} B: {timing.latency_ns:,.1f} ns, "
                   f"{rate:,.1f} Gb/s (bottleneck: {name})", ["step", "ns", "stage"])
    for step in timing.steps:
        table.add_row(step.name, f"{step.latency_ns:,.1f}", step.stage)
    return _emit(args, data, table)


def cmd_compare(args) -> int:
    params = _params(args)
    sizes = parse_sizes(args.sizes, "--sizes")
    check_result_path(args.out)
    check_not_input(args.out, "--out", {"--config": args.config, "--calibration": args.calibration})
    topologies = list(topo.PRESETS) if args.topology in (None, "all") else [args.topology]
    rows = []
    for topology_name in topologies:
        topology = topo.preset(topology_name, params.link, params.platform)
        for size in sizes:
            row = {"topology": topology_name, "size_bytes": size}
            for path in PATHS:
                if path == "gpu_push_inline" and size > params.nic.inline_max_bytes:
                    row[f"{path}_latency_ns"] = None
                    row[f"{path}_throughput_gbps"] = None
                    continue
                row[f"{path}_latency_ns"] = paths.latency_ns(path, topology, size, params)
                row[f"{path}_throughput_gbps"] = paths.throughput_gbps(path, topology, size, params)
            row["push_speedup_vs_pull"] = row["nic_pull_latency_ns"] / row["gpu_push_latency_ns"]
            rows.append(row)
    table = _table("zero-load latency ns / saturated Gb/s per path",
                   ["topology", "size", *PATHS, "pull/push latency"])
    for row in rows:
        cells = []
        for path in PATHS:
            latency = row[f"{path}_latency_ns"]
            cells.append("-" if latency is None else f"{latency:,.0f} / {row[f'{path}_throughput_gbps']:,.0f}")
        table.add_row(row["topology"], str(row["size_bytes"]), *cells, f"{row['push_speedup_vs_pull']:.2f}x")
    data = {"rows": rows}
    if args.out:
        prov = provenance("model compare", {"sizes": sizes, "topology": args.topology,
                                            "params": params.to_dict()}, "model")
        data["out"] = str(write_rows(rows, args.out, prov))
    return _emit(args, data, table)


def cmd_pcie(args) -> int:
    size = parse_size(args.size, "--size")
    try:
        link = pcie.LinkConfig(args.gen, args.width, args.mps, args.mrrs, args.rcb, args.address_bits,
                               args.ecrc, args.rcb_chunks)
        wire = pcie.wire_bytes(link, args.operation, size, args.start)
    except ParamError as exc:
        options = {**_link_options(args, ""), "address_bits": ("--address-bits", args.address_bits, None),
                   "start_address": ("--start", args.start, None), "size_bytes": ("--size", args.size, size)}
        raise _option_error(exc, options) from None
    data = {
        "link": link.to_dict(), "operation": args.operation, "size_bytes": size, "start_address": args.start,
        "data_direction_bytes": wire.data_direction_bytes, "other_direction_bytes": wire.other_direction_bytes,
        "tlps": wire.tlp_count,
        "completion_sizes": pcie.completion_sizes(link, size, args.start) if args.operation == "read" else [],
        "efficiency": pcie.efficiency(link, args.operation, size, args.start),
        "raw_rate_gbps": pcie.raw_rate_gbps(link.generation, link.width),
        "tlp_rate_gbps": pcie.tlp_rate_gbps(link),
        "effective_rate_gbps": pcie.effective_rate_gbps(link, args.operation, size, args.start),
    }
    table = _table(f"PCIe Gen{link.generation} x{link.width}: {args.operation} of {size} B", ["figure", "value"])
    for key in ("data_direction_bytes", "other_direction_bytes", "tlps", "efficiency", "raw_rate_gbps",
                "tlp_rate_gbps", "effective_rate_gbps"):
        value = data[key]
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    return _emit(args, data, table)


def cmd_topology(args) -> int:
    if args.sysfs is not None and not str(args.sysfs).strip():
        raise UsageError(f"--sysfs={args.sysfs!r} is not allowed; allowed: a sysfs devices directory, e.g. "
                         "/sys/devices", value=args.sysfs, allowed="a directory")
    try:
        topology = sysfs.from_sysfs(args.sysfs) if args.sysfs else topo.preset(args.preset or "same_switch")
    except ParamError as exc:
        raise UsageError(str(exc)) from None
    pairs = []
    for gpu, nic, path_class in sysfs.gpu_nic_classes(topology):
        route = topology.route(gpu, nic)
        link, rate = route.narrowest("write", 4096)
        pairs.append({"gpu": gpu, "nic": nic, "class": path_class, "hops": len(route.links),
                      "one_way_latency_ns": route.one_way_latency_ns,
                      "narrowest": link.label() if link else "p2p read cap", "narrowest_write_gbps": rate})
    table = _table(f"topology {topology.name}: GPU/NIC pairs", ["gpu", "nic", "class", "hops", "one-way ns", "narrowest"])
    for pair in pairs:
        table.add_row(pair["gpu"], pair["nic"], pair["class"], str(pair["hops"]),
                      f"{pair['one_way_latency_ns']:,.0f}", pair["narrowest"])
    return _emit(args, {"topology": topology.name, "pairs": pairs}, table)


def cmd_params(args) -> int:
    """Every parameter, its value and its source; ``--dump`` writes them all as TOML."""
    files = _param_files(args)
    params = _params(args, files)
    sources = params.sources()
    # in the order _params applies them: a key both files set has the calibration's value
    for what, file, table in (("config", args.config, files[0]), ("calibration", args.calibration, files[1])):
        for key in _flat_keys(table or {}):
            sources[key] = f"{what} file {file}"
    for option, key in LINK_OPTIONS:    # applied last, over both files
        if getattr(args, option) is not None:
            sources[f"link.{key}"] = f"command line --{option}"
    rows = [{"parameter": key, "value": value, "source": sources[key]} for key, value in params.flat().items()]
    if args.dump is not None and not args.dump.strip():
        raise UsageError(f"--dump={args.dump!r} is not allowed; allowed: a file path this user can write",
                         value=args.dump, allowed="a writable path")
    if args.dump and not args.dump.strip().lower().endswith(".toml"):
        # the file is TOML whatever its name (as calibrate --out says): x.json would be read as JSON
        raise UsageError(f"--dump={args.dump!r} is not allowed; allowed: a file ending in .toml (the dump is "
                         "TOML, which --config reads)", value=args.dump, allowed="a path ending in .toml")
    if args.dump:
        check_not_input(args.dump, "--dump", {"--config": args.config, "--calibration": args.calibration})
        check_writable(args.dump, "--dump").write_text(params.to_toml())
    table = _table("model parameters" + (f" (written to {args.dump})" if args.dump else ""),
                   ["parameter", "value", "source"])
    table.columns[2].justify = "left"
    for row in rows:
        table.add_row(row["parameter"], str(row["value"]), row["source"])
    return _emit(args, {"parameters": rows, "dump": args.dump}, table)


def cmd_buffer(args) -> int:
    """The hold buffer gpu_push needs for a share of line rate, per topology (closed form)."""
    from gpuwrite.model import buffer

    params = _params(args)
    # finite was not enough: --poll-interval 1e30 answered with a 4.7e31-byte buffer
    for flag, value in (("--stall-period", args.stall_period), ("--stall-duration", args.stall_duration),
                        ("--poll-interval", args.poll_interval)):
        if value is not None:
            check_number(flag, value, 0.0, checks.MAX_TIME_NS, checks.TIME_NS_ALLOWED)
    overrides = {}
    # only what is given: the other of the two stays as --config set it
    receiver = {key: value for key, value in (("stall_period_ns", args.stall_period),
                                              ("stall_duration_ns", args.stall_duration)) if value is not None}
    if receiver:
        overrides["receiver"] = receiver
    if args.poll_interval is not None:
        overrides["gpu"] = {"poll_interval_ns": args.poll_interval}
    size = parse_size(args.size, "--size")
    topologies = list(topo.PRESETS) if args.topology in (None, "all") else [args.topology]
    rows = []
    try:
        params = params.updated(overrides) if overrides else params
        _check_stalls(args, params)
        if args.check:
            _check_simulated_messages(args, params, topologies, size)
        for name in topologies:
            result = buffer.need(params.updated({"topology": name}), args.share, size)
            row = {"topology": name, "size_bytes": size, "share": args.share,
                   "target_gbps": result.target_gbps, "buffer_bytes": result.buffer_bytes,
                   "staging_loop_ns": result.staging_loop_ns, "credit_loop_ns": result.credit_loop_ns,
                   "stall_ns": result.stall_ns, "loop_bytes": result.loop_bytes,
                   "stall_backlog_bytes": result.stall_backlog_bytes, "feasible": result.feasible,
                   "limit": result.limit, "max_gbps": result.max_gbps}
            if args.check and result.feasible:
                row["simulated_longest_gpu_wait_ns"] = buffer.longest_gpu_wait_ns(
                    params.updated({"topology": name}), result.buffer_bytes, args.share, size)
            rows.append(row)
    except ParamError as exc:
        raise _buffer_error(args, exc, size) from None
    title = (f"hold buffer for {args.share:.0%} of line rate, {size} B messages: "
             "B = X*L0 + max(0, X*(D + Lc) - V)")
    columns = ["topology", "buffer", "X Gb/s", "L0 ns", "Lc ns", "X*L0", "stall backlog", "feasible"]
    if args.check:
        columns.append("sim: longest GPU wait ns")
    table = _table(title, columns)
    for row in rows:
        cells = [row["topology"], f"{row['buffer_bytes']:,}", f"{row['target_gbps']:.1f}",
                 f"{row['staging_loop_ns']:,.0f}", f"{row['credit_loop_ns']:,.0f}", f"{row['loop_bytes']:,.0f}",
                 f"{row['stall_backlog_bytes']:,.0f}",
                 "yes" if row["feasible"] else f"no: {row['limit']} <= {_gbps(row['max_gbps'])} Gb/s"]
        if args.check:
            cells.append(f"{row.get('simulated_longest_gpu_wait_ns', float('nan')):,.0f}")
        table.add_row(*cells)
    return _emit(args, {"rows": rows}, table)


def _gbps(value: float) -> str:
    """A rate for a table cell: whole Gb/s, or three significant digits below 10 (a loop of
    days, near the time options' bound, allows some 1e-11 Gb/s, which "0" would hide)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.3g}"


def _check_stalls(args, params: Params) -> None:
    """A stall given on the command line has a period and a duration: with either zero the
    model has no stall at all, which is not what was asked for."""
    period, duration = params.receiver.stall_period_ns, params.receiver.stall_duration_ns
    for flag, given, other, missing in (("--stall-duration", args.stall_duration, "--stall-period", period),
                                        ("--stall-period", args.stall_period, "--stall-duration", duration)):
        if given and not missing:
            raise UsageError(f"{flag}={given:g} is not allowed without {other} (the receiver would never "
                             f"stall); allowed: {flag} with {other} > 0 (or a --config that sets it), or "
                             f"{flag} 0 for no stalls", value=given, allowed=f"with {other}")


def _buffer_error(args, exc: ParamError, size: int) -> UsageError:
    """A ParamError of ``model buffer`` named by the options it came from: --share and
    --size, and where --check's simulation refuses a value derived from them (the interval
    between offered messages, the packets to simulate), both, with the model's reason."""
    share, size_text = ("--share", _typed(args.share)), ("--size", args.size)
    derived = {"workload.interval_ns": (share, size_text, "a larger --share or a smaller --size"),
               "workload": (size_text, share, "a smaller --size or --share")}
    if exc.name in derived:
        (option, typed), (other, other_typed), fix = derived[exc.name]
        allowed = f"{fix}, so that {exc.name} is {exc.allowed}"
        return UsageError(f"{option}={typed} with {other}={other_typed} is not allowed (--check would simulate "
                          f"{exc.name}={exc.value!r}); allowed: {allowed}", value=typed, allowed=allowed)
    options = {"share": (share[0], share[1], None), "size_bytes": ("--size", args.size, size)}
    if args.check and exc.name not in options:    # another value --check's simulation derives
        given = " ".join(f"{flag}={_typed(value)}" for flag, value in (
            ("--share", args.share), ("--size", args.size), ("--stall-period", args.stall_period),
            ("--stall-duration", args.stall_duration), ("--poll-interval", args.poll_interval))
            if value is not None)
        return UsageError(f"--check with {given} is not allowed (it would simulate {exc.name}={exc.value!r}); "
                          f"allowed: {exc.allowed}", value=exc.value, allowed=exc.allowed)
    return _option_error(exc, options)


def _check_simulated_messages(args, params: Params, topologies: list[str], size: int) -> None:
    """--check simulates six stall periods at the share of line rate: within the simulator's
    bound on messages, before any simulation starts."""
    from gpuwrite.model import buffer, checks

    buffer.need(params, args.share, size)     # the share's own check first
    for name in topologies:
        try:
            buffer.gpu_wait_workload(params.updated({"topology": name}), args.share, size)
        except ParamError as exc:
            if exc.name != "workload.n_messages":
                raise
            period = params.receiver.stall_period_ns
            raise UsageError(f"--check with a stall period of {period:g} ns and --share={args.share:g} is not "
                             f"allowed ({exc.value:,} messages to simulate on {name}); allowed: at most "
                             f"{checks.MAX_MESSAGES:,} messages (six stall periods at that share of line rate): "
                             "a shorter --stall-period or a smaller --share", value=period,
                             allowed=f"at most {checks.MAX_MESSAGES:,} simulated messages") from None


def _flat_keys(data: dict) -> list[str]:
    keys = []
    for key, value in data.items():
        if isinstance(value, dict):
            keys += [f"{key}.{name}" for name in value]
        else:
            keys.append(key)
    return keys


def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="analytical answers: path latency/bandwidth, PCIe efficiency",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    sub = parser.add_subparsers(dest="model_command", metavar="QUESTION")
    sub.required = True

    def leaf(name, help_text, func):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
        p.set_defaults(func=func)
        return p

    def machine_options(p):
        p.add_argument("--config", help="parameter file (TOML, as Params.to_toml writes)")
        p.add_argument("--calibration", help="measured parameter file applied on top")
        p.add_argument("--gen", type=int, help="PCIe generation of every link")
        p.add_argument("--width", type=int, help="PCIe link width")
        p.add_argument("--mps", type=int, help="max payload size, bytes")
        p.add_argument("--mrrs", type=int, help="max read request size, bytes")
        p.add_argument("--rcb", type=int, help="read completion boundary, bytes")

    p = leaf("path", "latency and bandwidth of one path on one topology at one size", cmd_path)
    p.add_argument("--path", choices=PATHS, default=None, help="data path (default gpu_push)")
    p.add_argument("--topology", choices=tuple(topo.PRESETS), default=None)
    p.add_argument("--size", default="4096", help="message size (bytes, or 4K, 1MiB)")
    machine_options(p)

    p = leaf("compare", "every path on every topology at several sizes", cmd_compare)
    p.add_argument("--topology", choices=(*topo.PRESETS, "all"), default="all")
    p.add_argument("--sizes", default="64,256,4K,64K", help="comma-separated sizes")
    p.add_argument("--out", help="also write the rows as a table (.parquet or .csv), with how they were made")
    machine_options(p)

    p = leaf("pcie", "bytes on the wire and efficiency of one PCIe read or write", cmd_pcie)
    p.add_argument("--operation", choices=pcie.OPERATIONS, default="read")
    p.add_argument("--size", default="512")
    p.add_argument("--start", type=int, default=0, help="start address (alignment matters)")
    p.add_argument("--gen", type=int, default=5)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--mps", type=int, default=256)
    p.add_argument("--mrrs", type=int, default=512)
    p.add_argument("--rcb", type=int, default=64)
    p.add_argument("--address-bits", type=int, default=64)
    p.add_argument("--ecrc", action="store_true")
    p.add_argument("--rcb-chunks", action="store_true", help="completer splits at every RCB")

    p = leaf("params", "every parameter with its value and its source; --dump writes a complete file",
             cmd_params)
    machine_options(p)
    p.add_argument("--dump", help="write every parameter as TOML (a file --config accepts)")

    p = leaf("buffer", "hold buffer gpu_push needs for a share of line rate (closed form; --check simulates)",
             cmd_buffer)
    p.add_argument("--share", type=float, default=0.95, help="share of line rate to sustain, in (0, 1]")
    p.add_argument("--topology", choices=(*topo.PRESETS, "all"), default="all")
    p.add_argument("--size", default="4096", help="message size")
    most = f"0 to {checks.MAX_TIME_NS:.2g}: the simulator's clock"     # cmd_buffer checks it
    p.add_argument("--stall-period", type=float, help=f"receiver stall period, ns ({most})")
    p.add_argument("--stall-duration", type=float, help=f"receiver stall duration, ns ({most})")
    p.add_argument("--poll-interval", type=float, help=f"GPU poll interval of the staging credits, ns ({most})")
    p.add_argument("--check", action="store_true", help="simulate the GPU offering that share with that buffer")
    machine_options(p)

    p = leaf("topology", "GPU/NIC path classes of a preset or of this machine's sysfs", cmd_topology)
    source = p.add_mutually_exclusive_group()   # one topology: a preset or this machine's
    source.add_argument("--preset", choices=tuple(topo.PRESETS), help="a preset topology (default same_switch)")
    source.add_argument("--sysfs", help="sysfs devices directory, e.g. /sys/devices")
