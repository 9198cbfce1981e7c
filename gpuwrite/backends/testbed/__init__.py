"""Testbed mode: the same kernels against a real mlx5 NIC (pyverbs, DevX).

What it builds (see the modules):

``devx``       CQs and RC QPs created with DevX commands (``prm``) in registered memory
               (GPU memory through dma-buf where supported, else pinned host memory),
               taken to RTS with the peer's QPN, PSN, LID/GID and MTU (``qp_attrs``)
``uar``        the UAR doorbell page and on-NIC device memory mapped into the GPU
               (``cuMemHostRegister`` with IOMEMORY|DEVICEMAP through cuda-bindings)
``dm``         ``ibv_alloc_dm`` memory: the gpu_push staging region, mapped for the GPU
``bootstrap``  two hosts exchange QP numbers, GIDs, rkeys and addresses (mpi4py or TCP)
``runner``     runs a workload and returns the emulated runner's result table
``session``    ``api.Session(world="testbed")``: loopback QPs on one NIC for put/signal/quiet
               kernels, sources registered at their GPU addresses (``dmabuf_mr``)

Without an RDMA device (or pyverbs, or a GPU) nothing here runs: ``probe()`` gives the
one-line reason, and ``gpuwrite testbed`` prints it and exits with ``EXIT_UNAVAILABLE``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Exit status of `gpuwrite testbed` when this machine cannot run testbed mode (2 is a
# usage error, 1 a run where some messages were not delivered).
EXIT_UNAVAILABLE = 3


@dataclass(frozen=True)
class Availability:
    """Whether testbed mode can run here: ``reason`` is None, or one line saying why not."""

    reason: str | None
    devices: tuple[str, ...] = ()
    details: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.reason is None


def probe(device: str | None = None, need_gpu: bool = True) -> Availability:
    """Checks, cheapest first: pyverbs, an RDMA device, an mlx5 one, a GPU, cuda-bindings
    (the last two only with ``need_gpu``: the selftest runs its NIC steps without one)."""
    from gpuwrite.backends.testbed._pyverbs import PyverbsMissing, import_pyverbs

    try:
        import_pyverbs()
    except PyverbsMissing as exc:
        return Availability(f"no pyverbs: {exc}")
    import pyverbs.device as pd
    from pyverbs.pyverbs_error import PyverbsError

    try:
        names = tuple(d.name.decode() if isinstance(d.name, bytes) else str(d.name)
                      for d in pd.get_device_list())
    except PyverbsError as exc:
        return Availability(f"no RDMA device: pyverbs could not list devices ({exc}); this "
                            "machine has no RDMA kernel support or no NIC")
    if not names:
        return Availability("no RDMA device: pyverbs lists none")
    mlx5 = tuple(n for n in names if n.startswith("mlx5"))
    if device is not None and device not in names:
        return Availability(f"no RDMA device named {device!r} (found: {', '.join(names)})", names)
    if not mlx5 or (device is not None and not device.startswith("mlx5")):
        return Availability(f"no mlx5 device (found: {', '.join(names)}): testbed mode writes mlx5 "
                            "WQEs", names)
    if not need_gpu:
        return Availability(None, names)
    from gpuwrite.cudaenv import SIMULATOR

    if SIMULATOR:
        return Availability("no GPU: kernels would run on Numba's CUDA simulator, which cannot "
                            "reach a NIC's doorbell", names)
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError as exc:
        return Availability(f"cuda-bindings does not import ({exc}): it maps the NIC's doorbell "
                            "page into the GPU (pip install cuda-bindings)", names)
    return Availability(None, names)
