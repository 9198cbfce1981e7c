# gpuwrite.cudaenv must choose the CUDA simulator before anything imports numba (the model
# does, through doctor): numba reads NUMBA_ENABLE_CUDASIM once, when it is first imported.
import gpuwrite.cudaenv  # noqa: F401
