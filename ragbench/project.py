"""The asv project whose results a machine's runs are, where it is not this suite: what its
``asv.conf.json`` names (its ``repo``, ``show_commit_url``, the config's own path), kept in
the store per machine (``meta`` key ``project:<machine>``), so that an alert's follow-ups
(``ragbench.follow_up``) point at that project, not at this checkout.

Ingest finds the config above the results directory it read (asv's layout: ``ROOT/asv.conf.json``
with ``ROOT/results/<machine>/``), or takes it from ``ragbench ingest --config``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from . import jsonfile

KEY = "project:"  # the meta key's prefix; the machine follows


@dataclass(frozen=True)
class Project:
    """An asv project: its config's absolute path, its name, ``repo`` (a URL or a path, as
    the config has it, a relative path resolved against the config's directory) and
    ``show_commit_url`` (the web page a commit hash is appended to), each None where the
    config names none."""

    config: str
    name: str | None = None
    repo: str | None = None
    show_commit_url: str | None = None

    @property
    def web(self) -> str | None:
        """The repository's web address: ``repo`` where it is one (``git@github.com:o/r.git``
        -> ``https://github.com/o/r``), else what ``show_commit_url`` is a page of
        (``.../commit/``), else None."""
        url = web_address(self.repo) if self.repo else None
        if url is None and self.show_commit_url:
            base = re.sub(r"/-?/?commits?/?$", "", self.show_commit_url.rstrip("/"))
            url = base if base != self.show_commit_url.rstrip("/") else None
        return url

    def commit_url(self, sha: str) -> str | None:
        """A commit's page: ``show_commit_url`` + hash, as asv's own site links it."""
        if self.show_commit_url:
            return f"{self.show_commit_url}{sha}"
        return f"{self.web}/commit/{sha}" if self.web else None

    def diff_url(self, prev: str | None, sha: str) -> str | None:
        """The page of the commits ``prev``..``sha`` (GitHub's and GitLab's ``compare/A...B``),
        the commit's own page where ``prev`` is unknown or the host is not known to have one."""
        web = self.web
        if prev and web and re.match(r"https?://(www\.)?(github\.com|gitlab\.com)/", web):
            return f"{web}/compare/{prev}...{sha}"
        return self.commit_url(sha)


def asv_config(path: Path) -> dict:
    """An ``asv.conf.json`` as asv reads it (JSON5: comments and trailing commas allowed);
    ValueError when it is not one. Read again only when the file changed."""
    stat = Path(path).stat()
    return copy.deepcopy(parsed_config(str(path), stat.st_mtime_ns, stat.st_size))


# kept per file and version: json5 parses django-asv's config in 5.5 ms, and the Alerts page
# asked for it 39 times a visit (each alert's follow-ups): its script 0.19 -> 0.06 s warm
@functools.lru_cache(maxsize=32)
def parsed_config(path: str, mtime_ns: int, size: int) -> dict:
    import json5

    try:
        config = json5.loads(jsonfile.read_text(Path(path)))
    except ValueError as exc:
        raise ValueError(f"{path}: not readable as asv's config ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not readable as asv's config (not an object)")
    return config


def benchmark_names(project: Project) -> set[str] | None:
    """The benchmarks the project's suite has now, as asv's ``benchmarks.json`` in its results
    directory lists them (the config's ``results_dir``, else ``results``); None where there is
    none to read (then nothing is left out for it)."""
    try:
        conf = Path(project.config)
        results = conf.parent / str(asv_config(conf).get("results_dir") or "results")
        data = jsonfile.read(results / "benchmarks.json")
    except (OSError, ValueError):
        return None
    return {k for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else None


def web_address(remote: str) -> str | None:
    """A git remote as a web address (``git@host:o/r.git``, ``ssh://git@host/o/r``,
    ``https://host/o/r.git`` -> ``https://host/o/r``); None for a local path."""
    remote = re.sub(r"^git@([^:]+):", r"https://\1/", remote.strip())
    remote = re.sub(r"^ssh://git@([^/]+)/", r"https://\1/", remote)
    remote = re.sub(r"^git://", "https://", remote)
    if not remote.startswith(("https://", "http://")):
        return None
    return remote.removesuffix("/").removesuffix(".git").rstrip("/")


def read(path: Path) -> Project:
    """The project an ``asv.conf.json`` describes; ValueError, one line, where it is none."""
    path = Path(path).resolve()
    config = asv_config(path)

    def text(key: str) -> str | None:
        value = config.get(key)
        return value if isinstance(value, str) and value else None

    repo = text("repo")
    if repo and web_address(repo) is None and not Path(repo).is_absolute():
        repo = str((path.parent / repo).resolve())  # asv: relative to the config's directory
    return Project(str(path), text("project"), repo, text("show_commit_url"))


def save(store, machine: str, project: Project) -> None:
    """Keep ``project`` as the one ``machine``'s results are of."""
    store.describe(**{KEY + machine: json.dumps(asdict(project), sort_keys=True)})


def load(store, machine: str) -> Project | None:
    """The project ``machine``'s results are of, where ingest kept one; else None."""
    text = store.meta(KEY + machine)
    if not text:
        return None
    try:
        return Project(**json.loads(text))
    except (ValueError, TypeError):
        return None
