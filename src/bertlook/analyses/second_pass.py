"""The second passes over a scored word store (Table 1's intervals and paired tests; numbers only).

:func:`score_heads <bertlook.analyses.heads.score_heads>` counts every head once per relation; Table 1 then
needs a few heads per sentence: :func:`sentence_correct` (the rows' heads, for the sentence bootstrap) and
:func:`paired_counts` (the discordant words of paired predictors), both from one :func:`second_pass` over the
same store under the same options.

Definitions: docs/definitions.md#head-accuracy, docs/definitions.md#paired-tests-of-table-1
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bertlook.analyses.heads import (ALL, HeadScores, baseline_predictions, check_word_store, parse_sentence,
                                     predict_heads, record_where)
from bertlook.attention.store import AttentionStore
from bertlook.errors import BertlookError


def sentence_correct(
    store: "AttentionStore", scores: HeadScores, selections: Sequence[tuple[str, int, int, int]]
) -> "np.ndarray":
    """Per-sentence correct counts ``[S, len(selections)]`` (int64) for a few heads.

    ``selections``: ``(relation or "All", layer, head, direction)``, 0-indexed layer/head, direction
    0 = dep2head, 1 = head2dep. Second pass over the same store (and options) ``scores`` came from;
    only the selected heads are evaluated.
    """
    return second_pass(store, scores, selections, [])[0]


def paired_counts(
    store: "AttentionStore", scores: HeadScores, comparisons: Sequence[tuple[str, tuple, tuple]]
) -> tuple["np.ndarray", "np.ndarray"]:
    """Discordant word counts per sentence of paired predictors: ``(b [S, P], c [S, P])`` int64.

    ``comparisons``: ``(relation or "All", A, B)`` with A and B each ``("head", layer, head,
    direction)`` (0-indexed) or ``("offset", k)`` (index into ``scores.offsets``). On the words of the
    relation, ``b`` counts the words A predicts correctly and B does not, ``c`` the reverse. Second pass
    over the same store (and options, candidate set included) ``scores`` came from.
    """
    _, b, c = second_pass(store, scores, [], comparisons)
    return b, c


def second_pass(
    store: "AttentionStore",
    scores: HeadScores,
    selections: Sequence[tuple[str, int, int, int]],
    comparisons: Sequence[tuple[str, tuple, tuple]],
) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """One second pass over the scored store for :func:`sentence_correct` (``[S, len(selections)]``) and
    :func:`paired_counts` (``b``, ``c``: ``[S, len(comparisons)]``) at once, evaluating only the heads they
    name: ``(correct [S, selection], b [S, comparison], c [S, comparison])`` (arguments as theirs)."""
    check_word_store(store)
    if (store.num_layers, store.num_heads) != (scores.num_layers, scores.num_heads) or len(store) < scores.n_sentences:
        raise BertlookError(f"{store.path}: does not match the scored store ({scores.store_path})")
    rel_index = {r: i for i, r in enumerate(scores.relations)}
    K = len(scores.offsets)

    def rel_code(r: str) -> int:
        return -1 if r == ALL else rel_index.get(r, -2)

    # every predictor as a row of one [predictor, word] table: heads (unique layer-head x direction)
    # first, then the K offsets
    heads_lh = sorted({(l, h) for _, l, h, _ in selections}
                      | {(p[1], p[2]) for _, *pair in comparisons for p in pair if p[0] == "head"})
    pos = {lh: u for u, lh in enumerate(heads_lh)}
    U = len(heads_lh)

    def row(p: tuple) -> int:
        if p[0] == "head":
            return 2 * pos[(p[1], p[2])] + int(p[3])
        if p[0] == "offset" and 0 <= int(p[1]) < K:
            return 2 * U + int(p[1])
        raise BertlookError(f"paired_counts: bad predictor {p!r}")

    sel_row = np.array([2 * pos[(l, h)] + d for _, l, h, d in selections], dtype=np.int64)  # [selection]
    sel_r = np.array([rel_code(r) for r, *_ in selections], dtype=np.int64)  # [selection]
    cmp_a = np.array([row(a) for _, a, _ in comparisons], dtype=np.int64)  # [comparison]
    cmp_b = np.array([row(b) for _, _, b in comparisons], dtype=np.int64)  # [comparison]
    cmp_r = np.array([rel_code(r) for r, *_ in comparisons], dtype=np.int64)  # [comparison]
    li = np.array([l for l, _ in heads_lh], dtype=np.int64)  # [unique_head]: layer
    hi = np.array([h for _, h in heads_lh], dtype=np.int64)  # [unique_head]: head
    S = scores.n_sentences
    out = np.zeros((S, len(selections)), dtype=np.int64)  # [sentence, selection]
    b_out = np.zeros((S, len(comparisons)), dtype=np.int64)  # [sentence, comparison]
    c_out = np.zeros((S, len(comparisons)), dtype=np.int64)  # [sentence, comparison]
    if not selections and not comparisons:
        return out, b_out, c_out
    for k in range(S):
        rec = store.records[k]
        if rec.get("id", k) != scores.sentence_ids[k]:
            raise BertlookError(
                f"{record_where(store, rec, k)}: does not match the scored store (expected sentence "
                f"{scores.sentence_ids[k]!r})"
            )
        try:
            sent = parse_sentence(store, rec, k, rel_index, scores.poss_from_possessive)
        except KeyError as err:
            raise BertlookError(f"{record_where(store, rec, k)}: relation {err} was not in the scored store") from None
        W = sent.n_words
        ok_all = np.zeros((2 * U + K, W), dtype=bool)  # [predictor, word]
        if U:
            attn = store.get(k)  # [layer, head, query_word, key_word]
            cand = ~sent.punct if scores.exclude_punct_candidates else None  # [word]
            # [unique_head, direction, word]
            pred = predict_heads(attn[li, hi], W, where=record_where(store, rec, k), candidates=cand)[..., sent.src]
            ok_all[: 2 * U] = ((pred == sent.gold) & (sent.gold > 0)).reshape(2 * U, W)  # [unique_head*dir, word]
        # [offset, word]
        ok_all[2 * U :] = (baseline_predictions(W, scores.offsets)[:, sent.src] == sent.gold) & (sent.gold > 0)
        if len(selections):
            in_rel = (sel_r[:, None] == -1) | (sent.rel[None, :] == sel_r[:, None])  # [selection, word]
            out[k] = (ok_all[sel_row] & in_rel).sum(axis=1)  # [selection]
        if len(comparisons):
            in_rel = (cmp_r[:, None] == -1) | (sent.rel[None, :] == cmp_r[:, None])  # [comparison, word]
            a_ok, b_ok = ok_all[cmp_a], ok_all[cmp_b]  # [comparison, word] each
            b_out[k] = (a_ok & ~b_ok & in_rel).sum(axis=1)  # [comparison]
            c_out[k] = (~a_ok & b_ok & in_rel).sum(axis=1)  # [comparison]
    return out, b_out, c_out
