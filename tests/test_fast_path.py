"""The merged fast paths of ``varlen_attention(..., validate=False)`` and ``LayoutAttention``:
in Python (``launch_ready``, ``kept_launch``) and in C++ (kernels/fastpath.cpp), every test on
both.

On this CPU machine the Triton kernel runs under the interpreter and nothing is launched
directly, so a recording launcher stands in for the compiled kernel's: every call the fast
path takes must launch exactly what the checked path would, and every call the checked path
rejects must be left to it. tests/test_gpu.py runs the real ones (C++ through cuLaunchKernel).
"""

import dataclasses
import warnings

import pytest
import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

import ragged
from ragged import attention as api
from ragged.kernels import attention, launch
from ragged.kernels.config import (
    LARGE_GRID3,
    LARGE_LOOP,
    MAX_LENGTH,
    AttentionConfig,
    choice,
    length_span,
    pow2_span,
)
from ragged.testing import assert_attention_close, packed_qkv

LENGTHS = [40, 3, 0, 99]
pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="a CPU stand-in for the launch; test_gpu.py runs the real one"
)


@pytest.fixture(params=["python", "cpp"])
def impl(request, monkeypatch):
    """Which fast paths ``varlen_attention`` and ``LayoutAttention`` take (the C++ ones are
    built here, about 10 s, once per machine)."""
    if request.param == "cpp":
        from ragged.kernels import fastpath

        module = fastpath.module()
        if module is None:
            pytest.skip("the C++ fast path cannot be built here")
        monkeypatch.setattr(attention, "fast_call", module.attention)
        monkeypatch.setattr(attention, "layout_call", module.layout)
    else:
        monkeypatch.setattr(attention, "fast_call", attention.launch_ready)
        monkeypatch.setattr(attention, "layout_call", attention.kept_launch)
    return request.param


@pytest.fixture
def no_ready():
    """``ready_spans`` emptied for the test, then given its entries back: emptied in place, as
    the Python paths (``attention.ready_spans``) and the C++ ones (``kernels.kept.ready_spans``)
    read one dict."""
    saved = dict(attention.ready_spans)
    attention.ready_spans.clear()
    yield
    attention.ready_spans.clear()
    attention.ready_spans.update(saved)


@pytest.fixture
def recorder(impl, no_ready, monkeypatch):
    """-> (calls, ready(q, max_seqlen)): a fake direct launcher registered for q's key."""
    calls = []
    monkeypatch.setattr(launch, "raw_stream", lambda device: 1234)
    monkeypatch.setattr(launch, "SINGLE_DEVICE", True)

    def ready(q, max_seqlen, config=None, pairs=(0, MAX_LENGTH)):
        """Register a recording launch for q's key, the span of ``max_seqlen`` and ``pairs``
        (batch x heads), of the table's kernel or ``config``'s."""
        key = (q.get_device(), q.dtype, q.shape[2])
        plan = attention._make_plan(*key, max_seqlen, 0, config)
        scale = (1.0 / (q.shape[2] ** 0.5)) * attention.LOG2E
        span = (*plan.span, lambda *args: calls.append(args), plan.config.block_m, scale, None,
                *pairs, plan.grid3)  # fmt: skip
        attention.ready_spans[key] = (*attention.ready_spans.get(key, ()), span)

    return calls, ready


def _expected(q, k, v, out, cu, max_seqlen, scale, config=None):
    """What the checked path launches: (grid_x, grid_y, grid_z, stream, *pointers, *scalars)."""
    _, grid, scalars, fast = attention.launch_args(q, k, v, out, cu, max_seqlen, scale, config)
    assert fast
    ptrs = tuple(t.data_ptr() for t in (q, k, v, out, cu))
    return (*grid, 1234, *ptrs, *scalars)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_it_launches_what_the_checked_path_launches(recorder, dtype, head_dim):
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, head_dim, dtype=dtype)
    ready(q, max_seqlen)
    out = attention.fast_call(q, k, v, cu, max_seqlen, None, None)
    assert out is not None and out.shape == q.shape and out.dtype == dtype
    assert calls == [_expected(q, k, v, out, cu, max_seqlen, 1.0 / head_dim**0.5)]
    given = torch.empty_like(q)
    assert attention.fast_call(q, k, v, cu, max_seqlen, 0.3, given) is given
    assert calls[1] == _expected(q, k, v, given, cu, max_seqlen, 0.3)


def test_it_is_what_varlen_attention_takes_and_only_with_validate_false(recorder):
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)
    ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
    assert len(calls) == 1
    ragged.varlen_attention(q, k, v, cu, max_seqlen)  # validate=True: the checked path
    assert len(calls) == 1


def test_a_replaced_triton_backend_is_never_bypassed(recorder, monkeypatch):
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)
    ran = []
    monkeypatch.setitem(
        api.BACKENDS, "triton",
        dataclasses.replace(api.BACKENDS["triton"], run=lambda *a: ran.append(a) or a[-1]),
    )  # fmt: skip
    ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
    assert len(ran) == 1 and calls == []


def _variants(q, k, v, cu, max_seqlen):
    """(what is off, call args) for calls the fast path must leave to the checked path."""
    big = torch.empty(q.shape[0], q.shape[1], 2 * q.shape[2], dtype=q.dtype)[:, :, ::2]
    odd = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    param = torch.nn.Parameter(q, requires_grad=False)
    transposed = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=q.dtype).transpose(1, 2)
    return [
        ("k dtype", (q, k.float(), v, cu, max_seqlen, None, None)),
        ("v shape", (q, k, v[1:], cu, max_seqlen, None, None)),
        ("q 2-D", (q.flatten(1), k, v, cu, max_seqlen, None, None)),
        ("q a Parameter", (param, k, v, cu, max_seqlen, None, None)),
        ("k a list", (q, [k], v, cu, max_seqlen, None, None)),
        ("cu_seqlens int64", (q, k, v, cu.long(), max_seqlen, None, None)),
        ("cu_seqlens 2-D", (q, k, v, cu[None], max_seqlen, None, None)),
        ("cu_seqlens empty", (q, k, v, cu[:0], max_seqlen, None, None)),
        ("max_seqlen a bool", (q, k, v, cu, True, None, None)),
        ("max_seqlen a float", (q, k, v, cu, float(max_seqlen), None, None)),
        ("max_seqlen > total", (q, k, v, cu, q.shape[0] + 1, None, None)),
        ("max_seqlen of a span not launched", (q, k, v, cu, 16, None, None)),
        ("scale a tensor", (q, k, v, cu, max_seqlen, torch.tensor(0.1), None)),
        ("head_dim not unit stride", (big, k, v, cu, max_seqlen, None, None)),
        ("q misaligned", (odd, k, v, cu, max_seqlen, None, None)),
        ("out dtype", (q, k, v, cu, max_seqlen, None, torch.empty_like(q, dtype=torch.float32))),
        ("out shape", (q, k, v, cu, max_seqlen, None, q[1:].clone())),
        ("out a tuple", (q, k, v, cu, max_seqlen, None, (q,))),
        ("out not unit stride", (q, k, v, cu, max_seqlen, None, transposed)),
        ("cu_seqlens strided", (q, k, v, torch.stack([cu, cu], 1)[:, 0], max_seqlen, None, None)),
        ("q a negative view", (torch._neg_view(q), k, v, cu, max_seqlen, None, None)),
        ("out a negative view", (q, k, v, cu, max_seqlen, None, torch._neg_view(q.clone()))),
    ]


def test_every_call_off_the_common_case_is_left_to_the_checked_path(recorder):
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)  # its span holds q.shape[0] + 1: only the bound on total_tokens
    for what, args in _variants(q, k, v, cu, max_seqlen):
        assert attention.fast_call(*args) is None, what
    assert calls == []


def test_a_grid_beyond_cuda_s_limit_is_left_to_the_checked_path(recorder):
    calls, ready = recorder
    big = 2**36  # tokens and heads of stride 0: (2**36 / 64) * 2**20 programs
    q = torch.empty(1, 1, 64, dtype=torch.float16).expand(big, 2**20, 64)
    cu = torch.zeros(2, dtype=torch.int32)  # (its values are never read)
    ready(q, big)
    assert attention.fast_call(q, q, q, cu, big, None, q) is None and calls == []


def test_the_checked_path_refuses_what_the_kernel_would_misread():
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 2, 16)
    strided = torch.stack([cu, cu], 1)[:, 0]
    with pytest.raises(ValueError, match="cu_seqlens must be contiguous"):
        ragged.varlen_attention(q, k, v, strided, max_seqlen, validate=False)
    with pytest.raises(ValueError, match="negative views"):
        ragged.varlen_attention(torch._neg_view(q), k, v, cu, max_seqlen, validate=False)
    with pytest.raises(ValueError, match="out must not be a negative view"):
        ragged.varlen_attention(q, k, v, cu, max_seqlen, out=torch._neg_view(q.clone()))
    out = ragged.varlen_attention(q, k, v, strided.contiguous(), max_seqlen, validate=False)
    torch.testing.assert_close(out, ragged.varlen_attention(q, k, v, cu, max_seqlen))


def test_strides_triton_would_specialize_otherwise_take_the_plain_path(recorder):
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 3, 24)  # strides 72 and 24: not 16-divisible
    ready(q, max_seqlen)
    assert attention.fast_call(q, k, v, cu, max_seqlen, None, None) is None and calls == []


def test_hooks_and_another_current_device_take_the_plain_path(recorder, monkeypatch):
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)
    monkeypatch.setattr(launch, "current_device", lambda: -1)
    monkeypatch.setattr(launch, "SINGLE_DEVICE", False)
    assert attention.fast_call(q, k, v, cu, max_seqlen, None, None) is not None  # the current one
    with monkeypatch.context() as m:
        m.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
        assert attention.fast_call(q, k, v, cu, max_seqlen, None, None) is None  # a profiler's hook
    assert len(calls) == 1
    monkeypatch.setattr(launch, "current_device", lambda: 5)
    assert attention.fast_call(q, k, v, cu, max_seqlen, None, None) is None
    assert len(calls) == 1


def test_a_torch_function_mode_sees_the_allocation(recorder):
    _, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)
    seen = []

    class Record(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Record():
        out = ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
    assert torch.empty_like in seen and out.shape == q.shape  # (C++: by the checked path)


def test_a_dispatch_mode_sees_the_allocation_and_its_errors_are_raised(recorder):
    _, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)

    class Refuse(TorchDispatchMode):  # raised inside at::empty_like, it aborted the process
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.empty_like.default:
                raise MemoryError("no allocation under this mode")
            return func(*args, **(kwargs or {}))

    with Refuse(), pytest.raises(MemoryError, match="no allocation"):
        ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)


def test_rejected_calls_still_get_the_checked_path_s_errors(recorder):
    _, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)
    with pytest.raises(TypeError, match="one dtype"):
        ragged.varlen_attention(q, k.float(), v, cu, max_seqlen, validate=False)
    with pytest.raises(ValueError, match="more than total_tokens"):
        ragged.varlen_attention(q, k, v, cu, q.shape[0] + 1, validate=False)
    with pytest.raises(TypeError, match="max_seqlen must be a Python int"):
        ragged.varlen_attention(q, k, v, cu, True, validate=False)


def test_only_a_directly_launched_plan_is_remembered(no_ready):
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 2, 16)
    ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
    assert attention.ready_spans == {}  # the interpreter launches nothing directly
    attention.forget_plans()
    assert attention._plans == {}


# --- LayoutAttention: the launch kept for later calls of one qkv layout -------------------------


def _qkv(heads=12, head_dim=64, seed=0):
    """Packed qkv [T, 3, H, d] as a qkv projection makes it, and its cu_seqlens, max_seqlen."""
    q, _, _, cu, max_seqlen = packed_qkv(LENGTHS, heads, head_dim)
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(q.shape[0], 3 * heads * head_dim, generator=g).half()
    return qkv.unflatten(1, (3, heads, head_dim)), cu, max_seqlen


def _count_checked(monkeypatch) -> list:
    """A list that grows by one at every LayoutAttention call taking the checked path."""
    checked = []
    real = ragged.LayoutAttention._checked
    monkeypatch.setattr(ragged.LayoutAttention, "_checked",
                        lambda self, t: checked.append(1) or real(self, t))  # fmt: skip
    return checked


def test_layout_attention_matches_varlen_attention_on_every_backend():
    qkv, cu, max_seqlen = _qkv(heads=2, head_dim=16)
    for backend in ("triton", "padded_sdpa", "reference"):
        call = ragged.LayoutAttention(cu, max_seqlen, backend=backend, softmax_scale=0.2)
        want = ragged.varlen_attention(*qkv.unbind(1), cu, max_seqlen, backend=backend,
                                       softmax_scale=0.2)  # fmt: skip
        for _ in range(2):
            torch.testing.assert_close(call(qkv), want)


def test_layout_attention_launches_what_the_checked_path_launches(recorder):
    calls, ready = recorder
    qkv, cu, max_seqlen = _qkv()
    q, k, v = qkv.unbind(1)
    ready(q, max_seqlen)
    call = ragged.LayoutAttention(cu, max_seqlen)
    out = call(qkv)  # checked: through varlen_attention (whose own fast path records it)
    assert len(calls) == 1
    for _ in range(2):
        assert call(qkv) is out  # one output, written again by every call
    assert calls[1:] == [_expected(q, k, v, out, cu, max_seqlen, 0.125)] * 2
    other, _, _ = _qkv(seed=1)  # new data, same layout: new pointers, same launch
    call(other)
    assert calls[-1] == _expected(*other.unbind(1), out, cu, max_seqlen, 0.125)


def test_layout_attention_checks_again_whatever_changed(recorder, monkeypatch):
    _, ready = recorder
    qkv, cu, max_seqlen = _qkv()
    ready(qkv[:, 0], max_seqlen)
    call = ragged.LayoutAttention(cu, max_seqlen)
    call(qkv)
    checked = _count_checked(monkeypatch)

    def taken(t) -> bool:
        """Whether ``call(t)`` went through the checked call."""
        before = len(checked)
        call(t)
        return len(checked) > before

    assert not taken(qkv)
    assert taken(qkv.float())  # dtype
    assert taken(qkv) and not taken(qkv)  # the fp16 layout is checked and kept again
    assert taken(torch.cat([qkv, qkv], 2)[:, :, :12])  # strides
    assert taken(qkv) and not taken(qkv)
    attention.forget_plans()  # a sweep re-plans: kept launches go at the next rebind
    ready(qkv[:, 0], max_seqlen)
    call.rebind(cu, max_seqlen)
    assert taken(qkv) and not taken(qkv)
    with monkeypatch.context() as m:  # a profiler's hook must see every launch
        m.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
        assert taken(qkv) and taken(qkv)
    assert not taken(qkv)
    replaced = dataclasses.replace(api.BACKENDS["triton"], run=lambda *a: a[-1])
    monkeypatch.setitem(api.BACKENDS, "triton", replaced)
    call.rebind(cu, max_seqlen)
    assert taken(qkv) and taken(qkv)  # a replaced backend: every call after the rebind
    with pytest.raises(ValueError, match=r"qkv must be \[total_tokens, 3"):
        call(qkv[:, :2])


def test_rebind_to_a_like_layout_keeps_the_launch_with_the_new_cu_seqlens(recorder):
    calls, ready = recorder
    qkv, cu, max_seqlen = _qkv()
    q, k, v = qkv.unbind(1)
    ready(q, max_seqlen)
    call = ragged.LayoutAttention(cu, max_seqlen)
    out = call(qkv)
    kept = call.kept
    new_cu = cu.clone()
    call.rebind(new_cu, max_seqlen)
    call(qkv)
    assert call.kept is kept
    assert calls[-1] == _expected(q, k, v, out, new_cu, max_seqlen, 0.125)


def test_a_new_max_seqlen_of_a_launched_span_launches_at_once(recorder):
    """Data-dependent pruning brings a new longest image (a new max_seqlen) every forward:
    within the span of a launched one it takes the fast path, over its own grid."""
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen)
    for new_max in (max_seqlen + 1, 17, q.shape[0]):
        out = attention.fast_call(q, k, v, cu, new_max, None, None)
        assert out is not None
        assert calls[-1] == _expected(q, k, v, out, cu, new_max, 0.125)
    for other in (16, 0, q.shape[0] + 1, -1):  # another span; more than the rows; negative
        assert attention.fast_call(q, k, v, cu, other, None, None) is None
    assert len(calls) == 3


def test_every_max_seqlen_of_a_span_shares_one_plan():
    """One Plan, so one Launcher entry and one compiled kernel, for a span's max_seqlens."""
    plan = attention._make_plan(-1, torch.float16, 64, 40, 12, None)
    assert attention._make_plan(-1, torch.float16, 64, 197, 768, None) is plan
    assert attention._make_plan(-1, torch.float16, 64, 16, 12, None) is not plan  # the short class
    lo, hi = length_span(40)
    assert lo <= 40 <= hi and length_span(lo) == length_span(hi) == (lo, hi)
    assert length_span(lo - 1) != (lo, hi)


def test_layout_attention_takes_a_new_max_seqlen_of_its_span_unchecked(recorder, monkeypatch):
    calls, ready = recorder
    qkv, cu, max_seqlen = _qkv()
    q, k, v = qkv.unbind(1)
    ready(q, max_seqlen)
    call = ragged.LayoutAttention(cu, max_seqlen)
    out = call(qkv)
    kept = call.kept
    checked = _count_checked(monkeypatch)
    for new_max in (max_seqlen + 30, 17, max_seqlen):
        call.rebind(cu, new_max)
        assert call(qkv) is out
        assert calls[-1] == _expected(q, k, v, out, cu, new_max, 0.125)
    assert checked == [] and call.kept is kept
    call.rebind(cu, qkv.shape[0] + 1)  # more than the rows: the checked call says so
    with pytest.raises(ValueError, match="more than total_tokens"):
        call(qkv)
    assert checked == [1]


def test_a_call_of_another_layout_is_checked_and_kept_again(recorder, monkeypatch):
    calls, ready = recorder
    qkv, cu, max_seqlen = _qkv()
    q, k, v = qkv.unbind(1)
    ready(q, max_seqlen)
    ready(q, 16)
    call = ragged.LayoutAttention(cu, max_seqlen)
    out = call(qkv)
    checked = _count_checked(monkeypatch)
    strided = torch.stack([cu, cu], 1)[:, 0]  # cu's values and length, stride 2
    for new_cu, new_max in [(strided, max_seqlen),  # the kept length, not contiguous
                            (cu, 16),  # another span: another compiled kernel
                            (cu[:-1], max_seqlen)]:  # another batch  # fmt: skip
        call.rebind(new_cu, new_max)
        if new_cu is strided:
            with pytest.raises(ValueError, match="cu_seqlens must be contiguous"):
                call(qkv)
            assert checked == [1]
            continue
        call(qkv)  # checked: the kept launch is not of this layout
        assert calls[-1] == _expected(q, k, v, out, new_cu, new_max, 0.125)
        n = len(checked)
        call(qkv)  # kept again for it
        assert len(checked) == n and calls[-1] == calls[-2]
    call.rebind(cu.long(), max_seqlen)
    with pytest.raises(TypeError, match="cu_seqlens must be int32"):
        call(qkv)
    call.rebind(cu, max_seqlen)
    call(qkv)
    assert calls[-1] == _expected(q, k, v, out, cu, max_seqlen, 0.125)


def test_without_a_compiler_the_python_paths_stay_and_it_says_so(monkeypatch, tmp_path):
    from ragged.kernels import fastpath

    monkeypatch.setenv("RAGGED_BUILD_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.warns(RuntimeWarning, match="no C.. compiler .*Python fast paths run"):
        assert fastpath._built.__wrapped__() is None
    monkeypatch.setenv("RAGGED_FASTPATH", "0")
    assert fastpath._built.__wrapped__() is None
    assert list(tmp_path.iterdir()) == []  # nothing half-built left behind


def test_a_damaged_build_is_built_again_never_loaded(monkeypatch, tmp_path):
    """A truncated module killed every later process (SIGBUS on load): its stamp no longer
    matches, so it is rebuilt."""
    import shutil

    from ragged.kernels import fastpath

    made = fastpath.target_path()  # the module the cpp tests here built (one compile less)
    monkeypatch.setenv("RAGGED_BUILD_DIR", str(tmp_path))
    target = fastpath.target_path()
    if fastpath.built(made):
        for src in (made, fastpath._stamp(made)):
            shutil.copy2(src, tmp_path / src.name)  # copies: the damage stays here
    else:
        try:
            fastpath.build(target)
        except RuntimeError as exc:
            pytest.skip(f"cannot build here: {exc}")
    assert fastpath.built(target)
    target.write_bytes(target.read_bytes()[:5000])
    assert not fastpath.built(target)
    fastpath._stamp(target).unlink()
    assert not fastpath.built(target)
    assert fastpath._built.__wrapped__() is not None and fastpath.built(target)
    assert target.stat().st_mode & 0o755 == 0o755  # built here: readable by every user
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_cpp_reads_the_image_and_checks_a_launch_kept_without_one(recorder, impl, monkeypatch):
    calls, ready = recorder
    qkv, cu, max_seqlen = _qkv()
    q, k, v = qkv.unbind(1)
    ready(q, max_seqlen)
    call = ragged.LayoutAttention(cu, max_seqlen)
    out = call(qkv)
    assert (call.kept.image is None) == (attention.fastpath.module() is None)
    checked = _count_checked(monkeypatch)
    call.kept = call.kept._replace(image=None)  # as kept without the C++ path
    call(qkv)
    call(qkv)
    # C++: checked once and kept again with an image; Python reads the fields, never the image
    assert checked == ([1] if impl == "cpp" else [])
    assert calls[-1] == calls[-2] == _expected(q, k, v, out, cu, max_seqlen, 0.125)
    if impl == "cpp":
        assert call.kept.image is not None
        call.kept = call.kept._replace(image=b"not an image")
        with pytest.raises(TypeError, match="image is not this module's"):
            call(qkv)
        with pytest.raises(TypeError, match="image takes a KeptLaunch"):
            attention.fastpath.module().image((1, 2))


# --- the one-tile kernel's classes: a 3-D grid, a choice by batch as well as length ------------

ONETILE = AttentionConfig(16, 128, 4, 1, kind="onetile", pdl=1)


def test_a_one_tile_class_launches_its_3d_grid_and_only_its_batches(recorder):
    """A span of the one-tile kernel (config.short_batch on sm_90) launches its grid (query
    tiles, heads, sequences) with (total_tokens, guess_len) for its last two ints, as the
    checked path would (guess_len 0: the batch is not uniform), and only for the batch x heads
    of its class; a uniform batch gets its length as the guess."""
    calls, ready = recorder
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64)
    ready(q, max_seqlen, ONETILE, pairs=(48, 48))  # 4 sequences x 12 heads
    out = attention.fast_call(q, k, v, cu, max_seqlen, None, None)
    assert out is not None
    want = _expected(q, k, v, out, cu, max_seqlen, 0.125, ONETILE)
    assert want[:3] == (7, 12, 4) and want[-2:] == (q.shape[0], 0)
    assert calls == [want]
    out = attention.fast_call(q, k, v, cu, 70, None, None)  # another length of the span
    assert out is not None and calls[-1] == _expected(q, k, v, out, cu, 70, 0.125, ONETILE)
    assert (
        attention.fast_call(q, k, v, cu[:-1], max_seqlen, None, None) is None
    )  # 36 pairs: not its
    q, k, v, cu, max_seqlen = packed_qkv([70] * 4, 12, 64)  # uniform: guess_len 70
    out = attention.fast_call(q, k, v, cu, max_seqlen, None, None)
    assert out is not None and calls[-1][-2:] == (280, 70)
    assert calls[-1] == _expected(q, k, v, out, cu, max_seqlen, 0.125, ONETILE)


def test_layout_attention_keeps_a_3d_grid_launch(recorder, monkeypatch):
    calls, ready = recorder
    qkv, cu, max_seqlen = _qkv()
    q, k, v = qkv.unbind(1)
    ready(q, max_seqlen, ONETILE, pairs=(48, 48))
    call = ragged.LayoutAttention(cu, max_seqlen)
    out = call(qkv)
    assert call.kept.grid3
    checked = _count_checked(monkeypatch)
    for new_max in (max_seqlen, 70, max_seqlen):
        call.rebind(cu, new_max)
        assert call(qkv) is out
        assert calls[-1] == _expected(q, k, v, out, cu, new_max, 0.125, ONETILE)
    assert checked == []


@pytest.mark.parametrize("capability", [(8, 9), (9, 0), (10, 0)])
def test_the_short_batch_classes_hold_over_their_spans(capability):
    """Every (max_seqlen, pairs) inside the spans ``choice`` returns gets the same kernel
    (a span is one compiled kernel the fast paths launch without planning), the one-tile
    kernel and PDL only from sm_90 (no grid dependency control before), the 3-stage loop with
    the leaner softmax past the classes' grids and lengths on sm_90 (fp16, bf16, head_dim
    33-64), the table elsewhere and on the CPU."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for head_dim in (32, 64, 128):
            for max_seqlen in (1, 16, 17, 40, 64, 65, 99, 128, 197, 256, 257, 289, 512, 513, 577):
                for pairs in (1, 12, 24, 33, 36, 48, 49, 50, 96, 132, 144, 384, 396, 768, 3072):
                    cfg, (lo, hi), (plo, phi) = choice(head_dim, max_seqlen, pairs, dtype,
                                                       capability)  # fmt: skip
                    assert lo <= max_seqlen <= hi and plo <= pairs <= phi
                    for m in {lo, hi if hi < MAX_LENGTH else lo, max_seqlen}:
                        for n in {plo or 1, min(phi, 10**6), pairs}:
                            assert choice(head_dim, m, n, dtype, capability)[0] == cfg
                    if capability < (9, 0) or dtype is torch.float32 or head_dim != 64:
                        assert cfg is None
    assert choice(64, 40, 12, torch.float16, (9, 0))[0] == AttentionConfig(
        16, 64, 4, 1, kind="onetile", pdl=1)  # BS 1 / 80%  # fmt: skip
    # the loop on the 3-D grid, PDL once every program has issued its q load (pdl 3), up to 2
    # waves of 64-row query tiles: BS 8 / 50% (96 pairs), 4 / 50% and 11 x 99 at 65-128 keys up
    # to 132 pairs, BS 8 / 80%, 16 / 80% and 22 x 40 at 17-64 keys up to 264
    grid3 = AttentionConfig(64, 64, 4, 2, pdl=3, grid3=True, early=True)
    for pairs in (17, 48, 96, 99, 132):
        assert choice(64, 99, pairs, torch.float16, (9, 0)) == (grid3, (65, 128), (17, 132))
    for pairs in (67, 96, 192, 198, 264):
        assert choice(64, 40, pairs, torch.float16, (9, 0)) == (grid3, (33, 64), (67, 264))
        assert choice(64, 20, pairs, torch.float16, (9, 0)) == (grid3, (17, 32), (67, 264))
    # then the same at most 3 programs an SM: at 65-128 keys up to three waves (12 / 50%: 144
    # pairs, 16 x 99), at 17-64 keys up to 336 programs (24 / 80%: 288 pairs)
    capped = AttentionConfig(64, 64, 4, 2, pdl=3, grid3=True, early=True, ctas=3)
    for pairs in (133, 144, 192, 198):
        assert choice(64, 128, pairs, torch.float16, (9, 0)) == (capped, (65, 128), (133, 198))
    for pairs in (265, 288, 336):
        assert choice(64, 40, pairs, torch.float16, (9, 0)) == (capped, (33, 64), (265, 336))
        assert choice(64, 20, pairs, torch.float16, (9, 0)) == (capped, (17, 32), (265, 336))
    # 33-64 keys after the one-tile class up to half a wave: specloop, PDL at once (4 / 80%)
    specloop = AttentionConfig(64, 64, 4, 2, kind="specloop", pdl=1)
    for pairs in (34, 48, 66):
        assert choice(64, 40, pairs, torch.float16, (9, 0))[0] == specloop
    # then at 17-64 keys the loop on the 1-D grid up to three waves, PDL after the q load (32 /
    # 80%: 384)
    for max_seqlen, pairs in ((40, 337), (20, 337), (40, 384), (33, 396)):
        assert choice(64, max_seqlen, pairs, torch.float16, (9, 0)) == (
            AttentionConfig(64, 64, 4, 2, pdl=3), pow2_span(max_seqlen), (337, 396))  # fmt: skip
    # past three waves: the loop with 3 stages and the leaner softmax on the 3-D grid, PDL
    # after the q load (sm_90, fp16 and bf16, d 64), while heads and batch fit the grid's y
    # and z (at most 65,535 pairs); past that on the 1-D grid, PDL after the store
    for max_seqlen, pairs in ((40, 397), (99, 199)):
        assert choice(64, max_seqlen, pairs, torch.float16, (9, 0))[0] == LARGE_GRID3
    assert AttentionConfig(64, 64, 4, 3, pdl=3, grid3=True, lean=True) == LARGE_GRID3
    assert AttentionConfig(64, 64, 4, 3, pdl=2, lean=True) == LARGE_LOOP
    assert choice(64, 99, 65535, torch.float16, (9, 0)) == (LARGE_GRID3, (65, 128), (199, 65535))
    assert choice(64, 99, 65536, torch.float16, (9, 0)) == (
        LARGE_LOOP, (65, 128), (65536, MAX_LENGTH))  # fmt: skip
    assert choice(64, 577, 65535, torch.float16, (9, 0)) == (
        LARGE_GRID3, (513, MAX_LENGTH), (0, 65535))  # fmt: skip
    assert choice(64, 577, 10**6, torch.bfloat16, (9, 0))[0] == LARGE_LOOP
    # 129-256 keys: the loop with 3 stages (BS 1 / 0%)
    assert choice(64, 197, 12, torch.float16, (9, 0))[0] == AttentionConfig(64, 64, 4, 3, pdl=2)
    assert choice(64, 197, 768, torch.bfloat16, (9, 0))[0] == LARGE_GRID3  # BS 64
    # 257-512 keys (DeiT-B 384 after the prune point: 289), up to three waves of 8 key tiles
    # (49 pairs): the loop with 3 stages, PDL after the store
    for max_seqlen, pairs in ((289, 12), (289, 48), (257, 1), (512, 49), (450, 24)):
        assert choice(64, max_seqlen, pairs, torch.float16, (9, 0)) == (
            AttentionConfig(64, 64, 4, 3, pdl=2), (257, 512), (1, 49))  # fmt: skip
    for max_seqlen, pairs in ((289, 50), (289, 96), (513, 12), (577, 48)):  # past the classes
        assert choice(64, max_seqlen, pairs, torch.float16, (9, 0))[0] == LARGE_GRID3
    assert choice(64, 40, 12, torch.float16, (0, 0))[0] is None  # the interpreter


def test_after_one_call_no_new_length_or_batch_plans_a_kernel(monkeypatch):
    """``kernel.NewLength``'s promise with the short-batch classes (sm_90 patched in; the
    interpreter runs the kernels): after one call at 40 tokens, calls at fresh lengths in every
    length bucket and at other batches take plans made at that first call, none new (a plan
    is a compiled kernel on the GPU: ``warm_classes`` compiled them all then)."""
    monkeypatch.setattr(attention, "capability_of", lambda device_index: (9, 0))
    attention.forget_plans()
    try:
        q, k, v, cu, max_seqlen = packed_qkv([40], 12, 64, seed=5)
        out = ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)
        assert_attention_close(out, q, k, v, cu)
        made = set(attention._plan_of.values())
        configs = set()
        for lengths in ([20], [50], [100], [200], [300], [10], [99] * 8, [20] * 6, [150] * 16,
                        [60] * 64, [40] * 4, [40] * 24, [40] * 32):  # fmt: skip
            q2, k2, v2, cu2, m2 = packed_qkv(lengths, 12, 64)
            plan = attention.launch_args(q2, k2, v2, torch.empty_like(q2), cu2, m2, 0.125)[0]
            assert plan in made, (lengths, plan.config)
            configs.add(plan.config)
        assert set(attention._plan_of.values()) == made
        assert {c.kind for c in configs} == {"onetile", "loop", "specloop"}
        # the 3-D grid loop (8 x 99, 6 x 20), the same at most 3 an SM (24 x 40) and the loop
        # past the classes' grids (64 x 60); the 1-D loop (32 x 40)
        assert {c for c in configs if c.grid3 or c.lean} == {
            AttentionConfig(64, 64, 4, 2, pdl=3, grid3=True, early=True),
            AttentionConfig(64, 64, 4, 2, pdl=3, grid3=True, early=True, ctas=3),
            LARGE_GRID3,
        }
        assert AttentionConfig(64, 64, 4, 2, pdl=3) in configs
        assert len(configs) == 10
    finally:
        attention.forget_plans()


def test_the_carveout_holds_the_programs_asked_and_no_more():
    """``launch.carveout_percent``: sm_90's smallest carveout that holds ``ctas`` programs
    (each with the driver's 1 KB), in percent of 228 KB, rounded down (the driver takes the
    smallest carveout at or above the percent); refused where none holds them or where it
    would hold one more (a cap it cannot make)."""
    # the 17-128 key loop's 40 KB (sm_90, measured: 43% held 2, 57% 3, 44% 3, 71% 4)
    assert launch.carveout_percent(40 * 1024, 2, 228) == 43  # 2 x 41 KB -> 100 KB
    assert launch.carveout_percent(40 * 1024, 3, 228) == 57  # 3 x 41 KB -> 132 KB
    assert launch.carveout_percent(56 * 1024, 3, 228) == 85  # 3 x 57 KB -> 196 KB
    for shared, ctas in ((56 * 1024, 5), (56 * 1024, 0), (1024, 2), (200 * 1024, 2)):
        with pytest.raises(ValueError, match="no carveout"):
            launch.carveout_percent(shared, ctas, 228)
    for ctas in (1, 2, 3, 4):
        for shared in range(0, 228 * 1024, 512):  # the carveout the driver takes for the percent
            program = shared + 1024
            smallest = next((c for c in launch.CARVEOUTS_KB if ctas * program <= c * 1024), None)
            try:
                percent = launch.carveout_percent(shared, ctas, 228)
            except ValueError:  # none holds them, or the smallest that does holds one more
                assert smallest is None or smallest * 1024 >= (ctas + 1) * program
                continue
            taken = next(c for c in launch.CARVEOUTS_KB if c * 100 >= percent * 228)
            assert taken == smallest and ctas * program <= taken * 1024 < (ctas + 1) * program


class _Compiled:
    """A compiled kernel as ``launch.occupy`` reads it: its function and shared memory."""

    def __init__(self, shared: int) -> None:
        self.function, self.run = 7, None
        self.metadata = dataclasses.make_dataclass("Metadata", ["shared"])(shared)


def test_occupy_caps_a_kernel_it_can_once_and_runs_the_others_uncapped(monkeypatch):
    """``launch.occupy`` sets the carveout once a compiled kernel; a compilation whose shared
    memory no carveout caps at that count (the 17-128 key loop with a stride not a multiple
    of 16: 24 KB) runs uncapped without a word; a refusal, or no libcuda, warns and runs."""
    calls = []
    monkeypatch.setattr(launch, "set_carveout", lambda f, p: calls.append((f, p)) or 0)
    aligned = _Compiled(40960)
    launch.occupy(aligned, 3, total_kb=228)
    launch.occupy(aligned, 3, total_kb=228)
    assert calls == [(7, 57)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        launch.occupy(_Compiled(24576), 3, total_kb=228)
    assert calls == [(7, 57)]
    monkeypatch.setattr(launch, "set_carveout", lambda f, p: 1)  # CUDA_ERROR_INVALID_VALUE
    with pytest.warns(RuntimeWarning, match="carveout of 57% was refused"):
        launch.occupy(_Compiled(40960), 3, total_kb=228)

    def no_driver(f, p):
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(launch, "set_carveout", no_driver)
    with pytest.warns(RuntimeWarning, match="libcuda"):
        launch.occupy(_Compiled(40960), 3, total_kb=228)
