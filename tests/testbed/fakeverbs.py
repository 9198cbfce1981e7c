"""A fake of the pyverbs/DevX objects testbed mode makes, strict where the kernel is.

Every object records its creation and release in one log. DevX objects decode the PRM
command bytes they are given (with gpuwrite's own layouts) and keep the references the
kernel keeps: destroying a CQ that a live QP sends to, or a UAR/UMEM that a live CQ or QP
names, raises EBUSY as mlx5_ib does. Memory handed out (UAR pages, device memory) is real
host memory, so the CUDA simulator's views over it work.
"""
from __future__ import annotations

import ctypes
import errno as E
import itertools
import mmap
import threading
from types import SimpleNamespace

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.backends.testbed import prm
from gpuwrite.backends.testbed.api import MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED, Verbs

CONSTANTS = SimpleNamespace(
    CONTEXT_FLAGS_DEVX=1, OBJ_PD=64, UMEM_MASK_DMABUF=1, PORT_ACTIVE=4, LINK_LAYER_ETHERNET=2,
    GID_TYPE_SYSFS_ROCE_V2=1, ACCESS_LOCAL_WRITE=1, ACCESS_REMOTE_WRITE=2, ACCESS_REMOTE_READ=4,
    ACCESS_ZERO_BASED=32, UAR_ALLOC_TYPE_BF=0, UAR_ALLOC_TYPE_NC=1,
    UAR_ALLOC_TYPE_NC_DEDICATED=MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED)


class FakeRDMAError(Exception):
    """Stands in for pyverbs' PyverbsRDMAError (carries ``error_code``)."""

    def __init__(self, message, error_code):
        super().__init__(message)
        self.error_code = error_code


class World:
    """One fake NIC: the log, live objects, and knobs a test turns."""

    def __init__(self, link_layer=2, roce_v2=True, dedicated_uar=True, dm_offset=0,
                 fail_on=None, max_dm_bytes=1 << 20, mac="02:00:00:00:00:07", fail_nth=0,
                 refuse_ts_format=None, fail_errno=E.EINVAL):
        self.log: list[tuple[str, str]] = []
        self.live: dict[int, object] = {}
        self.link_layer, self.roce_v2, self.dedicated_uar = link_layer, roce_v2, dedicated_uar
        self.dm_offset, self.fail_on, self.max_dm_bytes, self.mac = dm_offset, fail_on, max_dm_bytes, mac
        self.fail_nth = fail_nth       # fail_on's opcode fails at its (fail_nth + 1)-th use
        #                                (None: at every use), with errno fail_errno
        self.fail_errno = fail_errno
        # A timestamp format CREATE_QP refuses (EINVAL), as older firmware may refuse
        # DEFAULT (Linux then asks for FREE_RUNNING: mlx5_get_qp_default_ts).
        self.refuse_ts_format = refuse_ts_format
        self.opcode_uses: dict[int, int] = {}
        self.commands: list[bytes] = []
        self.ids = itertools.count(0x10)
        self.keep: list = []           # host memory handed out stays alive with the world
        self.umems: dict[int, object] = {}
        self.uars: dict[int, object] = {}
        self.queues: dict[str, dict] = {"cq": {}, "qp": {}}
        # Memory regions by key: the range WQEs may name (iova, length), the host memory
        # behind it, the access flags. dma-bufs a test exported: fd -> host address.
        self.mrs: dict[int, dict] = {}
        self.lock = threading.RLock()  # the fake NIC serves no queue a release is taking away
        self.dmabufs: dict[int, int] = {}
        self.dms: dict[int, object] = {}

    def fails(self, opcode: int) -> bool:
        """Whether this use of ``opcode`` is the one ``fail_on``/``fail_nth`` name."""
        uses = self.opcode_uses.get(opcode, 0)
        self.opcode_uses[opcode] = uses + 1
        return self.fail_on == opcode and (self.fail_nth is None or uses == self.fail_nth)

    def made(self, obj, what):
        self.log.append(("make", what))
        self.live[id(obj)] = obj

    def released(self, obj, what):
        self.log.append(("release", what))
        self.live.pop(id(obj), None)

    def users_of(self, kind, ident):
        return [o for o in self.live.values() if ident in getattr(o, "uses", {}).get(kind, ())]

    def verbs(self) -> Verbs:
        world = self

        class Ctx:
            cmd_fd = 99
            what = "context"

            def __init__(self, attr, name):
                self.name = name
                world.made(self, "context")

            def query_port(self, port):
                return SimpleNamespace(state=4, lid=0 if world.link_layer == 2 else 7,
                                       link_layer=world.link_layer, active_mtu=5, max_msg_sz=1 << 31)

            def query_gid(self, port, index):
                return SimpleNamespace(gid="fe80:0000:0000:0000:0002:00ff:fe00:0007")

            def query_gid_type(self, port, index):
                return 1 if world.roce_v2 else 0

            def query_device_ex(self):
                return SimpleNamespace(max_dm_size=world.max_dm_bytes)

            def devx_query_eqn(self, vector):
                return 3

            def close(self):
                world.released(self, "context")

        class Released:
            what = "object"
            uses: dict = {}
            named = None      # (kind, id) other objects refer to: busy while they do

            def close(self):
                if self.named and world.users_of(*self.named):
                    raise FakeRDMAError(f"{self.named[0]} {self.named[1]} in use", E.EBUSY)
                world.released(self, self.what)

        class PD(Released):
            what = "pd"
            handle = 5

            def __init__(self, ctx):
                world.made(self, "pd")

        class DvObj:
            def __init__(self, kind, pd):
                self.dvpd = SimpleNamespace(pdn=0x21)

        class UMEM(Released):
            def __init__(self, ctx, size, addr=0, *args, access=0, **kwargs):
                self.umem_id = next(world.ids)
                self.addr, self.size = addr, size
                world.umems[self.umem_id] = self
                self.what = f"umem {self.umem_id}"
                self.named = ("umem", self.umem_id)
                world.made(self, self.what)

        class UAR(Released):
            def __init__(self, ctx, flags):
                if flags == MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED and not world.dedicated_uar:
                    raise FakeRDMAError("Failed to allocate UAR", E.EOPNOTSUPP)
                self.flags = flags
                pages = np.zeros(2 * mmap.PAGESIZE // 8, dtype=np.uint64)
                world.keep.append(pages)
                self.base_addr = (pages.ctypes.data + mmap.PAGESIZE - 1) & ~(mmap.PAGESIZE - 1)
                self.reg_addr = self.base_addr + 0x800
                self.page_id = next(world.ids)
                world.uars[self.page_id] = self
                self.what = f"uar {self.page_id}"
                self.named = ("uar", self.page_id)
                world.made(self, self.what)

        class DevxObj(Released):
            def __init__(self, ctx, command, out_len):
                opcode = int.from_bytes(command[:2], "big")
                world.commands.append(bytes(command))
                if world.fails(opcode):
                    raise FakeRDMAError("Failed to create DevX object", world.fail_errno)
                if (opcode == prm.MLX5_CMD_OP_CREATE_QP and world.refuse_ts_format is not None
                        and prm.CREATE_QP_IN.unpack(command)["sw_qpc.ts_format"]
                        == world.refuse_ts_format):
                    raise FakeRDMAError("Failed to create DevX object", E.EINVAL)
                if opcode == prm.MLX5_CMD_OP_CREATE_CQ:
                    f = prm.CREATE_CQ_IN.unpack(command)
                    self.cqn = next(world.ids)
                    self.uses = {"umem": (f["cq_umem_id"], f["sw_cqc.dbr_umem_id"]),
                                 "uar": (f["sw_cqc.uar_page"],)}
                    self.what, self.out_view = f"cq {self.cqn}", prm.CREATE_CQ_OUT.pack(cqn=self.cqn)
                    world.queues["cq"][self.cqn] = {**f, "ci": 0}
                elif opcode == prm.MLX5_CMD_OP_CREATE_QP:
                    f = prm.CREATE_QP_IN.unpack(command)
                    self.qpn = next(world.ids)
                    self.uses = {"umem": (f["wq_umem_id"], f["sw_qpc.dbr_umem_id"]),
                                 "uar": (f["sw_qpc.uar_page"],), "cq": (f["sw_qpc.cqn_snd"],)}
                    self.what, self.out_view = f"qp {self.qpn}", prm.CREATE_QP_OUT.pack(qpn=self.qpn)
                    world.queues["qp"][self.qpn] = {**f, "state": "reset", "done": 0, "db": 0}
                else:
                    raise AssertionError(f"unexpected DevX opcode {opcode:#x}")
                world.made(self, self.what)

            def modify(self, command, out_len):
                world.commands.append(bytes(command))
                opcode = int.from_bytes(command[:2], "big")
                if world.fails(opcode):
                    return prm.MODIFY_QP_OUT.pack(status=0x3, syndrome=0x1234ABCD)
                order = {prm.MLX5_CMD_OP_RST2INIT_QP: ("reset", "init"),
                         prm.MLX5_CMD_OP_INIT2RTR_QP: ("init", "rtr"),
                         prm.MLX5_CMD_OP_RTR2RTS_QP: ("rtr", "rts")}
                qp = world.queues["qp"][self.qpn]
                if qp["state"] != order[opcode][0]:
                    return prm.MODIFY_QP_OUT.pack(status=0x10)      # bad_qp_state_err
                qp["state"] = order[opcode][1]
                return prm.MODIFY_QP_OUT.pack()

            def close(self):
                if hasattr(self, "cqn") and world.users_of("cq", self.cqn):
                    raise FakeRDMAError(f"cq {self.cqn} has live QPs", E.EBUSY)
                with world.lock:     # a destroyed queue is never touched again
                    world.queues["qp"].pop(getattr(self, "qpn", None), None)
                    world.queues["cq"].pop(getattr(self, "cqn", None), None)
                super().close()

        class MR(Released):
            kind = "mr"

            def __init__(self, pd, length, access, address=0, iova=None, backing=None, **kwargs):
                self.lkey = self.rkey = next(world.ids)
                self.what = f"{self.kind} {self.lkey}"
                self.access, self.length = access, length
                world.mrs[self.lkey] = {"iova": address if iova is None else iova, "length": length,
                                        "backing": address if backing is None else backing,
                                        "access": access}
                world.made(self, self.what)

            def close(self):
                with world.lock:
                    world.mrs.pop(self.lkey, None)
                super().close()

        class DM(Released):
            def __init__(self, ctx, attr):
                self.length = attr
                self.handle = next(world.ids)
                # libmlx5 maps align(length, page) bytes from the page the allocation
                # starts in, ``dm_offset`` bytes before it (verbs.c mlx5_import_dm).
                self.map_bytes = -(-attr // mmap.PAGESIZE) * mmap.PAGESIZE
                memory = np.zeros(self.map_bytes + 2 * mmap.PAGESIZE, dtype=np.uint8)
                world.keep.append(memory)
                page = (memory.ctypes.data + mmap.PAGESIZE - 1) & ~(mmap.PAGESIZE - 1)
                self.address = page + world.dm_offset
                world.dms[self.handle] = self
                self.what = "dm"
                world.made(self, "dm")

        class DMMR(MR):
            kind = "dm mr"

            def __init__(self, pd, length, access, dm, offset):
                zero_based = access & CONSTANTS.ACCESS_ZERO_BASED
                super().__init__(pd, length, access, iova=offset if zero_based else dm.address + offset,
                                 backing=dm.address + offset)

        class DmabufMR(MR):
            kind = "dmabuf mr"

        def map_dm(cmd_fd, handle):
            dm = world.dms[handle]
            mapping = SimpleNamespace(address=dm.address, length=dm.map_bytes)
            mapping.close = lambda: world.released(mapping, "dm mapping")
            world.made(mapping, "dm mapping")
            return mapping

        def reg_dmabuf_mr(cmd_fd, pd_handle, fd, offset, length, iova, access):
            if fd not in world.dmabufs:
                raise FakeRDMAError(f"fd {fd} is no dma-buf", E.EBADF)
            return DmabufMR(None, length, access, iova=iova, backing=world.dmabufs[fd] + offset)

        def resolve_mac(cmd_fd, pd_handle, port, sgid_index, dgid):
            if world.mac is None:
                raise RuntimeError("no neighbour")
            return world.mac

        return Verbs(Mlx5Context=Ctx, Mlx5DVContextAttr=lambda flags: flags, PD=PD, Mlx5DvObj=DvObj,
                     Mlx5UMEM=UMEM, Mlx5UAR=UAR, Mlx5DevxObj=DevxObj, MR=MR, DM=DM,
                     AllocDmAttr=lambda n: n, DMMR=DMMR, PyverbsError=FakeRDMAError, c=CONSTANTS,
                     map_dm=map_dm, resolve_mac=resolve_mac, reg_dmabuf_mr=reg_dmabuf_mr,
                     io_memory=False)


class FakeNic:
    """A thread that acts on doorbells as an mlx5 NIC would, for QPs in RTS.

    All QPs of a queue set ring one doorbell register; each change of it must hold the
    first 8 bytes of the control segment of a WQE of the QP it names, whose doorbell
    record already counts that WQE. From the first doorbell of a QP on, its WQEs are
    executed in order up to its doorbell record (a register sampled every millisecond
    can miss one doorbell of several QPs ringing at once; the record cannot): NOPs, and
    RDMA writes with a data segment (its lkey's MR must cover the range, named in the
    MR's own address space) or an inline payload, to an rkey whose MR allows remote
    writes over the range. A success CQE for each signaled WQE; a protection failure
    gives an error CQE (local_prot_err / remote_access_err) and moves the QP to error,
    as mlx5 does, and is listed in ``violations``. ``errors``: the fake's own failures
    and protocol breaches (a test expects none)."""

    def __init__(self, world: World):
        self.world = world
        self.errors: list[str] = []
        self.violations: list[str] = []
        self._register = None
        self._armed: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def _loop(self):
        while not self._stop.wait(0.001):
            with self.world.lock:
                self._step()

    def _step(self):
        try:
            self._doorbell()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(f"{type(exc).__name__}: {exc}")
        for qpn, qp in list(self.world.queues["qp"].items()):
            try:
                if qpn in self._armed and qp["state"] == "rts":
                    self._serve(qpn, qp)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _sq(self, qp):
        return (self.world.umems[qp["wq_umem_id"]].addr + qp["e_mtt_pointer_or_wq_umem_offset"],
                1 << qp["sw_qpc.log_sq_size"])

    def _pi(self, qp) -> int:
        dbr = self.world.umems[qp["sw_qpc.dbr_umem_id"]].addr + qp["sw_qpc.dbr_addr"]
        return int(np.frombuffer(ctypes.string_at(dbr, 8), dtype=L.QP_DBREC)[0]["send_counter"])

    def _doorbell(self):
        uars = {qp["sw_qpc.uar_page"] for qp in self.world.queues["qp"].values()}
        for page in uars:
            uar = self.world.uars.get(page)
            if uar is None:
                continue
            register = ctypes.c_uint64.from_address(uar.reg_addr).value
            if register == self._register or register == 0:
                continue
            self._register = register
            words = np.frombuffer(register.to_bytes(8, "little"), dtype=">u4")
            index, qpn = (int(words[0]) >> 8) & 0xFFFF, int(words[1]) >> 8
            qp = self.world.queues["qp"].get(qpn)
            if qp is None or qp["sw_qpc.uar_page"] != page:
                raise AssertionError(f"doorbell {register:#x} names QP {qpn:#x}, not one of this UAR's")
            sq, n_bbs = self._sq(qp)
            first8 = ctypes.string_at(sq + (index % n_bbs) * L.WQE_BB, 8)
            if int.from_bytes(first8, "little") != register:
                raise AssertionError(f"doorbell {register:#x} is not WQE {index}'s first 8 bytes")
            if (self._pi(qp) - index - 1) & 0xFFFF >= n_bbs:
                raise AssertionError(f"QP {qpn:#x}: doorbell for WQE {index} before its doorbell record")
            self._armed.add(qpn)

    def _serve(self, qpn, qp):
        sq, n_bbs = self._sq(qp)
        pi = self._pi(qp)
        while qp["done"] & 0xFFFF != pi and qp["state"] == "rts":
            index = qp["done"]
            first = ctypes.string_at(sq + (index % n_bbs) * L.WQE_BB, L.WQE_BB)
            ctrl = np.frombuffer(first[:16], dtype=L.CTRL_SEG)[0]
            opcode, wqe_index = int(ctrl["opmod_idx_opcode"]) & 0xFF, (int(ctrl["opmod_idx_opcode"]) >> 8) & 0xFFFF
            if int(ctrl["qpn_ds"]) >> 8 != qpn or wqe_index != index & 0xFFFF:
                raise AssertionError(f"WQE {index}: qpn/index {int(ctrl['qpn_ds']) >> 8:#x}/{wqe_index}")
            ds = int(ctrl["qpn_ds"]) & 0x3F
            bbs = -(-ds * L.WQE_DS // L.WQE_BB)
            wqe = b"".join(ctypes.string_at(sq + ((index + k) % n_bbs) * L.WQE_BB, L.WQE_BB)
                           for k in range(bbs))
            nbytes, failure = 0, None
            if opcode == L.OPCODE_RDMA_WRITE:
                nbytes, failure = self._write(wqe)
            elif opcode != L.OPCODE_NOP:
                raise AssertionError(f"WQE {index}: opcode {opcode:#x}")
            qp["done"] += bbs
            if failure is not None:
                self.violations.append(f"QP {qpn:#x} WQE {index}: {failure}")
                qp["state"] = "error"
                self._complete(qp["sw_qpc.cqn_snd"], qpn, wqe_index, 0, L.SYNDROME[failure.split(":")[0]])
            elif ctrl["fm_ce_se"] & L.CTRL_CQ_UPDATE:
                self._complete(qp["sw_qpc.cqn_snd"], qpn, wqe_index, nbytes)

    def _region(self, key, address, nbytes, need):
        mr = self.world.mrs.get(key)
        if mr is None or (need and not mr["access"] & need):
            return None
        if not mr["iova"] <= address <= address + nbytes <= mr["iova"] + mr["length"]:
            return None
        return mr["backing"] + (address - mr["iova"])

    def _write(self, wqe: bytes):
        """Executes one RDMA write; returns (bytes, None) or (0, "syndrome: why")."""
        raddr = np.frombuffer(wqe[16:32], dtype=L.RADDR_SEG)[0]
        head = int(np.frombuffer(wqe[32:36], dtype=">u4")[0])
        if head & L.INLINE_SEG_FLAG:
            nbytes = head & ~L.INLINE_SEG_FLAG
            payload, source = wqe[36:36 + nbytes], None
        else:
            data = np.frombuffer(wqe[32:48], dtype=L.DATA_SEG)[0]
            nbytes = int(data["byte_count"])
            source = self._region(int(data["lkey"]), int(data["addr"]), nbytes, 0)
            if source is None:
                return 0, (f"local_prot_err: lkey {int(data['lkey']):#x} does not cover "
                           f"{int(data['addr']):#x}+{nbytes}")
        target = self._region(int(raddr["rkey"]), int(raddr["raddr"]), nbytes, CONSTANTS.ACCESS_REMOTE_WRITE)
        if target is None:
            return 0, (f"remote_access_err: rkey {int(raddr['rkey']):#x} does not allow a write to "
                       f"{int(raddr['raddr']):#x}+{nbytes}")
        if source is None:
            ctypes.memmove(target, payload, nbytes)
        else:
            ctypes.memmove(target, source, nbytes)
        return nbytes, None

    def _complete(self, cqn, qpn, wqe_index, nbytes, syndrome=None):
        cq = self.world.queues["cq"][cqn]
        ncqe = 1 << cq["sw_cqc.log_cq_size"]
        base = self.world.umems[cq["cq_umem_id"]].addr + cq["e_mtt_pointer_or_cq_umem_offset"]
        owner = (cq["ci"] // ncqe) & 1
        if syndrome is None:
            cqe = np.zeros(1, dtype=L.CQE64)
            cqe["byte_cnt"], cqe["sop_drop_qpn"], cqe["wqe_counter"] = nbytes, qpn, wqe_index
            cqe["op_own"] = (L.CQE_REQ << 4) | owner
        else:
            cqe = np.zeros(1, dtype=L.ERR_CQE)
            cqe["syndrome"], cqe["s_wqe_opcode_qpn"] = syndrome, (L.OPCODE_RDMA_WRITE << 24) | qpn
            cqe["wqe_counter"], cqe["op_own"] = wqe_index, (L.CQE_REQ_ERR << 4) | owner
        ctypes.memmove(base + (cq["ci"] % ncqe) * L.CQE_SIZE, cqe.tobytes(), L.CQE_SIZE)
        cq["ci"] += 1
