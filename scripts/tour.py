"""`make tour`: what the ragged library does on this machine, in under a minute.

    python -m scripts.tour

1. the attention backends this machine runs, and what each calls;
2. one truly ragged batch (lengths 197, 40, 1, 0, 99, 577) through every one of them,
   checked against the float64 oracle within the error budget (2x eager PyTorch + eps);
3. pack -> unpack round trip of a 50%-pruned DeiT-S batch;
4. the pruned DeiT-Ti pipeline (4 images, pruned after block 4): every pruning method on the
   ragged path against padded_max over the same keep masks;
5. on a GPU: the dispatch floor (BS=1, 80% pruning, DeiT-B geometry) of triton and fa2.
Without a GPU the Triton kernels run in the Triton interpreter (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import ragged
from ragged.testing import attention_error_budget, packed_qkv

LENGTHS = [197, 40, 1, 0, 99, 577]


def main() -> int:
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dtype = torch.float16 if cuda else torch.float32
    where = torch.cuda.get_device_name() if cuda else "CPU (Triton interpreter)"
    print(f"ragged {ragged.__version__} on {where}; torch {torch.__version__}")

    print("\n1. backends")
    for name, backend in ragged.BACKENDS.items():
        reason = backend.unavailable()
        state = "runs here" if reason is None else f"not here: {reason}"
        print(f"  {name:12s} {backend.implementation():60s} {state}")

    print(f"\n2. ragged batch {LENGTHS}, 12 heads x 64, {dtype}")
    q, k, v, cu, max_seqlen = packed_qkv(LENGTHS, 12, 64, dtype=dtype, device=device)
    oracle, budget = attention_error_budget(q, k, v, cu)
    failed = False
    for name in ragged.available_backends():
        if name == "nested_sdpa":  # jagged NestedTensor refuses zero-length sequences
            continue
        try:
            out = ragged.varlen_attention(q, k, v, cu, max_seqlen, backend=name)
        except ragged.BackendUnavailableError as exc:
            print(f"  {name:12s} skipped: {exc}")
            continue
        err = (out.double() - oracle).abs().max().item()
        ok = err <= budget
        failed |= not ok
        print(
            f"  {name:12s} max abs error {err:.2e} (budget {budget:.2e}) {'ok' if ok else 'FAIL'}"
        )

    print("\n3. pack / unpack, DeiT-S tokens [8, 197, 384], ~50% kept")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 197, 384, generator=g).to(device=device, dtype=dtype)
    keep = (torch.rand(8, 197, generator=g) < 0.5).to(device)
    keep[:, 0] = True
    packed, cu_seqlens, longest = ragged.pack(x, keep)
    back = ragged.unpack(packed, cu_seqlens, keep)
    same = torch.equal(back, x * keep[..., None])
    failed |= not same
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    print(f"  packed {tuple(packed.shape)}, lengths {lengths}, max_seqlen {longest}")
    cls = ragged.gather_cls(packed, cu_seqlens)
    print(f"  round trip exact: {same}; CLS tokens: {tuple(cls.shape)}")

    failed |= pipeline_demo(device, dtype)

    if cuda:
        from benchmarks.support import harness

        print("\n5. dispatch floor, BS=1, 80% pruning (40 tokens), DeiT-B geometry, fp16")
        q, k, v, cu, max_seqlen = packed_qkv([40], 12, 64, device="cuda")
        fns = {
            b: lambda b=b: ragged.varlen_attention(
                q, k, v, cu, max_seqlen, backend=b, validate=False
            )
            for b in ("triton", "fa2")
            if b in ragged.available_backends()
        }
        harness.spin_up()
        for name, m in harness.measure_interleaved(fns, rounds=3).items():
            gpu = m["gpu_us"]["median"] if m["gpu_us"] else float("nan")
            print(
                f"  {name:8s} call {m['call_us']['median']:6.1f} us  gpu {gpu:6.1f} us  "
                f"host {m['host_us']['median']:6.1f} us"
            )
        print("  full table: make bench-kernel")
    print("\nFAILED" if failed else "\nall checks passed")
    return 1 if failed else 0


def pipeline_demo(device: str, dtype: torch.dtype) -> bool:
    """Section 4; True when a check failed."""
    from ragged.models import SHARP_ATTENTION, build_model
    from ragged.pipeline import PrunedViT, PruneStage
    from ragged.pruning import ATS, DynamicViT, EViT, ThresholdL2, build_predictor
    from ragged.testing import synthetic_images

    print(f"\n4. pruned DeiT-Ti pipeline, 4 images, {dtype}, pruning after block 4")
    model = build_model("deit_tiny_224", device=device, dtype=dtype,
                        attention_scale=SHARP_ATTENTION)  # fmt: skip
    images = synthetic_images(4, 224, seed=1, device=device, dtype=dtype)
    predictor = build_predictor(model.embed_dim, seed=1, device=device, dtype=dtype)
    tol = 1e-4 if dtype == torch.float32 else 7e-3
    failed = False
    for method in (ThresholdL2(keep_ratio=0.5), ThresholdL2(threshold=1.0),
                   DynamicViT(predictor, 0.5), EViT(0.5), ATS(0.5)):  # fmt: skip
        stage = PruneStage(4, method)
        ref, ref_masks = PrunedViT(model, stage, mode="padded_max").forward(
            images, return_masks=True
        )
        logits, masks = PrunedViT(model, stage).forward(images, return_masks=True)
        diff = (logits.float() - ref.float()).abs().max().item()
        ok = (
            diff < tol
            and torch.equal(masks[0], ref_masks[0])
            and torch.equal(logits.argmax(1), ref.argmax(1))
        )
        failed |= not ok
        label = f"{method.name}{' (threshold)' if getattr(method, 'threshold', None) else ''}"
        print(f"  {label:24s} kept {masks[0].sum(1).tolist()}  max |diff| vs padded_max "
              f"{diff:.1e}  {'ok' if ok else 'FAILED'}")  # fmt: skip
    return failed


if __name__ == "__main__":
    sys.exit(main())
