"""Accuracy of single attention heads at dependency syntax (paper Table 1; numbers only).

Scores every head's ``dep2head`` / ``head2dep`` argmax predictions on a word-level store against gold
trees, with fixed-offset baselines and sentence-bootstrap intervals: :func:`predict_heads`,
:func:`score_heads`, :func:`head_accuracy_table`, :func:`table1`, :func:`bootstrap_ci`,
:func:`sentence_correct` (the Fig 5 twin is drawn by :func:`bertlook.reporting.figures.fig5_syntax_heads`).

Definitions: docs/definitions.md#head-accuracy
"""

from __future__ import annotations

import collections
import numbers
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from bertlook.attention.store import AttentionStore, open_store
from bertlook.errors import BertlookError
from bertlook.naming import head_label, parse_head_label

DIRECTIONS = ("dep2head", "head2dep")
DIRECTION_ARROWS = {"dep2head": "d\u2192h", "head2dep": "h\u2192d"}
DEFAULT_OFFSETS = (-3, -2, -1, 1, 2, 3)
ALL = "All"
#: never a Table 1 row (root: ROOT is never predicted; punctuation as in the paper; PTB "P").
SKIP_RELATIONS = ("root", "ROOT", "punct", "P")
#: rows the design card requires whenever the corpus has the relation (even below min_count).
FORCED_RELATIONS = ("dobj", "det", "pobj")
#: The design card's rows (direct objects, determiners, prepositional objects) in each relation scheme.
#: In UD the object of a preposition is not a relation of its own: the preposition is a `case`
#: dependent of its noun, so the paper's pobj attention (preposition -> noun) is UD `case`, dep2head.
FORCED_BY_SCHEME = {"sd": FORCED_RELATIONS, "clearnlp": FORCED_RELATIONS, "ud": ("obj", "det", "case")}
POSS_RELATIONS = ("poss", "nmod:poss")
POSSESSIVE_TOKENS = ("'s", "'", "s'", "\u2019s", "\u2019", "s\u2019")
POSSESSIVE_XPOS = "POS"
_F16_MAX_BITS = 0x7BFF  # largest finite positive float16 (65504) as an unsigned bit pattern

ACCURACY_COLUMNS = ["relation", "layer", "head", "direction", "accuracy", "count"]
TABLE1_COLUMNS = [
    "relation", "best_head", "direction", "accuracy", "ci_low", "ci_high",
    "baseline_offset", "baseline_accuracy", "baseline_ci_low", "baseline_ci_high", "count", "below_min_count",
]
HELDOUT_COLUMNS = ["heldout_head", "heldout_direction", "heldout_accuracy"]

#: --treebank-kind -> (relation scheme of paper_reference, words for the markdown note)
TREEBANK_KINDS = {
    "ptb_sd": ("sd", "gold trees (Penn Treebank WSJ, Stanford Dependencies)"),
    "ud": ("ud", "gold trees (Universal Dependencies)"),
    "silver": ("clearnlp", "silver trees (predicted by a parser, not gold)"),
}


# --------------------------------------------------------------------------------------------------
# scores
# --------------------------------------------------------------------------------------------------


@dataclass
class HeadScores:
    """Correct counts of every head and baseline per relation, from :func:`score_heads`.

    Arrays (int64 unless noted); ``R = len(relations)``, ``K = len(offsets)``:

    - ``word_counts[R]``: words per relation;
    - ``correct[R, L, H, 2]``: words predicted correctly by each head, direction 0 = dep2head,
      1 = head2dep (0-indexed layer/head);
    - ``baseline_correct[R, K]``: the same for the fixed-offset baselines;
    - ``sentence_counts[S, R]`` (int32) and ``sentence_baseline_correct[S, R, K]`` (int32): per-sentence
      versions, for the bootstrap (None when ``keep_sentences=False``).
    """

    relations: list[str]
    num_layers: int
    num_heads: int
    offsets: tuple[int, ...]
    word_counts: "np.ndarray"
    correct: "np.ndarray"
    baseline_correct: "np.ndarray"
    n_sentences: int
    sentence_ids: list[Any]
    sentence_counts: "np.ndarray | None"
    sentence_baseline_correct: "np.ndarray | None"
    poss_from_possessive: bool
    n_poss: int
    n_poss_affected: int
    store_path: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_words(self) -> int:
        return int(self.word_counts.sum())

    def relation_index(self, relation: str) -> int | None:
        try:
            return self.relations.index(relation)
        except ValueError:
            return None

    def counts_for(self, relation: str) -> tuple["np.ndarray", int, "np.ndarray"]:
        """``(correct[L, H, 2], count, baseline_correct[K])`` of a relation or of ``"All"``."""
        if relation == ALL:
            # [layer, head, direction], int, [offset]
            return self.correct.sum(axis=0), self.n_words, self.baseline_correct.sum(axis=0)
        r = self.relation_index(relation)
        if r is None:
            raise KeyError(relation)
        # [layer, head, direction], int, [offset]
        return self.correct[r], int(self.word_counts[r]), self.baseline_correct[r]


@dataclass
class _Sentence:
    n_words: int
    gold: "np.ndarray"  # [word]; 1-based head, 0 = ROOT
    rel: "np.ndarray"  # [word]; relation index
    src: "np.ndarray"  # [word]; 0-based word whose prediction is used (poss switch)
    n_poss: int
    n_affected: int


def _where(store: "AttentionStore", rec: dict[str, Any], k: int) -> str:
    return f"{store.path}: sentence {rec.get('id', k)!r} (example {k})"


def _check_word_store(store: "AttentionStore") -> None:
    open_store(store, level="word")


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _parse_sentence(
    store: "AttentionStore", rec: dict[str, Any], k: int, rel_index: dict[str, int], poss_switch: bool
) -> _Sentence:
    where = _where(store, rec, k)
    n = int(rec.get("n", len(rec.get("tokens", []))))
    W = n - 2
    if W < 1:
        raise BertlookError(f"{where}: no words (a word-level map needs [CLS], at least one word, [SEP])")
    heads, rels = rec.get("heads"), rec.get("rels")
    if not isinstance(heads, list) or not isinstance(rels, list):
        raise BertlookError(f"{where}: record lacks the gold tree (`heads` and `rels` lists)")
    if len(heads) != W or len(rels) != W:
        raise BertlookError(f"{where}: {len(heads)} heads and {len(rels)} relations for {W} words")
    for i, h in enumerate(heads):
        if not _is_int(h) or not 0 <= h <= W or h == i + 1:
            raise BertlookError(f"{where}: word {i + 1}: bad head {h!r} (expected 0..{W}, not the word itself)")
    for i, r in enumerate(rels):
        if not isinstance(r, str) or not r:
            raise BertlookError(f"{where}: word {i + 1}: bad relation {r!r}")
    xpos = rec.get("xpos")
    if xpos is not None and (not isinstance(xpos, list) or len(xpos) != W):
        raise BertlookError(f"{where}: `xpos` must be a list of {W} tags")
    tokens = rec.get("tokens") or []
    src = np.arange(W, dtype=np.int64)  # [word]
    n_poss = n_affected = 0
    for i in range(W):
        if rels[i] not in POSS_RELATIONS:
            continue
        n_poss += 1
        if i + 1 >= W:
            continue
        nxt_tok = str(tokens[i + 2]).lower() if len(tokens) == n else ""
        if (xpos is not None and xpos[i + 1] == POSSESSIVE_XPOS) or nxt_tok in POSSESSIVE_TOKENS:
            n_affected += 1
            if poss_switch:
                src[i] = i + 1
    return _Sentence(
        n_words=W,
        gold=np.asarray(heads, dtype=np.int64),  # [word]
        rel=np.fromiter((rel_index[r] for r in rels), dtype=np.int64, count=W),  # [word]
        src=src,
        n_poss=n_poss,
        n_affected=n_affected if poss_switch else 0,
    )


def predict_heads(attn: "np.ndarray", n_words: int, *, where: str = "attention") -> "np.ndarray":
    """Predicted head word of every word for every head: ``[..., 2, W]`` int64, 1-based word index.

    ``attn`` is a word-level map ``[..., W+2, W+2]`` (any leading axes, e.g. ``[L, H]``). Index 0 of
    axis -2 is dep2head (argmax over the row), 1 is head2dep (argmax over the column). The word itself
    and [CLS]/[SEP] are never predicted (only the word block ``1..W`` is searched, with the diagonal
    at -inf). A one-word sentence has no candidate: its prediction is 0 (never correct).
    """
    W = int(n_words)
    block = np.asarray(attn)[..., 1 : W + 1, 1 : W + 1]  # [..., word, word] (query, key)
    if block.dtype == np.float16:
        # Stored maps are float16 and attention is >= 0: the bit patterns of non-negative float16
        # values, read as integers, sort exactly like the values (equal values <-> equal bits), so the
        # argmax runs on int32 without a float conversion (2x faster). -0.0 (0x8000) is read as 0.
        a = block.view(np.uint16).astype(np.int32)  # [..., word, word]; copy: the store is read-only
        if a.size and int(a.max()) > _F16_MAX_BITS:
            a[a == 0x8000] = 0
            if int(a.max()) > _F16_MAX_BITS:
                raise BertlookError(f"{where}: non-finite or negative attention values")
        mask = -1
    else:
        a = np.array(block, dtype=np.float32)  # [..., word, word]
        if not np.isfinite(a).all():
            raise BertlookError(f"{where}: non-finite attention values")
        mask = -np.inf
    lead = a.shape[:-2]
    a.reshape(*lead, W * W)[..., :: W + 1] = mask  # [..., word*word] view: diagonal masked
    pred = np.empty((*lead, 2, W), dtype=np.int64)  # [..., direction, word]
    pred[..., 0, :] = a.argmax(axis=-1)  # [..., word]: dep2head, argmax over keys
    pred[..., 1, :] = a.argmax(axis=-2)  # [..., word]: head2dep, argmax over queries
    pred += 1
    if W == 1:
        pred[...] = 0
    return pred


def _baseline_predictions(W: int, offsets: Sequence[int]) -> "np.ndarray":
    pos = np.arange(1, W + 1, dtype=np.int64)  # [word]
    return np.clip(pos[None, :] + np.asarray(offsets, dtype=np.int64)[:, None], 1, W)  # [offset, word]


def _relation_vocabulary(store: "AttentionStore", records: list[dict[str, Any]]) -> list[str]:
    counts: collections.Counter = collections.Counter()
    for k, rec in enumerate(records):
        rels = rec.get("rels")
        if not isinstance(rels, list):
            raise BertlookError(f"{_where(store, rec, k)}: record lacks the gold tree (`heads` and `rels` lists)")
        counts.update(str(r) if isinstance(r, str) else repr(r) for r in rels)
    return sorted(counts, key=lambda r: (-counts[r], r))


def _parse_offsets(offsets: Iterable[int]) -> tuple[int, ...]:
    try:
        out = tuple(int(k) for k in offsets)
    except (TypeError, ValueError):
        raise BertlookError(f"offsets must be integers, got {offsets!r}") from None
    if not out or 0 in out or len(set(out)) != len(out):
        raise BertlookError(f"offsets must be distinct non-zero integers, got {list(out)}")
    return out


def score_heads(
    store: "AttentionStore",
    *,
    offsets: Sequence[int] = DEFAULT_OFFSETS,
    poss_from_possessive: bool = True,
    max_examples: int | None = None,
    keep_sentences: bool = True,
) -> HeadScores:
    """Count correct predictions of every head (both directions) and every offset baseline.

    One pass over the (first ``max_examples``) sentences of a word-level store, one example in memory
    at a time. ``keep_sentences=False`` skips the per-sentence arrays (not needed for a train store).
    """
    _check_word_store(store)
    offsets = _parse_offsets(offsets)
    if max_examples is not None and max_examples < 0:
        raise BertlookError(f"max_examples must be >= 0, got {max_examples}")
    records = store.records if max_examples is None else store.records[:max_examples]
    if not records:
        raise BertlookError(f"{store.path}: no sentences to score")
    relations = _relation_vocabulary(store, records)
    rel_index = {r: i for i, r in enumerate(relations)}
    L, H, R, K, S = store.num_layers, store.num_heads, len(relations), len(offsets), len(records)
    correct = np.zeros((R, L * H * 2), dtype=np.int64)  # [relation, layer*head*direction]
    base_correct = np.zeros((R, K), dtype=np.int64)  # [relation, offset]
    word_counts = np.zeros(R, dtype=np.int64)  # [relation]
    sent_counts = np.zeros((S, R), dtype=np.int32) if keep_sentences else None  # [sentence, relation]
    sent_base = np.zeros((S, R, K), dtype=np.int32) if keep_sentences else None  # [sentence, relation, offset]
    n_poss = n_affected = 0
    for k, rec in enumerate(records):
        sent = _parse_sentence(store, rec, k, rel_index, poss_from_possessive)
        W, gold, rel, src = sent.n_words, sent.gold, sent.rel, sent.src
        n_poss += sent.n_poss
        n_affected += sent.n_affected
        attn = store.get(k)  # [layer, head, query_word, key_word]
        pred = predict_heads(attn, W, where=_where(store, rec, k))[..., src]  # [layer, head, direction, word]
        ok = (pred == gold) & (gold > 0)  # [layer, head, direction, word]
        # sum the correct words of each relation: a [W, R] one-hot matmul (exact: counts <= W < 2**24)
        onehot = np.zeros((W, R), dtype=np.float32)  # [word, relation]
        onehot[np.arange(W), rel] = 1.0
        # [relation, layer*head*direction]
        correct += (ok.reshape(L * H * 2, W).astype(np.float32) @ onehot).T.astype(np.int64)
        base_ok = (_baseline_predictions(W, offsets)[:, src] == gold) & (gold > 0)  # [offset, word]
        row_base = (base_ok.astype(np.float32) @ onehot).T.astype(np.int64)  # [relation, offset]
        base_correct += row_base
        row_counts = np.bincount(rel, minlength=R)  # [relation]
        word_counts += row_counts
        if keep_sentences:
            sent_counts[k] = row_counts
            sent_base[k] = row_base
    return HeadScores(
        relations=relations,
        num_layers=L,
        num_heads=H,
        offsets=offsets,
        word_counts=word_counts,
        correct=correct.reshape(R, L, H, 2),  # [relation, layer, head, direction]
        baseline_correct=base_correct,
        n_sentences=S,
        sentence_ids=[rec.get("id", k) for k, rec in enumerate(records)],
        sentence_counts=sent_counts,
        sentence_baseline_correct=sent_base,
        poss_from_possessive=bool(poss_from_possessive),
        n_poss=n_poss,
        n_poss_affected=n_affected,
        store_path=str(store.path),
        meta={"level": "word", "excluded": store.meta.get("excluded") or {}},
    )


def sentence_correct(
    store: "AttentionStore", scores: HeadScores, selections: Sequence[tuple[str, int, int, int]]
) -> "np.ndarray":
    """Per-sentence correct counts ``[S, len(selections)]`` (int64) for a few heads.

    ``selections``: ``(relation or "All", layer, head, direction)``, 0-indexed layer/head, direction
    0 = dep2head, 1 = head2dep. Second pass over the same store (and options) ``scores`` came from;
    only the selected heads are evaluated.
    """
    _check_word_store(store)
    if (store.num_layers, store.num_heads) != (scores.num_layers, scores.num_heads) or len(store) < scores.n_sentences:
        raise BertlookError(f"{store.path}: does not match the scored store ({scores.store_path})")
    rel_index = {r: i for i, r in enumerate(scores.relations)}
    uniq = sorted({(l, h) for _, l, h, _ in selections})
    pos = {lh: u for u, lh in enumerate(uniq)}
    li = np.array([l for l, _ in uniq], dtype=np.int64)  # [unique_head]: layer
    hi = np.array([h for _, h in uniq], dtype=np.int64)  # [unique_head]: head
    sel_u = np.array([pos[(l, h)] for _, l, h, _ in selections], dtype=np.int64)  # [selection]
    sel_d = np.array([d for *_, d in selections], dtype=np.int64)  # [selection]
    sel_r = np.array([-1 if r == ALL else rel_index.get(r, -2) for r, *_ in selections], dtype=np.int64)  # [selection]
    out = np.zeros((scores.n_sentences, len(selections)), dtype=np.int64)  # [sentence, selection]
    if not selections:
        return out
    for k in range(scores.n_sentences):
        rec = store.records[k]
        if rec.get("id", k) != scores.sentence_ids[k]:
            raise BertlookError(
                f"{_where(store, rec, k)}: does not match the scored store (expected sentence "
                f"{scores.sentence_ids[k]!r})"
            )
        try:
            sent = _parse_sentence(store, rec, k, rel_index, scores.poss_from_possessive)
        except KeyError as err:
            raise BertlookError(f"{_where(store, rec, k)}: relation {err} was not in the scored store") from None
        attn = store.get(k)  # [layer, head, query_word, key_word]
        # [unique_head, direction, word]
        pred = predict_heads(attn[li, hi], sent.n_words, where=_where(store, rec, k))[..., sent.src]
        ok = (pred == sent.gold) & (sent.gold > 0)  # [unique_head, direction, word]
        chosen = ok[sel_u, sel_d]  # [selection, word]
        in_rel = (sel_r[:, None] == -1) | (sent.rel[None, :] == sel_r[:, None])  # [selection, word]
        out[k] = (chosen & in_rel).sum(axis=1)  # [selection]
    return out


# --------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------


def _parse_label(label: str) -> tuple[int, int]:
    layer, head = parse_head_label(label)
    return layer - 1, head - 1


def head_accuracy_table(scores: HeadScores) -> "pd.DataFrame":
    """Every head, every relation ("All" first, then by frequency), both directions.

    Columns ``relation, layer, head, direction, accuracy, count``: layer/head 1-indexed, accuracy a
    fraction (0..1), count = words of the relation.
    """
    L, H = scores.num_layers, scores.num_heads
    names = [ALL, *scores.relations]
    # [relation, layer, head, direction]; relation 0 = All
    corr = np.concatenate([scores.correct.sum(axis=0)[None], scores.correct], axis=0)
    counts = np.concatenate([[scores.n_words], scores.word_counts]).astype(np.int64)  # [relation]; relation 0 = All
    R1 = len(names)
    # [relation, layer, head, direction] each
    rel_i, lay, hd, d = np.meshgrid(np.arange(R1), np.arange(L), np.arange(H), np.arange(2), indexing="ij")
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = corr / counts[:, None, None, None]  # [relation, layer, head, direction]
    return pd.DataFrame(
        {
            "relation": np.asarray(names, dtype=object)[rel_i.ravel()],
            "layer": lay.ravel() + 1,
            "head": hd.ravel() + 1,
            "direction": np.asarray(DIRECTIONS, dtype=object)[d.ravel()],
            "accuracy": acc.ravel().astype(np.float64),  # [relation*layer*head*direction]
            "count": counts[rel_i.ravel()],  # [relation*layer*head*direction]
        },
        columns=ACCURACY_COLUMNS,
    )


def _best(correct_lh2: "np.ndarray") -> tuple[int, int, int]:
    """(layer, head, direction) of the highest count; ties: lowest layer, head, dep2head first."""
    flat = int(np.argmax(correct_lh2.reshape(-1)))
    return tuple(int(v) for v in np.unravel_index(flat, correct_lh2.shape))  # type: ignore[return-value]


def table1_relations(
    scores: HeadScores, min_count: int = 100, forced: Sequence[str] = FORCED_RELATIONS
) -> list[tuple[str, bool]]:
    """Rows of Table 1 as ``(relation, below_min_count)``: "All", then relations by frequency.

    Relations with at least ``min_count`` words, skipping :data:`SKIP_RELATIONS`; the ``forced``
    relations (the design card's rows, :data:`FORCED_BY_SCHEME`) present in the corpus are always
    included (flagged when below).
    """
    rows = [(ALL, False)]
    for r, c in zip(scores.relations, scores.word_counts):  # already by frequency
        if r in SKIP_RELATIONS or c == 0:
            continue
        if c >= min_count:
            rows.append((r, False))
        elif r in forced:
            rows.append((r, True))
    return rows


def bootstrap_ci(
    numerators: "np.ndarray",
    denominators: "np.ndarray",
    *,
    replicates: int,
    confidence: float = 0.95,
    seed: int = 0,
    chunk: int = 200,
) -> tuple["np.ndarray", "np.ndarray"]:
    """Percentile bootstrap interval of ratios ``sum(num) / sum(den)``, resampling rows (sentences).

    ``numerators [S, M]``, ``denominators [S, M]`` -> ``(low [M], high [M])``. Each replicate draws S
    sentences with replacement (multinomial weights from ``default_rng(seed)``); all M statistics
    share the same replicates. A replicate whose denominator is 0 is ignored for that statistic;
    NaN when no replicate has a value or ``replicates == 0``.
    """
    num = np.asarray(numerators, dtype=np.float64)  # [sentence, statistic]
    den = np.asarray(denominators, dtype=np.float64)  # [sentence, statistic]
    S, M = num.shape
    if not 0 < confidence < 1:
        raise BertlookError(f"confidence must be in (0, 1), got {confidence}")
    if replicates <= 0 or S == 0 or M == 0:
        return np.full(M, np.nan), np.full(M, np.nan)  # [statistic] each
    rng = np.random.default_rng(seed)
    stats = np.empty((replicates, M), dtype=np.float64)  # [replicate, statistic]
    p = np.full(S, 1.0 / S)  # [sentence]
    for start in range(0, replicates, chunk):
        b = min(chunk, replicates - start)
        w = rng.multinomial(S, p, size=b).astype(np.float64)  # [replicate, sentence]: times each sentence is drawn
        with np.errstate(invalid="ignore", divide="ignore"):
            stats[start : start + b] = (w @ num) / (w @ den)  # [replicate, statistic]
    alpha = (1.0 - confidence) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        low, high = np.nanpercentile(stats, [100 * alpha, 100 * (1 - alpha)], axis=0)  # [statistic] each
    return low, high


def table1(
    dev_scores: HeadScores,
    *,
    min_count: int = 100,
    train_scores: HeadScores | None = None,
    dev_store: "AttentionStore | str | os.PathLike | None" = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    forced_relations: Sequence[str] = FORCED_RELATIONS,
) -> "pd.DataFrame":
    """Twin of the paper's Table 1 (definitions: docs/definitions.md#head-accuracy).

    Columns :data:`TABLE1_COLUMNS` (accuracies are fractions 0..1; ``best_head`` 1-indexed "L-H"),
    then :data:`HELDOUT_COLUMNS` when ``train_scores`` is given (head chosen on train, accuracy on
    dev). The paper's numbers are joined by :func:`bertlook.reporting.paper_join.join_table1`. The
    head CIs need a second pass over the dev
    store: ``dev_store`` (store or path), default the store ``dev_scores`` was computed from.
    """
    if min_count < 0:
        raise BertlookError(f"min_count must be >= 0, got {min_count}")
    if bootstrap < 0:
        raise BertlookError(f"bootstrap must be >= 0, got {bootstrap}")
    rows = table1_relations(dev_scores, min_count, forced_relations)
    out: list[dict[str, Any]] = []
    selections = []
    for rel, below in rows:
        corr, count, base = dev_scores.counts_for(rel)  # [layer, head, direction], int, [offset]
        l, h, d = _best(corr)
        k = int(np.argmax(base))
        out.append({
            "relation": rel,
            "best_head": head_label(l, h),
            "direction": DIRECTIONS[d],
            "accuracy": corr[l, h, d] / count,
            "ci_low": np.nan,
            "ci_high": np.nan,
            "baseline_offset": int(dev_scores.offsets[k]),
            "baseline_accuracy": base[k] / count,
            "baseline_ci_low": np.nan,
            "baseline_ci_high": np.nan,
            "count": int(count),
            "below_min_count": bool(below),
        })
        selections.append((rel, l, h, d, k))

    if bootstrap > 0:
        # [sentence, relation], [sentence, relation, offset]
        sc, sb = dev_scores.sentence_counts, dev_scores.sentence_baseline_correct
        if sc is None or sb is None:
            raise BertlookError("table1: bootstrap needs dev scores computed with keep_sentences=True")
        dens, base_nums = [], []
        for rel, *_, k in selections:
            r = dev_scores.relation_index(rel) if rel != ALL else None
            dens.append(sc.sum(axis=1) if r is None else sc[:, r])  # [sentence]
            base_nums.append(sb[:, :, k].sum(axis=1) if r is None else sb[:, r, k])  # [sentence]
        den = np.stack(dens, axis=1)  # [sentence, selection]
        store_ref = dev_store if dev_store is not None else dev_scores.store_path
        if store_ref is not None:
            # [sentence, selection]
            head_nums = sentence_correct(open_store(store_ref, level="word"), dev_scores, [s[:4] for s in selections])
        else:
            head_nums = np.full_like(den, np.nan, dtype=np.float64)  # [sentence, selection]
        low, high = bootstrap_ci(  # [2*selection] each: heads, then baselines
            np.concatenate([head_nums, np.stack(base_nums, axis=1)], axis=1),  # [sentence, 2*selection]
            np.concatenate([den, den], axis=1),  # [sentence, 2*selection]
            replicates=bootstrap, confidence=confidence, seed=seed,
        )
        n = len(selections)
        for i, row in enumerate(out):
            row["ci_low"], row["ci_high"] = float(low[i]), float(high[i])
            row["baseline_ci_low"], row["baseline_ci_high"] = float(low[n + i]), float(high[n + i])

    columns = list(TABLE1_COLUMNS)
    if train_scores is not None:
        if (train_scores.num_layers, train_scores.num_heads) != (dev_scores.num_layers, dev_scores.num_heads):
            raise BertlookError(
                f"train scores ({train_scores.store_path}) have {train_scores.num_layers}x{train_scores.num_heads} "
                f"heads, dev scores ({dev_scores.store_path}) {dev_scores.num_layers}x{dev_scores.num_heads}"
            )
        columns += HELDOUT_COLUMNS
        for row in out:
            rel = row["relation"]
            row.update(heldout_head="", heldout_direction="", heldout_accuracy=np.nan)
            if rel != ALL and (train_scores.relation_index(rel) is None or
                               train_scores.word_counts[train_scores.relation_index(rel)] == 0):
                continue  # relation absent from train: no held-out choice
            tl, th, td = _best(train_scores.counts_for(rel)[0])
            corr, count, _ = dev_scores.counts_for(rel)  # [layer, head, direction], int, [offset]
            row.update(heldout_head=head_label(tl, th), heldout_direction=DIRECTIONS[td],
                       heldout_accuracy=corr[tl, th, td] / count)

    df = pd.DataFrame(out, columns=columns)
    df["baseline_offset"] = df["baseline_offset"].astype("int64")
    df["count"] = df["count"].astype("int64")
    return df


def resolve_tree_source(store: "AttentionStore", kind: str | None, name: str | None,
                        where: Any) -> tuple[str, str | None, str]:
    """``(kind, name, relation scheme)`` of a word store's trees: the given ``kind`` / ``name`` (the
    CLI's --treebank-kind / --treebank-name), else the store meta's; an unknown kind is an error."""
    kind = kind or store.meta.get("treebank_kind")
    if kind not in TREEBANK_KINDS:
        raise BertlookError(
            f"{where}: tree source unknown: pass --treebank-kind "
            f"({'|'.join(sorted(TREEBANK_KINDS))}) (store meta 'treebank_kind' is {kind!r})"
        )
    name = name or store.meta.get("treebank_name") or None
    return kind, name, TREEBANK_KINDS[kind][0]


def relation_rows_summary(scores: HeadScores, table: "pd.DataFrame") -> dict[str, Any]:
    """The summary entries on which relations became Table 1 rows: word counts per relation, the rows
    (and those below min_count), the skipped relations and those left out below min_count."""
    counts = {r: int(c) for r, c in zip(scores.relations, scores.word_counts)}
    shown = set(table["relation"])
    return {
        "relation_counts": counts,
        "rows": list(table["relation"]),
        "rows_below_min_count": [r for r, b in zip(table["relation"], table["below_min_count"]) if b],
        "skipped_relations": {r: c for r, c in counts.items() if r in SKIP_RELATIONS},
        "relations_below_min_count": {r: c for r, c in counts.items() if r not in shown and r not in SKIP_RELATIONS},
    }
