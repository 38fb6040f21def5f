"""The peer, `vllm bench sweep serve`, as both head-to-heads read it: the CPU one
(benchmarks/vs_vllm_sweep.py, vLLM 0.32) and the H200 one (benchmarks/gpu_vllm_sweep.py, vLLM 0.25.1).

The sweep prints markers on its stdout and writes one folder per config; nothing else says when a
server started, became ready or stopped, so its stdout is read line by line and time-stamped here
(``follow``), and the server lives are rebuilt from those lines (``lives``). Marker lines, as
vllm/benchmarks/sweep/serve.py prints them (0.25.1 and 0.32 alike): ``[BEGIN SERVER]``,
``Server overrides: {...}``, ``Server command: [...]``, then per run ``[BEGIN BENCHMARK]``,
``Run Number: N``, ``Output file: PATH``, ``[END BENCHMARK]`` (or ``[SKIPPED BENCHMARK]`` when
``--resume`` finds the run's file), and ``[END SERVER]``; 0.32's ``--continue-on-error`` adds
``[FAILED SERVER COMBINATION]``. A server's readiness is not printed: the first ``[BEGIN
BENCHMARK]`` after ``[BEGIN SERVER]`` comes right after the sweep's own /health wait returns.

Standard library only at module level: the H200 host runs this beside the engine, without the
tuner's dependencies.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

BEGIN_SERVER, END_SERVER, FAILED_SERVER = "[BEGIN SERVER]", "[END SERVER]", "[FAILED SERVER COMBINATION]"
BEGIN_BENCH, END_BENCH, SKIPPED_BENCH = "[BEGIN BENCHMARK]", "[END BENCHMARK]", "[SKIPPED BENCHMARK]"


def config_flags(config: dict | None) -> list[str]:
    """`vllm serve` flags for a config (None: the engine defaults, no knob flags), spelled as the
    sweep spells them (ParameterSweepItem.apply_to_cmd)."""
    flags: list[str] = []
    for key, value in (config or {}).items():
        name = key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no-{name}")
        else:
            flags += [f"--{name}", str(value)]
    return flags


def follow(proc: subprocess.Popen, log: IO[str], t0: float) -> list[tuple[float, str]]:
    """Every stdout line of ``proc`` (started with binary pipes: text mode would split a progress
    bar's carriage returns into lines), stamped with seconds since ``t0`` (0: the epoch) as it
    arrives, written to ``log`` and returned. A progress bar's updates keep only their last state."""
    import time

    lines = []
    assert proc.stdout is not None
    for raw in proc.stdout:
        now = time.time() - t0
        parts = [p for p in raw.decode(errors="replace").rstrip("\n").split("\r") if p.strip()]
        text = parts[-1] if parts else ""
        log.write(f"{now:.3f} {text}\n")
        log.flush()
        lines.append((now, text))
    return lines


def read_log(path: Path) -> list[tuple[float, str]]:
    """A log written by ``follow``, read back."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        stamp, _, text = line.partition(" ")
        try:
            out.append((float(stamp), text))
        except ValueError:
            continue
    return out


@dataclass
class BenchRun:
    number: int
    output: str
    begin: float
    end: float | None = None
    skipped: bool = False


@dataclass
class Life:
    """One server the sweep started: its config as the sweep printed it, and when things happened.
    ``outcome``: "ended" ([END SERVER]), "failed" ([FAILED SERVER COMBINATION]) or "open" (the
    sweep exited, crashed or was stopped while this server was up)."""

    config: dict
    command: list[str]
    begin: float
    ready: float | None = None
    runs: list[BenchRun] = field(default_factory=list)
    end: float | None = None
    outcome: str = "open"

    @property
    def measured(self) -> list[BenchRun]:
        return [r for r in self.runs if not r.skipped and r.end is not None]


def lives(lines: list[tuple[float, str]]) -> list[Life]:
    """The server lives in stamped sweep output (``follow``), in order. A ``[BEGIN SERVER]`` while
    another life is open (a new sweep invocation after a crash) leaves the earlier one open."""
    out: list[Life] = []
    life: Life | None = None
    run: BenchRun | None = None
    for t, text in lines:
        if text.startswith(BEGIN_SERVER):
            life, run = Life({}, [], t), None
            out.append(life)
        elif life is None:
            continue
        elif text.startswith("Server overrides: "):
            life.config = dict(ast.literal_eval(text.split(": ", 1)[1].strip()))
        elif text.startswith("Server command: "):
            life.command = list(ast.literal_eval(text.split(": ", 1)[1].strip()))
        elif text.startswith(BEGIN_BENCH):
            if life.ready is None:
                life.ready = t
            run = BenchRun(-1, "", t)
            life.runs.append(run)
        elif run is not None and text.startswith("Run Number: "):
            run.number = int(text.split(": ", 1)[1])
        elif run is not None and text.startswith("Output file: "):
            run.output = text.split(": ", 1)[1].strip()
        elif run is not None and text.startswith(SKIPPED_BENCH):
            run.skipped, run.end, run = True, t, None
        elif run is not None and text.startswith(END_BENCH):
            run.end, run = t, None
        elif text.startswith((END_SERVER, FAILED_SERVER)):
            life.end, life.outcome = t, "ended" if text.startswith(END_SERVER) else "failed"
            life, run = None, None
    return out


def server_lives(found: list[Life], end_s: float) -> dict:
    """Launches and engine-seconds from the sweep's own markers. A server still up when the sweep
    exited (an aborted sweep) lived until then."""
    rows = []
    for life in found:
        if life.outcome == "open":
            rows.append({"seconds": round(end_s - life.begin, 2), "refused": None, "aborted_sweep": True})
        else:
            rows.append({"seconds": round(life.end - life.begin, 2), "refused": life.outcome == "failed"})
    return {"launches": len(rows), "engine_s": round(sum(x["seconds"] for x in rows), 1),
            "server_lives": rows}


def read_sweep(experiment: Path, t0: float, keys: list[str], metric: str) -> dict:
    """The sweep's results as it wrote them: one summary.json (the list of its runs) per config
    that finished, one SERVE-...-failure.json per config whose server did not come up (0.32's
    --continue-on-error), one run=N.failure.json per failed benchmark run."""
    results = []
    for summary in sorted(experiment.glob("*/summary.json")):
        runs = json.loads(summary.read_text())
        if not runs:
            continue
        values = [r[metric] for r in runs]
        results.append({"config": {k: runs[0][k] for k in keys if k in runs[0]},
                        "values": values, "mean": statistics.fmean(values),
                        "completed": [r.get("completed") for r in runs],
                        "done_at_s": round(summary.stat().st_mtime - t0, 2)})
    refused = []
    for failure in sorted(experiment.glob("SERVE-*-failure.json")):
        doc = json.loads(failure.read_text())
        refused.append({"config": doc["serve_overrides"], "error": doc["error"],
                        "at_s": round(failure.stat().st_mtime - t0, 2)})
    run_failures = [json.loads(p.read_text()) for p in sorted(experiment.glob("*/*.failure.json"))]
    best = max(results, key=lambda r: r["mean"]) if results else None
    timeline, top = [], None
    for r in sorted(results, key=lambda r: r["done_at_s"]):
        if top is None or r["mean"] > top:
            top = r["mean"]
            timeline.append([r["done_at_s"], top])
    return {"results": results, "refused": refused, "run_failures": run_failures,
            "summary_csv": (experiment / "summary.csv").exists(),
            "recommendation": best["config"] if best else None,
            "recommended_value": best["mean"] if best else None, "timeline": timeline}


def stop_tree(proc: subprocess.Popen) -> None:
    """Kill the sweep and the servers it started in their own sessions. Not by SIGINT: a process
    started in the background of a shell inherits SIGINT ignored, and so would the sweep."""
    import psutil

    try:
        groups = {os.getpgid(c.pid) for c in psutil.Process(proc.pid).children(recursive=True)}
    except (psutil.Error, ProcessLookupError):
        groups = set()
    for pgid in groups | {proc.pid}:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()

