"""Wall clock to the same best value, for studies of one space run different ways (for example one
process over both GPUs, or one worker per GPU on one journal file).

The best values differ between runs, so "which was faster" needs one target both reached: the worse
of the studies' best served values. For each study, the seconds from its first trial's start to the
end of the first served trial at least that good. Repeats from `tune confirm` (arm ``search`` only
counts) and trials answered without a launch are left out: they measured nothing new.

Run:  python -m benchmarks.time_to_best NAME@STORAGE_URL NAME@STORAGE_URL [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from tuner.record import schema
from tuner.record.storage import open_storage


def served(study: optuna.Study) -> list[FrozenTrial]:
    """Launched trials that served within every constraint, in the order they finished."""
    trials = [t for t in study.get_trials(deepcopy=False)
              if schema.status(t) == "ok" and schema.launched(t) and schema.REPEAT_OF not in
              t.user_attrs and t.datetime_complete is not None]
    return sorted(trials, key=lambda t: t.datetime_complete)


def compare(studies: dict[str, optuna.Study]) -> dict:
    """Each study's best, and its seconds to the value every study reached."""
    directions = {s.direction for s in studies.values()}
    if len(directions) != 1:
        raise SystemExit("the studies optimise in different directions")
    maximize = directions.pop() == StudyDirection.MAXIMIZE
    runs = {name: served(s) for name, s in studies.items()}
    empty = [name for name, trials in runs.items() if not trials]
    if empty:
        raise SystemExit(f"no served trial in {', '.join(empty)}: nothing to compare")
    best = {name: (max if maximize else min)(t.value for t in trials) for name, trials in runs.items()}
    target = (min if maximize else max)(best.values())
    out: dict = {"target": target, "direction": "maximize" if maximize else "minimize", "studies": {}}
    for name, study in studies.items():
        start = min(t.datetime_start for t in study.get_trials(deepcopy=False) if t.datetime_start)
        first = next(t for t in runs[name] if (t.value >= target if maximize else t.value <= target))
        out["studies"][name] = {
            "best": best[name], "served": len(runs[name]),
            "launched": sum(1 for t in study.get_trials(deepcopy=False) if schema.launched(t)
                            and t.datetime_complete is not None),
            "reached_by_trial": first.number, "knobs": first.user_attrs.get(schema.KNOBS),
            "seconds_to_target": (first.datetime_complete - start).total_seconds()}
    return out


def _load(spec: str) -> tuple[str, optuna.Study]:
    name, sep, url = spec.partition("@")
    if not sep or not url:
        raise SystemExit(f"{spec!r}: expected NAME@STORAGE_URL")
    return name, optuna.load_study(study_name=name, storage=open_storage(url))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="+", help="NAME@STORAGE_URL (journal://PATH, sqlite:///PATH)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = compare(dict(_load(s) for s in args.studies))
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
