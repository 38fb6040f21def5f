"""End to end on the real vLLM CPU server: `tune start`, refusals, SIGINT, `tune resume`.

These launch real engines (about 40 s per launch on 2 cores), so studies are kept to a few trials.
"""

from __future__ import annotations

import signal
import subprocess
import tarfile

import optuna
import pytest

from tests.helpers import (
    TUNE,
    load,
    run_tune,
    running_engine,
    small_space,
    study_processes,
    wait_for,
)
from tuner.record import schema
from tuner.runtime.procgroup import group_members, living

pytestmark = pytest.mark.engine


def test_study_records_results_refusals_and_best(real_study, monkeypatch):
    # The session's real study (conftest.real_study: cpu-smoke, 16 prompts, 3 trials) is this
    # test's `tune start`; the dashboard, report and deploy tests read the same one.
    studies, name, stdout = real_study
    monkeypatch.setenv("TUNER_STUDIES_DIR", str(studies))
    study = load(studies, name)
    trials = {t.user_attrs["arm"]: t for t in study.trials if t.user_attrs.get("arm") != "search"}
    assert len(study.trials) == 3

    defaults = trials["vllm-defaults"]
    assert defaults.state == optuna.trial.TrialState.COMPLETE
    assert defaults.constraints == {"engine_start": 0.0}
    assert defaults.user_attrs["completed"] == 16 and defaults.value > 0
    assert defaults.value == pytest.approx(defaults.user_attrs["metrics"]["total_token_throughput"])
    # Engine defaults: no knob flags on the command line.
    assert not {"--max-num-seqs", "--max-num-batched-tokens", "--max-model-len"} & set(
        defaults.user_attrs["argv"])
    assert defaults.user_attrs["engine_version"] == "0.32.0"
    assert defaults.user_attrs["environment"]["device"].startswith("cpu")
    # Where the launch went, from vLLM's own log: --enforce-eager compiles nothing and captures
    # no graphs, so only the weights, the engine init and the rest are there.
    phases = defaults.user_attrs[schema.LAUNCH_PHASES]
    assert set(phases) == {"weights_s", "kv_profile_s", "other_s"}
    assert defaults.user_attrs[schema.LAUNCH_S] == pytest.approx(
        defaults.user_attrs["timings"]["ready_s"], abs=0.01)

    refused = trials["probe-invalid"]
    assert refused.state == optuna.trial.TrialState.COMPLETE  # complete + infeasible, so samplers learn
    assert refused.constraints == {"engine_start": 1.0}
    assert refused.user_attrs["failure_class"] == "invalid-config"
    assert "is smaller than max_model_len" in refused.user_attrs["failure_evidence"]

    artifacts = optuna.artifacts.get_all_artifact_meta(defaults, storage=study._storage)
    assert {a.mimetype for a in artifacts} >= {"text/plain", "application/json"}
    assert "best: trial" in stdout and "serve command:" in stdout
    assert ("vs baseline vllm-defaults" in stdout
            or "the baseline vllm-defaults is the best config measured" in stdout)

    status = run_tune("status", name)
    assert status.returncode == 0 and "invalid-config" in status.stdout and "infeasible" in status.stdout
    assert f"{defaults.user_attrs[schema.LAUNCH_S]:.0f} s (weights" in status.stdout
    best = run_tune("best", name)
    assert best.returncode == 0 and "--served-model-name tiny-qwen3" in best.stdout


def test_sigint_stops_the_engine_and_resume_finishes(tmp_path, studies, vllm_bin, tiny_model_path):
    # Enough prompts that the benchmark takes a while on 2 cores, so SIGINT lands inside it.
    # One trial: the interrupted trial's retry is what `tune resume` must run to finish the budget.
    space = small_space(tmp_path, num_prompts=400, n_trials=1, name="sigint",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    # SIGINT as from a terminal's Ctrl-C, even when the test run itself was started in the
    # background (a shell hands SIGINT down as ignored then, and tune rightly keeps it so).
    proc = subprocess.Popen([str(TUNE), "start", "--space", str(space)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    db = studies / "sigint.db"
    try:
        pgid = wait_for(lambda: running_engine(db), 300, "the first trial's engine to launch",
                         proc)
        log = next((studies / "sigint-files" / "trials").glob("trial-0000/server.log"))
        wait_for(lambda: "Starting vLLM server on" in log.read_text(errors="replace"), 300,
                  "the engine to become ready")
        wait_for(lambda: "POST /v1/completions" in log.read_text(errors="replace"), 60,
                  "the benchmark to start")
        proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + errs
    assert "tune resume sigint" in errs
    assert "trial 0 marked interrupted" in out + errs
    assert living(group_members(pgid)) == [], "the engine's process group survived SIGINT"
    assert study_processes("sigint") == [], "an engine process outlived SIGINT"

    # What another tool sees right after the exit: the archive of `tune export`.
    exported = run_tune("export", "sigint", str(tmp_path / "sigint.tar.gz"))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    with tarfile.open(tmp_path / "sigint.tar.gz") as archive:
        archive.extractall(tmp_path / "exported", filter="data")
    (db_file,) = (tmp_path / "exported").rglob("study.db")
    archived = optuna.load_study(study_name="sigint", storage=f"sqlite:///{db_file}")
    assert archived.trials[0].state == optuna.trial.TrialState.FAIL
    assert archived.trials[0].user_attrs["interrupted"]
    assert optuna.trial.TrialState.RUNNING not in {t.state for t in archived.trials}

    study = load(studies, "sigint")
    first = study.trials[0]
    assert first.state == optuna.trial.TrialState.FAIL and first.user_attrs["interrupted"]

    resumed = run_tune("resume", "sigint")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "trial 0 was interrupted: re-queued" in resumed.stdout
    study = load(studies, "sigint")
    complete = [t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE and schema.launched(t)]
    (retry,) = complete
    assert retry.user_attrs.get("retry_of") == 0
    assert retry.user_attrs["arm"] == "vllm-defaults" and retry.params == first.params


def test_sigkill_of_the_tuner_leaves_no_orphan_after_resume(tmp_path, studies, vllm_bin,
                                                            tiny_model_path):
    space = small_space(tmp_path, num_prompts=16, n_trials=1, name="killed",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    proc = subprocess.Popen([str(TUNE), "start", "--space", str(space)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    db = studies / "killed.db"
    try:
        pgid = wait_for(lambda: running_engine(db, "killed"), 300, "the engine to launch", proc)
        proc.kill()  # SIGKILL: no cleanup runs in the tuner
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert group_members(pgid), "the engine should outlive a SIGKILLed tuner (its own session)"

    resumed = run_tune("resume", "killed")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"killed orphaned engine process group {pgid}" in resumed.stdout
    assert "trial 0 was running when its tuner process died: marked FAIL" in resumed.stdout
    assert living(group_members(pgid)) == []
    study = load(studies, "killed")
    # Trials answered without a launch (a rule, an earlier measurement) are COMPLETE too.
    complete = [t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE and schema.launched(t)]
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    assert [t.user_attrs.get("retry_of") for t in complete] == [0]  # the budget: its retry
