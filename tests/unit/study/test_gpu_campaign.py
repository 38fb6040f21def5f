"""The H200 head-to-head's queue (benchmarks/gpu_campaign.py) and its judge (benchmarks/gpu_judge.py).

The queue: each step's first commands and those that resume it, a SIGTERM that stops the running
step and leaves it to the next stay, steps done skipped. The judge: its arms from the sweep's
results and tune's picks, and real launches of the vLLM CPU engine (the sweep's plan for cpu-smoke),
resumed without launching twice."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time

import pytest

from benchmarks import gpu_campaign as gc
from benchmarks import gpu_judge as gj
from benchmarks import gpu_vllm_sweep as gs
from tests.helpers import REPO


def test_each_step_starts_then_resumes_with_the_commands_a_user_would_type(tmp_path, monkeypatch):
    c = gc.Campaign(tmp_path, prior_file=tmp_path / "prior.json")
    (start,) = c.commands("prior-25")
    assert start[3:] == ["start", "--space", "h200-vllm-grid", "--study", "h2h-prior", "-n", "4",
                         "--prior-file", str(tmp_path / "prior.json")]
    (control,) = c.commands("noprior-25")
    assert "--prior-file" not in control and control[-1] == "--no-prior"
    confirm, pick = c.commands("noprior-25-confirm")
    assert confirm[-6:] == ["confirm", "h2h-noprior", "--top-k", "1", "--repeats", "1"]
    assert pick[pick.index("--out") + 1].endswith("picks/noprior-25.json")
    monkeypatch.setattr(gc, "finished", lambda study: 7)   # 4 searched + the confirm's 3
    assert c.commands("prior-50")[0][-3:] == ["h2h-prior", "-n", "11"]
    c.save({"prior-50": {"runs": [{"start": 0, "end": 1, "exit_code": None}], "done": False}})
    assert c.commands("prior-50")[0][-2:] == ["resume", "h2h-prior"]   # the stored budget
    assert c.commands("sglang-grid")[0][3:] == ["start", "--space", "h200-sglang-grid", "--study",
                                                "h200-sglang-grid"]
    (paced,) = c.commands("fidelity-paced")
    assert paced[paced.index("--request-rate") + 1] == "16" and paced[paced.index("--pairs") + 1] == "3"
    for name in ("judge-clients", "judge-warm"):
        (both,) = c.commands(name)
        assert both[1:] == ["-m", "benchmarks.gpu_judge", "run", "--state", str(tmp_path), "--name",
                            name, "--clients", "vllm,tune", "--warmups", "1", "--no-defaults"]
    assert gc.steps()[0] == "sweep" and gc.steps()[-5:] == ["judge", "sglang-grid", "fidelity-paced",
                                                            "judge-clients", "judge-warm"]
    assert gc.needs("prior-25") == [] and gc.needs("prior-25-confirm") == ["prior-25"]
    assert gc.needs("noprior-50") == ["noprior-25-confirm"] and gc.needs("fidelity") == []
    assert gc.needs("fidelity-paced") == []
    assert gc.needs("judge-clients") == gc.needs("judge-warm") == gc.needs("judge")
    assert set(gc.needs("judge")) == {"sweep", "prior-25-confirm", "prior-50-confirm",
                                      "noprior-25-confirm", "noprior-50-confirm"}


QUEUE = """
import sys, time
from benchmarks import gpu_campaign as gc
FLAG = sys.argv[1]
def commands(self, step):
    if step == "fidelity":   # the second step: a flag file, then long enough to be stopped
        return [[sys.executable, "-c",
                 "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(60)", FLAG]]
    return [[sys.executable, "-c", "pass"]]
gc.Campaign.commands = commands
sys.argv = sys.argv[:1] + sys.argv[2:]
sys.exit(gc.main())
"""


def test_a_stop_or_a_snapshot_leaves_the_running_step_to_the_next_stay(tmp_path):
    state, flag = tmp_path / "state", tmp_path / "fidelity-running"
    argv = [sys.executable, "-c", QUEUE, str(flag), "run", "--state", str(state)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 30
    while not flag.exists():
        assert time.time() < deadline and first.poll() is None, first.stdout.read()
        time.sleep(0.05)
    # A poll's snapshot of the running queue: the open run ends at the snapshot there, not here.
    assert gc.main(["snapshot", "--state", str(state), "--out", str(tmp_path / "snap.tar.gz")]) == 0
    with tarfile.open(tmp_path / "snap.tar.gz") as tar:
        tar.extractall(tmp_path / "snap", filter="data")
        assert tar.getnames().count("campaign/steps.json") == 1
    kept = json.loads((tmp_path / "snap" / "campaign" / "steps.json").read_text())
    assert kept["sweep"]["done"] and not kept["fidelity"]["done"]
    assert kept["fidelity"]["runs"][0]["snapshot"] and kept["fidelity"]["runs"][0]["end"]
    assert json.loads((state / "steps.json").read_text())["fidelity"]["runs"][0]["end"] is None
    assert gc.Campaign(tmp_path / "snap" / "campaign").started("fidelity")   # the next stay resumes it
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 143, first.stdout.read()
    record = json.loads((state / "steps.json").read_text())
    assert record["sweep"]["done"] and not record["fidelity"]["done"]
    assert record["fidelity"]["runs"][0]["exit_code"] is None and record["fidelity"]["runs"][0]["end"]

    flag.unlink()
    done = subprocess.run([sys.executable, "-c", QUEUE.replace("time.sleep(60)", "pass"), str(flag),
                           "run", "--state", str(state)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((state / "steps.json").read_text())
    assert all(record[s]["done"] for s in gc.steps())
    assert len(record["sweep"]["runs"]) == 1 and len(record["fidelity"]["runs"]) == 2
    assert "fidelity" in gc.status(gc.Campaign(state)).splitlines()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state_with_results(tmp_path, plan: dict, sweep_values: dict[str, float], picks: dict) -> object:
    state = tmp_path / "campaign"
    (state / "vllm-sweep").mkdir(parents=True)
    (state / "picks").mkdir()
    (state / "vllm-sweep" / "plan.json").write_text(json.dumps(plan))
    for c in plan["configs"]:
        name = "SERVE--" + "-".join(f"{k}={v}" for k, v in c["sweep"].items())
        if name in sweep_values:
            d = state / "vllm-sweep" / "out" / "grid" / name
            d.mkdir(parents=True)
            (d / "summary.json").write_text(json.dumps(
                [{plan["objective"]: sweep_values[name] + r} for r in range(3)]))
    for label, doc in picks.items():
        (state / "picks" / f"{label}.json").write_text(json.dumps(doc))
    return state


def test_the_judges_arms_merge_equal_picks_and_a_baseline_pick_is_the_defaults(tmp_path):
    plan = {"objective": "total_token_throughput", "axes": {"max_num_seqs": [8, 16]},
            "configs": [{"knobs": {"max_num_seqs": 8}, "sweep": {"max_num_seqs": 8}},
                        {"knobs": {"max_num_seqs": 16}, "sweep": {"max_num_seqs": 16}}]}
    state = _state_with_results(tmp_path, plan, {"SERVE--max_num_seqs=8": 90.0, "SERVE--max_num_seqs=16": 100.0},
                                {"prior-25": {"arm": "search", "params": {"max_num_seqs": 16}},
                                 "prior-50": {"arm": "model-pick", "params": {"max_num_seqs": 8}},
                                 "noprior-25": {"arm": "vllm-defaults", "params": {"max_num_seqs": 16}}})
    assert gj.sweep_pick(state)["knobs"] == {"max_num_seqs": 16}
    assert gj.arms(state) == {"sweep": {"max_num_seqs": 16}, "defaults": None,
                              "tune-prior-50": {"max_num_seqs": 8}}
    assert [gj.client_order(("vllm", "tune"), r) for r in range(3)] == [
        ("vllm", "tune"), ("tune", "vllm"), ("vllm", "tune")]
    assert gj.schedule(["a", "b", "c"], 3) == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"),
                                               (1, "a"), (2, "a"), (2, "b"), (2, "c")]


@pytest.mark.usefixtures("tiny_model_path")
def test_the_judge_launches_each_arm_on_the_real_engine_and_resumes_without_relaunching(
        tmp_path, vllm_bin, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE", str(vllm_bin.parents[3]))
    plan = gs.make_plan("cpu-smoke", ["max_num_seqs=8,16"], num_runs=1, port=_free_port())
    state = _state_with_results(tmp_path, plan, {"SERVE--max_num_seqs=16": 100.0},
                                {"prior-25": {"arm": "vllm-defaults", "params": {}}})
    assert gj.run(state, rounds=1) == 0
    doc = json.loads((state / "judge.json").read_text())
    assert list(doc["arms"]) == ["sweep", "defaults"]
    assert [(r["round"], r["arm"]) for r in doc["launches"]] == [(0, "sweep"), (0, "defaults")]
    for row in doc["launches"]:
        assert "error" not in row, row
        assert row["value"] > 0 and row["completed"] == plan["workload"]["num_prompts"]
        assert row["ready_s"] > 0 and row["teardown_s"] >= 0
    sweep, defaults = doc["launches"]
    assert sweep["argv"][-2:] == ["--max-num-seqs", "16"] and sweep["argv"][:-2] == plan["serve_cmd"]
    assert defaults["argv"] == plan["defaults_cmd"] and "--max-model-len" not in defaults["argv"]
    assert {row["machine"] for row in doc["launches"]} == {gj.machine()}
    assert gj.run(state, rounds=1) == 0                                    # nothing left to launch
    assert len(json.loads((state / "judge.json").read_text())["launches"]) == 2
    # the later judge, without the defaults: each launch warmed by one unmeasured run, then
    # measured by `vllm bench serve` and `tune bench`, in that order in round 0, on the same
    # workload, the server's prefix cache emptied after the warm-up and between the clients
    assert gj.run(state, rounds=1, name="judge-warm", clients=gj.client_order(("vllm", "tune"), 0),
                  warmups=1, defaults=False) == 0
    both = json.loads((state / "judge-warm.json").read_text())["launches"]
    assert [r["arm"] for r in both] == ["sweep"]
    tag = f"sweep-r0-{gj.machine()[:8]}"
    assert (state / "judge-warm" / f"{tag}-warmup0.json").exists()
    for row in both:
        assert list(row["by_client"]) == ["vllm", "tune"], row
        for measured in row["by_client"].values():
            assert measured["value"] > 0 and measured["completed"] == plan["workload"]["num_prompts"]
        assert row["value"] == row["by_client"]["vllm"]["value"]
        assert row["cache_resets"] == 2
    assert (state / "judge-warm" / f"{tag}-tune.json").exists()
    assert (state / "judge-warm" / f"{tag}.log").read_text().count("Resetting prefix cache") == 2   # the server's own word
    # the next stay's fresh machine: the interleaved schedule starts over there, the launches kept
    monkeypatch.setattr(gj, "machine", lambda: "another-boot")
    fails = {"defaults"}
    monkeypatch.setattr(gj, "launch", lambda plan, label, config, work, tag, *order_and_warmups: {
        "arm": label, **({"error": "the server exited 1"} if label in fails else {"value": 1.0})})
    assert gj.run(state, rounds=1) == 1                     # a failed launch: the step is not done
    fails.clear()
    assert gj.run(state, rounds=1) == 0                     # ... and only it is launched again
    rows = json.loads((state / "judge.json").read_text())["launches"]
    assert [(r["machine"], r["arm"], "error" in r) for r in rows[2:]] == [
        ("another-boot", "sweep", False), ("another-boot", "defaults", True),
        ("another-boot", "defaults", False)]
    assert rows[:2] == doc["launches"]


FAILING = """
import sys
from benchmarks import gpu_campaign as gc
def commands(self, step):
    return [[sys.executable, "-c", "import sys; sys.exit(3 if sys.argv[1] in ('sweep', 'prior-25') else 0)", step]]
gc.Campaign.commands = commands
sys.exit(gc.main())
"""


def test_a_failed_step_holds_back_only_the_steps_that_need_it(tmp_path):
    state = tmp_path / "state"
    done = subprocess.run([sys.executable, "-c", FAILING, "run", "--state", str(state)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    record = json.loads((state / "steps.json").read_text())
    ran = {s for s in record}
    assert {"fidelity", "noprior-25", "noprior-50-confirm", "sglang-grid"} <= ran
    assert not {"prior-25-confirm", "prior-50", "judge"} & ran          # they need a failed step
    assert record["noprior-50-confirm"]["done"] and not record["sweep"]["done"]
    assert "left: sweep, prior-25, prior-25-confirm" in done.stdout
