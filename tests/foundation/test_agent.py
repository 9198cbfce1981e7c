"""nic_pull's GPU-resident pull agent (gpuwrite.paths.pull_agent): every byte delivered,
and a named error completion, not a hang, when the agent is gone."""
import time

import pytest

from gpuwrite.cudaenv import SIMULATOR
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner
from gpuwrite.paths.pull_agent import PullAgent

gpu = pytest.mark.skipif(SIMULATOR, reason="the simulator runs one kernel at a time: the "
                         "agent cannot run beside the sender there")
# Odd lengths (a partial last word), a 4-byte-aligned but not 16-byte-aligned source after
# them, and more than one unrolled round of the agent's block.
PULL_TIMEOUT_S = 0.2
SIZES = [64, 3, 1000, 4096, 5, 65536, 17, 300000]


def _pull_with_agent_gone(agent_kwargs, launch):
    with Context() as ctx:
        agent = PullAgent(ctx, pull_timeout_s=PULL_TIMEOUT_S, **agent_kwargs).start(launch=launch)
        if launch:
            time.sleep(0.5)     # the agent's idle timeout passes: it has left
        # "copy_engine": the runner launches no agent of its own; the engine still sends
        # its pulls to the ring set above, which nothing serves.
        r = runner.run("nic_pull", [64, 256], n_qps=1, context=ctx, pull_agent="copy_engine",
                       timeout_s=10)
        report = agent.stop()
    return r, report


def _assert_pull_failed(r):
    assert r.delivered == 0
    (err,) = r.qp_errors.values()
    assert err["reason"] == "pull_failed", r.qp_errors
    # The error completion came when the pull timed out, not at the kernel's own timeout.
    assert PULL_TIMEOUT_S * 1e6 <= r.latency_p50_us < 2e6, r.latency_p50_us


def test_pulls_nobody_answers_fail_with_a_reason():
    """The engine points at a ring no agent serves (never launched): the pulls time out."""
    r, report = _pull_with_agent_gone({}, launch=False)
    _assert_pull_failed(r)
    assert report["engine_failed"] >= 1 and report["engine_answered"] == 0


@gpu
def test_agent_that_left_fails_pulls_with_a_reason():
    r, report = _pull_with_agent_gone({"idle_timeout_s": 0.01}, launch=True)
    _assert_pull_failed(r)
    assert report["exit"] == "left after its idle timeout"


@gpu
@pytest.mark.parametrize("threads", [32, 256])
def test_agent_delivers_every_byte(threads):
    r = runner.run("nic_pull", SIZES, n_qps=2, block_threads=threads)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == len(SIZES)
    agent = r.counters["pull_agent"]
    assert agent["exit"] == "stopped"
    wqes = sum(-(-n // 65536) for n in SIZES)     # the runner's 64 KiB chunks
    assert agent["pulls"] == agent["engine_answered"] == wqes
    assert agent["bytes"] == sum(SIZES) and agent["engine_failed"] == 0
    assert "pull agent" in r.emulation


@gpu
def test_copy_engine_stand_in_still_delivers():
    r = runner.run("nic_pull", SIZES, n_qps=2, pull_agent="copy_engine")
    assert r.delivered == r.messages and "copy-engine" in r.emulation
    assert "pull_agent" not in r.counters
