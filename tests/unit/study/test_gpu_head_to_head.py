"""benchmarks/gpu_head_to_head.py: the H200 head-to-head read back from the campaign's state. The
sweep's side is the real first stay (benchmarks/data/h200-campaign.tar.gz); tune's side is a real
study run on the vLLM CPU engine, placed in the campaign's step intervals; the judge's launches are
written here, so the ratios and the targets can be checked against numbers known in advance."""

from __future__ import annotations

import json
import statistics
import tarfile

import optuna
import pytest

from benchmarks import gpu_head_to_head as hh
from tests.helpers import REPO, run_tune
from tuner.record import schema

STATE = REPO / "benchmarks" / "data" / "h200-campaign.tar.gz"


@pytest.fixture()
def campaign(tmp_path):
    with tarfile.open(STATE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "campaign"


def test_the_sweeps_side_is_its_own_wall_clock_launches_and_pick(campaign):
    sweep = hh.sweep_side(campaign, hh.convert(campaign / "vllm-sweep"))
    grid = json.loads((REPO / "benchmarks" / "data" / "grid-vllm-h200.json").read_text())
    assert sweep["wall_s"] == grid["meta"]["peer_wall_s"]
    # Across stays: launches stopped before their first run, and each resumed sweep's start-up
    # before its first server (about 30 s: it imports vLLM) cost what one sweep would not have.
    aborted = sum(a["seconds"] for a in grid["meta"]["aborted_launches"])
    resumed = sum(1 for i in grid["meta"]["invocations"][:-1] if i["exit_code"] is None)
    assert aborted + 10 * resumed < sweep["stay_overhead_s"] < aborted + 60 * resumed
    assert sweep["wall_whole_s"] == pytest.approx(sweep["wall_s"] - sweep["stay_overhead_s"])
    assert sweep["configs_measured"] == len(grid["points"]) and sweep["configs_planned"] == 16
    best = max(sweep["results"], key=lambda r: r["mean"])
    assert sweep["pick"] == best["sweep"] and sweep["pick_value"] == best["mean"]
    times = [t for t, _ in sweep["timeline"]]
    values = [v for _, v in sweep["timeline"]]
    assert times == sorted(times) and values == sorted(values) and 0 < times[-1] <= sweep["wall_s"]
    assert sweep["timeline"][-1][1] == best["mean"]
    first = grid["points"][0]["launches"][0]
    row = sweep["results"][0]
    assert row["ready_s"] == [first["timings"]["ready_s"]] and row["launch_s"] == [first["timings"]["total_s"]]
    assert row["run_s"] > row["bench_s"] > 0          # a run in the sweep includes its client's start-up
    assert len(hh.sweep_table({"sweep": sweep}).splitlines()) == 2 + sweep["configs_measured"]
    assert hh.active([(0, 10), (20, 30)], 25) == 15 and hh.active([(0, 10)], -1) == 0


def test_tune_against_the_sweep_with_the_judges_intervals(campaign, real_study, tmp_path, monkeypatch):
    studies, name = real_study
    monkeypatch.setenv("TUNER_STUDIES_DIR", str(studies))
    archive = tmp_path / "h2h-prior.tar.gz"
    run_tune("export", name, str(archive))
    trials = optuna.load_study(study_name=name, storage=f"sqlite:///{studies / (name + '.db')}").trials
    first = min(t.datetime_start.timestamp() for t in trials)
    last = max(t.datetime_complete.timestamp() for t in trials)
    plan = json.loads((campaign / "vllm-sweep" / "plan.json").read_text())
    record = {step: entry for step, entry in json.loads((campaign / "steps.json").read_text()).items()
              if step in ("sweep", "fidelity")}          # tune's steps are this test's study
    record["prior-25"] = {"done": True, "runs": [{"start": first - 5, "end": last - 0.5, "exit_code": 0}]}
    record["prior-25-confirm"] = {"done": True, "runs": [{"start": last - 0.5, "end": last + 1, "exit_code": 0}]}
    (campaign / "steps.json").write_text(json.dumps(record))
    fp8 = plan["configs"][-1]                                     # the grid's last config
    (campaign / "picks" / "prior-25.json").write_text(json.dumps(
        {"arm": "model-pick", "params": fp8["knobs"], "median": 9000.0, "n": 2}))   # as on the H200
    sweep_pick = hh.sweep_side(campaign, hh.convert(campaign / "vllm-sweep"))["pick"]
    (campaign / "judge.json").write_text(json.dumps({
        "arms": {"sweep": sweep_pick, "defaults": None, "tune-prior-25": fp8["sweep"]},
        "launches": [{"round": 0, "arm": "sweep", "value": 5000.0, "machine": "a", "ended": 2.0}] + [
            {"round": r, "arm": a, "value": v, "machine": "b", "ended": 1.0, "mean_ttft_ms": 900.0 + r}
            for r in range(3) for a, v in
            (("sweep", 7600.0 + r), ("defaults", 7500.0 + r), ("tune-prior-25", 9800.0 + 10 * r))]}))
    for name in hh.gc.CLIENT_JUDGES:                       # the committed ones: written below
        (campaign / f"{name}.json").unlink(missing_ok=True)

    data = hh.report(campaign, {"prior": archive})
    (tune,) = data["tune"]
    assert tune["launches"] == sum(1 for t in trials if schema.launched(t)) == 3   # baseline, probe, search
    assert tune["refused_launched"] == 1                           # the study's probe
    assert tune["wall_s"] == pytest.approx(last + 6 - first, abs=0.1)
    whole_sweep = data["sweep"]["wall_s"] - data["sweep"]["stay_overhead_s"]
    assert tune["wall_share_of_sweep"] == pytest.approx(tune["wall_s"] / whole_sweep)
    assert tune["judge_arm"] == "tune-prior-25"
    assert tune["ratio_to_sweep"] == pytest.approx(9810 / 7601)
    low, high = tune["ratio_ci95"]
    assert 9800 / 7602 <= low <= high <= 9820 / 7600 and tune["meets_quality"]
    assert data["judge"]["defaults"]["ratio_to_sweep"] == pytest.approx(7501 / 7601)
    assert data["judge"]["sweep"]["other_machines"] == [5000.0]   # another stay's: not judged
    row = next(line for line in hh.table(data).splitlines() if "tune prior 25 %" in line)
    assert str(fp8["knobs"]) in row and "the defaults" not in row
    assert tune["client_judges"] == {} and hh.clients_table(data) == ""
    ties = {r["arm"]: r for r in data["near_ties"]}
    assert set(ties) == {"sweep", "tune-prior-25"}                # the defaults name no config
    assert ties["tune-prior-25"]["judge"] == {"values": [9800.0, 9810.0, 9820.0],
                                              "ttft_ms": {"median": 901.0, "min": 900.0, "max": 902.0, "n": 3}}
    assert ties["tune-prior-25"]["tune"]["values"] == []          # this CPU study never ran it

    # the later judges: both clients measured each launch; the sweep's client (as the first
    # judge) and tune's disagree on the order, each ratio its own; judge-warm reset the prefix
    # cache between a launch's runs (its launches say how often), judge-clients did not
    for name, resets, shift in (("judge-clients", {}, 0.0), ("judge-warm", {"cache_resets": 2}, -300.0)):
        (campaign / f"{name}.json").write_text(json.dumps({
            "arms": {"sweep": sweep_pick, "defaults": None, "tune-prior-25": fp8["sweep"]},
            "launches": [{"round": r, "arm": a, "machine": "c", "ended": 3.0, "value": v + shift, **resets,
                          "by_client": {"vllm": {"value": v + shift}, "tune": {"value": w + shift}}}
                         for r in range(2) for a, v, w in (("sweep", 7600.0 + r, 7700.0 + r),
                                                            ("defaults", 7500.0, 7500.0),
                                                            ("tune-prior-25", 7500.0 + r, 7800.0 + r))]
            + [{"round": 1, "arm": "defaults", "machine": "c", "error": "the server exited 1"}]}))
    data = hh.report(campaign, {"prior": archive})
    (tune,) = data["tune"]
    assert {n: j["cache_reset"] for n, j in data["client_judges"].items()} == {
        "judge-clients": False, "judge-warm": True}
    kept, reset = tune["client_judges"]["judge-clients"], tune["client_judges"]["judge-warm"]
    assert kept["vllm"]["ratio_to_sweep"] == pytest.approx(7500.5 / 7600.5)
    assert kept["tune"]["ratio_to_sweep"] == pytest.approx(7800.5 / 7700.5)
    assert not kept["vllm"]["meets_quality"] and kept["tune"]["meets_quality"]
    assert reset["vllm"]["ratio_to_sweep"] == pytest.approx(7200.5 / 7300.5)
    assert reset["tune"]["ratio_to_sweep"] == pytest.approx(7500.5 / 7400.5)
    assert tune["ratio_to_sweep"] == pytest.approx(9810 / 7601)          # the first judge's, as before
    rows = hh.clients_table(data).splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| judge-clients (kept)", "| judge-warm (reset)"]
    assert all("tune prior 25 %" in r for r in rows)


def test_the_drift_adjusted_ratio_takes_a_linear_drift_out_of_a_fixed_order():
    """A B C, A B C on a machine that loses 1 % a launch: the plain ratios favour the arm launched
    first, the adjusted ones are the arms' own."""
    own = {"sweep": 100.0, "defaults": 75.0, "tune": 100.0}
    launches = [{"arm": arm, "value": own[arm] * 0.99 ** k}
                for k, arm in enumerate(["sweep", "defaults", "tune"] * 2)]
    launches.insert(4, {"arm": "defaults", "error": "the server exited 1"})   # its slot still passes
    for r in launches[5:]:
        r["value"] *= 0.99
    ratios, drift = hh.drift_adjusted(launches)
    assert ratios == pytest.approx({"sweep": 1.0, "defaults": 0.75, "tune": 1.0})
    assert drift == pytest.approx(-0.01)
    assert hh.drift_adjusted(launches[:3]) is None                # one round: not determined


def test_the_near_ties_and_first_runs_are_read_from_the_committed_runs(campaign):
    """The table behind the verdict's caveat: each judged config as tune's client, the sweep's
    runs 1-3 and the judge measured it, from the committed H200 state and studies."""
    studies = {v: REPO / "benchmarks" / "data" / "h200-h2h" / f"h2h-{v}.tar.gz" for v in ("prior", "noprior")}
    trials = [t for archive in studies.values() for t in hh.finished_trials(archive)]
    rows = {r["arm"]: r for r in hh.near_ties(campaign, hh.convert(campaign / "vllm-sweep"), trials)}
    judge = json.loads((campaign / "judge.json").read_text())
    assert set(rows) == {a for a, c in judge["arms"].items() if c is not None}
    for arm, row in rows.items():
        folder = "SERVE--" + "-".join(f"{k}={v}" for k, v in row["config"].items())   # quantization first
        runs = sorted((campaign / "vllm-sweep" / "out" / "grid" / folder).glob("run=*.json"))
        assert row["sweep"]["runs"] == [[json.loads(f.read_text())["total_token_throughput"] for f in runs]]
        assert sorted(row["tune"]["values"]) == sorted(
            t.value for t in trials if t.params == row["params"] and schema.launched(t)
            and t.state == optuna.trial.TrialState.COMPLETE and schema.is_feasible(t))
        assert len(row["tune"]["values"]) >= 2 and row["tune"]["median"] == statistics.median(row["tune"]["values"])
        assert len(row["judge"]["values"]) == 2 and row["sweep"]["warm_mean"] == pytest.approx(
            sum(row["sweep"]["runs"][0][1:]) / 2)
    first = hh.first_runs(hh.convert(campaign / "vllm-sweep"))
    assert {q: f["deficit"]["n"] for q, f in first.items()} == {"none": 8, "fp8": 8}
    # the sweep's pick: run 1 against the mean of its runs 2 and 3
    (pick,) = rows["sweep"]["sweep"]["runs"]
    assert first["fp8"]["deficit"]["min"] <= 1 - pick[0] / ((pick[1] + pick[2]) / 2) <= first["fp8"]["deficit"]["max"]
    table = hh.near_ties_table({"near_ties": list(rows.values()), "first_runs": first})
    assert len(table.splitlines()) == 2 + len(rows) + 1 + 2 + len(first)

