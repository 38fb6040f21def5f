"""Soak: a long study on the real vLLM CPU engine, watching the tuner process for leaks.

Runs `tune start` on a 30-trial variant of cpu-smoke (small benchmark per trial) and samples the
tuner's RSS and open file descriptors every few seconds, plus any engine process left between
trials. Writes benchmarks/data/soak-<date>.json and prints a summary for docs/reliability.md.

    .venv/bin/python benchmarks/soak.py [--trials 30] [--prompts 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil
import yaml

from tuner.record import schema

REPO = Path(__file__).resolve().parent.parent
TUNE = Path(sys.executable).parent / "tune"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--interval", type=float, default=2.0)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tuner-soak-"))
    space = yaml.safe_load((REPO / "search_spaces" / "cpu-smoke.yaml").read_text())
    space.update(name="soak", budget={"n_trials": args.trials}, sampler="random")
    space["workload"]["num_prompts"] = args.prompts
    (work / "soak.yaml").write_text(yaml.safe_dump(space))
    env = {**os.environ, "TUNER_STUDIES_DIR": str(work / "studies")}

    t0 = time.monotonic()
    proc = subprocess.Popen([str(TUNE), "start", "--space", str(work / "soak.yaml")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tuner = psutil.Process(proc.pid)
    samples = []
    while proc.poll() is None:
        try:
            with tuner.oneshot():
                samples.append({"t": round(time.monotonic() - t0, 1),
                                "rss_mib": tuner.memory_info().rss / 2**20,
                                "fds": tuner.num_fds(), "threads": tuner.num_threads(),
                                "children": len(tuner.children(recursive=True))})
        except psutil.NoSuchProcess:
            break
        time.sleep(args.interval)
    output = proc.communicate()[0]
    wall = time.monotonic() - t0

    import optuna
    study = optuna.load_study(study_name="soak",
                              storage=f"sqlite:///{work / 'studies' / 'soak.db'}")
    states = {}
    for t in study.trials:
        label = t.user_attrs.get(schema.STATUS) or t.state.name.lower()
        states[label] = states.get(label, 0) + 1
    from tuner.runtime.procgroup import group_members
    # Only this study's engines: other servers may run on the machine at the same time.
    engines_left = [p.pid for t in study.trials if t.user_attrs.get(schema.ENGINE_PGID)
                    for p in group_members(t.user_attrs[schema.ENGINE_PGID])]
    first = samples[len(samples) // 10] if samples else {}
    last = samples[-1] if samples else {}
    result = {
        "date": datetime.now(timezone.utc).isoformat(), "trials": args.trials,
        "prompts_per_trial": args.prompts, "wall_s": round(wall, 1), "exit_code": proc.returncode,
        "trial_states": states, "engines_left_running": engines_left,
        "rss_mib": {"after_10pct": first.get("rss_mib"), "end": last.get("rss_mib"),
                    "max": max(s["rss_mib"] for s in samples) if samples else None},
        "fds": {"after_10pct": first.get("fds"), "end": last.get("fds"),
                "max": max(s["fds"] for s in samples) if samples else None},
        "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30)},
        "samples": samples, "output_tail": output[-3000:],
    }
    out = REPO / "benchmarks" / "data" / f"soak-{datetime.now():%Y%m%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "output_tail")},
                     indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
