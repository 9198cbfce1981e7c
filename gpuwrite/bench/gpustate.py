"""The GPU's clocks and what held them back, read through NVML during a bench.

A bench's ratios divide one measurement by another taken in the same run, so a GPU that
slowed between them (a power or thermal cap, an application clock someone set) moves a
ratio without any change in gpuwrite. The bench records, at its start, before each sweep
repeat and at its end, the SM and memory clocks, the SM clock's maximum, the temperature,
the power draw and NVML's clock-event reasons (the bits saying why the clock is below its
maximum), so that a reader can tell a slow run on a held-back GPU from one on a free GPU.
Read through ``pynvml`` (NVIDIA's ``nvidia-ml-py``), where it is installed; elsewhere a
record is ``{"unavailable": why}``.
"""
from __future__ import annotations

# NVML's clock-event reason bits (nvml.h, nvmlClocksEventReason*): the names the record uses.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def reasons(mask: int) -> list[str]:
    """The names of the reason bits set in ``mask``; an unknown bit as its hex value."""
    out = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    rest = mask & ~sum(CLOCK_EVENT_REASONS)
    return out + ([hex(rest)] if rest else [])


def sample(index: int = 0, nvml=None) -> dict:
    """The state of GPU ``index``: ``{"sm_mhz", "sm_max_mhz", "mem_mhz", "temperature_c",
    "power_w", "clock_event_reasons"}``, or ``{"unavailable": why}`` where NVML cannot be
    read. ``nvml``: the module to read through (``pynvml`` by default; tests pass a fake)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return {"unavailable": "pynvml (nvidia-ml-py) is not installed"}
    try:
        nvml.nvmlInit()
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            # nvml.h renamed "throttle reasons" "clock event reasons" (CUDA 12.2); the
            # module may carry either name.
            get_mask = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            mask = int(get_mask(h))
            return {
                "sm_mhz": int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                "sm_max_mhz": int(nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)),
                "mem_mhz": int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                "temperature_c": int(nvml.nvmlDeviceGetTemperature(
                    h, nvml.NVML_TEMPERATURE_GPU)),
                "power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1e3,
                "clock_event_reasons": reasons(mask),
            }
        finally:
            nvml.nvmlShutdown()
    except Exception as e:          # NVMLError and its many subclasses, a missing library
        return {"unavailable": f"NVML: {e}"}


def held_back(state: dict | None) -> list[str]:
    """The reasons in ``state`` that lower the clock under load (idle and the display's are
    not: an idle GPU between kernels reports ``gpu_idle``)."""
    if not state or "clock_event_reasons" not in state:
        return []
    return [r for r in state["clock_event_reasons"]
            if r not in ("gpu_idle", "display_clock_setting")]
