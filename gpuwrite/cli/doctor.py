"""``gpuwrite doctor``: GPU-NIC paths, IOMMU, ACS, peer memory, and the path to expect to win."""
from __future__ import annotations

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import add_json_flag, console, parse_size, print_json, table

# The names doctor.diagnose gives the roots it refuses, and the options that set them.
ROOT_OPTIONS = {"sysfs root": "--sysfs-root", "proc root": "--proc-root"}


def register(sub) -> None:
    p = sub.add_parser("doctor", help="report the PCIe path, IOMMU, ACS and peer-memory support "
                       "of every GPU-NIC pair, and which data path the model predicts will win")
    p.add_argument("--sysfs-root", default="/sys", help="sysfs to read (default /sys; a fixture "
                   "tree works too)")
    p.add_argument("--proc-root", default="/proc", help="procfs to read (default /proc)")
    p.add_argument("-s", "--size", default="4096", help="message size the model ranks paths at "
                   "(bytes, or 4K, 64KiB; default 4096)")
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args) -> int:
    from gpuwrite import doctor
    from gpuwrite.model.errors import ParamError

    size = parse_size(args.size, "--size")
    for flag, value in (("--sysfs-root", args.sysfs_root), ("--proc-root", args.proc_root)):
        if not value.strip():   # the empty path is the working directory: never what was meant
            raise UsageError(f"{flag}={value!r} is not allowed; allowed: a directory (e.g. "
                             f"{'/sys' if flag == '--sysfs-root' else '/proc'})", value=value,
                             allowed="a directory")
    try:
        report = doctor.diagnose(args.sysfs_root, args.proc_root, size)
    except ParamError as exc:
        # diagnose checks the roots (a folder without devices/ is no sysfs tree): name the
        # option that gave the one it refused
        option = ROOT_OPTIONS.get(exc.name)
        if option is None:
            raise
        raise UsageError(f"{option}={exc.value!r} is not allowed (not a {exc.name} to read); allowed: "
                         f"{exc.allowed}", value=exc.value, allowed=exc.allowed) from None
    # ready: false is a result a script must be able to test: exit status 1
    status = 0 if report["ready"] else 1
    if args.json:
        print_json(report)
        return status
    console.print(f"[bold]gpuwrite doctor[/bold] ({report['sysfs_root']}, {report['proc_root']}); "
                  f"kernel {report['kernel'] or 'unknown'}")
    devices = [[d["bdf"], d["kind"], ",".join(d["rdma_devices"]) or "-", d["link"], d["numa_node"],
                d["iommu_type"] or "-"] for d in report["gpus"] + report["nics"]]
    if devices:
        console.print(table("devices", ["what", "kind", "rdma", "link", "numa", "iommu"], devices))
    for item in report["ignored"]:
        console.print(f"  ignored {item['bdf']}: {item['why']}")
    iommu, driver, reg = report["iommu"], report["nvidia_driver"], report["registration"]
    console.print(f"IOMMU: {iommu['mode']}" + (f" ({', '.join(iommu['units'])}; "
                  f"{' '.join(iommu['cmdline']) or 'no iommu= on the command line'})" if iommu["units"] else ""))
    if driver["loaded"]:
        console.print(f"NVIDIA driver {driver['version']} "
                      f"({'open' if driver['open_kernel_modules'] else 'proprietary'} kernel modules); "
                      f"PeerMappingOverride: {'yes' if driver['peer_mapping_override'] else 'no'}; "
                      f"nvidia_peermem: {'loaded' if driver['nvidia_peermem'] else 'not loaded'}")
    else:
        console.print("NVIDIA driver: not loaded")
    console.print(f"GPU memory registration for nic_pull: {reg['gpu_memory_registration'] or 'none'}"
                  + (f" (dma-buf: {'; '.join(reg['dmabuf_missing'])})" if reg["dmabuf_missing"] else ""))
    for note in reg["notes"]:
        console.print(f"  note: {note}")
    emu = report.get("emulated")
    if emu:
        console.print(f"emulated mode: this process may use {emu['ncpus']} CPU(s) ({emu['cpus']}); "
                      f"a default context busy-polls with {emu['default_workers']} engine worker "
                      f"and {emu['default_copy_helpers']} copy helper(s) on a GPU; gpuwrite bench's "
                      f"rate runs get {emu['bench_rate_workers']} workers, its bandwidth runs "
                      f"{emu['bench_bandwidth_workers']} (it leaves {emu['bench_host_cpus']} CPUs, "
                      "where there are enough, to the host thread and the driver)")
        console.print(f"compiled kernels are kept in: {emu['kernel_cache']}")
        for note in emu["notes"]:
            console.print(f"  note: {note}")
    if report["pairs"]:
        rows = []
        for p in report["pairs"]:
            redirect = {True: "redirects", False: "off", None: "unknown"}[p["acs_redirect"]]
            cls = p["class"] if p["effective_class"] == p["class"] else f"{p['class']} -> {p['effective_class']}"
            rows.append([p["gpu"], ",".join(p["rdma_devices"]) or p["nic"], cls, redirect,
                         p["model_winner"], f"{p['margin']:.2f}x {p['runner_up']}" if p["margin"] else "-",
                         p["best_runnable"] or "none"])
        console.print(table(f"GPU-NIC pairs (model ranking at {size} B)",
                            ["gpu", "nic", "class", "ACS", "model winner", "margin over", "best runnable"],
                            rows))
        for p in report["pairs"]:
            for note in p["notes"]:
                console.print(f"  {p['gpu']} - {p['nic']}: {note}")
            for entry in p["ranking"]:
                if not entry["runnable"]:
                    console.print(f"  {p['gpu']} - {p['nic']}: {entry['path']} cannot run: {entry['why_not']}")
    if report.get("nvidia_smi_topo"):
        console.print("nvidia-smi topo -m:")
        console.print(report["nvidia_smi_topo"], markup=False, highlight=False)
    console.print(f"[bold]verdict:[/bold] {report['verdict']}", highlight=False, soft_wrap=True)
    return status
