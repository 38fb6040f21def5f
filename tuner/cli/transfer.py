"""`tune export` and `tune import`: move a study with its trials, artifacts and logs between machines."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tuner import study as study_mod
from tuner.cli.common import console, url
from tuner.record import schema


def export_cmd(
    study: str = typer.Argument(..., help="Study name."),
    file: Path = typer.Argument(..., help="Archive to write (.tar.gz)."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL."),
    force: bool = typer.Option(False, "--force", help="Replace FILE if it exists."),
) -> None:
    """Write a study with its trials, attrs, artifacts and logs to one archive."""
    from tuner.record.transfer import export_study
    out = export_study(study, url(storage, study), file, force=force)
    console.print(f"exported {study} to {out}", highlight=False)


def import_cmd(
    file: Path = typer.Argument(..., help="Archive written by `tune export`."),
    name: Optional[str] = typer.Option(None, help="Import under another study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
) -> None:
    """Import an exported study; continue it with `tune resume`."""
    from tuner.record.transfer import import_study
    target, where = import_study(file, lambda n: url(storage, n), name=name)
    retry = schema.awaiting_retry(study_mod.load(target, where).study.get_trials(deepcopy=False))
    again = f" ({len(retry)} interrupted or failed trials run again)" if retry else ""
    console.print(f"imported study [bold]{target}[/] into {where}; continue with: tune resume {target}{again}",
                  highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``tune export`` and ``tune import`` to the CLI."""
    app.command("export")(export_cmd)
    app.command("import")(import_cmd)
