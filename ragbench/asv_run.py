"""Run the asv suite on commits in the current Python environment.

Each commit's ``ragged`` is checked out into a temporary git worktree and put first on the
benchmark processes' path (``ASV_PYTHONPATH``); the suite itself always comes from this
checkout, as asv intends (today's ruler on yesterday's code). That is asv's ``existing``
environment with ``--set-commit-hash``, so no virtualenv is built per commit (for that, and for
``asv find``, use ``asv.virtualenv.conf.json``). After each commit's run the environment
fingerprint is written beside its result file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.support.harness import ANCHOR
from benchmarks.support.measure import ANCHOR_ENV

from . import git, project
from . import provenance as fingerprint

REPO = git.REPO
CONFIG = REPO / "asv.conf.json"
RESULTS = REPO / "results" / "asv"  # the default results directory (asv.conf.json's)


class SuiteError(RuntimeError):
    """The suite could not run (bad revision, asv missing, asv failed to start)."""


def runner(
    module: str,
    arms: dict[str, Path],
    args: list[str],
    *,
    mode: str,
    python: Path | str | None = None,
) -> tuple[int, str]:
    """``python -m module --arm NAME=SRC ... args`` from this repository (its ``benchmarks``
    runners: the paired comparison's, the drift comparison's) in a fresh process of ``python``
    (default this one), on ``mode``'s grid. -> (exit code, the last line it wrote on stderr)."""
    cmd = [str(python or sys.executable), "-m", module]
    for arm, src in arms.items():
        cmd += ["--arm", f"{arm}={src}"]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "RAGBENCH_MODE": mode, "PYTHONPATH": path}
    res = subprocess.run([*cmd, *args], cwd=REPO, env=env, capture_output=True, text=True)
    return res.returncode, (res.stderr.strip().splitlines()[-1:] or [""])[0][:300]


def asv_config(results_dir: Path, work: Path) -> Path:
    """asv.conf.json with absolute paths and the chosen results directory."""
    conf = project.asv_config(CONFIG)
    conf.update(
        repo=str(REPO),
        benchmark_dir=str(REPO / conf["benchmark_dir"]),
        results_dir=str(results_dir),
        html_dir=str(results_dir.parent / "html"),
        env_dir=str(work / "env"),
    )
    path = work / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=2))
    return path


PERCENT = re.compile(r"^\[\s*(\d+(?:\.\d+)?)%\]")  # asv's progress prefix: "[ 33.33%] ..."


def _asv(*args: str, env: dict, check: bool = True, quiet: bool = False,
         log_file: Path | None = None, progress=None,
         python: Path | None = None, cwd: Path | None = None) -> int:  # fmt: skip
    """asv (under ``python``, default this one; in ``cwd``, default this one's), its output to
    stderr (stdout carries ragbench's own JSON output alone), or with ``log_file`` appended
    there and every quarter of its progress reported to ``progress``."""
    cmd = [str(python or sys.executable), "-m", "asv", *args]
    if log_file is None:
        out = subprocess.DEVNULL if quiet else sys.stderr
        rc = subprocess.run(cmd, env=env, stdout=out, cwd=cwd).returncode
    else:
        with open(log_file, "a") as fh, subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", cwd=cwd,
        ) as proc:  # fmt: skip
            shown = 0
            for line in proc.stdout:
                fh.write(line)
                m = PERCENT.match(line)
                if m and progress and float(m.group(1)) >= shown + 25:
                    shown = int(float(m.group(1)) // 25 * 25)
                    progress(shown)
            rc = proc.wait()
    if check and rc != 0:
        where = f" (its log: {log_file})" if log_file else ""
        raise SuiteError(f"{' '.join(cmd[2:])} exited with {rc}{where}")
    return rc


def run(
    revs: list[str],
    *,
    mode: str = "quick",
    results_dir: Path = RESULTS,
    machine: str | None = None,
    bench: list[str] = (),
    log=print,
    asv_log: Path | None = None,
    environment=None,
) -> list[dict]:
    """Benchmark each of ``revs`` (oldest first); -> one summary per commit.

    ``environment``: an ``envs.Env`` (``--env SPEC``) whose Python runs asv, the benchmarks and
    the fingerprint, instead of this one; its result files are asv's environment of that Python.

    The summary holds the commit, the result file, its fingerprint file, the run's seconds and
    asv's exit status (non-zero when a benchmark failed; the others are still recorded).
    ``asv_log``: asv's output goes to that file and ``log`` gets its progress by quarters.
    """
    try:
        import asv  # noqa: F401
    except ImportError:
        raise SuiteError("asv is not installed: pip install -e '.[bench]'") from None
    shas = git.commits(revs)
    machine = fingerprint.machine(machine)
    results_dir = Path(results_dir).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="ragbench-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        conf = asv_config(results_dir, work)
        env = {**os.environ, "RAGBENCH_MODE": mode}
        anchor = _anchor(stack, work, log)
        if anchor is not None:
            env[ANCHOR_ENV] = str(anchor)
        python = environment.python if environment else None
        _asv("machine", "--yes", "--machine", machine, "--config", str(conf), env=env, quiet=True,
             python=python)  # fmt: skip
        for i, sha in enumerate(shas, 1):
            tag = f"[{i}/{len(shas)}] {sha[:12]}"
            log(f"{tag} {git.run('log', '-1', '--format=%s', sha)[:60]}")
            with git.worktree(sha, work) as src:
                path = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH")) if p)
                commit_env = {**env, "ASV_PYTHONPATH": path, "PYTHONPATH": path}
                _check_import(src, commit_env, python)
                t0 = time.perf_counter()
                # forkserver: each cell's process is a fork of one that imported the suite
                # (never CUDA: setup_cache runs in a fork too); 72 s a quick H100 run
                # against 151 s with a fresh interpreter a cell (spawn), 69 s against 112 s
                # on the CPU subset
                args = ["run", "--config", str(conf), "--machine", machine,
                        "--set-commit-hash", sha, "--launch-method", "forkserver",
                        "--record-samples", "--show-stderr"]  # fmt: skip
                for b in bench:
                    args += ["--bench", b]
                if asv_log is not None:
                    with open(asv_log, "a") as fh:
                        fh.write(f"\n=== ragbench: asv run of {sha} (asv's header may name "
                                 "the checkout's branch tip instead)\n")  # fmt: skip
                before = _result_files(results_dir / machine, sha)
                rc = _asv(*args, env=commit_env, check=False, log_file=asv_log, python=python,
                          progress=lambda pct, tag=tag: log(f"{tag}: {pct}%"))  # fmt: skip
                seconds = time.perf_counter() - t0
            result = _result_file(results_dir / machine, sha, before)
            if result is None:
                raise SuiteError(f"asv wrote no result file for {sha[:12]} (exit {rc})")
            fp = _fingerprint(sha, machine, mode, environment)
            fp["run_seconds"] = round(seconds, 1)
            fp_path = fingerprint.write(result, fp)
            log(f"{tag}: {seconds:.0f} s, asv exit {rc}, {result}")
            summaries.append({"commit": sha, "result": str(result), "fingerprint": str(fp_path),
                              "seconds": seconds, "asv_exit": rc})  # fmt: skip
    return summaries


def _anchor(stack: contextlib.ExitStack, work: Path, log) -> Path | None:
    """A worktree of the anchor revision (benchmarks/support/harness.ANCHOR), which the kernel runs
    also time in their own processes; None, and a log line, where this clone lacks it."""
    try:
        git.run("cat-file", "-e", f"{ANCHOR}^{{commit}}")
    except git.GitError:
        log(f"the anchor revision {ANCHOR[:12]} is not in this clone: kernel.AnchoredFloor "
            "is skipped (fetch the full history)")  # fmt: skip
        return None
    return stack.enter_context(git.worktree(ANCHOR, work, prefix="anchor"))


def _fingerprint(sha: str, machine: str, mode: str, environment) -> dict:
    """The fingerprint of the Python that ran the suite (an ``--env`` one: asked of it)."""
    if environment is None:
        return fingerprint.collect(commit=sha, machine=machine, mode=mode)
    out = subprocess.run(
        [str(environment.python), "-m", "ragbench", "fingerprint", "--commit", sha, "--machine",
         machine, "--mode", mode], capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    if out.returncode != 0:
        raise SuiteError(f"the fingerprint of --env {environment.spec}: {out.stderr[-500:]}")
    return {**json.loads(out.stdout), "env_spec": environment.spec}


# Where ``import ragged`` would load it from, found by the import system without running it:
# importing it (torch, Triton) took 3.8 s of a 23 s run of one CPU table on 2 cores.
WHERE_RAGGED = (
    "import importlib.util, os; s = importlib.util.find_spec('ragged'); "
    "print(os.path.dirname(s.origin) if s and s.origin else '')"
)


def _check_import(src: Path, env: dict, python: Path | None = None) -> None:
    """The benchmark processes must import the checked-out ragged, not an installed one."""
    out = subprocess.run(
        [str(python or sys.executable), "-c", WHERE_RAGGED],
        env=env, capture_output=True, text=True, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    found = out.stdout.strip()
    if out.returncode != 0 or Path(found).resolve() != (src / "ragged").resolve():
        raise SuiteError(f"ragged imports from {found or out.stderr.strip()!r}, not {src}")


def _result_files(machine_dir: Path, sha: str) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in machine_dir.glob(f"{sha[:8]}-*.json")}


def _result_file(machine_dir: Path, sha: str, before: dict[Path, int]) -> Path | None:
    """The result file this run of asv wrote: new or changed since ``before`` (a file of the
    same commit from another environment, left as it was, is never taken for it)."""
    written = [p for p, t in _result_files(machine_dir, sha).items() if before.get(p) != t]
    return max(written, key=lambda p: p.stat().st_mtime_ns) if written else None


def project_config(config: Path, results_dir: Path, work: Path, name: str) -> Path:
    """Another asv project's config as asv reads it from ``work``: its paths absolute (relative
    ones are the config directory's), its results in ``results_dir``, its published site in
    ``work``; its environments where the project keeps them (built once, reused)."""
    config = Path(config).resolve()
    conf = project.asv_config(config)
    root = config.parent
    for key, default in (("benchmark_dir", "benchmarks"), ("env_dir", "env")):
        conf[key] = str(root / conf.get(key, default))
    repo = conf.get("repo")
    if isinstance(repo, str) and "://" not in repo and not repo.startswith("git@"):
        conf["repo"] = str(root / repo)
    conf.update(results_dir=str(results_dir), html_dir=str(work / "html"))
    path = work / f"{name}.asv-config.json"  # not asv.conf.json: ingest takes no config of it
    path.write_text(json.dumps(conf, indent=2))
    return path


def run_project(config: Path, sha: str, *, results_dir: Path, machine: str, work: Path,
                bench: list[str] = (), environment: str | None = None, log=print,
                asv_log: Path | None = None) -> list[Path]:  # fmt: skip
    """Benchmark one commit of another asv project, as its own ``asv run`` does: asv with its
    config (``--config``; asv builds the commit in the config's environments, from its
    ``repo``), the commit alone (``SHA^!``), raw samples recorded, ``environment`` asv's
    ``--environment`` spec (``conda:3.12``) where given; asv's output to ``asv_log`` (default:
    beside the results). -> the result files it wrote; SuiteError, with asv's last line, where
    it wrote none."""
    try:
        import asv  # noqa: F401
    except ImportError:
        raise SuiteError("asv is not installed: pip install -e '.[bench]'") from None
    results_dir = Path(results_dir).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    conf = project_config(config, results_dir, work, results_dir.name)
    cwd = Path(config).resolve().parent
    _asv("machine", "--yes", "--machine", machine, "--config", str(conf), env=dict(os.environ),
         quiet=True, cwd=cwd)  # fmt: skip
    args = ["run", "--config", str(conf), "--machine", machine, "--record-samples",
            "--show-stderr"]  # fmt: skip
    args += ["--environment", environment] if environment else []
    for b in bench:
        args += ["--bench", b]
    t0 = time.perf_counter()
    asv_log = asv_log or work / f"{results_dir.name}.asv.log"
    rc = _asv(*args, f"{sha}^!", env=dict(os.environ), check=False, log_file=asv_log, cwd=cwd,
              progress=lambda pct: log(f"{sha[:12]}: {pct}%"))  # fmt: skip
    written = sorted((results_dir / machine).glob("*-*.json"))
    if not written:
        lines = asv_log.read_text(errors="replace").strip().splitlines() or ["no output"]
        raise SuiteError(f"asv wrote no result file for {sha[:12]} with {config} (exit {rc}): "
                         f"{lines[-1][:200]}")  # fmt: skip
    log(f"{sha[:12]}: {time.perf_counter() - t0:.0f} s, asv exit {rc}, {len(written)} file(s)")
    return written
