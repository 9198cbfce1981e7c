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
sets against pyverbs, the array plumbing on the CUDA simulator, the order of making and
releasing objects on a strict fake of pyverbs/DevX (tests/testbed/fakeverbs.py).
``gpuwrite testbed --selftest`` is the first thing to run on a NIC.
"""
from __future__ import annotations

import errno
import mmap
import os
import random
import sys
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
    """Building or connecting queues on the NIC failed; the message says what and why.
    ``errno``: the failed call's, where it set one."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


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


def kernel_address(buffer) -> int:
    """The address kernels use for pinned host memory (``host.memory.Mapped``); under the
    CUDA simulator, the host address itself."""
    from gpuwrite.cudaenv import SIMULATOR

    return buffer.address if SIMULATOR else buffer.kernel.__cuda_array_interface__["data"][0]


def doorbell_view(register_address: int, n_qps: int):
    """The Q_UAR array: one 8-byte doorbell register that every QP row rings (stride 0):
    all QPs of a QueueSet share one UAR page, and the doorbell carries the QPN."""
    return device_view(register_address, (n_qps,), np.uint64, strides=(0,))


class ReleaseStack:
    """Everything a testbed object made, released last-made-first.

    DevX objects hold references the kernel checks: a CQ cannot be destroyed while a QP
    sends to it, a UMEM or UAR while a CQ or QP uses it. rdma-core's DevX tests release
    "QP, CQ, UARs, UMEMs" by hand ("objects closure order is important, and must be done
    manually in DevX", tests/mlx5_base.py); making objects in the reverse of that order
    and releasing the stack from the top gives the same order for any number of QPs.
    ``close`` tries every release even after one fails, then raises one
    :class:`TestbedError` naming each failure.
    """

    def __init__(self):
        self._items: list[tuple[str, object]] = []

    def push(self, what: str, obj):
        """Remembers ``obj`` (anything with ``close()``, or a callable) and returns it."""
        self._items.append((what, obj))
        return obj

    def __len__(self) -> int:
        return len(self._items)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        close_quietly(self, exc)

    def close(self) -> list[str]:
        """Releases everything; returns what was released, in order."""
        released, failures = [], []
        while self._items:
            what, obj = self._items.pop()
            try:
                getattr(obj, "close", obj)()
                released.append(what)
            except Exception as exc:  # noqa: BLE001 - every release is tried; all are reported
                failures.append(f"{what}: {type(exc).__name__}: {exc}")
        if failures:
            raise TestbedError("releasing testbed objects failed: " + "; ".join(failures))
        return released


def close_quietly(obj, exc: BaseException | None) -> None:
    """``obj.close()`` at the end of a ``with``: a release failure is raised when the block
    succeeded, and attached as a note to the block's own exception otherwise (it must not
    replace the result or the first error)."""
    if exc is None:
        obj.close()
        return
    try:
        obj.close()
    except TestbedError as release:
        exc.add_note(str(release))


class TestbedNic:
    """An mlx5 device opened with DevX, a protection domain, and its port's address.

    ``verbs``: the pyverbs bundle (:mod:`api`; tests pass a fake). ``query=False`` stops
    after opening, for the selftest, which then calls :meth:`query` as its own step.
    """

    def __init__(self, device: str, port: int = 1, gid_index: int = 0, verbs=None,
                 query: bool = True):
        from gpuwrite.backends.testbed import api

        self.verbs = v = verbs or api.load()
        self.device, self.port, self.gid_index = device, port, gid_index
        self._stack = ReleaseStack()
        try:
            self.ctx = self._stack.push("context", v.Mlx5Context(
                v.Mlx5DVContextAttr(v.c.CONTEXT_FLAGS_DEVX), name=device))
        except v.PyverbsError as exc:
            raise TestbedError(f"cannot open {device} with DevX: {describe_devx_error(exc)}",
                               getattr(exc, "error_code", None)) from None
        try:
            self.pd = self._stack.push("protection domain", v.PD(self.ctx))
            self.pdn = v.Mlx5DvObj(v.c.OBJ_PD, pd=self.pd).dvpd.pdn
            if query:
                self.query()
        except BaseException as exc:
            close_quietly(self, exc)
            raise

    def query(self) -> dict:
        """Reads the port and device capabilities; returns them for the selftest's line."""
        v = self.verbs
        attr = self.ctx.query_port(self.port)
        if int(attr.state) != v.c.PORT_ACTIVE:
            raise TestbedError(f"{self.device} port {self.port} is not active (state {attr.state})")
        self.lid = int(attr.lid)
        self.link_layer = "ethernet" if int(attr.link_layer) == v.c.LINK_LAYER_ETHERNET else "infiniband"
        self.mtu_bytes = {code: size for size, code in qa.MTU_CODES.items()}[int(attr.active_mtu)]
        self.max_msg_bytes = int(getattr(attr, "max_msg_sz", 0) or 0)
        self.log_msg_max = prm.log_msg_max(self.max_msg_bytes)
        self.gid = str(self.ctx.query_gid(self.port, self.gid_index).gid)
        # RoCE v2 GIDs get a UDP source port; v1 and IB must leave it zero.
        self.roce_v2 = (self.link_layer == "ethernet" and int(
            self.ctx.query_gid_type(self.port, self.gid_index)) == v.c.GID_TYPE_SYSFS_ROCE_V2)
        self.max_dm_bytes = int(self.ctx.query_device_ex().max_dm_size)
        self.eqn = self.ctx.devx_query_eqn(0)
        return {"link_layer": self.link_layer, "roce_v2": self.roce_v2, "lid": self.lid,
                "gid": self.gid, "mtu_bytes": self.mtu_bytes, "max_msg_bytes": self.max_msg_bytes,
                "max_dm_bytes": self.max_dm_bytes, "eqn": self.eqn}

    def next_hop_mac(self, dgid: str) -> str:
        """The Ethernet address frames to ``dgid`` go to, resolved by the kernel (an
        address handle, as NVSHMEM's IBGDA does); see :mod:`ah`."""
        try:
            return self.verbs.resolve_mac(self.ctx.cmd_fd, self.pd.handle, self.port,
                                          self.gid_index, dgid)
        except Exception as exc:  # noqa: BLE001 - ctypes, OSError, MacResolutionError alike
            raise TestbedError(f"cannot resolve the Ethernet address of GID {dgid} from "
                               f"{self.device} port {self.port} GID index {self.gid_index}: {exc}. "
                               "RoCE needs the next hop's MAC in the QP; check that the peer's "
                               "IP answers from this port (ping -I <netdev>)") from None

    def loopback_mac(self) -> str | None:
        """The Ethernet address a QP connected to itself sends to (RoCE: resolved for this
        port's own GID, as for any peer); None on InfiniBand."""
        return self.next_hop_mac(self.gid) if self.link_layer == "ethernet" else None

    def close(self) -> list[str]:
        """Releases the PD, then the context; returns what was released."""
        self.ctx = self.pd = None
        return self._stack.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        close_quietly(self, exc)


# CUDA 12.8 cuda.h: CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE = 0x1 (enum CUmemRangeFlags).
CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE = 0x1
GPU_PAGE_BYTES = 1 << 16


@dataclass
class GpuDmabuf:
    """GPU memory exported as a dma-buf: ``address`` (device), ``fd``, ``size_bytes``,
    and the ``flags`` cuMemGetHandleForAddressRange accepted."""

    address: int
    fd: int
    size_bytes: int
    flags: int

    def register(self, make):
        """``make(fd)`` (a UMEM or MR registration), then closes the fd: the registration
        holds its own reference to the dma-buf, as NVSHMEM's ibgda.cpp closes the fd right
        after mlx5dv_devx_umem_reg_ex. The fd is closed whether or not ``make`` succeeds."""
        try:
            return make(self.fd)
        finally:
            self.close_fd()

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def dmabuf_flag_attempts(driver) -> tuple[int, ...]:
    """The flags to try, in order. Where the GPU reaches the CPU by NVLink-C2C (Grace
    Hopper, Grace Blackwell), a dma-buf exported with flags 0 may be mapped for C2C, which
    a PCIe NIC cannot reach; CUDA 12.8 added the PCIe mapping type for that case. Ask for
    it first and fall back to 0 where the driver refuses it, as aws-ofi-nccl does
    (nccl_net_ofi_cuda_get_dma_buf_fd); a cuda-bindings without the enum gets 0 only."""
    flags = getattr(driver, "CUmemRangeFlags", None)
    if flags is None or not hasattr(flags, "CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE"):
        return (0,)
    return (int(flags.CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE), 0)


def export_dmabuf(driver, nbytes: int) -> GpuDmabuf | None:
    """GPU memory exported as a dma-buf, or None where the driver cannot export
    (proprietary kernel modules, an old driver, no GPU)."""
    size = -(-nbytes // GPU_PAGE_BYTES) * GPU_PAGE_BYTES
    err, address = driver.cuMemAlloc(size)
    if int(err) != 0:
        return None
    if int(address) % PAGE_BYTES:
        driver.cuMemFree(address)
        return None
    kind = driver.CUmemRangeHandleType.CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
    for flags in dmabuf_flag_attempts(driver):
        err, fd = driver.cuMemGetHandleForAddressRange(address, size, kind, flags)
        if int(err) == 0:
            break
    else:
        driver.cuMemFree(address)
        return None
    driver.cuPointerSetAttribute(1, driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                                 int(address))
    return GpuDmabuf(int(address), int(fd), size, flags)


def _gpu_ring_memory(nbytes: int) -> GpuDmabuf | None:
    from gpuwrite.cudaenv import SIMULATOR

    if SIMULATOR:
        return None
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    return export_dmabuf(driver, nbytes)


def alloc_doorbell_uar(verbs, ctx):
    """The UAR whose doorbell register the GPU writes: ``(uar, kind)``.

    rdma-core's ``MLX5DV_UAR_ALLOC_TYPE_NC`` returns the context's singleton non-cached
    UAR (verbs.c ``_mlx5dv_devx_alloc_uar``: ``mlx5_get_singleton_nc_uar``), shared with
    everything else in the process. NVSHMEM's GPU path (ibgda.cpp
    ``ibgda_alloc_and_map_qp_uar``) asks for ``NC_DEDICATED`` where libmlx5 knows it, else
    a BlueFlame UAR (``MLX5DV_UAR_ALLOC_TYPE_BF``, used as a plain doorbell): so does this.
    """
    try:
        return verbs.Mlx5UAR(ctx, verbs.c.UAR_ALLOC_TYPE_NC_DEDICATED), "nc_dedicated"
    except verbs.PyverbsError:
        return verbs.Mlx5UAR(ctx, verbs.c.UAR_ALLOC_TYPE_BF), "bf"


@dataclass(frozen=True)
class DmWindow:
    """Where device memory is registered with CUDA: the mapping from its page start
    (``base``, ``span_bytes``) and the allocation's ``offset`` in it."""

    base: int
    span_bytes: int
    offset: int


def dm_gpu_window(address: int, length: int, need_bytes: int, page_bytes: int = PAGE_BYTES) -> DmWindow:
    """The span of a MEMIC mapping to register with ``cuMemHostRegister``.

    MEMIC is handed out in 64-byte units, so an allocation may start inside a page.
    libmlx5 maps ``align(length, page)`` bytes from that page's start and points the
    allocation ``start_offset & (page - 1)`` bytes in (verbs.c ``mlx5_import_dm``,
    ``dm_mmap``). Registering ``[address, address + length)`` rounded out to pages can run
    past that mapping; this registers exactly the mapping and adds the offset. Raises
    DeviceMemoryError where ``need_bytes`` from the offset do not fit in it.
    """
    from gpuwrite.backends.testbed.dm import DeviceMemoryError

    base = address & ~(page_bytes - 1)
    span = -(-length // page_bytes) * page_bytes
    offset = address - base
    if offset + need_bytes > span:
        raise DeviceMemoryError(f"device memory at 0x{address:x} starts {offset} bytes into its "
                                f"page; the {span}-byte mapping holds {span - offset} bytes from "
                                f"there, fewer than the {need_bytes} staging needs")
    return DmWindow(base, span, offset)


class TestbedQueueSet:
    """``n_qps`` RC QPs with their CQs on the NIC, in the layout the device verbs expect.

    ``ring_memory``: ``"gpu"`` (dma-buf; fails where unsupported), ``"host"`` (pinned
    host memory mapped into the GPU), or ``"auto"`` (GPU where possible). The gpu_push
    staging region is on-NIC device memory, ``stage_slots * stage_slot_bytes`` per QP;
    where it cannot be mapped into the GPU, pinned host memory stands in (the reason is
    printed and kept in ``stage_note``).

    Building is a sequence of steps (``BUILD_STEPS``); the selftest runs them one at a
    time, ``build=True`` runs them all. Everything made is
    released in reverse by ``close()``, also when a step fails.
    """

    # The build, in order (method names); the selftest calls them one by one.
    BUILD_STEPS = ("register_umems", "alloc_uars", "create_cqs", "create_qps", "map_doorbell",
                   "map_staging", "register_bounce")
    STEP_NAMES = {"register_umems": "register UMEMs (rings, doorbell records)",
                  "alloc_uars": "allocate UARs", "create_cqs": "create the CQs",
                  "create_qps": "create the QPs",
                  "map_doorbell": "map the UAR doorbell page into the GPU",
                  "map_staging": "map device memory (staging) into the GPU",
                  "register_bounce": "register the bounce ring"}

    def __init__(self, nic: TestbedNic, n_qps: int, sq_bbs: int = 256, ncqe: int = 256,
                 stage_slots: int = 64, stage_slot_bytes: int = 256, bounce_bytes: int = 64 * 1024,
                 ring_memory: str = "auto", seed: int | None = None, build: bool = True):
        if ring_memory not in ("auto", "gpu", "host"):
            raise ValueError(f"ring_memory={ring_memory!r}: allowed auto, gpu, host")
        if stage_slot_bytes < 64 or stage_slot_bytes & (stage_slot_bytes - 1):
            raise ValueError(f"stage_slot_bytes={stage_slot_bytes}: a power of two, at least 64 "
                             "(the device verbs find slots with shifts)")
        self.nic, self.verbs = nic, nic.verbs
        self.plan = RingPlan(n_qps, sq_bbs, ncqe)
        self.n_qps, self.sq_bbs, self.ncqe = n_qps, sq_bbs, ncqe
        self.stage_slots, self.stage_slot_bytes = stage_slots, stage_slot_bytes
        self.bounce_words = bounce_bytes // 4
        self.ring_memory_wanted = ring_memory
        self.rng = random.Random(seed)
        self._stack = ReleaseStack()
        self.cqs, self.qps, self.cqns_list, self.qpns_list = [], [], [], []
        self.stage_mr = self.dm = None
        self.stage_note = None
        if build:
            try:
                self.build()
                self.finish()
            except BaseException as exc:
                close_quietly(self, exc)
                raise

    def qp_index(self, i) -> int:
        """``i`` as the index of one of this set's QPs, or a ValueError naming it (as the
        emulated QueueSet's)."""
        from gpuwrite.host.verbs import _int_in
        return _int_in("qp", i, 0, self.n_qps - 1, f" (this set has {self.n_qps} QP(s))")

    def build(self, run=None) -> None:
        """Runs ``BUILD_STEPS`` in order, each as ``run(name, step)`` (default: ``step()``);
        ``run`` may name a failed step (``session.py`` does). On failure the caller closes."""
        for method in self.BUILD_STEPS:
            if run is None:
                getattr(self, method)()
            else:
                run(self.STEP_NAMES[method], getattr(self, method))

    @property
    def access(self) -> int:
        c = self.verbs.c
        return c.ACCESS_LOCAL_WRITE | c.ACCESS_REMOTE_WRITE | c.ACCESS_REMOTE_READ

    # --- build steps ---------------------------------------------------------------------

    def register_umems(self) -> str:
        v, plan = self.verbs, self.plan
        gpu = _gpu_ring_memory(plan.ring_bytes) if self.ring_memory_wanted in ("auto", "gpu") else None
        if gpu is None and self.ring_memory_wanted == "gpu":
            raise TestbedError("ring_memory='gpu' needs dma-buf export of GPU memory (NVIDIA open "
                               "kernel modules, r515+); see `gpuwrite doctor`")
        if gpu is not None:
            from cuda.bindings import driver

            self._stack.push("GPU ring memory", lambda: driver.cuMemFree(gpu.address))
            driver.cuMemcpyHtoD(gpu.address, plan.initial_rings(), plan.ring_bytes)
            self.ring_umem = self._stack.push("ring UMEM", gpu.register(lambda fd: v.Mlx5UMEM(
                self.nic.ctx, gpu.size_bytes, 0, PAGE_BYTES, v.c.ACCESS_LOCAL_WRITE, PAGE_BYTES,
                v.c.UMEM_MASK_DMABUF, fd)))
            self.ring_device = gpu.address
            self.ring_memory = f"gpu (dma-buf, flags {gpu.flags:#x})"
        else:
            host = mapped((plan.ring_bytes // 4,), np.uint32)
            host.host[:] = plan.initial_rings()
            self._ring_host = host
            self.ring_device = kernel_address(host)
            self.ring_umem = self._stack.push("ring UMEM", v.Mlx5UMEM(
                self.nic.ctx, plan.ring_bytes, addr=host.address, access=v.c.ACCESS_LOCAL_WRITE))
            self.ring_memory = "host (pinned, mapped into the GPU)"
        self._dbr = mapped((plan.dbr_bytes // 4,), np.uint32)
        self.dbr_umem = self._stack.push("doorbell-record UMEM", v.Mlx5UMEM(
            self.nic.ctx, plan.dbr_bytes, addr=self._dbr.address, access=v.c.ACCESS_LOCAL_WRITE))
        return f"rings in {self.ring_memory}, umem ids {self.ring_umem.umem_id}/{self.dbr_umem.umem_id}"

    def alloc_uars(self) -> str:
        # The QPs' doorbell UAR is the GPU's own (see alloc_doorbell_uar). The CQs are never
        # armed (kernels poll), so their UAR is only named in the CQ context: the
        # context's shared non-cached page, as rdma-core's DevX tests use.
        uar, self.qp_uar_kind = alloc_doorbell_uar(self.verbs, self.nic.ctx)
        self.qp_uar = self._stack.push("QP UAR", uar)
        self.cq_uar = self._stack.push("CQ UAR", self.verbs.Mlx5UAR(
            self.nic.ctx, self.verbs.c.UAR_ALLOC_TYPE_NC))
        return f"QP doorbell UAR {self.qp_uar_kind} page {self.qp_uar.page_id}, CQ UAR page {self.cq_uar.page_id}"

    def create_cqs(self) -> str:
        plan = self.plan
        width = prm.SW_CQC.offsets["c_eqn"][1]
        if not 0 <= self.nic.eqn < 1 << width:
            raise TestbedError(f"EQ number {self.nic.eqn} (completion vector 0) does not fit the "
                               f"CQ context's {width}-bit c_eqn field this backend packs, as "
                               "rdma-core's PRM classes have it; Linux's is 32 bits wide")
        for i in range(self.n_qps):
            cq = self._create(prm.create_cq_in(
                log_cq_size=plan.log_cq_size, uar_page=self.cq_uar.page_id, eqn=self.nic.eqn,
                umem_id=self.ring_umem.umem_id, umem_offset=plan.cq_offset(i),
                dbr_umem_id=self.dbr_umem.umem_id, dbr_offset=plan.cq_dbr_offset(i)),
                prm.CREATE_CQ_OUT, f"CREATE_CQ {i}")
            self.cqs.append(cq)
            self.cqns_list.append(prm.CREATE_CQ_OUT.unpack(cq.out_view)["cqn"])
        self.cqns = np.array(self.cqns_list, dtype=np.int64)
        return "cqn " + ", ".join(f"0x{c:x}" for c in self.cqns_list)

    def _create_qp(self, i: int, ts_format: int):
        plan = self.plan
        return self._create(prm.create_qp_in(
            pdn=self.nic.pdn, cqn=self.cqns_list[i], uar_page=self.qp_uar.page_id,
            log_sq_size=plan.log_sq_size, umem_id=self.ring_umem.umem_id,
            umem_offset=plan.sq_offset(i), dbr_umem_id=self.dbr_umem.umem_id,
            dbr_offset=plan.qp_dbr_offset(i), ts_format=ts_format), prm.CREATE_QP_OUT,
            f"CREATE_QP {i}")

    def create_qps(self) -> str:
        # The first QP is asked for with the DEFAULT timestamp format, as rdma-core's DevX
        # tests do; a device that refuses it with EINVAL is asked again with FREE_RUNNING,
        # what Linux sets where the firmware lacks the qp_ts_format cap (reading that cap
        # takes a QUERY_HCA_CAP this backend does not send). The other QPs use the format
        # the first one was made with.
        self.ts_format = prm.MLX5_QPC_TS_FORMAT_DEFAULT
        for i in range(self.n_qps):
            try:
                qp = self._create_qp(i, self.ts_format)
            except TestbedError as exc:
                if i > 0 or exc.errno != errno.EINVAL:
                    raise
                self.ts_format = prm.MLX5_QPC_TS_FORMAT_FREE_RUNNING
                try:
                    qp = self._create_qp(i, self.ts_format)
                except TestbedError as again:
                    raise TestbedError(f"{again} (and with the default timestamp format: {exc})",
                                       again.errno) from None
            self.qps.append(qp)
            self.qpns_list.append(prm.CREATE_QP_OUT.unpack(qp.out_view)["qpn"])
        self.qpns = np.array(self.qpns_list, dtype=np.int64)
        self.psns = np.array([self.rng.getrandbits(24) for _ in range(self.n_qps)], dtype=np.int64)
        return ("qpn " + ", ".join(f"0x{q:x}" for q in self.qpns_list)
                + f" (timestamp format {prm.TS_FORMAT_NAMES[self.ts_format]})")

    def map_doorbell(self) -> str:
        self.uar_mapping: GpuMapping = self._stack.push(
            "UAR GPU mapping", map_io_into_gpu(self.qp_uar.base_addr, PAGE_BYTES,
                                             self.verbs.io_memory))
        self.uar = doorbell_view(self.uar_mapping.device_address(self.qp_uar.reg_addr), self.n_qps)
        return f"doorbell register 0x{self.qp_uar.reg_addr:x} -> GPU 0x{self.uar_mapping.device_address(self.qp_uar.reg_addr):x}"

    def map_staging(self) -> str:
        """On-NIC device memory, registered zero-based and mapped into the GPU; pinned
        host memory where that fails (the reason is printed). No public code maps MEMIC
        into a GPU (NVSHMEM and DOCA stage in GPU or host memory), so expect the fallback
        on some systems."""
        from gpuwrite.backends.testbed.dm import DeviceMemoryError
        from gpuwrite.backends.testbed.uar import GpuMappingError

        v = self.verbs
        stage_bytes = self.stage_slots * self.stage_slot_bytes
        total = stage_bytes * self.n_qps
        reason = None
        if total > self.nic.max_dm_bytes:
            reason = (f"staging needs {total} bytes of device memory; {self.nic.device} has "
                      f"{self.nic.max_dm_bytes}")
        else:
            try:
                self.dm = self._stack.push("device memory", v.DM(self.nic.ctx, v.AllocDmAttr(total)))
                self.stage_mr = self._stack.push("device-memory MR", v.DMMR(
                    self.nic.pd, total, v.c.ACCESS_LOCAL_WRITE | v.c.ACCESS_ZERO_BASED, self.dm, 0))
                dm_map = self._stack.push("device-memory mapping", v.map_dm(self.nic.ctx.cmd_fd, self.dm.handle))
                window = dm_gpu_window(dm_map.address, dm_map.length, total)
                self.stage_mapping = self._stack.push(
                    "device-memory GPU mapping", map_io_into_gpu(window.base, window.span_bytes,
                                                                 v.io_memory))
                stage_device = self.stage_mapping.device_base + window.offset
                self.stage_addresses = np.arange(self.n_qps) * stage_bytes    # zero-based MR
                self.stage_memory = f"device memory ({total} bytes at offset {window.offset} of its page)"
            except (v.PyverbsError, DeviceMemoryError, GpuMappingError) as exc:
                reason = f"device memory cannot be mapped into the GPU ({exc})"
        if reason is not None:
            self.stage_note = (f"{reason}: gpu_push stages in pinned host memory instead (no public "
                               "code maps MEMIC into a GPU; see backends/testbed/NOTES.md)")
            print(f"gpuwrite testbed: {self.stage_note}", file=sys.stderr)
            host = mapped((self.n_qps, stage_bytes // 4), np.uint32)
            self._stage_host = host
            self.stage_mr = self._stack.push("host staging MR", v.MR(
                self.nic.pd, host.nbytes, v.c.ACCESS_LOCAL_WRITE, address=host.address))
            self.stage = host.kernel
            self.stage_addresses = host.address + np.arange(self.n_qps) * stage_bytes
            self.stage_memory = "host (pinned; device memory unavailable)"
            return f"fallback: {self.stage_note}"
        self.stage = device_view(stage_device, (self.n_qps, stage_bytes // 4), np.uint32)
        return self.stage_memory

    def register_bounce(self) -> str:
        self.bounce = mapped((self.n_qps, self.bounce_words), np.uint32)
        self.bounce_mr = self._stack.push("bounce MR", self.verbs.MR(
            self.nic.pd, self.bounce.nbytes, self.verbs.c.ACCESS_LOCAL_WRITE, address=self.bounce.address))
        return f"{self.bounce.nbytes} bytes, lkey 0x{self.bounce_mr.lkey:x}"

    def finish(self) -> None:
        """The per-QP tables kernels read (``info``) and their state."""
        n, plan = self.n_qps, self.plan
        info = np.zeros((n, dv.I_COLS), dtype=np.int64)
        info[:, dv.I_QPN] = self.qpns
        info[:, dv.I_SQ_BBS] = self.sq_bbs
        info[:, dv.I_NCQE] = self.ncqe
        info[:, dv.I_LOG_NCQE] = plan.log_cq_size
        info[:, dv.I_SLOTS] = self.stage_slots
        info[:, dv.I_SLOT_BYTES] = self.stage_slot_bytes
        info[:, dv.I_SLOT_SHIFT] = self.stage_slot_bytes.bit_length() - 1
        info[:, dv.I_DB_MMIO] = 1     # a real doorbell register: fenced after the record
        info[:, dv.I_STAGE_CQE] = 1   # a real NIC returns staging credits only as completions
        info[:, dv.I_STAGE_ADDR] = self.stage_addresses
        info[:, dv.I_STAGE_LKEY] = self.stage_mr.lkey
        info[:, dv.I_BOUNCE_ADDR] = self.bounce.address + np.arange(n) * self.bounce_words * 4
        info[:, dv.I_BOUNCE_LKEY] = self.bounce_mr.lkey
        info[:, dv.I_BOUNCE_WORDS] = self.bounce_words
        self.info_host = info
        self.info = cuda.to_device(info)
        self.state = device_zeros((n, dv.S_COLS), np.int64)
        self.wqe_aux = device_zeros((n, self.sq_bbs), np.int64)
        self.status = device_zeros((n, L.STATUS_WORDS), np.uint32)
        self._views = plan.device_arrays(self.ring_device, kernel_address(self._dbr))

    def _create(self, command: bytes, out_layout, what: str):
        v = self.verbs
        try:
            obj = v.Mlx5DevxObj(self.nic.ctx, command, out_layout.size_bytes)
        except v.PyverbsError as exc:
            raise TestbedError(f"DevX {what} failed: {describe_devx_error(exc)}",
                               getattr(exc, "error_code", None)) from None
        self._stack.push(what, obj)
        prm.check_output(out_layout, obj.out_view, f"DevX {what}")
        return obj

    @property
    def device_args(self) -> tuple:
        """The tuple ``Q`` kernels pass to the device verbs (order: verbs.Q_*), as the
        emulated QueueSet's."""
        v = self._views
        return (v["sq"], v["dbrec"], self.uar, self.status, v["cq"], v["cqdb"], self.stage,
                self.state, self.info, self.wqe_aux, self.bounce.kernel)

    def connection(self, i: int, *, remote_qpn: int, remote_psn: int, remote_lid: int,
                   remote_gid: str, remote_mtu_bytes: int, remote_mac: str | None,
                   timeout: int = 14, retry_cnt: int = 7) -> qa.QpConnection:
        """QP ``i``'s connection to a peer QP. The GRH is used on RoCE, and on InfiniBand
        where the peer has no LID; the path MTU is the smaller port's."""
        nic = self.nic
        use_grh = nic.link_layer == "ethernet" or remote_lid == 0
        return qa.QpConnection(
            remote_qpn=int(remote_qpn), remote_psn=int(remote_psn), local_psn=int(self.psns[i]),
            mtu_bytes=min(nic.mtu_bytes, remote_mtu_bytes), port_num=nic.port,
            remote_lid=remote_lid, remote_gid=remote_gid if use_grh else None,
            sgid_index=nic.gid_index, remote_mac=remote_mac, timeout=timeout, retry_cnt=retry_cnt)

    def loopback_connection(self, i: int, mac: str | None, **kwargs) -> qa.QpConnection:
        """QP ``i`` connected to itself: its own QPN and PSN, this port's LID, GID and MTU,
        and (RoCE) the MAC ``TestbedNic.loopback_mac`` resolved. Writes it posts leave
        through the port and come back to this host's memory."""
        nic = self.nic
        return self.connection(i, remote_qpn=self.qpns[i], remote_psn=self.psns[i],
                               remote_lid=nic.lid, remote_gid=nic.gid,
                               remote_mtu_bytes=nic.mtu_bytes, remote_mac=mac, **kwargs)

    def connection_commands(self, i: int, conn: qa.QpConnection) -> list[tuple[str, bytes]]:
        """QP ``i``'s three modify commands (RESET -> INIT -> RTR -> RTS) to ``conn``.

        RoCE: the next hop's MAC must be known (``conn.remote_mac``, resolved by the kernel,
        see :meth:`TestbedNic.next_hop_mac`); a RoCE v2 GID gets a non-zero UDP source port
        from the QP numbers (``prm.roce_v2_udp_sport``)."""
        qpn = int(self.qpns[i])
        nic = self.nic
        if nic.link_layer == "ethernet" and not conn.remote_mac:
            raise TestbedError(f"QP 0x{qpn:x}: RoCE needs the next hop's Ethernet address; none "
                               "was resolved for the peer's GID")
        sport = prm.roce_v2_udp_sport(qpn, conn.remote_qpn) if nic.roce_v2 else 0
        return [("RST2INIT", prm.rst2init_in(qpn, qa.init_attrs(conn)[0])),
                ("INIT2RTR", prm.init2rtr_in(qpn, qa.rtr_attrs(conn)[0],
                                             conn.remote_mac if nic.link_layer == "ethernet" else None,
                                             udp_sport=sport, max_msg_log=nic.log_msg_max)),
                ("RTR2RTS", prm.rtr2rts_in(qpn, qa.rts_attrs(conn)[0], conn.port_num))]

    def modify(self, i: int, what: str, command: bytes) -> None:
        """Sends one modify command to QP ``i``; raises TestbedError with the errno and the
        firmware's status and syndrome."""
        v = self.verbs
        qpn = int(self.qpns[i])
        try:
            out = self.qps[i].modify(command, prm.MODIFY_QP_OUT.size_bytes)
        except v.PyverbsError as exc:
            raise TestbedError(f"DevX {what} of QP 0x{qpn:x} failed: {describe_devx_error(exc)}",
                               getattr(exc, "error_code", None)) from None
        prm.check_output(prm.MODIFY_QP_OUT, out, f"DevX {what} of QP 0x{qpn:x}")

    def connect(self, connections: list[qa.QpConnection]) -> None:
        """Takes every QP from RESET through INIT and RTR to RTS with DevX modify
        commands; ``connections[i]`` describes QP ``i``'s peer."""
        if len(connections) != self.n_qps:
            raise ValueError(f"{len(connections)} connections for {self.n_qps} QPs")
        for i, conn in enumerate(connections):
            for what, command in self.connection_commands(i, conn):
                self.modify(i, what, command)

    def gpu_state(self) -> np.ndarray:
        return self.state.copy_to_host()

    def close(self) -> list[str]:
        """Releases everything in reverse order of making (QPs, CQs, UARs, UMEMs last);
        returns what was released."""
        self.qps, self.cqs = [], []
        return self._stack.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        close_quietly(self, exc)


def describe_devx_error(exc) -> str:
    """A pyverbs error with its errno (PyverbsRDMAError's ``error_code``). pyverbs drops
    the command's output when a DevX call fails, so the firmware's status and syndrome
    are then only in the kernel log (mlx5_core prints them: ``dmesg | grep mlx5``)."""
    code = getattr(exc, "error_code", None)
    if code:
        return f"{exc} (errno {code}: {os.strerror(code)})"
    return str(exc)
