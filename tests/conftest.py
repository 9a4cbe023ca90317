"""Test set-up: on a machine without CUDA the Triton kernels run in the interpreter."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# One thread a process, before torch is imported here or in any process a test starts (they
# inherit it): make test runs three workers on two cores, each starting more processes, and
# torch's OpenMP threads (two here) then spin waiting for one another. 20 forwards of DeiT-Ti
# at BS 2 took 9.7-10.0 s of CPU with two threads, 1.4 s with one, on the loaded 2-core
# machine. What the tests check does not depend on it; make demo and bench set nothing.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Where PYTHONDONTWRITEBYTECODE is set (this machine's image sets it), every process the tests
# start compiled ragbench's, ragged's and the benchmarks' sources again: 4% of the CPU of
# test_faults.py's subprocess tests in a fresh clone (116 s against 111 s).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import torch

REPO = Path(__file__).resolve().parent.parent

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Must be set before triton is first imported (ragged imports it).
    os.environ.setdefault("TRITON_INTERPRET", "1")


# make test runs three workers (pytest -n 3), each taking whole files in this order: the
# longest files first (the rehearsal ~14 min at make test's load, the second environments,
# the fault suite and the store ~6 min each), so that none of them starts late and runs alone
# at the end (taken in name order, test_envs started 16 minutes in and test_store ran its last
# 5 minutes alone), then the rest in name order beside them. The files that read the quick
# asv run (the session fixture quick_run, ~90 s on 2 cores: test_benchmarks, test_store,
# test_dashboard) share one run of it through the run's temporary folder, whichever workers
# take them, so they need not be grouped on one worker (which made that worker's files the
# longest path). (xdist's own --dist loadgroup loses its groups under pytest 9.2.)
LONGEST = (
    "tests/test_rehearsal.py",
    "tests/test_envs.py",
    "tests/test_faults.py",
    "tests/test_store.py",
)


def pytest_collection_modifyitems(config, items):
    first = {name: i for i, name in enumerate(LONGEST)}
    # stable: the rest in order
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], len(LONGEST)))
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::")[0]  # a whole file, its classes too

    return ByFile(config, log)


def pytest_terminal_summary(terminalreporter):
    """Figures tests measured (``record_property("measured", ...)``), one line each."""
    lines = [f"{r.nodeid}: {v}" for r in terminalreporter.stats.get("passed", [])
             for k, v in r.user_properties if k == "measured"]  # fmt: skip
    if lines:
        terminalreporter.write_sep("-", "measured")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
def device() -> str:
    """Where the tests put their tensors: the GPU when there is one, else the CPU."""
    return "cuda" if HAS_CUDA else "cpu"


def git(*args, cwd: Path = REPO) -> str:
    out = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, f"git {args}: {out.stderr}"
    return out.stdout.strip()


def ingest(store, paths, **kwargs):
    """Ingest as ``ragbench ingest`` does with the shipped policies: store the result files,
    then bring the change points and main's alerts of the series they gave a point up to
    date (``ragbench.result_files.ingest`` only stores) -> the ingest's report."""
    from ragbench.history import detection
    from ragbench.result_files import ingest as store_files

    report = store_files(store, paths, **kwargs)
    detection.update(store, report.new_runs)
    return report


def fresh_copy(dest: Path) -> Path:
    """A clone of this repository with the working tree as it is (uncommitted and untracked,
    not ignored, files too) committed on top of HEAD: what tests that make commits of their
    own, or push, start from."""
    git("clone", "--quiet", REPO, dest, cwd=dest.parent)
    for name in ("user.name", "user.email"):
        git("config", name, "Test", cwd=dest)
    changed = git("ls-files", "--modified", "--others", "--exclude-standard").splitlines()
    deleted = set(git("ls-files", "--deleted").splitlines())
    for rel in changed:
        if rel in deleted:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes((REPO / rel).read_bytes())
        (dest / rel).chmod((REPO / rel).stat().st_mode)
    for rel in deleted:
        (dest / rel).unlink(missing_ok=True)
    if git("status", "--porcelain", cwd=dest):
        git("add", "-A", cwd=dest)
        git("commit", "--quiet", "-m", "the working tree under test", cwd=dest)
    return dest


def new_repo(path: Path) -> Path:
    """An empty git repository at ``path`` (made), on ``main``, with a committer set."""
    path.mkdir(parents=True)
    git("init", "--quiet", "-b", "main", cwd=path)
    for name in ("user.name", "user.email"):
        git("config", name, "T", cwd=path)
    return path


def commit(repo: Path, path: str, text: str, message: str, append: bool = True) -> str:
    """Append (or write) ``text`` to ``path`` in ``repo`` and commit it; -> the commit."""
    with (repo / path).open("a" if append else "w") as fh:
        fh.write(text)
    git("add", path, cwd=repo)
    git("commit", "--quiet", "-m", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo)


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory):
    """``ragbench run`` (asv, forkserver, quick grid) on HEAD into a temporary results dir,
    once per pytest run: under xdist the first worker that asks runs it into the run's shared
    temporary folder and the others wait for it and read it (the tests only read or copy it)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return run_quick(tmp_path_factory.mktemp("asv"))
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent / "quick-run"  # the run's, all workers'
    shared.mkdir(exist_ok=True)
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = shared / "summary.json"
        if not done.exists():
            done.write_text(json.dumps(run_quick(shared)[1]))
        return shared / "results", json.loads(done.read_text())


def run_quick(tmp: Path):
    """The quick run into ``tmp/results`` (asv's machine file in ``tmp``) -> (results, summary)."""
    env = {**os.environ, "HOME": str(tmp)}  # asv's machine file goes to $HOME
    env.pop("RAGBENCH_MODE", None)
    results = tmp / "results"
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "run", "--machine", "ci", "--results", str(results)],
        env=env, capture_output=True, text=True, cwd=REPO, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert len(summary) == 1
    return results, summary[0]


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server of this session (scripts/pgserver.py): ``postgres.lake(tmp_path)``
    gives a new lake on it. Outside pytest's temporary tree, which only root may enter."""
    import shutil
    import tempfile

    from scripts.pgserver import Postgres

    root = Path(tempfile.mkdtemp(prefix="ragbench-pg-"))
    server = Postgres(root).start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["file", "lake"])
def store_spec(request, tmp_path):
    """A new store of each backend: a DuckDB file, or a DuckLake on Postgres (a string)."""
    if request.param == "file":
        return tmp_path / "perf.duckdb"
    return request.getfixturevalue("postgres").lake(tmp_path)
