"""asv's environments by the names its result files and the store give them
(``asv.environment.get_env_name``): the type, ``py`` and the Python, then the matrix's
requirements and variables (``conda-py3.12``, ``conda-py3.12-numpy1.26``,
``virtualenv-py3.8-Cython-numpy1.17``); asv before 0.5 wrote them without the type
(``py2.7-Cython-numpy1.8``), asv since then writes every one with it.

asv's ``--environment`` takes a spec, ``TYPE:X.Y``, which selects every environment of that
type and Python that the config's matrix has: a gate measures with the spec of the name it is
given (``spec``) and keeps, of what asv measured, the runs of that name (``is_measured_as``).
asv's bisection (``asv find``) searches the first environment ``-E`` selects, so it is given
the one that selects that environment alone (``selector``), asv 0.6 taking a name as well."""

from __future__ import annotations

import re

NAME = re.compile(r"(?:(?P<type>[a-z][a-z0-9_]*)-)?py(?P<python>\d+(?:\.\d+)*)(?:-(?P<rest>.+))?")


def spec(name: str, environment_type: str | None,
         config: str = "the config has no environment_type") -> str:  # fmt: skip
    """asv's ``--environment`` spec that measures the environment ``name`` (with the others of
    its type and Python the config's matrix has): ``conda-py3.12-numpy1.26`` -> ``conda:3.12``;
    a name without the type takes ``environment_type`` (the config's). ValueError, one line
    without the name, where none can be: a name not of asv's form, or one without the type
    where ``environment_type`` is None (``config``: why, in words)."""
    m = NAME.fullmatch(name)
    if m is None:
        raise ValueError("not an asv environment's name (TYPE-pyX.Y, then its matrix's "
                         "requirements: conda-py3.12-numpy1.26) that asv's --environment spec "
                         "can be derived from; pass asv's spec (conda:3.12)")  # fmt: skip
    kind = m.group("type") or environment_type
    if not kind:
        raise ValueError(f"the name has no environment type (asv before 0.5 named it so) and "
                         f"{config}: pass --environment with the type asv is to build it "
                         f"with, conda-{name} or virtualenv-{name}")  # fmt: skip
    return f"{kind}:{m.group('python')}"


def is_measured_as(measured: str | None, name: str, asv_spec: str) -> bool:
    """Whether asv's environment ``measured`` (a result file's ``env_name``), asv run with
    ``asv_spec``, is the environment ``name``: the same name, or ``name`` without the type
    (asv before 0.5 wrote it so) and ``measured`` that name under the spec's type."""
    if measured is None:
        return False
    m = NAME.fullmatch(name)
    legacy = m is not None and m.group("type") is None
    return measured == name or (legacy and measured == f"{asv_spec.split(':')[0]}-{name}")


def selector(name: str, config: str) -> str:
    """asv's ``-E`` that selects the environment ``name`` alone, as asv 0.6 reads the config
    ``config`` (``asv.environment.get_environments``, which ``asv find`` searches the first
    of): the spec ``TYPE:X.Y`` where the config's matrix has that one alone of its type and
    Python (``conda-py3.12`` -> ``conda:3.12``), else the name itself, which asv 0.6 takes
    where the config's ``environment_type`` builds it (``conda-py3.12-numpy1.26``); a name
    without the type (asv before 0.5) as the config's type names it now. ValueError, one line
    without the name, where neither selects it: the config builds no environment of that name
    (or asv would search another), or it cannot be read here."""
    from pathlib import Path

    from .project import asv_config

    try:
        conf = asv_config(Path(config))
    except (OSError, ValueError):
        raise ValueError(f"its config {config} cannot be read here to find asv's environment "
                         "of that name") from None  # fmt: skip
    kind = conf.get("environment_type") if isinstance(conf.get("environment_type"), str) else None
    if not kind and NAME.fullmatch(name):
        raise ValueError(f"its config {config} has no environment_type, without which asv 0.6 "
                         "builds no environment")  # fmt: skip
    asv_spec = spec(name, kind)  # ValueError where the name is not of asv's form
    full = name if NAME.fullmatch(name).group("type") else f"{kind}-{name}"
    chosen = selected(conf, asv_spec)
    if chosen == [full]:
        return asv_spec
    if selected(conf, full) == [full]:
        return full
    built = ", ".join(chosen) or "no environment"
    raise ValueError(f"asv (-E {asv_spec}) builds {built} from {config}, and no environment "
                     f"{full}: asv find would search another, or none")  # fmt: skip


def selected(conf: dict, asv_spec: str) -> list[str]:
    """The names of the environments asv 0.6's ``-E asv_spec`` selects of the config ``conf``
    (an ``asv.conf.json`` as read), in asv's order; none where asv knows no such one.
    ValueError, one line, where asv cannot read the config's matrix."""
    from asv.config import Config
    from asv.environment import EnvironmentUnavailable, get_environments

    c = Config()
    c.__dict__.update(conf)
    try:
        return [e.name for e in get_environments(c, [asv_spec], verbose=False)]
    except EnvironmentUnavailable:  # asv's: a BaseException
        return []
    except Exception as exc:  # asv's own reading of a config it would refuse
        raise ValueError(f"asv reads no environments from it: {exc}") from None
