"""A real trial of another asv project's follow-ups: django's code, django-asv's benchmarks,
asv 0.6.6, and the commands ``ragbench alerts`` prints for django-asv's results.

    python -m scripts.foreign_gate_trial --django-asv CHECKOUT [--work DIR]
        [--versions 5.1.3 5.1.4] [--bench NAME] [--rounds 1] [--python 3.11]

``CHECKOUT``: a checkout of django/django-asv (MIT): its ``asv.conf.json`` and ``benchmarks/``.
In ``--work`` (kept between runs: the downloads and asv's environments are reused):

1. ``sdists/``: the ``--versions`` of Django from PyPI (``pip download --no-deps --no-binary
   :all: Django==V``); ``django/``: a git repository (branch ``main``) with one commit a
   release, its tree the sdist's (the commit's date the newest file's in the sdist; the same
   sdists give the same commit hashes);
2. ``django-asv/``: django-asv's ``asv.conf.json`` with ``repo`` the local repository and
   ``environment_type`` virtualenv (nothing else changed), its ``benchmarks/`` and licence;
3. ``trial.duckdb``: ``ragbench ingest --branch main`` of django-asv's public results kept
   in tests/data/public/asv-django (100 files of ``ubuntu-latest``, with their own config), and
   ``ragbench alerts``: the newest alert's link and re-measure command are printed;
4. that command's gate of the two local commits without ``--config``: it must exit 2 in one line
   naming ``--config``;
5. that command as a user runs it on this machine: its ``--config`` the local copy,
   ``--environment virtualenv-py{--python}`` for conda's, ``--base``/``--head`` the first and
   last local commits, ``--bench`` the alert's benchmark (or ``--bench NAME``), ``--rounds``:
   asv builds django at each commit and runs the benchmark; the gate's verdict is printed, and
   the settle command its report names, where it names one (it must name the local config).

Exit 0: every step did what it should (the gate's verdict, whichever it is, printed); 1: a step
did not (its line says which); 2: unusable input (no django-asv checkout, a download failed).
Progress goes to stderr; the commands, their seconds and the verdict to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "tests" / "data" / "public" / "asv-django"
MACHINE = "ubuntu-latest"  # the sample's machine, and the one its alerts name
IDENTITY = {"GIT_AUTHOR_NAME": "trial", "GIT_AUTHOR_EMAIL": "trial@localhost",
            "GIT_COMMITTER_NAME": "trial", "GIT_COMMITTER_EMAIL": "trial@localhost"}  # fmt: skip


class TrialError(Exception):
    """A step that did not do what it should (exit 1), or input the trial cannot use (exit
    2: ``code``)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def progress(msg: str) -> None:
    print(f"trial: {msg}", file=sys.stderr, flush=True)


def run(
    cmd: list[str], ran: list, *, shown: list[str] | None = None
) -> subprocess.CompletedProcess:
    """``cmd`` run, its stderr shown as it comes (progress) and kept with its stdout; recorded
    in ``ran`` as ``shown`` (the words a user types) with its seconds and exit code."""
    words = shlex.join(shown or cmd)
    progress(f"$ {words}")
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    err = []
    with tempfile.TemporaryFile("w+", errors="replace") as out:
        with subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE, text=True,
                              errors="replace") as proc:  # fmt: skip
            for line in proc.stderr:
                err.append(line)
                progress(f"  {line.rstrip()}")
        out.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), "".join(err))
    ran.append((words, time.perf_counter() - t0, done.returncode))
    return done


def ragbench(args: list[str], ran) -> subprocess.CompletedProcess:
    """``ragbench ARGS`` of this checkout (its package run by this Python)."""
    return run([sys.executable, "-m", "ragbench", *args], ran, shown=["ragbench", *args])


def sdists(work: Path, versions: list[str], ran) -> list[Path]:
    """Each version's sdist from PyPI, downloaded once."""
    out = work / "sdists"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for v in versions:
        found = sorted(out.glob(f"[Dd]jango-{v}.tar.gz"))
        if not found:
            done = run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", f"Django=={v}", "-d", str(out)], ran)  # fmt: skip
            found = sorted(out.glob(f"[Dd]jango-{v}.tar.gz"))
            if not found:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise TrialError(f"pip download of Django=={v} gave no sdist: {last}", 2)
        paths.append(found[0])
    return paths


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}).stdout.strip()  # fmt: skip


def django_repo(work: Path, tars: list[Path], versions: list[str]) -> list[str]:
    """A fresh git repository, one commit a release (its tree the sdist's, dated by its newest
    file); -> the commits' hashes, oldest first."""
    repo = work / "django"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for tar, version in zip(tars, versions, strict=True):
        for p in repo.iterdir():
            if p.name != ".git":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        with tarfile.open(tar) as tf:
            members = tf.getmembers()
            top = members[0].name.split("/")[0]
            for m in members:
                m.name = m.name.removeprefix(top).lstrip("/")
            kept = [m for m in members if m.name]
            tf.extractall(repo, members=kept, filter="tar")
            date = f"@{max(m.mtime for m in kept)} +0000"
        git(repo, "add", "-A")
        env = {**IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        git(repo, "commit", "-q", "--no-verify", "-m", f"Django {version}: its PyPI sdist",
            env=env)  # fmt: skip
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def checked(checkout: Path) -> None:
    """TrialError (exit 2) where ``checkout`` is no django-asv checkout."""
    if not (checkout / "asv.conf.json").is_file() or not (checkout / "benchmarks").is_dir():
        raise TrialError(f"--django-asv {checkout}: no asv.conf.json and benchmarks/ there", 2)


def project_copy(work: Path, checkout: Path) -> Path:
    """django-asv's config (``repo``: the local repository; ``environment_type``: virtualenv),
    benchmarks and licence in ``work/django-asv``; -> the config's path."""
    checked(checkout)
    conf_in = checkout / "asv.conf.json"
    out = work / "django-asv"
    shutil.rmtree(out / "benchmarks", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(checkout / "benchmarks", out / "benchmarks")
    if (checkout / "LICENSE").is_file():
        shutil.copyfile(checkout / "LICENSE", out / "LICENSE")
    conf = json.loads(conf_in.read_text())
    conf.update(repo=str(work / "django"), environment_type="virtualenv")
    (out / "asv.conf.json").write_text(json.dumps(conf, indent=4) + "\n")
    return out / "asv.conf.json"


def newest_alert(text: str) -> tuple[str, str]:
    """The first alert ``ragbench alerts`` prints: its link and its re-measure command."""
    link = re.search(r"^Arrived in \S+: (\S+)$", text, re.M)
    cmd = re.search(r"^Re-measure: `(.+)`$", text, re.M)
    if not link or not cmd:
        raise TrialError("ragbench alerts printed no alert with a link and a re-measure command")
    return link.group(1), cmd.group(1)


def with_values(words: list[str], values: dict[str, str]) -> list[str]:
    """The command ``words`` with each option of ``values`` given that value (added where the
    command has none)."""
    out = list(words)
    for opt, value in values.items():
        if opt in out:
            out[out.index(opt) + 1] = value
        else:
            out += [opt, value]
    return out


def trial(args, ran) -> tuple[str, dict]:
    """The trial's steps (the module's docstring); -> the gate's verdict line, and what it
    found."""
    work = args.work.resolve()
    checked(args.django_asv.resolve())
    work.mkdir(parents=True, exist_ok=True)
    progress(f"1/5 Django {' and '.join(args.versions)} from PyPI, one commit each")
    tars = sdists(work, args.versions, ran)
    shas = django_repo(work, tars, args.versions)
    for v, sha in zip(args.versions, shas, strict=True):
        progress(f"  Django {v}: {sha}")
    progress("2/5 django-asv's config and benchmarks, repo local, environment virtualenv")
    conf = project_copy(work, args.django_asv.resolve())
    store = work / "trial.duckdb"
    store.unlink(missing_ok=True)
    progress("3/5 django-asv's public results ingested; the newest alert")
    done = ragbench(["ingest", "--store", str(store), "--branch", "main",
                     str(SAMPLE / "results")], ran)  # fmt: skip
    if done.returncode not in (0, 1):
        raise TrialError(f"ragbench ingest exited {done.returncode}: {done.stderr.strip()}")
    done = ragbench(["alerts", "--store", str(store), "--machine", MACHINE], ran)
    link, command = newest_alert(done.stdout)
    words = shlex.split(command)
    if words[:2] != ["ragbench", "gate"] or "--config" not in words:
        raise TrialError(f"the alert's re-measure command names no --config: {command}")
    sample_conf = str((SAMPLE / "asv.conf.json").resolve())
    found = {"link": link, "alert command": command}
    if words[words.index("--config") + 1] != sample_conf:
        raise TrialError(f"the alert's command's --config is not the results' own: {command}")
    if not link.startswith("https://github.com/django/django/compare/"):
        raise TrialError(f"the alert's link is not django's compare page: {link}")
    base, head = shas[0], shas[-1]
    progress("4/5 the gate of the local commits without --config: refused, naming it")
    plain = words[:2] + with_values(
        [w for i, w in enumerate(words[2:], 2) if w not in ("--config", "--environment")
         and words[i - 1] not in ("--config", "--environment")],
        {"--store": str(store), "--base": base[:12], "--head": head[:12]},
    )  # fmt: skip
    done = ragbench(plain[1:], ran)
    lines = (done.stdout + done.stderr).strip().splitlines()
    found["refusal"] = lines[-1] if lines else ""
    if done.returncode != 2 or len(lines) != 1 or f"pass --config {sample_conf}" not in lines[0]:
        raise TrialError(f"the gate without --config did not refuse in one line naming "
                         f"--config {sample_conf} (exit {done.returncode}): {lines}")  # fmt: skip
    progress("5/5 the alert's command on this machine: asv builds django at both commits")
    bench = f"^{re.escape(args.bench)}$" if args.bench else words[words.index("--bench") + 1]
    gate = words[:2] + with_values(words[2:], {
        "--config": str(conf), "--environment": f"virtualenv-py{args.python}",
        "--base": base[:12], "--head": head[:12], "--bench": bench, "--store": str(store),
        "--rounds": str(args.rounds), "--json": str(work / "gate.json"),
    })  # fmt: skip
    done = ragbench(gate[1:], ran)
    (work / "gate.md").write_text(done.stdout + done.stderr)
    verdict = re.search(r"^ragbench gate: (PASS|FAIL|INCONCLUSIVE)\b.*$", done.stderr, re.M)
    if verdict is None or done.returncode != (0 if verdict.group(1) == "PASS" else 1):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TrialError(f"the gate gave no verdict (exit {done.returncode}): {last}")
    name = re.sub(r"\\(.)", r"\1", bench.strip("^$"))  # the regex's benchmark, unescaped
    found["cells"] = [line for line in done.stdout.splitlines()
                      if line.startswith("| `") and name in line]  # fmt: skip
    settle = re.search(r"^`(ragbench gate --settle [^`]+)`$", done.stdout, re.M)
    if settle:  # what it left is settled by the project's asv: the command names its config
        again = shlex.split(settle.group(1))
        if "--config" not in again or again[again.index("--config") + 1] != str(conf):
            raise TrialError(f"the gate's settle command names no --config {conf}: {again}")
        found["settle command"] = settle.group(1)
    return verdict.group(0), found


def versions() -> str:
    """The versions the trial ran with: Python, asv, virtualenv, git."""
    from importlib.metadata import PackageNotFoundError, version

    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    return (f"Python {sys.version.split()[0]}, asv {of('asv')}, virtualenv {of('virtualenv')}, "
            f"{git_version.strip()}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    ap.add_argument("--django-asv", type=Path, required=True, metavar="CHECKOUT",
                    help="a checkout of django/django-asv")  # fmt: skip
    ap.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/ragbench-django-trial"),
        help="the trial's directory, kept (default /tmp/ragbench-django-trial)",
    )
    ap.add_argument(
        "--versions",
        nargs="+",
        default=["5.1.3", "5.1.4"],
        help="Django releases, oldest first (default 5.1.3 5.1.4)",
    )
    ap.add_argument("--bench", help="a django-asv benchmark's full name (default: the alert's)")
    ap.add_argument("--rounds", type=int, default=1, help="the gate's rounds (default 1)")
    ap.add_argument(
        "--python",
        default=f"{sys.version_info[0]}.{sys.version_info[1]}",
        help="the Python asv's virtualenv uses (default this one's)",
    )
    args = ap.parse_args(argv)
    if len(args.versions) < 2:
        print("foreign_gate_trial: --versions needs two releases or more", file=sys.stderr)
        return 2
    ran: list[tuple[str, float, int]] = []
    t0 = time.perf_counter()
    try:
        verdict, found = trial(args, ran)
        code = 0
    except TrialError as exc:
        what = "trial failed" if exc.code == 1 else "trial could not run"
        verdict, found, code = f"{what}: {exc}", {}, exc.code
    except (OSError, subprocess.CalledProcessError, tarfile.TarError) as exc:
        verdict, found, code = f"trial could not run: {exc}", {}, 2
    print("Commands (seconds, exit code):")
    for words, seconds, rc in ran:
        print(f"  {seconds:7.1f} s  {rc}  {words}")
    for key, value in found.items():
        for line in value if isinstance(value, list) else [value]:
            print(f"{key}: {line}")
    print(f"versions: {versions()}")
    print(f"{verdict} ({time.perf_counter() - t0:.0f} s in all)")
    return code


if __name__ == "__main__":
    sys.exit(main())
