"""The leak guard (tests/leak_guard.py) on a planted leak: a test in an inner pytest run starts a
sleeping child with a tuner marker in its own session and leaves it behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psutil

from tests.helpers import REPO

_LEAKY_TEST = '''
import os, subprocess, sys

def test_leaves_a_marked_child_behind(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True,
                             env={**os.environ, "TUNER_TRIAL_MARKER": "planted/trial-0000/leak"})
    print("planted pid", child.pid)
'''


def test_the_guard_fails_the_run_lists_the_leak_and_kills_it(tmp_path):
    (tmp_path / "test_leaky.py").write_text(_LEAKY_TEST)
    inner = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.leak_guard", "-s",
                            "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                            str(tmp_path / "test_leaky.py")],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    out = inner.stdout + inner.stderr
    print(out)
    assert inner.returncode == 1, out
    assert "1 passed" in out  # the test itself passed: only the guard failed the run
    pid = int(re.search(r"planted pid (\d+)", out).group(1))
    assert re.search(rf"pid {pid} started by test_leaky.py::test_leaves_a_marked_child_behind "
                     r"\(call\) \(marker planted/trial-0000/leak\): \S*python\S* -c import time", out)
    try:
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped
    except psutil.NoSuchProcess:
        pass


def test_a_clean_run_passes(tmp_path):
    (tmp_path / "test_clean.py").write_text("def test_nothing():\n    pass\n")
    inner = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.leak_guard",
                            "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                            str(tmp_path / "test_clean.py")],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert inner.returncode == 0 and "leak guard" not in inner.stdout, inner.stdout
