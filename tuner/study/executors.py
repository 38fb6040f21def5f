"""Where trials run: the executor registry (local, Ray; the replay benchmark adds its own).

The driver (``tuner.study.driver``) decides which trials run and records what they returned; an
executor only runs a ``TrialTask`` and hands back a ``TrialOutcome`` (or the exception that stopped
it). ``slots`` says how many may run at once: the local executor runs one, here, synchronously;
Ray runs one per free GPU slot of a cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tuner.errors import HarnessError
from tuner.registry import Registry
from tuner.runtime import orphans
from tuner.study.task import TrialTask, execute
from tuner.trial.runner import TrialOutcome


@dataclass
class Finished:
    """One task's end: its outcome, or the exception it raised (a HarnessError, a dead worker)."""

    key: Any
    outcome: TrialOutcome | None = None
    error: BaseException | None = None
    placement: dict | None = None  # where it ran, for trials that ran elsewhere


@dataclass(frozen=True)
class Hooks:
    """Callbacks from a running trial back to the driver (local executor only: a remote worker
    cannot call into the driver's process)."""

    on_phase: Callable[[str], None]
    on_started: Callable[[Any], None]


class Executor(Protocol):
    slots: int

    def submit(self, task: TrialTask, hooks: Hooks) -> Any:
        """Start the task; returns a key that ``wait`` hands back with its end."""

    def wait(self) -> Finished:
        """Block until one submitted task has ended."""

    def cancel(self, keys: list[Any]) -> None:
        """Stop these tasks at once (Ctrl-C): their engines must not outlive the driver."""

    def reap(self) -> list[str]:
        """Clean up what dead tuner processes left (engines, containers); what was done, for the
        terminal."""

    def close(self) -> None: ...


def reap_orphans() -> list[str]:
    """Kill the engines (and containers) that dead tuner processes left on this host."""
    return [f"killed orphaned engine process group {e.pgid} ({e.label})" for e in orphans.reap()]


EXECUTORS: Registry[Callable[..., Executor]] = Registry("executor")


@EXECUTORS.register("local")
class LocalExecutor:
    """One trial at a time, in this process: ``wait`` runs the submitted task."""

    slots = 1

    def __init__(self, handle: Any = None) -> None:
        self._pending: list[tuple[Any, TrialTask, Hooks]] = []

    def submit(self, task: TrialTask, hooks: Hooks) -> Any:
        self._pending.append((task.number, task, hooks))
        return task.number

    def wait(self) -> Finished:
        key, task, hooks = self._pending.pop(0)
        try:
            return Finished(key, execute(task, on_phase=hooks.on_phase, on_started=hooks.on_started))
        except HarnessError as exc:  # execute turns any surprise into one; InputError goes up
            return Finished(key, error=exc)

    def cancel(self, keys: list[Any]) -> None:
        self._pending.clear()  # the running one was stopped by the KeyboardInterrupt itself

    def reap(self) -> list[str]:
        return reap_orphans()

    def close(self) -> None:
        pass


def make_executor(name: str, handle: Any, **options: Any) -> Executor:
    return EXECUTORS.get(name)(handle, **options)

