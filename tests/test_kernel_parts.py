"""The checked arms of experiments.kernel_parts (the eighth session's TMA, cache-hint and
layout-hint copies of the loop and one-tile kernels, the ninth session's leaner softmax
steps) against the float64 oracle."""

import torch

from ragged.testing import assert_attention_close, packed_qkv

# An empty sequence, one token, odd lengths, the 80% / 50% pruned DeiT lengths (40, 99) and a
# tile-exact one; a uniform batch (the one-tile guess right) and a short ragged one (wrong).
CASES = [[0, 1, 7, 40, 99, 0, 3, 64, 33], [40], [99] * 2, [40, 7, 33], [128, 5]]
PREFIXES = ("tma ", "evict ", "cache ", "hints ", "floor loop 64x64 w4 s2 pdl mid full")


def test_the_eighth_sessions_arms_match_oracle(device):
    """Each attention arm (part ``full``) of the TMA, eviction, cache-modifier and hint
    candidates, and the default loop's copy with PDL after the q load, within the error
    budget; rows past a sequence (TMA reads the next sequence's) never reach it."""
    from experiments import kernel_parts

    arms = [
        a
        for a in kernel_parts.PARTS
        if a.name.startswith(PREFIXES) and a.part == kernel_parts.PART_NAMES["full"]
    ]
    assert len(arms) >= 10
    for lengths in CASES:
        q, k, v, cu, max_seqlen = packed_qkv(lengths, 2, 64, device=device, seed=8)
        for arm in arms:
            if arm.why_not(max_seqlen, q.is_cuda):
                continue
            out = torch.full_like(q, float("nan"))
            kernel_parts.run(arm, q, k, v, cu, max_seqlen, 64**-0.5, out)
            assert_attention_close(out, q, k, v, cu)


NINTH = ("ffma ", "lastmask ", "skip0 ", "rcp ", "grid3 ", "lean ", "poly ")


def test_the_ninth_sessions_arms_match_oracle(device):
    """Each of the loop's leaner softmax arms (the scale in the exponent's fma, the key mask
    only on the tile crossing the end, no rescale on the first tile, the reciprocal, the 3-D
    grid, half the exp2 by a polynomial) within the error budget: one-tile and two-tile
    sequences, a tile-exact one, an empty one."""
    from experiments import kernel_parts

    arms = [a for a in kernel_parts.PARTS if a.name.startswith(NINTH)]
    assert len(arms) >= 10
    for lengths in CASES:
        q, k, v, cu, max_seqlen = packed_qkv(lengths, 2, 64, device=device, seed=9)
        for arm in arms:
            out = torch.full_like(q, float("nan"))
            kernel_parts.run(arm, q, k, v, cu, max_seqlen, 64**-0.5, out)
            assert_attention_close(out, q, k, v, cu)
