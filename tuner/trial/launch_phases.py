"""Where a launch's time goes: the engine's own timings of its start-up phases, read from its log.

Which lines time which phase is engine data (``launch_phases`` in engines/<name>.yaml); this module
applies it. A phase the log does not time is left out, never zero: a CPU launch with
``--enforce-eager`` has no compile and no graphs, and an engine that does not log a phase says
nothing about it. ``other_s`` is the rest of the launch (process start, imports, the API server,
the first health probe), known only when the launch's wall-clock time is.
"""

from __future__ import annotations

import re

from tuner.engines.spec import LAUNCH_PHASES, LaunchPhases, PhaseReading

COMPILE_CACHE_HIT = "compile_cache_hit"
OTHER = "other_s"


def _seconds(reading: PhaseReading, log_text: str) -> float | None:
    """The longest of the reading's matches: ranks log the same phase side by side."""
    values = [_as_seconds(m.group(1)) for m in re.finditer(reading.pattern, log_text)]
    return max(values) if values else None


def _as_seconds(text: str) -> float:
    """Seconds, or a progress bar's elapsed time: MM:SS or H:MM:SS."""
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def read_phases(spec: LaunchPhases, log_text: str) -> dict[str, float | bool]:
    """The phases the log times, in seconds, and whether compiled graphs came from the cache."""
    raw: dict[str, float] = {}
    for phase in LAUNCH_PHASES:
        readings = getattr(spec, phase)
        for fallback in (False, True):
            found = [s for r in readings if r.fallback is fallback
                     and (s := _seconds(r, log_text)) is not None]
            if found:
                raw[phase] = sum(found)
                break
    phases: dict[str, float | bool] = {}
    for phase, seconds in raw.items():
        less = {p for r in getattr(spec, phase) for p in r.less}
        phases[phase] = round(max(0.0, seconds - sum(raw.get(p, 0.0) for p in less)), 2)
    cache = spec.compile_cache
    if cache is not None:
        if any(p in log_text for p in cache.miss):
            phases[COMPILE_CACHE_HIT] = False
        elif any(p in log_text for p in cache.hit):
            phases[COMPILE_CACHE_HIT] = True
    return phases


def breakdown(spec: LaunchPhases, log_text: str, launch_s: float | None) -> dict[str, float | bool]:
    """``read_phases`` plus ``other_s``: the launch's seconds that no phase accounts for."""
    phases = read_phases(spec, log_text)
    if launch_s is not None and any(p in phases for p in LAUNCH_PHASES):
        timed = sum(float(phases[p]) for p in LAUNCH_PHASES if p in phases)
        phases[OTHER] = round(max(0.0, launch_s - timed), 2)
    return phases
