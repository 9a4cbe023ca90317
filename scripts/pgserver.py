"""A throwaway PostgreSQL server for the lake tests and scripts.lake_bench: ``initdb`` and
``pg_ctl`` in a temporary directory, a Unix socket there, trust authentication. (.ci/run
installs Debian's postgresql where it is missing: ``make postgres``.)"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
from pathlib import Path

USER = "lake"


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                                                   reverse=True)), None)  # fmt: skip
    if not found:
        raise RuntimeError(f"no {name}: the lake tests need PostgreSQL (make postgres)")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """``start()`` a server under ``root``; ``lake(tmp)`` -> a lake string on a new database
    with its data path under ``tmp``; ``stop()``."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self._names = itertools.count()

    def _run(self, *cmd: str) -> None:
        # initdb and postgres refuse to run as root: as nobody then, in a directory it owns
        prefix = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
        out = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode:
            raise RuntimeError(f"{' '.join(cmd)}: {out.stdout[-2000:]}{out.stderr[-2000:]}")

    def start(self) -> Postgres:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "nobody")
        self._run(_bin("initdb"), "-D", str(self.data), "-U", USER, "-A", "trust", "--no-sync")
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-w", "-l", str(self.root / "log"),
                  "-o", f"-p {self.port} -k {self.root} -c listen_addresses='' -c fsync=off",
                  "start")  # fmt: skip
        return self

    def stop(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")

    def database(self) -> str:
        name = f"lake{next(self._names)}"
        self._run(_bin("createdb"), "-h", str(self.root), "-p", str(self.port), "-U", USER, name)
        return name

    def lake(self, tmp: Path) -> str:
        """A new, empty lake: its catalog a new database, its data under ``tmp/lake-data``."""
        return (f"ducklake:postgres:dbname={self.database()} host={self.root} port={self.port} "
                f"user={USER} data_path={tmp / 'lake-data'}/")  # fmt: skip
