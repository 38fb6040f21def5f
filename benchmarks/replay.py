"""Compare search strategies by replaying a measured grid (benchmarks/measure_grid.py).

Each strategy is a live study: ``tuner.study.run``, the one driver the tool runs, with the replay
executor (``tuner.study.replay``) in place of launches. So the sampler, the define-by-run suggestion,
the rules and the reuse of earlier measurements (answered without a launch), refused launches
recorded COMPLETE with the pessimistic value and ``engine_start = 1``, multi-fidelity screening and
the stop rules are the tool's own code. Instead of launching, a trial draws one measured launch of
its config and one of that launch's full repeats (the measured noise), and is charged the
engine-seconds that launch took.

The config a strategy would report is what ``tune best`` reports (``tuner.record.results.best_config``:
the feasible config with the best median); it is scored by its TRUE value, the mean of all its
measured full repeats.

    .venv/bin/python benchmarks/replay.py                        # 50 seeds, every strategy, plots
    PYTHONPATH=/tmp/torch-gp .venv/bin/python benchmarks/replay.py   # GP too (needs torch)

A warm start from another grid (the same knobs measured on another workload):
``--warm-start-grid OTHER.json`` adds the strategy ``tpe-warm``, a study whose knowledge is the other
grid's measured means, queued and fed to the prior sampler as ``tune start --warm-start`` does
(``tuner.study.knowledge.queue``, ``sampler_for(space, predictions=...)``).

    .venv/bin/python benchmarks/replay.py --data benchmarks/data/grid-vllm-cpu-decode.json \
        --space benchmarks/replay-space-decode.yaml --warm-start-grid benchmarks/data/grid-vllm-cpu.json \
        --strategies tpe,tpe-warm --no-plots
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import InputError
from tuner.record import results, schema
from tuner.report.stats import LEVEL, log_t_interval
from tuner.space import Fidelity, Space, load_space
from tuner.study import StudyHandle, TrialRecorder, sampler_for
from tuner.study import run as run_study
from tuner.study.knowledge import Knowledge, queue
from tuner.study.prior import Prediction
from tuner.study.replay import Grid, ReplayExecutor

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = HERE / "data" / "grid-vllm-cpu.json"
DEFAULT_SPACE = HERE / "replay-space.yaml"

# name -> (sampler name in the space, multi-fidelity screening on?)
STRATEGIES: dict[str, tuple[str, bool]] = {
    "tpe": ("tpe", False),
    "gp": ("gp", False),
    "random": ("random", False),
    "grid": ("grid", False),
    "greedy": ("greedy", False),
    "tpe-mf": ("tpe", True),
    # What-if, NOT what the live tool does: screening with a 30 % margin instead of the space's
    # (10 % here).
    "tpe-mf-m30": ("tpe", True),
    "tpe-warm": ("tpe", False),  # with --warm-start-grid: the other grid's measurements as knowledge
}
MARGIN = {"tpe-mf-m30": 0.3}
WHAT_IF = set(MARGIN)
TOLERANCE = 0.02  # "within 2 % of the grid optimum"


# ---- the measured grid -------------------------------------------------------------------------







# ---- one replayed study ------------------------------------------------------------------------

@dataclass
class TrialRec:
    number: int           # the Optuna trial number
    params: dict
    state: str            # ok | infeasible | screened-out | rule-pruned (no launch)
    # (a config measured before is answered with that measurement: not a TrialRec, see Run.reused)
    value: float | None   # what the study was told (the drawn full repeat; 0 for a refused config)
    seconds: float        # engine-seconds charged for this trial
    cum_seconds: float
    reported: dict | None  # the config `tune best` would report after this trial
    score: float           # its true value / the optimum


@dataclass
class Run:
    strategy: str
    seed: int
    trials: list[TrialRec] = field(default_factory=list)
    study: optuna.Study | None = field(default=None, repr=False)
    reused: int = 0  # proposals answered with an earlier measurement: free, not in ``trials``

    @property
    def launches(self) -> int:
        return sum(t.state != "rule-pruned" for t in self.trials)

    def launches_by(self, k: int) -> int:
        return sum(t.state != "rule-pruned" for t in self.trials[:k])

    @property
    def seconds(self) -> float:
        return self.trials[-1].cum_seconds if self.trials else 0.0

    @property
    def final(self) -> float:
        return self.trials[-1].score if self.trials else 0.0

    def reach(self, tol: float = TOLERANCE) -> tuple[int | None, float | None]:
        """First trial (1-based, as the budget counts them: rule-pruned trials count, reused
        ones do not) after which the reported config is within ``tol`` of the optimum, and the
        engine-seconds spent by then; (None, None) if never."""
        for i, t in enumerate(self.trials):
            if t.score >= 1 - tol:
                return i + 1, t.cum_seconds
        return None, None

    def reach_launches(self, tol: float = TOLERANCE) -> int | None:
        k, _ = self.reach(tol)
        return None if k is None else self.launches_by(k)

    def score_at_launches(self, n: int) -> float:
        """Score once ``n`` engines have been launched (later rule-pruned trials included)."""
        best = 0.0
        for i, t in enumerate(self.trials):
            if self.launches_by(i + 1) > n:
                break
            best = t.score
        return best

    def score_at_trials(self, k: int) -> float:
        """Score after ``k`` trials (a strategy that stopped earlier keeps its last answer)."""
        if not self.trials or k <= 0:
            return 0.0
        return self.trials[min(k, len(self.trials)) - 1].score

    def score_at_seconds(self, budget: float) -> float:
        done = [t for t in self.trials if t.cum_seconds <= budget]
        return done[-1].score if done else 0.0


def replay_space(space: Space, strategy: str, seed: int, n_trials: int, *, rules: bool = True) -> Space:
    """The space the live tool would run for this strategy: its sampler, seed and budget; fidelity
    screening only for the multi-fidelity strategies; ``check_rules: false`` when rules are off."""
    sampler_name, multi_fidelity = STRATEGIES[strategy]
    fidelity = None
    if multi_fidelity:
        fidelity = space.fidelity or Fidelity(screen_prompts=1)
        if strategy in MARGIN:
            fidelity = fidelity.model_copy(update={"margin": MARGIN[strategy]})
    engines = space.engines if rules else {
        name: choice.model_copy(update={"check_rules": False}) for name, choice in space.engines.items()}
    return space.model_copy(update={
        "sampler": sampler_name, "seed": seed, "fidelity": fidelity, "engines": engines,
        "budget": space.budget.model_copy(update={"n_trials": n_trials, "timeout_s": None})})


def make_study(space: Space, strategy: str, seed: int, n_trials: int) -> optuna.Study:
    """The study the live tool would create for this space with this sampler, seed and budget."""
    live = replay_space(space, strategy, seed, n_trials)
    return optuna.create_study(direction=live.objective.direction, sampler=sampler_for(live),
                               pruner=optuna.pruners.NopPruner())


class Collector:
    """The driver's reporter: each finished trial becomes a TrialRec, with what ``tune best``
    would report after it."""

    def __init__(self, run: Run, grid: Grid, executor: ReplayExecutor, study: optuna.Study):
        self.run, self.grid, self.executor, self.study = run, grid, executor, study
        self.cum = 0.0

    def trial_started(self, number: int, index: int, total: int, label: str) -> None: pass
    def phase(self, phase: str) -> None: pass
    def note(self, message: str) -> None: pass

    def trial_finished(self, t: FrozenTrial) -> None:
        status = schema.status(t)
        if status == "reused":
            self.run.reused += 1
            return
        state = {"pruned": "rule-pruned", "ok": "ok"}.get(status, status)
        seconds = self.executor.seconds.get(t.number, 0.0)
        self.cum += seconds
        best = results.best_config(self.study)
        # a conditional knob the config does not have is None, as in the grid's keys
        reported = {k: best.params.get(k) for k in self.grid.knobs} if best else None
        value = t.value if t.state == TrialState.COMPLETE else None
        self.run.trials.append(TrialRec(t.number, {k: t.params.get(k) for k in self.grid.knobs}, state,
                                        value, seconds, self.cum, reported,
                                        self.grid.score(reported)))


def warm_knowledge(other: Grid, name: str) -> Knowledge:
    """Another grid's measured means as an earlier study's measurements (``tune start
    --warm-start``): one prediction per served config, its origin the grid and the config's index."""
    preds = [Prediction(dict(p.params), p.true_value, f"study:{name}", f"{name}#{i}")
             for i, p in enumerate(other.points) if p.feasible]
    return Knowledge(preds, [{"kind": "study", "study": name, "measured": len(preds)}])


def replay(space: Space, grid: Grid, strategy: str, seed: int, n_trials: int, *,
           rules: bool = True, knowledge: Knowledge | None = None) -> Run:
    """One study of ``n_trials`` launches, run by the live driver (``tuner.study.run``) with the
    replay executor; greedy and grid stop earlier once they have nothing left to propose.

    As in the live tool, a config the study has measured already is not launched again, and a
    config a rule of the engine's YAML says cannot start is told COMPLETE with the pessimistic value
    and engine_start = 1 without a launch; neither costs budget. ``rules`` off: such configs are
    launched and refused as measured.
    """
    live = replay_space(space, strategy, seed, n_trials, rules=rules)
    study = optuna.create_study(direction=live.objective.direction, sampler=sampler_for(live),
                                pruner=optuna.pruners.NopPruner())
    if knowledge is not None:  # as lifecycle.create does with --warm-start
        queue(study, live, knowledge)
        study.sampler = sampler_for(live, predictions=knowledge.predictions)
    handle = StudyHandle(study, live, "replay://memory")
    executor = ReplayExecutor(handle, grid=grid, seed=seed)
    run = Run(strategy, seed, study=study)
    recorder = TrialRecorder(study, live, handle.url, artifacts=False)
    run_study(handle, executor=executor, n_trials=n_trials, recorder=recorder,
              reporter=Collector(run, grid, executor, study))
    return run


def run_all(space: Space, grid: Grid, strategies: list[str], seeds: int, n_trials: int,
            log=print, rules: bool = True,
            warm: Knowledge | None = None) -> tuple[dict[str, list[Run]], dict[str, str]]:
    runs: dict[str, list[Run]] = {}
    skipped: dict[str, str] = {}
    for name in strategies:
        t0 = time.monotonic()
        try:
            runs[name] = [replay(space, grid, name, seed, n_trials, rules=rules,
                                 knowledge=warm if name == "tpe-warm" else None)
                          for seed in range(seeds)]
        except InputError as exc:
            skipped[name] = str(exc)
            log(f"{name}: skipped ({exc})")
            continue
        log(f"{name}: {seeds} seeds in {time.monotonic() - t0:.1f}s")
    return runs, skipped


def _median_censored(xs: list[float | None]) -> float | None:
    """Median where None (never reached) counts as worse than any value; None if >= half never."""
    vals = sorted(math.inf if x is None else x for x in xs)
    n = len(vals)
    m = vals[(n - 1) // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return None if math.isinf(m) else m


def summarize(runs: dict[str, list[Run]], grid: Grid, *, n_grid: int, budgets_trials: list[int],
              budgets_seconds: list[float]) -> dict:
    out = {}
    for name, rs in runs.items():
        reach = [r.reach() for r in rs]
        k = [x[0] for x in reach]
        s = [x[1] for x in reach]
        out[name] = {
            "seeds": len(rs),
            "reach_rate": sum(x is not None for x in k) / len(rs),
            "reach_trials_median": _median_censored(k),
            "reach_trials_p25_p75": [_q(k, 0.25), _q(k, 0.75)],
            "reach_seconds_median": _median_censored(s),
            "reach_launches_median": _median_censored([r.reach_launches() for r in rs]),
            "reach_by_quarter_grid": sum(x is not None and x <= n_grid / 4 for x in k) / len(rs),
            "launches_mean": statistics.fmean(r.launches for r in rs),
            "seconds_mean": statistics.fmean(r.seconds for r in rs),
            "final_mean": statistics.fmean(r.final for r in rs),
            "final_min": min(r.final for r in rs),
            "at_trials": {str(b): _mean_sd([r.score_at_trials(b) for r in rs]) for b in budgets_trials},
            "at_seconds": {str(round(b)): _mean_sd([r.score_at_seconds(b) for r in rs])
                           for b in budgets_seconds},
            "screened_out_share": (sum(t.state == "screened-out" for r in rs for t in r.trials)
                                   / max(1, sum(len(r.trials) for r in rs))),
            "infeasible_share": (sum(t.state == "infeasible" for r in rs for t in r.trials)
                                 / max(1, sum(len(r.trials) for r in rs))),
            "rule_pruned_share": (sum(t.state == "rule-pruned" for r in rs for t in r.trials)
                                  / max(1, sum(len(r.trials) for r in rs))),
            "trials_mean": statistics.fmean(len(r.trials) for r in rs),
            "reused_mean": statistics.fmean(r.reused for r in rs),
            "duplicate_share": statistics.fmean(
                1 - len({tuple(t.params.values()) for t in r.trials}) / max(1, len(r.trials))
                for r in rs),
            "optimum_launched_share": sum(any(t.params == grid.best_params for t in r.trials)
                                          for r in rs) / len(rs),
            "optimum_screened_out": sum(t.params == grid.best_params and t.state == "screened-out"
                                        for r in rs for t in r.trials),
            "optimum_launches": sum(t.params == grid.best_params for r in rs for t in r.trials),
        }
    return out


def _q(xs: list[float | None], q: float) -> float | None:
    vals = sorted(math.inf if x is None else x for x in xs)
    v = vals[min(len(vals) - 1, int(round(q * (len(vals) - 1))))]
    return None if math.isinf(v) else v


def _mean_sd(xs: list[float]) -> list[float]:
    return [statistics.fmean(xs), statistics.pstdev(xs)]


def targets(summary: dict, runs: dict[str, list[Run]], *, n_grid: int) -> list[dict]:
    """The issue's three targets, each with the numbers behind the verdict."""
    out = []
    quarter = n_grid / 4
    cands = [c for c in ("tpe", "tpe-mf") if c in summary]
    if not cands:
        return out
    best = min(cands, key=lambda c: summary[c]["reach_trials_median"] or math.inf)
    med = summary[best]["reach_trials_median"]
    out.append({
        "target": f"TPE or multi-fidelity reaches within 2% in <= 25% of the grid's trials "
                  f"(<= {quarter:g} of {n_grid})",
        "met": med is not None and med <= quarter,
        "detail": "; ".join(
            f"{c}: median trials {_fmt(summary[c]['reach_trials_median'], 1)}, "
            f"{100 * summary[c]['reach_by_quarter_grid']:.0f}% of seeds by trial {quarter:g}"
            for c in cands),
    })
    if "greedy" in runs:
        g = runs["greedy"]
        # paired by seed: each strategy's answer once it has launched as many engines as greedy
        launches = statistics.fmean(r.launches for r in g)
        g_final = statistics.fmean(r.final for r in g)
        parts, met = [], False
        for c in cands:
            at = statistics.fmean(rc.score_at_launches(rg.launches) for rc, rg in zip(runs[c], g))
            wins = sum(rc.score_at_launches(rg.launches) >= rg.final for rc, rg in zip(runs[c], g))
            pairs = [(rc.score_at_launches(rg.launches), rg.final) for rc, rg in zip(runs[c], g)]
            parts.append(f"{c} after as many launches: {100 * at:.1f}% of optimum, "
                         f"{_paired_ratio(pairs)}, >= greedy in {wins}/{len(g)} seeds")
            met |= at >= g_final
        out.append({
            "target": "matches or beats greedy's final value using no more launches than greedy",
            "met": met,
            "detail": f"greedy: {100 * g_final:.1f}% of optimum after {launches:.1f} launches "
                      f"(mean; {min(r.launches for r in g)}–{max(r.launches for r in g)}); "
                      + "; ".join(parts),
        })
    if "tpe-warm" in summary:
        med = summary["tpe-warm"]["reach_trials_median"]
        out.append({
            "target": "warm start from the other workload's grid reaches within 2% in <= 6 trials "
                      "(median)",
            "met": med is not None and med <= 6,
            "detail": f"tpe-warm: median trials {_fmt(med, 1)}, median launches "
                      f"{_fmt(summary['tpe-warm']['reach_launches_median'], 1)}, reached in "
                      f"{100 * summary['tpe-warm']['reach_rate']:.0f}% of seeds"
                      + (f"; tpe: {_fmt(summary['tpe']['reach_trials_median'], 1)}"
                         if "tpe" in summary else ""),
        })
    if "tpe-mf" in summary and "tpe" in summary:
        mf, full = summary["tpe-mf"]["reach_seconds_median"], summary["tpe"]["reach_seconds_median"]
        ratio = mf / full if mf is not None and full else None
        out.append({
            "target": "multi-fidelity needs <= 50% of the engine-seconds of full-fidelity search "
                      "to the same best (within 2%)",
            "met": ratio is not None and ratio <= 0.5,
            "detail": f"median engine-seconds to within 2%: tpe-mf {_fmt(mf)}, tpe {_fmt(full)}"
                      + (f", ratio {ratio:.2f}" if ratio is not None else ""),
        })
    return out


def _paired_ratio(pairs: list[tuple[float, float]]) -> str:
    """A strategy's score over greedy's, seed by seed: the geometric mean of the per-seed ratios
    with the tool's one interval method (tuner.report.stats)."""
    if any(min(pair) <= 0 for pair in pairs):
        return "no ratio to greedy (a seed had no feasible config yet)"
    iv = log_t_interval([s / g for s, g in pairs])
    head = f"{iv.value:.3f}x greedy's final (geometric mean over seeds"
    if iv.low is None:
        return f"{head}, {iv.note})"
    return f"{head}, {LEVEL:.0%} CI {iv.low:.3f} to {iv.high:.3f}, n={len(pairs)})"


def _fmt(x: float | None, nd: int = 0) -> str:
    return "never" if x is None else f"{x:.{nd}f}"


# ---- report ------------------------------------------------------------------------------------

def p_best(grid: Grid, n_boot: int = 2000, seed: int = 0) -> dict[tuple, float]:
    """How sure the grid optimum is: the share of bootstrap resamples (of each config's repeats)
    in which each config has the best mean."""
    rng = np.random.default_rng(seed)
    feasible = [p for p in grid.points if p.feasible]
    means = np.array([[rng.choice(p.values, len(p.values)).mean() for p in feasible]
                      for _ in range(n_boot)])
    best = means.argmax(1) if grid.direction == "maximize" else means.argmin(1)
    return {grid.key(p.params): float((best == i).mean()) for i, p in enumerate(feasible)}


def grid_table(grid: Grid) -> str:
    rows = ["| " + " | ".join(grid.knobs) + " | true value (mean) | repeats | spread (min–max) "
            "| P(best) | launches | cost full trial (s) |",
            "|" + "---|" * (len(grid.knobs) + 6)]
    ordered = sorted(grid.points, key=lambda p: -(p.true_value or -1))
    pb = p_best(grid)
    for p in ordered:
        vals = p.values
        if p.feasible:
            cells = [f"{p.true_value:.0f} ({100 * grid.score(p.params):.1f}%)", str(len(vals)),
                     f"{min(vals):.0f}–{max(vals):.0f}", f"{pb[grid.key(p.params)]:.2f}"]
        else:
            cells = ["refused", "0", "–", "–"]
        rows.append("| " + " | ".join(str(p.params[k]) for k in grid.knobs) + " | "
                    + " | ".join(cells) + f" | {len(p.launches)} | {p.mean_cost():.1f} |")
    return "\n".join(rows)


def markdown(summary: dict, tgts: list[dict], skipped: dict, *, n_trials: int,
             budgets_trials: list[int], budgets_seconds: list[float]) -> str:
    lines = ["| strategy | seeds | reached within 2% | median trials to 2% (IQR) "
             "| median launches to 2% | median engine-s to 2% | trials / launches (mean) "
             "| final (% of opt.) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        iqr = s["reach_trials_p25_p75"]
        lines.append(
            f"| {name}{' (what-if)' if name in WHAT_IF else ''} | {s['seeds']} | {100 * s['reach_rate']:.0f}% | "
            f"{_fmt(s['reach_trials_median'], 1)} ({_fmt(iqr[0])}–{_fmt(iqr[1])}) | "
            f"{_fmt(s['reach_launches_median'], 1)} | "
            f"{_fmt(s['reach_seconds_median'])} | {s['trials_mean']:.1f} / {s['launches_mean']:.1f} | "
            f"{100 * s['final_mean']:.1f} (worst {100 * s['final_min']:.1f}) |")
    lines += ["", "Where the trials went (shares of all trials), and whether the optimum was ever "
              "launched:", "",
              "| strategy | repeated configs | pruned by a rule (no launch) "
              "| launched and refused | screened out | seeds that launched the optimum "
              "| optimum launches screened out | reused proposals per study (mean; not trials) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {100 * s['duplicate_share']:.0f}% | "
                     f"{100 * s['rule_pruned_share']:.0f}% | "
                     f"{100 * s['infeasible_share']:.0f}% | {100 * s['screened_out_share']:.0f}% | "
                     f"{100 * s['optimum_launched_share']:.0f}% | "
                     f"{s['optimum_screened_out']}/{s['optimum_launches']} | "
                     f"{s['reused_mean']:.1f} |")
    lines += ["", "Value at equal budget: true value of the reported config, % of optimum, "
              "mean ± sd over seeds.", "",
              "| strategy | " + " | ".join(f"{b} trials" for b in budgets_trials) + " | "
              + " | ".join(f"{b:.0f} engine-s" for b in budgets_seconds) + " |",
              "|---|" + "---|" * (len(budgets_trials) + len(budgets_seconds))]
    for name, s in summary.items():
        cells = [f"{100 * m:.1f} ± {100 * sd:.1f}" for m, sd in s["at_trials"].values()]
        cells += [f"{100 * m:.1f} ± {100 * sd:.1f}" for m, sd in s["at_seconds"].values()]
        lines.append(f"| {name}{' (what-if)' if name in WHAT_IF else ''} | "
                     + " | ".join(cells) + " |")
    lines += ["", "\"never\": half the seeds or more did not get within 2% in the budget. "
              "Targets (live strategies only):", "",
              "| target | verdict | numbers |", "|---|---|---|"]
    for t in tgts:
        lines.append(f"| {t['target']} | {'**met**' if t['met'] else '**missed**'} | {t['detail']} |")
    for name, why in skipped.items():
        lines.append(f"\n{name} was skipped: {why}")
    return "\n".join(lines)


def plot(runs: dict[str, list[Run]], grid: Grid, out_dir: Path, *, prefix: str = "replay",
         n_trials: int, with_grid: bool = True,
         max_seconds: float) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    colors = dict(zip(STRATEGIES, plt.rcParams["axes.prop_cycle"].by_key()["color"]))

    # 1. value of the reported config vs trials and vs engine-seconds
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ks = np.arange(1, n_trials + 1)
    ts = np.linspace(0, max_seconds, 200)
    for name, rs in runs.items():
        by_k = np.array([[r.score_at_trials(k) for k in ks] for r in rs]) * 100
        by_t = np.array([[r.score_at_seconds(t) for t in ts] for r in rs]) * 100
        for ax, x, ys in ((axes[0], ks, by_k), (axes[1], ts, by_t)):
            ax.plot(x, ys.mean(0), label=name, color=colors.get(name),
                    ls="--" if name in WHAT_IF else "-")
    lo = min(100 * statistics.fmean(r.score_at_trials(1) for r in rs) for rs in runs.values())
    trials_label = "trials (rule-pruned ones launch nothing; reused ones are not counted)"
    for ax, xl in ((axes[0], trials_label), (axes[1], "engine-seconds")):
        ax.axhline(100 * (1 - TOLERANCE), color="k", ls="--", lw=0.8, label="2% of optimum")
        ax.set_xlabel(xl)
        ax.set_ylabel("true value of reported config (% of grid optimum)")
        ax.set_ylim(max(0, lo - 5), 101)
        ax.grid(alpha=0.3)
    axes[0].axvline(n_trials / 4, color="grey", ls=":", lw=0.8)
    axes[0].text(n_trials / 4, axes[0].get_ylim()[0] + 1, " 25% of grid", color="grey", fontsize=8)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Replay: true value of the config each strategy would report, mean over seeds "
                 "(dashed: what-ifs, not the live tool)")
    fig.tight_layout()
    p = out_dir / f"{prefix}-convergence.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    # 2. share of seeds within 2 % of the optimum by trials / engine-seconds
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for name, rs in runs.items():
        reach = [r.reach() for r in rs]
        frac_k = [sum(k is not None and k <= x for k, _ in reach) / len(rs) for x in ks]
        frac_t = [sum(s is not None and s <= x for _, s in reach) / len(rs) for x in ts]
        ls = "--" if name in WHAT_IF else "-"
        axes[0].step(ks, frac_k, where="post", label=name, color=colors.get(name), ls=ls)
        axes[1].plot(ts, frac_t, label=name, color=colors.get(name), ls=ls)
    axes[0].set_xlabel("trials (rule-pruned ones launch nothing; reused ones are not counted)")
    axes[1].set_xlabel("engine-seconds")
    for ax in axes:
        ax.set_ylabel("share of seeds within 2% of optimum")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].axvline(n_trials / 4, color="grey", ls=":", lw=0.8)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Replay: how soon each strategy reports a config within 2% of the grid optimum")
    fig.tight_layout()
    p = out_dir / f"{prefix}-reach.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    if not with_grid:
        return paths
    # 3. the measured grid itself
    knobs = grid.knobs
    rows = sorted({p.params[knobs[0]] for p in grid.points}, key=_sort_key)
    cols = sorted({(p.params[knobs[1]], p.params[knobs[2]]) for p in grid.points},
                  key=lambda c: (_sort_key(c[1]), _sort_key(c[0])))
    mat = np.full((len(rows), len(cols)), np.nan)
    for p in grid.points:
        i, j = rows.index(p.params[knobs[0]]), cols.index((p.params[knobs[1]], p.params[knobs[2]]))
        if p.feasible:
            mat[i, j] = p.true_value
    fig, ax = plt.subplots(figsize=(1.3 * len(cols) + 2.5, 0.75 * len(rows) + 2))
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("lightgrey")
    im = ax.imshow(np.ma.masked_invalid(mat), cmap=cmap, aspect="auto")
    for p in grid.points:
        i, j = rows.index(p.params[knobs[0]]), cols.index((p.params[knobs[1]], p.params[knobs[2]]))
        vals = p.values
        if p.feasible:
            txt = f"{p.true_value:.0f}\n±{statistics.pstdev(vals):.0f}"
        else:
            txt = "refused"
        ax.text(j, i, txt, ha="center", va="center", fontsize=7,
                color="k" if not p.feasible or p.true_value >= np.nanmean(mat) else "w")
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xticks(range(len(cols)), [f"{a}\n{knobs[2][:7]}={b}" for a, b in cols], fontsize=7)
    ax.set_ylabel(knobs[0])
    ax.set_xlabel(knobs[1])
    fig.colorbar(im, ax=ax, label=f"{grid.meta.get('objective', 'value')} (mean of repeats)")
    ax.set_title("Measured grid (mean ± sd of the full repeats)")
    fig.tight_layout()
    p = out_dir / f"{prefix}-grid.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def _sort_key(v):
    return (0, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--space", default=str(DEFAULT_SPACE))
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--trials", type=int, default=None, help="budget per study (default: grid size)")
    ap.add_argument("--strategies", default=",".join(s for s in STRATEGIES if s != "tpe-warm"))
    ap.add_argument("--warm-start-grid", default=None,
                    help="another measured grid of the same knobs (another workload): adds the "
                         "strategy tpe-warm, warm-started from its measured means")
    ap.add_argument("--out", default=str(HERE / "data" / "replay-results.json"))
    ap.add_argument("--markdown", default=str(HERE / "data" / "replay-results.md"))
    ap.add_argument("--img-dir", default=str(REPO / "docs" / "img"))
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--save-trials", action="store_true",
                    help="also store every replayed trial in --out (large; the replay is "
                         "deterministic, so it can always be regenerated)")
    ap.add_argument("--metric", default="value",
                    help="which measured number the replay draws: value (the space's objective, "
                         "default) or tokens_per_engine_cpu_s (less moved by machine contention)")
    ap.add_argument("--img-prefix", default="replay", help="plot file names start with this")
    ap.add_argument("--no-rules", action="store_true",
                    help="launch configs the engine's rules know to be infeasible (they fail as "
                         "measured) instead of pruning them before launch as the live tool does")
    ap.add_argument("--noise", choices=("measured", "none"), default="measured",
                    help="none: every launch returns the config's true value (a control)")
    args = ap.parse_args(argv)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    space = load_space(args.space)
    grid = Grid.load(Path(args.data), args.metric)
    if args.noise == "none":
        grid = grid.denoised()
    n_grid = len(grid.points)
    n_trials = args.trials or n_grid
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        sys.exit(f"unknown strategies {sorted(unknown)}; choose from {', '.join(STRATEGIES)}")
    warm = None
    if args.warm_start_grid:
        warm = warm_knowledge(Grid.load(Path(args.warm_start_grid), args.metric),
                              Path(args.warm_start_grid).stem)
        strategies += [] if "tpe-warm" in strategies else ["tpe-warm"]
    elif "tpe-warm" in strategies:
        sys.exit("tpe-warm needs --warm-start-grid")

    runs, skipped = run_all(space, grid, strategies, args.seeds, n_trials,
                            rules=not args.no_rules, warm=warm)
    full_cost = sum(p.mean_cost() for p in grid.points)  # the whole grid at full fidelity
    budgets_trials = sorted({max(1, n_grid // 4), 7, n_grid // 2, n_trials})
    budgets_seconds = [full_cost * f for f in (0.125, 0.25, 0.5)]
    summary = summarize(runs, grid, n_grid=n_grid, budgets_trials=budgets_trials,
                        budgets_seconds=budgets_seconds)
    tgts = targets(summary, runs, n_grid=n_grid)
    md = ["## Measured grid", "",
          f"Optimum {grid.optimum:.0f} ({grid.meta.get('objective', '')}); "
          f"whole grid at full fidelity: {full_cost:.0f} engine-s.", "", grid_table(grid), "",
          "## Replay", "",
          f"{args.seeds} seeds per strategy, {n_trials} trials per study (greedy stops when its "
          f"ladders are done); noise: {args.noise}; metric: {args.metric}; known-infeasible "
          f"configs {'launched' if args.no_rules else 'ruled out before launch (live tool)'}; "
          "configs measured before are not relaunched (live tool).", "",
          markdown(summary, tgts, skipped, n_trials=n_trials, budgets_trials=budgets_trials,
                   budgets_seconds=budgets_seconds)]
    Path(args.markdown).write_text("\n".join(md) + "\n")
    Path(args.out).write_text(json.dumps({
        "data": str(Path(args.data).resolve().relative_to(REPO)) if Path(args.data).resolve()
        .is_relative_to(REPO) else args.data,
        "seeds": args.seeds, "n_trials": n_trials, "optimum": grid.optimum,
        "optimum_params": grid.best_params, "noise": args.noise, "metric": args.metric,
        "rules": not args.no_rules,
        "grid_full_cost_s": full_cost, "summary": summary, "targets": tgts, "skipped": skipped,
        "greedy_first": runs["greedy"][0].trials[0].params if runs.get("greedy") else None,
        "runs": {name: [{"seed": r.seed, "reach": r.reach(), "reach_launches": r.reach_launches(),
                         "final": round(r.final, 4), "reused": r.reused,
                         "launches": r.launches, "seconds": round(r.seconds, 1)} for r in rs]
                 for name, rs in runs.items()},
        **({"trials": {name: [[[list(t.params.values()), t.state, t.value, round(t.seconds, 2),
                                 round(t.score, 4)] for t in r.trials] for r in rs]
                       for name, rs in runs.items()}} if args.save_trials else {}),
    }, indent=1))
    print("\n".join(md))
    if not args.no_plots:
        for p in plot(runs, grid, Path(args.img_dir), prefix=args.img_prefix, n_trials=n_trials,
                      with_grid=args.noise == "measured",
                      max_seconds=max(r.seconds for rs in runs.values() for r in rs)):
            print(f"plot: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
