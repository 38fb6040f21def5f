"""A throw-away PostgreSQL 15 cluster for tests: initdb into a temp dir, a free port, torn down after."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

from tuner.launcher import free_port


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name)]
    return found[-1]


def available() -> bool:
    return bool(_bin("initdb") and _bin("pg_ctl"))


@contextlib.contextmanager
def cluster(base: Path) -> Iterator[str]:
    """Yields a SQLAlchemy URL; as root the server runs as the `postgres` user (initdb refuses root)."""
    base.mkdir(parents=True, exist_ok=True)
    data, sock = base / "data", base / "sock"
    sock.mkdir(exist_ok=True)
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)
    run(_bin("initdb"), "-D", str(data), "--auth=trust", "-U", "tuner", "--no-sync")
    run(_bin("pg_ctl"), "-D", str(data), "-l", str(base / "server.log"), "-w", "-o",
        f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        yield f"postgresql+psycopg2://tuner@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, _bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True)
