"""Trials on a real local Ray cluster (fake GPUs via --num-gpus) against real vLLM CPU servers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import optuna
import psutil
import pytest

from tests.helpers import load, small_space, study_processes, wait_for
from tuner.record import schema
from tuner.runtime import orphans
from tuner.runtime.procgroup import free_port

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'tuner[ray]'")
pytestmark = pytest.mark.engine
TUNE = os.path.join(os.path.dirname(sys.executable), "tune")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")


@pytest.fixture(scope="module")
def ray_cluster():
    """`ray start --head` with two logical GPUs on loopback, shared by this module's tests (each
    one's trials end before it does); stopped after the last."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's unix sockets live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([RAY, "start", "--head", f"--port={port}", "--num-cpus=2", "--num-gpus=2",
                    "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                    "--disable-usage-stats", f"--temp-dir={temp}"],
                   check=True, capture_output=True, env=env, timeout=120)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline() or [proc.name()]
    except psutil.NoSuchProcess:
        return ["(exited)"]


def _overlap(a: optuna.trial.FrozenTrial, b: optuna.trial.FrozenTrial) -> bool:
    return a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete


def test_two_trials_run_at_once_on_distinct_gpus_and_ports(tmp_path, studies, ray_cluster,
                                                           vllm_bin, tiny_model_path):
    space = small_space(tmp_path, num_prompts=8, n_trials=2, name="onray",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    proc = subprocess.run([TUNE, "start", "--space", str(space), "--backend", "ray",
                           "--address", ray_cluster], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = [t for t in load(studies, "onray").trials if schema.launched(t)]
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    devices = {t.user_attrs["placement"]["cuda_visible_devices"] for t in trials}
    assert devices == {"0", "1"}
    ports = {t.user_attrs["argv"][t.user_attrs["argv"].index("--port") + 1] for t in trials}
    assert len(ports) == 2
    assert _overlap(*trials), "the two trials did not run concurrently"
    assert trials[0].user_attrs["arm"] == "vllm-defaults"  # the baseline, enqueued once, ran
    assert all(t.user_attrs.get("failure_class") is None for t in trials)


def test_killed_driver_then_resume_finishes_the_study(tmp_path, studies, ray_cluster, vllm_bin,
                                                      tiny_model_path):
    space = small_space(tmp_path, num_prompts=8, n_trials=2, name="raykill",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    driver = subprocess.Popen([TUNE, "start", "--space", str(space), "--backend", "ray",
                               "--address", ray_cluster], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    trials_dir = studies / "raykill-files" / "trials"
    try:
        wait_for(lambda: len([p for p in trials_dir.glob("trial-*/server.log")
                               if "Starting vLLM server on" in p.read_text(errors="replace")]) == 2,
                  400, "both engines to serve", driver)
        driver.kill()
        driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    # What the dead driver left: its engines and their spawned children (VLLM::EngineCore).
    left = wait_for(lambda: study_processes("raykill"), 30, "the engines' processes")
    assert any("EngineCore" in " ".join(_cmdline(p)) for p in left), [_cmdline(p) for p in left]
    resumed = subprocess.run([TUNE, "resume", "raykill", "--backend", "ray", "--address",
                              ray_cluster], capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "was running when its tuner process died" in resumed.stdout
    study = load(studies, "raykill")
    complete = [t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE and schema.launched(t)]
    assert len(complete) == 2
    interrupted = {t.number for t in study.trials if t.state == optuna.trial.TrialState.FAIL}
    assert interrupted  # at least one trial was running when the driver died ...
    assert interrupted <= {t.user_attrs.get("retry_of") for t in complete}  # ... and was re-run
    assert orphans.orphans() == []
    survivors = [_cmdline(p) for p in study_processes("raykill")]
    assert survivors == [], f"processes of the killed driver's trials outlived tune resume: {survivors}"
