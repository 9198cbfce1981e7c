"""Which stored calibration file is the newest: by when it was measured, not by mtime.

A file's modification time is when it was checked out, not when it was measured: on a
fresh clone every file gets the time of the clone, in the order git writes them, so
"newest by mtime" picked a different file on another machine and figures drawn from it
changed between checkouts. The order here reads the files themselves.
"""
from __future__ import annotations

import tomllib
from pathlib import Path


def calibration_dir() -> Path:
    """The checkout's experiments/calibration/, where ``gpuwrite calibrate`` writes: beside
    this package where it runs from a checkout (an editable install, ``python -m`` in the
    checkout), else under the working directory, as the figures' experiment files are (a
    package installed with ``pip install .``, as README says, and run in the checkout: the
    folder beside it, in site-packages, does not exist, and Fig. 8 lost every calibration
    file's rows, Fig. 9 its physical line)."""
    beside = Path(__file__).resolve().parents[1] / "experiments" / "calibration"
    return beside if beside.is_dir() else Path.cwd() / "experiments" / "calibration"


def measured_at(path: Path) -> str:
    """When ``path`` was measured, as an ISO-8601 UTC string that sorts in time order:
    ``[device] measured_at_utc``, else its ``date`` at midnight, else ''."""
    device = tomllib.loads(Path(path).read_text()).get("device", {})
    return str(device.get("measured_at_utc") or (f"{device['date']}T00:00:00Z"
                                                 if device.get("date") else ""))


def newest_first(folder) -> list[Path]:
    """The ``*.toml`` files of ``folder``, the latest measurement first (ties: by name,
    the later name first)."""
    files = sorted(Path(folder).glob("*.toml"), key=lambda f: f.name, reverse=True)
    return sorted(files, key=measured_at, reverse=True)


def free_name(path: Path) -> Path:
    """``path``, or ``<stem>-b``, ``-c``... where a file of that name exists (a second
    calibration of one device on one day must not overwrite the first)."""
    path = Path(path)
    for suffix in [""] + [f"-{chr(c)}" for c in range(ord("b"), ord("z") + 1)]:
        candidate = path.with_name(f"{path.stem}{suffix}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(f"{path}: and every suffix -b to -z exist; pass --out")
