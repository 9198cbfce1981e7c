"""Ctrl-C and SIGTERM to ``gpuwrite figures`` while its worker processes simulate: one line,
exit 130 or 143, no traceback, and no process of it left behind."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from childenv import child_env

import pytest


ROOT = Path(__file__).resolve().parents[2]
# Where the gpuwrite this test imported lives (site-packages under README's `pytest -P`,
# the checkout when the extension was built in place): child processes import the same one.
# Simulations that keep two workers busy for minutes: the signal always finds them running.
LONG_SPEC = """
[figure]
kind = "buffer_under_stall"

[[sweep]]
name = "long"
backend = "model"
measure = "simulate"

[sweep.fixed]
"workload.n_messages" = 5000000

[sweep.vary]
seed = [1, 2, 3, 4]
"""


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (read from /proc: no psutil needed)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_figures_interrupted_leaves_nothing_behind(tmp_path, signum, status):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "long.toml").write_text(LONG_SPEC)
    env = child_env(MPLBACKEND="Agg")
    proc = subprocess.Popen([sys.executable, "-m", "gpuwrite", "figures", "--specs", str(specs),
                             "--results", str(tmp_path / "results"), "--out", str(tmp_path / "figures"),
                             "--workers", "2"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        workers: set[int] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            if len(workers) >= 2:   # the pool (and its resource tracker) is up: simulating
                break
            time.sleep(0.2)
        assert proc.poll() is None and len(workers) >= 2, "figures never started its workers"
        # SIGINT soon, while the workers still import (past the moment of their spawn, when
        # gpuwrite itself ignores it); SIGTERM once they simulate
        time.sleep(0.3 if signum == signal.SIGINT else 1.0)
        workers |= _children(proc.pid)
        signalled = time.monotonic()
        if signum == signal.SIGINT:   # as a terminal's Ctrl-C: to the whole process group
            os.killpg(proc.pid, signum)
        else:                         # as kill(1): to gpuwrite alone
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
        # the workers are ended, not waited for (their simulations would run on for a minute)
        assert time.monotonic() - signalled < 15, "gpuwrite figures waited for its workers"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == status, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "interrupted" in line or "terminated" in line]
    assert len(lines) == 1, err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not [pid for pid in workers if _alive(pid)], "worker processes outlived gpuwrite figures"
