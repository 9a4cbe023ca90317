"""git in this checkout: a command's output, a revision as one commit or a set of revisions as
commits (the one check of git's range notations every command shares), a temporary worktree."""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# git's notations of a set of commits (A..B, A...B, ^A, A^@, A^!, A^-), where one commit is
# expected: ``commits`` expands a range, so HEAD~2..HEAD once became its oldest commit
RANGE = re.compile(r"\.\.|^\^|\^[@!-]")


class GitError(RuntimeError):
    """git failed, or a revision is no commit of this checkout (its message, one line)."""


def run(*args: str, cwd: Path | None = None) -> str:
    """git's standard output, stripped; GitError with its standard error where it fails."""
    out = subprocess.run(["git", *args], cwd=cwd or REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


def is_range(ref: str) -> bool:
    """Whether ``ref`` is written as a set of commits (``RANGE``), not one."""
    return bool(RANGE.search(ref))


def commit(ref: str) -> str:
    """The full hash of the one commit ``ref`` names; GitError for a range or one unknown here."""
    if is_range(ref):
        raise GitError(f"{ref!r} is a range of commits, where one commit is expected")
    return run("rev-parse", "--verify", f"{ref}^{{commit}}")


def commits(revs: list[str], first_parent: bool = False) -> list[str]:
    """Full commit hashes, oldest first; a range ``A..B`` expands to its commits (with
    ``first_parent``, only those on B's first-parent line: a merge is one commit, not the
    commits it merged)."""
    shas: list[str] = []
    for rev in revs:
        if ".." in rev:
            shas += run("rev-list", "--reverse", *["--first-parent"] * first_parent, rev).split()
        else:
            shas.append(commit(rev))
    return list(dict.fromkeys(shas))


def first_parent_line(good: str, bad: str) -> list[str]:
    """The first-parent commits after ``good`` up to ``bad`` that contain ``good``, oldest
    first (``bad`` last)."""
    return run("rev-list", "--reverse", "--first-parent", "--ancestry-path",
               f"{good}..{bad}").split()  # fmt: skip


def parents(sha: str) -> list[str]:
    """The commit's parents, first parent first."""
    return run("rev-list", "--parents", "-n", "1", sha).split()[1:]


@contextlib.contextmanager
def worktree(sha: str, work: Path, prefix: str = "src") -> Iterator[Path]:
    """A detached worktree of ``sha`` at ``work/<prefix>-<sha>``, removed afterwards."""
    path = work / f"{prefix}-{sha[:12]}"
    run("worktree", "add", "--detach", "--force", str(path), sha)
    try:
        yield path
    finally:
        run("worktree", "remove", "--force", str(path))
