"""Several revisions of ``ragged`` in one process, each under its own package name.

The paired runner (``paired``) times base and head in the same process: host time per call
moves 1.6-2.1x from one process to the next on our VMs, while two arms interleaved in one
process agree within 0.5% (docs/calibration.md). A revision is a source tree (a git worktree)
whose ``ragged/`` is imported as package ``name``; its relative imports stay inside it, and
Triton compiles each revision's kernels separately.

``workloads(pkg)`` gives ``workloads`` bound to one revision: the same file, executed while
``ragged`` and ``ragged.*`` name that revision's modules, so each workload has one definition
whichever revision it runs on.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

WORKLOADS = Path(__file__).with_name("workloads.py")


def load(src: Path, name: str) -> ModuleType:
    """``src/ragged`` imported as package ``name``, every submodule with it.

    Raises ImportError (or what the revision's own import raises) when it cannot load.
    """
    root = Path(src) / "ragged"
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    if spec is None or not (root / "__init__.py").is_file():
        raise ImportError(f"no ragged package in {src}")
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[name] = pkg
    try:
        spec.loader.exec_module(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, f"{name}."):
            importlib.import_module(info.name)
    except BaseException:
        for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
            del sys.modules[key]
        raise
    return pkg


@contextlib.contextmanager
def as_ragged(pkg: ModuleType) -> Iterator[None]:
    """While the block runs, ``import ragged`` (and ``ragged.x``) gives ``pkg``'s modules."""
    name = pkg.__name__
    aliases = {
        "ragged" + key[len(name) :]: mod
        for key, mod in list(sys.modules.items())
        if key == name or key.startswith(f"{name}.")
    }
    saved = {key: sys.modules.get(key) for key in aliases}
    stale = [
        k for k in sys.modules if (k == "ragged" or k.startswith("ragged.")) and k not in aliases
    ]
    saved.update({k: sys.modules.pop(k) for k in stale})
    sys.modules.update(aliases)
    try:
        yield
    finally:
        for key, mod in saved.items():
            if mod is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = mod


def workloads(pkg: ModuleType) -> ModuleType:
    """``benchmarks.support.workloads`` with its ``ragged`` imports bound to revision ``pkg``."""
    spec = importlib.util.spec_from_file_location(f"_workloads[{pkg.__name__}]", WORKLOADS)
    module = importlib.util.module_from_spec(spec)
    with as_ragged(pkg):
        spec.loader.exec_module(module)
    return module


def arms_workloads(arms: dict[str, Path], prefix: str) -> tuple[dict[str, ModuleType], dict]:
    """Each arm's source tree loaded under ``prefix + arm`` and its workloads bound to it (a
    runner's arms): ({arm: workloads}, {arm: why it did not load, one bounded line})."""
    from .harness import failure

    loaded, errors = {}, {}
    for arm, src in arms.items():
        try:
            loaded[arm] = workloads(load(src, f"{prefix}{arm}"))
        except Exception as exc:
            errors[arm] = failure(exc, 300)
    return loaded, errors
