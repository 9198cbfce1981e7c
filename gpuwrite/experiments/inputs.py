"""The calibration files a user names (``--calibration``, an experiment file's
``calibration``): read once and checked, with every error a ParamError naming the option
(or key) and the file. The library's ``Params.with_calibration`` applies any such file;
the commands take only one measured on a GPU that sets a parameter."""
from __future__ import annotations

from pathlib import Path

from gpuwrite.model import checks
from gpuwrite.model.errors import ParamError


def _refused(name: str, file, why: str, allowed: str, short: str) -> ParamError:
    """A ParamError naming the calibration file, why it is refused and what is allowed."""
    exc = ParamError(name, str(file), short)
    exc.args = (f"{name}={str(file)!r} is not allowed ({why}); allowed: {allowed}",)
    return exc


def calibration_table(file: str | Path, name: str = "calibration", *, allow_simulator: bool = False) -> dict:
    """The parameter table (``[params]``, else the whole file) of a calibration file, read
    once and checked: the one check of every command that applies one (``gpuwrite model
    --calibration``, an experiment file's ``[sweep.fixed] calibration``). Refused, as a
    ParamError naming ``name`` and the file: not a readable TOML file, a ``params`` that is
    not a table, a file that sets no parameter, a ``device`` that is not a table, and (unless
    ``allow_simulator``) a file ``gpuwrite calibrate --allow-simulator`` wrote, whose timings
    are Python's. ``Params.with_calibration`` (the library's) applies such a file as it is."""
    data = checks.read_toml(file, name)
    table = data.get("params", data)
    if not isinstance(table, dict):
        raise ParamError(f"{name}.params", table, f"a table of keys (in {file})")
    if not table:
        raise _refused(name, file, "it sets no parameter", "a file `gpuwrite calibrate` wrote on a GPU",
                       "a calibration file")
    device = data.get("device", {})
    if not isinstance(device, dict):
        raise _refused(name, file, f"device={device!r}", "a file `gpuwrite calibrate` wrote, whose [device] "
                       "is a table", "a calibration file")
    if device.get("simulator", False) and not allow_simulator:
        raise _refused(name, file, "it was measured on the CUDA simulator, so its timings are Python's",
                       "a file `gpuwrite calibrate` wrote on a GPU", "a calibration file measured on a GPU")
    return table
