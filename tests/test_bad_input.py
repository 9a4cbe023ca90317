"""Bad input gets a TypeError/ValueError that names what was expected."""

import pytest
import torch

import ragged
from ragged.testing import packed_qkv


@pytest.fixture
def qkv(device):
    return packed_qkv([3, 5], 2, 64, device=device)


def _call(q, k, v, cu, max_seqlen, **kw):
    return ragged.varlen_attention(q, k, v, cu, max_seqlen, **kw)


def test_wrong_dtype(qkv):
    q, k, v, cu, m = qkv
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        _call(q.double(), k.double(), v.double(), cu, m)
    with pytest.raises(TypeError, match="share one dtype"):
        _call(q, k.float(), v, cu, m)
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        _call(q.tolist(), k, v, cu, m)


def test_mismatched_shapes(qkv):
    q, k, v, cu, m = qkv
    with pytest.raises(ValueError, match="same shape"):
        _call(q, k[:-1], v, cu, m)
    with pytest.raises(ValueError, match=r"\[total_tokens, heads, head_dim\]"):
        _call(q[None], k[None], v[None], cu, m)


def test_different_devices(qkv):
    q, k, v, cu, m = qkv
    if not torch.cuda.is_available():
        pytest.skip("needs a second device")
    with pytest.raises(ValueError, match="one device"):
        _call(q, k.cpu(), v, cu, m)
    with pytest.raises(ValueError, match="cu_seqlens must be on"):
        _call(q, k, v, cu.cpu(), m)


def test_meta_device_mismatch():
    q, k, v, cu, m = packed_qkv([3, 5], 2, 64)
    with pytest.raises(ValueError, match="one device"):
        _call(q, k.to("meta"), v, cu, m, validate=False)


@pytest.mark.parametrize("head_dim", [8, 15, 257, 512])
def test_head_dim_out_of_range(head_dim, device):
    q, k, v, cu, m = packed_qkv([3], 1, head_dim, device=device)
    with pytest.raises(ValueError, match="head_dim must be between 16 and 256"):
        _call(q, k, v, cu, m)


def test_head_dim_not_unit_stride(qkv):
    q, k, v, cu, m = qkv
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # same values, head_dim stride != 1
    with pytest.raises(ValueError, match="unit stride in head_dim"):
        _call(qt, k, v, cu, m)


@pytest.mark.parametrize(
    ("values", "dtype", "error", "match"),
    [
        ([0, 3, 8], torch.int64, TypeError, "cu_seqlens must be int32"),
        ([1, 3, 8], torch.int32, ValueError, "start at 0"),
        ([0, 5, 3, 8], torch.int32, ValueError, "non-decreasing"),
        ([0, 3, 7], torch.int32, ValueError, "end at total_tokens=8"),
        ([0, 3, 9], torch.int32, ValueError, "end at total_tokens=8"),
    ],
)
def test_bad_cu_seqlens(qkv, device, values, dtype, error, match):
    q, k, v, _, m = qkv
    cu = torch.tensor(values, dtype=dtype, device=device)
    with pytest.raises(error, match=match):
        _call(q, k, v, cu, m)


def test_cu_seqlens_shape(qkv, device):
    q, k, v, cu, m = qkv
    with pytest.raises(ValueError, match=r"1-D \[batch \+ 1\]"):
        _call(q, k, v, cu[None], m)
    with pytest.raises(ValueError, match=r"1-D \[batch \+ 1\]"):
        _call(q, k, v, cu[:0], m)


def test_max_seqlen(qkv):
    q, k, v, cu, _ = qkv
    with pytest.raises(ValueError, match="smaller than the longest sequence, 5"):
        _call(q, k, v, cu, 4)
    with pytest.raises(TypeError, match="Python int"):
        _call(q, k, v, cu, 5.0)
    with pytest.raises(TypeError, match="Python int"):
        _call(q, k, v, cu, torch.tensor(5))
    with pytest.raises(ValueError, match=">= 0"):
        _call(q, k, v, cu, -1)
    total = q.shape[0]
    for validate in (True, False):  # refused without a sync: the grid would grow with it
        with pytest.raises(ValueError, match=f"more than total_tokens={total}"):
            ragged.varlen_attention(q, k, v, cu, 10**9, validate=validate)
        with pytest.raises(ValueError, match="more than total_tokens"):
            ragged.varlen_attention(q, k, v, cu, total + 1, validate=validate)


def test_bad_out(qkv):
    q, k, v, cu, m = qkv
    with pytest.raises(ValueError, match="out must be"):
        _call(q, k, v, cu, m, out=torch.empty_like(q)[:-1])
    with pytest.raises(ValueError, match="out must be"):
        _call(q, k, v, cu, m, out=torch.empty_like(q, dtype=torch.float32))


def test_unknown_backend(qkv):
    q, k, v, cu, m = qkv
    with pytest.raises(ValueError, match="unknown backend 'flash'; expected one of triton, fa2"):
        _call(q, k, v, cu, m, backend="flash")


# --- packing ---------------------------------------------------------------------------------


def test_pack_bad_mask(device):
    x = torch.randn(2, 5, 8, device=device)
    with pytest.raises(TypeError, match=r"torch\.bool"):
        ragged.pack(x, torch.ones(2, 5, device=device))
    with pytest.raises(ValueError, match=r"keep_mask must be \[2, 5\]"):
        ragged.pack(x, torch.ones(2, 4, dtype=torch.bool, device=device))
    with pytest.raises(ValueError, match=r"keep_mask must be \[2, 5\]"):
        ragged.pack(x, torch.ones(5, dtype=torch.bool, device=device))
    with pytest.raises(ValueError, match=r"x must be \[B, N, C\]"):
        ragged.pack(x[0], torch.ones(2, 5, dtype=torch.bool, device=device))
    with pytest.raises(ValueError, match=r"keep_mask must be \[2, 5\]"):
        ragged.pack_fixed(x, torch.ones(3, 5, dtype=torch.bool, device=device), 10)


def test_pack_fixed_bad_capacity_and_buffers(device):
    x = torch.randn(2, 5, 8, device=device)
    m = torch.ones(2, 5, dtype=torch.bool, device=device)
    with pytest.raises(ValueError, match="capacity must be an int >= 0"):
        ragged.pack_fixed(x, m, -1)
    with pytest.raises(ValueError, match=r"out must be \[10, 8\]"):
        ragged.pack_fixed(x, m, 10, out=torch.empty(9, 8, device=device))
    with pytest.raises(ValueError, match=r"cu_seqlens must be \[3\]"):
        ragged.pack_fixed(x, m, 10, cu_seqlens=torch.empty(4, dtype=torch.int32, device=device))


def test_unpack_mismatched_mask(device):
    x = torch.randn(2, 5, 8, device=device)
    m = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 1, 1, 0]], dtype=torch.bool, device=device)
    packed, cu, _ = ragged.pack(x, m)
    with pytest.raises(ValueError, match=r"cu_seqlens must be \[4\]"):
        ragged.unpack(packed, cu, torch.ones(3, 5, dtype=torch.bool, device=device))
    other = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 0, 0]], dtype=torch.bool, device=device)
    with pytest.raises(ValueError, match="does not describe keep_mask's row counts"):
        ragged.unpack(packed, cu, other)
    with pytest.raises(TypeError, match="int32"):
        ragged.gather_cls(packed, cu.long())
