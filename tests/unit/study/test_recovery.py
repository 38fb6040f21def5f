"""Which RUNNING trials `recover` fails when several workers share a server database: a trial
another worker is still stamping is left alone, and a trial whose heartbeat went stale is failed
and re-queued once."""

from __future__ import annotations

import os
import platform
import time

import optuna
import psutil
from optuna.trial import TrialState

from tuner.record import schema
from tuner.study.heartbeat import Heartbeat
from tuner.study.lifecycle import StudyHandle
from tuner.study.recovery import recover

SERVER_URL = "postgresql://tuner@db-host/tuner"  # not SQLite: other workers may hold trials


def test_a_trial_being_claimed_by_a_live_worker_is_not_failed():
    """The worker's attributes land one write at a time; a recovery that reads the trial between
    the pid and its start time must not take the worker for dead (seen with four workers on
    PostgreSQL: a live worker's baseline was failed under it)."""
    study = optuna.create_study()
    trial = study.ask()
    trial.set_user_attr(schema.WORKER_HOST, platform.node())
    trial.set_user_attr(schema.WORKER_PID, os.getpid())
    assert recover(StudyHandle(study, None, SERVER_URL)) == []
    assert study.trials[0].state == TrialState.RUNNING
    trial.set_user_attr(schema.WORKER_STARTED, psutil.Process().create_time())
    assert recover(StudyHandle(study, None, SERVER_URL)) == []
    assert study.trials[0].state == TrialState.RUNNING


def test_a_trial_whose_heartbeat_went_stale_is_failed_and_requeued(tmp_path):
    """Another host's trial is assumed alive while its heartbeat is fresh; once its worker stops
    stamping it for longer than the grace period, any worker's recovery fails and re-queues it."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'hb.db'}", heartbeat_interval=1,
                                         grace_period=2)
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    trial.set_user_attr(schema.WORKER_HOST, "another-host")
    handle = StudyHandle(study, None, SERVER_URL)
    beats = Heartbeat(study._storage, lambda: [trial._trial_id])   # as the driver passes it
    try:
        time.sleep(3.5)  # past the grace period: only the heartbeat keeps it fresh
        assert recover(handle) == []
        assert study.trials[0].state == TrialState.RUNNING
    finally:
        beats.close()
    time.sleep(3.5)
    assert recover(handle) == ["trial 0 stopped sending heartbeats (its worker died): marked FAIL",
                               "trial 0 failed in the tuner: re-queued"]
    states = [t.state for t in study.trials]
    assert states == [TrialState.FAIL, TrialState.WAITING]
    assert study.trials[1].user_attrs[schema.RETRY_OF] == 0


def test_a_storage_without_heartbeat_starts_no_thread():
    beats = Heartbeat(optuna.storages.InMemoryStorage(), lambda: [0])
    assert beats._thread is None
    beats.close()
