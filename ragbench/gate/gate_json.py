"""The gate's JSON: its document (``to_json``, what ``ragbench verdict`` reads) and the file
it is written to (``write_json``, in a directory of this user's alone: ``private_dir``)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path

from ..verdicts.status import GATE_FIELDS, gate_document
from .gating import GateResult


def to_json(res: GateResult) -> dict:
    """The gate's verdict for ``ragbench verdict`` (``--json``): ``verdicts.gate_document``
    with how it measured (the mode, and the rounds and processes its plan was made for), and
    what settles it (``rerun.Plan``). Its store records it (``rerun.record``): what
    ``rerun_gate`` reads."""
    rounds, processes = (min(n, hi) for n, (_, hi) in zip(res.basis, GATE_FIELDS.values(),
                                                           strict=True))  # fmt: skip
    doc = gate_document(res.base, res.head, res.machine, res.comparison, mode=res.mode,
                        rounds=rounds, processes=processes)  # fmt: skip
    if res.plan:
        doc["settle"] = res.plan.to_json()
    return doc


def private_dir() -> Path:
    """A directory of this user's alone for the gate's JSON: ``$XDG_RUNTIME_DIR/ragbench``,
    else ``ragbench-<uid>`` in the temp directory, made 0700, or taken where it is a directory
    (not a link) this user owns that no one else may use; else a new ``mkdtemp`` (another
    user who made that name first gets nothing from it)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    where = (Path(runtime) / "ragbench" if runtime and Path(runtime).is_dir()
             else Path(tempfile.gettempdir()) / f"ragbench-{os.getuid()}")  # fmt: skip
    with contextlib.suppress(FileExistsError):
        where.mkdir(mode=0o700)
    try:
        info = os.lstat(where)
    except OSError:
        info = None
    if (info is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & 0o077):  # fmt: skip
        return Path(tempfile.mkdtemp(prefix="ragbench-gate-"))
    return where


def write_json(res: GateResult, path: Path | None) -> Path:
    """The gate's JSON (``to_json``) written to ``path``, or (None) to ``gate-<id>.json`` in
    ``private_dir``, 0600 and never through a link planted there; -> where."""
    text = json.dumps(to_json(res), indent=2)
    if path is not None:
        path.write_text(text)
        return path
    path = private_dir() / f"gate-{res.gate_id or res.head[:12]}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path
