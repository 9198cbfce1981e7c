"""``gpuwrite demo``, the main job, from the command line."""
import json

from gwtest import small
from gpuwrite.cli import main


def test_demo_json_checks_every_byte_of_every_path(capsys):
    n = small(400, 12)
    assert main(["demo", "--messages", str(n), "--qps", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["all_delivered"] is True
    assert [r["path"] for r in out["results"]] == ["gpu_push", "gpu_push_inline", "nic_pull",
                                                    "host_staged"]
    for r in out["results"]:
        assert r["messages"] == r["delivered"] == n and r["errors"] == r["dropped"] == 0
        assert r["emulation"]        # what emulation stands in for is always said


def test_demo_mixes_the_sizes_asked_for(capsys):
    sizes = [1, 7, 100, 1500]
    assert main(["demo", "--messages", "16", "--qps", "2", "--paths", "gpu_push,host_staged",
                 "--sizes", ",".join(map(str, sizes)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for r in out["results"]:
        assert r["delivered"] == 16
        assert r["counters"]["bytes_delivered"] == r["bytes"] <= 16 * max(sizes)


def test_demo_names_bad_input(capsys):
    assert main(["demo", "--sizes", "64,x"]) == 2
    assert "--sizes='64,x'" in capsys.readouterr().err
    assert main(["demo", "--sizes", ","]) == 2
    assert "--sizes=',': comma-separated whole numbers of bytes" in capsys.readouterr().err
    assert main(["demo", "--messages", "2", "--paths", "gpu_push", "--sizes", "0"]) == 2
    assert "message size 0 bytes" in capsys.readouterr().err
    assert main(["demo", "--paths", "gpu_pull"]) == 2
    assert "'gpu_pull'" in capsys.readouterr().err
