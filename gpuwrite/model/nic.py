"""The NIC, the GPU that feeds it, the network link with credits, and the remote receiver.

Parameters only, plus one small function per formula (packets, wire bytes, credits).
Rates are Gb/s, times ns, sizes bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpuwrite.model.errors import ParamError, check_choice, check_positive

POLICIES = ("hold", "drop")
SCHEDULERS = ("fifo", "round_robin")

# mlx5 WQE layout (csrc header, DESIGN.md): 64-byte basic blocks; a control segment of
# 16 B, a remote-address segment of 16 B, an inline-data header of 4 B.
WQE_BASIC_BLOCK_BYTES = 64
WQE_CTRL_SEGMENT_BYTES = 16
WQE_RADDR_SEGMENT_BYTES = 16
WQE_INLINE_HEADER_BYTES = 4
CQE_BYTES = 64                       # mlx5 CQE (DESIGN.md byte layouts)
DOORBELL_BYTES = 8                   # one 64-bit doorbell record / MMIO write
# Header the GPU writes in front of each pushed payload (csrc/gw_layouts.h GW_STAGE_HDR_BYTES).
STAGE_HEADER_BYTES = 16
# How a gpu_push WQE reaches the NIC: written with the doorbell into the NIC's BlueFlame
# register ("blueflame", the NIC reads nothing), or posted in GPU memory and fetched by
# the NIC after the doorbell ("fetch", as the emulated software NIC does).
WQE_DELIVERIES = ("blueflame", "fetch")
# gpu_push: when the NIC forwards pushed packets (NicParams.push_forwarding).
PUSH_FORWARDINGS = ("on_arrival", "after_doorbell")
# InfiniBand: credits are counted in 64-byte blocks (IBTA spec Vol 1, 7.9.4 flow control).
CREDIT_BLOCK_BYTES = 64
# RDMA WRITE packet headers: LRH 8 + BTH 12 + RETH 16 + ICRC 4 + VCRC 2 (IBTA spec Vol 1,
# chapter 5/9 header formats); RETH is carried on every packet here (an upper bound).
IB_HEADER_BYTES = 42
IB_MTUS = (256, 512, 1024, 2048, 4096)  # IBTA spec Vol 1, 7.7.1


def _check_int(name: str, value, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParamError(name, value, f"an integer >= {minimum}")


@dataclass(frozen=True)
class GpuParams:
    """How fast the GPU issues stores, copies and loads, and how often it polls."""

    # calibration: "full-grid GPU stores into mapped host memory, 256 MiB: 52.4 GB/s"
    store_rate_gbps: float = 52.4 * 8
    # calibration: "copy engine device->host, 256 MiB pinned: 55.1 GB/s"
    copy_rate_gbps: float = 55.1 * 8
    # Time for a store to leave the SM and reach the GPU's PCIe port: half of
    # topology.GPU_READ_ISSUE_NS (derived from the calibration's 1.14 us host read).
    write_issue_ns: float = 130.0
    # A GPU load's own cost to leave the SM and come back (calibrate's derivation).
    read_issue_ns: float = 260.0
    # The push loop re-reads the NIC's staging-credit word every this often: one dependent
    # ld.acquire.sys of GPU memory (calibration: 0.15 us) per poll.
    poll_interval_ns: float = 150.0
    # Scale of the exponential tail of one host read's round trip: a warp whose 32 lanes
    # read different lines waits for the slowest, 3.06 x this beyond the mean
    # (model/requester.py). calibration nvidia-h100-80gb-hbm3-2026-11-23-b.toml: 32 loads
    # in flight took 1.433 us per step against a 1.202 us round trip.
    read_jitter_ns: float = 75.5
    # Reads of host memory the GPU keeps outstanding at most: each holds a PCIe tag for one
    # round trip. PCIe Base Spec 4.0 2.2.6.2: 10-bit tags allow 768 outstanding non-posted
    # requests per function; assumption: the GPU uses them all (Gen5 GPUs support 10-bit tags).
    read_tags: int = 768
    # Time the shared completer (root complex to host memory) spends on one GPU read: the
    # reads' plateau is 1 / this, and the round trip grows as warps queue there
    # (model/requester.py). 0: not measured, no queue; the plateau is then the assumed
    # read_tags per round trip. `gpuwrite calibrate` derives it from its sweep's largest
    # point of loads in flight.
    read_service_ns: float = 0.0
    # Fixed cost of one copy-engine copy before its bytes move (launch, descriptor, the
    # completion's semaphore). calibration nvidia-h100-80gb-hbm3-2026-11-23-b.toml: 4 KiB
    # copies queued back to back took 2.65 us (H2D) and 1.65 us (D2H) each.
    copy_setup_h2d_ns: float = 2568.0
    copy_setup_d2h_ns: float = 1572.0

    def __post_init__(self):
        check_positive("gpu.store_rate_gbps", self.store_rate_gbps)
        check_positive("gpu.copy_rate_gbps", self.copy_rate_gbps)
        check_positive("gpu.write_issue_ns", self.write_issue_ns, zero_ok=True)
        check_positive("gpu.read_issue_ns", self.read_issue_ns, zero_ok=True)
        check_positive("gpu.poll_interval_ns", self.poll_interval_ns, zero_ok=True)
        check_positive("gpu.read_jitter_ns", self.read_jitter_ns, zero_ok=True)
        _check_int("gpu.read_tags", self.read_tags, 1)
        check_positive("gpu.read_service_ns", self.read_service_ns, zero_ok=True)
        check_positive("gpu.copy_setup_h2d_ns", self.copy_setup_h2d_ns, zero_ok=True)
        check_positive("gpu.copy_setup_d2h_ns", self.copy_setup_d2h_ns, zero_ok=True)


@dataclass(frozen=True)
class NicParams:
    """The NIC: doorbell processing, the push staging buffer and its policy, the scheduler."""

    # Doorbell / WQE processing inside the NIC: assumption, to be calibrated.
    processing_ns: float = 100.0
    # Push staging region (on-NIC memory, ibv_alloc_dm): assumption, 1 MiB.
    staging_buffer_bytes: int = 1 << 20
    # hold: the GPU reserves staging space first and the NIC holds data until credits
    # exist (never loses). drop: the naive design, lost when credits are missing.
    policy: str = "hold"
    # fifo: the NIC serves messages in the order they reach it, across QPs.
    # round_robin: one queue per QP, served in turn (push paths only).
    scheduler: str = "fifo"
    # BlueFlame register of 256 B minus control, remote-address and inline headers:
    # 256 - 16 - 16 - 4 = 220 (mlx5 layout; assumption on the BlueFlame size).
    inline_max_bytes: int = 220
    # host_staged: bounce-buffer chunk size for the pipelined copy (assumption).
    bounce_chunk_bytes: int = 64 * 1024
    # gpu_push: how the WQE reaches the NIC (WQE_DELIVERIES).
    push_wqe_delivery: str = "blueflame"
    # gpu_push: when the NIC forwards a pushed packet (PUSH_FORWARDINGS). on_arrival: once
    # its bytes are in, before the doorbell that follows the payload: the NIC sees every
    # write TLP to its staging memory and tracks the lines of each slot (the proposal's
    # NIC; an assumption). after_doorbell: a NIC that learns of a message from its doorbell
    # forwards nothing before it, so the message is stored whole, then sent (what
    # gpuwrite's emulated NIC does: a CPU thread cannot see which lines have landed).
    push_forwarding: str = "on_arrival"
    # Read engine (nic_pull, host_staged): read requests the NIC keeps outstanding at
    # once (PCIe tags; 8-bit tags allow 256): assumption, 64 x MRRS 512 = 32 KiB in
    # flight. Bandwidth = min(link, outstanding bytes / read round trip).
    read_outstanding: int = 64
    # Per read request cost of the DMA engine (descriptor, tag, issue): pcie-bench/data
    # bw_dma_sz_sweep.csv, NFP6000 on E5-2630v4: 64 B reads peak at 62.3 M/s = 16 ns each;
    # a ConnectX-class engine is assumed 4x faster.
    read_request_overhead_ns: float = 4.0
    # The engine's time per read request that grows with its bytes: fixed + bytes x
    # per byte, the bytes not overlapping the next request's (time per request =
    # max(read_request_overhead_ns, this)). 0 and 0: no such cost (a ConnectX-class engine
    # is assumed to move a request's bytes at link rate). pcie-bench's NFP6000 sets both
    # (gpuwrite/model/validation_data/nfp6000_e5-2630v4.toml, fitted at 129 and 192 B).
    read_engine_fixed_ns: float = 0.0
    read_engine_per_byte_ns: float = 0.0
    # How fast one read's completions enter the NIC's memory (its DMA engine's data path
    # for a single transfer); 0: as fast as the link. Several reads overlap, so this
    # bounds one read's latency, not the engine's bandwidth.
    read_stream_gbps: float = 0.0
    # drop policy: the naive NIC's cut-through FIFO (bytes) in front of the network link;
    # data is lost when it overflows while link credits are missing. Assumption: 16 KiB.
    # A packet occupies it whole from when it is ready until it starts on the wire, so a
    # FIFO smaller than one packet (MTU + headers) drops every packet, even on an idle
    # link, where a FIFO that cuts through would pass it: keep it at least one packet.
    fifo_bytes: int = 16 * 1024

    def __post_init__(self):
        check_positive("nic.processing_ns", self.processing_ns, zero_ok=True)
        _check_int("nic.staging_buffer_bytes", self.staging_buffer_bytes, 1)
        check_choice("nic.policy", self.policy, POLICIES)
        check_choice("nic.scheduler", self.scheduler, SCHEDULERS)
        _check_int("nic.inline_max_bytes", self.inline_max_bytes, 0)
        # A cache line at least: the pipeline is walked chunk by chunk (a 1 MiB message
        # in 1-byte chunks took minutes), and no host copies less per DMA.
        _check_int("nic.bounce_chunk_bytes", self.bounce_chunk_bytes, 64)
        check_choice("nic.push_wqe_delivery", self.push_wqe_delivery, WQE_DELIVERIES)
        check_choice("nic.push_forwarding", self.push_forwarding, PUSH_FORWARDINGS)
        _check_int("nic.read_outstanding", self.read_outstanding, 1)
        check_positive("nic.read_request_overhead_ns", self.read_request_overhead_ns, zero_ok=True)
        check_positive("nic.read_engine_fixed_ns", self.read_engine_fixed_ns, zero_ok=True)
        check_positive("nic.read_engine_per_byte_ns", self.read_engine_per_byte_ns, zero_ok=True)
        check_positive("nic.read_stream_gbps", self.read_stream_gbps, zero_ok=True)
        _check_int("nic.fifo_bytes", self.fifo_bytes, 0)


@dataclass(frozen=True)
class NetworkParams:
    """The network link out of the NIC, with credit-based flow control (one VL)."""

    # NDR InfiniBand 4x (ConnectX-7 class): 400 Gb/s. IBTA spec; assumption of the NIC.
    rate_gbps: float = 400.0
    # ~20 m of cable at 5 ns/m: assumption.
    propagation_ns: float = 100.0
    mtu_bytes: int = 4096                   # IBTA maximum MTU
    header_bytes: int = IB_HEADER_BYTES
    credit_block_bytes: int = CREDIT_BLOCK_BYTES
    # Receive buffer of the VL at the far end: assumption, 256 KiB.
    vl_buffer_bytes: int = 256 * 1024
    # Time from the receiver freeing buffer to the sender seeing the credits (FCCL
    # packet interval and processing): assumption, 500 ns (+ propagation).
    credit_update_delay_ns: float = 500.0

    def __post_init__(self):
        check_positive("network.rate_gbps", self.rate_gbps)
        check_positive("network.propagation_ns", self.propagation_ns, zero_ok=True)
        check_choice("network.mtu_bytes", self.mtu_bytes, IB_MTUS)
        _check_int("network.header_bytes", self.header_bytes, 0)
        check_choice("network.credit_block_bytes", self.credit_block_bytes, (CREDIT_BLOCK_BYTES,))
        _check_int("network.vl_buffer_bytes", self.vl_buffer_bytes, self.credit_block_bytes)
        check_positive("network.credit_update_delay_ns", self.credit_update_delay_ns, zero_ok=True)

    @property
    def credits_total(self) -> int:
        return self.vl_buffer_bytes // self.credit_block_bytes


@dataclass(frozen=True)
class ReceiverParams:
    """The remote receiver: drains its VL buffer at a rate and can stall periodically.

    Stalls repeat every ``stall_period_ns`` and last ``stall_duration_ns``, the first
    starting at ``stall_offset_ns``; a period of 0 means it never stalls.
    """

    drain_rate_gbps: float = 400.0          # line rate: assumption
    stall_period_ns: float = 0.0
    stall_duration_ns: float = 0.0
    stall_offset_ns: float = 0.0

    def __post_init__(self):
        check_positive("receiver.drain_rate_gbps", self.drain_rate_gbps)
        check_positive("receiver.stall_period_ns", self.stall_period_ns, zero_ok=True)
        check_positive("receiver.stall_duration_ns", self.stall_duration_ns, zero_ok=True)
        check_positive("receiver.stall_offset_ns", self.stall_offset_ns, zero_ok=True)
        if self.stall_period_ns > 0 and self.stall_duration_ns >= self.stall_period_ns:
            raise ParamError("receiver.stall_duration_ns", self.stall_duration_ns,
                             f"less than receiver.stall_period_ns ({self.stall_period_ns})")
        # The simulator counts whole picoseconds: a stall that leaves no picosecond of the
        # period to drain in would never end there (it hung).
        if (self.stall_period_ns > 0 and self.stall_duration_ns > 0
                and round(self.stall_period_ns * 1000) - round(self.stall_duration_ns * 1000) < 1):
            raise ParamError("receiver.stall_duration_ns", self.stall_duration_ns,
                             f"at most receiver.stall_period_ns ({self.stall_period_ns}) - 0.001 "
                             "(the simulator counts whole picoseconds)")

    @property
    def duty_cycle(self) -> float:
        """Share of time the receiver drains."""
        if self.stall_period_ns <= 0:
            return 1.0
        return 1.0 - self.stall_duration_ns / self.stall_period_ns


# --- formulas ----------------------------------------------------------------------

def packet_count(network: NetworkParams, size_bytes: int) -> int:
    """Packets of one message: at least one (an empty write still sends a packet)."""
    return max(1, -(-size_bytes // network.mtu_bytes))


def network_wire_bytes(network: NetworkParams, size_bytes: int) -> int:
    """Bytes on the network link for one message: payload plus per-packet headers."""
    return size_bytes + packet_count(network, size_bytes) * network.header_bytes


def packet_payloads(network: NetworkParams, size_bytes: int) -> list[int]:
    """Payload bytes of each packet of one message (MTU-sized, the last one shorter)."""
    full, rest = divmod(size_bytes, network.mtu_bytes)
    return [network.mtu_bytes] * full + ([rest] if rest or full == 0 else [])


def packet_credits(network: NetworkParams, payload_bytes: int) -> int:
    """Credit blocks one packet takes when it is sent: header + payload in 64-byte blocks."""
    return -(-(payload_bytes + network.header_bytes) // network.credit_block_bytes)


def credits_needed(network: NetworkParams, size_bytes: int) -> int:
    """Credit blocks all packets of one message take: each rounds up to whole 64-byte blocks."""
    full, rest = divmod(size_bytes, network.mtu_bytes)
    block = network.credit_block_bytes
    credits = full * (-(-(network.mtu_bytes + network.header_bytes) // block))
    if rest or full == 0:
        credits += -(-(rest + network.header_bytes) // block)
    return credits


SOURCES = {
    "gpu.store_rate_gbps": "calibration h200-pcie5-2026-11.md: full-grid GPU stores to host, 52.4 GB/s",
    "gpu.copy_rate_gbps": "calibration h200-pcie5-2026-11.md: copy engine D2H, 55.1 GB/s",
    "gpu.write_issue_ns": "calibration: half of gpu.read_issue_ns (derived from the 1.14 us host read)",
    "gpu.read_issue_ns": "calibration: 1.14 us GPU read of host memory minus the modelled tree round trip",
    "gpu.poll_interval_ns": "calibration: one dependent ld.acquire.sys of GPU memory 0.15 us",
    "gpu.read_jitter_ns": "calibration nvidia-h100-80gb-hbm3-2026-11-23-b.toml: 32 host loads in flight, "
                          "1.433 us per warp step vs 1.202 us round trip (model/requester.py)",
    "gpu.read_tags": "PCIe Base Spec 4.0 2.2.6.2: 768 outstanding reads with 10-bit tags; assumption: "
                     "the GPU uses them all",
    "gpu.read_service_ns": "assumption: 0, no completer queue (reads capped by gpu.read_tags only); "
                           "calibrate derives it from its largest point of host loads in flight",
    "gpu.copy_setup_h2d_ns": "calibration nvidia-h100-80gb-hbm3-2026-11-23-b.toml: queued 4 KiB H2D copies, "
                             "2.65 us each, minus 4 KiB at the link's read rate",
    "gpu.copy_setup_d2h_ns": "calibration nvidia-h100-80gb-hbm3-2026-11-23-b.toml: queued 4 KiB D2H copies, "
                             "1.65 us each, minus 4 KiB at the link's write rate",
    "nic.processing_ns": "assumption: doorbell / WQE processing in the NIC",
    "nic.staging_buffer_bytes": "assumption: 1 MiB on-NIC staging region (ibv_alloc_dm)",
    "nic.policy": "model choice: hold (GPU reserves staging first) or drop (naive cut-through FIFO)",
    "nic.scheduler": "model choice: fifo or per-QP round_robin (push paths, hold)",
    "nic.inline_max_bytes": "mlx5 layout: 256 B BlueFlame minus 16+16+4 B of headers",
    "nic.bounce_chunk_bytes": "assumption: host_staged pipeline chunk",
    "nic.push_wqe_delivery": "model choice: BlueFlame (WQE with the doorbell) or fetch",
    "nic.push_forwarding": "assumption: on_arrival, the NIC forwards a pushed packet once its bytes are in, "
                           "before the doorbell (it tracks the staging lines it receives); after_doorbell: "
                           "the whole message first (Fig. 6's third panel shows what rests on it)",
    "nic.read_outstanding": "assumption: 64 outstanding read requests (8-bit PCIe tags allow 256)",
    "nic.read_request_overhead_ns": "pcie-bench/data bw_dma_sz_sweep.csv: NFP6000 16 ns per 64 B DMA; assumed 4x faster",
    "nic.read_engine_fixed_ns": "assumption: 0, a ConnectX-class engine's time per request is its issue cost "
                                "alone; pcie-bench's NFP6000: 12.2 ns (validation_data/nfp6000_e5-2630v4.toml)",
    "nic.read_engine_per_byte_ns": "assumption: 0, a ConnectX-class engine moves a request's bytes at link rate; "
                                   "pcie-bench's NFP6000: 0.117 ns a byte (validation_data/nfp6000_e5-2630v4.toml)",
    "nic.read_stream_gbps": "assumption: a ConnectX-class engine streams one read at link rate (0); "
                            "pcie-bench's NFP6000 does not (gpuwrite/model/validation_data)",
    "nic.fifo_bytes": "assumption: 16 KiB cut-through FIFO of the naive (drop) NIC",
    "network.rate_gbps": "IBTA NDR 4x: 400 Gb/s",
    "network.propagation_ns": "assumption: ~20 m of cable at 5 ns/m",
    "network.mtu_bytes": "IBTA spec Vol 1 7.7.1: largest MTU 4096",
    "network.header_bytes": "IBTA spec Vol 1: LRH 8 + BTH 12 + RETH 16 + ICRC 4 + VCRC 2",
    "network.credit_block_bytes": "IBTA spec Vol 1 7.9.4: flow-control credits are 64-byte blocks",
    "network.vl_buffer_bytes": "assumption: 256 KiB receive buffer per VL",
    "network.credit_update_delay_ns": "assumption: FCCL packet interval and processing, 500 ns (+ propagation)",
    "receiver.drain_rate_gbps": "assumption: drains at line rate",
    "receiver.stall_period_ns": "scenario: no stalls unless configured",
    "receiver.stall_duration_ns": "scenario: no stalls unless configured",
    "receiver.stall_offset_ns": "scenario: no stalls unless configured",
}


def inline_wqe_bytes(size_bytes: int) -> int:
    """Bytes of a WQE carrying ``size_bytes`` inline, rounded to 64-byte basic blocks."""
    raw = WQE_CTRL_SEGMENT_BYTES + WQE_RADDR_SEGMENT_BYTES + WQE_INLINE_HEADER_BYTES + size_bytes
    return -(-raw // WQE_BASIC_BLOCK_BYTES) * WQE_BASIC_BLOCK_BYTES
