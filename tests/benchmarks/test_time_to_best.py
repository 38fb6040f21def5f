"""benchmarks.time_to_best: seconds to the best value two runs of one space both reached."""

import datetime as dt

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from benchmarks import time_to_best
from tuner.record import schema

T0 = dt.datetime(2026, 12, 1, 12, 0, 0)


def _study(name, trials):
    """trials: (value, finished after seconds[, extra user attrs]); each ran for 100 s."""
    study = optuna.create_study(study_name=name, direction="maximize")
    for value, seconds, *more in trials:
        attrs = more[0] if more else {}
        t = create_trial(state=TrialState.COMPLETE, value=value, params={"x": value},
                         distributions={"x": FloatDistribution(0, 1e9)},
                         user_attrs={schema.FEASIBLE: True, schema.KNOBS: {"x": value}, **attrs})
        t.datetime_complete = T0 + dt.timedelta(seconds=seconds)
        t.datetime_start = t.datetime_complete - dt.timedelta(seconds=100)
        study.add_trial(t)
    return study


def test_seconds_to_the_value_both_runs_reached():
    one = _study("single", [(100.0, 100), (300.0, 300), (280.0, 500)])
    two = _study("pair", [(100.0, 100), (120.0, 110), (290.0, 200), (250.0, 210)])
    out = time_to_best.compare({"single": one, "pair": two})
    assert out["target"] == 290.0  # the worse of the two bests
    assert out["studies"]["single"]["seconds_to_target"] == 300.0  # from the first start, T0
    assert out["studies"]["pair"]["seconds_to_target"] == 200.0
    assert out["studies"]["pair"]["reached_by_trial"] == 2
    assert out["studies"]["single"]["best"] == 300.0


def test_decided_without_a_launch_and_repeats_do_not_count():
    """A config ruled out by a rule, a reused one and a `tune confirm` repeat measured nothing new."""
    one = _study("single", [(100.0, 100), (500.0, 150, {schema.PRUNED_RULE: "r"}),
                            (400.0, 160, {schema.REUSED_FROM: 0}), (450.0, 170, {schema.REPEAT_OF: 0}),
                            (200.0, 400)])
    two = _study("pair", [(300.0, 100)])
    out = time_to_best.compare({"single": one, "pair": two})
    assert out["target"] == 200.0 and out["studies"]["single"]["seconds_to_target"] == 400.0
    assert out["studies"]["single"]["served"] == 2


def test_a_study_that_served_nothing_cannot_be_compared():
    with pytest.raises(SystemExit, match="no served trial in pair"):
        time_to_best.compare({"single": _study("single", [(1.0, 1)]), "pair": _study("pair", [])})
