"""The paper's published figures (RTX 4000 Ada, SM89): an optional reference overlay.

From "Dispatch-Aware Ragged Attention for Pruned Vision Transformers": Table I (kernel latency,
DeiT-B geometry, ms converted to us; CUDA events around one call: our ``call_us``) and
Table III (end-to-end img/s at 224, Threshold-L2 at 50%). Their machine, their stack: for
orientation, never for a ratio against our runs.
"""

GPU = "RTX 4000 Ada (paper)"

# (batch, prune) -> call us per backend, Table I
KERNEL_CALL_US = {
    (32, 0.0): {"padded_sdpa": 2067.0, "fa2": 112.0, "triton": 136.0},
    (32, 0.5): {"padded_sdpa": 1913.0, "fa2": 50.0, "triton": 42.0},
    (32, 0.8): {"padded_sdpa": 1907.0, "fa2": 51.0, "triton": 24.0},
    (64, 0.0): {"padded_sdpa": 4099.0, "fa2": 265.0, "triton": 346.0},
    (64, 0.5): {"padded_sdpa": 3839.0, "fa2": 72.0, "triton": 80.0},
    (64, 0.8): {"padded_sdpa": 3722.0, "fa2": 60.0, "triton": 28.0},
}

# batch -> img/s of the padded (their padded_full), fa2 and triton pipelines, Table III
E2E_IMG_PER_S = {
    1: {"padded_full": 503.0, "fa2": 418.0, "triton": 467.0},
    4: {"padded_full": 1040.0, "fa2": 1436.0, "triton": 1560.0},
    8: {"padded_full": 1048.0, "fa2": 1723.0, "triton": 1750.0},
    16: {"padded_full": 1014.0, "fa2": 1718.0, "triton": 1726.0},
    32: {"padded_full": 968.0, "fa2": 1741.0, "triton": 1743.0},
    64: {"padded_full": 935.0, "fa2": 1763.0, "triton": 1758.0},
    128: {"padded_full": 928.0, "fa2": 1742.0, "triton": 1746.0},
}

MAX_ABS_LOGIT_DIFF = 0.003906  # Table VI, end to end at BS 4: their largest


def kernel_speedup(batch: int, prune: float, baseline: str) -> float | None:
    """Their triton speedup over ``baseline`` in kernel call latency, where they measured it."""
    row = KERNEL_CALL_US.get((batch, prune))
    return row[baseline] / row["triton"] if row and baseline in row else None


def e2e_speedup(batch: int, baseline: str) -> float | None:
    row = E2E_IMG_PER_S.get(batch)
    return row["triton"] / row[baseline] if row and baseline in row else None
