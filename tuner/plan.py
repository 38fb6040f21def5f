"""`tune plan`: what a study would do on given hardware, without launching anything.

Before spending GPU hours the user sees the space, which regions of it are known to fail here (and
why, with the rule's source), and the exact command line and generated config each engine would get
for its baselines and a few sampled configurations.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import optuna
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .engine_spec import load_engine
from .hardware import Hardware, resolve
from .rules import PrunedRegion, Verdict, check, launched_knobs, pruned_regions, workload_facts
from .space import ENGINE_PARAM, Param, Scalar, Space, baseline_params, load_space, suggest
from .translate import LaunchPlan, UnsupportedValue, build_plan
from .yaml_io import InputError

PLAN_PORT = 8000  # the real port is picked per trial
_MAX_DRAWS_PER_SAMPLE = 20


@dataclass(frozen=True)
class PlannedConfig:
    label: str
    engine: str
    knobs: dict[str, Scalar]        # what changes the launch (see rules.launched_knobs)
    omitted: tuple[str, ...] = ()   # left to the engine's defaults
    verdicts: tuple[Verdict, ...] = ()
    plan: LaunchPlan | None = None  # None when pruned or not translatable
    error: str | None = None

    @property
    def pruned_by(self) -> Verdict | None:
        return next((v for v in self.verdicts if v.severity == "prune"), None)


@dataclass(frozen=True)
class EnginePlan:
    engine: str
    display_name: str
    configs: list[PlannedConfig]
    pruned_draws: Counter = field(default_factory=Counter)  # rule id → sampled configs it pruned
    draws: int = 0


@dataclass(frozen=True)
class PlanReport:
    space: Space
    hardware: Hardware
    regions: list[PrunedRegion]
    engines: list[EnginePlan]


def build_plan_report(space: Space, hardware: Hardware, n_samples: int = 3, seed: int = 0) -> PlanReport:
    """Everything `tune plan` shows; pure apart from reading model configs that are on disk."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created" per engine
    try:
        engines = [_engine_plan(space, hardware, name, n_samples, seed) for name in space.engines]
    finally:
        optuna.logging.set_verbosity(verbosity)
    return PlanReport(space, hardware, pruned_regions(space, hardware), engines)


def _engine_plan(space: Space, hardware: Hardware, engine: str, n_samples: int, seed: int) -> EnginePlan:
    spec = load_engine(engine)
    choice = space.engines[engine]
    configs = []
    baselines = [b for b in space.baselines if b.engine == engine]
    for b in baselines:
        params, omitted = baseline_params(space, b)
        params.pop(ENGINE_PARAM, None)
        configs.append(_planned(space, hardware, f"baseline {b.name}", engine,
                                {**params, **choice.fixed}, tuple(omitted)))
    if not baselines:
        omitted = tuple(choice.params)
        defaults = {k: p.default for k, p in choice.params.items() if p.default is not None}
        configs.append(_planned(space, hardware, "engine defaults", engine,
                                {**defaults, **choice.fixed}, omitted))

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    pruned: Counter = Counter()
    draws = 0
    samples = 0
    while samples < n_samples and draws < n_samples * _MAX_DRAWS_PER_SAMPLE:
        if len(space.engines) > 1:
            study.enqueue_trial({ENGINE_PARAM: engine})
        trial = study.ask()
        _, knobs = suggest(trial, space)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        draws += 1
        config = _planned(space, hardware, f"sample {samples + 1}", engine, knobs, ())
        if config.pruned_by:
            pruned[config.pruned_by.rule_id] += 1
            continue
        samples += 1
        configs.append(config)
    return EnginePlan(engine, spec.display_name, configs, pruned, draws)


def _planned(space: Space, hardware: Hardware, label: str, engine: str, knobs: dict[str, Scalar],
             omitted: tuple[str, ...]) -> PlannedConfig:
    launched = launched_knobs(engine, knobs, frozenset(omitted), space)
    verdicts = tuple(check(engine, knobs, hardware=hardware, space=space, omit=frozenset(omitted)))
    if any(v.severity == "prune" for v in verdicts):
        return PlannedConfig(label, engine, launched, omitted, verdicts)
    try:
        plan = build_plan(load_engine(engine), space.engines[engine], space.model, knobs,
                          port=PLAN_PORT, omit=frozenset(omitted))
    except UnsupportedValue as exc:
        return PlannedConfig(label, engine, launched, omitted, verdicts, error=str(exc))
    return PlannedConfig(label, engine, launched, omitted, verdicts, plan)


# ---- rendering ---------------------------------------------------------------------------------

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
    w = workload_facts(s.workload)
    console.print(f"[bold]space[/] {s.name}: {escape(s.description)}", highlight=False)
    variants = ", ".join(f"{k}: {v}" for k, v in s.model.variants.items())
    console.print(f"[bold]model[/] {s.model.path}" + (f" (checkpoints {variants})" if variants else ""),
                  highlight=False)
    console.print(f"[bold]hardware[/] {hw.describe()} [dim]{'profile' if hw.source == 'profile' else 'detected'}, "
                  f"device {hw.device_key}[/]", highlight=False)
    rate = "inf" if s.workload.request_rate == float("inf") else f"{s.workload.request_rate:g}/s"
    console.print(f"[bold]workload[/] {s.workload.dataset}, {s.workload.num_prompts} prompts at rate "
                  f"{rate}, longest prompt {w['max_prompt_len']} tokens; objective "
                  f"{s.objective.direction} {s.objective.metric}; budget {s.budget.n_trials} trials",
                  highlight=False)

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
    if c.plan is None:
        return
    console.print("    " + escape(c.plan.command_line()), highlight=False, soft_wrap=True)
    if c.plan.config_file:
        console.print(f"    [dim]{c.plan.config_file_name}:[/]", highlight=False)
        for line in c.plan.config_file.rstrip("\n").splitlines():
            console.print("      " + escape(line), highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add `tune plan` to the CLI."""

    @app.command("plan")
    def plan_command(
        space: str = typer.Option(..., "--space", help="Space name (search_spaces/) or YAML path."),
        gpu: Optional[str] = typer.Option(
            None, "--gpu", help="Plan for a hardware profile (engines/hardware/gpus.yaml, e.g. "
                                "a100-sxm-80gb) instead of this machine."),
        samples: int = typer.Option(3, "--samples", min=0, help="Sampled configs to show per engine."),
        seed: int = typer.Option(0, "--seed", help="Seed of the sampled configs."),
    ) -> None:
        """Show the space, what is pruned on this hardware and why, and the exact launch commands."""
        console = Console(width=None if sys.stdout.isatty() else 160)
        try:
            report = build_plan_report(load_space(space), resolve(gpu), n_samples=samples, seed=seed)
        except InputError as exc:
            Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(exc))}",
                                                       highlight=False)
            raise typer.Exit(2) from None
        render(report, console)
