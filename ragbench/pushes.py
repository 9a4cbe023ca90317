"""``ragbench record``: main's history, one pushed commit at a time (bench-main.yml).

The commits are main's first-parent line from the push's ``before`` to ``after`` (a merge is
one commit, not the commits it merged), plus any older first-parent commits not yet in the
store for this machine (a push whose job GitHub cancelled while it waited, or one that failed,
is caught up by the next). Each commit is measured, then ingested at once with branch ``main``,
so a later failure loses nothing measured before it; a benchmark that raised is stored as
failed. Acceptances given on a pull request are carried to the main commit that merged it,
the pull request named by GitHub's commit -> pull request association (``pr.merged_pulls``),
never by the commit's subject; with no GitHub access (no ``client``: no token, a local run)
none is carried, and the log says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import asv_run, git
from .github import Client, GitHubError
from .history import detection
from .policies import Policies
from .pr import merged_pulls
from .result_files import ingest
from .store import Store

ZERO = "0" * 40  # GitHub's ``before`` for a new branch


@dataclass
class Recorded:
    stored: list[str] = field(default_factory=list)  # commits measured and ingested
    benchmark_failures: list[str] = field(default_factory=list)  # asv exited non-zero
    refused: list[str] = field(default_factory=list)  # a result file ingest refused
    unmeasured: list[tuple[str, str]] = field(default_factory=list)  # (commit, why)
    skipped: list[str] = field(default_factory=list)  # already in the store
    left_out: int = 0  # older unstored commits beyond max_commits
    carried: int = 0  # accepted cells carried to main commits
    uncarried: list[tuple[str, str]] = field(default_factory=list)  # (commit, GitHub's error)

    @property
    def exit_code(self) -> int:
        """0 all stored; 1 a benchmark failed or a file was refused; 2 a commit the suite
        could not run at all, or whose pull request GitHub could not be asked for."""
        if self.unmeasured or self.uncarried:
            return 2
        return 1 if self.benchmark_failures or self.refused else 0


def commits(store: Store, machine: str, before: str | None, after: str,
            max_commits: int) -> tuple[list[str], list[str], int]:  # fmt: skip
    """(to measure, oldest first; already stored; older unstored commits left out)."""
    stored = {r["commit_hash"] for r in store.runs(machine=machine)}
    pushed = (
        git.commits([f"{before}..{after}"], first_parent=True)
        if before and before != ZERO and _known(before)
        else git.commits([after])
    )
    line = git.run("rev-list", "--first-parent", f"--max-count={max_commits + 1}",
                     after).split()  # fmt: skip
    behind = []  # first-parent ancestors since the newest stored one
    if stored:
        for sha in line:
            if sha in stored:
                break
            behind.append(sha)
        else:
            behind = []  # no stored commit within reach: measure the push alone
    wanted = list(dict.fromkeys([*reversed(behind), *pushed]))
    left_out = max(0, len(wanted) - max_commits)
    wanted = wanted[left_out:]
    return [c for c in wanted if c not in stored], [c for c in wanted if c in stored], left_out


def _known(rev: str) -> bool:
    try:
        git.run("cat-file", "-e", f"{rev}^{{commit}}")
    except git.GitError:
        return False
    return True


def carry(store: Store, client: Client | None, sha: str, branch: str, out: Recorded,
          log: Callable[[str], None]) -> None:  # fmt: skip
    """Carry to main commit ``sha`` the acceptances of the pull requests GitHub says merged it
    into ``branch`` (none without a ``client``)."""
    if client is None:
        return
    try:
        merged = merged_pulls(client, sha, branch)
    except GitHubError as exc:
        out.uncarried.append((sha, str(exc)))
        log(f"record: {sha[:12]}: GitHub could not say which pull request merged it ({exc}); "
            "its acceptances are not carried: re-run the job")  # fmt: skip
        return
    n = store.carry_acceptances(sha, merged) if merged else 0
    out.carried += n
    prs = ", ".join(f"#{number}" for number, _ in merged) or "none"
    log(f"record: {sha[:12]}: merged pull request(s) per GitHub: {prs}; {n} accepted cell(s) "
        "carried to it")  # fmt: skip


def record(store: Store, *, before: str | None, after: str, machine: str, mode: str,
           results_dir: Path, bench: list[str] = (), branch: str = "main",
           max_commits: int = 30, client: Client | None = None,
           policies: Policies | None = None,
           log: Callable[[str], None] = print) -> Recorded:  # fmt: skip
    """Measure and store main's pushed commits (module docstring); with ``client``, carry each
    one's merged pull request's acceptances to it, also for commits stored before (a re-run
    carries what a GitHub failure left). Each stored commit's change points and main's alerts
    are brought up to date with ``policies`` (default: the shipped policies.toml)."""
    todo, done, left_out = commits(store, machine, before, after, max_commits)
    out = Recorded(skipped=done, left_out=left_out)
    if client is None:
        log(
            "record: no GitHub access ($GITHUB_TOKEN unset): no pull request's acceptance is "
            "carried to main (its pull request is taken only from GitHub's association)"
        )
    if left_out:
        log(f"record: {left_out} older unstored commit(s) left out (--max-commits)")
    for sha in done:
        log(f"record: {sha[:12]} is already stored for {machine}: skipped")
        carry(store, client, sha, branch, out, log)
    for i, sha in enumerate(todo, 1):
        log(f"record: [{i}/{len(todo)}] {sha[:12]}")
        try:
            (summary,) = asv_run.run([sha], mode=mode, results_dir=results_dir, machine=machine,
                                     bench=bench, log=log)  # fmt: skip
        except (asv_run.SuiteError, git.GitError) as exc:
            out.unmeasured.append((sha, str(exc)))
            log(f"record: {sha[:12]} could not be measured: {exc}")
            continue
        if summary["asv_exit"] != 0:
            out.benchmark_failures.append(sha)
        report = ingest(store, [Path(summary["result"])], branch=branch, log=log)
        detection.update(store, report.new_runs, policies)
        if report.failed:
            out.refused.append(sha)
        else:
            out.stored.append(sha)
        carry(store, client, sha, branch, out, log)
    return out
