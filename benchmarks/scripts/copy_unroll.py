"""Copy GPU memory -> mapped host memory: loads in flight per thread, hot vs cold source."""
import json, os
import numpy as np
from numba import cuda
from gpuwrite.device.intrinsics import ld_v4_u32, st_v4_u32
from gpuwrite.host.memory import mapped

# Every kernel copies `reps` ranges of nwords words (range r from word r * stride_words of
# src; stride 0: the same range, from L2 after the first) to the same destination; `body`
# is the loop over one range (generated: U vectors held in named registers, not an array).
_HEAD = """
def kern(dst, src, nwords, reps, stride_words):
    step = cuda.blockDim.x
    nvec = nwords // 4
    for r in range(reps):
        s0 = (r * stride_words) % (src.shape[0] - nwords + 1)
        j = cuda.threadIdx.x
"""


def _compile(body):
    ns = dict(cuda=cuda, ld_v4_u32=ld_v4_u32, st_v4_u32=st_v4_u32)
    exec(_HEAD + body + "        cuda.syncthreads()\n", ns)
    return cuda.jit(ns["kern"])


def _lines(fmt, U, indent):
    return "".join(" " * indent + fmt.format(k=k) + "\n" for k in range(U))


def make(U):
    """U loads in flight, then their U stores."""
    return _compile(
        f"        while j + {U - 1} * step < nvec:\n"
        + _lines("x{k} = ld_v4_u32(src, s0 + 4 * (j + {k} * step))", U, 12)
        + _lines("st_v4_u32(dst, 4 * (j + {k} * step), x{k}[0], x{k}[1], x{k}[2], x{k}[3])", U, 12)
        + f"            j += {U} * step\n")


def make_pipe(U):
    """Software pipelined: the next U loads are issued before this round's U stores."""
    return _compile(
        _lines("a{k} = ld_v4_u32(src, s0 + 4 * (j + {k} * step))", U, 8)
        + f"        while j + {U - 1} * step < nvec:\n"
        + f"            if j + {2 * U - 1} * step < nvec:\n"
        + _lines("b{k} = ld_v4_u32(src, s0 + 4 * (j + (%d + {k}) * step))" % U, U, 16)
        + "            else:\n"
        + _lines("b{k} = a{k}", U, 16)
        + _lines("st_v4_u32(dst, 4 * (j + {k} * step), a{k}[0], a{k}[1], a{k}[2], a{k}[3])", U, 12)
        + _lines("a{k} = b{k}", U, 12)
        + f"            j += {U} * step\n")


nbytes = 1 << 20
nw = nbytes // 4
dst = mapped((nw,), np.uint32)
src = cuda.to_device(np.arange(512 << 20 >> 2, dtype=np.uint32))   # 512 MiB
kerns = {f"u{U}": make(U) for U in (2, 4, 8, 16)}
kerns.update({f"pipe{U}": make_pipe(U) for U in (4, 8)})
out = {}
for rnd in range(3):
    for name, k in kerns.items():
        for th in (32, 256, 512):
            for mode, stride in (("hot", 0), ("cold", nw + 4096)):
                reps = 20 if th <= 32 else 100
                k[1, th](dst.kernel, src, nw, 1, stride)
                cuda.synchronize()
                s, e = cuda.event(), cuda.event()
                s.record(); k[1, th](dst.kernel, src, nw, reps, stride); e.record(); e.synchronize()
                gb = reps * nbytes / (cuda.event_elapsed_time(s, e) * 1e-3) / 1e9
                out.setdefault(f"{name} th={th} {mode}", []).append(gb)
for key, v in out.items():
    print(f"{key:24s} {min(v):6.2f} {np.median(v):6.2f} {max(v):6.2f} GB/s", flush=True)
json.dump(out, open(os.environ.get("OUT", "/tmp") + "/unroll.json", "w"), indent=1)
