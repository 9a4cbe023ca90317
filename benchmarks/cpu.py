"""The CPU subset: the pipeline and its numerics on DeiT-Ti in fp32, where there is no GPU.

The ragged path runs the Triton kernel in Triton's interpreter next to the eager PyTorch
paths. These are CPU results and their names say so (``cpu.*``): they show that the whole
chain works anywhere and catch regressions of those paths; they say nothing about GPU speed.
On a GPU machine they are skipped (the GPU benchmarks measure the same paths there).
"""

from __future__ import annotations

# letter aliases kept: asv hashes a benchmark's source into its version (a rename restarts it)
from .support import grids as G
from .support import measure as _measure
from .support import suite as S

# so are the bases' private names: asv hashes ``class Drift(_Drift):`` into its version
from .support.metrics import DriftMetrics as _Drift
from .support.metrics import ImgPerSMetric as _ImgPerS
from .support.metrics import KernelErrorMetrics as _KernelError


@S.versioned
class Pipeline(_ImgPerS):
    """Images per second of DeiT-Ti at BS=2 on the CPU (one sample per round)."""

    params = [G.CPU_PIPELINES, G.CPU_METHODS]
    param_names = ["pipeline", "method"]
    table = "pipeline"
    setup_cache = _measure.cpu_pipelines


@S.versioned
class Drift(_Drift):
    """Logits of each pipeline against padded_max over the same keep masks, fp32."""

    params = [G.CPU_DRIFT_BACKENDS, [G.CPU_MODEL], G.CPU_METHODS]
    param_names = ["backend", "model", "method"]
    setup_cache = _measure.cpu_pipelines


@S.versioned
class KernelError(_KernelError):
    """A backend against the float64 oracle: BS 8, 50% pruned, mixed lengths, DeiT-B
    geometry."""

    params = [G.CPU_KERNEL_BACKENDS, G.CPU_DTYPES]
    param_names = ["backend", "dtype"]
    setup_cache = _measure.cpu_kernel_error
