"""The performance model's reality gap pooled over several exported studies (`tune gap` gives it
for one study): per engine the bias (geometric mean of measured / predicted), the spread sigma of
log(measured / predicted) between configs, Spearman's rho, and online FP8's step, over every
study (one row per config, as `tune gap STUDY...` pools studies) and per study.

A study's space names its model as a local folder; a folder with the model's config.json must
exist here for the model to predict (`tune model tiny PATH --shape NAME --no-weights` writes one).

    python -m benchmarks.calibrate ARCHIVE.tar.gz [ARCHIVE.tar.gz ...] --gpu h200-141gb --out gap.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from tuner.engines.hardware import profile
from tuner.estimate import get_estimator
from tuner.errors import InputError
from tuner.record.transfer import import_study
from tuner.report.gap import Row, gap, predicted_rows
from tuner.study import lifecycle


def of_study(rows: list[Row], name: str) -> list[Row]:
    """The pooled rows cut to one study's launches (``Row.trials`` are STUDY:TRIAL), each with
    the prediction made once for the pool."""
    out = []
    for r in rows:
        mine = [(t, v) for t, v in zip(r.trials, r.runs) if t.rpartition(":")[0] == name]
        if mine:
            out.append(replace(r, trials=[t for t, _ in mine], runs=[v for _, v in mine]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archives", type=Path, nargs="+", help="`tune export` archives")
    ap.add_argument("--gpu", required=True, help="the hardware profile the studies ran on (e.g. h200-141gb)")
    ap.add_argument("--estimator", default="aiconfigurator")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            estimator, hardware = get_estimator(args.estimator), profile(args.gpu)
            handles = [lifecycle.load(*import_study(archive, lambda n: f"sqlite:///{tmp}/{n}.db"))
                       for archive in args.archives]
            rows = predicted_rows(handles, estimator, hardware)   # a config in several studies: one row
        except InputError as exc:
            ap.error(str(exc))
    by_study = {h.name: of_study(rows, h.name) for h in handles}
    doc = {"studies": list(by_study), "gpu": args.gpu, "estimator": args.estimator, "gap": gap(rows),
           "by_study": {name: gap(found) for name, found in by_study.items()},
           "configs": [{"study": name, **r.__dict__, "measured": r.measured}
                       for name, found in by_study.items() for r in found]}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for source, by_engine in [("all", doc["gap"]), *doc["by_study"].items()]:
        for engine, g in by_engine.items():
            print(f"{source} {engine}: n={g['n']} bias={g['bias']} sigma_log={g['sigma_log']} "
                  f"rho={g['spearman_rho']} fp8_step={g['fp8_step']}")


if __name__ == "__main__":
    main()
