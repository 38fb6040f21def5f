"""Client parity: our benchmark client vs `vllm bench serve`, side by side on one real vLLM server.

One vLLM server at the space's engine defaults (cpu-smoke's CPU engine unless --space names
another, e.g. a GPU space), prefix caching off: every run sends the
same prompts, and a cache warmed by the previous run would favour whichever client runs second.
Then, per workload, pairs of runs A = tuner.bench (what `tune bench` runs), B = `vllm bench serve`
from the same install the server runs from, with the same dataset, seed, request rate and
concurrency, in the order A B, B A, A B, ... so slow drift of the machine does not favour one
client. Workloads: random-128-32 and sharegpt (--prompts prompts, --seed), and "space": the space's
own workload (its dataset, prompts, rate and seed; --request-rate paces it instead, so that TTFT
is mostly one prefill rather than a wait in the queue a burst builds). Prints each metric's B/A
ratio per pair and the median and spread over pairs, and the targets (throughput within 1 %, mean
TTFT and TPOT within 3 %); writes benchmarks/data/client-parity-<date>.json (or --out).

    .venv/bin/python benchmarks/client_parity.py [--pairs 3] [--prompts 200]
    python -m benchmarks.client_parity --space SPACE --workloads space --request-rate 16 --pairs 3 --out F
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
from tuner.configs.translate import LaunchPlan, build_plan
from tuner.engines.spec import EngineSpec, load_engine
from tuner.paths import REPO_ROOT, SAMPLES_DIR, expand
from tuner.runtime import launcher, procgroup
from tuner.space import EngineChoice, Space, load_space

# metric -> largest |ratio - 1| of the medians that meets the target
TARGETS = {"total_token_throughput": 0.01, "mean_ttft_ms": 0.03, "mean_tpot_ms": 0.03}
METRICS = ("total_token_throughput", "output_throughput", "request_throughput", "mean_ttft_ms",
           "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "duration")


def workloads(prompts: int, seed: int, space: Space, rate: float | None = None) -> dict[str, dict]:
    """Each workload as both clients spell it, with its prompts and seed; ``rate`` replaces the
    space workload's request rate."""
    sharegpt = SAMPLES_DIR / "sharegpt_small.json"
    wl = space.workload
    rate = wl.request_rate if rate is None else rate
    own = [expand(wl.dataset_path)] if wl.dataset_path else []
    random = ({"random_input_len": wl.random_input_len, "random_output_len": wl.random_output_len}
              if wl.dataset == "random" else {})
    return {
        "random-128-32": {"ours": dict(dataset_name="random", random_input_len=128,
                                       random_output_len=32),
                          "vllm": ["--dataset-name", "random", "--random-input-len", "128",
                                   "--random-output-len", "32"], "prompts": prompts, "seed": seed},
        "sharegpt": {"ours": dict(dataset_name="sharegpt", dataset_path=str(sharegpt)),
                     "vllm": ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt)],
                     "prompts": prompts, "seed": seed},
        "space": {"ours": dict(dataset_name=wl.dataset, dataset_path=own[0] if own else None,
                               request_rate=rate, **random),
                  "vllm": ["--dataset-name", wl.dataset, *(["--dataset-path", *own] if own else []),
                           "--request-rate", str(rate),
                           *(a for k, v in random.items() for a in (f"--{k.replace('_', '-')}", str(v)))],
                  "prompts": wl.num_prompts, "seed": wl.seed},
    }


def server_plan(space: Space, server_core: int | None = None
                ) -> tuple[EngineSpec, EngineChoice, LaunchPlan]:
    """The space's vllm engine at its defaults with prefix caching off, so that no client profits
    from a cache the other warmed; ``server_core`` pins the engine and its OpenMP threads."""
    spec = load_engine("vllm")
    base = space.engines["vllm"]
    update: dict = {"fixed_args": [*base.fixed_args, "--no-enable-prefix-caching"]}
    if server_core is not None:
        core = str(server_core)
        update["command"] = ["taskset", "-c", core, *map(expand, base.command or spec.command)]
        update["env"] = {**base.env, "VLLM_CPU_OMP_THREADS_BIND": core}
    choice = base.model_copy(update=update)
    return spec, choice, build_plan(spec, choice, space.model, {}, port=procgroup.free_port())


def vllm_client(plan: LaunchPlan) -> tuple[str, dict[str, str]]:
    """`vllm bench serve` from the install the server runs from: the same console script (a venv's
    or an installed folder's) and the environment the launch gives it (an installed folder needs
    its PYTHONPATH and offline settings)."""
    exe = next(a for a in plan.argv if Path(a).name == "vllm")
    return exe, {**os.environ, **plan.env}


def ours(base_url: str, model: str, tokenizer: str, prompts: int, seed: int, kw: dict) -> dict:
    cfg = BenchConfig(base_url=base_url, model=model, tokenizer=tokenizer, num_prompts=prompts,
                      seed=seed, ignore_eos=True, temperature=0.0, **kw)
    result = run_benchmark(cfg)
    return {**result.metrics, "client_cpu_percent": result.client_cpu_percent}


def theirs(client: tuple[str, dict[str, str]], base_url: str, model: str, tokenizer: str,
           prompts: int, seed: int, args: list[str], out_dir: Path) -> dict:
    name = f"vllm-{datetime.now():%H%M%S%f}.json"
    exe, env = client
    cmd = [exe, "bench", "serve", "--backend", "openai", "--base-url", base_url,
           "--model", model, "--tokenizer", tokenizer, "--num-prompts", str(prompts),
           "--seed", str(seed), "--ignore-eos", "--temperature", "0", "--save-result",
           "--result-dir", str(out_dir), "--result-filename", name, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {proc.stderr[-2000:]}")
    return json.loads((out_dir / name).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="cpu-smoke", help="the server: this space's vllm engine at its defaults")
    ap.add_argument("--workloads", default="random-128-32,sharegpt",
                    help="comma-separated: random-128-32, sharegpt, space (the space's own workload)")
    ap.add_argument("--request-rate", type=float, default=None,
                    help="requests/s for the space workload (default: the space's own)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=None,
                    help="pin the engine to this core (and its OpenMP threads)")
    ap.add_argument("--client-core", type=int, default=None,
                    help="pin both clients to this core, so neither client's CPU is taken from "
                         "the engine")
    ap.add_argument("--out", type=Path, default=None,
                    help="result file (default: benchmarks/data/client-parity-<date>.json)")
    args = ap.parse_args()
    if args.request_rate is not None and not args.request_rate > 0:
        ap.error(f"--request-rate must be > 0 requests/s, got {args.request_rate}")
    # SIGTERM unwinds like Ctrl-C, so the server started below is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    space = load_space(args.space)
    if args.client_core is not None:
        os.sched_setaffinity(0, {args.client_core})  # inherited by `vllm bench serve`
    spec, choice, plan = server_plan(space, args.server_core)
    tmp = Path(tempfile.mkdtemp(prefix="tuner-client-parity-"))
    client = vllm_client(plan)
    chosen = workloads(args.prompts, args.seed, space, args.request_rate)
    unknown = set(args.workloads.split(",")) - set(chosen)
    if unknown:
        sys.exit(f"unknown workloads {sorted(unknown)}; choose from {', '.join(chosen)}")
    server = launcher.start(plan, spec, tmp / "server.log")
    results: dict[str, list[dict]] = {}
    try:
        launcher.wait_ready(server, choice.startup_timeout_s or 300)
        tokenizer = space.model.resolved_tokenizer()
        warm = ours(server.base_url, plan.served_name, tokenizer, 20, 1,
                    chosen["random-128-32"]["ours"])  # first requests warm the server up
        assert warm["completed"] == 20
        for name in args.workloads.split(","):
            w = chosen[name]
            pairs = []
            for i in range(args.pairs):
                run_a = lambda: ours(server.base_url, plan.served_name, tokenizer, w["prompts"],
                                     w["seed"], w["ours"])
                run_b = lambda: theirs(client, server.base_url, plan.served_name, tokenizer,
                                       w["prompts"], w["seed"], w["vllm"], tmp)
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
                print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {name} pair {i + 1}: ours "
                      f"{a['total_token_throughput']:.1f} tok/s, vllm {b['total_token_throughput']:.1f} "
                      "tok/s", flush=True)
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
    targets = {name: {m: {"limit": lim, "met": abs(metrics[m]["median_ratio"] - 1) <= lim}
                      for m, lim in TARGETS.items() if m in metrics}
               for name, metrics in summary.items()}
    version = subprocess.run([client[0], "--version"], capture_output=True, text=True,
                             env=client[1]).stdout.strip()
    doc = {"date": datetime.now(timezone.utc).isoformat(), "vllm_version": version,
           "space": space.name, "targets": targets,
           "server_core": args.server_core, "client_core": args.client_core,
           "pairs": args.pairs, "prompts": args.prompts, "seed": args.seed,
           "request_rate": args.request_rate,
           "server": plan.command_line(), "summary": summary, "runs": results}
    out = args.out or REPO_ROOT / "benchmarks" / "data" / f"client-parity-{datetime.now():%Y%m%d}.json"
    out.write_text(json.dumps(doc, indent=2))
    print("\nratio vllm/ours over pairs: median (lowest, highest)")
    for name, metrics in summary.items():
        for m, r in metrics.items():
            verdict = targets[name].get(m)
            mark = "" if verdict is None else f"  target ±{verdict['limit']:.0%}: {'met' if verdict['met'] else 'MISSED'}"
            print(f"  {name:14s} {m:24s} {r['median_ratio']:.4f} ({r['min']:.4f}, {r['max']:.4f}){mark}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
