"""Single-head tree decoding (beyond the paper; the question of Htut et al. 2019, "Do Attention Heads in
BERT Track Syntactic Dependencies?").

For every head, a whole dependency tree is decoded from its word-level map and scored against the gold
tree of each dev sentence:

* directed, "gold root": the gold root word hangs from ROOT, every other word takes a word head, the
  maximum spanning arborescence of the head's word-word scores (Chu-Liu-Edmonds,
  :func:`bertlook.analyses.trees.chu_liu_edmonds_batch`), in both directions of Table 1: ``dep2head``
  (score of head j for dependent i = ``A(i -> j)``, the dependent attends to its head) and
  ``head2dep`` (``A(j -> i)``); UAS over the scored words;
* undirected: the maximum spanning tree of the symmetrised word-word map ``A + A^T``
  (:func:`bertlook.analyses.trees.max_spanning_tree_batch`); UUAS = share of the scored words' gold
  edges that the tree contains;

next to the same scores of two trees that use no attention: right-branching (gold root kept) and the
adjacent chain ``w1 - w2 - ... - wW``. Scored words: the words of Table 3 (punctuation excluded, by
relation or PTB tag as :class:`bertlook.analyses.probes.data.ProbeData` decides) minus the gold root
word(s), whose head is given. Sentences are read one at a time (memory bounded by one map).

:func:`run_tree_heads` is the ``tree-heads`` step without the command line: the per-head table, the best
heads and the step's summary (:class:`TreeHeadsResult`).

Definitions: docs/definitions.md#single-head-trees-tree-heads
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from bertlook.analyses.heads import DIRECTIONS, decision_blocks, fragile_decisions, predict_from_decision
from bertlook.analyses.probes.data import ProbeData
from bertlook.analyses.trees import chu_liu_edmonds_batch, max_spanning_tree_batch
from bertlook.errors import BertlookError, check_at_least
from bertlook.io_utils import json_safe
from bertlook.naming import head_label

#: the per-head table (tables/tree_heads.csv)
HEAD_COLUMNS = ["layer", "head", "uas_dep2head", "uas_head2dep", "uuas", "n_words", "fragile_dep2head",
                "fragile_head2dep"]
#: the best heads per layer, over all layers, and the baselines (tables/tree_heads_best.csv)
BEST_COLUMNS = ["row", "uas_head", "uas_direction", "uas", "uuas_head", "uuas", "n_words"]
BASELINES = ("right_branching", "adjacent_chain")
BASELINE_LABELS = {"right_branching": "right-branching (gold root)", "adjacent_chain": "adjacent chain"}


def gold_root_right_branching(heads: np.ndarray) -> np.ndarray:
    """The right-branching tree with the gold root(s) (``[W]``, 1-based heads, 0 = ROOT).

    Every gold root word (gold head 0) takes ROOT, as in the decoder; every other word i takes the
    next word i+1, and the last word, when it is not a root, takes the last gold root word (the only
    arc that is not "next word": a tree needs it).
    """
    heads = np.asarray(heads)  # [word]
    W = len(heads)
    out = np.arange(2, W + 2, dtype=np.int64)  # [word]: word i (1-based) -> i + 1
    roots = np.flatnonzero(heads == 0)  # [root]: 0-based
    if W:
        out[-1] = int(roots[-1]) + 1
        out[roots] = 0
    return out


def _undirected_hits(parent: np.ndarray, dep: np.ndarray, head: np.ndarray) -> np.ndarray:
    """``[B]`` gold edges ``(dep[e], head[e])`` (0-based words) found in each tree ``parent`` ``[B, W]``."""
    if not len(dep):
        return np.zeros(parent.shape[0], dtype=np.int64)
    hit = (parent[:, dep] == head[None, :]) | (parent[:, head] == dep[None, :])  # [batch, edge]
    return hit.sum(axis=1)


def sentence_trees(attn: np.ndarray, heads: np.ndarray, scored: np.ndarray) -> dict[str, np.ndarray]:
    """The trees of one sentence's heads and how many scored words they get right.

    ``attn``: ``[K, W+2, W+2]`` word-level maps of the ``K`` heads ([CLS], words, [SEP]); ``heads``:
    gold heads ``[W]`` (1-based, 0 = ROOT, at least one root); ``scored``: ``[W]`` bool, the words scored
    (punctuation and the gold roots already excluded). Returns ``correct`` ``[direction, K]`` (words
    whose decoded head is the gold head), ``uuas_hits`` ``[K]`` (gold edges of the scored words in the
    undirected tree), ``pred`` ``[direction, K, W]`` (the decoded heads) and ``parent`` ``[K, W]``
    (the undirected tree, rooted at word 0 for its edge list; -1 there).
    """
    K = attn.shape[0]
    W = attn.shape[-1] - 2
    roots = np.flatnonzero(heads == 0)  # [root]: 0-based words
    if not len(roots):
        raise BertlookError("the gold tree has no root (no word with head 0)")
    words = np.asarray(attn[:, 1 : W + 1, 1 : W + 1], dtype=np.float64)  # [layer*head, word, word]
    # scores[., d, h]: dep2head = A(d -> h), head2dep = A(h -> d)
    both = np.concatenate([words, words.transpose(0, 2, 1)])  # [direction*layer*head, word, word]
    s = np.full((2 * K, W + 1, W + 1), -np.inf)  # [direction*layer*head, node, node]: node 0 = ROOT
    s[:, 1:, 1:] = both
    s[:, roots + 1, :] = -np.inf  # a gold root takes ROOT, and only ROOT
    s[:, roots + 1, 0] = 0.0
    pred = chu_liu_edmonds_batch(s)[:, 1:].reshape(2, K, W)  # [direction, layer*head, word]
    correct = ((pred == heads[None, None, :]) & scored[None, None, :]).sum(axis=2)  # [direction, layer*head]
    parent = max_spanning_tree_batch(words + words.transpose(0, 2, 1))  # [layer*head, word]
    dep = np.flatnonzero(scored)  # [edge]: 0-based dependents of the scored gold edges
    hits = _undirected_hits(parent, dep, heads[dep] - 1)  # [layer*head]
    return {"correct": correct, "uuas_hits": hits, "pred": pred, "parent": parent}


def _fragile_words(attn: np.ndarray, heads: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """``[direction, K]``: scored words whose greedy (argmax) decision of each head rests on a float16 near-tie
    (:func:`bertlook.analyses.heads.fragile_decisions`): the regression gate's measure of how many words a
    head's tree may change on another CPU."""
    W = len(heads)
    dec = decision_blocks(attn, W)
    frag = fragile_decisions(dec, predict_from_decision(dec, W), heads)  # [K, direction, word]
    return (frag & scored[None, None, :]).sum(axis=2).T  # [direction, K]


def baseline_counts(heads: np.ndarray, scored: np.ndarray) -> dict[str, int]:
    """Correct heads / found edges of the two baselines on one sentence (the same scored words)."""
    W = len(heads)
    dep = np.flatnonzero(scored)  # [edge]
    head = heads[dep] - 1  # [edge]: 0-based gold heads (never ROOT: roots are not scored)
    rb = gold_root_right_branching(heads)  # [word]
    rb_parent = (rb - 1)[None, :]  # [1, word]: -1 for the roots (no word parent)
    chain = (np.arange(W) - 1)[None, :]  # [1, word]: w_i - w_{i-1}; -1 for w_1
    return {
        "right_branching_correct": int(((rb == heads) & scored).sum()),
        "right_branching_uuas_hits": int(_undirected_hits(rb_parent, dep, head)[0]),
        "adjacent_chain_uuas_hits": int(_undirected_hits(chain, dep, head)[0]),
    }


def _fraction(x, n: int):
    """``x / n`` in float64 (NaN when no word was scored)."""
    return np.asarray(x, dtype=np.float64) / n if n else np.full(np.shape(x), np.nan)


def _per_head_frame(correct: np.ndarray, hits: np.ndarray, fragile: np.ndarray, n_scored: int, H: int) -> pd.DataFrame:
    """:data:`HEAD_COLUMNS` from the counts ``[direction, layer*head]`` / ``[layer*head]`` (fractions)."""
    K = hits.shape[0]
    layer, head = np.divmod(np.arange(K), H)  # [layer*head] each, 0-based
    return pd.DataFrame({
        "layer": layer + 1,
        "head": head + 1,
        "uas_dep2head": _fraction(correct[0], n_scored),
        "uas_head2dep": _fraction(correct[1], n_scored),
        "uuas": _fraction(hits, n_scored),
        "n_words": np.full(K, n_scored, dtype=np.int64),
        "fragile_dep2head": fragile[0],
        "fragile_head2dep": fragile[1],
    }, columns=HEAD_COLUMNS)


def tree_heads(dev_store, *, max_sentences: int | None = None,
               log: Callable[[str], None] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Decode a tree from every head of every sentence of the word-level store ``dev_store``.

    Returns ``(per_head, info)``: ``per_head`` with :data:`HEAD_COLUMNS` (fractions, one row per head,
    layers and heads 1-indexed), ``info`` with the baselines (``right_branching``: ``uas``, ``uuas``;
    ``adjacent_chain``: ``uuas``) and the counts of the summary.
    """
    t0 = time.perf_counter()
    data = dev_store if isinstance(dev_store, ProbeData) else ProbeData(
        dev_store, max_sentences=max_sentences, what="dev attention store")
    st = data.store
    L, H = st.num_layers, st.num_heads
    K = L * H
    correct = np.zeros((2, K), dtype=np.int64)  # [direction, layer*head]
    fragile = np.zeros((2, K), dtype=np.int64)  # [direction, layer*head]: scored words on a float16 near-tie
    hits = np.zeros(K, dtype=np.int64)  # [layer*head]
    base = {"right_branching_correct": 0, "right_branching_uuas_hits": 0, "adjacent_chain_uuas_hits": 0}
    n_scored = n_roots = n_multi = n_punct_excluded = 0
    decoded = 0
    for done, s in enumerate(data.sentences, start=1):
        A = st.get(s.index)  # [layer, head, query_word, key_word]
        if A.shape[-1] != s.n_words + 2:
            raise BertlookError(f"{data.path}: sentence {s.id!r}: map of size {A.shape[-1]} for {s.n_words} words")
        roots = s.heads == 0  # [word]
        scored = ~s.punct & ~roots  # [word]
        try:
            res = sentence_trees(A.reshape(K, s.n_words + 2, s.n_words + 2), s.heads, scored)
        except BertlookError as err:
            raise BertlookError(f"{data.path}: sentence {s.id!r}: {err}") from None
        correct += res["correct"]
        hits += res["uuas_hits"]
        fragile += _fragile_words(A.reshape(K, s.n_words + 2, s.n_words + 2), s.heads, scored)
        for k, v in baseline_counts(s.heads, scored).items():
            base[k] += v
        n_scored += int(scored.sum())
        n_roots += int(roots.sum())
        n_multi += int(roots.sum() > 1)
        n_punct_excluded += int((s.punct & ~roots).sum())
        decoded += 2 * K
        if log and done % 100 == 0:
            log(f"tree-heads: {done}/{len(data.sentences)} sentences")
    seconds = time.perf_counter() - t0
    per_head = _per_head_frame(correct, hits, fragile, n_scored, H)
    info = {
        "baselines": {
            "right_branching": {"uas": float(_fraction(base["right_branching_correct"], n_scored)),
                                "uuas": float(_fraction(base["right_branching_uuas_hits"], n_scored))},
            "adjacent_chain": {"uas": None, "uuas": float(_fraction(base["adjacent_chain_uuas_hits"], n_scored))},
        },
        "counts": {
            "n_sentences": len(data.sentences),
            "n_words": data.n_words,
            "n_scored_words": n_scored,
            "n_punct_words_excluded": n_punct_excluded,
            "n_root_words_excluded": n_roots,
            "multi_root_sentences": n_multi,
            "empty_sentences_skipped": data.n_empty,
            "trees_decoded": decoded,
            "num_layers": L,
            "num_heads": H,
        },
        "correct": {"dep2head": correct[0].tolist(), "head2dep": correct[1].tolist(), "uuas_hits": hits.tolist(),
                    **base},
        "relation_scheme": data.relation_scheme,
        "punct_by_xpos": data.punct_by_xpos,
        "store": data.path,
        "seconds": seconds,
        "trees_per_s": decoded / seconds if seconds > 0 else None,
    }
    return per_head, info


def best_heads(per_head: pd.DataFrame, baselines: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The best heads per layer (UAS: over both directions; UUAS), over all layers, then the baselines.

    Rows :data:`BEST_COLUMNS`: ``row`` = ``layer 1`` .. ``layer L``, ``all layers``, ``right_branching``,
    ``adjacent_chain``; heads as "L-H" labels; ties: the first head in layer-head order, ``dep2head``
    before ``head2dep``.
    """
    def pick(df: pd.DataFrame, row: str) -> dict[str, Any]:
        uas = np.stack([df["uas_dep2head"].to_numpy(), df["uas_head2dep"].to_numpy()])  # [direction, head]
        flat = np.where(np.isnan(uas), -np.inf, uas).T.ravel()  # [head*direction]
        k, d = divmod(int(np.argmax(flat)), 2)
        u = int(np.argmax(np.where(np.isnan(df["uuas"].to_numpy()), -np.inf, df["uuas"].to_numpy())))
        r, ru = df.iloc[k], df.iloc[u]
        return {"row": row, "uas_head": head_label(int(r["layer"]) - 1, int(r["head"]) - 1),
                "uas_direction": DIRECTIONS[d], "uas": float(uas[d, k]),
                "uuas_head": head_label(int(ru["layer"]) - 1, int(ru["head"]) - 1), "uuas": float(ru["uuas"]),
                "n_words": int(r["n_words"])}

    rows = [pick(df, f"layer {int(layer)}") for layer, df in per_head.groupby("layer", sort=True)]
    rows.append(pick(per_head, "all layers"))
    n = int(per_head["n_words"].iloc[0]) if len(per_head) else 0
    for name in BASELINES:
        b = baselines[name]
        rows.append({"row": name, "uas_head": "", "uas_direction": "",
                     "uas": np.nan if b.get("uas") is None else float(b["uas"]), "uuas_head": "",
                     "uuas": float(b["uuas"]), "n_words": n})
    out = pd.DataFrame(rows, columns=BEST_COLUMNS)
    for c in ("uas", "uuas"):
        out[c] = out[c].astype("float64")
    return out


# --------------------------------------------------------------------------------------------------
# the tree-heads step
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeHeadsResult:
    """What :func:`run_tree_heads` computed: ``per_head`` (:data:`HEAD_COLUMNS`, ``tree_heads.csv``),
    ``best`` (:data:`BEST_COLUMNS`, ``tree_heads_best.csv``), ``info`` (:func:`tree_heads`'s counts,
    baselines and timing) and ``summary``, the step's summary JSON (``tree_heads.summary.json``; JSON-safe:
    NaN and infinities are None, :func:`bertlook.io_utils.json_safe`)."""

    per_head: pd.DataFrame
    best: pd.DataFrame
    info: dict[str, Any]
    summary: dict[str, Any]


def run_tree_heads(dev_attention, *, max_sentences: int | None = None,
                   log: Callable[[str], None] | None = None) -> TreeHeadsResult:
    """The ``tree-heads`` step (definitions: docs/definitions.md#single-head-trees-tree-heads): decode a
    tree from every head of every sentence of the word-level store ``dev_attention`` (path or open store;
    the first ``max_sentences`` only), the best heads per layer next to the baselines, and the summary.
    ``log`` gets the progress lines (every 100 sentences)."""
    check_at_least("max_sentences", max_sentences, 1, optional=True)
    where = str(getattr(dev_attention, "path", dev_attention))
    per_head, info = tree_heads(dev_attention, max_sentences=max_sentences, log=log)
    if info["counts"]["n_sentences"] == 0:
        raise BertlookError(f"{where}: no sentence with words to decode")
    best = best_heads(per_head, info["baselines"])
    summary = {
        "dev_attention": where,
        "max_sentences": max_sentences,
        **info["counts"],
        "relation_scheme": info["relation_scheme"],
        "punct_by_xpos": info["punct_by_xpos"],
        "baselines": info["baselines"],
        "best": best.to_dict("records"),
        "seconds": info["seconds"],
        "trees_per_s": info["trees_per_s"],
    }
    return TreeHeadsResult(per_head=per_head, best=best, info=info, summary=json_safe(summary))
