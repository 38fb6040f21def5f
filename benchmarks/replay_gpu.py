"""Knowledge-guided search at GPU scale: replay the estimated landscapes of the mission space
(benchmarks/landscape.py) on the live driver, with a reality gap between the model and the truth.

Issue 13, part 6. Each strategy is a live study -- ``tuner.study.run`` with the replay executor
(``tuner.study.replay``), the recorder judging rules for the replayed GPU (``TrialRecorder(...,
hardware=profile(gpu))``), the engines' defaults queued as baselines (``enqueue_baselines``), and for
the prior arms the model's pick and seeds queued by ``tuner.study.knowledge.queue`` and the sampler
wrapped by ``sampler_for(space, predictions=...)``, as ``tune start`` does.

The truth a trial measures is the landscape's estimate times a structured error, drawn per seed.
``f_engine`` is a smooth random function with unit variance (random Fourier features, length scale
LENGTH_SCALE in log2 units) of (log2 max_num_seqs, log2 max_num_tokens) and ``b_engine`` ~ N(0, 1);
the same draws serve every case (common random numbers). The gap is measured (the default) or
assumed:

- measured (``--gap measured``, from benchmarks/data/reality-gap-h200.json, written by
  benchmarks/calibrate.py from real H200 launches): per engine the bias B (geometric mean of
  measured / predicted), the spread s of log(measured / predicted) and their count n;
  truth = estimate x B x exp(s / sqrt(n) x b_engine) x exp(s x f_engine): the measured bias with
  its standard error, and a distortion of the measured size. An engine the file does not measure
  (TensorRT-LLM) gets log B drawn around the mean of the measured engines' log-biases with their
  spread, and the pooled s.
- assumed (``--gap assumed --sigmas ...``, the earlier simulation):
  truth = estimate x exp(sigma / sqrt(2) x (b_engine + f_engine)), so sigma is the standard
  deviation of log(truth / estimate), half of its variance from each part.
Each launch adds the noise measured between identical H200 launches (0-3 %,
docs/results/h200-transformers.md: a lognormal of sd NOISE_SD). Configs the estimator calls oom or
unsupported, and those a rule prunes, fail at launch (the rules prune most of them first, at no
cost). The misleading case shuffles the prior's values over its configs (the truth is sigma = 0.3's).

Costs (engine-seconds) come from the landscape's ``meta.costs``: launch to ready per engine and
teardown as triangular(low, median, high) draws per launch, the benchmark as tokens_per_run / value
(this reproduces the motivating study's three benchmark durations), a refused launch 0.6-1.0 x the
launch time. The screen (multi-fidelity) benchmarks SCREEN_SHARE of the prompts with SCREEN_NOISE_SD
more noise (a shorter benchmark); that is an assumption, not a measurement.

    PYTHONPATH=. .venv/bin/python benchmarks/replay_gpu.py --seeds 20     # the measured gap
    PYTHONPATH=. .venv/bin/python benchmarks/replay_gpu.py --gap assumed --sigmas 0.3   # as before

Writes benchmarks/data/replay-gpu-measured.{json,md} (measured) or replay-gpu-results.{json,md}
(assumed), and plots under docs/img/ (replay-gpu-*).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml

from benchmarks.landscape import write_checkpoints
from benchmarks.replay import TOLERANCE, Collector, Run, _median_censored, _q
from tuner.engines.hardware import profile
from tuner.paths import SPACES_DIR
from tuner.space import ENGINE_PARAM, Space
from tuner.study import StudyHandle, TrialRecorder, sampler_for
from tuner.study import run as run_study
from tuner.study.knowledge import Knowledge, queue, warm_start
from tuner.study.lifecycle import enqueue_baselines
from tuner.study.prior import Prediction
from tuner.study.replay import Grid, Launch, Point, ReplayExecutor

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"

LANDSCAPES = {
    "a100": {"file": "landscape-a100-qwen3-14b.json", "gpu": "a100-sxm-80gb", "model": "Qwen3-14B"},
    "h200": {"file": "landscape-h200-qwen3-32b.json", "gpu": "h200-141gb", "model": "Qwen3-32B"},
}
ENGINES = ("vllm", "sglang", "trtllm")
# The order in which each engine's params are suggested (greedy walks them in this order too).
# SGLang's max_num_tokens is its --chunked-prefill-size: it exists only with chunked prefill.
PARAM_ORDER = ("quantization", "max_num_seqs", "chunked_prefill", "max_num_tokens", "max_seq_len",
               "gpu_memory_utilization", "kv_cache_dtype")
# Engine defaults on the landscape's ladders (a100-throughput.yaml; seed-study.md "engines at
# defaults"). SGLang sizes max_running_requests from KV memory and TensorRT-LLM defaults to 2048
# sequences: with 1000 prompts both run the batch the KV cache fits, as the 1024 rung does (the
# landscape's batch at defaults: SGLang 560, TensorRT-LLM 652). SGLang's memory fraction is automatic
# (about 0.9 on an 80 GB card).
DEFAULTS = {
    "vllm": {"quantization": "none", "max_num_seqs": 256, "max_num_tokens": 2048,
             "chunked_prefill": True, "max_seq_len": 40960, "gpu_memory_utilization": 0.9,
             "kv_cache_dtype": "auto"},
    "sglang": {"quantization": "none", "max_num_seqs": 1024, "max_num_tokens": 8192,
               "chunked_prefill": True, "max_seq_len": 40960, "gpu_memory_utilization": 0.9,
               "kv_cache_dtype": "auto"},
    "trtllm": {"quantization": "none", "max_num_seqs": 1024, "max_num_tokens": 8192,
               "chunked_prefill": False, "max_seq_len": 40960, "gpu_memory_utilization": 0.9,
               "kv_cache_dtype": "auto"},
}
GRID_KNOBS = [ENGINE_PARAM, *PARAM_ORDER]

SIGMAS = (0.0, 0.15, 0.3, 0.5)
TARGET_SIGMA = 0.3
LENGTH_SCALE = 2.0       # log2 units: the distortion changes over a factor of ~4 in a knob
FOURIER_FEATURES = 64
NOISE_SD = 0.015         # launch to launch: ~95 % within +-3 % (docs/results/h200-transformers.md)
LAUNCHES_PER_POINT = 3   # independent launches per config the replay draws from
SCREEN_SHARE = 0.2       # the screen benchmarks 200 of the 1000 prompts
SCREEN_NOISE_SD = 0.05
SCREEN = {"screen_prompts": 200, "margin": 0.1, "n_startup": 2}
N_TRIALS = 40            # a100-throughput's budget: launches per study
BUDGETS = (4, 6, 8, 12, 20, 30, 40)

# name -> (sampler, prior: None | "model" | "shuffled" | "warm" | "pick", multi-fidelity)
STRATEGIES: dict[str, tuple[str, str | None, bool]] = {
    "greedy": ("greedy", None, False),
    "random": ("random", None, False),
    "tpe": ("tpe", None, False),
    "gp": ("gp", None, False),
    "tpe-prior": ("tpe", "model", False),
    "tpe-warm": ("tpe", "warm", False),
    "model-pick": ("tpe", "pick", False),
    "tpe-mf": ("tpe", None, True),
    "tpe-prior-mf": ("tpe", "model", True),
    "tpe-prior-misleading": ("tpe", "shuffled", False),
}
# Which strategies run at which sigma: every one at the target sigma, the prior's arms and their
# controls at the others (the misleading prior is its own case, on sigma = 0.3's truth).
AT_EVERY_SIGMA = ("greedy", "tpe", "tpe-prior", "model-pick")


# ---- the landscape and its truth ---------------------------------------------------------------

@dataclass
class Landscape:
    name: str
    meta: dict
    configs: list[dict]          # trial params: engine + knobs (a conditional knob absent)
    estimate: np.ndarray         # total tok/s, nan where the model has none
    status: list[str]            # ok | pruned | oom | unsupported
    x: np.ndarray = field(repr=False, default=None)  # (log2 max_num_seqs, log2 max_num_tokens)

    @classmethod
    def load(cls, name: str) -> Landscape:
        data = json.loads((DATA / LANDSCAPES[name]["file"]).read_text())
        ix = {c: i for i, c in enumerate(data["columns"])}
        rows = data["points"]
        configs, est, status, x = [], [], [], []
        whole_prompts = math.log2(max(data["meta"]["ladders"]["max_num_tokens"]))
        for r in rows:
            params = {ENGINE_PARAM: r[ix["engine"]]}
            params.update({k: r[ix[k]] for k in PARAM_ORDER if r[ix[k]] is not None})
            configs.append(params)
            value = r[ix["total_tok_s"]]
            est.append(math.nan if value is None else float(value))
            status.append(r[ix["status"]])
            tokens = r[ix["max_num_tokens"]]
            x.append((math.log2(r[ix["max_num_seqs"]]),
                      whole_prompts if tokens is None else math.log2(tokens)))
        return cls(name, data["meta"], configs, np.array(est), status, np.array(x))

    def subset(self, **ladders: list) -> Landscape:
        """The configs whose knobs are on these (shorter) ladders: a small replay space (tests)."""
        keep = [i for i, c in enumerate(self.configs)
                if all(c.get(k, v[0] if k == "max_num_tokens" else None) in v
                       for k, v in ladders.items())]
        meta = {**self.meta, "ladders": {**self.meta["ladders"], **{
            k: v for k, v in ladders.items() if k in self.meta["ladders"]}}}
        if "quantization" in ladders:
            meta["quantizations"] = ladders["quantization"]
        return Landscape(self.name, meta, [self.configs[i] for i in keep], self.estimate[keep],
                         [self.status[i] for i in keep], self.x[keep])

    @property
    def ok(self) -> np.ndarray:
        return np.array([s == "ok" for s in self.status]) & np.isfinite(self.estimate)


def error_draws(land: Landscape, seed: int) -> tuple[dict[str, float], np.ndarray]:
    """One seed's unit draws: per engine b ~ N(0, 1), and per config its engine's smooth
    distortion f over (log2 max_num_seqs, log2 max_num_tokens), of variance 1."""
    rng = np.random.default_rng([seed, sorted(LANDSCAPES).index(land.name), 13])
    engines = np.array([c[ENGINE_PARAM] for c in land.configs])
    bias, field_ = {}, np.zeros(len(land.configs))
    for engine in ENGINES:
        bias[engine] = rng.normal()
        w = rng.normal(0.0, 1.0 / LENGTH_SCALE, (FOURIER_FEATURES, 2))
        phase = rng.uniform(0, 2 * math.pi, FOURIER_FEATURES)
        mask = engines == engine
        field_[mask] = math.sqrt(2.0 / FOURIER_FEATURES) * np.cos(land.x[mask] @ w.T + phase).sum(1)
    return bias, field_


def log_error(land: Landscape, seed: int) -> np.ndarray:
    """The assumed gap's structured error with unit standard deviation (multiply by sigma):
    per-engine bias plus the smooth distortion, each of variance 1/2."""
    bias, field_ = error_draws(land, seed)
    b = np.array([bias[c[ENGINE_PARAM]] for c in land.configs])
    return (b + field_) / math.sqrt(2)


@dataclass(frozen=True)
class Gap:
    """The reality gap of one case: ``sigma`` (assumed: one size for every engine, a random
    per-engine bias), or ``measured``: per engine (bias, sigma, n) of log(measured / predicted)."""

    sigma: float | None = None
    measured: tuple[tuple[str, float, float, int], ...] = ()
    source: str = ""

    @classmethod
    def from_file(cls, path: Path) -> Gap:
        """The engines benchmarks/calibrate.py measured with a bias and a spread (n >= 2)."""
        data = json.loads(path.read_text())
        rows = tuple((e, g["bias"], g["sigma_log"], g["n"]) for e, g in sorted(data["gap"].items())
                     if g.get("bias") and g.get("sigma_log") is not None)
        if not rows:
            raise SystemExit(f"{path}: no engine with a measured bias and spread")
        return cls(measured=rows, source=str(path.resolve().relative_to(REPO))
                   if path.resolve().is_relative_to(REPO) else str(path))

    @property
    def label(self) -> str:
        return "measured gap" if self.sigma is None else f"sigma={self.sigma:g}"

    def unmeasured(self) -> tuple[float, float, float]:
        """For an engine without a measurement: mean and spread of the measured engines' log-biases
        (the assumed gap's bias part, sigma 0.3 / sqrt 2, when fewer than two are measured), and
        the pooled spread."""
        logs = [math.log(b) for _, b, _, _ in self.measured]
        spread = statistics.stdev(logs) if len(logs) > 1 else TARGET_SIGMA / math.sqrt(2)
        dof = sum(n - 1 for *_, n in self.measured)
        pooled = math.sqrt(sum((n - 1) * sd ** 2 for _, _, sd, n in self.measured) / dof) if dof else 0.0
        return statistics.fmean(logs), spread, pooled

    def log_ratio(self, land: Landscape, seed: int) -> np.ndarray:
        """log(truth / estimate) of every config in this seed's reality."""
        if self.sigma is not None:
            return self.sigma * log_error(land, seed)
        bias, field_ = error_draws(land, seed)
        mean, spread, pooled = self.unmeasured()
        per_engine = {e: (math.log(b) + sd / math.sqrt(n) * bias[e], sd) for e, b, sd, n in self.measured}
        out = np.zeros(len(land.configs))
        for i, c in enumerate(land.configs):
            e = c[ENGINE_PARAM]
            mu, sd = per_engine.get(e, (mean + spread * bias[e], pooled))
            out[i] = mu + sd * field_[i]
        return out


def build_grid(land: Landscape, gap: Gap, seed: int) -> Grid:
    """One seed's reality as a replay grid: LAUNCHES_PER_POINT launches per config, each with its
    noise and its costs."""
    rng = np.random.default_rng([seed, sorted(LANDSCAPES).index(land.name), 17])
    n, k = len(land.configs), LAUNCHES_PER_POINT
    truth = land.estimate * np.exp(gap.log_ratio(land, seed))
    costs = land.meta["costs"]
    tokens = land.meta["workload"]["tokens_per_run"]
    ready = {e: costs["launch_to_ready_s"][e] for e in ENGINES}  # [median, low, high]
    t_mid, t_low, t_high = costs["teardown_s"]
    noise = np.exp(rng.normal(0, NOISE_SD, (n, k)))
    screen_noise = np.exp(rng.normal(0, SCREEN_NOISE_SD, (n, k)))
    u_ready = rng.random((n, k))
    teardown = rng.triangular(t_low, t_mid, t_high, (n, k))
    fail_share = rng.uniform(0.6, 1.0, (n, k))
    ok = land.ok
    points = []
    for i, params in enumerate(land.configs):
        mid, low, high = ready[params[ENGINE_PARAM]]
        launches = []
        for j in range(k):
            up = _triangular_ppf(u_ready[i, j], low, mid, high)
            if not ok[i]:
                launches.append(Launch(False, float(fail_share[i, j] * up)))
                continue
            value = float(truth[i] * noise[i, j])
            screen = value * float(screen_noise[i, j])
            launches.append(Launch(True, float(up + teardown[i, j]), screen,
                                   SCREEN_SHARE * tokens / screen, (value,), (tokens / value,)))
        points.append(Point(params, launches))
    return Grid(GRID_KNOBS, points, "maximize", {"objective": "total_token_throughput",
                                                 "gap": gap.label, "seed": seed})


def _triangular_ppf(u: float, low: float, mode: float, high: float) -> float:
    """A triangular draw from a uniform one (one uniform per launch keeps draws aligned)."""
    c = (mode - low) / (high - low)
    if u < c:
        return low + math.sqrt(u * (high - low) * (mode - low))
    return high - math.sqrt((1 - u) * (high - low) * (high - mode))


def model_knowledge(land: Landscape, *, shuffle_seed: int | None = None) -> Knowledge:
    """The estimator's predictions as the live tool stores them (no prediction for a config a rule
    prunes or the model cannot answer), its top pick, and with ``shuffle_seed`` a misleading
    prior: the same values shuffled over the configs."""
    ok = np.flatnonzero(land.ok)
    values = land.estimate[ok]
    if shuffle_seed is not None:
        values = np.random.default_rng([shuffle_seed, 23]).permutation(values)
    preds = [Prediction(land.configs[i], float(v), "model:aiconfigurator") for i, v in zip(ok, values)]
    pick = max(preds, key=lambda p: p.value)
    source = {"kind": "model", "estimator": "aiconfigurator", "version": land.meta["estimator_source"],
              "gpu": land.meta["gpu"], "predicted": len(preds), "shuffled": shuffle_seed is not None}
    return Knowledge(preds, [source], Prediction(pick.params, pick.value, "model"))


# ---- the replay space --------------------------------------------------------------------------

def replay_space(land: Landscape, checkpoints: dict[str, str]) -> Space:
    """a100-throughput.yaml (ShareGPT at rate inf, total token throughput, the study's engines and
    images) with every knob categorical on the landscape's ladders, the engines at defaults as
    baselines, a prior and a screen; the model is a local copy of the landscape's checkpoint
    shapes, so the rules read the same facts the landscape was built with."""
    raw = yaml.safe_load((SPACES_DIR / "a100-throughput.yaml").read_text())
    ladders = land.meta["ladders"]
    engines = {}
    for engine in ENGINES:
        params: dict[str, Any] = {}
        for name in PARAM_ORDER:
            default = DEFAULTS[engine][name]
            if name == "quantization":
                params[name] = {"type": "categorical", "default": default,
                                "choices": land.meta.get("quantizations", ["none", "fp8", "awq"])}
            elif name == "chunked_prefill":
                params[name] = {"type": "bool", "default": default}
            else:
                params[name] = {"type": "categorical", "choices": ladders[name], "default": default}
        if engine == "sglang":
            params["max_num_tokens"]["when"] = {"chunked_prefill": True}
        engines[engine] = {"container": raw["engines"][engine]["container"], "params": params}
    raw.update({
        "name": f"replay-gpu-{land.name}",
        "description": f"GPU replay of {land.meta['model_shape']} on {land.meta['gpu']}",
        "model": {"path": checkpoints["none"],
                  "variants": {q: checkpoints[q] for q in ("fp8", "awq")}},
        "engines": engines,
        "baselines": [{"name": f"{e}-defaults", "engine": e} for e in ENGINES],
        "prior": {"estimator": "aiconfigurator", "gpu": land.meta["gpu"]},
        "fidelity": SCREEN,
        "budget": {"n_trials": N_TRIALS},
    })
    return Space.model_validate(raw)


# ---- one replayed study ------------------------------------------------------------------------

def replay(space: Space, grid: Grid, strategy: str, seed: int, *, n_trials: int = N_TRIALS,
           knowledge: Knowledge | None = None, hardware_gpu: str,
           table: dict[str, tuple[str, str | None, bool]] = STRATEGIES) -> Run:
    """One study as ``tune start`` makes and runs it, answered from ``grid``; ``table`` says what
    the strategy is (benchmarks/replay_measured.py has its own)."""
    sampler, prior, multi_fidelity = table[strategy]
    update: dict[str, Any] = {
        "sampler": sampler, "seed": seed, "fidelity": space.fidelity if multi_fidelity else None,
        "budget": space.budget.model_copy(update={"n_trials": n_trials, "timeout_s": None})}
    if prior == "pick":  # the control arm alone: the model's top config, launched once
        update.update(baselines=[], budget=space.budget.model_copy(update={"n_trials": 1}))
        n_trials = 1
    live = space.model_copy(update=update)
    study = optuna.create_study(direction="maximize", sampler=sampler_for(live),
                                pruner=optuna.pruners.NopPruner())
    handle = StudyHandle(study, live, "replay://memory")
    enqueue_baselines(handle)
    if knowledge is not None:
        queue(study, live, knowledge)
        if knowledge.predictions:
            study.sampler = sampler_for(live, predictions=knowledge.predictions)
    executor = ReplayExecutor(handle, grid=grid, seed=seed)
    run = Run(strategy, seed, study=study)
    recorder = TrialRecorder(study, live, handle.url, artifacts=False,
                             hardware=profile(hardware_gpu))
    run_study(handle, executor=executor, n_trials=n_trials, recorder=recorder,
              reporter=Collector(run, grid, executor, study))
    return run


def pick_only(knowledge: Knowledge) -> Knowledge:
    return Knowledge([], knowledge.sources, knowledge.model_pick)


# ---- the whole benchmark -----------------------------------------------------------------------

@dataclass
class Case:
    landscape: str
    gap: str  # Gap.label
    misleading: bool = False

    @property
    def label(self) -> str:
        return f"{self.landscape} {self.gap}" + (" misleading" if self.misleading else "")


def is_target(gap: Gap) -> bool:
    """The case every strategy runs in: the measured gap, or the assumed target sigma."""
    return gap.sigma is None or gap.sigma == TARGET_SIGMA


def cases_for(gap: Gap, strategies: list[str]) -> dict[str, list[str]]:
    """Which strategies run in which case for this gap: every one in the target case, the prior's
    arms and their controls at the other sigmas; the misleading prior is its own case on the
    target case's truth."""
    plain = [s for s in strategies if STRATEGIES[s][1] != "shuffled"
             and (is_target(gap) or s in AT_EVERY_SIGMA)]
    out = {"": plain}
    if is_target(gap):
        out["misleading"] = [s for s in strategies if STRATEGIES[s][1] == "shuffled"]
    return {k: v for k, v in out.items() if v}


def run_benchmark(lands: dict[str, Landscape], spaces: dict[str, Space], *, gaps: list[Gap],
                  seeds: int, strategies: list[str], log=print) -> tuple[dict, dict]:
    """Every (landscape, gap) case: each strategy over ``seeds`` seeds, each seed its own reality
    (one grid per landscape) shared by all strategies. A warm start comes from the other
    landscape's ``tpe-prior`` study of the same seed and gap (its measured configs), so that one
    runs first. Returns the runs per case key (landscape, gap label[, "misleading"]) and strategy,
    and each case's optimum per seed."""
    runs: dict[tuple, dict[str, list[Run]]] = {}
    optima: dict[tuple, list[dict]] = {}
    skipped: set[str] = set()
    for gap in gaps:
        label = gap.label
        cases = cases_for(gap, strategies)
        t0 = time.monotonic()
        for seed in range(seeds):
            grids = {name: build_grid(land, gap, seed) for name, land in lands.items()}
            studies = {}
            for name, land in lands.items():
                model = model_knowledge(land)
                for tag, wanted in cases.items():
                    key = (name, label, tag) if tag else (name, label)
                    optima.setdefault(key, []).append(reality(land, grids[name]))
                    for strategy in wanted:
                        prior = STRATEGIES[strategy][1]
                        if strategy == "gp" and not _has_torch():
                            skipped.add(strategy)
                            continue
                        if prior == "warm":  # after both landscapes' tpe-prior, below
                            continue
                        knowledge = None if prior is None else {
                            "model": model, "pick": pick_only(model),
                            "shuffled": model_knowledge(land, shuffle_seed=seed)
                            if prior == "shuffled" else None}[prior]
                        r = replay(spaces[name], grids[name], strategy, seed, knowledge=knowledge,
                                   hardware_gpu=land.meta["gpu"])
                        if strategy == "tpe-prior":
                            studies[name] = r.study
                        r.study = None
                        runs.setdefault(key, {}).setdefault(strategy, []).append(r)
            if "tpe-warm" in cases.get("", []) and len(lands) > 1:
                for name, land in lands.items():
                    other = next(o for o in lands if o != name)
                    if other not in studies:
                        continue
                    k = warm_start(spaces[name], [(f"{other}-tpe-prior-{seed}", studies[other])],
                                   fingerprint_here={})
                    r = replay(spaces[name], grids[name], "tpe-warm", seed, knowledge=k,
                               hardware_gpu=land.meta["gpu"])
                    r.study = None
                    runs[(name, label)].setdefault("tpe-warm", []).append(r)
            if seed % 10 == 9 or seed == seeds - 1:
                log(f"{label}: {seed + 1}/{seeds} seeds, {time.monotonic() - t0:.0f}s")
    for s in skipped:
        log(f"{s}: skipped (Optuna's GPSampler needs PyTorch, not installed here)")
    return runs, optima


def reality(land: Landscape, grid: Grid) -> dict[str, float]:
    """How hard one seed's reality is for a prior: its optimum, how many configs are within 2 % of
    it, and where the model ranks the best of them."""
    true = np.array([p.true_value if p.feasible else np.nan for p in grid.points])
    within = np.flatnonzero(true >= (1 - TOLERANCE) * grid.optimum)
    ok = land.ok
    rank = min(int((land.estimate[ok] > land.estimate[i]).sum()) + 1 for i in within)
    return {"optimum": grid.optimum, "within_2pct": len(within), "model_rank": rank}


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


# ---- metrics -----------------------------------------------------------------------------------

def launches_to_reach(run: Run, score: float) -> int | None:
    """Launches after which the reported config's true value is at least ``score``."""
    for i, t in enumerate(run.trials):
        if t.score >= score - 1e-12:
            return run.launches_by(i + 1)
    return None


def summarize(runs: dict[str, list[Run]], greedy: list[Run] | None,
              budgets: tuple[int, ...] = BUDGETS) -> dict[str, dict]:
    out = {}
    for name, rs in runs.items():
        reach = [r.reach() for r in rs]
        s: dict[str, Any] = {
            "seeds": len(rs),
            "reach_rate": sum(k is not None for k, _ in reach) / len(rs),
            "reach_launches_median": _median_censored([r.reach_launches() for r in rs]),
            "reach_launches_p25_p75": [_q([r.reach_launches() for r in rs], 0.25),
                                       _q([r.reach_launches() for r in rs], 0.75)],
            "reach_engine_h_median": _hours(_median_censored([x for _, x in reach])),
            "launches_mean": statistics.fmean(r.launches for r in rs),
            "engine_h_mean": statistics.fmean(r.seconds for r in rs) / 3600,
            "final_mean": statistics.fmean(r.final for r in rs),
            "final_min": min(r.final for r in rs),
            "at_launches": {str(b): _mean_sd([r.score_at_launches(b) for r in rs])
                            for b in budgets},
            "rule_pruned_share": _share(rs, "rule-pruned"),
            "refused_share": _share(rs, "infeasible"),
            "screened_out_share": _share(rs, "screened-out"),
        }
        if greedy is not None and name != "greedy":
            need = [launches_to_reach(r, g.final) for r, g in zip(rs, greedy)]
            s["reach_greedy_launches_median"] = _median_censored(need)
            s["reach_greedy_rate"] = sum(n is not None for n in need) / len(rs)
            s["reach_greedy_within_half"] = sum(
                n is not None and n <= g.launches / 2 for n, g in zip(need, greedy)) / len(rs)
        out[name] = s
    if greedy is not None and "greedy" in out:
        out["greedy"]["final_launches_median"] = statistics.median(g.launches for g in greedy)
    return out


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600


def _share(rs: list[Run], state: str) -> float:
    return sum(t.state == state for r in rs for t in r.trials) / max(1, sum(len(r.trials) for r in rs))


def _mean_sd(xs: list[float]) -> list[float]:
    return [statistics.fmean(xs), statistics.pstdev(xs)]


def model_pick_regret(runs: list[Run]) -> dict[str, float]:
    """How far below the optimum the model's top config truly is (its true value, not the noisy
    launch), over the seeds' realities."""
    regret = [100 * (1 - r.trials[0].score) for r in runs if r.trials]
    return {"mean": statistics.fmean(regret), "median": statistics.median(regret),
            "p90": float(np.percentile(regret, 90)), "within_2pct": sum(x <= 100 * TOLERANCE
                                                                        for x in regret) / len(regret)}


def targets(results: dict[str, dict], gap: str = f"sigma={TARGET_SIGMA:g}") -> list[dict]:
    """The issue's targets in the target case (``gap``: its Gap.label), each with the numbers
    behind the verdict."""
    out = []
    tag = gap.replace("sigma=", "sigma ")
    for land in LANDSCAPES:
        s = results.get(f"{land} {gap}")
        if not s or "tpe-prior" not in s["summary"]:
            continue
        p, g = s["summary"]["tpe-prior"], s["summary"].get("greedy")
        med = p["reach_launches_median"]
        out.append({"target": f"{land}, {tag}: with the prior, median launches to "
                              "within 2% <= 6",
                    "met": med is not None and med <= 6,
                    "detail": f"tpe-prior {_fmt(med)} (IQR {_fmt(p['reach_launches_p25_p75'][0])}-"
                              f"{_fmt(p['reach_launches_p25_p75'][1])}, reached in "
                              f"{100 * p['reach_rate']:.0f}% of seeds)"
                              + (f"; tpe {_fmt(s['summary']['tpe']['reach_launches_median'])}"
                                 if "tpe" in s["summary"] else "")})
        if g is not None:
            need, half = p["reach_greedy_launches_median"], g["final_launches_median"] / 2
            out.append({"target": f"{land}, {tag}: greedy's final value reached in "
                                  "<= half of greedy's launches",
                        "met": need is not None and need <= half,
                        "detail": f"greedy ends at {100 * g['final_mean']:.1f}% of the optimum after "
                                  f"{g['final_launches_median']:g} launches (median); tpe-prior "
                                  f"reaches each seed's greedy value after {_fmt(need)} launches "
                                  f"(median), within half of greedy's launches in "
                                  f"{100 * p['reach_greedy_within_half']:.0f}% of seeds"})
        m = results.get(f"{land} {gap} misleading")
        if m and "tpe-prior-misleading" in m["summary"] and "tpe" in s["summary"]:
            mis = m["summary"]["tpe-prior-misleading"]["at_launches"]
            tpe = s["summary"]["tpe"]["at_launches"]
            gaps = {b: 100 * (mis[b][0] - tpe[b][0]) for b in tpe}
            worst = min(gaps, key=gaps.get)
            out.append({"target": f"{land}: misleading prior within 5 points of TPE at every budget",
                        "met": all(v >= -5 for v in gaps.values()),
                        "detail": "misleading - tpe, points of the optimum at "
                                  + ", ".join(f"{b}: {v:+.1f}" for b, v in gaps.items())
                                  + f" launches (worst at {worst})"})
        for mf, full in (("tpe-mf", "tpe"), ("tpe-prior-mf", "tpe-prior")):
            if mf in s["summary"] and full in s["summary"]:
                a, b = s["summary"][mf]["reach_engine_h_median"], s["summary"][full]["reach_engine_h_median"]
                ratio = a / b if a is not None and b else None
                out.append({"target": f"{land}, {tag}: multi-fidelity ({mf}) <= 60% "
                                      f"of {full}'s engine-seconds to within 2%",
                            "met": ratio is not None and ratio <= 0.6,
                            "detail": f"median engine-hours to within 2%: {mf} {_fmt(a, 2)}, "
                                      f"{full} {_fmt(b, 2)}"
                                      + (f", ratio {ratio:.2f}" if ratio is not None else "")})
    return out


def _fmt(x: float | None, nd: int = 1) -> str:
    return "never" if x is None else f"{x:.{nd}f}"


# ---- report ------------------------------------------------------------------------------------

def markdown(results: dict[str, dict], tgts: list[dict], regret: dict, meta: dict) -> str:
    gap = meta.get("measured_gap")
    lines = [] if gap is None else [
        "Measured gap (" + gap["source"] + "): " + "; ".join(
            f"{e} bias {g['bias']:.3f}, sigma {g['sigma_log']:.3f} (n={g['n']})"
            for e, g in gap["engines"].items())
        + "; an engine not measured: log-bias drawn around {:.3f} with spread {:.3f}, sigma {:.3f} "
        "(pooled).".format(gap["unmeasured_engines"]["log_bias_mean"],
                           gap["unmeasured_engines"]["log_bias_spread"],
                           gap["unmeasured_engines"]["sigma_log_pooled"]), ""]
    lines += [(f"{meta['seeds']} seeds per strategy and case (a seed is one reality: its error draw, "
             f"launch noise and costs, shared by every strategy); budget {meta['n_trials']} launches; "
             "rule-pruned proposals cost nothing and no launch; a config measured before is not "
             "relaunched (live tool)."), ""]
    for case, r in results.items():
        lines += [f"### {case}", "", (f"Optimum (mean over seeds) {r['optimum_mean']:,.0f} tok/s; "
                  f"configs within 2% of it: {r['configs_within_2pct_median']:g} (median over seeds); "
                  "the model ranks the best of those at "
                  f"#{r['model_rank_of_best_median']:g} (median) of its {r['n_predictions']:,} "
                  "predictions."), "",
                  ("| strategy | reached 2% | median launches to 2% (IQR) | median engine-h to 2% "
                  "| launches to greedy's final (median) | final % of opt. (worst) "
                  "| engine-h per study | pruned / refused / screened out |"),
                  "|---|---|---|---|---|---|---|---|"]
        for name, s in r["summary"].items():
            iqr = s["reach_launches_p25_p75"]
            greedy = s.get("reach_greedy_launches_median")
            lines.append(
                f"| {name} | {100 * s['reach_rate']:.0f}% | {_fmt(s['reach_launches_median'])} "
                f"({_fmt(iqr[0], 0)}–{_fmt(iqr[1], 0)}) | {_fmt(s['reach_engine_h_median'], 2)} | "
                f"{'–' if name == 'greedy' else _fmt(greedy)} | {100 * s['final_mean']:.1f} "
                f"({100 * s['final_min']:.1f}) | {s['engine_h_mean']:.2f} | "
                f"{100 * s['rule_pruned_share']:.0f}% / {100 * s['refused_share']:.0f}% / "
                f"{100 * s['screened_out_share']:.0f}% |")
        g = r["summary"].get("greedy")
        if g:
            lines += ["", (f"Greedy: {100 * g['final_mean']:.1f}% of the optimum after "
                      f"{g['final_launches_median']:g} launches (median).")]
        lines += ["", ("Value at equal budgets (true value of the reported config, % of optimum, "
                  "mean ± sd):"), "",
                  "| strategy | " + " | ".join(f"{b} launches" for b in BUDGETS) + " |",
                  "|---|" + "---|" * len(BUDGETS)]
        for name, s in r["summary"].items():
            lines.append(f"| {name} | " + " | ".join(
                f"{100 * m:.1f} ± {100 * sd:.1f}" for m, sd in s["at_launches"].values()) + " |")
        lines.append("")
    lines += ["### The model's pick (launched once) in each case", "",
              "| landscape | gap | regret mean % | median % | p90 % | seeds within 2% |",
              "|---|---|---|---|---|---|"]
    for (land, gap), x in sorted(regret.items()):
        lines.append(f"| {land} | {gap} | {x['mean']:.1f} | {x['median']:.1f} | {x['p90']:.1f} | "
                     f"{100 * x['within_2pct']:.0f}% |")
    lines += ["", "### Targets", "", "| target | verdict | numbers |", "|---|---|---|"]
    for t in tgts:
        lines.append(f"| {t['target']} | {'**met**' if t['met'] else '**missed**'} | {t['detail']} |")
    for s in meta.get("skipped", []):
        lines.append(f"\n{s}")
    return "\n".join(lines) + "\n"


def plot(all_runs: dict[tuple, dict[str, list[Run]]], out_dir: Path, gap: str,
         name: str = "replay-gpu-convergence.png") -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    ks = np.arange(1, N_TRIALS + 1)
    fig, axes = plt.subplots(1, len(LANDSCAPES), figsize=(13, 4.8), squeeze=False)
    for ax, land in zip(axes[0], LANDSCAPES):
        cases = {**all_runs.get((land, gap), {}), **all_runs.get((land, gap, "misleading"), {})}
        for name, rs in cases.items():
            if name == "model-pick":
                continue
            ys = np.array([[r.score_at_launches(k) for k in ks] for r in rs]) * 100
            ax.plot(ks, ys.mean(0), label=name, ls="--" if "mf" in name else "-")
        ax.axhline(100 * (1 - TOLERANCE), color="k", ls=":", lw=0.8)
        ax.axvline(6, color="grey", ls=":", lw=0.8)
        ax.set_title(f"{land}, {gap}")
        ax.set_xlabel("launches")
        ax.set_ylabel("true value of the reported config (% of optimum)")
        ax.set_ylim(40, 101)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle("GPU replay: mean over seeds of the config each strategy would report")
    fig.tight_layout()
    p = out_dir / name
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def plot_sigma(result_files: list[Path], out_dir: Path) -> Path:
    """Median launches to within 2 % and the model pick's regret against sigma, from the results
    of one or more runs (the target sigma and the others may be run apart)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases: dict[tuple[str, float], dict] = {}
    regret: dict[tuple[str, float], float] = {}
    for f in result_files:
        data = json.loads(Path(f).read_text())
        for case, r in data["results"].items():
            if "misleading" not in case and " sigma=" in case:
                land, sig = case.split(" sigma=")
                cases[(land, float(sig))] = r["summary"]
        for case, x in data.get("model_pick_regret", {}).items():
            if " sigma=" not in case:
                continue
            land, sig = case.split(" sigma=")
            regret[(land, float(sig))] = x["mean"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    never = N_TRIALS + 5
    for land in LANDSCAPES:
        sigmas = sorted(sg for ln, sg in cases if ln == land)
        for name, marker in (("tpe", "s"), ("greedy", "^"), ("tpe-prior", "o")):
            xs = [sg for sg in sigmas if name in cases[(land, sg)]]
            ys = [cases[(land, sg)][name]["reach_launches_median"] for sg in xs]
            axes[0].plot(xs, [never if y is None else y for y in ys], marker=marker,
                         ls="-" if land == "a100" else "--", label=f"{land} {name}")
        xs = sorted(sg for ln, sg in regret if ln == land)
        axes[1].plot(xs, [regret[(land, sg)] for sg in xs], "o-", label=land)
    axes[0].axhline(6, color="grey", ls=":", lw=0.8)
    axes[0].set_ylabel(f"median launches to within 2% ({never} = never in {N_TRIALS})")
    axes[1].set_ylabel("model pick: mean regret (% below the optimum)")
    for ax in axes:
        ax.set_xlabel("sigma of the reality gap (sd of log truth/estimate)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    p = out_dir / "replay-gpu-sigma.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--gap", choices=("measured", "assumed"), default="measured",
                    help="measured: each engine's bias and spread from --gap-file; assumed: the "
                         "earlier sweep of --sigmas")
    ap.add_argument("--gap-file", type=Path, default=DATA / "reality-gap-h200.json",
                    help="benchmarks/calibrate.py's output")
    ap.add_argument("--sigmas", default=",".join(f"{s:g}" for s in SIGMAS), help="with --gap assumed")
    ap.add_argument("--landscapes", default=",".join(LANDSCAPES))
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--out", default=None,
                    help="default: benchmarks/data/replay-gpu-measured.json (measured), "
                         "replay-gpu-results.json (assumed)")
    ap.add_argument("--markdown", default=None, help="default: --out with .md")
    ap.add_argument("--img-dir", default=str(REPO / "docs" / "img"))
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--sigma-plot", default=None,
                    help="only draw replay-gpu-sigma.png from these results files (comma-separated)")
    args = ap.parse_args(argv)
    if args.sigma_plot:
        print(f"plot: {plot_sigma([Path(f) for f in args.sigma_plot.split(',')], Path(args.img_dir))}")
        return 0

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        sys.exit(f"unknown strategies {sorted(unknown)}; choose from {', '.join(STRATEGIES)}")
    gaps = ([Gap.from_file(args.gap_file)] if args.gap == "measured"
            else [Gap(sigma=float(x)) for x in args.sigmas.split(",")])
    target = next((g.label for g in gaps if is_target(g)), None)
    out = Path(args.out or DATA / ("replay-gpu-measured.json" if args.gap == "measured"
                                   else "replay-gpu-results.json"))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replay-gpu-") as tmp:
        lands = {n: Landscape.load(n) for n in args.landscapes.split(",")}
        spaces = {n: replay_space(land, write_checkpoints(Path(tmp) / n, LANDSCAPES[n]["model"]))
                  for n, land in lands.items()}
        all_runs, optima = run_benchmark(lands, spaces, gaps=gaps, seeds=args.seeds,
                                         strategies=strategies)
    results, regret = {}, {}
    for key, runs in all_runs.items():
        land, gap = key[0], key[1]
        case = Case(land, gap, len(key) > 2).label
        results[case] = {"n_predictions": int(lands[land].ok.sum()),
                         "optimum_mean": statistics.fmean(o["optimum"] for o in optima[key]),
                         "configs_within_2pct_median": statistics.median(
                             o["within_2pct"] for o in optima[key]),
                         "model_rank_of_best_median": statistics.median(
                             o["model_rank"] for o in optima[key]),
                         "summary": summarize(runs, runs.get("greedy")
                                              or all_runs.get((land, gap), {}).get("greedy"))}
        if "model-pick" in runs:
            regret[(land, gap)] = model_pick_regret(runs["model-pick"])
    tgts = targets(results, target) if target else []
    skipped = [] if _has_torch() or "gp" not in strategies else [
        "gp was skipped: Optuna's GPSampler needs PyTorch, which is not installed here."]
    meta = {"seeds": args.seeds, "n_trials": N_TRIALS, "gaps": [g.label for g in gaps],
            "skipped": skipped, "seconds": round(time.monotonic() - t0)}
    if args.gap == "measured":
        mean, spread, pooled = gaps[0].unmeasured()
        meta["measured_gap"] = {"source": gaps[0].source, "engines": {
            e: {"bias": b, "sigma_log": sd, "n": n} for e, b, sd, n in gaps[0].measured},
            "unmeasured_engines": {"log_bias_mean": mean, "log_bias_spread": spread,
                                   "sigma_log_pooled": pooled}}
    md = markdown(results, tgts, regret, meta)
    Path(args.markdown or out.with_suffix(".md")).write_text(md)
    out.write_text(json.dumps({
        "meta": {**meta, "noise_sd": NOISE_SD, "length_scale": LENGTH_SCALE,
                 "screen": SCREEN, "screen_share": SCREEN_SHARE, "screen_noise_sd": SCREEN_NOISE_SD,
                 "launches_per_point": LAUNCHES_PER_POINT, "defaults": DEFAULTS},
        "results": results, "targets": tgts,
        "model_pick_regret": {f"{k[0]} {k[1]}": v for k, v in regret.items()},
        "runs": {Case(k[0], k[1], len(k) > 2).label: {
            name: [{"seed": r.seed, "reach_launches": r.reach_launches(), "final": round(r.final, 4),
                    "launches": r.launches, "seconds": round(r.seconds)} for r in rs]
            for name, rs in runs.items()} for k, runs in all_runs.items()},
    }, indent=1))
    print(md)
    if not args.no_plots and target:
        name = "replay-gpu-measured-convergence.png" if args.gap == "measured" else None
        for p in plot(all_runs, Path(args.img_dir), target, **({"name": name} if name else {})):
            print(f"plot: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
