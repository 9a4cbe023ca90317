"""The gate's one error: unusable input, said in one line (exit 2)."""

from __future__ import annotations


class GateError(RuntimeError):
    """Unusable input: a bad revision, no data for head, a broken policies file."""
