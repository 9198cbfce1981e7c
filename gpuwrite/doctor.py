"""``gpuwrite doctor``: what this machine offers GPU-initiated writes, read from sysfs and procfs.

For every NVIDIA GPU and every RDMA NIC (a PCI device with an ``infiniband/`` entry) the
report gives the PCIe path between them (``same_switch``, ``across_switches``,
``across_root_ports``, ``across_sockets``, as ``nvidia-smi topo -m``'s PIX, PXB, PHB/NODE
and SYS), whether Access Control Services redirect peer-to-peer requests on that path,
the IOMMU mode of both devices, how GPU memory can be registered with the NIC (dma-buf,
nvidia_peermem), whether the NVIDIA driver lets the GPU map NIC registers
(``PeerMappingOverride``), and the data path the model predicts will win there, with the
best one this machine can actually run. Everything is read from files under a sysfs and a
procfs root, so the report can be made for a fixture tree as well as for ``/sys``.

Nothing here opens a device or needs privileges; what cannot be read is reported as
``unknown`` (PCI config space beyond 64 bytes, where ACS lives, needs root).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpuwrite.model import paths as model_paths
from gpuwrite.model import sysfs as model_sysfs
from gpuwrite.model import topology as topo
from gpuwrite.model.errors import ParamError

NVIDIA_VENDOR = 0x10DE
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")

# PCIe Base Spec rev 5.0 section 7.7.8: ACS Extended Capability, ID 0x000D; the
# capability register at +4 and the control register at +6 (16 bits each).
PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000D
ACS_CTRL_BITS = {
    "source_validation": 0x01, "translation_blocking": 0x02, "p2p_request_redirect": 0x04,
    "p2p_completion_redirect": 0x08, "upstream_forwarding": 0x10, "p2p_egress_control": 0x20,
    "direct_translated_p2p": 0x40,
}
# IOMMU default-domain types in /sys/kernel/iommu_groups/N/type (Linux
# Documentation/ABI/testing/sysfs-kernel-iommu_groups): "identity" passes DMA
# addresses through; "DMA" and "DMA-FQ" translate them.
IOMMU_TRANSLATING = ("DMA", "DMA-FQ")
# ibv_reg_dmabuf_mr (RDMA memory registration of a dma-buf) arrived in Linux 5.12.
DMABUF_MIN_KERNEL = (5, 12)
# CUDA exports dma-buf handles of GPU memory (cuMemGetHandleForAddressRange) from driver
# r515 on, with NVIDIA's open kernel modules only (NVIDIA GPUDirect RDMA documentation).
DMABUF_MIN_NVIDIA_DRIVER = 515

DEFAULT_SIZE_BYTES = 4096


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _hex(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


@dataclass
class PciDevice:
    """A GPU or NIC found in the PCI tree."""

    bdf: str
    kind: str                    # "gpu" or "nic"
    vendor: int
    device: int
    numa_node: int
    link: str                    # "Gen5 x16", or "unknown"
    rdma_devices: list[str] = field(default_factory=list)   # NICs: mlx5_0, ...
    iommu_group: str | None = None
    iommu_type: str | None = None
    path: str = ""               # the device's directory


def acs_control(config: bytes) -> int | None:
    """The ACS control register from a PCI config-space dump, or None if not there.

    Walks the extended capability list from 0x100 (each header: ID in bits 15:0, next
    offset in bits 31:20). A dump shorter than 0x104 bytes (unprivileged reads return 64
    bytes) has no extended space: None.
    """
    offset, seen = PCI_EXT_CAP_START, set()
    while PCI_EXT_CAP_START <= offset <= len(config) - 8 and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            return int.from_bytes(config[offset + 6:offset + 8], "little")
        offset = (header >> 20) & 0xFFC
    return None


def acs_state(device_dir: Path) -> dict:
    """ACS of one bridge: {"readable", "control", the named bits, "redirects"}."""
    try:
        config = (device_dir / "config").read_bytes()
    except OSError:
        config = b""
    if len(config) <= PCI_EXT_CAP_START:
        return {"bridge": device_dir.name, "readable": False, "redirects": None}
    control = acs_control(config)
    if control is None:
        return {"bridge": device_dir.name, "readable": True, "acs": False, "redirects": False}
    bits = {name: bool(control & bit) for name, bit in ACS_CTRL_BITS.items()}
    return {"bridge": device_dir.name, "readable": True, "acs": True, "control": control, **bits,
            "redirects": bits["p2p_request_redirect"] or bits["p2p_completion_redirect"]}


def _link(device_dir: Path) -> str:
    generation = model_sysfs.generation_of(_read(device_dir / "current_link_speed"))
    width = _read(device_dir / "current_link_width") or ""
    if generation is None or not width.isdigit():
        return "unknown"
    return f"Gen{generation} x{width}"


def _iommu_groups(sysfs_root: Path) -> dict[str, tuple[str, str | None]]:
    """BDF -> (group number, default-domain type) from /sys/kernel/iommu_groups."""
    out = {}
    groups = sysfs_root / "kernel" / "iommu_groups"
    if not groups.is_dir():
        return out
    for group in groups.iterdir():
        kind = _read(group / "type")
        devices = group / "devices"
        if devices.is_dir():
            for entry in devices.iterdir():
                out[entry.name] = (group.name, kind)
    return out


def scan_devices(sysfs_root: Path) -> tuple[list[PciDevice], list[dict]]:
    """NVIDIA GPUs and RDMA NICs under ``sysfs_root/devices``, and what was passed over."""
    devices_dir = sysfs_root / "devices"
    groups = _iommu_groups(sysfs_root)
    found, ignored = [], []
    if not devices_dir.is_dir():
        return found, ignored
    for host_bridge in sorted(devices_dir.glob("pci*")):
        for device_dir in sorted(p for p in host_bridge.rglob("*") if p.is_dir() and _BDF.match(p.name)):
            code = _hex(device_dir / "class") or 0
            base = code >> 16
            if base not in (0x02, 0x03):
                continue
            vendor = _hex(device_dir / "vendor") or 0
            rdma = sorted(p.name for p in (device_dir / "infiniband").glob("*")) \
                if (device_dir / "infiniband").is_dir() else []
            kind = "gpu" if base == 0x03 else "nic"
            if kind == "gpu" and vendor != NVIDIA_VENDOR:
                ignored.append({"bdf": device_dir.name, "why": f"display device of vendor 0x{vendor:04x}, "
                                "not an NVIDIA GPU"})
                continue
            if kind == "nic" and not rdma:
                ignored.append({"bdf": device_dir.name, "why": "network device without an RDMA "
                                "(infiniband/) entry"})
                continue
            group, group_type = groups.get(device_dir.name, (None, None))
            numa = _read(device_dir / "numa_node")
            found.append(PciDevice(
                bdf=device_dir.name, kind=kind, vendor=vendor, device=_hex(device_dir / "device") or 0,
                numa_node=int(numa) if numa and numa.lstrip("-").isdigit() else -1,
                link=_link(device_dir), rdma_devices=rdma, iommu_group=group, iommu_type=group_type,
                path=str(device_dir)))
    return found, ignored


def kernel_release(proc_root: Path) -> tuple[str | None, tuple[int, int] | None]:
    text = _read(proc_root / "sys" / "kernel" / "osrelease")
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return text, (int(match.group(1)), int(match.group(2))) if match else None


def nvidia_driver(sysfs_root: Path, proc_root: Path) -> dict:
    """The NVIDIA kernel driver: version, open or proprietary modules, the registry keys
    gpuwrite cares about, and whether nvidia_peermem is loaded."""
    version_text = _read(proc_root / "driver" / "nvidia" / "version")
    out = {"loaded": version_text is not None, "version": None, "open_kernel_modules": None,
           "peer_mapping_override": None, "nvidia_peermem": False}
    if version_text:
        match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+)\.(\d+)(?:\.(\d+))?", version_text)
        if match:
            out["version"] = ".".join(g for g in match.groups() if g is not None)
        out["open_kernel_modules"] = "Open Kernel Module" in version_text
        params = _read(proc_root / "driver" / "nvidia" / "params") or ""
        registry = re.search(r'^RegistryDwords:\s*"?([^"\n]*)"?', params, re.MULTILINE)
        dwords = registry.group(1) if registry else ""
        keys = dict(re.findall(r"(\w+)\s*=\s*(\w+)", dwords))
        value = keys.get("PeerMappingOverride")
        out["peer_mapping_override"] = value is not None and value.strip() not in ("0", "0x0")
        out["registry_dwords"] = dwords
    modules = _read(proc_root / "modules") or ""
    out["nvidia_peermem"] = (sysfs_root / "module" / "nvidia_peermem").is_dir() or \
        any(line.split(" ", 1)[0] == "nvidia_peermem" for line in modules.splitlines())
    return out


def iommu_summary(sysfs_root: Path, proc_root: Path, devices: list[PciDevice]) -> dict:
    units = sorted(p.name for p in (sysfs_root / "class" / "iommu").glob("*")) \
        if (sysfs_root / "class" / "iommu").is_dir() else []
    cmdline = _read(proc_root / "cmdline") or ""
    hints = [w for w in cmdline.split() if w.startswith(("iommu", "intel_iommu", "amd_iommu"))]
    types = sorted({d.iommu_type for d in devices if d.iommu_type})
    if not units:
        mode = "off"
    elif any(t in IOMMU_TRANSLATING for t in types):
        mode = "translation"
    elif types and all(t == "identity" for t in types):
        mode = "passthrough"
    else:
        mode = "unknown"
    return {"units": units, "mode": mode, "group_types": types, "cmdline": hints}


def _ancestors(device_dir: Path) -> list[Path]:
    """Bridges above a device, nearest first, up to (not including) the host bridge."""
    out, here = [], device_dir.parent
    while _BDF.match(here.name):
        out.append(here)
        here = here.parent
    return out


def path_bridges(gpu: PciDevice, nic: PciDevice) -> list[Path]:
    """The bridges peer-to-peer traffic between the two devices enters or leaves: every
    ancestor of either that is not a common ancestor of both."""
    a, b = _ancestors(Path(gpu.path)), _ancestors(Path(nic.path))
    common = set(a) & set(b)
    return [p for p in a if p not in common] + [p for p in b if p not in common]


def _registration(driver: dict, release: tuple[int, int] | None, iommu_mode: str) -> dict:
    """How GPU memory can be registered with the NIC (nic_pull's data segment)."""
    dmabuf, why = False, []
    if not driver["loaded"]:
        why.append("no NVIDIA driver loaded")
    else:
        major = int(driver["version"].split(".")[0]) if driver["version"] else 0
        if not driver["open_kernel_modules"]:
            why.append("the NVIDIA driver runs its proprietary kernel modules; dma-buf export "
                       "needs the open kernel modules")
        elif major < DMABUF_MIN_NVIDIA_DRIVER:
            why.append(f"NVIDIA driver {driver['version']} is older than r{DMABUF_MIN_NVIDIA_DRIVER}")
        if release is None:
            why.append("kernel release unknown")
        elif release < DMABUF_MIN_KERNEL:
            why.append(f"kernel {release[0]}.{release[1]} is older than 5.12 (ibv_reg_dmabuf_mr)")
        dmabuf = not why
    peermem = driver["nvidia_peermem"] and iommu_mode != "translation"
    notes = []
    if driver["nvidia_peermem"] and iommu_mode == "translation":
        notes.append("nvidia_peermem is loaded but the IOMMU translates DMA: peermem hands the NIC "
                     "untranslated GPU addresses; use dma-buf or boot with iommu=pt")
    return {"dmabuf": dmabuf, "dmabuf_missing": why, "nvidia_peermem": driver["nvidia_peermem"],
            "gpu_memory_registration": "dma-buf" if dmabuf else ("nvidia_peermem" if peermem else None),
            "notes": notes}


def _runnable(path: str, registration: dict, driver: dict) -> tuple[bool, str]:
    """Whether testbed mode can run ``path`` on this machine, and if not, why."""
    if path in ("gpu_push", "gpu_push_inline"):
        if not driver["loaded"]:
            return False, "no NVIDIA driver loaded"
        if not driver["peer_mapping_override"]:
            return False, ("the NVIDIA driver does not let the GPU map NIC registers: set "
                           "NVreg_RegistryDwords=\"PeerMappingOverride=1;\"")
        return True, ""
    if path == "nic_pull":
        if registration["gpu_memory_registration"] is None:
            return False, "GPU memory cannot be registered with the NIC (no dma-buf, no usable nvidia_peermem)"
        return True, ""
    return True, ""


def pair_report(topology: topo.Topology, gpu: PciDevice, nic: PciDevice, registration: dict,
                driver: dict, size_bytes: int) -> dict:
    path_class = topo.classify(topology, gpu.bdf, nic.bdf)
    acs = [acs_state(p) for p in path_bridges(gpu, nic)]
    redirect = True if any(a["redirects"] for a in acs) else \
        (None if any(a["redirects"] is None for a in acs) else False)
    effective = path_class
    notes = []
    if redirect and path_class in ("same_switch", "across_switches"):
        effective = "across_root_ports"
        notes.append("ACS redirects peer-to-peer requests up to the root complex on this path: "
                     "modelled as across_root_ports")
    if redirect is None:
        notes.append("ACS unknown: PCI config space beyond 64 bytes is readable by root only")
    if effective == path_class:
        ranked = model_paths.rank_paths(topology, size_bytes, gpu=gpu.bdf, nic=nic.bdf)
    else:
        ranked = model_paths.rank_paths(effective, size_bytes)
    for entry in ranked:
        ok, why = _runnable(entry["path"], registration, driver)
        entry["runnable"] = ok
        if not ok:
            entry["why_not"] = why
    winner = ranked[0]
    runnable = [e for e in ranked if e["runnable"]]
    best = runnable[0] if runnable else None
    margin = ranked[1]["latency_ns"] / winner["latency_ns"] if len(ranked) > 1 else None
    return {
        "gpu": gpu.bdf, "nic": nic.bdf, "rdma_devices": nic.rdma_devices,
        "class": path_class, "effective_class": effective,
        "same_numa_node": gpu.numa_node == nic.numa_node, "acs": acs, "acs_redirect": redirect,
        "iommu_types": sorted({t for t in (gpu.iommu_type, nic.iommu_type) if t}),
        "size_bytes": size_bytes, "ranking": ranked,
        "model_winner": winner["path"], "runner_up": ranked[1]["path"] if len(ranked) > 1 else None,
        "margin": margin, "best_runnable": best["path"] if best else None, "notes": notes,
    }


def _nvidia_smi_topo() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        proc = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _nic_label(nic: PciDevice) -> str:
    return f"{','.join(nic.rdma_devices)} ({nic.bdf})" if nic.rdma_devices else nic.bdf


def verdict(report: dict) -> str:
    """The one line that sums the report up."""
    gpus, nics, pairs = report["gpus"], report["nics"], report["pairs"]
    if not gpus and not nics:
        return ("no NVIDIA GPU and no RDMA NIC found: testbed mode cannot run here "
                "(emulated mode and the model can)")
    if not gpus:
        return (f"no NVIDIA GPU found ({len(nics)} RDMA NIC(s)): testbed mode needs a GPU; "
                "there is no GPU-NIC path to report")
    if not nics:
        return (f"no RDMA NIC found ({len(gpus)} GPU(s)): testbed mode needs an mlx5 NIC; "
                "emulated mode runs on this GPU")
    ranked = sorted(pairs, key=lambda p: next((e["latency_ns"] for e in p["ranking"] if e["runnable"]),
                                              float("inf")))
    best = ranked[0]
    winner = best["model_winner"]
    text = (f"best pair GPU {best['gpu']} - NIC {', '.join(best['rdma_devices']) or best['nic']} "
            f"({best['class']}"
            + (f", effectively {best['effective_class']}" if best["effective_class"] != best["class"] else "")
            + f"): the model predicts {winner}")
    if best["margin"]:
        text += f" ({best['margin']:.2f}x faster than {best['runner_up']} at {best['size_bytes']} B)"
    translating = [t for t in best["iommu_types"] if t in IOMMU_TRANSLATING]
    if translating:
        text += (f"; the IOMMU translates peer-to-peer DMA ({', '.join(translating)}; "
                 "iommu=pt avoids it)")
    if best["best_runnable"] is None:
        return text + "; none of the paths can run here yet"
    if best["best_runnable"] == winner:
        return text + "; it can run here"
    why = next(e.get("why_not", "") for e in best["ranking"] if e["path"] == winner)
    return text + f"; but {why}; best that runs here: {best['best_runnable']}"


def kernel_cache_state(simulator: bool | None = None) -> str:
    """Where compiled kernels are kept (``gpuwrite.kernel_cache``), and whether that folder
    can be written: where it cannot, every command compiles its kernels again, which
    gpuwrite otherwise does without a word."""
    import tempfile

    from gpuwrite import kernel_cache

    root = kernel_cache.cache_root()
    if (kernel_cache.SIMULATOR if simulator is None else simulator) or root is None:
        return kernel_cache.describe()
    # Probed where it is or would be made (its nearest existing folder): a diagnosis
    # leaves no folder behind.
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is not a folder")
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        return (f"{root} cannot be written ({exc.strerror or exc}): every command compiles its "
                f"kernels again (set {kernel_cache.ENV} to a folder that can be written)")
    return f"{root} (set {kernel_cache.ENV}=off to compile every time)"


def emulated_cpus(cpus: list[int] | None = None) -> dict:
    """What emulated mode's busy threads get here (``cpus``: this process's, by default).

    Each engine worker busy-polls its queues while a context runs, copy helpers spin for
    a while after each delivery, and the host thread spins in its wait for the GPU: where
    they outnumber the CPUs they share them, and the emulated timings include the sharing.
    On a GPU a default context runs one worker and ``default_copy_threads(1)`` helpers;
    ``gpuwrite bench`` runs its rate and bandwidth with more workers, leaving ``HOST_CPUS``
    to the host thread and the GPU driver."""
    from gpuwrite.bench import suite
    from gpuwrite.host.verbs import HOST_THREADS, _cpu_list, copy_threads_for, process_cpus

    cpus = sorted(cpus if cpus is not None else process_cpus())
    n = len(cpus)
    # host.verbs.default_copy_threads(1) on a GPU (it answers 0 on the simulator, whose
    # timings are Python's).
    helpers = copy_threads_for(n, 1)
    rate_workers = suite.engine_workers(14, n)
    out = {"cpus": _cpu_list(cpus), "ncpus": n, "default_workers": 1,
           "default_copy_helpers": helpers, "bench_rate_workers": rate_workers,
           "bench_bandwidth_workers": suite.engine_workers(12, n),
           "bench_host_cpus": suite.HOST_CPUS, "kernel_cache": kernel_cache_state(),
           "notes": []}
    if n < 1 + HOST_THREADS:
        out["notes"].append(
            f"{n} CPU(s): the engine's worker shares CPUs with the host's own threads (the one "
            "that waits for the GPU, the driver's); emulated latencies include the sharing "
            f"(give the process at least {1 + HOST_THREADS} CPUs)")
    if n < suite.HOST_CPUS + 2:
        out["notes"].append(
            f"{n} CPU(s): gpuwrite bench's rate and bandwidth runs get "
            f"{rate_workers} engine worker(s) here (12 on a 16-CPU host): "
            "their numbers are this machine's, not comparable with BENCHMARKS.md")
    return out


def diagnose(sysfs_root: str | Path = "/sys", proc_root: str | Path = "/proc",
             size_bytes: int = DEFAULT_SIZE_BYTES, nvidia_smi: bool | None = None) -> dict:
    """The whole report as a dict (what ``gpuwrite doctor --json`` prints).

    ``nvidia_smi`` runs ``nvidia-smi topo -m`` when present; by default only for the live
    ``/sys`` (a fixture tree is not this machine).
    """
    sysfs_root, proc_root = Path(sysfs_root), Path(proc_root)
    if not sysfs_root.is_dir():
        raise ParamError("sysfs root", str(sysfs_root), "a directory (a sysfs mount, e.g. /sys)")
    if not (sysfs_root / "devices").is_dir():   # any folder read as "no GPU and no NIC found"
        raise ParamError("sysfs root", str(sysfs_root), "a sysfs tree: a directory with devices/ (e.g. /sys)")
    if not proc_root.is_dir() or not any(proc_root.iterdir()):
        # nothing to read: the kernel, the driver and the IOMMU command line would all be guesses
        raise ParamError("proc root", str(proc_root), "a non-empty directory (a procfs mount, e.g. /proc)")
    devices, ignored = scan_devices(sysfs_root)
    gpus = [d for d in devices if d.kind == "gpu"]
    nics = [d for d in devices if d.kind == "nic"]
    release_text, release = kernel_release(proc_root)
    driver = nvidia_driver(sysfs_root, proc_root)
    iommu = iommu_summary(sysfs_root, proc_root, devices)
    registration = _registration(driver, release, iommu["mode"])
    pairs = []
    if gpus and nics:
        topology = model_sysfs.from_sysfs(sysfs_root / "devices")
        pairs = [pair_report(topology, g, n, registration, driver, size_bytes) for g in gpus for n in nics]
    report = {
        "sysfs_root": str(sysfs_root), "proc_root": str(proc_root),
        "kernel": release_text, "gpus": [asdict(g) for g in gpus], "nics": [asdict(n) for n in nics],
        "ignored": ignored, "iommu": iommu, "nvidia_driver": driver, "registration": registration,
        "pairs": pairs,
    }
    if nvidia_smi if nvidia_smi is not None else str(sysfs_root) == "/sys":
        report["nvidia_smi_topo"] = _nvidia_smi_topo()
    if str(proc_root) == "/proc":
        # Live only: a fixture tree's CPUs are not this process's.
        report["emulated"] = emulated_cpus()
    report["ready"] = bool(pairs) and any(p["best_runnable"] for p in pairs)
    report["verdict"] = verdict(report)
    return report
