"""The checked arms of experiments.kernel_parts (the eighth session's TMA, cache-hint and
layout-hint copies of the loop and one-tile kernels, the ninth session's leaner softmax
steps, the eleventh session's reads of cu_seqlens before the wait) against the float64
oracle, and experiments.kernel_floor's workloads of any size (--uniform)."""

import pytest
import torch
import triton
import triton.language as tl

from ragged.kernels import forward
from ragged.testing import assert_attention_close, packed_qkv

# An empty sequence, one token, odd lengths, the 80% / 50% pruned DeiT lengths (40, 99) and a
# tile-exact one; a uniform batch (the one-tile guess right) and a short ragged one (wrong).
CASES = [[0, 1, 7, 40, 99, 0, 3, 64, 33], [40], [99] * 2, [40, 7, 33], [128, 5]]
PREFIXES = ("tma ", "evict ", "cache ", "hints ", "floor loop 64x64 w4 s2 pdl mid full")


def _match_oracle(arms, device, seed):
    """Every arm that runs the batch, on every case, within the error budget (its output
    starts as NaN: a row it does not write fails)."""
    from experiments import kernel_parts

    for lengths in CASES:
        q, k, v, cu, max_seqlen = packed_qkv(lengths, 2, 64, device=device, seed=seed)
        for arm in arms:
            if arm.why_not(max_seqlen, q.is_cuda):
                continue
            out = torch.full_like(q, float("nan"))
            kernel_parts.run(arm, q, k, v, cu, max_seqlen, 64**-0.5, out)
            assert_attention_close(out, q, k, v, cu)


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
    _match_oracle(arms, device, seed=8)


NINTH = ("ffma ", "lastmask ", "skip0 ", "rcp ", "grid3 ", "lean ", "poly ")


def test_the_ninth_sessions_arms_match_oracle(device):
    """Each of the loop's leaner softmax arms (the scale in the exponent's fma, the key mask
    only on the tile crossing the end, no rescale on the first tile, the reciprocal, the 3-D
    grid, half the exp2 by a polynomial) within the error budget: one-tile and two-tile
    sequences, a tile-exact one, an empty one."""
    from experiments import kernel_parts

    arms = [a for a in kernel_parts.PARTS if a.name.startswith(NINTH)]
    assert len(arms) >= 10
    _match_oracle(arms, device, seed=9)


def test_the_early_bounds_arms_match_oracle(device):
    """Each arm that reads cu_seqlens before the wait (the loop on both grids, the 3-stage
    loop, the one-tile kernel from the true start, and the checked loop of every kind of
    second read) within the error budget, where nothing writes cu_seqlens meanwhile."""
    from experiments import kernel_parts

    full = kernel_parts.PART_NAMES["full"]
    arms = [a for a in kernel_parts.PARTS if (a.early or a.kind == "checked") and a.part == full]
    assert len(arms) >= 15
    _match_oracle(arms, device, seed=11)


@triton.jit
def _write_after_spin(dst, src, n, CYCLES: tl.constexpr):
    """Lets the next kernel launch at once (programmatic dependent launch), spins ``CYCLES``
    SM cycles, then copies ``src[:n]`` (int32, n <= 64) to ``dst``: a kernel that writes
    cu_seqlens while the next one already runs."""
    forward.gdc_launch_dependents()
    t0 = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64,
                                   is_pure=False, pack=1)  # fmt: skip
    t = t0
    while t - t0 < CYCLES:
        t = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64,
                                      is_pure=False, pack=1)  # fmt: skip
    offs = tl.arange(0, 64)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@pytest.mark.gpu
def test_bounds_read_before_the_wait_are_checked_after_it():
    """sm_90 and later: the checked loop, and the default path's 3-D grid loop (``early``), read
    cu_seqlens before waiting for the kernel before it. Here that kernel lets it launch at once and
    writes cu_seqlens ~0.5 ms later, so the early read sees what was there before: another batch's
    bounds, or garbage (negative, past the tensor). Every checked arm's output matches the oracle
    over the bounds written; the unchecked ones' do not, so the early read did see the old bounds.
    """
    from experiments import kernel_parts

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("griddepcontrol needs sm_90")
    lengths = [99, 40, 64, 99, 7, 99, 99, 80]
    q, k, v, cu, max_seqlen = packed_qkv(lengths, 12, 64, device="cuda", seed=21)
    other = packed_qkv([7, 99, 99, 40, 99, 64, 80, 99], 12, 64, device="cuda")[3]
    garbage = torch.tensor([-5, 2**30, 7, -(2**31), 3, 2**31 - 1, 0, 5000, 1], dtype=torch.int32,
                           device="cuda")  # fmt: skip

    def raced(arm, stale):
        kernel_parts.run(arm, q, k, v, cu, max_seqlen, 64**-0.5, torch.empty_like(q))  # compiled
        cu_buf, out = stale.clone(), torch.full_like(q, float("nan"))
        _write_after_spin[(1,)](cu_buf, cu, cu.numel(), CYCLES=1_000_000)
        kernel_parts.run(arm, q, k, v, cu_buf, max_seqlen, 64**-0.5, out)
        torch.cuda.synchronize()
        assert torch.equal(cu_buf, cu)
        return out

    checked = [a for a in kernel_parts.PARTS if a.check or (a.early and a.kind == "kernel")]
    assert len(checked) >= 5 and any(a.kind == "kernel" for a in checked)
    for arm in checked:
        for stale in (other, garbage):
            assert_attention_close(raced(arm, stale), q, k, v, cu)
    for name in ("unchecked grid3 loop 64x64 w4 s2 pdl mid",
                 "early grid3 loop 64x64 w4 s2 pdl mid full"):  # fmt: skip
        arm = next(a for a in kernel_parts.PARTS if a.name == name)
        with pytest.raises(AssertionError):
            assert_attention_close(raced(arm, other), q, k, v, cu)


def test_kernel_floor_times_uniform_batches_of_any_size(tmp_path):
    """``kernel_floor --uniform B:L`` times B sequences of L tokens (a grid of any program
    count), and only those unless ``--only`` names a workload of the list too; a malformed
    one is refused in one line (exit 2). Where no GPU is: the H100 machine's interpreter
    (triton 3.6) refused every arm there ("only 0-dimensional arrays can be converted to
    Python scalars"), and kernel_floor times the GPU on it."""
    if torch.cuda.is_available():
        pytest.skip("--cpu-smoke: the interpreter runs where no GPU is")
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "floor.json"
    run = [sys.executable, "-m", "experiments.kernel_floor", "--cpu-smoke", "--rounds", "1",
           "--replays", "1", "--arms", "none", "--out", str(out)]  # fmt: skip
    done = subprocess.run([*run, "--uniform", "3:40", "2:99", "--only", "1 / 80%"], cwd=root,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    labels = [w["label"] for w in json.loads(out.read_text())["workloads"]]
    assert labels == ["1 / 80%", "3 x 40", "2 x 99"]
    bad = subprocess.run([*run, "--uniform", "3:x"], cwd=root, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert bad.returncode == 2 and "'3:x': B:L, two integers" in bad.stderr
    assert "Traceback" not in bad.stderr
