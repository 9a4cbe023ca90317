"""Reading a file that anyone may have put there (result files, a pull request's gate output):
regular files only, bounded in size.

A FIFO or a device under a results directory would block or stream for ever; a file larger than
any result file is not one. Both are refused with a ValueError that says why, before a byte is
read (a FIFO is opened non-blocking, so even a race cannot hang the read).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

# A full-grid asv result file is about 2 MB; 16 MiB leaves room and bounds the memory (a
# 64 MiB file of small numbers took 1.8 GB to parse).
MAX_BYTES = 16 * 2**20


def read_bytes(path: Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of ``path``; ValueError when it is not a regular file of at most ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"cannot open ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file (a FIFO, socket, device or directory)")
        raise ValueError(f"{info.st_size} bytes, more than the {limit} allowed")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"more than the {limit} bytes allowed")
    return data


def read_text(path: Path, limit: int = MAX_BYTES) -> str:
    """``read_bytes`` as UTF-8 text (undecodable bytes replaced)."""
    return read_bytes(path, limit).decode(errors="replace")


def read(path: Path, limit: int = MAX_BYTES) -> object:
    """The parsed JSON of ``path``; ValueError when it is not a regular file of at most
    ``limit`` bytes holding JSON (asv's NaN included) whose every string is text: JSON lets
    ``"\\ud800"`` escape half a character, which Python keeps and no UTF-8 consumer (DuckDB,
    GitHub's API) takes."""
    data = read_bytes(path, limit)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not readable as JSON ({exc})") from None
    if _SURROGATE.search(data) and not _text_only(doc):  # pairs (an emoji) are text
        raise ValueError("holds a string that is not text (a lone surrogate escape)")
    return doc


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _text_only(doc: object) -> bool:
    """Whether every string in ``doc`` (keys too) encodes as UTF-8."""
    todo = [doc]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo += [*x.keys(), *x.values()]
        elif isinstance(x, list):
            todo += x
        elif isinstance(x, str):
            try:
                x.encode()
            except UnicodeEncodeError:
                return False
    return True
