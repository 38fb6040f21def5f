"""Trial heartbeats in a server database that several workers share (PostgreSQL, MySQL).

Optuna stamps a trial's heartbeat only inside ``Study.optimize``; the driver asks and tells by
itself, so it keeps the stamps here. Without them a worker that dies on another host leaves its
trial RUNNING for good, and the others, who count running trials against the budget, wait for it
forever. SQLite and journal studies have no heartbeat: SQLite is single-writer, and a journal's
workers are judged by their pid (``recovery``)."""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Callable, Iterable

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

log = logging.getLogger(__name__)


def interval_s(storage: BaseStorage) -> int | None:
    """The storage's heartbeat interval; None where it keeps no heartbeat."""
    get = getattr(storage, "get_heartbeat_interval", None)
    return get() if get is not None else None


class Heartbeat:
    """One thread that stamps every trial this worker holds, each interval, until ``close``.

    ``trial_ids`` is read on the thread: it must return a snapshot (the driver's asked-and-not-told
    trials, the ones it launches and the ones it holds for a twin's result)."""

    def __init__(self, storage: BaseStorage, trial_ids: Callable[[], Iterable[int]]) -> None:
        self._storage, self._trial_ids = storage, trial_ids
        self._interval = interval_s(storage)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._interval:
            self._thread = threading.Thread(target=self._beat, name="tuner-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while True:
            for trial_id in self._trial_ids():
                try:
                    self._storage.record_heartbeat(trial_id)
                except Exception as exc:  # the database is away for a moment: stamp next time
                    log.warning("heartbeat of trial id %s not recorded: %s", trial_id, exc)
            if self._stop.wait(self._interval):
                return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def fail_stale(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials whose heartbeat went stale (past the storage's grace period);
    returns their numbers. Trials never stamped are left alone: their worker may be starting."""
    if not interval_s(study._storage):
        return []
    running = {t._trial_id: t.number
               for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if not running:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    return sorted(running[t._trial_id] for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                  if t._trial_id in running)
