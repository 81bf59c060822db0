"""Accuracy of single attention heads at dependency syntax (paper Table 1; numbers only).

Scores every head's ``dep2head`` / ``head2dep`` argmax predictions on a word-level store against gold
trees, with fixed-offset baselines and sentence-bootstrap intervals: :func:`predict_heads`,
:func:`score_heads`, :func:`head_accuracy_table`, :func:`table1`, :func:`bootstrap_ci`,
:func:`sentence_correct` (the Fig 5 twin is drawn by :func:`bertlook.reporting.figures.fig5_syntax_heads`).
Beyond the paper: paired tests of the best head against the best offset baseline and the runner-up head
(:func:`paired_counts`, :func:`mcnemar_exact`, :func:`holm`), a 2-fold cross-fitted head choice
(:func:`crossfit_folds`) and punctuation excluded from the candidate heads (:func:`punctuation_mask`).

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
#: head_accuracy.csv's last column: words whose correctness rests on a float16 near-tie (the regression gate)
FRAGILE_COLUMN = "fragile"
TABLE1_COLUMNS = [
    "relation", "best_head", "direction", "accuracy", "ci_low", "ci_high",
    "baseline_offset", "baseline_accuracy", "baseline_ci_low", "baseline_ci_high", "count", "below_min_count",
]
HELDOUT_COLUMNS = ["heldout_head", "heldout_direction", "heldout_accuracy"]
#: beyond the paper, after the paper's columns (docs/definitions.md#cross-fitted-head-choice)
CROSSFIT_COLUMNS = ["crossfit_head_a", "crossfit_direction_a", "crossfit_head_b", "crossfit_direction_b",
                    "crossfit_accuracy"]
#: paired tests (docs/definitions.md#paired-tests-of-table-1): vs the row's best offset baseline and
#: vs the runner-up head (the best (head, direction) of another layer-head)
PAIRED_FAMILIES = ("vs_baseline", "vs_runner_up")
PAIRED_STAT_SUFFIXES = ("b", "c", "diff", "diff_ci_low", "diff_ci_high", "p", "p_holm", "significant")
PAIRED_COLUMNS = ["runner_up_head", "runner_up_direction", "runner_up_accuracy",
                  *(f"{fam}_{suf}" for fam in PAIRED_FAMILIES for suf in PAIRED_STAT_SUFFIXES)]
#: the best head when punctuation is not a candidate (docs/definitions.md#candidate-sets-punctuation)
NOPUNCT_COLUMNS = ["nopunct_head", "nopunct_direction", "nopunct_accuracy", "nopunct_delta", "gold_head_punct"]
#: relations and UPOS that make a word punctuation (never a candidate with exclude_punct_candidates)
PUNCT_RELATIONS = ("punct", "P")
PUNCT_UPOS = "PUNCT"
DEFAULT_ALPHA = 0.05

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
      versions, for the bootstrap (None when ``keep_sentences=False``);
    - ``exclude_punct_candidates``: the candidate set of ``correct`` (punctuation never predicted when
      True); ``correct_alt[R, L, H, 2]``: the same counts with the other candidate set (None unless
      ``compare_punct_candidates``); ``punct_words[R]``: punctuation words per relation;
      ``punct_gold_head[R]``: words whose gold head is a punctuation word (never correct without
      punctuation candidates);
    - ``fold_of[S]`` (int8, 0 = fold A, 1 = fold B), ``fold_correct[2, R, L, H, 2]``,
      ``fold_word_counts[2, R]``: the cross-fitting folds and per-fold counts (None unless
      ``crossfit_seed`` is given);
    - ``fragile[R, L, H, 2]`` (``fold_fragile[2, R, L, H, 2]``): words whose correctness rests on a float16
      near-tie (:func:`fragile_decisions`), what the regression gate's word tolerances count.
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
    exclude_punct_candidates: bool = False
    correct_alt: "np.ndarray | None" = None
    punct_words: "np.ndarray | None" = None
    punct_gold_head: "np.ndarray | None" = None
    fold_of: "np.ndarray | None" = None
    fold_correct: "np.ndarray | None" = None
    fold_word_counts: "np.ndarray | None" = None
    crossfit_seed: int | None = None
    fragile: "np.ndarray | None" = None
    fold_fragile: "np.ndarray | None" = None

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

    def fragile_for(self, relation: str, fold: int | None = None) -> "np.ndarray":
        """``fragile[L, H, 2]`` of a relation (or "All"), on one cross-fitting fold with ``fold``; zeros when
        the scores did not count them."""
        arr = self.fragile if fold is None else (None if self.fold_fragile is None else self.fold_fragile[fold])
        if arr is None:
            return np.zeros((self.num_layers, self.num_heads, 2), dtype=np.int64)
        if relation == ALL:
            return arr.sum(axis=0)  # [layer, head, direction]
        r = self.relation_index(relation)
        if r is None:
            raise KeyError(relation)
        return arr[r]  # [layer, head, direction]

    def candidate_counts(self, relation: str, exclude_punct: bool) -> "np.ndarray | None":
        """``correct[L, H, 2]`` of a relation (or "All") with punctuation candidates excluded or not;
        None when that candidate set was not counted."""
        arr = self.correct if exclude_punct == self.exclude_punct_candidates else self.correct_alt
        if arr is None:
            return None
        if relation == ALL:
            return arr.sum(axis=0)  # [layer, head, direction]
        r = self.relation_index(relation)
        if r is None:
            raise KeyError(relation)
        return arr[r]  # [layer, head, direction]

    def fold_counts_for(self, relation: str, fold: int) -> tuple["np.ndarray", int]:
        """``(correct[L, H, 2], count)`` of a relation (or "All") on one cross-fitting fold."""
        if self.fold_correct is None or self.fold_word_counts is None:
            raise BertlookError("scores were computed without cross-fitting folds (crossfit_seed)")
        if relation == ALL:
            # [layer, head, direction], int
            return self.fold_correct[fold].sum(axis=0), int(self.fold_word_counts[fold].sum())
        r = self.relation_index(relation)
        if r is None:
            raise KeyError(relation)
        # [layer, head, direction], int
        return self.fold_correct[fold, r], int(self.fold_word_counts[fold, r])


@dataclass
class _Sentence:
    n_words: int
    gold: "np.ndarray"  # [word]; 1-based head, 0 = ROOT
    rel: "np.ndarray"  # [word]; relation index
    src: "np.ndarray"  # [word]; 0-based word whose prediction is used (poss switch)
    n_poss: int
    n_affected: int
    punct: "np.ndarray"  # [word]; bool, punctuation (punctuation_mask)


def _where(store: "AttentionStore", rec: dict[str, Any], k: int) -> str:
    return f"{store.path}: sentence {rec.get('id', k)!r} (example {k})"


def check_word_store(store: "AttentionStore") -> None:
    """The store is a word-level store (else a :class:`BertlookError`)."""
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
    upos = rec.get("upos")
    if upos is not None and (not isinstance(upos, list) or len(upos) != W):
        raise BertlookError(f"{where}: `upos` must be a list of {W} tags")
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
        punct=punctuation_mask(rels, upos),
    )


def punctuation_mask(rels: Sequence[str], upos: Sequence[Any] | None = None) -> "np.ndarray":
    """``[word]`` bool: the word is punctuation, i.e. its relation is in :data:`PUNCT_RELATIONS`
    (``punct``; PTB CoNLL-2008 ``P``) or its UPOS is ``PUNCT`` (when the record has ``upos``).

    XPOS is not used: PTB's ``$`` and ``#`` head noun phrases in Stanford Dependencies, so treating
    them as punctuation would make their dependents unscorable.
    """
    punct = np.fromiter((r in PUNCT_RELATIONS for r in rels), dtype=bool, count=len(rels))  # [word]
    if upos is not None:
        punct |= np.fromiter((u == PUNCT_UPOS for u in upos), dtype=bool, count=len(rels))  # [word]
    return punct


def decision_blocks(attn: "np.ndarray", n_words: int, *, where: str = "attention",
                     candidates: "np.ndarray | None" = None) -> tuple["np.ndarray", Any, "np.ndarray | None"]:
    """The values every word decides on: ``(blocks [..., 2, W, W], masked value, no_candidate [W] or None)``.

    ``blocks[..., 0, i, j]`` = A(i -> j) (dep2head: word i picks its head j), ``blocks[..., 1, i, j]`` =
    A(j -> i) (head2dep); the word itself and excluded candidates hold the masked value. Float16 maps are
    read as their bit patterns (int32: non-negative float16 values sort like their bits, equal values <->
    equal bits; -0.0 read as 0), anything else as float32.
    """
    W = int(n_words)
    block = np.asarray(attn)[..., 1 : W + 1, 1 : W + 1]  # [..., word, word] (query, key)
    if block.dtype == np.float16:
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
    blocks = np.stack([a, np.swapaxes(a, -1, -2)], axis=-3)  # [..., direction, word, word]
    no_candidate = None
    if candidates is not None:
        cand = np.asarray(candidates, dtype=bool).reshape(W)  # [word]
        if (~cand).any():
            blocks[..., :, :, ~cand] = mask  # [..., direction, word, word]: an excluded word is never picked
            no_candidate = (int(cand.sum()) - cand.astype(np.int64)) == 0  # [word]: nobody else left
    return blocks, mask, no_candidate


def predict_heads(attn: "np.ndarray", n_words: int, *, where: str = "attention",
                  candidates: "np.ndarray | None" = None) -> "np.ndarray":
    """Predicted head word of every word for every head: ``[..., 2, W]`` int64, 1-based word index.

    ``attn`` is a word-level map ``[..., W+2, W+2]`` (any leading axes, e.g. ``[L, H]``). Index 0 of
    axis -2 is dep2head (argmax over the row), 1 is head2dep (argmax over the column). The word itself
    and [CLS]/[SEP] are never predicted (only the word block ``1..W`` is searched, with the diagonal
    at -inf). A one-word sentence has no candidate: its prediction is 0 (never correct).
    ``candidates`` (``[W]`` bool, optional): only these words may be predicted (dep2head: masked key
    columns; head2dep: masked query rows); a word left without any candidate predicts 0.
    """
    return predict_from_decision(decision_blocks(attn, n_words, where=where, candidates=candidates), int(n_words))


def _at_words(decision: tuple, src: "np.ndarray") -> tuple:
    """The decisions of the words ``src`` (``[W]``: word i reads word src[i]'s decision)."""
    blocks, mask, no_candidate = decision
    return blocks[..., src, :], mask, None if no_candidate is None else no_candidate[src]


def predict_from_decision(decision: tuple, W: int) -> "np.ndarray":
    """Predicted heads (1-based words, 0 = none) ``[..., direction, word]`` of :func:`decision_blocks`' output."""
    blocks, _, no_candidate = decision
    pred = blocks.argmax(axis=-1) + 1  # [..., direction, word]
    if no_candidate is not None and no_candidate.any():
        pred[..., no_candidate] = 0
    if W == 1:
        pred[...] = 0
    return pred


#: a float (not float16) map's decision is fragile when its two values are within this share of the larger
FLOAT_FRAGILE_REL = 2.0**-10


def fragile_decisions(decision: tuple, pred: "np.ndarray", gold: "np.ndarray") -> "np.ndarray":
    """``[..., 2, W]`` bool: whether a word's correctness rests on a near-tie, i.e. could change when one stored
    value moves by one float16 ulp (float maps: :data:`FLOAT_FRAGILE_REL`). ``decision`` and ``pred`` from
    :func:`decision_blocks` / :func:`predict_from_decision`; ``gold`` ``[W]`` (1-based, 0 = ROOT, never predicted).

    A correct word is fragile when the second-best candidate is within one ulp of the best; a wrong word when
    its gold head is within one ulp of the best (and may be picked). The regression gate's word tolerances
    (:mod:`bertlook.reporting.golden_ranges`) count these words.
    """
    blocks, mask, _ = decision
    W = blocks.shape[-1]
    if W < 2:
        return np.zeros(pred.shape, dtype=bool)
    best_at = np.clip(pred - 1, 0, W - 1)  # [..., direction, word]
    best = np.take_along_axis(blocks, best_at[..., None], axis=-1)[..., 0]  # [..., direction, word]
    g = np.broadcast_to(np.clip(gold - 1, 0, W - 1), pred.shape)  # [..., direction, word]
    at_gold = np.take_along_axis(blocks, g[..., None], axis=-1)[..., 0]  # [..., direction, word]
    second = blocks.copy()
    np.put_along_axis(second, best_at[..., None], mask, axis=-1)
    second = second.max(axis=-1)  # [..., direction, word]
    rival = np.where(pred == gold, second, at_gold)  # [..., direction, word]
    if blocks.dtype == np.int32:
        close = (rival != mask) & (best - rival <= 1)
    else:
        close = np.isfinite(rival) & (best - rival <= FLOAT_FRAGILE_REL * np.abs(best))
    return close & (gold > 0) & (pred > 0)


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


def parse_offsets(offsets: Iterable[int]) -> tuple[int, ...]:
    """The baseline offsets as distinct non-zero integers."""
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
    exclude_punct_candidates: bool = False,
    compare_punct_candidates: bool = False,
    crossfit_seed: int | None = None,
) -> HeadScores:
    """Count correct predictions of every head (both directions) and every offset baseline.

    One pass over the (first ``max_examples``) sentences of a word-level store, one example in memory
    at a time. ``keep_sentences=False`` skips the per-sentence arrays (not needed for a train store).
    ``exclude_punct_candidates``: punctuation words (:func:`punctuation_mask`) are never predicted;
    ``compare_punct_candidates``: also count the other candidate set (``correct_alt``);
    ``crossfit_seed``: also count per cross-fitting fold (:func:`crossfit_folds`). The offset
    baselines are the same for both candidate sets.
    """
    check_word_store(store)
    offsets = parse_offsets(offsets)
    if max_examples is not None and max_examples < 0:
        raise BertlookError(f"max_examples must be >= 0, got {max_examples}")
    records = store.records if max_examples is None else store.records[:max_examples]
    if not records:
        raise BertlookError(f"{store.path}: no sentences to score")
    relations = _relation_vocabulary(store, records)
    rel_index = {r: i for i, r in enumerate(relations)}
    L, H, R, K, S = store.num_layers, store.num_heads, len(relations), len(offsets), len(records)
    correct = np.zeros((R, L * H * 2), dtype=np.int64)  # [relation, layer*head*direction]
    fragile = np.zeros((R, L * H * 2), dtype=np.int64)  # [relation, layer*head*direction]: near-tied words
    base_correct = np.zeros((R, K), dtype=np.int64)  # [relation, offset]
    word_counts = np.zeros(R, dtype=np.int64)  # [relation]
    sent_counts = np.zeros((S, R), dtype=np.int32) if keep_sentences else None  # [sentence, relation]
    sent_base = np.zeros((S, R, K), dtype=np.int32) if keep_sentences else None  # [sentence, relation, offset]
    correct_alt = np.zeros((R, L * H * 2), dtype=np.int64) if compare_punct_candidates else None  # [relation, LH2]
    punct_words = np.zeros(R, dtype=np.int64)  # [relation]
    punct_gold_head = np.zeros(R, dtype=np.int64)  # [relation]
    fold_of = crossfit_folds(S, crossfit_seed) if crossfit_seed is not None else None  # [sentence]
    fold_correct = np.zeros((2, R, L * H * 2), dtype=np.int64) if fold_of is not None else None  # [fold, R, LH2]
    fold_fragile = np.zeros((2, R, L * H * 2), dtype=np.int64) if fold_of is not None else None  # [fold, R, LH2]
    fold_words = np.zeros((2, R), dtype=np.int64) if fold_of is not None else None  # [fold, relation]
    n_poss = n_affected = 0
    for k, rec in enumerate(records):
        sent = _parse_sentence(store, rec, k, rel_index, poss_from_possessive)
        W, gold, rel, src = sent.n_words, sent.gold, sent.rel, sent.src
        n_poss += sent.n_poss
        n_affected += sent.n_affected
        attn = store.get(k)  # [layer, head, query_word, key_word]
        where = _where(store, rec, k)
        cand = ~sent.punct  # [word]: candidates without punctuation
        # the decisions of the words the predictions are read from (src: the possessive switch)
        dec = _at_words(decision_blocks(attn, W, where=where, candidates=cand if exclude_punct_candidates else None),
                        src)
        pred = predict_from_decision(dec, W)  # [layer, head, direction, word]
        ok = (pred == gold) & (gold > 0)  # [layer, head, direction, word]
        # sum the correct words of each relation: a [W, R] one-hot matmul (exact: counts <= W < 2**24)
        onehot = np.zeros((W, R), dtype=np.float32)  # [word, relation]
        onehot[np.arange(W), rel] = 1.0
        # [relation, layer*head*direction]
        row_correct = (ok.reshape(L * H * 2, W).astype(np.float32) @ onehot).T.astype(np.int64)
        correct += row_correct
        frag = fragile_decisions(dec, pred, gold)  # [layer, head, direction, word]
        row_fragile = (frag.reshape(L * H * 2, W).astype(np.float32) @ onehot).T.astype(np.int64)  # [relation, LH2]
        fragile += row_fragile
        if correct_alt is not None:
            if sent.punct.any():  # without punctuation both candidate sets predict the same
                # [layer, head, direction, word]
                alt = predict_heads(attn, W, where=where, candidates=None if exclude_punct_candidates else cand)
                ok_alt = (alt[..., src] == gold) & (gold > 0)  # [layer, head, direction, word]
                # [relation, layer*head*direction]
                correct_alt += (ok_alt.reshape(L * H * 2, W).astype(np.float32) @ onehot).T.astype(np.int64)
            else:
                correct_alt += row_correct
        punct_words += np.bincount(rel[sent.punct], minlength=R)  # [relation]
        head_is_punct = (gold > 0) & sent.punct[np.maximum(gold - 1, 0)]  # [word]
        punct_gold_head += np.bincount(rel[head_is_punct], minlength=R)  # [relation]
        base_ok = (_baseline_predictions(W, offsets)[:, src] == gold) & (gold > 0)  # [offset, word]
        row_base = (base_ok.astype(np.float32) @ onehot).T.astype(np.int64)  # [relation, offset]
        base_correct += row_base
        row_counts = np.bincount(rel, minlength=R)  # [relation]
        word_counts += row_counts
        if keep_sentences:
            sent_counts[k] = row_counts
            sent_base[k] = row_base
        if fold_of is not None:
            fold_correct[fold_of[k]] += row_correct
            fold_fragile[fold_of[k]] += row_fragile
            fold_words[fold_of[k]] += row_counts
    return HeadScores(
        relations=relations,
        num_layers=L,
        num_heads=H,
        offsets=offsets,
        word_counts=word_counts,
        correct=correct.reshape(R, L, H, 2),  # [relation, layer, head, direction]
        fragile=fragile.reshape(R, L, H, 2),  # [relation, layer, head, direction]
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
        exclude_punct_candidates=bool(exclude_punct_candidates),
        correct_alt=None if correct_alt is None else correct_alt.reshape(R, L, H, 2),  # [relation, layer, head, dir]
        punct_words=punct_words,
        punct_gold_head=punct_gold_head,
        fold_of=fold_of,
        # [fold, relation, layer, head, direction]
        fold_correct=None if fold_correct is None else fold_correct.reshape(2, R, L, H, 2),
        fold_fragile=None if fold_fragile is None else fold_fragile.reshape(2, R, L, H, 2),
        fold_word_counts=fold_words,
        crossfit_seed=None if crossfit_seed is None else int(crossfit_seed),
    )


def crossfit_folds(n_sentences: int, seed: int) -> "np.ndarray":
    """``[S]`` int8 fold of each sentence (0 = fold A, 1 = fold B): the sentences at the first
    ``ceil(S / 2)`` positions of ``numpy.random.default_rng(seed).permutation(S)`` form fold A."""
    order = np.random.default_rng(seed).permutation(int(n_sentences))  # [sentence]
    fold = np.ones(int(n_sentences), dtype=np.int8)  # [sentence]
    fold[order[: (int(n_sentences) + 1) // 2]] = 0
    return fold


def sentence_correct(
    store: "AttentionStore", scores: HeadScores, selections: Sequence[tuple[str, int, int, int]]
) -> "np.ndarray":
    """Per-sentence correct counts ``[S, len(selections)]`` (int64) for a few heads.

    ``selections``: ``(relation or "All", layer, head, direction)``, 0-indexed layer/head, direction
    0 = dep2head, 1 = head2dep. Second pass over the same store (and options) ``scores`` came from;
    only the selected heads are evaluated.
    """
    return _second_pass(store, scores, selections, [])[0]


def paired_counts(
    store: "AttentionStore", scores: HeadScores, comparisons: Sequence[tuple[str, tuple, tuple]]
) -> tuple["np.ndarray", "np.ndarray"]:
    """Discordant word counts per sentence of paired predictors: ``(b [S, P], c [S, P])`` int64.

    ``comparisons``: ``(relation or "All", A, B)`` with A and B each ``("head", layer, head,
    direction)`` (0-indexed) or ``("offset", k)`` (index into ``scores.offsets``). On the words of the
    relation, ``b`` counts the words A predicts correctly and B does not, ``c`` the reverse. Second pass
    over the same store (and options, candidate set included) ``scores`` came from.
    """
    _, b, c = _second_pass(store, scores, [], comparisons)
    return b, c


def _second_pass(
    store: "AttentionStore",
    scores: HeadScores,
    selections: Sequence[tuple[str, int, int, int]],
    comparisons: Sequence[tuple[str, tuple, tuple]],
) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """One pass for :func:`sentence_correct` (``[S, len(selections)]``) and :func:`paired_counts`
    (``b``, ``c``: ``[S, len(comparisons)]``), evaluating only the heads they name."""
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
                f"{_where(store, rec, k)}: does not match the scored store (expected sentence "
                f"{scores.sentence_ids[k]!r})"
            )
        try:
            sent = _parse_sentence(store, rec, k, rel_index, scores.poss_from_possessive)
        except KeyError as err:
            raise BertlookError(f"{_where(store, rec, k)}: relation {err} was not in the scored store") from None
        W = sent.n_words
        ok_all = np.zeros((2 * U + K, W), dtype=bool)  # [predictor, word]
        if U:
            attn = store.get(k)  # [layer, head, query_word, key_word]
            cand = ~sent.punct if scores.exclude_punct_candidates else None  # [word]
            # [unique_head, direction, word]
            pred = predict_heads(attn[li, hi], W, where=_where(store, rec, k), candidates=cand)[..., sent.src]
            ok_all[: 2 * U] = ((pred == sent.gold) & (sent.gold > 0)).reshape(2 * U, W)  # [unique_head*dir, word]
        # [offset, word]
        ok_all[2 * U :] = (_baseline_predictions(W, scores.offsets)[:, sent.src] == sent.gold) & (sent.gold > 0)
        if len(selections):
            in_rel = (sel_r[:, None] == -1) | (sent.rel[None, :] == sel_r[:, None])  # [selection, word]
            out[k] = (ok_all[sel_row] & in_rel).sum(axis=1)  # [selection]
        if len(comparisons):
            in_rel = (cmp_r[:, None] == -1) | (sent.rel[None, :] == cmp_r[:, None])  # [comparison, word]
            a_ok, b_ok = ok_all[cmp_a], ok_all[cmp_b]  # [comparison, word] each
            b_out[k] = (a_ok & ~b_ok & in_rel).sum(axis=1)  # [comparison]
            c_out[k] = (~a_ok & b_ok & in_rel).sum(axis=1)  # [comparison]
    return out, b_out, c_out


# --------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------


def head_index_of_label(label: str) -> tuple[int, int]:
    """``(layer, head)``, 0-based, of an ``"L-H"`` label (1-based)."""
    layer, head = parse_head_label(label)
    return layer - 1, head - 1


def head_accuracy_table(scores: HeadScores) -> "pd.DataFrame":
    """Every head, every relation ("All" first, then by frequency), both directions.

    Columns ``relation, layer, head, direction, accuracy, count, fragile``: layer/head 1-indexed, accuracy a
    fraction (0..1), count = words of the relation, fragile = words whose correctness rests on a float16
    near-tie (:func:`fragile_decisions`; 0 when not counted).
    """
    L, H = scores.num_layers, scores.num_heads
    names = [ALL, *scores.relations]
    # [relation, layer, head, direction]; relation 0 = All
    corr = np.concatenate([scores.correct.sum(axis=0)[None], scores.correct], axis=0)
    frag = np.zeros_like(corr) if scores.fragile is None else \
        np.concatenate([scores.fragile.sum(axis=0)[None], scores.fragile], axis=0)  # [relation, layer, head, dir]
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
            "fragile": frag.ravel().astype(np.int64),  # [relation*layer*head*direction]
        },
        columns=[*ACCURACY_COLUMNS, FRAGILE_COLUMN],
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
    paired: bool = False,
    alpha: float = DEFAULT_ALPHA,
) -> "pd.DataFrame":
    """Twin of the paper's Table 1 (definitions: docs/definitions.md#head-accuracy).

    Columns :data:`TABLE1_COLUMNS` (accuracies are fractions 0..1; ``best_head`` 1-indexed "L-H"),
    then :data:`HELDOUT_COLUMNS` when ``train_scores`` is given (head chosen on train, accuracy on
    dev). The paper's numbers are joined by :func:`bertlook.reporting.paper_join.join_table1`. The
    head CIs need a second pass over the dev
    store: ``dev_store`` (store or path), default the store ``dev_scores`` was computed from.
    Beyond the paper, in this order: :data:`CROSSFIT_COLUMNS` when ``dev_scores`` has cross-fitting
    folds; :data:`PAIRED_COLUMNS` when ``paired`` (McNemar exact tests, bootstrap intervals of the
    accuracy difference, Holm-adjusted p-values, significance at ``alpha``; needs the dev store);
    :data:`NOPUNCT_COLUMNS` when ``dev_scores`` counted both candidate sets.
    """
    if min_count < 0:
        raise BertlookError(f"min_count must be >= 0, got {min_count}")
    if bootstrap < 0:
        raise BertlookError(f"bootstrap must be >= 0, got {bootstrap}")
    if not 0 < alpha < 1:
        raise BertlookError(f"alpha must be in (0, 1), got {alpha}")
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

    # runner-up of each row: the best (head, direction) among the other layer-heads (paired tests)
    runners: list[tuple[int, int, int] | None] = []
    for (rel, l, h, d, k) in selections:
        corr = dev_scores.counts_for(rel)[0].copy()  # [layer, head, direction]
        corr[l, h, :] = -1
        runners.append(_best(corr) if corr.size > 2 else None)
    comparisons: list[tuple[str, tuple, tuple]] = []
    if paired:
        for (rel, l, h, d, k), ru in zip(selections, runners):
            comparisons.append((rel, ("head", l, h, d), ("offset", k)))
            if ru is not None:
                comparisons.append((rel, ("head", l, h, d), ("head", *ru)))
    store_ref = dev_store if dev_store is not None else dev_scores.store_path
    head_nums = b_s = c_s = None
    if (bootstrap > 0 or paired) and store_ref is not None:
        # [sentence, selection], [sentence, comparison] x 2
        head_nums, b_s, c_s = _second_pass(open_store(store_ref, level="word"), dev_scores,
                                           [s[:4] for s in selections] if bootstrap > 0 else [], comparisons)
    elif paired:
        raise BertlookError("table1: paired tests need the dev store (dev_store or the scores' store_path)")
    den = None
    if bootstrap > 0 or paired:
        # [sentence, relation], [sentence, relation, offset]
        sc, sb = dev_scores.sentence_counts, dev_scores.sentence_baseline_correct
        if sc is None or sb is None:
            raise BertlookError("table1: bootstrap and paired tests need dev scores computed with keep_sentences=True")
        dens, base_nums = [], []
        for rel, *_, k in selections:
            r = dev_scores.relation_index(rel) if rel != ALL else None
            dens.append(sc.sum(axis=1) if r is None else sc[:, r])  # [sentence]
            base_nums.append(sb[:, :, k].sum(axis=1) if r is None else sb[:, r, k])  # [sentence]
        den = np.stack(dens, axis=1)  # [sentence, selection]
    if bootstrap > 0:
        if store_ref is None:
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

    if dev_scores.fold_correct is not None:
        columns += CROSSFIT_COLUMNS
        for row in out:
            row.update(_crossfit_row(dev_scores, row["relation"]))

    if paired:
        columns += PAIRED_COLUMNS
        _paired_rows(out, selections, runners, comparisons, b_s, c_s, den, dev_scores,
                     bootstrap=bootstrap, confidence=confidence, seed=seed, alpha=alpha)

    if dev_scores.correct_alt is not None:
        columns += NOPUNCT_COLUMNS
        for row in out:
            rel, count = row["relation"], row["count"]
            with_punct = dev_scores.candidate_counts(rel, False)  # [layer, head, direction]
            no_punct = dev_scores.candidate_counts(rel, True)  # [layer, head, direction]
            wl, wh, wd = _best(with_punct)
            nl, nh, nd = _best(no_punct)
            acc = no_punct[nl, nh, nd] / count
            r = None if rel == ALL else dev_scores.relation_index(rel)
            gold_punct = dev_scores.punct_gold_head.sum() if r is None else dev_scores.punct_gold_head[r]
            row.update(nopunct_head=head_label(nl, nh), nopunct_direction=DIRECTIONS[nd], nopunct_accuracy=acc,
                       nopunct_delta=acc - with_punct[wl, wh, wd] / count, gold_head_punct=int(gold_punct))

    df = pd.DataFrame(out, columns=columns)
    df["baseline_offset"] = df["baseline_offset"].astype("int64")
    df["count"] = df["count"].astype("int64")
    if paired:
        for fam in PAIRED_FAMILIES:
            for suf in ("b", "c"):
                df[f"{fam}_{suf}"] = pd.array(df[f"{fam}_{suf}"].tolist(), dtype="Int64")
            df[f"{fam}_significant"] = pd.array(df[f"{fam}_significant"].tolist(), dtype="boolean")
    df.attrs["exclude_punct_candidates"] = bool(dev_scores.exclude_punct_candidates)
    if paired:
        df.attrs["alpha"] = float(alpha)
    return df


def _crossfit_row(scores: HeadScores, rel: str) -> dict[str, Any]:
    """Cross-fitted choice of a row: the best head of fold A scored on fold B and vice versa; the
    pooled accuracy over both folds (NaN, heads empty, when a fold has no word of the relation)."""
    (corr_a, n_a), (corr_b, n_b) = scores.fold_counts_for(rel, 0), scores.fold_counts_for(rel, 1)
    if n_a == 0 or n_b == 0:
        return dict(crossfit_head_a="", crossfit_direction_a="", crossfit_head_b="", crossfit_direction_b="",
                    crossfit_accuracy=np.nan)
    la, ha_, da = _best(corr_a)
    lb, hb, db = _best(corr_b)
    return dict(crossfit_head_a=head_label(la, ha_), crossfit_direction_a=DIRECTIONS[da],
                crossfit_head_b=head_label(lb, hb), crossfit_direction_b=DIRECTIONS[db],
                crossfit_accuracy=(corr_b[la, ha_, da] + corr_a[lb, hb, db]) / (n_a + n_b))


def _paired_rows(out: list[dict[str, Any]], selections: list, runners: list, comparisons: list,
                 b_s: "np.ndarray", c_s: "np.ndarray", den: "np.ndarray", scores: HeadScores, *,
                 bootstrap: int, confidence: float, seed: int, alpha: float) -> None:
    """Fill :data:`PAIRED_COLUMNS` of the Table 1 rows ``out`` (in place) from the discordant counts
    of :func:`paired_counts` (``b_s``, ``c_s``: ``[sentence, comparison]``, in the order of
    ``comparisons``) and the per-sentence word counts ``den [sentence, row]``."""
    idx = {(cmp[0], cmp[1], cmp[2]): j for j, cmp in enumerate(comparisons)}
    diff_num = b_s - c_s  # [sentence, comparison]
    rows_of_rel = {sel[0]: i for i, sel in enumerate(selections)}
    row_of = [rows_of_rel[cmp[0]] for cmp in comparisons]  # [comparison]: its Table 1 row
    # [comparison] each; numerators and denominators [sentence, comparison]
    low, high = bootstrap_ci(diff_num, den[:, row_of], replicates=bootstrap, confidence=confidence, seed=seed)
    b_tot, c_tot = b_s.sum(axis=0), c_s.sum(axis=0)  # [comparison] each
    p = np.array([mcnemar_exact(int(b), int(c)) for b, c in zip(b_tot, c_tot)], dtype=np.float64)  # [comparison]
    fam_of = np.array([0 if cmp[2][0] == "offset" else 1 for cmp in comparisons], dtype=np.int64)  # [comparison]
    p_holm = np.full_like(p, np.nan)  # [comparison]
    for f in range(len(PAIRED_FAMILIES)):
        mask = fam_of == f  # [comparison]
        p_holm[mask] = holm(p[mask])
    for i, ((rel, l, h, d, k), ru) in enumerate(zip(selections, runners)):
        row = out[i]
        count = row["count"]
        if ru is None:
            row.update(runner_up_head="", runner_up_direction="", runner_up_accuracy=np.nan)
        else:
            corr = scores.counts_for(rel)[0]  # [layer, head, direction]
            row.update(runner_up_head=head_label(ru[0], ru[1]), runner_up_direction=DIRECTIONS[ru[2]],
                       runner_up_accuracy=corr[ru] / count)
        others = {"vs_baseline": ("offset", k), "vs_runner_up": None if ru is None else ("head", *ru)}
        for fam, other in others.items():
            j = None if other is None else idx[(rel, ("head", l, h, d), other)]
            if j is None:
                row.update({f"{fam}_{suf}": np.nan for suf in PAIRED_STAT_SUFFIXES})
                row.update({f"{fam}_b": None, f"{fam}_c": None, f"{fam}_significant": None})
                continue
            row.update({
                f"{fam}_b": int(b_tot[j]), f"{fam}_c": int(c_tot[j]),
                f"{fam}_diff": (int(b_tot[j]) - int(c_tot[j])) / count,
                f"{fam}_diff_ci_low": float(low[j]), f"{fam}_diff_ci_high": float(high[j]),
                f"{fam}_p": float(p[j]), f"{fam}_p_holm": float(p_holm[j]),
                f"{fam}_significant": bool(p_holm[j] <= alpha),
            })


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of ``b`` and ``c`` discordant pairs:
    ``min(1, 2 * BinomCDF(min(b, c); b + c, 1/2))`` (``scipy.stats.binomtest``); 1 when ``b + c == 0``."""
    from scipy.stats import binomtest

    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise BertlookError(f"mcnemar_exact: counts must be >= 0, got {b}, {c}")
    if b + c == 0:
        return 1.0
    return float(min(1.0, binomtest(min(b, c), b + c, 0.5).pvalue))


def holm(pvalues: "np.ndarray") -> "np.ndarray":
    """Holm step-down adjusted p-values ``[m]`` of ``pvalues [m]`` (NaN entries are not in the family
    and stay NaN): with ``p_(1) <= ... <= p_(m)``, ``adj_(i) = min(1, max_{j <= i} (m - j + 1) p_(j))``.

    Hand-written (five lines) rather than a new dependency: statsmodels, which has it, is not installed.
    """
    p = np.asarray(pvalues, dtype=np.float64)  # [test]
    out = np.full_like(p, np.nan)  # [test]
    ok = np.flatnonzero(~np.isnan(p))  # [finite_test]
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]  # [finite_test]: ascending p
    scaled = (m - np.arange(m)) * p[order]  # [finite_test]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))  # [finite_test]
    return out


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


#: candidates listed per selection of a Table 1 row (:func:`selection_candidates`): every (head, direction)
#: within this many correct words of the chosen one
SELECTION_WINDOW = 25


def _near(select: "np.ndarray", evaluate: "np.ndarray", chosen: tuple[int, int, int], window: int, n: int,
          fragile: "np.ndarray", eval_fragile: "np.ndarray") -> dict[str, Any]:
    """The (head, direction) pairs whose ``select`` count ``[L, H, 2]`` is within ``window`` of the chosen one's:
    ``{"n": words, "candidates": [{"head", "direction", "words", "fragile", "eval_words", "eval_fragile"}]}``,
    the chosen first (``fragile``: the near-tied words of the count, :func:`fragile_decisions`)."""
    top = int(select[chosen])
    idx = [tuple(int(v) for v in ix) for ix in np.argwhere(select >= top - window)]
    idx.sort(key=lambda ix: (ix != chosen, -int(select[ix]), ix))
    return {"n": int(n), "candidates": [
        {"head": head_label(l, h), "direction": DIRECTIONS[d], "words": int(select[l, h, d]),
         "fragile": int(fragile[l, h, d]), "eval_words": int(evaluate[l, h, d]),
         "eval_fragile": int(eval_fragile[l, h, d])} for l, h, d in idx]}


def selection_candidates(table: "pd.DataFrame", dev: HeadScores, train: HeadScores | None = None,
                         window: int = SELECTION_WINDOW) -> dict[str, dict[str, Any]]:
    """Per Table 1 row, how close each head choice was: for the best head (dev), the runner-up (dev, the
    best head's layer-head left out), the held-out choice (train counts, scored on dev), the cross-fitted
    choices (fold A scored on B, B on A) and the no-punctuation choice, the candidates within ``window``
    correct words of the chosen one (:func:`_near`), with the words each gets right where it is scored.

    The regression gate (:mod:`bertlook.reporting.golden`) accepts any candidate within its word tolerance
    of a choice: a choice between two heads that tie within a word or two is decided by float rounding."""
    out: dict[str, dict[str, Any]] = {}
    for rel in table["relation"]:
        corr, count, _ = dev.counts_for(rel)  # [layer, head, direction], int, [offset]
        frag = dev.fragile_for(rel)  # [layer, head, direction]
        best = _best(corr)
        sel = {"best": _near(corr, corr, best, window, count, frag, frag)}
        masked = corr.copy()
        masked[best[0], best[1], :] = -1
        if masked.size > 2:
            sel["runner_up"] = _near(masked, corr, _best(masked), window, count, frag, frag)
        if train is not None and (rel == ALL or (train.relation_index(rel) is not None
                                                 and train.word_counts[train.relation_index(rel)] > 0)):
            tcorr, tcount, _ = train.counts_for(rel)
            sel["heldout"] = _near(tcorr, corr, _best(tcorr), window, tcount, train.fragile_for(rel), frag)
        if dev.fold_correct is not None:
            (ca, na), (cb, nb) = dev.fold_counts_for(rel, 0), dev.fold_counts_for(rel, 1)
            fa, fb = dev.fragile_for(rel, 0), dev.fragile_for(rel, 1)
            if na and nb:
                sel["crossfit_a"] = _near(ca, cb, _best(ca), window, na, fa, fb)
                sel["crossfit_b"] = _near(cb, ca, _best(cb), window, nb, fb, fa)
        no_punct = dev.candidate_counts(rel, True)
        if no_punct is not None and dev.correct_alt is not None:
            sel["nopunct"] = _near(no_punct, no_punct, _best(no_punct), window, count, frag, frag)
        out[str(rel)] = sel
    return out


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


def statistics_summary(scores: HeadScores, table: "pd.DataFrame") -> dict[str, Any]:
    """The summary entries of the additions beyond the paper: punctuation counts, the cross-fitting
    folds, per paired-test family the rows whose difference is significant after Holm (better /
    worse than the comparison) and not, and the rows the punctuation switch moves."""
    out: dict[str, Any] = {}
    rows = list(table["relation"])
    if scores.punct_words is not None:
        gold_punct = {r: int(c) for r, c in zip(scores.relations, scores.punct_gold_head)}
        out["punctuation"] = {
            "definition": f"relation in {list(PUNCT_RELATIONS)} or UPOS {PUNCT_UPOS}",
            "n_punct_words": int(scores.punct_words.sum()),
            "n_words_gold_head_punct": int(scores.punct_gold_head.sum()),
            "gold_head_punct_by_row": {r: (int(scores.punct_gold_head.sum()) if r == ALL else gold_punct.get(r, 0))
                                       for r in rows},
        }
    if scores.fold_of is not None:
        out["crossfit"] = {
            "seed": scores.crossfit_seed,
            "fold_sentences": [int((scores.fold_of == f).sum()) for f in (0, 1)],
            "fold_words": [int(scores.fold_word_counts[f].sum()) for f in (0, 1)],
            "rows_without_choice": [r for r, h in zip(rows, table.get("crossfit_head_a", [""] * len(rows)))
                                    if not h],
        }
    if "vs_baseline_p_holm" in table.columns:
        paired: dict[str, Any] = {}
        for fam in PAIRED_FAMILIES:
            # per row: True / False, None when not tested (no runner-up)
            sig = [None if pd.isna(v) else bool(v) for v in table[f"{fam}_significant"]]
            diff = table[f"{fam}_diff"].to_numpy(dtype=np.float64)  # [row]
            paired[fam] = {
                "n_tests": sum(v is not None for v in sig),
                "n_significant": sum(v is True for v in sig),
                "significant_better": [r for r, v, d in zip(rows, sig, diff) if v is True and d > 0],
                "significant_worse": [r for r, v, d in zip(rows, sig, diff) if v is True and d < 0],
                "not_significant": [r for r, v in zip(rows, sig) if v is False],
            }
        out["paired"] = paired
    if "nopunct_delta" in table.columns:
        delta = table["nopunct_delta"].to_numpy(dtype=np.float64)  # [row]
        out["nopunct"] = {
            "rows_moved": [r for r, d in zip(rows, delta) if d != 0],
            "rows_head_changed": [r for r, a, b, da, db in zip(rows, table["best_head"], table["nopunct_head"],
                                                              table["direction"], table["nopunct_direction"])
                                  if (a, da) != (b, db)],
            "max_abs_delta": float(np.abs(delta).max()) if len(delta) else 0.0,
        }
    return out
