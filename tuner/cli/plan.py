"""`tune plan`: the terminal view of a plan (tuner.configs.plan builds it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.configs.plan import PlannedConfig, PlanReport, build_plan_report
from tuner.configs.rules import workload_facts
from tuner.engines.hardware import resolve
from tuner.engines.spec import load_engine
from tuner.errors import InputError
from tuner.space.bench_settings import SEED_MAX
from tuner.estimate import Estimate, get_estimator
from tuner.study.knowledge import save_predictions
from tuner.trial.metric_names import check_metrics
from tuner.space import (
    QUALITY_METRICS,
    Param,
    Scalar,
    Space,
    load_space,
    model_path_problems,
    reference_baseline,
    reference_precision,
)


def _describe_param(p: Param) -> str:
    if p.type == "categorical":
        text = "{" + ", ".join(map(str, p.choices or [])) + "}"
    elif p.type == "bool":
        text = "true | false"
    else:
        num = (lambda x: str(int(x))) if p.type == "int" else str
        text = f"{num(p.low)} .. {num(p.high)}" + (f" step {num(p.step)}" if p.step else "") + (
            " (log)" if p.log else "")
    if p.when:
        text += "  when " + ", ".join(f"{k}={v}" for k, v in p.when.items())
    return text


def _flag(engine: str, knob: str) -> str:
    k = load_engine(engine).knobs[knob]
    if k.flag:
        return k.flag
    if k.config_key:
        return f"yaml: {k.config_key}"
    if k.checkpoint_only:
        return "checkpoint"
    on = " ".join(k.when_true or []) or "(nothing)"
    off = " ".join(k.when_false or []) or "(nothing)"
    return f"{on} / {off}"


def _assignment(a: dict[str, Scalar]) -> str:
    return ", ".join(f"{k}={v}" for k, v in a.items()) or "every config"


def render(report: PlanReport, console: Console) -> None:
    """Print the plan; command lines are printed unwrapped so they can be copied."""
    s, hw = report.space, report.hardware
    console.print(f"[bold]space[/] {s.name}: {escape(s.description)}", highlight=False)
    variants = ", ".join(f"{k}: {v}" for k, v in s.model.variants.items())
    console.print(f"[bold]model[/] {s.model.path}" + (f" (checkpoints {variants})" if variants else ""),
                  highlight=False)
    console.print(f"[bold]hardware[/] {hw.describe()} [dim]{'profile' if hw.source == 'profile' else 'detected'}, "
                  f"device {hw.device_key}[/]", highlight=False)
    for wl in s.all_workloads():
        facts = workload_facts(wl)
        rate = "inf" if wl.request_rate == float("inf") else f"{wl.request_rate:g}/s"
        load = (f" (load x{wl.load_scale:g})" if wl.load_scale != 1 else "") if s.objective.max_load else f" at rate {rate}"
        console.print(f"[bold]workload[/] {wl.name}: {wl.dataset}, {wl.num_prompts} prompts{load}, "
                      f"longest prompt {facts['max_prompt_len']} tokens", highlight=False)
    o = s.objective
    if o.max_load is not None:
        slos = ", ".join(f"{k} <= {v:g}" for k, v in o.slos.items())
        goal = (f"the highest {o.max_load.knob} within {slos} ({o.max_load.low:g}..{o.max_load.high:g}, "
                f"{o.max_load.probes} loads, each run on every workload until one misses"
                + (f", each offered for {o.max_load.duration_s:g} s" if o.max_load.duration_s else "") + ")")
    else:
        goal = " and ".join(f"{t.direction} {t.metric}" for t in o.targets())
    console.print(f"[bold]objective[/] {goal}; budget {s.budget.n_trials} trials", highlight=False)
    if o.max_load is not None and o.max_load.knob == "request_rate" and o.max_load.duration_s is None:
        console.print("[yellow]note[/] each probe sends the workload's num_prompts requests, a burst "
                      "that ends sooner the higher the rate: a server that holds them all at once "
                      "meets the SLOs at any rate. Set objective.max_load.duration_s (for example 8) "
                      "to offer every rate for as long.", highlight=False)
    if s.quality is not None:
        _render_quality(s, console)

    table = Table(title="search space", title_justify="left", show_lines=False)
    for col in ("engine", "knob", "engine flag", "values", "default"):
        table.add_column(col)
    for engine, choice in s.engines.items():
        for name, p in choice.params.items():
            table.add_row(engine, name, _flag(engine, name), _describe_param(p),
                          "" if p.default is None else str(p.default))
        for name, v in choice.fixed.items():
            table.add_row(engine, name, _flag(engine, name), f"fixed {v}", "")
    console.print(table)

    if report.regions:
        regions = Table(title="pruned before launch (never run)", title_justify="left")
        for col in ("engine", "where", "rule", "reason"):
            regions.add_column(col, overflow="fold")
        for r in report.regions:
            for v in r.verdicts:
                regions.add_row(r.engine, _assignment(r.assignment), v.rule_id, v.reason)
        console.print(regions)
    else:
        console.print("[dim]no region of the space is known to fail on this hardware[/]")

    for ep in report.engines:
        console.print(f"\n[bold underline]{ep.display_name}[/] ({ep.engine})", highlight=False)
        for c in ep.configs:
            _render_config(c, console)
        if ep.pruned_draws:
            why = ", ".join(f"{rid} ×{n}" for rid, n in ep.pruned_draws.most_common())
            console.print(f"  [dim]{sum(ep.pruned_draws.values())} of {ep.draws} random draws pruned: "
                          f"{why}[/]", highlight=False)
        if ep.predicted_top:
            console.print("  [bold]predicted best[/] [dim](a performance model's estimate, not a "
                          "measurement)[/]", highlight=False)
            for c in ep.predicted_top:
                _render_config(c, console)


def _render_quality(s: Space, console: Console) -> None:
    """The guardrail: what the reference is, what each trial is held to, what cannot be measured."""
    q = s.quality
    bounds = ", ".join(f"{m} {'<=' if QUALITY_METRICS[m][0] == 'max' else '>='} {v:g}"
                       for m, v in q.bounds().items())
    if q.lm_eval is not None:
        bounds += (", " if bounds else "") + (f"lm-eval {','.join(q.lm_eval.tasks)} drop <= "
                                              f"{q.lm_eval.max_drop:g}")
    precision = reference_precision(s)
    no_logprobs = [e for e in s.engines if not load_engine(e).quality_probe.logprobs]
    console.print(
        f"[bold]quality[/] reference arm {reference_baseline(s).name} ({precision['engine']}, dtype "
        f"{precision['dtype']}, quantization {precision['quantization']}, KV cache "
        f"{precision['kv_cache_dtype']}) runs first; other precisions answer {q.prompts} prompts x "
        f"{q.max_tokens} tokens greedy after their benchmark; bounds: {bounds or 'none (recorded only)'}"
        + (f"; no logprobs from {', '.join(no_logprobs)}: tokens compared only" if no_logprobs else ""),
        highlight=False)


def _render_config(c: PlannedConfig, console: Console) -> None:
    knobs = " ".join(f"{k}={v}" for k, v in c.knobs.items()) or "no knobs"
    console.print(f"  [bold]{escape(c.label)}[/]: {escape(knobs)}", highlight=False)
    defaults = [k for k in c.omitted if k not in c.knobs]  # a checkpoint variant still loads
    if defaults:
        console.print(f"    [dim]engine defaults for {', '.join(defaults)}[/]", highlight=False)
    for v in c.verdicts:
        style = "red" if v.severity == "prune" else "yellow"
        console.print(f"    [{style}]{v.severity} {v.rule_id}[/]: {escape(v.reason)} "
                      f"[dim]({escape(v.source)})[/]", highlight=False)
    if c.error:
        console.print(f"    [red]cannot translate[/]: {escape(c.error)}", highlight=False)
    if c.estimate is not None:
        console.print("    " + _describe_estimate(c.estimate), highlight=False)
    if c.plan is None:
        return
    console.print("    " + escape(c.plan.command_line()), highlight=False, soft_wrap=True)
    if c.plan.config_file:
        console.print(f"    [dim]{c.plan.config_file_name}:[/]", highlight=False)
        for line in c.plan.config_file.rstrip("\n").splitlines():
            console.print("      " + escape(line), highlight=False, soft_wrap=True)


def _describe_estimate(e: Estimate) -> str:
    if e.predicted:
        return (f"[cyan]predicted[/] {e.total_tok_s:,.0f} tok/s total, {e.output_tok_s:,.0f} output, "
                f"TTFT {e.ttft_ms:,.0f} ms, TPOT {e.tpot_ms:,.1f} ms, batch {e.batch} "
                f"[dim]({escape(e.source)})[/]")
    why = e.unsupported or (e.notes[0] if e.notes else "no number")
    label = "no prediction" if e.unsupported else "predicted not to fit"
    return f"[yellow]{label}[/]: {escape(why)}"


def register(app: typer.Typer) -> None:
    """Add `tune plan` to the CLI."""

    @app.command("plan")
    def plan_command(
        space: str = typer.Option(..., "--space", help="Space name (bundled, or ./search_spaces/NAME.yaml) or YAML path."),
        gpu: Optional[str] = typer.Option(
            None, "--gpu", help="Plan for a hardware profile (engines/hardware/gpus.yaml, e.g. "
                                "a100-sxm-80gb; NAME-xN for N of them in one host, e.g. h200-141gb-x2) instead of "
                                "this machine."),
        samples: int = typer.Option(3, "--samples", min=0, help="Sampled configs to show per engine."),
        seed: int = typer.Option(0, "--seed", min=0, max=SEED_MAX, help="Seed of the sampled configs."),
        estimate: bool = typer.Option(False, "--estimate", help="Predict every config shown with a "
                                      "performance model (the space's prior: estimator, else "
                                      "aiconfigurator; pip install 'tuner[estimate]'), and show the "
                                      "predicted best configs per engine."),
        save_prior: Optional[Path] = typer.Option(
            None, "--save-prior", help="Also write the predictions the space's prior: would make at study "
            "start (for --gpu) to this file, for `tune start --prior-file` on a host without the model."),
    ) -> None:
        """Show the space, what is pruned on this hardware and why, and the exact launch commands."""
        console = Console(width=None if sys.stdout.isatty() else 160)
        sp = load_space(space)
        check_metrics(sp)
        problems = model_path_problems(sp)
        if problems and gpu is None:
            raise InputError("\n".join(problems))
        estimator = get_estimator(sp.prior.estimator if sp.prior else "aiconfigurator") if estimate else None
        report = build_plan_report(sp, resolve(gpu), n_samples=samples, seed=seed, estimator=estimator)
        for problem in problems:  # planning for another host (--gpu): the model may be there
            console.print(f"[yellow]warning[/] {escape(problem)} [dim](not here; planning for {gpu} "
                          "anyway)[/]", highlight=False, soft_wrap=True)
        render(report, console)
        if save_prior is not None:
            if sp.prior is None:
                raise InputError(f"--save-prior: space {sp.name!r} has no prior: section (estimator, gpu, candidates)")
            if gpu is not None:
                sp = sp.model_copy(update={"prior": sp.prior.model_copy(update={"gpu": gpu})})
            found = save_predictions(sp, save_prior, seed=sp.seed or 0)
            console.print(f"saved {len(found.predictions)} predictions to {save_prior}; on the GPU host: "
                          f"tune start --space {sp.name} --prior-file {save_prior.name}", highlight=False)
