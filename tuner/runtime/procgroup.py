"""Process groups and ports: the low-level pieces that teardown, the orphan registry, telemetry and the
dashboard share, kept apart from the launcher so that reading a study never imports the launch stack."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

import psutil


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Bind test without SO_REUSEPORT: vLLM 0.11 sets it, so a second server would not fail."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


def _wait_gone(pgid: int, seconds: float, leader: subprocess.Popen | None) -> bool:
    """Wait until no process of the group is left (reaping our own child); True if it emptied."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if leader is not None:
            leader.poll()
        if not group_members(pgid):
            return True
        time.sleep(0.1)
    return False


def kill_group(pgid: int, grace_s: float = 10.0, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the group, wait up to ``grace_s``, SIGKILL what is left, and wait until it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    if _wait_gone(pgid, grace_s, leader):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    _wait_gone(pgid, 10, leader)
