"""``--version --json`` printed plain text. Each case runs ``main()`` in this process."""
import json

import pytest

from gpuwrite.cli import main
from gpuwrite.experiments.store import gpuwrite_version


def _strict(text: str):
    """JSON as a strict reader takes it: NaN and Infinity are refused."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("argv", [["--version", "--json"], ["--json", "--version"]])
def test_version_under_json_is_a_json_object(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out, err = capsys.readouterr()
    assert _strict(out) == {"gpuwrite": gpuwrite_version()} and err == ""


def test_plain_version_is_unchanged(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"gpuwrite {gpuwrite_version()}\n"
