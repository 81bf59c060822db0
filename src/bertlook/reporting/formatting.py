"""Number formatting of the Markdown tables: one percent formatter, one sign for a missing value."""

from __future__ import annotations

import math
from typing import Any

MISSING = "–"  # a value that is absent or NaN, in every table


def pct(x: Any, digits: int = 1) -> str:
    """A fraction (0..1) as a percentage with ``digits`` decimals; :data:`MISSING` for None, NaN or text."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return MISSING
    return MISSING if math.isnan(v) else f"{100 * v:.{digits}f}"
