"""Another asv project's checkout, which the gate measures with its own asv (``--config``):
the project, the line for a revision this checkout lacks, that project's commits."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from .. import git, project
from ..store import Store
from .errors import GateError


@dataclass(frozen=True)
class Foreign:
    """Another asv project the gate measures (``--config``): its config, asv's
    ``--environment`` spec of the environments to measure in (None: the config's own), and
    ``environment``, the name of the one of those to judge (None: a spec was given, or
    nothing)."""

    config: Path
    asv_environment: str | None = None
    environment: str | None = None


def foreign(config: Path, environment: str | None) -> Foreign:
    """The project ``--config`` names, checked (GateError, one line, where it is no asv
    config); ``environment``: an environment as the store names it (asv's ``conda-py3.12``,
    ``conda-py3.12-numpy1.26``, ``py2.7-Cython-numpy1.8``: ``asv_environments.spec``, a name
    without the type built with the config's ``environment_type``), or asv's own spec
    (``conda:3.12``); GateError, one line, where no spec can be derived from it, or the
    config names no ``environment_type``, without which asv 0.6 builds no environment
    (``asv_environments.untyped``: what can)."""
    from .. import asv_environments

    try:
        project.read(config)
        kind = project.asv_config(Path(config)).get("environment_type")
    except (OSError, ValueError) as exc:
        raise GateError(f"--config {config}: {exc}") from None
    if environment is None:
        return Foreign(Path(config).resolve())
    if not kind or not isinstance(kind, str):
        why = asv_environments.untyped(environment, str(config))
        raise GateError(f"--environment {environment!r}: {why}")
    if ":" in environment:
        return Foreign(Path(config).resolve(), environment)
    try:
        spec = asv_environments.spec(environment, kind)
    except ValueError as exc:
        raise GateError(f"--environment {environment!r}: {exc}") from None
    return Foreign(Path(config).resolve(), spec, environment)


def not_here(store: Store | None, machine: str, ref: str, exc: Exception) -> GateError:
    """The one line for a revision this checkout lacks: where the store holds another
    project's results of ``machine`` (``ragbench.project``), what to pass to measure them
    with that project's asv."""
    kept = project.load(store, machine) if store is not None else None
    if kept is None:
        return GateError(str(exc))
    name = kept.name or "another asv project"
    where = (
        f"pass --config {shlex.quote(kept.config)}" if Path(kept.config).is_file()
        else f"pass --config PATH, its asv.conf.json (ingest found it at {kept.config})"
    )  # fmt: skip
    return GateError(f"{ref} is not a commit of this checkout: machine {machine!r} holds "
                     f"{name}'s results ({kept.repo or kept.config}); {where} to measure them "
                     "with its asv, or --stored to compare the stored runs")  # fmt: skip


def not_here_to_settle(store: Store, machine: str, ref: str, sha: str) -> GateError:
    """The one line for ``--settle ref`` of a gate whose commit ``sha`` this checkout lacks:
    another project's gate is settled by its asv, with the config to pass."""
    kept = project.load(store, machine)
    conf = shlex.quote(kept.config) if kept is not None else "ASV_CONF"
    return GateError(f"--settle {ref}: {sha[:12]} is not a commit of this checkout: a gate of "
                     "another asv project's commits is settled by its asv, pass --config "
                     f"{conf} (and the gate's --environment)")  # fmt: skip


def project_commit(ref: str, store: Store, machine: str) -> str:
    """Another project's revision: the one stored commit (of any machine) it abbreviates,
    else as given (asv resolves it in its clone of the project)."""
    if git.is_range(ref):
        raise GateError(f"{ref!r} is a range of commits, where one commit is expected: pass "
                        "one revision (to gate A..B, pass --base A --head B)")  # fmt: skip
    stored = {r["commit_hash"] for r in store.runs(commit=ref, any_branch=True)}
    return stored.pop() if len(stored) == 1 and len(ref) >= 7 else ref
