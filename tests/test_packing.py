"""pack / pack_fixed / unpack / gather_cls against the eager reference."""

import pytest
import torch

import ragged
from ragged.reference import gather_cls_reference, pack_reference, unpack_reference


def _batch(b, n, c, p_keep, device, seed, dtype=torch.float32, keep_cls=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, c, generator=g).to(dtype=dtype, device=device)
    keep = (torch.rand(b, n, generator=g) < p_keep).to(device)
    if keep_cls:
        keep[:, 0] = True
    return x, keep


@pytest.mark.parametrize(
    ("b", "n", "c", "p_keep"),
    [(1, 197, 192, 0.2), (4, 197, 64, 0.5), (3, 577, 20, 0.5), (5, 33, 130, 0.9), (2, 7, 3, 0.0)],
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_pack_unpack_round_trip(b, n, c, p_keep, dtype, device):
    x, keep = _batch(b, n, c, p_keep, device, seed=b * n + c, dtype=dtype)
    packed, cu, max_seqlen = ragged.pack(x, keep)
    ref_packed, ref_cu, ref_max = pack_reference(x, keep)
    assert torch.equal(packed, ref_packed)
    assert torch.equal(cu, ref_cu) and cu.dtype == torch.int32
    assert max_seqlen == ref_max
    back = ragged.unpack(packed, cu, keep)
    assert torch.equal(back, unpack_reference(packed, cu, keep))
    assert torch.equal(back, x * keep[..., None])
    assert torch.equal(ragged.gather_cls(packed, cu), x[:, 0])


def test_rows_with_nothing_kept(device):
    x, keep = _batch(4, 9, 16, 0.5, device, seed=7, keep_cls=False)
    keep[1] = False
    keep[3] = False
    packed, cu, _ = ragged.pack(x, keep)
    assert cu[2] == cu[1] and cu[4] == cu[3]
    assert torch.equal(ragged.unpack(packed, cu, keep), x * keep[..., None])
    cls = ragged.gather_cls(packed, cu)
    assert torch.equal(cls, gather_cls_reference(packed, cu))
    assert torch.equal(cls[1], torch.zeros(16, device=device))


def test_noncontiguous_inputs(device):
    x, keep = _batch(3, 40, 24, 0.5, device, seed=2)
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)  # strided batch/token dims
    kt = keep.t().contiguous().t()
    packed, cu, _ = ragged.pack(xt, kt)
    assert torch.equal(packed, x[keep])
    assert torch.equal(ragged.unpack(packed, cu, kt), x * keep[..., None])


@pytest.mark.parametrize("capacity", [0, 10, 60, 200])
def test_pack_fixed(capacity, device):
    x, keep = _batch(3, 40, 24, 0.5, device, seed=5)
    total = int(keep.sum())
    res = ragged.pack_fixed(x, keep, capacity)
    assert res.packed.shape == (capacity, 24)
    assert res.max_seqlen == min(40, capacity)  # no row is longer than N, nor the buffer
    assert int(res.overflow) == int(total > capacity)
    ref_packed, ref_cu, _ = pack_reference(x, keep)
    assert torch.equal(res.cu_seqlens, ref_cu.clamp(max=capacity))
    kept = min(total, capacity)
    assert torch.equal(res.packed[:kept], ref_packed[:kept])
    if total <= capacity:
        assert torch.equal(ragged.unpack(res.packed, res.cu_seqlens, keep), x * keep[..., None])


def test_pack_fixed_reuses_buffers(device):
    x, keep = _batch(2, 16, 8, 0.5, device, seed=9)
    out = torch.empty(32, 8, device=device)
    cu = torch.empty(3, dtype=torch.int32, device=device)
    flag = torch.ones((), dtype=torch.int8, device=device)
    res = ragged.pack_fixed(x, keep, 32, out=out, cu_seqlens=cu, overflow=flag)
    assert res.packed is out and res.cu_seqlens is cu and res.overflow is flag
    assert int(flag) == 0
    assert torch.equal(out[: int(keep.sum())], x[keep])


def test_empty_shapes(device):
    x = torch.randn(0, 5, 4, device=device)
    packed, cu, m = ragged.pack(x, torch.zeros(0, 5, dtype=torch.bool, device=device))
    assert packed.shape == (0, 4) and cu.tolist() == [0] and m == 0
    x = torch.randn(2, 0, 4, device=device)
    packed, cu, m = ragged.pack(x, torch.zeros(2, 0, dtype=torch.bool, device=device))
    assert packed.shape == (0, 4) and cu.tolist() == [0, 0, 0] and m == 0
