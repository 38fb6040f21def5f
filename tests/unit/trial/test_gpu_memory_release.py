"""After a teardown the driver frees an exited engine's GPU memory a moment later: the record waits
for it (bounded), and what is still held past the bound is what a leaked process holds."""

from __future__ import annotations

import pytest

from tuner.trial import telemetry


def _readings(monkeypatch: pytest.MonkeyPatch, values: list[float]) -> None:
    it = iter(values)
    last = values[-1]
    monkeypatch.setattr(telemetry, "gpu_memory_in_use", lambda: {"0": next(it, last)})
    monkeypatch.setattr(telemetry.time, "sleep", lambda s: None)


def test_memory_freed_after_the_exit_is_recorded_as_released(monkeypatch: pytest.MonkeyPatch) -> None:
    _readings(monkeypatch, [615.0, 300.0, 0.0])   # what the H200 showed right after teardowns
    got = telemetry.gpu_memory_released({"0": 0.0}, timeout_s=5)
    assert got["held_mib"] == {"0": 0.0} and got["after_mib"] == {"0": 0.0}


def test_memory_still_held_at_the_bound_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _readings(monkeypatch, [20_000.0])
    got = telemetry.gpu_memory_released({"0": 0.0}, timeout_s=0.0)
    assert got["held_mib"] == {"0": 20_000.0}


def test_no_gpu_records_nothing() -> None:
    assert telemetry.gpu_memory_released(None) is None
