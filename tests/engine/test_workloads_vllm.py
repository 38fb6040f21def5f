"""The workload kinds against vLLM: custom and prefix_repetition prompts equal to vLLM's own dataset
code, the same request bodies as `vllm bench serve --dataset-name custom` on the stub, and every
kind (plus the seed-study set, at a few prompts) served by the real vLLM CPU engine in a study."""

import json
import subprocess

import pytest
import yaml

from benchmarks import stub_server
from tests.helpers import load, run_tune, small_space
from tuner.bench import BenchConfig, load_requests, run_benchmark
from tuner.paths import PACKAGE_ROOT, SAMPLES_DIR

pytestmark = pytest.mark.engine

EXAMPLES = PACKAGE_ROOT.parent / "docs" / "examples"
CUSTOM = EXAMPLES / "custom-prompts.jsonl"
CUSTOM_CASES = {"plain": dict(seed=3, output_len=256, skip_chat_template=False, disable_shuffle=False),
                "raw": dict(seed=0, output_len=17, skip_chat_template=True, disable_shuffle=True),
                "own_len": dict(seed=5, output_len=-1, skip_chat_template=False, disable_shuffle=False)}
PREFIX_CASES = {"p3": dict(seed=2, num_prefixes=3, prefix_len=30, suffix_len=12, output_len=7),
                "p2": dict(seed=9, num_prefixes=2, prefix_len=50, suffix_len=5, output_len=3)}

VLLM_SIDE = r"""
import json, sys
from transformers import AutoTokenizer
from vllm.benchmarks.datasets import CustomDataset, PrefixRepetitionRandomDataset
spec = json.load(sys.stdin)
tok = AutoTokenizer.from_pretrained(spec["tokenizer"])
out = {}
for name, kw in spec["custom"].items():
    ds = CustomDataset(dataset_path=kw["path"], disable_shuffle=kw["disable_shuffle"],
                       random_seed=kw["seed"])
    reqs = ds.sample(tokenizer=tok, num_requests=8, output_len=kw["output_len"],
                     skip_chat_template=kw["skip_chat_template"])
    out[name] = [[r.prompt, r.prompt_len, r.expected_output_len] for r in reqs]
for name, kw in spec["prefix"].items():
    kw = dict(kw)
    ds = PrefixRepetitionRandomDataset(random_seed=kw.pop("seed"))
    reqs = ds.sample(tokenizer=tok, num_requests=7, **kw)
    out[name] = [[r.prompt, r.prompt_len, r.expected_output_len] for r in reqs]
json.dump(out, sys.stdout)
"""


def _cfg(tok, **kw) -> BenchConfig:
    return BenchConfig(**{"base_url": "http://127.0.0.1:9", **kw}, model="stub", tokenizer=str(tok))


def test_custom_and_prefix_repetition_prompts_equal_vllms(vllm_bin, tiny_model_path, tmp_path):
    # Under -1 vLLM needs output_tokens on every line (pandas fills a missing one with NaN).
    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps({"prompt": f"question {i}?", "output_tokens": 3 + i}) + "\n"
                           for i in range(6)))
    cases = {name: {**kw, "path": str(own if kw["output_len"] == -1 else CUSTOM)}
             for name, kw in CUSTOM_CASES.items()}
    spec = {"tokenizer": str(tiny_model_path), "custom": cases, "prefix": PREFIX_CASES}
    proc = subprocess.run([str(vllm_bin.parent / "python"), "-c", VLLM_SIDE],
                          input=json.dumps(spec), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = json.loads(proc.stdout)
    for name, kw in cases.items():
        ours = load_requests(_cfg(tiny_model_path, dataset_name="custom", dataset_path=kw["path"],
                                  num_prompts=8, seed=kw["seed"], custom_output_len=kw["output_len"],
                                  skip_chat_template=kw["skip_chat_template"],
                                  disable_shuffle=kw["disable_shuffle"]))
        assert [[r.prompt, r.prompt_len, r.expected_output_len] for r in ours] == ref[name], name
    for name, kw in PREFIX_CASES.items():
        ours = load_requests(_cfg(
            tiny_model_path, dataset_name="prefix_repetition", num_prompts=7, seed=kw["seed"],
            prefix_repetition_num_prefixes=kw["num_prefixes"],
            prefix_repetition_prefix_len=kw["prefix_len"],
            prefix_repetition_suffix_len=kw["suffix_len"],
            prefix_repetition_output_len=kw["output_len"]))
        assert [[r.prompt, r.prompt_len, r.expected_output_len] for r in ours] == ref[name], name


@pytest.mark.parametrize("flags, ours", [
    (["--dataset-name", "custom", "--dataset-path", str(CUSTOM), "--custom-output-len", "6"],
     dict(dataset_name="custom", dataset_path=str(CUSTOM), custom_output_len=6)),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "20",
      "--prefix-repetition-suffix-len", "6", "--prefix-repetition-num-prefixes", "2",
      "--prefix-repetition-output-len", "4"],
     dict(dataset_name="prefix_repetition", prefix_repetition_prefix_len=20,
          prefix_repetition_suffix_len=6, prefix_repetition_num_prefixes=2,
          prefix_repetition_output_len=4)),
])
def test_vllm_bench_serve_sends_the_bodies_we_send(vllm_bin, tiny_model_path, tmp_path, flags, ours):
    # --ignore-eos: vLLM forces it only for random prompts; the tuner sends it for every dataset
    with stub_server.RunningStub(stub_server.StubOptions(itl_ms=1)) as s:
        proc = subprocess.run(
            [str(vllm_bin), "bench", "serve", "--backend", "openai", "--base-url", s.url,
             "--model", str(tiny_model_path), "--served-model-name", "stub", "--num-prompts", "6",
             "--seed", "4", "--temperature", "0", "--ignore-eos", "--disable-tqdm", *flags],
            capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        theirs = list(s.stub.bodies)
        s.stub.bodies.clear()
        result = run_benchmark(_cfg(tiny_model_path, base_url=s.url, num_prompts=6, seed=4, **ours))
        mine = list(s.stub.bodies)
    key = lambda b: b["prompt"]  # noqa: E731
    assert sorted(mine, key=key) == sorted(theirs, key=key) and len(mine) == 6
    assert result.metrics["completed"] == 6


def test_each_kind_and_the_seed_study_set_run_on_vllm(tmp_path, studies, vllm_bin, tiny_model_path):
    trace = EXAMPLES / "trace-mooncake.jsonl"
    space = small_space(tmp_path, num_prompts=8, n_trials=2, name="kinds",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    data = yaml.safe_load(space.read_text())
    del data["workload"]
    data["workloads"] = [
        {"name": "custom", "dataset": "custom", "dataset_path": str(CUSTOM), "num_prompts": 6,
         "custom_output_len": 8},
        {"name": "shared", "dataset": "prefix_repetition", "num_prompts": 8,
         "prefix_repetition_prefix_len": 256, "prefix_repetition_suffix_len": 16,
         "prefix_repetition_num_prefixes": 2, "prefix_repetition_output_len": 4},
        # turns long enough to fill whole KV blocks: only full blocks are cached
        {"name": "chat", "dataset": "multi_turn", "num_prompts": 6, "multi_turn_turns": 3,
         "multi_turn_input_len": 256, "multi_turn_output_len": 16},
        {"name": "trace", "dataset": "trace", "dataset_path": str(trace), "time_scale": 0.5},
    ]
    data["evaluation_workloads"] = [{"set": "seed-study", "num_prompts": 2, "max_len": 4096,
                                     "dataset_path": str(SAMPLES_DIR / "sharegpt_small.json")}]
    space.write_text(yaml.safe_dump(data))
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = load(studies, "kinds").trials[0]
    per = trial.user_attrs["workload_metrics"]
    assert {k: per[k]["completed"] for k in per} == {"custom": 6, "shared": 8, "chat": 6, "trace": 6}
    # vLLM's prefix cache (on by default) finds the shared 256-token prefixes and the history
    assert per["shared"]["prefix_cache_hit_rate"] > 0.3
    assert per["chat"]["prefix_cache_hit_rate"] > 0.2
    ev = run_tune("evaluate", "kinds", "--workloads", "from-space", "--repeats", "1",
                  "--num-prompts", "2")
    assert ev.returncode == 0, ev.stdout + ev.stderr
    for name in ("sharegpt", "short-128-4", "medium-2000-100", "long-3896-200",
                 "very-long-3996-100"):
        assert name in ev.stdout
