"""The replay benchmark's harness (benchmarks/replay.py) on a tiny synthetic grid: deterministic,
and its bookkeeping (values, engine-seconds, refused configs, reused measurements, screening,
greedy, grid) is right."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from benchmarks import replay
from tests.helpers import GRID_FIXED, GRID_PARAMS
from tuner.space import space_from_dict
from tuner.study import MAX_PRUNED_IN_A_ROW
from tuner.study.samplers import screen_threshold

READY, TEARDOWN, SCREEN_S, FULL_S, FAIL_S = 40.0, 2.0, 3.0, 10.0, 13.0
# (max_num_seqs, max_num_tokens, chunked_prefill) -> three full repeats; None: refused at start.
# Screens equal the mean. Values are far apart, so the noise never reorders configs.
TRUTH = {
    (2, 256, True): [300, 310, 320], (2, 256, False): None,
    (2, 2048, True): [400, 410, 420], (2, 2048, False): [395, 405, 415],
    (8, 256, True): [700, 705, 710], (8, 256, False): None,
    (8, 2048, True): [990, 1000, 1010], (8, 2048, False): [880, 890, 900],
}




def _space(**over):
    data = {
        "name": "replay-test",
        "model": {"path": "/nonexistent/tiny", "served_name": "tiny"},
        "engines": {"vllm": {"params": GRID_PARAMS, "fixed": GRID_FIXED}},
        "workload": {"num_prompts": 8},
        "fidelity": {"screen_prompts": 2, "margin": 0.1, "n_startup": 2},
    }
    data.update(over)
    return space_from_dict(data)


def _grid_json(truth=TRUTH):
    points = []
    for (seqs, tokens, chunked), values in truth.items():
        params = {"max_num_seqs": seqs, "max_num_tokens": tokens, "chunked_prefill": chunked}
        if values is None:
            launch = {"ok": False, "time_to_fail_s": FAIL_S, "timings": {"total_s": FAIL_S},
                      "failure_class": "invalid-config", "screen": None, "full": []}
        else:
            launch = {"ok": True, "timings": {"ready_s": READY, "teardown_s": TEARDOWN},
                      "screen": {"value": sum(values) / 3, "seconds": SCREEN_S},
                      "full": [{"value": v, "seconds": FULL_S} for v in values]}
        points.append({"params": params, "launches": [launch]})
    return {"meta": {"objective": "total_token_throughput", "direction": "maximize"},
            "knobs": ["max_num_seqs", "max_num_tokens", "chunked_prefill"], "points": points}


@pytest.fixture(scope="module")
def grid():
    return replay.Grid.from_json(_grid_json())


@pytest.fixture(scope="module")
def space():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return _space()


def _rows(run):
    return [(t.params, t.state, t.value, t.seconds, t.reported) for t in run.trials]


def test_grid_truth_and_optimum(grid):
    assert len(grid.points) == 8
    assert grid.optimum == pytest.approx(1000)
    assert grid.score({"max_num_seqs": 8, "max_num_tokens": 2048, "chunked_prefill": True}) == 1
    assert grid.score({"max_num_seqs": 2, "max_num_tokens": 256, "chunked_prefill": False}) == 0
    assert grid.score(None) == 0
    with pytest.raises(KeyError):
        grid.point({"max_num_seqs": 4, "max_num_tokens": 256, "chunked_prefill": True})


@pytest.mark.parametrize("strategy", ["tpe", "random", "grid", "greedy", "tpe-mf"])
def test_deterministic(space, grid, strategy):
    a = replay.replay(space, grid, strategy, seed=3, n_trials=8)
    b = replay.replay(space, grid, strategy, seed=3, n_trials=8)
    assert _rows(a) == _rows(b)


@pytest.mark.parametrize("rules", [True, False])
@pytest.mark.parametrize("strategy", ["tpe", "random", "grid"])
def test_full_fidelity_bookkeeping(space, grid, strategy, rules):
    run = replay.replay(space, grid, strategy, seed=1, n_trials=8, rules=rules)
    assert len(run.trials) == 8 or strategy != "grid"
    trials = run.study.get_trials(deepcopy=False)
    cum = 0.0
    for i, rec in enumerate(run.trials):
        ft = trials[rec.number]
        cum += rec.seconds
        assert rec.cum_seconds == pytest.approx(cum)
        values = TRUTH[tuple(rec.params.values())]
        assert ft.state == TrialState.COMPLETE
        assert ft.constraints["engine_start"] == (1.0 if values is None else 0.0)
        if values is None and rules:
            # the live tool's rule (max_num_tokens < max_seq_len with chunked prefill off) rules
            # it out before launch: told COMPLETE like a refused launch, no engine-seconds
            assert rec.state == "rule-pruned" and ft.value == 0.0
            assert ft.user_attrs["pruned_rule"] == "vllm-mnbt-lt-max-model-len"
            assert rec.seconds == 0
            continue
        if values is None:  # launched and refused: COMPLETE, value 0, engine_start violated
            assert rec.state == "infeasible" and ft.value == 0.0
            assert rec.seconds == FAIL_S
        else:
            assert rec.state == "ok" and ft.value in values and rec.value == ft.value
            assert rec.seconds == READY + TEARDOWN + FULL_S  # no screen at full fidelity
            assert ft.intermediate_values == {}
        # the reported config is the best feasible one observed so far, scored by its truth
        seen = [r for r in run.trials[:i + 1] if r.state == "ok"]
        if seen:
            best = max(seen, key=lambda r: r.value)
            assert rec.reported == best.params
            assert rec.score == pytest.approx(sum(TRUTH[tuple(best.params.values())]) / 3 / 1000)
    assert run.seconds == pytest.approx(cum)
    assert run.launches == sum(r.state != "rule-pruned" for r in run.trials)


def test_grid_visits_every_point_once(space, grid):
    run = replay.replay(space, grid, "grid", seed=0, n_trials=8)
    assert run.launches == 6  # the two refused configs are pruned by the rule, not launched
    keys = [tuple(t.params.values()) for t in run.trials]
    assert sorted(keys, key=repr) == sorted(TRUTH, key=repr)
    assert run.final == 1.0
    assert run.reach() == (keys.index((8, 2048, True)) + 1,
                           run.trials[keys.index((8, 2048, True))].cum_seconds)
    # a different seed visits in a different order
    other = replay.replay(space, grid, "grid", seed=5, n_trials=8)
    assert [tuple(t.params.values()) for t in other.trials] != keys


def test_greedy_starts_at_defaults_and_stops(space, grid):
    run = replay.replay(space, grid, "greedy", seed=0, n_trials=20)
    assert run.trials[0].params == {"max_num_seqs": 8, "max_num_tokens": 256, "chunked_prefill": True}
    # defaults, then one new value per knob (each has two values): 4 launches, then done
    assert [tuple(t.params.values()) for t in run.trials] == [
        (8, 256, True), (2, 256, True), (8, 2048, True), (8, 2048, False)]
    assert run.final == 1.0
    assert run.score_at_trials(20) == 1.0  # a finished strategy keeps its answer


def test_multi_fidelity_screening(space, grid):
    truth = dict(TRUTH)
    run = replay.replay(space, grid, "tpe-mf", seed=2, n_trials=8)
    trials = run.study.get_trials(deepcopy=False)
    screens_before = []
    for rec in run.trials:
        ft = trials[rec.number]
        values = truth[tuple(rec.params.values())]
        if values is None:
            assert rec.state == "rule-pruned" and rec.seconds == 0
            assert 0 not in ft.intermediate_values  # no screen ran
            continue
        screen = sum(values) / 3
        assert ft.intermediate_values == {0: pytest.approx(screen)}
        # the live rule: threshold from the screens of the finished trials before this one
        threshold = (None if len(screens_before) < 2 else max(screens_before) * 0.9)
        if threshold is not None and screen < threshold:
            assert rec.state == "screened-out" and ft.state == TrialState.PRUNED
            assert rec.seconds == READY + TEARDOWN + SCREEN_S
            assert ft.user_attrs["fidelity"] == "screen"
        else:
            assert rec.state == "ok" and ft.state == TrialState.COMPLETE
            assert rec.seconds == READY + TEARDOWN + SCREEN_S + FULL_S
            assert ft.value in values
        screens_before.append(screen)
    # pruned trials are never reported as the best
    assert all(t.reported is None or truth[tuple(t.reported.values())] for t in run.trials)


def test_screen_threshold_matches_live_rule(space, grid):
    run = replay.replay(space, grid, "tpe-mf", seed=4, n_trials=6)
    assert screen_threshold(run.study, margin=0.1, n_startup=2) == pytest.approx(
        0.9 * max(t.intermediate_values[0] for t in run.study.get_trials()
                  if 0 in t.intermediate_values))


def test_common_random_numbers(space):
    """The k-th launch of a config in one seed draws the same repeat for every strategy."""
    noisy = {k: (v if v is None else [v[0], v[0] * 1.5, v[0] * 2]) for k, v in TRUTH.items()}
    g = replay.Grid.from_json(_grid_json(noisy))
    first = {}
    for strategy in ("random", "grid", "tpe"):
        run = replay.replay(space, g, strategy, seed=7, n_trials=8)
        for t in run.trials:
            if t.state == "ok":
                first.setdefault(tuple(t.params.values()), set()).add(t.value)
                break
    for key, drawn in first.items():
        assert len(drawn) == 1, key


def test_summary_and_targets_smoke(space, grid):
    runs, skipped = replay.run_all(space, grid, ["tpe", "random", "greedy", "tpe-mf"], 3, 8,
                                   log=lambda *_: None)
    assert not skipped
    summary = replay.summarize(runs, grid, n_grid=8, budgets_trials=[2, 8],
                               budgets_seconds=[100.0, 400.0])
    assert set(summary) == {"tpe", "random", "greedy", "tpe-mf"}
    assert summary["greedy"]["final_mean"] == 1.0 and summary["greedy"]["launches_mean"] == 4
    for s in summary.values():
        assert 0 <= s["reach_rate"] <= 1
        assert s["at_seconds"]["100"][0] <= s["at_seconds"]["400"][0]
    tgts = replay.targets(summary, runs, n_grid=8)
    assert len(tgts) == 3 and all(isinstance(t["met"], bool) for t in tgts)
    md = replay.markdown(summary, tgts, skipped, n_trials=8, budgets_trials=[2, 8],
                         budgets_seconds=[100.0, 400.0])
    assert "| greedy |" in md


def test_censored_median():
    assert replay._median_censored([1, 2, 3]) == 2
    assert replay._median_censored([1, None, None]) is None
    assert replay._median_censored([1, 2, None]) == 2


def test_denoised_grid_returns_the_truth(grid):
    clean = grid.denoised()
    for p in clean.points:
        (launch,) = p.launches
        truth = TRUTH[tuple(p.params.values())]
        if truth is None:
            assert not launch.ok and launch.launch_s == FAIL_S
        else:
            assert launch.full_values == (pytest.approx(sum(truth) / 3),)
            assert launch.launch_s == READY + TEARDOWN and launch.full_s == (FULL_S,)
    assert clean.optimum == grid.optimum and clean.best_params == grid.best_params


@pytest.mark.parametrize("strategy", ["tpe", "random", "tpe-mf"])
def test_measured_configs_are_not_relaunched(space, grid, strategy):
    """The live TrialRecorder.reuse: a config proposed again repeats its measurement for free."""
    run = replay.replay(space, grid, strategy, seed=0, n_trials=8)
    keys = [tuple(t.params.values()) for t in run.trials if t.state != "rule-pruned"]
    assert len(keys) == len(set(keys))  # every launch is a new config
    reused = [t for t in run.study.trials if "reused_from" in t.user_attrs]
    assert reused and len(reused) == run.reused
    assert len(run.study.trials) == len(run.trials) + run.reused
    for t in reused:
        source = run.study.trials[t.user_attrs["reused_from"]]
        assert source.params == t.params and source.number < t.number
        assert "reused_from" not in source.user_attrs and "pruned_rule" not in source.user_attrs
        assert (t.state, t.value, t.constraints) == (source.state, source.value, source.constraints)
        assert t.intermediate_values == source.intermediate_values
    assert run.seconds == pytest.approx(sum(t.seconds for t in run.trials))


def test_a_study_with_nothing_new_to_launch_stops(space, grid):
    """Asked for more trials than the grid has, the study stops after MAX_PRUNED_IN_A_ROW
    proposals in a row without a launch instead of spinning."""
    run = replay.replay(space, grid, "tpe", seed=0, n_trials=100)
    assert run.launches == 6 and len(run.trials) < 100
    tail = run.study.trials[-MAX_PRUNED_IN_A_ROW:]
    assert all("reused_from" in t.user_attrs or "pruned_rule" in t.user_attrs for t in tail)


def test_the_replayed_sampler_scales_its_startup_with_the_budget(space):
    assert replay.make_study(space, "tpe", 0, 8).sampler._n_startup_trials == 3
    assert replay.make_study(space, "tpe", 0, 24).sampler._n_startup_trials == 6


def test_launch_counting():
    rec = lambda state, score: replay.TrialRec(0, {}, state, None, 0.0, 0.0, None, score)
    run = replay.Run("x", 0, [rec("ok", 0.5), rec("rule-pruned", 0.5), rec("ok", 0.9),
                              rec("rule-pruned", 0.9), rec("ok", 1.0)])
    assert run.launches == 3 and run.launches_by(4) == 2
    assert run.reach() == (5, 0.0) and run.reach_launches() == 3
    assert run.score_at_launches(1) == 0.5 and run.score_at_launches(2) == 0.9
    assert run.score_at_trials(2) == 0.5



def test_greedy_comparison_is_a_paired_ratio_with_the_one_interval_method():
    # per-seed ratios 1.125, 1.056, 1.176: scipy.stats.t.interval on their logs gives 0.976-1.280
    assert replay._paired_ratio([(0.9, 0.8), (0.95, 0.9), (1.0, 0.85)]) == (
        "1.118x greedy's final (geometric mean over seeds, 95% CI 0.976 to 1.280, n=3)")
    assert replay._paired_ratio([(0.9, 0.8), (0.95, 0.9)]).endswith("n=2, no interval)")
    assert replay._paired_ratio([(0.0, 0.8), (0.95, 0.9), (1.0, 1.0)]).startswith("no ratio")
