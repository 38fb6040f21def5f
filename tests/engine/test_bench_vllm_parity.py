"""Our client against vLLM's own code (the vLLM CPU venv from scripts/setup.sh): same prompts, same
SSE message boundaries, same request bodies, same result fields and summary labels.

vLLM's code runs in its venv as a subprocess; nothing of it is imported here.
"""

import base64
import json
import random
import subprocess
from pathlib import Path

import pytest

from benchmarks import stub_server
from tuner.bench import BenchConfig, load_tokenizer, run_benchmark
from tuner.bench.datasets import sample_random, sample_sharegpt
from tuner.bench.sse import SSEParser
from tuner.paths import SAMPLES_DIR

pytestmark = pytest.mark.engine

SHAREGPT = SAMPLES_DIR / "sharegpt_small.json"

RANDOM_CASES = {
    "basic": dict(input_len=64, output_len=16, range_ratio=0.0, prefix_len=0),
    "ratio": dict(input_len=100, output_len=20, range_ratio=0.5, prefix_len=0),
    "prefix": dict(input_len=50, output_len=8, range_ratio=0.25, prefix_len=7),
}
SHAREGPT_CASES = {"sg": None, "sg_fixed": 33}

# Runs in the vLLM venv: vLLM's dataset classes and SSE handler on the inputs we send on stdin.
VLLM_SIDE = r"""
import json, sys, base64
from transformers import AutoTokenizer
from vllm.benchmarks.datasets import RandomDataset, ShareGPTDataset
from vllm.benchmarks.lib.endpoint_request_func import StreamedResponseHandler
spec = json.load(sys.stdin)
tok = AutoTokenizer.from_pretrained(spec["tokenizer"])
out = {}
for name, kw in spec["random"].items():
    reqs = RandomDataset(random_seed=3).sample(tokenizer=tok, num_requests=12, **kw)
    out[name] = [[r.prompt, r.prompt_len, r.expected_output_len] for r in reqs]
for name, n in spec["sharegpt"].items():
    ds = ShareGPTDataset(random_seed=5, dataset_path=spec["sharegpt_path"])
    reqs = ds.sample(tokenizer=tok, num_requests=500, output_len=n)
    out[name] = [[r.prompt, r.prompt_len, r.expected_output_len] for r in reqs]
streams = []
for pieces in spec["streams"]:
    h, got = StreamedResponseHandler(), []
    for p in pieces:
        b = base64.b64decode(p).strip()   # what vLLM's request function does with each read
        if not b:
            continue
        for m in h.add_chunk(b):
            if not m.startswith(":"):
                got.append(m.removeprefix("data: "))
    streams.append(got)
out["streams"] = streams
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def vllm_python(vllm_bin) -> Path:
    return vllm_bin.parent / "python"


def _streams(seed: int = 0, n: int = 40) -> list[list[bytes]]:
    rng = random.Random(seed)
    docs = [
        {"choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"role": None, "content": "日本語 é"}}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]
    out = []
    for _ in range(n):
        end = rng.choice(["\n\n", " \n\n"])
        body = "".join(f"data: {json.dumps(rng.choice(docs), ensure_ascii=False)}{end}"
                       for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.5:
            body = ": ping\n\n" + body
        body += rng.choice(["data: [DONE]\n\n", ""])
        raw = body.encode()
        # vLLM strips each network read, so a read that starts or ends in whitespace changes what
        # it parses (it can drop a separator or leave "data:{"); compare where that cannot happen.
        ok = [i for i in range(1, len(raw)) if not raw[i - 1:i].isspace() and not raw[i:i + 1].isspace()]
        cuts = sorted(rng.sample(ok, k=min(len(ok), rng.randint(0, 8))))
        out.append([raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])])
    return out


def test_datasets_and_sse_boundaries_equal_vllms(vllm_python, tiny_model_path):
    streams = _streams()
    spec = {"tokenizer": str(tiny_model_path), "sharegpt_path": str(SHAREGPT),
            "random": RANDOM_CASES, "sharegpt": SHAREGPT_CASES,
            "streams": [[base64.b64encode(p).decode() for p in s] for s in streams]}
    proc = subprocess.run([str(vllm_python), "-c", VLLM_SIDE], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = json.loads(proc.stdout)
    tok = load_tokenizer(str(tiny_model_path))
    for name, kw in RANDOM_CASES.items():
        ours = [[r.prompt, r.prompt_len, r.expected_output_len]
                for r in sample_random(tok, 12, seed=3, **kw)]
        assert ours == ref[name], name
    for name, n in SHAREGPT_CASES.items():
        ours = [[r.prompt, r.prompt_len, r.expected_output_len]
                for r in sample_sharegpt(SHAREGPT, tok, 500, output_len=n, seed=5)]
        assert ours == ref[name], name
    for pieces, theirs in zip(streams, ref["streams"]):
        parser, got = SSEParser(), []
        for p in pieces:
            got.extend(parser.feed(p))
        got.extend(parser.finish())
        assert got == [m.strip() for m in theirs]


def test_vllm_bench_serve_sends_and_reports_what_we_do(vllm_bin, tiny_model_path, tmp_path):
    opts = stub_server.StubOptions(itl_ms=2)
    with stub_server.RunningStub(opts) as s:
        proc = subprocess.run(
            [str(vllm_bin), "bench", "serve", "--backend", "openai", "--base-url", s.url,
             "--model", str(tiny_model_path), "--served-model-name", "stub",
             "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "8",
             "--num-prompts", "6", "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
             "--metric-percentiles", "50,99", "--goodput", "ttft:5000",
             "--save-result", "--result-dir", str(tmp_path), "--result-filename", "v.json",
             "--disable-tqdm"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        theirs_bodies = [b for b in s.stub.bodies]
        s.stub.bodies.clear()
        s.stub.headers.clear()
        cfg = BenchConfig(base_url=s.url, model="stub", tokenizer=str(tiny_model_path),
                          num_prompts=6, random_input_len=32, random_output_len=8,
                          percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                          metric_percentiles=(50.0, 99.0), goodput={"ttft": 5000.0})
        ours = run_benchmark(cfg)
        our_bodies = list(s.stub.bodies)
    key = lambda b: b["prompt"]  # noqa: E731
    assert sorted(our_bodies, key=key) == sorted(theirs_bodies, key=key)
    theirs = json.loads((tmp_path / "v.json").read_text())
    doc = ours.to_json()
    assert set(doc) - {"tuner"} == set(theirs)
    for k in ("completed", "failed", "total_input_tokens", "total_output_tokens", "num_prompts",
              "request_rate", "burstiness", "max_concurrency", "backend", "endpoint_type"):
        assert doc[k] == theirs[k], k

    def labels(text: str) -> list[str]:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if "Serving Benchmark Result" in line)
        end = next(i for i in range(start + 1, len(lines)) if lines[i] == "=" * 50)
        return [line[:40].rstrip() if not line.startswith("-") else line
                for line in lines[start:end + 1]]

    assert labels(ours.summary()) == labels(proc.stdout)
