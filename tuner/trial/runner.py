"""One trial: launch the engine with a config, benchmark it over HTTP, tear it down, report.

Knows nothing about Optuna: it takes a configuration and returns an outcome, so the same code serves
local studies, Ray workers and `tune evaluate`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import httpx

from tuner.bench import BenchConfig, run_benchmark
from tuner.configs.container import unique_name
from tuner.configs.translate import LaunchPlan, build_plan
from tuner.engines.failures import NOT_THE_CONFIG, Failure, classify_exit
from tuner.engines.installed import read_record
from tuner.engines.spec import load_engine
from tuner.errors import HarnessError
from tuner.files import write_atomic
from tuner.fingerprint import engine_version
from tuner.paths import expand
from tuner.record.per_gpu import per_gpu
from tuner.runtime import marker
from tuner.runtime.launcher import EngineStartFailed, Server, start, wait_ready
from tuner.runtime.procgroup import free_port
from tuner.space import MaxLoad, Scalar, Space, Workload
from tuner.trial import lm_eval
from tuner.trial.launch_phases import breakdown
from tuner.trial.load_search import EveryWorkload, describe, find_max_load
from tuner.trial.quality import SAME_PRECISION, ProbeTask, add_lm_eval, probe
from tuner.trial.telemetry import TelemetrySampler, derived, gpu_memory_in_use, gpu_memory_released

Phase = Callable[[str], None]




@dataclass
class TrialOutcome:
    plan: LaunchPlan
    log_path: Path
    failure: Failure | None = None
    metrics: dict = field(default_factory=dict)
    result_path: Path | None = None
    engine_version: str | None = None
    image: str | None = None  # in a container: the image's name, id and digests
    timings: dict[str, float] = field(default_factory=dict)
    client_saturated: bool = False
    workload_metrics: dict[str, dict] = field(default_factory=dict)
    screened_out: bool = False
    telemetry: dict[str, dict] = field(default_factory=dict)
    load_curve: list[dict] = field(default_factory=list)
    quality: dict | None = None          # the quality record (schema.QUALITY)
    quality_answers: list[dict] = field(default_factory=list)  # the probe's answers, per prompt
    quality_path: Path | None = None
    # GPU memory before the launch and once the teardown's processes are gone (NVML, MiB per GPU
    # index; telemetry.gpu_memory_released): an engine that left memory held would make every
    # later trial fail out of memory.
    gpu_memory_after: dict | None = None
    # Where the launch's time went, from the engine's log (launch_phases.breakdown): seconds per
    # phase the engine timed, whether the compile cache hit, and the rest of the launch (other_s).
    launch_phases: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failure is None


def bench_config(space: Space, workload: Workload, plan: LaunchPlan, base_url: str) -> BenchConfig:
    spec = load_engine(plan.engine)
    return BenchConfig.from_settings(
        workload.model_copy(update={"dataset_path": workload.dataset_path and expand(workload.dataset_path)}),
        base_url=base_url,
        model=plan.model_path if spec.request.model_name == "path" else plan.served_name,
        tokenizer=space.model.resolved_tokenizer(),
        endpoint=workload.endpoint or spec.request.endpoint,
        omit_fields=frozenset(spec.request.omit_fields),
        max_duration_s=workload.max_duration_s,
        api_key=_flag_value(plan.argv, "--api-key"),
    )


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def run_trial(
    space: Space,
    engine: str,
    knobs: dict[str, Scalar],
    trial_dir: Path,
    *,
    omit: frozenset[str] = frozenset(),
    on_phase: Phase = lambda _: None,
    on_started: Callable[[Server], None] | None = None,
    port: int | None = None,
    workloads: list[Workload] | None = None,
    gate: Callable[[dict], bool] | None = None,
    quality: ProbeTask | None = None,
    marker_value: str | None = None,
) -> TrialOutcome:
    """Launch, benchmark each workload in turn on the same server (the space's by default), run
    the quality probe (``quality``: the role the driver gave this trial), stop.

    ``outcome.metrics`` holds the first workload's metrics; all of them are in
    ``outcome.workload_metrics`` by workload name. ``gate`` sees the first workload's metrics and
    may stop the trial there (multi-fidelity screening): ``outcome.screened_out`` is then set.
    ``marker_value`` goes into the engine's environment (the driver stores it on the trial, so
    that a resume finds the engine's processes even when this worker dies).
    """
    spec = load_engine(engine)
    choice = space.engines[engine]
    trial_dir.mkdir(parents=True, exist_ok=True)
    config_path = None
    if spec.config_file is not None:
        config_path = str(trial_dir / f"{engine}-config.{spec.config_file.format}")
    plan = build_plan(spec, choice, space.model, knobs, port=port or free_port(), omit=omit,
                      config_path=config_path,
                      container_name=unique_name(space.name, trial_dir.name),
                      cidfile=str(trial_dir / "container.id"),
                      cache_reset=space.objective.max_load is not None)
    if plan.config_file is not None:
        Path(config_path).write_text(plan.config_file)
    log_path = trial_dir / "server.log"
    outcome = TrialOutcome(plan=plan, log_path=log_path)
    gpu_before = gpu_memory_in_use()
    t0 = time.monotonic()
    on_phase("launching")
    try:
        server = start(plan, spec, log_path,
                       marker_value or marker.new(space.name, trial_dir.name))
    except EngineStartFailed as exc:
        raise HarnessError(f"port {plan.port} was taken before launch") from exc
    try:
        if on_started:  # inside the try: if recording the launch fails, the engine still stops
            on_started(server)
        on_phase("waiting for ready")
        timeout = choice.startup_timeout_s or spec.readiness.startup_timeout_s
        try:
            outcome.timings["ready_s"] = wait_ready(server, timeout)
        except EngineStartFailed as exc:
            f = exc.failure
            if f.failure_class in NOT_THE_CONFIG:
                # Another process took the port between our check and the bind, or the container
                # runtime refused: not the config's fault, so the trial is failed and retried
                # instead of teaching the sampler.
                why = (f"port {plan.port} was taken" if f.failure_class == "port-in-use"
                       else f"{f.failure_class}: {f.reason}")
                raise HarnessError(f"{why}: {f.evidence}") from exc
            outcome.failure = f
            # What the refused launch spent before it died (no launch time: it never got ready).
            outcome.launch_phases = breakdown(spec.launch_phases, server.log_text(), None)
            return outcome
        log_text = server.log_text()
        outcome.launch_phases = breakdown(spec.launch_phases, log_text, outcome.timings["ready_s"])
        # From the log where the engine prints it (vLLM), else from an installed folder's record
        # (SGLang logs none).
        outcome.engine_version = (engine_version(spec.version_pattern, log_text)
                                  or (read_record(Path(expand(choice.install))).version
                                      if choice.install else None))
        outcome.image = server.image.describe() if server.image else None
        t_bench = time.monotonic()
        primary_errors: list[str] = []
        if space.objective.max_load is not None:
            on_phase("searching the max load under the SLOs")
            _search_max_load(space, plan, server, trial_dir, outcome)
            workloads = []
        for i, workload in enumerate(workloads if workloads is not None else [space.workload]):
            on_phase("benchmarking" + (f" {workload.name}" if workloads and len(workloads) > 1 else ""))
            metrics_url = server.base_url + spec.metrics_path if spec.metrics_path else None
            with TelemetrySampler(server.engine_pgid, metrics_url) as sampler:
                result = run_benchmark(bench_config(space, workload, plan, server.base_url))
            telemetry = sampler.result()
            path = trial_dir / (f"bench-{workload.name}.json" if workloads else "bench-result.json")
            _write_json(path, {**result.to_json(), "telemetry": telemetry})
            outcome.telemetry[workload.name] = telemetry
            # Energy per token, peak memory and tokens per GPU-hour are metrics too: usable as
            # objectives and SLOs.
            metrics = {**result.metrics, **{k: v for k, v in derived(
                telemetry, result.metrics.get("total_output_tokens") or 0).items() if v is not None},
                **per_gpu(result.metrics, spec.gpus(knobs, omit))}
            outcome.workload_metrics[workload.name] = metrics
            outcome.client_saturated |= result.client_saturated
            if i == 0:
                outcome.metrics, outcome.result_path = dict(metrics), path
                primary_errors = result.errors
            if not server.alive():
                break
            if i == 0 and gate is not None and not gate(metrics):
                outcome.screened_out = True
                break
        outcome.timings["bench_s"] = time.monotonic() - t_bench
        if (quality is not None and server.alive() and not outcome.screened_out
                and outcome.metrics.get("completed")):
            on_phase("quality probe")
            t_probe = time.monotonic()
            _quality(space, plan, server, quality, trial_dir, outcome)
            outcome.timings["quality_s"] = time.monotonic() - t_probe
        if not server.alive():
            failure = classify_exit(server.spec, server.log_text(), server.proc.returncode)
            outcome.failure = Failure(failure.failure_class,
                                      "server died during the benchmark or the quality probe: "
                                      + failure.reason, failure.evidence, failure.generalises_on)
        elif not outcome.metrics.get("completed"):
            first = primary_errors[0] if primary_errors else "no request completed"
            outcome.failure = Failure("requests-failed", "every benchmark request failed", first)
        return outcome
    finally:
        on_phase("tearing down")
        t_down = time.monotonic()
        server.stop()
        outcome.timings["teardown_s"] = time.monotonic() - t_down
        outcome.gpu_memory_after = gpu_memory_released(gpu_before)
        outcome.timings["total_s"] = time.monotonic() - t0


def _quality(space: Space, plan: LaunchPlan, server: Server, task: ProbeTask, trial_dir: Path,
             outcome: TrialOutcome) -> None:
    """The probe's record and answers, and lm-eval's scores, on this server (docs/search.md)."""
    if task.role == SAME_PRECISION:
        outcome.quality = {"role": task.role, "skipped": task.why}
        return
    spec = load_engine(plan.engine)
    model = plan.model_path if spec.request.model_name == "path" else plan.served_name
    api_key = _flag_value(plan.argv, "--api-key")
    record, answers = probe(space, spec, model, server.base_url, task, api_key=api_key)
    cfg = space.quality.lm_eval
    if cfg is not None:
        add_lm_eval(record, lm_eval.run(cfg, base_url=server.base_url, model=model,
                                        out_dir=trial_dir / "lm-eval", api_key=api_key), task)
    outcome.quality, outcome.quality_answers = record, answers
    outcome.quality_path = trial_dir / "quality-probe.json"
    _write_json(outcome.quality_path, {"quality": record, "answers": answers})


def _search_max_load(space: Space, plan: LaunchPlan, server: Server, trial_dir: Path,
                     outcome: TrialOutcome) -> None:
    """Search, on this server, the highest load at which every workload, each at its share
    (``load_scale``), meets the SLOs (``load_search`` says how). The ``max_load`` metric is that
    load, in the first workload's units, next to the metrics of the workload that caps it,
    measured there; each workload's metrics are those of its run at that load."""
    ml = space.objective.max_load
    integer = ml.knob == "max_concurrency"
    workloads = {w.name: w for w in space.all_workloads()}
    runs = 0

    def run_name(workload: str, load: float) -> str:
        return f"{workload}-{ml.knob}-{load:g}"

    def measure(workload: Workload, load: float) -> dict:
        nonlocal runs
        if runs:  # every run from the same, empty prefix cache, as the first one
            reset_prefix_cache(server)
        runs += 1
        w = workload.model_copy(update={ml.knob: int(load) if integer else load,
                                        "name": run_name(workload.name, load),
                                        "num_prompts": probe_prompts(workload, load, ml)})
        result = run_benchmark(bench_config(space, w, plan, server.base_url))
        _write_json(trial_dir / f"bench-{w.name}.json", result.to_json())
        outcome.client_saturated |= result.client_saturated
        return dict(result.metrics)

    every = EveryWorkload({name: partial(measure, w) for name, w in workloads.items()},
                          {name: w.load_scale for name, w in workloads.items()},
                          space.objective.slos, integer=integer)
    best, _ = find_max_load(every, low=ml.low, high=ml.high, probes=ml.probes,
                            slos=space.objective.slos, integer=integer, keep_going=server.alive)
    # Each workload's run at the best load, else its last run.
    at_best = {**{name: p for name, p in every.runs},
               **{name: p for name, p in every.runs if p.met and p.load == every.share(name, best)}}
    for name, p in at_best.items():
        outcome.workload_metrics[name] = {**p.metrics,
                                          "max_load": every.share(name, best) if best else 0.0}
    outcome.load_curve = [{"workload": name, **describe([p], space.objective.slos)[0]}
                          for name, p in every.runs]
    limiting = every.limiting(best)
    outcome.result_path = trial_dir / f"bench-{run_name(limiting, at_best[limiting].load)}.json"
    outcome.metrics = {**outcome.workload_metrics[limiting], "max_load": best}


def probe_prompts(workload: Workload, load: float, ml: MaxLoad) -> int:
    """How many requests a max-load probe sends: enough to offer ``load`` for ``duration_s``
    seconds (``MaxLoad`` says why), never fewer than the workload's own ``num_prompts``."""
    if ml.duration_s is None:
        return workload.num_prompts
    return max(workload.num_prompts, math.ceil(load * ml.duration_s))


def reset_prefix_cache(server: Server) -> None:
    """Empty the server's prefix cache through the endpoint its engine spec names (none: nothing
    to do). A reset that fails would leave later runs on a warmer cache than the first: the
    measurement would not be what it says, so the trial stops."""
    reset = server.spec.prefix_cache_reset
    if reset is None:
        return
    try:
        response = httpx.request(reset.method, server.base_url + reset.path, timeout=60)
    except httpx.HTTPError as exc:
        raise HarnessError(f"prefix cache reset {reset.method} {reset.path} failed: {exc}") from exc
    if response.status_code >= 300:
        raise HarnessError(f"prefix cache reset {reset.method} {reset.path} answered "
                           f"{response.status_code}: {response.text[:200]}")


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str))
