"""Finding a launch's processes by its marker: children that started their own session or whose
parent died are stopped and reaped too (real processes: a Python parent and a detached child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import wait_for
from tuner.runtime import marker, orphans
from tuner.runtime.procgroup import group_members, kill_group

# A parent that starts a child in its own session (as vLLM's engine core may end up) and sleeps;
# the child writes its pid to argv[1] and ignores SIGTERM, so only SIGKILL ends it.
_PARENT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time; "
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)", sys.argv[1]],
                 start_new_session=True)
time.sleep(600)
"""


def _dead(proc: psutil.Process) -> bool:
    """Gone, or a zombie (holding nothing) that this container's pid 1 may never reap."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def launch(tmp_path, monkeypatch):
    """Start the parent in its own group with a fresh marker; yields (parent, child, marker)."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    value = marker.new("unit", "trial-0000")
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(pidfile)], start_new_session=True,
                              env={**os.environ, marker.MARKER_VAR: value})
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), 30, "the child to start")
    child = psutil.Process(int(pidfile.read_text()))
    try:
        yield parent, child, value
    finally:
        for p in (parent, child):
            try:
                p.kill()
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass
        parent.wait(timeout=10)


def test_the_marker_finds_a_child_outside_the_group(launch):
    parent, child, value = launch
    assert child.pid not in {p.pid for p in group_members(parent.pid)}
    assert {p.pid for p in marker.carrying(value)} == {parent.pid, child.pid}
    assert marker.carrying(value + "x") == []  # exact match only


def test_kill_group_escalates_until_nothing_with_the_marker_is_left(launch):
    parent, child, value = launch
    t0 = time.monotonic()
    kill_group(parent.pid, grace_s=1, leader=parent, marker_value=value)
    assert time.monotonic() - t0 < 1 + 5
    assert _dead(child) and parent.poll() is not None
    assert marker.carrying(value) == []


def test_reap_finds_the_children_of_a_dead_leader(launch, tmp_path):
    parent, child, value = launch
    entry = orphans.register(parent.pid, "unit engine", marker_value=value)
    parent.kill()
    parent.wait(timeout=10)
    # The registering tuner died too: rewrite the entry with a dead owner.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead_owner = {**entry.__dict__, "owner_pid": gone.pid, "owner_started": 0.0}
    (orphans._dir() / f"{parent.pid}.json").write_text(json.dumps(dead_owner))
    assert [e.marker for e in orphans.reap()] == [value]
    assert _dead(child)
    assert orphans.orphans() == []


def test_what_outlives_sigkill_is_named_within_the_bound(launch, monkeypatch):
    """A process stuck in the kernel ignores SIGKILL; here the signals are simply not sent."""
    from tuner.runtime import procgroup

    parent, child, value = launch
    monkeypatch.setattr(procgroup, "_signal", lambda pgid, procs, sig: None)
    monkeypatch.setattr(procgroup, "_KILL_WAIT_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(procgroup.ProcessesSurvived, match=rf"pid {child.pid}\b"):
        kill_group(parent.pid, grace_s=0.5, leader=parent, marker_value=value)
    assert time.monotonic() - t0 < 0.5 + 0.5 + 2
