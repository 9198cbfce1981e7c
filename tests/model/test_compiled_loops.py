"""The per-packet loops of the zero-load model run compiled or as arrays (session 48: a
2 GiB message is half a million packets); each must give the very doubles of the plain
loop it replaced, which these tests keep as the reference, on random packet runs with and
without the credit loop binding."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwrite.model import paths
from gpuwrite.model.ordered import sum_in_order
from gpuwrite.model.params import Params


def _reference_cut_through(ingress_ns, post_ns, wire_ns, drain_ns, credits, credits_total,
                           propagation_ns, credit_return_ns):
    ready = link_free = drain_free = 0.0
    return_at, return_n, in_use, head = [], [], 0, 0
    for ingress, wire, drain, need in zip(ingress_ns, wire_ns, drain_ns, credits):
        ready += ingress
        start = max(ready + post_ns, link_free)
        while head < len(return_at) and return_at[head] <= start:
            in_use -= return_n[head]
            head += 1
        while credits_total - in_use < need:
            start = max(start, return_at[head])
            in_use -= return_n[head]
            head += 1
        in_use += need
        link_free = start + wire
        drain_free = max(link_free + propagation_ns, drain_free) + drain
        return_at.append(drain_free + credit_return_ns)
        return_n.append(need)
    return link_free


times = st.floats(0.0, 5000.0, allow_nan=False)
packet = st.tuples(times, times, times, st.integers(0, 80))


@settings(max_examples=60, deadline=None)
@given(packets=st.lists(packet, min_size=1, max_size=60), post=times, propagation=times,
       credit_return=times, credits_total=st.integers(80, 400))
def test_the_compiled_cut_through_gives_the_loops_doubles(packets, post, propagation,
                                                          credit_return, credits_total):
    ingress, wire, drain, need = (list(column) for column in zip(*packets))
    args = (ingress, post, wire, drain, need, credits_total, propagation, credit_return)
    assert paths.cut_through_ns(*args) == _reference_cut_through(*args)


def test_a_packet_needing_more_credits_than_exist_is_an_error_not_a_wait():
    """The compiled loop would read past the packets sent so far, waiting for credits no
    packet holds; the caller in the model checks first, and so does cut_through_ns."""
    from gpuwrite.model.errors import ParamError
    with pytest.raises(ParamError, match="credits"):
        paths.cut_through_ns([1.0, 1.0], 0.0, [1.0, 1.0], [1.0, 1.0], [10, 90], 80, 0.0, 0.0)


def _reference_credit_time(timing, params):
    network, total = params.network, 0.0
    for wire, drain, need in zip(timing.packet_wire_ns, timing.packet_drain_ns, timing.packet_credits):
        if need:
            total += (wire + network.propagation_ns + drain + timing.credit_return_ns) \
                / max(1, network.credits_total // need)
    return total


def _reference_staging_time(timing, params, stored):
    pre, post, whole = timing.stage_ns("pre"), timing.stage_ns("post"), timing.stage_ns("ingress")
    sent = staging = 0.0
    for ingress, wire, staged in zip(timing.packet_ingress_ns, timing.packet_wire_ns,
                                     timing.packet_staging_bytes):
        if stored:
            sent += wire
            loop = pre + whole + post + sent + timing.staging_return_ns
        else:
            loop = pre + ingress + post + wire + timing.staging_return_ns
        staging += loop * staged / params.nic.staging_buffer_bytes
    return staging


@pytest.mark.parametrize("forwarding", ["on_arrival", "after_doorbell"])
def test_resource_times_give_the_loops_doubles(forwarding):
    params = Params().updated({"nic": {"push_forwarding": forwarding}})
    topology = params.build_topology()
    # after_doorbell holds a whole message in the 1 MiB staging buffer: up to 64 KiB there
    sizes = (64, 4097, 1 << 20, (1 << 24) + 77) if forwarding == "on_arrival" else (64, 4097, 65536)
    for path in ("gpu_push", "host_staged", "nic_pull"):
        for size in sizes:
            timing = paths.path_timing(path, topology, size, params)
            times = paths.resource_times_ns(timing, params)
            assert times["credits"] == _reference_credit_time(timing, params), (path, size)
            if path == "gpu_push":
                stored = paths.stores_whole(path, params)
                assert stored == (forwarding == "after_doorbell")
                assert times["staging"] == _reference_staging_time(timing, params, stored), size


def test_an_in_order_sum_is_neither_pairwise_nor_compensated():
    """The reason for sum_in_order: values whose pairwise (numpy), compensated (Python
    3.12's sum, math.fsum) and in-order sums differ."""
    values = np.array([9616571.936637867, 7247899407.735336, 5412268555474.342, 27689120404537.082,
                       160.65200877512686, 9699254132.161325, 5160685855478.787, 1158.6561247077032,
                       62348.97555375004, 77668311434229.8, 613003301.0530405, 91729770.47909027,
                       3959287666.4202857, 52858926.326002166, 4593358828854037.0, 62349579149.8756])
    ordered = 0.0
    for v in values.tolist():
        ordered += v
    assert float(np.sum(values)) != ordered          # numpy's pairwise sum rounds otherwise
    assert sum_in_order(values) == ordered and sum_in_order(values.tolist()) == ordered
    assert sum_in_order([1e16, 1.0, 1.0]) == 1e16 != math.fsum([1e16, 1.0, 1.0])
    assert sum_in_order([1, 2, 3]) == 6 and isinstance(sum_in_order([1, 2, 3]), int)
