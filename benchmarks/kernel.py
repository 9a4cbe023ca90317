"""Kernel latency of every attention backend on packed ragged batches (DeiT geometry, fp16).

``call_us``, ``gpu_us`` and ``host_us`` as docs/metrics.md defines them, measured by
``harness.measure_interleaved``: the backends of one workload in alternating rounds. asv's
wall-clock timer cannot time microsecond GPU work (it never synchronises the device), hence
``track_`` benchmarks carrying the harness's raw samples; ``LaunchPromise``, the API's launch
promises as per-round ratios (``promises``). GPU only. Axes: ``grids``.
"""

from __future__ import annotations

from .support import first_call as _first_call

# letter aliases kept: asv hashes a benchmark's source into its version (a rename restarts it)
from .support import grids as G
from .support import harness as H
from .support import measure as _measure
from .support import suite as S


@S.versioned
class KernelLatency(S.Grid):
    """Per-call latency of one backend on one packed batch."""

    params = [G.KERNEL_BACKENDS, G.KERNEL_BATCHES, G.PRUNE, G.GEOMETRIES, G.LENGTHS]
    param_names = ["backend", "batch", "prune", "geometry", "lengths"]
    unit = "us"
    table = "latency"
    setup_cache = _measure.kernels

    def track_call_us(self, cache, *params):
        """One call bracketed by CUDA events after a sync: what a caller waits."""
        return self.metric("call_us")

    def track_gpu_us(self, cache, *params):
        """Device time per call from a CUDA-graph replay (NaN: the backend syncs)."""
        return self.metric("gpu_us")

    def track_host_us(self, cache, *params):
        """Host time per call in a back-to-back loop."""
        return self.metric("host_us")


@S.versioned
class KernelClocks(S.Grid):
    """The GPU while one workload's backends were timed (NVML, read before and after)."""

    params = [G.KERNEL_BATCHES, G.PRUNE, G.GEOMETRIES, G.LENGTHS]
    param_names = ["batch", "prune", "geometry", "lengths"]
    table = "clocks"
    setup_cache = _measure.kernels

    def track_sm_clock_mhz(self, cache, *params):
        return self.metric("sm_clock_mhz")

    track_sm_clock_mhz.unit = "MHz"

    def track_throttle_reasons(self, cache, *params):
        """NVML clock-throttle reasons, OR of both reads (0 or GPU-idle alone: clean)."""
        return self.metric("throttle_reasons")

    track_throttle_reasons.unit = "bitmask"


@S.versioned
class DispatchFloor(S.Grid):
    """The latency no pruning removes: ``call_us`` at BS=1 with 80% of the tokens pruned, and
    ``dispatch_us`` = ``call_us - gpu_us`` (each call sample less the median device time)."""

    params = [G.KERNEL_BACKENDS, G.GEOMETRIES]
    param_names = ["backend", "geometry"]
    unit = "us"
    table = "latency"
    setup_cache = _measure.kernels

    def setup(self, cache, backend, geometry):
        batch, prune, lengths = G.FLOOR
        super().setup(cache, backend, batch, prune, geometry, lengths)

    def track_floor_us(self, cache, backend, geometry):
        return self.metric("call_us")

    def track_dispatch_us(self, cache, backend, geometry):
        gpu = self.cell["gpu_us"]
        if not gpu:
            return S.NAN
        gpu_median = sorted(gpu)[len(gpu) // 2]
        return S.samples([c - gpu_median for c in self.cell["call_us"]])


@S.versioned
class AnchoredFloor(S.Grid):
    """The dispatch floor over that of a fixed revision (``harness.ANCHOR``) timed in the
    same process, interleaved: ``floor_ratio`` (call_us) and ``host_ratio`` (host_us) per round.
    Host time moves 1.6-2.1x between processes; these ratios are what main's history tracks."""

    params = [G.GEOMETRIES]
    param_names = ["geometry"]
    unit = "ratio"
    table = "anchor"
    setup_cache = _measure.kernels

    def track_floor_ratio(self, cache, geometry):
        return self.metric("floor_ratio")

    def track_host_ratio(self, cache, geometry):
        return self.metric("host_ratio")


AnchoredFloor.version += f"-anchor{H.ANCHOR[:8]}"  # a new anchor starts a new series


@S.versioned
class FirstCall(S.Grid):
    """The first triton call of a shape the process has not seen that compiles (or loads) a
    kernel (``first_call``: a new head_dim or dtype, Triton's disk cache empty or full)
    beside the same call kept: one value a sample, each sample a new shape. What a cold
    machine, or a new process, pays once; shown, not gated."""

    params = [G.FIRST_CALL_CASES]
    param_names = ["case"]
    unit = "us"
    table = "first_call"
    setup_cache = _measure.first_calls

    def track_first_call_us(self, cache, case):
        """Host time of the first call."""
        return self.metric("first_call_us")

    def track_kept_call_us(self, cache, case):
        """Host time of the same call again (median of its kept calls)."""
        return self.metric("kept_call_us")

    def track_first_over_kept(self, cache, case):
        return self.metric("first_over_kept")

    track_first_over_kept.unit = "ratio"

    def track_compiles(self, cache, case):
        """Kernels Triton compiled or loaded from its disk cache during the first call."""
        return self.metric("compiles")

    track_compiles.unit = "count"

    def track_host_syncs(self, cache, case):
        """Synchronising CUDA operations torch saw during the first call."""
        return self.metric("host_syncs")

    track_host_syncs.unit = "count"


FirstCall.version += f"-{_first_call.DIGEST}"  # the measuring code is _first_call's


@S.versioned
class NewLength(FirstCall):
    """The first call of a new max_seqlen within a compiled configuration, what data-dependent
    pruning pays on every new length: its promise (no compile, no host sync, at most 2x the
    kept call) gated as bounds (``ragbench/policies.toml``)."""

    params = [G.NEW_LENGTH]


NewLength.version += f"-{_first_call.DIGEST}"


@S.versioned
class LaunchPromise(S.Grid):
    """The API's launch promises at the dispatch floor's workload (``promises``), per-round
    ratios of host time from interleaved rounds in one process: ``layout_over_launch``,
    ``LayoutAttention``'s call over the same kept launch of an empty kernel with the kernel's
    16 parameters (promised <= 1.5), and ``api_over_aten``, ``varlen_attention(...,
    validate=False)`` over one aten op, ``x.add_(1)`` (promised <= 1.0). GPU only."""

    params = [G.GEOMETRIES]
    param_names = ["geometry"]
    unit = "ratio"
    table = "promise"
    setup_cache = _measure.promises

    def track_layout_over_launch(self, cache, geometry):
        return self.metric("layout_over_launch")

    def track_api_over_aten(self, cache, geometry):
        return self.metric("api_over_aten")


@S.versioned
class GpuFloor(S.Grid):
    """The triton call's GPU time against the GPU's own floor (``floor``): CUDA-graph replays
    of the call and of an empty kernel in the same rounds of one process. ``over_empty``, the
    per-round ratio, is what a commit's history compares; the two times are shown beside it."""

    params = [G.FLOOR_WORKLOADS]
    param_names = ["workload"]
    unit = "ratio"
    table = "floor"
    setup_cache = _measure.floors

    def track_over_empty(self, cache, workload):
        """gpu_us / empty_us, one value a round."""
        return self.metric("over_empty")

    def track_gpu_us(self, cache, workload):
        """The triton call's graph-replay µs a call (DeiT-B, uniform lengths)."""
        return self.metric("gpu_us")

    track_gpu_us.unit = "us"

    def track_empty_us(self, cache, workload):
        """An empty kernel's (one program) graph-replay µs a call, in the same rounds."""
        return self.metric("empty_us")

    track_empty_us.unit = "us"
