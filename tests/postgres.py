"""A throw-away PostgreSQL 15 cluster for tests: initdb into a temp dir, a free port, torn down after."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from tuner.runtime.procgroup import free_port


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name)]
    return found[-1]


def available() -> bool:
    return bool(_bin("initdb") and _bin("pg_ctl"))


class Cluster:
    """As root the server runs as the `postgres` user (initdb refuses root)."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: that lives in a 0700 folder the postgres user cannot enter.
        base = Path(tempfile.mkdtemp(prefix="tuner-pg-", dir="/tmp"))
        os.chmod(base, 0o755)
        self.base, self.data, self.sock = base, base / "data", base / "sock"
        self.sock.mkdir(exist_ok=True)
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(base, "postgres")
            shutil.chown(self.sock, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        self.url = f"postgresql+psycopg2://tuner@127.0.0.1:{self.port}/postgres"
        self._run(_bin("initdb"), "-D", str(self.data), "--auth=trust", "-U", "tuner", "--no-sync")

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self.as_user, *cmd], check=True, capture_output=True, text=True)

    def start(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.base / "server.log"), "-w",
                  "-o", f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off",
                  "start")

    def stop(self, mode: str = "fast") -> None:
        subprocess.run([*self.as_user, _bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
                        "stop"], capture_output=True)


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    c.start()
    try:
        yield c
    finally:
        c.stop("immediate")
        shutil.rmtree(c.base, ignore_errors=True)
