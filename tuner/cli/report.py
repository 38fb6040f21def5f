"""``tune report STUDY``: write the study's report as one HTML file (or Markdown), atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tuner.errors import InputError
from tuner.report.render import load_study, write_report

err = Console(stderr=True)








def report(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="File to write (default: <study>-report.html or .md)."),
    fmt: str = typer.Option("html", "--format", "-f", help="html (one self-contained file with plots) or md (tables only)."),
) -> None:
    """Write a report: what to run, per-workload gains with intervals, plots, failures, environment."""
    try:
        if fmt not in ("html", "md"):
            raise InputError(f"--format {fmt!r}: use html or md")
        path = write_report(load_study(study, storage),
                            out or Path(f"{study}-report.{fmt}"), fmt)  # type: ignore[arg-type]
    except OSError as exc:
        err.print(f"[bold red]error:[/] cannot write {out}: {exc.strerror or exc}", highlight=False)
        raise typer.Exit(2)
    err.print(f"report written to {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``tune report`` to the CLI."""
    app.command("report")(report)
