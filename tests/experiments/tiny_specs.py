"""Tiny copies of the real experiment files, for tests that must run in seconds."""
from pathlib import Path

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

# Each real file with its varied lists cut down, so a figure is made in about a second.
SHRINK = {
    "fig1_latency": {"model": {"size_bytes": [64, 4096, 65536], "topology": ["same_switch", "across_sockets"]}},
    "fig2_pcie_efficiency": {"model": {"size_bytes": [64, 256, 512, 1024]}},
    "fig3_buffer_stall": {"timeseries": {}, "buffer": {"network.vl_buffer_bytes": [16384, 262144]}},
    "fig4_throughput": {"model": {"size_bytes": [64, 4096, 1048576]},
                        "emulated": {"path": ["gpu_push"], "size_bytes": [64, 256]}},
    "fig5_latency_cdf": {"cdf": {"size_bytes": [64]}},
    "fig6_push_wins": {"latency": {"size_bytes": [64, 65536, 1048576]},
                       "throughput": {"size_bytes": [64, 65536, 1048576]},
                       "latency_after_doorbell": {"size_bytes": [64, 65536, 1048576]}},
}
# Sweeps left out of the tiny copies (a test of their own draws them).
DROP = {"fig6_push_wins": ("sensitivity",)}
SMALL_SIMULATIONS = {"workload.n_messages": 400, "samples": 50}


def write_tiny_spec(name: str, folder: Path) -> Path:
    """The real experiments/<name>.toml with shorter lists and smaller simulations."""
    data = tomllib.loads((EXPERIMENTS / f"{name}.toml").read_text())
    data["sweep"] = [sweep for sweep in data["sweep"] if sweep["name"] not in DROP.get(name, ())]
    for sweep in data["sweep"]:
        sweep.setdefault("vary", {}).update(SHRINK[name].get(sweep["name"], {}))
        if sweep.get("measure") == "simulate":
            fixed = sweep.setdefault("fixed", {})
            fixed["workload.n_messages"] = SMALL_SIMULATIONS["workload.n_messages"]
            if sweep.get("output") == "timeseries":
                fixed["samples"] = SMALL_SIMULATIONS["samples"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(tomli_w.dumps(data))
    return path
