"""SGLang checked against what real servers recorded, in place of launching one: no machine this
project sets up can run SGLang (its CPU engine needs sgl-kernel's CPU ops, which no package index
has; its CUDA build needs a GPU). The records: tune's own grid study of SGLang 0.5.17 on an H200
(experiments/h200-2026-12/data/h200-sglang-grid.tar.gz: each trial's argv, server log and benchmark) and a
refusal of a real 0.5.5.post1 CPU server with the argv tune launched it with (tests/data/logs)."""

from __future__ import annotations

import ast
import json
import re

import optuna
import pytest

from tests.helpers import DATA, REPO
from tuner.configs.translate import build_plan
from tuner.engines.failures import classify_exit
from tuner.engines.spec import load_engine
from tuner.record import schema
from tuner.record.storage import artifact_store
from tuner.record.transfer import import_study
from tuner.space import EngineChoice, load_space
from tuner.study import lifecycle

GRID = REPO / "experiments" / "h200-2026-12" / "data" / "h200-sglang-grid.tar.gz"
SPEC = load_engine("sglang")


def _access(log: str, method: str, path: str) -> list[int]:
    """The HTTP statuses uvicorn logged for ``method path``, in order."""
    return [int(s) for s in re.findall(rf'"{method} {re.escape(path)} HTTP/1\.1" (\d+)', log)]


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> list[tuple[optuna.trial.FrozenTrial, str]]:
    """Each launched trial of the grid study with its server log."""
    tmp = tmp_path_factory.mktemp("grid")
    name, url = import_study(GRID, lambda n: f"sqlite:///{tmp}/{n}.db")
    store = artifact_store(url, name)
    out = []
    for t in lifecycle.load(name, url).study.get_trials(deepcopy=False):
        if t.state != optuna.trial.TrialState.COMPLETE or not schema.launched(t):
            continue
        (log_id,) = [a["artifact_id"] for k, v in t.system_attrs.items()
                     if k.startswith("artifacts:") and (a := json.loads(v))["filename"] == "server.log"]
        with store.open_reader(log_id) as f:
            out.append((t, f.read().decode()))
    assert len(out) == 9  # the defaults baseline and the 8 configs of the grid
    return out


def test_recorded_servers_became_ready_as_the_spec_says(launches):
    for t, log in launches:
        assert t.user_attrs["argv"][1:3] == SPEC.command[1:]  # python3 -m sglang.launch_server
        # /health answers 503 until the warm-up generation, then the readiness line, then 200.
        ready = log.index(SPEC.readiness.log_line)
        health = _access(log[:ready], "GET", SPEC.readiness.path)
        assert health and set(health) == {503}, t.number
        assert _access(log[ready:], "GET", SPEC.readiness.path)[0] == 200, t.number
        # The version the record holds was read from version_path.
        assert t.user_attrs["engine_version"] == "0.5.17"


def test_recorded_metrics_and_requests_match_the_spec(launches):
    for t, log in launches:
        assert "--enable-metrics" in t.user_attrs["argv"]
        assert set(_access(log, "GET", SPEC.metrics_path)) == {200}, t.number
        # The benchmark's full payload (no field omitted) was accepted for every request.
        assert SPEC.request.omit_fields == []
        posts = _access(log, "POST", SPEC.request.endpoint)
        assert set(posts) == {200} and len(posts) >= t.user_attrs["completed"], t.number
        assert t.user_attrs["failed"] == 0 and t.user_attrs["completed"] == 400
        assert t.user_attrs["metrics"]["total_output_tokens"] > 0
        # Teardown left the GPU as it found it.
        assert t.user_attrs["gpu_memory_after_teardown"]["held_mib"] == {"0": 0.0}, t.number


def test_cpu_refusal_recorded_with_its_argv_is_classified():
    """A real 0.5.5.post1 CPU server refused a context length over the model's: the argv tune
    builds for that config is the one the server refused, and the log gets invalid-config."""
    log = (DATA / "logs" / "sglang-0.5.5.post1-cpu-invalid-config-max-len-over-model.log").read_text()
    recorded = ast.literal_eval(re.search(r"^# argv: (.*)$", log, re.M).group(1))
    env = ast.literal_eval(re.search(r"^# env: (.*)$", log, re.M).group(1))
    space = load_space("cpu-transformers")
    choice = EngineChoice(command=[recorded[0], "-m", "sglang.launch_server"], env=env,
                          fixed_args=["--device", "cpu", "--max-total-tokens", "8192"])
    model = space.model.model_copy(update={"path": recorded[recorded.index("--model-path") + 1]})
    port = int(recorded[recorded.index(SPEC.port_flag) + 1])
    plan = build_plan(SPEC, choice, model, {"max_seq_len": 8192}, port=port)
    assert plan.argv == recorded and plan.env == env
    failure = classify_exit(SPEC, log, 1)
    assert failure.failure_class == "invalid-config"
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in failure.evidence
