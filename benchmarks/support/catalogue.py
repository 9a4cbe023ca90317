"""What the suite measures, declared once: the attention backends it times and the pipelines
it runs, each with the grids it is in. ``grids``, ``workloads``, the scripts, the store's
views and the dashboard derive their lists from here.

A backend's capabilities (dtypes, CUDA-graph capture, exact packing, use in the pipeline) are
declared with it in ``ragged.attention.BACKENDS``; this module says only which of them the
suite measures where. It imports nothing: asv imports it in every benchmark process and
discovers the grids before any torch import, and it runs today's suite against older builds of
ragged, whose registry may lack a backend named here (that cell then fails, and is recorded
as failed). ``tests/test_catalogue.py`` checks that the two agree.

A grid tier: ``QUICK`` (in the quick and the full grid), ``FULL`` (full grid only) or None.
Adding a backend: its module and its ``ragged.BACKENDS`` entry, then one ``Backend`` line
here (and one ``Pipeline`` line where PrunedViT can use it).
"""

from __future__ import annotations

from dataclasses import dataclass

QUICK, FULL = "quick", "full"


@dataclass(frozen=True)
class Backend:
    """An attention backend of ``ragged.BACKENDS`` in the kernel benchmarks."""

    name: str
    kernel: str | None  # kernel.KernelLatency / DispatchFloor / KernelError: tier
    cpu: bool = False  # cpu.py's kernel error (CPU tensors; triton: the interpreter)
    # a round at BS 64 takes seconds: timed with fewer samples (the harness's ``slow``;
    # ``measure.kernels`` spells the set, its source being part of the asv version)
    slow: bool = False


@dataclass(frozen=True)
class Pipeline:
    """A ``PrunedViT`` configuration in the pipeline benchmarks, named as its results are."""

    name: str
    mode: str  # PrunedViT mode
    backend: str  # ragged attention backend (its layout's attention in ragged mode)
    cuda_graph: bool = False
    throughput: str | None = None  # pipeline.Throughput / Methods / PeakMemory: tier
    stages: str | None = None  # pipeline.Stages: tier
    drift: str | None = None  # numerics.Drift: tier
    cpu: bool = False  # cpu.py's pipelines (Triton's interpreter for triton)
    cpu_drift: bool = False  # cpu.py's drift
    # the attention call replaced by its output buffer, nothing launched: what a pipeline
    # around a kernel that costs nothing, on the host or the GPU, would run at (the bound)
    no_attention: bool = False

    @property
    def ours(self) -> bool:
        """This project's kernel: a candidate in speedups, the others its baselines."""
        return self.mode == "ragged" and self.backend == "triton" and not self.no_attention


# Order: the order of each grid's axis (asv cell order; the store keys cells by value).
BACKENDS = (
    Backend("triton", QUICK, cpu=True),
    Backend("fa2", QUICK),
    Backend("torch_varlen", FULL),
    Backend("padded_sdpa", QUICK, cpu=True),
    Backend("nested_sdpa", FULL, slow=True),
    Backend("mem_efficient", FULL),
    Backend("reference", None),  # the oracle the others are checked against, not timed
)

PIPELINES = (
    Pipeline("dense", "dense", "triton", throughput=QUICK, cpu=True),
    Pipeline("padded_full", "padded_full", "triton", throughput=QUICK, stages=QUICK,
             drift=QUICK, cpu=True, cpu_drift=True),
    Pipeline("padded_max", "padded_max", "triton", throughput=FULL, stages=FULL, drift=FULL,
             cpu=True, cpu_drift=True),
    Pipeline("fa2", "ragged", "fa2", throughput=QUICK, stages=FULL, drift=QUICK),
    Pipeline("torch_varlen", "ragged", "torch_varlen", drift=FULL),
    Pipeline("nested_sdpa", "ragged", "nested_sdpa", drift=FULL),
    Pipeline("mem_efficient", "ragged", "mem_efficient", drift=FULL),
    Pipeline("triton", "ragged", "triton", throughput=QUICK, stages=QUICK, drift=QUICK,
             cpu=True, cpu_drift=True),
    Pipeline("triton_graph", "ragged", "triton", cuda_graph=True, throughput=FULL),
    # in no grid: scripts/pipeline_bench.py's like-for-like graphs and the attention bound
    Pipeline("dense_graph", "dense", "triton", cuda_graph=True),
    Pipeline("fa2_graph", "ragged", "fa2", cuda_graph=True),
    Pipeline("no_attention", "ragged", "triton", no_attention=True),
    Pipeline("no_attention_graph", "ragged", "triton", cuda_graph=True, no_attention=True),
)  # fmt: skip

PIPELINE_BY_NAME = {p.name: p for p in PIPELINES}
# What a speedup is shown against first: the paper's padded baseline, ours, and FA2.
DEFAULT_BASELINES = ("padded_full", "padded_max", "fa2")

# Benchmark names the store's views and the dashboard read (asv: module.Class).
DISPATCH_FLOOR = "kernel.DispatchFloor"
DRIFT_SUFFIX = ".Drift"  # numerics.Drift and cpu.Drift


def kernel_backends(tier: str) -> list[str]:
    """Backends of the kernel grid at ``tier`` (QUICK: the quick grid; FULL: the full one)."""
    return [b.name for b in BACKENDS if _in(b.kernel, tier)]


def pipelines(axis: str, tier: str) -> list[str]:
    """Pipelines whose ``axis`` (throughput, stages, drift) puts them in ``tier``'s grid."""
    return [p.name for p in PIPELINES if _in(getattr(p, axis), tier)]


def cpu_pipelines(axis: str = "cpu") -> list[str]:
    """cpu.py's pipelines (``axis="cpu"``) or its drift pipelines (``"cpu_drift"``)."""
    return [p.name for p in PIPELINES if getattr(p, axis)]


def slow_backends() -> frozenset[str]:
    """Backends the harness times with fewer samples."""
    return frozenset(b.name for b in BACKENDS if b.slow)


def cpu_kernel_backends() -> list[str]:
    """cpu.py's kernel backends."""
    return [b.name for b in BACKENDS if b.cpu]


def candidates() -> list[str]:
    """Backends and pipelines of this project's kernel: what speedups compare."""
    return [p.name for p in PIPELINES if p.ours]


def _in(declared: str | None, tier: str) -> bool:
    return declared == QUICK or (declared == FULL and tier == FULL)
