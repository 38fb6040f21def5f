"""The quality guardrail through the real driver, recorder, results and `tune best`, with trials
answered by tests.helpers.AnsweringExecutor (no engine): roles, constraints, "not measured", and a
faster config that fails its bound never recommended. The real-engine proof is
tests/engine/test_quality_vllm.py."""

from __future__ import annotations

import optuna
import pytest
from typer.testing import CliRunner

from tests.helpers import AnsweringExecutor, quality_space
from tuner import study as study_mod
from tuner.cli import app
from tuner.record import results, schema
from tuner.space import load_space

# Four prompts of four tokens. bf16 differs from fp32 at the last token of two prompts: 2 of 16
# token positions (mismatch 0.125), exact match 0.5, first divergence (4 + 4 + 3 + 3) / 4 = 3.5.
FP32 = [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]
BF16 = [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 99], [17, 18, 19, 98]]


def run(tmp_path, quality: dict, **kwargs) -> tuple[optuna.Study, AnsweringExecutor, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    space = load_space(str(quality_space(tmp_path, quality, **{k: v for k, v in kwargs.items()
                                                                if k not in ("lm_eval", "slots")})))
    url = f"sqlite:///{tmp_path / 'quality.db'}"
    handle = study_mod.create(space, "quality", url)
    executor = AnsweringExecutor({"float32": FP32, "bfloat16": BF16}, lm_eval=kwargs.get("lm_eval"),
                                 slots=kwargs.get("slots", 1))
    study_mod.run(handle, executor=executor)
    return handle.study, executor, url


def by_arm(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    return {t.user_attrs[schema.ARM]: t for t in study.trials}


def test_reference_runs_first_a_repeat_is_the_noise_floor_and_a_faster_failing_config_is_never_best(tmp_path):
    study, executor, url = run(tmp_path, {"reference": {"dtype": "float32", "max_num_seqs": 2},
                                          "probe_reference": True, "max_token_mismatch": 0.05})
    arms = by_arm(study)
    assert [t.user_attrs[schema.ARM] for t in study.trials] == [
        schema.QUALITY_REFERENCE_ARM, "reference-repeat", "bf16-fast"]
    assert executor.roles == {0: "reference", 1: "candidate", 2: "candidate"}
    assert study.user_attrs[schema.QUALITY_REFERENCE]["trial"] == 0
    assert len(study.user_attrs[schema.QUALITY_REFERENCE]["answers"]) == 4

    repeat = arms["reference-repeat"]
    assert repeat.user_attrs[schema.QUALITY]["metrics"]["token_mismatch"] == 0.0
    assert repeat.constraints["quality:token_mismatch"] == pytest.approx(-0.05)
    assert schema.status(repeat) == "ok"

    fast = arms["bf16-fast"]
    record = fast.user_attrs[schema.QUALITY]
    assert record["metrics"] == {"exact_match": 0.5, "first_divergence": 3.5,
                                 "token_mismatch": 0.125}
    assert record["reference_trial"] == 0 and record["ok"] is False
    assert fast.constraints["quality:token_mismatch"] == pytest.approx(0.075)
    assert schema.status(fast) == "quality-failed"
    assert fast.value > max(t.value for t in study.trials if t.number != fast.number)  # 32x
    assert results.best_config(study).first.number != fast.number

    out = CliRunner().invoke(app, ["best", "quality", "--storage", url], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "bfloat16" not in out.output and "max_num_seqs=2" in out.output
    assert "quality: exact_match 1.000, first_divergence 4.000, token_mismatch 0.000" in out.output
    status = CliRunner().invoke(app, ["status", "quality", "--storage", url], env={"COLUMNS": "250"})
    assert "quality-failed" in status.output and "mismatch 0.125; over bound: token_mismatch" in status.output


def test_a_bound_above_the_mismatch_lets_the_faster_config_through(tmp_path):
    study, _, url = run(tmp_path, {"reference": {"dtype": "float32", "max_num_seqs": 2},
                                   "max_token_mismatch": 0.2, "min_exact_match": 0.5})
    fast = by_arm(study)["bf16-fast"]
    assert schema.status(fast) == "ok"
    assert fast.constraints["quality:token_mismatch"] == pytest.approx(-0.075)
    assert fast.constraints["quality:exact_match"] == pytest.approx(0.0)
    assert results.best_config(study).first.number == fast.number
    out = CliRunner().invoke(app, ["best", "quality", "--storage", url], env={"COLUMNS": "200"})
    assert "dtype=bfloat16" in out.output and "vs reference trial 0; guardrail passed" in out.output


def test_the_reference_precision_is_not_probed_unless_asked(tmp_path):
    study, executor, _ = run(tmp_path, {"reference": {"dtype": "float32", "max_num_seqs": 2},
                                        "max_token_mismatch": 0.05})
    repeat = by_arm(study)["reference-repeat"]
    assert executor.roles[repeat.number] == "same-precision"
    assert repeat.user_attrs[schema.QUALITY]["skipped"].startswith("the reference's precision (trial 0)")
    assert repeat.constraints["quality:token_mismatch"] == 0.0
    assert results.describe_quality(repeat.user_attrs[schema.QUALITY]) == "= reference precision"


def test_a_metric_the_engine_cannot_measure_violates_its_bound(tmp_path):
    # The space validation lets a logprob bound through when some engine of the space returns
    # logprobs (vLLM's spec says it does); this engine's answers carry none: "not measured".
    study, _, _ = run(tmp_path, {"reference": {"dtype": "float32", "max_num_seqs": 2},
                                 "min_top1_agreement": 0.9})
    fast = by_arm(study)["bf16-fast"]
    record = fast.user_attrs[schema.QUALITY]
    assert record["not_measured"]["top1_agreement"] == "engine returns no logprobs"
    assert fast.constraints["quality:top1_agreement"] == 1.0
    assert schema.status(fast) == "quality-failed"
    assert results.describe_quality(record) == "mismatch 0.125; not measured: top1_agreement"
    # the reference is the anchor: it meets its own bounds (its record says what it could not measure)
    reference = by_arm(study)[schema.QUALITY_REFERENCE_ARM]
    assert schema.status(reference) == "ok"
    assert "top1_agreement" in reference.user_attrs[schema.QUALITY]["not_measured"]
    assert results.best_config(study).params["dtype"] == "float32"


def test_lm_eval_drop_over_its_bound_fails_and_a_missing_reference_score_is_not_measured(tmp_path):
    scores = {"float32": {"tasks": {"t": {"metric": "acc,none", "value": 0.50, "higher_is_better": True}}},
              "bfloat16": {"tasks": {"t": {"metric": "acc,none", "value": 0.46, "higher_is_better": True}}}}
    lm_eval = {"tasks": ["t"], "max_drop": 0.01, "command": ["true"]}
    study, _, _ = run(tmp_path, {"reference": {"dtype": "float32", "max_num_seqs": 2},
                                 "lm_eval": lm_eval}, lm_eval=scores)
    fast = by_arm(study)["bf16-fast"]
    assert fast.user_attrs[schema.QUALITY]["lm_eval"]["drop"] == {"t": pytest.approx(0.04)}
    assert fast.constraints["quality:lm_eval"] == pytest.approx(0.03)
    assert schema.status(by_arm(study)[schema.QUALITY_REFERENCE_ARM]) == "ok"

    study, _, _ = run(tmp_path / "b", {"reference": {"dtype": "float32", "max_num_seqs": 2},
                                       "lm_eval": lm_eval},
                      lm_eval={"float32": {"error": "lm-eval exited 1: boom"},
                               "bfloat16": scores["bfloat16"]})
    fast = by_arm(study)["bf16-fast"]
    assert fast.user_attrs[schema.QUALITY]["lm_eval"]["error"] == "no reference scores: lm-eval exited 1: boom"
    assert fast.constraints["quality:lm_eval"] == 1.0


def test_a_trial_probed_before_the_reference_existed_is_compared_when_recorded(tmp_path):
    # Two trials in flight (as on Ray): bf16 is prepared before the reference arm is recorded.
    study, executor, _ = run(tmp_path, {"reference": {"dtype": "float32", "max_num_seqs": 2},
                                        "max_token_mismatch": 0.05},
                             baselines=[{"name": "bf16-fast", "engine": "vllm",
                                         "params": {"dtype": "bfloat16", "max_num_seqs": 64}}],
                             n_trials=2, slots=2)
    assert executor.roles == {0: "reference", 1: "candidate"}
    fast = by_arm(study)["bf16-fast"]
    record = fast.user_attrs[schema.QUALITY]
    assert record["reference_trial"] == 0 and record["metrics"]["token_mismatch"] == 0.125
    assert record["not_measured"]["top1_agreement"].startswith("probed before the study had its reference")
    assert schema.status(fast) == "quality-failed"


def test_a_refused_config_violates_every_quality_bound(tmp_path):
    space = load_space(str(quality_space(tmp_path, {"max_token_mismatch": 0.05,
                                                    "lm_eval": {"tasks": ["t"], "command": ["true"]}})))
    handle = study_mod.create(space, "refused", f"sqlite:///{tmp_path / 'r.db'}")
    trial = handle.study.ask()
    recorder = study_mod.TrialRecorder(handle.study, space, handle.url)
    recorder.refused_values(trial)
    assert handle.study._storage.get_trial(trial._trial_id).constraints == {
        "engine_start": 1.0, "quality:token_mismatch": 1.0, "quality:lm_eval": 1.0}


def test_a_baseline_as_the_reference_records_the_answers_and_saves_the_reference_launch(tmp_path):
    study, executor, _ = run(tmp_path, {"reference_arm": "reference-repeat", "max_token_mismatch": 0.05},
                             n_trials=2)
    assert [t.user_attrs[schema.ARM] for t in study.trials] == ["reference-repeat", "bf16-fast"]
    assert executor.roles == {0: "reference", 1: "candidate"}
    assert study.user_attrs[schema.QUALITY_REFERENCE]["trial"] == 0
    fast = by_arm(study)["bf16-fast"]
    assert fast.user_attrs[schema.QUALITY]["metrics"]["token_mismatch"] == 0.125
    assert schema.status(fast) == "quality-failed"
    assert schema.status(by_arm(study)["reference-repeat"]) == "ok"
