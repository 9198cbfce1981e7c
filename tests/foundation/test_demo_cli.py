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
    assert "--sizes=',' is not allowed; allowed: one or more comma-separated sizes" in capsys.readouterr().err
    assert main(["demo", "--messages", "2", "--paths", "gpu_push", "--sizes", "0"]) == 2
    assert "--sizes=0 is not allowed; allowed: 1 to" in capsys.readouterr().err
    assert main(["demo", "--messages", "2", "--paths", "gpu_push", "--sizes", "64,4K,0"]) == 2
    assert "--sizes='64,4K,0' is not allowed (at '0'); allowed: sizes, each 1 to" in capsys.readouterr().err
    assert main(["demo", "--paths", "gpu_pull"]) == 2
    assert "'gpu_pull'" in capsys.readouterr().err


def test_demo_results_say_how_they_were_made(tmp_path, capsys):
    import pandas as pd

    out = tmp_path / "demo.parquet"
    assert main(["demo", "-n", "4", "-q", "2", "--paths", "gpu_push", "-s", "64,1K", "--seed", "5",
                 "--out", str(out), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)["provenance"]
    assert made["parameters"]["seed"] == 5 and made["parameters"]["sizes"] == [64, 1024]
    assert made["gpuwrite_version"] and made["device"] and made["date"]
    rows = pd.read_parquet(out)
    assert list(rows["path"]) == ["gpu_push"] and list(rows["delivered"]) == [4]
    for key in ("command", "gpuwrite_version", "git_commit", "device", "date"):
        assert rows[key].iloc[0] == made[key]
    assert json.loads(rows["parameters"].iloc[0]) == made["parameters"]
