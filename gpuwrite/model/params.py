"""Model parameters as one validated, serialisable object (TOML), and workloads.

``Params`` gathers everything the model needs about the machine: which data path, which
topology (a preset name), the PCIe link configuration, the GPU, the NIC, the network link
with credits and the remote receiver. ``Workload`` says what traffic to run. Both load
from and dump to TOML; unknown keys and bad values are errors naming the value and what
is allowed. Each default names its source in the dataclass that holds it (pcie.py,
topology.py, nic.py); ``SOURCES`` lists them for display.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport (pyproject.toml)
    import tomli as tomllib

from gpuwrite.model import pcie
from gpuwrite.model import topology as topo
from gpuwrite.model import checks
from gpuwrite.model.errors import ParamError, check_choice, check_positive
from gpuwrite.model.nic import SOURCES as nic_sources
from gpuwrite.model.nic import GpuParams, NetworkParams, NicParams, ReceiverParams

PATHS = ("nic_pull", "host_staged", "gpu_push", "gpu_push_inline")


def _sources() -> dict[str, str]:
    """Where each parameter's default comes from, keyed as ``section.field``."""
    out = {
        "path": "model choice: the data path",
        "topology": "model choice: a preset (nvidia-smi PIX/PXB/PHB/SYS) or sysfs:<dir>",
        "gpu_name": "model choice: the topology's first GPU when empty",
        "nic_name": "model choice: the topology's first NIC when empty",
    }
    out.update({f"link.{name}": text for name, text in pcie.LINK_SOURCES.items()})
    out.update({f"platform.{name}": text for name, text in topo.PLATFORM_SOURCES.items()})
    out.update(nic_sources)
    return out


def _section_from_dict(cls, name: str, data: dict):
    if not isinstance(data, dict):
        raise ParamError(name, data, "a table of keys")
    allowed = {f.name for f in fields(cls) if not f.name.startswith("_")}
    for key in data:
        if key not in allowed:
            raise ParamError(f"{name}.{key}", data[key], "keys " + ", ".join(sorted(allowed)))
    try:
        return cls(**data)
    except ParamError as exc:
        if exc.name.startswith(f"{name}."):
            raise
        raise ParamError(f"{name}.{exc.name}", exc.value, exc.allowed) from None


def _section_to_dict(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj) if not f.name.startswith("_")}


@dataclass(frozen=True)
class Params:
    """Everything about the machine and the data path that the model needs."""

    path: str = "gpu_push"
    topology: str = "same_switch"
    gpu_name: str = ""          # endpoint names; empty: the topology's first GPU / NIC
    nic_name: str = ""
    link: pcie.LinkConfig = field(default_factory=pcie.LinkConfig)
    platform: topo.PlatformParams = field(default_factory=topo.PlatformParams)
    gpu: GpuParams = field(default_factory=GpuParams)
    nic: NicParams = field(default_factory=NicParams)
    network: NetworkParams = field(default_factory=NetworkParams)
    receiver: ReceiverParams = field(default_factory=ReceiverParams)

    def __post_init__(self):
        check_choice("path", self.path, PATHS)
        if not self.topology.startswith("sysfs:"):
            check_choice("topology", self.topology, (*topo.PRESETS, "sysfs:<directory>"))
        if self.nic.scheduler == "round_robin" and self.path not in ("gpu_push", "gpu_push_inline"):
            raise ParamError("nic.scheduler", self.nic.scheduler,
                             f"fifo on {self.path} (round_robin only on gpu_push and gpu_push_inline)")
        if self.nic.inline_max_bytes > self.network.mtu_bytes:
            # an inline WQE crosses PCIe as one write and leaves as one packet
            raise ParamError("nic.inline_max_bytes", self.nic.inline_max_bytes,
                             f"at most network.mtu_bytes ({self.network.mtu_bytes}): an inline message is one packet")
        if self.nic.scheduler == "round_robin" and self.nic.policy == "drop":
            # the naive NIC is one cut-through FIFO: it has no queue per QP to serve in turn
            raise ParamError("nic.scheduler", self.nic.scheduler,
                             "fifo with nic.policy drop (round_robin needs the hold buffer's per-QP queues)")

    _SECTIONS = {"link": pcie.LinkConfig, "platform": topo.PlatformParams, "gpu": GpuParams, "nic": NicParams,
                 "network": NetworkParams, "receiver": ReceiverParams}

    def build_topology(self) -> topo.Topology:
        """The preset topology with this link configuration and these platform latencies.

        ``topology = "sysfs:/sys/devices"`` reads this machine's tree instead (link speeds
        and widths from sysfs, the rest of ``link`` from here); name the endpoints with
        ``gpu_name`` and ``nic_name`` (PCI addresses) or the first GPU and NIC are used.
        """
        if self.topology.startswith("sysfs:"):
            from gpuwrite.model.sysfs import from_sysfs
            return from_sysfs(self.topology[len("sysfs:"):], default_link=self.link, platform=self.platform)
        return topo.preset(self.topology, self.link, self.platform)

    def endpoints(self, topology: topo.Topology) -> tuple[str, str]:
        """(gpu, nic) endpoint names in ``topology``."""
        gpu = self.gpu_name or topology.first("gpu")
        nic = self.nic_name or topology.first("nic")
        topology.node(gpu), topology.node(nic)
        return gpu, nic

    # --- serialisation -------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = _section_to_dict(value) if dataclasses.is_dataclass(value) else value
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Params":
        if not isinstance(data, dict):
            raise ParamError("params", data, "a table of keys")
        checks.check_params(data)
        allowed = {f.name for f in fields(cls)}
        kwargs = {}
        for key, value in data.items():
            if key not in allowed:
                raise ParamError(key, value, "keys " + ", ".join(sorted(allowed)))
            kwargs[key] = _section_from_dict(cls._SECTIONS[key], key, value) if key in cls._SECTIONS else value
        return cls(**kwargs)

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def flat(self) -> dict[str, object]:
        """Every parameter as ``section.field`` (or ``field``) -> value."""
        out = {}
        for key, value in self.to_dict().items():
            if isinstance(value, dict):
                out.update({f"{key}.{name}": item for name, item in value.items()})
            else:
                out[key] = value
        return out

    def sources(self) -> dict[str, str]:
        """Where each value comes from: the default's source (``SOURCES``)."""
        return {key: SOURCES.get(key, "(no source recorded)") for key in self.flat()}

    @classmethod
    def from_toml(cls, text_or_path: str | Path) -> "Params":
        return cls.from_dict(_load_toml(text_or_path))

    def updated(self, overrides: dict) -> "Params":
        """A copy with ``overrides`` (same shape as ``to_dict``) applied section by section."""
        if not isinstance(overrides, dict):
            raise ParamError("params", overrides, "a table of sections (gpu, link, nic, ...)")
        data = self.to_dict()
        for key, value in overrides.items():
            if key in self._SECTIONS and isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return Params.from_dict(data)

    def with_calibration(self, file: str | Path) -> "Params":
        """A copy overridden by a measured parameter file (TOML, same shape as ``to_dict``).

        This is how ``gpuwrite calibrate`` output becomes a "this machine" preset. A
        ``[params]`` table, if present, is used; otherwise the whole file. Its errors name
        it ``calibration``, the key an experiment file gives it under; a ``params`` that is
        not a table is named with the file.
        """
        data = checks.read_toml(file, "calibration")
        table = data.get("params", data)
        if not isinstance(table, dict):
            raise ParamError("calibration.params", table, f"a table of keys (in {file})")
        return self.updated(table)


def _load_toml(text_or_path: str | Path) -> dict:
    path = Path(text_or_path) if not isinstance(text_or_path, str) or "\n" not in text_or_path else None
    try:
        if path is not None and path.exists():
            return checks.read_toml(path, "config file")
        if path is not None and "=" not in str(text_or_path) and "[" not in str(text_or_path):
            raise ParamError("config file", str(text_or_path), "an existing TOML file")
        return tomllib.loads(str(text_or_path))
    except tomllib.TOMLDecodeError as exc:
        raise ParamError("TOML", str(text_or_path)[:60], f"valid TOML ({exc})") from None


SOURCES = _sources()

SIZE_KINDS = ("fixed", "choice", "uniform")
ARRIVALS = ("open", "closed")
PROCESSES = ("poisson", "periodic")


@dataclass(frozen=True)
class Workload:
    """Traffic to run: how many messages, their sizes, how they arrive, over how many QPs.

    Sizes: ``fixed`` (``size_bytes``), ``choice`` (``sizes_bytes`` with ``weights``), or
    ``uniform`` integers in [``min_bytes``, ``max_bytes``]. Arrivals: ``open`` (a
    ``poisson`` or ``periodic`` process with mean gap ``interval_ns``; QPs taken in turn,
    or drawn with ``qp_weights``)
    or ``closed`` (each QP keeps ``outstanding`` messages in flight; the first ones are
    issued ``issue_gap_ns`` apart).
    """

    n_messages: int = 10_000
    n_qps: int = 1
    size_kind: str = "fixed"
    size_bytes: int = 4096
    sizes_bytes: tuple = ()
    weights: tuple = ()
    min_bytes: int = 64
    max_bytes: int = 65536
    arrival: str = "closed"
    outstanding: int = 8
    issue_gap_ns: float = 10.0
    process: str = "poisson"
    interval_ns: float = 100.0
    samples: int = 1000          # points in the time series
    qp_weights: tuple = ()       # open loop: QP of each message drawn with these weights

    def __post_init__(self):
        for name in ("n_messages", "n_qps", "outstanding", "samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParamError(f"workload.{name}", value, "an integer >= 1")
        check_choice("workload.size_kind", self.size_kind, SIZE_KINDS)
        check_choice("workload.arrival", self.arrival, ARRIVALS)
        check_choice("workload.process", self.process, PROCESSES)
        check_positive("workload.issue_gap_ns", self.issue_gap_ns)
        check_positive("workload.interval_ns", self.interval_ns)
        object.__setattr__(self, "sizes_bytes", tuple(self.sizes_bytes))
        object.__setattr__(self, "weights", tuple(self.weights))
        object.__setattr__(self, "qp_weights", tuple(self.qp_weights))
        if self.qp_weights and (len(self.qp_weights) != self.n_qps or min(self.qp_weights) < 0
                                or sum(self.qp_weights) <= 0):
            raise ParamError("workload.qp_weights", self.qp_weights,
                             f"{self.n_qps} non-negative numbers (one per QP) with a positive sum")
        for name in ("size_bytes", "min_bytes", "max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ParamError(f"workload.{name}", value, "an integer >= 0")
        if self.size_kind == "choice":
            if not self.sizes_bytes or any(not isinstance(s, int) or s < 0 for s in self.sizes_bytes):
                raise ParamError("workload.sizes_bytes", self.sizes_bytes, "a non-empty list of integers >= 0")
            if self.weights and (len(self.weights) != len(self.sizes_bytes) or min(self.weights) < 0
                                 or sum(self.weights) <= 0):
                raise ParamError("workload.weights", self.weights,
                                 f"{len(self.sizes_bytes)} non-negative numbers with a positive sum")
        if self.size_kind == "uniform" and self.min_bytes > self.max_bytes:
            raise ParamError("workload.min_bytes", self.min_bytes, f"<= workload.max_bytes ({self.max_bytes})")
        # The simulator's upper bounds hold for a Workload built in code too, not only for
        # one read from a file (from_dict): 7e9 messages were accepted and allocated.
        checks.check_workload(self.to_dict())

    @property
    def largest_bytes(self) -> int:
        if self.size_kind == "fixed":
            return self.size_bytes
        if self.size_kind == "choice":
            return max(self.sizes_bytes)
        return self.max_bytes

    def to_dict(self) -> dict:
        out = _section_to_dict(self)
        out["sizes_bytes"] = list(self.sizes_bytes)
        out["weights"] = list(self.weights)
        out["qp_weights"] = list(self.qp_weights)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Workload":
        checks.check_workload(data)
        return _section_from_dict(cls, "workload", data)


@dataclass(frozen=True)
class SimConfig:
    """A simulation as stored in a TOML file: ``seed``, ``[params...]``, ``[workload]``."""

    params: Params = field(default_factory=Params)
    workload: Workload = field(default_factory=Workload)
    seed: int = 0

    def to_dict(self) -> dict:
        return {"seed": self.seed, "params": self.params.to_dict(), "workload": self.workload.to_dict()}

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> "SimConfig":
        allowed = ("seed", "params", "workload")
        for key in data:
            if key not in allowed:
                raise ParamError(key, data[key], "keys " + ", ".join(allowed))
        seed = data.get("seed", 0)
        checks.check_seed(seed)
        return cls(Params.from_dict(data.get("params", {})), Workload.from_dict(data.get("workload", {})), seed)

    @classmethod
    def from_toml(cls, text_or_path: str | Path) -> "SimConfig":
        return cls.from_dict(_load_toml(text_or_path))
