"""The triton backend's hot calls in C++ (fastpath.cpp), built once per machine and loaded.

``varlen_attention(..., validate=False)`` and ``LayoutAttention``'s kept launch check, allocate
and launch in Python in about 20 attribute reads, each making a new Python object; over
``at::Tensor`` they are field reads. ``module()`` compiles fastpath.cpp against this torch and
this Python with the system C++ compiler (``$CXX``, else ``g++``; about 10 s, once) into
``$RAGGED_BUILD_DIR`` (default ``~/.cache/ragged/build``), named by a hash of the source, the
compiler call and the torch and Python versions, so a change of any builds again; a module
whose sha256 stamp does not match is built again, never loaded. Where it cannot be
built or loaded (no compiler, no torch headers) it warns once and returns None: the Python
paths (``kernels.attention.launch_ready`` and ``kept_launch``) run instead, with the same checks.
``RAGGED_FASTPATH=0`` turns it off.

The module reads the fast paths' state where the Python paths keep it (``kernels.kept``'s
``ready_spans``, ``kernels.launch``'s device and hook queries), so both decide alike; tests run
every case through both (tests/test_fast_path.py). It imports those two, never
``kernels.attention`` (which imports it).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from . import kept, launch

SOURCE = Path(__file__).with_name("fastpath.cpp")
NAME = "ragged_fastpath"


def build_dir() -> Path:
    return Path(os.environ.get("RAGGED_BUILD_DIR", Path.home() / ".cache" / "ragged" / "build"))


def compile_command(source: Path, target: Path) -> list[str]:
    """The compiler call that builds ``target`` (a Python extension module) from ``source``."""
    root = Path(torch.__file__).parent  # a wheel's headers and libraries (not cpp_extension:
    # its import warns about CUDA_HOME, which this build does not use)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        *shlex.split(os.environ.get("CXX") or "g++"), "-O2", "-std=c++20", "-shared", "-fPIC",
        "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{sysconfig.get_paths()['include']}",
        f"-I{root / 'include'}", str(source), "-o", str(target),
        f"-L{root / 'lib'}", f"-Wl,-rpath,{root / 'lib'}",
        "-lc10", "-ltorch_cpu", "-ltorch_python", "-ldl",
    ]  # fmt: skip


def target_path() -> Path:
    """Named by the source, the compiler call (compiler, flags, torch and Python paths) and
    the torch and Python versions: a change of any builds again."""
    what = [SOURCE.read_bytes(), *map(str.encode, compile_command(Path("src"), Path("out"))),
            f"{torch.__version__}|{sys.version}".encode()]  # fmt: skip
    tag = hashlib.sha256(b"\0".join(what)).hexdigest()[:16]
    return build_dir() / f"{NAME}-{tag}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stamp(target: Path) -> Path:
    """The file beside ``target`` that holds its sha256, written after it: a module whose
    stamp is missing or differs (a crash mid-write, a truncated copy) is built again, never
    loaded (a truncated module kills the process with SIGBUS)."""
    return target.with_name(target.name + ".sha256")


def _write(path: Path, write, mode: int) -> None:
    """``write(tmp)`` into a temporary file beside ``path``, on disk, then renamed to it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, mode)  # mkstemp's 0600 would keep a shared build directory private
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(target: Path) -> None:
    """Compile ``target`` and its stamp (each written whole, then renamed: concurrent builds
    of one target leave whole files). Raises RuntimeError with the compiler's output."""
    target.parent.mkdir(parents=True, exist_ok=True)

    def compile_into(tmp: Path) -> None:
        cmd = compile_command(SOURCE, tmp)
        if shutil.which(cmd[0]) is None:
            raise RuntimeError(f"no C++ compiler {cmd[0]!r} (set CXX)")
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{cmd[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")

    _write(target, compile_into, 0o755)
    digest = _digest(target)
    _write(_stamp(target), lambda tmp: tmp.write_text(digest), 0o644)


def built(target: Path) -> bool:
    """Whether ``target`` is there, whole: its stamp holds its sha256."""
    try:
        return _stamp(target).read_text() == _digest(target)
    except OSError:
        return False


def load(target: Path) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(NAME, str(target))
    spec = importlib.util.spec_from_file_location(NAME, target, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@functools.cache
def _built() -> Any:
    """The extension module, or None (off, or it cannot be built here: warns)."""
    if os.environ.get("RAGGED_FASTPATH", "1") == "0":
        return None
    try:
        target = target_path()
        if not built(target):
            build(target)
        mod = load(target)
    except Exception as exc:  # no compiler, no headers, a failed build: the Python paths run
        warnings.warn(f"ragged: the C++ fast path is not available ({exc}); the Python fast "
                      "paths run instead", RuntimeWarning, stacklevel=2)  # fmt: skip
        return None
    return mod


@functools.cache
def module() -> SimpleNamespace | None:
    """``attention`` and ``layout``, taking the arguments of ``kernels.attention``'s
    ``launch_ready`` and ``kept_launch``, and ``image`` (``kernels.attention.with_image``), or
    None where the module cannot be built. The context they read (torch.Tensor, this
    revision's kept-launch and launch modules) is bound here: one extension module serves every
    copy of ragged loaded in the process."""
    mod = _built()
    if mod is None:
        return None
    context = (torch.Tensor, kept, launch)
    return SimpleNamespace(attention=functools.partial(mod.attention, *context),
                           layout=functools.partial(mod.layout, *context),
                           image=mod.image)  # fmt: skip
