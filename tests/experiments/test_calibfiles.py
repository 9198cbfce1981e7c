"""The newest calibration file is chosen by when it was measured, never by mtime."""
import os

from gpuwrite.calibfiles import free_name, newest_first


def _write(folder, name, device):
    path = folder / name
    path.write_text("[device]\n" + "".join(f'{k} = "{v}"\n' for k, v in device.items()))
    return path


def test_newest_measurement_wins_whatever_the_checkout_order(tmp_path):
    old = _write(tmp_path, "gpu-2026-11-23.toml", {"date": "2026-11-23"})
    new = _write(tmp_path, "gpu-2026-11-23-b.toml",
                 {"date": "2026-11-23", "measured_at_utc": "2026-11-23T16:47:17Z"})
    other = _write(tmp_path, "other-2026-11-21.toml", {"date": "2026-11-21"})
    # A clone writes files in any order: make the oldest measurement the newest file.
    for k, f in enumerate((new, old, other)):
        os.utime(f, (1000 + k, 1000 + k))
    assert newest_first(tmp_path) == [new, old, other]


def test_a_second_calibration_of_a_day_gets_a_free_name(tmp_path):
    first = tmp_path / "gpu-2026-11-23.toml"
    assert free_name(first) == first
    first.write_text("")
    (tmp_path / "gpu-2026-11-23-b.toml").write_text("")
    assert free_name(first).name == "gpu-2026-11-23-c.toml"


def test_calibration_without_a_date_sorts_last(tmp_path):
    undated = _write(tmp_path, "zzz.toml", {"name": "x"})
    dated = _write(tmp_path, "aaa.toml", {"date": "2020-01-01"})
    assert newest_first(tmp_path) == [dated, undated]
