"""`tune doctor`, `tune data` and `tune deploy`: before a study spends GPU time, and after it found a
winner. The checks, downloads and renderers live in tuner.doctor, tuner.downloads and tuner.deploy."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from tuner import deploy as deploy_mod
from tuner import doctor as doctor_mod
from tuner import downloads
from tuner.cli.common import console, err, fail, url
from tuner.errors import InputError
from tuner.files import write_output
from tuner.record import results
from tuner.space import load_space
from tuner.study import load

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def print_rows(rows: list[doctor_mod.Row], title: str) -> None:
    table = Table(title=title, title_justify="left")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.check, f"[{_STYLE[r.status]}]{r.status}[/]", escape(r.detail), escape(r.fix))
    console.print(table)


def preflight(space) -> None:  # noqa: ANN001 - a Space
    """`tune start`'s cheap part of the doctor: stop before the study exists when it cannot run."""
    rows = doctor_mod.run_checks(space, cheap_only=True)
    if doctor_mod.failed(rows):
        print_rows([r for r in rows if r.status == "fail"], "the study cannot run here")
        fail(f"`tune doctor --space {space.name}` lists every check; fix the failing ones first")


def doctor(
    space: Optional[str] = typer.Option(None, "--space", "-s", help="Check what this space needs "
                                        "(default: the host's GPUs, container runtime and ports)."),
) -> None:
    """Check GPUs, container runtime, engines, model, datasets, disk and ports before any GPU time is spent."""
    sp = load_space(space) if space else None
    rows = doctor_mod.run_checks(sp)
    print_rows(rows, f"tune doctor{' --space ' + sp.name if sp else ''}")
    if doctor_mod.failed(rows):
        raise typer.Exit(1)


def data(
    name: str = typer.Argument(..., help=f"Dataset: {', '.join(downloads.DATASETS)}."),
    folder: Optional[Path] = typer.Option(None, "--dir", help="Put the file here (default: the HF "
                                          "cache, linked from $TUNER_DATA where spaces name it)."),
) -> None:
    """Download a dataset a space names from the Hugging Face hub and check its sha256."""
    dataset = downloads.known(name)
    with Progress(*Progress.get_default_columns()[:1], BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=err, transient=True) as bar:
        task = bar.add_task(dataset.file_name, total=None)

        def progress(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        path = downloads.download(dataset, folder, progress=progress)
    console.print(f"{dataset.name}: {path}", highlight=False)


def deploy(
    study: str = typer.Argument(..., help="Study name."),
    trial: Optional[int] = typer.Option(None, "--trial", help="Trial number (default: the best config)."),
    fmt: str = typer.Option("command", "--format", "-f", help=f"{', '.join(deploy_mod.FORMATS)}."),
    port: Optional[int] = typer.Option(None, min=1, max=65535, help="Port (default: the engine's own)."),
    host: str = typer.Option("0.0.0.0", help="Address the engine binds."),
    image: Optional[str] = typer.Option(None, help="Container image for a trial that ran a host command."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
) -> None:
    """Take a config to production: its serve command, a docker compose service or Kubernetes manifests."""
    if fmt not in deploy_mod.FORMATS:
        raise InputError(f"--format {fmt!r}: choose one of {', '.join(deploy_mod.FORMATS)}")
    handle = load(study, url(storage, study))
    if trial is None:
        best = results.best_config(handle.study)
        if best is None:
            raise InputError(f"study {study!r} has no feasible trial to deploy")
        chosen = best.first
    else:
        chosen = next((t for t in handle.study.trials if t.number == trial), None)
        if chosen is None:
            raise InputError(f"study {study!r} has no trial {trial}")
    text = deploy_mod.render(deploy_mod.deployment_from_trial(chosen, handle.space, port=port,
                                                              host=host, image=image), fmt)
    if out is None:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    write_output(out, text, "--out")  # a half-written manifest never takes the file's place
    err.print(f"{fmt} for trial {chosen.number} written to {out}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
    app.command("data")(data)
    app.command("deploy")(deploy)
