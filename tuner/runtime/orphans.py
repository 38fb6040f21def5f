"""A registry of the engine process groups this machine's tuner processes launched.

Engines run in their own sessions so Ctrl-C reaches only the tuner, which then stops them. When the
tuner is killed outright (SIGKILL, a lost Ray driver) nobody stops them; the registry lets the next
run find exactly those groups — never anyone else's — and reap them. An engine in a container is
not in the group (the group is its ``docker run`` client; the container is the daemon's), so its
entry names the container too, and reaping removes it even when the client is gone.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from tuner.files import write_atomic
from tuner.paths import cache_dir
from tuner.runtime import container as containers
from tuner.runtime import marker


@dataclass(frozen=True)
class Entry:
    pgid: int
    leader_started: float
    owner_pid: int
    owner_started: float
    label: str
    container: str | None = None  # its name, for an engine in a container
    runtime: str | None = None
    marker: str | None = None  # TUNER_TRIAL_MARKER of the launch (entries written before it: None)

    def owner_alive(self) -> bool:
        return same_process(self.owner_pid, self.owner_started)

    def leader_alive(self) -> bool:
        return same_process(self.pgid, self.leader_started)

    def engine_alive(self) -> bool:
        """The leader, or any process that carries the launch's marker (children outlive a dead
        leader: re-parented, or in their own session), or its container."""
        return (self.leader_alive() or bool(self.marker and marker.carrying(self.marker))
                or (self.container is not None and containers.exists(self.runtime, self.container)))


def same_process(pid: int, started: float) -> bool:
    """Is ``pid`` still the process that started at ``started`` (not a recycled pid)?"""
    try:
        return abs(psutil.Process(pid).create_time() - started) < 0.01
    except psutil.NoSuchProcess:
        return False


def _dir() -> Path:
    d = cache_dir() / "running"
    d.mkdir(parents=True, exist_ok=True)
    return d


def register(pgid: int, label: str, *, container: str | None = None,
             runtime: str | None = None, marker_value: str | None = None) -> Entry:
    me = psutil.Process()
    entry = Entry(pgid, psutil.Process(pgid).create_time(), me.pid, me.create_time(), label,
                  container, runtime, marker_value)
    write_atomic(_dir() / f"{pgid}.json", json.dumps(asdict(entry)))
    return entry


def unregister(pgid: int) -> None:
    (_dir() / f"{pgid}.json").unlink(missing_ok=True)


def orphans() -> list[Entry]:
    """Engines whose launching process is gone but which still run."""
    found = []
    for path in _dir().glob("*.json"):
        try:
            entry = Entry(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if entry.owner_alive():
            continue
        if entry.engine_alive():
            found.append(entry)
        else:
            path.unlink(missing_ok=True)
    return found


def reap() -> list[Entry]:
    """Kill every orphaned engine group and remove its container; returns what was reaped."""
    from tuner.runtime.procgroup import kill_group
    killed = []
    for entry in orphans():
        if entry.pgid == os.getpgid(0):
            unregister(entry.pgid)
            continue
        # A dead leader's pid may be someone else's by now: then only the marker says what is ours.
        kill_group(entry.pgid if entry.leader_alive() else None, grace_s=5,
                   marker_value=entry.marker)
        if entry.container is not None:
            containers.remove(entry.runtime, entry.container)
        killed.append(entry)
        unregister(entry.pgid)
    return killed
