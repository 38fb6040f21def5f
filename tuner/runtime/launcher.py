"""Start an engine server as its own process group, wait until it serves, and take it down again.

Engines are external commands (each may live in its own venv, or in a container image: see
``container.py``), started from an argv list, never a shell. Readiness is ``GET <health path>``
answering 200 while the process lives; a process that dies first is noticed within a second and
classified from its log, instead of waiting out a timeout.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tuner.configs.translate import LaunchPlan
from tuner.engines.failures import Failure, classify_exit, startup_timeout
from tuner.engines.installed import folder_launch, read_record
from tuner.engines.runtimes import with_runtime_failures
from tuner.engines.spec import EngineSpec, load_engine
from tuner.errors import InputError
from tuner.paths import expand
from tuner.redact import redact_argv, redact_env
from tuner.runtime import container, interrupts, marker, orphans
from tuner.runtime.container import Image
from tuner.runtime.procgroup import kill_group, port_is_free
from tuner.space import EngineChoice

_POLL_S = 0.25


class EngineCommandNotFound(InputError):
    pass


class EngineStartFailed(Exception):
    def __init__(self, failure: Failure):
        super().__init__(f"{failure.failure_class}: {failure.reason}")
        self.failure = failure






def check_command(argv0: str) -> None:
    """Fail before the study starts when the configured engine command does not exist."""
    import shutil
    if os.sep in argv0:
        if not (os.path.isfile(argv0) and os.access(argv0, os.X_OK)):
            raise EngineCommandNotFound(
                f"engine command {argv0!r} does not exist or is not executable "
                "(set `command:` for this engine in the space, or run scripts/setup_engines.sh)")
    elif shutil.which(argv0) is None:
        raise EngineCommandNotFound(
            f"engine command {argv0!r} is not on PATH "
            "(set `command:` for this engine in the space to the binary in the engine's venv)")


def check_launchable(engine: str, choice: EngineChoice) -> None:
    """Fail before a study starts when an engine cannot be launched here: its command is missing,
    or, in a container, the runtime or the image is (the message says to pull it)."""
    if choice.container is not None:
        container.inspect_image(choice.container.runtime, choice.container.image)
    elif choice.install is not None:
        folder = Path(expand(choice.install))
        read_record(folder)  # a folder that no kit installed fails here, with the install command
        check_command(expand(choice.command[0]) if choice.command
                      else folder_launch(load_engine(engine), folder).command[0])
    else:
        check_command(expand((choice.command or load_engine(engine).command)[0]))








@dataclass
class Server:
    plan: LaunchPlan
    spec: EngineSpec
    proc: subprocess.Popen
    log_path: Path
    image: Image | None = None  # the container image, as inspected just before the launch
    marker: str | None = None  # TUNER_TRIAL_MARKER in its environment (tuner.runtime.marker)

    @property
    def pgid(self) -> int:
        """The group we started: the engine's, or in a container the ``docker run`` client's."""
        return self.proc.pid  # start_new_session makes the leader's pid the group id

    @property
    def engine_pgid(self) -> int:
        """The group of the engine's own processes (for telemetry): in a container they are the
        daemon's children, in the group of the container's first process."""
        c = self.plan.container
        if c is None:
            return self.pgid
        return container.main_pid(c.runtime, self._container_ref()) or self.pgid

    def _cidfile(self) -> Path:
        return self.log_path.parent / self.plan.container.cidfile  # relative to the launch's cwd

    def _container_ref(self) -> str:
        return container.read_cid(self._cidfile()) or self.plan.container.name

    @property
    def base_url(self) -> str:
        return f"http://{self.plan.host}:{self.plan.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, grace_s: float = 10.0) -> None:
        """End the group; a container is then removed by the id its runtime wrote (by name if it
        wrote none yet). A failed removal keeps the registry entry, for ``tune resume``; after a
        removal the id file goes too, so the recorded ``docker run`` line can be run again. A
        Ctrl-C meanwhile waits until the engine is down."""
        with interrupts.deferred():
            kill_group(self.pgid, grace_s, leader=self.proc, marker_value=self.marker)
            if self.plan.container is not None:
                container.remove(self.plan.container.runtime, self._container_ref())
                self._cidfile().unlink(missing_ok=True)
            orphans.unregister(self.pgid)
        # Until nothing listens on the port. The connections the server closed linger (TIME_WAIT)
        # but keep no engine from binding it: a strict bind test would wait out the 10 s here
        # after every benchmark.
        end = time.monotonic() + 10
        while (not port_is_free(self.plan.port, self.plan.host, reuse_addr=True)
               and time.monotonic() < end):
            time.sleep(0.2)


def start(plan: LaunchPlan, spec: EngineSpec, log_path: Path, marker_value: str | None = None) -> Server:
    """Launch the server; returns at once: ``wait_ready`` waits for it, ``Server.stop`` ends it.

    ``marker_value`` (a new one by default) goes into the engine's environment, so that stopping
    and reaping find its processes wherever they went (``tuner.runtime.marker``)."""
    if not port_is_free(plan.port, plan.host):
        raise EngineStartFailed(Failure("port-in-use", f"port {plan.port} is taken before launch",
                                        f"bind {plan.host}:{plan.port} failed"))
    image = None
    if plan.container is not None:
        image = container.inspect_image(plan.container.runtime, plan.container.image)
        spec = with_runtime_failures(spec)
    else:
        check_command(plan.argv[0])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    marker_value = marker_value or marker.new("launch", log_path.parent.name)
    env = {**os.environ, **plan.env, marker.MARKER_VAR: marker_value}
    with open(log_path, "ab") as log:
        header = (f"# tuner: launching {plan.engine}\n# argv: {redact_argv(plan.argv)}\n"
                  f"# env: {redact_env(plan.env)}\n")
        if image is not None:
            header += f"# image: {image.describe()}\n"
        log.write(header.encode())
        log.flush()
        try:
            proc = subprocess.Popen(plan.argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    cwd=log_path.parent)
        except FileNotFoundError:
            raise EngineCommandNotFound(f"engine command {plan.argv[0]!r} not found") from None
    server = Server(plan, spec, proc, log_path, image, marker_value)
    c = plan.container
    if c is None:
        orphans.register(proc.pid, f"{plan.engine} on port {plan.port}", marker_value=marker_value)
    else:
        orphans.register(proc.pid, f"{plan.engine} on port {plan.port} in container {c.name}",
                         container=c.name, runtime=c.runtime, marker_value=marker_value)
    return server


def wait_ready(server: Server, timeout_s: float) -> float:
    """Block until the health endpoint answers 200; returns seconds waited.

    Raises EngineStartFailed (after killing the group) when the process dies or the deadline passes.
    """
    t0 = time.monotonic()
    url = server.base_url + server.spec.readiness.path
    with httpx.Client(timeout=server.spec.readiness.probe_timeout_s) as client:
        while True:
            rc = server.proc.poll()
            if rc is not None:
                server.stop(grace_s=2)
                raise EngineStartFailed(classify_exit(server.spec, server.log_text(), rc))
            try:
                if client.get(url).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout_s:
                server.stop(grace_s=5)
                raise EngineStartFailed(startup_timeout(server.spec, timeout_s, server.log_text()))
            time.sleep(_POLL_S)
