"""What an estimator is asked, what it answers, and the registry that names estimators.

An estimate is a prior, never a measurement: performance models of LLM serving are wrong by tens of
percent, sometimes by several times (https://github.com/ai-dynamo/aiconfigurator/issues/1396: 884
tok/s per GPU predicted, 192 measured; on the H200 here measured / predicted was about 0.44 for
vLLM, docs/findings/gpu-landscape-replay.md). So an estimator must say plainly when it cannot
answer (``unsupported``) instead of producing a number it does not have, and every simplification it
made goes into ``notes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tuner.registry import Registry

KnobValue = bool | int | float | str


@dataclass(frozen=True)
class EstimateRequest:
    """One configuration to predict, in tuner's own vocabulary.

    ``knobs`` uses tuner's abstract knob names (quantization, max_num_seqs, max_num_tokens,
    max_seq_len, chunked_prefill, gpu_memory_utilization, kv_cache_dtype, tensor_parallel, ...); a
    knob that is absent runs at the engine's default. ``gpu`` is a tuner hardware key
    (engines/hardware/gpus.yaml: a100-sxm-80gb, h100-sxm-80gb, h200-141gb, ...). ``max_concurrency``
    is the client's cap on requests in flight (the prompt count of a rate-inf run, or
    ``--max-concurrency``); None means the engine's own limits decide.
    """

    engine: str
    knobs: Mapping[str, KnobValue]
    model: str
    input_len: int
    output_len: int
    gpu: str
    checkpoint: str | None = None
    engine_version: str | None = None
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError(f"input_len and output_len must be >= 1 (got {self.input_len}, "
                             f"{self.output_len})")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 (got {self.max_concurrency})")
        # A frozen copy, so that the request can key a cache and nobody mutates it afterwards.
        object.__setattr__(self, "knobs", dict(sorted(self.knobs.items())))

    def key(self) -> tuple:
        """A hashable identity: equal requests get one cached estimate."""
        return (self.engine, tuple(self.knobs.items()), self.model, self.checkpoint,
                self.input_len, self.output_len, self.gpu, self.engine_version,
                self.max_concurrency)


@dataclass(frozen=True)
class Estimate:
    """A prediction, or the reason there is none.

    Throughputs are for the whole instance (all its GPUs). ``feasible`` is False whenever there is
    no usable number: either the estimator predicts that the config cannot run (it does not fit in
    memory; the first note says why) or it cannot tell (``unsupported`` says why). Check
    ``unsupported`` to tell "will not fit" from "cannot know".
    """

    total_tok_s: float | None = None
    output_tok_s: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    memory_gib: float | None = None
    batch: int | None = None  # requests in flight the estimate assumes (after client and KV caps)
    feasible: bool = False
    unsupported: str | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def cannot(cls, why: str, source: str, notes: tuple[str, ...] = ()) -> "Estimate":
        return cls(feasible=False, unsupported=why, source=source, notes=notes)

    @property
    def predicted(self) -> bool:
        """True when the estimator gave numbers for a config it expects to run."""
        return self.feasible and self.unsupported is None


class Estimator(Protocol):
    """``modelled``: the knobs whose effect it predicts. Callers hold the others at their documented
    defaults, where a request leaves them out (the engine's default is what the model assumes)."""

    name: str
    modelled: frozenset[str]

    def estimate(self, req: EstimateRequest) -> Estimate: ...


class CachedEstimator:
    """An estimator that answers each distinct request once: a study asks the same config again
    (the prior, the gap, the plan), and one answer can cost a database load or a simulation.
    Subclasses implement ``_estimate``."""

    def __init__(self) -> None:
        self._cache: dict[tuple, Estimate] = {}

    def estimate(self, req: EstimateRequest) -> Estimate:
        key = req.key()
        if key not in self._cache:
            self._cache[key] = self._estimate(req)
        return self._cache[key]

    def _estimate(self, req: EstimateRequest) -> Estimate:
        raise NotImplementedError


ESTIMATORS: Registry[Callable[[], Estimator]] = Registry("estimator")
register = ESTIMATORS.register  # class or factory decorator: ``@register("aiconfigurator")``


def get_estimator(name: str) -> Estimator:
    """A new estimator by name; an unknown name is an input error listing the known ones."""
    return ESTIMATORS.get(name)()
