"""Faults injected into real engine processes: each trial is recorded with the right class, the
study goes on, no completed trial is lost and no process of ours is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import optuna
import psutil
import pytest
import yaml

from tests.helpers import (
    FAULT_ENGINES,
    load,
    run_tune,
    running_engine,
    space_file,
    wait_for,
)
from tuner.runtime import orphans

pytestmark = pytest.mark.engine
FAULTS = FAULT_ENGINES
TUNE = os.path.join(os.path.dirname(sys.executable), "tune")




def assert_no_leftovers() -> None:
    assert orphans.orphans() == []
    mine = [p for p in psutil.process_iter(["cmdline"])
            if any(str(FAULTS) in part for part in (p.info["cmdline"] or []))]
    assert mine == [], [p.info["cmdline"] for p in mine]


@pytest.mark.parametrize("engine, expected, evidence", [
    ("oom_engine.py", "out-of-memory", "CUDA out of memory"),
    ("hang_engine.py", "startup-timeout", "not ready after 5 s"),
])
def test_scripted_engine_faults(tmp_path, studies, engine, expected, evidence, vllm_bin,
                                tiny_model_path):
    space = space_file(tmp_path, "fault", command=[sys.executable, str(FAULTS / engine)],
                       startup_timeout_s=5)
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (t,) = load(studies, "fault").trials
    assert t.state == optuna.trial.TrialState.COMPLETE and t.constraints["engine_start"] == 1.0
    assert t.user_attrs["failure_class"] == expected
    assert evidence in t.user_attrs["failure_evidence"] + t.user_attrs["failure_reason"]
    assert_no_leftovers()


def test_bad_flag_is_invalid_config(tmp_path, studies, vllm_bin, tiny_model_path):
    space = space_file(tmp_path, "badflag", fixed_args=["--no-such-flag", "1"])
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (t,) = load(studies, "badflag").trials
    assert t.user_attrs["failure_class"] == "invalid-config"
    assert "--no-such-flag" in t.user_attrs["failure_evidence"]
    assert_no_leftovers()


def test_port_taken_at_bind_is_retried_not_blamed_on_the_config(tmp_path, studies, vllm_bin,
                                                                 tiny_model_path):
    marker = tmp_path / "raced-once"
    space = space_file(tmp_path, "portrace", command=[
        sys.executable, str(FAULTS / "port_race_engine.py"), str(marker), str(vllm_bin), "serve"])
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, retry = load(studies, "portrace").trials
    assert first.state == optuna.trial.TrialState.FAIL
    assert "was taken" in first.user_attrs["harness_error"]
    assert retry.state == optuna.trial.TrialState.COMPLETE and retry.user_attrs["retry_of"] == 0
    assert retry.user_attrs["feasible"]
    assert_no_leftovers()


def test_engine_killed_mid_benchmark(tmp_path, studies, vllm_bin, tiny_model_path):
    space = space_file(tmp_path, "midkill", num_prompts=600, n_trials=2)
    proc = subprocess.Popen([TUNE, "start", "--space", str(space)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    db = studies / "midkill.db"
    try:
        pgid = wait_for(lambda: running_engine(db, "midkill"), 300, "the engine", proc)
        log = studies / "midkill-files" / "trials" / "trial-0000" / "server.log"
        wait_for(lambda: "POST /v1/completions" in log.read_text(errors="replace"), 300,
                  "the benchmark", proc)
        os.killpg(pgid, signal.SIGKILL)  # the engine dies under load (e.g. the OOM killer)
        out, errs = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + errs
    first, second = load(studies, "midkill").trials
    assert first.user_attrs["failure_class"] == "crashed"
    assert first.user_attrs["failure_reason"].startswith("server died during the benchmark")
    assert first.constraints["engine_start"] == 1.0
    assert second.state == optuna.trial.TrialState.COMPLETE  # the study went on
    assert_no_leftovers()


def test_a_generalising_failure_prunes_its_siblings_without_launching(tmp_path, studies, vllm_bin,
                                                                        tiny_model_path):
    """vLLM on CPU cannot load AWQ for an unquantized model. With the rules switched off the first
    AWQ launch fails (unsupported-quantization, which generalises over engine x quantization x
    device); every later AWQ proposal is pruned, learned from that launch, and never launched."""
    space = space_file(tmp_path, "learned", n_trials=2, baselines=[
        {"name": "awq-probe", "engine": "vllm", "params": {"quantization": "awq"}}])
    data = yaml.safe_load(space.read_text())
    vllm = data["engines"]["vllm"]
    vllm["check_rules"] = False
    vllm["params"] = {"quantization": {"type": "categorical", "choices": ["none", "awq"],
                                       "default": "none"},
                      "max_num_seqs": {"type": "categorical", "choices": [8, 16, 32, 64]}}
    data.update(sampler="random", seed=3)
    space.write_text(yaml.safe_dump(data))
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = load(studies, "learned").trials
    probe = trials[0]
    assert probe.user_attrs["failure_class"] == "unsupported-quantization"
    assert probe.user_attrs["learned_key"]
    learned = [t for t in trials if t.user_attrs.get("pruned_rule") == "learned"]
    assert learned, "no AWQ proposal came after the probe; pick another seed"
    for t in learned:
        assert t.params["quantization"] == "awq"
        assert t.state == optuna.trial.TrialState.COMPLETE and "engine_pgid" not in t.user_attrs
        assert t.constraints["engine_start"] == 1.0  # told like the refusal it stands for
        assert t.user_attrs["pruned_source"] == "trial 0"
    launched_awq = [t for t in trials if t.params.get("quantization") == "awq"
                    and "engine_pgid" in t.user_attrs]
    assert launched_awq == [probe]  # known-infeasible launches after the lesson: 0
    assert "learned" in run_tune("status", "learned").stdout
