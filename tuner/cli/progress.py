"""The terminal view of a running study: trial k/N and its phase on one live line, and one line per
finished trial; nothing else (each trial's logs go to its own files)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from optuna.trial import FrozenTrial
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from tuner import study as study_mod
from tuner.cli.common import console
from tuner.record import results, schema


class ProgressReporter:
    """The study driver's reporter: what it calls as trials start, change phase and finish."""

    def __init__(self, progress: Progress, handle: study_mod.StudyHandle, total: int):
        self.progress = progress
        self.handle = handle
        self.label = "starting"
        self.task = progress.add_task(self.label, total=total,
                                      completed=study_mod.finished_count(handle.study))

    def trial_started(self, number: int, index: int, total: int, label: str) -> None:
        self.label = f"trial {number} ({index}/{total})"
        self.progress.update(self.task, description=f"{self.label}: launching")
        self.progress.console.print(f"[dim]trial {number}:[/] {label}", highlight=False)

    def phase(self, phase: str) -> None:
        self.progress.update(self.task, description=f"{self.label}: {phase}")

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]{message}[/]", highlight=False)

    def trial_finished(self, t: FrozenTrial) -> None:
        self.progress.console.print(f"  trial {t.number}: {outcome(t)}", highlight=False)
        self.progress.update(self.task, completed=study_mod.finished_count(self.handle.study))


def outcome(t: FrozenTrial) -> str:
    """One finished trial in a few words (rich markup): its values, or why it has none."""
    label = schema.status(t)
    ua = t.user_attrs
    if label == "ok":
        return "[green]ok[/] " + " / ".join(f"{v:,.1f}" for v in t.values)
    if label == "infeasible":
        return (f"[yellow]engine refused[/] {ua.get('failure_class')}: "
                f"{_short(ua.get('failure_evidence') or ua.get('failure_reason'))}")
    if label == "slo-violated":
        return f"[yellow]SLO violated[/] {ua.get('slo_slack')}"
    if label == "quality-failed":
        return f"[yellow]quality guardrail failed[/] {results.describe_quality(ua.get(schema.QUALITY))}"
    if label in ("pruned", "screened-out"):
        return f"[yellow]{label}[/] {ua.get('pruned_reason', '')}"
    if label == "reused":
        return f"[yellow]measured already[/] in trial {ua['reused_from']}: not launched again"
    return f"[red]{label}[/] {ua.get('harness_error', '')}"


def _short(text: str | None, limit: int = 160) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def study_progress(handle: study_mod.StudyHandle, total: int) -> Iterator[ProgressReporter]:
    """A live progress line for ``total`` trials of the study, gone when the block ends."""
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        yield ProgressReporter(progress, handle, total)
