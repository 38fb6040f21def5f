"""``tune report STUDY``: write the study's report as one HTML file (or Markdown), atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tuner.cli.common import url
from tuner.record.storage import load_optuna_study
from tuner.report.render import FORMATS, write_report

err = Console(stderr=True)








def report(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="File to write (default: <study>-report.html or .md)."),
    fmt: str = typer.Option("html", "--format", "-f", help="html (one self-contained file with plots) or md (tables only)."),
) -> None:
    """Write a report: what to run, per-workload gains with intervals, plots, failures, environment."""
    FORMATS.get(fmt)  # an unknown format fails before the study is read
    path = write_report(load_optuna_study(study, url(storage, study)), out or Path(f"{study}-report.{fmt}"), fmt)
    err.print(f"report written to {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``tune report`` to the CLI."""
    app.command("report")(report)
