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

from tuner.errors import HarnessError
from tuner.runtime import marker


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1", *, reuse_addr: bool = False) -> bool:
    """Bind test without SO_REUSEPORT: vLLM 0.11 sets it, so a second server would not fail.

    ``reuse_addr``: bind as the engines' servers do (uvicorn and vLLM set SO_REUSEADDR), so that the
    port counts as free while only closed connections linger on it (TIME_WAIT, 60 s on Linux after
    a server closes them); a socket still listening keeps it taken either way."""
    return bind_error(port, host, reuse_addr=reuse_addr) is None


def bind_error(port: int, host: str = "127.0.0.1", *, reuse_addr: bool = False) -> OSError | None:
    """Why ``port_is_free``'s bind fails, or None: EADDRINUSE when the port is taken, but also a
    host that does not resolve (``socket.gaierror``) or is no address of this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse_addr:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc
    return None


def group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


# After SIGKILL, this long for the kernel to take the processes away before giving up on them.
_KILL_WAIT_S = 5.0


class ProcessesSurvived(HarnessError):
    """Processes of a trial outlived SIGKILL (stuck in the kernel): they may hold GPU memory, so
    the trial must not pass as cleanly stopped."""


def living(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running: a zombie (dead, its parent or pid 1 has not reaped it yet) holds no
    memory, port or GPU, and pid 1 of a container may take a while to reap it."""
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            continue
    return left


def _remaining(pgid: int | None, marker_value: str | None,
               leader: subprocess.Popen | None) -> list[psutil.Process]:
    """What is left of the launch: its group's members and every process carrying its marker
    (those that left the group: their own session, or re-parented). Zombies hold nothing."""
    found = {p.pid: p for p in group_members(pgid)} if pgid is not None else {}
    # Our own child is waited for (and so reaped) until it has exited, whatever group it is in.
    if leader is not None and leader.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            found[leader.pid] = psutil.Process(leader.pid)
    if marker_value is not None:
        found.update({p.pid: p for p in marker.carrying(marker_value)})
    return living(list(found.values()))


def _signal(pgid: int | None, procs: list[psutil.Process], sig: signal.Signals) -> None:
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            p.send_signal(sig)


def _wait_gone(pgid: int | None, marker_value: str | None, seconds: float,
               leader: subprocess.Popen | None) -> list[psutil.Process]:
    """Wait until nothing of the launch is left; returns what still is at the deadline."""
    end = time.monotonic() + seconds
    while True:
        left = _remaining(pgid, marker_value, leader)
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.2)


def kill_group(pgid: int | None, grace_s: float = 10.0, leader: subprocess.Popen | None = None,
               marker_value: str | None = None) -> None:
    """SIGTERM the group and every process with the launch's marker, wait up to ``grace_s``,
    SIGKILL what is left (found afresh: a child may have left the group meanwhile) and check that
    it is gone, in ``grace_s + 5`` s at most. ``pgid`` None: only the marker (the leader is dead
    and its pid may belong to someone else by now).

    Raises ProcessesSurvived, naming them, when something outlives SIGKILL."""
    _signal(pgid, _remaining(None, marker_value, None), signal.SIGTERM)
    left = _wait_gone(pgid, marker_value, grace_s, leader)
    if left:
        _signal(pgid, left, signal.SIGKILL)
        left = _wait_gone(pgid, marker_value, _KILL_WAIT_S, leader)
    if not left and leader is not None:
        # Dead by now (a zombie at most): reap it, so its exit status is there for the caller.
        with contextlib.suppress(subprocess.TimeoutExpired):
            leader.wait(timeout=_KILL_WAIT_S)
    if left:
        raise ProcessesSurvived(
            "these processes outlived SIGKILL (stuck in the kernel, e.g. in a GPU driver call) "
            "and may still hold memory: " + ", ".join(f"pid {p.pid}" for p in left)
            + "; check them with `ps -o pid,stat,wchan,cmd -p PID` and restart the host if they stay")
