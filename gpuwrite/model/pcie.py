"""PCIe link and TLP accounting: bytes on the wire per direction, usable bandwidth, efficiency.

All rates are in Gb/s (gigabits per second, 1e9 bit/s); all sizes in bytes.
Framing follows the model of pcie-bench (Neugebauer et al., SIGCOMM 2018,
"Understanding PCIe performance for end host networking", repository
pcie-bench/pcie-model, model/pcie.py): each TLP costs a data-link/physical framing of
8 bytes plus a 4-byte generic header plus the type-specific header, and an optional
4-byte ECRC digest. The usable TLP bandwidth deducts ACK and UpdateFC DLLPs at the
rates the PCIe Base Specification recommends, and SKIP ordered sets.

Worked example (DESIGN.md): a 512-byte read answered by two 256-byte completions with
20 bytes of overhead each is 512 / 552 = 92.75 % efficient in the completion direction.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from gpuwrite.model import checks
from gpuwrite.model.errors import ParamError, check_choice

# --- constants from the PCIe Base Specification, via pcie-bench ---------------------

# Transfer rate per lane in GT/s. PCIe Base Spec rev 6.0, Table 4-1 (Gen1..Gen6).
TRANSFER_RATE_GTPS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
# Line encoding efficiency: 8b/10b (Gen1/2, Base Spec 4.2.1), 128b/130b (Gen3-5,
# Base Spec 4.2.2). Gen6 uses FLIT mode; pcie-bench approximates it as 242/256 and so do we.
ENCODING_EFFICIENCY = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
LINK_WIDTHS = (1, 2, 4, 8, 16, 32)
# Maximum Payload Size, Maximum Read Request Size: Base Spec 7.5.3.4 (Device Control).
MPS_BYTES = (128, 256, 512, 1024, 2048, 4096)
MRRS_BYTES = (128, 256, 512, 1024, 2048, 4096)
# Read Completion Boundary: 64 or 128 bytes at a root complex (Base Spec 2.3.1.1);
# pcie-bench also allows 256 and 512 for endpoints that split coarser.
RCB_BYTES = (64, 128, 256, 512)
ADDRESS_BITS = (32, 64)
# A TLP must not cross a 4 KiB address boundary (Base Spec 2.2.7).
TLP_BOUNDARY_BYTES = 4096

# Framing per TLP: 2 B physical (STP/END) + 6 B sequence number and LCRC
# (pcie-bench DLLP_Hdr = 8).
TLP_FRAMING_BYTES = 8
TLP_GENERIC_HEADER_BYTES = 4      # first DW of every TLP header (Base Spec 2.2.1)
MWR_ADDRESS_BYTES = {32: 8, 64: 12}   # MWr 3DW / 4DW header rest (Base Spec 2.2.7)
MRD_ADDRESS_BYTES = {32: 8, 64: 12}   # MRd 3DW / 4DW header rest (Base Spec 2.2.7)
CPLD_HEADER_BYTES = 8             # CplD: completer ID, byte count, requester ID, tag
ECRC_BYTES = 4                    # optional TLP digest (Base Spec 2.7.1)

# DLLPs: 2 B framing + 4 B DLLP + 2 B CRC (pcie-bench Ack_Size, FC_Size).
ACK_DLLP_BYTES = 8
UPDATE_FC_DLLP_BYTES = 8
# SKIP ordered set of 4 symbols every 1538 symbols (pcie-bench SKIP_Length/Interval,
# after Base Spec 4.2.7).
SKIP_BYTES = 4
SKIP_INTERVAL_BYTES = 1538

# Bytes of TLP traffic between ACK DLLPs, by generation group, width and MPS:
# PCIe Base Spec rev 5.0 Tables 3-7, 3-8, 3-9 (Ack transmission latency limit), as
# tabulated in pcie-bench. Gen4..Gen6 reuse the Gen3 values (pcie-bench does the same for
# Gen4+; the spec tables for them are in symbol times of the same size).
_ACK_GEN1 = {
    1: (237, 416, 559, 1071, 2095, 4143), 2: (128, 217, 289, 545, 1057, 2081),
    4: (73, 118, 154, 282, 538, 1050), 8: (67, 107, 86, 150, 278, 534),
    16: (48, 72, 86, 150, 278, 534), 32: (33, 45, 52, 84, 148, 276),
}
_ACK_GEN2 = {
    1: (288, 467, 610, 1122, 2146, 4194), 2: (179, 268, 340, 596, 1108, 2132),
    4: (124, 169, 205, 333, 589, 1101), 8: (118, 158, 137, 201, 329, 585),
    16: (99, 123, 137, 201, 329, 585), 32: (84, 96, 103, 135, 199, 237),
}
_ACK_GEN3 = {
    1: (333, 512, 655, 1167, 2191, 4239), 2: (224, 313, 385, 641, 1153, 2177),
    4: (169, 214, 250, 378, 634, 1146), 8: (163, 203, 182, 246, 374, 630),
    16: (144, 168, 182, 246, 374, 630), 32: (129, 141, 148, 180, 244, 372),
}
ACK_INTERVAL_BYTES = {1: _ACK_GEN1, 2: _ACK_GEN2, 3: _ACK_GEN3, 4: _ACK_GEN3, 5: _ACK_GEN3, 6: _ACK_GEN3}
# Bytes of TLP traffic between UpdateFC DLLPs: PCIe Base Spec rev 5.0 Tables 2-46, 2-47,
# 2-48 (UpdateFC transmission latency guidelines), as tabulated in pcie-bench model/pcie.py
# (FC_Guide). They share the ACK tables' formula and differ from them in two entries:
# Gen1 x32 at MPS 2048 (248, ACK 148) and Gen2 x32 at MPS 4096 (327, ACK 237).
_FC_GEN1 = {**_ACK_GEN1, 32: (33, 45, 52, 84, 248, 276)}
_FC_GEN2 = {**_ACK_GEN2, 32: (84, 96, 103, 135, 199, 327)}
UPDATE_FC_INTERVAL_BYTES = {1: _FC_GEN1, 2: _FC_GEN2, 3: _ACK_GEN3, 4: _ACK_GEN3, 5: _ACK_GEN3, 6: _ACK_GEN3}


LINK_SOURCES = {
    "generation": "calibration h200-pcie5-2026-11.md: H200 on PCIe Gen5 x16",
    "width": "calibration h200-pcie5-2026-11.md: H200 on PCIe Gen5 x16",
    "mps_bytes": "assumption: common server setting (pcie-bench uses MPS 256)",
    "mrrs_bytes": "assumption: Linux default MRRS 512 for most endpoints",
    "rcb_bytes": "PCIe Base Spec 2.3.1.1: root complex RCB 64 B",
    "address_bits": "64-bit addressing for GPU BARs above 4 GiB",
    "ecrc": "ECRC is off on common platforms",
    "rcb_chunks": "pcie-bench model option: completer splits at every RCB (off: at MPS)",
}


@dataclass(frozen=True)
class LinkConfig:
    """One PCIe link as configured: generation, width, MPS, MRRS, RCB, addressing, ECRC.

    ``rcb_chunks`` says whether a completer splits read completions at every RCB
    (True) or only where it must, at MPS (False, the default: most root complexes and
    GPUs send MPS-sized completions for aligned reads).
    """

    generation: int = 5          # calibration: H200 on PCIe Gen5 x16
    width: int = 16              # calibration: H200 on PCIe Gen5 x16
    mps_bytes: int = 256         # assumption: the common server setting (pcie-bench uses 256)
    mrrs_bytes: int = 512        # assumption: Linux default MRRS for most endpoints
    rcb_bytes: int = 64          # PCIe Base Spec 2.3.1.1: root complex RCB 64 B
    address_bits: int = 64       # 64-bit addressing for GPU BARs (above 4 GiB)
    ecrc: bool = False           # ECRC is off on common platforms
    rcb_chunks: bool = False

    def __post_init__(self):
        check_choice("generation", self.generation, tuple(TRANSFER_RATE_GTPS))
        check_choice("width", self.width, LINK_WIDTHS)
        check_choice("mps_bytes", self.mps_bytes, MPS_BYTES)
        check_choice("mrrs_bytes", self.mrrs_bytes, MRRS_BYTES)
        check_choice("rcb_bytes", self.rcb_bytes, RCB_BYTES)
        check_choice("address_bits", self.address_bits, ADDRESS_BITS)
        check_choice("ecrc", self.ecrc, (False, True))
        check_choice("rcb_chunks", self.rcb_chunks, (False, True))

    def to_dict(self) -> dict:
        return asdict(self)


# --- one small function per formula --------------------------------------------------

def raw_rate_gbps(generation: int, width: int) -> float:
    """Line rate after encoding: GT/s x encoding efficiency x lanes."""
    check_choice("generation", generation, tuple(TRANSFER_RATE_GTPS))
    check_choice("width", width, LINK_WIDTHS)
    return TRANSFER_RATE_GTPS[generation] * ENCODING_EFFICIENCY[generation] * width


def dllp_overhead_fraction(link: LinkConfig) -> float:
    """Share of the raw rate taken by ACK DLLPs, UpdateFC DLLPs and SKIP ordered sets."""
    index = MPS_BYTES.index(link.mps_bytes)
    ack = ACK_DLLP_BYTES / ACK_INTERVAL_BYTES[link.generation][link.width][index]
    update_fc = UPDATE_FC_DLLP_BYTES / UPDATE_FC_INTERVAL_BYTES[link.generation][link.width][index]
    skip = SKIP_BYTES / SKIP_INTERVAL_BYTES
    return ack + update_fc + skip


def tlp_rate_gbps(link: LinkConfig) -> float:
    """Bandwidth usable by TLPs (headers and payload) in one direction."""
    raw = raw_rate_gbps(link.generation, link.width)
    return raw * (1.0 - dllp_overhead_fraction(link))


def write_tlp_overhead_bytes(link: LinkConfig) -> int:
    """Wire bytes of one memory-write TLP beyond its payload."""
    return (TLP_FRAMING_BYTES + TLP_GENERIC_HEADER_BYTES + MWR_ADDRESS_BYTES[link.address_bits]
            + (ECRC_BYTES if link.ecrc else 0))


def read_request_tlp_bytes(link: LinkConfig) -> int:
    """Wire bytes of one memory-read request TLP (it carries no payload)."""
    return (TLP_FRAMING_BYTES + TLP_GENERIC_HEADER_BYTES + MRD_ADDRESS_BYTES[link.address_bits]
            + (ECRC_BYTES if link.ecrc else 0))


def completion_tlp_overhead_bytes(link: LinkConfig) -> int:
    """Wire bytes of one completion-with-data TLP beyond its payload (20 B without ECRC)."""
    return (TLP_FRAMING_BYTES + TLP_GENERIC_HEADER_BYTES + CPLD_HEADER_BYTES
            + (ECRC_BYTES if link.ecrc else 0))


def _check_transfer(size_bytes: int, start_address: int) -> None:
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ParamError("size_bytes", size_bytes, "an integer >= 0")
    if isinstance(start_address, bool) or not isinstance(start_address, int) or start_address < 0:
        raise ParamError("start_address", start_address, "an integer >= 0")


def split_aligned_runs(size_bytes: int, start_address: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """``split_aligned`` as runs, in order: (piece size, how many in a row). At most three
    runs (a head up to the first boundary, whole chunks, a tail), whatever the size, so
    counts and byte totals cost O(1) where the list of pieces costs one entry per piece."""
    if size_bytes <= 0:
        return []
    end = start_address + size_bytes
    boundary = (start_address // chunk_bytes + 1) * chunk_bytes
    if end <= boundary:
        return [(size_bytes, 1)]
    head = boundary - start_address
    body, tail = divmod(end - boundary, chunk_bytes)
    runs = [(head, 1)]
    if body:
        if head == chunk_bytes:
            runs[0] = (chunk_bytes, body + 1)
        else:
            runs.append((chunk_bytes, body))
    if tail:
        runs.append((tail, 1))
    return runs


def split_aligned(size_bytes: int, start_address: int, chunk_bytes: int) -> list[int]:
    """Split [start, start+size) at multiples of ``chunk_bytes``; return the piece sizes."""
    pieces = []
    for piece, count in split_aligned_runs(size_bytes, start_address, chunk_bytes):
        pieces += [piece] * count
    return pieces


def write_tlp_sizes(link: LinkConfig, size_bytes: int, start_address: int = 0) -> list[int]:
    """Payload of each write TLP: split at MPS-aligned addresses (so never across 4 KiB)."""
    _check_transfer(size_bytes, start_address)
    return split_aligned(size_bytes, start_address, link.mps_bytes)


def read_request_sizes(link: LinkConfig, size_bytes: int, start_address: int = 0) -> list[int]:
    """Bytes asked by each read request: split at MRRS-aligned addresses."""
    _check_transfer(size_bytes, start_address)
    return split_aligned(size_bytes, start_address, link.mrrs_bytes)


def completion_sizes(link: LinkConfig, size_bytes: int, start_address: int = 0) -> list[int]:
    """Payload of each completion answering a read of ``size_bytes`` at ``start_address``.

    Each request is answered by completions that end on RCB-aligned addresses (or the
    request's end); each carries at most MPS bytes, or exactly up to the next RCB
    boundary when the completer splits at every RCB (``rcb_chunks``). An unaligned start
    therefore costs an extra short completion up to the first boundary. No completion
    exceeds MPS (Base Spec 2.2.2): where RCB > MPS, completions end on MPS-aligned
    addresses instead (MPS and RCB are powers of two, so MPS alignment is the finest
    split that still keeps every completion within MPS).
    """
    pieces = []
    position = start_address
    limit, align = _completion_limit(link)
    for request in read_request_sizes(link, size_bytes, start_address):
        request_end = position + request
        while position < request_end:
            end = min(request_end, (position + limit) // align * align)
            pieces.append(end - position)
            position = end
    return pieces


def write_tlp_count(link: LinkConfig, size_bytes: int, start_address: int = 0) -> int:
    """``len(write_tlp_sizes(...))`` in O(1)."""
    _check_transfer(size_bytes, start_address)
    return sum(count for _, count in split_aligned_runs(size_bytes, start_address, link.mps_bytes))


def read_request_count(link: LinkConfig, size_bytes: int, start_address: int = 0) -> int:
    """``len(read_request_sizes(...))`` in O(1)."""
    _check_transfer(size_bytes, start_address)
    return sum(count for _, count in split_aligned_runs(size_bytes, start_address, link.mrrs_bytes))


def _completion_limit(link: LinkConfig) -> tuple[int, int]:
    """The most payload one completion carries (MPS, or the RCB where the completer splits
    at every RCB) and the alignment completions end on (the RCB, or MPS where smaller)."""
    limit = min(link.rcb_bytes if link.rcb_chunks else link.mps_bytes, link.mps_bytes)
    return limit, min(link.rcb_bytes, limit)


def _request_completions(position: int, request: int, limit: int, align: int) -> list[tuple[int, int]]:
    """(payload, count) of the completions answering one request of ``request`` bytes at
    ``position``, as ``completion_sizes`` cuts them: the first ends on the last ``align``
    boundary within ``limit`` bytes (or at the request's end); from there on every
    completion starts aligned, so all are ``limit`` bytes but a shorter last one."""
    first = min(request, (position + limit) // align * align - position)
    full, tail = divmod(request - first, limit)
    runs = [(first, 1)]
    if full:
        runs.append((limit, full))
    if tail:
        runs.append((tail, 1))
    return runs


def completion_runs(link: LinkConfig, size_bytes: int, start_address: int = 0) -> list[tuple[int, int]]:
    """The payloads of ``completion_sizes`` with their multiplicities, (payload, count),
    without listing every completion: O(1) in the size (not in the completions' order).

    Requests come as at most three runs of equal size (``split_aligned_runs``); the
    requests of a run start ``request`` bytes apart, so their offsets from the completion
    alignment repeat with a period of align / gcd(align, request) (1 where MRRS >= the
    alignment, at most 4 otherwise), and requests of one offset are cut alike.
    """
    _check_transfer(size_bytes, start_address)
    limit, align = _completion_limit(link)
    runs: list[tuple[int, int]] = []
    position = start_address
    for request, count in split_aligned_runs(size_bytes, start_address, link.mrrs_bytes):
        period = align // math.gcd(align, request)
        for j in range(min(period, count)):
            same = (count - j + period - 1) // period     # requests j, j + period, ... of the run
            for payload, n in _request_completions(position + j * request, request, limit, align):
                runs.append((payload, n * same))
        position += request * count
    return runs


def completion_count(link: LinkConfig, size_bytes: int, start_address: int = 0) -> int:
    """``len(completion_sizes(...))`` in O(1)."""
    return sum(count for _, count in completion_runs(link, size_bytes, start_address))


@dataclass(frozen=True)
class WireBytes:
    """Bytes on the wire for one transfer, per direction of a link.

    ``data_direction_bytes`` travel the way the payload moves (write TLPs, or read
    completions); ``other_direction_bytes`` travel against it (read requests).
    """

    payload_bytes: int
    data_direction_bytes: int
    other_direction_bytes: int
    tlp_count: int


def write_wire_bytes(link: LinkConfig, size_bytes: int, start_address: int = 0) -> WireBytes:
    """Bytes on the wire for a posted write of ``size_bytes``: one direction only."""
    count = write_tlp_count(link, size_bytes, start_address)
    wire = size_bytes + count * write_tlp_overhead_bytes(link)
    return WireBytes(size_bytes, wire, 0, count)


def read_wire_bytes(link: LinkConfig, size_bytes: int, start_address: int = 0) -> WireBytes:
    """Bytes on the wire for a read: requests one way, completions the other."""
    requests = read_request_count(link, size_bytes, start_address)
    completions = completion_count(link, size_bytes, start_address)
    data = size_bytes + completions * completion_tlp_overhead_bytes(link)
    other = requests * read_request_tlp_bytes(link)
    return WireBytes(size_bytes, data, other, requests + completions)


OPERATIONS = ("read", "write")


def wire_bytes(link: LinkConfig, operation: str, size_bytes: int, start_address: int = 0) -> WireBytes:
    """Dispatch to ``read_wire_bytes`` or ``write_wire_bytes``."""
    check_choice("operation", operation, OPERATIONS)
    checks.check_start_address(start_address, size_bytes, link.address_bits)
    if operation == "read":
        return read_wire_bytes(link, size_bytes, start_address)
    return write_wire_bytes(link, size_bytes, start_address)


def efficiency(link: LinkConfig, operation: str, size_bytes: int, start_address: int = 0) -> float:
    """Payload bytes over wire bytes in the payload's direction (0 for an empty transfer)."""
    wire = wire_bytes(link, operation, size_bytes, start_address)
    if wire.data_direction_bytes == 0:
        return 0.0
    return wire.payload_bytes / wire.data_direction_bytes


def effective_rate_gbps(link: LinkConfig, operation: str, size_bytes: int, start_address: int = 0) -> float:
    """Payload rate when back-to-back transfers of this size saturate the link.

    Both directions are checked: reads are limited by completions in one direction and,
    for tiny reads, by requests in the other.
    """
    wire = wire_bytes(link, operation, size_bytes, start_address)
    if wire.payload_bytes == 0:
        return 0.0
    busiest = max(wire.data_direction_bytes, wire.other_direction_bytes)
    return tlp_rate_gbps(link) * wire.payload_bytes / busiest


def serialization_ns(bytes_on_wire: float, rate_gbps: float) -> float:
    """Time to put ``bytes_on_wire`` on a link of ``rate_gbps``."""
    return bytes_on_wire * 8.0 / rate_gbps


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


