"""Experiment files: loading, errors that name the key and what is allowed, the cross product, hashes."""
import pytest

from gpuwrite.experiments.figures import FIGURES
from gpuwrite.experiments.spec import SpecError, config_hash, expand_range, find_specs, load_spec, resolve

from tiny_specs import EXPERIMENTS

MINIMAL = """
[[sweep]]
name = "m"
backend = "model"
measure = "latency"
[sweep.vary]
path = ["nic_pull", "gpu_push"]
size_bytes = [64, 4096]
"""


def write(tmp_path, text, name="spec.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_experiment_file_loads_and_names_a_figure():
    files = find_specs(EXPERIMENTS)
    assert [f.stem for f in files] == ["fig1_latency", "fig2_pcie_efficiency", "fig3_buffer_stall",
                                       "fig4_throughput", "fig5_latency_cdf", "fig6_push_wins",
                                       "fig7_throughput_vs_buffer", "fig8_validation",
                                       "fig9_emulated_latency"]
    for file in files:
        spec = load_spec(file)
        assert spec.figure_kind in FIGURES and spec.title and spec.caption
    fig1 = load_spec(EXPERIMENTS / "fig1_latency.toml")
    assert len(fig1.sweeps[0].points()) == 4 * 3 * 15   # topologies x paths x sizes 64 B..1 MiB


@pytest.mark.parametrize("change, expected", [
    ('mesure = "latency"', ["'mesure'", "did you mean 'measure'", "allowed:"]),
    ('backend = "testbed"', ["backend='testbed'", "not built", "allowed: model, emulated"]),
    ('backend = "fpga"', ["backend='fpga'", "allowed: model, emulated"]),
    ('measure = "latencyy"', ["measure='latencyy'", "latency, throughput, efficiency, simulate"]),
    ('output = "timeseries"', ["output='timeseries'", "allowed: summary"]),
    ('require = "gpu"', ["require='gpu'", "allowed: any"]),          # gpu: emulated sweeps only
])
def test_bad_sweep_keys_and_values_are_named(tmp_path, change, expected):
    key = change.split(" = ")[0]
    lines = [line for line in MINIMAL.splitlines() if not line.startswith(f"{key} =")]
    text = "\n".join(lines).replace('name = "m"', f'name = "m"\n{change}')
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    for fragment in expected:
        assert fragment in str(info.value)
    assert "spec.toml" in str(info.value)


@pytest.mark.parametrize("vary, expected", [
    ('"nic.polcy" = ["hold"]', ["'nic.polcy'", "did you mean 'nic.policy'"]),
    ('"nic.policy" = ["hold", "keep"]', ["nic.policy='keep'", "hold, drop", "'nic.policy': 'keep'"]),
    ('"link.mps_bytes" = [100]', ["mps_bytes=100", "128, 256, 512"]),
    ('"nic.processing_ns" = []', ["nic.processing_ns=[]", "a non-empty list"]),
    ('"nic.processing_ns" = {from = 64, to = 128, step = 8, factor = 2}', ["exactly one of step, factor"]),
    ('"nic.processing_ns" = {from = 64, to = 128, factor = 1}', ["factor=1", "a number > 1"]),
    ('calibration = ["a.toml"]', ["'calibration'", "under fixed"]),
    ('"nic.processing_ns" = [8, 16, 8]', ["vary.nic.processing_ns value 8 is not allowed twice", "distinct values"]),
    ('"nic.processing_ns" = {from = 1, to = 1e300, step = 1e-300}', ["more values than a float counts",
                                                                    "at most 10,000 values"]),
    ('"nic.processing_ns" = {from = 1e-300, to = 1e300, factor = 1.0000001}', ["more values than a float counts"]),
])
def test_bad_vary_entries_are_named(tmp_path, vary, expected):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, MINIMAL + vary + "\n"))
    for fragment in expected:
        assert fragment in str(info.value)


def test_emulated_sizes_are_positive_byte_counts(tmp_path):
    text = '[[sweep]]\nname = "e"\nbackend = "emulated"\n[sweep.vary]\nsize_bytes = [{}]\n'
    load_spec(write(tmp_path, text.format("64, 66, 1")))
    with pytest.raises(SpecError, match=r"size_bytes=0 .*an integer >= 1"):
        load_spec(write(tmp_path, text.format("64, 0")))


def test_file_level_errors(tmp_path):
    with pytest.raises(SpecError, match="an existing TOML file"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(SpecError, match="not allowed twice"):
        load_spec(write(tmp_path, MINIMAL + MINIMAL))
    with pytest.raises(SpecError, match=r"figure.kind='pie'.*latency_vs_size"):
        load_spec(write(tmp_path, '[figure]\nkind = "pie"\n' + MINIMAL))
    with pytest.raises(SpecError, match="one or more"):
        load_spec(write(tmp_path, '[figure]\nkind = "latency_vs_size"\n'))


def test_cross_product_order_fixed_values_and_exclusions(tmp_path):
    text = MINIMAL.replace("[sweep.vary]", 'exclude = [{path = "gpu_push", size_bytes = 4096}]\n'
                                           '[sweep.fixed]\ntopology = "across_sockets"\n[sweep.vary]')
    sweep = load_spec(write(tmp_path, text)).sweeps[0]
    assert sweep.points() == [
        {"topology": "across_sockets", "path": "nic_pull", "size_bytes": 64},
        {"topology": "across_sockets", "path": "nic_pull", "size_bytes": 4096},
        {"topology": "across_sockets", "path": "gpu_push", "size_bytes": 64},
    ]
    assert sweep.columns == ["topology", "path", "size_bytes"]


def test_a_range_whose_step_does_not_move_a_float_ends(tmp_path):
    """A step or factor too small to change the value (1e16 + 0.5 == 1e16; 5e-324 x 1.1 ==
    5e-324) gives its counted values, which repeat, instead of accumulating for ever."""
    assert expand_range("x", {"from": 1e16, "to": 1e16 + 4, "step": 0.5}) == [1e16] * 9
    assert len(expand_range("x", {"from": 5e-324, "to": 1e-320, "factor": 1.1})) == 80
    with pytest.raises(SpecError, match="value 1e[+]16 is not allowed twice"):     # and a file says so
        load_spec(write(tmp_path, MINIMAL + '"nic.processing_ns" = {from = 1e16, to = 1.0000000000000004e16, '
                                            'step = 0.5}\n'))


@pytest.mark.parametrize("change, expected", [
    ('name = "a/b"', "name='a/b' is not allowed; allowed: a non-empty text of letters, digits, _, - and ."),
    ('[sweep.fixed]\nsize_bytes = 64', "key 'size_bytes' is not allowed in both fixed and vary"),
    ('exclude = [{}]', "exclude=[{}] is not allowed (it leaves no point)"),
    ('exclude = [{size_bytes = 64}, {size_bytes = 4096}]', "(it leaves no point)"),
])
def test_sweeps_that_make_no_point_or_a_point_twice_or_a_bad_file_name_are_named(tmp_path, change, expected):
    """A key both fixed and varied (the fixed value was dropped silently), exclusions that
    leave nothing (an empty table, no error), and a sweep name that cannot name a chunk file
    (a "/" failed with a traceback in the middle of the sweep)."""
    text = MINIMAL.replace('name = "m"', change) if change.startswith("name") else \
        MINIMAL.replace("[sweep.vary]", change + "\n[sweep.vary]")
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert expected in str(info.value)
    load_spec(write(tmp_path, MINIMAL.replace('name = "m"', 'name = "µ-1.b"')))    # unicode letters: fine


def test_ranges():
    assert expand_range("x", {"from": 64, "to": 1024, "factor": 4}) == [64, 256, 1024]
    assert expand_range("x", {"from": 64, "to": 256, "step": 64}) == [64, 128, 192, 256]
    assert expand_range("x", [3, 1]) == [3, 1]


def test_hash_is_canonical_and_stable():
    config = {"schema": 1, "backend": "model", "b": [1, 2.5, "x"], "a": {"z": True, "y": None}}
    reordered = {"a": {"y": None, "z": True}, "b": [1, 2.5, "x"], "backend": "model", "schema": 1}
    # sha256 of '{"a":{"y":null,"z":true},"b":[1,2.5,"x"],"backend":"model","schema":1}'
    assert config_hash(config) == config_hash(reordered)
    import hashlib
    canonical = '{"a":{"y":null,"z":true},"b":[1,2.5,"x"],"backend":"model","schema":1}'
    assert config_hash(config) == hashlib.sha256(canonical.encode()).hexdigest()


def test_same_point_same_hash_whatever_the_spelling(tmp_path):
    dotted = load_spec(write(tmp_path, MINIMAL + '[sweep.fixed]\n"nic.policy" = "hold"\n', "a.toml")).sweeps[0]
    nested = load_spec(write(tmp_path, MINIMAL + '[sweep.fixed.nic]\npolicy = "hold"\n', "b.toml")).sweeps[0]
    plain = load_spec(write(tmp_path, MINIMAL, "c.toml")).sweeps[0]
    hashes = [[config_hash(resolve(s, values, "model")) for values in s.points()] for s in (dotted, nested, plain)]
    assert hashes[0] == hashes[1] == hashes[2]          # hold is the default: same configuration
    assert len(set(hashes[0])) == 4
    other = load_spec(write(tmp_path, MINIMAL + '[sweep.fixed]\n"nic.processing_ns" = 150.0\n', "d.toml")).sweeps[0]
    assert config_hash(resolve(other, other.points()[0], "model")) != hashes[0][0]


def test_emulated_configuration_includes_the_device(tmp_path):
    sweep = load_spec(write(tmp_path, '[[sweep]]\nname = "e"\nbackend = "emulated"\n[sweep.vary]\n'
                                      "size_bytes = [64]\n")).sweeps[0]
    point = sweep.points()[0]
    assert config_hash(resolve(sweep, point, "cudasim")) != config_hash(resolve(sweep, point, "NVIDIA H200"))


def test_repeats_are_measured_in_turn_and_once_on_the_simulator(tmp_path):
    text = ('[[sweep]]\nname = "e"\nbackend = "emulated"\n[sweep.vary]\nrepeat = [0, 1, 2]\n'
            'path = ["gpu_push", "nic_pull"]\nsize_bytes = [64, 4096]\n')
    sweep = load_spec(write(tmp_path, text)).sweeps[0]
    points = sweep.points("NVIDIA H100 80GB HBM3")
    assert len(points) == 12
    # every point once before any again: a slow minute of the host lands on one run of
    # many points, not on every run of one
    assert [p["repeat"] for p in points] == [0] * 4 + [1] * 4 + [2] * 4
    assert points[:4] == [{**p, "repeat": 0} for p in points[4:8]]
    hashes = {config_hash(resolve(sweep, p, "NVIDIA H100 80GB HBM3")) for p in points}
    assert len(hashes) == 12                            # each run its own row
    assert sweep.points("cudasim") == points[:4]        # the simulator checks bytes once
    with pytest.raises(SpecError, match=r"repeat=-1 .*an integer >= 0"):
        load_spec(write(tmp_path, text.replace("[0, 1, 2]", "[0, -1]")))


def test_a_change_to_the_backend_code_changes_the_hash(tmp_path):
    from gpuwrite.experiments.spec import code_fingerprint, fingerprint_files

    (tmp_path / "gpuwrite" / "model").mkdir(parents=True)
    source = tmp_path / "gpuwrite" / "model" / "paths.py"
    source.write_text("LATENCY = 1\n")
    before = fingerprint_files(tmp_path, ("gpuwrite/model/*.py",))
    source.write_text("LATENCY = 2\n")
    assert fingerprint_files(tmp_path, ("gpuwrite/model/*.py",)) != before
    assert code_fingerprint("model") != code_fingerprint("emulated")
    sweep = load_spec(write(tmp_path, MINIMAL)).sweeps[0]
    assert resolve(sweep, sweep.points()[0], "model")["code"] == code_fingerprint("model")


def test_prose_is_not_code_but_every_statement_is(tmp_path):
    """Comments, docstrings and layout leave the fingerprint alone; a changed constant, a
    changed string that is not a docstring, a reordered statement or a docstring turned
    into code change it."""
    from gpuwrite.experiments.spec import fingerprint_files

    source = tmp_path / "m.py"

    def fp(text):
        source.write_text(text)
        return fingerprint_files(tmp_path, ("*.py",))

    base = fp('"""Module."""\nA = 1\n\n\ndef f(x):\n    """Doc."""\n    return x + A  # add\n')
    assert fp('"""Another module doc."""\nA = 1\ndef f(x):\n    """Other doc,\n    two lines."""\n'
              '    # a comment\n    return (x +\n            A)\n') == base
    assert fp('A = 1\n\n\ndef f(x):\n    return x + A\n') == base
    assert fp('"""Module."""\nA = 2\n\n\ndef f(x):\n    """Doc."""\n    return x + A\n') != base
    assert fp('"""Module."""\nA = 1\n\n\ndef f(x):\n    """Doc."""\n    return A + x\n') != base
    assert fp('"""Module."""\nA = 1\n\n\ndef f(x):\n    s = "Doc."\n    return x + A\n') != base
    (tmp_path / "data.txt").write_text("a # b")     # a file that is not Python: its bytes
    before = fingerprint_files(tmp_path, ("*.txt",))
    (tmp_path / "data.txt").write_text("a # c")
    assert fingerprint_files(tmp_path, ("*.txt",)) != before


@pytest.mark.parametrize("backend, imports", [
    ("model", "import gpuwrite.experiments.backends, gpuwrite.model.paths, gpuwrite.model.sim, "
              "gpuwrite.model.params, gpuwrite.model.pcie"),
    ("emulated", "import gpuwrite.experiments.backends, gpuwrite.paths.runner, gpuwrite.cudaenv"),
])
def test_each_backends_fingerprint_covers_every_module_its_points_run(backend, imports, tmp_path):
    """A point's hash stands for the code it runs: every gpuwrite module that running a
    point loads must be in its backend's fingerprint (package __init__s that hold only a
    docstring aside), or a change to it would leave stale results looking current."""
    import subprocess
    import sys
    from pathlib import Path

    from childenv import child_env
    from gpuwrite.experiments.spec import BACKEND_CODE, CODE_ROOT, executable_source

    code = (f"import sys; {imports}; print('\\n'.join(m.__file__ for n, m in sys.modules.items() "
            "if n.startswith('gpuwrite') and getattr(m, '__file__', None)))")
    # Run outside the checkout, with the gpuwrite this test imported first on the path (CI
    # installs the package and runs pytest with -P; scripts/mutate.py runs the tests in a
    # copy of the tree beside an editable install).
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env=child_env(NUMBA_ENABLE_CUDASIM="1")).stdout
    loaded = {Path(f).resolve().relative_to(CODE_ROOT).as_posix() for f in out.split()
              if f.endswith(".py")}
    covered = {f.relative_to(CODE_ROOT).as_posix() for pattern in BACKEND_CODE[backend]
               for f in CODE_ROOT.glob(pattern)}
    empty = executable_source(b"")
    uncovered = {f for f in loaded - covered if executable_source((CODE_ROOT / f).read_bytes()) != empty}
    assert uncovered == set()
    if backend == "emulated":
        assert "gpuwrite/device/api.py" not in covered      # no emulated sweep runs the put API


def test_the_engine_digest_counts_c_code_not_comments():
    """The digest compiled into the extension (csrc/ffi_build.py) ignores comments and
    layout, keeps every token and every literal as written."""
    import importlib.util

    from pathlib import Path

    checkout = Path(__file__).resolve().parents[2]        # csrc/ is not part of an installed package
    spec = importlib.util.spec_from_file_location("ffi_build", checkout / "csrc" / "ffi_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    c = build.c_code
    base = c(b'#define A 1\nint f(int x) {\n    return x + A; /* add */\n}\n')
    assert base == b"#define A 1\nint f(int x) {\nreturn x + A;\n}"
    assert c(b"/* a header\n * of two lines */\n#define A 1 // one\n\nint f(int x) {\n\treturn x  +  A;"
             b"\n}\n") == base
    assert c(b"#define A 2\nint f(int x) {\n    return x + A;\n}\n") != base
    assert c(b"#define A 1\nint f(int x) {\n    return A + x;\n}\n") != base
    assert c(b'char *s = "a /* kept */  b"; // gone\n') == b'char *s = "a /* kept */  b";'
    assert c(b"char q = '\"'; /* x */ int y;\n") == b"char q = '\"'; int y;"
    from gpuwrite.experiments.spec import engine_fingerprint
    assert engine_fingerprint() == build.csrc_sha256()     # the extension here is built from this
