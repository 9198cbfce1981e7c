"""Where kernels send their data: the backends of gpuwrite.

``emulated``  a real GPU (or Numba's CUDA simulator) with the software NIC engine
              (``gpuwrite.host``, ``gpuwrite.paths.runner``).
``testbed``   a real GPU with a real mlx5 NIC through pyverbs and DevX
              (``gpuwrite.backends.testbed``): the same kernels write real WQEs and ring
              the NIC's doorbell.

``availability()`` says, in one line per backend, whether it can run on this machine.
"""
from __future__ import annotations

BACKENDS = ("emulated", "testbed")


def availability() -> dict[str, str | None]:
    """Backend -> None if it can run here, else the one-line reason it cannot."""
    from gpuwrite.backends import testbed

    return {"emulated": None, "testbed": testbed.probe().reason}
