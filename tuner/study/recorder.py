"""Turn a trial's outcome into what Optuna stores: value, constraint, user attrs, artifacts.

Secrets never reach the storage: argv, env, free text and the stored server log are redacted.
"""

from __future__ import annotations

import json
import math
import platform

import optuna
import psutil
from optuna.artifacts import upload_artifact
from optuna.trial import TrialState

from tuner.bench import load_tokenizer
from tuner.configs import rules
from tuner.engines.hardware import Hardware, detect
from tuner.errors import HarnessError
from tuner.fingerprint import environment, model_revision
from tuner.record import schema
from tuner.record.per_gpu import GPUS, TOKENS_PER_GPU_HOUR
from tuner.record.slo import metric_value, worst_slack
from tuner.record.storage import artifact_store
from tuner.redact import redact_argv, redact_env, redact_text, secret_values
from tuner.space import QUALITY_METRICS, Space
from tuner.trial.quality import CANDIDATE, REFERENCE, compare_late
from tuner.trial.runner import TrialOutcome

SCREEN = "screen"


# Attributes kept flat on each trial so the dashboard shows them as (sortable) columns.
HEADLINE_METRICS = (
    "total_token_throughput", "output_throughput", "request_throughput", "mean_ttft_ms",
    "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "p99_itl_ms", "completed", "failed", "duration",
    "joules_per_output_token", "gpu_memory_peak_mib", "gpu_utilization_mean_pct",
    "gpu_power_mean_w", "engine_rss_peak_mib", "engine_cpu_mean_pct", "prefix_cache_hit_rate",
    GPUS, TOKENS_PER_GPU_HOUR,
)


def _lm_eval_slack(record: dict, max_drop: float) -> float:
    """The worst task's drop minus ``max_drop``; scores that could not be compared: 1.0."""
    scores = record.get("lm_eval")
    if not scores or "drop" not in scores or "error" in scores:
        if scores is not None:
            scores.setdefault("error", "not measured")
        else:
            record["lm_eval"] = {"error": "not measured"}
        return 1.0
    return max(scores["drop"].values()) - max_drop


def _telemetry_summary(t: dict) -> dict:
    """What the report and dashboard need; the full series stay in the bench-result artifact."""
    keep = ("gpu", "duration_s", "samples", "gpu_selection", "energy_j", "note", "cpu", "errors")
    summary = {k: t[k] for k in keep if k in t}
    summary["gpus"] = [{k: g[k] for k in g if k in ("index", "name", "energy_j", "memory_used_mib",
                                                        "utilization_pct", "power_w")}
                       for g in t.get("gpus", [])]
    if "engine_metrics" in t:
        summary["engine_metrics"] = t["engine_metrics"].get("summary")
    return summary


class TrialRecorder:
    def __init__(self, study: optuna.Study, space: Space, url: str, *, artifacts: bool = True,
                 hardware: Hardware | None = None):
        """``artifacts``: upload each trial's log and result files (off for replayed trials);
        ``hardware``: what the rules judge configs for (default: this machine; a replay of another
        GPU passes its profile)."""
        self.artifacts = artifacts
        self.study = study
        self.space = space
        self.url = url
        self.env = environment()
        self.hardware = hardware or detect()
        self.model_rev = model_revision(space.model.resolved_path())

    def claim(self, trial: optuna.Trial, engine: str) -> None:
        """Stamp the trial with the process that runs it, so a later resume can tell a live
        worker's trial from one whose worker died."""
        me = psutil.Process()
        trial.set_user_attr(schema.WORKER_HOST, platform.node())
        trial.set_user_attr(schema.WORKER_PID, me.pid)
        trial.set_user_attr(schema.WORKER_STARTED, me.create_time())
        trial.set_user_attr(schema.ENGINE, engine)
        trial.set_user_attr(schema.ARM, trial.user_attrs.get(schema.ARM, "search"))

    def engine_started(self, trial: optuna.Trial, server) -> None:
        trial.set_user_attr(schema.ENGINE_PGID, server.pgid)
        trial.set_user_attr(schema.ENGINE_URL, server.base_url)

    def record(self, trial: optuna.Trial, outcome: TrialOutcome) -> float | list[float] | None:
        """Store everything and return the objective value(s); None when screening stopped the
        trial (the caller records it PRUNED)."""
        plan = outcome.plan
        secrets = secret_values(plan.argv, plan.env)
        attrs = {
            schema.ARGV: redact_argv(plan.argv),
            schema.ENV_VARS: redact_env(plan.env),
            schema.COMMAND: redact_text(plan.command_line(), secrets),
            schema.KNOBS: plan.knobs,
            schema.ENVIRONMENT: {**self.env, "engine_version": outcome.engine_version,
                            "engine_image": outcome.image, "model_revision": self.model_rev},
            schema.ENGINE_VERSION: outcome.engine_version,
            schema.TIMINGS: {k: round(v, 2) for k, v in outcome.timings.items()},
            schema.GPU_MEMORY_AFTER: outcome.gpu_memory_after,
            schema.FEASIBLE: outcome.ok,
            schema.CLIENT_SATURATED: outcome.client_saturated,
        }
        if "ready_s" in outcome.timings:
            attrs[schema.LAUNCH_S] = round(outcome.timings["ready_s"], 2)
        if outcome.launch_phases:
            attrs[schema.LAUNCH_PHASES] = outcome.launch_phases
        if outcome.metrics:
            attrs[schema.METRICS] = outcome.metrics
            attrs.update({k: outcome.metrics[k] for k in HEADLINE_METRICS if k in outcome.metrics})
        if outcome.failure:
            f = outcome.failure
            attrs.update({schema.FAILURE_CLASS: f.failure_class,
                          schema.FAILURE_REASON: redact_text(f.reason, secrets),
                          schema.FAILURE_EVIDENCE: redact_text(f.evidence, secrets)})
            key = rules.learned_key(list(f.generalises_on), plan.engine, plan.knobs,
                                    self.hardware.device_key)
            if key:  # later configs with the same key are pruned without a launch
                attrs[schema.LEARNED_KEY] = key
        if outcome.telemetry:
            attrs[schema.TELEMETRY] = {name: _telemetry_summary(t) for name, t in outcome.telemetry.items()}
        workloads = {k: v for k, v in outcome.workload_metrics.items() if k != SCREEN}
        if len(workloads) > 1:
            attrs[schema.WORKLOAD_METRICS] = workloads
        screen = outcome.workload_metrics.get(SCREEN)
        if screen is not None:
            attrs[schema.SCREEN_METRICS] = screen
            attrs[schema.FIDELITY] = "screen" if outcome.screened_out else "full"
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if self.artifacts:
            self._upload(trial, outcome, secrets)
        if outcome.ok:  # a refused config gets all its constraints from refused_values
            trial.set_constraint("engine_start", 0.0)
            if self.space.quality is not None and not outcome.screened_out:
                self._record_quality(trial, outcome)
        objective = self.space.objective
        if screen is not None and not objective.multi:
            trial.report(float(screen.get(objective.metric, math.nan)), step=0)
        if outcome.ok and outcome.screened_out:
            return None
        if objective.max_load is not None:
            return self._record_max_load(trial, outcome)
        slack = worst_slack(list(workloads.values()), objective.slos) if outcome.ok else None
        if outcome.ok:
            for metric in objective.slos:
                trial.set_constraint(f"slo:{metric}", slack[metric] if slack else 1.0)
        slo_ok = not slack or all(v <= 0 for v in slack.values())
        if objective.slos:
            trial.set_user_attr(schema.SLO_OK, bool(slack) and slo_ok)
            if slack:
                trial.set_user_attr(schema.SLO_SLACK, slack)
        if not outcome.ok:
            return self.refused_values(trial)
        values = [self._aggregate(workloads, t.metric, t.direction) for t in objective.targets()]
        return values if objective.multi else values[0]

    def refused_values(self, trial: optuna.Trial) -> float | list[float]:
        """Constraints and value(s) of a config that does not serve (the engine refused it, or a
        rule says it would): every constraint violated, under the same keys as a served trial,
        and a pessimistic value, so every sampler learns from it like from any measurement."""
        objective = self.space.objective
        trial.set_constraint("engine_start", 1.0)
        slos = ["max_load"] if objective.max_load is not None else list(objective.slos)
        for metric in slos:
            trial.set_constraint(f"slo:{metric}", 1.0)
        for name in self.space.quality.constraint_names() if self.space.quality else []:
            trial.set_constraint(schema.QUALITY_CONSTRAINT + name, 1.0)
        values = [self.pessimistic_value(i) for i in range(len(objective.targets()))]
        return values if objective.multi else values[0]

    def _record_quality(self, trial: optuna.Trial, outcome: TrialOutcome) -> None:
        """The probe's record and one constraint per bound: measured minus bound (``max_``) or
        bound minus measured (``min_``); a bound the probe could not measure is violated (1.0).
        The reference itself, and a config with its precision that was not probed, meet every
        bound: they compute like the reference. The first reference's answers become the study's;
        a reference arm whose probe failed leaves none and fails its bounds."""
        quality = self.space.quality
        record = dict(outcome.quality or {"role": "none",
                                          "not_measured": {m: "the probe did not run"
                                                           for m in QUALITY_METRICS}})
        stored = self.study.user_attrs.get(schema.QUALITY_REFERENCE)
        if record["role"] == REFERENCE and not stored and outcome.quality_answers:
            self._store_reference(trial, outcome, record)
        elif (stored and outcome.quality_answers and record["role"] in (REFERENCE, CANDIDATE)
              and record.get("reference_trial") != stored["trial"]):
            record = compare_late(record, outcome.quality_answers, stored,
                                  load_tokenizer(self.space.model.resolved_tokenizer()))
        anchor = "skipped" in record or record.get("reference_trial") == trial.number
        measured, missing = record.get("metrics", {}), dict(record.get("not_measured", {}))
        slack: dict[str, float] = {}
        for metric, bound in quality.bounds().items():
            kind = QUALITY_METRICS[metric][0]
            if anchor:
                slack[metric] = 0.0
            elif metric in measured:
                value = measured[metric]
                slack[metric] = value - bound if kind == "max" else bound - value
            else:
                slack[metric] = 1.0
                missing.setdefault(metric, "not measured")
        if quality.lm_eval is not None:
            slack["lm_eval"] = 0.0 if anchor else _lm_eval_slack(record, quality.lm_eval.max_drop)
        if missing:
            record["not_measured"] = missing
        record["slack"] = slack
        record["ok"] = all(v <= 0 for v in slack.values())
        trial.set_user_attr(schema.QUALITY, record)
        for name, value in slack.items():
            trial.set_constraint(schema.QUALITY_CONSTRAINT + name, value)

    def _store_reference(self, trial: optuna.Trial, outcome: TrialOutcome, record: dict) -> None:
        """The study's reference, kept once (the first reference arm that answered every prompt);
        also an artifact of the study, so an export carries it."""
        reference = {"trial": trial.number, "engine": outcome.plan.engine,
                     "knobs": outcome.plan.knobs, "answers": outcome.quality_answers,
                     "lm_eval": record.get("lm_eval")}
        self.study.set_user_attr(schema.QUALITY_REFERENCE, reference)
        record["reference_trial"] = trial.number
        if self.artifacts:
            path = outcome.log_path.parent / "quality-reference.json"
            path.write_text(json.dumps(reference))
            upload_artifact(artifact_store=artifact_store(self.url, self.study.study_name),
                            file_path=str(path), study_or_trial=self.study,
                            mimetype="application/json")

    def _record_max_load(self, trial: optuna.Trial, outcome: TrialOutcome) -> float:
        """The value is the load; a config that meets the SLOs at no load is infeasible."""
        trial.set_user_attr(schema.LOAD_CURVE, outcome.load_curve)
        value = outcome.metrics.get("max_load", 0.0) if outcome.ok else 0.0
        trial.set_user_attr(schema.MAX_LOAD, value)
        if not outcome.ok:
            return self.refused_values(trial)
        trial.set_constraint("slo:max_load", 0.0 if value > 0 else 1.0)
        return float(value)

    def _aggregate(self, workloads: dict[str, dict], metric: str, direction: str) -> float:
        """One number over the workloads: their weighted mean, or the worst case."""
        weights = {w.name: w.weight for w in self.space.all_workloads()}
        values = {}
        for name, metrics in workloads.items():
            value = metric_value(metrics, metric)
            if value is None:
                raise HarnessError(f"benchmark result has no metric {metric!r}")
            values[name] = value
        if self.space.objective.aggregate == "worst":
            return min(values.values()) if direction == "maximize" else max(values.values())
        total = sum(weights.get(n, 1.0) for n in values)
        return sum(v * weights.get(n, 1.0) for n, v in values.items()) / total

    def pessimistic_value(self, index: int = 0) -> float:
        """A plausible worst value: samplers that model the objective should not be skewed."""
        target = self.space.objective.targets()[index]
        if target.direction == "maximize":
            return 0.0
        values = [t.values[index] for t in self.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE,)) if t.user_attrs.get(schema.FEASIBLE) and t.values]
        return 2.0 * max(values) if values else 1e6

    def _upload(self, trial: optuna.Trial, outcome: TrialOutcome, secrets: list[str]) -> None:
        store = artifact_store(self.url, self.study.study_name)
        log = outcome.log_path
        if log.exists():
            if secrets:  # the stored copy never holds a credential
                log.write_text(redact_text(log.read_text(errors="replace"), secrets))
            upload_artifact(artifact_store=store, file_path=str(log), study_or_trial=trial,
                            mimetype="text/plain", encoding="utf-8")
        for path in (outcome.result_path, outcome.quality_path):
            if path and path.exists():
                upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial,
                                mimetype="application/json")
        launch = log.parent / "launch.json"
        launch.write_text(json.dumps({schema.ARGV: redact_argv(outcome.plan.argv),
                                      "env": redact_env(outcome.plan.env),
                                      "config_file": outcome.plan.config_file}, indent=2))
        upload_artifact(artifact_store=store, file_path=str(launch), study_or_trial=trial,
                        mimetype="application/json")
