"""A real `transformers serve` on CPU starts with the argv translate.build_plan makes from
engines/transformers.yaml and answers a streamed /v1/completions request built like the benchmark's."""

from __future__ import annotations

import json

import httpx
import pytest

from tuner.bench.config import BenchConfig
from tuner.bench.request import build_payload
from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.fingerprint import engine_version
from tuner.runtime.launcher import start, wait_ready
from tuner.runtime.procgroup import free_port
from tuner.space import load_space
from tuner.trial.runner import bench_config

pytestmark = pytest.mark.engine


def test_transformers_serve_starts_and_streams(transformers_model, tmp_path):
    space = load_space("cpu-transformers")
    space = space.model_copy(update={"model": space.model.model_copy(update={"path": str(transformers_model)})})
    spec = load_engine("transformers")
    knobs = {"continuous_batching": True, "cb_max_batch_tokens": 256, "cb_num_blocks": 16,
             "cb_block_size": 64, "attn_implementation": "sdpa", "dtype": "float32"}
    plan = build_plan(spec, space.engines["transformers"], space.model, knobs, port=free_port())
    server = start(plan, spec, tmp_path / "server.log")
    try:
        wait_ready(server, spec.readiness.startup_timeout_s)
        assert spec.readiness.log_line in server.log_text()
        assert engine_version(spec.version_pattern, server.log_text())
        cfg = bench_config(space, space.workload, plan, server.base_url)  # what trials send
        assert cfg.model == plan.model_path  # the server is pinned to that exact string
        payload = build_payload(cfg, "def main():\n    print(", 8)
        with httpx.Client(timeout=120) as client:
            with client.stream("POST", server.base_url + spec.request.endpoint, json=payload) as r:
                assert r.status_code == 200
                chunks = [json.loads(line[len("data: "):]) for line in r.iter_lines()
                          if line.startswith("data: ") and line != "data: [DONE]"]
            assert len([c for c in chunks if c.get("choices")]) >= 8
            # Why omit_fields lists what it lists: the full vLLM payload is refused.
            full = build_payload(BenchConfig(base_url="", model=plan.model_path, tokenizer=""), "hi", 2)
            refused = client.post(server.base_url + spec.request.endpoint, json=full)
            assert refused.status_code in (400, 422)
    finally:
        server.stop()
    assert not server.alive()
