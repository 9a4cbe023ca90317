"""Run a pull request's gate in a throwaway environment: ``make gate-sandbox``, bench-pr's gate
job on the sandbox runner (the base branch's code; docs/runner.md says how the runner's admin
sets the environment up, once).

    python3 -m scripts.sandbox --backend user:ragbench-job --pr 7 --base B --head H \\
        --venv .venv --out results

1. The pull request's head is fetched into this checkout as data (``refs/pull/N/head``: nothing
   of it is checked out or run here) and bundled with the base's history.
2. The throwaway environment, ``--backend`` (the repository variable ``RAGBENCH_SANDBOX``):
   - ``user:NAME``: a user that exists for this only, reached through ``sudo -n -u NAME`` (the
     one sudo rule the runner's user has). Its home must be empty when the job starts; after
     the gate every process of NAME is killed, and its home and its files in /tmp, /var/tmp and
     /dev/shm are deleted. NAME cannot read or write the trusted user's home or the store.
   - ``rehearsal``: a new home directory for this same user, removed after the gate: what
     scripts/rehearse.py and the tests use. It separates nothing from this user (the code
     could write wherever this user can), so it runs only where RAGBENCH_REHEARSAL=1.
3. There, with a clean environment (PATH, HOME, TMPDIR in that home, LANG, and RAGBENCH_MACHINE,
   CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, BENCH, ROUNDS if set; no token, no store path, no
   GITHUB_*): the bundle is cloned, the head checked out, and the pull request's own ``make
   gate-pr`` run with ``VENV`` = ``--venv`` (this checkout's environment, read-only to that
   user; ``STAMP`` names a file in it, so the pull request's ``make setup`` installs nothing).
4. Its results/gate.json and results/gate.md are copied out into ``--out`` (regular files, 16
   MiB at most, read as the sandbox's user after its processes are gone); then the
   environment is thrown away. The exit status is the gate's; 2 when the sandbox could not be
   made, emptied or read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

OUTPUTS = ("gate.json", "gate.md")  # what the gate writes into results/ (Makefile GATE)
LIMIT = 16 * 2**20  # bytes copied out of each: a report is tens of kB
# The runner's machine settings go in, so that base and head run as main's runs do. Among them
# OMP_NUM_THREADS (1 in make test, tests/conftest.py): one drift comparison of the rehearsal's
# gate took 18 s of CPU with it and 47 s without beside two CPU burners on this 2-core machine
# (two of torch's threads spinning on busy cores).
KEEP_ENV = (
    "RAGBENCH_MACHINE",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "BENCH",
    "ROUNDS",
    "LANG",
)


class SandboxError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"sandbox: {msg}", file=sys.stderr, flush=True)


def git(*args: str, cwd: Path) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SandboxError(f"git {' '.join(args)}: {out.stderr.strip()[:300]}")
    return out.stdout.strip()


class Rehearsal:
    """A new home for this same user, removed afterwards (rehearsals and tests only)."""

    def __init__(self):
        if os.environ.get("RAGBENCH_REHEARSAL") != "1":
            raise SandboxError("the rehearsal backend separates nothing from the runner's user: "
                               "it runs only in scripts/rehearse.py (RAGBENCH_REHEARSAL=1); "
                               "set RAGBENCH_SANDBOX to user:NAME (docs/runner.md)")  # fmt: skip
        self.root = self.shared = Path(tempfile.mkdtemp(prefix="ragbench-sandbox-"))
        self.home = self.root / "home"
        self.home.mkdir()
        self.pgids: list[int] = []

    def describe(self) -> str:
        return f"a new home {self.home} for this same user (rehearsal)"

    def share(self, path: Path) -> None:
        pass

    def run(self, argv: list[str], cwd: Path, env: dict) -> int:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True)
        self.pgids.append(proc.pid)
        return proc.wait()

    def stop(self) -> None:
        for pgid in self.pgids:  # what the gate left running in its session
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)

    def read(self, path: Path) -> bytes | None:
        try:  # never through a link, never blocking on a pipe
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(LIMIT + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else None

    def destroy(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self.root.exists():
            raise SandboxError(f"could not remove the sandbox {self.root}")


class User:
    """A user that exists for the sandbox only, through ``sudo -n -u NAME``."""

    def __init__(self, name: str):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise SandboxError(f"no user {name!r}: the runner's admin creates it once "
                               "(docs/runner.md, the sandbox user)") from None  # fmt: skip
        if entry.pw_uid in (0, os.geteuid()):
            raise SandboxError(f"the sandbox user {name!r} is root or this runner's own user: "
                               "it must be a user of its own")  # fmt: skip
        self.name, self.home = name, Path(entry.pw_dir)
        try:
            ok = self._as_user(["true"]).returncode == 0
        except FileNotFoundError:  # no sudo
            ok = False
        if not ok:
            raise SandboxError(f"sudo -n -u {name} true failed: the runner's user needs sudo and "
                               "the sudo rule of docs/runner.md")  # fmt: skip
        if self._leftover():
            self._clean()  # a job before this one was not cleaned up
        if left := self._leftover():
            raise SandboxError(f"{name}'s home is not empty and cannot be emptied ({left}): "
                               "the admin removes what is left before the next job")  # fmt: skip
        self.shared = Path(tempfile.mkdtemp(prefix="ragbench-sandbox-"))
        self.shared.chmod(0o755)  # the bundle: readable by NAME, written by us only

    def describe(self) -> str:
        return f"user {self.name} (home {self.home})"

    def _as_user(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["sudo", "-n", "-u", self.name, "--", *argv], capture_output=True,
                              **kw)  # fmt: skip

    def _leftover(self) -> str:
        """A path in NAME's home, or "" when it is empty."""
        find = ["find", str(self.home), "-mindepth", "1", "-print", "-quit"]
        return self._as_user(find, text=True).stdout.strip()

    def share(self, path: Path) -> None:
        path.chmod(0o644)

    def run(self, argv: list[str], cwd: Path, env: dict) -> int:
        envs = [f"{k}={v}" for k, v in env.items()]
        out = subprocess.run(["sudo", "-n", "-u", self.name, "--", "env", "-i", "-C", str(cwd),
                              *envs, *argv])  # fmt: skip
        return out.returncode

    def stop(self) -> None:
        self._as_user(["kill", "-KILL", "-1"])  # every process of NAME's, as NAME

    def read(self, path: Path) -> bytes | None:
        script = 'test -f "$1" && ! test -L "$1" && head -c "$2" "$1"'
        out = self._as_user(["sh", "-c", script, "_", str(path), str(LIMIT + 1)])
        return out.stdout if out.returncode == 0 else None

    def _clean(self) -> None:
        """Kill NAME's processes; delete its home's content and its files in the temporary
        directories (as NAME: it owns them)."""
        self.stop()
        script = (
            'chmod -R u+rwx "$HOME" 2>/dev/null; find "$HOME" -mindepth 1 -delete; '
            'find /tmp /var/tmp /dev/shm -xdev -mindepth 1 -maxdepth 1 -user "$(id -u)" '
            '! -path "$HOME" -exec rm -rf {} + 2>/dev/null; true'
        )
        self._as_user(["env", f"HOME={self.home}", "sh", "-c", script])

    def destroy(self) -> None:
        self._clean()
        shutil.rmtree(self.shared, ignore_errors=True)
        if left := self._leftover():
            raise SandboxError(f"{self.name}'s home could not be emptied ({left})")


def backend(spec: str):
    if spec == "rehearsal":
        return Rehearsal()
    if spec.startswith("user:") and spec[5:]:
        return User(spec[5:])
    raise SandboxError(f"RAGBENCH_SANDBOX is {spec!r}: expected user:NAME (the runner's "
                       "throwaway user, docs/runner.md) or rehearsal")  # fmt: skip


def bundle(checkout: Path, pr: int, base: str, head: str, dest: Path) -> None:
    """The pull request's head and the base's history, as one file (data only): branches
    ``main`` (the base: asv.conf.json's branch, which asv looks up by name) and
    ``ragbench-head``."""
    git("fetch", "--quiet", "--no-tags", "origin", f"+refs/pull/{pr}/head:refs/ragbench/pr-head",
        cwd=checkout)  # fmt: skip
    names = {"main": base, "ragbench-head": head}
    for name, sha in names.items():
        kind = subprocess.run(["git", "cat-file", "-t", sha], cwd=checkout, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip
        if kind != "commit":
            raise SandboxError(
                f"{sha} is not a commit of pull/{pr}/head or of its base: the "
                "pull request moved since the event; its next event gates it"
            )
        git("update-ref", f"refs/ragbench/bundle/{name}", sha, cwd=checkout)
    refs = [f"refs/ragbench/bundle/{name}" for name in names]
    git("bundle", "create", "--quiet", str(dest), *refs, cwd=checkout)


def sandboxed_env(home: Path) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8"}  # fmt: skip
    env.update({k: os.environ[k] for k in KEEP_ENV if os.environ.get(k)})
    return env


def gate(args) -> int:
    checkout = Path.cwd()
    venv = args.venv.absolute()
    box = backend(args.backend)
    log(f"the pull request's code runs as {box.describe()}")
    try:
        pack = box.shared / "pr.bundle"
        bundle(checkout, args.pr, args.base, args.head, pack)
        box.share(pack)
        env = sandboxed_env(box.home)
        src = box.home / "src"
        refs = "+refs/ragbench/bundle/*:refs/heads/*"
        steps = [
            ["mkdir", "-p", env["TMPDIR"]],
            ["git", "init", "--quiet", "--initial-branch=ragbench-empty", str(src)],
            ["git", "-C", str(src), "fetch", "--quiet", "--no-tags", str(pack), refs],
            ["git", "-C", str(src), "checkout", "--quiet", "--detach", args.head],
        ]
        for argv in steps:
            if box.run(argv, box.home, env) != 0:
                raise SandboxError(f"{' '.join(argv[:3])} failed in the sandbox")
        # STAMP: a file of the read-only environment, so that `make setup` installs nothing
        rc = box.run(["make", "gate-pr", f"VENV={venv}", f"STAMP={venv}/pyvenv.cfg",
                      f"BASE_SHA={args.base}", f"HEAD_SHA={args.head}"], src, env)  # fmt: skip
        log(f"the gate exited {rc}")
        box.stop()
        args.out.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            data = box.read(src / "results" / name)
            if data is None:
                log(f"no results/{name} (or not a regular file): not copied")
            elif len(data) > LIMIT:
                log(f"results/{name} is over {LIMIT} bytes: not copied")
            else:
                (args.out / name).write_bytes(data)
                log(f"copied results/{name} ({len(data)} bytes)")
        return rc
    finally:
        box.destroy()
        log("the sandbox is gone")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    ap.add_argument("--backend", required=True, help="user:NAME or rehearsal")
    ap.add_argument("--pr", type=int, required=True, help="pull request number")
    ap.add_argument("--base", required=True, help="the base commit (full hash)")
    ap.add_argument("--head", required=True, help="the head commit to gate (full hash)")
    ap.add_argument("--venv", type=Path, required=True, help="the environment the gate uses")
    ap.add_argument("--out", type=Path, required=True, help="where gate.json and gate.md go")
    args = ap.parse_args(argv)
    # a cancelled job (SIGTERM after SIGINT) still throws the sandbox away (gate's finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return gate(args)
    except (SandboxError, OSError) as exc:  # OSError: no git
        print(f"sandbox: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
