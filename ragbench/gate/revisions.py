"""The commits a gate compares: a revision resolved to one commit (git's, or a stored run's),
refused in one line where it is a range of commits or names none, or where base and head
cannot be what was meant (``two_commits``)."""

from __future__ import annotations

import shlex

from .. import git
from ..store import Store
from .errors import GateError


def resolve_ref(ref: str, store: Store | None = None, machine: str = "") -> str:
    """The full hash of ``ref``: git's, or (comparing stored runs) the one commit of the store
    that starts with it (results made in another checkout). GateError for a range."""
    if git.is_range(ref):
        raise GateError(
            f"{ref!r} is a range of commits, where one commit is expected: pass one revision "
            "(to gate A..B, pass --base A --head B)"
        )
    try:
        return git.commit(ref)
    except git.GitError as exc:
        if store is None:
            raise GateError(str(exc)) from None
        runs = store.runs(machine=machine, commit=ref, any_branch=True)
        stored = {r["commit_hash"] for r in runs}
        if len(stored) == 1 and len(ref) >= 7:
            return stored.pop()
        raise GateError(_not_stored(store, ref, machine, stored)) from None


def _not_stored(store: Store, ref: str, machine: str, stored: set[str]) -> str:
    """Why ``ref`` names no one commit of the store's runs on ``machine`` (nor of this
    checkout), in one line: the machines whose runs have it, or the store's machines."""
    if len(stored) > 1 or (stored and len(ref) < 7):
        return (f"{ref!r} starts {len(stored)} stored commits of machine {machine!r}: pass at "
                "least 7 characters of the one meant")  # fmt: skip
    there = sorted({r["machine"] for r in store.runs(commit=ref, any_branch=True)})
    if there and len(ref) >= 7:
        return (f"the store has no run of {ref!r} on machine {machine!r}; it has runs of it on "
                f"{', '.join(there)}: pass --machine {shlex.quote(there[0])}")  # fmt: skip
    machines = store.machines()
    return (f"{ref!r} is no commit of this checkout, nor of a run on machine {machine!r} in "
            f"{store.name} (its machines: {', '.join(machines) or 'none'})")  # fmt: skip


def two_commits(base: str, head: str, base_ref: str, head_ref: str) -> None:
    """GateError where base and head cannot be what was meant: one commit (against itself a gate
    judges noise, and passed "X against X"), or head a strict ancestor of base (older than it:
    swapped, or a base that already holds head). Commits this clone lacks (stored runs of
    another checkout) are only checked for equality."""
    if base == head:
        raise GateError(
            f"--base {base_ref} and --head {head_ref} are the same commit {base[:12]}: a gate "
            "compares two commits; pass the pull request's merge base as --base "
            "(git merge-base origin/main HEAD) and its head as --head"
        )
    try:
        git.run("merge-base", "--is-ancestor", head, base)
    except git.GitError:  # not an ancestor (exit 1), or not in this clone
        return
    raise GateError(
        f"--head {head_ref} ({head[:12]}) is older than --base {base_ref} ({base[:12]}), an "
        "ancestor of it: pass the older commit as --base and the newer as --head"
    )
