"""Random and ShareGPT prompts follow vLLM's rules; bad inputs give a BenchInputError naming them.

Exact equality with vLLM's own code is checked in test_bench_vllm_parity.py (needs the vLLM venv).
"""

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from tuner.bench import BenchConfig, BenchInputError, load_requests, load_tokenizer
from tuner.bench.datasets import sample_random, sample_sharegpt
from tuner.paths import SAMPLES_DIR

DATA = SAMPLES_DIR / "sharegpt_small.json"


@pytest.fixture(scope="session")
def tok(tiny_model_path):
    return load_tokenizer(str(tiny_model_path))


def _cfg(tiny_model_path, **kw) -> BenchConfig:
    return BenchConfig(base_url="http://x", model="m", tokenizer=str(tiny_model_path), **kw)


# --------------------------------------------------------------------------- random

def test_random_lengths_and_draw_order(tok):
    reqs = sample_random(tok, 40, input_len=100, output_len=20, range_ratio=0.5, seed=7)
    rng = np.random.default_rng(7)
    ns = tok.num_special_tokens_to_add()
    in_lo, in_hi = math.floor((100 - ns) * 0.5), math.ceil((100 - ns) * 1.5)
    want_in = rng.integers(in_lo, in_hi + 1, size=40)
    want_out = rng.integers(10, 30 + 1, size=40)  # drawn second
    assert [r.expected_output_len for r in reqs] == want_out.tolist()
    assert all(in_lo <= r.prompt_len <= in_hi for r in reqs)
    # after decode/encode fixing, the prompt re-encodes to its recorded length
    hits = sum(len(tok.encode(r.prompt, add_special_tokens=False)) == r.prompt_len for r in reqs)
    assert hits >= 36
    assert sum(r.prompt_len == n for r, n in zip(reqs, want_in)) >= 36


def test_random_is_deterministic_per_seed(tok):
    a = sample_random(tok, 5, input_len=32, output_len=8, seed=1)
    assert a == sample_random(tok, 5, input_len=32, output_len=8, seed=1)
    assert a != sample_random(tok, 5, input_len=32, output_len=8, seed=2)
    assert all(r.expected_output_len == 8 for r in a)


def test_random_prefix_is_shared(tok):
    reqs = sample_random(tok, 6, input_len=40, output_len=4, prefix_len=30, seed=0)
    common = reqs[0].prompt
    for r in reqs[1:]:
        while not r.prompt.startswith(common):
            common = common[:-1]
    assert len(common) >= 20
    assert all(60 <= r.prompt_len <= 72 for r in reqs)


def test_random_output_len_never_below_one(tok):
    reqs = sample_random(tok, 10, input_len=16, output_len=1, range_ratio=0.9, seed=0)
    assert all(1 <= r.expected_output_len <= 2 for r in reqs)


@pytest.mark.parametrize("kw, words", [
    (dict(range_ratio=1.0), "random_range_ratio"),
    (dict(range_ratio=-0.1), "random_range_ratio"),
    (dict(input_len=0), "random_input_len 0 is too small"),
    (dict(input_len=-3), "non-negative"),
])
def test_random_rejects_bad_options(tok, kw, words):
    with pytest.raises(BenchInputError, match=words):
        sample_random(tok, 3, **({"input_len": 16} | kw))


# --------------------------------------------------------------------------- ShareGPT

def _write(tmp_path, data) -> Path:
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(data))
    return p


def _conv(prompt: str, answer: str, extra: int = 0) -> dict:
    turns = [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]
    turns += [{"from": "human", "value": "more"}] * extra
    return {"id": prompt[:10], "conversations": turns}


def test_sharegpt_filters_like_vllm(tmp_path, tok):
    long_text = "def function(argument): return value\n" * 400
    ok1 = _conv("Explain the difference between lists and tuples in Python.",
                "Lists are mutable; tuples are not. Both hold sequences.")
    ok2 = _conv("What does the json module do in the standard library?",
                "It encodes and decodes JSON documents.", extra=3)
    data = [
        ok1, ok2,
        {"id": "one-turn", "conversations": [{"from": "human", "value": "Only a question here"}]},
        {"id": "no-conv"},
        _conv("hi", "Hello! How can I help you today with Python?"),      # prompt < 4 tokens
        _conv("Tell me something about sockets please.", "ok"),          # output < 4 tokens
        _conv(long_text, "Too long a prompt to keep, surely."),           # prompt > 1024
        _conv("Summarize the following module for me please.", long_text[:6000]),  # total > 2048
        {"id": "bad", "conversations": [{"value": 3}, {"value": None}]},
    ]
    p = _write(tmp_path, data)
    reqs = sample_sharegpt(p, tok, 2, seed=0)
    assert {r.prompt for r in reqs} == {ok1["conversations"][0]["value"],
                                         ok2["conversations"][0]["value"]}
    for r in reqs:
        conv = ok1 if r.prompt == ok1["conversations"][0]["value"] else ok2
        assert r.prompt_len == len(tok(r.prompt).input_ids)
        assert r.expected_output_len == len(tok(conv["conversations"][1]["value"]).input_ids)
    # a fixed output length lifts the minimum-output rule, not the total-length rule
    fixed = sample_sharegpt(p, tok, 10, output_len=5, seed=0)
    assert "Tell me something about sockets please." in {r.prompt for r in fixed}
    assert all(r.expected_output_len == 5 for r in fixed)


def test_sharegpt_shuffle_order_and_oversampling_are_seeded(tmp_path, tok):
    data = [_conv(f"Question number {i} about the Python standard library?",
                  f"Answer number {i}, which is long enough to keep.") for i in range(8)]
    p = _write(tmp_path, data)
    reqs = sample_sharegpt(p, tok, 20, seed=3)
    expected = list(data)
    random.seed(3)
    random.shuffle(expected)
    assert [r.prompt for r in reqs[:8]] == [c["conversations"][0]["value"] for c in expected]
    assert len(reqs) == 20 and {r.prompt for r in reqs[8:]} <= {r.prompt for r in reqs[:8]}
    assert reqs == sample_sharegpt(p, tok, 20, seed=3)
    assert reqs != sample_sharegpt(p, tok, 20, seed=4)


def test_sharegpt_does_not_disturb_later_use_of_random_seeding(tmp_path, tok):
    p = _write(tmp_path, [_conv("Question about the os module and paths?", "Answer about paths.")])
    sample_sharegpt(p, tok, 3, seed=0)
    random.seed(0)
    a = random.random()
    random.seed(0)
    assert random.random() == a


@pytest.mark.parametrize("content, words", [
    (None, "does not exist"),
    ("{not json", "is not valid JSON"),
    ('{"conversations": []}', "must hold a JSON list"),
    ("[]", "no usable conversation among 0"),
    ('[{"conversations": [{"value": "hi"}, {"value": "yo"}]}]', "no usable conversation among 1"),
])
def test_sharegpt_bad_files(tmp_path, tok, content, words):
    p = tmp_path / "in.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(BenchInputError, match=words) as e:
        sample_sharegpt(p, tok, 5)
    assert str(p) in str(e.value)


def test_sharegpt_directory_and_binary_file(tmp_path, tok):
    with pytest.raises(BenchInputError, match="is a directory"):
        sample_sharegpt(tmp_path, tok, 5)
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BenchInputError, match="not UTF-8"):
        sample_sharegpt(p, tok, 5)


def test_bundled_sharegpt_file_is_realistic(tok):
    data = json.loads(DATA.read_text())
    assert len(data) >= 300 and DATA.stat().st_size < 1_000_000
    reqs = sample_sharegpt(DATA, tok, 300, seed=0)
    assert len({r.prompt for r in reqs}) >= 250  # mostly distinct, little oversampling
    lens = [r.prompt_len for r in reqs]
    assert min(lens) < 20 and max(lens) > 400


# --------------------------------------------------------------------------- load_requests

def test_load_requests_dispatches_and_caches(tiny_model_path):
    cfg = _cfg(tiny_model_path, num_prompts=4, random_input_len=24, random_output_len=6)
    a = load_requests(cfg)
    b = load_requests(cfg)
    assert a == b and a is not b and len(a) == 4
    sg = load_requests(_cfg(tiny_model_path, dataset_name="sharegpt", dataset_path=str(DATA),
                            num_prompts=5, sharegpt_output_len=9))
    assert [r.expected_output_len for r in sg] == [9] * 5


@pytest.mark.parametrize("kw, words", [
    (dict(dataset_name="sonnet"), "not supported"),
    (dict(dataset_name="sharegpt"), "needs dataset_path"),
    (dict(dataset_path="x.json"), "takes no dataset_path"),
    (dict(num_prompts=0), "at least 1"),
])
def test_load_requests_rejects_bad_configs(tiny_model_path, kw, words):
    with pytest.raises(BenchInputError, match=words):
        load_requests(_cfg(tiny_model_path, **kw))


def test_missing_or_broken_tokenizer(tmp_path):
    with pytest.raises(BenchInputError, match="no such directory"):
        load_tokenizer(str(tmp_path / "absent"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchInputError, match="could not be loaded"):
        load_tokenizer(str(tmp_path / "empty"))
