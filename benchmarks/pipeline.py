"""The pruned DeiT pipeline end to end: img/s, stage times, GPU memory, FLOP-ideal speedup.

Every pipeline prunes after block 4, keeping half the patches (ATS: a budget of half), over
the same keep masks; ``dense`` is the unpruned timm model. Seeded random weights with peaked
attention (``ragged.models.SHARP_ATTENTION``), fp16. img/s samples come from timed batches of
back-to-back forwards (~40 ms each, one sync at the end), pipelines in alternating rounds.
Speedups are ratios of two pipelines from the same run, never across runs. GPU only.
"""

from __future__ import annotations

# letter aliases kept: asv hashes a benchmark's source into its version (a rename restarts it)
from .support import grids as G
from .support import measure as _measure
from .support import suite as S

# the base keeps its private name here: asv hashes ``class Methods(_ImgPerS):`` into its version
from .support.metrics import ImgPerSMetric as _ImgPerS


@S.versioned
class Throughput(_ImgPerS):
    """Images per second, Threshold-L2 keeping 50%."""

    params = [G.PIPELINES, G.MODELS, G.BATCHES]
    param_names = ["pipeline", "model", "batch"]
    table = "throughput"
    setup_cache = _measure.pipelines


@S.versioned
class Methods(_ImgPerS):
    """Images per second of each pruning method, DeiT-B 224 at BS=32."""

    params = [G.PIPELINES, G.METHODS]
    param_names = ["pipeline", "method"]
    table = "methods"
    setup_cache = _measure.pipelines


@S.versioned
class PeakMemory(S.Grid):
    """``torch.cuda.max_memory_allocated`` over a pipeline's first forwards at BS=64, less
    what was allocated before them (asv's ``peakmem_`` measures host memory only)."""

    params = [G.PIPELINES, G.MODELS]
    param_names = ["pipeline", "model"]
    unit = "MiB"
    table = "memory"
    setup_cache = _measure.pipelines

    def track_peak_mib(self, cache, *params):
        return self.metric("peak_mib")


@S.versioned
class FlopIdeal(S.Grid):
    """The unpruned model's FLOPs over the pruned pipeline's (from the keep masks, BS=32):
    the speedup over ``dense`` that a pipeline with no overhead would reach."""

    params = [G.MODELS, G.METHODS]
    param_names = ["model", "method"]
    unit = "x"
    table = "ideal"
    setup_cache = _measure.pipelines

    def track_flop_ideal_speedup(self, cache, *params):
        return self.metric("speedup")


@S.versioned
class Stages(S.Grid):
    """Milliseconds per stage of one forward, DeiT-B 224, Threshold-L2 at 50%, BS=8. A device
    sync after each stage, so the stages add up to more than a back-to-back forward."""

    params = [G.STAGE_PIPELINES, G.STAGES]
    param_names = ["pipeline", "stage"]
    unit = "ms"
    table = "stages"
    setup_cache = _measure.pipelines

    def track_stage_ms(self, cache, *params):
        return self.metric("ms")


@S.versioned
class BoundShare(S.Grid):
    """Triton's share of what any attention kernel could gain over fa2 in the pruned pipeline
    (``bound``): eager over no_attention and over launch_only (one empty kernel a call), and
    under CUDA graphs over no_attention_graph; each a point estimate from per-round forwards
    of every pipeline in turns, one process."""

    params = [G.BOUND_MODELS, G.BOUND_METHODS, G.BOUND_BATCHES]
    param_names = ["model", "method", "batch"]
    unit = "ratio"
    table = "bound"
    setup_cache = _measure.bounds

    def track_share_of_bound(self, cache, *params):
        """Eager: (triton/fa2 - 1) / (no_attention/fa2 - 1), medians over rounds."""
        return self.metric("share_of_bound")

    def track_share_of_launch_bound(self, cache, *params):
        """Eager, of the bound with one empty launch a call (launch_only)."""
        return self.metric("share_of_launch_bound")

    def track_graph_share_of_bound(self, cache, *params):
        """CUDA graphs: triton_graph and no_attention_graph against fa2_graph."""
        return self.metric("graph_share_of_bound")
