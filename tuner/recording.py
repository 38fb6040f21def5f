"""Turn a trial's outcome into what Optuna stores: value, constraint, user attrs, artifacts.

Secrets never reach the storage: argv, env, free text and the stored server log are redacted.
"""

from __future__ import annotations

import json
import platform

import optuna
import psutil
from optuna.artifacts import upload_artifact
from optuna.trial import TrialState

from .fingerprint import environment, model_revision
from .redact import redact_argv, redact_env, redact_text, secret_values
from .space import Space
from .storage import artifact_store
from .trial_runner import HarnessError, TrialOutcome

# Attributes kept flat on each trial so the dashboard shows them as (sortable) columns.
HEADLINE_METRICS = (
    "total_token_throughput", "output_throughput", "request_throughput", "mean_ttft_ms",
    "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "p99_itl_ms", "completed", "failed", "duration",
)


class TrialRecorder:
    def __init__(self, study: optuna.Study, space: Space, url: str):
        self.study = study
        self.space = space
        self.url = url
        self.env = environment()
        self.model_rev = model_revision(space.model.resolved_path())

    def claim(self, trial: optuna.Trial, engine: str) -> None:
        """Stamp the trial with the process that runs it, so a later resume can tell a live
        worker's trial from one whose worker died."""
        me = psutil.Process()
        trial.set_user_attr("worker_host", platform.node())
        trial.set_user_attr("worker_pid", me.pid)
        trial.set_user_attr("worker_started", me.create_time())
        trial.set_user_attr("engine", engine)
        trial.set_user_attr("arm", trial.user_attrs.get("arm", "search"))

    def engine_started(self, trial: optuna.Trial, server) -> None:
        trial.set_user_attr("engine_pgid", server.pgid)
        trial.set_user_attr("engine_url", server.base_url)

    def record(self, trial: optuna.Trial, outcome: TrialOutcome) -> float:
        plan = outcome.plan
        secrets = secret_values(plan.argv, plan.env)
        attrs = {
            "argv": redact_argv(plan.argv),
            "env_vars": redact_env(plan.env),
            "command": redact_text(plan.command_line(), secrets),
            "knobs": plan.knobs,
            "environment": {**self.env, "engine_version": outcome.engine_version,
                            "model_revision": self.model_rev},
            "engine_version": outcome.engine_version,
            "timings": {k: round(v, 2) for k, v in outcome.timings.items()},
            "feasible": outcome.ok,
            "client_saturated": outcome.client_saturated,
        }
        if outcome.metrics:
            attrs["metrics"] = outcome.metrics
            attrs.update({k: outcome.metrics[k] for k in HEADLINE_METRICS if k in outcome.metrics})
        if outcome.failure:
            f = outcome.failure
            attrs.update({"failure_class": f.failure_class,
                          "failure_reason": redact_text(f.reason, secrets),
                          "failure_evidence": redact_text(f.evidence, secrets)})
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        self._upload(trial, outcome, secrets)
        trial.set_constraint("engine_start", 0.0 if outcome.ok else 1.0)
        if outcome.ok:
            value = outcome.metrics.get(self.space.objective.metric)
            if value is None:
                raise HarnessError(f"benchmark result has no metric {self.space.objective.metric!r}")
            return float(value)
        return self.pessimistic_value()

    def pessimistic_value(self) -> float:
        """A plausible worst value: samplers that model the objective should not be skewed."""
        if self.space.objective.direction == "maximize":
            return 0.0
        values = [t.value for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                  if t.user_attrs.get("feasible")]
        return 2.0 * max(values) if values else 1e6

    def _upload(self, trial: optuna.Trial, outcome: TrialOutcome, secrets: list[str]) -> None:
        store = artifact_store(self.url, self.study.study_name)
        log = outcome.log_path
        if log.exists():
            if secrets:  # the stored copy never holds a credential
                log.write_text(redact_text(log.read_text(errors="replace"), secrets))
            upload_artifact(artifact_store=store, file_path=str(log), study_or_trial=trial,
                            mimetype="text/plain", encoding="utf-8")
        if outcome.result_path and outcome.result_path.exists():
            upload_artifact(artifact_store=store, file_path=str(outcome.result_path),
                            study_or_trial=trial, mimetype="application/json")
        launch = log.parent / "launch.json"
        launch.write_text(json.dumps({"argv": redact_argv(outcome.plan.argv),
                                      "env": redact_env(outcome.plan.env),
                                      "config_file": outcome.plan.config_file}, indent=2))
        upload_artifact(artifact_store=store, file_path=str(launch), study_or_trial=trial,
                        mimetype="application/json")
