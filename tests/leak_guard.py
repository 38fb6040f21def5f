"""A pytest plugin that fails the run when an engine outlives the test session.

The suite once passed while two ``VLLM::EngineCore`` processes (re-parented to pid 1, 1.7 GB each)
lived on for good: nothing looked. Every engine launch carries ``TUNER_TRIAL_MARKER``
(``tuner.runtime.marker``), so at the end of the session any live process with that variable is a
leak. The guard lists each one (pid, the test that started it, its command line), kills it so that
one leak does not starve every later run, and sets the exit status to failure.

Only this session's processes count: the session stamps ``TUNER_TEST_SESSION`` into its own
environment, which every process it starts inherits, so another run on a shared machine is never
reported or killed. Registered by ``tests/conftest.py``; ``-p tests.leak_guard`` loads it elsewhere.
"""

from __future__ import annotations

import os
import time
import uuid

import psutil
import pytest

from tuner.runtime import marker
from tuner.runtime.procgroup import ProcessesSurvived, kill_group

SESSION_VAR = "TUNER_TEST_SESSION"
# Processes a test's last teardown is still stopping get this long to end on their own.
_SETTLE_S = 3.0


def pytest_configure(config: pytest.Config) -> None:
    os.environ[SESSION_VAR] = uuid.uuid4().hex  # a new one: a pytest run inside a test is its own


def _leaks() -> list[tuple[psutil.Process, dict[str, str]]]:
    session = os.environ.get(SESSION_VAR)
    return [(p, env) for p, env in marker.marked() if env.get(SESSION_VAR) == session]


def _describe(proc: psutil.Process, env: dict[str, str]) -> str:
    try:
        cmd = " ".join(proc.cmdline()) or proc.name()
    except psutil.NoSuchProcess:
        cmd = "(exited meanwhile)"
    started_by = env.get("PYTEST_CURRENT_TEST", "outside any test")
    return (f"pid {proc.pid} started by {started_by} (marker {env[marker.MARKER_VAR]}): "
            f"{cmd[:300]}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    end = time.monotonic() + _SETTLE_S
    leaks = _leaks()
    while leaks and time.monotonic() < end:
        time.sleep(0.5)
        leaks = _leaks()
    if not leaks:
        return
    lines = [f"leak guard: {len(leaks)} process(es) started by this test session outlived it:"]
    lines += ["  " + _describe(p, env) for p, env in leaks]
    for value in sorted({env[marker.MARKER_VAR] for _, env in leaks}):
        try:
            kill_group(None, grace_s=2, marker_value=value)
        except ProcessesSurvived as exc:
            lines.append(f"  could not kill them: {exc}")
    lines.append("leak guard: killed them; the run fails (a leaked engine holds memory that "
                 "every later trial needs)")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
