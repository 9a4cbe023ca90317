"""The store's errors, one class each for what a caller tells apart."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be used: not a DuckDB file, not a ragbench store, a newer schema."""


class StoreLocked(StoreError):
    """Another process held the store for longer than the timeout."""


class StoreMissing(StoreError):
    """No store where one must already be: a reader (or ``create=False``) never makes one."""
