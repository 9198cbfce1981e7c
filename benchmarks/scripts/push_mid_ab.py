"""Same-host A/B (session 25): send_messages for gpu_push as of 514c78c (OLD: the first warp
posts 65 B to 2 KiB), as of a09e14a (NEW: one thread posts whole aligned vectors up to
256 B, dv.push_mid, inside the small branch), NEW2 (push_mid a branch of its own) and NEW3
(push_mid with 64 B loaded before its bookkeeping, not 128); 64, 128 and 256 B, 32 and 256
threads, five rounds in turn. OLD's sources: ``git show 514c78c:gpuwrite/paths/kernels.py >
.wtdiag/old_kernels.py`` and the same for gpuwrite/device/verbs.py. Results:
benchmarks/h100-2026-11-27-session25-ab64-*.jsonl, BENCHMARKS.md session 25.
Usage: python3 benchmarks/scripts/push_mid_ab.py OUT.jsonl"""
import json, sys, types as pytypes
from _ab import block_scope
from gpuwrite.paths import kernels as K, runner

# The variants below are put in place of the block kernel (K._BY_PATH): every table goes to
# it, as every table went to send_messages when this ran (kernels.kernel_scope, since then).
K.kernel_scope = block_scope

K_SRC = open(K.__file__).read()


def mod_from(src, name, inject=None):
    m = pytypes.ModuleType(name)
    m.__file__ = K.__file__
    if inject:
        m.__dict__.update(inject)
    exec(compile(src, K.__file__, "exec"), m.__dict__)
    return m


def old():
    v = mod_from(open(".wtdiag/old_verbs.py").read(), "old_verbs")
    s = open(".wtdiag/old_kernels.py").read()
    s = s.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    s = s.replace("from gpuwrite.device import verbs as dv\n", "dv = VERBS\n")
    # the parameter layout of now (params[P_PATH] is gone; the path is a constant anyway)
    a, b = "P_PATH, P_BATCH,", "P_COLS = 9\n"
    i = s.index(a); j = s.index(b) + len(b)
    s = s[:i] + "P_BATCH, P_TIMEOUT_NS, P_CHUNK_BYTES, P_DST_ADDR, P_RKEY, P_SRC_ADDR, P_SRC_LKEY, P_WAIT_EACH = range(8)\nP_COLS = 8\n" + s[j:]
    assert s.count("path = params[P_PATH] if path_const < 0 else path_const") == 1
    s = s.replace("path = params[P_PATH] if path_const < 0 else path_const", "path = path_const")
    return mod_from(s, "old_k", {"VERBS": v})._send_messages(0)


OLD_BRANCH = """                small = (path == PUSH or path == INLINE) and \\
                    dv.small_ok(path == INLINE, src, src_word, n)
                if small or (path == PUSH and dv.push_mid_ok(src, src_word, n)):
"""


def new2():
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    a = s.index(OLD_BRANCH)
    b = s.index("                    off += n\n                    continue\n", a) + len("                    off += n\n                    continue\n")
    s = s[:a] + """                if (path == PUSH or path == INLINE) and \\
                        dv.small_ok(path == INLINE, src, src_word, n):
                    if tid == 0:
                        status = dv.post_small(q, 0, path == INLINE, src, src_word, n, raddr, rkey,
                                               signaled, timeout)
                        if status == 0 and not last:
                            dv.flush_doorbell(q, 0)
                    off += n
                    continue
                if path == PUSH and dv.push_mid_ok(src, src_word, n):
                    if tid == 0:
                        status = dv.push_mid(q, 0, src, src_word, n, raddr, rkey, signaled, timeout)
                        if status == 0 and not last:
                            dv.flush_doorbell(q, 0)
                    off += n
                    continue
""" + s[b:]
    return mod_from(s, "new2_k")._send_messages(0)


def new3():
    from gpuwrite.device import verbs as V
    vs = open(V.__file__).read()
    a = """    x0 = _load64(src, src_word, chunks)
    x1 = _load64(src, src_word + 16, chunks - 4)
    st, word = push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns)
    if st != OK:
        return st
"""
    assert vs.count(a) == 1
    vs = vs.replace(a, """    x0 = _load64(src, src_word, chunks)
    st, word = push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns)
    if st != OK:
        return st
    x1 = _load64(src, src_word + 16, chunks - 4)
""")
    v = mod_from(vs, "new3_verbs")
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    s = s.replace("from gpuwrite.device import verbs as dv\n", "dv = VERBS\n")
    return mod_from(s, "new3_k", {"VERBS": v})._send_messages(0)


ks = {"NEW": K.send_messages_for("gpu_push"), "OLD": old(), "NEW3": new3()}
K._BY_PATH.pop("gpu_push", None)
out = open(sys.argv[1], "w")
for rnd in range(5):
    for th in (32, 256):
        for size in (64, 128, 256):
            for v in ("OLD", "NEW", "NEW3"):
                K._BY_PATH["gpu_push"] = ks[v]
                r = runner.run("gpu_push", [size] * 2000, n_qps=1, wait_each=True, block_threads=th,
                               stage_slot_bytes=256)
                assert r.delivered == r.messages
                row = dict(round=rnd, v=v, size=size, threads=th, p50=r.latency_p50_us)
                out.write(json.dumps(row) + "\n"); out.flush(); print(row, flush=True)
K._BY_PATH.pop("gpu_push", None)
