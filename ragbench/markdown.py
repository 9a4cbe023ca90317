"""The number formats the markdown reports share: a value, a relative change."""

from __future__ import annotations

import math


def number(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.{digits}g}"


def percent(x: float | None) -> str:
    if x is not None and math.isinf(x):
        return "none: too few samples"
    return "-" if x is None else f"{x * 100:+.1f}%"
