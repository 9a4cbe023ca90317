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


class _Drift(S.Grid):
    """Metrics of a drift table (cpu.py has one too)."""

    table = "drift"

    def track_max_abs_diff(self, cache, *params):
        return self.metric("max_abs_diff")

    track_max_abs_diff.unit = "logit"

    def track_mean_abs_diff(self, cache, *params):
        return self.metric("mean_abs_diff")

    track_mean_abs_diff.unit = "logit"

    def track_top1_agreement(self, cache, *params):
        """Share of images whose top-1 class matches the reference's."""
        return self.metric("top1_agreement")

    track_top1_agreement.unit = "fraction"

    def track_output_hash(self, cache, *params):
        return self.metric("output_hash")

    track_output_hash.unit = "hash"


class _KernelError(S.Grid):
    """Metrics of a kernel-error table (cpu.py has one too)."""

    table = "error"

    def track_max_abs_error(self, cache, *params):
        return self.metric("max_abs_error")

    track_max_abs_error.unit = "abs"

    def track_error_ratio(self, cache, *params):
        """The error over eager PyTorch's at the same dtype (the tests allow 2)."""
        return self.metric("error_ratio")

    track_error_ratio.unit = "x eager"

    def track_output_hash(self, cache, *params):
        return self.metric("output_hash")

    track_output_hash.unit = "hash"


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
