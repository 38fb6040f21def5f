"""The quality probe's metrics (tuner.trial.quality.compare) on answers whose right values are
known by hand; the probe's requests are driven against real engines in tests/engine."""

from __future__ import annotations

import math

import pytest

from tuner.bench import load_tokenizer
from tuner.trial.quality import Answer, compare


def answer(tokens, top=None, text="") -> Answer:
    return Answer(text, list(tokens), True, [1, 2, 3], top)


def test_token_metrics_count_positions_prompts_and_the_first_difference():
    ref = [answer([1, 2, 3, 4]), answer([5, 6, 7, 8]), answer([9, 9])]
    got = [answer([1, 2, 3, 4]), answer([5, 0, 7, 8]), answer([9, 9, 9])]  # one swap, one longer
    metrics, missing = compare(ref, got, None, "engine x returns no logprobs", None)
    assert metrics["exact_match"] == pytest.approx(1 / 3)
    assert metrics["token_mismatch"] == pytest.approx(2 / 11)   # 11 positions, 2 differ
    assert metrics["first_divergence"] == pytest.approx((4 + 1 + 2) / 3)
    assert missing == {"top1_agreement": "engine x returns no logprobs",
                       "kl_divergence": "engine x returns no logprobs"}


def test_identical_answers_are_a_zero_noise_floor():
    ref = [answer([1, 2]), answer([3])]
    metrics, _ = compare(ref, ref, None, "no logprobs", None)
    assert metrics == {"exact_match": 1.0, "first_divergence": 1.5, "token_mismatch": 0.0}


def test_top1_counts_ties_as_agreement_and_kl_is_zero_for_the_same_distribution():
    top = [[[7, math.log(0.5)], [8, math.log(0.3)], [9, math.log(0.2)]]]
    ref = [answer([7], top)]
    same = [[{7: math.log(0.5), 8: math.log(0.3), 9: math.log(0.2)}]]
    tie = [[{8: math.log(0.4), 7: math.log(0.4), 9: math.log(0.2)}]]   # greedy may pick either
    other = [[{8: math.log(0.7), 7: math.log(0.2)}]]                   # 9 missing: floor log(0.2)
    metrics, missing = compare(ref, ref, same, None, None)
    assert missing == {} and metrics["top1_agreement"] == 1.0 and metrics["kl_divergence"] == 0.0
    assert compare(ref, ref, tie, None, None)[0]["top1_agreement"] == 1.0
    metrics, _ = compare(ref, ref, other, None, None)
    assert metrics["top1_agreement"] == 0.0
    # KL over the reference's top-3, both renormalised: p = (.5, .3, .2), q = (.2, .7, .2) / 1.1
    q = [0.2 / 1.1, 0.7 / 1.1, 0.2 / 1.1]
    expected = sum(p * math.log(p / qi) for p, qi in zip((0.5, 0.3, 0.2), q))
    assert metrics["kl_divergence"] == pytest.approx(expected)


def test_answers_without_token_ids_compare_as_retokenized_text(tiny_model_path):
    tok = load_tokenizer(str(tiny_model_path))
    ref = [Answer("import os\nimport sys", [], False)]
    assert compare(ref, [Answer("import os\nimport sys", [], False)], None, "no", tok)[0][
        "token_mismatch"] == 0.0
    metrics, _ = compare(ref, [Answer("import os\nprint(sys)", [], False)], None, "no", tok)
    assert 0 < metrics["token_mismatch"] < 1 and metrics["exact_match"] == 0.0
