"""varlen_attention against the float64 oracle, on every backend this machine runs."""

import pytest
import torch

import ragged
from ragged.testing import assert_attention_close, cu_seqlens_from_lengths, packed_qkv

RAGGED = [0, 1, 17, 197, 0, 577, 3, 64]  # empty, single, odd, ViT-224, ViT-384, tile-exact
SMALL = [1, 0, 33, 197, 5]


def _backends(dtype):
    """Backends that run here for this dtype."""
    out = []
    for name in ragged.available_backends():
        if ragged.BACKENDS[name].unavailable(None, dtype, 64) is None:
            out.append(name)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_every_available_backend_matches_oracle(dtype, device):
    q, k, v, cu, max_seqlen = packed_qkv(RAGGED, 2, 64, dtype=dtype, device=device)
    for backend in _backends(dtype):
        if backend == "nested_sdpa":
            continue  # zero-length sequences: covered separately on GPU
        out = ragged.varlen_attention(q, k, v, cu, max_seqlen, backend=backend)
        assert_attention_close(out, q, k, v, cu)


@pytest.mark.parametrize("head_dim", [16, 32, 80, 128, 200, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_triton_head_dims(head_dim, dtype, device):
    q, k, v, cu, max_seqlen = packed_qkv(SMALL, 2, head_dim, dtype=dtype, device=device, seed=3)
    out = ragged.varlen_attention(q, k, v, cu, max_seqlen)
    assert_attention_close(out, q, k, v, cu)


def test_strided_views_need_no_copy(device):
    """Heads-major storage [H, T, D] viewed as [T, H, D], and k/v from one packed qkv."""
    lengths = [5, 0, 40, 1]
    cu = cu_seqlens_from_lengths(lengths, device)
    total = sum(lengths)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, total, 64, generator=g).half().to(device).transpose(0, 1)
    kv = torch.randn(total, 2, 2, 64, generator=g).half().to(device)
    k, v = kv[:, 0], kv[:, 1]
    assert not q.is_contiguous() and not k.is_contiguous()
    out = ragged.varlen_attention(q, k, v, cu, 40)
    assert_attention_close(out, q, k, v, cu)


def test_out_argument_and_scale(device):
    q, k, v, cu, max_seqlen = packed_qkv([3, 9, 0, 30], 3, 32, dtype=torch.float32, device=device)
    # A strided out: every other row of a larger buffer.
    buf = torch.full((2 * q.shape[0], 3, 32), float("nan"), device=device)
    out = buf[::2]
    ret = ragged.varlen_attention(q, k, v, cu, max_seqlen, out=out, softmax_scale=0.3)
    assert ret.data_ptr() == out.data_ptr()
    assert_attention_close(out, q, k, v, cu, softmax_scale=0.3)
    assert torch.isnan(buf[1::2]).all(), "wrote outside out's rows"


def test_max_seqlen_larger_than_needed(device):
    q, k, v, cu, _ = packed_qkv([7, 2], 2, 64, device=device)
    out = ragged.varlen_attention(q, k, v, cu, 9)  # any bound up to total_tokens
    assert_attention_close(out, q, k, v, cu)


def test_empty_batches(device):
    q, k, v, cu, _ = packed_qkv([0, 0], 2, 64, device=device)
    assert ragged.varlen_attention(q, k, v, cu, 0).shape == (0, 2, 64)
    one = torch.zeros(1, dtype=torch.int32, device=device)  # batch of zero sequences
    assert ragged.varlen_attention(q, k, v, one, 0).shape == (0, 2, 64)


def test_validate_false_skips_value_checks_only(device):
    q, k, v, cu, max_seqlen = packed_qkv([4, 4], 2, 64, device=device)
    bad = torch.tensor([0, 4, 9], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="end at total_tokens"):
        ragged.varlen_attention(q, k, v, bad, max_seqlen)
    with pytest.raises(TypeError, match="int32"):  # type checks stay on
        ragged.varlen_attention(q, k, v, cu.long(), max_seqlen, validate=False)


def test_available_backends_and_implementations():
    names = ragged.available_backends()
    assert "reference" in names and "padded_sdpa" in names
    for name in ragged.BACKENDS:
        assert ragged.backend_implementation(name)
    if not torch.cuda.is_available():
        assert set(names) == {"triton", "padded_sdpa", "reference"}
        assert "interpreter" in ragged.backend_implementation("triton")


@pytest.mark.parametrize("backend", ["fa2", "torch_varlen", "nested_sdpa"])
def test_unavailable_backend_says_why(backend):
    if torch.cuda.is_available():
        pytest.skip("runs everywhere on a GPU machine")
    q, k, v, cu, max_seqlen = packed_qkv([3], 2, 64)
    with pytest.raises(ragged.BackendUnavailableError, match="CUDA"):
        ragged.varlen_attention(q, k, v, cu, max_seqlen, backend=backend)


def test_fa2_refuses_float32_with_reason(device):
    q, k, v, cu, max_seqlen = packed_qkv([3], 2, 64, dtype=torch.float32, device=device)
    with pytest.raises(ragged.BackendUnavailableError, match=r"float16 and bfloat16|CUDA"):
        ragged.varlen_attention(q, k, v, cu, max_seqlen, backend="fa2")


def test_interpreter_refuses_bfloat16_with_reason():
    if torch.cuda.is_available():
        pytest.skip("bf16 runs on the GPU")
    q, k, v, cu, max_seqlen = packed_qkv([3], 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ragged.BackendUnavailableError, match="bfloat16"):
        ragged.varlen_attention(q, k, v, cu, max_seqlen)


# Lengths of the short-batch workloads: empty, one token, odd, the 80% / 50% pruned DeiT
# lengths (40, 99), ViT-224 (197) and a mixed batch.
VARIANT_LENGTHS = [0, 1, 7, 40, 99, 197, 0, 3, 64, 33]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_every_kernel_variant_matches_oracle(dtype, device):
    """Each launch candidate of kernels.variants (measured by experiments.kernel_floor) within
    the error budget: a ragged batch, one 40-token sequence (one query tile), a uniform batch
    (the speculative start right) and a short ragged one (wrong, also in fp32)."""
    import dataclasses

    from ragged.kernels import variants

    # A PDL variant computes what its twin without PDL computes, and so do variants that differ
    # in warps or stages (the launch differs, and the interpreter runs none of these): each
    # distinct computation once, on the CPU (one warp stays apart: ``applies`` reads it).
    distinct = {}
    for variant in variants.VARIANTS:
        key = variant
        if device == "cpu":
            warps = 1 if variant.num_warps == 1 else 4
            key = dataclasses.replace(variant, name="", pdl=0, num_warps=warps, num_stages=2)
        distinct.setdefault(key, variant)
    cases = [VARIANT_LENGTHS, [40], [99] * 2, [40, 7, 33]]  # the last: a wrong start guess
    for lengths in cases:
        q, k, v, cu, max_seqlen = packed_qkv(lengths, 2, 64, dtype=dtype, device=device, seed=5)
        for variant in distinct.values():
            if not variant.applies(max_seqlen, dtype):  # fp32 one-tile: [40] only
                continue
            out = torch.full_like(q, float("nan"))
            variants.run(variant, q, k, v, cu, max_seqlen, 64**-0.5, out)
            assert_attention_close(out, q, k, v, cu)


@pytest.mark.parametrize("kind", ["onetile", "loop", "specloop", "grid3", "lean", "large",
                                  "large 1-D"])  # fmt: skip
def test_the_short_batch_kernels_of_the_default_path_match_oracle(kind, device):
    """The short-batch classes' kernels as the default path launches them (config.choice on sm_90:
    the one-tile kernel with its speculative start on the 3-D grid, PDL at once; the loop with PDL
    after the q load, on the 1-D grid and on the 3-D grid (17-128 keys up to 2 waves of query
    tiles; its bounds read before the wait too, checked after); specloop, its loads from the guessed
    start of a uniform batch, PDL at once; past the classes' grids and lengths the loop with 3
    stages and the leaner softmax, on the 3-D grid with PDL after the q load and on the 1-D grid
    with PDL after the store; the ninth session's table's tile with the leaner softmax), checked
    path: uniform batches (the guess right), a wrong guess, an empty sequence, and a capacity-packed
    batch (rows past cu_seqlens[-1]: total == batch x max_seqlen, yet the guess wrong). The
    interpreter has no grid dependency control: PDL compiles out there (the same arithmetic)."""
    from ragged.kernels import attention as kernel_attention
    from ragged.kernels.config import LARGE_GRID3, LARGE_LOOP, AttentionConfig

    for lengths in ([40], [99, 99], [40, 7, 33], [0, 3, 64], [197], [40, 20, 40, "pad"], [289],
                    [44, 45, 39, 38, "pad"]):  # fmt: skip
        capacity = lengths[-1] == "pad"
        lengths = [n for n in lengths if n != "pad"]
        q, k, v, cu, max_seqlen = packed_qkv(lengths + [20] * capacity, 2, 64, device=device,
                                             seed=7)  # fmt: skip
        if capacity:  # 20 rows past the last sequence (120 == 3 x 40, not uniform; 186)
            cu = cu[:-1]
        block_n = max(16, 1 << (max_seqlen - 1).bit_length())
        config = {
            "onetile": AttentionConfig(16, block_n, 4, 1, kind="onetile", pdl=1),
            "loop": AttentionConfig(64, 64, 4, 2, pdl=3),
            "specloop": AttentionConfig(64, 64, 4, 2, kind="specloop", pdl=1),
            "grid3": AttentionConfig(64, 64, 4, 2, pdl=3, grid3=True, early=True),
            "lean": AttentionConfig(64, 64, 4, 2, lean=True),
            "large": LARGE_GRID3,
            "large 1-D": LARGE_LOOP,
        }[kind]
        if kind == "onetile" and block_n > 128:
            continue
        out = torch.full_like(q, float("nan"))
        kernel_attention.varlen_attention_triton(q, k, v, cu, max_seqlen, 64**-0.5, out, config)
        if capacity:  # the rows past cu_seqlens[-1] are no sequence's: left as they were
            assert out[cu[-1] :].isnan().all()
            out, q, k, v = (t[: cu[-1]] for t in (out, q, k, v))
        assert_attention_close(out, q, k, v, cu)
