"""The trial record: every user-attr key a study stores, named once, and the one ``status`` of a trial.

The CLI, the dashboard notes, the reports, the progress line and the replay all read trials through
these names, so a key is renamed in one place and a trial's status is derived one way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

# ---- study attrs ---------------------------------------------------------------------------------
SPACE = "space"                    # the space, secrets masked
N_TRIALS = "n_trials"              # the budget (grows with `tune confirm`)
FINGERPRINT = "fingerprint"        # the hardware the study measured on
READY = "ready"                    # set last by the creator: joiners wait for it
LINKED_FROM = "linked_from"        # a study for new hardware, warm-started from this one
PRIOR = "prior"                    # where the search's prior knowledge came from
WARM_START = "warm_start"          # studies whose best configs were queued first
QUALITY_REFERENCE = "quality_reference"  # the reference arm's probe answers, compared against

# ---- trial attrs: what ran ---------------------------------------------------------------------
ARM = "arm"                        # "search", or a baseline's name
SEARCH = "search"
QUALITY_REFERENCE_ARM = "quality-reference"  # the arm whose answers the quality probe compares with
MODEL_PICK_ARM = "model-pick"      # the performance model's own top config, launched as a control
ENGINE = "engine"
OMIT = "omit"                      # knobs left to the engine's defaults
KNOBS = "knobs"
ARGV = "argv"
ENV_VARS = "env_vars"
COMMAND = "command"
ENVIRONMENT = "environment"
ENGINE_VERSION = "engine_version"
TIMINGS = "timings"
LAUNCH_S = "launch_s"              # seconds from starting the engine to its first ready answer
LAUNCH_PHASES = "launch_phases"    # where they went, from the engine's log (trial/launch_phases.py)
GPU_MEMORY_AFTER = "gpu_memory_after_teardown"
PLACEMENT = "placement"            # node and GPUs of a trial that ran on a Ray worker
ENGINE_PGID = "engine_pgid"
ENGINE_URL = "engine_url"
ENGINE_MARKER = "engine_marker"    # TUNER_TRIAL_MARKER of its launch: how a resume finds its processes
WORKER_HOST = "worker_host"
WORKER_PID = "worker_pid"
WORKER_STARTED = "worker_started"
# ---- trial attrs: why it ran ---------------------------------------------------------------------
REPEAT_OF = "repeat_of"            # a `tune confirm` repeat
JUDGED = "judged"                  # "<study>#<trial>" (several joined by ", " when searches picked the same config, or "<engine> defaults") a `tune judge` launch measures
RETRY_OF = "retry_of"              # re-queued after an interruption or a harness error
WARM_START_OF = "warm_start_of"    # "<study>#<trial>" a warm start copied
PREDICTED_BY = "predicted_by"      # the estimator's pick (arm "model-pick") or a prior's seed
PREDICTION = "prediction"          # the estimator's numbers for this config
# ---- trial attrs: what came out ------------------------------------------------------------------
FEASIBLE = "feasible"
STATUS = "status"                  # status() stored, for the dashboard (it cannot show constraints)
METRICS = "metrics"
WORKLOAD_METRICS = "workload_metrics"
SCREEN_METRICS = "screen_metrics"
FIDELITY = "fidelity"              # "screen" (stopped after the screen) or "full"
SCREEN = "screen"
TELEMETRY = "telemetry"
CLIENT_SATURATED = "client_saturated"
SLO_OK = "slo_ok"
SLO_SLACK = "slo_slack"
QUALITY = "quality"                # the quality probe's metrics against the reference
MAX_LOAD = "max_load"
LOAD_CURVE = "load_curve"
EVALUATION = "evaluation"
FAILURE_CLASS = "failure_class"
FAILURE_REASON = "failure_reason"
FAILURE_EVIDENCE = "failure_evidence"
LEARNED_KEY = "learned_key"        # what an engine failure generalises over
HARNESS_ERROR = "harness_error"
INTERRUPTED = "interrupted"
# ---- trial attrs: decided without a launch --------------------------------------------------------
PRUNED_RULE = "pruned_rule"
PRUNED_REASON = "pruned_reason"
PRUNED_SOURCE = "pruned_source"
PREDICTED_BY_RULE = "predicted_by_rule"
RULE_NOTES = "rule_notes"
REUSED_FROM = "reused_from"

ENGINE_START = "engine_start"      # the constraint a refused launch violates
SLO_CONSTRAINT = "slo:"            # prefix of the SLO constraints
QUALITY_CONSTRAINT = "quality:"    # prefix of the quality constraints


def arm(t: FrozenTrial) -> str:
    return t.user_attrs.get(ARM, SEARCH)


def launched(t: FrozenTrial) -> bool:
    """Did this trial start an engine? Trials decided before a launch are told to Optuna like the
    measurement they stand for (so samplers learn from them), but they measured nothing: a config
    ruled out (``pruned_rule``), or one proposed again after it was measured (``reused_from``)."""
    return PRUNED_RULE not in t.user_attrs and REUSED_FROM not in t.user_attrs


def is_feasible(t: FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())


def awaiting_retry(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The FAIL trials that `tune resume` re-queues: each interrupted or broken trial once, a retry
    never (a retry that fails too is given up)."""
    retried = {t.user_attrs.get(RETRY_OF) for t in trials}
    return [t for t in trials if t.state == TrialState.FAIL and t.number not in retried
            and RETRY_OF not in t.user_attrs]


def status_of(state: TrialState, user_attrs: Mapping[str, Any],
              constraints: Mapping[str, float]) -> str:
    """One word per trial that says what happened (the dashboard alone cannot show constraints)."""
    if PRUNED_RULE in user_attrs:
        return "pruned"
    if REUSED_FROM in user_attrs:
        return "reused"
    if state == TrialState.COMPLETE:
        if all(v <= 0 for v in constraints.values()):
            return "ok"
        if constraints.get(ENGINE_START, 0) > 0:
            return "infeasible"
        if any(k.startswith(QUALITY_CONSTRAINT) and v > 0 for k, v in constraints.items()):
            return "quality-failed"
        return "slo-violated"
    if state == TrialState.PRUNED:
        return "screened-out" if user_attrs.get(FIDELITY) == SCREEN else "pruned"
    if state == TrialState.FAIL:
        return "interrupted" if user_attrs.get(INTERRUPTED) else "error"
    return state.name.lower()


def status(t: FrozenTrial) -> str:
    return status_of(t.state, t.user_attrs, t.constraints)
