"""Who may run a pull request's code on the GPU runner, and what a trusted job refuses to run in.

The trusted jobs (main's runs, the verdict, acceptances, store maintenance, the upgrade report)
hold the store and the token. A pull request's code runs elsewhere: as another user, whose home
is thrown away after the job (scripts/sandbox.py; the runner's set-up: docs/runner.md).

``approve`` (bench-pr's first job): the pull request's code may run for a push by a user GitHub
says may write to the repository (opened, synchronize, reopened), or for the ``bench-gpu`` label
added by such a user (a maintainer who read a fork's diff). Anything else is refused (exit 1),
and a ``bench-gpu`` label left from an earlier head is taken off: it approved other code.

``check`` (``make trust``, a prerequisite of every trusted Makefile target in a GitHub job) is
the tripwire for a runner where that separation is missing or leaks. It refuses (exit 2, one
line: the first finding and what to do) when

1. the environment changes which code Python, pip, git, bash, make or the dynamic loader run, or
   where pip or uv fetches it (``PYTHONPATH``, ``PIP_INDEX_URL``, ``UV_*``, ``GIT_CONFIG_*``,
   ``LD_PRELOAD``, ...): pip's and git's own settings belong in /etc/pip.conf and
   /etc/gitconfig, root's (``make setup``'s uv reads no file of its own and takes pip's);
2. the home holds a file of git's, pip's or Python's user configuration (``~/.gitconfig``,
   ``~/.config/pip/pip.conf``, a ``.pth`` in the user site, ...) that a job could have
   written: one is accepted only when root owns it, only root may write it, and the trusted
   user is not root (the admin put it there);
3. a cache that trusted jobs load code or launch settings from (the ragged build and tuning
   directories, Triton's and pip's caches) holds an entry owned by another user, writable by
   group or others, or a symbolic link;
4. the workspace (the job's checkout) has a modified tracked file or an untracked file outside
   its ignored outputs (.venv, results/).

Why ownership, not time: a file's time is whatever its writer sets (``touch -d``), and the
trusted jobs write these caches themselves; only root can give a file to another owner. So no
check can catch code that ran as the trusted user itself and wrote only caches (it could also
rewrite any stamp the check kept): that is why a pull request's code never runs as that user.

Standard library only: ``make trust`` runs it with the system's python3 (``-s -E``: no user
site, no PYTHON* settings) before the .venv is built, since ``pip`` would already read a planted
pip.conf.
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LABEL = "bench-gpu"  # the maintainer's approval to run a pull request's code on the GPU
WRITERS = ("admin", "maintain", "write")  # GitHub's permissions that may push (as pr.WRITERS)
PUSHES = ("opened", "synchronize", "reopened")  # pull_request_target actions that bring code

# 1. Environment variables that choose the code a trusted step runs, or where pip fetches it.
ENV_NAMES = {
    "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE",  # Python's import path and user site
    "BASH_ENV", "MAKEFILES",  # read and run by every non-interactive bash, every make
    "LD_PRELOAD", "LD_AUDIT",  # libraries loaded into every process
    "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "GIT_PROXY_COMMAND",
    "GIT_EXTERNAL_DIFF", "GIT_TEMPLATE_DIR", "GIT_DIR", "GIT_WORK_TREE",  # commands git runs
}  # fmt: skip
# any pip or uv option (uv reads its variables under --no-config); git settings given through
# the env
ENV_PREFIXES = ("PIP_", "UV_", "GIT_CONFIG")
ENV_HARMLESS = {  # pip options that change how it talks, never what it installs
    "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_CACHE_DIR", "PIP_NO_INPUT", "PIP_PROGRESS_BAR",
    "PIP_ROOT_USER_ACTION", "PIP_QUIET", "PIP_DEFAULT_TIMEOUT",
}  # fmt: skip

# 2. Configuration files git, pip and setuptools read from the home (relative to it; the
# XDG ones also under $XDG_CONFIG_HOME): each can run a command (core.fsmonitor, a hook path,
# an ssh command) or name the index pip installs from.
CONFIG_FILES = (".gitconfig", ".config/git/config", ".config/pip/pip.conf", ".pip/pip.conf",
                ".pydistutils.cfg")  # fmt: skip
XDG_CONFIG_FILES = ("git/config", "pip/pip.conf")
# Python runs every .pth and usercustomize.py of the user site at start-up (python3, not -s).
USER_SITE_GLOB = ".local/lib/python3*/site-packages"
USER_SITE_CODE = ("*.pth", "usercustomize.py", "sitecustomize.py")


class Untrusted(ValueError):
    """A trusted step would run where a pull request's job could have planted something."""


@dataclass(frozen=True)
class Finding:
    what: str  # the variable or path, as the user would type it
    why: str
    fix: str

    def line(self) -> str:
        return f"{self.what}: {self.why}; {self.fix}"


def caches(home: Path, env: dict) -> dict[str, Path]:
    """The caches trusted jobs load code or settings from, where this environment puts them."""
    ragged = Path(env.get("RAGGED_TUNING_DIR") or home / ".cache" / "ragged")
    return {
        "ragged's tuning cache": ragged,  # launch configurations (kernels/tuning.py)
        "ragged's build cache": Path(env.get("RAGGED_BUILD_DIR")
                                     or home / ".cache" / "ragged" / "build"),  # fastpath .so
        "Triton's cache": Path(env.get("TRITON_CACHE_DIR") or home / ".triton" / "cache"),
        "pip's cache": home / ".cache" / "pip",  # wheels pip built, installed without a build
    }  # fmt: skip


def _shown(path: Path, home: Path) -> str:
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)


def check_env(env: dict) -> list[Finding]:
    bad = sorted(k for k in env if k in ENV_NAMES
                 or (k.startswith(ENV_PREFIXES) and k not in ENV_HARMLESS))  # fmt: skip
    return [Finding(f"${k}", "set in the trusted job's environment (it chooses the code a step "
                    "runs, or where pip fetches it)",
                    "remove it from the runner service's environment (its .env file); pip's and "
                    "git's settings go in /etc/pip.conf and /etc/gitconfig, root's")
            for k in bad]  # fmt: skip


def the_admins(st: os.stat_result, uid: int) -> bool:
    """A file root owns and only root may write, read by a trusted user ``uid`` who is not
    root: no job of that user's (nor of another non-root user's) could have written it."""
    return st.st_uid == 0 != uid and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def check_home(home: Path, env: dict, uid: int) -> list[Finding]:
    """Configuration files this user could have written (2.)."""
    paths = [home / rel for rel in CONFIG_FILES]
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg:
        paths += [Path(xdg) / rel for rel in XDG_CONFIG_FILES]
    for site in sorted(home.glob(USER_SITE_GLOB)):
        paths += sorted(p for pattern in USER_SITE_CODE for p in site.glob(pattern))
    out = []
    for path in dict.fromkeys(paths):
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) or not the_admins(st, uid):
            owner = "a symbolic link" if stat.S_ISLNK(st.st_mode) else f"owned by uid {st.st_uid}"
            out.append(Finding(_shown(path, home), f"{owner}, not a read-only file of root's "
                               f"(the trusted user is uid {uid}): a job could have written it, "
                               "and git, pip or Python reads it",
                               f"delete it (rm {path}); if the runner's admin put it there, make "
                               f"it root's and read-only (sudo chown root: {path}; sudo chmod "
                               f"644 {path}), or move it to /etc"))  # fmt: skip
    return out


def check_caches(home: Path, env: dict, uid: int) -> list[Finding]:
    """Entries of the caches another user owns, group or others may write, or that are links
    (3.): the first of each cache."""
    out, seen = [], set()  # the tuning cache holds the build cache by default: one finding
    for name, root in caches(home, env).items():
        if not root.exists():
            continue
        for path in _walk(root):
            st = path.lstat()
            why = ("a symbolic link" if stat.S_ISLNK(st.st_mode)
                   else f"owned by uid {st.st_uid}, not {uid}" if st.st_uid != uid
                   else "writable by group or others" if st.st_mode & 0o022 else None)  # fmt: skip
            if why and path not in seen:
                seen.add(path)
                out.append(Finding(_shown(path, home), f"in {name}: {why}, so another user's job "
                                   "could have put it there",
                                   f"delete the cache (rm -rf {root}); the next trusted job "
                                   "builds it again as its own"))  # fmt: skip
                break
    return out


def _walk(root: Path):
    yield root
    for dirpath, dirnames, filenames in os.walk(root):  # never follows links
        for name in dirnames + filenames:
            yield Path(dirpath) / name


def check_workspace(workspace: Path) -> list[Finding]:
    """Tracked files changed, or untracked ones outside the ignored outputs (4.). git runs
    with no global or system configuration and no fsmonitor or hooks: a planted ~/.gitconfig
    runs nothing here."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    env = {k: v for k, v in env.items() if k in ("PATH", "LANG", "GIT_CONFIG_GLOBAL",
                                                 "GIT_CONFIG_NOSYSTEM")}  # fmt: skip
    out = subprocess.run(
        ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-C",
         str(workspace), "status", "--porcelain=v1", "--untracked-files=all"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if out.returncode != 0:
        return [
            Finding(
                str(workspace),
                "not a git checkout (" + out.stderr.strip()[:120] + ")",
                "run trusted targets in the job's checkout (actions/checkout)",
            )
        ]
    changed = [line[3:] for line in out.stdout.splitlines()]
    if not changed:
        return []
    more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
    return [Finding(f"{changed[0]}{more} in {workspace}", "changed or added since the checkout, "
                    "outside the job's ignored outputs (.venv, results/)",
                    "check out again (actions/checkout cleans the workspace); look for what "
                    "wrote there")]  # fmt: skip


def check(home: Path, workspace: Path | None, env: dict, uid: int) -> list[Finding]:
    """Every finding, in the order above."""
    found = check_env(env) + check_home(home, env, uid) + check_caches(home, env, uid)
    return found + (check_workspace(workspace) if workspace is not None else [])


def refuse_if_found(found: list[Finding], listed: bool = False) -> None:
    if found:
        where = "listed above" if listed else "ragbench trust check --list shows them"
        more = f" ({len(found) - 1} more, {where})" if len(found) > 1 else ""
        raise Untrusted(f"not running a trusted step: {found[0].line()}{more}")


def approve(client, *, pr: int, user: str, action: str, label: str | None, log=print) -> bool:
    """May this pull_request_target event run pull request ``pr``'s code on the GPU? True for
    a push (``PUSHES``) or the ``LABEL`` label by a user with write access; otherwise False,
    and a ``LABEL`` left from an earlier head is taken off."""
    if action == "labeled" and label != LABEL:
        log(f"the {label!r} label runs nothing here (only {LABEL!r})")
        return False
    if action != "labeled" and action not in PUSHES:
        log(f"a {action!r} event runs nothing here")
        return False
    permission = client.permission(user)
    what = f"the {LABEL} label" if action == "labeled" else f"a push ({action})"
    if permission in WRITERS:
        log(f"{what} by {user} ({permission}): the pull request's code runs in the sandbox")
        return True
    log(
        f"{what} by {user}, who has {permission!r} permission on {client.repo}: the pull "
        f"request's code does not run; a maintainer who read it adds the {LABEL} label"
    )
    if action != "labeled" and client.remove_label(pr, LABEL):
        log(f"took the {LABEL} label off PR #{pr}: it approved an earlier head")
    return False


def add_parser(sub) -> None:
    """``ragbench trust``: registered by ragbench.cli."""
    t = sub.add_parser(
        "trust",
        help="the trusted jobs' tripwire (check) and who may run a PR's code (approve)",
        description=__doc__.split("\n\n")[0] + " Exit 0 ok; 1 refused (approve); 2 a finding "
        "(check) or unusable input. docs/runner.md says how the runner is set up.",
    )  # fmt: skip
    tsub = t.add_subparsers(dest="trust_command", required=True, metavar="WHAT")
    c = tsub.add_parser(
        "check",
        help="refuse when the environment, the home or the workspace "
        "holds what a pull request's job could have planted (exit 2)",
    )
    c.add_argument("--home", type=Path, default=None, help="the trusted user's home (default ~)")
    c.add_argument("--workspace", type=Path, default=None,
                   help="the job's checkout (default: not checked)")  # fmt: skip
    c.add_argument("--list", action="store_true", help="print every finding, one a line")
    c.set_defaults(func=_check)
    a = tsub.add_parser(
        "approve",
        help="may this event run the pull request's code? (exit 0 "
        "yes, 1 no); GITHUB_TOKEN, GITHUB_REPOSITORY",
    )
    a.add_argument("--pr", type=int, required=True, help="pull request number")
    a.add_argument("--user", required=True, help="who pushed or labelled (the event's sender)")
    a.add_argument("--action", required=True, help="the pull_request_target event's action")
    a.add_argument("--label", default=None, help="the label added (labeled events)")
    a.add_argument("--repo", default=None, help="owner/name (default $GITHUB_REPOSITORY)")
    a.set_defaults(func=_approve)


def _check(args) -> int:
    home = (args.home or Path.home()).absolute()
    found = check(home, args.workspace, dict(os.environ), os.geteuid())
    if args.list:
        for f in found:
            print(f.line())
    refuse_if_found(found, args.list)
    print(f"ragbench trust: nothing planted (uid {os.geteuid()}, home {home})")
    return 0


def _approve(args) -> int:
    from .github import Client

    client = Client(args.repo or os.environ.get("GITHUB_REPOSITORY") or "",
                    os.environ.get("GITHUB_TOKEN") or "")  # fmt: skip
    log = lambda msg: print(f"ragbench trust approve: {msg}", flush=True)  # noqa: E731
    ok = approve(client, pr=args.pr, user=args.user, action=args.action, label=args.label,
                 log=log)  # fmt: skip
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """``python3 -s -E -m ragbench.trust ...``: as ``ragbench trust``, without the .venv. The
    check also runs from a copy of this file alone (``python3 -s -E trust.py check``: the
    runner's pre-job hook, docs/runner.md)."""
    p = argparse.ArgumentParser(prog="ragbench")
    add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["trust", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except (Untrusted, OSError, RuntimeError) as exc:  # RuntimeError: github.GitHubError
        print(f"ragbench trust: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
