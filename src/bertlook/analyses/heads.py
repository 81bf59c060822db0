"""Accuracy of single attention heads at dependency syntax: the counts behind Table 1 and Fig 5 (numbers only).

Scores every head's ``dep2head`` / ``head2dep`` argmax predictions on a word-level store against gold
trees, with fixed-offset baselines: :func:`predict_heads`, :func:`score_heads` (one pass, counts per
relation: :class:`HeadScores`), :func:`head_accuracy_table`; the second passes that evaluate a few heads
per sentence are :mod:`bertlook.analyses.second_pass`. Punctuation may be excluded from the candidate heads
(:func:`punctuation_mask`), the 2-fold cross-fitting folds are :func:`crossfit_folds`, and near-tied
decisions are counted (:func:`fragile_decisions`). Table 1 is assembled from these counts by
:mod:`bertlook.analyses.table1` (the whole step: :func:`bertlook.analyses.heads_step.run_heads`); the Fig 5
twin's numbers are :mod:`bertlook.analyses.syntax_heads`. The tree source of a store: :func:`resolve_tree_source`; how a
summary names a store: :func:`store_where`.

Definitions: docs/definitions.md#head-accuracy
"""

from __future__ import annotations

import collections
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.token_roles import is_causal
from bertlook.attention.store import AttentionStore, open_store
from bertlook.errors import BertlookError, check_at_least
from bertlook.naming import parse_head_label

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
#: relations and UPOS that make a word punctuation (never a candidate with exclude_punct_candidates)
PUNCT_RELATIONS = ("punct", "P")
PUNCT_UPOS = "PUNCT"

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
      near-tie (:func:`fragile_decisions`), what the regression gate's word tolerances count;
    - causal (decoder) maps only, else None: ``visible[R, 2]``, the words whose gold head the map can
      see (dep2head: the head precedes the word; head2dep: the word precedes its head), and
      ``baseline_visible_correct[R, K]``, the baselines' correct words among the dep2head-visible ones.
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
    visible: "np.ndarray | None" = None  # [relation, direction]: words whose gold head a causal map can see
    baseline_visible_correct: "np.ndarray | None" = None  # [relation, offset]: among the dep2head-visible words

    @property
    def n_words(self) -> int:
        """Scored words, all relations."""
        return int(self.word_counts.sum())

    def relation_index(self, relation: str) -> int | None:
        """The index of ``relation`` in :attr:`relations` (None: not in the scored store)."""
        try:
            return self.relations.index(relation)
        except ValueError:
            return None

    def _of(self, arr: "np.ndarray", relation: str) -> "np.ndarray":
        """``arr``'s entry of ``relation`` (first axis: relations), summed over them for ``"All"``; KeyError
        for a relation not in the scored store."""
        if relation == ALL:
            return arr.sum(axis=0)
        r = self.relation_index(relation)
        if r is None:
            raise KeyError(relation)
        return arr[r]

    def counts_for(self, relation: str) -> tuple["np.ndarray", int, "np.ndarray"]:
        """``(correct[L, H, 2], count, baseline_correct[K])`` of a relation or of ``"All"``."""
        count = self.n_words if relation == ALL else int(self._of(self.word_counts, relation))
        return self._of(self.correct, relation), count, self._of(self.baseline_correct, relation)

    def visible_for(self, relation: str) -> tuple["np.ndarray", "np.ndarray"]:
        """``(visible[2], baseline_visible_correct[K])`` of a relation or of ``"All"`` (causal scores only)."""
        if self.visible is None:
            raise BertlookError("visible words are counted for causal (decoder) maps only")
        return self._of(self.visible, relation), self._of(self.baseline_visible_correct, relation)

    def fragile_for(self, relation: str, fold: int | None = None) -> "np.ndarray":
        """``fragile[L, H, 2]`` of a relation (or "All"), on one cross-fitting fold with ``fold``; zeros when
        the scores did not count them."""
        arr = self.fragile if fold is None else (None if self.fold_fragile is None else self.fold_fragile[fold])
        if arr is None:
            return np.zeros((self.num_layers, self.num_heads, 2), dtype=np.int64)
        return self._of(arr, relation)  # [layer, head, direction]

    def candidate_counts(self, relation: str, exclude_punct: bool) -> "np.ndarray | None":
        """``correct[L, H, 2]`` of a relation (or "All") with punctuation candidates excluded or not;
        None when that candidate set was not counted."""
        arr = self.correct if exclude_punct == self.exclude_punct_candidates else self.correct_alt
        return None if arr is None else self._of(arr, relation)  # [layer, head, direction]

    def fold_counts_for(self, relation: str, fold: int) -> tuple["np.ndarray", int]:
        """``(correct[L, H, 2], count)`` of a relation (or "All") on one cross-fitting fold."""
        if self.fold_correct is None or self.fold_word_counts is None:
            raise BertlookError("scores were computed without cross-fitting folds (crossfit_seed)")
        return self._of(self.fold_correct[fold], relation), int(self._of(self.fold_word_counts[fold], relation))


@dataclass
class _Sentence:
    n_words: int
    gold: "np.ndarray"  # [word]; 1-based head, 0 = ROOT
    rel: "np.ndarray"  # [word]; relation index
    src: "np.ndarray"  # [word]; 0-based word whose prediction is used (poss switch)
    n_poss: int
    n_affected: int
    punct: "np.ndarray"  # [word]; bool, punctuation (punctuation_mask)


def record_where(store: "AttentionStore", rec: dict[str, Any], k: int) -> str:
    """How a message names record ``k`` of ``store``: the store's path, the sentence id and the index."""
    return f"{store.path}: sentence {rec.get('id', k)!r} (example {k})"


def check_word_store(store: "AttentionStore") -> None:
    """The store is a word-level store (else a :class:`BertlookError`)."""
    open_store(store, level="word")


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def parse_sentence(
    store: "AttentionStore", rec: dict[str, Any], k: int, rel_index: dict[str, int], poss_switch: bool
) -> _Sentence:
    """Record ``k`` checked and parsed: gold heads, relation indices, the poss switch's sources, punctuation."""
    where = record_where(store, rec, k)
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


def baseline_predictions(W: int, offsets: Sequence[int]) -> "np.ndarray":
    """``[offset, word]``: the 1-based head each fixed-offset baseline predicts (clipped to the sentence)."""
    pos = np.arange(1, W + 1, dtype=np.int64)  # [word]
    return np.clip(pos[None, :] + np.asarray(offsets, dtype=np.int64)[:, None], 1, W)  # [offset, word]


def _relation_vocabulary(store: "AttentionStore", records: list[dict[str, Any]]) -> list[str]:
    counts: collections.Counter = collections.Counter()
    for k, rec in enumerate(records):
        rels = rec.get("rels")
        if not isinstance(rels, list):
            raise BertlookError(f"{record_where(store, rec, k)}: record lacks the gold tree (`heads` and `rels` lists)")
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


@dataclass
class _Tally:
    """The running counts of :func:`score_heads`, flat over ``layer*head*direction`` (LH2); shapes and
    meanings as the fields of :class:`HeadScores` (None: not counted)."""

    correct: "np.ndarray"  # [relation, LH2]
    fragile: "np.ndarray"  # [relation, LH2]: near-tied words
    base_correct: "np.ndarray"  # [relation, offset]
    word_counts: "np.ndarray"  # [relation]
    sent_counts: "np.ndarray | None"  # [sentence, relation]
    sent_base: "np.ndarray | None"  # [sentence, relation, offset]
    correct_alt: "np.ndarray | None"  # [relation, LH2]
    punct_words: "np.ndarray"  # [relation]
    punct_gold_head: "np.ndarray"  # [relation]
    fold_of: "np.ndarray | None"  # [sentence]
    fold_correct: "np.ndarray | None"  # [fold, relation, LH2]
    fold_fragile: "np.ndarray | None"  # [fold, relation, LH2]
    fold_words: "np.ndarray | None"  # [fold, relation]
    n_poss: int = 0
    n_affected: int = 0
    visible: "np.ndarray | None" = None  # [relation, direction] (causal maps)
    base_visible: "np.ndarray | None" = None  # [relation, offset] (causal maps)

    @classmethod
    def zeros(cls, LH2: int, R: int, K: int, S: int, *, keep_sentences: bool, compare_punct_candidates: bool,
              crossfit_seed: int | None) -> "_Tally":
        """Zero counts of ``LH2`` (head, direction) pairs, ``R`` relations, ``K`` offsets, ``S`` sentences."""
        fold_of = crossfit_folds(S, crossfit_seed) if crossfit_seed is not None else None  # [sentence]
        folds = fold_of is not None
        return cls(
            correct=np.zeros((R, LH2), dtype=np.int64),
            fragile=np.zeros((R, LH2), dtype=np.int64),
            base_correct=np.zeros((R, K), dtype=np.int64),
            word_counts=np.zeros(R, dtype=np.int64),
            sent_counts=np.zeros((S, R), dtype=np.int32) if keep_sentences else None,
            sent_base=np.zeros((S, R, K), dtype=np.int32) if keep_sentences else None,
            correct_alt=np.zeros((R, LH2), dtype=np.int64) if compare_punct_candidates else None,
            punct_words=np.zeros(R, dtype=np.int64),
            punct_gold_head=np.zeros(R, dtype=np.int64),
            fold_of=fold_of,
            fold_correct=np.zeros((2, R, LH2), dtype=np.int64) if folds else None,
            fold_fragile=np.zeros((2, R, LH2), dtype=np.int64) if folds else None,
            fold_words=np.zeros((2, R), dtype=np.int64) if folds else None,
        )

    def add(self, k: int, sent: _Sentence, attn: "np.ndarray", where: str, offsets: tuple[int, ...],
            exclude_punct_candidates: bool) -> None:
        """Count sentence ``k`` (:func:`parse_sentence`; ``attn [layer, head, query_word, key_word]``)."""
        W, gold, rel, src = sent.n_words, sent.gold, sent.rel, sent.src
        R = len(self.word_counts)
        LH2 = self.correct.shape[1]
        self.n_poss += sent.n_poss
        self.n_affected += sent.n_affected
        cand = ~sent.punct  # [word]: candidates without punctuation
        # the decisions of the words the predictions are read from (src: the possessive switch)
        dec = _at_words(decision_blocks(attn, W, where=where, candidates=cand if exclude_punct_candidates else None),
                        src)
        pred = predict_from_decision(dec, W)  # [layer, head, direction, word]
        ok = (pred == gold) & (gold > 0)  # [layer, head, direction, word]
        # sum the correct words of each relation: a [W, R] one-hot matmul (exact: counts <= W < 2**24)
        onehot = np.zeros((W, R), dtype=np.float32)  # [word, relation]
        onehot[np.arange(W), rel] = 1.0
        row_correct = (ok.reshape(LH2, W).astype(np.float32) @ onehot).T.astype(np.int64)  # [relation, LH2]
        self.correct += row_correct
        frag = fragile_decisions(dec, pred, gold)  # [layer, head, direction, word]
        row_fragile = (frag.reshape(LH2, W).astype(np.float32) @ onehot).T.astype(np.int64)  # [relation, LH2]
        self.fragile += row_fragile
        if self.correct_alt is not None:
            if sent.punct.any():  # without punctuation both candidate sets predict the same
                # [layer, head, direction, word]
                alt = predict_heads(attn, W, where=where, candidates=None if exclude_punct_candidates else cand)
                ok_alt = (alt[..., src] == gold) & (gold > 0)  # [layer, head, direction, word]
                self.correct_alt += (ok_alt.reshape(LH2, W).astype(np.float32) @ onehot).T.astype(np.int64)
            else:
                self.correct_alt += row_correct
        self.punct_words += np.bincount(rel[sent.punct], minlength=R)  # [relation]
        head_is_punct = (gold > 0) & sent.punct[np.maximum(gold - 1, 0)]  # [word]
        self.punct_gold_head += np.bincount(rel[head_is_punct], minlength=R)  # [relation]
        base_ok = (baseline_predictions(W, offsets)[:, src] == gold) & (gold > 0)  # [offset, word]
        row_base = (base_ok.astype(np.float32) @ onehot).T.astype(np.int64)  # [relation, offset]
        self.base_correct += row_base
        row_counts = np.bincount(rel, minlength=R)  # [relation]
        self.word_counts += row_counts
        if self.sent_counts is not None:
            self.sent_counts[k] = row_counts
            self.sent_base[k] = row_base
        if self.fold_of is not None:
            self.fold_correct[self.fold_of[k]] += row_correct
            self.fold_fragile[self.fold_of[k]] += row_fragile
            self.fold_words[self.fold_of[k]] += row_counts
        if self.visible is not None:
            # a causal row sees only earlier words: word src reads its own row (dep2head) and its column (head2dep)
            vis = np.stack([(gold > 0) & (gold <= src), gold > src + 1])  # [direction, word]
            self.visible += np.stack([np.bincount(rel[v], minlength=R) for v in vis], axis=1)  # [relation, direction]
            self.base_visible += ((base_ok & vis[0]).astype(np.float32) @ onehot).T.astype(np.int64)  # [relation, offset]


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
    check_at_least("max_examples", max_examples, 0, optional=True)
    records = store.records if max_examples is None else store.records[:max_examples]
    if not records:
        raise BertlookError(f"{store.path}: no sentences to score")
    relations = _relation_vocabulary(store, records)
    rel_index = {r: i for i, r in enumerate(relations)}
    L, H, R, K, S = store.num_layers, store.num_heads, len(relations), len(offsets), len(records)
    tally = _Tally.zeros(L * H * 2, R, K, S, keep_sentences=keep_sentences,
                         compare_punct_candidates=compare_punct_candidates, crossfit_seed=crossfit_seed)
    if is_causal(store.meta):
        tally.visible, tally.base_visible = np.zeros((R, 2), dtype=np.int64), np.zeros((R, K), dtype=np.int64)
    for k, rec in enumerate(records):
        sent = parse_sentence(store, rec, k, rel_index, poss_from_possessive)
        tally.add(k, sent, store.get(k), record_where(store, rec, k), offsets, exclude_punct_candidates)
    return HeadScores(
        relations=relations,
        num_layers=L,
        num_heads=H,
        offsets=offsets,
        word_counts=tally.word_counts,
        correct=tally.correct.reshape(R, L, H, 2),  # [relation, layer, head, direction]
        fragile=tally.fragile.reshape(R, L, H, 2),  # [relation, layer, head, direction]
        baseline_correct=tally.base_correct,
        n_sentences=S,
        sentence_ids=[rec.get("id", k) for k, rec in enumerate(records)],
        sentence_counts=tally.sent_counts,
        sentence_baseline_correct=tally.sent_base,
        poss_from_possessive=bool(poss_from_possessive),
        n_poss=tally.n_poss,
        n_poss_affected=tally.n_affected,
        store_path=str(store.path),
        meta={"level": "word", "excluded": store.meta.get("excluded") or {}},
        exclude_punct_candidates=bool(exclude_punct_candidates),
        # [relation, layer, head, direction]
        correct_alt=None if tally.correct_alt is None else tally.correct_alt.reshape(R, L, H, 2),
        punct_words=tally.punct_words,
        punct_gold_head=tally.punct_gold_head,
        fold_of=tally.fold_of,
        # [fold, relation, layer, head, direction]
        fold_correct=None if tally.fold_correct is None else tally.fold_correct.reshape(2, R, L, H, 2),
        fold_fragile=None if tally.fold_fragile is None else tally.fold_fragile.reshape(2, R, L, H, 2),
        fold_word_counts=tally.fold_words,
        crossfit_seed=None if crossfit_seed is None else int(crossfit_seed),
        visible=tally.visible,
        baseline_visible_correct=tally.base_visible,
    )


def crossfit_folds(n_sentences: int, seed: int) -> "np.ndarray":
    """``[S]`` int8 fold of each sentence (0 = fold A, 1 = fold B): the sentences at the first
    ``ceil(S / 2)`` positions of ``numpy.random.default_rng(seed).permutation(S)`` form fold A."""
    order = np.random.default_rng(seed).permutation(int(n_sentences))  # [sentence]
    fold = np.ones(int(n_sentences), dtype=np.int8)  # [sentence]
    fold[order[: (int(n_sentences) + 1) // 2]] = 0
    return fold


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


def store_where(store: "AttentionStore | Any") -> str:
    """How a summary or a message names a store given as a path (the path as given) or as an open store
    (its path)."""
    return str(store.path) if isinstance(store, AttentionStore) else str(store)


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
