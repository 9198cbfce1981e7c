"""The testbed runner's pure parts, and its refusal to pretend on a machine without a NIC."""

import pytest

from childenv import child_env

from gpuwrite.backends import availability
from gpuwrite.backends.testbed import EXIT_UNAVAILABLE, probe
from gpuwrite.backends.testbed import runner as tr
from gpuwrite.backends.testbed.bootstrap import TcpBootstrap
from gpuwrite.paths import workload


def test_staging_check_refuses_a_wqe_larger_than_three_quarters_of_the_ring():
    msgs = workload.build("gpu_push", [64, 4096, 1024], 1, 1).msgs
    tr.check_staging_fits(msgs, 24, 256, 65536)       # 4096 B + header: 17 slots of 256
    with pytest.raises(ValueError, match="needs 17 staging slots of 256 bytes; a ring of 21 "
                                         "lends one WQE at most 16"):
        tr.check_staging_fits(msgs, 21, 256, 65536)
    tr.check_staging_fits(msgs, 16, 256, 2048)        # chunks of 2 KiB (9 slots) fit


@pytest.mark.skipif(probe().ok, reason="this machine can run testbed mode")
def test_without_an_rdma_device_nothing_runs_and_the_reason_is_one_line():
    reason = availability()["testbed"]
    assert reason and "\n" not in reason
    with TcpBootstrap.listen("127.0.0.1", 0, timeout_s=1) as boot:
        with pytest.raises(tr.TestbedUnavailable) as info:
            tr.run("gpu_push", [64], boot)
    assert info.value.reason == reason
    assert EXIT_UNAVAILABLE == 3


@pytest.mark.skipif(probe().ok, reason="this machine can run testbed mode")
def test_cli_says_why_not_and_exits_3(capsys):
    import json

    from gpuwrite.cli import main

    assert main(["testbed"]) == EXIT_UNAVAILABLE
    out = capsys.readouterr().out
    assert out.startswith("gpuwrite testbed: not run: ") and out.count("\n") == 1
    assert main(["testbed", "--json"]) == EXIT_UNAVAILABLE
    assert json.loads(capsys.readouterr().out) == {"mode": "testbed", "ran": False,
                                                   "reason": availability()["testbed"]}
    assert main(["testbed", "--paths", "warp_drive"]) == 2


@pytest.mark.parametrize("argv,named", [
    (["--listen", "notaport"], "'notaport' is not HOST:PORT"),
    (["--batch", "0"], "--batch 0: allowed 1 to 256"),
    (["--qps", "0"], "--qps 0: allowed 1 to 1024"),
    (["--connect", "host:99999"], "port 99999 is not a TCP port (allowed 1 to 65535)"),
    (["--listen", "0.0.0.0:18515", "--connect", "a:1"], "--listen '0.0.0.0:18515' and --connect 'a:1': give one"),
    (["--selftest", "--connect", "a:1"], "--selftest runs on one host"),
])
def test_bad_testbed_input_is_a_usage_error_before_any_device_probe(argv, named, capsys, monkeypatch):
    import json

    from gpuwrite.backends import testbed
    from gpuwrite.cli import main

    monkeypatch.setattr(testbed, "probe", lambda *a, **k: pytest.fail("probed a device for bad input"))
    assert main(["testbed", *argv]) == 2
    captured = capsys.readouterr()
    assert named in captured.err and "Traceback" not in captured.err and captured.out == ""
    assert main(["testbed", *argv, "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert named in out["error"] and out["allowed"] and out["ran"] is False


@pytest.mark.skipif(probe(need_gpu=False).ok, reason="this machine has an mlx5 device")
def test_selftest_without_a_device_says_so_and_exits_3(capsys):
    """For real: pyverbs lists no device on this machine (or is missing); once in-process,
    once as a user runs it (a subprocess, JSON)."""
    import json
    import subprocess
    import sys

    from gpuwrite.cli import main

    assert main(["testbed", "--selftest"]) == EXIT_UNAVAILABLE
    out = capsys.readouterr().out
    assert out.startswith("gpuwrite testbed --selftest: not run: ") and out.count("\n") == 1
    # -P: the working directory (the checkout) must not shadow the gpuwrite this test
    # imported; PYTHONPATH names where that one lives.
    run = subprocess.run([sys.executable, "-P", "-m", "gpuwrite", "testbed", "--selftest", "--json"],
                         capture_output=True, text=True, timeout=120, env=child_env())
    assert run.returncode == EXIT_UNAVAILABLE and "Traceback" not in run.stderr
    out = json.loads(run.stdout)
    assert out["mode"] == "testbed-selftest" and out["ran"] is False
    assert out["reason"] == probe(need_gpu=False).reason
