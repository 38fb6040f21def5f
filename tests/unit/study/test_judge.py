"""`tune judge`: the picks of several searches and each engine's defaults, queued round by round in
a study of their own, and the verdict read from its launches (synthetic studies, no engine)."""

from __future__ import annotations

import datetime
import math

import optuna
import pytest
from typer.testing import CliRunner

from tests.helpers import ok_trial, refused_trial, stored_study
from tuner.cli import app
from tuner.record import schema
from tuner.report import judge as verdict
from tuner.report.stats import change, log_t_interval
from tuner.space import load_space
from tuner.study import judge
from tuner.study.lifecycle import load

optuna.logging.set_verbosity(optuna.logging.WARNING)
runner = CliRunner()
CHUNKED = {"chunked_prefill": True}


@pytest.fixture
def searches(studies):
    studies.mkdir()
    stored_study(studies, "greedy", [ok_trial(50.0, {"max_num_seqs": 128, **CHUNKED}, "vllm-defaults"),
                                      ok_trial(60.0, {"max_num_seqs": 16, **CHUNKED})])
    stored_study(studies, "tpe", [ok_trial(55.0, {"max_num_seqs": 32, **CHUNKED}),
                                   ok_trial(65.0, {"max_num_seqs": 8, **CHUNKED})])
    return studies


def test_picks_and_defaults_are_queued_round_by_round(searches, monkeypatch):
    monkeypatch.chdir(searches.parent)
    greedy, tpe = load("greedy", f"sqlite:///{searches}/greedy.db"), load("tpe", f"sqlite:///{searches}/tpe.db")
    space, field = judge.entrants([("greedy", greedy, None), ("tpe", tpe, None)])
    assert [(e.label, e.params.get("max_num_seqs"), e.origin) for e in field] == [
        ("greedy", 16, "greedy#1"), ("tpe", 8, "tpe#1"), ("vllm-defaults", 128, "vllm defaults")]
    assert "max_num_seqs" in field[2].omit  # the defaults launch without knob flags
    handle = judge.create_judge(space, "judge", f"sqlite:///{searches}/judge.db", field, launches=3)
    queued = [t for t in handle.study.get_trials(deepcopy=False)
              if t.state == optuna.trial.TrialState.WAITING]
    assert [t.user_attrs[schema.ARM] for t in queued] == ["greedy", "tpe", "vllm-defaults"] * 3
    assert handle.budget == 9 and handle.space.prior is None and handle.space.baselines == []


def test_a_named_trial_is_judged_and_a_study_with_another_question_is_refused(searches):
    greedy = load("greedy", f"sqlite:///{searches}/greedy.db")
    _, field = judge.entrants([("first", greedy, 0)], defaults=[])
    assert [e.origin for e in field] == ["greedy#0"]
    other = load_space("cpu-smoke").model_copy(update={"workload": load_space("cpu-smoke").workload.model_copy(
        update={"num_prompts": 7})})
    stored_study(searches, "elsewhere", [ok_trial(70.0, {"max_num_seqs": 4, **CHUNKED})], space=other)
    elsewhere = load("elsewhere", f"sqlite:///{searches}/elsewhere.db")
    with pytest.raises(Exception, match="another workloads than study 'greedy'"):
        judge.entrants([("a", greedy, None), ("b", elsewhere, None)])


def test_searches_that_picked_the_same_config_are_one_entrant(searches, monkeypatch):
    monkeypatch.chdir(searches.parent)
    stored_study(searches, "same", [ok_trial(40.0, {"max_num_seqs": 32, **CHUNKED}),
                                    ok_trial(70.0, {"max_num_seqs": 16, **CHUNKED})])
    greedy, same = load("greedy", f"sqlite:///{searches}/greedy.db"), load("same", f"sqlite:///{searches}/same.db")
    _, field = judge.entrants([("greedy", greedy, None), ("again", same, None)], defaults=["vllm"])
    assert [(e.label, e.origin) for e in field] == [("greedy+again", "greedy#1, same#1"),
                                                    ("vllm-defaults", "vllm defaults")]
    _, field = judge.entrants([("greedy", greedy, None), ("twice", greedy, 1)], defaults=[])
    assert [(e.label, e.origin) for e in field] == [("greedy+twice", "greedy#1")]
    # a config with the same values whose knobs were left to the engine is another command line
    _, field = judge.entrants([("greedy", greedy, 0), ("tpe", load("tpe", f"sqlite:///{searches}/tpe.db"), 0)],
                              defaults=[])
    assert [e.label for e in field] == ["greedy", "tpe"]

    monkeypatch.setattr("tuner.cli.judge.run_with_progress", lambda *a, **k: None)  # no engine here
    r = runner.invoke(app, ["judge", "j", "greedy=greedy", "again=same", "--no-defaults", "--launches", "1"])
    assert r.exit_code == 0, r.output
    assert "j: 1 entrants x 1 launches" in r.output
    assert "greedy and again picked the same config (greedy#1, same#1): one entrant" in r.output
    stored_study(searches, "joined", [ok_trial(v, {"max_num_seqs": 16, **CHUNKED}, "greedy+again",
                                               judged="greedy#1, same#1") for v in (69.0, 70.0, 71.0)])
    r = runner.invoke(app, ["judge", "joined"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "greedy+again's search (greedy): 2 launches" in r.output
    assert "greedy+again's search (same): 2 launches" in r.output and "its pick was launch 2" in r.output


def test_the_verdict_gives_each_entrant_its_interval_and_each_pick_its_change(searches):
    runs = {"greedy": [60.0, 62.0, 61.0], "tpe": [66.0, 64.0, 65.0], "vllm-defaults": [50.0, 51.0, 49.0]}
    trials = [ok_trial(v, {"max_num_seqs": 8, **CHUNKED}, label, judged=f"{label}-origin")
              for label, values in runs.items() for v in values]
    trials.append(refused_trial({"max_num_seqs": 8, **CHUNKED}, "oom", "CUDA out of memory", "tpe"))
    trials[-1].user_attrs[schema.JUDGED] = "tpe-origin"
    stored_study(searches, "verdict", trials)
    rows = verdict.standings(load("verdict", f"sqlite:///{searches}/verdict.db").study)
    assert [(r.label, r.values, r.refused) for r in rows] == [
        ("greedy", runs["greedy"], 0), ("tpe", runs["tpe"], 1), ("vllm-defaults", runs["vllm-defaults"], 0)]
    assert rows[1].interval == log_t_interval(runs["tpe"])
    pairs = [(a.label, b.label, c) for a, b, c in verdict.head_to_head(rows)]
    assert [(a, b) for a, b, _ in pairs] == [("greedy", "tpe"), ("greedy", "vllm-defaults"),
                                             ("tpe", "vllm-defaults")]
    assert pairs[0][2] == change(runs["tpe"], runs["greedy"])
    assert pairs[0][2].significant and pairs[0][2].pct < 0 and math.isfinite(pairs[0][2].low)


def test_the_cli_prints_the_verdict_of_an_existing_judge(searches):
    stored_study(searches, "done", [ok_trial(v, {"max_num_seqs": 8, **CHUNKED}, "tpe", judged="tpe#1")
                                    for v in (64.0, 65.0, 66.0)])
    r = runner.invoke(app, ["judge", "done"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    iv = log_t_interval([64.0, 65.0, 66.0])
    assert f"tpe (tpe#1): geometric mean {iv.value:,.2f} [{iv.low:,.2f}, {iv.high:,.2f}], n=3" in r.output


@pytest.mark.parametrize("args, message", [
    (["judge", "j", "greedy"], "name a pick as LABEL=STUDY"),
    (["judge", "j", "search=greedy"], "pick label 'search'"),
    (["judge", "j", "a=greedy:7"], "trial 7 is no feasible launch"),
    (["judge", "nothing"], "judge study 'nothing' does not exist"),
    (["judge", "j", "a+b=greedy"], "pick label 'a+b'"),
    (["judge", "j", "a=greedy", "--defaults-of", "trtllm"], "--defaults-of trtllm: not an engine of the space"),
    (["judge", "j", "a=greedy", "--defaults-of", "vllm", "--no-defaults"], "--no-defaults and --defaults-of"),
])
def test_bad_picks_exit_2_and_create_nothing(searches, args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert not (searches / "j.db").exists() and not (searches / "nothing.db").exists()


def test_the_verdict_says_what_each_pick_s_search_spent(searches):
    start = datetime.datetime(2026, 1, 1)
    launches = [ok_trial(55.0, {"max_num_seqs": 32, **CHUNKED}),
                refused_trial({"max_num_seqs": 64, **CHUNKED}, "oom", "CUDA out of memory"),
                refused_trial({"max_num_seqs": 128, **CHUNKED}, "oom", "known to run out of memory"),
                ok_trial(65.0, {"max_num_seqs": 8, **CHUNKED})]
    launches[2].user_attrs[schema.PRUNED_RULE] = "oom-above"
    for i, t in enumerate(launches):   # 2, 3, (none: ruled out), 5 minutes
        t.datetime_start = start
        t.datetime_complete = start + datetime.timedelta(minutes=(0 if i == 2 else i + 2))
    stored_study(searches, "found", launches)
    cost = verdict.search_cost(load("found", f"sqlite:///{searches}/found.db").study, 3)
    assert cost == verdict.SearchCost("found", launches=3, refused=1, ruled_out=1, gpu_minutes=10.0, found_at=3)
    # A launch stopped after the screen (multi-fidelity) used the budget and the GPU too.
    screened = optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, params={"max_num_seqs": 16, **CHUNKED},
                                         distributions=launches[0].distributions,
                                         user_attrs={schema.FIDELITY: schema.SCREEN})
    screened.datetime_start, screened.datetime_complete = start, start + datetime.timedelta(minutes=1)
    stored_study(searches, "screened", [screened, launches[3]])
    cost = verdict.search_cost(load("screened", f"sqlite:///{searches}/screened.db").study, 1)
    assert (cost.launches, cost.gpu_minutes, cost.found_at) == (2, 6.0, 2)

    stored_study(searches, "judged", [ok_trial(v, {"max_num_seqs": 8, **CHUNKED}, "tpe", judged="found#3")
                                      for v in (64.0, 65.0, 66.0)]
                 + [ok_trial(50.0, {"max_num_seqs": 8, **CHUNKED}, "gone", judged="elsewhere#0")])
    r = runner.invoke(app, ["judge", "judged"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert ("tpe's search (found): 3 launches, 10.0 GPU min, 1 refused by the engine, "
            "1 ruled out before a launch; its pick was launch 3") in r.output
    assert "gone's search: study 'elsewhere' is not in this storage" in r.output


def test_a_max_load_entrant_shows_the_lowest_load_each_launch_missed(searches):
    def launch(label, value, missed):
        curve = [{"workload": "w", "load": value, "met": True}]
        curve += [{"workload": "w", "load": missed, "met": False}] if missed else []
        return ok_trial(value, {"max_num_seqs": 8, **CHUNKED}, label, judged=f"{label}#0",
                        **{schema.LOAD_CURVE: curve})
    stored_study(searches, "loads", [launch("a", 60.0, 64.0), launch("b", 60.0, 64.0), launch("a", 60.0, 64.0),
                                     launch("b", 56.0, 60.0), launch("a", 60.0, 64.0), launch("b", 64.0, None)])
    rows = verdict.standings(load("loads", f"sqlite:///{searches}/loads.db").study)
    assert [verdict.resolution(r) for r in rows] == ["lowest load missed 64 (each launch)",
                                                     "lowest loads missed 64, 60, none"]
    r = runner.invoke(app, ["judge", "loads"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "a (a#0): geometric mean 60.00 [60.00, 60.00], n=3, lowest load missed 64 (each launch)" in r.output
