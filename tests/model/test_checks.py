"""The model's own input checks (gpuwrite/model/checks.py), as a library caller meets them:
``Params`` and ``Workload`` refuse what TOML can write but the model cannot use, with a
``ParamError`` naming the key, without the CLI in between."""
import math
import re

import pytest

from gpuwrite.model import pcie
from gpuwrite.model.checks import MAX_IN_FLIGHT, MAX_MESSAGES
from gpuwrite.model.errors import ParamError, check_positive
from gpuwrite.model.params import Params, SimConfig, Workload


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_params_refuse_numbers_that_are_not_finite(value):
    with pytest.raises(ParamError) as info:
        Params.from_dict({"link": {"width": 16, "generation": value}})
    assert info.value.name == "link.generation" and "finite" in str(info.value)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_positive_number_is_finite(value):
    with pytest.raises(ParamError, match="finite"):
        check_positive("x", value)
    check_positive("x", 1e300)


def test_params_refuse_a_topology_that_is_not_text():
    with pytest.raises(ParamError) as info:
        Params.from_dict({"topology": 5})
    assert info.value.name == "topology" and "same_switch" in info.value.allowed


@pytest.mark.parametrize("workload, key", [
    ({"n_messages": MAX_MESSAGES + 1}, "workload.n_messages"),
    ({"n_qps": 2, "outstanding": MAX_IN_FLIGHT}, "workload.outstanding"),
    ({"weights": ["a"]}, "workload.weights"),
    ({"interval_ns": math.nan}, "workload.interval_ns"),
])
def test_a_workload_past_what_the_simulator_can_run_is_refused(workload, key):
    with pytest.raises(ParamError) as info:
        Workload.from_dict(workload)
    assert info.value.name == key
    with pytest.raises(ParamError):
        SimConfig.from_dict({"workload": workload})
    Workload.from_dict({"n_messages": MAX_MESSAGES})


def test_a_config_file_that_is_not_utf8_is_a_param_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"seed = 1\n# \xff\n")
    with pytest.raises(ParamError, match="UTF-8"):
        SimConfig.from_toml(bad)
    with pytest.raises(ParamError, match="UTF-8"):
        Params().with_calibration(bad)


def test_a_transfer_past_the_address_space_is_refused():
    link = pcie.LinkConfig()
    top = 1 << link.address_bits
    pcie.wire_bytes(link, "read", 4096, top - 4096)
    with pytest.raises(ParamError) as info:
        pcie.wire_bytes(link, "write", 4096, top - 4095)
    assert info.value.name == "start_address"


@pytest.mark.parametrize("seed", [-1, 2**63, True, 1.5])
def test_a_seed_fits_64_bits(seed):
    """A seed goes into TOML files and result tables, whose integers are 64-bit."""
    with pytest.raises(ParamError) as info:
        SimConfig.from_dict({"seed": seed})
    assert info.value.name == "seed"
    assert SimConfig.from_dict({"seed": 2**63 - 1}).seed == 2**63 - 1


@pytest.mark.parametrize("kwargs, named", [
    ({"ecrc": 1}, "ecrc=1 is not allowed; allowed: false, true"),
    ({"rcb_chunks": 0}, "rcb_chunks=0 is not allowed; allowed: false, true"),
    ({"generation": True}, "generation=True is not allowed"),
    ({"generation": 4.0}, "generation=4.0 is not allowed"),
    ({"mps_bytes": 256.0}, "mps_bytes=256.0 is not allowed"),
])
def test_a_choice_is_taken_only_in_its_own_kind(kwargs, named):
    """`in` alone took 1 for true (a TOML file's `ecrc = 1` was written back as 1) and true or
    4.0 for an integer choice; a numpy integer is still an integer."""
    import numpy as np

    from gpuwrite.model.errors import ParamError
    from gpuwrite.model.pcie import LinkConfig
    with pytest.raises(ParamError, match=re.escape(named)):
        LinkConfig(**kwargs)
    assert LinkConfig(generation=np.int64(4), ecrc=True).generation == 4
