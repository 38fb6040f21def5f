"""``tune report STUDY``: write the study's report as one HTML file (or Markdown), atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal, Optional

import optuna
import typer
from rich.console import Console

from ..storage import default_url, open_storage, study_names
from ..yaml_io import InputError
from . import data as report_data

err = Console(stderr=True)


def render(study: optuna.Study, fmt: Literal["html", "md"]) -> str:
    tables = report_data.build(study)
    if fmt == "md":
        from .markdown import render as render_md
        return render_md(tables)
    from .html import render as render_html
    return render_html(study, tables)


def write_report(study: optuna.Study, out: Path, fmt: Literal["html", "md"] = "html") -> Path:
    """Render and write atomically: a browser reloading or a CI upload never sees half a file."""
    text = render(study, fmt)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def load_study(name: str, storage: str | None) -> optuna.Study:
    url = storage or default_url(name)
    names = study_names(url)
    if name not in names:
        raise InputError(f"no study named {name!r} in {url}; studies there: "
                         f"{', '.join(names) or '(none)'}")
    return optuna.load_study(study_name=name, storage=open_storage(url))


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
    except InputError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except OSError as exc:
        err.print(f"[bold red]error:[/] cannot write {out}: {exc.strerror or exc}", highlight=False)
        raise typer.Exit(2)
    err.print(f"report written to {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``tune report`` to the CLI."""
    app.command("report")(report)
