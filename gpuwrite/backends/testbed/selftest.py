"""``gpuwrite testbed --selftest``: the bring-up on one host, one step at a time.

The first run on a ConnectX NIC will meet something no machine of this project could
test. The selftest takes one RC QP through every stage the testbed backend depends on,
connected to itself (loopback: its own QP number, GID and, on RoCE, the MAC the kernel
resolves for its own GID), and reports each step as passed, failed (with the errno and
the firmware's status and syndrome where the NIC returned them) or skipped (with the
reason). It stops at the first failure, releases everything it made in reverse order
(QP, CQ, UARs, UMEMs: rdma-core's DevX order) and says what to send in a bug report.

The steps (``STEPS``) follow the order the backend builds queues in; the CPU posts a NOP
and an RDMA write before any GPU step, so a failure of the GPU mapping is told apart
from one of the queues themselves.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

import numpy as np

from gpuwrite import layouts as L

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
LOOPBACK_BYTES = 64
BUG_REPORT = (
    "Please open an issue with: this output (run again with --json), `ibv_devinfo -v`, "
    "`dmesg | grep -i mlx5 | tail -50` (the firmware's status and syndrome of a refused DevX "
    "command are logged there), `nvidia-smi -q | head -40`, the rdma-core version "
    "(`dpkg -l rdma-core` or `rpm -q rdma-core`), and `git rev-parse HEAD` of gpuwrite.")


@dataclass
class StepResult:
    """One line of the selftest: ``status`` is passed, failed or skipped."""

    step: str
    status: str
    detail: str = ""
    errno: int | None = None
    status_code: int | None = None      # the DevX command's status byte (firmware)
    syndrome: int | None = None         # the DevX command's syndrome (firmware)

    def line(self) -> str:
        text = f"{self.status:>7}  {self.step}"
        if self.detail:
            text += f": {self.detail}"
        return text


@dataclass
class SelftestReport:
    device: str
    steps: list[StepResult] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    release_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.release_error is None and all(s.status != FAILED for s in self.steps)

    def to_dict(self) -> dict:
        return {"mode": "testbed-selftest", "ran": True, "device": self.device, "ok": self.ok,
                "steps": [asdict(s) for s in self.steps], "released": self.released,
                "release_error": self.release_error,
                "bug_report": None if self.ok else BUG_REPORT}


class Skip(Exception):
    """A step that cannot run here; the message says why."""


class Selftest:
    """The state the steps share: the NIC, the queue set, the loopback buffers."""

    def __init__(self, device: str, port: int, gid_index: int, verbs, completion_timeout_s: float):
        self.device, self.port, self.gid_index = device, port, gid_index
        self.verbs = verbs
        self.timeout_s = completion_timeout_s
        self.nic = self.qs = self.buffers = self.poster = None
        self.peer_mac = None

    # --- steps ---------------------------------------------------------------------------

    def open_device(self) -> str:
        from gpuwrite.backends.testbed.devx import TestbedNic

        self.nic = TestbedNic(self.device, self.port, self.gid_index, verbs=self.verbs, query=False)
        return f"{self.device} opened with DevX, pdn 0x{self.nic.pdn:x}"

    def query_caps(self) -> str:
        caps = self.nic.query()
        return ", ".join(f"{k} {v}" for k, v in caps.items())

    def make_queue_set(self) -> None:
        from gpuwrite.backends.testbed.devx import ReleaseStack, TestbedQueueSet

        # Host rings: the CPU steps write WQEs and read CQEs directly. GPU rings (dma-buf)
        # have their own step below.
        self.qs = TestbedQueueSet(self.nic, 1, sq_bbs=64, ncqe=64, stage_slots=8, stage_slot_bytes=256,
                                  bounce_bytes=4096, ring_memory="host", seed=1, build=False)
        self.buffers = ReleaseStack()

    def dmabuf_umem(self) -> str:
        from gpuwrite.backends.testbed.devx import PAGE_BYTES, _gpu_ring_memory

        gpu = _gpu_ring_memory(1 << 16)
        if gpu is None:
            raise Skip("no GPU memory exported as a dma-buf here (no GPU, cuda-bindings, or a "
                       "driver with dma-buf export): rings stay in pinned host memory")
        from cuda.bindings import driver

        v = self.verbs
        self.buffers.push("GPU dma-buf memory", lambda: driver.cuMemFree(gpu.address))
        umem = self.buffers.push("dma-buf UMEM", gpu.register(lambda fd: v.Mlx5UMEM(
            self.nic.ctx, gpu.size_bytes, 0, PAGE_BYTES, v.c.ACCESS_LOCAL_WRITE, PAGE_BYTES,
            v.c.UMEM_MASK_DMABUF, fd)))
        return f"{gpu.size_bytes} bytes of GPU memory, dma-buf flags {gpu.flags:#x}, umem id {umem.umem_id}"

    def resolve_mac(self) -> str:
        if self.nic.link_layer != "ethernet":
            raise Skip("InfiniBand port: no Ethernet address in the QP")
        self.peer_mac = self.nic.loopback_mac()
        return f"GID {self.nic.gid} -> {self.peer_mac}" + (" (RoCE v2)" if self.nic.roce_v2 else " (RoCE v1)")

    def transition(self, index: int) -> str:
        what, command = self.qs.connection_commands(0, self.qs.loopback_connection(0, self.peer_mac))[index]
        self.qs.modify(0, what, command)
        return f"QP 0x{int(self.qs.qpns[0]):x} {what}"

    def register_buffers(self) -> str:
        from gpuwrite.host.memory import mapped

        v = self.verbs
        self.src = mapped((LOOPBACK_BYTES,), np.uint8)
        self.dst = mapped((LOOPBACK_BYTES,), np.uint8)
        self.src.host[:] = (np.arange(LOOPBACK_BYTES) * 7 + 3).astype(np.uint8)
        self.src_mr = self.buffers.push("source MR", v.MR(
            self.nic.pd, LOOPBACK_BYTES, v.c.ACCESS_LOCAL_WRITE, address=self.src.address))
        self.dst_mr = self.buffers.push("destination MR", v.MR(
            self.nic.pd, LOOPBACK_BYTES, v.c.ACCESS_LOCAL_WRITE | v.c.ACCESS_REMOTE_WRITE,
            address=self.dst.address))
        self.qs.finish()
        self.poster = cpu_poster(self.qs)
        return f"lkey 0x{self.src_mr.lkey:x}, rkey 0x{self.dst_mr.rkey:x}"

    def _cpu_post(self, wqe: bytes, what: str):
        self.poster.write(wqe)
        self.poster.ring()
        ring_doorbell_cpu(self.qs.qp_uar.reg_addr, wqe)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            comp = self.poster.poll()
            if comp is not None:
                if not comp.ok:
                    raise CompletionError(f"{what}: error completion {comp.describe()}", comp.syndrome)
                return comp
            time.sleep(0.001)
        raise CompletionError(f"{what}: no completion within {self.timeout_s:g} s (is the QP in "
                              "RTS? did the doorbell reach the NIC?)", None)

    def cpu_nop(self) -> str:
        from gpuwrite.host import wqe as W

        index = self.poster.pi & 0xFFFF
        nop = W.ctrl_seg(L.OPCODE_NOP, index, int(self.qs.qpns[0]), 1).tobytes() + bytes(48)
        comp = self._cpu_post(nop, "NOP")
        return f"completion for WQE {comp.wqe_counter}"

    def cpu_write(self) -> str:
        from gpuwrite.host import wqe as W

        self.dst.host[:] = 0
        write = W.rdma_write(self.poster.pi & 0xFFFF, int(self.qs.qpns[0]), self.src.address,
                             self.src_mr.lkey, LOOPBACK_BYTES, self.dst.address, self.dst_mr.rkey)
        self._cpu_post(write, "RDMA write")
        check_arrived(self.src.host, self.dst.host)
        return f"{LOOPBACK_BYTES} bytes written through the loopback QP and read back"

    def gpu_write(self) -> str:
        from gpuwrite.cudaenv import SIMULATOR

        if SIMULATOR:
            raise Skip("no GPU: kernels would run on Numba's CUDA simulator, which cannot reach "
                       "the NIC's doorbell")
        self.dst.host[:] = 0
        self.gpu_out = gpu_post_and_poll(self.qs, self.poster, self.src.address, self.src_mr.lkey,
                                         self.dst.address, self.dst_mr.rkey, self.timeout_s)
        return "kernel wrote the WQE, the doorbell record and the doorbell"

    def gpu_poll(self) -> str:
        if getattr(self, "gpu_out", None) is None:
            raise Skip("the GPU did not post (see above)")
        result = int(self.gpu_out[0])
        if result != 1:
            raise CompletionError(f"poll_cq in the kernel returned {result} (1: a completion; 0: "
                                  "none before the timeout; negative: an error CQE)", None)
        check_arrived(self.src.host, self.dst.host)
        return f"completion polled by the GPU; {LOOPBACK_BYTES} bytes arrived"

    def release(self) -> list[str]:
        from gpuwrite.backends.testbed.devx import TestbedError

        released, errors = [], []
        for owner in (self.buffers, self.qs, self.nic):
            if owner is None:
                continue
            try:
                released += owner.close() or []
            except TestbedError as exc:
                errors.append(str(exc))
        if errors:
            raise ReleaseError("; ".join(errors), released)
        return released


class CompletionError(RuntimeError):
    def __init__(self, message: str, syndrome: int | None):
        super().__init__(message)
        self.syndrome = syndrome


class ReleaseError(RuntimeError):
    def __init__(self, message: str, released: list[str]):
        super().__init__(message)
        self.released = released


def _qs_step(method: str):
    return lambda t: getattr(t.qs, method)()


# (name, function of a Selftest): the bring-up, in order.
STEPS = (
    ("open the device with DevX", lambda t: t.open_device()),
    ("query port and device capabilities", lambda t: t.query_caps()),
    ("register UMEMs (rings, doorbell records)", lambda t: (t.make_queue_set(), t.qs.register_umems())[1]),
    ("register GPU memory as a UMEM (dma-buf)", lambda t: t.dmabuf_umem()),
    ("allocate UARs", _qs_step("alloc_uars")),
    ("create the CQ", _qs_step("create_cqs")),
    ("create the QP", _qs_step("create_qps")),
    ("resolve the loopback MAC (address handle)", lambda t: t.resolve_mac()),
    ("RESET -> INIT", lambda t: t.transition(0)),
    ("INIT -> RTR", lambda t: t.transition(1)),
    ("RTR -> RTS", lambda t: t.transition(2)),
    ("map the UAR doorbell page into the GPU", _qs_step("map_doorbell")),
    ("map device memory (staging) into the GPU", _qs_step("map_staging")),
    ("register the bounce ring", _qs_step("register_bounce")),
    ("register the loopback buffers", lambda t: t.register_buffers()),
    ("post a NOP from the CPU", lambda t: t.cpu_nop()),
    ("RDMA write from the CPU", lambda t: t.cpu_write()),
    ("RDMA write from the GPU", lambda t: t.gpu_write()),
    ("poll the completion from the GPU", lambda t: t.gpu_poll()),
)


def _failure(name: str, exc: BaseException) -> StepResult:
    from gpuwrite.backends.testbed.prm import DevxCommandError

    result = StepResult(name, FAILED, f"{type(exc).__name__}: {exc}")
    result.errno = getattr(exc, "errno", None) or getattr(exc, "error_code", None)
    if isinstance(exc, DevxCommandError):
        result.status_code, result.syndrome = exc.status, exc.syndrome
    elif isinstance(exc, CompletionError):
        result.syndrome = exc.syndrome
    return result


def run(device: str, port: int = 1, gid_index: int = 0, verbs=None, completion_timeout_s: float = 2.0,
        echo=None) -> SelftestReport:
    """Runs every step until one fails; releases everything; ``echo(line)`` sees each line
    as it is decided (so a hang shows where it is)."""
    if verbs is None:
        from gpuwrite.backends.testbed import api

        verbs = api.load()
    t = Selftest(device, port, gid_index, verbs, completion_timeout_s)
    report = SelftestReport(device)
    failed = None
    for name, step in STEPS:
        if failed is not None:
            result = StepResult(name, SKIPPED, f"not run: '{failed}' failed")
        else:
            try:
                result = StepResult(name, PASSED, step(t) or "")
            except Skip as why:
                result = StepResult(name, SKIPPED, str(why))
            except Exception as exc:  # noqa: BLE001 - every failure becomes the step's line
                result = _failure(name, exc)
                failed = name
        report.steps.append(result)
        if echo is not None:
            echo(result.line())
    try:
        report.released = t.release()
    except ReleaseError as exc:
        report.released, report.release_error = exc.released, str(exc)
    return report


def cpu_poster(qs):
    """A HostPoster (the emulated backend's host-side posting) over the testbed QP 0's
    host rings: the same WQE writes, doorbell record and CQE reads."""
    from gpuwrite.host.wqe import HostPoster

    plan = qs.plan
    ring = qs._ring_host.host
    sq = ring[plan.sq_offset(0) // 4:plan.sq_offset(qs.n_qps) // 4].reshape(qs.n_qps, -1)
    cq = ring[plan.cq_offset(0) // 4:].reshape(qs.n_qps, -1)
    dbr = qs._dbr.host
    view = SimpleNamespace(
        qpns=qs.qpns, sq_bbs=qs.sq_bbs, ncqe=qs.ncqe, sq=SimpleNamespace(host=sq),
        cq=SimpleNamespace(host=cq),
        dbrec=SimpleNamespace(host=dbr[:2 * qs.n_qps].reshape(qs.n_qps, 2)),
        cqdb=SimpleNamespace(host=dbr[2 * qs.n_qps:4 * qs.n_qps].reshape(qs.n_qps, 2)),
        qp_index=qs.qp_index)
    return HostPoster(view, 0)


def ring_doorbell_cpu(register_address: int, wqe: bytes) -> None:
    """The 8-byte doorbell: the WQE's first 8 bytes, one 64-bit store to the UAR register
    (rdma-core tests/mlx5_base.py ``post_send``: ``mmio_write64_as_be`` of the control
    segment's first word). The doorbell record was written before it (HostPoster.ring)."""
    ctypes.c_uint64.from_address(register_address).value = int.from_bytes(wqe[:8], "little")


def check_arrived(src: np.ndarray, dst: np.ndarray) -> None:
    if not np.array_equal(src, dst):
        first = int(np.flatnonzero(src != dst)[0])
        raise CompletionError(f"the completion came but the bytes did not: first difference at "
                              f"byte {first} (sent {int(src[first])}, found {int(dst[first])})", None)


def gpu_post_and_poll(qs, poster, laddr: int, lkey: int, raddr: int, rkey: int, timeout_s: float):
    """One kernel: write an RDMA-write WQE, ring the doorbell, poll its completion (the
    device verbs the data paths use). Continues QP 0's producer index where the CPU left it."""
    from gpuwrite.cudaenv import cuda
    from gpuwrite.device import verbs as dv

    state = qs.state.copy_to_host()
    state[0, dv.S_PI] = state[0, dv.S_DB_PI] = state[0, dv.S_DONE] = poster.pi
    state[0, dv.S_CQ_CI] = state[0, dv.S_CQ_PUB] = poster.ci     # the CPU published its ci
    qs.state.copy_to_device(state)
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    _gpu_loopback_kernel()[1, 1](qs.device_args, laddr, lkey, LOOPBACK_BYTES, raddr, rkey,
                                 int(timeout_s * 1e9), out)
    cuda.synchronize()
    return out.copy_to_host()


_KERNEL = None


def _gpu_loopback_kernel():
    global _KERNEL
    if _KERNEL is None:
        from gpuwrite.cudaenv import cuda
        from gpuwrite.device import intrinsics as I
        from gpuwrite.device import verbs as dv

        @cuda.jit
        def kernel(Q, laddr, lkey, nbytes, raddr, rkey, timeout_ns, out):
            dv.wqe_rdma_write(Q, 0, laddr, lkey, nbytes, raddr, rkey, True, 0)
            dv.ring_doorbell(Q, 0)
            start = I.globaltimer_ns()
            result = 0
            while result == 0 and I.globaltimer_ns() - start < timeout_ns:
                result = dv.poll_cq(Q, 0)
            out[0] = result
            out[1] = I.globaltimer_ns() - start

        _KERNEL = kernel
    return _KERNEL
