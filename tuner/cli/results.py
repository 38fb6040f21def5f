"""`tune status` and `tune best`: read a study's trials, its best config with the serve command, and
the gain over its baselines."""

from __future__ import annotations

from typing import Any, Optional

import typer
from optuna.trial import FrozenTrial
from rich.table import Table

from tuner import deploy as deploy_mod
from tuner import study as study_mod
from tuner.cli.common import console, url
from tuner.record import results, schema
from tuner.record.storage import study_names
from tuner.report.data import load_row, workload_scales
from tuner.report.stats import MIN_RUNS, change


def _studies_on_disk() -> list[str]:
    from tuner.paths import studies_dir
    return sorted(p.stem for p in studies_dir().glob("*.db"))


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
    handle = study_mod.load(study, url(storage, study))
    metric = handle.space.objective.name
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


def _param(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)  # 0.6000000000000001 -> 0.6


def _fmt(v: Any) -> str:
    return f"{v:,.1f}" if isinstance(v, (int, float)) else "-"


def best(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL."),
) -> None:
    """The best feasible config, its exact serve command, and its metrics vs the baseline."""
    handle = study_mod.load(study, url(storage, study))
    if not print_best(handle):
        raise typer.Exit(1)


def print_best(handle: study_mod.StudyHandle) -> bool:
    """The best config (or the Pareto front) and its gain over the baselines; False when no trial
    is feasible yet."""
    if handle.space.objective.multi:
        return _print_pareto(handle)
    metric = handle.space.objective.name
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
    if handle.space.objective.max_load is not None:
        console.print(_load_line(best.first, handle), highlight=False)
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
            c = change(base.values, best.values)
            hint = ("; `tune confirm` repeats the top configs and the baselines"
                    if min(c.n_base, c.n_best) < MIN_RUNS else "")
            console.print(f"vs baseline {base.arm}: {c.base:,.2f} -> {c.best:,.2f} ({c.means}), "
                          f"{c.describe()}{hint}", highlight=False)
    pick = results.model_pick(handle.study)
    if pick is not None:
        console.print(pick.describe(handle.space.objective.direction == "maximize"), highlight=False)
    prior = handle.study.user_attrs.get(schema.PRIOR)
    if prior:
        console.print("prior: " + "; ".join(_describe_source(s) for s in prior["sources"]),
                      highlight=False)
    return True


def _load_line(trial: FrozenTrial, handle: study_mod.StudyHandle) -> str:
    """What the max-load value means: its unit, the SLOs it kept, and the run that bracketed it
    from above (the search's resolution there)."""
    objective, scales = handle.space.objective, workload_scales(handle.space)
    unit = "req/s" if objective.max_load.knob == "request_rate" else "concurrent requests"
    slos = ", ".join(f"{k} <= {v:g}" for k, v in objective.slos.items())
    row = load_row(trial, scales)
    capped = (f"capped by {row.capped_by}" if row and row.capped_by
              else "no run missed: the load is the search's top, raise max_load.high")
    scaled = [f"{name} at {scale:g}x" for name, scale in scales.items() if scale != 1.0]
    return (f"load: {next(iter(scales))} {unit}" + (f" ({', '.join(scaled)})" if scaled else "")
            + f" within {slos}; {capped}")


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


def register(app: typer.Typer) -> None:
    """Add ``tune status`` and ``tune best`` to the CLI."""
    app.command("status")(status)
    app.command("best")(best)
