"""Environments for ``ragbench run --env SPEC``: this environment with a spec's packages on top.

A spec is comma-separated pip requirements, e.g. ``torch==2.12.1,triton==3.7.1``. Its
environment is a virtualenv under ``$RAGBENCH_ENVS`` (default ``.envs/`` in the checkout) whose
``site-packages`` adds this environment's as a lower layer (a ``.pth`` calling
``site.addsitedir``): pip, run inside it, sees everything here as installed and installs only what
the spec changes, into the upper layer, where it shadows the lower one. A torch spec without
torchvision also gets the torchvision that pins that torch (timm imports it). Why not asv's own
virtualenv matrix: it builds every environment from scratch (6 GB a CUDA torch), per commit
hash and matrix entry; a layer that changes triton alone is 1.0 GB, numpy alone 74 MB.

An environment is kept once pip installed the spec and the kernel ran in it (a tiny triton
call: on the GPU, or in Triton's interpreter without one); its ``ragbench-env.json``, written
last, says so, and a second run installs nothing. A spec that pip cannot install, or whose stack
cannot run the kernel, raises ``EnvError`` with pip's or Triton's own last lines, and leaves
nothing behind; so does an interrupted build (Ctrl-C).

A build holds ``<environment>.lock`` (``flock``) from the first look until the stamp is written:
a second process that wants the same stack says it waits, then uses what the first built (two
builds at once once both failed: one's clean-up deleted the other's directory). A directory
without a stamp whose lock nobody holds is what a killed build left (3.3 GB for a CUDA torch):
every ``ensure`` removes those, and the stack's own is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAMP = "ragbench-env.json"
# the check: the suite's imports (timm imports torchvision, whose ops must match torch's build)
# and one small triton call against the reference, in the environment
CHECK = """
import json, os
if not os.path.exists("/dev/nvidiactl"):  # no NVIDIA driver: before torch imports triton
    os.environ["TRITON_INTERPRET"] = "1"
import torch, timm
dev = "cuda" if torch.cuda.is_available() else "cpu"
if dev == "cpu":  # a driver but no usable GPU: before ragged's kernels are defined
    os.environ["TRITON_INTERPRET"] = "1"
from ragged import varlen_attention
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(24, 2, 32, generator=g).to(dev, torch.float16) for _ in range(3))
cu = torch.tensor([0, 10, 24], dtype=torch.int32, device=dev)
out = varlen_attention(q, k, v, cu, 14, backend="triton")
ref = varlen_attention(q, k, v, cu, 14, backend="reference")
err = (out.float() - ref.float()).abs().max().item()
assert err < 1e-2, f"the triton kernel is off by {err:.3g} here"
from importlib.metadata import version
print(json.dumps({p: version(p) for p in ("torch", "triton", "numpy")} | {"max_abs_err": err}))
"""


class EnvError(RuntimeError):
    """A spec that cannot be parsed, installed, or run."""


@dataclass
class Env:
    spec: str
    path: Path
    versions: dict

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def root() -> Path:
    return Path(os.environ.get("RAGBENCH_ENVS") or REPO / ".envs")


def pinned() -> str:
    """This environment's own stack as a spec: ``torch==2.14.1,triton==3.8.0`` (local build
    labels such as ``+cu130`` dropped: the pin then matches the installed build)."""
    from importlib.metadata import version

    return ",".join(f"{p}=={version(p).split('+')[0]}" for p in ("torch", "triton"))


def requirements(spec: str) -> list[str]:
    """The spec's requirements, normalised; EnvError for one pip could not read."""
    from packaging.requirements import InvalidRequirement, Requirement

    reqs = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            req = Requirement(part)
        except InvalidRequirement as exc:
            raise EnvError(f"--env {spec!r}: {part!r} is not a pip requirement ({exc})") from None
        reqs.append(str(req))
    if not reqs:
        raise EnvError(f"--env {spec!r}: no requirement (e.g. torch==2.12.1,triton==3.7.1)")
    return sorted(reqs)


def location(spec: str) -> Path:
    """Where the spec's environment lives: named by the spec and this lower layer."""
    reqs = requirements(spec)
    digest = hashlib.sha256("\n".join([sys.prefix, *reqs]).encode()).hexdigest()[:10]
    slug = re.sub(r"[^\w.]+", "-", "-".join(reqs)).strip("-")[:60]
    return root() / f"{slug}-{digest}"


def ensure(spec: str, log=print) -> Env:
    """The spec's environment, built on first use (a line to ``log`` when it builds, one with
    the stack it got, and one while it waits for another process's build of it)."""
    reqs = requirements(spec)
    path = location(spec)
    stamp = path / STAMP
    _sweep(log)
    if not stamp.exists():
        with _locked(path, spec, log):
            if stamp.exists():
                log(f"--env {spec}: built by another process meanwhile; using {path}")
            else:
                _remove_unfinished(path, log)  # a build killed since the sweep
                return _build(spec, reqs, path, log)
    return Env(spec, path, json.loads(stamp.read_text())["versions"])


def _build(spec: str, reqs: list[str], path: Path, log) -> Env:
    """Build the environment at ``path`` (under its lock), its stamp written last; on any
    failure or interruption nothing is left."""
    log(f"--env {spec}: building {path} (pip installs only what differs from this environment)")
    try:
        _run([sys._base_executable, "-m", "venv", "--without-pip", str(path)], "venv")
        purelib = sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"]
        lower = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        Path(purelib, "_ragbench_lower_layer.pth").write_text(
            "".join(f"import site; site.addsitedir({p!r})\n" for p in lower)
        )
        names = _names(reqs)
        extra = ["torchvision"] if "torch" in names and "torchvision" not in names else []
        python = str(path / "bin" / "python")
        _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              *reqs, *extra], "pip could not install it")  # fmt: skip
        out = _run([python, "-c", CHECK], "the suite's imports or the kernel failed in it",
                   env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        versions = json.loads(out.strip().splitlines()[-1])
        written = path / f"{STAMP}.tmp"  # renamed into place: a stamp is never half written
        written.write_text(json.dumps({"spec": spec, "requirements": reqs, "lower": sys.prefix,
                                       "versions": versions}, indent=1))  # fmt: skip
        written.replace(path / STAMP)
    except EnvError as exc:
        shutil.rmtree(path, ignore_errors=True)
        raise EnvError(f"--env {spec}: {exc}") from None
    except BaseException:  # interrupted (Ctrl-C), or a bug: no half-built environment stays
        shutil.rmtree(path, ignore_errors=True)
        raise
    log(f"--env {spec}: torch {versions['torch']}, triton {versions['triton']}, numpy "
        f"{versions['numpy']}; kernel max |err| {versions['max_abs_err']:.2g}")  # fmt: skip
    return Env(spec, path, versions)


def _lock_file(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def _locked(path: Path, spec: str, log) -> Iterator[None]:
    """Hold the environment's lock file (``flock``: released by the kernel when the holder
    dies, however); log once, naming the holder, when another process has it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_file(path), "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            log(f"--env {spec}: waiting for {holder}, which is building it ({fh.name})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}")
        fh.flush()
        yield


def _sweep(log) -> None:
    """Remove every environment directory without a stamp whose lock nobody holds: what a
    build that was killed left."""
    if not root().is_dir():
        return
    for path in root().iterdir():
        if not path.is_dir() or (path / STAMP).exists():
            continue
        with open(_lock_file(path), "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being built now
            _remove_unfinished(path, log)


def _remove_unfinished(path: Path, log) -> None:
    """Under ``path``'s lock: remove it if it has no stamp."""
    if path.is_dir() and not (path / STAMP).exists():
        log(f"--env: removing {path}, left by a build that did not finish")
        shutil.rmtree(path)


def _names(reqs: list[str]) -> set[str]:
    from packaging.requirements import Requirement

    return {Requirement(r).name.lower() for r in reqs}


def _run(cmd: list[str], what: str, env: dict | None = None) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if out.returncode != 0:
        lines = [ln.strip() for ln in (out.stderr or out.stdout).splitlines()
                 if ln.strip().strip("^~") and not ln.startswith("WARNING: Location")]  # fmt: skip
        raise EnvError(f"{what}: " + " | ".join(lines[-2:]))
    return out.stdout
