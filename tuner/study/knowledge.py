"""Where a study's prior knowledge comes from, and what it queues: a performance model's predictions
(the space's ``prior:``) and earlier studies' measurements (``tune start --warm-start``).

Both become ``Prediction``s for the prior sampler (``tuner.study.prior``) and are stored on the study
(``schema.PRIOR``), so `tune resume`, other workers and `tune best` see the same knowledge and where it
came from. Both queue configs before the search starts: the best predicted configs (spread over engines
and quantizations) instead of a random start, and a warm start's best measured configs; the model's own
top pick runs as a control arm (``model-pick``), so `tune best` can say how far the model was off.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.configs.predict import predict_objective
from tuner.configs.rules import check
from tuner.engines.hardware import Hardware, detect, profile
from tuner.errors import InputError
from tuner.files import read_text, write_output
from tuner.estimate import get_estimator
from tuner.record import schema
from tuner.space import ENGINE_PARAM, Space
from tuner.space.suggest import candidate_configs
from tuner.study.prior import Prediction, config_key, seeds



@dataclass
class Knowledge:
    """The predictions of one study, and what to say about them."""

    predictions: list[Prediction] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)  # one per estimator or warm start
    model_pick: Prediction | None = None

    def to_attr(self) -> dict[str, Any]:
        return {"sources": self.sources,
                "predictions": [{"params": dict(p.params), "value": p.value, "source": p.source,
                                 "origin": p.origin} for p in self.predictions],
                "model_pick": None if self.model_pick is None else
                {"params": dict(self.model_pick.params), "value": self.model_pick.value}}

    @classmethod
    def from_attr(cls, stored: dict[str, Any] | None) -> "Knowledge":
        if not stored:
            return cls()
        preds = [Prediction(d["params"], float(d["value"]), d.get("source", "prior"),
                            d.get("origin", "")) for d in stored.get("predictions", [])]
        pick = stored.get("model_pick")
        return cls(preds, list(stored.get("sources", [])),
                   None if pick is None else Prediction(pick["params"], float(pick["value"]), "model"))


def _hardware(space: Space) -> Hardware:
    assert space.prior is not None
    return profile(space.prior.gpu) if space.prior.gpu else detect()


def model_predictions(space: Space, *, seed: int = 0) -> Knowledge:
    """Ask the space's estimator about ``prior.candidates`` sampled configs per engine (plus each
    engine's defaults). Configs a rule prunes get no prediction: they are never launched. Where the
    model has no number it says why, counted per reason in the source's record."""
    prior = space.prior
    if prior is None:
        return Knowledge()
    hardware = _hardware(space)
    estimator = get_estimator(prior.estimator)
    metric = space.objective.targets()[0].metric
    if space.objective.multi:
        raise InputError("prior: needs a single objective (the model predicts one number)")
    predictions: list[Prediction] = []
    unsupported: dict[str, int] = {}
    pruned = 0
    seen: set[tuple] = set()
    source_name = ""
    for engine, choice in space.engines.items():
        # Knobs the model does not take stay at their documented defaults: the model can answer for
        # those configs, and the search still explores the knobs through the base sampler.
        modelled = getattr(estimator, "modelled", None)
        pinned = {k: p.default for k, p in choice.params.items()
                  if modelled is not None and k not in modelled and p.default is not None}
        configs = candidate_configs(space, engine, prior.candidates, seed, fixed=pinned)
        for params, knobs in configs:
            key = config_key(params)
            if key in seen:
                continue
            seen.add(key)
            if any(v.severity == "prune" for v in check(engine, knobs, hardware=hardware, space=space)):
                pruned += 1
                continue
            est, value = predict_objective(estimator, space, engine, {**choice.fixed, **knobs}, hardware)
            source_name = source_name or est.source
            if value is None or not math.isfinite(value) or value <= 0:
                why = est.unsupported or (est.notes[0] if est.notes else "no number for " + metric)
                unsupported[why] = unsupported.get(why, 0) + 1
                continue
            predictions.append(Prediction(params, value, f"model:{prior.estimator}"))
    maximize = space.objective.direction == "maximize"
    best = sorted(predictions, key=lambda p: p.value, reverse=maximize)
    source = {"kind": "model", "estimator": prior.estimator, "version": source_name,
              "gpu": hardware.name, "asked": len(seen), "predicted": len(predictions),
              "pruned_by_rules": pruned,
              "unsupported": dict(sorted(unsupported.items(), key=lambda kv: -kv[1])[:10])}
    return Knowledge(predictions, [source], best[0] if best and prior.model_pick else None)


PREDICTIONS_FORMAT = "tuner-predictions/1"


def save_predictions(space: Space, path: Path, *, seed: int = 0) -> Knowledge:
    """The space's model predictions, written to a file: made where the performance model is
    installed (a CPU machine), used where the GPU is (``tune start --prior-file``), which need not
    carry the model's package at all."""
    found = model_predictions(space, seed=seed)
    if not found.predictions:
        reasons = [why for source in found.sources for why in source.get("unsupported", {})]
        why = f": {reasons[0]}" if reasons else " (see `tune plan --estimate`)"
        raise InputError(f"space {space.name!r}: the model predicted no config{why}; nothing to save")
    doc = {"format": PREDICTIONS_FORMAT, "space": space.name, "metric": space.objective.targets()[0].metric,
           "engines": sorted(space.engines), **found.to_attr()}
    write_output(path, json.dumps(doc, indent=1) + "\n", "--save-prior")
    return found


def carried_predictions(space: Space, path: Path) -> Knowledge:
    """Predictions saved by ``save_predictions`` for this space, checked against it: another space,
    objective or engine set is refused rather than steering the search with numbers for other configs."""
    where = f"--prior-file {path}"
    try:
        doc = json.loads(read_text(path, "predictions file"))
    except ValueError as e:
        raise InputError(f"{where}: not a predictions file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != PREDICTIONS_FORMAT:
        raise InputError(f"{where}: not a predictions file (write one with `tune plan --space "
                         f"{space.name} --gpu GPU --save-prior FILE`)")
    for key, here in (("space", space.name), ("metric", space.objective.targets()[0].metric),
                      ("engines", sorted(space.engines))):
        if doc.get(key) != here:
            raise InputError(f"{where}: made for {key} {doc.get(key)!r}, this study's is {here!r}: "
                             "save the predictions again for this space")
    found = Knowledge.from_attr(doc)
    for source in found.sources:
        source["carried_from"] = str(path)
    return found


def warm_start(space: Space, sources: Sequence[tuple[str, optuna.Study]], *,
               fingerprint_here: dict[str, Any]) -> Knowledge:
    """Earlier studies' measured configs as predictions for this one. Their fingerprints, spaces and
    engine versions are compared with this study's, and what differs is recorded: the sampler learns
    the ratio between there and here from the first measurements."""
    out = Knowledge()
    for name, study in sources:
        if space.objective.multi or len(study.directions) > 1:
            raise InputError(f"--warm-start {name}: warm starts need a single objective")
        if study.direction.name.lower() != space.objective.direction:
            raise InputError(f"--warm-start {name}: its objective direction differs from this space's")
        measured: dict[tuple, Prediction] = {}
        versions: set[str] = set()
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if not (schema.is_feasible(t) and schema.launched(t)) or t.value is None or t.value <= 0:
                continue
            if t.user_attrs.get(schema.ENGINE_VERSION):
                versions.add(f"{t.user_attrs.get(schema.ENGINE)} {t.user_attrs[schema.ENGINE_VERSION]}")
            p = Prediction(dict(t.params), float(t.value), f"study:{name}", f"{name}#{t.number}")
            measured[p.key()] = p  # the latest measurement of a config
        if not measured:
            raise InputError(f"--warm-start {name}: the study has no served trial to learn from")
        out.predictions += measured.values()
        out.sources.append({"kind": "study", "study": name, "measured": len(measured),
                            "differs": _differences(space, study, fingerprint_here),
                            "engine_versions": sorted(versions)})
    return out


def _differences(space: Space, study: optuna.Study, here: dict[str, Any]) -> dict[str, Any]:
    stored = study.user_attrs.get(schema.FINGERPRINT) or {}
    diffs = {k: [stored.get(k), here.get(k)] for k in ("device", "gpu", "gpu_count", "cpu")
             if stored.get(k) != here.get(k)}
    old = study.user_attrs.get(schema.SPACE) or {}
    now = space.model_dump(mode="json")
    for key in ("model", "workload", "workloads", "objective"):
        if old.get(key) != now.get(key):
            diffs[key] = "differs"
    return diffs


def merge(*parts: Knowledge) -> Knowledge:
    out = Knowledge()
    for k in parts:
        out.predictions += k.predictions
        out.sources += k.sources
        out.model_pick = out.model_pick or k.model_pick
    return out


def queue(study: optuna.Study, space: Space, knowledge: Knowledge, *, warm_top_k: int = 3) -> None:
    """Queue what the knowledge says to try first: the model's pick as a control arm, the best
    predicted configs (diverse over engines and quantizations), and each warm start's best configs."""
    maximize = space.objective.direction == "maximize"
    if knowledge.model_pick is not None:
        params = dict(knowledge.model_pick.params)
        study.enqueue_trial(params, user_attrs={
            schema.ARM: schema.MODEL_PICK_ARM, schema.ENGINE: _engine(space, params),
            schema.PREDICTION: knowledge.model_pick.value, schema.PREDICTED_BY: "model"})
    queued = {config_key(knowledge.model_pick.params)} if knowledge.model_pick else set()
    by_source: dict[str, list[Prediction]] = {}
    for p in knowledge.predictions:
        by_source.setdefault(p.source, []).append(p)
    for source, preds in by_source.items():
        if source.startswith("model:"):
            k = space.prior.seeds if space.prior else 0
            picked = seeds([p for p in preds if p.key() not in queued], k, maximize=maximize,
                           covered=[knowledge.model_pick.params] if knowledge.model_pick else [])
            attrs = {schema.PREDICTED_BY: source}
        else:
            picked = sorted(preds, key=lambda p: p.value, reverse=maximize)[:warm_top_k]
            attrs = {}
        for p in picked:
            if p.key() in queued:
                continue
            queued.add(p.key())
            extra = ({schema.WARM_START_OF: p.origin} if p.origin else {schema.PREDICTION: p.value})
            study.enqueue_trial(dict(p.params), user_attrs={schema.ARM: schema.SEARCH, **attrs, **extra},
                                skip_if_exists=True)


def _engine(space: Space, params: dict[str, Any]) -> str:
    return params.get(ENGINE_PARAM) or next(iter(space.engines))
