"""The metrics that a GPU benchmark class and its CPU twin (``cpu.py``) share.

asv takes every public class of a module under ``benchmarks/`` that has ``track_`` methods
for a benchmark, unless the class is abstract (asv_runner's discovery skips those). These
bases are abstract until a subclass sets ``setup_cache``: asv runs them only as the
subclasses in ``numerics``, ``pipeline`` and ``cpu``, never on their own.
"""

from __future__ import annotations

import abc

from . import suite


class Metrics(suite.Grid, abc.ABC):
    """A grid whose ``track_`` methods several benchmark classes share."""

    @abc.abstractmethod
    def setup_cache(self) -> dict:
        """The cache of the subclass's grid (a ``measure`` function)."""


class DriftMetrics(Metrics):
    """Metrics of a drift table (``numerics.Drift``, ``cpu.Drift``)."""

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


class KernelErrorMetrics(Metrics):
    """Metrics of a kernel-error table (``numerics.KernelError``, ``cpu.KernelError``)."""

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


class ImgPerSMetric(Metrics):
    """The img/s metric of a throughput table (``pipeline.Throughput``, ``pipeline.Methods``,
    ``cpu.Pipeline``)."""

    unit = "img/s"

    def track_img_per_s(self, cache, *params):
        return self.metric("img_per_s")
