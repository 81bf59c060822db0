"""One head-label scheme (bertlook.naming) and one percent formatter (reporting.formatting)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertlook.errors import BertlookError
from bertlook.naming import head_label, parse_head_label
from bertlook.reporting.formatting import MISSING, pct


def test_head_label_round_trip_numpy_ints():
    assert head_label(0, 0) == "1-1"
    assert head_label(np.int64(7), np.int32(9)) == "8-10"
    for layer0 in range(12):
        for head0 in range(12):
            assert parse_head_label(head_label(layer0, head0)) == (layer0 + 1, head0 + 1)
    with pytest.raises(BertlookError, match="1-indexed"):
        parse_head_label("0-3")


@pytest.mark.parametrize("value, shown", [(0.5, "50.0"), (0.12345, "12.3"), (1, "100.0"), ("0.25", "25.0"),
                                          (None, MISSING), (math.nan, MISSING), (np.nan, MISSING), ("n/a", MISSING)])
def test_one_percent_formatter_one_missing_sign(value, shown):
    assert pct(value) == shown


def test_no_module_defines_its_own_label_or_percent_helper():
    """The helpers live in one place: no module of the package redefines them."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "src" / "bertlook"
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name not in ("naming.py", "formatting.py")
                 and re.search(r"^def (_?pct|head_label|parse_head_labels?)\(", p.read_text(), flags=re.M)]
    assert offenders == []
