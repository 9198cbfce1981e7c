"""An adversarial driver of the NIC engine through its C interface, without kernels.

It plays a GPU that writes anything a kernel could write (random and malformed WQEs,
staging headers with bad fields, producer indices that jump or go back) and a host that
misuses the control calls (deregistration, QP reset and destruction, CQs left full) in
any order, while the engine runs in the caller's thread (``gw_engine_poll``) or on its
own threads. Every ring and region is its own heap allocation (``ffi.new``), freed as
soon as the engine has let go of it: under AddressSanitizer (scripts/sanitize_check.sh)
an engine access outside a ring or region, or into one deregistered, is a report rather
than silent corruption. Without a sanitizer the canaries around each region and the
checks of every completion still hold.

``python3 tests/foundation/adversary.py --seeds 0:50 --steps 400`` runs it alone;
test_adversary.py runs a short, fixed part of it.
"""
from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field

from gpuwrite import layouts as L
from gpuwrite._gw_cffi import ffi, lib

ERRLEN = 256
GUARD = 64                       # canary bytes on each side of a registered region
CANARY = 0xA5
REASONS = set(L.REASONS)
SYNDROMES = set(L.SYNDROMES)


def _be32(x: int) -> bytes:
    return (x & 0xFFFFFFFF).to_bytes(4, "big")


def _be64(x: int) -> bytes:
    return (x & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")


def ctrl(opcode: int, index: int, qpn: int, ds: int, signaled: bool = True) -> bytes:
    return (_be32((index & 0xFFFF) << 8 | (opcode & 0xFF)) + _be32(qpn << 8 | (ds & 0xFF))
            + bytes([0, 0, 0, L.CTRL_CQ_UPDATE if signaled else 0]) + bytes(4))


def raddr(addr: int, rkey: int) -> bytes:
    return _be64(addr) + _be32(rkey) + bytes(4)


def dseg(addr: int, length: int, lkey: int) -> bytes:
    return _be32(length) + _be32(lkey) + _be64(addr)


def whole_bbs(body: bytes) -> bytes:
    return body + bytes(-len(body) % L.WQE_BB)


@dataclass
class Region:
    """A registered region inside its own allocation, with canaries on both sides."""
    key: int
    kind: int
    length: int
    access: int
    buf: object                  # the allocation (cdata), GUARD + length + GUARD bytes
    addr: int = 0

    def __post_init__(self):
        self.addr = int(ffi.cast("uintptr_t", self.buf)) + GUARD

    def canaries_intact(self) -> bool:
        raw = ffi.buffer(self.buf)
        return (raw[:GUARD] == bytes([CANARY]) * GUARD
                and raw[GUARD + self.length:] == bytes([CANARY]) * GUARD)


@dataclass
class Qp:
    qpn: int
    cqn: int
    sq_bbs: int
    ncqe: int
    sq: object
    dbrec: object
    status: object
    cqes: object
    cqdb: object
    stage: Region | None
    slots: int
    slot_bytes: int
    pi: int = 0                  # producer index the "GPU" has written up to
    ci: int = 0                  # CQEs consumed
    cursor: int = 0              # staging slots the "GPU" has used
    seq: int = 0                 # pushed messages (staging header sequence)
    posted: list = field(default_factory=list)


class Adversary:
    def __init__(self, seed: int, *, policy: int = L.POLICY_HOLD, running: bool = False,
                 limited_link: bool = False, max_mrs: int = 8):
        self.rng = random.Random(seed)
        self.seed = seed
        cfg = ffi.new("struct gw_engine_config *")
        cfg.policy = policy
        cfg.workers = 1
        cfg.max_qps = 4
        cfg.max_cqs = 4
        cfg.max_mrs = max_mrs
        cfg.idle_sleep_ns = 20000          # a running engine must leave the CPUs to the test
        cfg.copy_threads = 1 if running else 0   # deliveries of 32 KiB or more are split
        if limited_link:
            cfg.link.rate_gbps = 100.0
            cfg.link.mtu_bytes = 256
            cfg.link.rx_credits = 8
            cfg.link.credit_latency_ns = 1000
        err = ffi.new("char[]", ERRLEN)
        self.eng = lib.gw_engine_create(cfg, err, ERRLEN)
        assert self.eng != ffi.NULL, ffi.string(err).decode()
        self.max_mrs = max_mrs
        self.regions: dict[int, Region] = {}
        self.qps: dict[int, Qp] = {}
        self.next_qpn = 1
        self.cqes = 0
        self.error_cqes = 0
        self.running = False
        if running:
            self._check(lib.gw_engine_start(self.eng, err, ERRLEN), err)
            self.running = True

    # ---- resources -----------------------------------------------------------------
    @staticmethod
    def _check(rc, err):
        assert rc == 0, ffi.string(err).decode()

    def add_region(self, kind: int = L.MEM_HOST, length: int | None = None,
                   access: int = L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE,
                   key: int | None = None) -> Region | None:
        used = {k >> 8 for k in self.regions}
        free = [i for i in range(self.max_mrs) if i not in used]
        if key is None:
            if not free:
                return None
            key = self.rng.choice(free) << 8 | self.rng.randrange(256)
        length = length or self.rng.choice([1, 7, 64, 256, 4096, 65536, 200000])
        buf = ffi.new("uint8_t[]", GUARD + length + GUARD)
        ffi.memmove(buf, bytes([CANARY]) * (GUARD + length + GUARD), GUARD + length + GUARD)
        r = Region(key, kind, length, access, buf)
        err = ffi.new("char[]", ERRLEN)
        self._check(lib.gw_engine_add_mr(self.eng, key, r.addr, length, access, kind, 0, 0,
                                         err, ERRLEN), err)
        self.regions[key] = r
        return r

    def remove_region(self, key: int) -> None:
        r = self.regions.pop(key)
        assert lib.gw_engine_remove_mr(self.eng, key) == 0
        assert r.canaries_intact(), f"seed {self.seed}: a write landed beside region 0x{key:x}"
        # The engine has let go: the memory goes back to the allocator (under ASan, into
        # its quarantine, where any later engine access is a use after free).
        del r

    def add_qp(self) -> Qp | None:
        cqns = {q.cqn for q in self.qps.values()}
        free = [c for c in range(4) if c not in cqns]
        if not free:
            return None
        cqn = free[0]
        sq_bbs = self.rng.choice([1, 2, 8, 16])
        ncqe = self.rng.choice([1, 4, 32])
        slots = self.rng.choice([1, 3, 8])
        slot_bytes = self.rng.choice([16, 64, 256])
        stage = self.add_region(L.MEM_STAGING, slots * slot_bytes, L.ACCESS_LOCAL_WRITE)
        q = Qp(self.next_qpn, cqn, sq_bbs, ncqe, ffi.new("uint8_t[]", sq_bbs * L.WQE_BB),
               ffi.new("uint8_t[]", 8), ffi.new("uint8_t[]", 64),
               ffi.new("uint8_t[]", ncqe * L.CQE_SIZE), ffi.new("uint8_t[]", 8), stage,
               slots, slot_bytes)
        self.next_qpn += 1
        for k in range(ncqe):
            q.cqes[k * L.CQE_SIZE + 63] = L.CQE_INVALID << 4
        err = ffi.new("char[]", ERRLEN)
        cq = ffi.new("struct gw_cq_desc *", {"cqn": cqn, "ncqe": ncqe, "cqes": q.cqes,
                                              "dbrec": q.cqdb})
        self._check(lib.gw_engine_add_cq(self.eng, cq, err, ERRLEN), err)
        desc = ffi.new("struct gw_qp_desc *")
        desc.qpn, desc.cqn, desc.sq_bbs = q.qpn, cqn, sq_bbs
        desc.sq, desc.dbrec, desc.status = q.sq, q.dbrec, q.status
        if stage is not None:
            desc.staging_key = stage.key
            desc.stage_slots, desc.stage_slot_bytes = slots, slot_bytes
            desc.stage_addr = stage.addr
        self._check(lib.gw_engine_add_qp(self.eng, desc, err, ERRLEN), err)
        self.qps[q.qpn] = q
        return q

    def remove_qp(self, q: Qp) -> None:
        self.drain(q)
        assert lib.gw_engine_remove_qp(self.eng, q.qpn) == 0
        self.drain(q)
        assert lib.gw_engine_remove_cq(self.eng, q.cqn) == 0
        del self.qps[q.qpn]
        if q.stage is not None and q.stage.key in self.regions:
            self.remove_region(q.stage.key)
        # The rings are freed here (the last references go with q).

    def reset_qp(self, q: Qp) -> None:
        assert lib.gw_engine_qp_reset(self.eng, q.qpn) == 0
        q.pi = q.cursor = q.seq = 0

    # ---- the "GPU" -------------------------------------------------------------------
    def write_bbs(self, q: Qp, wqe: bytes) -> None:
        for k in range(len(wqe) // L.WQE_BB):
            pos = ((q.pi + k) % q.sq_bbs) * L.WQE_BB
            ffi.memmove(q.sq + pos, wqe[k * L.WQE_BB:(k + 1) * L.WQE_BB], L.WQE_BB)

    def ring(self, q: Qp, pi: int | None = None) -> None:
        value = int.from_bytes(_be32((q.pi if pi is None else pi) & 0xFFFF), "little")
        lib.gw_store_release_u32(q.dbrec + 4, value)

    def pick_region(self, kinds=(L.MEM_HOST, L.MEM_DEVICE, L.MEM_STAGING)) -> Region | None:
        choices = [r for r in self.regions.values() if r.kind in kinds]
        return self.rng.choice(choices) if choices else None

    def some_key(self) -> int:
        r = self.pick_region()
        roll = self.rng.random()
        if r is None or roll < 0.1:
            return self.rng.getrandbits(32)
        if roll < 0.2:
            return r.key ^ (1 << self.rng.randrange(8))   # right index, wrong variant
        return r.key

    def some_span(self, r: Region | None) -> tuple[int, int]:
        """An (address, length) in, at the edge of, or far outside region r."""
        rng = self.rng
        if r is None or rng.random() < 0.1:
            return rng.getrandbits(64), rng.choice([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF])
        roll = rng.random()
        if roll < 0.6:
            off = rng.randrange(r.length)
            return r.addr + off, rng.randrange(r.length - off + 1)
        if roll < 0.7:
            return r.addr + r.length, rng.choice([0, 1])
        if roll < 0.8:
            return r.addr - rng.choice([1, 16, GUARD]), rng.choice([1, 16])
        if roll < 0.9:
            return r.addr + rng.randrange(r.length), rng.choice([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                                                                  r.length + 1])
        return (r.addr + rng.randrange(r.length)) | (1 << 63), 1

    def wqe_clean(self, q: Qp) -> bytes | None:
        """A valid RDMA write of 1 to 3 segments (so that deliveries happen too)."""
        rng = self.rng
        dst = self.pick_region((L.MEM_HOST,))
        srcs = [self.pick_region((L.MEM_HOST, L.MEM_DEVICE)) for _ in range(rng.randrange(1, 4))]
        if dst is None or None in srcs:
            return None
        segs, total = b"", 0
        for src in srcs:
            off = rng.randrange(src.length)
            cap = src.length - off if rng.random() < 0.2 else min(src.length - off, 512)
            length = rng.randrange(cap + 1)
            segs += dseg(src.addr + off, length, src.key)
            total += length
        if total > dst.length:
            return None
        daddr = dst.addr + rng.randrange(dst.length - total + 1)
        opcode = rng.choice([L.OPCODE_RDMA_WRITE, L.OPCODE_RDMA_WRITE_IMM])
        return whole_bbs(ctrl(opcode, q.pi, q.qpn, 2 + len(srcs), rng.random() < 0.8)
                         + raddr(daddr, dst.key) + segs)

    def wqe_write(self, q: Qp) -> bytes:
        """An RDMA write with 1 to 30 data segments, most of them plausible."""
        rng = self.rng
        if rng.random() < 0.5:
            wqe = self.wqe_clean(q)
            if wqe is not None:
                return wqe
        nsge = rng.choice([1, 1, 1, 2, 3, 5, 30])
        dst = self.pick_region((L.MEM_HOST, L.MEM_DEVICE, L.MEM_STAGING))
        segs = b""
        total = 0
        for _ in range(nsge):
            src = self.pick_region((L.MEM_HOST, L.MEM_DEVICE))
            addr, length = self.some_span(src)
            if src is not None and rng.random() < 0.7:
                length = min(length, 512)
            key = src.key if src is not None and rng.random() < 0.8 else self.some_key()
            segs += dseg(addr, length, key)
            total += length
        daddr, dlen = self.some_span(dst)
        if dst is not None and rng.random() < 0.7 and total <= dst.length:
            daddr = dst.addr + rng.randrange(dst.length - total + 1)
        rkey = dst.key if dst is not None and rng.random() < 0.8 else self.some_key()
        opcode = rng.choice([L.OPCODE_RDMA_WRITE] * 6 + [L.OPCODE_RDMA_WRITE_IMM, L.OPCODE_SEND,
                                                          L.OPCODE_NOP, rng.randrange(256)])
        return whole_bbs(ctrl(opcode, q.pi, q.qpn, 2 + nsge, rng.random() < 0.8)
                         + raddr(daddr, rkey) + segs)

    def wqe_inline(self, q: Qp) -> bytes:
        rng = self.rng
        n = rng.choice([0, 1, 12, 13, 44, 45, 100, L.MAX_INLINE_BYTES, L.MAX_INLINE_BYTES + 1,
                        0x7FFFFFFF])
        ds = -(-(L.DATA_BASE + 4 + min(n, 476)) // L.WQE_DS)
        if rng.random() < 0.2:
            ds = rng.randrange(64)
        dst = self.pick_region((L.MEM_HOST,))
        daddr, _ = self.some_span(dst)
        if dst is not None and rng.random() < 0.7 and n <= dst.length:
            daddr = dst.addr + rng.randrange(dst.length - n + 1)
        rkey = dst.key if dst is not None else self.some_key()
        payload = bytes(rng.getrandbits(8) for _ in range(min(n, 476)))
        body = (ctrl(L.OPCODE_RDMA_WRITE, q.pi, q.qpn, ds) + raddr(daddr, rkey)
                + _be32(n | L.INLINE_SEG_FLAG) + payload)
        return whole_bbs(body)[:8 * L.WQE_BB]

    def wqe_push(self, q: Qp) -> bytes:
        """A pushed message: a staging header at the slot protocol's place (or not)."""
        rng = self.rng
        if q.stage is None:
            return self.wqe_write(q)
        ring = q.slots * q.slot_bytes
        n = rng.choice([0, 1, 16, 100, q.slot_bytes, ring - 16, ring, 600])
        lead = L.STAGE_ALIGN_BYTES - L.STAGE_HDR_BYTES if (
            n >= L.STAGE_ALIGN_MIN_BYTES and q.slot_bytes % L.STAGE_ALIGN_BYTES == 0) else 0
        need = -(-(lead + L.STAGE_HDR_BYTES + n) // q.slot_bytes)
        pos = q.cursor % q.slots
        pad = q.slots - pos if pos + need > q.slots else 0
        first = 0 if pad else pos
        hdr_off = first * q.slot_bytes + lead
        fields = {"magic_seq": L.STAGE_MAGIC | (q.seq & 0xFFFF), "byte_count": n,
                  "slots": pad + need, "wqe_index": q.pi & 0xFFFF,
                  "flags": L.STAGE_F_ALIGNED if lead else 0}
        if rng.random() < 0.3:          # one field wrong, or the header somewhere else
            name = rng.choice([*fields, "offset"])
            if name == "offset":
                hdr_off = rng.randrange(-32, ring + 32)
            else:
                fields[name] = rng.getrandbits(16 if name in ("wqe_index", "flags") else 32)
        if 0 <= hdr_off <= ring - L.STAGE_HDR_BYTES:
            hdr = (fields["magic_seq"].to_bytes(4, "little") + fields["byte_count"].to_bytes(4, "little")
                   + fields["slots"].to_bytes(4, "little") + fields["wqe_index"].to_bytes(2, "little")
                   + fields["flags"].to_bytes(2, "little"))
            ffi.memmove(ffi.cast("uint8_t *", q.stage.addr + hdr_off), hdr, len(hdr))
        if rng.random() < 0.9:          # the engine will take the slots: so does the GPU
            q.cursor += pad + need
            q.seq += 1
        dst = self.pick_region((L.MEM_HOST,))
        daddr, _ = self.some_span(dst)
        if dst is not None and n <= dst.length:
            daddr = dst.addr + rng.randrange(dst.length - n + 1)
        rkey = dst.key if dst is not None else self.some_key()
        return whole_bbs(ctrl(L.OPCODE_RDMA_WRITE, q.pi, q.qpn, 3) + raddr(daddr, rkey)
                         + dseg(q.stage.addr + hdr_off + L.STAGE_HDR_BYTES, n, q.stage.key))

    def wqe_garbage(self, q: Qp) -> bytes:
        rng = self.rng
        nbb = rng.randrange(1, 9)
        raw = bytearray(rng.getrandbits(8) for _ in range(nbb * L.WQE_BB))
        if rng.random() < 0.7:
            raw[0:8] = ctrl(raw[3], q.pi, q.qpn, rng.randrange(64))[0:8]
        return bytes(raw)

    def post(self, q: Qp) -> None:
        rng = self.rng
        make = rng.choice([self.wqe_write] * 4 + [self.wqe_inline, self.wqe_push, self.wqe_push,
                                                   self.wqe_garbage])
        wqe = make(q)
        if len(wqe) // L.WQE_BB > q.sq_bbs:
            wqe = wqe[:q.sq_bbs * L.WQE_BB]
        self.write_bbs(q, wqe)
        q.pi += len(wqe) // L.WQE_BB
        roll = rng.random()
        if roll < 0.05:
            self.ring(q, q.pi + rng.randrange(1, 3 * q.sq_bbs + 2))   # a jump past the WQEs
        elif roll < 0.08:
            self.ring(q, q.pi - rng.randrange(1, 4))                 # back
        elif roll < 0.9:
            self.ring(q)

    # ---- completions -------------------------------------------------------------------
    def drain(self, q: Qp, limit: int | None = None) -> int:
        got = 0
        while limit is None or got < limit:
            base = (q.ci % q.ncqe) * L.CQE_SIZE
            tail = lib.gw_load_acquire_u32(q.cqes + base + 60)
            op_own = tail >> 24
            if op_own >> 4 == L.CQE_INVALID or (op_own & 1) != (q.ci // q.ncqe) & 1:
                return got
            opcode = op_own >> 4
            assert opcode in (L.CQE_REQ, L.CQE_REQ_ERR), f"seed {self.seed}: CQE opcode {opcode}"
            if opcode == L.CQE_REQ_ERR:
                reason, syndrome = q.cqes[base + 54], q.cqes[base + 55]
                assert reason in REASONS and reason != 0, f"seed {self.seed}: reason {reason}"
                assert syndrome in SYNDROMES, f"seed {self.seed}: syndrome {syndrome}"
                self.error_cqes += 1
            q.ci += 1
            got += 1
            self.cqes += 1
            ffi.memmove(q.cqdb, _be32(q.ci & 0xFFFFFF), 4)
        return got

    def settle(self) -> None:
        if self.running:
            return
        lib.gw_engine_poll(self.eng, self.rng.choice([1, 1, 2, 5]))

    # ---- the run -------------------------------------------------------------------------
    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if not self.qps or roll < 0.02:
            self.add_qp()
            return
        q = rng.choice(list(self.qps.values()))
        if roll < 0.10:
            r = self.pick_region((L.MEM_HOST, L.MEM_DEVICE))
            if r is not None:
                key = r.key
                self.remove_region(key)
                if rng.random() < 0.5:
                    # The same key again, on new memory: a WQE validated against the old
                    # registration must not write into (freed) old memory nor the new one.
                    self.add_region(r.kind, key=key)
            else:
                self.add_region(rng.choice([L.MEM_HOST, L.MEM_HOST, L.MEM_DEVICE]))
        elif roll < 0.16:
            self.add_region(rng.choice([L.MEM_HOST, L.MEM_HOST, L.MEM_DEVICE]),
                            access=rng.choice([L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE] * 3
                                              + [L.ACCESS_LOCAL_WRITE]))
        elif roll < 0.19:
            self.drain(q)
            self.reset_qp(q)
        elif roll < 0.21:
            self.remove_qp(q)
        else:
            self.post(q)
        self.settle()
        if q.qpn in self.qps and rng.random() < 0.8:
            self.drain(q, None if rng.random() < 0.7 else 1)
            # A QP in error stays there until reset: reset most, so that later WQEs get
            # past the flush and reach the deeper checks.
            if ffi.cast("uint32_t *", q.status)[2] == L.QPS_ERR and rng.random() < 0.7:
                self.reset_qp(q)

    def close(self) -> dict:
        for q in list(self.qps.values()):
            self.remove_qp(q)
        for key in list(self.regions):
            self.remove_region(key)
        if self.running:
            lib.gw_engine_stop(self.eng)
        c = ffi.new("struct gw_counters *")
        lib.gw_engine_read_counters(self.eng, c)
        counters = {name: getattr(c, name) for name, _ in ffi.typeof("struct gw_counters").fields}
        lib.gw_engine_destroy(self.eng)
        self.eng = None
        return counters


def run(seed: int, steps: int, **kw) -> dict:
    a = Adversary(seed, **kw)
    a.add_region(L.MEM_HOST)
    a.add_region(L.MEM_DEVICE)
    a.add_qp()
    for _ in range(steps):
        a.step()
    counters = a.close()
    # Every completion the engine wrote was read, and nothing stays held once every QP is
    # destroyed: pushed bytes are delivered or counted as dropped.
    assert counters["cqes"] == a.cqes, (seed, counters["cqes"], a.cqes)
    assert counters["error_cqes"] == a.error_cqes, (seed, counters["error_cqes"], a.error_cqes)
    assert counters["held_msgs"] == 0 and counters["held_bytes"] == 0, (seed, counters)
    return counters


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0:20", help="first:end (default 0:20)")
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args(argv)
    first, end = map(int, args.seeds.split(":"))
    totals: dict[str, int] = {}
    for seed in range(first, end):
        for kw in ({}, {"policy": L.POLICY_DROP, "limited_link": True},
                   {"limited_link": True}, {"running": True}):
            c = run(seed, args.steps, **kw)
            for k in ("wqes", "cqes", "error_cqes", "msgs_delivered", "bytes_delivered",
                      "ring_overflows", "flushed_wqes", "dropped_msgs"):
                totals[k] = totals.get(k, 0) + c[k]
    print(f"seeds {first}:{end}, {args.steps} steps, 4 configurations each: "
          + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
