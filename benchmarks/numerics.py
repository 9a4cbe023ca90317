"""Numeric drift: pipeline logits against the reference pipeline, kernels against the oracle.

The reference pipeline is ``padded_max`` (same model, dtype and keep masks; plain SDPA over
each image's kept tokens); the kernel oracle is ``ragged.reference`` in float64. Each cell
also tracks a 48-bit hash of its output, so any change in the numbers shows as a step even
where it stays within tolerance. Deterministic: one value per cell. GPU only.
"""

from __future__ import annotations

# letter aliases kept: asv hashes a benchmark's source into its version (a rename restarts it)
from .support import grids as G
from .support import measure as _measure
from .support import suite as S

# the bases keep their private names here: asv hashes ``class Drift(_Drift):`` into its version
from .support.metrics import DriftMetrics as _Drift
from .support.metrics import KernelErrorMetrics as _KernelError


@S.versioned
class Drift(_Drift):
    """Logits of each pipeline against padded_max over the same keep masks, fp16."""

    params = [G.DRIFT_BACKENDS, G.DRIFT_MODELS, G.DRIFT_METHODS]
    param_names = ["backend", "model", "method"]
    setup_cache = _measure.pipelines


@S.versioned
class KernelError(_KernelError):
    """A backend against the float64 oracle: BS 8, 50% pruned, DeiT-B geometry."""

    params = [G.KERNEL_BACKENDS, G.ERROR_DTYPES, G.LENGTHS]
    param_names = ["backend", "dtype", "lengths"]
    setup_cache = _measure.kernels
