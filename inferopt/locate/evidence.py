"""The two helpers every locate rule uses to report itself: an evidence row (check, value, threshold,
unit, fired, detail) and the confidence of a rule from its margin past the threshold.

Deliberately not here: the rules themselves (`bottleneck.py`, `kv_rules.py`).
"""

from __future__ import annotations

import math
from typing import Any


def confidence(margin: float) -> float:
    """0.5 at the threshold, rising linearly to 1.0 at a full margin (an infinite margin is 1.0)."""
    if not math.isfinite(margin):
        return 1.0
    return round(0.5 + 0.5 * min(1.0, max(0.0, margin)), 3)


def evidence_row(
    check: str, value: float | None, threshold: float | None, unit: str, fired: bool, detail: str
) -> dict[str, Any]:
    return {
        "check": check,
        "value": value,
        "threshold": threshold,
        "unit": unit,
        "fired": bool(fired),
        "detail": detail,
    }
