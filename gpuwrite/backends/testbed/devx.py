"""Queues on a real mlx5 NIC, built with DevX as rdma-core's own mlx5 tests build them.

:class:`TestbedNic` opens the device with DevX (``Mlx5Context``), allocates a PD and reads
the port (LID, GID, MTU, link layer). :class:`TestbedQueueSet` creates ``n_qps`` RC QPs,
each with its own CQ, whose rings and doorbell records live in registered memory
(``Mlx5UMEM``): GPU memory through dma-buf where the driver exports it, else pinned host
memory mapped into the GPU. It maps the UAR doorbell page and the gpu_push staging region
(on-NIC device memory) into the GPU and hands kernels the same tuple ``Q`` as the
emulated :class:`gpuwrite.host.QueueSet` (see ``device_args``), so the device verbs
write real WQEs, the real doorbell record and the real 8-byte doorbell.

Memory plan (:class:`RingPlan`): one ring UMEM holds every QP's send queue, then every
CQ's ring, each page-aligned; one doorbell UMEM holds the QP doorbell records, then the
CQ doorbell records, 8 bytes each. Each QP has a zero-length receive queue: the peer
only RDMA-writes into registered memory.

Nothing in this module has run on hardware yet (no RDMA NIC was available when it was
written): the command bytes are tested against rdma-core's PRM classes, the attribute
sets against pyverbs, the array plumbing on the CUDA simulator.
"""
from __future__ import annotations

import mmap
import random
from dataclasses import dataclass

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.backends.testbed import prm
from gpuwrite.backends.testbed import qp_attrs as qa
from gpuwrite.backends.testbed.uar import GpuMapping, device_view, map_io_into_gpu
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.host.memory import device_zeros, mapped

PAGE_BYTES = mmap.PAGESIZE
DBREC_BYTES = 8


class TestbedError(RuntimeError):
    """Building or connecting queues on the NIC failed; the message says what and why."""


@dataclass(frozen=True)
class RingPlan:
    """Where every queue's bytes go in the ring UMEM and the doorbell UMEM."""

    n_qps: int
    sq_bbs: int
    ncqe: int

    def __post_init__(self):
        if self.n_qps < 1:
            raise ValueError(f"n_qps={self.n_qps}: must be at least 1")
        for name, count in (("sq_bbs", self.sq_bbs), ("ncqe", self.ncqe)):
            if count & (count - 1) or count * L.WQE_BB < PAGE_BYTES or count > 1 << 15:
                raise ValueError(f"{name}={count}: a power of two from {PAGE_BYTES // L.WQE_BB} "
                                 f"(one {PAGE_BYTES}-byte page of 64-byte entries) to 32768")
        if self.ncqe < self.sq_bbs:
            raise ValueError(f"ncqe={self.ncqe} must be at least sq_bbs={self.sq_bbs}")

    @property
    def sq_bytes(self) -> int:
        return self.sq_bbs * L.WQE_BB

    @property
    def cq_bytes(self) -> int:
        return self.ncqe * L.CQE_SIZE

    def sq_offset(self, i: int) -> int:
        return i * self.sq_bytes

    def cq_offset(self, i: int) -> int:
        return self.n_qps * self.sq_bytes + i * self.cq_bytes

    @property
    def ring_bytes(self) -> int:
        return self.n_qps * (self.sq_bytes + self.cq_bytes)

    def qp_dbr_offset(self, i: int) -> int:
        return i * DBREC_BYTES

    def cq_dbr_offset(self, i: int) -> int:
        return (self.n_qps + i) * DBREC_BYTES

    @property
    def dbr_bytes(self) -> int:
        return -(-2 * self.n_qps * DBREC_BYTES // PAGE_BYTES) * PAGE_BYTES

    @property
    def log_sq_size(self) -> int:
        return self.sq_bbs.bit_length() - 1

    @property
    def log_cq_size(self) -> int:
        return self.ncqe.bit_length() - 1

    def initial_rings(self) -> np.ndarray:
        """The ring UMEM's first contents: zero send queues, every CQE invalid (opcode
        0xf, owner 0), as the mlx5 provider initialises a CQ."""
        image = np.zeros(self.ring_bytes // 4, dtype=np.uint32)
        cqs = image[self.cq_offset(0) // 4:].reshape(self.n_qps * self.ncqe, L.CQE_SIZE // 4)
        cqs[:, L.CQE_W_TAIL] = np.uint32(L.CQE_INVALID << 4 << 24)
        return image

    def device_arrays(self, ring_address: int, dbr_address: int) -> dict:
        """Views of the rings and doorbell records as the device verbs index them."""
        n = self.n_qps
        return {
            "sq": device_view(ring_address + self.sq_offset(0), (n, self.sq_bytes // 4), np.uint32),
            "cq": device_view(ring_address + self.cq_offset(0), (n, self.cq_bytes // 4), np.uint32),
            "dbrec": device_view(dbr_address + self.qp_dbr_offset(0), (n, 2), np.uint32),
            "cqdb": device_view(dbr_address + self.cq_dbr_offset(0), (n, 2), np.uint32),
        }


def doorbell_view(register_address: int, n_qps: int):
    """The Q_UAR array: one 8-byte doorbell register that every QP row rings (stride 0):
    all QPs of a QueueSet share one UAR page, and the doorbell carries the QPN."""
    return device_view(register_address, (n_qps,), np.uint64, strides=(0,))


def _pyverbs():
    from gpuwrite.backends.testbed._pyverbs import import_pyverbs

    import_pyverbs()
    try:
        import pyverbs.enums as enums
    except ImportError:   # newer rdma-core names the module libibverbs_enums
        import pyverbs.libibverbs_enums as enums
    return enums


class TestbedNic:
    """An mlx5 device opened with DevX, a protection domain, and its port's address."""

    def __init__(self, device: str, port: int = 1, gid_index: int = 0):
        enums = _pyverbs()
        from pyverbs.pd import PD
        from pyverbs.providers.mlx5 import mlx5_enums as m5
        from pyverbs.providers.mlx5.mlx5dv import Mlx5Context, Mlx5DVContextAttr
        from pyverbs.providers.mlx5.mlx5dv_objects import Mlx5DvObj
        from pyverbs.pyverbs_error import PyverbsError

        try:
            self.ctx = Mlx5Context(Mlx5DVContextAttr(m5.MLX5DV_CONTEXT_FLAGS_DEVX), name=device)
        except PyverbsError as exc:
            raise TestbedError(f"cannot open {device} with DevX: {exc}") from None
        self.device, self.port, self.gid_index = device, port, gid_index
        self.enums = enums
        self.pd = PD(self.ctx)
        self.pdn = Mlx5DvObj(m5.MLX5DV_OBJ_PD, pd=self.pd).dvpd.pdn
        attr = self.ctx.query_port(port)
        if attr.state != enums.IBV_PORT_ACTIVE:
            raise TestbedError(f"{device} port {port} is not active (state {attr.state})")
        self.lid = attr.lid
        self.link_layer = "ethernet" if attr.link_layer == enums.IBV_LINK_LAYER_ETHERNET else "infiniband"
        self.mtu_bytes = {v: k for k, v in qa.MTU_CODES.items()}[int(attr.active_mtu)]
        self.gid = self.ctx.query_gid(port, gid_index).gid
        self.mac = self._mac() if self.link_layer == "ethernet" else None
        self.max_dm_bytes = int(self.ctx.query_device_ex().max_dm_size)
        self.eqn = self.ctx.devx_query_eqn(0)

    def _mac(self) -> str | None:
        """The port's Ethernet address (RoCE: the peer puts it in its QP's address path)."""
        from pathlib import Path

        ndev = Path(f"/sys/class/infiniband/{self.device}/ports/{self.port}/gid_attrs/ndevs/{self.gid_index}")
        try:
            return (Path("/sys/class/net") / ndev.read_text().strip() / "address").read_text().strip()
        except OSError:
            return None

    def close(self) -> None:
        for name in ("pd", "ctx"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()
                setattr(self, name, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _gpu_ring_memory(nbytes: int):
    """GPU memory exported as a dma-buf: (device address, fd, owner), or None where the
    driver cannot export (proprietary kernel modules, old driver)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    size = -(-nbytes // (1 << 16)) * (1 << 16)
    err, address = driver.cuMemAlloc(size)
    if int(err) != 0:
        return None
    err, fd = driver.cuMemGetHandleForAddressRange(
        address, size, driver.CUmemRangeHandleType.CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)
    if int(err) != 0 or int(address) % PAGE_BYTES:
        driver.cuMemFree(address)
        return None
    driver.cuPointerSetAttribute(1, driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                                 int(address))
    return int(address), int(fd), size


class TestbedQueueSet:
    """``n_qps`` RC QPs with their CQs on the NIC, in the layout the device verbs expect.

    ``ring_memory``: ``"gpu"`` (dma-buf; fails where unsupported), ``"host"`` (pinned
    host memory mapped into the GPU), or ``"auto"`` (GPU where possible). The gpu_push
    staging region is on-NIC device memory, ``stage_slots * stage_slot_bytes`` per QP.
    """

    def __init__(self, nic: TestbedNic, n_qps: int, sq_bbs: int = 256, ncqe: int = 256,
                 stage_slots: int = 64, stage_slot_bytes: int = 256, bounce_bytes: int = 64 * 1024,
                 ring_memory: str = "auto", seed: int | None = None):
        from pyverbs.mr import MR
        from pyverbs.providers.mlx5 import mlx5_enums as m5
        from pyverbs.providers.mlx5.mlx5dv import Mlx5DevxObj, Mlx5UAR, Mlx5UMEM

        if ring_memory not in ("auto", "gpu", "host"):
            raise ValueError(f"ring_memory={ring_memory!r}: allowed auto, gpu, host")
        e = nic.enums
        self.nic = nic
        self.plan = plan = RingPlan(n_qps, sq_bbs, ncqe)
        self.n_qps, self.sq_bbs, self.ncqe = n_qps, sq_bbs, ncqe
        self._closers = []
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ

        # Rings: GPU memory through dma-buf, else pinned host memory.
        gpu = _gpu_ring_memory(plan.ring_bytes) if ring_memory in ("auto", "gpu") else None
        if gpu is None and ring_memory == "gpu":
            raise TestbedError("ring_memory='gpu' needs dma-buf export of GPU memory (NVIDIA open "
                               "kernel modules, r515+); see `gpuwrite doctor`")
        if gpu is not None:
            ring_device, fd, size = gpu
            from cuda.bindings import driver

            driver.cuMemcpyHtoD(ring_device, plan.initial_rings(), plan.ring_bytes)
            self.ring_umem = Mlx5UMEM(nic.ctx, size, 0, PAGE_BYTES, e.IBV_ACCESS_LOCAL_WRITE,
                                      PAGE_BYTES, m5.MLX5DV_UMEM_MASK_DMABUF, fd)
            self.ring_memory = "gpu (dma-buf)"
            self._closers.append(lambda: driver.cuMemFree(ring_device))
        else:
            host = mapped((plan.ring_bytes // 4,), np.uint32)
            host.host[:] = plan.initial_rings()
            self._ring_host = host
            ring_device = host.kernel.__cuda_array_interface__["data"][0]
            self.ring_umem = Mlx5UMEM(nic.ctx, plan.ring_bytes, addr=host.address,
                                      access=e.IBV_ACCESS_LOCAL_WRITE)
            self.ring_memory = "host (pinned, mapped into the GPU)"
        dbr = mapped((plan.dbr_bytes // 4,), np.uint32)
        self._dbr = dbr
        self.dbr_umem = Mlx5UMEM(nic.ctx, plan.dbr_bytes, addr=dbr.address,
                                 access=e.IBV_ACCESS_LOCAL_WRITE)

        # One UAR page for every QP's doorbell, one for the CQs (never armed: the GPU polls).
        self.qp_uar = Mlx5UAR(nic.ctx, m5._MLX5DV_UAR_ALLOC_TYPE_NC)
        self.cq_uar = Mlx5UAR(nic.ctx, m5._MLX5DV_UAR_ALLOC_TYPE_NC)
        self.uar_mapping: GpuMapping = map_io_into_gpu(self.qp_uar.base_addr, PAGE_BYTES)
        self._closers.append(self.uar_mapping.close)

        # CQs and QPs.
        rng = random.Random(seed)
        self.cqs, self.qps, cqns, qpns = [], [], [], []
        for i in range(n_qps):
            cq = self._create(Mlx5DevxObj, prm.create_cq_in(
                log_cq_size=plan.log_cq_size, uar_page=self.cq_uar.page_id, eqn=nic.eqn,
                umem_id=self.ring_umem.umem_id, umem_offset=plan.cq_offset(i),
                dbr_umem_id=self.dbr_umem.umem_id, dbr_offset=plan.cq_dbr_offset(i)),
                prm.CREATE_CQ_OUT, f"CREATE_CQ {i}")
            cqn = prm.CREATE_CQ_OUT.unpack(cq.out_view)["cqn"]
            qp = self._create(Mlx5DevxObj, prm.create_qp_in(
                pdn=nic.pdn, cqn=cqn, uar_page=self.qp_uar.page_id, log_sq_size=plan.log_sq_size,
                umem_id=self.ring_umem.umem_id, umem_offset=plan.sq_offset(i),
                dbr_umem_id=self.dbr_umem.umem_id, dbr_offset=plan.qp_dbr_offset(i)),
                prm.CREATE_QP_OUT, f"CREATE_QP {i}")
            self.cqs.append(cq)
            self.qps.append(qp)
            cqns.append(cqn)
            qpns.append(prm.CREATE_QP_OUT.unpack(qp.out_view)["qpn"])
        self.cqns = np.array(cqns, dtype=np.int64)
        self.qpns = np.array(qpns, dtype=np.int64)
        self.psns = np.array([rng.getrandbits(24) for _ in range(n_qps)], dtype=np.int64)

        # Staging: on-NIC device memory, registered zero-based, mapped into the GPU.
        if stage_slot_bytes < 64 or stage_slot_bytes & (stage_slot_bytes - 1):
            raise ValueError(f"stage_slot_bytes={stage_slot_bytes}: a power of two, at least 64 "
                             "(the device verbs find slots with shifts)")
        self.stage_slots, self.stage_slot_bytes = stage_slots, stage_slot_bytes
        stage_bytes = stage_slots * stage_slot_bytes
        self._map_staging(stage_bytes, access)

        # Bounce rings (host_staged): pinned host memory.
        self.bounce_words = bounce_bytes // 4
        self.bounce = mapped((n_qps, self.bounce_words), np.uint32)
        self.bounce_mr = MR(nic.pd, self.bounce.nbytes, e.IBV_ACCESS_LOCAL_WRITE, address=self.bounce.address)

        info = np.zeros((n_qps, dv.I_COLS), dtype=np.int64)
        info[:, dv.I_QPN] = self.qpns
        info[:, dv.I_SQ_BBS] = sq_bbs
        info[:, dv.I_NCQE] = ncqe
        info[:, dv.I_LOG_NCQE] = plan.log_cq_size
        info[:, dv.I_SLOTS] = stage_slots
        info[:, dv.I_SLOT_BYTES] = stage_slot_bytes
        info[:, dv.I_SLOT_SHIFT] = stage_slot_bytes.bit_length() - 1
        info[:, dv.I_DB_MMIO] = 1     # a real doorbell register: fenced after the record
        info[:, dv.I_STAGE_CQE] = 1   # a real NIC returns staging credits only as completions
        info[:, dv.I_STAGE_ADDR] = np.arange(n_qps) * stage_bytes    # zero-based DM MR
        info[:, dv.I_STAGE_LKEY] = self.stage_mr.lkey if self.stage_mr else 0
        info[:, dv.I_BOUNCE_ADDR] = self.bounce.address + np.arange(n_qps) * self.bounce_words * 4
        info[:, dv.I_BOUNCE_LKEY] = self.bounce_mr.lkey
        info[:, dv.I_BOUNCE_WORDS] = self.bounce_words
        self.info_host = info
        self.info = cuda.to_device(info)
        self.state = device_zeros((n_qps, dv.S_COLS), np.int64)
        self.wqe_aux = device_zeros((n_qps, sq_bbs), np.int64)
        self.status = device_zeros((n_qps, L.STATUS_WORDS), np.uint32)
        views = plan.device_arrays(ring_device, dbr.kernel.__cuda_array_interface__["data"][0])
        self._views = views
        self.uar = doorbell_view(self.uar_mapping.device_address(self.qp_uar.reg_addr), n_qps)

    def _create(self, cls, command: bytes, out_layout, what: str):
        from pyverbs.pyverbs_error import PyverbsError

        try:
            obj = cls(self.nic.ctx, command, out_layout.size_bytes)
        except PyverbsError as exc:
            raise TestbedError(f"DevX {what} failed: {exc}") from None
        prm.check_output(out_layout, obj.out_view, f"DevX {what}")
        return obj

    def _map_staging(self, stage_bytes: int, access: int) -> None:
        from pyverbs.device import DM, AllocDmAttr
        from pyverbs.mr import DMMR

        from gpuwrite.backends.testbed.dm import map_dm

        total = stage_bytes * self.n_qps
        self.stage_mr = self.dm = None
        self.stage_note = None
        if total > self.nic.max_dm_bytes:
            self.stage_note = (f"staging needs {total} bytes of device memory; {self.nic.device} has "
                               f"{self.nic.max_dm_bytes}: gpu_push cannot run with this many QPs/slots")
            self.stage = device_zeros((self.n_qps, stage_bytes // 4), np.uint32)
            return
        e = self.nic.enums
        self.dm = DM(self.nic.ctx, AllocDmAttr(total))
        self.stage_mr = DMMR(self.nic.pd, total, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ZERO_BASED,
                             self.dm, 0)
        self._dm_map = map_dm(self.nic.ctx.cmd_fd, self.dm.handle)
        self._closers.append(self._dm_map.close)
        self.stage_mapping = map_io_into_gpu(self._dm_map.address, total)
        self._closers.append(self.stage_mapping.close)
        self.stage = device_view(self.stage_mapping.device_address(self._dm_map.address),
                                 (self.n_qps, stage_bytes // 4), np.uint32)

    @property
    def device_args(self) -> tuple:
        """The tuple ``Q`` kernels pass to the device verbs (order: verbs.Q_*), as the
        emulated QueueSet's."""
        v = self._views
        return (v["sq"], v["dbrec"], self.uar, self.status, v["cq"], v["cqdb"], self.stage,
                self.state, self.info, self.wqe_aux, self.bounce.kernel)

    def connect(self, connections: list[qa.QpConnection]) -> None:
        """Takes every QP from RESET through INIT and RTR to RTS with DevX modify
        commands; ``connections[i]`` describes QP ``i``'s peer."""
        from pyverbs.pyverbs_error import PyverbsError

        if len(connections) != self.n_qps:
            raise ValueError(f"{len(connections)} connections for {self.n_qps} QPs")
        for i, (qp, conn) in enumerate(zip(self.qps, connections)):
            qpn = int(self.qpns[i])
            for what, command in (
                    ("RST2INIT", prm.rst2init_in(qpn, qa.init_attrs(conn)[0])),
                    ("INIT2RTR", prm.init2rtr_in(qpn, qa.rtr_attrs(conn)[0], conn.remote_mac)),
                    ("RTR2RTS", prm.rtr2rts_in(qpn, qa.rts_attrs(conn)[0], conn.port_num))):
                try:
                    out = qp.modify(command, prm.MODIFY_QP_OUT.size_bytes)
                except PyverbsError as exc:
                    raise TestbedError(f"DevX {what} of QP 0x{qpn:x} failed: {exc}") from None
                prm.check_output(prm.MODIFY_QP_OUT, out, f"DevX {what} of QP 0x{qpn:x}")

    def gpu_state(self) -> np.ndarray:
        return self.state.copy_to_host()

    def close(self) -> None:
        for obj in reversed(self.qps + self.cqs):
            obj.close()
        self.qps, self.cqs = [], []
        for name in ("stage_mr", "dm", "bounce_mr", "ring_umem", "dbr_umem"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()
                setattr(self, name, None)
        for closer in reversed(self._closers):
            closer()
        self._closers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
