"""NVIDIA AIConfigurator as an estimator: kernel measurements composed into serving throughput.

Dependency: ``aiconfigurator-core`` (pinned in the ``estimate`` extra). It holds the whole
aggregated-serving model (model builders, per-GPU performance databases, backends with their
``run_agg`` scheduler model, memory model) with five light dependencies. The ``aiconfigurator``
distribution only adds the CLI and report tooling on top (matplotlib, bokeh, plotly, ...; 851 MB in
all); its ``cli_estimate`` is a thin composition of core calls, and it is being renamed
(``aisimulate``). So this module makes the calls ``aiconfigurator cli estimate`` makes for the
default ``agg`` mode, in process (aiconfigurator/cli/api.py ``_run_agg_estimate`` in 0.12.0):
``build_model_config`` -> ``resolve_context_fmha_by_data`` -> ``get_model`` ->
``get_database_view`` -> ``get_backend(...).run_agg``. Loading a GPU's database costs ~2 s once
per process; each estimate after that takes milliseconds.

How tuner's knobs map (and what is not modelled) is in ``_plan``; how each engine runs online
quantization and an FP8 KV cache, in AIC's mode names, is data with the engines' sources
(``aiconfigurator_modes.yaml``). Every simplification made for a request is listed in its
``notes``. AIC models a steady state at a fixed batch, not a scheduler with a queue: the TTFT it
predicts does not include queueing at request rate inf.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from functools import cache
from importlib import import_module, metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tuner.estimate.base import CachedEstimator, Estimate, EstimateRequest, register
from tuner.yaml_io import load_model

PACKAGE = "aiconfigurator-core"
INSTALL_HINT = f"pip install 'tuner[estimate]' (installs {PACKAGE})"

# tuner hardware key (engines/hardware/gpus.yaml) -> AIC system name. AIC ships performance data
# for a100_sxm, h100_sxm, h200_sxm, b200_sxm, l40s (and b300/gb200/gb300/rtx_pro_6000, which tuner
# has no key for); h100_pcie and l4 are declared without data, and AIC says so itself.
SYSTEMS = {
    "a100-sxm-80gb": "a100_sxm",
    "h100-sxm-80gb": "h100_sxm",
    "h100-pcie-80gb": "h100_pcie",
    "h200-141gb": "h200_sxm",
    "b200": "b200_sxm",
    "l40s": "l40s",
    "l4": "l4",
}
_NO_SYSTEM = {
    "a100-sxm-40gb": "AIConfigurator models only the 80 GB A100 (a100_sxm); a 40 GB part has half "
                     "the memory, so its KV capacity would be wrong",
    "a100-pcie-40gb": "AIConfigurator has no 40 GB A100 PCIe system",
}
BACKENDS = ("vllm", "sglang", "trtllm")

# Knobs the model takes (see _plan) and knobs it ignores, at the values where ignoring them is
# right for a throughput estimate; any other knob or value gets no number.
MODELLED = frozenset({"quantization", "max_num_seqs", "max_num_tokens", "max_seq_len",
                      "chunked_prefill", "gpu_memory_utilization", "kv_cache_dtype",
                      "tensor_parallel"})
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "cuda_graphs": (True,),            # AIC's kernel data is for graph-captured decode
    "dtype": ("auto", "bfloat16"),     # AIC's unquantized path is bf16
    "prefix_caching": (True, False),   # AIC assumes no shared prefixes, so the switch is moot
    "overlap_scheduler": (True,),      # TRT-LLM's default, which AIC's data was taken with
}
MODES_FILE = Path(__file__).with_name("aiconfigurator_modes.yaml")

# AIC predicts poorly above this batch (its own sweep stops at 1024: "data collection is not
# enough to cover this", sdk/backends/base_backend.py).
MAX_BATCH = 1024


class _Unsupported(Exception):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OnlineGemm(_Strict):
    """What an engine runs for a quantization value on a checkpoint that is not pre-quantized."""

    scheme: str = Field(min_length=1)
    source: str = Field(min_length=1)
    modes: tuple[str, ...] = Field(min_length=1)  # AIC GEMM modes, best first
    aic_source: str = Field(min_length=1)


class KvMode(_Strict):
    kvcache: str
    fmha: str | None = None  # None: AIC infers it from the checkpoint
    source: str = Field(min_length=1)


class EngineModes(_Strict):
    """Engine knowledge in AIC's vocabulary (aiconfigurator_modes.yaml): data, so that a new engine
    release that changes its kernels is a reviewed edit with its source, not a code change."""

    online_gemm: dict[str, dict[str, OnlineGemm]]
    kv_cache: dict[str, dict[str, KvMode]]


@cache
def engine_modes() -> EngineModes:
    """The mode table, validated once per process: a malformed edit fails on first use, naming
    the file and line."""
    return load_model(EngineModes, MODES_FILE, "AIConfigurator mode table")


def _engine_defaults(engine: str, system: str, mem_gib: float) -> dict[str, Any]:
    """The engine's own value for knobs a request leaves unset (engines/<engine>.yaml defaults)."""
    if engine == "vllm":  # 8192/1024 on >= 70 GiB GPUs other than A100, else 2048/256
        big = mem_gib >= 70 and not system.startswith("a100")
        return {"max_num_seqs": 1024 if big else 256, "max_num_tokens": 8192 if big else 2048,
                "chunked_prefill": True}
    if engine == "sglang":  # chunked-prefill-size by memory; running requests by the request pool
        mnt = 2048 if mem_gib < 20 else 4096 if mem_gib < 60 else 8192 if mem_gib < 160 else 16384
        return {"max_num_seqs": 2048, "max_num_tokens": mnt, "chunked_prefill": True}
    return {"max_num_seqs": 2048, "max_num_tokens": 8192, "chunked_prefill": False}  # trtllm 1.0-1.2


@dataclass(frozen=True)
class _Plan:
    system: str
    backend: str
    version: str
    model_path: str
    gemm_quant_mode: str | None
    gemm_fallbacks: tuple[str, ...]  # modes to substitute, in order, where the data lacks the first
    kvcache_quant_mode: str | None
    fmha_quant_mode: str | None
    tp: int
    max_num_seqs: int
    max_num_tokens: int
    chunked_prefill: bool
    memory_fraction: float | None
    notes: tuple[str, ...]


@cache
def _aic() -> dict[str, Any]:
    """The AIC entry points, imported on first use so tuner works without the extra."""
    logging.getLogger("aiconfigurator_core").addHandler(logging.NullHandler())
    mods: dict[str, ModuleType] = {n: import_module(f"aiconfigurator_core.sdk.{n}") for n in (
        "config", "config_builders", "models", "perf_database", "backends.factory", "common")}
    return {
        "version": metadata.version(PACKAGE),
        "RuntimeConfig": mods["config"].RuntimeConfig,
        "build_model_config": mods["config_builders"].build_model_config,
        "get_model": mods["models"].get_model,
        "resolve_context_fmha_by_data": mods["models"].resolve_context_fmha_by_data,
        "get_database_view": mods["perf_database"].get_database_view,
        "supported": mods["perf_database"].get_supported_databases(),
        # The maintained ("current") version, as the CLI picks it: not the derived "next" slot.
        "default_version": cache(mods["perf_database"].get_latest_database_version),
        "load_system_spec": mods["perf_database"].load_system_spec,
        "get_backend": mods["backends.factory"].get_backend,
        "bundled_models": frozenset(mods["common"].DefaultHFModels),
        "package_dir": Path(mods["common"].__file__).parent.parent,
    }


@register("aiconfigurator")
class AIConfiguratorEstimator(CachedEstimator):
    """Estimates from AIC's measured kernel data only (its SILICON mode)."""

    name = "aiconfigurator"
    modelled = MODELLED  # knobs it predicts the effect of; others only at neutral or default values
    database_mode = "SILICON"

    def _estimate(self, req: EstimateRequest) -> Estimate:
        try:
            aic = _aic()
        except ImportError as exc:
            return Estimate.cannot(f"{PACKAGE} is not installed ({exc}); {INSTALL_HINT}", self.name)
        source = f"{self.name} ({PACKAGE} {aic['version']}, {self.database_mode})"
        try:
            plan = _plan(req, aic)
        except _Unsupported as exc:
            return Estimate.cannot(str(exc), source)
        source = (f"{self.name} ({PACKAGE} {aic['version']}, {plan.system}/{plan.backend} "
                  f"{plan.version}, {self.database_mode})")
        try:
            return _run(req, plan, aic, self.database_mode, source)
        except _Unsupported as exc:
            return Estimate.cannot(str(exc), source, plan.notes)
        except Exception as exc:  # AIC's own refusals: missing perf data, missing FLOPS, bad config
            why = str(exc).replace(f"{aic['package_dir']}/", "")  # paths inside the package
            return Estimate.cannot(f"AIConfigurator cannot model this: {type(exc).__name__}: "
                                   f"{why[:400]}", source, plan.notes)


@register("aiconfigurator-hybrid")
class AIConfiguratorHybridEstimator(AIConfiguratorEstimator):
    """AIC's HYBRID mode: measured data where it has some, its empirical formulas where it has
    none (e.g. AWQ GEMMs for vLLM on A100). Wider coverage, lower fidelity: said in ``source``."""

    name = "aiconfigurator-hybrid"
    database_mode = "HYBRID"


def _system(req: EstimateRequest, tool: str) -> str:
    """The AIC system name (shared by AISimulate) for the request's engine and GPU, or why
    ``tool`` cannot model them."""
    if req.engine not in BACKENDS:
        raise _Unsupported(f"{tool} models {', '.join(BACKENDS)}, not {req.engine!r}")
    if req.gpu in _NO_SYSTEM:
        raise _Unsupported(_NO_SYSTEM[req.gpu])
    system = SYSTEMS.get(req.gpu)
    if system is None:
        raise _Unsupported(f"no {tool} system for GPU {req.gpu!r}; it covers the tuner "
                           f"GPUs {', '.join(sorted(SYSTEMS))}")
    return system


def _plan(req: EstimateRequest, aic: dict[str, Any]) -> _Plan:
    """Map the request onto AIC's inputs, or say which part AIC cannot take."""
    system = _system(req, "AIConfigurator")
    versions = aic["supported"].get(system, {}).get(req.engine, [])
    if not versions:
        raise _Unsupported(f"AIConfigurator has no {req.engine} performance data for {system}")
    notes: list[str] = []
    if req.engine_version in versions:
        version = req.engine_version
    else:
        version = aic["default_version"](system, req.engine)
        if req.engine_version:
            notes.append(f"AIC's {req.engine} data is for {version}, not {req.engine_version}")

    _check_knobs(req)

    spec = aic["load_system_spec"](system)["gpu"]
    mem_gib, sm = spec["mem_capacity"] / 2**30, int(spec["sm_version"])
    knobs = {**_engine_defaults(req.engine, system, mem_gib), **req.knobs}
    if req.engine == "sglang" and not knobs["chunked_prefill"] and "max_num_tokens" not in req.knobs:
        knobs["max_num_tokens"] = 16384  # unchunked prefill batches are bounded by max_prefill_tokens
    unset = sorted(k for k in ("max_num_seqs", "max_num_tokens", "chunked_prefill")
                   if k not in req.knobs)
    if "gpu_memory_utilization" not in req.knobs:
        unset.append("gpu_memory_utilization")
        knobs["gpu_memory_utilization"] = "AIC's default for the engine"
    if unset:
        notes.append("engine defaults: " + ", ".join(f"{k}={knobs[k]}" for k in unset))

    kv = _kv_mode(req.engine, str(knobs.get("kv_cache_dtype", "auto")))
    gemm, gemm_notes = _gemm_mode(req, str(knobs.get("quantization", "none")), sm, aic)
    notes += gemm_notes

    chunked = bool(knobs["chunked_prefill"])
    if req.engine == "vllm" and not chunked:
        notes.append("vLLM 0.11 forces chunked prefill on; modelled as asked (whole prompts)")
    max_seq_len = knobs.get("max_seq_len")
    if max_seq_len is not None and int(max_seq_len) < req.input_len + req.output_len:
        raise _Unsupported(f"max_seq_len {max_seq_len} < input+output "
                           f"({req.input_len + req.output_len}): requests would be rejected")
    fraction = req.knobs.get("gpu_memory_utilization")
    return _Plan(
        system=system, backend=req.engine, version=version, model_path=_model_path(req.model, aic),
        gemm_quant_mode=gemm[0] if gemm else None, gemm_fallbacks=gemm[1:],
        kvcache_quant_mode=kv.kvcache if kv else None, fmha_quant_mode=kv.fmha if kv else None,
        tp=int(knobs.get("tensor_parallel", 1)), max_num_seqs=int(knobs["max_num_seqs"]),
        max_num_tokens=int(knobs["max_num_tokens"]), chunked_prefill=chunked,
        memory_fraction=None if fraction is None else float(fraction), notes=tuple(notes))


def _check_knobs(req: EstimateRequest) -> None:
    """Knobs the model does not take, or takes only at their neutral values, get no number."""
    unknown = sorted(k for k in req.knobs if k not in MODELLED and k not in NEUTRAL)
    if unknown:
        raise _Unsupported(f"AIConfigurator does not model the knob(s) {', '.join(unknown)}")
    for k, ok in NEUTRAL.items():
        if k in req.knobs and req.knobs[k] not in ok:
            raise _Unsupported(f"AIConfigurator does not model {k}={req.knobs[k]!r} (only "
                               f"{' or '.join(map(repr, ok))})")


def _kv_mode(engine: str, kv: str) -> KvMode | None:
    """AIC's KV cache (and attention) modes for the kv_cache_dtype knob; None: the model's dtype."""
    if kv == "auto":
        return None
    if kv == "bfloat16":
        return KvMode(kvcache="bfloat16", source="the unquantized KV cache")
    mapped = engine_modes().kv_cache.get(engine, {})
    if kv not in mapped:
        raise _Unsupported(f"kv_cache_dtype={kv!r} has no AIConfigurator mode for {engine} "
                           f"(mapped: {', '.join(['auto', 'bfloat16', *mapped])}; "
                           f"{MODES_FILE.name})")
    return mapped[kv]


def _gemm_mode(req: EstimateRequest, quant: str, sm: int,
               aic: dict[str, Any]) -> tuple[tuple[str, ...], list[str]]:
    """AIC's GEMM quant modes (best first; none: the model's own dtype) for tuner's quantization
    knob and the checkpoint the engine loads.

    A pre-quantized checkpoint decides the mode: fp8_block for a block-scaled one (Qwen's -FP8),
    fp8_static or fp8 by its activation scheme; awq -> int4_wo (W4A16). On a checkpoint that is not
    quantized, vLLM and SGLang quantize at load time, each with its own scales (per tensor, per
    channel): that mapping is data (aiconfigurator_modes.yaml, with the engines' sources). On GPUs
    without FP8 compute (SM < 89) vLLM and SGLang run FP8 weight-only through Marlin, which is
    AIC's int8_wo (W8A16) lane; TRT-LLM keeps FP8 compute there and AIC refuses it, as the engine does.
    """
    if quant in ("none", "auto"):
        return (), []
    cfg = None
    if req.checkpoint:
        cfg = _read_config(req.checkpoint, aic)
        if cfg is None:
            raise _Unsupported(f"cannot read the config.json of checkpoint {req.checkpoint!r} "
                               f"(not a local directory, not in the HF cache, not bundled with "
                               f"AIConfigurator), so its quantization format is unknown")
    qc = (cfg or {}).get("quantization_config") or {}
    method = str(qc.get("quant_method", "")).lower()
    # A knob value that names a checkpoint variant (fp8-checkpoint) runs what the checkpoint is.
    if quant not in ("fp8", "awq") and method in ("fp8", "awq"):
        quant = method
    if quant not in ("fp8", "awq"):
        raise _Unsupported(f"quantization={quant!r} has no AIConfigurator mapping (none, fp8, awq, "
                           f"or a variant whose checkpoint is FP8 or AWQ)")
    notes: list[str] = []
    if quant == "fp8":
        if not method:
            modes, notes = _online(req.engine, quant)
        elif method == "fp8":
            static = str(qc.get("activation_scheme", "")).lower() == "static"
            modes = ("fp8_block" if qc.get("weight_block_size") else
                     "fp8_static" if static else "fp8",)
        else:
            raise _Unsupported(f"checkpoint {req.checkpoint!r} is not an FP8 checkpoint "
                               f"(quant_method {method}) and the engine does not re-quantize it")
        if sm < 89 and req.engine in ("vllm", "sglang"):
            notes = [f"SM {sm} has no FP8 compute: {req.engine} runs FP8 weight-only (Marlin), "
                     f"modelled as AIC's W8A16 int8_wo GEMM"]
            modes = ("int8_wo",)
        return modes, notes
    if not method:
        raise _Unsupported("AWQ is not an online quantization; name the AWQ checkpoint")
    if method != "awq" or int(qc.get("bits", 4)) != 4:
        raise _Unsupported(f"checkpoint {req.checkpoint!r} is not a 4-bit AWQ checkpoint "
                           f"(quant_method {method}, bits {qc.get('bits')})")
    return ("int4_wo",), ["AWQ modelled as AIC's W4A16 int4_wo GEMM"]


def _online(engine: str, quant: str) -> tuple[tuple[str, ...], list[str]]:
    """The GEMM modes for an engine's online quantization of an unquantized checkpoint."""
    online = engine_modes().online_gemm.get(engine, {}).get(quant)
    if online is None:
        if engine == "trtllm":
            raise _Unsupported(f"TensorRT-LLM quantizes only from the checkpoint; name the "
                               f"{quant.upper()} checkpoint (a model variant)")
        raise _Unsupported(f"no online {quant} mapping for {engine} in {MODES_FILE.name}")
    return online.modes, [f"online {quant}: {online.scheme}"]


def _model_path(model: str, aic: dict[str, Any]) -> str:
    """A path AIC can read without the network: a local dir, an HF-cache snapshot, or its bundle."""
    local = _local_dir(model)
    if local is not None:
        return str(local)
    if model in aic["bundled_models"]:
        return model
    raise _Unsupported(f"model {model!r} is not a local directory with a config.json, not in the "
                       f"local Hugging Face cache and not bundled with AIConfigurator")


def _local_dir(model: str) -> Path | None:
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return path
    if model.count("/") != 1:
        return None
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get(
        "HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    snaps = sorted((hub / f"models--{model.replace('/', '--')}" / "snapshots").glob("*/config.json"))
    return snaps[-1].parent if snaps else None


def _read_config(model: str, aic: dict[str, Any]) -> dict | None:
    local = _local_dir(model)
    path = (local / "config.json" if local is not None
            else aic["package_dir"] / "model_configs" / f"{model.replace('/', '--')}_config.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@cache
def _database(system: str, backend: str, version: str, mode: str) -> Any:
    """AIC's performance database for one GPU/engine/version: loaded once per process (~2 s)."""
    db = _aic()["get_database_view"](system, backend, version, allow_missing_data=mode != "SILICON",
                                     database_mode=mode, transfer_policy=None)
    if db is None:
        raise _Unsupported(f"AIConfigurator could not load its {system}/{backend} {version} data")
    return db


def _measured_gemm(plan: _Plan, db: Any, mode: str) -> tuple[str | None, list[str]]:
    """The first of the plan's GEMM modes that AIC measured for this engine version.

    Only SILICON needs measured rows: HYBRID fills a missing mode with AIC's formulas, which is
    better than a substitute of another scale granularity.
    """
    first = plan.gemm_quant_mode
    if first is None or mode != "SILICON":
        return first, []
    have = set(db.supported_quant_mode["gemm"])
    folder = f"systems/data/{plan.system}/gemm/{plan.backend}/{plan.version}"
    for candidate in (first, *plan.gemm_fallbacks):
        if candidate in have:
            return candidate, [] if candidate == first else [
                f"AIC has no {first} GEMM data in {folder}: modelled as {candidate}"]
    tried = " or ".join((first, *plan.gemm_fallbacks))
    raise _Unsupported(f"AIConfigurator has no GEMM data for {tried} in {folder} (it has "
                       f"{', '.join(sorted(have))}); the HYBRID estimator (aiconfigurator-hybrid) "
                       f"models it from formulas")


@cache
def _session(model_path: str, backend: str, system: str, version: str, mode: str,
             gemm: str | None, kv: str | None, fmha: str | None, tp: int) -> tuple[Any, Any, Any]:
    """(model, database, backend) for one model/quantization/GPU/engine: built once per process."""
    aic = _aic()
    db = _database(system, backend, version, mode)
    cfg = aic["build_model_config"](tp, 1, 1, None, None, gemm_quant_mode=gemm,
                                    kvcache_quant_mode=kv, fmha_quant_mode=fmha)
    aic["resolve_context_fmha_by_data"](cfg, model_path, db, backend, is_context_role=True)
    return aic["get_model"](model_path, cfg, backend), db, aic["get_backend"](backend)


def _ctx_tokens(plan: _Plan, batch: int, isl: int) -> int:
    """Context tokens per engine step: max_num_tokens, bounded by what the batch can supply.

    AIC's mixed step keeps at least one request decoding, so a step holds at most (batch - 1)
    prompts; without chunked prefill a step takes whole prompts only (AIC's own sweep does the same).
    """
    budget = plan.max_num_tokens
    if not plan.chunked_prefill:
        budget = max(isl, budget // isl * isl)
    return max(1, min(budget, (batch - 1) * isl)) if batch > 1 else min(budget, isl)


def _run(req: EstimateRequest, plan: _Plan, aic: dict[str, Any], mode: str,
         source: str) -> Estimate:
    db = _database(plan.system, plan.backend, plan.version, mode)
    gemm, gemm_notes = _measured_gemm(plan, db, mode)
    model, db, backend = _session(plan.model_path, plan.backend, plan.system, plan.version, mode,
                                  gemm, plan.kvcache_quant_mode, plan.fmha_quant_mode, plan.tp)
    isl, osl = req.input_len, req.output_len
    notes = [*plan.notes, *gemm_notes]

    def run(batch: int) -> Any:
        extra: dict[str, Any] = {"free_gpu_memory_fraction": plan.memory_fraction}
        if plan.backend == "trtllm":
            # TRT-LLM sizes its activation workspace by max_num_tokens. Its KV pool is paged and
            # sized by the memory fraction, so AIC's max_seq_len (KV reserved per slot) stays at
            # input+output: tuner's max_seq_len would reserve 40960 tokens per slot and predict an
            # OOM the engine does not have (the seed study ran max_seq_len 40960 at batch 2048).
            extra["max_num_tokens"] = plan.max_num_tokens
        return backend.run_agg(model, db, aic["RuntimeConfig"](isl=isl, osl=osl, batch_size=batch),
                               ctx_tokens=_ctx_tokens(plan, batch, isl), **extra)

    def fits(summary: Any) -> bool:
        return not (summary.check_oom() or summary.check_kv_cache_oom())

    asked = plan.max_num_seqs
    if req.max_concurrency is not None and req.max_concurrency < asked:
        asked = req.max_concurrency
        notes.append(f"batch {asked}: the client keeps at most {asked} requests in flight")
    if asked > MAX_BATCH:
        notes.append(f"batch capped at {MAX_BATCH}, where AIC's data ends (asked {asked})")
        asked = MAX_BATCH
    batch, summary = asked, run(asked)
    if not fits(summary):
        one = run(1)
        if not fits(one):
            mem = one.get_result_dict()["memory"]
            return Estimate(feasible=False, memory_gib=float(mem), source=source, notes=(
                f"does not fit: weights, activations and one sequence need {mem:.1f} GiB per GPU "
                f"at this memory setting", *notes))
        lo, hi = 1, asked  # largest batch whose KV cache fits: the engine queues the rest
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(run(mid)) else (lo, mid)
        batch, summary = lo, run(lo)
        notes.append(f"KV cache holds ~{lo} sequences of {isl + osl} tokens, fewer than the "
                     f"{asked} asked: estimated at batch {lo}")
    r = summary.get_result_dict()
    return Estimate(
        total_tok_s=float(r["seq/s"]) * (isl + osl), output_tok_s=float(r["tokens/s"]),
        ttft_ms=float(r["ttft"]), tpot_ms=float(r["tpot"]), memory_gib=float(r["memory"]),
        batch=batch, feasible=True, source=source, notes=(f"batch {batch}, {int(r['ctx_tokens'])} context "
                                             f"tokens per step", *notes))
