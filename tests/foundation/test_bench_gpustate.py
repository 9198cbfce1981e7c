"""The GPU state the bench records (``gpuwrite.bench.gpustate``): NVML's clocks and the
reasons they are held back, read through a fake NVML module here."""
import sys
import types

from gpuwrite.bench import gpustate


def _fake_nvml(mask, sm=1980, fail=None, event_api=True):
    calls = []
    m = types.SimpleNamespace(NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0)
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")

    def handle(i):
        if fail:
            raise RuntimeError(fail)
        return ("gpu", i)
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetClockInfo = lambda h, c: {1: sm, 2: 2619}[c]
    m.nvmlDeviceGetMaxClockInfo = lambda h, c: {1: 1980, 2: 2619}[c]
    m.nvmlDeviceGetTemperature = lambda h, t: 41
    m.nvmlDeviceGetPowerUsage = lambda h: 123_456
    if event_api:
        m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: mask
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x40 if event_api else mask
    return m, calls


def test_a_reading_names_the_clocks_and_each_reason_bit():
    nvml, calls = _fake_nvml(0x1 | 0x4 | 0x400)
    s = gpustate.sample(0, nvml)
    assert s == {"sm_mhz": 1980, "sm_max_mhz": 1980, "mem_mhz": 2619, "temperature_c": 41,
                 "power_w": 123.456,
                 "clock_event_reasons": ["gpu_idle", "sw_power_cap", "0x400"]}
    assert calls == ["init", "shutdown"]
    # Idle and the display's setting do not hold a loaded GPU back; the power cap does.
    assert gpustate.held_back(s) == ["sw_power_cap", "0x400"]
    assert gpustate.held_back(None) == [] and gpustate.held_back({"unavailable": "x"}) == []


def test_an_nvml_without_the_event_call_is_read_through_the_throttle_call():
    nvml, _ = _fake_nvml(0x20, event_api=False)
    assert gpustate.sample(0, nvml)["clock_event_reasons"] == ["sw_thermal_slowdown"]


def test_a_failing_or_missing_nvml_is_a_record_that_says_why(monkeypatch):
    nvml, calls = _fake_nvml(0, fail="GPU is lost")
    assert gpustate.sample(0, nvml) == {"unavailable": "NVML: GPU is lost"}
    assert calls == ["init", "shutdown"]            # shut down even when a read fails
    monkeypatch.setitem(sys.modules, "pynvml", None)        # import fails
    assert "not installed" in gpustate.sample()["unavailable"]


def test_the_bench_prints_the_clocks_range_and_what_held_them_back():
    from gpuwrite.cli.bench import _gpu_state
    nvml, _ = _fake_nvml(0)
    free = gpustate.sample(0, nvml)
    capped = gpustate.sample(0, _fake_nvml(0x4, sm=1755)[0])
    line = _gpu_state({"start": free, "sweep_repeats": [capped], "end": free})
    assert "3 readings" in line and "SM 1755 to 1980 MHz of 1980" in line
    assert line.endswith("held back by sw_power_cap")
    assert _gpu_state({"start": free, "sweep_repeats": [], "end": free}).endswith(
        "nothing held the clock back")
    # An idle reading's parked clock is left out of the range, and counted.
    parked = gpustate.sample(0, _fake_nvml(0x1, sm=345)[0])
    busy = gpustate.sample(0, _fake_nvml(0, sm=1980)[0])
    line = _gpu_state({"start": parked, "sweep_repeats": [busy], "end": busy})
    assert "end, 1 of them idle): SM 1980 to 1980 MHz of 1980" in line
    assert "SM 345 to 345 MHz when idle" in _gpu_state({"start": parked, "end": parked})
    assert _gpu_state({"start": {"unavailable": "NVML: no GPU"}, "end": None}) == \
        "GPU clocks: not recorded (NVML: no GPU)"
    assert _gpu_state(None) is None
