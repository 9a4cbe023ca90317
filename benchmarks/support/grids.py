"""Every parameter axis of the suite, quick and full (see ``suite.grid``).

asv runs one process per benchmark method and grid cell (~0.55 s each on the H100 VM, mostly
asv's own imports), so the full grid is sized to run in ~10 minutes there rather than crossing
every axis with every other: models and batch sizes are crossed for the threshold-L2 pipeline,
pruning methods at one model and batch size.
"""

from __future__ import annotations

from . import catalogue
from .catalogue import FULL, QUICK
from .suite import grid

# --- kernel.py: attention on packed ragged batches, DeiT geometry, fp16 -----------------------
# attention backend (_catalogue.BACKENDS; a backend not available here is skipped)
KERNEL_BACKENDS = grid(catalogue.kernel_backends(QUICK), catalogue.kernel_backends(FULL))
KERNEL_BATCHES = grid([1, 64], [1, 8, 64])  # images in the packed batch
PRUNE = grid([0.8], [0.0, 0.8])  # share of DeiT's 197 tokens pruned from each image
GEOMETRIES = grid(["deit_b"], ["deit_s", "deit_b"])  # deit_b: 12 heads, deit_s: 6; head_dim 64
LENGTHS = ["uniform", "mixed"]  # all images equal, or widely spread with the same total
FLOOR = (1, 0.8, "uniform")  # the dispatch floor's workload: BS=1, 80% pruned
# kernel.GpuFloor: the triton call's graph-replay time over an empty kernel's, DeiT-B geometry,
# (batch, share pruned, lengths) as "<batch>/<percent pruned>"; the small batches first
FLOOR_WORKLOADS = grid(["1/80", "8/50"], ["1/80", "1/50", "8/50", "32/80", "64/0"])
ERROR_DTYPES = grid(["float16"], ["float16", "bfloat16"])  # q, k, v dtype against the oracle
# What is new to the process at a first call (_first_call.CASES). kernel.NewLength: a new
# max_seqlen, which compiles nothing. kernel.FirstCall: a new head_dim or dtype, which compiles
# (0.4-0.5 s on the H200, an empty Triton cache) or loads (3 ms) a kernel; quick: the load.
NEW_LENGTH = ["new_max_seqlen"]
FIRST_CALL_CASES = grid(
    ["new_head_dim_cached"], ["new_head_dim", "new_head_dim_cached", "new_dtype"]
)

# --- pipeline.py and numerics.py: the pruned DeiT pipeline, fp16 --------------------------------
# layout and attention backend (_catalogue.PIPELINES); dense = the unpruned timm model
PIPELINES = grid(catalogue.pipelines("throughput", QUICK), catalogue.pipelines("throughput", FULL))
# timm DeiT, named with its input resolution
MODELS = grid(
    ["deit_base_224"], ["deit_tiny_224", "deit_small_224", "deit_base_224", "deit_base_384"]
)
BATCHES = grid([1, 64], [1, 8, 64])  # images per forward (Threshold-L2 at 50%)
METHODS = grid(["threshold_l2", "ats"], ["threshold_l2", "dynamicvit", "evit", "ats"])  # pruning
METHOD_MODEL, METHOD_BATCH = "deit_base_224", 32  # where the pruning methods are compared
MEMORY_BATCH = 64  # peak memory at the largest batch
STAGE_PIPELINES = grid(catalogue.pipelines("stages", QUICK), catalogue.pipelines("stages", FULL))
STAGES = ["front", "prune_pack", "late", "head"]  # blocks 0-3; prune + pack; blocks 4-11; head
STAGE_MODEL, STAGE_BATCH = "deit_base_224", 8
# pipeline whose logits are compared with padded_max's (padded_max itself: its output hash)
DRIFT_BACKENDS = grid(catalogue.pipelines("drift", QUICK), catalogue.pipelines("drift", FULL))
DRIFT_MODELS = grid(["deit_base_224"], ["deit_base_224", "deit_base_384"])
DRIFT_METHODS = grid(["threshold_l2", "ats"], ["threshold_l2", "ats"])
DRIFT_BATCH = {224: 32, 384: 8}  # images per resolution
# pipeline.BoundShare: triton's share of the bound (no attention at all) and of the launched
# bound (one empty kernel a call), eager and under CUDA graphs, Threshold-L2 and ATS
BOUND_MODELS = grid(["deit_base_224"], ["deit_base_224", "deit_base_384"])
BOUND_METHODS = grid(["threshold_l2"], ["threshold_l2", "ats"])
BOUND_BATCHES = grid([1], [1, 4])
BOUND_ROUNDS = 101  # turns rounds a row (scripts/pipeline_bench.py --sections bound: at least 101)

# --- cpu.py: the CPU subset, DeiT-Ti fp32, Triton's interpreter --------------------------------
CPU_MODEL, CPU_BATCH = "deit_tiny_224", 2
CPU_PIPELINES = catalogue.cpu_pipelines()  # triton: the interpreter
CPU_METHODS = grid(["threshold_l2"], ["threshold_l2", "ats"])
CPU_DRIFT_BACKENDS = catalogue.cpu_pipelines("cpu_drift")
CPU_KERNEL_BACKENDS = catalogue.cpu_kernel_backends()
CPU_DTYPES = ["float32", "float16"]
