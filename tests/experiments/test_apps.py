"""The applications in experiments/apps, at CI sizes on the CUDA simulator."""
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

# The applications live in the checkout's experiments/, which is not part of the installed
# package: the checkout is appended (not prepended) to the path, so that under `pytest -P`
# `gpuwrite` still comes from the installed package, which has the compiled engine.
sys.path.append(str(Path(__file__).resolve().parents[2]))

from experiments.apps import alltoall, bench, pipeline  # noqa: E402
from experiments.apps.common import EXIT_UNAVAILABLE  # noqa: E402
from gpuwrite.cudaenv import SIMULATOR  # noqa: E402
from gpuwrite.device import api  # noqa: E402
from sm90ptx import compile_sm90  # noqa: E402


def test_alltoall_delivers_every_byte_on_every_path():
    out = alltoall.run(ranks=2, tokens=3, token_bytes=62, repeats=1)
    assert set(out["paths"]) == {"gpu_push", "gpu_push_inline", "nic_pull", "host_staged", "auto"}
    for path, row in out["paths"].items():
        assert row["verified"], (path, row)
        assert row["seconds"] > 0 and row["ratio_to_bulk_store_time"] > 0
    assert out["all_verified"]
    assert out["bytes_moved"] == 2 * 3 * 62
    assert sum(out["auto_pairs_per_path"].values()) == 4


def test_the_apps_take_their_runs_in_rounds_of_every_path(monkeypatch):
    """Run k of every path before run k + 1 of any: a slow stretch of the host lands on
    one run of each path, not on all runs of one (taken path by path, session 21's
    all-to-all had auto, which sent every pair as gpu_push, 22 % faster than gpu_push)."""
    launched = []
    launch = alltoall.AllToAll.launch

    def record(self, path):
        launched.append(path)
        return launch(self, path)

    monkeypatch.setattr(alltoall.AllToAll, "launch", record)
    paths = ("gpu_push", "nic_pull", "auto")
    out = alltoall.run(ranks=2, tokens=2, token_bytes=32, paths=paths, repeats=2)
    warm = [] if SIMULATOR else list(paths)             # a GPU warms up on each path first
    assert launched == warm + list(paths) * 2 and out["all_verified"]
    assert list(out["paths"]) == list(paths) and all(len(r["runs_seconds"]) == 2
                                                     for r in out["paths"].values())
    launched.clear()
    produce = pipeline.produce

    class Recorder:
        def __getattr__(self, name):          # compile (cudaenv.preload on a GPU) and the rest
            return getattr(produce, name)

        def __getitem__(self, config):
            kernel = produce[config]

            def run(*args):
                launched.append(api.PATH_NAMES[args[4]])
                return kernel(*args)
            return run

    monkeypatch.setattr(pipeline, "produce", Recorder())
    out = pipeline.run(tiles=2, tile_bytes=40, producers=1, consumers=1,
                       paths=("gpu_push_inline", "host_staged"), repeats=2)
    two = ["gpu_push_inline", "host_staged"]
    assert launched == ([] if SIMULATOR else two) + two * 2 and out["all_verified"]


def test_alltoall_check_finds_what_did_not_arrive():
    routing = alltoall.route(2, 3, 62)
    with api.Session(4, thresholds=api.Thresholds.fixed("gpu_push")) as s:
        a2a = alltoall.AllToAll(s, routing)
        a2a.reset()                                   # nothing sent: every pair is missing
        assert len(a2a.check()["bad_pairs"]) == 4
        s.start()
        a2a.launch("gpu_push")
        assert a2a.check()["bad_pairs"] == []
        a2a.recv[1][0].host[0] ^= 1                   # one flipped bit in pair (0, 1)
        assert a2a.check()["bad_pairs"] == [(0, 1)]


def test_alltoall_routing_is_every_token_once():
    r = alltoall.route(3, 50, 10, seed=2)
    assert r.counts.sum() == 3 * 50 and (r.counts.sum(axis=1) == 50).all()
    with pytest.raises(ValueError, match="ranks=1"):
        alltoall.route(1, 4, 4)


def test_pipeline_consumes_every_tile_on_every_path():
    out = pipeline.run(tiles=4, tile_bytes=402, producers=2, consumers=2, repeats=1)
    assert set(out["paths"]) == {"gpu_push", "gpu_push_inline", "nic_pull", "host_staged", "auto"}
    for path, row in out["paths"].items():
        assert row["verified"], (path, row)
    assert out["all_verified"]


def test_apps_skip_testbed_with_a_reason_and_refuse_bad_arguments(capsys):
    from gpuwrite.backends.testbed import probe

    if probe().ok:
        pytest.skip("an RDMA NIC is present")
    for app in (alltoall, pipeline):
        assert app.main(["--world", "testbed", "--json"]) == EXIT_UNAVAILABLE
        assert "testbed mode unavailable" in json.loads(capsys.readouterr().out)["skipped"]
    with pytest.raises(SystemExit) as exc:
        alltoall.main(["--paths", "gpu_pull"])
    assert exc.value.code == 2
    assert "allowed a comma-separated list" in capsys.readouterr().err


def test_apps_choose_the_pull_agent_and_refuse_what_cannot_run(capsys):
    from experiments.apps import common
    from gpuwrite.cudaenv import SIMULATOR

    assert common.pull_agent_for("emulated", None) == ("copy_engine" if SIMULATOR else "gpu")
    assert common.pull_agent_for("emulated", "copy_engine") == "copy_engine"
    assert common.pull_agent_for("testbed", None) is None
    assert common.session_options("testbed", None, {"timeout_s": 2.0}) == {"timeout_s": 2.0}
    opts = common.session_options("emulated", None, None)
    assert opts["workers"] == common.default_workers() == (1 if SIMULATOR else opts["workers"])
    assert 1 <= opts["workers"] <= 4
    assert common.session_options("emulated", None, {"workers": 3}, workers=2)["workers"] == 3
    assert common.session_options("emulated", None, None, workers=2)["workers"] == 2
    for app in (alltoall, pipeline):
        for argv, says in ((["--world", "testbed", "--workers", "2"],
                            "--workers 2: an option of --world emulated"),
                           (["--workers", "65"], "--workers 65: allowed 1 to 64"),
                           (["--workers", "0"], "0: must be at least 1")):
            with pytest.raises(SystemExit) as exc:
                app.main(argv)
            assert exc.value.code == 2
            assert says in capsys.readouterr().err, argv
        with pytest.raises(SystemExit) as exc:
            app.main(["--world", "testbed", "--pull-agent", "gpu"])
        assert exc.value.code == 2
        assert "--pull-agent gpu: an option of --world emulated" in capsys.readouterr().err
        if SIMULATOR:
            with pytest.raises(SystemExit) as exc:
                app.main(["--pull-agent", "gpu"])
            assert exc.value.code == 2
            assert "allowed here: copy_engine" in capsys.readouterr().err


def test_bench_runs_end_to_end_at_toy_sizes(tmp_path):
    out = bench.run(quick=True, toy=True)
    for key in ("latency_64B", "bandwidth_1MiB", "rate_64B"):
        assert out[key]["put"]["delivered"] == out[key]["put"]["messages"] > 0, out[key]
        assert out[key]["send_messages"]["delivered"] == out[key]["send_messages"]["messages"]
        assert np.isfinite(out[key]["ratio"])
        control = out[key]["control"]
        assert control["runs_met"].endswith("of 1") and np.isfinite(control["ratio"])
        # Each of the pair's three runs has the host's load beside it.
        host = out[key]["host"]
        assert set(host) == {"put", "send_messages", "send_messages_again"}
        assert all(len(v) == 1 and "involuntary_switches" in v[0] for v in host.values())
        # and over each kernel's span, the put kernels' as send_messages'.
        assert all(v[0]["kernel"] is not None and v[0]["kernel"]["span_ms"] >= 0
                   for v in host.values())
    assert out["alltoall"]["all_verified"]
    # The rate with the path and scope kernel arguments, beside the same send_messages runs.
    arg = out["rate_64B_path_argument"]
    assert arg["put"]["delivered"] == arg["put"]["messages"] > 0
    assert arg["send_messages"]["runs_mpps"] == out["rate_64B"]["send_messages"]["runs_mpps"]
    # The latency with lane 0 alone putting, beside the same send_messages runs.
    alone = out["latency_64B_thread_scope"]
    assert alone["put"]["delivered"] == alone["put"]["messages"] > 0
    assert alone["send_messages"]["runs_p50_us"] == \
        out["latency_64B"]["send_messages"]["runs_p50_us"]
    assert out["git_commit"] is None or isinstance(out["git_commit"], str)
    # What each stream run asked of the emulated NIC, per kernel.
    for kernel in ("put", "send_messages"):
        work = out["rate_64B"][kernel]["runs_engine"]
        assert len(work) == 1 and work[0]["wqes"] >= work[0]["cqes"] >= work[0]["doorbells"] > 0


def test_the_put_stream_asks_for_completions_as_the_engine_saw_them():
    """The rate kernel's doorbells, WQEs and completions come from the engine's counters of
    that run: one WQE a message and at least one completion per batch (the flush's);
    send_messages' likewise. The doorbells are those the engine saw: a doorbell record holds
    the last producer index, so rings between two of the engine's polls count once (on a
    GPU, 4 batches on 2 QPs showed 2), as a NIC reads a doorbell record."""
    kw = dict(threads=8, batch=4, workers=1, **bench.SMALL_RINGS)
    r = bench.put_stream_run(2, 8, 64, warp_scope=True, **kw)
    e = r["engine"]
    assert e["wqes"] == 16 and 2 <= e["doorbells"] <= 4 and 4 <= e["cqes"] <= 6
    assert e["turnaround_us"] is not None and e["turnaround_us"] > 0
    sm = bench._sm_stream(bench.runner.run("gpu_push", [64] * 16, n_qps=2, batch=4,
                                           block_threads=8, workers=1))["engine"]
    assert sm["wqes"] == 16 and 2 <= sm["doorbells"] <= 4 and sm["cqes"] >= 4


def test_the_put_bench_streams_with_path_and_scope_constants(monkeypatch):
    """The bandwidth and rate pairs run the stream loop compiled with its path and scope
    constants, as send_messages is compiled for its path; ``path_constant=False`` runs the
    kernel that takes both as arguments."""
    used = []
    real = bench.put_stream_kernel
    monkeypatch.setattr(bench, "put_stream_kernel",
                        lambda path_id, warp_scope: used.append((path_id, warp_scope))
                        or real(path_id, warp_scope))
    kw = dict(threads=8, batch=2, workers=1, **bench.SMALL_RINGS)
    r = bench.put_stream_run(2, 4, 64, warp_scope=True, **kw)
    assert r["delivered"] == r["messages"] == 8 and used == [(api.PATH_IDS["gpu_push"], True)]
    r = bench.put_stream_run(2, 4, 64, warp_scope=True, path_constant=False, **kw)
    assert r["delivered"] == r["messages"] == 8 and len(used) == 1


def test_streamed_puts_ask_one_completion_per_doorbell():
    """A stream of small puts flushed every ``batch`` asks for one completion per doorbell
    (the flush's), and one more for the first put on the idle QP, as send_messages asks one
    per batch. Until session 31 a flush's completion did not restart staging's count of
    slots claimed unsignaled, so a second completion was asked in every batch of 16: 32
    for 256 puts where send_messages asked 16, engine work at the rate's bottleneck. (The
    engine counts the doorbells it saw, 1 to 3 here: on a GPU the three rings can fall
    between two of its polls.)"""
    kw = dict(threads=32, batch=16, workers=1, **bench.SMALL_RINGS)
    e = bench.put_stream_run(1, 48, 64, warp_scope=True, **kw)["engine"]
    assert e["wqes"] == 48 and 1 <= e["doorbells"] <= 3
    assert e["cqes"] == 48 // 16 + 1


def test_the_put_bench_prints_a_summary_of_a_run_or_a_stored_file(tmp_path, capsys):
    """``--out`` writes the JSON and prints a line per measure; ``--show`` prints a stored
    file's (older files, which judged medians only, too); a file that is not one is exit 2
    with its name."""
    root = Path(__file__).resolve().parents[2] / "benchmarks"
    assert bench.main(["--show", str(root / "h100-2026-11-28-put-api-session31-c.json")]) == 0
    text = capsys.readouterr().out
    assert "commit 9cafb1e2db408a34eb680de17edd2c4944990134" in text
    assert ("rate_64B: 3 of 6 pairs >= 0.95 in every run, median ratio 0.957 (undecided); "
            "control 4 of 6; put 64.47 to 70.40 M msg/s") in text
    assert "all-to-all gpu_push: 1.35 ms, 2.00x the bytes over the bulk stores" in text
    assert bench.main(["--show", str(root / "h100-2026-11-23-put-api-session9.json")]) == 0
    assert "latency_64B: medians <= 1.05: missed, ratio 1.119" in capsys.readouterr().out
    assert bench.main(["--show", str(tmp_path / "none.json")]) == 2
    assert "none.json" in capsys.readouterr().err
    out = tmp_path / "put.json"
    assert bench.main(["--toy", "--quick", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["toy"] is True
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed if line.startswith(("latency", "bandwidth",
                                                                        "rate"))] == \
        [name for name, _, _ in bench.MEASURES]


def test_the_put_bench_runs_the_measures_named_and_keeps_those_done(tmp_path, monkeypatch,
                                                                     capsys):
    """``--measures`` runs those named, in the order named, each once, and judges only
    those; ``--pairs`` reaches each measure (0 is refused); an ``--out`` that cannot be
    written is exit 2 before any measure; with ``--out`` the file is written after each measure, so a bench cut short
    (here a Ctrl-C in the rate runs) keeps the measures done and says it is incomplete. A
    name not allowed is exit 2 naming it."""
    ran, asked = [], []

    def fake(name, key):
        def measure(out, quick, toy, step, pairs):
            ran.append(name)
            asked.append(pairs)
            if name == "rate":
                raise KeyboardInterrupt
            out[key] = {"met": True}
        return measure

    monkeypatch.setitem(bench._MEASURE_RUNS, "latency", fake("latency", "latency_64B"))
    monkeypatch.setitem(bench._MEASURE_RUNS, "bandwidth", fake("bandwidth", "bandwidth_1MiB"))
    monkeypatch.setitem(bench._MEASURE_RUNS, "rate", fake("rate", "rate_64B"))
    monkeypatch.setattr(bench.alltoall, "run", lambda **kw: ran.append("alltoall") or {})
    out = bench.run(toy=True, measures=("alltoall", "bandwidth", "alltoall"))
    assert ran == ["alltoall", "bandwidth"] and out["verdict"] == {"bandwidth_1MiB": True}
    assert out["complete"] and out["measures"] == ["alltoall", "bandwidth"]
    assert asked == [None]
    bench.run(toy=True, measures=("latency",), pairs=12)
    assert asked[-1] == 12 and bench._pairs(None, False, False, 6) == 6
    assert bench._pairs(12, False, False, 6) == bench._pairs(12, True, True, 9) == 12
    assert bench._pairs(None, True, False, 6) == bench._pairs(None, False, True, 9) == 1
    with pytest.raises(ValueError, match="pairs 0: allowed is a whole number of at least 1"):
        bench.run(toy=True, measures=("latency",), pairs=0)
    with pytest.raises(ValueError, match="'rates': allowed are one or more of latency, "
                                         "bandwidth, rate, alltoall"):
        bench.run(toy=True, measures=("rates",))
    with pytest.raises(ValueError, match="no measure: allowed"):
        bench.run(toy=True, measures=())
    ran.clear()
    path = tmp_path / "put.json"
    main = bench.common.main_of(bench.main, "bench")
    assert main(["--toy", "--out", str(path), "--measures", "latency,rate,alltoall"]) == 130
    assert ran == ["latency", "rate"]
    kept = json.loads(path.read_text())
    assert kept["complete"] is False and kept["latency_64B"] == {"met": True}
    assert "rate_64B" not in kept
    assert bench.summary({"complete": False})[2] == \
        "INCOMPLETE: the bench stopped before its end; measures done: none"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        bench.main(["--toy", "--measures", "latency,speed"])
    assert exc.value.code == 2 and "--measures: 'speed': allowed are" in capsys.readouterr().err
    ran.clear()
    assert bench.main(["--toy", "--out", str(tmp_path / "no" / "put.json")]) == 2
    assert "--out" in capsys.readouterr().err and ran == []
    with pytest.raises(SystemExit) as exc:
        bench.main(["--toy", "--pairs", "0"])
    assert exc.value.code == 2 and "0: must be at least 1" in capsys.readouterr().err


def test_an_app_interrupted_by_ctrl_c_says_so_and_exits_130(capsys):
    """The apps' ``__main__`` (``common.main_of``): a Ctrl-C is one line on stderr and the
    shell's 130, no traceback; any other outcome passes through."""
    from experiments.apps import common

    def interrupted(argv):
        raise KeyboardInterrupt

    assert common.main_of(interrupted, "python3 -m experiments.apps.bench")([]) == 130
    err = capsys.readouterr().err
    assert err == "python3 -m experiments.apps.bench: interrupted (Ctrl-C)\n"
    assert common.main_of(lambda argv: 2, "x")(["--show"]) == 2


def test_the_put_bench_control_judges_send_messages_against_itself():
    """The control is the same pairing and target with send_messages' second run in the
    put kernel's place."""
    first = [{"mpps": 70.0, "delivered": 1}, {"mpps": 60.0, "delivered": 1}]
    again = [{"mpps": 71.0, "delivered": 1}, {"mpps": 50.0, "delivered": 1}]
    c = bench._control(again, first, "mpps", False, 0.95)
    assert c["ratios"] == pytest.approx([71 / 70, 50 / 60])
    assert c["runs_met"] == "1 of 2"
    assert set(c) == {"ratio", "ratios", "runs_met", "median_ratio_interval"}


def test_the_put_bench_judges_every_pair_and_shows_each_kernels_spread():
    put = [{"p50_us": 4.8, "delivered": 9}, {"p50_us": 4.9, "delivered": 9},
           {"p50_us": 4.6, "delivered": 9}]
    sm = [{"p50_us": 4.5, "delivered": 9}, {"p50_us": 4.8, "delivered": 9},
          {"p50_us": 4.6, "delivered": 9}]
    out = bench._compare(put, sm, "p50_us", True, 1.05)
    assert out["ratios"] == pytest.approx([4.8 / 4.5, 4.9 / 4.8, 1.0])
    assert out["runs_met"] == "2 of 3" and out["met"] is False     # 4.8 / 4.5 = 1.067
    assert out["put"]["spread"] == pytest.approx(4.9 / 4.6)
    assert out["send_messages"]["spread"] == pytest.approx(4.8 / 4.5)
    rate = bench._compare([{"mpps": 70.0, "delivered": 1}], [{"mpps": 80.0, "delivered": 1}],
                          "mpps", False, 0.95)
    assert rate["runs_met"] == "0 of 1" and rate["put"]["spread"] == 1.0
    assert rate["median_ratio_interval"] == {"low": 70 / 80, "high": 70 / 80, "coverage": 0.0}
    assert rate["median_ratio_verdict"] == "outside"


@pytest.mark.parametrize("n, k, coverage", [(3, 1, 0.75), (5, 1, 0.9375), (6, 1, 0.96875),
                                            (9, 2, 1 - 2 * 10 / 512), (20, 6, None)])
def test_the_median_interval_is_the_sign_tests(n, k, coverage):
    """x_(k) to x_(n+1-k), k the largest with coverage 1 - 2 P(Binomial(n, 1/2) < k) >= 95 %:
    for 20 values k = 6 (coverage 0.9586; k = 7 gives 0.8847)."""
    values = [float(v) for v in np.random.default_rng(n).permutation(np.arange(1, n + 1))]
    ci = bench.median_interval(values)
    assert (ci["low"], ci["high"]) == (k, n + 1 - k)
    if coverage is not None:
        assert ci["coverage"] == pytest.approx(coverage)
    else:
        assert ci["coverage"] == pytest.approx(1 - 2 * sum(math.comb(20, i) for i in range(6)) / 2**20)
        assert ci["coverage"] >= 0.95 > 1 - 2 * sum(math.comb(20, i) for i in range(7)) / 2**20


@pytest.mark.parametrize("ratios, verdict", [
    ([1.01, 1.02, 1.00, 0.99, 1.03, 1.02, 1.01, 1.00, 1.04], "within"),    # x_(8) = 1.03
    ([1.07, 1.08, 1.06, 1.09, 1.10, 1.06, 1.07, 1.08, 1.06], "outside"),   # x_(2) = 1.06
    ([1.00, 1.08, 1.01, 1.09, 1.02, 1.07, 1.03, 1.06, 1.00], "undecided"),
])
def test_the_median_ratio_verdict_reads_the_interval(ratios, verdict):
    put = [{"p50_us": r, "delivered": 1} for r in ratios]
    sm = [{"p50_us": 1.0, "delivered": 1} for _ in ratios]
    out = bench._compare(put, sm, "p50_us", True, 1.05)
    assert out["median_ratio_verdict"] == verdict
    # the same pairs as a rate (higher is better): the ratios inverted
    rate = bench._compare([{"mpps": 1.0, "delivered": 1} for _ in ratios],
                          [{"mpps": r, "delivered": 1} for r in ratios], "mpps", False, 1 / 1.05)
    assert rate["median_ratio_verdict"] == verdict


_PTX_SCRIPT = r"""
from experiments.apps import alltoall, bench, pipeline
I, U, I2 = i64[::1], u32[::1], i64[:, ::1]     # the arrays the apps' kernels take
kernels = [(alltoall.dispatch, (Q, I, U, I2, i64, I)),
           (pipeline.produce, (Q, I, U, I, i64, I, I)),
           (pipeline.consume, (U, U, i64, i64, types.uint64[::1], I, I)),
           (bench.put_stream, (Q, I, U, I, i64, types.boolean, I, I, I)),
           (bench.put_latency, (Q, I, U, I, i64, I, I)),
           (bench.put_latency_kernel(0), (Q, I, U, I, I, I)),
           (bench.put_latency_kernel(0, True), (Q, I, U, I, I, I), "put_latency_thread"),
           (bench.put_stream_kernel(0, True), (Q, I, U, I, I, I, I))]
# A load or store whose instruction names no state space (ld.u64, st.v4.u32, ...) is
# generic: the address is translated at run time.
generic = re.compile(r"^\s*(?:@!?%p\d+\s+)?(?:ld|st)(?![\w.]*\.(?:shared|global|param|local|const)\b)"
                     r"\.[\w.]+\s", re.M)
for kernel, sig, *label in kernels:
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    print(label[0] if label else kernel.py_func.__name__, ptx.count("bar.warp.sync"),
          ptx.count("bar.sync"),
          len(generic.findall(ptx)))
"""


def test_app_kernels_compile_for_a_gpu():
    """The simulator runs kernels as Python and checks no types: compile every app
    kernel (warp and block scope, put_signal, wait_signal) to sm_90 PTX."""
    # The apps live in the checkout's experiments/, beside the installed gpuwrite.
    out = compile_sm90(_PTX_SCRIPT, Path(__file__).resolve().parents[2])
    counts = {line.split()[0]: tuple(map(int, line.split()[1:])) for line in out.split("\n")
              if line.strip()}
    assert counts["dispatch"][0] > 0          # warp scope: warp barriers
    assert counts["produce"][1] > 0           # block scope: block barriers
    assert set(counts) == {"dispatch", "produce", "consume", "put_stream", "put_latency",
                           "put_latency_constant", "put_latency_thread", "put_stream_constant"}
    # The put bench's thread-scope latency kernel picks its open by a compile-time constant:
    # lane 0 alone, no warp barrier left in it.
    assert counts["put_latency_thread"][0] == 0
    # Every handle's shared rows keep the shared state space: a generic access is a
    # run-time address translation, and it is reloaded around each memory-clobbering
    # intrinsic (put_latency had 441 of them before the rows kept Numba's C layout).
    assert {name: c[2] for name, c in counts.items()} == dict.fromkeys(counts, 0)


def test_the_put_bench_rotates_each_pairs_order():
    """Each kernel runs first, second and third equally often over three pairs (until
    session 30 the put kernel always ran first, and in that session's rate pairs it ran
    below send_messages in 6 of 6): the runs are still filed by kernel, run k with run k."""
    calls = []

    # Each run takes the context the bench samples the host over around its kernel.
    def put(around_kernel):
        calls.append("put")
        return {"mpps": 60.0 + len(calls), "delivered": 1}

    def sm(around_kernel):
        calls.append("sm")
        return {"mpps": 60.0 + len(calls), "delivered": 1}

    out, sm_runs = bench._paired(6, "rate", lambda m: None, put, sm, "mpps", False, 0.95)
    assert calls == ["put", "sm", "sm", "sm", "sm", "put", "sm", "put", "sm"] * 2
    assert out["order"][:3] == [["put", "send_messages", "send_messages_again"],
                                ["send_messages", "send_messages_again", "put"],
                                ["send_messages_again", "put", "send_messages"]]
    # The put kernel's runs are the 1st, 6th and 8th calls of each three pairs.
    assert out["put"]["runs_mpps"] == [61.0, 66.0, 68.0, 70.0, 75.0, 77.0]
    # send_messages' first runs: the 2nd, 4th and 9th calls; its second: 3rd, 5th, 7th.
    assert [r["mpps"] for r in sm_runs] == [62.0, 64.0, 69.0, 71.0, 73.0, 78.0]
    assert out["control"]["ratios"] == pytest.approx([63 / 62, 65 / 64, 67 / 69,
                                                      72 / 71, 74 / 73, 76 / 78])
