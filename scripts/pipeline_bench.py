"""End-to-end benchmark of the pruned ViT pipeline on a CUDA GPU.

Sections (all by default; ``--sections`` picks some):

  throughput  DeiT-B 224, Threshold-L2 at 50% after block 4, BS 1-128: img/s of every
              pipeline, the FLOP-ideal speedup over the unpruned model beside them
  stages      the same at BS=8: front / prune+pack / late blocks / head, ms each
  r384        DeiT-B 384 at BS 1, 4, 32
  models      DeiT-Ti and DeiT-S at BS 64
  methods     the four pruning methods (and Threshold-L2 with a per-image threshold) at BS 32
  accuracy    logits of every ragged backend against padded_max over the same keep masks
              (max |diff|, top-1 agreement), the all-kept pipeline against the timm model,
              and whether the ragged path synchronises with the host
  bound       DeiT-B 224 at BS 1, 4, 8 and 384 at BS 1, 4, Threshold-L2 and ATS (narrowed by
              --bound-models, --bound-methods, --bound-batches): fa2 and triton beside the
              ragged pipeline with its attention call removed (no_attention): the most any
              attention kernel could gain over fa2 in this pipeline; and with one empty
              kernel launched in its place (launch_only): the most a launched kernel could
              gain

Pipelines: dense (the unpruned timm model), padded_full, padded_max, fa2 and triton (ragged,
eager), and in CUDA-graph mode dense_graph, fa2_graph and triton_graph (like for like: on
the H100 VM one eager op costs 12-35 us of host time, which bounds every eager pipeline).
img/s comes from back-to-back forwards with one sync at the end of each timed batch of
calls, pipelines measured in alternating rounds (the bound section: in turns of one synced
forward of each, ``turns_us``); speedups are ratios within one run.
Random weights (seeded) with ``attention_scale=SHARP_ATTENTION``, so that attention-based
pruning chooses as it would with trained weights.

    python -m scripts.pipeline_bench --out results/pipeline          # everything, ~7 min
    python -m scripts.pipeline_bench --sections throughput --quick   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.support import bound, workloads
from benchmarks.support.bound import share_of_bound, turns_us
from benchmarks.support.harness import gpu_clocks, spin_up
from ragbench import provenance as fingerprint
from ragged import backend_implementation
from ragged.models import SHARP_ATTENTION, build_model, get_config
from ragged.pipeline import PrunedViT, PruneStage, ragged_backends
from ragged.pruning import ThresholdL2
from ragged.testing import synthetic_images

SECTIONS = ("throughput", "stages", "r384", "models", "methods", "accuracy", "bound")
# The suite's pipelines (benchmarks/support/catalogue.py) and the CUDA-graph twins of two of them
PIPELINES = ["dense", "padded_full", "padded_max", "fa2", "triton", "dense_graph", "fa2_graph",
             "triton_graph"]  # fmt: skip
METHODS = ("threshold_l2", "dynamicvit", "evit", "ats", "threshold_l2_per_image")
# The bound section's models and their batch sizes (--bound-models, --bound-batches)
BOUND_BATCHES = {"deit_base_224": [1, 4, 8], "deit_base_384": [1, 4]}
PRUNE_AT = workloads.PRUNE_AT
DTYPE = torch.float16


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


def make_method(name: str, model):
    """The suite's pruning step ``name`` (half the patches), or Threshold-L2 with a threshold."""
    if name == "threshold_l2_per_image":
        return ThresholdL2(threshold=1.0)  # norm >= the image's mean norm: ~half, ragged
    return workloads.make_method(name, model)


def pipelines(model, method, names) -> dict[str, PrunedViT]:
    """The catalogue's pipelines, and ``launch_only`` (the bound's: see _workloads)."""
    return bound.pipelines(model, method, names)


def throughput(pipes: dict[str, PrunedViT], images, rounds: int, timing: str = "rounds"
               ) -> dict[str, dict]:  # fmt: skip
    """img/s of each pipeline: ``timing="rounds"`` as the suite measures it
    (``workloads.img_per_s``: alternating rounds of ~40 ms of back-to-back forwards each),
    ``"turns"`` one forward of each pipeline after the other (``turns_us``)."""
    fns = {n: (lambda p=p: p.forward(images, check_overflow=False)) for n, p in pipes.items()}
    spin_up()
    batch = images.shape[0]
    if timing == "turns":
        samples = turns_us(fns, rounds)
    else:
        samples = {n: [batch / v * 1e6 for v in ips]
                   for n, ips in workloads.img_per_s(fns, batch, rounds).items()}  # fmt: skip
    return {n: {"ms": statistics.median(s) / 1e3, "img_per_s": batch / statistics.median(s) * 1e6,
                "samples_us": s} for n, s in samples.items()}  # fmt: skip


def paired_speedup(fast: dict, slow: dict) -> tuple[float, float, float]:
    """Median and quartiles over rounds of ``slow``'s time over ``fast``'s in the same round:
    host speed drifts between rounds on the VM (see docs/pipeline.md), pairing cancels it."""
    q = statistics.quantiles(
        [s / f for f, s in zip(fast["samples_us"], slow["samples_us"], strict=True)], n=4
    )
    return q[1], q[0], q[2]


def share_cell(res: dict, name: str) -> str:
    """``share_of_bound`` of the bound ``name`` in a row's results; "-" where it was not
    measured, "unresolved" where the bound's gain over fa2 is not above 0 (its share means
    nothing)."""
    if name not in res:
        return "-"
    share = share_of_bound(*(res[n]["samples_us"] for n in ("fa2", "triton", name)))
    if math.isnan(share[0]):
        return "unresolved (bound not above fa2)"
    return "{:.2f} [{:.2f}, {:.2f}]".format(*share)


def flop_ideal(pipe: PrunedViT, images) -> tuple[float, float]:
    """(FLOP-ideal speedup over the unpruned model, mean kept tokens per image)."""
    _, masks = pipe.forward(images, return_masks=True)
    pruned = pipe.flops_per_image(masks).mean().item()
    dense = pipe.flops_per_image([]).item()
    return dense / pruned, masks[0].sum(1).float().mean().item()


def run_throughput(model_name, batches, names, method_name, rounds, log_label,
                   timing: str = "rounds") -> list[dict]:  # fmt: skip
    cfg = get_config(model_name)
    model = build_model(model_name, device="cuda", dtype=DTYPE, attention_scale=SHARP_ATTENTION)
    method = make_method(method_name, model)
    rows = []
    for batch in batches:
        images = synthetic_images(batch, cfg.img_size, seed=batch, device="cuda", dtype=DTYPE)
        pipes = pipelines(model, method, names)
        ideal, kept = flop_ideal(PrunedViT(model, PruneStage(PRUNE_AT, method)), images)
        res = throughput(pipes, images, rounds, timing)
        row = {"model": model_name, "method": method_name, "batch": batch, "kept_mean": kept,
               "flop_ideal_speedup": ideal, "pipelines": res, "timing": timing,
               "ragged_attention_calls": len(model.blocks) - PRUNE_AT}  # fmt: skip
        rows.append(row)
        log(f"[{log_label}] {model_name} BS={batch}: "
            + ", ".join(f"{n} {r['img_per_s']:.0f}" for n, r in res.items()))  # fmt: skip
        del pipes
        torch.cuda.empty_cache()
    return rows


def run_stages(batch: int, reps: int) -> dict[str, dict]:
    cfg = get_config("deit_base_224")
    model = build_model(cfg.name, device="cuda", dtype=DTYPE, attention_scale=SHARP_ATTENTION)
    images = synthetic_images(batch, cfg.img_size, seed=0, device="cuda", dtype=DTYPE)
    pipes = pipelines(model, make_method("threshold_l2", model),
                      ["padded_full", "padded_max", "fa2", "triton"])  # fmt: skip
    out = {}
    spin_up()
    for name, p in pipes.items():
        times: dict[str, list[float]] = {k: [] for k in ("front", "prune_pack", "late", "head")}
        with torch.inference_mode():
            for rep in range(reps + 5):
                marks = [time.perf_counter()]
                x, info = p.front(images)
                torch.cuda.synchronize()
                marks.append(time.perf_counter())
                tokens = p.prune_pack(x, info)
                torch.cuda.synchronize()
                marks.append(time.perf_counter())
                tokens = p.late(tokens)
                torch.cuda.synchronize()
                marks.append(time.perf_counter())
                p.head(tokens)
                torch.cuda.synchronize()
                marks.append(time.perf_counter())
                if rep >= 5:
                    for k, a, b in zip(times, marks, marks[1:], strict=False):
                        times[k].append((b - a) * 1e3)
        out[name] = {k: statistics.median(v) for k, v in times.items()}
        out[name]["total"] = sum(out[name].values())
        log(f"[stages] {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in out[name].items()))
    return out


def run_accuracy() -> dict:
    out: dict = {"equivalence": [], "all_kept": [], "synchronises": {}}
    for model_name, batch, backends, scale in (
        ("deit_base_224", 32, tuple(ragged_backends()), SHARP_ATTENTION),
        ("deit_tiny_224", 32, ("triton", "fa2"), SHARP_ATTENTION),
        ("deit_small_224", 32, ("triton", "fa2"), SHARP_ATTENTION),
        ("deit_base_384", 8, ("triton", "fa2"), SHARP_ATTENTION),
        ("deit_base_224", 32, ("triton", "fa2"), 1.0),  # timm's own init: flat attention
    ):
        cfg = get_config(model_name)
        model = build_model(model_name, device="cuda", dtype=DTYPE, attention_scale=scale)
        images = synthetic_images(batch, cfg.img_size, seed=7, device="cuda", dtype=DTYPE)
        methods = METHODS if scale == SHARP_ATTENTION and model_name == "deit_base_224" else (
            "threshold_l2", "ats")  # fmt: skip
        for method_name in methods:
            method = make_method(method_name, model)
            stage = PruneStage(PRUNE_AT, method)
            ref, ref_masks = PrunedViT(model, stage, mode="padded_max").forward(
                images, return_masks=True
            )
            top2 = ref.float().topk(2, dim=1).values
            margin = top2[:, 0] - top2[:, 1]
            for backend in (*backends, "padded_full"):
                mode = "padded_full" if backend == "padded_full" else "ragged"
                p = PrunedViT(model, stage, mode=mode, backend=backend)
                logits, masks = p.forward(images, return_masks=True)
                diff = (logits.float() - ref.float()).abs()
                same = logits.argmax(1) == ref.argmax(1)
                out["equivalence"].append({
                    "model": model_name, "attention_scale": scale, "batch": batch,
                    "method": method_name,
                    "backend": backend, "max_abs_diff": diff.max().item(),
                    "mean_abs_diff": diff.mean().item(), "top1_match": int(same.sum()),
                    "images": batch, "masks_equal": all(
                        torch.equal(a, b) for a, b in zip(masks, ref_masks, strict=True)),
                    "min_margin_of_mismatch": margin[~same].min().item() if (~same).any()
                    else None,
                    "kept": ref_masks[0].sum(1).tolist(),
                })  # fmt: skip
                r = out["equivalence"][-1]
                log(f"[accuracy] {model_name} {method_name} {backend}: max {r['max_abs_diff']:.5f}"
                    f" top1 {r['top1_match']}/{batch}")  # fmt: skip
        dense = model(images)
        for backend in ("triton", "fa2"):
            p = PrunedViT(model, PruneStage(PRUNE_AT, ThresholdL2(keep_ratio=1.0)),
                          backend=backend)  # fmt: skip
            logits = p(images)
            out["all_kept"].append({
                "model": model_name, "attention_scale": scale, "backend": backend,
                "max_abs_diff": (logits.float() - dense.float()).abs().max().item(),
                "top1_match": int((logits.argmax(1) == dense.argmax(1)).sum()), "images": batch,
            })  # fmt: skip
    # Host synchronisation in the ragged path (torch's sync debug mode raises on a sync).
    cfg = get_config("deit_base_224")
    model = build_model(cfg.name, device="cuda", dtype=DTYPE, attention_scale=SHARP_ATTENTION)
    images = synthetic_images(8, cfg.img_size, seed=3, device="cuda", dtype=DTYPE)
    for label, method, capacity in (
        ("threshold_l2 (fixed ratio)", make_method("threshold_l2", model), None),
        ("evit (fixed ratio)", make_method("evit", model), None),
        ("ats, capacity=8*99", make_method("ats", model), 8 * 99),
        ("ats, no capacity", make_method("ats", model), None),
    ):
        for backend in ("triton", "fa2"):
            p = PrunedViT(model, PruneStage(PRUNE_AT, method), backend=backend,
                          capacity=capacity)  # fmt: skip
            p.forward(images, check_overflow=False)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                p.forward(images, check_overflow=False)
                verdict = "no sync"
            except RuntimeError as e:
                verdict = f"syncs: {str(e).splitlines()[0][:120]}"
            finally:
                torch.cuda.set_sync_debug_mode("default")
            out["synchronises"][f"{label} / {backend}"] = verdict
            log(f"[sync] {label} / {backend}: {verdict}")
    return out


def environment() -> dict:
    """The suite's fingerprint (ragbench/provenance.py), what the fa2 backend calls, and the
    GPU's clocks now."""
    env = fingerprint.collect(commit=None, machine=fingerprint.default_machine(),
                              mode="pipeline_bench")  # fmt: skip
    return env | {"fa2": backend_implementation("fa2"), "clocks": gpu_clocks()}


def summary(results: dict) -> str:
    lines = []

    def table(rows, title):
        if not rows:
            return
        names = list(rows[0]["pipelines"])
        lines.append(f"\n### {title}\n")
        lines.append("| model | BS | kept/img | " + " | ".join(names)
                     + " | FLOP-ideal | triton/dense | of ideal | graphs: triton/dense | of ideal"
                     + " | triton/fa2 | triton/padded_full | triton graph/eager |")  # fmt: skip
        lines.append("|---" * (len(names) + 11) + "|")
        for r in rows:
            ips = {n: v["img_per_s"] for n, v in r["pipelines"].items()}
            sp = ips["triton"] / ips["dense"]
            ideal = r["flop_ideal_speedup"]
            gsp = ips["triton_graph"] / ips["dense_graph"] if "dense_graph" in ips else None
            graphs = f"{gsp:.2f} | {gsp / ideal:.0%}" if gsp else "- | -"
            lines.append(
                f"| {r['model']} ({r['method']}) | {r['batch']} | {r['kept_mean']:.1f} | "
                + " | ".join(f"{ips[n]:.0f}" for n in names)
                + f" | {ideal:.2f} | {sp:.2f} | {sp / ideal:.0%} | {graphs} | "
                f"{ips['triton'] / ips['fa2']:.2f} | "
                f"{ips['triton'] / ips['padded_full']:.2f} | "
                + (f"{ips['triton_graph'] / ips['triton']:.2f} |" if "triton_graph" in ips
                   else "- |")
            )  # fmt: skip

    table(results.get("throughput", []), "img/s, DeiT-B 224, Threshold-L2 50% after block 4")
    table(results.get("r384", []), "img/s, DeiT-B 384")
    table(results.get("models", []), "img/s, DeiT-Ti / DeiT-S")
    table(results.get("methods", []), "img/s, the pruning methods, DeiT-B 224, BS 32")
    if results.get("bound"):
        lines.append("\n### The most an attention kernel can gain over fa2 here\n")
        timing = results["bound"][0].get("timing", "rounds")
        lines.append(
            "Speedups over fa2: the median over rounds of each round's ratio, with the "
            "quartiles of those ratios; "
            + ("a round is turns of one forward of every pipeline, each synced and timed alone"
               if timing == "turns" else "pipelines alternate within a round, ~40 ms each")
            + ". Share of the bound: triton/fa2 = 1 + share x (no_attention/fa2 - "
            "1), from those medians, with its 95% bootstrap interval over rounds; of the bound "
            "with a launch: the same with launch_only (no_attention plus one empty kernel "
            "launched per call) in place of no_attention.\n"
        )  # fmt: skip
        lines.append("| model | method | BS | fa2 img/s | triton/fa2 | bound: no_attention/fa2 | "
                     "triton/fa2, graphs | bound, graphs | µs per call in the forward: fa2 | "
                     "triton | triton's share of the bound | bound with a launch: "
                     "launch_only/fa2 | triton's share of it |")  # fmt: skip
        lines.append("|---" * 13 + "|")
        for r in results["bound"]:
            res = r["pipelines"]
            cols = [paired_speedup(res[a], res[b]) for a, b in (
                ("triton", "fa2"), ("no_attention", "fa2"), ("triton_graph", "fa2_graph"),
                ("no_attention_graph", "fa2_graph"))]  # fmt: skip
            per_call = [
                statistics.median(
                    (t - t0) / r["ragged_attention_calls"]
                    for t, t0 in zip(res[n]["samples_us"], res["no_attention"]["samples_us"],
                                     strict=True))
                for n in ("fa2", "triton")
            ]  # fmt: skip
            launch = ("{:.3f} ({:.3f}-{:.3f})".format(*paired_speedup(res["launch_only"],
                      res["fa2"])) if "launch_only" in res else "-")  # fmt: skip
            lines.append(f"| {r['model']} | {r['method']} | {r['batch']} | "
                         f"{res['fa2']['img_per_s']:.0f} | "
                         + " | ".join(f"{m:.3f} ({lo:.3f}-{hi:.3f})" for m, lo, hi in cols)
                         + f" | {per_call[0]:.1f} | {per_call[1]:.1f} | "
                         f"{share_cell(res, 'no_attention')}"
                         f" | {launch} | {share_cell(res, 'launch_only')} |")  # fmt: skip
    if "stages" in results:
        lines.append("\n### Stage times (ms), DeiT-B 224, BS 8\n")
        lines.append("| pipeline | front | prune+pack | late blocks | head | total |")
        lines.append("|---|---|---|---|---|---|")
        for n, s in results["stages"].items():
            lines.append(f"| {n} | " + " | ".join(f"{s[k]:.3f}" for k in
                         ("front", "prune_pack", "late", "head", "total")) + " |")  # fmt: skip
    if "accuracy" in results:
        acc = results["accuracy"]
        lines.append("\n### Logits against padded_max over the same keep masks (fp16)\n")
        lines.append("| model (attention scale) | BS | method | backend | max abs diff | top-1 "
                     "| masks equal |")  # fmt: skip
        lines.append("|---|---|---|---|---|---|---|")
        for r in acc["equivalence"]:
            lines.append(f"| {r['model']} ({r['attention_scale']:g}) | {r['batch']} | "
                         f"{r['method']} | {r['backend']} | "
                         f"{r['max_abs_diff']:.5f} | {r['top1_match']}/{r['images']} | "
                         f"{r['masks_equal']} |")  # fmt: skip
        lines.append("\n| all kept vs timm | backend | max abs diff | top-1 |")
        lines.append("|---|---|---|---|")
        for r in acc["all_kept"]:
            lines.append(f"| {r['model']} ({r['attention_scale']:g}) | {r['backend']} | "
                         f"{r['max_abs_diff']:.5f} | "
                         f"{r['top1_match']}/{r['images']} |")  # fmt: skip
        lines.append("\n| ragged path | host sync |")
        lines.append("|---|---|")
        for k, v in acc["synchronises"].items():
            lines.append(f"| {k} | {v} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    ap.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    ap.add_argument("--quick", action="store_true", help="fewer batch sizes and rounds")
    ap.add_argument(
        "--bound-timing",
        choices=("turns", "rounds"),
        default="turns",
        help="bound section: one forward of each pipeline in turn (default), or "
        "the other sections' alternating 40 ms rounds",
    )
    ap.add_argument(
        "--bound-models",
        nargs="+",
        choices=list(BOUND_BATCHES),
        default=list(BOUND_BATCHES),
        help="bound section: the models",
    )
    ap.add_argument(
        "--bound-methods",
        nargs="+",
        choices=METHODS,
        default=["threshold_l2", "ats"],
        help="bound section: the pruning methods (default: threshold_l2 ats)",
    )
    ap.add_argument("--bound-batches", nargs="+", type=int, metavar="BS",
                    help="bound section: these batch sizes for every model (default: "
                    + "; ".join(f"{m} {' '.join(map(str, b))}" for m, b in BOUND_BATCHES.items())
                    + ")")  # fmt: skip
    ap.add_argument("--out", type=Path, help="write results.json and summary.md here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU")
    rounds = 2 if args.quick else args.rounds
    allp = list(PIPELINES)
    results: dict = {"environment": environment(), "argv": sys.argv[1:]}
    t0 = time.perf_counter()
    if "throughput" in args.sections:
        bs = [1, 8, 64] if args.quick else [1, 4, 8, 32, 64, 128]
        results["throughput"] = run_throughput("deit_base_224", bs, allp, "threshold_l2",
                                               rounds, "throughput")  # fmt: skip
    if "stages" in args.sections:
        results["stages"] = run_stages(8, 10 if args.quick else 30)
    if "r384" in args.sections:
        results["r384"] = run_throughput("deit_base_384", [1, 4, 32], allp, "threshold_l2",
                                         rounds, "r384")  # fmt: skip
    if "models" in args.sections:
        results["models"] = [
            row for m in ("deit_tiny_224", "deit_small_224")
            for row in run_throughput(m, [64], allp, "threshold_l2", rounds, "models")
        ]  # fmt: skip
    if "methods" in args.sections:
        names = [n for n in PIPELINES if n != "fa2_graph"]
        results["methods"] = [
            row for m in METHODS
            for row in run_throughput("deit_base_224", [32], names, m, rounds, "methods")
        ]  # fmt: skip
    if "accuracy" in args.sections:
        results["accuracy"] = run_accuracy()
    if "bound" in args.sections:
        names = ["fa2", "triton", "no_attention", "launch_only", "fa2_graph", "triton_graph",
                 "no_attention_graph"]  # fmt: skip
        results["bound"] = [
            row for m in args.bound_models for method in args.bound_methods
            for row in run_throughput(m, args.bound_batches or BOUND_BATCHES[m], names, method,
                                      max(rounds, 101), "bound", args.bound_timing)
        ]  # fmt: skip
    results["seconds"] = time.perf_counter() - t0
    text = summary(results)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
        (args.out / "summary.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
