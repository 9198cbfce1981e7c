"""README's figure numbers are those of the tables the repository stores.

After each GPU run a session copies the new numbers into README by hand (issue 14: "make
README's numbers the new run's"); Fig. 8's count once stayed behind for three sessions
unnoticed. These checks read the stored tables and README as committed: the commit each
stored GPU table was measured at is named in its figure's paragraph, Fig. 5's p50s of the
three stored runs and Fig. 4's gpu_push medians are the tables', and Fig. 8's count is the
validation table's."""
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuwrite.model import validation

ROOT = Path(__file__).resolve().parents[2]
GPU_TABLES = ROOT / "experiments" / "results" / "gpu"


def _paragraph(fig: int) -> str:
    """README's text about figure ``fig``: from its bold heading to its image."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"**Fig. {fig}**")
    return text[start:text.index(f"![Fig. {fig}]", start)]


def _gpu_table(name: str) -> pd.DataFrame:
    return pd.read_parquet(GPU_TABLES / f"{name}.parquet")


@pytest.mark.parametrize("fig, name", [(4, "fig4_throughput"), (5, "fig5_latency_cdf"),
                                       (9, "fig9_emulated_latency")])
def test_each_figures_paragraph_names_the_commit_its_stored_gpu_runs_were_measured_at(fig, name):
    commits = _gpu_table(name)["git_commit"].dropna().unique()
    assert len(commits) == 1, commits
    assert f"`{commits[0][:7]}`" in _paragraph(fig), \
        f"README's Fig. {fig} paragraph does not name {commits[0][:7]}, the stored run's commit"


def test_fig5s_paragraph_gives_the_stored_runs_p50s():
    text = _paragraph(5)
    table = _gpu_table("fig5_latency_cdf")
    for (path, size), runs in table.groupby(["path", "size_bytes"]):
        p50s = sorted(runs.groupby("repeat")["latency_ns"].median() / 1e3)
        triple = " / ".join(f"{x:.2f}" for x in p50s)
        assert triple in text, f"{path} {size} B: the stored runs' p50s are {triple} us"


def test_fig4s_paragraph_gives_gpu_pushs_medians():
    text = _paragraph(4)
    table = _gpu_table("fig4_throughput")
    push = table[table["path"] == "gpu_push"]
    for size in (1024, 16384, 1 << 20):
        median = float(np.median(push[push["size_bytes"] == size]["throughput_gbps"]))
        assert f"{median:.1f}" in text, f"gpu_push {size} B: the stored median is {median:.1f} Gb/s"


def test_fig8s_count_is_the_validation_tables():
    count = re.search(r"(\d+) of (\d+) predictions meet it", _paragraph(8))
    line = validation.summary(validation.table(ROOT / "experiments" / "calibration"))
    assert count and line.startswith(f"{count[1]} of {count[2]} predictions"), line[:60]
