"""The driver's bookkeeping (tuner.study.run), with an executor that answers from a table instead of
launching: configs a rule rules out, configs the study measured already, queued repeats, a space with
nothing new left to launch, and the stop rules. The engine path is covered by tests/engine/."""

from __future__ import annotations

import sys
import time
import warnings
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers import GRID_FIXED, GRID_PARAMS
from tuner import study as study_mod
from tuner.engines.failures import Failure
from tuner.errors import HarnessError
from tuner.record import results, schema
from tuner.record.storage import default_url
from tuner.space import space_from_dict
from tuner.study import Finished
from tuner.study.samplers import screen_threshold
from tuner.trial.runner import TrialOutcome

optuna.logging.set_verbosity(optuna.logging.WARNING)
# (max_num_seqs, max_num_tokens, chunked_prefill) -> throughput; None: the engine refuses it.
# chunked_prefill=false with max_num_tokens < max_seq_len is refused by vLLM, and ruled out by
# the rule vllm-mnbt-lt-max-model-len before any launch.
THROUGHPUT = {
    (2, 256, True): 300.0, (2, 256, False): None, (2, 2048, True): 400.0, (2, 2048, False): 390.0,
    (8, 256, True): 700.0, (8, 256, False): None, (8, 2048, True): 1000.0, (8, 2048, False): 900.0,
}
RULED_OUT = {k for k, v in THROUGHPUT.items() if v is None}


def _space(**over):
    data = {
        "name": "run-test",
        "model": {"path": "/nonexistent/tiny", "served_name": "tiny"},
        "engines": {"vllm": {
            "command": [sys.executable],
            "params": GRID_PARAMS,
            "fixed": GRID_FIXED,
        }},
        "workload": {"num_prompts": 8},
        "objective": {"metric": "total_token_throughput", "slos": {"p99_ttft_ms": 1000}},
        "sampler": "random",
        "seed": 0,
        "baselines": [],
        "budget": {"n_trials": 4},
    }
    data.update(over)
    return space_from_dict(data)


class TableExecutor:
    """An executor whose trials answer from THROUGHPUT (a value, or a refusal) instead of launching;
    records every launch."""

    def __init__(self, screen_of=None, *, slots: int = 1, broken: bool = False, seconds: float = 0.0):
        """``slots`` > 1 runs several trials at once, as the Ray executor does; ``broken``: every
        trial fails in the tuner itself; ``seconds``: each trial takes this long."""
        self.launched: list[tuple] = []
        self.screen_of = screen_of or {}
        self.slots, self.broken, self.seconds = slots, broken, seconds
        self._pending: list = []

    def submit(self, task, hooks):
        self._pending.append(task)
        return task.number

    def wait(self) -> Finished:
        task = self._pending.pop(0)
        time.sleep(self.seconds)
        if self.broken:
            return Finished(task.number, error=HarnessError("the benchmark client crashed"))
        gate = task.gate if task.screen_threshold is not None else None
        return Finished(task.number, self.answer(task.space, task.engine, task.knobs, task.trial_dir,
                                                  workloads=task.workloads, gate=gate))

    def cancel(self, keys): self._pending.clear()
    def reap(self): return []
    def close(self): pass

    def answer(self, space, engine, knobs, trial_dir, *, workloads=None, gate=None):
        key = (knobs["max_num_seqs"], knobs["max_num_tokens"], knobs["chunked_prefill"])
        self.launched.append(key)
        trial_dir.mkdir(parents=True, exist_ok=True)
        log = trial_dir / "server.log"
        log.write_text("INFO started\n")
        plan = SimpleNamespace(argv=["vllm", "serve"], env={}, knobs=dict(knobs), engine=engine,
                               config_file=None, command_line=lambda: "vllm serve")
        outcome = TrialOutcome(plan=plan, log_path=log, engine_version="0.32.0")
        value = THROUGHPUT[key]
        if value is None:
            outcome.failure = Failure("invalid-config", "refused", "ValueError")
            return outcome
        for w in workloads:
            if w.name == "screen":
                screen = self.screen_of.get(key, value)
                outcome.workload_metrics[w.name] = {"total_token_throughput": screen}
                if gate is not None and not gate({"total_token_throughput": screen}):
                    outcome.screened_out = True
                    return outcome
                continue
            outcome.workload_metrics[w.name] = {"total_token_throughput": value,
                                                "p99_ttft_ms": 100.0, "completed": 8, "failed": 0}
        return outcome


class Notes:
    def __init__(self):
        self.notes: list[str] = []

    def trial_started(self, number, index, total, label): pass
    def phase(self, phase): pass
    def trial_finished(self, trial): pass

    def note(self, message):
        self.notes.append(message)


@pytest.fixture
def fake():
    return TableExecutor()


def _key(t) -> tuple:
    return (t.params["max_num_seqs"], t.params["max_num_tokens"], t.params["chunked_prefill"])


def _run(space, name, executor, **kw):
    handle = study_mod.create(space, name, default_url(name))
    notes = Notes()
    study_mod.run(handle, executor=executor, reporter=notes, **kw)
    return handle, notes


def test_rule_pruned_trials_are_told_complete_like_a_refusal(studies, fake):
    """GPSampler ignores PRUNED trials and kept proposing configs a rule rules out; recorded like
    a refused launch, they steer every sampler, and they still cost no launch."""
    handle, _ = _run(_space(budget={"n_trials": 6}), "ruled", fake)
    trials = handle.study.trials
    pruned = [t for t in trials if "pruned_rule" in t.user_attrs]
    assert pruned, "the seed proposed no ruled-out config; pick another"
    for t in pruned:
        assert _key(t) in RULED_OUT and t.user_attrs["pruned_rule"] == "vllm-mnbt-lt-max-model-len"
        assert t.state == TrialState.COMPLETE and t.value == 0.0
        # the same constraints as a launched, refused config: every one violated
        assert t.constraints == {"engine_start": 1.0, "slo:p99_ttft_ms": 1.0}
        assert not schema.launched(t) and schema.status(t) == "pruned"
        assert not schema.is_feasible(t)
    assert not RULED_OUT & set(fake.launched)
    assert study_mod.finished_count(handle.study) == len(fake.launched) == 6


def test_a_config_measured_before_is_not_launched_again(studies, fake):
    handle, _ = _run(_space(budget={"n_trials": 6}), "reused", fake)
    trials = handle.study.trials
    reused = [t for t in trials if "reused_from" in t.user_attrs]
    assert reused, "the seed proposed no config twice; pick another"
    assert len(fake.launched) == len(set(fake.launched)) == 6
    for t in reused:
        source = trials[t.user_attrs["reused_from"]]
        assert _key(source) == _key(t) and schema.launched(source)
        assert t.state == source.state == TrialState.COMPLETE
        assert t.value == source.value and t.constraints == source.constraints
        assert schema.status(t) == "reused" and not schema.launched(t)
    # tune best: one measurement per config, a reused trial is no repeat
    assert all(g.n == 1 for g in results.group_configs(handle.study))
    assert study_mod.finished_count(handle.study) == 6


def test_queued_repeats_of_a_measured_config_still_launch(studies, fake):
    handle, _ = _run(_space(sampler="grid", budget={"n_trials": 3}), "repeats", fake)
    assert len(fake.launched) == 3
    added = study_mod.enqueue_repeats(handle, top_k=1, repeats=2)
    best = results.best_config(handle.study)
    study_mod.run(handle, executor=fake, reporter=Notes())
    assert fake.launched[3:] == [_key(best.first)] * added
    assert results.best_config(handle.study).n == 3


def test_a_space_with_nothing_new_to_launch_stops_with_a_reason(studies, fake):
    handle, notes = _run(_space(budget={"n_trials": 20}), "exhausted", fake)
    assert sorted(fake.launched) == sorted(set(THROUGHPUT) - RULED_OUT)  # each config once
    assert notes.notes == [study_mod.EXHAUSTED]
    tail = handle.study.trials[-study_mod.MAX_PRUNED_IN_A_ROW:]
    assert not any(schema.launched(t) for t in tail)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_screened_out_config_proposed_again_stays_screened_out(studies):
    """Multi-fidelity: the repeat is PRUNED with its source's screen, and that screen is not
    counted twice towards the screening startup."""
    runner = TableExecutor(screen_of={(2, 256, True): 100.0})
    space = _space(fidelity={"screen_prompts": 2, "margin": 0.1, "n_startup": 2})
    handle = study_mod.create(space, "screens", default_url("screens"))
    for seqs, tokens in ((8, 2048), (8, 256)):  # two screens: the gate is on from trial 2
        handle.study.enqueue_trial({"max_num_seqs": seqs, "max_num_tokens": tokens,
                                    "chunked_prefill": True})
    slow = {"max_num_seqs": 2, "max_num_tokens": 256, "chunked_prefill": True}
    handle.study.sampler = optuna.samplers.PartialFixedSampler(slow, handle.study.sampler)
    notes = Notes()
    study_mod.run(handle, executor=runner, n_trials=4, reporter=notes)
    first, *repeats = handle.study.trials[2:]
    assert first.state == TrialState.PRUNED and first.user_attrs["fidelity"] == "screen"
    assert runner.launched == [(8, 2048, True), (8, 256, True), (2, 256, True)]
    assert len(repeats) == study_mod.MAX_PRUNED_IN_A_ROW and notes.notes == [study_mod.EXHAUSTED]
    for t in repeats:
        assert t.user_attrs["reused_from"] == first.number and t.state == TrialState.PRUNED
        assert t.intermediate_values == first.intermediate_values == {0: 100.0}
    assert screen_threshold(handle.study, margin=0.1, n_startup=4) is None  # still 3 screens


def test_a_refused_launch_sets_each_constraint_once(studies, fake):
    """Optuna warns on the user's terminal for every constraint set twice: a refused launch must
    get its violated constraints in one place."""
    data = _space(budget={"n_trials": 6}).model_dump()
    data["engines"]["vllm"]["check_rules"] = False  # launch the configs vLLM refuses
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle, _ = _run(space_from_dict(data), "refused", fake)
    refused = [t for t in handle.study.trials if t.user_attrs.get("failure_class")]
    assert refused, "the seed launched no refused config; pick another"
    for t in refused:
        assert t.constraints == {"engine_start": 1.0, "slo:p99_ttft_ms": 1.0}
    assert not [w for w in caught if "already set" in str(w.message)]


# ---- the stop rules hold for every executor: one at a time (local) or several at once (Ray) ------

@pytest.mark.parametrize("slots", [1, 3])
def test_the_budget_counts_launches_with_any_concurrency(studies, slots):
    fake = TableExecutor(slots=slots)
    handle, _ = _run(_space(budget={"n_trials": 5}), f"budget{slots}", fake)
    assert study_mod.finished_count(handle.study) == len(fake.launched) == 5


@pytest.mark.parametrize("slots", [1, 3])
def test_the_timeout_stops_new_trials(studies, slots):
    fake = TableExecutor(slots=slots, seconds=0.5)
    handle, _ = _run(_space(budget={"n_trials": 40, "timeout_s": 1.0}), f"timeout{slots}", fake)
    # trials already out finish; none starts after the deadline (a 40-trial budget would take 20 s)
    assert len(fake.launched) < 40 // 2
    assert not handle.study.get_trials(states=(TrialState.RUNNING,))


@pytest.mark.parametrize("slots", [1, 3])
def test_three_harness_errors_in_a_row_stop_the_study(studies, slots):
    fake = TableExecutor(slots=slots, broken=True)
    with pytest.raises(HarnessError, match="3 trials in a row failed in the tuner itself; last: the "
                                           "benchmark client crashed"):
        _run(_space(budget={"n_trials": 6}), f"broken{slots}", fake)
    failed = [t for t in optuna.load_study(study_name=f"broken{slots}", storage=default_url(
        f"broken{slots}")).trials if t.state == TrialState.FAIL]
    assert len(failed) >= 3 and all(t.user_attrs[schema.HARNESS_ERROR] for t in failed)


@pytest.mark.parametrize("slots", [1, 3])
@pytest.mark.parametrize("sampler", ["greedy", "grid"])
def test_a_sampler_with_nothing_left_stops_the_study(studies, slots, sampler):
    fake = TableExecutor(slots=slots)
    handle, notes = _run(_space(sampler=sampler, budget={"n_trials": 40}), f"{sampler}{slots}", fake)
    assert study_mod.SAMPLER_DONE in notes.notes
    assert len(fake.launched) < 40


@pytest.mark.parametrize("slots", [1, 3])
def test_a_space_with_nothing_new_stops_with_any_concurrency(studies, slots):
    fake = TableExecutor(slots=slots)
    handle, notes = _run(_space(budget={"n_trials": 20}), f"exhausted{slots}", fake)
    assert notes.notes == [study_mod.EXHAUSTED]
    assert len(fake.launched) == len(set(THROUGHPUT) - RULED_OUT)


def test_ctrl_c_while_a_finished_trial_is_recorded_leaves_it_interrupted_not_running(studies):
    """The trial has left the executor and is being stored when Ctrl-C lands: it must still be
    FAIL + interrupted in the storage when run() returns, and the terminal is told."""
    from tuner.study.recorder import TrialRecorder

    class InterruptedRecorder(TrialRecorder):
        def record(self, trial, outcome):
            raise KeyboardInterrupt

    handle = study_mod.create(_space(), "ctrl-c", default_url("ctrl-c"))
    notes = Notes()
    with pytest.raises(KeyboardInterrupt):
        study_mod.run(handle, executor=TableExecutor(), reporter=notes,
                      recorder=InterruptedRecorder(handle.study, handle.space, handle.url))
    trials = handle.study.trials
    assert TrialState.RUNNING not in {t.state for t in trials}
    (trial,) = [t for t in trials if t.state == TrialState.FAIL]  # the launched one
    assert trial.user_attrs[schema.INTERRUPTED]
    assert notes.notes[-1] == f"trial {trial.number} marked interrupted"


def test_a_trial_another_worker_failed_meanwhile_does_not_stop_this_one(studies):
    """Another worker's recovery may fail a trial while it runs here (its heartbeat went stale, say
    after this host was suspended): recording it must not crash the worker, and it is re-queued."""

    class FailedElsewhere(TableExecutor):
        failed: int | None = None

        def submit(self, task, hooks):
            if self.failed is None:  # the first launch: the other worker fails it now
                self.failed = task.number
                trial_id = handle.study._storage.get_trial_id_from_study_id_trial_number(
                    handle.study._study_id, task.number)
                handle.study._storage.set_trial_state_values(trial_id, TrialState.FAIL)
            return super().submit(task, hooks)

    handle = study_mod.create(_space(), "elsewhere", default_url("elsewhere"))
    fake = FailedElsewhere()
    study_mod.run(handle, executor=fake, reporter=Notes())
    trials = handle.study.trials
    failed = trials[fake.failed]
    assert failed.state == TrialState.FAIL and schema.HARNESS_ERROR not in failed.user_attrs
    assert [t.user_attrs.get(schema.RETRY_OF) for t in trials].count(fake.failed) == 1
    assert TrialState.RUNNING not in {t.state for t in trials}


def test_a_server_database_gets_each_running_trials_heartbeat(studies):
    """Optuna stamps heartbeats only inside Study.optimize; the driver stamps every trial it holds,
    so another worker can tell a dead worker's trial from a slow one (tuner.study.heartbeat)."""
    import sqlite3
    import threading

    from tuner.record.storage import sqlite_path
    from tuner.study.lifecycle import StudyHandle

    made = study_mod.create(_space(budget={"n_trials": 2}), "beats", default_url("beats"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(made.url, heartbeat_interval=1, grace_period=5)
    handle = StudyHandle(optuna.load_study(study_name="beats", storage=storage), made.space, made.url)

    class Watched(TableExecutor):
        stamped: list[bool] = []

        def wait(self):
            number = self._pending[0].number
            time.sleep(1.5)                       # the trial is out: its stamp is there
            with sqlite3.connect(sqlite_path(made.url)) as db:
                ids = {row[0] for row in db.execute("SELECT trial_id FROM trial_heartbeats")}
            self.stamped.append(storage.get_trial_id_from_study_id_trial_number(
                handle.study._study_id, number) in ids)
            return super().wait()

    fake = Watched()
    study_mod.run(handle, executor=fake, reporter=Notes())
    assert fake.stamped and all(fake.stamped)
    assert "tuner-heartbeat" not in {t.name for t in threading.enumerate()}   # closed with the study


def test_no_trial_starts_that_a_typical_trial_would_carry_past_the_timeout(studies, monkeypatch):
    """Trials of 10 s on the driver's clock and a 25 s timeout: the second starts (the first took
    10 s, and 10 s fit before the deadline), a third would end after it and does not start: it
    would be cut, and its time lost. The first starts with nothing to go by. The clock is the
    test's: a machine's load must not decide what the test sees."""
    clock = [1000.0]
    monkeypatch.setattr(study_mod.driver, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))

    class Timed(TableExecutor):
        def answer(self, *args, **kw):
            outcome = super().answer(*args, **kw)
            clock[0] += 10.0
            outcome.timings["total_s"] = 10.0
            return outcome

    fake = Timed()
    handle, notes = _run(_space(budget={"n_trials": 10}), "typical", fake, timeout_s=25)
    assert len(fake.launched) == 2
    assert study_mod.driver.typical_trial_s(handle.study) == pytest.approx(10.0)
    assert ("no new trial starts: a trial of this study takes about 10 s (the median of its launches), "
            "more than the 5 s left before the timeout") in notes.notes, notes.notes
