"""How large must the NIC's hold (staging) buffer be to sustain a share of line rate?

Little's law on the two loops a pushed byte travels (gpu_push, ``hold``), at payload rate X:

* the staging loop: the GPU reserves space, writes the packet, the NIC sends it and the
  space comes back to the GPU with the staging-credit feedback (a posted write seen at its
  next poll). Each byte holds space for at least L0 = issue + PCIe + post + wire + feedback
  (a message's packets are all reserved when it is issued, and each leaves behind the ones
  before it: L0 is averaged over the message's bytes), so X * L0 bytes are always in the loop.
* the credit loop: a packet holds link credits from being sent until the receiver drained
  it and the credit update came back, Lc = wire + flight + drain + update + flight back.
  The VL buffer V (in payload: its 64-byte credit blocks, each packet's header and last
  block included) covers X * Lc; when the receiver stalls for D, the sender can go on for
  what the free credits cover, V - X * Lc, and what the GPU pushes beyond that waits in
  the hold buffer: X * (D + Lc) - V.

So   B(X) = X * L0 + max(0, X * (D + Lc) - V), rounded up to whole staged packets (per
packet of a message: a short last packet has a slot of its own; ``BufferNeed.buffer_bytes``),
feasible when X is within what every other resource carries (paths.throughput_gbps with
an unlimited buffer), X <= V / Lc (credits), and X <= drain rate x duty cycle (the receiver
catches up between stalls). ``simulated_share`` checks it with the simulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from gpuwrite.model import checks, paths
from gpuwrite.model.errors import ParamError
from gpuwrite.model.ordered import sum_in_order
from gpuwrite.model.params import Params, Workload


@dataclass(frozen=True)
class BufferNeed:
    """The hold buffer needed for ``share`` of line rate at one message size, and why."""

    topology: str
    size_bytes: int
    share: float
    target_gbps: float
    staging_loop_ns: float         # L0
    credit_loop_ns: float          # Lc
    stall_ns: float                # D
    loop_bytes: float              # X * L0
    stall_backlog_bytes: float     # max(0, X * (D + Lc) - V)
    feasible: bool
    limit: str                     # what caps X when infeasible ("" when feasible)
    max_gbps: float                # the most this configuration can sustain with any buffer

    packet_payload_bytes: int = 4096
    packet_staged_bytes: int = 4112
    # every packet of one message: its staged bytes and how long it holds them at zero
    # load (from the message's issue until the GPU sees its space freed); empty: one packet
    message_staged_bytes: tuple = ()
    packet_hold_ns: tuple = ()

    @property
    def buffer_bytes(self) -> int:
        """Whole staged packets covering both terms (the buffer holds packets, not fluid).

        Messages issued 1 / rate apart, each packet k held h_k: right after an issue, the
        ceil(rate x h_k) latest messages still hold their packet k, and a stall's backlog
        adds its share of messages to every packet. One packet per message, that is the
        payload rounded up to whole packets."""
        if not self.message_staged_bytes:
            packets = -(-(self.loop_bytes + self.stall_backlog_bytes) // self.packet_payload_bytes)
            return int(packets) * self.packet_staged_bytes
        rate = self.target_gbps / 8.0 / self.size_bytes                 # messages per ns
        backlog = self.stall_backlog_bytes / self.size_bytes             # messages
        return int(sum(staged * math.ceil(rate * hold + backlog)
                       for staged, hold in zip(self.message_staged_bytes, self.packet_hold_ns)))


def line_rate_gbps(params: Params, size_bytes: int) -> float:
    """Payload rate of the network link for messages of ``size_bytes`` (headers deducted)."""
    timing = paths.path_timing("gpu_push", params.build_topology(), size_bytes, params)
    return size_bytes * 8.0 / timing.wire_busy_ns


def need(params: Params, share: float, size_bytes: int = 4096) -> BufferNeed:
    """Closed form of the hold buffer for gpu_push at ``share`` of line rate."""
    if not 0.0 < share <= 1.0:
        raise ParamError("share", share, "a number in (0, 1]")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 1:
        # an empty message carries no payload: there is no line rate to take a share of
        raise ParamError("size_bytes", size_bytes, "an integer >= 1")
    # Params takes any finite time; past the simulator's clock the answer (a poll interval
    # of 1e30 ns: a 4.7e31-byte buffer) could not be checked by simulation, nor be sensible
    for name, value in (("gpu.poll_interval_ns", params.gpu.poll_interval_ns),
                        ("receiver.stall_period_ns", params.receiver.stall_period_ns),
                        ("receiver.stall_duration_ns", params.receiver.stall_duration_ns)):
        checks.check_time_ns(name, value)
    params = params.updated({"path": "gpu_push", "nic": {"policy": "hold", "scheduler": "fifo",
                                                          "staging_buffer_bytes": 1 << 40}})
    topology = params.build_topology()
    timing = paths.path_timing("gpu_push", topology, size_bytes, params)
    network, receiver = params.network, params.receiver
    packets = len(timing.packet_wire_ns)
    wire = timing.wire_busy_ns / packets
    drain = timing.drain_ns / packets
    staging_loop = staging_loop_ns(timing)
    credit_loop = wire + network.propagation_ns + drain + timing.credit_return_ns
    stall = receiver.stall_duration_ns if receiver.stall_period_ns > 0 else 0.0
    target = share * line_rate_gbps(params, size_bytes)
    x = target / 8.0                                              # bytes per ns
    payload_per_wire = size_bytes / (timing.wire_busy_ns * network.rate_gbps / 8.0)
    # the VL buffer holds whole 64-byte credit blocks of each packet, headers included
    payload_per_credit_byte = size_bytes / (timing.credits * network.credit_block_bytes)
    bottleneck, busy_ns = paths.bottleneck("gpu_push", topology, size_bytes, params)
    limits = {
        bottleneck: size_bytes * 8.0 / busy_ns,
        "credits (V / Lc)": network.vl_buffer_bytes * payload_per_credit_byte * 8.0 / credit_loop,
        "receiver duty cycle": receiver.drain_rate_gbps * payload_per_wire * receiver.duty_cycle,
    }
    limit = min(limits, key=limits.get)
    feasible = target <= limits[limit] * (1 + 1e-9)
    backlog = max(0.0, x * (stall + credit_loop) - network.vl_buffer_bytes * payload_per_credit_byte)
    return BufferNeed(params.topology, size_bytes, share, target, staging_loop, credit_loop, stall,
                      x * staging_loop, backlog, feasible, "" if feasible else limit, limits[limit],
                      timing.packet_payload_bytes[0], timing.packet_staging_bytes[0],
                      timing.packet_staging_bytes, packet_holds_ns(timing))


def packet_holds_ns(timing: paths.PathTiming) -> tuple[float, ...]:
    """How long each packet of a message holds its staging space at zero load. The GPU
    reserves every packet when it issues the message; packet k's space comes back the
    feedback delay after it left the NIC, behind the packets before it."""
    pre, post = timing.stage_ns("pre"), timing.stage_ns("post")
    ready = pre
    sent = 0.0
    holds = []
    for ingress, wire in zip(timing.packet_ingress_ns, timing.packet_wire_ns):
        ready += ingress
        sent = max(ready + post, sent) + wire
        holds.append(sent + timing.staging_return_ns)
    return tuple(holds)


def staging_loop_ns(timing: paths.PathTiming) -> float:
    """L0: how long a payload byte holds its staging space, averaged over the message's bytes."""
    holds = packet_holds_ns(timing)
    return sum_in_order(payload * hold for payload, hold in zip(timing.packet_payload_bytes, holds)) \
        / timing.size_bytes


def simulated_share(params: Params, buffer_bytes: int, size_bytes: int = 4096, n_messages: int = 20000,
                    seed: int = 0) -> float:
    """Throughput the simulator sustains with a staging buffer of ``buffer_bytes``, as a share
    of line rate (closed loop with enough messages outstanding that the buffer is the limit)."""
    run = params.updated({"path": "gpu_push", "nic": {"policy": "hold", "scheduler": "fifo",
                                                       "staging_buffer_bytes": int(buffer_bytes)}})
    outstanding = max(8, int(4 * buffer_bytes // max(size_bytes, 1)) + 8)
    workload = Workload(n_messages=n_messages, size_bytes=size_bytes, n_qps=1, outstanding=min(outstanding, 4096))
    from gpuwrite.model import sim

    summary = sim.simulate(run, workload, seed).summary
    return float(summary["throughput_gbps"]) / line_rate_gbps(run, size_bytes)


def gpu_wait_workload(params: Params, share: float, size_bytes: int = 4096,
                      periods: int = 6) -> Workload:
    """What ``longest_gpu_wait_ns`` simulates: ``size_bytes`` messages offered periodically
    at ``share`` of gpu_push's line rate for ``periods`` receiver stall periods (20 us
    where the receiver never stalls), at least 100 of them. A span of more messages than
    the simulator takes is a ParamError (workload.n_messages)."""
    interval_ns = size_bytes * 8.0 / (share * line_rate_gbps(params, size_bytes))
    span_ns = periods * (params.receiver.stall_period_ns or 20_000.0)
    return Workload(n_messages=max(100, int(span_ns / interval_ns)), size_bytes=size_bytes, arrival="open",
                    process="periodic", interval_ns=interval_ns, samples=10)


def longest_gpu_wait_ns(params: Params, buffer_bytes: int, share: float, size_bytes: int = 4096,
                        periods: int = 6, seed: int = 0) -> float:
    """The longest time the GPU waits for staging space when it offers ``share`` of line rate
    (periodic, open loop) for ``periods`` receiver stall periods: ~0 when the buffer sustains
    that share without ever throttling the GPU."""
    from gpuwrite.model import sim

    run = params.updated({"path": "gpu_push", "nic": {"policy": "hold", "scheduler": "fifo",
                                                       "staging_buffer_bytes": int(buffer_bytes)}})
    records = sim.simulate(run, gpu_wait_workload(run, share, size_bytes, periods), seed).messages
    return float((records["reserve_ns"] - records["arrival_ns"]).max())
