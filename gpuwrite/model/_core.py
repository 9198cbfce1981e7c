"""The fast simulator's hot loop, hand-written with ``numba.njit`` for speed.

Plain Python cannot reach the issue's 2 million simulated messages per second; this loop
does (see BENCHMARKS.md, "Model simulator", and ``python -m gpuwrite.model.bench``).
The readable statement of the same model is ``gpuwrite.model.simpy_ref``; a test checks
both give identical per-message times.

Why a loop over messages is a correct discrete-event simulation here: every station of the
model (staging-buffer admission, the PCIe ingress link, credit admission, the network
link, the receiver) serves messages first come, first served, and no message overtakes
another between stations. So taking messages in arrival order and running each one through
all stations before the next (a Lindley recursion per station, with FIFO queues of the
times at which staging space and credits come back) gives the same times as an event
calendar. Closed-loop arrivals come from a small heap of next-issue times per QP.

The per-QP round-robin scheduler breaks first-come-first-served order at the NIC, so it
has its own core, ``run_core_round_robin``: a plain event loop over the same stations.

All times are integer picoseconds, so both implementations agree bit for bit.
"""
from __future__ import annotations

import numpy as np
from numba import njit

MODE_OPEN = 0
MODE_CLOSED = 1


@njit(cache=True)
def stall_finish_ps(start, work, period, duration, offset):
    """When ``work`` ps of draining that starts at ``start`` ends, skipping stall windows.

    Stall windows are [offset + k*period, offset + k*period + duration) for every k.
    """
    if period <= 0 or duration <= 0 or work <= 0:
        return start + work
    t = start
    remaining = work
    while True:
        k = (t - offset) // period
        window_start = offset + k * period
        window_end = window_start + duration
        if t < window_end:
            t = window_end
        next_window = window_start + period
        available = next_window - t
        if remaining <= available:
            return t + remaining
        remaining -= available
        t = next_window


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
def _transmit(j, start, drain_free, wire, flight, drain, tail, stall_period, stall_duration,
              stall_offset, tx_start, tx_end, drain_end, done):
    """Message ``j`` on the link from ``start``: serialisation, flight, the receiver's
    drain (which may stall) and the completion's tail. Returns when the link and the
    receiver are free again: (link_free, drain_free). Both schedulers' cores call it."""
    tx_start[j] = start
    link_free = start + wire[j]
    tx_end[j] = link_free
    received = link_free + flight
    begin = received if received > drain_free else drain_free
    drain_free = stall_finish_ps(begin, drain[j], stall_period, stall_duration, stall_offset)
    drain_end[j] = drain_free
    done[j] = received + tail
    return link_free, drain_free


@njit(cache=True)
def run_core(mode, open_arrival, open_qp, n_qps, outstanding, issue_gap,
             pre, ingress, post, wire, drain, credits_need, staging_need,
             flight, tail, error_tail, credit_return_delay, credits_total, staging_capacity,
             is_push, hold, stall_period, stall_duration, stall_offset,
             qp_out, arrival, reserve, at_nic, credit_time, tx_start, tx_end, drain_end, done, dropped):
    """Run every message through the stations; fill the per-message output arrays (ps)."""
    n = pre.shape[0]
    heap_t, heap_s, heap_q, heap_size, issued = _issue_heap(mode, n, n_qps, outstanding, issue_gap)

    last_reserve = 0
    staging_used = 0
    staging_head = 0
    last_credit = 0
    credits_used = 0
    credit_head = 0
    ingress_free = 0
    link_free = 0
    drain_free = 0
    for j in range(n):
        if mode == MODE_CLOSED:
            t_arrival, seq, qp, heap_size = _heap_pop(heap_t, heap_s, heap_q, heap_size)
        else:
            t_arrival = open_arrival[j]
            qp = open_qp[j]
        qp_out[j] = qp
        arrival[j] = t_arrival
        t = t_arrival

        # staging admission: the GPU reserves space before pushing (push paths, hold)
        if is_push and hold:
            if t < last_reserve:
                t = last_reserve
            while staging_head < j and tx_end[staging_head] <= t:
                staging_used -= staging_need[staging_head]
                staging_head += 1
            while staging_used + staging_need[j] > staging_capacity:
                t = tx_end[staging_head]
                staging_used -= staging_need[staging_head]
                staging_head += 1
            staging_used += staging_need[j]
            last_reserve = t
        reserve[j] = t
        t += pre[j]

        # pull paths: the NIC takes credits before it reads the payload
        if not is_push:
            if t < last_credit:
                t = last_credit
            while credit_head < j and drain_end[credit_head] + credit_return_delay <= t:
                credits_used -= credits_need[credit_head]
                credit_head += 1
            while credits_total - credits_used < credits_need[j]:
                t = drain_end[credit_head] + credit_return_delay
                credits_used -= credits_need[credit_head]
                credit_head += 1
            credits_used += credits_need[j]
            last_credit = t
            credit_time[j] = t

        start = t if t > ingress_free else ingress_free
        ingress_free = start + ingress[j]
        t = ingress_free + post[j]
        at_nic[j] = t

        if is_push:
            if hold and t < last_credit:
                t = last_credit
            # credits come back, in order, from messages that were sent (dropped ones skip)
            while credit_head < j and (dropped[credit_head] == 1 or drain_end[credit_head] + credit_return_delay <= t):
                if dropped[credit_head] == 0:
                    credits_used -= credits_need[credit_head]
                credit_head += 1
            if credits_total - credits_used < credits_need[j]:
                if not hold:
                    dropped[j] = 1
                    credit_time[j] = -1
                    tx_start[j] = -1
                    tx_end[j] = -1
                    drain_end[j] = -1
                    done[j] = t + error_tail
                    if mode == MODE_CLOSED:
                        heap_size = _heap_push(heap_t, heap_s, heap_q, heap_size, done[j], issued, qp)
                        issued += 1
                    continue
                while credits_total - credits_used < credits_need[j]:
                    while dropped[credit_head] == 1:
                        credit_head += 1
                    t = drain_end[credit_head] + credit_return_delay
                    credits_used -= credits_need[credit_head]
                    credit_head += 1
            credits_used += credits_need[j]
            last_credit = t
            credit_time[j] = t

        link_free, drain_free = _transmit(j, t if t > link_free else link_free, drain_free,
                                          wire, flight, drain, tail, stall_period,
                                          stall_duration, stall_offset,
                                          tx_start, tx_end, drain_end, done)
        # every completion offers its QP's next issue; the n earliest offers are the
        # messages (popping in time order), whatever order completions were computed in
        if mode == MODE_CLOSED:
            heap_size = _heap_push(heap_t, heap_s, heap_q, heap_size, done[j], issued, qp)
            issued += 1


INFINITY = 1 << 62


@njit(cache=True)
def run_core_round_robin(mode, open_arrival, open_qp, n_qps, outstanding, issue_gap,
                         pre, ingress, post, wire, drain, credits_need, staging_need,
                         flight, tail, error_tail, credit_return_delay, credits_total, staging_capacity,
                         hold, stall_period, stall_duration, stall_offset,
                         qp_out, arrival, reserve, at_nic, credit_time, tx_start, tx_end, drain_end, done, dropped):
    """Push paths with a per-QP round-robin scheduler: an event loop over five event kinds.

    Messages reach the NIC first come, first served (staging admission and the PCIe
    ingress are FIFO), then wait in one queue per QP. Whenever the link is free the NIC
    picks the next non-empty QP after the last one served; with ``hold`` it sends that
    QP's head once enough credits are back (taken when transmission starts). With
    ``drop`` credits are taken on arrival at the NIC, and a message without them is lost.
    All events of one instant are applied before the scheduler decides.
    """
    n = pre.shape[0]
    heap_t, heap_s, heap_q, heap_size, issued = _issue_heap(mode, n, n_qps, outstanding, issue_gap)

    waiting_admission = np.empty(n, np.int64)     # arrived, FIFO for staging space
    admission_head = 0
    admission_tail = 0
    admitted = np.empty(n, np.int64)              # in admission order; at_nic is monotone
    admitted_count = 0
    nic_pointer = 0
    queue_head = np.full(n_qps, -1, np.int64)     # per-QP FIFO of messages in the NIC
    queue_tail = np.full(n_qps, -1, np.int64)
    queue_next = np.full(n, -1, np.int64)
    waiting = 0
    sent = np.empty(n, np.int64)                  # in transmission order
    sent_count = 0
    return_pointer = 0
    free_pointer = 0
    credits = credits_total
    staging_used = 0
    ingress_free = 0
    link_free = 0
    drain_free = 0
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
        if nic_pointer < admitted_count and at_nic[admitted[nic_pointer]] < t:
            t = at_nic[admitted[nic_pointer]]
        if return_pointer < sent_count and drain_end[sent[return_pointer]] + credit_return_delay < t:
            t = drain_end[sent[return_pointer]] + credit_return_delay
        if hold and free_pointer < sent_count and tx_end[sent[free_pointer]] < t:
            t = tx_end[sent[free_pointer]]
        if waiting > 0 and link_free > now and link_free < t:
            t = link_free
        if t == INFINITY:
            break
        if t > now:
            now = t

        # 1. staging space and 2. credits come back
        if hold:
            while free_pointer < sent_count and tx_end[sent[free_pointer]] <= now:
                staging_used -= staging_need[sent[free_pointer]]
                free_pointer += 1
        while return_pointer < sent_count and drain_end[sent[return_pointer]] + credit_return_delay <= now:
            credits += credits_need[sent[return_pointer]]
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
        # 4. staging admission (FIFO), then the PCIe ingress (FIFO)
        while admission_head < admission_tail:
            j = waiting_admission[admission_head]
            if hold and staging_used + staging_need[j] > staging_capacity:
                break
            if hold:
                staging_used += staging_need[j]
            reserve[j] = now
            start = now + pre[j]
            if ingress_free > start:
                start = ingress_free
            ingress_free = start + ingress[j]
            at_nic[j] = ingress_free + post[j]
            admitted[admitted_count] = j
            admitted_count += 1
            admission_head += 1
        # 5. messages reach the NIC and join their QP's queue
        while nic_pointer < admitted_count and at_nic[admitted[nic_pointer]] <= now:
            j = admitted[nic_pointer]
            nic_pointer += 1
            if not hold:
                if credits < credits_need[j]:
                    dropped[j] = 1
                    credit_time[j] = -1
                    tx_start[j] = -1
                    tx_end[j] = -1
                    drain_end[j] = -1
                    done[j] = at_nic[j] + error_tail
                    finished += 1
                    if mode == MODE_CLOSED:
                        heap_size = _heap_push(heap_t, heap_s, heap_q, heap_size, done[j], issued, qp_out[j])
                        issued += 1
                    continue
                credits -= credits_need[j]
                credit_time[j] = now
            qp = qp_out[j]
            if queue_tail[qp] == -1:
                queue_head[qp] = j
            else:
                queue_next[queue_tail[qp]] = j
            queue_tail[qp] = j
            waiting += 1
        # 6. the scheduler: next non-empty QP after the last one served
        if waiting > 0 and link_free <= now:
            q = last_served
            for _ in range(n_qps):
                q = (q + 1) % n_qps
                if queue_head[q] != -1:
                    break
            h = queue_head[q]
            if (not hold) or credits >= credits_need[h]:
                if hold:
                    credits -= credits_need[h]
                    credit_time[h] = now
                queue_head[q] = queue_next[h]
                if queue_head[q] == -1:
                    queue_tail[q] = -1
                waiting -= 1
                last_served = q
                link_free, drain_free = _transmit(h, now, drain_free, wire, flight, drain, tail,
                                                  stall_period, stall_duration, stall_offset,
                                                  tx_start, tx_end, drain_end, done)
                sent[sent_count] = h
                sent_count += 1
                finished += 1
                if mode == MODE_CLOSED:
                    heap_size = _heap_push(heap_t, heap_s, heap_q, heap_size, done[h], issued, qp_out[h])
                    issued += 1
