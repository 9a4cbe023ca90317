"""Test set-up: on a machine without CUDA the Triton kernels run in the interpreter."""

import os

import pytest
import torch

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
