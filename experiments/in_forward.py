"""Host time of the attention call inside the pipeline's forward, beside one aten op there.

Every ``LayoutAttention`` call of the ragged pipeline (DeiT-B 224, BS 1, Threshold-L2 at 50%
after block 4, eager) is timed on the host, and so is one ``x.add_(1)`` on a scratch tensor
right before or right after it (alternating forwards); then the same call and the same op in
a hot loop. The aten op is the yardstick: what it costs more in the forward than in the loop
is what the forward does to any host step (caches cooled by the ops between), not the call.

    python -m experiments.in_forward [--forwards 200] [--backends triton fa2 launch_only]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.support import workloads
from ragged.layout_attention import LayoutAttention
from ragged.models import SHARP_ATTENTION, build_model, get_config
from ragged.pipeline import PrunedViT, PruneStage
from ragged.pruning import ThresholdL2
from ragged.testing import synthetic_images

_ns = time.perf_counter_ns


def measure(backend: str, forwards: int, model, images) -> dict[str, list[float]]:
    """-> {row: host µs samples} for one backend's calls, in the forward and in a hot loop.
    ``launch_only``: the bound's LayoutAttention that launches an empty kernel instead."""
    cls = workloads.launch_only() if backend == "launch_only" else LayoutAttention
    original = cls.__call__
    scratch = torch.zeros(1024, device="cuda")
    rec: dict[str, list[float]] = {"call, in the forward": [], "x.add_(1), in the forward": []}
    state = {"before": False, "last": None}

    def timed(self, qkv):
        if state["before"]:
            t0 = _ns()
            scratch.add_(1)
            t1 = _ns()
            out = original(self, qkv)
            op, call = t1 - t0, _ns() - t1
        else:
            t0 = _ns()
            out = original(self, qkv)
            t1 = _ns()
            scratch.add_(1)
            call, op = t1 - t0, _ns() - t1
        rec["call, in the forward"].append(call / 1e3)
        rec["x.add_(1), in the forward"].append(op / 1e3)
        state["last"] = (self, qkv)
        return out

    pipe = PrunedViT(model, PruneStage(4, ThresholdL2(keep_ratio=0.5)),
                     backend="triton" if backend == "launch_only" else backend,
                     layout_attention=cls)  # fmt: skip
    with torch.inference_mode():
        for _ in range(5):
            pipe(images)
        torch.cuda.synchronize()
        cls.__call__ = timed
        try:
            for i in range(forwards):
                state["before"] = i % 2 == 1
                pipe(images)
                if i % 20 == 0:
                    torch.cuda.synchronize()
        finally:
            cls.__call__ = original
        torch.cuda.synchronize()
        call, qkv = state["last"]
        rec["call, hot loop"], rec["x.add_(1), hot loop"] = [], []
        for _ in range(20):
            for row, fn in (("call, hot loop", lambda: original(call, qkv)),
                            ("x.add_(1), hot loop", lambda: scratch.add_(1))):  # fmt: skip
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
                t0 = _ns()
                for _ in range(200):
                    fn()
                rec[row].append((_ns() - t0) / 200e3)
                torch.cuda.synchronize()
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--forwards", type=int, default=200, help="timed forwards per backend")
    p.add_argument(
        "--backends",
        nargs="+",
        default=["triton", "fa2"],
        help="ragged backends, and launch_only (an empty kernel launched per call)",
    )
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    cfg = get_config("deit_base_224")
    model = build_model(cfg.name, device="cuda", dtype=torch.float16,
                        attention_scale=SHARP_ATTENTION)  # fmt: skip
    images = synthetic_images(1, cfg.img_size, seed=3, device="cuda", dtype=torch.float16)
    print("| backend | host µs of | median | quartiles | n |\n|---|---|---|---|---|")
    for backend in args.backends:
        for row, samples in measure(backend, args.forwards, model, images).items():
            q1, _, q3 = statistics.quantiles(samples, n=4)
            print(f"| {backend} | {row} | {statistics.median(samples):.2f} | "
                  f"{q1:.2f}-{q3:.2f} | {len(samples)} |")  # fmt: skip
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
