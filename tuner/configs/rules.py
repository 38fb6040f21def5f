"""Known-infeasible configurations, decided before anything is launched.

Each engine YAML lists ``rules``: a condition, a reason and the source it comes from. A condition
is a Python-like expression, parsed with ``ast`` but evaluated by the walker below, which allows
only names under ``knobs``, ``hw``, ``engine``, ``workload`` and ``model``; numbers, strings,
tuples; comparisons (with ``in``); ``and``/``or``/``not``; ``+ - * / // %``; and the two helpers
``known(x)`` and ``default(x, fallback)``. Nothing is ever passed to ``eval``.

Logic is three-valued: a fact nobody knows (a model config that is not on disk, a GPU that was not
named, a knob the sampler has not chosen yet) is *unknown*, and a rule applies only when its
condition is certainly true. A knob that is simply not set means the engine's default; rules say
what that default is with ``default(knobs.x, value)``. The same evaluator therefore answers both
"is this trial known to fail?" and, for ``tune plan``, "which whole regions of the space fail?".

Failures learned at run time generalise through ``learned_key``: a launch that failed with a class
whose signature ``generalises_on`` (engine, quantization, device) marks every sibling config with
the same key as infeasible.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from tuner.configs.checkpoint import checkpoint_for
from tuner.engines.conditions import (
    _VOID,
    MISSING,
    UNKNOWN,
    Verdict,
    compile_condition,
    evaluate,
    render_reason,
)
from tuner.engines.hardware import Hardware
from tuner.engines.model_config import read_model_config
from tuner.engines.spec import EngineSpec, load_engine
from tuner.errors import InputError
from tuner.space import Scalar, Space, Workload
from tuner.space.model import SHAREGPT_MAX_PROMPT_LEN, SHAREGPT_MAX_TOTAL_LEN

# ---- the condition language --------------------------------------------------------------------





















# ---- facts the conditions read -----------------------------------------------------------------

def workload_facts(w: Workload) -> dict[str, Any]:
    """Longest prompt and request a workload sends, as the benchmark client builds them."""
    if w.dataset == "sharegpt":
        prompt = SHAREGPT_MAX_PROMPT_LEN
        total = prompt + w.sharegpt_output_len if w.sharegpt_output_len else SHAREGPT_MAX_TOTAL_LEN
    else:
        r = w.random_range_ratio  # the same float arithmetic as vLLM's sampler, rounding included
        prompt = w.random_prefix_len + math.ceil(w.random_input_len * (1 + r))
        total = prompt + math.ceil(w.random_output_len * (1 + r))
    return {"dataset": w.dataset, "max_prompt_len": prompt, "max_total_len": total,
            "num_prompts": w.num_prompts}


def hardware_facts(hw: Hardware) -> dict[str, Any]:
    facts: dict[str, Any] = {"kind": hw.kind, "name": hw.name, "count": hw.count,
                             "device_key": hw.device_key}
    if hw.cpu_flags or hw.source == "detected":  # a profile without flags does not know them
        facts["cpu_flags"] = tuple(hw.cpu_flags)
    if hw.gpu_name:
        facts["gpu_name"] = hw.gpu_name
    if hw.sm is not None:
        facts["sm"] = hw.sm
    if hw.memory_mib is not None:
        facts["memory_gib"] = hw.memory_mib / 1024
    return facts




def model_facts(spec: EngineSpec, space: Space, quantization: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {"variants": tuple(space.model.variants)}
    if quantization is UNKNOWN and space.model.variants:
        return facts  # which checkpoint is loaded is not decided yet; without variants it is the base
    config = read_model_config(checkpoint_for(spec, space.model, quantization))
    for key in ("num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
        if isinstance(config.get(key), int):
            facts[key] = config[key]
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        facts["quant_method"] = str(quant["quant_method"])
        facts["block_quantized"] = bool(quant.get("weight_block_size"))
    elif config.get("_modelopt"):
        facts["quant_method"] = "modelopt"
    elif config:
        facts["quant_method"] = "none"
    return facts




def context(engine: str, knobs: Mapping[str, Any], *, hardware: Hardware, space: Space,
            engine_version: str | None = None) -> dict[str, dict[str, Any]]:
    """Everything a rule condition can read, for one configuration."""
    spec = load_engine(engine)
    version: Any = MISSING
    if engine_version:
        try:
            version = Version(engine_version)
        except InvalidVersion:
            version = MISSING
    return {
        "knobs": dict(knobs),
        "hw": hardware_facts(hardware),
        "engine": {"name": engine, "version": version},
        "workload": workload_facts(space.workload),
        "model": model_facts(spec, space, knobs.get("quantization", MISSING)),
    }


# ---- checking a configuration ------------------------------------------------------------------

def check(engine: str, knobs: Mapping[str, Scalar], *, hardware: Hardware, space: Space,
          engine_version: str | None = None, omit: frozenset[str] = frozenset()) -> list[Verdict]:
    """Every rule that certainly applies to this config: prunes first, then notes.

    ``knobs`` and ``omit`` are what ``translate.build_plan`` gets: an omitted knob runs at the
    engine's default, which the rules know, except a quantization that picks a checkpoint variant
    (the variant is loaded whether or not the knob is omitted). ``engine_version`` is the version
    the engine reported, when a previous trial saw it; rules that depend on it stay silent or take
    the cautious side without it.
    """
    return _check(engine, launched_knobs(engine, knobs, omit, space), hardware=hardware,
                  space=space, engine_version=engine_version)


def first_violation(engine: str, knobs: Mapping[str, Scalar], *, hardware: Hardware, space: Space,
                    engine_version: str | None = None,
                    omit: frozenset[str] = frozenset()) -> Verdict | None:
    """The first prune verdict, if any: the reason a trial is recorded as pruned without a launch."""
    for v in check(engine, knobs, hardware=hardware, space=space, engine_version=engine_version,
                   omit=omit):
        if v.severity == "prune":
            return v
    return None


def launched_knobs(engine: str, knobs: Mapping[str, Scalar], omit: frozenset[str],
                   space: Space) -> dict[str, Scalar]:
    """The knobs that change what is launched: those not omitted, and a checkpoint-picking one."""
    quant = knobs.get("quantization")
    picks_checkpoint = checkpoint_for(load_engine(engine), space.model, quant) != space.model.resolved_path()
    return {k: v for k, v in knobs.items()
            if k not in omit or (k == "quantization" and picks_checkpoint)}


def _check(engine: str, knobs: Mapping[str, Any], **kw: Any) -> list[Verdict]:
    spec = load_engine(engine)
    ctx = context(engine, knobs, **kw)
    out = _unsupported_values(spec, knobs, kw["space"])
    for rule in spec.rules:
        if evaluate(compile_condition(rule.when, rule.id), ctx, rule.id) is True:
            out.append(Verdict(rule.id, rule.severity, render_reason(rule.reason, ctx), rule.source))
    return sorted(out, key=lambda v: v.severity != "prune")


UNSUPPORTED_VALUE = "unsupported-value"


def _unsupported_values(spec: EngineSpec, knobs: Mapping[str, Any], space: Space) -> list[Verdict]:
    """Values the engine has no spelling for (e.g. AWQ on TensorRT-LLM without a checkpoint)."""
    out = []
    for name, value in knobs.items():
        knob = spec.knobs.get(name)
        if knob is None or knob.values is None or value in _VOID or isinstance(value, bool):
            continue
        if name == "quantization" and (value in (None, "none") or (
                knob.prefer_checkpoint and value in space.model.variants)):
            continue
        if str(value) not in knob.values:
            spelled = ", ".join(f"{k}→{v}" for k, v in knob.values.items()) or "none"
            out.append(Verdict(
                UNSUPPORTED_VALUE, "prune",
                f"{spec.display_name} has no setting for {name}={value!r} (its spellings: {spelled})"
                + ("; list a pre-quantized checkpoint under model.variants" if knob.checkpoint_only
                   else ""),
                f"engines/{spec.name}.yaml knobs.{name}.values"))
    return out


# ---- regions of a space, for `tune plan` -------------------------------------------------------

@dataclass(frozen=True)
class PrunedRegion:
    """A partial assignment of categorical params under which every config is pruned."""

    engine: str
    assignment: dict[str, Scalar]
    verdicts: tuple[Verdict, ...]


def pruned_regions(space: Space, hardware: Hardware, engine_version: str | None = None,
                   max_params: int = 2) -> list[PrunedRegion]:
    """Smallest assignments of up to ``max_params`` categorical/bool params that a rule prunes.

    Params not in the assignment are undecided (UNKNOWN), so a region is reported only when the
    rule fires whatever the sampler picks for them; a region contained in a smaller one is skipped.
    """
    from itertools import combinations, product
    regions: list[PrunedRegion] = []
    for engine, choice in space.engines.items():
        discrete = {n: (p.choices if p.type == "categorical" else [True, False])
                    for n, p in choice.params.items() if p.type in ("categorical", "bool")}
        found: list[tuple[dict, str]] = []
        for k in range(0, min(max_params, len(discrete)) + 1):
            for names in combinations(discrete, k):
                for values in product(*(discrete[n] for n in names)):
                    assignment = dict(zip(names, values))
                    knobs = _partial_knobs(choice.params, assignment)
                    if knobs is None:
                        continue
                    knobs.update(choice.fixed)
                    verdicts = tuple(v for v in _check(engine, knobs, hardware=hardware, space=space,
                                                       engine_version=engine_version)
                                     if v.severity == "prune" and not any(
                                         v.rule_id == rid and sub.items() <= assignment.items()
                                         for sub, rid in found))
                    if verdicts:
                        found += [(assignment, v.rule_id) for v in verdicts]
                        regions.append(PrunedRegion(engine, assignment, verdicts))
    return regions


def _partial_knobs(params: Mapping[str, Any], assignment: dict[str, Scalar]) -> dict[str, Any] | None:
    """Knobs of a partial assignment: undecided params are UNKNOWN, params whose ``when`` the
    assignment contradicts are absent; None when the assignment itself is contradictory."""
    def contradicted(p: Any) -> bool:
        return any(k in assignment and assignment[k] != v for k, v in p.when.items())

    if any(contradicted(params[n]) for n in assignment):
        return None
    knobs: dict[str, Any] = {n: UNKNOWN for n, p in params.items() if not contradicted(p)}
    knobs.update(assignment)
    return knobs


# ---- learned infeasibility ---------------------------------------------------------------------

def learned_key(failure_generalises_on: list[str], engine: str, knobs: Mapping[str, Scalar],
                device_key: str) -> str | None:
    """The identity a failure generalises over, e.g. TensorRT-LLM × fp8 × sm80; None if it does not.

    A key records its own dimensions, so ``covered_by`` can recompute it for any new config. A knob
    that is not set is recorded as null: the engine's default is a value of its own.
    """
    if not failure_generalises_on:
        return None
    parts: dict[str, Any] = {}
    for dim in sorted(set(failure_generalises_on)):
        if dim == "engine":
            parts[dim] = engine
        elif dim == "device":
            parts[dim] = device_key
        else:
            parts[dim] = knobs.get(dim)
    return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def covered_by(learned: Mapping[str, int], engine: str, knobs: Mapping[str, Scalar],
               device_key: str) -> tuple[str, int] | None:
    """(key, trial number) of the earlier launch whose failure already rules this config out."""
    for key, trial_number in learned.items():
        try:
            dims = list(json.loads(key))
        except (ValueError, TypeError):
            raise InputError(f"stored learned-infeasibility key {key!r} is not valid JSON") from None
        if learned_key(dims, engine, knobs, device_key) == key:
            return key, trial_number
    return None


def describe_key(key: str) -> str:
    """``engine=trtllm, quantization=fp8, device=sm80`` for messages."""
    return ", ".join(f"{k}={v}" for k, v in json.loads(key).items())
