"""How uniform the attention maps of a word-level store are: mean row entropy against ``ln(n)``, per layer.

A row of a map over ``n = W+2`` positions ([CLS] w1..wW [SEP]) has entropy at most ``ln(n)``, reached by
the uniform row; the ratio mean entropy / mean ``ln(n)`` is 1 for exactly uniform maps and near 0 for
one-hot rows (issue 14: how uniform are the random-init model's maps?). :func:`row_entropy_by_layer`.

Definitions: docs/definitions.md#control-probes-and-training-diagnostics-of-the-random-init-probe
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bertlook.analyses.token_roles import is_causal
from bertlook.attention.store import AttentionStore, open_store


def row_entropies(attn: np.ndarray) -> np.ndarray:
    """Entropy (natural log) of every row of ``attn`` ``[..., n, n]`` -> ``[..., n]``; ``0 ln 0 = 0``.

    Rows are taken as stored (no renormalisation; word-level rows sum to 1 up to float16 rounding).
    """
    p = np.asarray(attn, dtype=np.float64)  # [..., query_word, key_word]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1.0)), 0.0)  # [..., query_word, key_word]
    return terms.sum(-1)  # [..., query_word]


def row_entropy_by_layer(store: "AttentionStore | str | os.PathLike",
                         max_sentences: int | None = None) -> list[dict[str, Any]]:
    """Per layer of the word-level ``store`` (its first ``max_sentences`` sentences; default all): the
    mean row entropy over heads and rows (the W word rows and the [CLS] and [SEP] rows of every sentence,
    each row weighted equally), the mean ``ln(n)`` over the same rows (``n = W+2``, the row length) and

    * ``ratio`` = mean entropy / mean ``ln(n)`` (1: exactly uniform maps),
    * ``mean_row_ratio`` = the mean over rows of entropy / ``ln(n)``,
    * ``min_head_ratio`` / ``max_head_ratio``: the same ratio as ``ratio`` per head, its extremes.

    One dict per layer: ``layer`` (1-based), ``mean_entropy``, ``mean_ln_n``, ``ratio``, ``mean_row_ratio``,
    ``min_head_ratio``, ``max_head_ratio``, ``n_rows`` (rows per head), ``n_sentences``.
    """
    st = open_store(store, level="word", what="word-level attention store")
    L, H = st.num_layers, st.num_heads
    count = len(st.records) if max_sentences is None else min(len(st.records), max(0, int(max_sentences)))
    ent = np.zeros((L, H), dtype=np.float64)  # [layer, head]: summed row entropies
    row_ratio = np.zeros(L, dtype=np.float64)  # [layer]: summed entropy / ln(n), over heads and rows
    ln_n_sum = 0.0  # summed ln(n) over rows (the same for every head)
    n_rows = 0
    causal = is_causal(st.meta)
    ratio_rows = 0  # rows of mean_row_ratio (causal maps: all but row 0 of each sentence)
    for i in range(count):
        attn = st.get(i)  # [layer, head, query_word, key_word]
        n = attn.shape[-1]
        h = row_entropies(attn)  # [layer, head, query_word]
        ent += h.sum(-1)
        if causal:  # row i of a causal map sees i + 1 positions: its uniform entropy is ln(i + 1)
            ref = np.log(np.arange(1, n + 1, dtype=np.float64))  # [query_word]
            seen = ref > 0  # [query_word]: row 0 (the start token) sees itself alone
            row_ratio += (h[..., seen] / ref[seen]).sum((1, 2))
            ln_n_sum += float(ref.sum())
            n_rows += n
            ratio_rows += int(seen.sum())
            continue
        ln_n = float(np.log(n))
        if n > 1:
            row_ratio += h.sum((1, 2)) / ln_n
        ln_n_sum += n * ln_n
        n_rows += n
    out = []
    for layer in range(L):
        mean_ent = ent[layer].sum() / (H * n_rows) if n_rows else float("nan")
        mean_ln = ln_n_sum / n_rows if n_rows else float("nan")
        head_ratio = ent[layer] / ln_n_sum if ln_n_sum > 0 else np.full(H, np.nan)  # [head]
        out.append({
            "layer": layer + 1,
            "mean_entropy": float(mean_ent),
            "mean_ln_n": float(mean_ln),
            "ratio": float(mean_ent / mean_ln) if n_rows and mean_ln > 0 else float("nan"),
            "mean_row_ratio": (float(row_ratio[layer] / (H * (ratio_rows if causal else n_rows)))
                               if n_rows else float("nan")),
            "min_head_ratio": float(head_ratio.min()),
            "max_head_ratio": float(head_ratio.max()),
            "n_rows": int(n_rows),
            "n_sentences": int(count),
        })
    return out
