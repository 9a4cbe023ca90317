"""The pipeline's token layouts after a prune point: each holds one batch's tokens and runs a
block's attention on them, gives the CLS attention pruning reads, the tokens over the model's
N positions, and the CLS tokens.

``Padded``  tokens [B, L, C] and a key mask: padded_full (L = N, pruned keys masked) and
            padded_max (kept tokens gathered to the longest kept length);
``Ragged``  tokens packed [rows, C] with ``cu_seqlens``; attention by a ``LayoutAttention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .layout_attention import LayoutAttention
from .packing import gather_cls, unpack
from .pruning import AttentionInfo, Pruned, cls_attention


class Padded:
    """Tokens [B, L, C] with a key mask bool [B, L] (None: all valid); ``n`` model positions.

    padded_full: L = N, pruned positions stay and are masked. padded_max: the kept tokens
    gathered to L = the longest kept length in their original order (CLS stays first);
    ``index`` [B, L] maps them back to the N positions.
    """

    def __init__(self, x, mask, n, index=None):
        self.x, self.mask, self.n, self.index = x, mask, n, index
        self.batch = x.shape[0]

    def _spread(self, t: torch.Tensor) -> torch.Tensor:
        """[B, L, ...] over the gathered positions -> [B, N, ...] over the model's, zeros
        elsewhere (padded_max; padded_full's positions already are the model's)."""
        if self.index is None:
            return t
        index = self.index.view(*self.index.shape, *([1] * (t.dim() - 2))).expand_as(t)
        return t.new_zeros(t.shape[0], self.n, *t.shape[2:]).scatter_(1, index, t)

    def attention(self, qkv, scale):  # qkv [B, L, 3, H, d] -> [B, L, H, d]
        q, k, v = qkv.unbind(2)
        mask = None if self.mask is None else self.mask[:, None, None, :]
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale
        )
        return o.transpose(1, 2)

    def attention_info(self, qkv, scale) -> AttentionInfo:
        q, k, v = qkv.unbind(2)
        cls_attn, v_norm = cls_attention(q[:, 0], k, v, self.mask, scale)
        return AttentionInfo(self._spread(cls_attn.transpose(1, 2)).transpose(1, 2),
                             self._spread(v_norm))  # fmt: skip

    def tokens(self):
        """x [B, N, C] and keep mask [B, N] over the model's positions (pruning works there:
        DynamicViT's ratio is relative to N)."""
        return self._spread(self.x), self.keep_mask()

    def cls(self):
        return self.x[:, 0]

    def keep_mask(self):
        """bool [B, N] over the model's positions."""
        valid = self.mask
        if valid is None:
            valid = torch.ones(self.x.shape[:2], dtype=torch.bool, device=self.x.device)
        return self._spread(valid)


def padded(pruned: Pruned, gather: bool, length: int | None) -> Padded:
    """``pruned`` (keep mask and tokens over the N positions) laid out for padded_full, or
    (``gather``) for padded_max."""
    keep, x = pruned
    n = x.shape[1]
    if not gather:
        return Padded(x, keep, n)
    # padded_max: every row keeps ``length`` tokens when the host knows it (fixed ratios: no
    # padding, no mask); otherwise the longest row is read back, one sync.
    known = length is not None
    if not known:
        length = int(keep.sum(1).max())
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :length]
    x = x.gather(1, order[:, :, None].expand(-1, -1, x.shape[2]))
    return Padded(x, None if known else keep.gather(1, order), n, order)


class Ragged:
    """Tokens packed [rows, C] (rows = T, or a capacity), ``cu_seqlens`` int32 [B + 1],
    ``keep_mask`` bool [B, N] of the positions they came from."""

    def __init__(self, x, cu_seqlens, max_seqlen, keep_mask, call: LayoutAttention,
                 overflow=None):  # fmt: skip
        self.x, self.cu_seqlens, self.max_seqlen = x, cu_seqlens, max_seqlen
        self.keep, self.overflow = keep_mask, overflow
        self.batch = keep_mask.shape[0]
        call.rebind(cu_seqlens, max_seqlen)
        self.call = call

    def attention(self, qkv, scale):  # qkv [rows, 3, H, d] -> [rows, H, d]
        call = self.call
        if call.softmax_scale != scale:  # not in a timm ViT: one scale for every block
            call = self.call = type(call)(
                self.cu_seqlens, self.max_seqlen, backend=call.backend, softmax_scale=scale
            )
        return call(qkv)

    def _unpack(self, t):  # [rows, ...] -> [B, N, ...]
        u = unpack(t.flatten(1), self.cu_seqlens, self.keep, validate=False)
        return u.unflatten(2, t.shape[1:])

    def attention_info(self, qkv, scale) -> AttentionInfo:
        q, k, v = qkv.unbind(1)
        q_cls = gather_cls(q.flatten(1), self.cu_seqlens).unflatten(1, q.shape[1:])
        return cls_attention(q_cls, self._unpack(k), self._unpack(v), self.keep, scale)

    def tokens(self):
        return self._unpack(self.x), self.keep

    def cls(self):
        return gather_cls(self.x, self.cu_seqlens)

    def keep_mask(self):
        return self.keep
