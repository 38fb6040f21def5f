"""The max-load search over several workloads, replayed on an exported study's recorded runs: the
benchmark runs, and their seconds, that each trial's search takes as tune searches now
(`tuner.trial.load_search`: one bisection on the load, each load run until a workload misses),
against what the trial recorded, and whether the value stays the same.

A run the trial did not record (a workload at a load its own search never tried) is inferred from
the recorded ones by monotonicity: it meets the SLOs where a higher load of that workload met
them, and misses where a lower one missed; its seconds are the median of that workload's recorded
runs, and the output counts such runs. A run that cannot be inferred ends that trial's replay.

    python -m benchmarks.load_search_replay EXPORT.tar.gz --out replay.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from functools import partial
from pathlib import Path

from tuner.errors import InputError
from tuner.record import schema
from tuner.record.slo import met
from tuner.record.storage import trial_dir
from tuner.record.transfer import import_study
from tuner.space import MaxLoad
from tuner.study import lifecycle
from tuner.trial.load_search import EveryWorkload, find_max_load


class Unrecorded(Exception):
    """A run the recorded ones do not decide."""


def recorded_runs(folder: Path, knob: str) -> dict[str, dict[float, dict]]:
    """Each workload's recorded runs by load: the benchmark result files a max-load trial wrote
    (bench-WORKLOAD-KNOB-LOAD.json, flat as `vllm bench serve` writes them)."""
    runs: dict[str, dict[float, dict]] = {}
    for path in folder.glob(f"bench-*-{knob}-*.json"):
        workload, _, load = path.stem[len("bench-"):].rpartition(f"-{knob}-")
        runs.setdefault(workload, {})[float(load)] = json.loads(path.read_text())
    return runs


def replay_trial(runs: dict[str, dict[float, dict]], scales: dict[str, float], slos: dict,
                 ml: MaxLoad) -> dict:
    """The trial's search as tune runs it now, answered from ``runs``."""
    inferred = 0

    def measure(workload: str, load: float) -> dict:
        nonlocal inferred
        mine = runs.get(workload, {})
        if load in mine:
            return mine[load]
        above = [m for at, m in sorted(mine.items()) if at >= load and met(m, slos)]
        below = [m for at, m in sorted(mine.items(), reverse=True) if at <= load and not met(m, slos)]
        if not above and not below:
            raise Unrecorded(f"{workload} at {load:g}")
        inferred += 1
        seconds = statistics.median(m["duration"] for m in mine.values())
        return {**(above[0] if above else below[0]), "duration": seconds}

    every = EveryWorkload({w: partial(measure, w) for w in scales}, scales, slos)
    try:
        best, _ = find_max_load(every, low=ml.low, high=ml.high, probes=ml.probes, slos=slos,
                                integer=False)
    except Unrecorded as exc:
        return {"replayed": None, "undecided_run": str(exc)}
    return {"replayed": {"value": best, "runs": len(every.runs), "inferred_runs": inferred,
                         "run_seconds": round(sum(p.metrics["duration"] for _, p in every.runs), 1)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archive", type=Path, help="a `tune export` archive of a max-load study")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            name, url = import_study(args.archive, lambda n: f"sqlite:///{tmp}/{n}.db")
        except InputError as exc:
            ap.error(str(exc))
        handle = lifecycle.load(name, url)
        ml, slos = handle.space.objective.max_load, handle.space.objective.slos
        scales = {w.name: w.load_scale for w in handle.space.all_workloads()}
        trials = []
        for t in handle.study.trials:
            if not t.user_attrs.get(schema.LOAD_CURVE) or t.value is None:
                continue
            runs = recorded_runs(trial_dir(url, name, t.number), ml.knob)
            trials.append({"trial": t.number, "arm": t.user_attrs.get(schema.ARM),
                           "recorded": {"value": t.value, "runs": sum(map(len, runs.values())),
                                        "run_seconds": round(sum(m["duration"] for r in runs.values()
                                                                 for m in r.values()), 1)},
                           **replay_trial(runs, scales, slos, ml)})
    args.out.write_text(json.dumps({"study": name, "archive": str(args.archive), "trials": trials},
                                   indent=2) + "\n")
    for t in trials:
        r, p = t["recorded"], t["replayed"]
        now = (f"replayed {p['value']:g} with {p['runs']} runs ({p['inferred_runs']} inferred), "
               f"{p['run_seconds']:g} s" if p else f"replay undecided at {t['undecided_run']}")
        print(f"trial {t['trial']} ({t['arm']}): recorded {r['value']:g} with {r['runs']} runs, "
              f"{r['run_seconds']:g} s; {now}")


if __name__ == "__main__":
    main()
