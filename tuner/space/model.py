"""Search spaces: the YAML a user writes, validated, and turned into Optuna suggestions.

A space names the model, the engines with the knobs to search (ranges, choices, conditions), the
fixed arguments, the workload, the objective, the budget and the baseline arms. ``--space`` takes a
bundled name, a name from the user's ``./search_spaces/``, or a path to a YAML file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.engines.runtimes import TUNER_SET_FLAGS
from tuner.engines.spec import available_engines, load_engine
from tuner.paths import expand
from tuner.record.schema import QUALITY_REFERENCE_ARM
from tuner.record.storage import STUDY_NAME
from tuner.space.bench_settings import FILE_DATASETS, SEED_MAX, BenchSettings
from tuner.space.precision import PRECISION_KNOBS, precision_of
from tuner.space.workload_sets import expand_entries

Scalar = bool | int | float | str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Param(_Strict):
    """One searched knob. ``when`` makes it conditional on earlier params of the same engine."""

    type: Literal["int", "float", "bool", "categorical"]
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: list[Scalar] | None = None
    when: dict[str, Scalar] = {}
    # The engine's own default on the target hardware: what the defaults baseline records.
    default: Scalar | None = None

    @model_validator(mode="after")
    def _check(self) -> "Param":
        if self.type in ("int", "float"):
            if self.low is None or self.high is None:
                raise ValueError(f"{self.type} param needs low and high")
            if self.low > self.high:
                raise ValueError(f"low ({self.low}) is greater than high ({self.high})")
            if self.log and self.low <= 0:
                raise ValueError("log scale needs low > 0")
            if self.choices is not None:
                raise ValueError(f"{self.type} param takes low/high, not choices")
        elif self.type == "categorical":
            if not self.choices:
                raise ValueError("categorical param needs a non-empty choices list")
            if len(set(map(repr, self.choices))) != len(self.choices):
                raise ValueError("choices contain duplicates")
        elif self.low is not None or self.high is not None or self.choices is not None:
            raise ValueError("bool param takes no low/high/choices")
        return self


class Container(_Strict):
    """Run the engine inside a container image instead of on the host (see ``container.py``)."""

    image: str
    runtime: Literal["docker", "podman"] = "docker"  # podman takes docker's command line
    # Extra `docker run` arguments: mounts (-v /models:/models:ro), --shm-size 16g, --ipc host ...
    args: list[str] = []
    # "all": the engine gets the GPUs, narrowed to the trial's own when a scheduler (Ray, a worker
    # started with CUDA_VISIBLE_DEVICES) assigned some. None: no GPU (CPU engines).
    gpus: Literal["all"] | None = None

    @field_validator("image")
    @classmethod
    def _image_name(cls, v: str) -> str:
        if not v or v.startswith("-") or any(c.isspace() for c in v):
            raise ValueError(f"image {v!r} is not an image name (e.g. vllm/vllm-openai:v0.11.0)")
        return v

    @field_validator("args")
    @classmethod
    def _not_ours(cls, v: list[str]) -> list[str]:
        for arg in v:
            flag = arg.split("=", 1)[0]
            if flag in TUNER_SET_FLAGS:
                raise ValueError(f"{flag} is set by the tuner: {TUNER_SET_FLAGS[flag]}")
        return v


class EngineChoice(_Strict):
    """An engine in the space: how to run it here and which knobs to search."""

    command: list[str] | None = None  # replaces the engine's default command (e.g. a venv's binary)
    # Run the command inside this image instead of on the host.
    container: Container | None = None
    # An installed folder (a kit's install.sh --target DIR): the engine runs from it with what its
    # spec's `installed:` data says it needs offline (command, environment, fallbacks).
    install: str | None = None
    env: dict[str, str] = {}
    fixed_args: list[str] = []
    startup_timeout_s: float | None = Field(None, gt=0)
    params: dict[str, Param] = {}
    fixed: dict[str, Scalar] = {}  # knobs set to one value in every trial
    # false: launch configs the engine's feasibility rules would prune (to verify the rules on a
    # new engine version); failures then still teach the study through learned infeasibility.
    check_rules: bool = True

    @field_validator("command")
    @classmethod
    def _non_empty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("command must not be empty")
        return v

    @model_validator(mode="after")
    def _one_way_to_run(self) -> "EngineChoice":
        if self.install is not None and self.container is not None:
            raise ValueError("install: runs the engine from a host folder; container: runs it in an image: choose one")
        return self


class Model(_Strict):
    path: str
    served_name: str | None = None
    tokenizer: str | None = None
    # Pre-quantized checkpoints by abstract quantization (fp8, awq): engines that read the
    # quantization from the checkpoint get this path instead of a flag.
    variants: dict[str, str] = {}

    def resolved_path(self) -> str:
        return expand(self.path)

    def resolved_tokenizer(self) -> str:
        return expand(self.tokenizer or self.path)

    def name(self) -> str:
        return self.served_name or Path(self.path).name


# The ShareGPT sampling of `vllm bench serve` (its is_valid_sequence defaults), which the benchmark
# client reproduces and the feasibility rules must know: prompts of 4 to 1024 tokens, prompt + output
# at most 2048.
SHAREGPT_MIN_LEN = 4
SHAREGPT_MAX_PROMPT_LEN = 1024
SHAREGPT_MAX_TOTAL_LEN = 2048


class Workload(BenchSettings):
    """A named benchmark run of the space: the shared settings (``bench_settings``, with vLLM's
    defaults) plus what only a study needs."""

    name: str = "default"
    weight: float = Field(1.0, gt=0)  # share in a weighted multi-workload objective
    endpoint: str | None = None  # default: the engine's
    # Stop the benchmark after this long; requests still running count as failed. For configs
    # that serve one request at a time, which would otherwise take hours.
    max_duration_s: float | None = Field(None, gt=0)
    # With ``objective.max_load`` over several workloads: this workload's load (rate or
    # concurrency) is the searched load times this, as in a traffic mix where it keeps its share.
    load_scale: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> "Workload":
        if self.dataset in FILE_DATASETS and not self.dataset_path:
            raise ValueError(f"dataset {self.dataset} needs dataset_path")
        return self


class Target(_Strict):
    metric: str
    direction: Literal["maximize", "minimize"] = "maximize"


class MaxLoad(_Strict):
    """Score a config by the highest load it sustains within the SLOs (``objective.max_load``)."""

    knob: Literal["request_rate", "max_concurrency"] = "request_rate"
    low: float = Field(gt=0)
    high: float = Field(gt=0)
    probes: int = Field(6, ge=2, le=20)
    # How long each probe offers its rate: a run sends rate x duration_s requests (at least the
    # workload's num_prompts). A fixed num_prompts at a high rate is a burst that ends before the
    # queue shows: a server that holds a few hundred requests at once meets the SLOs for a burst
    # of that size at any offered rate, though it completes far fewer requests a second. Over
    # duration_s a rate above what the server completes grows its queue, and the SLOs catch it.
    duration_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> "MaxLoad":
        if self.duration_s is not None and self.knob != "request_rate":
            raise ValueError("max_load.duration_s applies to knob request_rate: a closed loop at a "
                             "concurrency cannot queue more than it holds; raise the workload's "
                             "num_prompts instead")
        return self


class Objective(_Strict):
    """What a trial scores. One metric, or several (``metrics``: a Pareto front), each optionally
    held to SLOs (``slos``: metric → upper bound; ``failed_pct`` is the share of failed requests),
    over one workload or the weighted mean / worst case of several."""

    metric: str = "total_token_throughput"
    direction: Literal["maximize", "minimize"] = "maximize"
    metrics: list[Target] = []
    slos: dict[str, float] = {}
    aggregate: Literal["weighted", "worst"] = "weighted"
    max_load: MaxLoad | None = None

    @property
    def name(self) -> str:
        """What a trial's value is, as reports name it: ``max_load`` for a max-load search (its
        value is a load, not ``metric``), else the metric or metrics."""
        return " / ".join(t.metric for t in self.targets())

    def targets(self) -> list[Target]:
        if self.max_load is not None:
            return [Target(metric="max_load", direction="maximize")]
        return list(self.metrics) or [Target(metric=self.metric, direction=self.direction)]

    @model_validator(mode="after")
    def _check(self) -> "Objective":
        if self.max_load is not None:
            if not self.slos:
                raise ValueError("max_load needs slos: the load is the highest that meets them")
            if self.metrics:
                raise ValueError("max_load is a single objective; remove metrics")
            if self.max_load.low > self.max_load.high:
                raise ValueError("max_load.low is greater than max_load.high")
        return self

    @property
    def multi(self) -> bool:
        return len(self.targets()) > 1


class Fidelity(_Strict):
    """Multi-fidelity: a short screening run first; only configs within ``margin`` of the best
    screen get the full benchmark."""

    screen_prompts: int = Field(gt=0)
    margin: float = Field(0.1, ge=0, lt=1)
    n_startup: int = Field(2, ge=0)


class Prior(_Strict):
    """Prior knowledge for the search: a performance model's predictions (``estimator``), used to
    queue the best predicted configs first, to launch the model's own pick as a control arm, and to
    steer the sampler while the study learns how wrong the model is here."""

    estimator: str = "aiconfigurator"   # a name in tuner.estimate.ESTIMATORS
    gpu: str | None = None              # the hardware profile it predicts for (default: this machine)
    candidates: int = Field(256, ge=1, le=5000)  # configs per engine the model is asked about
    seeds: int = Field(4, ge=0)         # best predicted configs queued first, spread over engines
    model_pick: bool = True             # launch the model's top config as the arm "model-pick"


class Budget(_Strict):
    n_trials: int = Field(20, gt=0)
    timeout_s: float | None = Field(None, gt=0)


class Baseline(_Strict):
    """A control arm. Empty ``params`` means the engine's defaults: launched with no knob flags."""

    name: str
    engine: str
    params: dict[str, Scalar] = {}
    # false: launch even when a feasibility rule predicts failure, to confirm the rule still holds
    # on this engine version (the trial records which rule predicted it).
    check_rules: bool = True


# The quality probe's metrics: (bound kind, needs logprobs). A bound is ``<kind>_<metric>`` in the
# space's quality section; the constraint it becomes is ``quality:<metric>``.
QUALITY_METRICS: dict[str, tuple[Literal["max", "min"], bool]] = {
    "token_mismatch": ("max", False),    # share of generated token positions that differ
    "exact_match": ("min", False),       # share of prompts answered token for token the same
    "first_divergence": ("min", False),  # mean position of the first differing token
    "top1_agreement": ("min", True),     # share of reference tokens the config also ranks first
    "kl_divergence": ("max", True),      # mean KL(reference || config) over the reference's top-k
}
QUALITY_BOUNDS = {f"{kind}_{metric}": metric for metric, (kind, _) in QUALITY_METRICS.items()}


class LmEval(_Strict):
    """Task accuracy with lm-evaluation-harness (`lm-eval`, its local-completions model) against the
    trial's own server; a config may lose at most ``max_drop`` of the reference's score per task."""

    tasks: list[str] = Field(min_length=1)
    limit: int | None = Field(None, gt=0)        # documents per task
    max_drop: float = Field(0.01, ge=0)
    num_fewshot: int | None = Field(None, ge=0)
    include_path: str | None = None              # a folder of your own task YAMLs
    command: list[str] | None = None             # default: lm-eval beside this Python, else on PATH
    model_args: dict[str, Scalar] = {}           # more local-completions model_args
    env: dict[str, str] = {}                     # e.g. HF_DATASETS_OFFLINE: "1"
    num_concurrent: int = Field(4, ge=1)
    timeout_s: float = Field(1800, gt=0)


class Quality(_Strict):
    """The quality guardrail: every config whose precision differs from the reference's answers a
    fixed prompt set (greedy, ``max_tokens`` new tokens) after its benchmark, and is compared with
    the reference arm's answers; ``max_*``/``min_*`` bounds become the constraints ``quality:<metric>``.
    """

    # Knob values of the reference arm (run first). Its precision knobs (dtype, quantization,
    # kv_cache_dtype) define the reference precision; unset ones are the checkpoint's (BF16 here).
    reference: dict[str, Scalar] = {}
    # Or a baseline of the space that is the reference (its precision is the reference's): its launch
    # records the answers and no separate reference arm runs, a launch saved (1-2 min on the H200).
    reference_arm: str | None = None
    prompts: int = Field(64, ge=1, le=400)          # drawn from the bundled ShareGPT sample
    max_tokens: int = Field(32, ge=1, le=1024)
    max_prompt_tokens: int = Field(256, ge=SHAREGPT_MIN_LEN, le=SHAREGPT_MAX_PROMPT_LEN)
    seed: int = 0
    concurrency: int = Field(8, ge=1)               # probe requests in flight at once
    top_logprobs: int = Field(5, ge=1, le=20)
    timeout_s: float = Field(600, gt=0)
    # Also probe configs with the reference's precision: their numbers are the probe's noise floor.
    probe_reference: bool = False
    max_token_mismatch: float | None = Field(None, ge=0, le=1)
    min_exact_match: float | None = Field(None, ge=0, le=1)
    min_first_divergence: float | None = Field(None, ge=0)
    min_top1_agreement: float | None = Field(None, ge=0, le=1)
    max_kl_divergence: float | None = Field(None, ge=0)
    lm_eval: LmEval | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: object) -> object:
        if isinstance(data, dict):
            unknown = [k for k in data if k not in cls.model_fields]
            if unknown:
                raise ValueError(
                    f"unknown quality key {unknown[0]!r}; metric bounds: "
                    f"{', '.join(QUALITY_BOUNDS)}; settings: "
                    f"{', '.join(k for k in cls.model_fields if k not in QUALITY_BOUNDS)}")
        return data

    @model_validator(mode="after")
    def _check(self) -> "Quality":
        if self.min_first_divergence is not None and self.min_first_divergence > self.max_tokens:
            raise ValueError(f"min_first_divergence ({self.min_first_divergence:g}) is more than "
                             f"max_tokens ({self.max_tokens}): no config could meet it")
        return self

    def bounds(self) -> dict[str, float]:
        """metric → bound, for the bounds the space sets."""
        return {metric: value for key, metric in QUALITY_BOUNDS.items()
                if (value := getattr(self, key)) is not None}

    def constraint_names(self) -> list[str]:
        names = list(self.bounds())
        return names + (["lm_eval"] if self.lm_eval else [])


def _check_shared_knobs(engines: dict[str, EngineChoice]) -> None:
    """Optuna keeps one distribution per parameter name for the whole study: a knob that two
    engines search must be the same kind (int, float, choice), and a choice knob must offer the
    same choices, or the study fails at the first trial of the second engine (found on the H200:
    vLLM's max_num_tokens up to 32768 beside SGLang's up to 16384)."""
    first: dict[str, tuple[str, tuple, str]] = {}
    for engine, choice in engines.items():
        for pname, p in choice.params.items():
            kind = "float" if p.type == "float" else "int" if p.type == "int" else "choice"
            choices = tuple(map(repr, p.choices)) if p.type == "categorical" else ()
            if pname not in first:
                first[pname] = (kind, choices, engine)
                continue
            kind0, choices0, engine0 = first[pname]
            if kind != kind0:
                article = {"int": "an", "float": "a", "choice": "a"}
                raise ValueError(f"{engine}.{pname} is {article[kind]} {kind} knob but {engine0}.{pname} is "
                                 f"{article[kind0]} {kind0} knob: a knob that several engines search must be of one kind")
            if choices != choices0:
                raise ValueError(f"{engine}.{pname} choices {[*p.choices]} differ from {engine0}.{pname}'s: "
                                 f"a knob that several engines search takes one set of choices (Optuna "
                                 f"keeps one distribution per name); use the union, and a rule or "
                                 f"`when:` for what one engine cannot take")


class Space(_Strict):
    name: str = Field(pattern=STUDY_NAME)   # the default study name
    description: str = ""
    model: Model
    engines: dict[str, EngineChoice] = Field(min_length=1)
    workload: Workload = Workload()
    # Several workloads: each trial benchmarks all of them on one launched server.
    workloads: list[Workload] = []
    # Extra workloads for `tune evaluate` (best vs baseline with repeats), not for the search.
    evaluation_workloads: list[Workload] = []
    objective: Objective = Objective()
    budget: Budget = Budget()
    baselines: list[Baseline] = []
    sampler: str = "tpe"  # a name in tuner.study.samplers.SAMPLERS, checked when the study is made
    fidelity: Fidelity | None = None
    prior: Prior | None = None
    quality: Quality | None = None
    seed: int | None = Field(None, ge=0, le=SEED_MAX)  # the samplers' range: numpy's

    def all_workloads(self) -> list[Workload]:
        return list(self.workloads) or [self.workload]

    def differences(self, other: "Space",
                    parts: tuple[str, ...] = ("objective", "workloads")) -> list[str]:
        """Which of ``parts`` (objective, workloads, model) differ from ``other``'s: two spaces'
        measurements answer the same question only where none does."""
        of = {"objective": lambda s: s.objective, "workloads": Space.all_workloads,
              "model": lambda s: s.model}
        return [part for part in parts if of[part](self) != of[part](other)]

    @model_validator(mode="before")
    @classmethod
    def _expand_sets(cls, data: Any) -> Any:
        # `{set: seed-study, ...}` in a workload list stands for that named set's workloads.
        if isinstance(data, dict):
            data = dict(data)
            for key in ("workloads", "evaluation_workloads"):
                if key in data:
                    data[key] = expand_entries(data[key])
        return data

    @model_validator(mode="after")
    def _check(self) -> "Space":
        known = available_engines()
        for name, choice in self.engines.items():
            if name not in known:
                raise ValueError(f"unknown engine {name!r}; available: {', '.join(known)}")
            knobs = load_engine(name).knobs
            for pname, param in {**choice.params, **{k: None for k in choice.fixed}}.items():
                if pname not in knobs:
                    raise ValueError(
                        f"engine {name!r} has no knob {pname!r}; its knobs: {', '.join(knobs)}")
            seen: list[str] = []
            for pname, param in choice.params.items():
                for cond in param.when:
                    if cond not in seen:
                        raise ValueError(
                            f"{name}.{pname}: condition on {cond!r}, which is not an earlier param")
                seen.append(pname)
        _check_shared_knobs(self.engines)
        for b in self.baselines:
            if b.engine not in self.engines:
                raise ValueError(f"baseline {b.name!r} uses engine {b.engine!r}, not in engines")
        if len({b.name for b in self.baselines}) != len(self.baselines):
            raise ValueError("baseline names must be unique")
        for group in (self.all_workloads(), self.evaluation_workloads):
            if len({w.name for w in group}) != len(group):
                raise ValueError("workload names must be unique")
        if self.fidelity and (self.objective.multi or len(self.all_workloads()) > 1):
            raise ValueError("fidelity screening needs one objective and one workload")
        if self.objective.max_load and self.fidelity:
            raise ValueError("max_load works without fidelity screening")
        if (self.objective.max_load and len(self.all_workloads()) > 1
                and self.objective.aggregate != "worst"):
            raise ValueError("max_load over several workloads is the highest load that every one "
                             "sustains: set objective.aggregate: worst")
        if self.sampler == "greedy" and self.objective.multi:
            raise ValueError("sampler greedy needs a single objective")
        if self.quality is not None:
            self._check_quality(self.quality)
        return self

    def _check_quality(self, quality: Quality) -> None:
        """The reference arm must be launchable as written, and logprob bounds measurable."""
        if any(b.name == QUALITY_REFERENCE_ARM for b in self.baselines):
            raise ValueError(f"baseline name {QUALITY_REFERENCE_ARM!r} is the quality guardrail's "
                             "own arm; rename the baseline")
        if quality.reference_arm is not None:
            names = [b.name for b in self.baselines]
            if quality.reference_arm not in names:
                raise ValueError(f"quality.reference_arm {quality.reference_arm!r} is not a baseline "
                                 f"of this space (baselines: {', '.join(names) or 'none'})")
            if quality.reference:
                raise ValueError("quality: set reference (knob values of a reference arm of its "
                                 "own) or reference_arm (a baseline that is the reference), not both")
        engine, choice = next(iter(self.engines.items()))
        knobs = load_engine(engine).knobs
        model = self.model.resolved_path()
        for name, value in quality.reference.items():
            where = f"quality.reference.{name}"
            if name not in knobs:
                raise ValueError(f"{where}: engine {engine!r} (the reference arm's, the space's "
                                 f"first) has no knob {name!r}")
            if name in choice.params:
                _check_value(where, value, choice.params[name])
            elif name in choice.fixed:
                if choice.fixed[name] != value:
                    raise ValueError(f"{where} is {value!r}, but engines.{engine}.fixed holds it at "
                                     f"{choice.fixed[name]!r}; search it (params) or drop it here")
            elif (name not in PRECISION_KNOBS or precision_of(engine, {name: value}, model)
                  != precision_of(engine, {}, model)):
                raise ValueError(f"{where} is {value!r}, but engine {engine!r} neither searches "
                                 f"nor fixes {name}: add it to engines.{engine}.params or fixed")
        needs_logprobs = [f"{QUALITY_METRICS[m][0]}_{m}" for m in quality.bounds()
                          if QUALITY_METRICS[m][1]]
        if needs_logprobs and not any(load_engine(e).quality_probe.logprobs for e in self.engines):
            sources = "; ".join(f"{e}: {load_engine(e).quality_probe.source or 'no logprobs'}"
                                for e in self.engines)
            raise ValueError(
                f"quality.{needs_logprobs[0]} needs logprobs, which no engine of this space returns "
                f"({sources}); bound token_mismatch, exact_match or first_divergence instead")


def _check_value(where: str, value: Scalar, param: Param) -> None:
    if param.type == "categorical":
        ok = any(value == c and type(value) is type(c) for c in param.choices)
    elif param.type == "bool":
        ok = isinstance(value, bool)
    else:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and param.low <= value <= param.high)
    if not ok:
        raise ValueError(f"{where} is {value!r}, outside the values the space searches for it")








# ---- Optuna side -------------------------------------------------------------------------------









