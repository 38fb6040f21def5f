"""``tune evaluate``: the best config against the baseline on more workloads, with repeats.

A search optimises one workload once per config; a user runs many workloads, and a gain smaller
than run-to-run noise is no gain. The motivating manual study's "optimized" config doubled TPOT on
ShareGPT and regressed on 32k prompts, which only a per-workload check shows. Each repeat launches
a fresh server (launch-to-launch variation is part of the noise) and runs every workload on it;
the two arms alternate (A B A B) so slow drift of the machine hits both.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from optuna.artifacts import upload_artifact
from optuna.trial import FrozenTrial
from pydantic import BaseModel, ConfigDict, field_validator

from tuner.engines.model_config import read_model_config
from tuner.errors import InputError
from tuner.record import schema
from tuner.record.storage import artifact_store, data_dir
from tuner.report.data import WORKLOAD_METRICS, contenders
from tuner.space import Space, Workload
from tuner.space.workload_sets import SEED_STUDY, expand_entries, seed_study
from tuner.study.lifecycle import StudyHandle
from tuner.trial.runner import TrialOutcome, run_trial
from tuner.yaml_io import load_model

# Stored per workload and repeat in the study attr (the artifact has every metric).
SUMMARY_METRICS = tuple(m for m, _, _ in WORKLOAD_METRICS) + ("mean_ttft_ms", "completed", "failed")


def seed_study_workloads(max_len: int | None, sharegpt_path: str | None = None,
                         num_prompts: int | None = None) -> list[Workload]:
    """The motivating study's workloads (``tuner.space.workload_sets``), each cut to fit
    ``max_len``; ShareGPT is included when a file is given."""
    return [Workload(**w) for w in seed_study(max_len, sharegpt_path, num_prompts)]


def model_context(space: Space) -> int | None:
    """``max_position_embeddings`` of a local model, when its config.json says."""
    value = read_model_config(space.model.resolved_path()).get("max_position_embeddings")
    return value if isinstance(value, int) else None


class _WorkloadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    evaluation_workloads: list[Workload]

    @field_validator("evaluation_workloads", mode="before")
    @classmethod
    def _expand_sets(cls, value: Any) -> Any:
        return expand_entries(value)


def resolve_workloads(spec: str, space: Space, sharegpt_path: str | None = None,
                      num_prompts: int | None = None) -> list[Workload]:
    """``from-space``, ``seed-study``, a YAML file with ``evaluation_workloads:``, or names;
    ``num_prompts`` replaces every chosen workload's (a short run).

    Names are looked up in the space's evaluation workloads, then its search workloads, then the
    seed-study set.
    """
    spec = spec.strip()
    if spec == "from-space":
        found = list(space.evaluation_workloads)
        if not found:
            raise InputError(f"--workloads from-space: space {space.name!r} defines no "
                             "evaluation_workloads; add a list there, or pass a YAML file, "
                             "seed-study, or workload names")
    elif spec == SEED_STUDY:
        if not sharegpt_path:
            raise InputError("--workloads seed-study includes ShareGPT: pass --sharegpt PATH (a "
                             "ShareGPT JSON file), or name the other workloads")
        found = seed_study_workloads(model_context(space), sharegpt_path)
    elif spec.endswith((".yaml", ".yml")) or Path(spec).is_file():
        found = load_model(_WorkloadFile, Path(spec).expanduser(),
                           "workload file").evaluation_workloads
    else:
        known = {w.name: w for w in [*seed_study_workloads(model_context(space), sharegpt_path),
                                     *space.all_workloads(), *space.evaluation_workloads]}
        found = []
        for name in (n.strip() for n in spec.split(",") if n.strip()):
            if name not in known:
                hint = " (pass --sharegpt PATH)" if name == "sharegpt" else ""
                raise InputError(f"--workloads: unknown workload {name!r}{hint}; known: "
                                 f"{', '.join(known)}; or from-space, seed-study, a YAML file")
            found.append(known[name])
    names = [w.name for w in found]
    if not found:
        raise InputError(f"--workloads {spec!r} names no workload")
    if len(set(names)) != len(names):
        raise InputError(f"--workloads {spec!r}: workload names repeat ({', '.join(names)}); "
                         "each needs its own name")
    if num_prompts is not None:
        found = [w.model_copy(update={"num_prompts": num_prompts}) for w in found]
    return found


@dataclass
class Run:
    arm: str  # "baseline" or "best"
    repeat: int
    outcome: TrialOutcome


@dataclass
class EvaluationResult:
    best: FrozenTrial
    baseline: FrozenTrial
    workloads: list[Workload]
    repeats: int
    runs: list[Run] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def _config(t: FrozenTrial) -> tuple[str, dict, frozenset[str]]:
    ua = t.user_attrs
    if schema.KNOBS not in ua or schema.ENGINE not in ua:
        raise InputError(f"trial {t.number} has no recorded engine/knobs: it was not run by tune")
    return ua[schema.ENGINE], dict(ua[schema.KNOBS]), frozenset(ua.get(schema.OMIT, []))


def _arm_info(t: FrozenTrial) -> dict:
    return {"trial": t.number, "arm": t.user_attrs.get(schema.ARM, "search"),
            "engine": t.user_attrs.get(schema.ENGINE), "command": t.user_attrs.get(schema.COMMAND),
            "knobs": t.user_attrs.get(schema.KNOBS)}


def _kept(metrics: dict, name: str) -> float | None:
    """One run's value of a metric, or None where it measured nothing (NaN, no request done)."""
    value = metrics.get(name)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if name not in ("completed", "failed") and not metrics.get("completed"):
        return None
    return value


def summarise(result: EvaluationResult) -> dict:
    """The study attr: per workload and arm, each metric's values over the repeats.

    A run where no request completed contributes its failed count only: its zeros are not speeds.
    """
    workloads = []
    for w in result.workloads:
        entry = {"name": w.name, "spec": w.model_dump(mode="json", exclude_defaults=True)}
        for arm in ("baseline", "best"):
            runs = [r for r in result.runs if r.arm == arm]
            measured = [r.outcome.workload_metrics.get(w.name, {}) for r in runs]
            entry[arm] = {m: [v for wm in measured if (v := _kept(wm, m)) is not None]
                          for m in SUMMARY_METRICS}
        workloads.append(entry)
    return {
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "repeats": result.repeats,
        "order": "interleaved: baseline, best, baseline, best, ...",
        "best": _arm_info(result.best),
        "baseline": _arm_info(result.baseline),
        "workloads": workloads,
        "failures": [{"arm": r.arm, "repeat": r.repeat,
                      "failure_class": r.outcome.failure.failure_class,
                      "reason": r.outcome.failure.reason}
                     for r in result.runs if r.outcome.failure],
    }


def evaluate(handle: StudyHandle, workloads: list[Workload], repeats: int,
             on_phase: Callable[[str], None] = lambda _: None) -> EvaluationResult:
    """Run baseline and best ``repeats`` times each, interleaved; record in the study.

    "Best" is the config with the best median over its runs (tuner.results.best_config), or the
    best searched one when the baseline itself won.

    Every run's metrics, telemetry and command go to a study artifact (also kept at
    ``<study>-files/evaluations/<time>/evaluation.json``); the summary to the study user attr
    ``evaluation``, which ``tune report`` reads.
    """
    if repeats < 1:
        raise InputError(f"--repeats {repeats}: needs at least 1")
    study = handle.study
    best, base, note = contenders(study)
    if base is None:
        raise InputError(f"study {handle.name!r} has no feasible baseline trial to compare with")
    if best is None:
        raise InputError(f"study {handle.name!r}: {note or 'no feasible trial'}")
    if note:
        on_phase(note)
    result = EvaluationResult(best.first, base.first, workloads, repeats)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = data_dir(handle.url, handle.name) / "evaluations" / stamp
    for r in range(repeats):
        for arm, trial in (("baseline", result.baseline), ("best", result.best)):
            engine, knobs, omit = _config(trial)
            label = f"{arm} (trial {trial.number}) repeat {r + 1}/{repeats}"
            outcome = run_trial(handle.space, engine, knobs, root / f"{arm}-r{r + 1}", omit=omit,
                                workloads=workloads,
                                on_phase=lambda phase, label=label: on_phase(f"{label}: {phase}"))
            result.runs.append(Run(arm, r + 1, outcome))
    result.summary = summarise(result)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "evaluation.json"
    path.write_text(json.dumps({**result.summary, "runs": [
        {"arm": run.arm, "repeat": run.repeat, "trial_dir": str(run.outcome.log_path.parent),
         "command": run.outcome.plan.command_line(), "engine_version": run.outcome.engine_version,
         "image": run.outcome.image,
         "timings": run.outcome.timings, "workload_metrics": run.outcome.workload_metrics,
         "telemetry": run.outcome.telemetry,
         "failure": run.outcome.failure and {"class": run.outcome.failure.failure_class,
                                             "reason": run.outcome.failure.reason,
                                             "evidence": run.outcome.failure.evidence}}
        for run in result.runs]}, indent=2, default=str))
    result.summary["artifact_id"] = upload_artifact(
        artifact_store=artifact_store(handle.url, handle.name), file_path=str(path),
        study_or_trial=study, mimetype="application/json")
    study.set_user_attr(schema.EVALUATION, result.summary)
    return result


# ---- command -----------------------------------------------------------------------------------







