"""The `tune` command: start, resume and read studies; build the tiny model; benchmark a server."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Optional

import optuna
import sqlalchemy.exc
import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from tuner import deploy as deploy_mod
from tuner import study as study_mod
from tuner.cli import bench as bench_command
from tuner.cli import dashboard, engine, evaluate, ops, plan
from tuner.cli import report as report_command
from tuner.cli.common import App, console, err, fail
from tuner.cli.common import url as _url
from tuner.errors import HarnessError, InputError
from tuner.record import results, schema
from tuner.record.storage import default_url, load_optuna_study, study_names
from tuner.space import load_space, overridden

optuna.logging.set_verbosity(optuna.logging.ERROR)  # the terminal shows progress, not Optuna's log
app = App(add_completion=False, no_args_is_help=True,
                  help="Find the fastest way to serve an LLM on given hardware.")
model_app = typer.Typer(no_args_is_help=True, help="Generate local models for real engine runs.")
app.add_typer(model_app, name="model")


class _ProgressReporter:
    """Terminal progress: trial k/N and the phase; one line per finished trial, nothing else."""

    def __init__(self, progress: Progress, handle: study_mod.StudyHandle, total: int):
        self.progress = progress
        self.handle = handle
        self.label = "starting"
        self.task = progress.add_task(self.label, total=total,
                                      completed=study_mod.finished_count(handle.study))

    def trial_started(self, number: int, index: int, total: int, label: str) -> None:
        self.label = f"trial {number} ({index}/{total})"
        self.progress.update(self.task, description=f"{self.label}: launching")
        self.progress.console.print(f"[dim]trial {number}:[/] {label}", highlight=False)

    def phase(self, phase: str) -> None:
        self.progress.update(self.task, description=f"{self.label}: {phase}")

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]{message}[/]", highlight=False)

    def trial_finished(self, t) -> None:
        label = schema.status(t)
        if label == "ok":
            msg = "[green]ok[/] " + " / ".join(f"{v:,.1f}" for v in t.values)
        elif label == "infeasible":
            msg = (f"[yellow]engine refused[/] {t.user_attrs.get('failure_class')}: "
                   f"{_short(t.user_attrs.get('failure_evidence') or t.user_attrs.get('failure_reason'))}")
        elif label == "slo-violated":
            msg = f"[yellow]SLO violated[/] {t.user_attrs.get('slo_slack')}"
        elif label == "quality-failed":
            msg = (f"[yellow]quality guardrail failed[/] "
                   f"{results.describe_quality(t.user_attrs.get(schema.QUALITY))}")
        elif label in ("pruned", "screened-out"):
            msg = f"[yellow]{label}[/] {t.user_attrs.get('pruned_reason', '')}"
        elif label == "reused":
            msg = (f"[yellow]measured already[/] in trial {t.user_attrs['reused_from']}: "
                   "not launched again")
        else:
            msg = f"[red]{label}[/] {t.user_attrs.get('harness_error', '')}"
        self.progress.console.print(f"  trial {t.number}: {msg}", highlight=False)
        self.progress.update(self.task, completed=study_mod.finished_count(self.handle.study))


class Backend(str, enum.Enum):
    local = "local"
    ray = "ray"


BACKEND_HELP = "local (one trial at a time, here) or ray (one trial per free GPU slot of a Ray cluster)."


def _run_with_progress(handle: study_mod.StudyHandle, n_trials: Optional[int], backend: Backend = Backend.local,
                       address: Optional[str] = None, max_concurrent: Optional[int] = None) -> None:
    total = n_trials or handle.study.user_attrs.get(schema.N_TRIALS) or handle.space.budget.n_trials
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        reporter = _ProgressReporter(progress, handle, total)
        try:
            options = ({"address": address, "max_concurrent": max_concurrent}
                       if backend == Backend.ray else {})
            study_mod.run(handle, executor=backend.value, n_trials=n_trials, reporter=reporter,
                          **options)
        except KeyboardInterrupt:
            progress.stop()
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
            progress.stop()
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
        url = _url(storage, name)
        if name not in study_names(url):
            return name
        n += 1
        name = f"{space_name}-{n}"


def _warm_start_studies(spec: Optional[str]) -> list[tuple[str, optuna.Study]]:
    out = []
    for item in filter(None, (x.strip() for x in (spec or "").split(","))):
        name, _, where = item.partition("@")
        out.append((name, load_optuna_study(name, _url(where or None, name))))
    return out


@app.command()
def start(
    space: str = typer.Option(..., "--space", "-s", help="Space name (bundled, or ./search_spaces/NAME.yaml) or a YAML path."),
    study: Optional[str] = typer.Option(None, help="Study name (default: the space's name, made unique). "
                                        "An existing study of the same space is joined as one more worker."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", "-n", min=1, help="Trials to finish (default: the space's budget)."),
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
    url = _url(storage, name)
    handle = study_mod.create(sp, name, url, join=study is not None,
                              warm_start=_warm_start_studies(warm_start), prior_file=prior_file,
                              use_prior=not no_prior)
    console.print(f"study [bold]{name}[/] on space [bold]{sp.name}[/]  storage {url}", highlight=False)
    _run_with_progress(handle, n_trials, backend, address, max_concurrent)
    _print_best(handle)


@app.command()
def resume(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", "-n", min=1, help="New total of finished trials."),
    new_hardware: bool = typer.Option(False, "--new-hardware", help="On different hardware: start a linked "
                                      "study warm-started from this one's best configs instead of refusing."),
    backend: Backend = typer.Option(Backend.local, help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: start a local one; 'auto' to attach)."),
    max_concurrent: Optional[int] = typer.Option(None, min=1, help="Ray: trials at once (default: the cluster's GPUs, or 1)."),
) -> None:
    """Continue a study: clean up after a crash, retry interrupted trials, finish the budget."""
    handle = study_mod.load(study, _url(storage, study))
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
    _run_with_progress(handle, n_trials, backend, address, max_concurrent)
    _print_best(handle)


def _studies_on_disk() -> list[str]:
    from tuner.paths import studies_dir
    return sorted(p.stem for p in studies_dir().glob("*.db"))


@app.command()
def status(
    study: Optional[str] = typer.Argument(None, help="Study name (omit to list studies)."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL."),
) -> None:
    """Table of a study's trials: config, state, objective, failure class."""
    if study is None:
        names = study_names(storage) if storage else _studies_on_disk()
        if not names:
            console.print("no studies yet: run `tune start --space cpu-smoke`")
        for n in names:
            console.print(n)
        return
    handle = study_mod.load(study, _url(storage, study))
    metric = handle.space.objective.metric
    trials = study_mod.trials_table(handle.study)
    params = list(dict.fromkeys(k for t in trials for k in t.params))
    table = Table(title=f"{study}: {study_mod.finished_count(handle.study)} finished, "
                        f"objective {metric}", title_justify="left")
    table.add_column("#", no_wrap=True, min_width=3, justify="right")
    quality = handle.space.quality is not None
    # Where each launch's time went, once any trial recorded it (engines that time their phases).
    launch = any(schema.LAUNCH_S in t.user_attrs or schema.LAUNCH_PHASES in t.user_attrs
                 for t in trials)
    cols = ("arm", "state", "value", *(["quality"] if quality else []), *params, "p99 TTFT ms",
            "mean TPOT ms", *(["launch"] if launch else []), "failure")
    for col in cols:
        table.add_column(col, no_wrap=True,
                         max_width={"failure": 28, "quality": 48, "launch": 52}.get(col, 16),
                         min_width=9 if col in ("value", "state") else None)
    for t in trials:
        ua = t.user_attrs
        value = ("/".join(f"{v:,.1f}" for v in t.values)
                 if t.values is not None and schema.is_feasible(t) else "-")
        failure = (ua.get(schema.FAILURE_CLASS) or ua.get(schema.PRUNED_RULE) or ua.get(schema.HARNESS_ERROR)
                   or (f"= trial {ua[schema.REUSED_FROM]}" if schema.REUSED_FROM in ua else ""))
        table.add_row(str(t.number), ua.get(schema.ARM, ""), schema.status(t), value,
                      *([results.describe_quality(ua.get(schema.QUALITY))] if quality else []),
                      *(_param(t.params.get(p, "")) for p in params), _fmt(ua.get("p99_ttft_ms")),
                      _fmt(ua.get("mean_tpot_ms")),
                      *([results.describe_launch(ua) or "-"] if launch else []), failure)
    console.print(table)


def _param(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)  # 0.6000000000000001 -> 0.6


def _short(text: str | None, limit: int = 160) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(v) -> str:
    return f"{v:,.1f}" if isinstance(v, (int, float)) else "-"


@app.command()
def best(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL."),
) -> None:
    """The best feasible config, its exact serve command, and its metrics vs the baseline."""
    handle = study_mod.load(study, _url(storage, study))
    if not _print_best(handle):
        raise typer.Exit(1)


def _print_best(handle: study_mod.StudyHandle) -> bool:
    if handle.space.objective.multi:
        return _print_pareto(handle)
    metric = handle.space.objective.metric
    best = results.best_config(handle.study)
    if best is None:
        console.print("[yellow]no feasible trial yet[/]")
        return False
    ua = best.first.user_attrs
    spread = f" (median of {best.n}, MAD {best.mad:,.2f})" if best.n > 1 else ""
    if best.n == 1 and best.first.number in results.confirm_pending(handle.study):
        spread = (f" (measured once: its `tune confirm` repeats did not finish; "
                  f"`tune resume {handle.name}` runs them)")
    console.print(f"\n[bold]best[/]: trial {best.first.number} ({best.arm}) {metric} = "
                  f"[bold green]{best.median:,.2f}[/]{spread}", highlight=False)
    console.print("config: " + ", ".join(f"{k}={v}" for k, v in best.params.items()), highlight=False)
    console.print("serve command:", highlight=False)
    console.print(f"  {deploy_mod.serve_command(best.first, handle.space)}", highlight=False,
                  soft_wrap=True)
    console.print(f"  p99 TTFT {_fmt(ua.get('p99_ttft_ms'))} ms, mean TPOT "
                  f"{_fmt(ua.get('mean_tpot_ms'))} ms, output {_fmt(ua.get('output_throughput'))} tok/s",
                  highlight=False)
    if handle.space.quality is not None:
        console.print(f"quality: {results.quality_summary(ua.get(schema.QUALITY))}", highlight=False)
    # every baseline; the quality reference only where no baseline served (baseline_config)
    bases = results.baseline_configs(handle.study) or [
        b for b in [results.baseline_config(handle.study)] if b is not None]
    if not bases:
        console.print("no feasible baseline to compare with")
    for base in bases:
        if base.first.number == best.first.number:
            console.print(f"the baseline {base.arm} is the best config measured: "
                          "no searched config beat it", highlight=False)
        else:
            g = results.gain(best, base)
            console.print(f"vs baseline {base.arm}: {base.median:,.2f} -> {best.median:,.2f}, "
                          f"{g.describe()}", highlight=False)
    pick = results.model_pick(handle.study)
    if pick is not None:
        console.print(pick.describe(handle.space.objective.direction == "maximize"), highlight=False)
    prior = handle.study.user_attrs.get(schema.PRIOR)
    if prior:
        console.print("prior: " + "; ".join(_describe_source(s) for s in prior["sources"]),
                      highlight=False)
    return True


def _describe_source(source: dict) -> str:
    if source["kind"] == "model":
        return (f"{source['estimator']} predicted {source['predicted']} of {source['asked']} configs "
                f"for {source['gpu']}")
    differs = ", ".join(source["differs"]) or "nothing"
    return f"study {source['study']} ({source['measured']} configs measured; differs: {differs})"


def _print_pareto(handle: study_mod.StudyHandle) -> bool:
    targets = handle.space.objective.targets()
    front = results.pareto_front(handle.study)
    if not front:
        console.print("[yellow]no feasible trial yet[/]")
        return False
    quality = handle.space.quality is not None
    table = Table(title="Pareto front (feasible trials)", title_justify="left")
    for col in ("#", "arm", *(f"{t.metric} ({t.direction[:3]})" for t in targets),
                *(["quality"] if quality else []), "config"):
        table.add_column(col)
    for t in front:
        table.add_row(str(t.number), t.user_attrs.get(schema.ARM, ""), *(f"{v:,.2f}" for v in t.values),
                      *([results.describe_quality(t.user_attrs.get(schema.QUALITY))] if quality else []),
                      " ".join(f"{k}={v}" for k, v in t.params.items()))
    console.print(table)
    for t in front:
        console.print(f"trial {t.number}: {t.user_attrs.get('command')}", highlight=False,
                      soft_wrap=True)
    return True


@app.command()
def confirm(
    study: str = typer.Argument(..., help="Study name."),
    top_k: int = typer.Option(3, min=1, help="How many of the best searched configs to repeat."),
    repeats: int = typer.Option(2, min=1, help="Extra launches of each (and of each baseline)."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL."),
) -> None:
    """Re-launch the top configs and the baselines to measure noise; `tune best` then reports
    medians and a confidence interval."""
    handle = study_mod.load(study, _url(storage, study))
    added = study_mod.enqueue_repeats(handle, top_k=top_k, repeats=repeats)
    console.print(f"queued {added} repeat launches", highlight=False)
    _run_with_progress(handle, None)
    _print_best(handle)


@app.command("export")
def export_cmd(
    study: str = typer.Argument(..., help="Study name."),
    file: Path = typer.Argument(..., help="Archive to write (.tar.gz)."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL."),
) -> None:
    """Write a study with its trials, attrs, artifacts and logs to one archive."""
    from tuner.record.transfer import export_study
    out = export_study(study, _url(storage, study), file)
    console.print(f"exported {study} to {out}", highlight=False)


@app.command("import")
def import_cmd(
    file: Path = typer.Argument(..., help="Archive written by `tune export`."),
    name: Optional[str] = typer.Option(None, help="Import under another study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
) -> None:
    """Import an exported study; continue it with `tune resume`."""
    from tuner.record.transfer import import_study
    target, url = import_study(file, lambda n: _url(storage, n), name=name)
    retry = schema.awaiting_retry(study_mod.load(target, url).study.get_trials(deepcopy=False))
    again = f" ({len(retry)} interrupted or failed trials run again)" if retry else ""
    console.print(f"imported study [bold]{target}[/] into {url}; continue with: tune resume {target}{again}",
                  highlight=False)


@model_app.command("tiny")
def model_tiny(
    path: Path = typer.Argument(..., help="Folder to create."),
    shape: str = typer.Option("tiny", help="tiny, or a published Qwen3 shape (config.json as on the hub, "
                              "vocabulary 151936): qwen3-0.6b, qwen3-8b, qwen3-14b, qwen3-32b, and the "
                              "-fp8 (block-scaled FP8) and -awq (AutoAWQ 4-bit) checkpoints of 8b, 14b, 32b."),
    weights: Optional[bool] = typer.Option(None, "--weights/--no-weights", help="Also save random weights "
                                           "(default: only for the tiny shape). vLLM and SGLang need none "
                                           "(--load-format dummy); transformers serve does."),
    device: str = typer.Option("cpu", help="Where to create the random weights (cuda with torch)."),
    fp8_variant: Optional[Path] = typer.Option(
        None, "--fp8-variant", help="Also write a torchao FP8 copy of the weights to this folder "
        "(needs torchao and an SM 8.9+ GPU; list it under model.variants as fp8)."),
) -> None:
    """Write a Qwen3-architecture config and a locally trained tokenizer (no downloads)."""
    from tuner import tiny_model
    from tuner.engines.model_config import published_shape, shape_names
    names = shape_names()
    if shape != "tiny" and shape not in names:
        fail(f"unknown shape {shape!r}; choose one of tiny, {', '.join(sorted(names))}")
    if weights is None:
        weights = shape == "tiny" or fp8_variant is not None
    if fp8_variant is not None and not weights:
        fail("--fp8-variant quantizes the random weights: leave out --no-weights")
    if fp8_variant is not None and (why := tiny_model.fp8_variant_missing()):
        fail(f"--fp8-variant: {why}")
    if fp8_variant is not None and (fp8_variant / "config.json").exists():
        fail(f"{fp8_variant} already holds a model (config.json); remove it first")
    config = (tiny_model.qwen3_config() if shape == "tiny"
              else tiny_model.with_local_tokenizer(published_shape(names[shape])))
    if weights and (why := tiny_model.random_weights_refusal(config, path)):
        fail(f"--shape {shape} --weights: {why}")
    try:
        out = tiny_model.build(path, config=config)
    except FileExistsError as exc:
        fail(str(exc))
    if weights:
        tiny_model.save_random_weights(out, device=device)
    console.print(f"model written to {out}" + ("" if weights else " (no weights: serve it with "
                                                "--load-format dummy)"))
    if fp8_variant is not None:
        variant = tiny_model.save_fp8_variant(out, fp8_variant, device=device)
        console.print(f"FP8 (torchao) variant written to {variant}")


for _module in (bench_command, plan, dashboard, engine, evaluate, report_command, ops):
    _module.register(app)

