"""The reference simulator: the same model as ``sim``, written plainly with SimPy.

Nothing here is tuned for speed. Each message is a SimPy process that walks the same
stations as the fast core (``_core.run_core``): a Container for the staging buffer
(``hold``), a Resource for the PCIe ingress link, a Container of network credits, a
Resource for the network link, a Resource for the receiver, which stalls in periodic
windows. With the ``fifo`` scheduler the NIC hands WQEs to its send engine in posting
order; with ``round_robin`` a scheduler process serves one queue per QP in turn. It consumes the same
prepared inputs (``sim.prepare``) and returns the same per-message arrays, so a test can
check that both give identical per-message times, and the benchmark compares their speed.
"""
from __future__ import annotations

import numpy as np
import simpy

from gpuwrite.model import sim as fast
from gpuwrite.model.params import Params, Workload


class Reference:
    """One run of the reference model on prepared inputs (times in integer ps)."""

    def __init__(self, inputs: fast.Inputs):
        self.inputs = inputs
        self.n = len(inputs.sizes)
        self.env = simpy.Environment()
        env = self.env
        self.staging = simpy.Container(env, capacity=inputs.staging_capacity, init=inputs.staging_capacity)
        self.credits = simpy.Container(env, capacity=inputs.credits_total, init=inputs.credits_total)
        self.ingress = simpy.Resource(env, capacity=1)
        self.link = simpy.Resource(env, capacity=1)
        self.receiver = simpy.Resource(env, capacity=1)
        self.out = {name: np.zeros(self.n, np.int64) for name in fast.RECORD_FIELDS}
        self.out["dropped"] = np.zeros(self.n, np.int8)
        self.handed_to_nic = [env.event() for _ in range(self.n)]   # passed credit admission
        self.took_link = [env.event() for _ in range(self.n)]       # holds the link (or dropped)
        self.next_index = 0
        self.issued = 0
        # round_robin: one queue per QP, a scheduler process, and its wake-up event
        self.queues = [[] for _ in range(inputs.n_qps)]
        self.sent = [env.event() for _ in range(self.n)] if inputs.round_robin else []
        self.wake = env.event()
        self.last_served = inputs.n_qps - 1

    # --- sources --------------------------------------------------------------------
    def open_source(self):
        for j in range(self.n):
            yield self.env.timeout(int(self.inputs.open_arrival[j]) - self.env.now)
            self.next_index += 1
            self.env.process(self.message(j, int(self.inputs.open_qp[j])))

    def issue_at(self, when_ps: int, qp: int):
        yield self.env.timeout(when_ps - self.env.now)
        self.start_message(qp)

    def start_message(self, qp: int):
        j = self.next_index
        self.next_index += 1
        self.env.process(self.message(j, qp))

    def closed_sources(self):
        inputs = self.inputs
        first = min(self.n, inputs.n_qps * inputs.outstanding)
        self.issued = first
        for k in range(first):
            self.env.process(self.issue_at(k * inputs.issue_gap, k % inputs.n_qps))

    def completed(self, qp: int):
        """Closed loop: a completion lets its QP issue the next message."""
        if self.inputs.mode == fast._core.MODE_CLOSED and self.issued < self.n:
            self.issued += 1
            self.start_message(qp)

    # --- one message -----------------------------------------------------------------
    def message(self, j: int, qp: int):
        env, inputs, out = self.env, self.inputs, self.out
        out["qp"][j] = qp
        out["arrival"][j] = env.now
        push_hold = inputs.is_push and inputs.hold
        if push_hold:
            yield self.staging.get(int(inputs.staging_need[j]))
        out["reserve"][j] = env.now
        yield env.timeout(int(inputs.pre[j]))
        if not inputs.is_push:
            if j > 0:
                yield self.handed_to_nic[j - 1]
            yield self.credits.get(int(inputs.credits_need[j]))
            out["credit_time"][j] = env.now
            self.handed_to_nic[j].succeed()
        with self.ingress.request() as request:
            yield request
            yield env.timeout(int(inputs.ingress[j]))
        yield env.timeout(int(inputs.post[j]))
        out["at_nic"][j] = env.now
        if inputs.round_robin:
            yield from self.round_robin_tail(j, qp)
            return
        if inputs.is_push:
            if j > 0:
                yield self.handed_to_nic[j - 1]
            need = int(inputs.credits_need[j])
            if not inputs.hold and self.credits.level < need:
                self.mark_dropped(j)
                self.handed_to_nic[j].succeed()
                self.pass_link_turn(j)
                yield from self.finish_dropped(j, qp)
                return
            yield self.credits.get(need)
            out["credit_time"][j] = env.now
            self.handed_to_nic[j].succeed()
        if j > 0:
            yield self.took_link[j - 1]   # the send engine takes WQEs in posting order
        with self.link.request() as request:
            yield request
            self.took_link[j].succeed()
            out["tx_start"][j] = env.now
            yield env.timeout(int(inputs.wire[j]))
            out["tx_end"][j] = env.now
        if push_hold:
            yield self.staging.put(int(inputs.staging_need[j]))
        env.process(self.receive(j))
        yield env.timeout(inputs.flight + inputs.tail)
        out["done"][j] = env.now
        self.completed(qp)

    def mark_dropped(self, j: int):
        """Message ``j`` found no credits under drop: it never reaches the link."""
        self.out["dropped"][j] = 1
        for name in ("credit_time", "tx_start", "tx_end", "drain_end"):
            self.out[name][j] = -1

    def finish_dropped(self, j: int, qp: int):
        """A dropped message completes with an error after ``error_tail``."""
        yield self.env.timeout(self.inputs.error_tail)
        self.out["done"][j] = self.env.now
        self.completed(qp)

    def round_robin_tail(self, j: int, qp: int):
        """Round-robin scheduler: join the QP's queue, wait to be sent, then finish."""
        env, inputs, out = self.env, self.inputs, self.out
        if not inputs.hold:
            need = int(inputs.credits_need[j])
            if self.credits.level < need:
                self.mark_dropped(j)
                yield from self.finish_dropped(j, qp)
                return
            yield self.credits.get(need)
            out["credit_time"][j] = env.now
        self.queues[qp].append(j)
        self.kick()
        yield self.sent[j]
        if inputs.hold:
            yield self.staging.put(int(inputs.staging_need[j]))
        env.process(self.receive(j))
        yield env.timeout(inputs.flight + inputs.tail)
        out["done"][j] = env.now
        self.completed(qp)

    def kick(self) -> None:
        """Something changed that the scheduler may act on (a message arrived, credits came back)."""
        if not self.wake.triggered:
            self.wake.succeed()

    def end_of_instant(self) -> simpy.Event:
        """An event that fires after every other event of the current instant."""
        event = simpy.Event(self.env)
        event._ok = True
        event._value = None
        self.env.schedule(event, priority=simpy.events.NORMAL + 1)
        return event

    def scheduler(self):
        """Whenever the link is free: the next non-empty QP after the last one served sends its head."""
        env, inputs, out = self.env, self.inputs, self.out
        while True:
            yield self.end_of_instant()
            order = [(self.last_served + k) % inputs.n_qps for k in range(1, inputs.n_qps + 1)]
            ready = [q for q in order if self.queues[q]]
            if not ready:
                self.wake = env.event()
                yield self.wake
                continue
            q = ready[0]
            head = self.queues[q][0]
            need = int(inputs.credits_need[head])
            if inputs.hold and self.credits.level < need:
                self.wake = env.event()
                yield self.wake
                continue
            if inputs.hold:
                yield self.credits.get(need)
                out["credit_time"][head] = env.now
            self.queues[q].pop(0)
            self.last_served = q
            out["tx_start"][head] = env.now
            yield env.timeout(int(inputs.wire[head]))
            out["tx_end"][head] = env.now
            self.sent[head].succeed()

    def pass_link_turn(self, j: int) -> None:
        """A dropped message gives up its turn at the link once the message before it has had its turn."""
        previous = self.took_link[j - 1] if j > 0 else None
        if previous is None or previous.callbacks is None:   # none, or already processed
            self.took_link[j].succeed()
        else:
            previous.callbacks.append(lambda _event: self.took_link[j].succeed())

    def stall_left(self, now: int) -> int:
        """ps until the current stall ends (0 when not stalled)."""
        inputs = self.inputs
        if inputs.stall_period <= 0 or inputs.stall_duration <= 0:
            return 0
        position = (now - inputs.stall_offset) % inputs.stall_period
        return inputs.stall_duration - position if position < inputs.stall_duration else 0

    def until_next_stall(self, now: int) -> int | None:
        inputs = self.inputs
        if inputs.stall_period <= 0 or inputs.stall_duration <= 0:
            return None
        position = (now - inputs.stall_offset) % inputs.stall_period
        return inputs.stall_period - position

    def receive(self, j: int):
        """The remote receiver drains the message, pausing in stalls; credits then return."""
        env, inputs = self.env, self.inputs
        yield env.timeout(inputs.flight)
        with self.receiver.request() as request:
            yield request
            remaining = int(inputs.drain[j])
            while remaining > 0:
                stalled = self.stall_left(env.now)
                if stalled:
                    yield env.timeout(stalled)
                    continue
                gap = self.until_next_stall(env.now)
                step = remaining if gap is None else min(remaining, gap)
                yield env.timeout(step)
                remaining -= step
            self.out["drain_end"][j] = env.now
        yield env.timeout(inputs.credit_return_delay)
        yield self.credits.put(int(inputs.credits_need[j]))
        self.kick()

    def run(self) -> dict[str, np.ndarray]:
        if self.inputs.round_robin:
            self.env.process(self.scheduler())
        if self.inputs.mode == fast._core.MODE_OPEN:
            self.env.process(self.open_source())
        else:
            self.closed_sources()
        self.env.run()
        return self.out


def run_simpy(inputs: fast.Inputs) -> dict[str, np.ndarray]:
    """Per-message arrays (ps) in the same layout as ``sim.run_fast``."""
    return Reference(inputs).run()


def simulate_simpy(params: Params, workload: Workload, seed: int = 0) -> fast.SimResult:
    """``sim.simulate`` through the SimPy reference instead of the fast core."""
    inputs = fast.prepare(params, workload, seed)
    return fast.SimResult(params, workload, int(seed), inputs, run_simpy(inputs))
