"""``gpuwrite doctor`` on sysfs/procfs fixture trees (tests/testbed/fixtures/, build.py)."""
import json
import struct
from pathlib import Path

import pytest

from gpuwrite import doctor
from gpuwrite.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def diagnose(name: str) -> dict:
    return doctor.diagnose(FIXTURES / name / "sys", FIXTURES / name / "proc")


# fixture -> (class, effective class, ACS redirect, best runnable path)
EXPECTED = {
    "same_switch": ("same_switch", "same_switch", False, "gpu_push"),
    "across_switches": ("across_switches", "across_switches", None, "host_staged"),
    "across_root_ports": ("across_root_ports", "across_root_ports", False, "host_staged"),
    "across_sockets": ("across_sockets", "across_sockets", False, "gpu_push"),
    "iommu_translation": ("same_switch", "across_root_ports", True, "gpu_push"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_topology_class_gets_its_verdict(name):
    path_class, effective, redirect, best = EXPECTED[name]
    report = diagnose(name)
    assert len(report["gpus"]) == 1 and len(report["nics"]) == 1
    (pair,) = report["pairs"]
    assert (pair["class"], pair["effective_class"], pair["acs_redirect"]) == (path_class, effective, redirect)
    assert pair["model_winner"] == "gpu_push" and pair["margin"] > 1
    assert pair["best_runnable"] == best
    assert report["ready"]
    verdict = report["verdict"]
    assert "\n" not in verdict and f"({path_class}" in verdict and "model predicts gpu_push" in verdict
    if best != "gpu_push":
        assert "PeerMappingOverride=1" in verdict and f"best that runs here: {best}" in verdict
    else:
        assert verdict.endswith("it can run here")


def test_same_switch_reads_iommu_driver_and_ignores_the_bmc_display():
    report = diagnose("same_switch")
    assert report["iommu"]["mode"] == "passthrough" and "iommu=pt" in report["iommu"]["cmdline"]
    driver = report["nvidia_driver"]
    assert (driver["version"], driver["open_kernel_modules"]) == ("550.54.15", True)
    assert driver["peer_mapping_override"] and driver["nvidia_peermem"]
    assert report["registration"]["gpu_memory_registration"] == "dma-buf"
    assert report["nics"][0]["rdma_devices"] == ["mlx5_0"]
    assert report["ignored"] == [{"bdf": "0000:00:1f.0", "why": "display device of vendor 0x1a03, "
                                  "not an NVIDIA GPU"}]
    (pair,) = report["pairs"]
    assert [a["bridge"] for a in pair["acs"]] == ["0000:02:00.0", "0000:02:01.0"]   # the downstream ports


def test_across_switches_without_root_says_acs_unknown_and_nic_pull_cannot_register():
    report = diagnose("across_switches")
    assert report["iommu"]["mode"] == "off"
    (pair,) = report["pairs"]
    assert any("readable by root only" in n for n in pair["notes"])
    pull = next(e for e in pair["ranking"] if e["path"] == "nic_pull")
    assert not pull["runnable"] and "cannot be registered" in pull["why_not"]
    assert "proprietary kernel modules" in report["registration"]["dmabuf_missing"][0]


def test_iommu_translation_redirects_p2p_and_disqualifies_peermem():
    report = diagnose("iommu_translation")
    assert report["iommu"]["mode"] == "translation" and report["iommu"]["group_types"] == ["DMA-FQ"]
    reg = report["registration"]
    assert reg["gpu_memory_registration"] is None and "untranslated" in reg["notes"][0]
    (pair,) = report["pairs"]
    assert all(a["p2p_request_redirect"] for a in pair["acs"])
    assert pair["runner_up"] == "host_staged"   # ranked as across_root_ports
    assert "IOMMU translates peer-to-peer DMA (DMA-FQ" in report["verdict"]


@pytest.mark.parametrize("name,start", [("no_gpu", "no NVIDIA GPU found (1 RDMA NIC(s))"),
                                        ("no_nic", "no RDMA NIC found (1 GPU(s))")])
def test_no_gpu_or_no_nic_is_said_plainly(name, start):
    report = diagnose(name)
    assert report["pairs"] == [] and not report["ready"]
    assert report["verdict"].startswith(start)


def test_nothing_at_all(tmp_path):
    (tmp_path / "devices").mkdir()
    report = doctor.diagnose(tmp_path, tmp_path)
    assert report["verdict"].startswith("no NVIDIA GPU and no RDMA NIC found")


def test_acs_capability_is_found_along_the_extended_list():
    config = bytearray(4096)
    config[0x100:0x104] = struct.pack("<I", 0x0001 | 1 << 16 | 0x148 << 20)   # AER, next 0x148
    config[0x148:0x14C] = struct.pack("<I", 0x000D | 1 << 16)                 # ACS, last
    config[0x14C:0x150] = struct.pack("<HH", 0x5F, 0x04)
    assert doctor.acs_control(bytes(config)) == 0x04
    assert doctor.acs_control(bytes(config[:64])) is None
    assert doctor.acs_control(bytes(4096)) is None


def test_cli_json_and_one_verdict_line(capsys):
    root = FIXTURES / "across_root_ports"
    assert main(["doctor", "--sysfs-root", str(root / "sys"), "--proc-root", str(root / "proc"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pairs"][0]["class"] == "across_root_ports" and "nvidia_smi_topo" not in report
    assert main(["doctor", "--sysfs-root", str(root / "sys"), "--proc-root", str(root / "proc")]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("verdict:")]
    assert len(lines) == 1 and lines[0] == f"verdict: {report['verdict']}"


def test_cli_bad_root_is_a_usage_error(tmp_path, capsys):
    assert main(["doctor", "--sysfs-root", str(tmp_path / "missing")]) == 2
    assert "sysfs root" in capsys.readouterr().err


def _this_machine() -> tuple[set, set]:
    """This machine's NVIDIA GPUs and RDMA NICs, found without doctor: PCI devices of
    class 0x03 (display) from vendor 0x10de, and of class 0x02 (network) with an
    infiniband/ entry."""
    gpus, nics = set(), set()
    for dev in Path("/sys/bus/pci/devices").glob("*"):
        try:
            base = int((dev / "class").read_text(), 16) >> 16
            vendor = int((dev / "vendor").read_text(), 16)
        except (OSError, ValueError):
            continue
        if base == 0x03 and vendor == 0x10DE:
            gpus.add(dev.name)
        elif base == 0x02 and (dev / "infiniband").is_dir():
            nics.add(dev.name)
    return gpus, nics


def test_runs_on_this_machine(capsys):
    """Whatever this machine has (on CI: no GPU, no RDMA NIC), doctor reports exactly
    that: the same GPUs and NICs as a direct look at sysfs, this kernel, one pair per
    GPU and NIC, and a verdict that follows from them."""
    status = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == (0 if report["ready"] else 1)     # doctor exits 1 when not ready
    gpus, nics = _this_machine()
    assert {g["bdf"] for g in report["gpus"]} == gpus
    assert {n["bdf"] for n in report["nics"]} == nics
    assert report["kernel"] == Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert report["nvidia_driver"]["loaded"] == Path("/proc/driver/nvidia/version").exists()
    assert len(report["pairs"]) == len(gpus) * len(nics)
    if not (gpus and nics):
        assert report["ready"] is False
    assert report["verdict"] == doctor.verdict(report)
    if not gpus:
        assert report["verdict"].startswith("no NVIDIA GPU")
    elif not nics:
        assert report["verdict"].startswith(f"no RDMA NIC found ({len(gpus)} GPU(s))")


def test_emulated_mode_says_what_the_engine_threads_get_here(monkeypatch):
    """The CPUs emulated mode's busy threads get: a default context's worker and copy
    helpers, the bench's workers, and a note where they must share CPUs."""
    from gpuwrite.host import verbs

    monkeypatch.setattr(verbs, "SIMULATOR", False)       # the copy helpers a GPU run gets
    for n in (1, 2, 3, 4, 8, 9, 16, 64):
        monkeypatch.setattr(verbs, "process_cpus", lambda n=n: list(range(n)))
        assert doctor.emulated_cpus(list(range(n)))["default_copy_helpers"] == \
            verbs.default_copy_threads(1)
    big = doctor.emulated_cpus(list(range(16)))
    assert (big["cpus"], big["ncpus"], big["default_workers"]) == ("0-15", 16, 1)
    assert big["default_copy_helpers"] == 12         # at most twelve; 16 - 1 - 2 would be 13
    assert doctor.emulated_cpus(list(range(9)))["default_copy_helpers"] == 6     # 9 - 1 - 2
    assert big["bench_rate_workers"] == big["bench_bandwidth_workers"] == 12
    assert big["notes"] == []
    small = doctor.emulated_cpus([0, 1])
    assert small["default_copy_helpers"] == 0 and small["bench_rate_workers"] == 1
    assert len(small["notes"]) == 2 and "at least 3 CPUs" in small["notes"][0]
    assert doctor.emulated_cpus([0, 1, 2, 5, 7, 8])["cpus"] == "0-2,5,7-8"
    assert doctor.emulated_cpus([0, 1, 2, 5, 7, 8])["bench_rate_workers"] == 2   # 6 CPUs less 4
    # a fixture tree is not this machine: no CPUs of its own to report
    assert "emulated" not in diagnose("same_switch")
