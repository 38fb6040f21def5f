"""The quality section of a space: bounds, the reference arm, and the inputs that are errors."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import fixture_space, quality_space
from tuner.errors import InputError
from tuner.paths import SPACES_DIR
from tuner.record import schema
from tuner.space import arms, load_space, reference_precision


def space_with(tmp_path, quality: dict, **kwargs):
    return load_space(str(quality_space(tmp_path, quality, **kwargs)))


def test_bounds_become_named_constraints_and_the_reference_arm_runs_first(tmp_path):
    s = space_with(tmp_path, {"reference": {"dtype": "float32", "max_num_seqs": 2},
                              "max_token_mismatch": 0.05, "min_first_divergence": 8,
                              "lm_eval": {"tasks": ["t"]}})
    assert s.quality.bounds() == {"token_mismatch": 0.05, "first_divergence": 8}
    assert s.quality.constraint_names() == ["token_mismatch", "first_divergence", "lm_eval"]
    first, *rest = arms(s)
    assert (first.name, first.engine, first.params) == (
        schema.QUALITY_REFERENCE_ARM, "vllm", {"dtype": "float32", "max_num_seqs": 2})
    assert [b.name for b in rest] == ["reference-repeat", "bf16-fast"]
    assert reference_precision(s) == {"engine": "vllm", "dtype": "float32", "quantization": "none",
                                      "kv_cache_dtype": "float32"}


def test_the_default_reference_is_the_checkpoints_own_precision(tmp_path, tiny_model_path):
    s = space_with(tmp_path, {"max_token_mismatch": 0.05})
    # the tiny model's config.json says bfloat16: "auto" resolves to it
    assert reference_precision(s)["dtype"] == "bfloat16"


def test_the_h200_quality_space_plans_quantization_against_bf16():
    s = load_space(fixture_space("h200-quality"))
    assert s.quality.bounds() == {"token_mismatch": 0.3, "exact_match": 0.25}
    assert reference_precision(s)["quantization"] == "none"
    assert reference_precision(s)["dtype"] == "bfloat16"
    assert s.engines["transformers"].params["quantization"].choices == [
        "none", "bnb_8bit", "bnb_4bit", "fp8"]


@pytest.mark.parametrize("quality, message", [
    ({"max_tokn_mismatch": 0.05},
     "unknown quality key 'max_tokn_mismatch'; metric bounds: max_token_mismatch, min_exact_match"),
    ({"reference": {"dtype": "float16"}},
     "quality.reference.dtype is 'float16', outside the values the space searches for it"),
    ({"reference": {"kv_cache_dtype": "fp8"}},
     "quality.reference.kv_cache_dtype is 'fp8', but engine 'vllm' neither searches nor fixes"),
    ({"reference": {"no_such_knob": 1}}, "engine 'vllm' (the reference arm's, the space's first) "
                                         "has no knob 'no_such_knob'"),
    ({"max_token_mismatch": 1.5}, "quality.max_token_mismatch: Input should be less than or equal to 1"),
    ({"max_tokens": 8, "min_first_divergence": 9}, "min_first_divergence (9) is more than max_tokens (8)"),
    ({"reference_arm": "defaults"}, "quality.reference_arm 'defaults' is not a baseline of this space "
                                    "(baselines: reference-repeat, bf16-fast)"),
    ({"reference_arm": "bf16-fast", "reference": {"dtype": "float32"}},
     "set reference (knob values of a reference arm of its own) or reference_arm"),
])
def test_bad_quality_sections_are_errors_naming_the_key(tmp_path, quality, message):
    with pytest.raises(InputError, match="quality") as exc:
        space_with(tmp_path, quality)
    assert message in str(exc.value)


def test_a_logprob_bound_on_engines_without_logprobs_is_an_error_with_the_source(tmp_path):
    data = yaml.safe_load((SPACES_DIR / "cpu-transformers.yaml").read_text())
    data["quality"] = {"min_top1_agreement": 0.9}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as exc:
        load_space(str(path))
    assert ("quality.min_top1_agreement needs logprobs, which no engine of this space returns "
            "(transformers: cli/serving/completion.py") in str(exc.value)
    assert "bound token_mismatch, exact_match or first_divergence instead" in str(exc.value)


def test_the_reference_arm_name_is_reserved(tmp_path):
    with pytest.raises(InputError, match="'quality-reference' is the quality guardrail's own arm"):
        space_with(tmp_path, {}, baselines=[{"name": "quality-reference", "engine": "vllm"}])


def test_a_baseline_named_as_the_reference_arm_runs_first_and_no_other_reference_arm_runs(tmp_path):
    s = space_with(tmp_path, {"reference_arm": "bf16-fast"})
    assert [b.name for b in arms(s)] == ["bf16-fast", "reference-repeat"]
    assert reference_precision(s) == {"engine": "vllm", "dtype": "bfloat16", "quantization": "none",
                                      "kv_cache_dtype": "bfloat16"}
