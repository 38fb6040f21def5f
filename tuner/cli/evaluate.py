"""`tune evaluate`: re-launch the best configs and baselines on other workloads."""

from __future__ import annotations

import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from tuner.cli.common import url
from tuner.report.data import evaluation_rows
from tuner.report.evaluate import EvaluationResult, evaluate, resolve_workloads
from tuner.report.markdown import fmt
from tuner.report.stats import METHOD
from tuner.study.lifecycle import load

console = Console(width=None if sys.stdout.isatty() else 160)


err = Console(stderr=True)


def _print(result: EvaluationResult) -> None:
    table = Table(title=f"baseline {result.summary['baseline']['arm']} (trial "
                        f"{result.baseline.number}) vs trial {result.best.number}: geometric means "
                        f"of {result.repeats} run(s), change with a {METHOD}",
                  title_justify="left")
    for col in ("workload", "metric", "baseline", "best", "change", "n base/best", "failed requests"):
        table.add_column(col, no_wrap=True)
    for row in evaluation_rows(result.summary):
        table.add_row(row.workload, row.label, fmt(row.baseline), fmt(row.best), row.change.text(),
                      f"{row.change.n_base}/{row.change.n_best}", str(row.failed_requests or ""))
    console.print(table)


def evaluate_command(
    study: str = typer.Argument(..., help="Study name."),
    workloads: str = typer.Option(..., "--workloads", "-w", help="from-space, seed-study, a YAML file with evaluation_workloads:, or comma-separated names."),
    repeats: int = typer.Option(3, "--repeats", "-r", min=1, help="Launches per config."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    sharegpt: Optional[str] = typer.Option(None, help="ShareGPT JSON file for the seed-study set."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", min=1, help="Requests per workload instead of each workload's own (a short run)."),
) -> None:
    """Run the best config and the baseline on more workloads, with repeats, and record the result."""
    try:
        handle = load(study, url(storage, study))
        chosen = resolve_workloads(workloads, handle.space, sharegpt, num_prompts)
        console.print(f"evaluating on {', '.join(w.name for w in chosen)}, {repeats} repeat(s) "
                      "per config", highlight=False)
        result = evaluate(handle, chosen, repeats,
                          on_phase=lambda p: console.print(f"[dim]{p}[/]", highlight=False))
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/] engine stopped; nothing recorded")
        raise typer.Exit(130)
    _print(result)
    for f in result.summary["failures"]:
        console.print(f"[yellow]{f['arm']} repeat {f['repeat']}: {f['failure_class']}[/] "
                      f"{f['reason']}", highlight=False)
    console.print(f"recorded in study {study!r}; `tune report {study}` shows it")


def register(app: typer.Typer) -> None:
    """Add ``tune evaluate`` to the CLI."""
    app.command("evaluate")(evaluate_command)
