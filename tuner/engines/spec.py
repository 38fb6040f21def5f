"""Schema of ``engines/<name>.yaml``: what an engine's flags, readiness and failures look like.

Engine knowledge is data so that adding an engine is mostly writing one YAML file; this module only
validates it. Translation to argv lives in ``translate.py``, failure matching in ``failures.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tuner.engines.conditions import compile_condition
from tuner.errors import InputError
from tuner.paths import ENGINES_DIR
from tuner.yaml_io import load_model

FAILURE_CLASSES = (
    "invalid-config",
    "kv-cache-too-small",
    "out-of-memory",
    "unsupported-quantization",
    "unsupported-hardware",
    "port-in-use",
    "startup-timeout",
    "crashed",
    "requests-failed",
    "container-error",
)
FailureClass = Literal[
    "invalid-config", "kv-cache-too-small", "out-of-memory", "unsupported-quantization",
    "unsupported-hardware", "port-in-use", "startup-timeout", "crashed", "requests-failed",
    "container-error",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Knob(_Strict):
    """How one abstract knob reaches the engine.

    Exactly one style applies: ``flag`` (``--flag VALUE``), ``when_true``/``when_false`` (flag lists
    for a boolean), or ``config_key`` (a dotted key of a generated config file). ``values`` maps the
    abstract value to the engine's spelling (e.g. SGLang's ``fp8_e4m3``); an abstract value missing
    from ``values`` is not supported by the engine.
    """

    flag: str | None = None
    when_true: list[str] | None = None
    when_false: list[str] | None = None
    config_key: str | None = None
    type: Literal["int", "float", "bool", "str"] = "int"
    # A mapping value may itself be a mapping, for config_key knobs whose engine value is a block
    # (TensorRT-LLM's ``cuda_graph_config: {}`` turns CUDA graphs on at their defaults).
    values: dict[str, str | int | float | bool | None | dict] | None = None
    # For quantization: a pre-quantized checkpoint variant of the model replaces the flag.
    prefer_checkpoint: bool = False
    # No flag at all: only a checkpoint variant selects it (TensorRT-LLM reads quantization from the
    # checkpoint); any other value is unsupported.
    checkpoint_only: bool = False
    # What the flag means here and its default, for `tune plan` and docs/engines.md.
    meaning: str = ""
    default: str = ""

    @model_validator(mode="before")
    @classmethod
    def _checkpoint_only_defaults(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("checkpoint_only"):
            data = {"prefer_checkpoint": True, "values": {}, **data}
        return data

    @model_validator(mode="after")
    def _one_style(self) -> "Knob":
        styles = [self.flag is not None, self.when_true is not None or self.when_false is not None,
                  self.config_key is not None]
        if self.checkpoint_only:
            if any(styles) or not self.prefer_checkpoint or self.values:
                raise ValueError("a checkpoint_only knob takes no flag, config_key or values")
        elif sum(styles) != 1:
            raise ValueError("a knob needs exactly one of: flag, when_true/when_false, config_key")
        return self


class FailureSignature(_Strict):
    """Log substrings that identify a failure class; the first matching signature wins."""

    failure_class: FailureClass = Field(alias="class")
    patterns: list[str] = Field(min_length=1)
    reason: str = ""
    # Failures that depend only on (engine, quantization, hardware) teach the study to skip siblings.
    generalises_on: list[str] = []
    source: str = ""


class Rule(_Strict):
    """A known capability or version constraint, checked before launch (see ``rules.py``).

    ``when`` is a condition in the small language of ``rules.py`` over ``knobs``, ``hw``,
    ``engine``, ``workload`` and ``model``; the rule applies when it is certainly true. ``prune``
    rules stop the trial without a launch; ``note`` rules only annotate it.
    """

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    when: str = Field(min_length=1)
    severity: Literal["prune", "note"] = "prune"
    reason: str = Field(min_length=1)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _parses(self) -> "Rule":
        compile_condition(self.when, self.id)
        return self


class Readiness(_Strict):
    path: str = "/health"
    log_line: str = ""
    startup_timeout_s: float = 600.0
    # How long one probe may take: SGLang's /health generates a token and waits a second before
    # answering, so a shorter client timeout never sees its 200 and each probe queues a request.
    probe_timeout_s: float = 0.5


LAUNCH_PHASES = ("weights_s", "compile_s", "kernels_s", "cuda_graphs_s", "kv_profile_s")


class PhaseReading(_Strict):
    """A log line in which the engine times one phase of its launch: ``pattern`` is a regular
    expression whose group 1 is the seconds, or a progress bar's elapsed time ([H:]MM:SS).
    Matches of one reading are ranks working side by side (tensor-parallel workers each log it):
    the longest counts. Readings of one phase add up
    (SGLang captures prefill and decode graphs one after the other), so two spellings of one line
    in different engine versions are two readings that never both match."""

    pattern: str = Field(min_length=1)
    # Phases this reading's time already contains (vLLM's engine init includes torch.compile and
    # graph capture): subtracted, so that no second is counted twice.
    less: list[str] = []
    # Read only when no other reading of the phase matched: the finer lines a build logs instead of
    # the usual one, which would count twice beside it (vLLM's CPU runner times model creation and
    # weight loading, the GPU runners log both and then their sum).
    fallback: bool = False
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _one_group(self) -> "PhaseReading":
        try:
            groups = re.compile(self.pattern).groups
        except re.error as exc:
            raise ValueError(f"pattern {self.pattern!r}: {exc}") from None
        if groups != 1:
            raise ValueError(f"pattern {self.pattern!r} needs exactly one group (the seconds)")
        unknown = [p for p in self.less if p not in LAUNCH_PHASES]
        if unknown:
            raise ValueError(f"less names {', '.join(unknown)}; phases: {', '.join(LAUNCH_PHASES)}")
        return self


class CompileCache(_Strict):
    """Log substrings that say whether compiled graphs came from the engine's compile cache."""

    hit: list[str] = Field(min_length=1)
    miss: list[str] = Field(min_length=1)
    source: str = Field(min_length=1)


class LaunchPhases(_Strict):
    """Where a launch's time goes, read from the engine's own log (tuner/trial/launch_phases.py).
    A phase with no reading here, or whose line the log lacks, is not timed: never zero."""

    weights_s: list[PhaseReading] = []       # loading (or, with dummy weights, creating) weights
    compile_s: list[PhaseReading] = []       # torch.compile, or loading its cached result
    kernels_s: list[PhaseReading] = []       # compiling or tuning kernels outside torch.compile
    cuda_graphs_s: list[PhaseReading] = []   # CUDA-graph capture
    kv_profile_s: list[PhaseReading] = []    # memory profiling, KV-cache allocation, warm-up
    compile_cache: CompileCache | None = None

    @model_validator(mode="after")
    def _less_other_phases(self) -> "LaunchPhases":
        for phase in LAUNCH_PHASES:
            if any(phase in r.less for r in getattr(self, phase)):
                raise ValueError(f"launch_phases.{phase}: a reading cannot subtract its own phase")
        return self


class ConfigFile(_Strict):
    """A generated config file (TensorRT-LLM's ``--extra_llm_api_options``)."""

    flag: str
    format: Literal["yaml", "json"] = "yaml"


class Request(_Strict):
    """Request fields the server rejects (transformers serve answers 422 to vLLM-only fields)."""

    omit_fields: list[str] = []
    endpoint: str = "/v1/completions"
    # What requests put in "model": the served name, or the model path the server was started with
    # (transformers serve pins itself to that exact string and answers 400 to anything else).
    model_name: Literal["served", "path"] = "served"


class Metrics(_Strict):
    """The engine's Prometheus series under the tuner's engine-neutral names, so reports compare
    engines. Gauges are sampled during the run; counters and histograms (``_sum``/``_count``) are
    differenced over it. Several names per key: the first the server exports wins (renamed series)."""

    prefix: str                                # the engine's own series start with it
    gauges: dict[str, list[str]] = {}
    counters: dict[str, list[str]] = {}
    histograms: dict[str, list[str]] = {}


class QualityProbe(_Strict):
    """What the quality probe (tuner/trial/quality.py) can ask of the engine's /v1/completions.

    Without logprobs the probe compares generated tokens only; metrics that need logprobs are
    recorded "not measured" on this engine (and violate their bound), never passed.
    """

    logprobs: bool = False               # top-k logprobs of given tokens (teacher forcing)
    score_field: str | None = None       # the request field asking for them (vLLM: prompt_logprobs)
    token_ids_field: str | None = None   # the request field that returns prompt and output token ids
    source: str = ""

    @model_validator(mode="after")
    def _score_field(self) -> "QualityProbe":
        if self.logprobs and not self.score_field:
            raise ValueError("logprobs: true needs score_field (the request field that scores tokens)")
        return self


class WhenAbsent(_Strict):
    """What the engine needs when a kit left out a module or file it can do without (FlashInfer,
    FlashAttention 3): checked in the installed folder at each launch, so a full install runs as
    the engine intends and a trimmed one gets the fallback."""

    module: str | None = None            # a top-level package: DIR/<module>/ or DIR/<module>.py
    file: str | None = None              # a path inside the folder
    env: dict[str, str] = {}
    args: list[str] = []
    why: str = Field(min_length=1)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _one_target(self) -> "WhenAbsent":
        if (self.module is None) == (self.file is None):
            raise ValueError("when_absent: name exactly one of module or file")
        return self


class Installed(_Strict):
    """How the engine runs from an installed folder (a kit's install.sh, or `pip install
    --target`) on a host with no network: what the engine needs offline is data, not script."""

    # ``{folder}`` is the installed folder, ``{python}`` the interpreter it was installed for.
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = {}
    # Each is set to a writable folder of its own under the tuner's cache (compile caches, HF home):
    # the host may have no writable home, and caches shared across versions go stale.
    cache_env: list[str] = []
    # Extra engine args for every launch from a folder (a backend that needs no JIT at run time).
    args: list[str] = []
    # CUDA_HOME = the toolkit root of the nvcc on PATH or /usr/local/cuda, and the interpreter's
    # bin/ (ninja) on PATH: for engines that compile kernels with nvcc at first use.
    cuda_home: bool = False
    when_absent: list[WhenAbsent] = []
    source: str = Field(min_length=1)


class KitOmit(_Strict):
    names: list[str] = Field(min_length=1)
    why: str = Field(min_length=1)


class KitTrim(_Strict):
    """Files removed from an upstream wheel, only with ``tune engine kit --trim``: each named, each
    listed in the repacked wheel's ``TRIMMED.txt``."""

    wheel: str
    files: list[str] = Field(min_length=1)   # fnmatch patterns over the wheel's member names
    why: str = Field(min_length=1)


class Kit(_Strict):
    """What an offline wheelhouse of the engine takes beyond its declared requirements: the
    requirements a served dense model never imports, host versions kept despite a pin, and
    extra pins that keep the kit importable. Read by ``tuner.kit``."""

    package: str
    pins: dict[str, str] = {}        # requirement -> why (e.g. "openai<3": ...)
    # Requirements the engine imports at start-up without declaring them (they reach a full
    # install only through a package the kit leaves out): requirement -> where it is imported.
    undeclared: dict[str, str] = {}
    omit: list[KitOmit] = []
    keep_host: dict[str, str] = {}   # distribution -> why the host's version works despite the pin
    trim: list[KitTrim] = []
    source: str = Field(min_length=1)


class CacheReset(_Strict):
    """How to empty a running server's prefix cache, so that each of several benchmark runs on one
    launch starts from the same cache state (vLLM's own sweep resets it between runs)."""

    path: str
    method: Literal["GET", "POST"] = "POST"
    env: dict[str, str] = {}  # what the launch needs for the endpoint to exist
    source: str


class EngineSpec(_Strict):
    name: str
    display_name: str
    command: list[str] = Field(min_length=1)
    model_arg: str | None = None  # None: the model path is positional
    host_flag: str = "--host"
    port_flag: str = "--port"
    # Where a deployment listens when the user names no port: the engine's own --port default.
    default_port: int = Field(8000, gt=0, lt=65536)
    # Needs a large /dev/shm in a container (docker gives 64 MiB): PyTorch worker processes share
    # tensors through it. Deployments then get `ipc: host` or a memory-backed /dev/shm.
    shared_memory: bool = False
    # Knobs whose values multiply into the GPUs one launch occupies (unset: 1 each), so a result
    # can be normalised per GPU and a scheduler can reserve what the launch takes.
    gpus_per_launch: list[str] = []
    # The Python distribution whose version `tune doctor` reads from the engine's venv.
    package: str | None = None
    served_name_flag: str | None = None
    version_pattern: str = ""  # regex over the server log, group 1 = version
    env: dict[str, str] = {}
    readiness: Readiness = Readiness()
    metrics_path: str | None = None
    metrics: Metrics | None = None
    prefix_cache_reset: CacheReset | None = None
    config_file: ConfigFile | None = None
    request: Request = Request()
    knobs: dict[str, Knob] = {}
    failures: list[FailureSignature] = []
    # Log lines that look like errors but are normal (e.g. vLLM's shutdown EngineDeadError).
    benign: list[str] = []
    rules: list[Rule] = []
    # Where the running server reports its version as JSON {version_key: "..."}, for engines that
    # do not log it (SGLang).
    version_path: str | None = None
    version_key: str = "version"
    quality_probe: QualityProbe = QualityProbe()
    launch_phases: LaunchPhases = LaunchPhases()
    installed: Installed | None = None
    kit: Kit | None = None

    @model_validator(mode="after")
    def _check_references(self) -> "EngineSpec":
        dims = {"engine", "device", *self.knobs}
        for sig in self.failures:
            unknown = [d for d in sig.generalises_on if d not in dims]
            if unknown:
                raise ValueError(f"failure {sig.failure_class!r}: generalises_on names "
                                 f"{', '.join(unknown)}; allowed: engine, device or a knob")
        unknown = [k for k in self.gpus_per_launch if k not in self.knobs]
        if unknown:
            raise ValueError(f"gpus_per_launch names {', '.join(unknown)}, which are not knobs")
        ids = [r.id for r in self.rules]
        if len(set(ids)) != len(ids):
            raise ValueError(f"rule ids must be unique: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
        return self

    def gpus(self, knobs: Mapping[str, object], omit: frozenset[str] = frozenset()) -> int:
        """GPUs a launch with these knobs occupies; an unset or omitted knob runs at its default, 1."""
        count = 1
        for name in self.gpus_per_launch:
            if name not in omit:
                count *= int(knobs.get(name) or 1)
        return count


@cache
def load_engine(name: str) -> EngineSpec:
    path = ENGINES_DIR / f"{name}.yaml"
    if not path.exists():
        raise InputError(f"unknown engine {name!r}; available: {', '.join(available_engines())}")
    spec = load_model(EngineSpec, path, "engine spec")
    if spec.name != name:
        raise InputError(f"{path}: name is {spec.name!r} but the file is named {name!r}")
    return spec


def available_engines() -> list[str]:
    return sorted(p.stem for p in ENGINES_DIR.glob("*.yaml"))


def engine_file(name: str) -> Path:
    return ENGINES_DIR / f"{name}.yaml"
