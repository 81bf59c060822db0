"""Per-head surface statistics of attention maps (paper Figs 2 and 4, token level).

For every head, per example, then the plain mean over examples:

- ``cls``, ``sep``, ``punct``: total attention to the [CLS] / [SEP] / "." or "," positions, summed
  over all from-tokens and divided by the number of from-tokens ``n``;
- ``self``, ``prev``, ``next``: attention to the token itself / the previous / the next token, summed
  over the from-tokens that have one and divided by ``n``;
- ``sep_sep``: attention from [SEP] rows to [SEP] columns, divided by the number of [SEP] rows;
- ``rest_sep``: attention from the other rows to [SEP] columns, divided by the number of other rows;
- ``entropy``: mean over rows of the entropy (nats) of the smoothed row
  ``0.9999 * a + 0.0001 / n``; ``cls_entropy``: the same for the [CLS] row only;
- ``max_attention`` (beyond the issue's column list, for the paper's "broad heads put at most 10% of
  their attention on any single word"): mean over rows of the row's largest weight (unsmoothed).

``sep_sep`` / ``rest_sep`` / ``cls_entropy`` are undefined for an example without [SEP] rows / without
other rows / without a [CLS] token: such examples are left out of that column's mean, and the number
left out is reported in the summary (never silently dropped).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    import numpy as np
    import pandas as pd

    from bertlook.attention_store import AttentionStore

COLUMNS = [
    "layer", "head", "cls", "sep", "punct", "self", "prev", "next",
    "sep_sep", "rest_sep", "entropy", "cls_entropy", "max_attention",
]
STAT_COLUMNS = COLUMNS[2:]
PUNCT_TOKENS = (".", ",")
DEFAULT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]"}
ENTROPY_SMOOTHING = 1e-4  # a~ = (1 - s) * a + s / n


def special_tokens(store: "AttentionStore") -> tuple[str, str]:
    """The (CLS, SEP) token strings of a store (``meta["special_tokens"]``, default [CLS]/[SEP])."""
    spec = dict(DEFAULT_SPECIAL_TOKENS)
    spec.update(store.meta.get("special_tokens") or {})
    return str(spec["cls"]), str(spec["sep"])


def row_entropy(attn: "np.ndarray", smoothing: float = ENTROPY_SMOOTHING) -> "np.ndarray":
    """Entropy (nats) of each smoothed row of ``attn[..., n, n]`` -> ``[..., n]`` (float64)."""
    import numpy as np

    a = np.asarray(attn, dtype=np.float64)
    n = a.shape[-1]
    p = (1.0 - smoothing) * a + smoothing / n
    return -(p * np.log(p)).sum(axis=-1)


def example_stats(
    attn: "np.ndarray", tokens: list[str], *, cls_token: str = "[CLS]", sep_token: str = "[SEP]"
) -> dict[str, "np.ndarray"]:
    """Statistics of one example, each a ``[layers, heads]`` float64 array (NaN where undefined)."""
    import numpy as np

    a = np.asarray(attn, dtype=np.float64)
    L, H, n, _ = a.shape
    toks = np.asarray(tokens, dtype=object)
    is_cls = toks == cls_token
    is_sep = toks == sep_token
    is_punct = np.isin(toks, PUNCT_TOKENS)
    nan = np.full((L, H), np.nan)

    col_sep = a[..., is_sep].sum(axis=-1)  # [L, H, n]: attention of each row to [SEP] columns
    n_sep = int(is_sep.sum())
    out = {
        "cls": a[..., is_cls].sum(axis=(-1, -2)) / n,
        "sep": col_sep.sum(axis=-1) / n,
        "punct": a[..., is_punct].sum(axis=(-1, -2)) / n,
        "self": np.diagonal(a, offset=0, axis1=2, axis2=3).sum(axis=-1) / n,
        "next": np.diagonal(a, offset=1, axis1=2, axis2=3).sum(axis=-1) / n,
        "prev": np.diagonal(a, offset=-1, axis1=2, axis2=3).sum(axis=-1) / n,
        "sep_sep": col_sep[..., is_sep].sum(axis=-1) / n_sep if n_sep > 0 else nan,
        "rest_sep": col_sep[..., ~is_sep].sum(axis=-1) / (n - n_sep) if n_sep < n else nan,
    }
    ent = row_entropy(a)  # [L, H, n]
    out["entropy"] = ent.mean(axis=-1)
    cls_pos = np.flatnonzero(is_cls)
    out["cls_entropy"] = ent[..., cls_pos[0]] if cls_pos.size else nan
    out["max_attention"] = a.max(axis=-1).mean(axis=-1)
    return out


def compute_surface_stats(
    store: "AttentionStore", *, max_examples: int | None = None
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Per-head surface statistics over (the first ``max_examples``) examples of ``store``.

    Returns ``(frame, summary)``: ``frame`` has one row per head and columns :data:`COLUMNS`
    (``layer``/``head`` 1-indexed); ``summary`` holds ``n_examples``, ``uniform_entropy`` (mean of
    ``ln n``), ``mean_tokens`` and the counts of examples left out of the undefined columns.
    """
    import numpy as np
    import pandas as pd

    from bertlook.errors import BertlookError

    if max_examples is not None and max_examples < 0:
        raise BertlookError(f"max_examples must be >= 0, got {max_examples}")
    cls_token, sep_token = special_tokens(store)
    L, H = store.num_layers, store.num_heads
    sums = {c: np.zeros((L, H)) for c in STAT_COLUMNS}
    counts = {c: 0 for c in STAT_COLUMNS}
    n_examples = 0
    sum_log_n = 0.0
    sum_n = 0
    for rec, attn in store:
        if max_examples is not None and n_examples >= max_examples:
            break
        n = int(attn.shape[-1])
        ex_id = rec.get("id", n_examples)
        if n < 1:
            raise BertlookError(f"{store.path}: example {ex_id!r} has no tokens")
        a = np.asarray(attn, dtype=np.float64)
        if not np.isfinite(a).all():
            raise BertlookError(f"{store.path}: example {ex_id!r} has non-finite attention values")
        stats = example_stats(a, rec["tokens"], cls_token=cls_token, sep_token=sep_token)
        for c in STAT_COLUMNS:
            v = stats[c]
            if not np.isnan(v).any():
                sums[c] += v
                counts[c] += 1
        n_examples += 1
        sum_log_n += math.log(n)
        sum_n += n
    if n_examples == 0:
        raise BertlookError(f"{store.path}: no examples to compute statistics on")

    layer_idx, head_idx = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")
    data: dict[str, Any] = {"layer": layer_idx.ravel(), "head": head_idx.ravel()}
    for c in STAT_COLUMNS:
        data[c] = (sums[c] / counts[c]).ravel() if counts[c] else np.full(L * H, np.nan)
    frame = pd.DataFrame(data, columns=COLUMNS)
    summary: dict[str, Any] = {
        "n_examples": n_examples,
        "n_examples_in_store": len(store),
        "max_examples": max_examples,
        "uniform_entropy": sum_log_n / n_examples,
        "mean_tokens": sum_n / n_examples,
        "num_layers": L,
        "num_heads": H,
        "special_tokens": {"cls": cls_token, "sep": sep_token},
        "punct_tokens": list(PUNCT_TOKENS),
        "excluded_from_column": {
            "sep_sep (no [SEP] token)": n_examples - counts["sep_sep"],
            "rest_sep (only [SEP] tokens)": n_examples - counts["rest_sep"],
            "cls_entropy (no [CLS] token)": n_examples - counts["cls_entropy"],
        },
    }
    return frame, summary


def _run_stats(args: "argparse.Namespace") -> int:
    from bertlook.attention_store import open_store
    from bertlook.io_utils import write_csv, write_json

    store = open_store(args.attention)
    frame, summary = compute_surface_stats(store, max_examples=args.max_examples)
    summary = {"attention": str(args.attention), **summary}
    write_csv(args.out, frame)
    write_json(args.summary, summary)
    print(
        f"stats: {summary['n_examples']} of {summary['n_examples_in_store']} examples, "
        f"{len(frame)} heads -> {args.out}, {args.summary}"
    )
    for what, count in summary["excluded_from_column"].items():
        if count:
            print(f"stats: {count} example(s) left out of {what}")
    return 0


def register_cli(subparsers) -> None:
    """Add the ``stats`` subcommand."""
    p = subparsers.add_parser(
        "stats",
        help="per-head attention to [CLS]/[SEP]/punctuation/self/prev/next and entropies (Figs 2, 4)",
        description=(
            "Compute per-head surface statistics of an attention store. "
            "Input: --attention (attention store directory). "
            "Outputs: --out (CSV, one row per head: layer,head,cls,sep,punct,self,prev,next,"
            "sep_sep,rest_sep,entropy,cls_entropy) and --summary (JSON: n_examples, uniform_entropy, "
            "mean_tokens, counts of examples left out of a column)."
        ),
    )
    p.add_argument("--attention", required=True, metavar="DIR", help="input: attention store directory")
    p.add_argument("--out", required=True, metavar="CSV", help="output: per-head statistics (attention_stats.csv)")
    p.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON (summary.json)")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="use only the first N examples of the store (default: all)")
    p.set_defaults(func=_run_stats)
