"""PCIe accounting against worked examples and hand calculations."""
import pytest

from gpuwrite.model import pcie
from gpuwrite.model.errors import ParamError


def test_seed_worked_example_512_byte_read_is_92_75_percent():
    link = pcie.LinkConfig(mps_bytes=256)
    wire = pcie.read_wire_bytes(link, 512)
    assert pcie.completion_sizes(link, 512) == [256, 256]
    assert pcie.completion_tlp_overhead_bytes(link) == 20
    assert wire.data_direction_bytes == 552
    assert pcie.efficiency(link, "read", 512) == pytest.approx(512 / 552)
    assert round(100 * pcie.efficiency(link, "read", 512), 2) == 92.75


def test_read_request_goes_the_other_way():
    link = pcie.LinkConfig(mrrs_bytes=512, address_bits=64)
    wire = pcie.read_wire_bytes(link, 2048)
    assert wire.other_direction_bytes == 4 * 24   # four MRd 4DW requests, 8+4+12 bytes each
    link32 = pcie.LinkConfig(mrrs_bytes=512, address_bits=32)
    assert pcie.read_wire_bytes(link32, 2048).other_direction_bytes == 4 * 20


def test_unaligned_read_costs_an_extra_completion():
    link = pcie.LinkConfig(mps_bytes=256, mrrs_bytes=512, rcb_bytes=64)
    assert pcie.completion_sizes(link, 512, 32) == [224, 256, 32]
    assert pcie.read_wire_bytes(link, 512, 32).data_direction_bytes == 512 + 3 * 20
    assert pcie.efficiency(link, "read", 512, 32) < pcie.efficiency(link, "read", 512, 0)


def test_rcb_chunks_split_every_rcb():
    link = pcie.LinkConfig(rcb_bytes=64, rcb_chunks=True)
    assert pcie.completion_sizes(link, 256) == [64, 64, 64, 64]
    assert pcie.completion_sizes(link, 256, 16) == [48, 64, 64, 64, 16]
    assert sum(pcie.completion_sizes(link, 1000, 7)) == 1000


def test_write_is_one_posted_stream_split_at_mps():
    link = pcie.LinkConfig(mps_bytes=256, address_bits=64)
    wire = pcie.write_wire_bytes(link, 512)
    assert wire.tlp_count == 2
    assert wire.data_direction_bytes == 512 + 2 * 24
    assert wire.other_direction_bytes == 0
    assert pcie.write_tlp_sizes(link, 512, 100) == [156, 256, 100]


def test_ecrc_adds_four_bytes_per_tlp():
    plain = pcie.LinkConfig()
    digest = pcie.LinkConfig(ecrc=True)
    assert pcie.write_wire_bytes(digest, 1024).data_direction_bytes - pcie.write_wire_bytes(plain, 1024).data_direction_bytes == 4 * 4
    assert pcie.completion_tlp_overhead_bytes(digest) == 24


def test_raw_and_tlp_rates_by_hand():
    assert pcie.raw_rate_gbps(1, 1) == pytest.approx(2.0)
    assert pcie.raw_rate_gbps(3, 8) == pytest.approx(8 * 8 * 128 / 130)
    link = pcie.LinkConfig(generation=3, width=8, mps_bytes=256)
    overhead = 8 / 203 + 8 / 203 + 4 / 1538          # Gen3 x8 MPS 256: ACK and FC interval 203
    assert pcie.tlp_rate_gbps(link) == pytest.approx(pcie.raw_rate_gbps(3, 8) * (1 - overhead))


def test_gen5_x16_write_rate_is_close_to_the_calibrated_store_rate():
    # calibration: full-grid GPU stores into host memory reach 52.4 GB/s
    rate_gBps = pcie.effective_rate_gbps(pcie.LinkConfig(), "write", 1 << 20) / 8
    assert rate_gBps == pytest.approx(52.4, rel=0.02)


def test_tiny_reads_are_limited_by_the_request_direction():
    link = pcie.LinkConfig()
    wire = pcie.read_wire_bytes(link, 2)
    assert wire.other_direction_bytes > wire.data_direction_bytes
    assert pcie.effective_rate_gbps(link, "read", 2) == pytest.approx(pcie.tlp_rate_gbps(link) * 2 / 24)


@pytest.mark.parametrize("field, value, allowed", [
    ("mps_bytes", 300, "128, 256, 512"),
    ("generation", 7, "1, 2, 3, 4, 5, 6"),
    ("width", 3, "1, 2, 4, 8, 16, 32"),
    ("rcb_bytes", 32, "64, 128, 256, 512"),
    ("address_bits", 48, "32, 64"),
])
def test_bad_link_config_names_value_and_allowed(field, value, allowed):
    with pytest.raises(ParamError) as info:
        pcie.LinkConfig(**{field: value})
    assert f"{field}={value}" in str(info.value)
    assert allowed in str(info.value)


def test_bad_sizes_and_operations_are_errors():
    with pytest.raises(ParamError, match="size_bytes=-1"):
        pcie.write_wire_bytes(pcie.LinkConfig(), -1)
    with pytest.raises(ParamError, match="operation='copy'"):
        pcie.wire_bytes(pcie.LinkConfig(), "copy", 64)


def test_completions_never_exceed_mps_when_rcb_is_larger():
    # Gen2 x8, MPS 128, MRRS 512, RCB 512: a 1500 B read is three 512 B requests and a
    # 476 B one; each is answered in MPS-aligned completions of at most 128 B (Base Spec
    # 2.2.2: no TLP payload exceeds MPS), 12 completions in all
    link = pcie.LinkConfig(generation=2, width=8, mps_bytes=128, mrrs_bytes=512, rcb_bytes=512)
    sizes = pcie.completion_sizes(link, 1500)
    assert sizes == [128] * 11 + [92]
    assert pcie.read_wire_bytes(link, 1500).data_direction_bytes == 1500 + 12 * 20
    # unaligned start: the first completion ends on the first 128 B boundary
    assert pcie.completion_sizes(link, 300, start_address=100) == [28, 128, 128, 16]
    # RCB-chunked completers split at RCB, still within MPS
    chunked = pcie.LinkConfig(generation=2, width=8, mps_bytes=128, mrrs_bytes=512, rcb_bytes=256, rcb_chunks=True)
    assert max(pcie.completion_sizes(chunked, 1500)) == 128


def test_update_fc_intervals_follow_their_own_spec_tables():
    # PCIe Base Spec rev 5.0 Tables 2-46/2-47 (UpdateFC) differ from Tables 3-7/3-8 (ACK)
    # at Gen1 x32 MPS 2048 and Gen2 x32 MPS 4096; elsewhere the two tables agree
    assert pcie.UPDATE_FC_INTERVAL_BYTES[1][32][4] == 248 and pcie.ACK_INTERVAL_BYTES[1][32][4] == 148
    assert pcie.UPDATE_FC_INTERVAL_BYTES[2][32][5] == 327 and pcie.ACK_INTERVAL_BYTES[2][32][5] == 237
    assert pcie.UPDATE_FC_INTERVAL_BYTES[3][16][1] == pcie.ACK_INTERVAL_BYTES[3][16][1] == 168
    link = pcie.LinkConfig(generation=1, width=32, mps_bytes=2048)
    assert pcie.dllp_overhead_fraction(link) == pytest.approx(8 / 148 + 8 / 248 + 4 / 1538)
