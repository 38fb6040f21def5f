"""Making an interrupted study runnable again, and keeping two processes off one SQLite study.

A killed tuner leaves engines running and trials RUNNING; ``recover`` reaps the engines, fails the
orphaned trials and re-queues each failed one once. SIGTERM takes the same path as Ctrl-C."""

from __future__ import annotations

import contextlib
import fcntl
import platform
import signal
from typing import Iterator

import psutil
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import InputError
from tuner.record import schema
from tuner.record.storage import sqlite_path
from tuner.runtime import marker, orphans
from tuner.runtime.procgroup import kill_group
from tuner.study import heartbeat
from tuner.study.lifecycle import StudyHandle


def _owner_alive(t: FrozenTrial, *, exclusive: bool) -> bool:
    """Is the worker that owns this RUNNING trial still alive? Other hosts are assumed alive
    (the storage heartbeat, where there is one, fails their stale trials), and so is a trial just
    asked for whose worker has not finished stamping it (its attributes land one at a time) —
    unless this process holds the study alone (SQLite), in which case nobody else can be
    running it."""
    if t.user_attrs.get(schema.WORKER_HOST) not in (None, platform.node()):
        return True
    pid, started = t.user_attrs.get(schema.WORKER_PID), t.user_attrs.get(schema.WORKER_STARTED)
    if pid is None or started is None:
        return not exclusive
    return orphans.same_process(pid, started)


def recover(handle: StudyHandle) -> list[str]:
    """Make an interrupted study runnable again; returns what was done, for the terminal.

    RUNNING trials whose worker is gone are failed, after every process that still carries their
    engine's marker is killed (on this host: the registry-based reap misses children that left a
    dead leader's group, and a launch killed before it was registered); so are the trials of a
    server database whose heartbeat went stale (their worker died on any host); every FAIL trial
    that is not itself a retry is re-queued once.
    """
    notes = []
    study = handle.study
    notes.extend(f"trial {n} stopped sending heartbeats (its worker died): marked FAIL"
                 for n in heartbeat.fail_stale(study))
    exclusive = sqlite_path(handle.url) is not None  # run() holds the single-writer lock
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _owner_alive(t, exclusive=exclusive):
            continue
        notes.extend(_kill_leftovers(t))
        study._storage.set_trial_user_attr(t._trial_id, schema.INTERRUPTED, True)
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        notes.append(f"trial {t.number} was running when its tuner process died: marked FAIL")
    for t in schema.awaiting_retry(study.get_trials(deepcopy=False)):
        attrs = {schema.RETRY_OF: t.number}
        # A retried `tune confirm` repeat is still that repeat (tune best: confirm_pending).
        attrs.update({k: t.user_attrs[k] for k in (schema.ARM, schema.ENGINE, schema.OMIT, schema.REPEAT_OF)
                      if k in t.user_attrs})
        study.enqueue_trial(t.params, user_attrs=attrs)
        why = "was interrupted" if t.user_attrs.get(schema.INTERRUPTED) else "failed in the tuner"
        notes.append(f"trial {t.number} {why}: re-queued")
    return notes


def _kill_leftovers(t: FrozenTrial) -> list[str]:
    value = t.user_attrs.get(schema.ENGINE_MARKER)
    left = marker.carrying(value) if value else []
    if not left:
        return []
    kill_group(None, grace_s=5, marker_value=value)
    return [f"trial {t.number}: killed {len(left)} leftover engine processes "
            f"(pids {', '.join(str(p.pid) for p in left)}, marker {value})"]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (e.g. from a scheduler) takes the same clean path as Ctrl-C."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def single_writer(url: str) -> Iterator[None]:
    """Refuse a second process on one SQLite study: SQLite has no row locks, and concurrent
    workers race for enqueued trials ("database is locked", duplicated baselines)."""
    db = sqlite_path(url)
    if db is None:
        yield
        return
    lock_path = db.with_name(db.name + ".lock")
    with open(lock_path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise InputError(
                f"{db} is in use by {holder}. SQLite is not safe for several workers: run one "
                "process per SQLite study, or share a PostgreSQL (--storage postgresql://...) "
                "or journal-file (--storage journal:///path/study.journal) storage") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {psutil.Process().pid} on {platform.node()}")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
