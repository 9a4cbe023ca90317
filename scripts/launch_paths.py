"""Every way to launch the attention kernel on one set of inputs, from the public call down
to the bare launch, and the pieces of the checked call: for breakdowns of its host cost
(``scripts/kernel_bench.py --launch-paths``, docs/kernel.md). The kernel's own module owns
what they reach into; nothing here is used on a hot path."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton

from ragged import attention
from ragged.kernels import attention as kernel_attention
from ragged.kernels import c_launch, launch
from ragged.layout_attention import LayoutAttention


def launch_paths(q, k, v, cu_seqlens, max_seqlen: int, out) -> dict[str, Callable[[], object]]:
    """Zero-argument callables, each launching the triton kernel on ``q, k, v, cu_seqlens``
    (``varlen_attention``'s inputs on a CUDA device) into ``out`` or a new output, by name;
    names starting with two spaces are pieces of a call, not whole launches. Warms up and
    captures one CUDA graph (its replay is a path)."""
    scale = q.shape[-1] ** -0.5
    plan, grid, scalars, _ = kernel_attention.launch_args(
        q, k, v, out, cu_seqlens, max_seqlen, scale
    )
    tensors = (q, k, v, out, cu_seqlens)
    ptrs = tuple(t.data_ptr() for t in tensors)
    cfg = plan.config
    kernel = plan.launcher.fn  # the loop kernel, or the one-tile kernel of a short-batch class
    pdl = {"launch_pdl": True} if plan.pdl else {}  # a programmatic dependent launch
    compiled = kernel[grid](*tensors, *scalars, **plan.constexprs, num_warps=cfg.num_warps,
                            num_stages=cfg.num_stages, **pdl)  # fmt: skip
    tail = tuple(plan.constexprs.values())
    run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    c_direct = c_launch.direct(compiled)

    def plain():
        kernel[grid](*tensors, *scalars, **plan.constexprs, num_warps=cfg.num_warps,
                     num_stages=cfg.num_stages, **pdl)  # fmt: skip

    def compiled_getitem():
        compiled[grid](*tensors, *scalars, *tail)

    def compiled_run():
        run(*grid, stream, function, meta, None, None, None, *tensors, *scalars, *tail)

    def compiled_run_ptrs():
        run(*grid, stream, function, meta, None, None, None, *ptrs, *scalars, *tail)

    def triton_c_entry():  # Triton 3.6's C entry point, skipping CudaLauncher.__call__
        run.launch(*grid, stream, function, run.launch_cooperative_grid, run.launch_pdl,
                   None, None, meta, None, None, None, *ptrs, *scalars, *tail)  # fmt: skip

    def ragged_c_launch():
        c_direct(*grid, stream, *ptrs, *scalars)

    def launcher():
        plan.launcher.launch(plan, grid, tensors, scalars, plan.constexprs, cfg.num_warps,
                             cfg.num_stages, 0, pdl=bool(plan.pdl))  # fmt: skip

    def api_novalidate():
        attention.varlen_attention(q, k, v, cu_seqlens, max_seqlen, validate=False)

    def api_out():
        attention.varlen_attention(q, k, v, cu_seqlens, max_seqlen, validate=False, out=out)

    def api_checked():  # what varlen_attention(validate=False) ran before launch_ready
        attention.check_types(q, k, v, cu_seqlens, max_seqlen, None)
        attention.check_available(attention.BACKENDS["triton"], q, q.shape[2])
        kernel_attention.varlen_attention_triton(
            q, k, v, cu_seqlens, max_seqlen, scale, torch.empty_like(q)
        )

    qkv = torch.stack((q, k, v), dim=1)  # [T, 3, H, d], as the qkv projection lays it out
    layout_call = LayoutAttention(cu_seqlens, max_seqlen)
    layout_call(qkv)  # checked once: the launch is kept

    def api_validate():
        attention.varlen_attention(q, k, v, cu_seqlens, max_seqlen)

    graph = torch.cuda.CUDAGraph()
    api_novalidate()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        api_novalidate()

    return {
        "triton kernel[grid](...)": plain,
        "triton compiled[grid](...)": compiled_getitem,
        "triton compiled.run(...) direct": compiled_run,
        "triton compiled.run(...) direct, int pointers": compiled_run_ptrs,
        **(
            {"triton C launcher direct (3.6 layout), int pointers": triton_c_entry}
            if triton.__version__.startswith("3.6")
            else {}
        ),
        **(
            {"ragged C launcher (kernels/c_launch.py), int pointers": ragged_c_launch}
            if c_direct is not None
            else {}
        ),
        "ragged Launcher.launch": launcher,
        "ragged.varlen_attention(validate=False)": api_novalidate,
        "ragged.varlen_attention(validate=False, out=)": api_out,
        "  its checked path (the call before launch_ready)": api_checked,
        "  its Python fast path (launch_ready; the C++ one is the call's)": lambda: (
            kernel_attention.launch_ready(q, k, v, cu_seqlens, max_seqlen, None, None)
        ),
        "ragged.LayoutAttention call, packed qkv (launch kept)": lambda: layout_call(qkv),
        "  its Python kept launch (kept_launch)": lambda: kernel_attention.kept_launch(
            layout_call, qkv
        ),
        "ragged.varlen_attention(validate=True)": api_validate,
        "CUDA graph replay of one call": graph.replay,
        "  piece: check_types": lambda: attention.check_types(
            q, k, v, cu_seqlens, max_seqlen, None
        ),
        "  piece: torch.empty_like(q)": lambda: torch.empty_like(q),
        "  piece: torch.empty(shape, dtype, device)": lambda: torch.empty(
            q.shape, dtype=q.dtype, device=q.device
        ),
        "  piece: launch_args": lambda: kernel_attention.launch_args(
            q, k, v, out, cu_seqlens, max_seqlen, scale
        ),
        "  piece: 5x data_ptr()": lambda: [t.data_ptr() for t in tensors],
        "  piece: hooks_active + current_device": lambda: (
            launch.hooks_active(),
            torch.cuda.current_device(),
        ),
    }
