"""``tune judge``: the picks of several searches and each engine's defaults, launched again the
same number of times, interleaved, on this machine; then each pick against the others."""

from __future__ import annotations

from typing import Optional

import typer

from tuner.cli.common import console, study_and_trial, url
from tuner.cli.study import TIMEOUT_HELP, run_with_progress
from tuner.errors import InputError
from tuner.record.storage import study_names
from tuner.report.stats import METHOD
from tuner.report import judge as verdict
from tuner.study import judge as judge_mod
from tuner.study.lifecycle import load


def _pick(spec: str, storage: Optional[str]):
    label, sep, where = spec.partition("=")
    if not sep or not label or not where:
        raise InputError(f"{spec!r}: name a pick as LABEL=STUDY or LABEL=STUDY:TRIAL (e.g. greedy=bg-greedy)")
    handle, trial = study_and_trial(where, storage)
    return label, handle, trial


def judge_command(
    name: str = typer.Argument(..., help="The judge's own study (created here; named again alone, its verdict is printed)."),
    picks: Optional[list[str]] = typer.Argument(None, help="LABEL=STUDY (its recommended config) or LABEL=STUDY:TRIAL, one per search."),
    launches: int = typer.Option(3, min=1, help="Launches of each entrant; an interval needs 3."),
    defaults: bool = typer.Option(True, help="Also launch engines at their own defaults (--no-defaults: none)."),
    defaults_of: Optional[list[str]] = typer.Option(None, "--defaults-of", help="Only this engine's defaults (repeatable; default: every engine of the space)."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL holding every study (default: sqlite:///studies/<study>.db each)."),
    timeout_s: Optional[float] = typer.Option(None, "--timeout-s", min=1, help=TIMEOUT_HELP),
) -> None:
    """Launch each search's pick and each engine's defaults LAUNCHES times, round by round, on this
    machine, and print each entrant's value with its interval and each pick against the others."""
    where = url(storage, name)
    if picks:
        if not defaults and defaults_of:
            raise InputError("--no-defaults and --defaults-of: name one")
        space, field_ = judge_mod.entrants([_pick(p, storage) for p in picks],
                                           defaults=(defaults_of or None) if defaults else [])
        handle = judge_mod.create_judge(space, name, where, field_, launches)
        console.print(f"judge {name}: {len(field_)} entrants x {launches} launches, interleaved", highlight=False)
        for e in field_:
            if judge_mod.JOINED in e.label:
                console.print(f"  {e.label.replace(judge_mod.JOINED, ' and ')} picked the same config ({e.origin}): "
                              f"one entrant", highlight=False, soft_wrap=True)
        run_with_progress(handle, None, timeout_s=timeout_s)
    elif name not in study_names(where):
        raise InputError(f"judge study {name!r} does not exist in {where}: name the picks to create it")
    else:
        handle = load(name, where)
    print_verdict(handle.study, storage)


def print_verdict(study, storage: Optional[str] = None) -> None:  # noqa: ANN001 - an Optuna study
    """One line per entrant, then one per pair, then what each pick's search spent; the interval
    method is said once."""
    console.print(f"{study.study_name}: {METHOD}", highlight=False)
    rows = verdict.standings(study)
    for r in rows:
        iv = r.interval
        value = "not measured" if iv.value is None else f"geometric mean {iv.value:,.2f}"
        interval = f"[{iv.low:,.2f}, {iv.high:,.2f}]" if iv.low is not None else f"({iv.note})"
        bracket = f", {b}" if (b := verdict.resolution(r)) else ""
        console.print(f"  {r.label} ({r.origin}): {value} {interval}, n={len(r.values)}{bracket}, "
                      f"refused {r.refused}, {r.seconds / 60:.1f} GPU min", highlight=False, soft_wrap=True)
    for pick, base, c in verdict.head_to_head(rows):
        console.print(f"  {pick.label} vs {base.label}: {c.describe()}", highlight=False, soft_wrap=True)
    for r in rows:
        for name, trial in verdict.origins_of(r):
            _print_search_cost(r.label, name, trial, storage)


def _print_search_cost(label: str, name: str, trial: int, storage: Optional[str]) -> None:
    where = url(storage, name)
    if name not in study_names(where):
        console.print(f"  {label}'s search: study {name!r} is not in this storage (`tune import` it "
                      f"to see what it spent)", highlight=False, soft_wrap=True)
        return
    cost = verdict.search_cost(load(name, where).study, trial)
    found = f"its pick was launch {cost.found_at}" if cost.found_at else "its pick was not launched by it"
    console.print(f"  {label}'s search ({name}): {cost.launches} launches, {cost.gpu_minutes:.1f} GPU min, "
                  f"{cost.refused} refused by the engine, {cost.ruled_out} ruled out before a launch; "
                  f"{found}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``tune judge`` to the CLI."""
    app.command("judge")(judge_command)
