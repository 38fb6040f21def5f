"""NVIDIA AISimulate as an estimator: AIConfigurator's kernel model under a serving simulator.

AISimulate is AIConfigurator's successor distribution (https://github.com/ai-dynamo/aisimulate).
Where AIConfigurator predicts one steady batch, AISimulate replays traffic: requests keep a
concurrency (or arrive at a rate), a scheduler forms batches under the engine's token and sequence
limits and its KV capacity, and TTFT includes the time a request queues. That is the question a
max-load objective under TTFT/TPOT SLOs asks (``tuner/configs/predict.py``), which a fixed-batch
model answers only through Little's law.

Dependency: the ``aisimulate`` wheel, pinned in the ``simulate`` extra. It owns the estimator SDK
(``aisimulate_core``), removes the ``aiconfigurator_core`` import namespace and installs the
``aiconfigurator`` command itself; ``aiconfigurator-core`` must be uninstalled first, so one
environment has this estimator or the ``estimate`` extra's, not both (docs/MIGRATION.md,
"Installation and package mapping" and "Python imports and resources", which describes AISimulate
0.13.0; its examples were run on source revision 67b1b9a5). On PyPI the wheel is a placeholder
whose build downloads the real one from https://pypi.nvidia.com/.

The call is the documented command, ``aisimulate predict --stack engine --config FILE --output-dir
DIR --format json`` (docs/cli/user-guide.md sections 4, 7 and 22; the console script is
``aisimulate = "aisimulate.main:main"`` in python/aisimulate/pyproject.toml), run as a
subprocess: its YAML is the public input, strict (unknown fields are rejected), so a field this
module gets wrong comes back as a refusal, never as a silent default; the Python orchestration
behind it is not a documented API. The YAML (``simulation_config``) is built from tuner's knobs
with AIConfigurator's mapping (``aiconfigurator.py``: GPU systems, engine defaults, the
quantization modes of ``aiconfigurator_modes.yaml``), since AISimulate's kernel data and mode names
are AIConfigurator's. Each estimate is one process and one simulated workload; results are cached
per request.

Sources, all in https://github.com/ai-dynamo/aisimulate (no release tag is published there; each
file at the commit read): docs/MIGRATION.md at 1655a4aa (the 0.13.0 guide: package mapping,
flat engine controls, the verified ``predict`` example), docs/cli/user-guide.md at 05a78e49 (fields,
outputs, exit statuses), docs/cli/understand-your-prediction.md at 77122a7b (summary fields),
python/aisimulate/src/aisimulate/replay/reporting.py at 1c8ad9e4 and main.py at 0041cf46 (how
``predict`` writes ``prediction.json`` and its ``summary``).
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from shutil import which
from typing import Any

import yaml

from tuner.estimate.aiconfigurator import (
    MODELLED,
    _check_knobs,
    _engine_defaults,
    _gemm_mode,
    _kv_mode,
    _local_dir,
    _system,
    _Unsupported,
)
from tuner.estimate.base import CachedEstimator, Estimate, EstimateRequest, register

PACKAGE = "aisimulate"
INSTALL_HINT = "pip install 'tuner[simulate]' (needs https://pypi.nvidia.com)"
NOT_INSTALLED = f"{PACKAGE} not installed: {INSTALL_HINT}"

# Requests simulated per request slot: a closed loop at concurrency c runs WAVES * c requests, so
# the report covers the steady state and not only the first burst of c prefills. AISimulate's
# default traffic is 10 waves (docs/cli/user-guide.md section 11, "10 times the active
# concurrency"); 3 keeps an estimate at concurrency 1024 to about 3000 simulated requests.
WAVES = 3
TIMEOUT_S = 600

# `aisimulate predict` exit statuses (docs/cli/user-guide.md section 23).
_EXIT = {1: "execution failed", 2: "refused the configuration", 3: "refused for lack of local "
         "RAM or CPU (execution.resources)"}


@dataclass(frozen=True)
class Simulation:
    """One ``aisimulate predict`` input and what tuner needs to read its answer."""

    config: dict[str, Any]
    system: str
    concurrency: int
    requests: int
    max_num_seqs: int
    notes: tuple[str, ...]


def simulation_config(req: EstimateRequest, package_dir: Path) -> Simulation:
    """The ``aisimulate predict`` YAML for one request: an aggregated worker on the request's GPU
    under a closed loop of ``max_concurrency`` requests (the engine's ``max_num_seqs`` when the
    client sets none).

    ``package_dir`` is the installed ``aisimulate_core`` package: its ``systems/<system>.yaml``
    gives the GPU's memory and SM version (which engine defaults and FP8 paths depend on) and its
    ``model_configs/`` the bundled config.json files, the resource layout docs/MIGRATION.md
    prescribes ("Resource lookup must use importlib.resources.files("aisimulate_core") for
    model_configs/ and systems/"). Field names: docs/MIGRATION.md, "Verified serving examples" and
    "Preserve pinned engine and request controls" (``engine.enable_chunked_prefill``,
    ``engine.gemm_quant_mode``, ``engine.kvcache_quant_mode``, ``engine.fmha_quant_mode``,
    ``engine.context_length``, ``engine.workers.<role>.kv_cache.capacity.memory_fraction``);
    docs/cli/user-guide.md section 12 (``scheduler.max_batched_tokens``, ``max_sequences``,
    ``parallelism.tensor``) and section 11 (``traffic.source``, ``load``, ``stop``).
    Raises ``_Unsupported`` where there is no mapping.
    """
    system = _system(req, "AISimulate")
    _check_knobs(req)
    gpu = _system_spec(package_dir, system).get("gpu") or {}
    try:
        mem_gib, sm = float(gpu["mem_capacity"]) / 2**30, int(gpu["sm_version"])
    except (KeyError, TypeError, ValueError):
        raise _Unsupported(f"AISimulate's systems/{system}.yaml has no GPU memory capacity and SM "
                           f"version") from None

    notes: list[str] = []
    knobs = {**_engine_defaults(req.engine, system, mem_gib), **req.knobs}
    if req.engine == "sglang" and not knobs["chunked_prefill"] and "max_num_tokens" not in req.knobs:
        knobs["max_num_tokens"] = 16384  # unchunked prefill batches are bounded by max_prefill_tokens
    unset = sorted(k for k in ("max_num_seqs", "max_num_tokens", "chunked_prefill")
                   if k not in req.knobs)
    if unset:
        notes.append("engine defaults: " + ", ".join(f"{k}={knobs[k]}" for k in unset))
    kv = _kv_mode(req.engine, str(knobs.get("kv_cache_dtype", "auto")))
    gemm, gemm_notes = _gemm_mode(req, str(knobs.get("quantization", "none")), sm,
                                  {"package_dir": package_dir})
    notes += gemm_notes
    if gemm[1:]:
        notes.append(f"GEMM mode {gemm[0]}; where AISimulate has no {gemm[0]} data it refuses "
                     f"(AIConfigurator's estimator would substitute {', '.join(gemm[1:])})")
    max_seq_len = knobs.get("max_seq_len")
    if max_seq_len is not None and int(max_seq_len) < req.input_len + req.output_len:
        raise _Unsupported(f"max_seq_len {max_seq_len} < input+output "
                           f"({req.input_len + req.output_len}): requests would be rejected")
    if req.engine_version:
        notes.append(f"AISimulate's current {req.engine} performance data, not necessarily "
                     f"{req.engine_version}")

    max_num_seqs = int(knobs["max_num_seqs"])
    concurrency = req.max_concurrency or max_num_seqs
    if req.max_concurrency is None:
        notes.append(f"concurrency {concurrency}: the engine's max_num_seqs, no client cap")
    requests = WAVES * concurrency

    worker: dict[str, Any] = {
        "parallelism": {"replicas": 1, "tensor": int(knobs.get("tensor_parallel", 1))},
        "scheduler": {"max_batched_tokens": int(knobs["max_num_tokens"]),
                      "max_sequences": max_num_seqs},
    }
    if "gpu_memory_utilization" in req.knobs:
        worker["kv_cache"] = {"capacity": {"type": "default", "memory_fraction":
                                           float(req.knobs["gpu_memory_utilization"])}}
    engine: dict[str, Any] = {
        "mode": "aggregated", "model": _model(req.model), "hardware": system,
        "backend": req.engine, "enable_chunked_prefill": bool(knobs["chunked_prefill"]),
    }
    if max_seq_len is not None:
        engine["context_length"] = int(max_seq_len)
    if gemm:
        engine["gemm_quant_mode"] = gemm[0]
    if kv is not None:
        engine["kvcache_quant_mode"] = kv.kvcache
        if kv.fmha is not None:
            engine["fmha_quant_mode"] = kv.fmha
    engine["workers"] = {"aggregated": worker}
    traffic = {
        "source": {"type": "synthetic", "input_tokens": req.input_len,
                   "output_tokens": req.output_len},
        "load": {"type": "concurrency", "concurrency": concurrency},
        "stop": {"requests": requests},
    }
    return Simulation(config={"traffic": traffic, "engine": engine}, system=system,
                      concurrency=concurrency, requests=requests, max_num_seqs=max_num_seqs,
                      notes=tuple(notes))


def _system_spec(package_dir: Path, system: str) -> dict[str, Any]:
    path = package_dir / "systems" / f"{system}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError:
        raise _Unsupported(f"AISimulate has no system {system!r} (no systems/{system}.yaml in "
                           f"its package)") from None
    except yaml.YAMLError as exc:
        raise _Unsupported(f"AISimulate's systems/{system}.yaml is not YAML: {exc}") from None
    return data if isinstance(data, dict) else {}


def _model(model: str) -> str:
    """A local folder with a config.json (or its HF-cache snapshot) by path, as AIConfigurator's
    ``--model-path`` took it (docs/MIGRATION.md maps that flag to ``engine.model``), else the id
    as given. A model AISimulate cannot resolve is its refusal, which becomes ``unsupported``."""
    local = _local_dir(model)
    return str(local) if local is not None else model


def estimate_from_summary(summary: dict[str, Any], req: EstimateRequest, sim: Simulation,
                          source: str) -> Estimate:
    """Tuner's estimate from a prediction summary. Field meanings: docs/cli/
    understand-your-prediction.md, "Read one report" (``completed_requests``,
    ``request_throughput_rps``, ``output_throughput_tok_s``, ``mean_ttft_ms``, ``mean_tpot_ms``,
    ``num_tpot_samples``): throughputs count completed requests over the modelled duration, TTFT
    includes queueing, and TPOT is one average per request, the population its SLA filter uses.
    The same names fill its terminal table (python/aisimulate/src/aisimulate/replay/reporting.py,
    ``format_report_table``); a summary without ``mean_tpot_ms`` falls back to the mean
    inter-token gap, ``mean_itl_ms``, which weights long outputs more."""
    notes = list(sim.notes)
    completed = int(summary.get("completed_requests") or 0)
    if completed == 0:
        return Estimate.cannot(f"AISimulate completed none of the {sim.requests} requests",
                               source, tuple(notes))
    if completed < sim.requests:
        notes.append(f"{completed} of {sim.requests} requests completed: throughput and latency "
                     f"are the completed ones'")
    try:
        rps = float(summary["request_throughput_rps"])
        out_tok_s = float(summary["output_throughput_tok_s"])
        ttft = float(summary["mean_ttft_ms"])
    except (KeyError, TypeError, ValueError) as exc:
        return Estimate.cannot(f"AISimulate's summary lacks {exc}", source, tuple(notes))
    tpot = summary.get("mean_tpot_ms")
    if tpot is None and summary.get("mean_itl_ms") is not None:
        tpot = summary["mean_itl_ms"]
        notes.append("TPOT is AISimulate's mean inter-token latency (its summary has no mean TPOT)")
    if not summary.get("num_tpot_samples", 1):
        tpot = None  # no request had two output tokens: a zero would read as a fast deployment
    batch = min(sim.concurrency, sim.max_num_seqs)
    return Estimate(
        total_tok_s=rps * (req.input_len + req.output_len), output_tok_s=out_tok_s,
        ttft_ms=ttft, tpot_ms=None if tpot is None else float(tpot), batch=batch, feasible=True,
        source=source, notes=(f"concurrency {sim.concurrency}, {sim.requests} requests simulated",
                              *notes))


def command(config: Path, output_dir: Path) -> list[str]:
    """The ``aisimulate predict`` command line: the console script of the interpreter's
    environment (installed next to it even when that environment is not activated)."""
    script = Path(sysconfig.get_path("scripts")) / PACKAGE
    exe = str(script) if script.is_file() else (which(PACKAGE) or PACKAGE)
    return [exe, "predict", "--stack", "engine", "--config", str(config),
            "--output-dir", str(output_dir), "--format", "json"]


def _package_dir() -> Path | None:
    """The installed ``aisimulate_core`` folder, found without importing it (its import loads the
    native extension)."""
    spec = find_spec("aisimulate_core")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _installed_version() -> str | None:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


@register("aisimulate")
class AISimulateEstimator(CachedEstimator):
    """Simulated serving at the request's concurrency, with AISimulate's default (op-level)
    timing from measured kernel data."""

    name = "aisimulate"
    modelled = MODELLED

    def _estimate(self, req: EstimateRequest) -> Estimate:
        version = _installed_version()
        package_dir = _package_dir() if version else None
        if version is None or package_dir is None:
            return Estimate.cannot(f"{NOT_INSTALLED}; it replaces aiconfigurator-core (the "
                                   f"'estimate' extra), the two cannot be installed together",
                                   self.name)
        source = f"{self.name} ({PACKAGE} {version})"
        try:
            sim = simulation_config(req, package_dir)
        except _Unsupported as exc:
            return Estimate.cannot(str(exc), source)
        source = f"{self.name} ({PACKAGE} {version}, {sim.system}/{req.engine}, engine stack)"
        with tempfile.TemporaryDirectory(prefix="tuner-aisimulate-") as tmp:
            config, out = Path(tmp) / "prediction.yaml", Path(tmp) / "out"
            config.write_text(yaml.safe_dump(sim.config, sort_keys=False))
            try:
                proc = subprocess.run(command(config, out), capture_output=True, text=True,
                                      timeout=TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                return Estimate.cannot(f"AISimulate ran past {TIMEOUT_S} s", source, sim.notes)
            except OSError as exc:
                return Estimate.cannot(f"cannot run {PACKAGE}: {exc}; {INSTALL_HINT}", source,
                                       sim.notes)
            if proc.returncode != 0:
                why = _EXIT.get(proc.returncode, f"exited {proc.returncode}")
                tail = (proc.stderr or proc.stdout).strip()[-400:].replace(f"{config}: ", "")
                return Estimate.cannot(f"AISimulate {why}: {tail}", source, sim.notes)
            try:
                report = json.loads((out / "prediction.json").read_text())
            except (OSError, ValueError) as exc:
                return Estimate.cannot(f"AISimulate wrote no readable prediction.json: {exc}",
                                       source, sim.notes)
        summary = report.get("summary", report) if isinstance(report, dict) else {}
        return estimate_from_summary(summary if isinstance(summary, dict) else {}, req, sim,
                                     source)
