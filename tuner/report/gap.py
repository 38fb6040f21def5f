"""The reality gap of a performance model on a study (or several, pooled): its prediction for
each config measured, against the measurement.

Per engine: n, the bias (geometric mean of measured / predicted), the spread sigma of
log(measured / predicted) between configs, and Spearman's rho between the two orders, the figure
that says whether the model's ranking can steer a search. Repeats of one config (``tune
confirm``) are one row, measured as their median, so sigma is the spread between configs, not the
launch-to-launch noise. Where the study measured both online FP8 and BF16 weights, the FP8 step
(geometric mean of the FP8 configs over that of the BF16 ones), measured and predicted, is given
too: a model can rank each half right and still misjudge what FP8 buys.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from tuner.configs.predict import predict_objective
from tuner.engines.hardware import Hardware
from tuner.errors import InputError
from tuner.estimate import Estimator
from tuner.record import schema
from tuner.study.lifecycle import StudyHandle
from tuner.study.prior import spearman


@dataclass
class Row:
    """One measured config: its launches' values, their median, and the model's prediction."""

    engine: str
    arm: str
    knobs: dict[str, Any]
    trials: list[str] = field(default_factory=list)   # STUDY:TRIAL, as `tune compare` names them
    runs: list[float] = field(default_factory=list)
    predicted: float | None = None
    unsupported: str | None = None

    @property
    def measured(self) -> float:
        return statistics.median(self.runs)


def measured_rows(*handles: StudyHandle) -> list[Row]:
    """The studies' launched configs that met every constraint (answers reused from an earlier
    trial left out), one row per config: launches of one config in several studies (a search
    and the judge that re-launched its pick) are one row. One that broke an SLO has no value to
    compare: under a max-load objective its 0 means "below the search's lowest load", not a load
    it sustained."""
    rows: dict[tuple[str, str], Row] = {}
    for handle in handles:
        for t in handle.study.trials:
            if not schema.is_feasible(t) or not schema.launched(t) or t.value is None or t.value <= 0:
                continue
            knobs = dict(t.user_attrs.get(schema.KNOBS) or {})
            engine = t.params.get("engine") or next(iter(handle.space.engines))
            row = rows.setdefault((engine, json.dumps(knobs, sort_keys=True)),
                                  Row(engine=engine, arm=t.user_attrs.get(schema.ARM, "search"), knobs=knobs))
            row.trials.append(f"{handle.name}:{t.number}")
            row.runs.append(float(t.value))
    return list(rows.values())


def predicted_rows(handles: StudyHandle | list[StudyHandle], estimator: Estimator,
                   hardware: Hardware) -> list[Row]:
    """Each measured row of the studies with the model's prediction of their objective, or why
    none. Several studies must score the same objective on the same workloads and model, on the
    same GPU; the first one's space is what the model is asked about."""
    handles = handles if isinstance(handles, list) else [handles]
    # A value means its objective, on its workloads, of its model: pooled rows are predicted with
    # the first study's space, so every study must agree on all three.
    differ = sorted({part for h in handles[1:] for part in handles[0].space.differences(
        h.space, ("objective", "workloads", "model"))})
    if differ:
        raise InputError(f"the studies ({', '.join(h.name for h in handles)}) differ in their "
                         f"{' and '.join(differ)}: their measurements cannot be pooled")
    gpus = {h.name: (h.study.user_attrs.get(schema.FINGERPRINT) or {}).get("gpu") for h in handles}
    if len(set(gpus.values())) > 1:
        raise InputError("the studies ran on different GPUs ("
                         + ", ".join(f"{name}: {gpu}" for name, gpu in gpus.items())
                         + "): pool only measurements of one kind")
    rows = measured_rows(*handles)
    for row in rows:
        est, row.predicted = predict_objective(estimator, handles[0].space, row.engine, row.knobs, hardware)
        row.unsupported = None if row.predicted else (est.unsupported or "no prediction of the objective")
    return rows


def fp8_step(rows: list[Row]) -> dict[str, float] | None:
    """Online FP8's step over BF16 weights, measured and predicted, when both halves were measured."""
    halves = {q: [r for r in rows if r.knobs.get("quantization") == q] for q in ("fp8", "none")}
    if not all(halves.values()):
        return None

    def geomean(values: list[float]) -> float:
        return math.exp(statistics.fmean(math.log(v) for v in values))

    return {"n_fp8": len(halves["fp8"]), "n_bf16": len(halves["none"]),
            "measured": geomean([r.measured for r in halves["fp8"]]) / geomean([r.measured for r in halves["none"]]),
            "predicted": (geomean([r.predicted or 0.0 for r in halves["fp8"]])
                          / geomean([r.predicted or 0.0 for r in halves["none"]]))}


def rho_within_quantization(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """Spearman rho within each quantization (n >= 3): whether the model orders the batching
    knobs, once the step between weight formats, which dominates the overall rho, is taken out."""
    out: dict[str, dict[str, Any]] = {}
    for quant in sorted({str(r.knobs.get("quantization", "none")) for r in rows}):
        have = [r for r in rows if str(r.knobs.get("quantization", "none")) == quant]
        out[quant] = {"n": len(have), "spearman_rho": (
            spearman([r.predicted or 0.0 for r in have], [r.measured for r in have])
            if len(have) > 2 else None)}
    return out


def gap(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """Per engine: n, bias, sigma_log (n >= 2) and spearman_rho (n >= 3) over the rows with a
    prediction, the same rho within each quantization, and the FP8 step where both halves were
    measured."""
    out: dict[str, dict[str, Any]] = {}
    for engine in sorted({r.engine for r in rows}):
        have = [r for r in rows if r.engine == engine and r.predicted]
        logs = [math.log(r.measured / r.predicted) for r in have if r.predicted]
        out[engine] = {
            "n": len(have),
            "bias": math.exp(statistics.fmean(logs)) if logs else None,
            "sigma_log": statistics.stdev(logs) if len(logs) > 1 else None,
            "spearman_rho": (spearman([r.predicted or 0.0 for r in have], [r.measured for r in have])
                             if len(have) > 2 else None),
            "within_quantization": rho_within_quantization(have),
            "fp8_step": fp8_step(have),
        }
    return out
