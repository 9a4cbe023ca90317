"""Test set-up: on a machine without CUDA the Triton kernels run in the interpreter."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Must be set before triton is first imported (ragged imports it).
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    """Where the tests put their tensors: the GPU when there is one, else the CPU."""
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory):
    """``ragbench run`` (asv, spawn, quick grid) on HEAD into a temporary results dir."""
    tmp = tmp_path_factory.mktemp("asv")
    env = {**os.environ, "HOME": str(tmp)}  # asv's machine file goes to $HOME
    env.pop("RAGBENCH_MODE", None)
    results = tmp / "results"
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "run", "--machine", "ci", "--results", str(results)],
        env=env, capture_output=True, text=True, cwd=REPO, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert len(summary) == 1
    return results, summary[0]
