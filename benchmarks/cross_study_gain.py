"""One config of one exported study against a config of another: the change with the interval
`tune best` gives within a study (`tuner.report.stats.change`: ratio of geometric means, 95 %
interval from Welch's t on the log values, none below 3 runs a side).

Why: each H200 stay is one study on its own machine, and a pick confirmed in one stay has to be
judged against baselines repeated in another (docs/results/h200-engines.md, third stay). The
interval then also carries the machine-to-machine difference, which the page states.

A config is named ARCHIVE:TRIAL, the trial number of any launch of it; all launches of that config
in the study (its `tune confirm` repeats) are its runs.

    PYTHONPATH=. .venv/bin/python benchmarks/cross_study_gain.py \\
        docs/results/h200-vllm.tar.gz:5 docs/results/h200-engines-prior.tar.gz:0 \\
        docs/results/h200-engines-prior.tar.gz:1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import optuna

from tuner.errors import InputError
from tuner.record import results
from tuner.record.results import ConfigStats
from tuner.record.transfer import import_study
from tuner.report.stats import change


def config_of(spec: str, tmp: Path) -> tuple[str, ConfigStats]:
    """The runs of the config that trial TRIAL of the archive launched."""
    archive, _, number = spec.rpartition(":")
    if not archive or not number.isdigit():
        raise InputError(f"{spec!r}: name a config as ARCHIVE:TRIAL")
    folder = tmp / str(len(list(tmp.iterdir())))
    folder.mkdir()
    name, url = import_study(Path(archive), lambda n: f"sqlite:///{folder}/{n}.db")
    study = optuna.load_study(study_name=name, storage=url)
    for group in results.group_configs(study):
        if int(number) in (t.number for t in group.trials):
            return f"{name} trial {number} ({group.arm}, n={group.n})", group
    raise InputError(f"{spec!r}: trial {number} is no feasible launch of study {name!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("best", help="ARCHIVE:TRIAL of the config to judge")
    ap.add_argument("bases", nargs="+", help="ARCHIVE:TRIAL of each config to judge it against")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            label, best = config_of(args.best, Path(tmp))
            print(f"{label}: median {best.median:,.1f}")
            for spec in args.bases:
                base_label, base = config_of(spec, Path(tmp))
                c = change(base.values, best.values)
                print(f"  vs {base_label}: {c.base:,.1f} -> {c.best:,.1f} ({c.means}), {c.describe()}")
        except InputError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    main()
