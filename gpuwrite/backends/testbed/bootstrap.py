"""Two hosts find each other: exchange QP numbers, GIDs, rkeys and addresses.

A :class:`Bootstrap` gives each process its ``rank`` among ``size`` and an ``allgather``
of small JSON-able records. Two kinds:

``MpiBootstrap``  under ``mpirun`` (mpi4py's ``COMM_WORLD.allgather``);
``TcpBootstrap``  two processes, no MPI: rank 0 listens, rank 1 connects; each record
                  travels as a 4-byte big-endian length and UTF-8 JSON.

``from_environment`` picks MPI when the process was started by an MPI launcher and
mpi4py imports, TCP otherwise. Every wait has a timeout, and every failure says what was
expected from whom.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import time
from dataclasses import asdict, dataclass, field

PROTOCOL = "gpuwrite-bootstrap/1"
MAX_RECORD_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 60.0
# Variables that MPI launchers set in every rank (Open MPI, PMIx, MPICH/Hydra, Slurm PMI).
_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK")


class BootstrapError(RuntimeError):
    """The peers could not exchange records; the message says with whom and why."""


@dataclass(frozen=True)
class PeerRecord:
    """What one side tells the other before any RDMA traffic.

    ``qpns``/``psns``: one per QP, in the order both sides create them. ``lid`` is the
    port's LID (InfiniBand), ``gid`` the port GID used for GRH/RoCE (8 hex groups),
    ``mtu_bytes`` the port's active MTU. ``addr``/``rkey``/``length``: the memory region
    the peer may write into.
    """

    rank: int
    host: str
    lid: int
    gid: str
    mtu_bytes: int
    qpns: tuple[int, ...]
    psns: tuple[int, ...]
    addr: int
    rkey: int
    length: int
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if len(self.qpns) != len(self.psns):
            raise ValueError(f"qpns has {len(self.qpns)} entries and psns {len(self.psns)}: "
                             "one PSN per QP")
        for q in (*self.qpns, *self.psns):
            if not 0 <= q < 1 << 24:
                raise ValueError(f"QP number or PSN {q}: must fit 24 bits")
        if self.mtu_bytes not in (256, 512, 1024, 2048, 4096):
            raise ValueError(f"mtu_bytes={self.mtu_bytes}: allowed 256, 512, 1024, 2048, 4096")
        if not 0 <= self.lid < 1 << 16 or not 0 <= self.rkey < 1 << 32:
            raise ValueError(f"lid={self.lid} (16 bits) or rkey={self.rkey} (32 bits) out of range")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["qpns"], d["psns"] = list(self.qpns), list(self.psns)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PeerRecord":
        try:
            return cls(**{**d, "qpns": tuple(d["qpns"]), "psns": tuple(d["psns"])})
        except (KeyError, TypeError) as exc:
            raise BootstrapError(f"the peer's record is not a PeerRecord ({exc}): {d!r:.200}") from None


class Bootstrap:
    """Rank, size, and an allgather of JSON-able objects; close() when done."""

    rank: int
    size: int
    kind: str

    def allgather(self, obj):
        raise NotImplementedError

    def exchange(self, record: PeerRecord) -> list[PeerRecord]:
        """Every process's record, in rank order."""
        records = [PeerRecord.from_dict(d) for d in self.allgather(record.to_dict())]
        ranks = [r.rank for r in records]
        if ranks != list(range(self.size)):
            raise BootstrapError(f"records came back with ranks {ranks}; expected 0..{self.size - 1}")
        return records

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MpiBootstrap(Bootstrap):
    """MPI's COMM_WORLD (mpi4py)."""

    kind = "mpi"

    def __init__(self):
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise BootstrapError(f"mpi4py does not import ({exc}); install it (pip install "
                                 "mpi4py) or use the TCP bootstrap") from None
        self._comm = MPI.COMM_WORLD
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()

    def allgather(self, obj):
        # JSON both ways, as TCP does, so both bootstraps accept exactly the same records.
        return [json.loads(text) for text in self._comm.allgather(json.dumps(obj))]


def _send(sock: socket.socket, obj) -> None:
    data = json.dumps({"protocol": PROTOCOL, "body": obj}).encode()
    if len(data) > MAX_RECORD_BYTES:
        raise BootstrapError(f"record of {len(data)} bytes is larger than {MAX_RECORD_BYTES}")
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, what: str, peer: str) -> bytes:
    chunks, got = [], 0
    while got < n:
        try:
            chunk = sock.recv(n - got)
        except socket.timeout:
            raise BootstrapError(f"timed out waiting for {what} from {peer} (got {got} of {n} bytes)") from None
        if not chunk:
            raise BootstrapError(f"{peer} closed the connection after {got} of {n} bytes of {what}")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, peer: str):
    (length,) = struct.unpack(">I", _recv_exact(sock, 4, "a record length", peer))
    if length > MAX_RECORD_BYTES:
        raise BootstrapError(f"{peer} announced a record of {length} bytes (at most "
                             f"{MAX_RECORD_BYTES}): is it a gpuwrite bootstrap?")
    data = _recv_exact(sock, length, "a record", peer)
    try:
        message = json.loads(data)
    except ValueError:
        raise BootstrapError(f"{peer} sent {length} bytes that are not JSON: {data[:60]!r}") from None
    if not isinstance(message, dict) or message.get("protocol") != PROTOCOL:
        raise BootstrapError(f"{peer} does not speak {PROTOCOL}: {data[:80]!r}")
    return message["body"]


class TcpBootstrap(Bootstrap):
    """Two processes over one TCP connection: rank 0 listens, rank 1 connects.

    ``TcpBootstrap.listen(host, port)`` binds at once (port 0 picks a free one, see
    ``.port``) and accepts the peer on the first ``allgather``;
    ``TcpBootstrap.connect(host, port)`` retries until the listener is up or the timeout.
    """

    kind = "tcp"
    size = 2

    def __init__(self, rank: int, sock: socket.socket | None, listener: socket.socket | None,
                 peer: str, timeout_s: float):
        self.rank = rank
        self._sock = sock
        self._listener = listener
        self._peer = peer
        self.timeout_s = timeout_s

    @classmethod
    def listen(cls, host: str = "0.0.0.0", port: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S) -> "TcpBootstrap":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
        except OSError as exc:
            listener.close()
            raise BootstrapError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        listener.listen(1)
        return cls(0, None, listener, "the peer (rank 1)", timeout_s)

    @classmethod
    def connect(cls, host: str, port: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> "TcpBootstrap":
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
                sock.settimeout(timeout_s)
                return cls(1, sock, None, f"rank 0 at {host}:{port}", timeout_s)
            except OSError as exc:
                last = exc
                time.sleep(0.05)
        raise BootstrapError(f"could not connect to rank 0 at {host}:{port} within {timeout_s:g} s "
                             f"({getattr(last, 'strerror', None) or last}); is `gpuwrite testbed "
                             "--listen` running there?")

    @property
    def port(self) -> int:
        return (self._listener or self._sock).getsockname()[1]

    def _accept(self) -> None:
        self._listener.settimeout(self.timeout_s)
        try:
            sock, address = self._listener.accept()
        except socket.timeout:
            raise BootstrapError(f"no peer connected to port {self.port} within {self.timeout_s:g} s") from None
        sock.settimeout(self.timeout_s)
        self._sock = sock
        self._peer = f"rank 1 at {address[0]}:{address[1]}"

    def allgather(self, obj):
        if self._sock is None:
            self._accept()
        _send(self._sock, obj)
        theirs = _recv(self._sock, self._peer)
        return [obj, theirs] if self.rank == 0 else [theirs, obj]

    def close(self) -> None:
        for s in (self._sock, self._listener):
            if s is not None:
                s.close()
        self._sock = self._listener = None


def under_mpi_launcher() -> bool:
    return any(name in os.environ for name in _MPI_ENV)


def parse_endpoint(text: str, flag: str = "--listen/--connect") -> tuple[str, int]:
    """``"HOST:PORT"`` -> (host, port); raises BootstrapError naming the value and what is
    allowed (a host, and a TCP port from 1 to 65535)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise BootstrapError(f"{flag} {text!r} is not HOST:PORT (e.g. 10.0.0.1:18515)")
    if not 1 <= int(port) <= 65535:
        raise BootstrapError(f"{flag} {text!r}: port {int(port)} is not a TCP port (allowed 1 to 65535)")
    return host, int(port)


def from_environment(listen: str | None = None, connect: str | None = None,
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> Bootstrap:
    """MPI when started by an MPI launcher, else TCP: ``listen="HOST:PORT"`` on rank 0,
    ``connect="HOST:PORT"`` on rank 1."""
    if listen is None and connect is None:
        if under_mpi_launcher():
            return MpiBootstrap()
        raise BootstrapError("no peer given: run both sides under mpirun, or pass --listen "
                             "HOST:PORT on one host and --connect HOST:PORT on the other")
    if listen is not None and connect is not None:
        raise BootstrapError("give --listen or --connect, not both")
    if listen is not None:
        return TcpBootstrap.listen(*parse_endpoint(listen, "--listen"), timeout_s)
    return TcpBootstrap.connect(*parse_endpoint(connect, "--connect"), timeout_s)
