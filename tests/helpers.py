"""Helpers shared by several test modules (one place: no test module imports another)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import create_trial

from tuner.paths import SPACES_DIR
from tuner.record import schema
from tuner.space import load_space

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = TESTS / "data"           # engine flag sets, captured engine logs
FAULT_ENGINES = TESTS / "fault_engines"
SPACES = DATA / "spaces"        # GPU spaces used as fixtures; the wheel ships only user-facing ones


def fixture_space(name: str) -> str:
    """The path of a fixture space under tests/data/spaces/, for ``load_space`` or ``--space``."""
    return str(SPACES / f"{name}.yaml")
TUNE = Path(sys.executable).parent / "tune"  # the console script of the venv running the tests


def small_space(tmp_path: Path, *, num_prompts: int, n_trials: int, baselines: list | None = None,
                name: str = "smoke-test") -> Path:
    """cpu-smoke with a smaller workload and budget, written as the user's own YAML file."""
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["name"] = name
    data["workload"]["num_prompts"] = num_prompts
    data["budget"]["n_trials"] = n_trials
    if baselines is not None:
        data["baselines"] = baselines
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def no_docker(message: str) -> NoReturn:
    """A missing Docker daemon or compose command skips a test, except under scripts/test.sh, which
    set them up for the run (TUNER_REQUIRE_CONTAINERS): there it fails it."""
    if os.environ.get("TUNER_REQUIRE_CONTAINERS"):
        pytest.fail(message)
    pytest.skip(message)


def run_tune(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(TUNE), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def load(studies: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{studies / (name + '.db')}")


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, errs = proc.communicate()
            raise AssertionError(f"tune exited ({proc.returncode}) while waiting for {what}:\n"
                                 f"{out}\n{errs}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def running_engine(db: Path, name: str = "sigint"):
    """(pgid, port) of the engine of the RUNNING trial once it serves, read from the study file."""
    if not db.exists():
        return None
    try:
        study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    except Exception:
        return None
    for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
        pgid = t.user_attrs.get("engine_pgid")
        if pgid:
            return pgid
    return None


def study_processes(study: str) -> list:
    """Live processes whose TUNER_TRIAL_MARKER names this study: its engines and everything they
    started, wherever it went (tuner.runtime.marker)."""
    from tuner.runtime import marker
    return [p for p, env in marker.marked() if env[marker.MARKER_VAR].startswith(study + "/")]


def space_file(tmp_path: Path, name: str, *, command=None, fixed_args=None, n_trials=1,
               num_prompts=8, startup_timeout_s=None, baselines=None) -> Path:
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["name"] = name
    vllm = data["engines"]["vllm"]
    if command:
        vllm["command"] = command
    if fixed_args is not None:
        vllm["fixed_args"] = vllm["fixed_args"] + fixed_args
    if startup_timeout_s:
        vllm["startup_timeout_s"] = startup_timeout_s
    data["workload"]["num_prompts"] = num_prompts
    data["budget"]["n_trials"] = n_trials
    data["baselines"] = baselines if baselines is not None else [{"name": "vllm-defaults",
                                                                  "engine": "vllm"}]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def report_study(storage: str = "sqlite:///:memory:", *, evaluation: dict | None = None,
           n_search: int = 4) -> optuna.Study:
    study = optuna.create_study(study_name="synthetic", storage=storage, direction="maximize")
    study.set_user_attr("space", {"workload": {"name": "chat"},
                                  "objective": {"metric": "total_token_throughput",
                                                "direction": "maximize"}})
    study.add_trial(ok_trial(5000.0, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults",
                        telemetry=TELEMETRY, omit=["max_num_seqs"]))
    study.add_trial(refused_trial({"max_num_seqs": 8, "chunked_prefill": False}, "invalid-config",
                             "Value error, max_num_batched_tokens (256) is smaller than "
                             "max_model_len (2048).", "probe-invalid"))
    for i in range(n_search):
        study.add_trial(ok_trial(4000.0 + 700 * i, {"max_num_seqs": 4 + 9 * i,
                                               "chunked_prefill": i % 2 == 0}))
    # ruled out before launch: told COMPLETE like a refusal (tuner.recording.refused_values)
    study.add_trial(create_trial(value=0.0, params={"max_num_seqs": 3, "chunked_prefill": True},
                                 distributions=DIST,
                                 user_attrs={"arm": "search", "pruned_rule": "known-infeasible",
                                             "pruned_reason": "like trial 1 (invalid-config)",
                                             "feasible": False},
                                 system_attrs={"constraints:engine_start": 1.0}))
    # the last searched config, proposed again: its measurement repeated, no launch
    last = study.trials[1 + n_search]
    study.add_trial(create_trial(value=last.value, params=last.params, distributions=DIST,
                                 user_attrs={"arm": "search", "engine": "vllm", "feasible": True,
                                             "reused_from": last.number, "status": "reused"},
                                 system_attrs={"constraints:engine_start": 0.0}))
    if evaluation:
        study.set_user_attr("evaluation", evaluation)
    return study


def evaluation_doc(base: list[float], best: list[float]) -> dict:
    def arm(values):
        return {"total_token_throughput": values, "output_throughput": [v / 5 for v in values],
                "mean_tpot_ms": [20.0] * len(values), "p99_ttft_ms": [300.0] * len(values),
                "failed": [0] * len(values)}
    return {"repeats": len(base), "finished_at": "2026-11-30T00:00:00+00:00",
            "best": {"trial": 5, "arm": "search"}, "baseline": {"trial": 0, "arm": "vllm-defaults"},
            "workloads": [{"name": "short-128-4", "baseline": arm(base), "best": arm(best)},
                          {"name": "long-1900-100", "baseline": dict(arm(base), failed=[0, 0, 0]),
                           "best": {"total_token_throughput": [], "failed": [10, 10, 10]}}]}


# The 8-config grid of these tests (and of tests/test_study_run.py).
GRID_PARAMS = {
    "max_num_seqs": {"type": "categorical", "choices": [2, 8], "default": 8},
    "max_num_tokens": {"type": "categorical", "choices": [256, 2048], "default": 256},
    "chunked_prefill": {"type": "bool", "default": True},
}


GRID_FIXED = {"max_seq_len": 2048}


DIST = {"max_num_seqs": IntDistribution(2, 128, log=True),
        "chunked_prefill": CategoricalDistribution([True, False])}


# As tuner.recording stores it: one summary per workload, the engine view under engine_metrics.
TELEMETRY = {"chat": {
    "gpu": False, "gpus": [], "energy_j": None,
    "cpu": {"engine_rss_mib": {"min": 1, "mean": 2, "max": 2400.0},
            "engine_cpu_pct": {"min": 1, "mean": 180.0, "max": 199}},
    "engine_metrics": {
        "kv_cache_usage": {"metric": "vllm:kv_cache_usage_perc", "max": 0.031},
        "requests_waiting": {"metric": "vllm:num_requests_waiting", "max": 126.0},
        "preemptions": {"metric": "vllm:num_preemptions_total", "delta": 0.0},
        "queue_time_s": {"metric": "vllm:request_queue_time_seconds", "mean": 3.69,
                         "count": 200}}}}


def slo_space():
    """A max-load space with no engine to launch: chat, and long prompts at a quarter of its rate,
    held to p99 TTFT <= 2000 ms and mean TPOT <= 50 ms."""
    from tuner.space import space_from_dict

    return space_from_dict({
        "name": "slo", "model": {"path": "/m"}, "engines": {"vllm": {}},
        "workloads": [{"name": "chat", "dataset": "random"},
                      {"name": "long", "dataset": "random", "load_scale": 0.25}],
        "objective": {"slos": {"p99_ttft_ms": 2000, "mean_tpot_ms": 50}, "aggregate": "worst",
                      "max_load": {"low": 16, "high": 256}}})


def load_run(workload: str, load: float, met: bool, tpot: float = 20.0, ttft: float = 300.0) -> dict:
    """One run of a max-load trial's load_curve, measured against slo_space's bounds."""
    return {"workload": workload, "load": load, "met": met, "p99_ttft_ms": ttft,
            "mean_tpot_ms": tpot, "completed": 64, "failed": 0,
            "slack": {"p99_ttft_ms": ttft - 2000, "mean_tpot_ms": tpot - 50}}


def ok_trial(value: float, params: dict, arm: str = "search", **attrs) -> optuna.trial.FrozenTrial:
    ua = {"arm": arm, "engine": "vllm", "feasible": True, "knobs": params,
          "command": f"vllm serve m --max-num-seqs {params['max_num_seqs']}", "environment": ENV,
          "total_token_throughput": value, "output_throughput": value / 5, "mean_tpot_ms": 20.0,
          "p99_ttft_ms": 300.0, "failed": 0, "metrics": {"total_output_tokens": 1000}, **attrs}
    return create_trial(value=value, params=params, distributions=DIST, user_attrs=ua,
                        system_attrs={"constraints:engine_start": 0.0})


def stored_study(studies: Path, name: str, trials: list, space=None) -> str:
    """A study of synthetic trials in ``studies/<name>.db``, stored as the tool stores one (its space,
    ready), on cpu-smoke's space unless another is given; returns its URL."""
    url = f"sqlite:///{studies / f'{name}.db'}"
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    study.set_user_attr(schema.SPACE, (space or load_space("cpu-smoke")).model_dump(mode="json"))
    study.set_user_attr(schema.READY, True)
    for t in trials:
        study.add_trial(t)
    return url


def refused_trial(params: dict, cls: str, evidence: str, arm: str = "search") -> optuna.trial.FrozenTrial:
    ua = {"arm": arm, "engine": "vllm", "feasible": False, "failure_class": cls,
          "failure_reason": "vLLM rejected the combination of arguments",
          "failure_evidence": evidence}
    return create_trial(value=0.0, params=params, distributions=DIST, user_attrs=ua,
                        system_attrs={"constraints:engine_start": 1.0})


ENV = {"host": "h", "device": "cpu-avx2", "engine_version": "0.32.0", "gpus": []}


def lm_eval_task(tmp_path: Path) -> Path:
    """A folder holding the bundled local lm-eval task (tests/data/lm_eval), its data file named by
    absolute path: ``quality.lm_eval.include_path`` for task ``tuner_tiny_python``."""
    folder = tmp_path / "lm-eval-tasks"
    folder.mkdir()
    data = DATA / "lm_eval" / "tiny_python.jsonl"
    text = (DATA / "lm_eval" / "tuner_tiny_python.yaml").read_text()
    (folder / "tuner_tiny_python.yaml").write_text(text.replace("DATA_FILE", str(data)))
    return folder


def quality_space(tmp_path: Path, quality: dict, *, baselines: list | None = None,
                  n_trials: int = 3, name: str = "quality") -> Path:
    """cpu-smoke with dtype searched and a quality section, for studies whose trials an
    ``AnsweringExecutor`` answers (the command is this Python: nothing is launched)."""
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["name"] = name
    vllm = data["engines"]["vllm"]
    vllm["command"] = [sys.executable]
    vllm["params"] = {"dtype": {"type": "categorical", "choices": ["float32", "bfloat16"]},
                      "max_num_seqs": {"type": "categorical", "choices": [2, 64]}}
    data["quality"] = quality
    data["baselines"] = baselines if baselines is not None else [
        {"name": "reference-repeat", "engine": "vllm", "params": {"dtype": "float32", "max_num_seqs": 2}},
        {"name": "bf16-fast", "engine": "vllm", "params": {"dtype": "bfloat16", "max_num_seqs": 64}}]
    data["budget"]["n_trials"] = n_trials
    data.pop("evaluation_workloads", None)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def unlaunched_outcome(task):
    """A trial's outcome with the plan a launch would have had and a server log that says nothing
    ran: what executors that answer trials without an engine fill in."""
    from tuner.configs.translate import build_plan
    from tuner.engines.spec import load_engine
    from tuner.trial.runner import TrialOutcome

    plan = build_plan(load_engine(task.engine), task.space.engines[task.engine],
                      task.space.model, task.knobs, port=1, omit=task.omit)
    task.trial_dir.mkdir(parents=True, exist_ok=True)
    (task.trial_dir / "server.log").write_text("answered without an engine\n")
    return TrialOutcome(plan=plan, log_path=task.trial_dir / "server.log")


class UnlaunchedExecutor:
    """Trials submitted to it are answered in order without an engine: ``next_outcome`` hands a
    subclass the next one with its unlaunched outcome, to fill in."""

    slots = 1

    def __init__(self) -> None:
        self.pending: list = []

    def submit(self, task, hooks):
        self.pending.append(task)
        return task.number

    def next_outcome(self):
        task = self.pending.pop(0)
        return task, unlaunched_outcome(task)

    def cancel(self, keys):
        self.pending.clear()

    def reap(self):
        return []

    def close(self):
        pass


class AnsweringExecutor(UnlaunchedExecutor):
    """An executor that launches nothing: each trial's throughput comes from its max_num_seqs, and
    its probe answers (token ids per prompt) from its dtype, compared by the real probe code
    (tuner.trial.quality.compare) in the role the driver gave the trial, as from an engine that
    returns no logprobs. ``lm_eval``: lm-eval's scores per dtype."""

    def __init__(self, answers: dict[str, list[list[int]]], *, lm_eval: dict | None = None,
                 slots: int = 1) -> None:
        """``slots`` > 1: trials are prepared before earlier ones are recorded, as on Ray."""
        super().__init__()
        self.answers, self.lm_eval, self.slots = answers, lm_eval or {}, slots
        self.roles: dict[int, str] = {}

    def wait(self):
        from tuner.study.executors import Finished

        task, outcome = self.next_outcome()
        seqs = task.knobs.get("max_num_seqs", 128)
        outcome.metrics = {"completed": 16, "failed": 0, "total_token_throughput": 100.0 * seqs}
        outcome.workload_metrics = {task.space.workload.name: outcome.metrics}
        self.roles[task.number] = task.quality.role
        outcome.quality, outcome.quality_answers = self._probe(task)
        return Finished(task.number, outcome)

    def _probe(self, task) -> tuple[dict, list[dict]]:
        from tuner.trial.quality import (
            CANDIDATE,
            SAME_PRECISION,
            Answer,
            add_lm_eval,
            compare,
        )

        probe = task.quality
        if probe.role == SAME_PRECISION:
            return {"role": probe.role, "skipped": probe.why}, []
        dtype = task.knobs.get("dtype", "bfloat16")
        answers = [Answer("", list(t), True, [1, 2, 3]) for t in self.answers[dtype]]
        record = {"role": probe.role, "prompts": len(answers)}
        if probe.role == CANDIDATE and probe.reference:
            record["reference_trial"] = probe.reference["trial"]
            reference = [Answer(**a) for a in probe.reference["answers"]]
        elif probe.role == CANDIDATE:
            return ({**record, "not_measured": {"token_mismatch": "no reference answers"}},
                    [a.to_json() for a in answers])
        else:
            reference = answers
        metrics, not_measured = compare(reference, answers, None, "engine returns no logprobs",
                                        None)
        record.update(metrics=metrics, not_measured=not_measured)
        if dtype in self.lm_eval:
            add_lm_eval(record, self.lm_eval[dtype], probe)
        return record, [a.to_json() for a in answers]


_SAVE_WEIGHTS = r"""
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1])).save_pretrained(sys.argv[1])
"""


def seeded_weights_copy(model: Path, python: Path, dest: Path) -> Path:
    """A copy of ``model`` with seeded random weights saved by an engine's own ``python`` (engines
    that load real weights; the same seed gives every engine the same weights)."""
    path = dest / model.name
    shutil.copytree(model, path)
    subprocess.run([str(python), "-c", _SAVE_WEIGHTS, str(path)], check=True, capture_output=True,
                   timeout=300)
    return path


def install_wheel(tmp_path: Path) -> tuple[Path, Path, Path]:
    """This checkout built as a wheel and installed (not editable) into a fresh venv whose
    dependencies come from the test venv: returns (wheel, the venv's python, its site folder)."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(dist), str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("tuner-*.whl"))
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    return wheel, python, target


def wheel_env(**extra: str) -> dict[str, str]:
    """The installed wheel's environment: the dependencies from the test venv's site-packages,
    tuner itself only from the wheel (the editable install's .pth is not read from PYTHONPATH)."""
    import sysconfig

    return {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"], **extra}
