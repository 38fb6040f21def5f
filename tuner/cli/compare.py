"""``tune compare`` and ``tune gap``: read one study against another study, or against the
performance model's predictions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tuner.cli.common import console, study_and_trial, url
from tuner.engines.hardware import profile
from tuner.estimate import get_estimator
from tuner.files import write_output
from tuner.report.compare import compare
from tuner.report.gap import gap, predicted_rows
from tuner.study.lifecycle import load


def compare_command(
    pick: str = typer.Argument(..., help="STUDY (its best config) or STUDY:TRIAL."),
    against: list[str] = typer.Argument(..., help="OTHER (its baselines) or OTHER:TRIAL, one or more."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL holding every study (default: sqlite:///studies/<study>.db each)."),
) -> None:
    """A config of one study against configs of other studies: the change of medians with its interval."""
    best, gains = compare(*study_and_trial(pick, storage), [study_and_trial(s, storage) for s in against])
    console.print(f"{best.label}: median {best.stats.median:,.1f}", highlight=False)
    for base, g in gains:
        console.print(f"  vs {base.label}, median {base.stats.median:,.1f}: {g.describe()}", highlight=False)
    console.print("[dim]the studies ran apart: the interval also holds the difference between their machines[/]")


def gap_command(
    studies: list[str] = typer.Argument(..., help="Study name; several pool their measurements "
                                        "(one config launched in several is one row)."),
    gpu: str = typer.Option(..., "--gpu", help="Hardware profile the study measured on (e.g. h200-141gb; `tune plan --help` lists them)."),
    estimator: str = typer.Option("aiconfigurator", help="Performance model to check."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the rows and the gap as JSON."),
) -> None:
    """The performance model's predictions against the study's measurements: bias, spread, rank order."""
    handles = [load(study, url(storage, study)) for study in dict.fromkeys(studies)]
    rows = predicted_rows(handles, get_estimator(estimator), profile(gpu))
    found = gap(rows)
    metric = handles[0].space.objective.name
    console.print(f"{metric} per measured config (median of its launches) and {estimator}'s prediction:")
    for r in rows:
        knobs = ", ".join(f"{k}={v}" for k, v in r.knobs.items()) or "(defaults)"
        said = f"predicted {r.predicted:,.1f}, ratio {r.measured / r.predicted:.3f}" if r.predicted else f"no prediction: {r.unsupported}"
        console.print(f"  {r.engine} {r.arm} (n={len(r.runs)}) {knobs}: measured {r.measured:,.1f}, {said}",
                      highlight=False, soft_wrap=True)
    for engine, g in found.items():
        if not g["n"]:
            console.print(f"{engine}: no config with a prediction (a missing model folder is made by "
                          "`tune model tiny PATH --shape NAME --no-weights`)", highlight=False)
            continue
        sigma = f"{g['sigma_log']:.3f}" if g["sigma_log"] is not None else "- (n < 2)"
        rho = f"{g['spearman_rho']:+.2f}" if g["spearman_rho"] is not None else "- (n < 3)"
        step = g["fp8_step"]
        step = f", FP8 step measured {step['measured']:.3f} predicted {step['predicted']:.3f}" if step else ""
        console.print(f"{engine}: n={g['n']} bias (measured/predicted) {g['bias']:.3f}, "
                      f"sigma of log ratio {sigma}, Spearman rho {rho}{step}", highlight=False)
        within = ", ".join(f"{q} {w['spearman_rho']:+.2f} (n={w['n']})" if w["spearman_rho"] is not None
                           else f"{q} - (n={w['n']})" for q, w in g["within_quantization"].items())
        console.print(f"  Spearman rho within each quantization: {within}", highlight=False)
    if out is not None:
        doc = {"studies": [h.name for h in handles], "gpu": gpu, "estimator": estimator, "metric": metric, "gap": found,
               "configs": [{**r.__dict__, "measured": r.measured} for r in rows]}
        write_output(out, json.dumps(doc, indent=2) + "\n", "--out")


def register(app: typer.Typer) -> None:
    """Add ``tune compare`` and ``tune gap`` to the CLI."""
    app.command("compare")(compare_command)
    app.command("gap")(gap_command)
