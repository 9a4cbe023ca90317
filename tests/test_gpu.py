"""GPU-only: bf16, every backend, the direct launch path, CUDA-graph capture."""

import pytest
import torch

import ragged
from ragged.kernels import attention
from ragged.kernels.launch import carveout_percent
from ragged.testing import assert_attention_close, packed_qkv

pytestmark = pytest.mark.gpu

RAGGED = [0, 1, 17, 197, 0, 577, 3, 64]
NONEMPTY = [1, 17, 197, 577, 3, 64]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("backend", list(ragged.BACKENDS))
def test_backend_matches_oracle(backend, dtype):
    if ragged.BACKENDS[backend].unavailable(torch.device("cuda"), dtype, 64):
        pytest.skip(ragged.BACKENDS[backend].unavailable(torch.device("cuda"), dtype, 64))
    lengths = NONEMPTY if backend == "nested_sdpa" else RAGGED
    q, k, v, cu, max_seqlen = packed_qkv(lengths, 4, 64, dtype=dtype, device="cuda")
    out = ragged.varlen_attention(q, k, v, cu, max_seqlen, backend=backend)
    assert_attention_close(out, q, k, v, cu)


@pytest.mark.parametrize("head_dim", [32, 64, 80, 128, 256])
def test_bf16_head_dims(head_dim):
    q, k, v, cu, max_seqlen = packed_qkv(RAGGED, 2, head_dim, dtype=torch.bfloat16, device="cuda")
    assert_attention_close(ragged.varlen_attention(q, k, v, cu, max_seqlen), q, k, v, cu)


def test_direct_launch_path_is_used_and_correct():
    q, k, v, cu, max_seqlen = packed_qkv([40, 3, 99], 12, 64, device="cuda", seed=11)
    ragged.varlen_attention(q, k, v, cu, max_seqlen)  # compiles, fills the cache
    assert attention._launcher._cache, "the compiled kernel was not cached for direct launch"
    for launch in attention._launcher._cache.values():  # the C launcher (kernels/c_launch.py)
        assert launch.func.__module__.startswith("ragged_launch_"), launch
    for seed in range(3):  # later calls, new data: the cached kernel must see it
        q2, k2, v2, _, _ = packed_qkv([40, 3, 99], 12, 64, device="cuda", seed=seed)
        out = ragged.varlen_attention(q2, k2, v2, cu, max_seqlen, validate=False)
        assert_attention_close(out, q2, k2, v2, cu)


def test_the_c_launcher_checks_its_arguments():
    q, k, v, cu, max_seqlen = packed_qkv([40, 3, 99], 12, 64, device="cuda", seed=11)
    ragged.varlen_attention(q, k, v, cu, max_seqlen)
    launch = next(iter(attention._launcher._cache.values()))
    ptrs = [t.data_ptr() for t in (q, k, v, q, cu)]
    ints = [q.stride(0), q.stride(1)] * 4 + [12, 1]
    with pytest.raises(OverflowError, match="parameter 15"):  # num_m_blocks, an i32
        launch(12, 1, 1, 0, *ptrs, 0.1, *ints[:-1], 2**31)
    with pytest.raises(TypeError, match="arguments, got"):
        launch(12, 1, 1, 0, *ptrs)
    torch.cuda.synchronize()


@pytest.fixture(params=["cpp", "python"])
def fast(request, monkeypatch):
    """The C++ fast paths (built at the first remembered call), or the Python ones."""
    if request.param == "python":
        monkeypatch.setattr(attention, "fast_call", attention.launch_ready)
        monkeypatch.setattr(attention, "layout_call", attention.kept_launch)
        monkeypatch.setattr(attention.fastpath, "module", lambda: None)
    return request.param


def _cpp(fast) -> bool:
    """Whether the C++ paths are in place, launching through cuLaunchKernel themselves."""
    if fast == "cpp":
        assert (
            attention.fast_call.func.__module__
            == attention.layout_call.func.__module__
            == "ragged_fastpath"
        )
        kept = [span for spans in attention.ready_spans.values() for span in spans]
        assert all(span[5] is not None for span in kept)
    return fast == "cpp"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_fast_path_launches_correctly_after_one_checked_call(fast, monkeypatch, dtype,
                                                                 head_dim):  # fmt: skip
    lengths = [40, 3, 0, 99]
    q, k, v, cu, max_seqlen = packed_qkv(lengths, 12, head_dim, dtype=dtype, device="cuda")
    ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)  # checked: plans, compiles
    assert attention.ready_entry(0, dtype, head_dim, max_seqlen, 4 * 12) is not None
    _cpp(fast)
    plain = []
    monkeypatch.setattr(attention._launcher, "launch", lambda *a, **kw: plain.append(a))
    for seed in range(2):  # views of one packed qkv (strided), then contiguous copies
        q2, k2, v2, _, _ = packed_qkv(lengths, 12, head_dim, dtype=dtype, device="cuda", seed=seed)
        if seed:
            q2, k2, v2 = q2.contiguous(), k2.contiguous(), v2.contiguous()
        assert_attention_close(
            ragged.varlen_attention(q2, k2, v2, cu, max_seqlen, validate=False), q2, k2, v2, cu
        )
        out = torch.full_like(q2, float("nan"))
        ragged.varlen_attention(q2, k2, v2, cu, max_seqlen, validate=False, out=out)
        assert_attention_close(out, q2, k2, v2, cu)
    assert plain == [], "a call the fast path knows went through the Launcher"


def test_layout_attention_keeps_its_launch_and_stays_correct(fast, monkeypatch):
    lengths, heads, head_dim = [40, 3, 0, 99], 12, 64
    _, _, _, cu, max_seqlen = packed_qkv(lengths, heads, head_dim, device="cuda")
    total = sum(lengths)

    def qkv(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(total, 3 * heads * head_dim, device="cuda", generator=g)
        return x.half().unflatten(1, (3, heads, head_dim))

    call = ragged.LayoutAttention(cu, max_seqlen)
    first = qkv(0)
    assert_attention_close(call(first), *first.unbind(1), cu)
    assert call.kept is not None, "the launch was not kept"
    assert call.kept.spec is not None  # launched by cuLaunchKernel from C++ (fast == "cpp")
    _cpp(fast)
    plain = []
    monkeypatch.setattr(attention._launcher, "launch", lambda *a, **kw: plain.append(a))
    monkeypatch.setattr(ragged.attention, "varlen_attention", lambda *a, **kw: plain.append(a))
    for seed in (1, 2):
        t = qkv(seed)
        out = call(t)
        torch.cuda.synchronize()
        assert_attention_close(out, *t.unbind(1), cu)
    assert plain == [], "a kept launch went through the checked path"


def test_a_new_max_seqlen_launches_at_once_and_stays_correct(fast, monkeypatch):
    """New lengths each call (data-dependent pruning): after one call of the span, every
    max_seqlen of it launches with no plan, no compile, no check, correct over its grid."""
    heads, head_dim = 12, 64
    q, k, v, cu, max_seqlen = packed_qkv([40, 3, 0, 99], heads, head_dim, device="cuda")
    ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
    call = ragged.LayoutAttention(cu, max_seqlen)
    qkv = torch.stack((q, k, v), 1)
    call(qkv)
    _cpp(fast)
    plain = []
    monkeypatch.setattr(attention._launcher, "launch", lambda *a, **kw: plain.append(a))
    monkeypatch.setattr(ragged.LayoutAttention, "_checked", lambda *a: plain.append(a))
    for seed, lengths in enumerate(([20, 3, 0, 119], [17, 17, 17, 91], [100, 10, 20, 12])):
        q2, k2, v2, cu2, m2 = packed_qkv(lengths, heads, head_dim, device="cuda", seed=seed)
        assert m2 != max_seqlen and q2.shape == q.shape  # the rows of the kept layout
        assert_attention_close(ragged.varlen_attention(q2, k2, v2, cu2, m2, validate=False),
                               q2, k2, v2, cu2)  # fmt: skip
        call.rebind(cu2, m2)
        out = call(torch.stack((q2, k2, v2), 1))
        torch.cuda.synchronize()
        assert_attention_close(out, q2, k2, v2, cu2)
    assert plain == [], "a new max_seqlen of the span went through the Launcher or a check"


def test_misaligned_views_take_the_plain_path():
    q, k, v, cu, max_seqlen = packed_qkv([5, 40], 2, 64, device="cuda", seed=4)
    flat = torch.empty(q.numel() + 1, dtype=q.dtype, device="cuda")
    qm = flat[1:].view(q.shape)  # 2-byte aligned data pointer
    qm.copy_(q)
    assert qm.data_ptr() % 16
    for _ in range(2):
        assert_attention_close(ragged.varlen_attention(qm, k, v, cu, max_seqlen), qm, k, v, cu)


def test_cuda_graph_capture_of_attention():
    q, k, v, cu, max_seqlen = packed_qkv([40, 3, 99, 0], 12, 64, device="cuda")
    out = torch.empty_like(q)
    ragged.varlen_attention(q, k, v, cu, max_seqlen, out=out, validate=False)  # warm up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ragged.varlen_attention(q, k, v, cu, max_seqlen, out=out, validate=False)
    for seed in (1, 2):
        q2, k2, v2, _, _ = packed_qkv([40, 3, 99, 0], 12, 64, device="cuda", seed=seed)
        q.copy_(q2), k.copy_(k2), v.copy_(v2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_attention_close(out, q, k, v, cu)


@pytest.mark.parametrize("backend", list(ragged.BACKENDS))
def test_capture_flag_says_whether_a_backend_synchronises(backend):
    """``Backend.capture``: no host sync with validate=False, and a captured call replays
    correctly; a backend without it does synchronise (the flag is not stale either way)."""
    lengths = [40, 3, 99, 5] if backend == "nested_sdpa" else [40, 3, 99, 0]
    q, k, v, cu, max_seqlen = packed_qkv(lengths, 4, 64, device="cuda")
    out = torch.empty_like(q)

    def call():
        ragged.varlen_attention(q, k, v, cu, max_seqlen, backend=backend, out=out,
                                validate=False)  # fmt: skip

    call()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
        synchronised = False
    except RuntimeError as exc:
        assert "synchronizing" in str(exc)
        synchronised = True
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert synchronised is not ragged.BACKENDS[backend].capture
    if synchronised:
        return
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    q.copy_(torch.randn_like(q))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_attention_close(out, q, k, v, cu)


def test_cuda_graph_capture_of_pack_attend_unpack():
    """pack_fixed -> attention -> unpack, captured once, replayed on new masks."""
    b, n, heads, head_dim = 4, 197, 3, 64
    c = heads * head_dim
    x = torch.randn(b, n, c, device="cuda", dtype=torch.float16)
    keep = torch.zeros(b, n, dtype=torch.bool, device="cuda")
    capacity = b * n

    def step():
        packed, cu, max_seqlen, _ = ragged.pack_fixed(x, keep, capacity)
        qkv = packed.view(capacity, heads, head_dim)
        o = ragged.varlen_attention(qkv, qkv, qkv, cu, max_seqlen, validate=False)
        return ragged.unpack(o.view(capacity, c), cu, keep, validate=False), packed, cu

    keep[:, :50] = True
    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result, _, cu = step()
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        keep.copy_(torch.rand(b, n, device="cuda", generator=g) < 0.4)
        keep[:, 0] = True
        x.normal_(generator=g)
        graph.replay()
        torch.cuda.synchronize()
        ref_packed, ref_cu, longest = ragged.pack(x, keep)
        assert torch.equal(cu, ref_cu)
        qkv = ref_packed.view(-1, heads, head_dim)
        attn = ragged.varlen_attention(qkv, qkv, qkv, ref_cu, longest, backend="reference")
        expect = ragged.unpack(attn.view(-1, c), ref_cu, keep)
        assert (result.float() - expect.float()).abs().max().item() < 5e-3


def test_unaligned_cu_seqlens_and_odd_strides():
    """A cu_seqlens slice 4 bytes off alignment, and strides that are not multiples of 16."""
    q, k, v, cu, max_seqlen = packed_qkv([5, 40, 0, 17], 2, 72, device="cuda", seed=8)
    shifted = torch.cat([cu[:1], cu])[1:]
    assert shifted.data_ptr() % 16
    for _ in range(2):
        out = ragged.varlen_attention(q, k, v, shifted, max_seqlen)
        assert_attention_close(out, q, k, v, cu)


def test_injected_delay_slows_the_kernel_and_keeps_its_output():
    """The calibration's slower kernel (benchmarks/support/inject.py): same numbers, more time."""
    from benchmarks.support import inject as _inject
    from benchmarks.support import workloads

    q, k, v, cu_seqlens, max_seqlen = workloads.kernel_inputs(64, 0.8, "deit_b", "uniform")
    fast, _ = _inject.triton_fn(q, k, v, cu_seqlens, max_seqlen, 0.0)
    slow, info = _inject.triton_fn(q, k, v, cu_seqlens, max_seqlen, 0.10)
    assert torch.equal(fast(), slow())
    assert info["delay_cycles"] > 0 and 0.05 < info["sized_slowdown"] < 0.15


# (lengths, heads) -> the short-batch class config.choice gives them on sm_90: one tile (PDL at
# once; a wrong speculative start; PDL after the store at 128 keys), the loop with PDL after
# the q load on the 3-D grid up to 2 waves of query tiles ("grid3": BS 8 / 50%, ragged, BS 8 /
# 80% and 20 / 80%), the same at most 3 programs an SM past them ("capped": BS 24 / 80%, 24 /
# 90%, 16 / 50%, ragged) and on the 1-D grid past that (BS 32 / 80%), the loop with 3
# stages (BS 1 / 0%), specloop (33-64 keys up to half a wave: BS 4 / 80% uniform, its guess
# right; a ragged batch, no guess), the loop with 3 stages at 257-512 keys (DeiT-B 384 after the
# prune point, BS 1 and 4), and past the classes' grids and lengths the loop with 3 stages and
# the leaner softmax, on the 3-D grid with PDL after the q load ("large": BS 64 / 80%, and
# ragged past 512 keys), and past 65,535 pairs on the 1-D grid with PDL after the store ("large
# 1-D": 5,462 x 40).
SHORT_BATCHES = [([40], 12, "onetile"), ([40, 7, 33], 2, "onetile"), ([99], 12, "onetile"),
                 ([99] * 8, 12, "grid3"), ([99, 70, 128, 0, 65] * 3, 6, "grid3"),
                 ([40] * 8, 12, "grid3"), ([40] * 20, 12, "grid3"), ([40] * 24, 12, "capped"),
                 ([20] * 24, 12, "capped"), ([99] * 16, 12, "capped"),
                 ([99, 70, 128, 0, 65] * 5, 6, "capped"), ([40] * 32, 12, "loop"),
                 ([197], 12, "loop"), ([40] * 4, 12, "specloop"),
                 ([23, 62, 6, 40], 12, "specloop"), ([289], 12, "loop"),
                 ([289] * 4, 12, "loop"), ([40] * 64, 12, "large"),
                 ([577, 300, 1, 0], 12, "large"), ([40] * 5462, 12, "large 1-D")]  # fmt: skip


def _carveout(function: int) -> int:
    """The compiled function's preferred shared-memory carveout, in percent (-1: none set)."""
    import ctypes

    value = ctypes.c_int()
    status = ctypes.CDLL("libcuda.so.1").cuFuncGetAttribute(
        ctypes.byref(value), 9, ctypes.c_void_p(function))  # fmt: skip
    assert status == 0
    return value.value


@pytest.mark.parametrize("lengths, heads, kind", SHORT_BATCHES)
def test_short_batches_take_their_class_and_stay_correct(fast, monkeypatch, lengths, heads,
                                                         kind):  # fmt: skip
    """sm_90 and later: the default path launches the short-batch class's kernel as a
    programmatic dependent launch through the fast paths (C++: cuLaunchKernelEx), the kept
    launch and a CUDA graph, every output within the budget; before sm_90 the table's."""
    q, k, v, cu, max_seqlen = packed_qkv(lengths, heads, 64, device="cuda", seed=3)
    out = torch.full_like(q, float("nan"))
    ragged.varlen_attention(q, k, v, cu, max_seqlen, out=out, validate=False)  # checked
    assert_attention_close(out, q, k, v, cu)
    # the class's plan (the fast path may have launched it unplanned: a span launched before)
    plan = attention._make_plan(0, q.dtype, 64, max_seqlen, len(lengths) * heads, None)
    hopper = torch.cuda.get_device_capability() >= (9, 0)
    loops = ("grid3", "capped", "large", "large 1-D")
    expect = ("loop", True) if kind in loops else (kind, True)
    assert (plan.config.kind, plan.pdl > 0) == (expect if hopper else ("loop", False))
    assert plan.config.lean == (hopper and kind.startswith("large"))
    assert plan.config.early == (hopper and kind in ("grid3", "capped"))
    assert plan.config.ctas == (3 if hopper and kind == "capped" else 0)
    assert plan.grid3 == (hopper and kind in ("onetile", "specloop", "grid3", "capped", "large"))
    entry = attention.ready_entry(0, q.dtype, 64, max_seqlen, len(lengths) * heads)
    assert entry is not None and entry[8] == plan.grid3
    if _cpp(fast):
        assert entry[5][3] == int(plan.pdl > 0)  # the spec: cuLaunchKernelEx with PDL
    if hopper and kind in ("grid3", "capped"):  # the same kernel, a compiled function each:
        # the carveout is the function's, which every path launches
        function, _, shared, _ = entry[5]
        total_kb = torch.cuda.get_device_properties(0).shared_memory_per_multiprocessor // 1024
        three = carveout_percent(shared, 3, total_kb)
        assert (_carveout(function) == three) == (kind == "capped") and three < 100
    plain = []
    monkeypatch.setattr(plan.launcher, "launch", lambda *a, **kw: plain.append(a))
    call = ragged.LayoutAttention(cu, max_seqlen)
    qkv = torch.stack((q, k, v), 1)
    for seed in (1, 2):
        q2, k2, v2, _, _ = packed_qkv(lengths, heads, 64, device="cuda", seed=seed)
        q.copy_(q2), k.copy_(k2), v.copy_(v2), qkv.copy_(torch.stack((q2, k2, v2), 1))
        out.fill_(float("nan"))
        ragged.varlen_attention(q, k, v, cu, max_seqlen, out=out, validate=False)
        assert_attention_close(out, q, k, v, cu)
        assert_attention_close(call(qkv), q, k, v, cu)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(3):  # back to back: each waits for the one before
            ragged.varlen_attention(q, k, v, cu, max_seqlen, out=out, validate=False)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_attention_close(out, q, k, v, cu)
    assert plain == [], "a call of a launched class went through the Launcher"


@pytest.mark.parametrize("head_dim", [40, 56])
def test_a_compilation_the_cap_does_not_fit_runs_uncapped(head_dim):
    """head_dim 40 or 56 (strides not multiples of 16: the 17-128 key loop compiles to 24 KB,
    which no carveout holds to 3 programs an SM): the first call (it prepares every class,
    the capped one too) and a batch of the capped class run uncapped, within the budget, with
    no error and no warning."""
    import warnings

    for lengths in ([40], [40] * 24):
        q, k, v, cu, max_seqlen = packed_qkv(lengths, 12, head_dim, device="cuda", seed=4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
        torch.cuda.synchronize()
        assert_attention_close(out, q, k, v, cu)


def test_after_one_call_a_new_length_or_batch_compiles_nothing():
    """``kernel.NewLength``'s promise: after one call of a head_dim and dtype (its JIT caches
    dropped first, so that it compiles or loads), calls at fresh lengths in every length
    bucket and at other batches compile and load nothing (Triton's
    ``jit_post_compile_hook``), their outputs within the budget."""
    import triton

    runtime = triton.knobs.runtime
    attention.forget_plans()
    for launcher in (attention._launcher, attention._onetile_launcher,
                     attention._specloop_launcher):  # fmt: skip
        launcher.fn.device_caches.clear()
    heads = 12
    q, k, v, cu, max_seqlen = packed_qkv([40], heads, 64, device="cuda")
    ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
    compiled = []
    before = runtime.jit_post_compile_hook
    runtime.jit_post_compile_hook = lambda *a, **kw: compiled.append(kw.get("key"))
    try:
        for seed, lengths in enumerate(([20], [50], [100], [200], [300], [10], [99] * 8,
                                        [20] * 6, [150] * 16, [60] * 64, [40] * 4)):  # fmt: skip
            q2, k2, v2, cu2, m2 = packed_qkv(lengths, heads, 64, device="cuda", seed=seed)
            for _ in range(2):  # checked, then the fast path
                out = ragged.varlen_attention(q2, k2, v2, cu2, m2, validate=False)
                torch.cuda.synchronize()
                assert_attention_close(out, q2, k2, v2, cu2)
    finally:
        runtime.jit_post_compile_hook = before
    assert compiled == []
