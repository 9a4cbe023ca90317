"""asv's environments by the names its result files and the store give them
(``asv.environment.get_env_name``): the type, ``py`` and the Python, then the matrix's
requirements and variables (``conda-py3.12``, ``conda-py3.12-numpy1.26``,
``virtualenv-py3.8-Cython-numpy1.17``); asv before 0.5 wrote them without the type
(``py2.7-Cython-numpy1.8``), asv since then writes every one with it.

asv's ``--environment`` takes a spec, ``TYPE:X.Y``, which selects every environment of that
type and Python that the config's matrix has: a gate measures with the spec of the name it is
given (``spec``) and keeps, of what asv measured, the runs of that name (``is_measured_as``),
so it can measure a name only where that spec builds it from the config (``measured_with``).
asv's bisection (``asv find``) searches the first environment ``-E`` selects, so it is given
the one that selects that environment alone (``selector``), asv 0.6 taking a name as well.
Both ask asv 0.6 itself (``get_environments``) what it builds (``built``), which is nothing
where the config has no ``environment_type`` (``untyped``)."""

from __future__ import annotations

import functools
import json
import re

NAME = re.compile(r"(?:(?P<type>[a-z][a-z0-9_]*)-)?py(?P<python>\d+(?:\.\d+)*)(?:-(?P<rest>.+))?")


def spec(name: str, environment_type: str | None, config: str = "") -> str:
    """asv's ``--environment`` spec that measures the environment ``name`` (with the others of
    its type and Python the config's matrix has): ``conda-py3.12-numpy1.26`` -> ``conda:3.12``;
    a name without the type takes ``environment_type`` (the config's). ValueError, one line
    without the name, where none can be: a name not of asv's form, or one without the type
    where ``environment_type`` is None (``untyped``, of the config ``config``)."""
    m = NAME.fullmatch(name)
    if m is None:
        raise ValueError("not an asv environment's name (TYPE-pyX.Y, then its matrix's "
                         "requirements: conda-py3.12-numpy1.26) that asv's --environment spec "
                         "can be derived from; pass asv's spec (conda:3.12)")  # fmt: skip
    kind = m.group("type") or environment_type
    if not kind:
        raise ValueError(untyped(name, config))
    return f"{kind}:{m.group('python')}"


def untyped(name: str, config: str = "") -> str:
    """Why asv 0.6 builds the environment ``name`` of the config ``config`` (its path; "": the
    config) no more than any other, which names no ``environment_type``, and what can build it
    (asv refuses such a config, "Environment type must be specified", whatever ``-E`` says):
    one line, the type to name that of the name (or of asv's spec, ``conda:3.12``) where it
    has one."""
    m = NAME.fullmatch(name)
    typed = m.group("type") if m else name.split(":")[0] if ":" in name else None
    kind = f'"{typed}"' if typed else '"conda" or "virtualenv"'
    where = f"its config {config}" if config else "the config"
    return (f"{where} has no environment_type, without which asv 0.6 builds no environment: "
            f"name the type the results were measured with in it, or in a copy beside it "
            f"given as --config (\"environment_type\": {kind})")  # fmt: skip


def is_measured_as(measured: str | None, name: str, asv_spec: str) -> bool:
    """Whether asv's environment ``measured`` (a result file's ``env_name``), asv run with
    ``asv_spec``, is the environment ``name``: the same name, or ``name`` without the type
    (asv before 0.5 wrote it so) and ``measured`` that name under the spec's type."""
    if measured is None:
        return False
    m = NAME.fullmatch(name)
    legacy = m is not None and m.group("type") is None
    return measured == name or (legacy and measured == f"{asv_spec.split(':')[0]}-{name}")


def built(name: str, config: str) -> tuple[dict, str, str, list[str]]:
    """What asv 0.6 builds from the config ``config`` for the environment ``name``
    (``asv.environment.get_environments``): the config as read, asv's spec of the name
    (``spec``: ``TYPE:X.Y``, a name without the type, asv before 0.5's, in the config's
    ``environment_type``), the name as asv 0.6 gives it (that type added to such a name), and
    the environments the spec selects, in asv's order. ValueError, one line without the name,
    where the config cannot be read here, names no ``environment_type`` (``untyped``), or the
    name is not of asv's form."""
    from pathlib import Path

    from .project import asv_config

    try:
        conf = asv_config(Path(config))
    except (OSError, ValueError):
        raise ValueError(f"its config {config} cannot be read here to find asv's environment "
                         "of that name") from None  # fmt: skip
    kind = conf.get("environment_type") if isinstance(conf.get("environment_type"), str) else None
    if not kind and NAME.fullmatch(name):
        raise ValueError(untyped(name, config))
    asv_spec = spec(name, kind)  # ValueError where the name is not of asv's form
    full = name if NAME.fullmatch(name).group("type") else f"{kind}-{name}"
    return conf, asv_spec, full, selected(conf, asv_spec)


def measured_with(name: str, config: str) -> str:
    """asv's spec with which ``ragbench gate --config config --environment name`` measures the
    environment ``name`` (``spec``: asv builds every environment it selects, and the gate judges
    the runs of that name alone). ValueError, one line without the name, where the gate would
    judge none (``built``): the spec builds no environment of that name from the config (asv's
    matrix has another, as django-asv's ``conda-py3.12`` for ``conda-py3.12-numpy1.26``), or
    asv builds none of it here."""
    _, asv_spec, full, chosen = built(name, config)
    if full in chosen:
        return asv_spec
    raise ValueError(absent(asv_spec, chosen, config, full) + ": the gate would measure "
                     "another, or none")  # fmt: skip


def absent(asv_spec: str, chosen: list[str], config: str, full: str) -> str:
    """The words for asv's ``-E asv_spec`` building ``chosen`` from ``config``, and not the
    environment ``full``."""
    built = ", ".join(chosen) or "no environment"
    return f"asv (-E {asv_spec}) builds {built} from {config}, and no environment {full}"


def selector(name: str, config: str) -> str:
    """asv's ``-E`` that selects the environment ``name`` alone, as asv 0.6 reads the config
    ``config`` (``asv.environment.get_environments``, which ``asv find`` searches the first
    of): the spec ``TYPE:X.Y`` where the config's matrix has that one alone of its type and
    Python (``conda-py3.12`` -> ``conda:3.12``), else the name itself, which asv 0.6 takes
    where the config's ``environment_type`` builds it (``conda-py3.12-numpy1.26``); a name
    without the type (asv before 0.5) as the config's type names it now. ValueError, one line
    without the name, where neither selects it: the config builds no environment of that name
    (or asv would search another), or it cannot be read here (``built``)."""
    conf, asv_spec, full, chosen = built(name, config)
    if chosen == [full]:
        return asv_spec
    if selected(conf, full) == [full]:
        return full
    raise ValueError(absent(asv_spec, chosen, config, full) + ": asv find would search "
                     "another, or none")  # fmt: skip


def selected(conf: dict, asv_spec: str) -> list[str]:
    """The names of the environments asv 0.6's ``-E asv_spec`` selects of the config ``conf``
    (an ``asv.conf.json`` as read), in asv's order; none where asv knows no such one.
    ValueError, one line, where asv cannot read the config's matrix."""
    return list(selected_of(json.dumps(conf, sort_keys=True, default=str), asv_spec))


# kept per config and spec: asv's get_environments takes 4-5 ms, and an alert's re-measure
# and bisection lines asked it the same questions again (31 calls a visit of django-asv's
# Alerts page: its warm script 0.11-0.13 -> 0.07 s)
@functools.lru_cache(maxsize=256)
def selected_of(conf: str, asv_spec: str) -> tuple[str, ...]:
    """``selected`` of the config as JSON."""
    from asv.config import Config
    from asv.environment import EnvironmentUnavailable, get_environments

    c = Config()
    c.__dict__.update(json.loads(conf))
    try:
        return tuple(e.name for e in get_environments(c, [asv_spec], verbose=False))
    except EnvironmentUnavailable:  # asv's: a BaseException
        return ()
    except Exception as exc:  # asv's own reading of a config it would refuse
        raise ValueError(f"asv reads no environments from it: {exc}") from None
