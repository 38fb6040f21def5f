"""The quality guardrail on the real vLLM CPU server: a float32 reference, a bfloat16 candidate.

vLLM's CPU build has no FP8/AWQ kernels but runs both dtypes, and returns logprobs. The reference
serves one request at a time (max_num_seqs 1) and the candidate 64, so the candidate is the faster
config (about 5x on this workload); whether it may be recommended is the guardrail's call alone. Two studies, 3 and 2 launches (about 40 s each here).
"""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import lm_eval_task, load, run_tune
from tuner.paths import SPACES_DIR
from tuner.record import schema

pytestmark = pytest.mark.engine

REFERENCE = {"dtype": "float32", "max_num_seqs": 1}
BF16_FAST = {"name": "bf16-fast", "engine": "vllm", "params": {"dtype": "bfloat16", "max_num_seqs": 64}}


def write_space(tmp_path, name: str, quality: dict, baselines: list) -> str:
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data.pop("evaluation_workloads")
    data["name"] = name
    data["engines"]["vllm"]["params"] = {
        "dtype": {"type": "categorical", "choices": ["float32", "bfloat16"]},
        "max_num_seqs": {"type": "categorical", "choices": [1, 64]}}
    data["workload"].update(num_prompts=48, random_input_len=64, random_output_len=32)
    data["quality"] = {"reference": REFERENCE, "prompts": 16, "max_tokens": 16, "concurrency": 16,
                       **quality}
    data["baselines"] = baselines
    data["budget"]["n_trials"] = len(baselines) + 1
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def arms(studies, name):
    return {t.user_attrs[schema.ARM]: t for t in load(studies, name).trials}


def test_a_faster_bf16_candidate_over_the_bound_is_never_recommended(tmp_path, studies, vllm_bin,
                                                                    tiny_model_path):
    space = write_space(tmp_path, "guard-low", {"probe_reference": True, "max_token_mismatch": 0.05},
                        [{"name": "reference-repeat", "engine": "vllm", "params": REFERENCE},
                         BF16_FAST])
    proc = run_tune("start", "--space", space)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = arms(studies, "guard-low")
    reference, repeat, fast = (trials[schema.QUALITY_REFERENCE_ARM], trials["reference-repeat"],
                               trials["bf16-fast"])
    assert load(studies, "guard-low").user_attrs[schema.QUALITY_REFERENCE]["trial"] == reference.number

    # the repeat of the reference's config: the probe's noise floor, under the bound
    floor = repeat.user_attrs[schema.QUALITY]
    assert floor["role"] == "candidate" and floor["logprobs"] is True
    assert floor["metrics"]["token_mismatch"] <= 0.05 and schema.status(repeat) == "ok"
    assert floor["metrics"]["top1_agreement"] >= 0.95

    # the candidate's mismatch is measured and recorded, over the bound: quality-failed
    measured = fast.user_attrs[schema.QUALITY]["metrics"]
    assert measured["token_mismatch"] > 0.05
    assert {"exact_match", "first_divergence", "top1_agreement", "kl_divergence"} <= set(measured)
    assert fast.constraints["quality:token_mismatch"] == pytest.approx(measured["token_mismatch"] - 0.05)
    assert schema.status(fast) == "quality-failed"
    assert fast.values[0] > max(reference.values[0], repeat.values[0])  # it is the faster config

    best = run_tune("best", "guard-low")
    assert best.returncode == 0, best.stdout + best.stderr
    assert "--dtype float32" in best.stdout and "bfloat16" not in best.stdout
    assert "quality: exact_match 1.000" in best.stdout


def test_a_bound_above_the_measured_mismatch_lets_it_through_and_lm_eval_runs_on_each_server(
        tmp_path, studies, vllm_bin, tiny_model_path, lm_eval_bin):
    lm_eval = {"tasks": ["tuner_tiny_python"], "limit": 4, "max_drop": 1.0,
               "include_path": str(lm_eval_task(tmp_path)), "command": [str(lm_eval_bin)],
               "env": {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}}
    # bf16's mismatch against fp32 on this random-weight model is about 0.47 (docs/search.md)
    space = write_space(tmp_path, "guard-high", {"max_token_mismatch": 0.9, "lm_eval": lm_eval},
                        [BF16_FAST])
    proc = run_tune("start", "--space", space)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = arms(studies, "guard-high")
    fast, reference = trials["bf16-fast"], trials[schema.QUALITY_REFERENCE_ARM]
    record = fast.user_attrs[schema.QUALITY]
    assert 0.05 < record["metrics"]["token_mismatch"] <= 0.9
    assert schema.status(fast) == "ok"

    # lm-eval ran against each trial's own server: the reference's score, the candidate's drop
    ref_scores = reference.user_attrs[schema.QUALITY]["lm_eval"]["tasks"]["tuner_tiny_python"]
    assert (ref_scores["metric"], ref_scores["samples"]) == ("exact_match,none", 4)
    assert set(record["lm_eval"]["drop"]) == {"tuner_tiny_python"}
    assert fast.constraints["quality:lm_eval"] <= 0

    best = run_tune("best", "guard-high")
    assert "--dtype bfloat16" in best.stdout and "vs reference trial 0; guardrail passed" in best.stdout
