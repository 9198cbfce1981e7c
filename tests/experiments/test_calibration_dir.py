"""The checkout's calibration files are found however gpuwrite is installed: README installs
it with ``pip install .`` and runs ``gpuwrite figures`` in the checkout, where the folder
beside the installed package (in site-packages) does not exist. Fig. 8 then lost every
calibration file's rows and Fig. 9 its physical line, and a rerun changed tracked figures."""
import subprocess
import sys
from pathlib import Path

from childenv import child_env

ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import gpuwrite.calibfiles as cf
from pathlib import Path
cf.__file__ = "/nonexistent/site-packages/gpuwrite/calibfiles.py"   # installed elsewhere
from gpuwrite.calibfiles import calibration_dir
from gpuwrite.experiments.figures import newest_calibration
from gpuwrite.model import validation
from gpuwrite.device import api
print(calibration_dir().resolve())
print(newest_calibration()["file"] if newest_calibration() else None)
print(api.newest_calibration())
print(validation.summary(validation.table()).split(" predictions")[0])
"""


def test_an_installed_package_run_in_the_checkout_finds_its_calibration_files():
    proc = subprocess.run([sys.executable, "-P", "-c", _PROBE], capture_output=True, text=True,
                          cwd=ROOT, env=child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder, fig9, newest, count = proc.stdout.strip().splitlines()
    stored = ROOT / "experiments" / "calibration"
    assert Path(folder) == stored.resolve()
    assert fig9 != "None" and newest != "None" and Path(newest).parent.resolve() == stored.resolve()
    made, total = (int(x) for x in count.split(" of "))
    assert total > 29          # pcie-bench's rows alone are 29: the calibration files' are there
