"""What a person does about an alert (``ragbench.history.alerting``): the gate that re-measures its
cells, the bisection of its range, and the web page of its commits. ``ragbench alerts`` and the
dashboard's Alerts page print these."""

from __future__ import annotations

import re
import shlex

from .policies import Policies


def repro_command(alert: dict) -> str:
    """The gate that measures exactly the alert's cells: its commit against the one before."""
    from .discovery import bench_regex

    keys = [(c["benchmark"], c["metric"], c["param_key"]) for c in alert["cells"]]
    bench = " ".join(f"--bench {shlex.quote(b)}" for b in bench_regex(keys))
    base = alert["prev_commit_hash"] or f"{alert['commit_hash']}~1"
    return (
        f"ragbench gate --base {base[:12]} --head {alert['commit_hash'][:12]} --machine "
        f"{shlex.quote(alert['machine'])} {bench}"
    )


def repository_url(policies: Policies) -> str | None:
    """Where a commit's diff is shown: ``repository_url`` of ``[main]`` in the policies, else
    git's ``origin`` remote as a web address (``git@github.com:o/r.git`` ->
    ``https://github.com/o/r``), else None."""
    url = policies.main.get("repository_url")
    if isinstance(url, str) and url.startswith(("https://", "http://")):
        return url.rstrip("/")
    from . import runner as suite

    try:
        remote = suite.git("remote", "get-url", "origin")
    except suite.SuiteError:
        return None
    remote = re.sub(r"^git@([^:]+):", r"https://\1/", remote)
    remote = re.sub(r"^ssh://git@([^/]+)/", r"https://\1/", remote)
    return remote.removesuffix(".git").rstrip("/") if remote.startswith("https://") else None


def diff_url(repository: str | None, alert: dict) -> str | None:
    """The web page of the alert's commits: the range where the previous commit is known."""
    if not repository:
        return None
    if alert["prev_commit_hash"]:
        return f"{repository}/compare/{alert['prev_commit_hash']}...{alert['commit_hash']}"
    return f"{repository}/commit/{alert['commit_hash']}"


def bisect_command(alert: dict) -> str | None:
    """Where the step arrived with several commits, or with a merge: the bisection of one of
    its cells (``ragbench bisect``: the first-parent line from the previous measured commit,
    then a merge's branch against its merge-base). None where the range is one commit and no
    merge (it is the one), or holds none."""
    if not alert["prev_commit_hash"] or not alert["cells"]:
        return None
    from . import runner as suite

    prev, commit = alert["prev_commit_hash"], alert["commit_hash"]
    try:
        line = suite.git("rev-list", "--first-parent", "--ancestry-path", f"{prev}..{commit}")
        merge = len(suite.git("rev-list", "--parents", "-n", "1", commit).split()) > 2
    except suite.SuiteError:  # commits this clone lacks: the command says what it can
        line, merge = "", True
    if len(line.split()) == 1 and not merge:
        return None
    c = alert["cells"][0]
    cell = f"{c['benchmark']}.{c['metric']} {c['param_key']}"
    return (
        f"ragbench bisect --cell {shlex.quote(cell)} --good {prev[:12]} "
        f"--bad {commit[:12]} --machine {shlex.quote(alert['machine'])}"
    )
