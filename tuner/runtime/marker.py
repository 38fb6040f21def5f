"""A marker in every engine's environment, so that all the processes a trial started can be found.

A process group is not enough: an engine's children may start their own session (vLLM's engine
core, multiprocessing resource trackers) or be re-parented to pid 1 when their parent dies, and
then neither the group nor the parent chain leads to them. The environment is inherited through
all of that, so each launch carries ``TUNER_TRIAL_MARKER=<study>/<trial>/<uuid>`` and the reapers
look for that exact value. Only processes of our own uid are read (``/proc/PID/environ`` of others
is not readable anyway), and a process is never chosen by its name.
"""

from __future__ import annotations

import os
import uuid

import psutil

MARKER_VAR = "TUNER_TRIAL_MARKER"


def new(study: str, trial: str) -> str:
    """A marker unique to one launch: the study and trial say whose it is, the uuid makes a retry
    or another machine's run of the same trial a different marker."""
    return f"{study}/{trial}/{uuid.uuid4().hex[:12]}"


def _environ(proc: psutil.Process) -> dict[str, str] | None:
    try:
        if proc.uids().real != os.getuid() or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def carrying(marker: str) -> list[psutil.Process]:
    """The live processes whose environment holds exactly this marker (not this process)."""
    return [p for p, env in marked() if env[MARKER_VAR] == marker]


def marked() -> list[tuple[psutil.Process, dict[str, str]]]:
    """Every live process of ours that carries a marker, with its environment (never this
    process: whoever scans is not the leak it looks for)."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        env = _environ(proc)
        if env and MARKER_VAR in env:
            found.append((proc, env))
    return found

