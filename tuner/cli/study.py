"""`tune start`, `tune resume` and `tune confirm`: run a study's trials with progress on the terminal,
then print its best config."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Optional

import optuna
import sqlalchemy.exc
import typer

from tuner import study as study_mod
from tuner.cli import ops
from tuner.cli.common import console, err, fail, url
from tuner.cli.progress import study_progress
from tuner.cli.results import print_best
from tuner.errors import HarnessError, InputError
from tuner.record import schema
from tuner.record.storage import default_url, load_optuna_study, study_names
from tuner.space import load_space, overridden


class Backend(str, enum.Enum):
    local = "local"
    ray = "ray"


BACKEND_HELP = "local (one trial at a time, here) or ray (one trial per free GPU slot of a Ray cluster)."
TIMEOUT_HELP = ("Seconds this run may take (default: the space's budget.timeout_s): no trial starts "
                "that the study's typical trial would carry past them; the study stops cleanly.")


def run_with_progress(handle: study_mod.StudyHandle, n_trials: Optional[int], backend: Backend = Backend.local,
                      address: Optional[str] = None, max_concurrent: Optional[int] = None,
                      timeout_s: Optional[float] = None) -> None:
    total = n_trials or handle.study.user_attrs.get(schema.N_TRIALS) or handle.space.budget.n_trials
    with study_progress(handle, total) as reporter:
        try:
            options = ({"address": address, "max_concurrent": max_concurrent}
                       if backend == Backend.ray else {})
            study_mod.run(handle, executor=backend.value, n_trials=n_trials, reporter=reporter,
                          timeout_s=timeout_s, **options)
        except KeyboardInterrupt:
            reporter.progress.stop()
            err.print(f"[yellow]interrupted.[/] Engine stopped; completed trials are saved. "
                      f"Continue with: tune resume {handle.name}"
                      + (f" --storage {handle.url}" if handle.url != default_url(handle.name) else ""),
                      soft_wrap=True)
            raise typer.Exit(130)
        except HarnessError as exc:
            fail(str(exc), 1)
        except InputError as exc:
            fail(str(exc))
        except Exception as exc:
            cause = _storage_cause(exc)
            if cause is None:
                raise
            reporter.progress.stop()
            fail(f"the study storage {handle.url} became unavailable ({type(cause).__name__}: "
                  f"{str(cause).strip().splitlines()[0] if str(cause).strip() else cause!r}). The "
                  f"engine was stopped and completed trials are saved; once the storage is back, "
                  f"continue with: tune resume {handle.name} --storage {handle.url}", 1)


def _storage_cause(exc: BaseException) -> BaseException | None:
    """The database error behind ``exc``, if any: when the storage fails mid-trial, Optuna's own
    bookkeeping can fail on top of it, and the first error is the one that explains."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError)):
            return getattr(exc, "orig", None) or exc
        exc = exc.__cause__ or exc.__context__
    return None


def _resolve_study_name(space_name: str, storage: Optional[str]) -> str:
    name, n = space_name, 1
    while True:
        if name not in study_names(url(storage, name)):
            return name
        n += 1
        name = f"{space_name}-{n}"


def _warm_start_studies(spec: Optional[str]) -> list[tuple[str, optuna.Study]]:
    out = []
    for item in filter(None, (x.strip() for x in (spec or "").split(","))):
        name, _, where = item.partition("@")
        out.append((name, load_optuna_study(name, url(where or None, name))))
    return out


def start(
    space: str = typer.Option(..., "--space", "-s", help="Space name (bundled, or ./search_spaces/NAME.yaml) or a YAML path."),
    study: Optional[str] = typer.Option(None, help="Study name (default: the space's name, made unique). "
                                        "An existing study of the same space is joined as one more worker."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", "-n", min=1, help="Trials to finish (default: the space's budget)."),
    timeout_s: Optional[float] = typer.Option(None, "--timeout-s", min=1, help=TIMEOUT_HELP),
    backend: Backend = typer.Option(Backend.local, help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: start a local one; 'auto' to attach)."),
    max_concurrent: Optional[int] = typer.Option(None, min=1, help="Ray: trials at once (default: the cluster's GPUs, or 1)."),
    engine_image: list[str] = typer.Option([], "--engine-image", help="ENGINE=IMAGE: run that engine "
                                           "from this image (repeatable)."),
    engine_command: list[str] = typer.Option([], "--engine-command", help="ENGINE=PATH: run that engine "
                                             "from this host binary instead of its image (repeatable)."),
    warm_start: Optional[str] = typer.Option(None, "--warm-start", help="Earlier studies to learn from "
                                             "(comma-separated names; NAME@URL for another storage): their "
                                             "best configs run first and their measurements steer the search."),
    prior_file: Optional[Path] = typer.Option(None, "--prior-file", help="The space's model predictions, saved "
                                              "where the model is installed (`tune plan --save-prior FILE`): "
                                              "used instead of asking the model here."),
    no_prior: bool = typer.Option(False, "--no-prior", help="Leave the space's prior: out (no model "
                                  "predictions, no model pick): a control for a study with it."),
) -> None:
    """Start a new study on SPACE and run it."""
    sp = overridden(load_space(space), engine_image, engine_command)
    ops.preflight(sp)
    name = study or _resolve_study_name(sp.name, storage)
    where = url(storage, name)
    handle = study_mod.create(sp, name, where, join=study is not None,
                              warm_start=_warm_start_studies(warm_start), prior_file=prior_file,
                              use_prior=not no_prior)
    console.print(f"study [bold]{name}[/] on space [bold]{sp.name}[/]  storage {where}", highlight=False)
    run_with_progress(handle, n_trials, backend, address, max_concurrent, timeout_s)
    print_best(handle)


def resume(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", "-n", min=1, help="New total of finished trials."),
    timeout_s: Optional[float] = typer.Option(None, "--timeout-s", min=1, help=TIMEOUT_HELP),
    new_hardware: bool = typer.Option(False, "--new-hardware", help="On different hardware: start a linked "
                                      "study warm-started from this one's best configs instead of refusing."),
    backend: Backend = typer.Option(Backend.local, help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: start a local one; 'auto' to attach)."),
    max_concurrent: Optional[int] = typer.Option(None, min=1, help="Ray: trials at once (default: the cluster's GPUs, or 1)."),
) -> None:
    """Continue a study: clean up after a crash, retry interrupted trials, finish the budget."""
    handle = study_mod.load(study, url(storage, study))
    changed = study_mod.fingerprint_mismatch(handle)
    if changed and not new_hardware:
        diff = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
        raise InputError(f"study {study!r} was measured on other hardware ({diff}); mixing "
                         "measurements would make them incomparable. Use --new-hardware to "
                         "start a linked study warm-started from its best configs")
    if changed:
        handle = study_mod.link_new_hardware(handle)
        console.print(f"different hardware: continuing in linked study [bold]{handle.name}[/]",
                      highlight=False)
    if n_trials:
        handle.study.set_user_attr(schema.N_TRIALS, n_trials)
    run_with_progress(handle, n_trials, backend, address, max_concurrent, timeout_s)
    print_best(handle)


def confirm(
    study: str = typer.Argument(..., help="Study name."),
    top_k: int = typer.Option(3, min=1, help="How many of the best searched configs to repeat."),
    repeats: int = typer.Option(2, min=1, help="Extra launches of each (and of each baseline); "
                                "an interval needs 3 runs a side."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL."),
) -> None:
    """Re-launch the top configs and the baselines to measure noise; `tune best` then reports
    medians and, from 3 runs a side, a 95 % interval of each change."""
    handle = study_mod.load(study, url(storage, study))
    added = study_mod.enqueue_repeats(handle, top_k=top_k, repeats=repeats)
    console.print(f"queued {added} repeat launches", highlight=False)
    run_with_progress(handle, None)
    print_best(handle)


def register(app: typer.Typer) -> None:
    """Add ``tune start``, ``tune resume`` and ``tune confirm`` to the CLI."""
    app.command("start")(start)
    app.command("resume")(resume)
    app.command("confirm")(confirm)
