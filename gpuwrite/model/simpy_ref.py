"""The reference simulator: the same model as ``sim``, written plainly with SimPy.

Nothing here is tuned for speed. Each packet is a SimPy process that walks the same
stations as the fast core (``_core.run_core``): a Container for the staging buffer
(push, ``hold``), a Resource for the PCIe ingress link, a byte counter for the naive
NIC's cut-through FIFO (push, ``drop``), a Container of link credits, a Resource for the
network link, a Resource for the receiver, which stalls in periodic windows. Stations
that serve in order (staging, ingress, the FIFO, the send engine) take packets in their
global order through a chain of events, one per packet and station. With the
``round_robin`` scheduler a scheduler process serves one packet queue per QP in turn. It
consumes the same prepared inputs (``sim.prepare``) and returns the same per-message and
per-packet arrays, so a test can check that both give identical times, and the benchmark
compares their speed.
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
        self.fifo_bytes = 0
        self.out = fast.new_records(inputs)
        counts = inputs.count_u[inputs.size_index]
        self.first_packet = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        total = int(counts.sum())
        # one event per packet and ordered station: it has passed that station
        self.reserved = [env.event() for _ in range(total)]
        self.entered_ingress = [env.event() for _ in range(total)]
        self.decided = [env.event() for _ in range(total)]      # FIFO accepted or lost
        self.took_link = [env.event() for _ in range(total)]    # sent, or gave up its turn
        self.lost = np.zeros(self.n, bool)
        self.next_index = 0
        self.issued = 0
        # round_robin: one packet queue per QP, a scheduler process, and its wake-up event
        self.queues = [[] for _ in range(inputs.n_qps)]
        self.sent_event = [env.event() for _ in range(total)] if inputs.round_robin else []
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

    # --- one message: its packets, then its completion --------------------------------
    def message(self, j: int, qp: int):
        env, inputs, out = self.env, self.inputs, self.out
        out["qp"][j] = qp
        out["arrival"][j] = env.now
        u = int(inputs.size_index[j])
        count = int(inputs.count_u[u])
        first = int(self.first_packet[j])
        packets = [env.process(self.packet(j, u, q, first + q)) for q in range(count)]
        if not inputs.round_robin:
            yield simpy.AllOf(env, self.decided[first:first + count])
        if not self.lost[j]:
            yield simpy.AllOf(env, packets)
        last = first + count - 1
        out["at_nic"][j] = out["p_ready"][last]
        if self.lost[j]:
            out["dropped"][j] = 1
            for name in ("tx_start", "tx_end", "drain_end"):
                out[name][j] = -1
            yield env.timeout(max(0, int(out["p_ready"][last]) + inputs.error_tail - env.now))
        else:
            out["tx_start"][j] = out["p_tx_start"][first]
            out["tx_end"][j] = out["p_tx_start"][last] + inputs.pkt_wire[out["p_table"][last]]
            yield env.timeout(int(out["tx_end"][j]) + inputs.flight + inputs.tail - env.now)
        out["done"][j] = env.now
        self.completed(qp)

    def packet(self, j: int, u: int, q: int, k: int):
        """Packet ``q`` of message ``j`` (global number ``k``) through every station."""
        env, inputs, out = self.env, self.inputs, self.out
        i = int(inputs.first_u[u]) + q
        out["p_table"][k] = i
        push_hold = inputs.is_push and inputs.hold
        if k > 0:
            yield self.reserved[k - 1]
        if push_hold:
            yield self.staging.get(int(inputs.pkt_staging[i]))
        out["p_reserve"][k] = env.now
        if q == 0:
            out["reserve"][j] = env.now
        self.reserved[k].succeed()
        yield env.timeout(int(inputs.pre_u[u]))
        if k > 0:
            yield self.entered_ingress[k - 1]
        with self.ingress.request() as request:
            yield request
            self.entered_ingress[k].succeed()
            yield env.timeout(int(inputs.pkt_ingress[i]))
        yield env.timeout(int(inputs.post_u[u]))
        out["p_ready"][k] = env.now
        if inputs.round_robin:
            yield from self.round_robin_packet(j, i, k)
            return
        if k > 0:
            yield self.decided[k - 1]
        if inputs.is_push and not inputs.hold:
            yield self.end_of_instant()     # packets that start sending now have left the FIFO
            if not self.lost[j] and self.fifo_bytes + int(inputs.pkt_bytes[i]) > inputs.fifo_capacity:
                self.lost[j] = True
            if not self.lost[j]:
                self.fifo_bytes += int(inputs.pkt_bytes[i])
        self.decided[k].succeed()
        if self.lost[j]:
            out["p_tx_start"][k] = -1
            out["p_drain_end"][k] = -1
            self.pass_link_turn(k)
            return
        if k > 0:
            yield self.took_link[k - 1]   # the send engine takes packets in order
        if inputs.pkt_credits[i]:       # a packet of no bytes at all takes none (SimPy refuses 0)
            yield self.credits.get(int(inputs.pkt_credits[i]))
        with self.link.request() as request:
            yield request
            yield from self.send(i, k)
            self.took_link[k].succeed()
            yield env.timeout(int(inputs.pkt_wire[i]))

    def send(self, i: int, k: int):
        """Packet ``k`` starts on the link now: the FIFO lets it go, the receiver will drain it."""
        inputs, env = self.inputs, self.env
        self.out["p_tx_start"][k] = env.now
        if inputs.is_push and not inputs.hold:
            self.fifo_bytes -= int(inputs.pkt_bytes[i])
        env.process(self.receive(i, k))
        if inputs.is_push and inputs.hold:
            env.process(self.give_back_staging(i))
        yield from ()

    def give_back_staging(self, i: int):
        """The GPU sees the packet's staging space freed a feedback delay after it left."""
        inputs = self.inputs
        yield self.env.timeout(int(inputs.pkt_wire[i]) + inputs.staging_return_delay)
        yield self.staging.put(int(inputs.pkt_staging[i]))
        self.kick()

    def pass_link_turn(self, k: int) -> None:
        """A lost packet gives up its turn at the link once the packet before it has had its turn."""
        previous = self.took_link[k - 1] if k > 0 else None
        if previous is None or previous.callbacks is None:   # none, or already processed
            self.took_link[k].succeed()
        else:
            previous.callbacks.append(lambda _event: self.took_link[k].succeed())

    # --- round robin ------------------------------------------------------------------
    def round_robin_packet(self, j: int, i: int, k: int):
        """Join the QP's packet queue and wait to be sent."""
        self.queues[int(self.out["qp"][j])].append((k, i))
        self.kick()
        yield self.sent_event[k]

    def kick(self) -> None:
        """Something changed that the scheduler may act on (a packet arrived, credits came back)."""
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
        """Whenever the link is free: the next non-empty QP after the last one served sends its head packet."""
        env, inputs = self.env, self.inputs
        while True:
            yield self.end_of_instant()
            order = [(self.last_served + step) % inputs.n_qps for step in range(1, inputs.n_qps + 1)]
            ready = [q for q in order if self.queues[q]]
            if not ready:
                self.wake = env.event()
                yield self.wake
                continue
            q = ready[0]
            k, i = self.queues[q][0]
            need = int(inputs.pkt_credits[i])
            if self.credits.level < need:
                self.wake = env.event()
                yield self.wake
                continue
            if need:
                yield self.credits.get(need)
            self.queues[q].pop(0)
            self.last_served = q
            yield from self.send(i, k)
            yield env.timeout(int(inputs.pkt_wire[i]))
            self.sent_event[k].succeed()

    # --- the remote receiver -------------------------------------------------------------
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

    def receive(self, i: int, k: int):
        """The remote receiver drains the packet, pausing in stalls; its credits then return."""
        env, inputs = self.env, self.inputs
        yield env.timeout(int(inputs.pkt_wire[i]) + inputs.flight)
        with self.receiver.request() as request:
            yield request
            remaining = int(inputs.pkt_drain[i])
            while remaining > 0:
                stalled = self.stall_left(env.now)
                if stalled:
                    yield env.timeout(stalled)
                    continue
                gap = self.until_next_stall(env.now)
                step = remaining if gap is None else min(remaining, gap)
                yield env.timeout(step)
                remaining -= step
            self.out["p_drain_end"][k] = env.now
        yield env.timeout(inputs.credit_return_delay)
        if inputs.pkt_credits[i]:
            yield self.credits.put(int(inputs.pkt_credits[i]))
        self.kick()

    def run(self) -> dict[str, np.ndarray]:
        if self.inputs.round_robin:
            self.env.process(self.scheduler())
        if self.inputs.mode == fast._core.MODE_OPEN:
            self.env.process(self.open_source())
        else:
            self.closed_sources()
        self.env.run()
        out, inputs = self.out, self.inputs
        sent = ~out["dropped"].astype(bool)
        last = self.first_packet + inputs.count_u[inputs.size_index] - 1
        out["drain_end"][sent] = out["p_drain_end"][last[sent]]
        return out


def run_simpy(inputs: fast.Inputs) -> dict[str, np.ndarray]:
    """Per-message and per-packet arrays (ps) in the same layout as ``sim.run_fast``."""
    return Reference(inputs).run()


def simulate_simpy(params: Params, workload: Workload, seed: int = 0) -> fast.SimResult:
    """``sim.simulate`` through the SimPy reference instead of the fast core."""
    inputs = fast.prepare(params, workload, seed)
    return fast.SimResult(params, workload, int(seed), inputs, run_simpy(inputs))
