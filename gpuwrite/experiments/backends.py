"""What one resolved point computes: measured columns for the model or the emulated backend.

``compute(config)`` takes a configuration from ``spec.resolve`` and returns a DataFrame of
measured columns only (one row, or one row per sample or message). It runs in a worker
process for simulations, so it imports what it needs itself and depends on nothing else.
"""
from __future__ import annotations

import pandas as pd

SIMULATOR_DEVICE = "cudasim"
MODEL_DEVICE = "model"
# Keys of SimResult.summary that repeat the configuration (already configuration columns).
_SUMMARY_CONFIG_KEYS = ("path", "topology", "policy", "scheduler", "seed")


def device_name() -> str:
    """The GPU kernels run on here, or ``cudasim`` on Numba's CUDA simulator."""
    from gpuwrite.cudaenv import SIMULATOR, cuda

    if SIMULATOR:
        return SIMULATOR_DEVICE
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def compute(config: dict) -> pd.DataFrame:
    """Measured columns of one point."""
    if config["backend"] == "emulated":
        return _emulated(config)
    measure = config["measure"]
    if measure == "efficiency":
        return _efficiency(config)
    from gpuwrite.model import paths
    from gpuwrite.model.params import Params

    params = Params.from_dict(config["params"])
    if measure == "simulate":
        return _simulate(config, params)
    topology = params.build_topology()
    size = config["size_bytes"]
    if measure == "latency":
        timing = paths.path_timing(params.path, topology, size, params)
        return pd.DataFrame([{"latency_ns": timing.latency_ns,
                              **{f"{stage}_ns": timing.stage_ns(stage) for stage in paths.STAGES}}])
    name, busy_ns = paths.bottleneck(params.path, topology, size, params)
    return pd.DataFrame([{"throughput_gbps": size * 8.0 / busy_ns if busy_ns > 0 else 0.0,
                          "bottleneck": name, "bottleneck_busy_ns": busy_ns}])


def _efficiency(config: dict) -> pd.DataFrame:
    from gpuwrite.model import pcie

    link = pcie.LinkConfig(**config["link"])
    args = (link, config["operation"], config["size_bytes"], config["start_address"])
    wire = pcie.wire_bytes(*args)
    return pd.DataFrame([{
        "efficiency": pcie.efficiency(*args),
        "data_direction_bytes": wire.data_direction_bytes,
        "other_direction_bytes": wire.other_direction_bytes,
        "tlps": wire.tlp_count,
        "effective_rate_gbps": pcie.effective_rate_gbps(*args),
    }])


def _simulate(config: dict, params) -> pd.DataFrame:
    from gpuwrite.model.params import Workload
    from gpuwrite.model.sim import simulate

    result = simulate(params, Workload.from_dict(config["workload"]), config["seed"])
    if config["output"] == "timeseries":
        frame = result.timeseries(config["samples"])
        frame.insert(0, "sample", range(len(frame)))
        return frame
    summary = {k: (v.item() if hasattr(v, "item") else v) for k, v in result.summary.items()
               if k not in _SUMMARY_CONFIG_KEYS}
    return pd.DataFrame([summary])


def message_count(run: dict, simulator: bool) -> int:
    """Messages one emulated point sends: ``simulator_messages`` on the simulator; on a GPU
    ``messages``, or enough to move ``total_bytes`` if that is more, capped at ``max_messages``."""
    if simulator:
        return run["simulator_messages"]
    count = max(run["messages"], run["total_bytes"] // run["size_bytes"])
    return min(count, run["max_messages"])


def _failure_text(qp_errors: dict, agent: dict | None = None) -> str:
    """The QP errors of a run, grouped by what the kernel saw, and where the GPU pull
    agent ran, what it did (so a pull it left unanswered can be told from one it never
    saw); empty when nothing failed."""
    reasons: dict[str, int] = {}
    for error in qp_errors.values():
        if isinstance(error, dict):
            text = error["status"] + (f" ({error['syndrome']}, {error['reason']})" if error["syndrome"] else "")
            reasons[text] = reasons.get(text, 0) + 1
    text = "; ".join(f"{n} QP{'s' if n > 1 else ''}: {text}" for text, n in reasons.items())
    if text and agent:
        text += (f"; pull agent {agent['exit']}, {agent['pulls']} pulls answered, the engine "
                 f"saw {agent['engine_answered']} answered and failed {agent['engine_failed']}")
    return text


def _emulated(config: dict) -> pd.DataFrame:
    """One emulated run; on the simulator a tiny one whose only use is its byte checks."""
    from gpuwrite.cudaenv import SIMULATOR
    from gpuwrite.paths import runner

    run = config["run"]
    size = run["size_bytes"]
    count = message_count(run, SIMULATOR)
    # the simulator runs every block as Python threads: no more QPs than messages, one engine thread
    n_qps, workers = (min(run["n_qps"], count), 1) if SIMULATOR else (run["n_qps"], run["workers"])
    kwargs = dict(n_qps=n_qps, batch=run["batch"], policy=run["policy"], wait_each=run["wait_each"],
                  chunk_bytes=run["chunk_bytes"], stage_slot_bytes=run["stage_slot_bytes"],
                  block_threads=run["block_threads"] or None, workers=workers, seed=run["seed"])
    if run["warmup"] and not SIMULATOR:
        runner.run(run["path"], [size] * run["warmup"], **kwargs)
    result = runner.run(run["path"], [size] * count, **kwargs)
    summary = {
        "sent_messages": result.messages, "delivered_messages": result.delivered,
        "dropped_messages": result.dropped, "error_cqes": result.errors,
        "delivered_bytes": result.bytes, "latency_p50_us": result.latency_p50_us,
        "latency_p99_us": result.latency_p99_us, "throughput_gbps": result.throughput_gbps,
        "run_qps": n_qps, "world": result.world, "emulation": result.emulation,
        # why messages went undelivered, e.g. "3 QPs: timed out waiting for a completion"
        "failure": _failure_text(result.qp_errors, result.counters.get("pull_agent")),
        # the CPU of each engine thread, workers first; "" where the scheduler placed them
        "engine_cpus": ",".join(map(str, result.engine_cpus)),
    }
    if config["output"] == "latencies":
        latencies = result.latencies_ns
        frame = pd.DataFrame({"message": range(len(latencies)), "latency_ns": latencies})
        for key in ("sent_messages", "delivered_messages", "world"):
            frame[key] = summary[key]
        return frame
    return pd.DataFrame([summary])
