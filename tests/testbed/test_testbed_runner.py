"""The testbed runner's pure parts, and its refusal to pretend on a machine without a NIC."""
import pytest

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
