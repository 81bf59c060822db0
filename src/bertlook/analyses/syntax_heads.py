"""The numbers of the Fig 5 twin: the best head of a few relations, each on one sentence holding it
(the head's map, the relation's gold arcs in the head's direction, how many of them it predicts).

:func:`syntax_head_panels` reads a word-level store and the Table 1 twin
(:func:`bertlook.analyses.table1.table1`); :func:`bertlook.reporting.example_figures.fig5_syntax_heads` draws the
panels. Predictions as :func:`bertlook.analyses.heads.predict_heads`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.heads import DIRECTIONS, check_word_store, head_index_of_label, predict_heads
from bertlook.attention.store import AttentionStore, open_store
from bertlook.errors import BertlookError


@dataclass(frozen=True, eq=False)
class SyntaxHeadPanel:
    """One panel of the Fig 5 twin (:func:`syntax_head_panels`): the best head of ``relation`` on one
    sentence, or (``attn`` None) a ``message`` saying why nothing is drawn.

    ``example``: the sentence's index in the store, ``sentence_id`` its id, ``n_tokens`` its record's
    ``n``; ``layer``/``head`` 0-based, ``direction`` 0 = dep2head, 1 = head2dep; ``tokens``: the record's
    tokens ([CLS], words, [SEP]); ``attn [token, token]`` (float32): the head's map on the sentence;
    ``arcs``: ``(from_row, to_row)`` token rows of each gold arc of the relation, in the head's direction
    (dep2head: dependent -> head; head2dep: head -> dependent); ``n_correct``: those arcs whose word the
    head predicts right (:func:`bertlook.analyses.heads.predict_heads` on ``attn``)."""

    relation: str
    message: str = ""
    example: int = -1
    sentence_id: Any = None
    n_tokens: int = 0
    layer: int = 0
    head: int = 0
    direction: int = 0
    tokens: tuple = ()
    attn: "np.ndarray | None" = None
    arcs: tuple[tuple[int, int], ...] = ()
    n_correct: int = 0


def syntax_head_panels(
    dev_store_path: "AttentionStore | str | os.PathLike",
    table1_df: "pd.DataFrame",
    relations: Sequence[str],
    *,
    example_index: int | None = None,
) -> list[SyntaxHeadPanel]:
    """The numbers of the Fig 5 twin: per relation, its best head (``best_head`` / ``direction`` of its
    Table 1 row) on the first sentence of the word-level store holding the relation (or on
    ``example_index`` for every panel). A relation without a Table 1 row or without a sentence gets a
    panel with a message instead."""
    relations = list(relations)
    if not relations:
        raise BertlookError("fig5_syntax_heads: no relations given")
    store = open_store(dev_store_path)
    check_word_store(store)
    if example_index is not None and not 0 <= int(example_index) < len(store):
        raise BertlookError(
            f"{dev_store_path}: example index {example_index} out of range (the store holds {len(store)} examples)"
        )
    by_rel = {str(r): row for r, row in zip(table1_df["relation"], table1_df.to_dict("records"))}
    choices = [_panel_choice(store, rel, by_rel.get(rel), example_index) for rel in relations]
    return [SyntaxHeadPanel(relation=rel, message=choice) if isinstance(choice, str)
            else _syntax_head_panel(store, rel, *choice) for rel, choice in zip(relations, choices)]


def _panel_choice(store: "AttentionStore", rel: str, row: dict[str, Any] | None,
                  example_index: int | None) -> tuple[int, int, int, str] | str:
    """``(example, layer, head, direction)`` (0-based) of a relation's Fig 5 panel, or why it has none."""
    if row is None or not str(row.get("best_head", "")):
        n_rel = sum((rec.get("rels") or []).count(rel) for rec in store.records)
        why = "the relation does not occur in this corpus" if n_rel == 0 else f"{n_rel} words, below the minimum count"
        return f"no '{rel}' row in Table 1:\n{why}"
    if example_index is not None:
        k = int(example_index)
        if rel not in (store.records[k].get("rels") or []):
            return f"example {k} has no '{rel}' word"
    else:
        k = next((i for i, rec in enumerate(store.records) if rel in (rec.get("rels") or [])), None)
        if k is None:
            return f"no sentence of the store has a '{rel}' word"
    layer0, head0 = head_index_of_label(str(row["best_head"]))
    if layer0 >= store.num_layers or head0 >= store.num_heads:
        raise BertlookError(f"fig5: head {row['best_head']} is not in the {store.num_layers}x{store.num_heads} store")
    return k, layer0, head0, str(row["direction"])


def _syntax_head_panel(store: "AttentionStore", rel: str, k: int, layer0: int, head0: int,
                       direction: str) -> SyntaxHeadPanel:
    """The drawn panel of ``rel``: the head's map on sentence ``k``, the relation's gold arcs and how
    many of them the head predicts."""
    rec = store.records[k]
    tokens = tuple(rec["tokens"])
    W = len(tokens) - 2
    a = np.asarray(store.get(k)[layer0, head0], dtype=np.float32)  # [token, token]
    rels, heads = rec["rels"], rec["heads"]
    d = DIRECTIONS.index(direction) if direction in DIRECTIONS else 0
    deps = [i for i in range(W) if rels[i] == rel and int(heads[i]) > 0]
    pred = predict_heads(a[None, None], W)[0, 0, d]  # [word]
    n_ok = sum(int(pred[i] == heads[i]) for i in deps)
    arcs = []
    for i in deps:
        dep_row, head_row = i + 1, int(heads[i])
        arcs.append((dep_row, head_row) if d == 0 else (head_row, dep_row))
    return SyntaxHeadPanel(relation=rel, example=k, sentence_id=rec.get("id", k), n_tokens=int(rec["n"]),
                           layer=layer0, head=head0, direction=d, tokens=tokens, attn=a, arcs=tuple(arcs),
                           n_correct=n_ok)
