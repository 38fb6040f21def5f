"""Measure the full grid of a search space on the real engine once, for the replay benchmark.

Every grid point is launched once through the tuner's own trial runner and benchmarked four times
on that one server: a screen (the space's ``fidelity.screen_prompts`` prompts, as multi-fidelity
runs it) and three full benchmarks (the space's workload). A few configs are launched a second
time at the end to measure relaunch-to-relaunch noise. Configs the engine refuses are recorded
with their time to fail: they are data too.

Each benchmark uses its own dataset seed (screen: the workload's seed, as the live screen does;
full repeats: seed+1, seed+2, seed+3), so a repeat never re-sends prompts that are already in the
engine's prefix cache.

The data file is rewritten after every launch, so a run can be watched and resumed (--resume).

    .venv/bin/python benchmarks/measure_grid.py                      # one pass + 3 relaunches
    .venv/bin/python benchmarks/measure_grid.py --resume --passes 2  # every config a 2nd time

Each benchmark's engine CPU telemetry (engine CPU-seconds, tokens per engine CPU-second) is
copied from its result JSON into the data file; --attach-telemetry adds it afterwards to launches
recorded without it (the trial dirs under --work-dir must still exist).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import random
import signal
import sys
import time
from pathlib import Path

import psutil

from tuner.errors import HarnessError
from tuner.fingerprint import environment
from tuner.space import Space, grid_values, load_space
from tuner.trial.runner import run_trial

HERE = Path(__file__).resolve().parent
DEFAULT_SPACE = HERE / "replay-space.yaml"
DEFAULT_OUT = HERE / "data" / "grid-vllm-cpu.json"
FULL_REPEATS = 3
KEPT_METRICS = ("total_token_throughput", "output_throughput", "request_throughput", "duration",
                "completed", "failed", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                "p99_tpot_ms")


def grid_points(space: Space) -> tuple[str, list[dict]]:
    """Every combination of the (single) engine's knobs, in the space's order."""
    (engine, choice), = space.engines.items()
    axes = {}
    for name, p in choice.params.items():
        values = grid_values(p)
        if values is None or p.when:
            sys.exit(f"param {name} has no finite grid (or is conditional): not supported here")
        axes[name] = values
    return engine, [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def defaults_point(space: Space) -> dict:
    (choice,) = space.engines.values()
    return {name: p.default for name, p in choice.params.items()}


def workloads(space: Space) -> list:
    w = space.workload
    screen_prompts = space.fidelity.screen_prompts if space.fidelity else max(1, w.num_prompts // 4)
    out = [w.model_copy(update={"name": "screen", "num_prompts": screen_prompts})]
    out += [w.model_copy(update={"name": f"full-{i}", "seed": w.seed + i})
            for i in range(1, FULL_REPEATS + 1)]
    return out


def measure(space: Space, engine: str, knobs: dict, work_dir: Path) -> dict:
    """One launch: the screen and the full repeats on one server, with their wall times."""
    (choice,) = space.engines.values()
    marks: list[tuple[str, float]] = []
    load_before = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    for attempt in range(2):
        marks.clear()
        t0 = time.monotonic()
        try:
            outcome = run_trial(space, engine, {**knobs, **choice.fixed}, work_dir,
                                workloads=workloads(space),
                                on_phase=lambda p: marks.append((p, time.monotonic() - t0)))
            break
        except HarnessError as exc:  # a port race: the tuner retries these, so do we
            print(f"  harness error ({exc}); retrying", flush=True)
            if attempt:
                raise
    launch = {
        "started": started,
        "ok": outcome.ok,
        "engine_version": outcome.engine_version,
        "timings": {k: round(v, 3) for k, v in outcome.timings.items()},
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "client_saturated": outcome.client_saturated,
    }
    if outcome.failure:
        launch["failure_class"] = outcome.failure.failure_class
        launch["failure_reason"] = outcome.failure.reason
        launch["time_to_fail_s"] = round(outcome.timings.get("total_s", time.monotonic() - t0), 3)
    # Wall time of each benchmark: from its "benchmarking <name>" mark to the next mark.
    bench_s = {}
    for (phase, t), (_, t_next) in zip(marks, marks[1:]):
        if phase.startswith("benchmarking "):
            bench_s[phase.split(" ", 1)[1]] = round(t_next - t, 3)
    runs = {}
    for name, metrics in outcome.workload_metrics.items():
        runs[name] = {"value": metrics.get(space.objective.metric),
                      "seconds": bench_s.get(name),
                      "metrics": {k: metrics[k] for k in KEPT_METRICS if k in metrics},
                      **bench_extras(work_dir / f"bench-{name}.json")}
    launch["screen"] = runs.pop("screen", None)
    launch["full"] = [runs[f"full-{i}"] for i in range(1, FULL_REPEATS + 1) if f"full-{i}" in runs]
    return launch


def bench_extras(path: Path) -> dict:
    """CPU telemetry of one benchmark (from its result JSON): the engine's CPU-seconds and the
    tokens per engine CPU-second, a measure of the config that machine contention moves less than
    wall-clock throughput does."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    cpu = ((doc.get("telemetry") or {}).get("cpu") or {})
    duration = (doc.get("telemetry") or {}).get("duration_s")
    engine_pct = (cpu.get("engine_cpu_pct") or {}).get("mean")
    machine_pct = (cpu.get("machine_cpu_pct") or {}).get("mean")
    out: dict = {"telemetry": {"engine_cpu_pct_mean": engine_pct, "machine_cpu_pct_mean": machine_pct,
                               "duration_s": duration}}
    tokens = (doc.get("total_input_tokens") or 0) + (doc.get("total_output_tokens") or 0)
    if engine_pct and duration:
        cpu_s = engine_pct / 100 * duration
        out["engine_cpu_s"] = round(cpu_s, 3)
        out["tokens_per_engine_cpu_s"] = round(tokens / cpu_s, 1) if cpu_s > 0 else None
    return out


def attach_telemetry(data: dict, work: Path) -> int:
    """Add bench_extras to launches measured before they were recorded inline."""
    n = 0
    for point in data["points"]:
        tag = "_".join(str(v) for v in point["params"].values())
        for no, launch in enumerate(point["launches"]):
            runs = ([("screen", launch["screen"])] if launch.get("screen") else []) + [
                (f"full-{i + 1}", r) for i, r in enumerate(launch.get("full", []))]
            for name, run in runs:
                if "telemetry" not in run:
                    run.update(bench_extras(work / f"{tag}_{no}" / f"bench-{name}.json"))
                    n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default=str(DEFAULT_SPACE))
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--work-dir", default="/tmp/tuner-measure-grid",
                    help="trial dirs (server logs, bench JSONs); not kept in the repo")
    ap.add_argument("--relaunch", type=int, default=3,
                    help="configs launched a second time at the end (relaunch noise)")
    ap.add_argument("--seed", type=int, default=0, help="order of the configs (shuffled)")
    ap.add_argument("--passes", type=int, default=1,
                    help="launch every config this many times (pass 2 runs in reverse order, so "
                         "a linear drift of the machine cancels); the --relaunch configs count "
                         "their relaunch as their pass-2 launch")
    ap.add_argument("--resume", action="store_true", help="keep the launches already in --out")
    ap.add_argument("--attach-telemetry", action="store_true",
                    help="only add CPU telemetry from --work-dir to the launches in --out")
    args = ap.parse_args(argv)
    if args.attach_telemetry:
        data = json.loads(Path(args.out).read_text())
        print(f"attached telemetry to {attach_telemetry(data, Path(args.work_dir))} benchmarks")
        _write(Path(args.out), data)
        return 0

    signal.signal(signal.SIGTERM, _interrupt)  # stop cleanly: run_trial tears the engine down
    space = load_space(args.space)
    engine, points = grid_points(space)
    order = list(range(len(points)))
    random.Random(args.seed).shuffle(order)  # machine drift must not line up with a knob
    default = defaults_point(space)
    # Relaunched: the defaults point plus random others (chosen before any result is known).
    others = [i for i in order if points[i] != default]
    relaunch = ([points.index(default)] if default in points else []) + others[:args.relaunch]
    relaunch = relaunch[:args.relaunch]
    plan = [(i, 0) for i in order] + [(i, 1) for i in relaunch]
    for p in range(1, args.passes):  # later passes: every config again, odd passes reversed
        plan += [(i, p) for i in (order[::-1] if p % 2 else order)]

    out = Path(args.out)
    data = json.loads(out.read_text()) if args.resume and out.exists() else None
    if data is not None:
        data["meta"]["passes"] = max(args.passes, data["meta"].get("passes", 1))
    if data is None:
        env = environment()
        data = {
            "meta": {
                "what": "full grid of the replay space, measured once with the real engine",
                "space_file": os.path.relpath(args.space, HERE.parent),
                "space": space.model_dump(mode="json"),
                "engine": engine,
                "engine_version": None,
                "objective": space.objective.metric,
                "direction": space.objective.direction,
                "workloads": [w.model_dump(mode="json") for w in workloads(space)],
                "method": (
                    "one launch per grid point via tuner.trial_runner.run_trial, then on that "
                    "server: screen (fidelity.screen_prompts prompts, the workload's seed), then "
                    f"{FULL_REPEATS} full benchmarks (seeds seed+1..seed+{FULL_REPEATS}); configs "
                    f"in a shuffled order (seed {args.seed}); {len(relaunch)} configs relaunched "
                    "at the end. seconds = wall time of each benchmark on the live server; "
                    "timings.ready_s = launch to ready; timings.teardown_s = stop."),
                "machine": {"host": platform.node(), "cpu": env.get("cpu"),
                            "cores": psutil.cpu_count(), "memory_gib":
                                round(psutil.virtual_memory().total / 2**30, 1),
                            "device": env.get("device"), "python": platform.python_version()},
                "shared_machine": ("the CPU was shared with other engineers' tests (other vLLM "
                                   "servers and pytest runs): see loadavg_before/after per launch"),
                "date_started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "date_finished": None,
                "order_seed": args.seed,
                "passes": args.passes,
            },
            "knobs": list(points[0]),
            "defaults": default,
            "points": [{"params": p, "launches": []} for p in points],
        }
    work = Path(args.work_dir)
    t_start = time.monotonic()
    for n, (i, relaunch_no) in enumerate(plan):
        point = data["points"][i]
        if len(point["launches"]) > relaunch_no:
            continue
        if len(point["launches"]) < relaunch_no:
            sys.exit(f"{point['params']}: launch {relaunch_no} planned before launch "
                     f"{len(point['launches'])}; the data file does not match this plan")
        label = " ".join(f"{k}={v}" for k, v in point["params"].items())
        print(f"[{n + 1}/{len(plan)}] {label}{f' (launch {relaunch_no + 1})' if relaunch_no else ''} "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        tag = "_".join(str(v) for v in point["params"].values()) + f"_{relaunch_no}"
        try:
            launch = measure(space, engine, point["params"], work / tag)
        except KeyboardInterrupt:
            print("interrupted: the data file has every finished launch (--resume continues)")
            return 130
        point["launches"].append(launch)
        data["meta"]["engine_version"] = data["meta"]["engine_version"] or launch["engine_version"]
        full = [r["value"] for r in launch["full"]]
        print(f"    ok={launch['ok']} {launch.get('failure_class', '')} timings={launch['timings']} "
              f"screen={launch['screen'] and round(launch['screen']['value'])} "
              f"full={[round(v) for v in full if v is not None]} "
              f"bench_s={[r['seconds'] for r in launch['full']]} "
              f"elapsed {time.monotonic() - t_start:.0f}s", flush=True)
        _write(out, data)
    data["meta"]["date_finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    _write(out, data)
    print(f"done: {out}")
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
