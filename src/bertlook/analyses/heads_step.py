"""The ``heads`` step without the command line (paper Table 1 and Fig 5; numbers only).

:func:`run_heads` (settings :class:`HeadsOptions`) scores the stores (:func:`bertlook.analyses.heads.score_heads`),
builds Table 1 (:mod:`bertlook.analyses.table1`) and the head accuracy table and returns them with the step's
summary (:class:`HeadsResult`); the CLI joins the paper's numbers, writes the files and draws Fig 5.

Definitions: docs/definitions.md#head-accuracy
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd

from bertlook.analyses.heads import (FORCED_BY_SCHEME, HeadScores, head_accuracy_table, resolve_tree_source,
                                     score_heads, store_where)
from bertlook.analyses.table1 import (DEFAULT_ALPHA, Table1Scoring, relation_rows_summary, selection_candidates,
                                      statistics_summary, table1)
from bertlook.attention.store import AttentionStore, open_store
from bertlook.errors import BertlookError


@dataclass(frozen=True)
class HeadsOptions(Table1Scoring):
    """The settings of :func:`run_heads`, with the defaults of the ``bertlook heads`` flags of the same
    names: Table 1's scoring (:class:`~bertlook.analyses.table1.Table1Scoring`: rows, offsets of the baselines,
    the poss switch, bootstrap intervals; ``seed`` is also the cross-fitting seed), the
    paired tests' ``alpha``, the candidate set (``exclude_punct_candidates``), the first ``max_examples``
    sentences of each store, the tree source (``treebank_kind`` / ``treebank_name``, default the dev
    store's meta) and whether the run is ``paper_comparable``."""

    alpha: float = DEFAULT_ALPHA
    exclude_punct_candidates: bool = False
    max_examples: int | None = None
    treebank_kind: str | None = None
    treebank_name: str | None = None
    paper_comparable: bool = False


@dataclass(frozen=True)
class HeadsResult:
    """What :func:`run_heads` computed: ``table`` (Table 1 twin, the run's own numbers: no paper columns;
    :func:`bertlook.reporting.paper_join.join_table1` adds them), ``accuracy`` (every head x relation x
    direction, :func:`bertlook.analyses.heads.head_accuracy_table`), the ``dev`` / ``train`` scores, the tree
    source (``treebank_kind``, ``treebank_name``, ``relation_scheme``) and ``summary``, the step's
    summary JSON (``tables/head_accuracy.summary.json``)."""

    table: pd.DataFrame
    accuracy: pd.DataFrame
    dev: HeadScores
    train: HeadScores | None
    treebank_kind: str
    treebank_name: str | None
    relation_scheme: str
    summary: dict[str, Any]


def run_heads(
    dev_attention: "AttentionStore | str | os.PathLike",
    train_attention: "AttentionStore | str | os.PathLike | None" = None,
    options: HeadsOptions | None = None,
    *,
    outputs: Mapping[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> HeadsResult:
    """The ``heads`` step (definitions: docs/definitions.md#head-accuracy): score every head on the
    word-level ``dev_attention`` store (path or open store; with the cross-fitting folds and both
    candidate sets), and on ``train_attention`` when given (the held-out choice), then Table 1 with
    intervals and paired tests, the head accuracy table and the summary.

    ``outputs``: the files the caller writes, recorded under the summary's ``"outputs"`` (the CLI:
    ``accuracy``, ``table``, ``markdown``, ``figure``); ``log`` gets the warning that a
    ``paper_comparable`` run does not use PTB SD trees (default: :func:`warnings.warn`)."""
    opts = options if options is not None else HeadsOptions()
    dev_store = open_store(dev_attention, level="word")
    kind, name, scheme = resolve_tree_source(dev_store, opts.treebank_kind, opts.treebank_name,
                                             store_where(dev_attention))
    if opts.paper_comparable and kind != "ptb_sd":
        message = f"heads: warning: --paper-comparable with {kind} trees; the paper used gold PTB SD trees"
        if log is not None:
            log(message)
        else:
            warnings.warn(message, stacklevel=2)
    if not 0 < opts.alpha < 1:
        raise BertlookError(f"--alpha must be in (0, 1), got {opts.alpha}")
    dev = score_heads(dev_store, offsets=opts.offsets, poss_from_possessive=opts.poss_from_possessive,
                      max_examples=opts.max_examples, exclude_punct_candidates=opts.exclude_punct_candidates,
                      compare_punct_candidates=True, crossfit_seed=opts.seed)
    train = None
    has_train = isinstance(train_attention, AttentionStore) or bool(train_attention)
    if has_train:
        train = score_heads(open_store(train_attention, level="word"), offsets=opts.offsets,
                            poss_from_possessive=opts.poss_from_possessive, max_examples=opts.max_examples,
                            keep_sentences=False, exclude_punct_candidates=opts.exclude_punct_candidates)
    table = table1(dev, min_count=opts.min_count, train_scores=train, dev_store=dev_store,
                   bootstrap=opts.bootstrap, confidence=opts.confidence, seed=opts.seed,
                   forced_relations=FORCED_BY_SCHEME[scheme], paired=True, alpha=opts.alpha)
    acc = head_accuracy_table(dev)
    all_row = table.iloc[0]
    summary = {
        "dev_attention": store_where(dev_attention),
        "train_attention": store_where(train_attention) if has_train else None,
        "treebank_kind": kind,
        "treebank_name": name,
        "relation_scheme": scheme,
        "paper_comparable": bool(opts.paper_comparable),
        "n_sentences": dev.n_sentences,
        "n_sentences_in_store": len(dev_store),
        "n_words": dev.n_words,
        "num_layers": dev.num_layers,
        "num_heads": dev.num_heads,
        **relation_rows_summary(dev, table),
        "min_count": opts.min_count,
        "offsets": list(dev.offsets),
        "poss_from_possessive": dev.poss_from_possessive,
        "n_poss_words": dev.n_poss,
        "n_poss_switched": dev.n_poss_affected,
        "bootstrap": opts.bootstrap,
        "confidence": opts.confidence,
        "seed": opts.seed,
        "store_excluded": dev_store.meta.get("excluded") or {},
        "alpha": opts.alpha,
        "exclude_punct_candidates": dev.exclude_punct_candidates,
        **statistics_summary(dev, table),
        "all": {"best_head": all_row["best_head"], "direction": all_row["direction"],
                "accuracy": float(all_row["accuracy"]), "baseline_offset": int(all_row["baseline_offset"]),
                "baseline_accuracy": float(all_row["baseline_accuracy"])},
        "train": None if train is None else {"n_sentences": train.n_sentences, "n_words": train.n_words,
                                             "n_poss_switched": train.n_poss_affected},
        "selections": selection_candidates(table, dev, train),
        "outputs": {k: str(v) for k, v in (outputs or {}).items()},
    }
    return HeadsResult(table=table, accuracy=acc, dev=dev, train=train, treebank_kind=kind, treebank_name=name,
                       relation_scheme=scheme, summary=summary)
