"""A stalled receiver: `hold` loses nothing and resumes; `drop` counts exactly what it drops."""
import threading
import time

import numpy as np

from gwtest import small
from gpuwrite.host.verbs import Context, LinkConfig
from gpuwrite.paths import runner

# A slow link with a small receiver buffer: 1 Gb/s, 16 credit blocks (1 KiB), 512-byte MTU.
LINK = LinkConfig(rate_gbps=1.0, mtu_bytes=512, rx_credits=16, credit_latency_ns=2000)


def _resume_once_stalled(ctx, held_s=0.05):
    """A thread that lets the stalled receiver drain again once the engine has felt the
    stall (a credit stall), ``held_s`` later, or once ``done`` is set (the run returned
    without one: the test then fails on its counters): a fixed stall of 0.3 s from the
    kernel's start could end before the simulated kernel, slow on a loaded machine, pushed
    enough to feel it (the test failed so on a 2-core machine under a load of 7), and a
    fixed patience could end before a kernel compiled under load sent its first message
    (the GPU suite failed the test with 14 workers; alone it passed). Returns the thread
    and ``done``."""
    done = threading.Event()

    def resume():
        while ctx.counters()["credit_stalls"] == 0 and not done.wait(0.002):
            pass
        time.sleep(held_s)
        ctx.stall_receiver(False)

    thread = threading.Thread(target=resume, daemon=True)
    thread.start()
    return thread, done


def test_hold_under_a_stalled_receiver_loses_nothing_and_resumes():
    n = small(400, 40)
    sizes = np.full(n, 1024)
    with Context(policy="hold", link=LINK) as ctx:
        ctx.stall_receiver(True)               # from before the first message
        resumer, done = _resume_once_stalled(ctx)
        try:
            r = runner.run("gpu_push", sizes, n_qps=2, batch=2, stage_slots=16,
                           stage_slot_bytes=256, context=ctx, timeout_s=20)
        finally:
            done.set()
            resumer.join(20)
        c = ctx.counters()
    assert r.qp_errors == {}
    assert r.delivered == n
    assert c["dropped_msgs"] == 0 and c["dropped_bytes"] == 0
    assert c["credit_stalls"] > 0             # the stall was felt
    assert c["held_bytes_max"] > 0            # data waited in the staging region
    assert c["held_bytes"] == 0 and c["held_msgs"] == 0
    assert c["bytes_pushed"] == c["bytes_delivered"] == int(sizes.sum())


def test_drop_counts_exactly_what_it_drops():
    n = small(400, 40)
    sizes = np.full(n, 1024)
    with Context(policy="drop", link=LINK) as ctx:
        ctx.stall_receiver(True)               # stalled for the whole run: credits run out
        r = runner.run("gpu_push", sizes, n_qps=2, batch=1, stage_slots=16,
                       stage_slot_bytes=256, context=ctx, timeout_s=20)
        c = ctx.counters()
    assert c["dropped_msgs"] > 0
    # Every pushed byte is delivered or dropped; none is left held.
    assert c["bytes_pushed"] == c["bytes_delivered"] + c["dropped_bytes"]
    assert c["held_bytes"] == 0
    # The receiver buffer (16 blocks of 64 bytes) took exactly what arrived before it filled.
    assert c["bytes_delivered"] == 16 * 64
    # Each dropped message came back as an error completion the kernel saw.
    assert c["error_cqes"] == c["dropped_msgs"]
    assert r.delivered == 1                    # 1024 bytes fit the 1 KiB receiver once
