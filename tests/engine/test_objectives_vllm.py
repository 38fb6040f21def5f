"""Constrained, screened and multi-objective studies on the real vLLM CPU engine; what happened to
each trial is visible in `tune status`."""

from __future__ import annotations

import optuna
import pytest

from tests.helpers import load, run_tune, small_space

pytestmark = pytest.mark.engine


def _edit(path, **updates):
    import yaml
    data = yaml.safe_load(path.read_text())
    for key, value in updates.items():
        data[key] = value
    path.write_text(yaml.safe_dump(data))


def test_slo_constrained_study_with_screening(tmp_path, studies, vllm_bin, tiny_model_path):
    # Three trials: the defaults (the first screen: it runs in full), the refused probe, and one
    # search trial screened against the defaults.
    space = small_space(tmp_path, num_prompts=24, n_trials=3, name="slo")
    # An SLO nothing can meet on 2 cores marks served trials infeasible ("slo-violated"), and
    # screening with margin 0 stops every later trial whose screen is not the best so far.
    _edit(space, objective={"metric": "total_token_throughput", "slos": {"p99_ttft_ms": 1.0}},
          fidelity={"screen_prompts": 8, "margin": 0.0, "n_startup": 1})
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study = load(studies, "slo")
    served = [t for t in study.trials if t.user_attrs.get("feasible")]
    assert served
    for t in served:
        assert "screen_metrics" in t.user_attrs and 0 in t.intermediate_values
        if t.state == optuna.trial.TrialState.COMPLETE:  # screened-out trials stop before SLOs
            assert t.constraints["slo:p99_ttft_ms"] > 0 and t.user_attrs["slo_ok"] is False
    refused = next(t for t in study.trials if t.user_attrs.get("arm") == "probe-invalid")
    assert refused.constraints["slo:p99_ttft_ms"] == 1.0  # unknown counts as violated
    status = run_tune("status", "slo")
    assert "slo-violated" in status.stdout and "infeasible" in status.stdout
    screened = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    for t in screened:
        assert t.user_attrs["fidelity"] == "screen"
    if screened:
        assert "screened-out" in status.stdout
    assert "no feasible trial yet" in run_tune("best", "slo").stdout


def test_multi_objective_study_lists_a_pareto_front(tmp_path, studies, vllm_bin, tiny_model_path):
    space = small_space(tmp_path, num_prompts=16, n_trials=2, name="pareto",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    _edit(space, objective={"metrics": [
        {"metric": "total_token_throughput", "direction": "maximize"},
        {"metric": "p99_ttft_ms", "direction": "minimize"}]})
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study = load(studies, "pareto")
    assert len(study.directions) == 2
    assert study.metric_names == ["total_token_throughput", "p99_ttft_ms"]
    assert "Pareto front (feasible trials)" in proc.stdout
    front = study.best_trials
    assert front and all(t.user_attrs["feasible"] for t in front)
    best = run_tune("best", "pareto")
    assert best.returncode == 0 and "p99_ttft_ms (min)" in best.stdout


def test_max_load_under_slo_on_one_launched_server(tmp_path, studies, vllm_bin, tiny_model_path):
    """Two workloads on one launch, the second at twice the first's load (``load_scale``): one
    search over the load, each probe running both at their shares; the trial's value is the
    highest load both meet, in the first one's units."""
    space = small_space(tmp_path, num_prompts=16, n_trials=1, name="maxload",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    import yaml
    workload = yaml.safe_load(space.read_text())["workload"]
    _edit(space, workloads=[{**workload, "name": "chat"},
                            {**workload, "name": "twice", "load_scale": 2}],
          objective={"slos": {"p99_ttft_ms": 120000, "failed_pct": 0}, "aggregate": "worst",
                     "max_load": {"knob": "max_concurrency", "low": 1, "high": 8, "probes": 3}})
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (t,) = load(studies, "maxload").trials
    curve = t.user_attrs["load_curve"]
    # the workload nearer its bounds runs first at each load: the order within a load is measured
    assert sorted((p["load"], p["workload"]) for p in curve) == [
        (1, "chat"), (2, "chat"), (2, "twice"), (4, "chat"), (4, "twice"), (8, "twice")]
    assert all(p["met"] for p in curve)  # a generous SLO: the largest probed load wins
    assert t.value == 4 and t.user_attrs["max_load"] == 4
    trial_dir = studies / "maxload-files" / "trials" / "trial-0000"
    assert len(list(trial_dir.glob("bench-*.json"))) == 6
    # every run but the first starts from an emptied prefix cache (the endpoint vLLM opens with
    # VLLM_SERVER_DEV_MODE=1, which only such a launch gets)
    assert (trial_dir / "server.log").read_text().count("Resetting prefix cache") == 5
