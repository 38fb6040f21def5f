"""The quality probe on a real `transformers serve` (CPU, tiny model with saved random weights): the
engine returns no logprobs, so the probe compares generated tokens (the answer text re-tokenized)
and says why the logprob metrics are not measured; a repeat on the same server is its noise floor."""

from __future__ import annotations

import pytest
import yaml

from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.paths import SPACES_DIR
from tuner.runtime.launcher import start, wait_ready
from tuner.runtime.procgroup import free_port
from tuner.space import space_from_dict
from tuner.trial.quality import CANDIDATE, REFERENCE, ProbeTask, probe

pytestmark = pytest.mark.engine


def test_transformers_probe_compares_tokens_and_its_repeat_is_the_noise_floor(transformers_model,
                                                                               tmp_path):
    data = yaml.safe_load((SPACES_DIR / "cpu-transformers.yaml").read_text())
    data["model"]["path"] = str(transformers_model)
    data["quality"] = {"prompts": 8, "max_tokens": 8, "concurrency": 8, "max_token_mismatch": 0.05}
    space = space_from_dict(data)
    spec = load_engine("transformers")
    knobs = {"continuous_batching": True, "cb_num_blocks": 16, "cb_block_size": 64,
             "dtype": "float32"}
    plan = build_plan(spec, space.engines["transformers"], space.model, knobs, port=free_port())
    server = start(plan, spec, tmp_path / "server.log")
    try:
        wait_ready(server, spec.readiness.startup_timeout_s)
        record, answers = probe(space, spec, plan.model_path, server.base_url, ProbeTask(REFERENCE))
        assert len(answers) == 8 and all(a["tokens"] and a["ids"] is False for a in answers)
        assert record["logprobs"] is False
        assert record["metrics"]["token_mismatch"] == 0.0
        why = record["not_measured"]["top1_agreement"]
        assert why.startswith("engine transformers returns no logprobs (cli/serving/completion.py")
        repeat, _ = probe(space, spec, plan.model_path, server.base_url,
                          ProbeTask(CANDIDATE, {"trial": 0, "answers": answers}))
    finally:
        server.stop()
    assert repeat["reference_trial"] == 0
    assert repeat["metrics"]["token_mismatch"] <= 0.05  # the noise floor (0.0 measured here)
    assert set(repeat["not_measured"]) == {"top1_agreement", "kl_divergence"}
