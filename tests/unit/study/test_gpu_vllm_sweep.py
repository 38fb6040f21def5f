"""The H200 sweep's driver (benchmarks/gpu_vllm_sweep.py) against a stand-in for vLLM 0.25.1's
`vllm bench sweep serve`: the same stdout markers, result files and --resume rules as its
vllm/benchmarks/sweep/serve.py, and, as 0.25.1 does, no --continue-on-error (a server that fails
ends the sweep). The plan is tune's argv, a refused config is dropped and the sweep resumed, a stop
by SIGTERM keeps what was measured, and the converted grid is what the replay reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest

from benchmarks import gpu_vllm_sweep as gs
from benchmarks import replay_measured as rm
from tests.helpers import REPO
from tuner.study.replay import Grid

FAKE = '''#!{python}
import json, os, sys, time
from pathlib import Path
a = sys.argv[1:]
assert a[:3] == ["bench", "sweep", "serve"] and "--continue-on-error" not in a, a
opt = lambda n: a[a.index(n) + 1]
exp = Path(opt("-o")) / opt("-e")
if "--resume" in a and not exp.exists():
    sys.exit("ValueError: Cannot resume from non-existent experiment_dir")
if "--resume" not in a and exp.exists():
    sys.exit("ValueError: Cannot overwrite existing experiment_dir")
refuse = json.loads(os.environ.get("FAKE_REFUSE", "{{}}"))
hang_after = int(os.environ.get("FAKE_HANG_AFTER_RUNS", "0"))
time.sleep(float(os.environ.get("FAKE_STARTUP_S", "0")))   # the real one imports vLLM: about 30 s
for c in json.loads(Path(opt("--serve-params")).read_text()):
    d = exp / ("SERVE--" + "-".join(f"{{k}}={{v}}" for k, v in c.items()))
    if (d / "summary.json").exists():
        continue
    print("[BEGIN SERVER]"); print(f"Server overrides: {{c}}"); print(f"Server command: {{['vllm', 'serve']}}")
    sys.stdout.flush(); time.sleep(0.05)
    if all(c.get(k) == v for k, v in refuse.items()):
        print("Traceback (most recent call last):")
        print("RuntimeError: Server process crashed with return code 1")
        sys.exit(1)
    runs = []
    for r in range(int(opt("--num-runs"))):
        out = d / f"run={{r}}.json"
        print("[BEGIN BENCHMARK]"); print(f"Run Number: {{r}}"); print(f"Output file: {{out}}")
        if os.environ.get("FAKE_BENCH_FAILS"):
            print("ModuleNotFoundError: No module named 'pybase64'")
            sys.exit(1)
        if out.exists():
            print("Found existing results."); print("[SKIPPED BENCHMARK]")
            runs.append(json.loads(out.read_text())); continue
        sys.stdout.write("\\r 50%|##   | 200/400\\r100%|#####| 400/400\\n")
        d.mkdir(parents=True, exist_ok=True)
        doc = {{"total_token_throughput": 5000.0 + c["max_num_seqs"] + r, "duration": 12.5, "completed": 400}}
        out.write_text(json.dumps(doc)); runs.append(doc)
        print("[END BENCHMARK]"); sys.stdout.flush()
        if hang_after and len(list(exp.glob("*/run=*.json"))) >= hang_after:
            time.sleep(600)
    (d / "summary.json").write_text(json.dumps(runs))
    print("[END SERVER]"); sys.stdout.flush()
'''
AXES = ["max_num_seqs=256,1024", "kv_cache_dtype=auto,fp8"]
REFUSED = {"kv_cache_dtype": "fp8", "max_num_seqs": 256}


def install_stand_in(cache) -> None:
    """vLLM 0.25.1's installed folder under ``cache``, its `vllm` the stand-in."""
    folder = cache / "engines" / "vllm-0.25.1"
    (folder / "bin").mkdir(parents=True)
    (folder / ".tuner-engine.json").write_text(json.dumps(
        {"engine": "vllm", "package": "vllm", "version": "0.25.1", "python": sys.executable,
         "kit": "test", "installed": "now"}))
    (folder / "bin" / "vllm").write_text(FAKE.format(python=sys.executable))
    (folder / "bin" / "vllm").chmod(0o755)


@pytest.fixture()
def state(tmp_path, monkeypatch):
    """A plan for 4 configs x 2 runs, its vLLM folder holding the stand-in."""
    cache = tmp_path / "cache"
    install_stand_in(cache)
    monkeypatch.setenv("TUNER_CACHE", str(cache))
    st = tmp_path / "state"
    assert gs.main(["plan", "--state", str(st), "--axes", *AXES, "--num-runs", "2"]) == 0
    return st


def _runner(st, **env):
    return subprocess.Popen([sys.executable, "-m", "benchmarks.gpu_vllm_sweep", "run", "--state", str(st)],
                            env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_plan_is_tunes_launch(state):
    plan = json.loads((state / "plan.json").read_text())
    serve = plan["serve_cmd"]
    assert serve[:2] == [str(state.parent / "cache/engines/vllm-0.25.1/bin/vllm"), "serve"]
    assert serve[serve.index("--max-model-len") + 1] == "16384"  # the space's fixed max_seq_len
    assert plan["env"]["PYTHONPATH"].endswith("vllm-0.25.1") and plan["env"]["HF_HUB_OFFLINE"] == "1"
    bench = plan["bench_cmd"]
    for flag, value in (("--dataset-name", "sharegpt"), ("--num-prompts", "400"), ("--seed", "42"),
                        ("--request-rate", "inf")):
        assert bench[bench.index(flag) + 1] == value
    assert len(plan["configs"]) == 4
    assert {"kv_cache_dtype": "fp8", "max_num_seqs": 256} == plan["configs"][1]["sweep"]
    assert gs.overrides(["x", "--a", "1"], ["x", "--a", "1", "--no-b-c", "--d-e", "fp8", "--f"]) == {
        "b_c": False, "d_e": "fp8", "f": True}


def test_a_later_stay_without_the_kit_installed_is_told_so_with_exit_2(state, tmp_path, monkeypatch, capsys):
    """`plan` on a later stay remakes the plan with this machine's paths; a machine where the kit
    was not installed gets the install command, not a traceback."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "empty"))
    before = (state / "plan.json").read_text()
    with pytest.raises(SystemExit) as stop:
        gs.main(["plan", "--state", str(state)])
    assert stop.value.code == 2
    assert "does not exist: install the engine's kit there" in capsys.readouterr().err
    assert (state / "plan.json").read_text() == before


def test_a_refused_config_is_dropped_a_stop_keeps_what_ran_and_the_grid_replays(state):
    plan = json.loads((state / "plan.json").read_text())
    first = _runner(state, FAKE_REFUSE=json.dumps(REFUSED), FAKE_HANG_AFTER_RUNS="3")
    deadline = time.time() + 30
    while len(list((state / "out" / gs.EXPERIMENT).glob("*/run=*.json"))) < 3:
        assert time.time() < deadline and first.poll() is None, first.stdout.read()
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 143
    # The stop killed the sweep: the third run's server (the last life) is left open.
    assert gs.progress(state).startswith("1 configs measured, 1 refused, of 4")

    second = _runner(state, FAKE_REFUSE=json.dumps(REFUSED), FAKE_STARTUP_S="0.5")
    assert second.wait(timeout=60) == 0, second.stdout.read()
    invocations = json.loads((state / "invocations.json").read_text())
    assert [i["exit_code"] for i in invocations] == [1, None, 0]
    assert [i["resume"] for i in invocations] == [False, True, True]
    (refused,) = json.loads((state / "refused.json").read_text())
    assert refused["config"] == REFUSED and "crashed" in refused["error"][-1]
    assert json.loads((state / "serve-params.json").read_text()) == [
        c["sweep"] for c in plan["configs"] if c["sweep"] != REFUSED]

    doc = gs.convert(state)
    assert doc["meta"]["peer_wall_s"] == pytest.approx(
        sum(i["end"] - i["start"] for i in invocations), abs=0.1)
    assert doc["meta"]["refused"][0]["config"] == REFUSED
    # Only the resume after the stop is the stays' cost (its start-up), the one after the refusal
    # the peer's own, and the stopped launch had measured runs: it is not an aborted one.
    assert 0.5 <= doc["meta"]["stay_overhead_s"] < 1.5 and not doc["meta"]["aborted_launches"]
    by_config = {json.dumps(p["sweep"], sort_keys=True): p for p in doc["points"]}
    assert len(by_config) == 4
    refused_point = by_config[json.dumps(REFUSED, sort_keys=True)]
    (failed,) = refused_point["launches"]
    assert not failed["ok"] and failed["time_to_fail_s"] >= 0
    for key, point in by_config.items():
        if point is refused_point:
            continue
        runs = [r["run"] for launch in point["launches"] for r in launch["full"]]
        assert sorted(runs) == [0, 1], key  # every run once, across the stop and the resume
        assert all(r["seconds"] == 12.5 for launch in point["launches"] for r in launch["full"])
    stopped = [p for p in doc["points"] if len(p["launches"]) == 2]
    assert len(stopped) == 1 and not stopped[0]["launches"][0]["complete"]

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    grid = Grid.from_json(doc)
    assert not grid.point(refused_point["params"]).feasible
    assert grid.best_params == {"kv_cache_dtype": "auto", "max_num_seqs": 1024}
    space = rm.replay_space(doc, state / "shapes")
    run = rm.replay(space, grid, "grid", 0, n_trials=10, hardware_gpu="h200-141gb", table=rm.STRATEGIES)
    assert run.launches == len(grid.points) + len(space.baselines)
    assert run.final == 1.0


def test_a_client_that_fails_before_any_run_stops_the_sweep_instead_of_refusing_configs(state):
    runner = _runner(state, FAKE_BENCH_FAILS="1", FAKE_REFUSE=json.dumps({"max_num_seqs": 7}))
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 1, out
    assert "in its first benchmark" in out
    assert not (state / "refused.json").exists()
    assert len(json.loads((state / "invocations.json").read_text())) == 1


def test_two_servers_failing_before_anything_is_measured_stop_the_sweep(state):
    runner = _runner(state, FAKE_REFUSE="{}")  # every server crashes: a broken install, say
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 1, out
    assert "a second server failed" in out
    assert len(json.loads((state / "refused.json").read_text())) == 1
    assert len(json.loads((state / "invocations.json").read_text())) == 2
