"""``api.Session(world="testbed")``: the put/signal/quiet kernels on one local mlx5 NIC.

:class:`TestbedSession` brings up ``n_qps`` RC QPs on one port, each connected to itself
(loopback, as ``gpuwrite testbed --selftest`` connects its QP), and hands
``api.Session`` the same tuple ``Q`` the emulated queues give: the kernels, ``cfg`` and
the Session calls do not change. What stands in for what:

* the peer's receive buffers: pinned host memory of this host, mapped into the GPU (a
  kernel can poll it) and registered with the NIC for remote writes (``receive``);
* the network: the NIC's loopback. A write leaves through the port's send pipeline and
  comes back to this host's memory; no wire, no switch, no second host, so times are a
  lower bound on a two-host run (``gpuwrite testbed`` runs one, ``runner.py``);
* nic_pull's source: GPU memory registered for the NIC to read (``source``), so that the
  MR's address space is the GPU's own addresses (see :func:`register_gpu_source`): the
  address a kernel's put computes from its source array is what the WQE must carry.

Bring-up order (each step named in the error where one fails): open the device with
DevX, query the port, the queue set's steps (UMEMs, UARs, CQs, QPs, doorbell, staging,
bounce ring), the loopback MAC, each QP RESET -> INIT -> RTR -> RTS, the QP tables.
``close()`` releases everything last-made-first; an MR is always deregistered before
the memory under it is freed, and where the NIC refuses to let go of it the memory is
kept for the life of the process (``RETAINED``) instead of being freed under it.

Nothing here has run on a NIC (see NOTES.md); the order and the bytes were checked on
the fake of pyverbs/DevX in tests/testbed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwrite.backends.testbed import probe
from gpuwrite.backends.testbed.devx import (ReleaseStack, TestbedError, TestbedNic,
                                            TestbedQueueSet, close_quietly)
from gpuwrite.host.memory import describe, mapped

# Registrations (and queue sets) whose release the NIC refused: the memory they name stays
# allocated until the process ends, since the NIC may still write there.
RETAINED: list = []


@dataclass(frozen=True)
class Region:
    """A buffer registered with the NIC, as kernels name it. ``address`` is its first byte
    in the MR's address space (what a WQE carries); for testbed sources it equals the
    buffer's GPU address, as in emulated mode. ``registration`` says how it was made."""

    address: int
    length: int
    lkey: int
    rkey: int
    access: int
    registration: str


class Registration:
    """An MR and the memory under it, released as one: the MR first, then the memory.
    Where the deregistration fails the memory is kept (``RETAINED``), never freed under
    a registration the NIC may still use."""

    def __init__(self, what: str, mr, free=None, keep=None):
        self.what, self.mr, self._free, self._keep = what, mr, free, keep

    def close(self) -> None:
        if self.mr is None:
            return
        try:
            self.mr.close()
        except BaseException:
            RETAINED.append(self)
            raise
        self.mr = None
        if self._free is not None:
            self._free()
        self._free = self._keep = None


class CudaGpuMemory:
    """GPU memory for sources through the CUDA driver: exported as a dma-buf where the
    driver can (``devx.export_dmabuf``), else None (no GPU, cuda-bindings, or dma-buf)."""

    def export(self, nbytes: int):
        from gpuwrite.backends.testbed.devx import _gpu_ring_memory

        return _gpu_ring_memory(nbytes)

    def copy_in(self, address: int, words: np.ndarray) -> None:
        from cuda.bindings import driver

        driver.cuMemcpyHtoD(address, words, words.nbytes)

    def free(self, address: int) -> None:
        from cuda.bindings import driver

        driver.cuMemFree(address)


def register_gpu_source(nic, words: np.ndarray, access: int, release: ReleaseStack, gpu=None):
    """``words`` copied to GPU memory and registered for the NIC to read: (device array,
    :class:`Region`). ``release`` takes the registration.

    The MR's address space is the GPU address, so nic_pull's WQE carries what a kernel
    computes from the array (``api.put``: ``address_of(src, src_word)``):

    1. dma-buf (GPU memory exported by the driver): registered with ``iova`` = its GPU
       address (``verbs.reg_dmabuf_mr``; NCCL registers dma-bufs the same way). pyverbs'
       ``DmaBufMR`` cannot: it passes the dma-buf offset as iova, so its addresses are
       offsets in the dma-buf;
    2. else the GPU address registered as ordinary memory, which needs nvidia_peermem.
    """
    from gpuwrite.backends.testbed.uar import device_view
    from gpuwrite.cudaenv import cuda

    v = nic.verbs
    gpu = gpu or CudaGpuMemory()
    why_not_dmabuf = "no dma-buf export here (no GPU, cuda-bindings or driver support)"
    exported = gpu.export(words.nbytes)
    if exported is not None:
        try:
            gpu.copy_in(exported.address, words)
            mr = exported.register(lambda fd: v.reg_dmabuf_mr(
                nic.ctx.cmd_fd, nic.pd.handle, fd, 0, exported.size_bytes, exported.address,
                access))
        except Exception as exc:  # noqa: BLE001 - the reason goes into the fallback's error
            exported.close_fd()
            gpu.free(exported.address)
            why_not_dmabuf = f"dma-buf registration failed ({type(exc).__name__}: {exc})"
        else:
            release.push("source MR (dma-buf)", Registration(
                "source MR (dma-buf)", mr, free=lambda: gpu.free(exported.address)))
            array = device_view(exported.address, words.shape, np.uint32)
            return array, Region(exported.address, words.nbytes, mr.lkey, mr.rkey, access,
                                 f"dma-buf (flags {exported.flags:#x}), iova = its GPU address")
    array = cuda.to_device(words)
    address = describe(array)[0]
    try:
        mr = v.MR(nic.pd, words.nbytes, access, address=address)
    except v.PyverbsError as exc:
        raise TestbedError(f"GPU memory cannot be registered with {nic.device}: {why_not_dmabuf}; "
                           f"registering its GPU address failed too ({exc}: is nvidia_peermem "
                           "loaded?)", getattr(exc, "error_code", None)) from None
    release.push("source MR", Registration("source MR", mr, keep=array))
    return array, Region(address, words.nbytes, mr.lkey, mr.rkey, access,
                         f"nvidia_peermem ({why_not_dmabuf})")


def _step(name: str, fn):
    """``fn()``; a failure is re-raised as a TestbedError naming the step."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every failure is named by its step
        code = getattr(exc, "errno", None) or getattr(exc, "error_code", None)
        raise TestbedError(f"testbed session: step '{name}' failed: {type(exc).__name__}: {exc}",
                           code) from exc


class TestbedSession:
    """The NIC side of ``api.Session(world="testbed")``: a TestbedQueueSet of ``n_qps``
    loopback QPs and the session's registered buffers."""

    __test__ = False

    def __init__(self, n_qps: int, *, device: str, port: int = 1, gid_index: int = 0,
                 sq_bbs: int = 256, ncqe: int = 256, stage_slots: int = 64,
                 stage_slot_bytes: int = 256, bounce_bytes: int = 64 * 1024,
                 ring_memory: str = "auto", qp_timeout: int = 14, retry_cnt: int = 7,
                 seed: int | None = None, gpu=None):
        self.device, self.port, self.n_qps = device, port, n_qps
        self.gpu = gpu
        self.sources: list[Region] = []
        self._stack = ReleaseStack()
        try:
            self.nic = self._stack.push("NIC", _step(
                "open the device with DevX",
                lambda: TestbedNic(device, port, gid_index, query=False)))
            _step("query port and device capabilities", self.nic.query)
            self.queues = self._stack.push("queue set", TestbedQueueSet(
                self.nic, n_qps, sq_bbs=sq_bbs, ncqe=ncqe, stage_slots=stage_slots,
                stage_slot_bytes=stage_slot_bytes, bounce_bytes=bounce_bytes,
                ring_memory=ring_memory, seed=seed, build=False))
            self.queues.build(_step)
            mac = _step("resolve the loopback MAC (address handle)", self.nic.loopback_mac)
            for i in range(n_qps):
                conn = self.queues.loopback_connection(i, mac, timeout=qp_timeout,
                                                       retry_cnt=retry_cnt)
                for what, command in self.queues.connection_commands(i, conn):
                    _step(f"QP {i} {what} (connected to itself)",
                          lambda: self.queues.modify(i, what, command))
            _step("write the QP tables", self.queues.finish)
        except BaseException as exc:
            close_quietly(self._stack, exc)
            raise

    @property
    def device_args(self) -> tuple:
        return self.queues.device_args

    def source(self, words: np.ndarray):
        """``words`` (uint32) in GPU memory, registered for the NIC to read (local write
        access, as emulated mode's): (device array, :class:`Region`)."""
        c = self.nic.verbs.c
        words = np.ascontiguousarray(words, dtype=np.uint32)
        array, region = _step("register a source buffer", lambda: register_gpu_source(
            self.nic, words, c.ACCESS_LOCAL_WRITE, self._stack, self.gpu))
        self.sources.append(region)
        return array, region

    def receive(self, nwords: int, fill: int = 0):
        """``nwords`` uint32 of pinned host memory mapped into the GPU, registered for
        remote writes (not relaxed-ordered: put_signal's signal must land after its data):
        (``host.memory.Mapped``, :class:`Region`)."""
        if int(nwords) < 1:
            raise ValueError(f"nwords={nwords}: at least 1")
        v = self.nic.verbs
        access = v.c.ACCESS_LOCAL_WRITE | v.c.ACCESS_REMOTE_WRITE
        buf = mapped((int(nwords),), np.uint32)
        buf.host[:] = np.uint32(fill)
        mr = _step("register a receive buffer",
                   lambda: v.MR(self.nic.pd, buf.nbytes, access, address=buf.address))
        self._stack.push("receive MR", Registration("receive MR", mr, keep=buf))
        return buf, Region(buf.address, buf.nbytes, mr.lkey, mr.rkey, access,
                           "pinned host memory mapped into the GPU")

    def describe(self) -> str:
        """What stands in for what, in one line (the apps print it)."""
        nic, qs = self.nic, self.queues
        sources = self.sources[-1].registration if self.sources else "none registered yet"
        return (f"testbed: {self.device} port {self.port} ({nic.link_layer}), {self.n_qps} RC "
                f"QPs each connected to itself (NIC loopback stands in for the network and a "
                f"second host); receive buffers: this host's pinned memory; rings in "
                f"{qs.ring_memory}; gpu_push staging in {qs.stage_memory}; nic_pull sources: "
                f"{sources}")

    def close(self) -> list[str]:
        """Releases everything last-made-first; returns what was released."""
        try:
            return self._stack.close()
        except TestbedError:
            RETAINED.append(self)
            raise


# What ``api.Session(world="testbed", testbed={...})`` may set besides ``device`` (the
# queue sizes come from the Session's own arguments); ``gpu`` replaces CudaGpuMemory.
OPTIONS = ("port", "gid_index", "ring_memory", "qp_timeout", "retry_cnt", "seed", "gpu")


def open_session(n_qps: int, options: dict | None = None, **sizes) -> TestbedSession:
    """A :class:`TestbedSession`; ``options`` are the user's (``device``, default the first
    mlx5 device, and ``OPTIONS``), ``sizes`` the queue sizes the Session computed. Raises
    ``api.TestbedNotReady`` with a one-line reason where this machine cannot run it."""
    from gpuwrite.device.api import TestbedNotReady

    options = dict(options or {})
    unknown = sorted(set(options) - {"device", *OPTIONS})
    if unknown:
        raise ValueError(f"testbed options {', '.join(map(repr, unknown))}: allowed device, "
                         f"{', '.join(OPTIONS)}")
    device = options.pop("device", None)
    avail = probe(device)
    if not avail.ok:
        raise TestbedNotReady(f"testbed mode unavailable: {avail.reason}")
    device = device or next(d for d in avail.devices if d.startswith("mlx5"))
    return TestbedSession(n_qps, device=device, **options, **sizes)
