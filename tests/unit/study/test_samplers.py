"""Search strategies and best-config selection on synthetic objectives (no engine)."""

import optuna
import pytest

from tests.helpers import fixture_space
from tuner.errors import InputError
from tuner.record import results, schema
from tuner.study.samplers import (
    GreedySampler,
    SamplerSpec,
    ladder,
    make_sampler,
    screen_threshold,
    startup_trials,
)

DEFAULTS = {"seqs": 128, "tokens": 2048, "chunked": True}


def objective(trial):
    seqs = trial.suggest_int("seqs", 2, 128, log=True)
    tokens = trial.suggest_categorical("tokens", [256, 512, 1024, 2048, 4096])
    chunked = trial.suggest_categorical("chunked", [True, False])
    return -abs(seqs - 16) - abs(tokens - 4096) / 100 - (0 if chunked else 5)


def test_ladder_spans_ranges_and_choices():
    assert ladder(optuna.distributions.IntDistribution(2, 128, log=True)) == [2, 8, 32, 128]
    assert ladder(optuna.distributions.IntDistribution(0, 30)) == [0, 10, 20, 30]
    assert ladder(optuna.distributions.CategoricalDistribution([1, 2, 3])) == [1, 2, 3]


def test_greedy_reproduces_one_knob_at_a_time():
    study = optuna.create_study(direction="maximize", sampler=GreedySampler(DEFAULTS, seed=0))
    study.optimize(objective, n_trials=12)
    seen = [dict(t.params) for t in study.trials]
    assert seen[0] == DEFAULTS  # defaults first
    # then the seqs ladder (128, the default, is already measured) with the rest at defaults
    assert seen[1:4] == [{**DEFAULTS, "seqs": s} for s in (2, 8, 32)]
    # the best seqs (8 is closest to 16 on the ladder) is kept while the tokens ladder runs
    assert seen[4:8] == [{**DEFAULTS, "seqs": 8, "tokens": t} for t in (256, 512, 1024, 4096)]
    # then chunked, with tokens=4096 kept; afterwards the incumbent is proposed again
    assert seen[8] == {"seqs": 8, "tokens": 4096, "chunked": False}
    assert seen[9:] == [{"seqs": 8, "tokens": 4096, "chunked": True}] * 3
    assert study.sampler.done(study)


def test_greedy_is_not_done_midway():
    study = optuna.create_study(direction="maximize", sampler=GreedySampler(DEFAULTS))
    study.optimize(objective, n_trials=4)
    assert not study.sampler.done(study)


def test_greedy_resumes_from_history_deterministically():
    a = optuna.create_study(direction="maximize", sampler=GreedySampler(DEFAULTS))
    a.optimize(objective, n_trials=9)
    b = optuna.create_study(direction="maximize", sampler=GreedySampler(DEFAULTS))
    b.optimize(objective, n_trials=5)
    b.sampler = GreedySampler(DEFAULTS)  # a fresh process resuming the study
    b.optimize(objective, n_trials=4)
    assert [t.params for t in a.trials] == [t.params for t in b.trials]


def test_screen_threshold_needs_startup_trials_and_applies_margin():
    study = optuna.create_study(direction="maximize")
    assert screen_threshold(study, margin=0.1, n_startup=2) is None
    for v in (100.0, 200.0):
        t = study.ask()
        t.report(v, 0)
        study.tell(t, v)
    assert screen_threshold(study, margin=0.1, n_startup=2) == pytest.approx(180.0)


def test_unknown_or_unavailable_samplers_are_explained():
    with pytest.raises(InputError, match="unknown sampler 'annealing'"):
        make_sampler("annealing", _spec())
    with pytest.raises(InputError, match="needs every param to have a finite grid"):
        make_sampler("grid", _spec(grid=None))


def test_tpe_startup_scales_with_the_budget():
    """Optuna's fixed 10 random trials made a 6-trial study pure random search."""
    assert [startup_trials(n) for n in (6, 12, 24, 40, 200)] == [3, 3, 6, 10, 10]
    assert startup_trials(None) == 10
    assert make_sampler("tpe", _spec(n_trials=6))._n_startup_trials == 3
    assert make_sampler("tpe", _spec(n_trials=24))._n_startup_trials == 6


def _spec(*, grid=None, n_trials=None) -> SamplerSpec:
    return SamplerSpec(seed=0, defaults={}, grid=grid, multi_objective=False, n_trials=n_trials)


def test_greedy_counts_pruned_configs_as_tried():
    """A ladder step pruned before launch must not be proposed again and again."""
    study = optuna.create_study(direction="maximize", sampler=GreedySampler(DEFAULTS))

    def pruning_objective(trial):
        value = objective(trial)
        if trial.params["seqs"] == 2:  # e.g. a feasibility rule
            raise optuna.TrialPruned()
        return value

    study.optimize(pruning_objective, n_trials=15)
    seqs_two = [t for t in study.trials if t.params["seqs"] == 2]
    assert len(seqs_two) == 1
    assert study.sampler.done(study)


def test_greedy_counts_infeasible_configs_as_tried_and_never_keeps_them():
    """Configs a rule rules out are told COMPLETE with engine_start = 1 and a pessimistic value:
    greedy moves on from them and never makes one its incumbent."""
    study = optuna.create_study(direction="maximize", sampler=GreedySampler(DEFAULTS))

    def ruling_objective(trial):
        value = objective(trial)
        refused = trial.params["seqs"] == 8
        trial.set_constraint("engine_start", 1.0 if refused else 0.0)
        return 1e9 if refused else value  # an infeasible value must not win, however large

    study.optimize(ruling_objective, n_trials=15)
    assert len([t for t in study.trials if t.params["seqs"] == 8]) == 1
    assert study.sampler.done(study)
    assert study.sampler._next(study, -1)["seqs"] == 2  # the best feasible rung, not 8


def test_once_configs_are_repeated_a_single_lucky_launch_is_not_recommended():
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.CategoricalDistribution([1, 2])}
    for x, value in ((1, 900.0), (1, 800.0), (1, 850.0), (2, 1000.0)):  # x=2: one launch only
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist, value=value,
                                                  user_attrs={schema.ARM: schema.SEARCH},
                                                  constraints={schema.ENGINE_START: 0.0}))
    best = results.best_config(study)
    assert best.params == {"x": 1} and best.n == 3 and best.median == 850.0


@pytest.mark.parametrize("repeat_state", [optuna.trial.TrialState.WAITING,
                                          optuna.trial.TrialState.FAIL])
def test_a_config_whose_confirm_was_cut_short_still_competes(repeat_state):
    """A study stopped while the best config's `tune confirm` repeat ran: the repeated
    baselines must not be recommended over it, while a config no repeat was queued for still does
    not compete with repeated ones."""
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.CategoricalDistribution([1, 2])}
    for arm, x, value, repeat_of in (("defaults", 1, 7687.0, None), ("pick", 2, 10435.0, None),
                                     ("defaults", 1, 7871.0, 0)):
        attrs = {schema.ARM: arm, **({schema.REPEAT_OF: repeat_of} if repeat_of is not None else {})}
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist, value=value,
                                                  user_attrs=attrs,
                                                  constraints={schema.ENGINE_START: 0.0}))
    assert results.best_config(study).params == {"x": 1}   # the confirm never queued x=2's repeat
    study.add_trial(optuna.trial.create_trial(
        params={"x": 2}, distributions=dist, state=repeat_state,
        user_attrs={schema.ARM: "pick", schema.REPEAT_OF: 1, schema.INTERRUPTED: True}))
    best = results.best_config(study)
    assert best.params == {"x": 2} and best.n == 1 and results.confirm_pending(study) == {1}
    if repeat_state == optuna.trial.TrialState.FAIL:
        # `tune resume` retries a failed repeat once (the retry stays that repeat); a retry that
        # fails too is given up, and the config is unconfirmed for good
        study.add_trial(optuna.trial.create_trial(
            params={"x": 2}, distributions=dist, state=repeat_state,
            user_attrs={schema.ARM: "pick", schema.REPEAT_OF: 1, schema.RETRY_OF: 3}))
        assert results.confirm_pending(study) == set()
        assert results.best_config(study).params == {"x": 1}


def test_resume_retries_an_interrupted_repeat_as_that_repeat():
    """`tune resume` re-queues the repeat `tune confirm` lost, and the retry is still the
    repeat of its config, so tune best keeps the config in the running until it is measured."""
    from tuner.study.lifecycle import StudyHandle
    from tuner.study.recovery import recover

    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.CategoricalDistribution([1, 2])}
    study.add_trial(optuna.trial.create_trial(params={"x": 2}, distributions=dist, value=10435.0,
                                              user_attrs={schema.ARM: "pick"},
                                              constraints={schema.ENGINE_START: 0.0}))
    study.add_trial(optuna.trial.create_trial(
        params={"x": 2}, distributions=dist, state=optuna.trial.TrialState.FAIL,
        user_attrs={schema.ARM: "pick", schema.REPEAT_OF: 0, schema.INTERRUPTED: True}))
    notes = recover(StudyHandle(study, None, "sqlite:///:memory:"))
    assert notes == ["trial 1 was interrupted: re-queued"]
    (retry,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert retry.user_attrs[schema.RETRY_OF] == 1 and retry.user_attrs[schema.REPEAT_OF] == 0
    assert results.confirm_pending(study) == {0}
    assert recover(StudyHandle(study, None, "sqlite:///:memory:")) == []   # once


GRID = {"quantization": ["fp8", "none"], "kv_cache_dtype": ["auto", "fp8"], "max_num_seqs": [256, 1024]}


def test_a_grid_study_resumed_by_another_worker_measures_each_point_once():
    """The grid's points are numbered by its seeded shuffle, and the unvisited ones found by number:
    a resuming worker with its own seed (the space's + its pid) renumbered them, proposed points
    already measured again and took unmeasured ones for visited (the SGLang grid resumed on another
    H200 host, 2026-12-04: 14 of 24 trials repeated a measured config)."""
    spec = lambda seed: SamplerSpec(seed=seed, defaults={}, grid=GRID, multi_objective=False,
                                    n_trials=None, study_seed=0)
    first = make_sampler("grid", spec(0))
    study = optuna.create_study(direction="maximize", sampler=first)
    seen = []
    for _ in range(3):                                    # the first run
        trial = study.ask()
        seen.append(tuple(trial.suggest_categorical(k, v) for k, v in GRID.items()))
        study.tell(trial, 1.0)
    resumed = make_sampler("grid", spec(4242))            # another process: its own seed
    study.sampler = resumed
    while not resumed.done(study):
        trial = study.ask()
        seen.append(tuple(trial.suggest_categorical(k, v) for k, v in GRID.items()))
        study.tell(trial, 1.0)
    assert len(seen) == 8 and len(set(seen)) == 8


def test_a_worker_seeds_its_grid_choices_but_not_the_grids_order():
    """sampler_for gives every process of a grid study the space's seed for the order."""
    from tuner.space.load import load_space
    from tuner.study.samplers import sampler_for

    space = load_space(fixture_space("h200-sglang-grid"))
    own, worker = sampler_for(space), sampler_for(space, worker_seed=True)
    assert own._all_grids == worker._all_grids


def test_greedy_tries_each_engine_at_its_own_defaults_then_tunes_the_best():
    """The motivating procedure: every engine at its defaults, keep the best engine, then one knob
    at a time on it (a knob shared by the engines defaults differently on each)."""
    engine_defaults = {"vllm": {"mem": 0.92, "seqs": 1024}, "sglang": {"mem": 0.88, "seqs": 1024}}

    def score(trial):
        engine = trial.suggest_categorical("engine", ["vllm", "sglang"])
        mem = trial.suggest_categorical("mem", [0.8, 0.88, 0.92])
        seqs = trial.suggest_categorical("seqs", [64, 256, 1024])
        return (2 if engine == "sglang" else 1) + mem - abs(seqs - 256) / 1000

    sampler = GreedySampler({"engine": "vllm", "mem": 0.92, "seqs": 1024}, seed=0,
                            engine_defaults=engine_defaults)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(score, n_trials=6)
    seen = [dict(t.params) for t in study.trials]
    assert seen[0] == {"engine": "vllm", "mem": 0.92, "seqs": 1024}
    assert seen[1] == {"engine": "sglang", "mem": 0.88, "seqs": 1024}   # its own defaults
    # SGLang wins; its knobs are tuned from its defaults, one at a time
    assert seen[2:4] == [{"engine": "sglang", "mem": m, "seqs": 1024} for m in (0.8, 0.92)]
    assert seen[4:6] == [{"engine": "sglang", "mem": 0.92, "seqs": s} for s in (64, 256)]


def test_greedy_leaves_knobs_without_a_documented_default_to_the_engine():
    """SGLang computes its memory fraction at start-up: greedy launches it without the flag (as a
    person at the defaults would), not at vLLM's value, until the memory ladder reaches it, and
    then tries every ladder value (none of them is what the engine chose)."""
    engine_defaults = {"vllm": {"mem": 0.92, "seqs": 1024}, "sglang": {"seqs": 1024}}
    knobs = {"vllm": ["mem", "seqs"], "sglang": ["mem", "seqs"]}
    sampler = GreedySampler({"engine": "vllm", "mem": 0.92, "seqs": 1024}, seed=0,
                            engine_defaults=engine_defaults, engine_knobs=knobs)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def score(trial):
        left = sampler.left_to_engine(study, trial.number)
        trial.set_user_attr(schema.OMIT, left)
        engine = trial.suggest_categorical("engine", ["vllm", "sglang"])
        mem = 0.9 if "mem" in left else trial.suggest_categorical("mem", [0.8, 0.88, 0.92])
        seqs = trial.suggest_categorical("seqs", [64, 256, 1024])
        return (2 if engine == "sglang" else 1) + mem - abs(seqs - 256) / 1000

    study.optimize(score, n_trials=5)
    seen = [(dict(t.params), t.user_attrs[schema.OMIT]) for t in study.trials]
    assert seen[0] == ({"engine": "vllm", "mem": 0.92, "seqs": 1024}, [])
    assert seen[1] == ({"engine": "sglang", "seqs": 1024}, ["mem"])
    assert seen[2:5] == [({"engine": "sglang", "mem": m, "seqs": 1024}, []) for m in (0.8, 0.88, 0.92)]
