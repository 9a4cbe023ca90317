"""The environment fingerprint saved beside each asv result file.

asv's machine file records the host (CPU, RAM, OS) but not the GPU, the driver or the
torch/triton/timm versions, which move the figures as much as a code change does. Beside each
result file ``<commit>-<env>.json`` the runner writes ``<commit>-<env>.fingerprint`` (JSON,
not ``.json``: asv reads every ``*.json`` in its results directory as a result file).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

SUFFIX = ".fingerprint"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
        return out.stdout.strip().splitlines()[0]
    except Exception:
        return None


MACHINE_VAR = "RAGBENCH_MACHINE"  # the runner's machine name (docs/runner.md)


def default_machine() -> str:
    """asv's default machine name: the host name."""
    return socket.gethostname()


def configured_machine() -> str | None:
    """The machine ``$RAGBENCH_MACHINE`` names, or None where it is unset or empty."""
    return os.environ.get(MACHINE_VAR) or None


def machine(name: str | None = None) -> str:
    """The machine results are recorded under and read for: ``name`` where given (a
    ``--machine``), else ``$RAGBENCH_MACHINE``, else the host name (asv's default)."""
    return name or configured_machine() or default_machine()


def collect(*, commit: str, machine: str, mode: str) -> dict:
    """This process's environment: GPU, driver, CUDA, library versions, commit, harness."""
    import torch

    from benchmarks.support.harness import HARNESS_VERSION

    gpu = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if gpu else None
    return {
        "commit": commit,
        "machine": machine,
        "hostname": socket.gethostname(),
        "runner": os.environ.get("RUNNER_NAME"),  # the GitHub runner that ran the job
        "mode": mode,
        "harness_version": HARNESS_VERSION,
        "device": "cuda" if gpu else "cpu",
        "gpu": props.name if props else None,
        "gpu_count": torch.cuda.device_count() if gpu else 0,
        "compute_capability": f"{props.major}.{props.minor}" if props else None,
        "driver": _driver() if gpu else None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "timm": _version("timm"),
        "asv": _version("asv"),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "launch_configs": _launch_configs() if gpu else None,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _launch_configs() -> str | None:
    """Which launch configurations the triton kernel uses on GPU 0 (ragged.kernels.tuning)."""
    try:
        from ragged.kernels import tuning
    except ImportError:
        return None
    return tuning.source(0)


def path_for(result_file: Path) -> Path:
    return result_file.with_suffix(SUFFIX)


def write(result_file: Path, fingerprint: dict) -> Path:
    path = path_for(result_file)
    path.write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
    return path


def read(result_file: Path) -> dict | None:
    """The fingerprint beside an asv result file, or None when there is none."""
    path = path_for(result_file)
    return json.loads(path.read_text()) if path.exists() else None
