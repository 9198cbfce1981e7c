"""Copy GPU memory -> mapped host memory: loads in flight per thread, hot vs cold source."""
import json, os
import numpy as np
from numba import cuda
from gpuwrite.device.intrinsics import ld_v4_u32, st_v4_u32
from gpuwrite.host.memory import mapped

def make(U):
    ld = "\n".join(f"            x{k} = ld_v4_u32(src, s0 + 4 * (j + {k} * step))" for k in range(U))
    st = "\n".join(f"            st_v4_u32(dst, 4 * (j + {k} * step), x{k}[0], x{k}[1], x{k}[2], x{k}[3])" for k in range(U))
    code = f'''
def kern(dst, src, nwords, reps, stride_words):
    step = cuda.blockDim.x
    nvec = nwords // 4
    for r in range(reps):
        s0 = (r * stride_words) % (src.shape[0] - nwords + 1)
        j = cuda.threadIdx.x
        while j + {U - 1} * step < nvec:
{ld}
{st}
            j += {U} * step
        cuda.syncthreads()
'''
    ns = dict(cuda=cuda, ld_v4_u32=ld_v4_u32, st_v4_u32=st_v4_u32)
    exec(code, ns)
    return cuda.jit(ns["kern"])

def make_pipe(U):
    # software pipelined: the next U loads are issued before this round's U stores
    ld = lambda p: "\n".join(f"                {p}{k} = ld_v4_u32(src, s0 + 4 * (j + ({U} + {k}) * step))" for k in range(U))
    code = f'''
def kern(dst, src, nwords, reps, stride_words):
    step = cuda.blockDim.x
    nvec = nwords // 4
    for r in range(reps):
        s0 = (r * stride_words) % (src.shape[0] - nwords + 1)
        j = cuda.threadIdx.x
''' + "\n".join(f"        a{k} = ld_v4_u32(src, s0 + 4 * (j + {k} * step))" for k in range(U)) + f'''
        while j + {U - 1} * step < nvec:
            if j + {2 * U - 1} * step < nvec:
{ld("b")}
            else:
''' + "\n".join(f"                b{k} = a{k}" for k in range(U)) + "\n" + \
    "\n".join(f"            st_v4_u32(dst, 4 * (j + {k} * step), a{k}[0], a{k}[1], a{k}[2], a{k}[3])" for k in range(U)) + "\n" + \
    "\n".join(f"            a{k} = b{k}" for k in range(U)) + f'''
            j += {U} * step
        cuda.syncthreads()
'''
    ns = dict(cuda=cuda, ld_v4_u32=ld_v4_u32, st_v4_u32=st_v4_u32)
    exec(code, ns)
    return cuda.jit(ns["kern"])

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
