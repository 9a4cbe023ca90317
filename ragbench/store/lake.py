"""A DuckLake results store: the catalog in Postgres, the data as Parquet files in a directory
or an object-store prefix, so that many runners write one history (docs/store.md).

A lake is named by one string, given wherever a store path is (``--store``,
``$RAGBENCH_STORE``)::

    ducklake:postgres:dbname=perf host=db.lan user=ragbench data_path=s3://perf-lake/data/

``ducklake:`` and the catalog as DuckLake reads it (``postgres:`` and a libpq connection
string; a DuckDB file, ``ducklake:meta.ducklake``, makes a lake of one writer), and
``data_path=`` where the Parquet files go (needed when the lake is created, read from the
catalog after): a directory every runner mounts, or an S3 prefix (``s3://bucket/prefix/``;
any S3-compatible store). The password comes from ``$PGPASSWORD`` or ``~/.pgpass`` (libpq),
never from the string, which is printed. An S3 data path, or ``$AWS_ACCESS_KEY_ID`` set, loads
DuckDB's ``httpfs`` and makes a DuckDB secret of the ``AWS_*`` variables (``_s3_secret``).

DuckDB loads the ``ducklake``, ``postgres_scanner`` and ``httpfs`` extensions from the
``duckdb-ext-*`` wheels where they are installed (the ``lake`` extra; no download), else
``INSTALL``s them (a runner with network).

A postgres catalog is attached with timeouts (``Lake.conninfo``): libpq's ``connect_timeout``
(``CONNECT_TIMEOUT``) and the server's ``statement_timeout`` and ``lock_timeout``
(``OPTIONS``), each unless the string gives its own. A server that stops answering altogether
(its processes stopped) enforces no timeout of its own and libpq waits for ever on a
connection made before, so every store operation is also watched (``Lake.watch``): one that
runs past ``connect_timeout`` seconds makes ragbench ask the server on a new connection (a
plain socket), and when that is not answered either, this process's connections to it are
shut, which fails the operation instead of leaving it waiting.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlparse

# Every connection, the file's and the lake's: no extension is ever loaded on its own (a SQLite
# or Parquet file must not make DuckDB download one and open it).
DUCKDB_CONFIG = {"autoload_known_extensions": False, "autoinstall_known_extensions": False}


def quiet(con):
    """``con`` without DuckDB's progress bar, which it draws on stdout for a query past 2 s: a
    loaded machine gets there, and the bar corrupted a reader's JSON output
    (tests/test_faults.py::test_two_writers_and_a_reader, at load ~20). A connection setting
    only: DuckDB refuses it in the connect config."""
    con.execute("SET enable_progress_bar = false")
    return con


PREFIX = "ducklake:"
ALIAS = "lake"  # the lake's name in the connection; ``USE lake`` makes it the default
# Conflicting commits (two writers deleted the same row of ``meta``: ``Store._guard``) fail
# with this in DuckDB's message; the loser retries its whole transaction.
CONFLICT = "conflict"
OBJECT_STORES = ("s3://", "s3a://", "r2://", "gcs://", "gs://")  # what httpfs reads
# A postgres catalog's timeouts unless the lake string sets them (docs/store.md). connect, in
# seconds (libpq takes no less than 2): a server that answers does so in well under one; the
# watch's question is a new connection too, so a server that stopped answering fails an
# operation after about twice this (20-25 s here), within 30 s.
CONNECT_TIMEOUT = 10
# The server's: a catalog statement takes milliseconds (DuckLake's commit of a run is about
# ten of them, 60 ms in all), a lock is held for one commit.
OPTIONS = "-c statement_timeout=60s -c lock_timeout=30s"
URI = ("postgres://", "postgresql://")
SSL_REQUEST = struct.pack("!ii", 8, 80877103)  # PostgreSQL's protocol: "may I speak TLS?"


def is_lake(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


@dataclass(frozen=True)
class Lake:
    """A parsed lake string: ``catalog`` (what DuckLake attaches, ``postgres:...``) and
    ``data_path`` (None: the one the catalog recorded when the lake was made)."""

    catalog: str
    data_path: str | None = None

    @classmethod
    def parse(cls, spec: str) -> Lake:
        rest = spec[len(PREFIX) :].strip()
        data_path = None
        words = []
        for word in rest.split():
            if word.startswith("data_path="):
                data_path = word.split("=", 1)[1]
                if not data_path:
                    raise ValueError(f"{redact(spec)!r}: data_path= names no directory or "
                                     "prefix (a path without spaces)")  # fmt: skip
            else:
                words.append(word)
        catalog = " ".join(words)
        if not catalog or catalog in ("postgres:", "postgresql:"):
            raise ValueError(f"{redact(spec)!r} names no catalog: ducklake:postgres:dbname=... "
                             "or ducklake:FILE.ducklake")  # fmt: skip
        return cls(catalog, data_path)

    @property
    def name(self) -> str:
        """The string, with any password hidden: what messages print."""
        return redact(PREFIX + self.catalog + (f" data_path={self.data_path}"
                                               if self.data_path else ""))  # fmt: skip

    @property
    def postgres(self) -> bool:
        return self.catalog.startswith(("postgres:", "postgresql:"))

    @property
    def _libpq(self) -> str:
        """The postgres catalog's libpq connection string, as given."""
        return self.catalog.partition(":")[2]

    def _setting(self, key: str) -> str | None:
        """A libpq keyword's value in the string (key=value words, or a URI's query)."""
        info = self._libpq
        if info.startswith(URI):
            parsed = urlparse(info)
            if key == "host" and parsed.hostname:
                return parsed.hostname
            if key == "port" and parsed.port:
                return str(parsed.port)
            return (parse_qs(parsed.query).get(key) or [None])[0]
        found = re.search(rf"(?:^|\s){key}\s*=\s*('[^']*'|\S+)", info)
        return found.group(1).strip("'") if found else None

    @property
    def conninfo(self) -> str:
        """The catalog as DuckLake attaches it: a postgres one with ``connect_timeout`` and the
        server's timeouts (``OPTIONS``) where the string gives none."""
        if not self.postgres:
            return self.catalog
        add = {k: v for k, v in (("connect_timeout", str(CONNECT_TIMEOUT)), ("options", OPTIONS))
               if self._setting(k) is None}  # fmt: skip
        if not add:
            return self.catalog
        if self._libpq.startswith(URI):
            query = urlencode(add, quote_via=quote)
            return self.catalog + ("&" if "?" in self.catalog else "?") + query
        return self.catalog + "".join(f" {k}='{v}'" for k, v in add.items())

    @property
    def timeout(self) -> int:
        """How long the catalog may take to answer, in seconds: its ``connect_timeout``."""
        try:
            return max(2, int(self._setting("connect_timeout") or CONNECT_TIMEOUT))
        except ValueError:
            return CONNECT_TIMEOUT

    @property
    def port(self) -> int:
        ports = self._setting("port") or os.environ.get("PGPORT") or "5432"
        first = ports.split(",")[0]  # a list of hosts' ports: the first one's
        return int(first) if first.isdigit() else 5432

    def unanswered(self) -> str:
        """What to say when the catalog did not answer: one line, what to check."""
        host = self._setting("host") or os.environ.get("PGHOST") or "localhost"
        return (f"the lake's catalog, PostgreSQL at {host} port {self.port}, did not answer "
                f"within {self.timeout} s: check that the server is running and reachable "
                f"(pg_isready -h {host} -p {self.port}); connect_timeout= in the store string "
                "sets the wait")  # fmt: skip

    def _addresses(self) -> list[tuple]:
        """Where libpq connects to (the first host): (family, address) of each candidate."""
        host = self._setting("hostaddr") or self._setting("host") or os.environ.get("PGHOST")
        host = unquote(host.split(",")[0]) if host else None
        if not host or host.startswith("/"):  # a Unix socket: libpq's default directories
            dirs = [host] if host else ["/var/run/postgresql", "/tmp"]
            return [(socket.AF_UNIX, f"{d}/.s.PGSQL.{self.port}") for d in dirs]
        try:
            found = socket.getaddrinfo(host, self.port, type=socket.SOCK_STREAM)
        except OSError:
            return []
        return [(family, address) for family, _, _, _, address in found]

    def answers(self) -> bool:
        """Whether the catalog's server answers a new connection within ``timeout`` seconds:
        its first message (an SSLRequest, which a server answers at once, before any password),
        sent without libpq, so that no thread is left inside DuckDB when the process ends. Only
        silence is no answer: a refused connection, or an address that cannot be read, is one
        (the operation's own error then says more)."""
        for family, address in self._addresses():
            try:
                with socket.socket(family, socket.SOCK_STREAM) as sock:
                    sock.settimeout(self.timeout)
                    sock.connect(address)
                    sock.sendall(SSL_REQUEST)
                    sock.recv(1)
                return True
            except TimeoutError:
                return False
            except OSError:  # no such socket, refused: the next address
                continue
        return True

    @contextlib.contextmanager
    def watch(self) -> Iterator[list]:
        """Around one operation on the lake: when it runs past ``timeout`` seconds and the
        catalog does not answer a new connection (``answers``) either, this process's
        connections to the catalog's port are shut (``cut``), so that the operation fails at
        once. Yields a list that holds True once that happened."""
        fired: list = []
        if not self.postgres:
            yield fired
            return
        done = threading.Event()

        def guard():
            while not done.wait(self.timeout):
                if not self.answers() and not done.is_set():
                    fired.append(True)
                    cut(self.port)
                    return

        threading.Thread(target=guard, daemon=True, name="ragbench-catalog-watch").start()
        try:
            yield fired
        finally:
            done.set()

    @property
    def object_store(self) -> bool:
        return (self.data_path or "").startswith(OBJECT_STORES) or bool(
            os.environ.get("AWS_ACCESS_KEY_ID")
        )

    def attach(self, con, alias: str = ALIAS, read_only: bool = False) -> None:
        """Load the extensions into ``con`` and attach the lake as ``alias``."""
        import duckdb

        load_extensions(con, ("postgres_scanner", "ducklake") if self.postgres else ("ducklake",))
        if self.object_store:
            load_extensions(con, ("httpfs",))
            secret = _s3_secret()
            if secret:
                con.execute(secret)
        options = []
        if self.data_path:
            options.append(f"DATA_PATH {_quote(self.data_path)}")
        if read_only:
            options.append("READ_ONLY")
        opts = f" ({', '.join(options)})" if options else ""
        for attempt in range(20):
            try:
                con.execute(f"ATTACH {_quote(PREFIX + self.conninfo)} AS {alias}{opts}")
                return
            except duckdb.Error as exc:
                # runners that attach a new lake at once race to make its catalog tables:
                # the losers find them made, and attach again
                text = str(exc)
                if attempt == 19 or not ("already exists" in text or "duplicate key" in text):
                    raise
                time.sleep(random.uniform(0.05, 0.2))

    def connect(self, read_only: bool = False):
        """An in-memory DuckDB with the lake attached (read-only: a reader never makes a
        lake, nor writes a catalog) and in use."""
        import duckdb

        con = quiet(duckdb.connect(config=DUCKDB_CONFIG))
        self.attach(con, read_only=read_only)
        con.execute(f"USE {ALIAS}")
        return con


def _s3_secret() -> str | None:
    """``CREATE SECRET`` of the AWS variables, as the AWS tools read them (key, secret, session
    token, region; ``$AWS_ENDPOINT_URL`` for an S3-compatible server, path-style then), or None
    without ``$AWS_ACCESS_KEY_ID`` (DuckDB's own defaults apply)."""
    env = os.environ
    if not env.get("AWS_ACCESS_KEY_ID"):
        return None
    options = {"KEY_ID": env["AWS_ACCESS_KEY_ID"], "SECRET": env.get("AWS_SECRET_ACCESS_KEY"),
               "SESSION_TOKEN": env.get("AWS_SESSION_TOKEN"),
               "REGION": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")}  # fmt: skip
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    text = [f"{k} {_quote(v)}" for k, v in options.items() if v]
    if endpoint:
        url = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        text += [f"ENDPOINT {_quote(url.netloc)}", "URL_STYLE 'path'",
                 f"USE_SSL {str(url.scheme == 'https').lower()}"]  # fmt: skip
    return f"CREATE OR REPLACE SECRET ragbench_s3 (TYPE s3, {', '.join(text)})"


def is_unanswered(exc: BaseException) -> bool:
    """Whether an error is libpq's connect_timeout: the server did not answer."""
    return "timeout expired" in str(exc)


def cut(port: int) -> int:
    """Shut this process's sockets connected to PostgreSQL's ``port`` (TCP, or its Unix socket
    ``.s.PGSQL.<port>``): a call waiting on one then fails with "server closed the connection".
    Shutting a socket, unlike closing it, leaves the file descriptor to its owner (libpq), which
    closes it as usual. -> how many."""
    fds = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    shut = 0
    for name in os.listdir(fds):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except (ValueError, OSError):  # not a socket (or closed meanwhile)
            continue
        with sock:  # closes the duplicate only
            try:
                peer = sock.getpeername()
            except OSError:
                continue
            if (isinstance(peer, str) and peer.endswith(f".s.PGSQL.{port}")) or (
                isinstance(peer, tuple) and peer[1] == port
            ):
                sock.shutdown(socket.SHUT_RDWR)
                shut += 1
    return shut


def one_line(text: str) -> str:
    """An error's text on one line (DuckDB's quote SQL and libpq's end in blank lines)."""
    return " ".join(text.split())


def redact(text: str) -> str:
    """``text`` with every password hidden (DuckDB's errors quote the connection string):
    ``password=x``, ``password = 'x y'`` and a URI's ``user:x@``."""
    text = re.sub(r"""(password\s*=\s*)('[^']*'?|"[^"]*"?|[^\s'"]+)""", r"\1***", text)
    return re.sub(r"(://[^/:@\s]*:)[^@/\s]+@", r"\1***@", text)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def bundled_extensions() -> Path | None:
    """The extension directory the ``duckdb-ext-*`` wheels install (``duckdb_ext/extensions``,
    laid out as DuckDB's own: ``v1.4.4/linux_amd64/ducklake.duckdb_extension``), or None."""
    spec = importlib.util.find_spec("duckdb_ext")
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / "extensions").is_dir():
            return Path(root) / "extensions"
    return None


def load_extensions(con, names: tuple[str, ...]) -> None:
    """``LOAD`` each extension: from the wheels' directory when it holds this DuckDB version's
    build, else the user's (``INSTALL`` first: a download, where the runner has network)."""
    import duckdb

    ((platform,),) = con.execute("PRAGMA platform").fetchall()
    root = bundled_extensions()
    for name in names:
        built = root / f"v{duckdb.__version__}" / platform / f"{name}.duckdb_extension" \
            if root else None  # fmt: skip
        if built is not None and built.exists():
            con.execute(f"LOAD {_quote(str(built))}")
            continue
        try:
            con.execute(f"LOAD {name}")
        except duckdb.Error:
            try:
                con.execute(f"INSTALL {name}")
                con.execute(f"LOAD {name}")
            except duckdb.Error as exc:
                raise RuntimeError(
                    f"DuckDB {duckdb.__version__} cannot load its {name} extension ({exc}); "
                    "install ragged[lake] (the extension wheels, DuckDB 1.4.4) or give the "
                    "runner network for INSTALL"
                ) from None


def snapshot(con) -> int:
    """The lake's newest snapshot id: it changes with every commit (a readers' cache key)."""
    sql = f"SELECT max(snapshot_id) FROM ducklake_snapshots('{ALIAS}')"
    ((sid,),) = con.execute(sql).fetchall()
    return int(sid or 0)


def files(con) -> tuple[int, int]:
    """(data and delete files, their bytes) that the lake's current snapshot reads."""
    ((n, size),) = con.execute(
        "SELECT coalesce(sum(file_count + delete_file_count), 0), "
        "coalesce(sum(file_size_bytes + delete_file_size_bytes), 0) "
        f"FROM ducklake_table_info('{ALIAS}')"
    ).fetchall()
    return int(n), int(size)


# Files that maintenance replaced are deleted only this long after: a reader or writer that
# began before may still be reading them (deleting at once broke concurrent ingests).
CLEANUP_GRACE_S = 3600


def maintain(con, keep_days: float) -> None:
    """DuckLake's own maintenance: small adjacent files merged, snapshots older than
    ``keep_days`` expired (no time travel before then), and the files that no snapshot reads
    any more, and that were dropped over ``CLEANUP_GRACE_S`` ago, deleted."""
    con.execute(f"CALL ducklake_merge_adjacent_files('{ALIAS}')")
    for call, seconds in (("ducklake_expire_snapshots", int(keep_days * 86400)),
                          ("ducklake_cleanup_old_files", CLEANUP_GRACE_S)):  # fmt: skip
        con.execute(
            f"CALL {call}('{ALIAS}', older_than => now() - to_seconds(?::BIGINT))", [seconds]
        )
