"""``gpuwrite bench``'s account of a missed sweep point: which step took the time."""
from gpuwrite.bench import suite


def _splits(rows):
    return {(path, size, th): [{"engine": e, "gpu": g}] for path, size, th, e, g in rows}


def test_a_slow_pull_is_charged_to_its_read_not_to_the_gpu_side():
    """Session 14's H100 numbers: nic_pull 64 B took 10.06 us, 4.96 of them in the engine's
    turnaround (the agent's round trip inside it), against a bound of 3.27 us; gpu_push's
    turnaround was 0.19. Measured against its own least turnaround (the earlier account),
    the pull's engine share had not grown and the miss went to the GPU side; against the
    push's, the 4.77 us of the read are a step of their own."""
    splits = _splits([("gpu_push", 64, 32, 0.19, 4.3), ("gpu_push", 4096, 32, 0.64, 5.8),
                      ("nic_pull", 64, 32, 4.96, 5.10), ("nic_pull", 4096, 32, 4.79, 5.3)])
    fixed = suite.sweep_engine_fixed(splits)
    assert fixed == {("gpu_push", 32): 0.19, ("nic_pull", 32): 4.79}
    steps, ref = suite.sweep_steps("nic_pull", 32, splits[("nic_pull", 64, 32)][0], 3.27, fixed)
    assert steps["pull"] == 4.96 - 0.19 and ref["pull"] == 0.0
    assert steps["engine"] == ref["engine"] == 0.19
    lost = suite.lost_in(steps, ref)
    assert lost["step"] == "pull" and abs(lost["grew_by"] - 4.77) < 1e-9


def test_other_paths_keep_their_own_engine_share():
    splits = _splits([("gpu_push", 65536, 256, 3.47, 7.0), ("gpu_push", 64, 256, 0.19, 4.35),
                      ("host_staged", 64, 256, 0.20, 5.8)])
    fixed = suite.sweep_engine_fixed(splits)
    steps, ref = suite.sweep_steps("gpu_push", 256, splits[("gpu_push", 65536, 256)][0], 4.53,
                                   fixed)
    assert set(steps) == {"engine", "gpu"} and ref == {"engine": 0.19, "gpu": 4.53 - 0.19}
    assert suite.lost_in(steps, ref)["step"] == "engine"      # 3.28 us over its share
    # nic_pull swept without gpu_push: its own least turnaround, as before
    alone = _splits([("nic_pull", 64, 32, 4.96, 5.10)])
    steps, ref = suite.sweep_steps("nic_pull", 32, alone[("nic_pull", 64, 32)][0], 3.27,
                                   suite.sweep_engine_fixed(alone))
    assert set(steps) == {"engine", "gpu"} and ref["engine"] == 4.96
