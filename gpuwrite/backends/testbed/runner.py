"""Runs a workload through one data path on real mlx5 NICs between two hosts.

Rank 0 sends, rank 1 is the target of its RDMA writes; both build the same workload from
the seed (as the emulated runner does), exchange QP numbers, PSNs, LID/GID, MTU and the
destination's address and rkey through a :mod:`bootstrap`, take their QPs to RTS, and
rank 0 launches the very kernel of emulated mode (``gpuwrite.paths.kernels``) on a
:class:`~gpuwrite.backends.testbed.devx.TestbedQueueSet`. Rank 1 then checks every byte
that arrived and tells rank 0, which returns the emulated runner's ``PathResult``: the
same table, so figures can put testbed, emulated and model side by side.

A dead or misconfigured peer ends as error completions (``transport_retry_exc_err``
after the QP's retries): the kernel's timeout is set above the time the NIC needs to
give up, so a kernel sees the error instead of waiting forever.
"""
from __future__ import annotations

import socket

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.backends.testbed import Availability, probe
from gpuwrite.backends.testbed import qp_attrs as qa
from gpuwrite.backends.testbed.bootstrap import Bootstrap, PeerRecord
from gpuwrite.backends.testbed.session import register_gpu_source
from gpuwrite.cudaenv import cuda, world
from gpuwrite.paths import kernels as K
from gpuwrite.paths import workload
from gpuwrite.paths.runner import PathResult, decode_qp_errors

PATHS = tuple(K.PATH_IDS)

TESTBED_NOTES = {
    "gpu_push": "testbed: staging region = on-NIC device memory (ibv_alloc_dm) mapped into the "
                "GPU; the kernel counts staging credits from its completions (a pushed WQE is "
                "signaled at least once a quarter of the ring is claimed)",
    "gpu_push_inline": "testbed: the payload travels inside the WQE; WQE ring in {rings}",
    "nic_pull": "testbed: the NIC DMA-reads GPU memory registered as {registration}",
    "host_staged": "testbed: the GPU copies to a pinned host bounce ring; the NIC reads host memory",
}


class TestbedUnavailable(RuntimeError):
    """Testbed mode cannot run on this machine; ``reason`` is one line saying why."""

    def __init__(self, availability: Availability):
        super().__init__(availability.reason)
        self.reason = availability.reason


def check_staging_fits(msgs, slots: int, slot_bytes: int, chunk_bytes: int) -> None:
    """Raises unless every gpu_push WQE (a message, or a chunk of a longer one) fits the
    staging ring: its slots are claimed at once, and come back with completions, so it may
    take at most three quarters of the ring (``dv.stage_signal``)."""
    largest = min(chunk_bytes, int(msgs[:, K.M_SIZE].max()))
    need = L.stage_slots_needed(largest, slot_bytes)
    if need > slots - slots // 4:
        raise ValueError(f"a {largest}-byte gpu_push WQE needs {need} staging slots of "
                         f"{slot_bytes} bytes; a ring of {slots} lends one WQE at most "
                         f"{slots - slots // 4}: raise stage_slots or lower chunk_bytes")


def run(path: str, sizes_bytes, bootstrap: Bootstrap, *, device: str | None = None, port: int = 1,
        gid_index: int = 0, n_qps: int = 4, batch: int = 1, chunk_bytes: int = 65536,
        sq_bbs: int = 256, stage_slots: int = 64, stage_slot_bytes: int = 256,
        block_threads: int = 128, timeout_s: float = 5.0, seed: int = 7,
        ring_memory: str = "auto", qp_timeout: int = 14, retry_cnt: int = 7) -> PathResult | None:
    """Rank 0 sends ``sizes_bytes`` messages on ``path`` to rank 1; rank 0 returns the
    result, rank 1 None. Raises TestbedUnavailable where this machine cannot run it."""
    availability = probe(device)
    if not availability.ok:
        raise TestbedUnavailable(availability)
    device = device or next(d for d in availability.devices if d.startswith("mlx5"))
    wl = workload.build(path, sizes_bytes, n_qps, seed)   # identical on both ranks
    msgs, payload = wl.msgs, wl.payload
    n = len(msgs)

    from gpuwrite.backends.testbed.devx import ReleaseStack, TestbedNic, TestbedQueueSet

    with TestbedNic(device, port, gid_index) as nic, \
            TestbedQueueSet(nic, n_qps, sq_bbs=sq_bbs, ncqe=max(sq_bbs, 256), stage_slots=stage_slots,
                            stage_slot_bytes=stage_slot_bytes,
                            bounce_bytes=max(4 * min(chunk_bytes, int(msgs[:, 0].max())), 65536),
                            ring_memory=ring_memory, seed=seed + bootstrap.rank) as qs, \
            ReleaseStack() as buffers:
        c = nic.verbs.c
        dst = wl.destination()
        dst_mr = buffers.push("destination MR", nic.verbs.MR(
            nic.pd, dst.nbytes, c.ACCESS_LOCAL_WRITE | c.ACCESS_REMOTE_WRITE, address=dst.ctypes.data))
        src, source = register_gpu_source(nic, payload, c.ACCESS_LOCAL_WRITE, buffers)
        mine = PeerRecord(rank=bootstrap.rank, host=socket.gethostname(), lid=nic.lid, gid=nic.gid,
                          mtu_bytes=nic.mtu_bytes, qpns=tuple(int(q) for q in qs.qpns),
                          psns=tuple(int(p) for p in qs.psns), addr=dst.ctypes.data,
                          rkey=dst_mr.rkey, length=dst.nbytes,
                          extra={"link_layer": nic.link_layer})
        peer = bootstrap.exchange(mine)[1 - bootstrap.rank]
        if len(peer.qpns) != n_qps:
            raise ValueError(f"the peer built {len(peer.qpns)} QPs; this side {n_qps}: run both "
                             "with the same --qps")
        # RoCE: the kernel resolves the peer's GID to the next hop's MAC (an address handle).
        peer_mac = nic.next_hop_mac(peer.gid) if nic.link_layer == "ethernet" else None
        qs.connect([qs.connection(
            i, remote_qpn=peer.qpns[i], remote_psn=peer.psns[i], remote_lid=peer.lid,
            remote_gid=peer.gid, remote_mtu_bytes=peer.mtu_bytes, remote_mac=peer_mac,
            timeout=qp_timeout, retry_cnt=retry_cnt) for i in range(n_qps)])
        bootstrap.allgather("rts")          # both sides' QPs are ready before any write
        # The kernel must outwait the NIC's retries: a dead peer becomes an error CQE.
        kernel_timeout_ns = int(max(timeout_s * 1e9, 2 * qa.retry_exhausted_ns(qp_timeout, retry_cnt)))

        t_post = np.zeros(n, dtype=np.int64)
        t_done = np.zeros(n, dtype=np.int64)
        res = np.zeros((n_qps, 3), dtype=np.int64)
        if bootstrap.rank == 0:
            params = np.zeros(K.P_COLS, dtype=np.int64)
            params[K.P_BATCH] = batch
            params[K.P_TIMEOUT_NS] = kernel_timeout_ns
            params[K.P_CHUNK_BYTES] = chunk_bytes
            params[K.P_DST_ADDR] = peer.addr
            params[K.P_RKEY] = peer.rkey
            params[K.P_SRC_ADDR] = source.address
            params[K.P_SRC_LKEY] = source.lkey
            if path == "gpu_push":
                check_staging_fits(msgs, stage_slots, stage_slot_bytes, chunk_bytes)
            qp_first = wl.qp_first(n_qps)
            d_tp = cuda.to_device(np.zeros(n, dtype=np.int64))
            d_td = cuda.to_device(np.zeros(n, dtype=np.int64))
            d_res = cuda.to_device(np.zeros((n_qps, 3), dtype=np.int64))
            pend = cuda.to_device(np.zeros((n_qps, max(4, sq_bbs // 2), 3), dtype=np.int64))
            # The kernel emulated mode picks for the same table (kernels.kernel_for).
            scope, kernel = K.kernel_for(path, msgs, source.address, chunk_bytes)
            kernel[n_qps, block_threads](
                qs.device_args, cuda.to_device(msgs), cuda.to_device(qp_first), src,
                cuda.to_device(params), d_tp, d_td, d_res, pend)
            cuda.synchronize()
            t_post, t_done = d_tp.copy_to_host(), d_td.copy_to_host()
            res = d_res.copy_to_host()
        bootstrap.allgather("sent")         # rank 0's kernel is done: rank 1 may look
        checked = bootstrap.allgather([bool(a) for a in wl.arrived(dst)])[1]
        if bootstrap.rank != 0:
            return None
        completed = t_done > 0
        delivered = completed & np.asarray(checked, dtype=bool)
        lat = (t_done[completed] - t_post[completed]).astype(np.int64)
        span = (t_done[completed].max() - t_post[completed].min()) if completed.any() else 0
        nbytes = int(msgs[delivered, K.M_SIZE].sum())
        qp_errors = decode_qp_errors(res, qs.qpns, vendor=True)
        note = TESTBED_NOTES[path].format(rings=qs.ring_memory, registration=source.registration)
        if path == "gpu_push" and qs.stage_note:
            note += f"; {qs.stage_note}"
        return PathResult(
            path=path, messages=n, delivered=int(delivered.sum()), dropped=0,
            errors=sum(1 for err in qp_errors.values() if err["syndrome"]), bytes=nbytes,
            latency_p50_us=float(np.percentile(lat, 50) / 1e3) if len(lat) else float("nan"),
            latency_p99_us=float(np.percentile(lat, 99) / 1e3) if len(lat) else float("nan"),
            throughput_gbps=float(nbytes * 8 / span) if span > 0 else 0.0,
            world=f"testbed: {device} port {port} ({nic.link_layer}) to {peer.host}; {world()}",
            emulation=note, qp_errors=qp_errors,
            counters={"ring_memory": qs.ring_memory, "stage_memory": qs.stage_memory},
            latencies_ns=lat, kernel=scope)
