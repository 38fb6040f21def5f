"""The workload kinds beyond random and ShareGPT: custom prompts, shared prefixes, multi-turn
conversations and traces; what they send, when, and how a bad file is refused."""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest
import yaml
from typer.testing import CliRunner

from benchmarks import stub_server
from tuner.bench import BenchConfig, load_requests, load_tokenizer, run_benchmark
from tuner.bench.datasets import check_file
from tuner.bench.runner import request_offsets
from tuner.bench.traces import trace_summary
from tuner.errors import BenchInputError
from tuner.cli.app import app
from tuner.paths import PACKAGE_ROOT, SPACES_DIR

EXAMPLES = PACKAGE_ROOT.parent / "docs" / "examples"


def _cfg(tok, **kw) -> BenchConfig:
    return BenchConfig(**{"base_url": "http://127.0.0.1:9", **kw}, model="m", tokenizer=str(tok))


def test_custom_prompts_follow_vllms_rules(tiny_model_path):
    path = EXAMPLES / "custom-prompts.jsonl"
    lines = [json.loads(x)["prompt"] for x in path.read_text().splitlines()]
    reqs = load_requests(_cfg(tiny_model_path, dataset_name="custom", dataset_path=str(path),
                              num_prompts=7, seed=3))
    assert len(reqs) == 7 and {r.expected_output_len for r in reqs} == {256}
    # chat template around each prompt, every line used once before oversampling repeats one
    assert all(r.prompt.startswith("<|im_start|>user\n") for r in reqs)
    assert sorted(next(x for x in lines if x in r.prompt) for r in reqs[:5]) == sorted(lines)
    tok = load_tokenizer(str(tiny_model_path))
    assert all(r.prompt_len == len(tok(r.prompt).input_ids) for r in reqs)
    plain = load_requests(_cfg(tiny_model_path, dataset_name="custom", dataset_path=str(path),
                               num_prompts=5, skip_chat_template=True, disable_shuffle=True,
                               custom_output_len=9))
    assert [r.prompt for r in plain] == lines and {r.expected_output_len for r in plain} == {9}


def test_custom_output_len_minus_one_reads_each_lines_own(tiny_model_path, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a b", "output_tokens": 3}\n{"prompt": "c", "output_tokens": 5}\n')
    reqs = load_requests(_cfg(tiny_model_path, dataset_name="custom", dataset_path=str(path),
                              num_prompts=2, custom_output_len=-1, disable_shuffle=True))
    assert [r.expected_output_len for r in reqs] == [3, 5]
    path.write_text('{"prompt": "a b", "output_tokens": 3}\n{"prompt": "c"}\n')
    with pytest.raises(BenchInputError, match=r"p\.jsonl line 2: no output length"):
        load_requests(_cfg(tiny_model_path, dataset_name="custom", dataset_path=str(path),
                           num_prompts=2, custom_output_len=-1))


def test_aiperf_rows_are_sent_as_written_or_generated_to_length(tiny_model_path):
    path = EXAMPLES / "custom-aiperf.jsonl"
    reqs = load_requests(_cfg(tiny_model_path, dataset_name="custom", dataset_path=str(path),
                              num_prompts=4, disable_shuffle=True, custom_output_len=7))
    assert reqs[0].prompt == "Translate to French: the server is warm."
    assert [r.prompt_len for r in reqs[1:3]] == [200, 60]
    assert [r.expected_output_len for r in reqs] == [16, 32, 7, 7]


def test_prefix_repetition_shares_each_prefix(tiny_model_path):
    tok = load_tokenizer(str(tiny_model_path))
    reqs = load_requests(_cfg(tiny_model_path, dataset_name="prefix_repetition", num_prompts=9,
                              prefix_repetition_num_prefixes=3, prefix_repetition_prefix_len=40,
                              prefix_repetition_suffix_len=8, prefix_repetition_output_len=5))
    heads = [tuple(tok.encode(r.prompt, add_special_tokens=False)[:30]) for r in reqs]
    assert len(set(heads)) == 3 and all(heads.count(h) == 3 for h in heads)
    assert {r.expected_output_len for r in reqs} == {5}


def test_multi_turn_resends_the_history_and_waits_for_the_turn_before(tiny_model_path):
    cfg = _cfg(tiny_model_path, dataset_name="multi_turn", num_prompts=7, multi_turn_turns=3,
               multi_turn_input_len=12, multi_turn_output_len=4)
    reqs = load_requests(cfg)
    assert len(reqs) == 6  # 7 // 3 conversations of 3 turns
    for i, r in enumerate(reqs):
        if i < 2:
            assert r.after == -1
        else:
            assert r.after == i - 2 and r.prompt.startswith(reqs[i - 2].prompt)
            assert r.prompt_len >= reqs[i - 2].prompt_len + 12 + 4 - 2
    assert load_requests(cfg) == reqs  # seeded: the same bytes every run
    with stub_server.RunningStub(stub_server.StubOptions(itl_ms=5)) as s:
        result = run_benchmark(dataclasses.replace(cfg, base_url=s.url))
        sent = [b["prompt"] for b in s.stub.bodies]
    assert result.metrics["completed"] == 6
    # a later turn reaches the server only after the turn before it
    for i, r in enumerate(reqs[2:], 2):
        assert sent.index(r.prompt) > sent.index(reqs[i - 2].prompt)


def test_trace_blocks_are_shared_on_the_wire_and_times_scaled(tiny_model_path):
    path = EXAMPLES / "trace-mooncake.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    reqs = load_requests(_cfg(tiny_model_path, dataset_name="trace", dataset_path=str(path),
                              time_scale=0.5))
    assert [r.prompt_len for r in reqs] == [x["input_length"] for x in rows]
    assert [r.expected_output_len for r in reqs] == [x["output_length"] for x in rows]
    assert [r.arrival_s for r in reqs] == pytest.approx([x["timestamp"] / 2000 for x in rows])
    assert request_offsets(_cfg(tiny_model_path), reqs) == [r.arrival_s for r in reqs]
    tok = load_tokenizer(str(tiny_model_path))
    ids = [tok.encode(r.prompt, add_special_tokens=False) for r in reqs]
    # rows 0 and 2 begin with blocks 0 and 1; rows 1 and 4 with blocks 0 and 3; row 3 with its own
    assert ids[2][:1000] == ids[0][:1000]
    assert ids[1][:500] == ids[4][:500] == ids[0][:500]
    assert ids[1][520:600] != ids[0][520:600] and ids[3][:100] != ids[0][:100]
    summary = trace_summary(path, 100, time_scale=0.5)
    assert summary["requests"] == 6 and summary["replay_duration_s"] == pytest.approx(0.13)
    # tokens in blocks seen before: row 1 block 0 (512), row 2 all three (1536), row 4 both (1024)
    assert summary["repeated_block_token_share"] == pytest.approx(
        (512 + 1536 + 1024) / sum(x["input_length"] for x in rows))


def test_burstgpt_rows_skip_failed_requests(tiny_model_path):
    path = EXAMPLES / "trace-burstgpt.csv"
    reqs = load_requests(_cfg(tiny_model_path, dataset_name="trace", dataset_path=str(path)))
    assert [r.prompt_len for r in reqs] == [472, 1203, 310, 95]
    assert [r.arrival_s for r in reqs] == pytest.approx([0, 0.2, 1.9, 3.0])
    assert trace_summary(path, 100)["skipped_failed"] == 1
    assert check_file("trace", path) == "4 requests over 3 s"


def test_a_trace_is_replayed_at_its_times(tiny_model_path, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 100 + 60 * i, "input_length": 20,
                                        "output_length": 2, "hash_ids": [i % 2]}) + "\n"
                            for i in range(6)))
    with stub_server.RunningStub() as s:
        t0 = time.perf_counter()
        result = run_benchmark(_cfg(tiny_model_path, base_url=s.url, dataset_name="trace",
                                    dataset_path=str(path)))
        took = time.perf_counter() - t0
    starts = [o.start_time - result.outputs[0].start_time for o in result.outputs]
    # 60 ms apart as recorded (the first request's own lateness aside), never all at once
    assert all(t >= 0.06 * i - 0.02 for i, t in enumerate(starts)), starts
    assert starts[-1] >= 0.29 and took >= 0.3
    assert result.to_json()["tuner"]["workload_summary"]["requests"] == 6


BAD = {
    "custom": [
        ('{"prompt": "ok"}\n{"prompt": "x"\n', "line 2: not valid JSON"),
        ('{"prompt": "ok"}\n[1, 2]\n', "line 2: expected a JSON object"),
        ('{"prompt": "ok"}\n{"text": "x"}\n', "line 2: missing field 'prompt'"),
        ('{"prompt": 5}\n', "line 1: 'prompt' must be a string"),
        ('{"input_length": 0}\n', "line 1: 'input_length' must be at least 1"),
        ('{"input_length": 10, "output_length": -3}\n', "line 1: 'output_length' must be at least 1"),
        ('{"prompt": "a", "output_tokens": 2.5}\n', "line 1: 'output_tokens' must be an integer"),
        ("\n\n", "no prompts"),
    ],
    "trace": [
        ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
         '{"timestamp": 5, "input_length": 5}\n', "line 2: missing field 'output_length'"),
        ('{"timestamp": 10, "input_length": 5, "output_length": 1}\n'
         '{"timestamp": 5, "input_length": 5, "output_length": 1}\n', "line 2: out of time order"),
        ('{"timestamp": 0, "input_length": -5, "output_length": 1}\n', "line 1: 'input_length' must be at least 1"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 0}\n', "line 1: 'output_length' must be at least 1"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "a"]}\n', "line 1: 'hash_ids'"),
        ('{"timestamp": "NaN", "input_length": 5, "output_length": 1}\n', "line 1: 'timestamp' must be finite"),
    ],
}


@pytest.mark.parametrize("dataset, content, words",
                         [(d, c, w) for d, cases in BAD.items() for c, w in cases])
def test_a_bad_file_is_refused_naming_file_and_line(tiny_model_path, tmp_path, dataset, content,
                                                    words):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    for check in (lambda: check_file(dataset, path),
                  lambda: load_requests(_cfg(tiny_model_path, dataset_name=dataset,
                                             dataset_path=str(path), num_prompts=2))):
        with pytest.raises(BenchInputError) as exc:
            check()
        assert str(path) in str(exc.value) and words in str(exc.value)


@pytest.mark.parametrize("content, words", [
    ("Timestamp,Model,Request tokens\n1,a,5\n", "line 1: header lacks column(s) Response tokens"),
    ("Timestamp,Model,Request tokens,Response tokens\n1,a,5,3\n0.5,a,5,3\n", "line 3: out of time order"),
    ("Timestamp,Model,Request tokens,Response tokens\n1,a,-5,3\n", "line 2: 'Request tokens' must be at least 1"),
    ("Timestamp,Model,Request tokens,Response tokens\n1,a,5\n", "line 2: expected 4 fields"),
    ("Timestamp,Model,Request tokens,Response tokens\n1,a,5,0\n", "no requests"),
])
def test_a_bad_burstgpt_file_is_refused(tmp_path, content, words):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(BenchInputError) as exc:
        check_file("trace", path)
    assert str(path) in str(exc.value) and words in str(exc.value)


def test_a_missing_file_is_named(tmp_path):
    for dataset in ("custom", "trace"):
        with pytest.raises(BenchInputError, match="absent.jsonl"):
            check_file(dataset, tmp_path / "absent.jsonl")


def test_tune_bench_refuses_a_bad_file_before_sending(tiny_model_path, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with stub_server.RunningStub() as s:
        r = CliRunner().invoke(app, ["bench", "--model", str(tiny_model_path), "--base-url", s.url,
                                     "--dataset-name", "custom", "--dataset-path", str(path)])
        assert s.stub.requests == 0
    assert r.exit_code == 2, r.output
    assert f"{path} line 2" in " ".join(r.output.split())


def test_tune_start_refuses_a_bad_trace_and_creates_no_study(tiny_model_path, tmp_path, studies):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"timestamp": 9, "input_length": 5, "output_length": 1}\n'
                    '{"timestamp": 3, "input_length": 5, "output_length": 1}\n')
    space = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    space["workload"] = {"dataset": "trace", "dataset_path": str(path), "num_prompts": 2}
    file = tmp_path / "space.yaml"
    file.write_text(yaml.safe_dump(space))
    r = CliRunner().invoke(app, ["start", "--space", str(file)])
    assert r.exit_code == 2, r.output
    # the failing check is shown in a table that wraps and interleaves long cells
    words = set(re.sub(r"[│┃]", " ", r.output).split())
    assert {"line", "2:", "out", "time", "order", "fail"} <= words and "trace.jsonl" in r.output
    assert not studies.exists()
