"""What a person does about an alert (``ragbench.history.alerting``): the gate that re-measures its
cells, the bisection of its range, and the web page of its commits. ``ragbench alerts`` and the
dashboard's Alerts page print these.

Where the alert's machine holds another asv project's results (``ragbench.project``: ingest
kept the ``asv.conf.json`` it found beside them, or ``--config``), each is that project's: the
gate runs asv with its config (``ragbench gate --config``), the bisection is asv's own
(``asv find --config``: ``ragbench bisect`` walks this checkout's commits), and the link is of
its repository (its ``repo`` or ``show_commit_url``), each benchmark named as asv names it.
Where no project is known, the link and the commands are this checkout's only for commits it
has (``in_this_checkout``): another project's results ingested without their config get
none, and a line that says why."""

from __future__ import annotations

import re
import shlex

from . import git
from .policies import Policies
from .project import Project


def _keys(alert: dict, project: Project | None = None) -> list[tuple[str, str, str]]:
    """The alert's cells' keys; of ``project``, those its suite still has (``live_cells``)."""
    return [(c["benchmark"], c["metric"], c["param_key"]) for c in live_cells(alert, project)]


def live_cells(alert: dict, project: Project | None) -> list[dict]:
    """The alert's cells; of ``project``, those whose benchmark its suite still has (not
    ``gone_cells``)."""
    gone = gone_cells(alert, project)
    return [c for c in alert["cells"] if (c["benchmark"], c["metric"], c["param_key"]) not in gone]


def gone_cells(alert: dict, project: Project | None) -> list[tuple[str, str, str]]:
    """The alert's cells whose benchmark ``project``'s suite no longer has (its asv
    ``benchmarks.json`` lists no such name): nothing can measure them again."""
    from .discovery import asv_name
    from .project import benchmark_names

    names = benchmark_names(project) if project is not None else None
    if names is None:
        return []
    keys = [(c["benchmark"], c["metric"], c["param_key"]) for c in alert["cells"]]
    return [k for k in dict.fromkeys(keys) if asv_name(k) not in names]


def pytest_benchmarks(names) -> bool:
    """Whether the benchmarks ``names`` are all pytest-benchmark's (pytest node ids): cells
    re-measured by pytest in the project's clone, bisected by no asv suite."""
    return all("::" in name for name in names)


def environments(alert: dict) -> list[str]:
    """The environments of the alert's cells (asv's env_name, ...), each once, in order."""
    return list(dict.fromkeys(c["environment"] for c in alert["cells"] if c.get("environment")))


def not_re_measured(alert: dict, project: Project | None) -> dict[str, str]:
    """The alert's environments of ``project`` (another asv project's results) that no gate
    can measure again, each with the reason in words (``asv_environments.measured_with``, asv
    0.6's own reading of the config): asv's spec of the name builds no environment of that
    name from the project's config (its matrix has another), or asv builds none of it (no
    ``environment_type``), or the config cannot be read here to say."""
    from .asv_environments import measured_with

    return refused(alert, project, measured_with)


def refused(alert: dict, project: Project | None, check) -> dict[str, str]:
    """The alert's environments of ``project`` that ``check(env, config)`` (an
    ``asv_environments`` reading of the project's config) refuses, each with its one line."""
    out = {}
    for env in environments(alert) if project is not None else []:
        try:
            check(env, project.config)
        except ValueError as exc:
            out[env] = str(exc)
    return out


def repro_command(alert: dict, project: Project | None = None) -> str | None:
    """The gate that measures exactly the alert's cells: its commit against the one before;
    of ``project`` (another asv project's results) with its config, and in the alert's
    environment where it has one (cells in several: one gate an environment, joined by
    `` ; ``), the cells its suite no longer has left out (``gone_cells``), and those of an
    environment no gate can measure again (``not_re_measured``); None where that is every
    one."""
    from .discovery import bench_regex

    skip = not_re_measured(alert, project)
    if skip:
        alert = {**alert, "cells": [c for c in alert["cells"] if c.get("environment") not in skip]}
    keys = _keys(alert, project)
    if not keys:
        return None
    if pytest_benchmarks(k[0] for k in keys):
        return pytest_command(alert, keys)
    if project is None and not in_this_checkout(alert):
        return None  # this suite's gate would measure commits it does not have
    if project is not None and len(environments(alert)) > 1:
        # the gate judges one environment (asv measures every one of the config's, and the
        # gate refuses to pool them): one gate an environment, each with its own cells
        gates = [repro_command({**alert, "cells": [c for c in alert["cells"]
                                                   if c.get("environment") == env]}, project)
                 for env in environments(alert)]  # fmt: skip
        return " ; ".join(g for g in gates if g) or None
    bench = " ".join(f"--bench {shlex.quote(b)}" for b in bench_regex(keys))
    base = base_of(alert)
    config = ""
    if project is not None:
        envs = environments(alert)
        config = f" --config {shlex.quote(project.config)}" + (
            f" --environment {shlex.quote(envs[0])}" if envs else ""
        )
    return (
        f"ragbench gate{config}{_mode(alert, project)} --base {base} "
        f"--head {alert['commit_hash'][:12]} --machine {shlex.quote(alert['machine'])} {bench}"
    )


def base_of(alert: dict) -> str:
    """The commit a re-measurement compares the alert's against, abbreviated: the previous
    measured one, else the commit's parent (``C~1``; before, the ``~1`` was cut off with the
    hash's tail, and the gate was of the commit against itself)."""
    prev = alert["prev_commit_hash"]
    return prev[:12] if prev else f"{alert['commit_hash'][:12]}~1"


def _mode(alert: dict, project: Project | None) -> str:
    """`` --mode full`` where this suite's runs of the alert's commit measured the full grid
    (``bench-main`` records it): the quick grid, the commands' default, lacks most cells."""
    return f" --mode {alert['mode']}" if project is None and alert.get("mode") == "full" else ""


def repository_url(policies: Policies) -> str | None:
    """Where a commit's diff is shown: ``repository_url`` of ``[main]`` in the policies, else
    git's ``origin`` remote as a web address (``git@github.com:o/r.git`` ->
    ``https://github.com/o/r``), else None."""
    url = policies.main.get("repository_url")
    if isinstance(url, str) and url.startswith(("https://", "http://")):
        return url.rstrip("/")
    try:
        remote = git.run("remote", "get-url", "origin")
    except git.GitError:
        return None
    remote = re.sub(r"^git@([^:]+):", r"https://\1/", remote)
    remote = re.sub(r"^ssh://git@([^/]+)/", r"https://\1/", remote)
    return remote.removesuffix(".git").rstrip("/") if remote.startswith("https://") else None


def in_this_checkout(alert: dict) -> bool:
    """Whether the alert's commits are this checkout's, whose repository and suite the link and
    the commands name where no ``project`` is known: this suite's results (no cell has another
    harness's environment), or a commit git finds here (a project measuring itself in its own
    clone). Another project's results ingested without their asv.conf.json are neither."""
    if not any(c.get("environment") for c in alert["cells"]):
        return True
    return _commit_here(alert["commit_hash"])


_HERE: set[str] = set()  # commits found here: a commit stays, one missing may be fetched later


def _commit_here(sha: str) -> bool:
    if sha not in _HERE:
        try:
            git.run("cat-file", "-e", f"{sha}^{{commit}}")
        except git.GitError:
            return False
        _HERE.add(sha)
    return True


def diff_url(repository: str | None, alert: dict, project: Project | None = None) -> str | None:
    """The web page of the alert's commits: the range where the previous commit is known; of
    ``project``'s repository where the results are another project's (``repository``, this
    checkout's, is then not used), of this checkout's only where the commits are its
    (``in_this_checkout``)."""
    if project is not None:
        return project.diff_url(alert["prev_commit_hash"], alert["commit_hash"])
    if not repository or not in_this_checkout(alert):
        return None
    if alert["prev_commit_hash"]:
        return f"{repository}/compare/{alert['prev_commit_hash']}...{alert['commit_hash']}"
    return f"{repository}/commit/{alert['commit_hash']}"


def bisect_command(alert: dict, project: Project | None = None) -> str | None:
    """Where the step arrived with several commits, or with a merge: the bisection of one of
    its cells (``ragbench bisect``: the first-parent line from the previous measured commit,
    then a merge's branch against its merge-base). None where the range is one commit and no
    merge (it is the one), or holds none, or where the cells are pytest-benchmark's (no asv
    suite measures them). Of ``project``: asv's own search (``asv find``) with its config,
    whose commits this checkout does not have (``asv_find_command``)."""
    if not alert["prev_commit_hash"] or not alert["cells"]:
        return None
    if project is not None:
        return asv_find_command(alert, project)
    if pytest_benchmarks(c["benchmark"] for c in alert["cells"]):
        return None
    if not in_this_checkout(alert):
        return None
    from .discovery import cell_text

    prev, commit = alert["prev_commit_hash"], alert["commit_hash"]
    try:
        line, merge = git.first_parent_line(prev, commit), len(git.parents(commit)) > 1
    except git.GitError:  # commits this clone lacks: the command says what it can
        line, merge = [], True
    if len(line) == 1 and not merge:
        return None
    c = alert["cells"][0]
    cell = cell_text((c["benchmark"], c["metric"], c["param_key"]))
    return (
        f"ragbench bisect --cell {shlex.quote(cell)}{_mode(alert, None)} --good {prev[:12]} "
        f"--bad {commit[:12]} --machine {shlex.quote(alert['machine'])}"
    )


def not_followed(
    alert: dict, project: Project | None, bisect: str | None
) -> tuple[list[str], list[str]]:
    """The lines for the alert's environments that its printed follow-ups leave out: "Not
    re-measured in ENV: why" (``not_re_measured``), and where ``bisect`` (its
    ``bisect_command``) is None, "Not bisected in ENV: why" of the cells its project's suite
    still has ("as above" where the reason is the re-measure's)."""
    skipped = not_re_measured(alert, project)
    measured = [f"Not re-measured in {env}: {why}" for env, why in skipped.items()]
    pytest = pytest_benchmarks(c["benchmark"] for c in alert["cells"])  # its own re-measure
    if project is None and not pytest and not in_this_checkout(alert):
        measured.append(f"Not linked, re-measured or bisected here: {alert['commit_hash'][:12]} "
                        "is no commit of this checkout (another project's results, ingested "
                        "without its asv.conf.json: ingest them from beside it for its "
                        "repository's link and commands)")  # fmt: skip
    if bisect is not None or project is None or not alert["prev_commit_hash"]:
        return measured, []
    left = {**alert, "cells": live_cells(alert, project)}
    return measured, [f"Not bisected in {env}: " + ("as above" if skipped.get(env) == why else why)
                      for env, why in not_bisected(left, project).items()]  # fmt: skip


def not_bisected(alert: dict, project: Project | None) -> dict[str, str]:
    """The alert's environments of ``project`` (another asv project's results) that asv's
    bisection cannot select alone, each with the reason in words
    (``asv_environments.selector``): ``asv find`` searches the first environment its ``-E``
    selects, and another one's answer would not be this alert's."""
    from .asv_environments import selector

    return refused(alert, project, selector)


def asv_find_command(alert: dict, project: Project) -> str | None:
    """asv's own bisection of the alert's first cell's benchmark in ``project``'s checkout:
    ``asv machine --yes --config CONF --machine M && asv find --config CONF --machine M [-E
    ENV] PREV..COMMIT '^name$'`` (asv searches a
    benchmark, all its parameters together; a throughput's drop with ``--invert``), ``ENV``
    what selects the cell's environment alone (``asv_environments.selector``: ``conda:3.12``,
    or asv 0.6's name of a matrix entry), of the first cell its suite still has in an
    environment asv can select so; None where it has none (``not_bisected`` says why)."""
    from .asv_environments import selector
    from .discovery import asv_name

    skip = not_bisected(alert, project)
    here = [c for c in live_cells(alert, project) if c.get("environment") not in skip]
    if not here:
        return None
    c = here[0]
    name = "^" + re.escape(asv_name((c["benchmark"], c["metric"], c["param_key"]))) + "$"
    env = selector(c["environment"], project.config) if c.get("environment") else None
    invert = c.get("after") is not None and c.get("before") is not None and (
        c["after"] < c["before"]
    )  # fmt: skip
    where = ["--config", project.config, "--machine", alert["machine"]]
    words = ["asv", "find", *where, *(["-E", env] if env else []), *(["--invert"] * invert)]
    words += [f"{alert['prev_commit_hash'][:12]}..{alert['commit_hash'][:12]}", name]
    # asv find refuses a machine this host's asv has no record of: ``asv machine`` makes it
    return f"{shlex.join(['asv', 'machine', '--yes', *where])} && {shlex.join(words)}"


def node_id(key: tuple[str, str, str]) -> str:
    """pytest's node id of a pytest-benchmark cell: its test and, where it has one, its
    parameter id in brackets (``tests/test_x.py::test_y[obj0-3]``)."""
    from .discovery import parse_params

    param = parse_params(key[2]).get("param")
    return key[0] if param is None else f"{key[0]}[{param}]"


def pytest_command(alert: dict, keys: list[tuple[str, str, str]]) -> str:
    """The re-measurement of pytest-benchmark cells: each of the two commits checked out and
    the cells' tests run by pytest-benchmark (``--benchmark-only``, JSON with the rounds'
    data), both ingested into a store of their own (main's runs of the two commits, in the
    store the alert came from, would be pooled in: the data that raised it), then gated as
    stored on this machine (the node pytest-benchmark names its runs by: the host name, the
    gate's default ``--machine``)."""
    base = base_of(alert)
    head = alert["commit_hash"][:12]
    nodes = " ".join(shlex.quote(n) for n in dict.fromkeys(node_id(k) for k in keys))
    run = "pytest --benchmark-only --benchmark-json={}.json " + nodes
    store = f"--store ragbench-remeasure-{head}.duckdb"
    return (
        f"git checkout {base} && {run.format('base')} && git checkout {head} && "
        f"{run.format('head')} && ragbench ingest {store} --branch remeasure base.json head.json"
        f" && ragbench gate --stored {store} --base {base} --head {head}"
    )
