"""A real SGLang CPU server (scripts/setup_engines.sh sglang) driven by tuner's own launcher and
trial runner: readiness, version, /metrics, the benchmark's request fields, greedy tokens equal to
vLLM's, a refusal classified, and teardown leaving no process."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.helpers import seeded_weights_copy
from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.paths import cache_dir
from tuner.runtime.launcher import start, wait_ready
from tuner.runtime.procgroup import free_port, group_members
from tuner.space import EngineChoice, load_space
from tuner.trial.runner import run_trial

VERSION = "0.5.5.post1"
PROMPT = "def main():\n    print("
@pytest.fixture(scope="module")
def sglang_python() -> Path:
    venv = cache_dir() / "engines" / "sglang-cpu"
    if not (venv / f".tuner-installed-{VERSION}").exists():
        # Never required (TUNER_REQUIRE_ENGINES): SGLang's CPU engine needs its sgl-kernel CPU ops,
        # which no package index has (README, Tests); this test runs where they were installed.
        pytest.skip(f"SGLang {VERSION} CPU engine not installed at {venv} (its CPU kernels are not "
                    "on any package index: README, Tests)")
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def weighted_model(tiny_model_path, sglang_python, tmp_path_factory) -> Path:
    """The tiny model with seeded random weights saved, so engines can be compared token for token."""
    return seeded_weights_copy(tiny_model_path, sglang_python, tmp_path_factory.mktemp("model"))


def _space(sglang_python: Path, model_path: Path):
    """cpu-transformers' model and objective, with SGLang as the engine. --max-total-tokens bounds
    the KV pool: on CPU the memory fraction is of the whole machine's RAM (0.84 took 17 GB here)."""
    space = load_space("cpu-transformers")
    choice = EngineChoice(command=[str(sglang_python), "-m", "sglang.launch_server"],
                          env={"SGLANG_USE_CPU_ENGINE": "1"},
                          fixed_args=["--device", "cpu", "--max-total-tokens", "8192", "--enable-metrics"],
                          startup_timeout_s=600)
    workload = space.workload.model_copy(update={"random_input_len": 32, "random_output_len": 8,
                                                 "num_prompts": 8, "max_concurrency": 4})
    return space.model_copy(update={
        "engines": {"sglang": choice}, "workload": workload,
        "model": space.model.model_copy(update={"path": str(model_path)})})


def _greedy(base_url: str, model: str) -> list[str]:
    payload = {"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0,
               "ignore_eos": True, "logprobs": 1}
    r = httpx.post(base_url + "/v1/completions", json=payload, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["logprobs"]["tokens"]


@pytest.mark.engine
def test_sglang_serves_like_its_spec_and_like_vllm(sglang_python, weighted_model, vllm_bin, tmp_path):
    space = _space(sglang_python, weighted_model)
    spec = load_engine("sglang")
    plan = build_plan(spec, space.engines["sglang"], space.model, {"dtype": "float32"}, port=free_port())
    server = start(plan, spec, tmp_path / "sglang.log")
    try:
        wait_ready(server, 600)
        assert spec.readiness.log_line in server.log_text()
        with httpx.Client(base_url=server.base_url, timeout=300) as client:
            assert client.get(spec.readiness.path).status_code == 200
            assert client.get(spec.version_path).json()[spec.version_key] == VERSION
            metrics = client.get(spec.metrics_path)
            assert metrics.status_code == 200 and "sglang:time_to_first_token_seconds" in metrics.text
            # The benchmark's full payload (stream_options, ignore_eos, repetition_penalty, logprobs
            # null) is accepted as is: the spec omits no field.
            assert spec.request.omit_fields == []
            full = {"model": plan.served_name, "prompt": PROMPT, "repetition_penalty": 1.0,
                    "max_tokens": 4, "logprobs": None, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0.0}
            streamed = client.post(spec.request.endpoint, json=full)
            assert streamed.status_code == 200 and '"completion_tokens":4' in streamed.text
        sglang_tokens = _greedy(server.base_url, plan.served_name)
    finally:
        server.stop()
    assert not server.alive() and not group_members(server.pgid)

    vllm_spec = load_engine("vllm")
    smoke = load_space("cpu-smoke").engines["vllm"]
    vllm_choice = smoke.model_copy(update={"fixed_args": ["--enforce-eager"]})  # real weights
    vplan = build_plan(vllm_spec, vllm_choice, space.model, {"dtype": "float32"}, port=free_port())
    vllm = start(vplan, vllm_spec, tmp_path / "vllm.log")
    try:
        wait_ready(vllm, 300)
        vllm_tokens = _greedy(vllm.base_url, vplan.served_name)
    finally:
        vllm.stop()
    assert len(sglang_tokens) == 8
    assert sglang_tokens == vllm_tokens


@pytest.mark.engine
def test_sglang_trial_benchmarks_and_tears_down(sglang_python, weighted_model, tmp_path):
    space = _space(sglang_python, weighted_model)
    outcome = run_trial(space, "sglang", {"max_num_seqs": 4}, tmp_path / "trial")
    assert outcome.failure is None, outcome.failure
    assert outcome.metrics["completed"] == 8
    assert outcome.metrics["total_output_tokens"] == 64
    assert outcome.timings["teardown_s"] < 30


@pytest.mark.engine
def test_sglang_refusal_is_classified(sglang_python, weighted_model, tmp_path):
    space = _space(sglang_python, weighted_model)
    outcome = run_trial(space, "sglang", {"max_seq_len": 8192}, tmp_path / "trial")
    assert outcome.failure is not None
    assert outcome.failure.failure_class == "invalid-config"
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in outcome.failure.evidence
