"""Whole runs against the local stub server (benchmarks/stub_server.py), the arrival process, the CLI.

The stub answers with vLLM/SGLang/TRT-LLM chunk shapes at zero latency; no engine is involved.
"""

import http.server
import json
import math
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from benchmarks import stub_server
from tuner.bench import BenchConfig, BenchResult, SampleRequest, run_benchmark
from tuner.bench.arrivals import arrival_offsets
from tuner.cli.bench import register
from tuner.errors import BenchInputError
from tuner.paths import PACKAGE_ROOT

StubOptions, RunningStub = stub_server.StubOptions, stub_server.RunningStub
TRACE = PACKAGE_ROOT.parent / "docs" / "examples" / "trace-mooncake.jsonl"


@pytest.fixture(scope="module")
def tok_dir(tiny_model_path) -> str:
    return str(tiny_model_path)


@pytest.fixture
def stub():
    with RunningStub(StubOptions()) as s:
        yield s


def _cfg(url: str, tok_dir: str, **kw) -> BenchConfig:
    base = dict(base_url=url, model="stub", tokenizer=tok_dir, num_prompts=12,
                random_input_len=32, random_output_len=8)
    return BenchConfig(**(base | kw))


# --------------------------------------------------------------------------- arrivals

def test_arrivals_match_vllm_global_numpy_seeding_without_touching_it():
    n, rate, burst, seed = 50, 4.0, 0.5, 11
    state = np.random.get_state()
    ours = arrival_offsets(n, rate, burst, seed)
    assert np.array_equal(np.random.get_state()[1], state[1])  # global RNG untouched
    np.random.seed(seed)                                      # vLLM's way
    delays = [np.random.gamma(shape=burst, scale=1.0 / (rate * burst)) for _ in range(n)]
    for i in range(1, n):
        delays[i] += delays[i - 1]
    delays = [d * ((n / rate) / delays[-1]) for d in delays]
    np.random.set_state(state)
    assert ours == delays
    assert ours[-1] == pytest.approx(n / rate)


def test_arrivals_infinite_rate_and_infinite_burstiness():
    assert arrival_offsets(5, math.inf) == [0.0] * 5
    assert arrival_offsets(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert arrival_offsets(0, 2.0) == []


# --------------------------------------------------------------------------- runs

def test_completions_run_counts_every_chunk(stub, tok_dir):
    seen = []
    r = run_benchmark(_cfg(stub.url, tok_dir, percentile_metrics=("ttft", "tpot", "itl", "e2el")),
                      on_progress=lambda done, total: seen.append((done, total)))
    m = r.metrics
    assert m["completed"] == 12 and m["failed"] == 0 and r.errors == []
    assert m["total_output_tokens"] == 12 * 8
    assert all(len(o.itl) == 7 for o in r.outputs)
    assert seen[-1] == (12, 12) and len(seen) == 12
    assert m["max_concurrent_requests"] >= 1 and m["mean_e2el_ms"] > 0
    body = stub.stub.bodies[0]
    assert body["ignore_eos"] is True and body["temperature"] == 0.0 and body["max_tokens"] == 8
    assert stub.stub.headers[0]["x-request-id"].startswith("bench-")
    doc = r.to_json()
    assert doc["request_rate"] == "inf" and doc["backend"] == "openai"
    assert doc["tuner"]["client_saturated"] in (True, False)
    json.dumps(doc)  # serializable
    assert "Serving Benchmark Result" in r.summary()


@pytest.mark.parametrize("shape", ["vllm", "sglang", "trtllm"])
def test_chat_run_skips_role_and_finish_chunks(tok_dir, shape):
    with RunningStub(StubOptions(shape=shape)) as s:
        r = run_benchmark(_cfg(s.url, tok_dir, endpoint="/v1/chat/completions", num_prompts=4))
    assert r.metrics["completed"] == 4
    assert all(len(o.itl) == 7 for o in r.outputs)  # 8 content chunks: role/finish not counted
    assert r.to_json()["backend"] == "openai-chat"


@pytest.mark.parametrize("itl_ms", [0.0, 5.0])   # the flood path and the stepper
def test_the_stub_reports_its_own_first_token_time_the_client_ttft_includes(tok_dir, itl_ms):
    """benchmarks/ttft_overhead.py's reference: the stub's time from a request's head to its first
    token, per completion, which every client's TTFT must contain."""
    import urllib.request

    with RunningStub(StubOptions(ttft_ms=20.0, itl_ms=itl_ms)) as s:
        r = run_benchmark(_cfg(s.url, tok_dir, num_prompts=4))
        with urllib.request.urlopen(s.url + "/stats", timeout=5) as resp:
            stats = json.loads(resp.read())
        with urllib.request.urlopen(s.url + "/stats", timeout=5) as resp:
            again = json.loads(resp.read())
    assert stats["first_token_count"] == 4
    assert stats["first_token_mean_ms"] >= 20.0 and stats["first_token_median_ms"] >= 20.0
    assert min(o.ttft for o in r.outputs) * 1000 >= 20.0
    assert r.metrics["mean_ttft_ms"] >= stats["first_token_mean_ms"]
    assert again["first_token_count"] == 0 and again["first_token_mean_ms"] is None   # reset


def test_transformers_serve_like_server_needs_omit_fields(tok_dir):
    opts = StubOptions(reject_fields=("ignore_eos", "repetition_penalty"), send_done=False)
    with RunningStub(opts) as s:
        bad = run_benchmark(_cfg(s.url, tok_dir, num_prompts=3))
        good = run_benchmark(_cfg(s.url, tok_dir, num_prompts=3,
                                  omit_fields=frozenset({"ignore_eos", "repetition_penalty"})))
    assert bad.metrics["completed"] == 0 and bad.metrics["failed"] == 3
    assert len(bad.errors) == 1 and bad.errors[0].startswith("HTTP 422 Unprocessable Entity")
    assert bad.errors[0].endswith("(x3)")
    assert good.metrics["completed"] == 3


def test_without_usage_output_tokens_come_from_retokenizing(tok_dir):
    with RunningStub(StubOptions(send_usage=False)) as s:
        r = run_benchmark(_cfg(s.url, tok_dir, num_prompts=2))
    from tuner.bench import load_tokenizer
    expected = len(load_tokenizer(tok_dir)(" tok" * 8, add_special_tokens=False).input_ids)
    assert r.output_lens == [expected, expected]
    assert r.metrics["total_input_tokens"] == sum(o.prompt_len for o in r.outputs)


def test_max_concurrency_caps_requests_in_flight(tok_dir):
    with RunningStub(StubOptions(itl_ms=2)) as s:
        r = run_benchmark(_cfg(s.url, tok_dir, num_prompts=10, max_concurrency=2,
                               num_warmups=2,
                               percentile_metrics=("ttft", "client_queue_time")))
        assert s.stub.max_inflight <= 2
        assert s.stub.requests == 12  # 2 warm-ups + 10
    assert r.metrics["completed"] == 10
    assert "mean_client_queue_time_ms" in r.metrics


def test_paced_arrivals_spread_the_sends(stub, tok_dir):
    cfg = _cfg(stub.url, tok_dir, num_prompts=8, request_rate=40.0, seed=2)
    r = run_benchmark(cfg)
    offsets = arrival_offsets(8, 40.0, 1.0, 2)
    assert offsets[-1] == pytest.approx(8 / 40.0)
    # the last request cannot be sent before its slot, so the run lasts at least that long
    assert r.metrics["duration"] >= offsets[-1]
    assert r.metrics["completed"] == 8


def test_unreachable_server_fails_every_request_without_raising(tok_dir):
    r = run_benchmark(_cfg("http://127.0.0.1:9", tok_dir, num_prompts=3))
    assert r.metrics["completed"] == 0 and r.metrics["failed"] == 3
    assert r.errors[0].startswith("ConnectError")


def test_garbage_server_marks_requests_failed_and_run_completes(tok_dir):
    good = b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\ndata: [DONE]\n\n'
    bodies = iter([good, b"data: {oops\n\n", b"\x00\xff" * 10, good, b"<html>bad gateway</html>"])
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, Content-Length bodies

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                body = next(bodies)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            reqs = [SampleRequest("p", 3, 2)] * 5
            r = run_benchmark(_cfg(f"http://127.0.0.1:{server.server_address[1]}", tok_dir,
                                   num_prompts=5, max_concurrency=1), input_requests=reqs)
        finally:
            server.shutdown()
    assert r.metrics["completed"] == 2 and r.metrics["failed"] == 3
    assert len(r.errors) == 3 and r.metrics["total_input_tokens"] == 6


def test_keyboard_interrupt_propagates_promptly(tmp_path, tok_dir):
    with RunningStub(StubOptions(itl_ms=100)) as s:
        script = tmp_path / "run.py"
        script.write_text(
            "import signal, sys\n"
            # Ctrl-C as in a terminal, even when this test runs under a shell that started it in
            # the background (SIGINT ignored, and inherited as ignored).
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from tuner.bench import BenchConfig, run_benchmark\n"
            f"cfg = BenchConfig(base_url={s.url!r}, model='stub', tokenizer={tok_dir!r},\n"
            "                  num_prompts=4, random_input_len=16, random_output_len=2000)\n"
            "def progress(done, total): pass\n"
            "print('START', flush=True)\n"
            "try:\n"
            "    run_benchmark(cfg, on_progress=progress)\n"
            "except KeyboardInterrupt:\n"
            "    print('INTERRUPTED', flush=True)\n"
            "    sys.exit(42)\n")
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "START"
            deadline = time.monotonic() + 60
            while s.stub.inflight < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert s.stub.inflight == 4
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 42 and "INTERRUPTED" in out


# --------------------------------------------------------------------------- CLI

@pytest.fixture
def cli():
    app = typer.Typer()
    register(app)

    @app.callback()
    def main():  # a group, like the real `tune` app
        pass

    return lambda *args: CliRunner().invoke(app, ["bench", *map(str, args)])


def test_cli_writes_vllm_compatible_result(cli, stub, tok_dir, tmp_path):
    res = cli("--base-url", stub.url, "--model", tok_dir, "--served-model-name", "stub",
              "--num-prompts", 5, "--random-input-len", 16, "--random-output-len", 4,
              "--goodput", "ttft:5000", "tpot:100", "--metric-percentiles", "50,99",
              "--save-result", "--result-dir", tmp_path, "--disable-tqdm")
    assert res.exit_code == 0, res.output
    assert "============ Serving Benchmark Result ============" in res.output
    (path,) = tmp_path.glob("*.json")
    assert path.name.startswith("openai-infqps-stub-")
    doc = json.loads(path.read_text())
    assert doc["completed"] == 5 and doc["request_goodput"] > 0
    assert {"p50_ttft_ms", "p99_itl_ms", "model_id", "tokenizer_id", "tuner"} <= set(doc)
    assert not list(tmp_path.glob(".*tmp"))


def test_cli_host_port_and_result_filename(cli, stub, tok_dir, tmp_path):
    res = cli("--host", "127.0.0.1", "--port", stub.port, "--model", tok_dir, "--num-prompts", 2,
              "--random-input-len", 16, "--random-output-len", 2, "--result-dir", tmp_path,
              "--result-filename", "r.json", "--disable-tqdm")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "r.json").read_text())["completed"] == 2


@pytest.mark.parametrize("args, words", [
    (["--port", 9], "cannot reach the server"),
    (["--dataset-name", "sharegpt", "--dataset-path", "/nonexistent.json"], "does not exist"),
    (["--goodput", "ttft=5"], "not KEY:VALUE"),
    (["--goodput", "speed:5"], "goodput metric 'speed'"),
    (["--request-rate", 0], "request_rate must be > 0"),
    (["--percentile-metrics", "ttft,bogus"], "percentile metric 'bogus'"),
    (["stray"], "unexpected argument"),
    (["--port", -1], "'--port'"),
    (["--port", 70000], "'--port'"),
    (["--base-url", "http://127.0.0.1:70000"], "base_url 'http://127.0.0.1:70000' is not a valid URL"),
    (["--dataset-name", "multi_turn", "--multi-turn-turns", 0], "multi_turn_turns must be at least 1, got 0"),
    (["--dataset-name", "multi_turn", "--multi-turn-turns", -2], "multi_turn_turns must be at least 1"),
    (["--dataset-name", "multi_turn", "--multi-turn-input-len", -1], "multi_turn_input_len must be at least 1"),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-num-prefixes", 0],
     "prefix_repetition_num_prefixes must be at least 1, got 0"),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", -1],
     "prefix_repetition_prefix_len must be at least 0, got -1"),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-suffix-len", -1],
     "prefix_repetition_suffix_len must be at least 0"),
    (["--dataset-name", "trace", "--dataset-path", TRACE, "--trace-block-size", -1],
     "trace_block_size must be at least 1, got -1"),
    (["--dataset-name", "trace", "--dataset-path", TRACE, "--trace-block-size", 0],
     "trace_block_size must be at least 1, got 0"),
    (["--seed", -1], "seed must be in [0, 4294967295], got -1"),
])
def test_cli_bad_inputs_exit_2_without_result(cli, stub, tok_dir, tmp_path, args, words):
    base = ["--base-url", stub.url] if not {"--port", "--base-url"} & set(args) else []
    res = cli(*base, "--model", tok_dir, "--num-prompts", 2, "--save-result",
              "--result-dir", tmp_path, "--disable-tqdm", *args)
    assert res.exit_code == 2, res.output
    assert words in res.output and "Traceback" not in res.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kw, words", [
    (dict(multi_turn_turns=0), "multi_turn_turns must be at least 1"),
    (dict(prefix_repetition_num_prefixes=0), "prefix_repetition_num_prefixes must be at least 1"),
    (dict(prefix_repetition_output_len=0), "prefix_repetition_output_len must be at least 1"),
    (dict(trace_block_size=0), "trace_block_size must be at least 1"),
    (dict(seed=2**32), "seed must be in [0, 4294967295]"),
    (dict(max_duration_s=0.0), "max_duration_s must be > 0"),
    (dict(base_url="http://h:0"), "the port must be 1-65535"),
    (dict(base_url="http://[::1"), "is not a valid URL"),
])
def test_config_refuses_values_the_samplers_cannot_use(tok_dir, kw, words):
    with pytest.raises(BenchInputError, match=re.escape(words)):
        _cfg("http://127.0.0.1:9", tok_dir, **kw).validate()


def test_config_accepts_an_empty_prefix_as_vllm_does(tok_dir):
    _cfg("http://127.0.0.1:9", tok_dir, prefix_repetition_prefix_len=0).validate()


def test_cli_missing_tokenizer_exits_2(cli, stub, tmp_path):
    res = cli("--base-url", stub.url, "--model", tmp_path / "nope", "--disable-tqdm")
    assert res.exit_code == 2 and "no such directory" in res.output


def test_cli_all_requests_failed_exits_1_without_result(cli, tok_dir, tmp_path):
    with RunningStub(StubOptions(reject_fields=("ignore_eos",))) as s:
        res = cli("--base-url", s.url, "--model", tok_dir, "--num-prompts", 2,
                  "--random-input-len", 16, "--random-output-len", 2, "--save-result",
                  "--result-dir", tmp_path)
    assert res.exit_code == 1, res.output
    assert "HTTP 422" in res.output and "every request failed" in res.output
    assert list(tmp_path.iterdir()) == []


def test_bench_result_is_the_public_type():
    assert BenchResult.__module__ == "tuner.bench.runner"


def test_max_duration_stops_the_run_and_counts_the_rest_failed(tok_dir):
    # A server slower than the deadline: 8 tokens at 200 ms each, one request at a time.
    with RunningStub(StubOptions(itl_ms=200)) as s:
        r = run_benchmark(_cfg(s.url, tok_dir, num_prompts=6, max_concurrency=1,
                               max_duration_s=2.5))
    assert 1 <= r.metrics["completed"] < 6
    assert r.metrics["completed"] + r.metrics["failed"] == 6
    assert r.metrics["duration"] >= 2.5  # the run ends at the deadline, not after all 6 requests
    assert r.metrics["duration"] < 6 * 8 * 0.2
    assert any("not finished within max_duration_s=2.5" in e for e in r.errors)
