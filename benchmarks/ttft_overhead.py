"""How much each benchmark client adds to TTFT: client TTFT minus the server's own first-token time.

On an H200 (docs/benchmark-client.md), paced at 16 requests/s, `vllm bench serve` measured a
mean TTFT about 2 ms (6 %) longer than our client on the same server, in every pair. A
client's TTFT runs from its start timestamp to the moment it parses the first token chunk, so it
includes the client's own work on the way out (JSON-encoding, connection pool, writing the
request) and on the way in (reading and parsing the first chunk). Which client is closer to the
true TTFT can only be told against a known server-side time. The stub server
(benchmarks/stub_server.py) records, per completion request, the time from having read the request
head to writing the first token chunk, and GET /stats returns its mean and median for the window
since the last call. Both clients run against it in turn:

- the stub, pinned to --server-core, waits --ttft-ms before the first token and steps all streams
  one token every --itl-ms (like an engine's decode batch);
- pinned to --client-core, A = our client (tuner.bench.run_benchmark) and B = `vllm bench serve`
  (the CPU vLLM venv, or --vllm-bin) send the same random workload (--num-prompts prompts of
  --input-len tokens, --output-len output tokens, --request-rate requests/s, seed --seed) in the
  order A B, B A, A B, ... (--pairs pairs), so drift of the machine favours neither;
- after each run, GET /stats: overhead = the client's mean (median) TTFT minus the stub's mean
  (median) first-token time over the same requests.

The overhead is >= 0 for any correct client: its clock starts before the server reads the request
and stops after the server wrote the token. The smaller it is, the closer the client's TTFT is to
the server's. Prints a table and writes JSON with versions (--out, default
benchmarks/data/ttft-overhead-<date>.json).

    .venv/bin/python benchmarks/ttft_overhead.py [--pairs 3] [--request-rates 16,4] [--out F]
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
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.capacity import (REPO, _cpu_busy, _default_vllm, _taskset, _tokenizer, _versions,
                                 busy_cores, start_stub, stop, wait_quiet)


def stub_stats(port: int) -> dict:
    """The stub's window since the last call (and start a new one)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as resp:
        return json.loads(resp.read())


def run_ours(core: int | None, port: int, tokenizer: str, a: argparse.Namespace,
             rate: float) -> dict:
    cmd = _taskset(core) + [sys.executable, str(Path(__file__).resolve()), "--_client",
                            "--port", str(port), "--tokenizer", tokenizer,
                            "--num-prompts", str(a.num_prompts), "--input-len", str(a.input_len),
                            "--output-len", str(a.output_len), "--request-rates", str(rate),
                            "--seed", str(a.seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"client failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _client_main(a: argparse.Namespace) -> None:
    from tuner.bench import BenchConfig, run_benchmark

    cfg = BenchConfig(base_url=f"http://127.0.0.1:{a.port}", model="stub", tokenizer=a.tokenizer,
                      dataset_name="random", num_prompts=a.num_prompts,
                      random_input_len=a.input_len, random_output_len=a.output_len,
                      request_rate=float(a.request_rates), seed=a.seed, ignore_eos=True,
                      temperature=0.0)
    m = run_benchmark(cfg).metrics
    print(json.dumps({"client": "tuner", **{k: m[k] for k in FIELDS}}))


FIELDS = ("completed", "failed", "duration", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
          "mean_tpot_ms", "mean_itl_ms")


def run_vllm(vllm_bin: str, core: int | None, port: int, tokenizer: str, a: argparse.Namespace,
             rate: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = _taskset(core) + [
            vllm_bin, "bench", "serve", "--backend", "openai",
            "--base-url", f"http://127.0.0.1:{port}", "--model", tokenizer,
            "--served-model-name", "stub", "--dataset-name", "random",
            "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
            "--num-prompts", str(a.num_prompts), "--request-rate", str(rate),
            "--seed", str(a.seed), "--ignore-eos", "--temperature", "0", "--disable-tqdm",
            "--save-result", "--result-dir", tmp, "--result-filename", "r.json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"vllm bench serve failed: {proc.stderr[-2000:]}")
        m = json.loads((Path(tmp) / "r.json").read_text())
    return {"client": "vllm bench serve", **{k: m.get(k) for k in FIELDS}}


def one_run(fn, port: int, rate: float, quiet_below: float | None) -> dict:
    idle_busy = wait_quiet(quiet_below, 600) if quiet_below is not None else None
    stub_stats(port)  # start the window now: nothing but this run is in it
    load = os.getloadavg()[0]
    t = time.time()
    before = _cpu_busy()
    res = fn()
    busy = busy_cores(before, _cpu_busy())
    wall = time.time() - t
    st = stub_stats(port)
    res |= {"request_rate": rate, "wall_s": wall, "loadavg_1m_before": load,
            "busy_cores_before": idle_busy,
            # the whole machine during the run: the client (~1 core at start-up) and the stub;
            # more means something else competed for the two cores
            "machine_busy_cores": busy,
            "stub_first_token_count": st["first_token_count"],
            "stub_first_token_mean_ms": st["first_token_mean_ms"],
            "stub_first_token_median_ms": st["first_token_median_ms"],
            "overhead_mean_ms": res["mean_ttft_ms"] - st["first_token_mean_ms"],
            "overhead_median_ms": res["median_ttft_ms"] - st["first_token_median_ms"]}
    if st["first_token_count"] != res["completed"]:
        print(f"warning: the stub saw {st['first_token_count']} first tokens, the client "
              f"completed {res['completed']}", file=sys.stderr)
    return res


def summarize(runs: list[dict]) -> dict:
    """Per rate and client: median [min, max] over runs of each overhead; per rate, the median
    over pairs of vLLM's overhead minus ours."""
    out: dict = {}
    for rate in sorted({r["request_rate"] for r in runs}, reverse=True):
        at = [r for r in runs if r["request_rate"] == rate]
        per: dict = {}
        for client in ("tuner", "vllm bench serve"):
            rs = [r for r in at if r["client"] == client]
            per[client] = {k: {"median": statistics.median(r[k] for r in rs),
                               "min": min(r[k] for r in rs), "max": max(r[k] for r in rs)}
                           for k in ("overhead_mean_ms", "overhead_median_ms", "mean_ttft_ms",
                                     "stub_first_token_mean_ms")} if rs else {}
        ours = [r for r in at if r["client"] == "tuner"]
        theirs = [r for r in at if r["client"] == "vllm bench serve"]
        diffs = [b["overhead_mean_ms"] - o["overhead_mean_ms"] for o, b in zip(ours, theirs)]
        if diffs:
            per["vllm_minus_ours_overhead_mean_ms"] = {
                "median": statistics.median(diffs), "min": min(diffs), "max": max(diffs)}
        out[str(rate)] = per
    return out


def table(runs: list[dict]) -> str:
    lines = ["| rate | pair | client | completed | client TTFT mean / median (ms) | "
             "stub first token mean / median (ms) | overhead mean / median (ms) |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['request_rate']:g} | {r['pair']} | {r['client']} | {r['completed']} | "
                     f"{r['mean_ttft_ms']:.2f} / {r['median_ttft_ms']:.2f} | "
                     f"{r['stub_first_token_mean_ms']:.2f} / "
                     f"{r['stub_first_token_median_ms']:.2f} | "
                     f"{r['overhead_mean_ms']:.2f} / {r['overhead_median_ms']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--_client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the tiny model)")
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--request-rates", default="16", help="comma list of requests/s")
    ap.add_argument("--num-prompts", type=int, default=400)
    ap.add_argument("--input-len", type=int, default=100)
    ap.add_argument("--output-len", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=30.0,
                    help="the stub's wait before the first token")
    ap.add_argument("--itl-ms", type=float, default=9.0, help="the stub's step between tokens")
    ap.add_argument("--vllm-bin", default=_default_vllm(), help="vllm executable (the CPU venv's)")
    ap.add_argument("--quiet-below", type=float, default=0.5,
                    help="before each run wait (up to 10 min) until other load is below this many "
                         "cores (a negative value: do not wait)")
    ap.add_argument("--out", type=Path, default=None,
                    help="result file (default: benchmarks/data/ttft-overhead-<date>.json)")
    a = ap.parse_args()
    if a._client:
        return _client_main(a)
    if not a.vllm_bin or not Path(a.vllm_bin).exists():
        ap.error(f"no vllm executable at {a.vllm_bin!r}; pass --vllm-bin")
    # SIGTERM unwinds like Ctrl-C, so the stub server started below is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tokenizer = _tokenizer(a.tokenizer)
    rates = [float(r) for r in a.request_rates.split(",")]
    report = {"date": datetime.now(timezone.utc).isoformat(), "versions": _versions(a.vllm_bin),
              "settings": {k: v for k, v in vars(a).items()
                           if k not in ("_client", "port", "out")} | {"tokenizer": tokenizer},
              "runs": []}
    for rate in rates:
        stub, port = start_stub(a.server_core, a.itl_ms, a.ttft_ms)
        try:
            run_a = lambda: run_ours(a.client_core, port, tokenizer, a, rate)
            run_b = lambda: run_vllm(a.vllm_bin, a.client_core, port, tokenizer, a, rate)
            for i in range(a.pairs):
                order = (run_a, run_b) if i % 2 == 0 else (run_b, run_a)
                for fn in order:
                    quiet = a.quiet_below if a.quiet_below >= 0 else None
                    res = one_run(fn, port, rate, quiet) | {"pair": i + 1}
                    report["runs"].append(res)
                    print(f"[{datetime.now(timezone.utc):%H:%M:%S}] rate {rate:g} pair {i + 1} "
                          f"{res['client']:>16}: TTFT mean {res['mean_ttft_ms']:.2f} ms, stub "
                          f"{res['stub_first_token_mean_ms']:.2f} ms, overhead "
                          f"{res['overhead_mean_ms']:.2f} ms (median "
                          f"{res['overhead_median_ms']:.2f}); busy cores "
                          f"{res['machine_busy_cores']:.2f}", flush=True)
        finally:
            stop(stub)
    report["summary"] = summarize(report["runs"])
    out = a.out or REPO / "benchmarks" / "data" / f"ttft-overhead-{datetime.now():%Y%m%d}.json"
    out.write_text(json.dumps(report, indent=1))
    print(table(report["runs"]))
    for rate, per in report["summary"].items():
        for client in ("tuner", "vllm bench serve"):
            o = per[client]["overhead_mean_ms"]
            print(f"rate {rate}: {client:>16} overhead (mean TTFT - stub mean) median "
                  f"{o['median']:.2f} ms [{o['min']:.2f}, {o['max']:.2f}]")
        if "vllm_minus_ours_overhead_mean_ms" in per:
            d = per["vllm_minus_ours_overhead_mean_ms"]
            print(f"rate {rate}: vLLM's overhead minus ours, median over pairs "
                  f"{d['median']:.2f} ms "
                  f"[{d['min']:.2f}, {d['max']:.2f}]")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
