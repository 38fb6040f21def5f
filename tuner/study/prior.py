"""Prior knowledge in the search: predicted values of configs steer the sampler, and the measurements
teach it how wrong the predictions are on this machine.

A prediction is a config with a number that should rank like the objective: a performance model's
estimate (``tuner.estimate``), or the value an earlier study measured for the same config on another
workload, GPU or engine version (a warm start). The sampler:

- at each trial, with probability ``share`` proposes the unmeasured candidate with the largest
  *expected improvement* over the best measured value, and otherwise leaves the trial to the base
  sampler (TPE);
- corrects a prediction by the log-ratio measured/predicted that the study has seen: per source and
  engine (a per-engine bias), plus the residual of the nearest measured configs (a knob-dependent
  distortion);
- is as unsure of a corrected prediction as the corrections have scattered (the spread of the
  measured log-ratios around their engine's bias; ``TAU_UNTESTED`` before there are any), less so
  the nearer the candidate is to a measured config: a config next to a measured one that did not
  beat the best is not worth a launch, one in an unmeasured region with a good prediction is;
- measures distance in the knobs the predictions depend on: a knob that never changes a predicted
  value (max_seq_len to a throughput model) does not make two configs different, so the sampler does
  not launch a config the model cannot tell apart from one measured already;
- sets ``share`` from how well the predictions have ranked the measured configs so far (Spearman's rho):
  a prior that ranks well keeps steering, a misleading one hands the search back to the base sampler, so
  a bad prior can cost a few launches but never the result.

Stateless between trials (everything is derived from the study's trials), so it resumes, and several
workers agree on what has been measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.record import schema

# Before this many measured predictions, trust the prior: it is all the search knows.
MIN_FOR_TRUST = 4
SHARE_TRUSTED = 0.8      # share of trials the prior proposes while it ranks well
SHARE_FLOOR = 0.15       # a misleading prior still proposes this share (it may recover)
NEIGHBOURS = 3
# Spread of log(measured / predicted) assumed before the study has measured enough to estimate it:
# a performance model off by ~35 % (aiconfigurator#1205 reports ~45 % TTFT error on A100 with vLLM).
TAU_UNTESTED = 0.3
TAU_FLOOR = 0.03         # never surer than launch-to-launch noise (0-3 %, h200-transformers.md)
MIN_FOR_SPREAD = 3


@dataclass(frozen=True)
class Prediction:
    """A predicted objective value for one config (the trial's params), from a named source."""

    params: Mapping[str, Any]
    value: float
    source: str = "prior"
    origin: str = ""  # where a measured prediction was measured: "<study>#<trial>"

    def key(self) -> tuple:
        return self._key

    @cached_property
    def _key(self) -> tuple:  # once per prediction: a landscape's are scored at every trial
        return config_key(self.params)


def config_key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Rank correlation; 0 when either side has no spread."""
    if len(a) < 2:
        return 0.0
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks with ties at their mean rank: a model that predicts one value for several configs
    (a knob it does not model) gets neither credit nor blame for the order they were listed in."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


class PriorSampler(optuna.samplers.BaseSampler):
    """Proposes the best corrected prediction for a share of the trials; ``base`` does the rest."""

    def __init__(self, base: optuna.samplers.BaseSampler, predictions: Sequence[Prediction], *,
                 maximize: bool = True, seed: int | None = None, engine_param: str = "engine"):
        self.base = base
        self.predictions = [p for p in predictions if p.value > 0 and math.isfinite(p.value)]
        self._pred_keys = [p.key() for p in self.predictions]
        self._by_key = dict(zip(self._pred_keys, self.predictions))
        self.maximize = maximize
        self.engine_param = engine_param
        self._rng = np.random.default_rng(seed)
        self._chosen: dict[int, dict[str, Any]] = {}
        self._keys = sorted({k for p in self.predictions for k in p.params})
        self._codes: dict[tuple[type, Any], tuple[float, int]] = {}
        self._table = self._encode(self.predictions)
        self._weights = self._knob_weights()

    # ---- what the study has taught ---------------------------------------------------------------

    def _measured(self, trials: Sequence[FrozenTrial]) -> list[tuple[Prediction, float]]:
        """(prediction, measured value) of each launched, served config that had a prediction."""
        out = {}
        for t in trials:
            if t.state != TrialState.COMPLETE or not schema.launched(t) or not schema.is_feasible(t):
                continue
            p = self._by_key.get(config_key(t.params))
            if p is not None and t.value is not None and t.value > 0:
                out[p.key()] = (p, t.value)  # the latest measurement of a config
        return list(out.values())

    def share(self, measured: Sequence[tuple[Prediction, float]]) -> float:
        """How many trials the prior proposes: all-in while it has not been tested, then by how
        well it ranked what was measured."""
        if len(measured) < MIN_FOR_TRUST:
            return SHARE_TRUSTED
        rho = spearman([p.value for p, _ in measured], [v for _, v in measured])
        if not self.maximize:
            rho = -rho
        return SHARE_FLOOR + (SHARE_TRUSTED - SHARE_FLOOR) * max(0.0, rho)

    def corrected(self, p: Prediction, measured: Sequence[tuple[Prediction, float]]) -> float:
        """The prediction times the error this study has seen: the mean log-ratio of its source and
        engine (shrunk towards the source's mean), plus the residual of its nearest measured
        neighbours."""
        return float(self._corrected(self._encode([p]), measured)[0])

    def _corrected(self, cands: _Encoded, measured: Sequence[tuple[Prediction, float]]) -> np.ndarray:
        """``corrected`` for many candidates at once (a landscape has thousands of predictions, and
        the sampler scores every unmeasured one at each trial)."""
        out = cands.value.copy()
        if not measured:
            return out
        meas = self._encode([q for q, _ in measured])
        ratio = np.log(np.array([v for _, v in measured]) / meas.value)
        for source in set(cands.source):
            same = meas.source == source
            if not same.any():
                continue
            global_bias = float(ratio[same].mean())
            for engine in set(cands.engine[cands.source == source]):
                rows = np.flatnonzero((cands.source == source) & (cands.engine == engine))
                own = np.flatnonzero(same & (meas.engine == engine))
                n = len(own)
                bias = (float(ratio[own].sum()) + global_bias) / (n + 1)
                if n:
                    dist = _distances(cands.take(rows), meas.take(own), self._weights)
                    # rounded: equal distances summed in another order stay ties (measured order)
                    near = np.argsort(dist.round(9), axis=1, kind="stable")[:, :NEIGHBOURS]
                    weights = 1.0 / (1.0 + np.take_along_axis(dist, near, axis=1))
                    resid = (weights * (ratio[own][near] - bias)).sum(1) / weights.sum(1)
                    out[rows] *= np.exp(bias + resid * n / (n + 1))
                else:
                    out[rows] *= math.exp(bias)
        return out

    def _encode(self, preds: Sequence[Prediction]) -> _Encoded:
        num = np.full((len(preds), len(self._keys)), np.nan)
        code = np.empty((len(preds), len(self._keys)), dtype=np.int64)
        for j, k in enumerate(self._keys):
            column = [self._value_code(p.params.get(k)) for p in preds]
            num[:, j] = [x for x, _ in column]
            code[:, j] = [c for _, c in column]
        engine = [self._value_code(p.params.get(self.engine_param))[1] for p in preds]
        return _Encoded(num, code, np.array(engine, dtype=np.int64),
                        np.array([p.source for p in preds], dtype=object),
                        np.array([p.value for p in preds], dtype=float))

    def _value_code(self, value: Any) -> tuple[float, int]:
        """(log of a positive number or nan, a code equal for equal values of one type)."""
        key = (type(value), value)
        if key not in self._codes:
            self._codes[key] = (math.log(value) if _positive_number(value) else math.nan,
                                len(self._codes))
        return self._codes[key]

    def _knob_weights(self) -> np.ndarray:
        """1 for a knob the predictions depend on, 0 for one they never do: among predictions that
        differ in that knob alone, every value is the same (and there is at least one such pair)."""
        weights = np.ones(len(self._keys))
        for j in range(len(self._keys)):
            others = np.delete(self._table.code, j, axis=1)
            groups: dict[bytes, float] = {}
            paired = False
            for row, value in zip(others, self._table.value):
                first = groups.setdefault(row.tobytes(), value)
                if first is not value:
                    paired = True
                    if abs(value / first - 1) > 1e-9:
                        break
            else:
                if paired:
                    weights[j] = 0.0
        return weights

    def _spread(self, measured: Sequence[tuple[Prediction, float]]) -> float:
        """How far a corrected prediction may be off: the scatter of the measured log-ratios
        around their (source, engine) mean."""
        groups: dict[tuple, list[float]] = {}
        for p, v in measured:
            groups.setdefault((p.source, p.params.get(self.engine_param)), []).append(
                math.log(v / p.value))
        resid = [r - float(np.mean(rs)) for rs in groups.values() if len(rs) > 1 for r in rs]
        if len(resid) < MIN_FOR_SPREAD:
            return TAU_UNTESTED
        return max(TAU_FLOOR, float(np.sqrt(np.mean(np.square(resid)))))

    def expected_improvement(self, cands: _Encoded, measured: Sequence[tuple[Prediction, float]],
                             best: float | None) -> np.ndarray:
        """E[max(0, value - best)] (for minimising, of 1/value over 1/best) with the value lognormal:
        median the corrected prediction, log-spread ``_spread`` times sqrt(1 - exp(-d)) for the
        distance d to the nearest measured config (0 at a measured config, the full spread far
        from all of them). Without a best value yet, the corrected prediction itself."""
        mean = np.log(self._corrected(cands, measured))
        if best is None or best <= 0:
            return mean if self.maximize else -mean
        if measured:
            near = _distances(cands, self._encode([q for q, _ in measured]), self._weights).min(1)
            sd = self._spread(measured) * np.sqrt(1.0 - np.exp(-near))
        else:
            sd = np.full(len(mean), TAU_UNTESTED)
        target = math.log(best)
        if not self.maximize:
            mean, target = -mean, -target
        sd = np.maximum(sd, 1e-12)
        z = (mean - target) / sd
        return np.exp(mean + sd ** 2 / 2) * _normal_cdf(z + sd) - math.exp(target) * _normal_cdf(z)

    def pick(self, trials: Sequence[FrozenTrial]) -> Prediction | None:
        """The unmeasured candidate with the largest expected improvement, or None (the base
        sampler's turn, or nothing left)."""
        measured = self._measured(trials)
        if self._rng.random() >= self.share(measured):
            return None
        tried = {config_key(t.params) for t in trials
                 if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)}
        open_ = np.array([i for i, k in enumerate(self._pred_keys) if k not in tried], dtype=int)
        if not len(open_):
            return None
        served = [t.value for t in trials if t.state == TrialState.COMPLETE and t.value is not None
                  and schema.launched(t) and schema.is_feasible(t) and t.value > 0]
        best = (max(served) if self.maximize else min(served)) if served else None
        scores = self.expected_improvement(self._table.take(open_), measured, best)
        return self.predictions[open_[int(np.argmax(scores))]]

    # ---- Optuna's sampler interface ----------------------------------------------------------------

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        fixed = study._storage.get_trial_system_attrs(trial._trial_id).get("fixed_params")
        if fixed:  # an enqueued trial (baseline, seed config, repeat) keeps its params
            return
        finished = study.get_trials(deepcopy=False)
        choice = self.pick([t for t in finished if t.number != trial.number])
        if choice is not None:
            self._chosen[trial.number] = dict(choice.params)

    def left_to_engine(self, study: optuna.Study, number: int) -> list[str]:
        """A config the prior proposes sets every knob; otherwise the base sampler's choice."""
        if number in self._chosen:
            return []
        ask = getattr(self.base, "left_to_engine", None)
        return ask(study, number) if ask else []

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if trial.number in self._chosen:
            return {}
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if trial.number in self._chosen:
            return {}
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        chosen = self._chosen.get(trial.number, {})
        if param_name in chosen and _contains(param_distribution, chosen[param_name]):
            return chosen[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._chosen.pop(trial.number, None)
        self.base.after_trial(study, trial, state, values)

    def done(self, study: optuna.Study) -> bool:
        done = getattr(self.base, "done", None)
        return bool(done and done(study))


def _contains(dist: BaseDistribution, value: Any) -> bool:
    try:
        return dist._contains(dist.to_internal_repr(value))
    except (ValueError, TypeError):
        return False


@dataclass(frozen=True)
class _Encoded:
    """Predictions as arrays: per knob the log of a positive number (nan otherwise) and a code for
    equality; the engine's code, the source and the predicted value."""

    num: np.ndarray
    code: np.ndarray
    engine: np.ndarray
    source: np.ndarray
    value: np.ndarray

    def take(self, rows: np.ndarray) -> _Encoded:
        return _Encoded(self.num[rows], self.code[rows], self.engine[rows], self.source[rows],
                        self.value[rows])


def _positive_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _distances(a: _Encoded, b: _Encoded, weights: np.ndarray) -> np.ndarray:
    """Knob-space distance of every pair: a categorical or boolean mismatch (or a knob one config
    lacks) counts 1, a numeric knob its log-ratio (a factor of e counts 1); each knob times its
    weight (0: the predictions never depend on it)."""
    na, nb = a.num[:, None, :], b.num[None, :, :]
    numeric = np.isfinite(na) & np.isfinite(nb)
    with np.errstate(invalid="ignore"):
        gap = np.abs(na - nb)
    return (np.where(numeric, gap, a.code[:, None, :] != b.code[None, :, :]) * weights).sum(-1)


def seeds(predictions: Sequence[Prediction], k: int, *, maximize: bool = True,
          engine_param: str = "engine", diversity: Sequence[str] = ("quantization",),
          covered: Sequence[Mapping[str, Any]] = ()) -> list[Prediction]:
    """The ``k`` best predictions, spread over engines and the ``diversity`` knobs: the best of each
    (engine, quantization) group first, then the next best overall. These replace the random startup.
    The groups of ``covered`` configs (the model's pick, queued already) come last: on one H200 the
    pick's runner-up was the pick with another memory fraction, a launch that teaches nothing new."""
    ordered = sorted(predictions, key=lambda p: p.value, reverse=maximize)
    picked: list[Prediction] = []

    def group_of(params: Mapping[str, Any]) -> tuple:
        return (params.get(engine_param), *(params.get(d) for d in diversity))

    groups: set[tuple] = {group_of(c) for c in covered}
    for p in ordered:
        group = group_of(p.params)
        if group not in groups:
            groups.add(group)
            picked.append(p)
    rest = [p for p in ordered if p not in picked]
    return (picked + rest)[:k] if len(picked) < k else sorted(
        picked, key=lambda p: p.value, reverse=maximize)[:k]

