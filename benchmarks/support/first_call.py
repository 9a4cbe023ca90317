"""What the first call of a shape the process has not seen costs: ``kernel.NewLength``,
``kernel.FirstCall`` and ``python -m scripts.kernel_bench --first-call`` (docs/metrics.md).

One sample is one call of the triton backend, ``varlen_attention(..., validate=False)``, at a
shape the process has not called with: ragged's in-memory caches (its plans and fast-path
entries, its Launcher's kernels) hold nothing for it, and the JITFunction's per-device cache
holds its kernel only in ``new_max_seqlen`` (a length needs no kernel of its own):

    first_call_us   host time of that call (perf_counter around it; the GPU synchronised
                    after, outside the timing)
    kept_call_us    the same call again, hot: the median of ``KEPT_CALLS`` calls timed alike
    first_over_kept the two, per sample: the promise "a new max_seqlen costs <= 2x a kept call"
    compiles       kernels Triton compiled or loaded from its disk cache during the first call
                    (``triton.knobs.runtime.jit_post_compile_hook``, Triton >= 3.4)
    host_syncs     synchronising CUDA operations torch reported during the first call
                    (``torch.cuda.set_sync_debug_mode("warn")``); the CUDA driver's own
                    implicit synchronisations (a module load) are not seen

The cases (DeiT-B geometry: 12 heads, head_dim 64, fp16, BS 1; ``CASES``), each after one
call at ``WARM_MAX_SEQLEN`` (its kernel compiled or loaded, the C++ fast path loaded):

    new_max_seqlen       a max_seqlen never called with, within that call's configuration:
                         views of one 197-token batch, one fresh length (17..197, one tile
                         configuration) a sample
    new_head_dim         a head_dim never compiled, Triton's disk cache empty (pointed at a new
                         temporary directory): the JIT compile a cold machine pays
    new_head_dim_cached  the same kernels again with the in-memory caches dropped and the disk
                         cache kept: what a new process on a warm machine pays
    new_dtype            bfloat16 after float16 at the same head_dim, disk cache empty

Each sample of the compile cases is a distinct kernel (``HEAD_DIMS``), so only
``new_head_dim_cached`` drops caches, which needs private attributes of ragged and Triton
(``drop_memory_caches``): where they are absent that case is skipped with the reason.

Imports nothing heavy at module level: asv imports the suite in every benchmark process.
torch, triton and ragged come in as arguments or are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

CASES = ("new_max_seqlen", "new_head_dim", "new_head_dim_cached", "new_dtype")
WARM_MAX_SEQLEN = 40  # the dispatch floor's length (BS 1, 80% of DeiT's 197 tokens pruned)
# Fresh lengths: all > 16, so all take the table's one d<=64 tile (config.attention_config)
MAX_SEQLENS = (17, 37, 57, 77, 97, 117, 137, 157, 177, 197)
# Head dims never compiled by the suite (its kernels are d=64), multiples of 16 so that the
# strides keep Triton's specialization and the kept calls the fast path; two tile classes.
HEAD_DIMS = (32, 96, 128)
KEPT_CALLS = 20
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text in "warn" mode
# A part of FirstCall's and NewLength's asv version: the measuring code lives here.
DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]


class Count:
    """How many times something happened inside a ``with`` block."""

    count = 0


@contextlib.contextmanager
def count_syncs(get_mode: Callable[[], int] | None = None,
                set_mode: Callable[[object], None] | None = None) -> Iterator[Count]:  # fmt: skip
    """Count torch's synchronising CUDA operations in the block: its sync debug mode at
    "warn", each warning counted (and kept from the caller); the mode restored after.
    ``get_mode``/``set_mode`` default to ``torch.cuda``'s (given: a test's fakes)."""
    if get_mode is None or set_mode is None:
        import torch

        get_mode, set_mode = torch.cuda.get_sync_debug_mode, torch.cuda.set_sync_debug_mode
    counted = Count()
    before = get_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every occurrence, not once per call site
        set_mode("warn")
        try:
            yield counted
        finally:
            set_mode(before)
    counted.count = sum(SYNC_WARNING in str(w.message) for w in caught)
    for w in caught:  # the others reach the caller's filters as if not caught
        if SYNC_WARNING not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def compile_hook_reason(runtime) -> str | None:
    """Why Triton's ``runtime`` knobs cannot count compiles, or None."""
    if runtime is None or not hasattr(runtime, "jit_post_compile_hook"):
        return "this Triton has no triton.knobs.runtime.jit_post_compile_hook (Triton >= 3.4)"
    return None


@contextlib.contextmanager
def count_compiles(runtime) -> Iterator[Count]:
    """Count the kernels Triton compiles or loads from its disk cache in the block:
    ``runtime.jit_post_compile_hook`` (``triton.knobs.runtime``), called by JITFunction after
    each, set for the block; a hook installed before still runs and is restored after."""
    counted = Count()
    before = runtime.jit_post_compile_hook

    def hook(*args, **kwargs):
        counted.count += 1
        return before(*args, **kwargs) if before is not None else None

    runtime.jit_post_compile_hook = hook
    try:
        yield counted
    finally:
        runtime.jit_post_compile_hook = before


@contextlib.contextmanager
def empty_disk_cache(cache_knobs) -> Iterator[Path]:
    """Triton's disk cache (``triton.knobs.cache``) pointed at a new empty directory for the
    block, its setting and ``TRITON_CACHE_DIR`` restored after (``scope``), the directory
    removed."""
    with tempfile.TemporaryDirectory(prefix="ragbench-triton-cache-") as tmp, cache_knobs.scope():
        cache_knobs.dir = tmp
        yield Path(tmp)


def drop_memory_caches(kernels) -> str | None:
    """Drop what a new process would not hold for ``kernels`` (``ragged.kernels.attention``):
    its plans and fast-path entries (``forget_plans``), its Launcher's kernels (``_cache``) and
    the JITFunction's per-device caches (``device_caches``, Triton 3.x). -> None, or why not
    (an attribute is absent: nothing dropped)."""
    forget = getattr(kernels, "forget_plans", None)
    launcher = getattr(kernels, "_launcher", None)
    kept = getattr(launcher, "_cache", None)
    jit = getattr(getattr(launcher, "fn", None), "device_caches", None)
    needed = {"kernels.attention.forget_plans": forget, "its Launcher's _cache": kept,
              "its JITFunction's device_caches": jit}  # fmt: skip
    missing = [name for name, v in needed.items() if v is None]
    if missing or not (isinstance(kept, dict) and isinstance(jit, dict)):
        return "cannot drop the in-memory caches: no " + ", ".join(missing or ["dict caches"])
    forget()
    kept.clear()  # this ragged's forget_plans clears it too; older revisions' do not
    jit.clear()
    return None


def sample(
    fn: Callable[[], object],
    sync: Callable[[], None],
    runtime,
    kept_calls: int = KEPT_CALLS,
    syncs_counter=count_syncs,
) -> dict[str, float]:
    """One first call of ``fn`` and ``kept_calls`` calls after it, each timed on the host with
    ``sync()`` after it (outside the timing); compiles counted through ``runtime``
    (``triton.knobs.runtime``), host syncs by ``syncs_counter()``. -> one value per metric."""
    sync()
    with count_compiles(runtime) as compiles, syncs_counter() as syncs:
        t0 = time.perf_counter()
        fn()
        first = time.perf_counter() - t0
    sync()
    kept = []
    for _ in range(kept_calls):
        t0 = time.perf_counter()
        fn()
        kept.append(time.perf_counter() - t0)
        sync()
    kept_s = statistics.median(kept)
    return {"first_call_us": first * 1e6, "kept_call_us": kept_s * 1e6,
            "first_over_kept": first / kept_s, "compiles": compiles.count,
            "host_syncs": syncs.count}  # fmt: skip


def _collect(samples: list[dict]) -> dict[str, list[float]]:
    return {m: [s[m] for s in samples] for m in samples[0]} if samples else {}


def measure(cases=CASES, *, max_seqlens=MAX_SEQLENS, head_dims=HEAD_DIMS,
            kept_calls: int = KEPT_CALLS) -> dict[str, dict]:  # fmt: skip
    """Every case of ``cases`` in this process, in ``CASES`` order -> {case: {metric: [one
    value a sample]}, or {"skip": reason}}. Call it before anything else in the process
    launches the triton backend: a shape it ran before is no first call. Needs a CUDA GPU."""
    import torch
    import triton

    import ragged
    from ragged.kernels import attention as kernels
    from ragged.testing import packed_qkv

    from . import workloads

    knobs = getattr(triton, "knobs", None)
    runtime = getattr(knobs, "runtime", None)
    reason = compile_hook_reason(runtime)
    if reason is None and not hasattr(getattr(knobs, "cache", None), "scope"):
        reason = "this Triton has no triton.knobs.cache.scope() (Triton >= 3.4)"
    if reason is not None:
        return {case: {"skip": reason} for case in cases}
    unknown = set(cases) - set(CASES)
    if unknown:
        raise ValueError(f"unknown first-call cases {sorted(unknown)}; known: {', '.join(CASES)}")
    if WARM_MAX_SEQLEN in max_seqlens or len(set(max_seqlens)) < len(max_seqlens):
        raise ValueError(f"max_seqlens must be distinct and not {WARM_MAX_SEQLEN} (the warm call)")

    def call(q, k, v, cu, max_seqlen):
        return lambda: ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)

    def inputs(head_dim, dtype, length=WARM_MAX_SEQLEN):
        return packed_qkv([length], workloads.HEADS["deit_b"], head_dim, dtype=dtype, device="cuda")

    def warm(fn):  # untimed: compiled, the fast paths made
        for _ in range(3):
            fn()
        torch.cuda.synchronize()

    def run(fn):
        return sample(fn, torch.cuda.synchronize, runtime, kept_calls)

    out: dict[str, dict] = {}
    q, k, v, _, _ = inputs(workloads.HEAD_DIM, torch.float16, workloads.TOKENS)

    def length(n):  # one sequence of n tokens: views of the same q, k and v
        return call(q[:n], k[:n], v[:n], _cu_seqlens(torch, n), n)

    # Every case after one call (Triton's disk cache as it is: it may load the kernel), which
    # also loads the C++ fast path (built at a machine's first call: fastpath_build_s)
    warm(length(WARM_MAX_SEQLEN))
    if "new_max_seqlen" in cases:
        fns = [length(n) for n in max_seqlens]
        out["new_max_seqlen"] = _collect([run(fn) for fn in fns])
    if set(cases) - {"new_max_seqlen"}:
        fp16 = {d: call(*inputs(d, torch.float16)) for d in head_dims}
        with empty_disk_cache(knobs.cache):  # new_head_dim's, kept for the cached case
            samples = [run(fn) for fn in fp16.values()]  # compiled into the empty cache
            if "new_head_dim" in cases:
                out["new_head_dim"] = _collect(samples)
            if "new_dtype" in cases:  # float16 at each head_dim is in memory now
                with empty_disk_cache(knobs.cache):
                    bf16 = [call(*inputs(d, torch.bfloat16)) for d in head_dims]
                    out["new_dtype"] = _collect([run(fn) for fn in bf16])
            if "new_head_dim_cached" in cases:  # last: it drops what the others compiled
                samples = []
                for fn in fp16.values():
                    reason = drop_memory_caches(kernels)
                    if reason is not None:
                        break
                    samples.append(run(fn))
                out["new_head_dim_cached"] = {"skip": reason} if reason else _collect(samples)
    return {case: out[case] for case in CASES if case in cases}


def _cu_seqlens(torch, n: int):
    """cu_seqlens of one sequence of ``n`` tokens, on the GPU (made before any timing)."""
    return torch.tensor([0, n], dtype=torch.int32, device="cuda")


def fastpath_build_s() -> float | str:
    """Seconds to build ragged's C++ fast path (``kernels.fastpath.build``) into a new
    temporary directory: what a cold machine pays once, at its first triton call. A string
    (why) where it cannot be built here."""
    try:
        from ragged.kernels import fastpath
    except ImportError as exc:
        return f"this revision of ragged has no C++ fast path ({exc})"
    with tempfile.TemporaryDirectory(prefix="ragbench-fastpath-") as tmp:
        target = Path(tmp) / fastpath.target_path().name
        t0 = time.perf_counter()
        try:
            fastpath.build(target)
        except RuntimeError as exc:
            return f"cannot build: {str(exc).splitlines()[0][:200]}"
        return time.perf_counter() - t0
