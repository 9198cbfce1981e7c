"""Shared fixtures: every figure's tiny experiment file, swept once per session."""
import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

from tiny_specs import SHRINK, write_tiny_spec  # noqa: E402


@pytest.fixture(scope="session")
def tiny_results(tmp_path_factory):
    """Every figure's tiny spec, swept once into one results directory for the session."""
    from gpuwrite.experiments.spec import load_spec
    from gpuwrite.experiments.sweep import Pool, run_spec

    root = tmp_path_factory.mktemp("experiments")
    specs = {}
    with Pool(1) as pool:
        for name in SHRINK:
            spec = load_spec(write_tiny_spec(name, root / "specs"))
            run_spec(spec, root / "results", pool=pool)
            specs[name] = spec
    return root, specs
