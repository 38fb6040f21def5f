"""Exercise tuner.telemetry on real hardware and print the result JSON.

Default: a load process is started in its own session, as an engine would be (so the sampler's
choice of "the engine's GPUs" is exercised too): bf16 matrix products on cuda:0 when torch sees a
GPU, a busy loop otherwise. TelemetrySampler runs around it for --seconds; the derived figures'
"per token" means per matrix product here.

With --space, the space's engine is launched at its defaults instead and its workload benchmarked
under the sampler, with the engine's /metrics scraped: the figures a trial records.

    python benchmarks/nvml_probe.py [--seconds 5] [--out result.json]
    python benchmarks/nvml_probe.py --space cpu-smoke [--num-prompts 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.runtime.procgroup import kill_group  # noqa: E402
from tuner.trial.telemetry import TelemetrySampler, derived  # noqa: E402

# Prints one line when its GPU work starts, then counts products into a file on SIGTERM.
_LOAD = """
import signal, sys, time
count = 0
def stop(*_):
    open(sys.argv[1], "w").write(str(count)); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
try:
    import torch
    gpu = torch.cuda.is_available()
except ImportError:
    gpu = False
if gpu:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
print("gpu" if gpu else "cpu", flush=True)
while True:
    if gpu:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        count += 20
    else:
        sum(range(100000)); count += 1
"""


def engine_run(space_name: str, num_prompts: int | None) -> dict:
    """The space's first engine at its defaults, its workload benchmarked under the sampler."""
    from tuner.bench import run_benchmark
    from tuner.configs.translate import build_plan
    from tuner.engines.spec import load_engine
    from tuner.runtime.launcher import start, wait_ready
    from tuner.runtime.procgroup import free_port
    from tuner.space import load_space
    from tuner.trial.runner import bench_config

    space = load_space(space_name)
    engine, choice = next(iter(space.engines.items()))
    spec = load_engine(engine)
    plan = build_plan(spec, choice, space.model, dict(choice.fixed), port=free_port(),
                      omit=frozenset())
    workload = space.workload
    if num_prompts:
        workload = workload.model_copy(update={"num_prompts": num_prompts})
    log = Path("/tmp") / f"nvml_probe-{engine}.log"
    log.unlink(missing_ok=True)
    server = start(plan, spec, log)
    try:
        ready_s = wait_ready(server, choice.startup_timeout_s or spec.readiness.startup_timeout_s)
        metrics_url = server.base_url + spec.metrics_path if spec.metrics_path else None
        with TelemetrySampler(server.pgid, metrics_url) as sampler:
            bench = run_benchmark(bench_config(space, workload, plan, server.base_url))
    finally:
        server.stop()
    result = sampler.result()
    tokens = int(bench.metrics.get("total_output_tokens") or 0)
    return {"load": f"{engine} serving {space.name}'s workload ({workload.num_prompts} prompts)",
            "ready_s": round(ready_s, 1), "command": plan.command_line(),
            "metrics": {k: bench.metrics.get(k) for k in (
                "completed", "failed", "duration", "total_token_throughput", "output_throughput",
                "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")},
            "derived": derived(result, tokens), "telemetry": result}


def load_run(seconds: float) -> dict:
    count_file = Path("/tmp/nvml_probe_count.txt")
    load = subprocess.Popen([sys.executable, "-c", _LOAD, str(count_file)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        mode = load.stdout.readline().strip()  # GPU memory allocated, context live
        t0 = time.monotonic()
        with TelemetrySampler(load.pid, None, interval_s=0.5) as sampler:
            time.sleep(seconds)
        elapsed = time.monotonic() - t0
    finally:
        kill_group(load.pid, grace_s=5, leader=load)
    products = int(count_file.read_text()) if count_file.exists() else 0
    result = sampler.result()
    return {
        "load": mode, "seconds": round(elapsed, 2), "products": products,
        "tflops": round(products * 2 * 8192 ** 3 / elapsed / 1e12, 1) if mode == "gpu" else None,
        "derived_per_product": derived(result, products),
        "telemetry": result,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--space", help="benchmark this space's engine instead of a matmul load")
    ap.add_argument("--num-prompts", type=int)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    report = engine_run(args.space, args.num_prompts) if args.space else load_run(args.seconds)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
