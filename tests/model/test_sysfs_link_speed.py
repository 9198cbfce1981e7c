"""sysfs ``current_link_speed``: only a number before GT/s is a speed; anything else keeps
the default generation, as an unreadable width keeps the default width."""
import pytest

from gpuwrite.model import pcie
from gpuwrite.model.sysfs import generation_of, link_config_of


def _device(tmp_path, speed: str, width: str = "8"):
    (tmp_path / "current_link_speed").write_text(speed + "\n")
    (tmp_path / "current_link_width").write_text(width + "\n")
    return tmp_path


@pytest.mark.parametrize("speed, generation", [
    ("2.5 GT/s PCIe", 1), ("8.0 GT/s PCIe", 3), ("16 GT/s", 4), ("32.0 GT/s PCIe", 5), ("64.0GT/s", 6),
])
def test_link_speed_read(tmp_path, speed, generation):
    link = link_config_of(_device(tmp_path, speed))
    assert (link.generation, link.width) == (generation, 8)


@pytest.mark.parametrize("speed", [
    "1.2.3 GT/s",       # float() raised ValueError on it
    "32.0.1 GT/s PCIe", "..GT/s", ". GT/s", "1. GT/s", ".5 GT/s", "Unknown", "7.0 GT/s", "GT/s",
])
def test_unparseable_link_speed_keeps_the_default(tmp_path, speed):
    default = pcie.LinkConfig(generation=3, width=4)
    link = link_config_of(_device(tmp_path, speed, width="x"), default)
    assert link == default
    assert link_config_of(_device(tmp_path, speed)) == pcie.LinkConfig(width=8)


@pytest.mark.parametrize("speed", ["2.5 GT/s PCIe", "32.0 GT/s PCIe", "64.0GT/s", "8. GT/s",
                                   "1.2.3 GT/s", ". GT/s", "Unknown"])
def test_doctor_reads_a_link_speed_as_the_model_does(tmp_path, speed):
    """doctor's link column and the model's topology read ``current_link_speed`` with one
    parser (``sysfs.generation_of``): they once had two, and "8. GT/s" was Gen3 to doctor
    and the default generation to the model."""
    from gpuwrite.doctor import _link

    device = _device(tmp_path, speed)
    generation = generation_of(speed)
    assert _link(device) == (f"Gen{generation} x8" if generation else "unknown")
    assert link_config_of(device).generation == (generation or pcie.LinkConfig().generation)
