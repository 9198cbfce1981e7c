"""The fast simulator's hot loop, hand-written with ``numba.njit`` for speed.

Plain Python cannot reach the issue's 5 million simulated messages per second; this loop
does (see BENCHMARKS.md, "Model simulator", and ``python -m gpuwrite.model.bench``).
The readable statement of the same model is ``gpuwrite.model.simpy_ref``; a test checks
both give identical per-message times.

The unit of the network is the packet: a message is cut into MTU packets, each takes its
link credits (64-byte blocks) when it is sent and gives them back a delay after the
receiver drained it. The NIC forwards each packet once its bytes are in (cut-through): a
message longer than the receive buffer streams through it. Push paths reserve staging
space per packet before the GPU writes it (``hold``); it comes back to the GPU a feedback
delay after the packet left the NIC. With ``drop`` there is no staging reservation: the
NIC has a small cut-through FIFO, and a packet that does not fit in it while earlier ones
wait for credits is lost (and with it its message).

Why a loop over packets is a correct discrete-event simulation here: every station
(staging admission, the PCIe ingress link, the NIC FIFO, credit admission, the network
link, the receiver) serves packets first come, first served, and no packet overtakes
another between stations. Taking packets in order and running each through all stations
before the next (a Lindley recursion per station, with FIFO queues of the times at which
staging space and credits come back) gives the same times as an event calendar.
Closed-loop issues merge two sorted streams (the first issues, and completions in
message order); only with drops, where completions come out of order, do they come
from a small heap of next-issue times.

The per-QP round-robin scheduler breaks first-come-first-served order at the NIC, so it
has its own core, ``run_core_round_robin``: an event loop over the same stations that
serves one packet of the next QP in turn.

All times are integer picoseconds, so both implementations agree bit for bit.
"""
from __future__ import annotations

import numpy as np
from numba import njit

MODE_OPEN = 0
MODE_CLOSED = 1
INFINITY = 1 << 62      # later than any time simulated


@njit(cache=True)
def stall_finish_ps(start, work, period, duration, offset, window_start):
    """When ``work`` ps of draining that starts at ``start`` ends, skipping stall windows;
    also the start of the last window that draining met.

    Stall windows are [offset + k*period, offset + k*period + duration) for every k.
    ``window_start`` is the window an earlier call returned (``INFINITY``: none yet). The
    receiver drains in time order, so it is usually still the current window, and the
    64-bit division that finds the window (tens of cycles, per packet) is needed only
    when it is not.
    """
    if period <= 0 or duration <= 0 or work <= 0:
        return start + work, window_start
    t = start
    if t < window_start or t - window_start >= period:
        window_start = offset + (t - offset) // period * period
    remaining = work
    while True:
        window_end = window_start + duration
        if t < window_end:
            t = window_end
        next_window = window_start + period
        available = next_window - t
        if remaining <= available:
            return t + remaining, window_start
        remaining -= available
        t = next_window
        window_start = next_window


@njit(cache=True)
def _heap_push(times, seqs, qps, size, time, seq, qp):
    i = size
    times[i] = time
    seqs[i] = seq
    qps[i] = qp
    while i > 0:
        parent = (i - 1) // 2
        if times[parent] < times[i] or (times[parent] == times[i] and seqs[parent] < seqs[i]):
            break
        times[parent], times[i] = times[i], times[parent]
        seqs[parent], seqs[i] = seqs[i], seqs[parent]
        qps[parent], qps[i] = qps[i], qps[parent]
        i = parent
    return size + 1


@njit(cache=True)
def _heap_pop(times, seqs, qps, size):
    time, seq, qp = times[0], seqs[0], qps[0]
    size -= 1
    times[0], seqs[0], qps[0] = times[size], seqs[size], qps[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        right = left + 1
        if right < size and (times[right] < times[left] or (times[right] == times[left] and seqs[right] < seqs[left])):
            child = right
        if times[i] < times[child] or (times[i] == times[child] and seqs[i] < seqs[child]):
            break
        times[child], times[i] = times[i], times[child]
        seqs[child], seqs[i] = seqs[i], seqs[child]
        qps[child], qps[i] = qps[i], qps[child]
        i = child
    return time, seq, qp, size


@njit(cache=True)
def _issue_heap(mode, n, n_qps, outstanding, issue_gap):
    """The heap of pending issues (time, message, QP) both schedulers start from: closed
    loop, the first ``outstanding`` messages of every QP, ``issue_gap`` apart; open
    arrivals, empty. Returns the heap's arrays, its size and the messages issued."""
    heap_cap = n_qps * outstanding + 1
    heap_t = np.empty(heap_cap, np.int64)
    heap_s = np.empty(heap_cap, np.int64)
    heap_q = np.empty(heap_cap, np.int64)
    heap_size = 0
    issued = 0
    if mode == MODE_CLOSED:
        issued = min(n, n_qps * outstanding)
        for k in range(issued):
            heap_size = _heap_push(heap_t, heap_s, heap_q, heap_size, k * issue_gap, k, k % n_qps)
    return heap_t, heap_s, heap_q, heap_size, issued


@njit(cache=True)
def _drain(start, drain_free, work, period, duration, offset, window_start):
    """The receiver drains a packet that arrived at ``start``: FIFO, skipping stalls.
    Returns when it is done and the stall window to start the next search from."""
    begin = start if start > drain_free else drain_free
    return stall_finish_ps(begin, work, period, duration, offset, window_start)


@njit(cache=True)
def run_core(mode, open_arrival, open_qp, n_qps, outstanding, issue_gap,
             size_index, pre_u, post_u, first_u, count_u,
             pkt_ingress, pkt_wire, pkt_drain, pkt_credits, pkt_staging, pkt_bytes,
             flight, tail, error_tail, credit_return_delay, staging_return_delay,
             credits_total, staging_capacity, fifo_capacity, is_push, hold,
             stall_period, stall_duration, stall_offset,
             qp_out, arrival, reserve, at_nic, tx_start, tx_end, drain_end, done, dropped,
             p_table, p_reserve, p_ready, p_tx_start, p_drain_end):
    """Run every packet through the stations; fill the per-message and per-packet arrays (ps).

    Per-packet arrays are indexed by the packet's global number (messages in order);
    ``p_table`` maps it to its row of the per-size packet tables. A packet never sent
    (dropped) has ``p_tx_start`` -1.
    """
    n = size_index.shape[0]
    heap_t, heap_s, heap_q, heap_size, issued = _issue_heap(mode, n, n_qps, outstanding, issue_gap)
    push_hold = is_push and hold
    push_drop = is_push and not hold
    # Closed loop without drops: a message completes a fixed tail after its last packet
    # left the link, and the link serves packets in message order, so completions are
    # non-decreasing in message order. The pending issues are then two sorted streams,
    # the first ones (k * issue_gap, issue number k) and the completions of messages
    # 0, 1, ... (issue numbers ``first_issues`` + message): merging their heads gives the
    # heap's order (time, then issue number) at a fraction of its cost. With drops a
    # lost message completes early (error CQE), out of order: the heap serves that case.
    merge = mode == MODE_CLOSED and not push_drop
    first_issues = issued
    next_first = 0          # next of the first issues
    next_completed = 0      # next message whose completion issues a message
    completions_issuing = 0  # heap: completions taken so far as issues
    k = 0
    last_reserve = 0
    staging_used = 0
    staging_head = 0
    credits_used = 0
    credit_head = 0
    fifo_used = 0
    fifo_head = 0
    ingress_free = 0
    link_free = 0
    drain_free = 0
    stall_window = INFINITY     # no stall window found yet
    for j in range(n):
        if merge:
            # at equal times a first issue goes first: its issue number is smaller; a
            # completion issues a message only while messages remain beyond the first issues
            if next_first < first_issues and (next_completed == j or next_completed >= n - first_issues
                                              or next_first * issue_gap <= done[next_completed]):
                t_arrival = next_first * issue_gap
                qp = next_first % n_qps
                next_first += 1
            else:
                t_arrival = done[next_completed]
                qp = qp_out[next_completed]
                next_completed += 1
        elif mode == MODE_CLOSED:
            t_arrival, seq, qp, heap_size = _heap_pop(heap_t, heap_s, heap_q, heap_size)
            # the earliest completions issue the messages beyond the first issues, no more
            while seq >= first_issues and completions_issuing >= n - first_issues:
                t_arrival, seq, qp, heap_size = _heap_pop(heap_t, heap_s, heap_q, heap_size)
            if seq >= first_issues:
                completions_issuing += 1
        else:
            t_arrival = open_arrival[j]
            qp = open_qp[j]
        qp_out[j] = qp
        arrival[j] = t_arrival
        u = size_index[j]
        pre = pre_u[u]
        post = post_u[u]
        lost = False
        first_sent = -1
        last_received = 0
        for q in range(count_u[u]):
            i = first_u[u] + q
            p_table[k] = i
            t = t_arrival
            # staging admission, per packet: space comes back a feedback delay after a
            # packet left the NIC, in sending order
            if push_hold:
                if t < last_reserve:
                    t = last_reserve
                while staging_head < k and p_tx_start[staging_head] + pkt_wire[p_table[staging_head]] \
                        + staging_return_delay <= t:
                    staging_used -= pkt_staging[p_table[staging_head]]
                    staging_head += 1
                while staging_used + pkt_staging[i] > staging_capacity:
                    back = p_tx_start[staging_head] + pkt_wire[p_table[staging_head]] + staging_return_delay
                    if back > t:
                        t = back
                    staging_used -= pkt_staging[p_table[staging_head]]
                    staging_head += 1
                staging_used += pkt_staging[i]
                last_reserve = t
            p_reserve[k] = t
            if q == 0:
                reserve[j] = t
            start = t + pre
            if start < ingress_free:
                start = ingress_free
            ingress_free = start + pkt_ingress[i]
            ready = ingress_free + post
            p_ready[k] = ready
            if lost:
                p_tx_start[k] = -1
                p_drain_end[k] = -1
                k += 1
                continue
            # the naive NIC: a packet that does not fit the cut-through FIFO is lost
            if push_drop:
                while fifo_head < k and (p_tx_start[fifo_head] == -1 or p_tx_start[fifo_head] <= ready):
                    if p_tx_start[fifo_head] != -1:
                        fifo_used -= pkt_bytes[p_table[fifo_head]]
                    fifo_head += 1
                if fifo_used + pkt_bytes[i] > fifo_capacity:
                    lost = True
                    p_tx_start[k] = -1
                    p_drain_end[k] = -1
                    k += 1
                    continue
                fifo_used += pkt_bytes[i]
            # link credits, taken when the packet is sent
            t = ready if ready > link_free else link_free
            while credit_head < k and (p_tx_start[credit_head] == -1
                                       or p_drain_end[credit_head] + credit_return_delay <= t):
                if p_tx_start[credit_head] != -1:
                    credits_used -= pkt_credits[p_table[credit_head]]
                credit_head += 1
            while credits_total - credits_used < pkt_credits[i]:
                if p_tx_start[credit_head] != -1:
                    back = p_drain_end[credit_head] + credit_return_delay
                    if back > t:
                        t = back
                    credits_used -= pkt_credits[p_table[credit_head]]
                credit_head += 1
            credits_used += pkt_credits[i]
            p_tx_start[k] = t
            link_free = t + pkt_wire[i]
            last_received = link_free + flight
            drain_free, stall_window = _drain(last_received, drain_free, pkt_drain[i],
                                              stall_period, stall_duration, stall_offset, stall_window)
            p_drain_end[k] = drain_free
            if first_sent == -1:
                first_sent = t
            k += 1
        at_nic[j] = p_ready[k - 1]
        if lost:
            dropped[j] = 1
            tx_start[j] = -1
            tx_end[j] = -1
            drain_end[j] = -1
            done[j] = at_nic[j] + error_tail
        else:
            tx_start[j] = first_sent
            tx_end[j] = link_free
            drain_end[j] = drain_free
            done[j] = last_received + tail
        if mode == MODE_CLOSED and not merge:
            heap_size = _heap_push(heap_t, heap_s, heap_q, heap_size, done[j], issued, qp)
            issued += 1



@njit(cache=True)
def run_core_round_robin(mode, open_arrival, open_qp, n_qps, outstanding, issue_gap,
                         size_index, pre_u, post_u, first_u, count_u,
                         pkt_ingress, pkt_wire, pkt_drain, pkt_credits, pkt_staging,
                         flight, tail, credit_return_delay, staging_return_delay,
                         credits_total, staging_capacity,
                         stall_period, stall_duration, stall_offset,
                         qp_out, arrival, reserve, at_nic, tx_start, tx_end, drain_end, done,
                         p_table, p_reserve, p_ready, p_tx_start, p_drain_end):
    """Push paths (hold) with a per-QP round-robin scheduler: an event loop over packets.

    Packets are admitted into staging and cross PCIe first come, first served, then wait
    in one queue per QP. Whenever the link is free the NIC picks the next non-empty QP
    after the last one served and sends its head packet once enough credits are back.
    All events of one instant are applied before the scheduler decides.
    """
    n = size_index.shape[0]
    heap_t, heap_s, heap_q, heap_size, issued = _issue_heap(mode, n, n_qps, outstanding, issue_gap)
    total = p_table.shape[0]
    p_msg = np.empty(total, np.int64)
    msg_left = np.zeros(n, np.int64)              # packets of each message not yet sent
    waiting_admission = np.empty(n, np.int64)     # arrived messages, FIFO for staging space
    admission_head = 0
    admission_tail = 0
    next_packet = 0                               # packet of the head message to admit next
    admitted = 0                                  # packets admitted (global numbers 0..)
    nic_pointer = 0                               # next admitted packet to reach the NIC
    queue_head = np.full(n_qps, -1, np.int64)     # per-QP FIFO of packets in the NIC
    queue_tail = np.full(n_qps, -1, np.int64)
    queue_next = np.full(total, -1, np.int64)
    waiting = 0
    sent = np.empty(total, np.int64)              # in sending order
    sent_count = 0
    return_pointer = 0
    free_pointer = 0
    credits = credits_total
    staging_used = 0
    ingress_free = 0
    link_free = 0
    drain_free = 0
    stall_window = INFINITY     # no stall window found yet
    last_served = n_qps - 1
    next_index = 0
    open_pointer = 0
    finished = 0
    now = 0
    while finished < n:
        t = INFINITY
        if mode == MODE_OPEN:
            if open_pointer < n and open_arrival[open_pointer] < t:
                t = open_arrival[open_pointer]
        elif heap_size > 0 and next_index < n and heap_t[0] < t:
            t = heap_t[0]
        if nic_pointer < admitted and p_ready[nic_pointer] < t:
            t = p_ready[nic_pointer]
        if return_pointer < sent_count and p_drain_end[sent[return_pointer]] + credit_return_delay < t:
            t = p_drain_end[sent[return_pointer]] + credit_return_delay
        if free_pointer < sent_count:
            back = p_tx_start[sent[free_pointer]] + pkt_wire[p_table[sent[free_pointer]]] + staging_return_delay
            if back < t:
                t = back
        if waiting > 0 and link_free > now and link_free < t:
            t = link_free
        if t == INFINITY:
            break
        if t > now:
            now = t

        # 1. staging space and 2. credits come back
        while free_pointer < sent_count and p_tx_start[sent[free_pointer]] \
                + pkt_wire[p_table[sent[free_pointer]]] + staging_return_delay <= now:
            staging_used -= pkt_staging[p_table[sent[free_pointer]]]
            free_pointer += 1
        while return_pointer < sent_count and p_drain_end[sent[return_pointer]] + credit_return_delay <= now:
            credits += pkt_credits[p_table[sent[return_pointer]]]
            return_pointer += 1
        # 3. arrivals
        if mode == MODE_OPEN:
            while open_pointer < n and open_arrival[open_pointer] <= now:
                j = open_pointer
                qp_out[j] = open_qp[j]
                arrival[j] = open_arrival[j]
                waiting_admission[admission_tail] = j
                admission_tail += 1
                open_pointer += 1
        else:
            while heap_size > 0 and next_index < n and heap_t[0] <= now:
                t_arrival, seq, qp, heap_size = _heap_pop(heap_t, heap_s, heap_q, heap_size)
                j = next_index
                next_index += 1
                qp_out[j] = qp
                arrival[j] = t_arrival
                waiting_admission[admission_tail] = j
                admission_tail += 1
        # 4. staging admission per packet (FIFO), then the PCIe ingress (FIFO)
        while admission_head < admission_tail:
            j = waiting_admission[admission_head]
            u = size_index[j]
            i = first_u[u] + next_packet
            if staging_used + pkt_staging[i] > staging_capacity:
                break
            staging_used += pkt_staging[i]
            k = admitted
            p_table[k] = i
            p_msg[k] = j
            p_reserve[k] = now
            if next_packet == 0:
                reserve[j] = now
                msg_left[j] = count_u[u]
            start = now + pre_u[u]
            if ingress_free > start:
                start = ingress_free
            ingress_free = start + pkt_ingress[i]
            p_ready[k] = ingress_free + post_u[u]
            admitted += 1
            next_packet += 1
            if next_packet == count_u[u]:
                at_nic[j] = p_ready[k]
                next_packet = 0
                admission_head += 1
        # 5. packets reach the NIC and join their QP's queue
        while nic_pointer < admitted and p_ready[nic_pointer] <= now:
            k = nic_pointer
            nic_pointer += 1
            qp = qp_out[p_msg[k]]
            if queue_tail[qp] == -1:
                queue_head[qp] = k
            else:
                queue_next[queue_tail[qp]] = k
            queue_tail[qp] = k
            waiting += 1
        # 6. the scheduler: the head packet of the next non-empty QP after the last one served
        if waiting > 0 and link_free <= now:
            q = last_served
            for _ in range(n_qps):
                q = (q + 1) % n_qps
                if queue_head[q] != -1:
                    break
            h = queue_head[q]
            i = p_table[h]
            if credits >= pkt_credits[i]:
                credits -= pkt_credits[i]
                queue_head[q] = queue_next[h]
                if queue_head[q] == -1:
                    queue_tail[q] = -1
                waiting -= 1
                last_served = q
                p_tx_start[h] = now
                link_free = now + pkt_wire[i]
                received = link_free + flight
                drain_free, stall_window = _drain(received, drain_free, pkt_drain[i],
                                                  stall_period, stall_duration, stall_offset, stall_window)
                p_drain_end[h] = drain_free
                sent[sent_count] = h
                sent_count += 1
                j = p_msg[h]
                if msg_left[j] == count_u[size_index[j]]:
                    tx_start[j] = now
                msg_left[j] -= 1
                if msg_left[j] == 0:
                    tx_end[j] = link_free
                    drain_end[j] = drain_free
                    done[j] = received + tail
                    finished += 1
                    if mode == MODE_CLOSED and issued < n:
                        heap_size = _heap_push(heap_t, heap_s, heap_q, heap_size, done[j], issued, qp_out[j])
                        issued += 1
