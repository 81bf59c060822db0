"""One naming scheme for heads, used by every analysis, table and figure.

A head is written ``"L-H"`` with 1-indexed layer and head (``"8-10"`` = layer 8, head 10), as in the
paper; code indexes layers and heads from 0. :func:`head_label` turns 0-indexed ``(layer, head)``
into a label, :func:`parse_head_label` / :func:`parse_head_labels` read labels back (1-indexed),
checked against the model size when given.
"""

from __future__ import annotations

from typing import Iterable

from bertlook.errors import BertlookError


def head_label(layer0: int, head0: int) -> str:
    """1-indexed "L-H" label of 0-indexed (layer, head)."""
    return f"{int(layer0) + 1}-{int(head0) + 1}"


def parse_head_label(label: str, num_layers: int | None = None, num_heads: int | None = None) -> tuple[int, int]:
    """Parse a 1-indexed ``"L-H"`` head label; check it against the model size when given."""
    text = str(label).strip()
    parts = text.split("-")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise BertlookError(f"bad head label {label!r}: expected 'LAYER-HEAD' with 1-indexed integers, e.g. '8-10'")
    layer, head = (int(p) for p in parts)
    if layer < 1 or head < 1:
        raise BertlookError(f"bad head label {label!r}: layers and heads are 1-indexed")
    if num_layers is not None and layer > num_layers:
        raise BertlookError(f"bad head label {label!r}: the model has {num_layers} layers")
    if num_heads is not None and head > num_heads:
        raise BertlookError(f"bad head label {label!r}: the model has {num_heads} heads per layer")
    return layer, head


def parse_head_labels(
    spec: str | Iterable[str], num_layers: int | None = None, num_heads: int | None = None
) -> list[tuple[int, int]]:
    """Parse ``"L-H,L-H,..."`` (or a list of labels) into 1-indexed ``(layer, head)`` tuples."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    items = [s.strip() for s in items if str(s).strip()]
    if not items:
        raise BertlookError(f"bad head list {spec!r}: expected 'L-H,L-H,...'")
    return [parse_head_label(s, num_layers, num_heads) for s in items]
