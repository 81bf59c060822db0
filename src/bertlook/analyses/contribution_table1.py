"""Table 1 per map kind on a seeded sample of dev sentences (the ``contributions`` step; numbers only).

Each sampled sentence is aligned as ``extract-words`` aligns it (:func:`bertlook.attention.extract_words.
prepare_word_examples`), the model's maps of every kind (:func:`bertlook.analyses.contribution_maps.token_maps`)
are turned into word-level maps as ``extract-words`` turns the attention (:func:`bertlook.attention.alignment.
token_to_word_maps`: TO = the sum over the word's tokens, FROM = ``from_split``) and held in memory as one word
store per kind (:class:`MemoryWordStore`). A per-head kind (attention, norm, ALTI per head) has its heads; a
per-layer kind (rollout, ALTI, ALTI over layers, value zeroing) one "head" per layer, as
:class:`bertlook.analyses.rollout.RolloutStore`. Each store is scored by :func:`bertlook.analyses.heads.score_heads`
and :func:`bertlook.analyses.table1.table1` unchanged: the best head (or layer) per relation, its accuracy and the
best offset baseline, every kind on the same sentences.

Definitions: docs/definitions.md#alti-and-value-zeroing, docs/definitions.md#head-accuracy
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.contribution_maps import KINDS, PER_HEAD_KINDS, RunTimes, token_maps
from bertlook.analyses.heads import FORCED_BY_SCHEME, TREEBANK_KINDS, score_heads
from bertlook.analyses.table1 import Table1Scoring, table1
from bertlook.attention.store import AttentionStore
from bertlook.errors import BertlookError

#: the columns of table1_contributions.csv
TABLE1_COLUMNS = ["kind", "per", "relation", "best", "direction", "accuracy", "ci_low", "ci_high",
                  "baseline_offset", "baseline_accuracy", "count"]


@dataclass(frozen=True)
class Table1Settings(Table1Scoring):
    """How the sentences are scored (the ``heads`` step's settings, :class:`~bertlook.analyses.table1.Table1Scoring`
    and :func:`bertlook.analyses.table1.table1`), the tree source and how the word maps are made."""

    treebank_kind: str = "ud"
    from_split: str = "mean"
    text: str = "spaces"


class MemoryWordStore(AttentionStore):
    """A word-level store held in memory: ``records`` (``id``, word-level ``tokens``, the gold fields) and one map
    ``[layer, head, W+2, W+2]`` (float64) per record; what :mod:`bertlook.analyses.heads` and
    :mod:`bertlook.analyses.table1` read (``records``, ``get``, ``len``, ``num_layers``, ``num_heads``, ``meta``,
    ``path``, ``level``). ``path``: how messages name it."""

    def __init__(self, path: str, records: list[dict[str, Any]], maps: list["np.ndarray"],
                 meta: dict[str, Any]) -> None:  # noqa: D107 - no AttentionStore.__init__: no files
        self._files = OrderedDict()
        if not records or len(records) != len(maps):
            raise BertlookError(f"{path}: {len(records)} records and {len(maps)} maps (need one map per record)")
        self.path = path
        self.records, self._maps = records, maps
        self.num_layers, self.num_heads = int(maps[0].shape[0]), int(maps[0].shape[1])
        self.level = "word"
        self.meta = {**meta, "level": "word", "num_layers": self.num_layers, "num_heads": self.num_heads}

    def get(self, i: int) -> "np.ndarray":
        return self._maps[i]

    def check_map(self, rec: dict[str, Any], attn: "np.ndarray") -> None:
        """Maps made in this process from checked model outputs: nothing to check."""

    def close(self) -> None:
        """Nothing open."""


def sample_sentences(sentences: list, picked: Sequence[int]) -> list:
    """The ``picked`` sentences, each with its store id (its ``sent_id``, else its 1-based position in the whole
    file, as ``extract-words`` names it) set as ``sent_id``, so that the sample's ids are the full run's."""
    from bertlook.attention.extract_words import sentence_id  # lazy: transformers-free but heavy imports

    return [dataclasses.replace(sentences[i], sent_id=sentence_id(sentences[i], i)) for i in picked]


def _word_record(record: dict[str, Any], al) -> dict[str, Any]:
    """The word-level record of an aligned sentence (as ``extract-words`` stores it)."""
    return {"id": record["id"], "tokens": [al.tokens[0], *record["words"], al.tokens[-1]],
            "heads": record.get("heads"), "rels": record.get("rels"), "upos": record.get("upos"),
            "xpos": record.get("xpos")}


def word_maps(model, examples: list, alignments: dict, *, pad_id: int, causal: bool, batch_size: int,
              from_split: str, times: RunTimes) -> tuple[list[dict[str, Any]], dict[str, list["np.ndarray"]]]:
    """The word-level records and, per kind of :data:`KINDS`, one ``[layer, head, W+2, W+2]`` float64 map per
    example (a per-layer kind: ``head`` 1) of the aligned ``examples`` (``(record, input_ids, _)``)."""
    import torch  # lazy: torch only where the model runs
    from bertlook.attention.alignment import token_to_word_maps, word_slots  # lazy: see above

    records: list[dict[str, Any]] = []
    maps: dict[str, list[np.ndarray]] = {k: [] for k in KINDS}
    for b0 in range(0, len(examples), batch_size):
        batch = examples[b0:b0 + batch_size]
        per_example = token_maps(model, [ids for _, ids, _ in batch], pad_id=pad_id, causal=causal, times=times)
        for (record, _ids, _tt), ex in zip(batch, per_example):
            al = alignments[record["id"]]
            starts, counts = word_slots(al)
            records.append(_word_record(record, al))
            for kind in KINDS:
                m = torch.from_numpy(ex[kind] if kind in PER_HEAD_KINDS else ex[kind][:, None])  # [layer, head, n, n]
                maps[kind].append(token_to_word_maps(m, starts, counts, from_split=from_split).numpy())
    return records, maps


def _kind_rows(kind: str, table: "pd.DataFrame") -> list[dict[str, Any]]:
    """The rows of ``table1_contributions.csv`` for one kind's Table 1: its best head ("L-H") or layer ("L")."""
    per_head = kind in PER_HEAD_KINDS
    rows = []
    for row in table.itertuples(index=False):
        best = str(row.best_head) if per_head else str(row.best_head).split("-")[0]
        rows.append({"kind": kind, "per": "head" if per_head else "layer", "relation": row.relation, "best": best,
                     "direction": row.direction, "accuracy": float(row.accuracy),
                     "ci_low": float(getattr(row, "ci_low", np.nan)), "ci_high": float(getattr(row, "ci_high", np.nan)),
                     "baseline_offset": int(row.baseline_offset), "baseline_accuracy": float(row.baseline_accuracy),
                     "count": int(row.count)})
    return rows


def score_kinds(records: list[dict[str, Any]], maps: dict[str, list["np.ndarray"]], settings: Table1Settings, *,
                where: str, meta: dict[str, Any]) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Table 1 of every kind of ``maps`` on the same ``records`` -> ``(table, summary)``: :data:`TABLE1_COLUMNS`
    (one block per kind, in :data:`KINDS` order) and per kind its best head / layer of the ``All`` row."""
    if settings.treebank_kind not in TREEBANK_KINDS:
        raise BertlookError(f"{where}: unknown tree source {settings.treebank_kind!r} "
                            f"({'|'.join(sorted(TREEBANK_KINDS))})")
    scheme = TREEBANK_KINDS[settings.treebank_kind][0]
    rows: list[dict[str, Any]] = []
    best: dict[str, Any] = {}
    n_words = 0
    for kind in KINDS:
        store = MemoryWordStore(f"{where} ({kind} maps)", records, maps[kind], {**meta, "map": kind})
        scores = score_heads(store, offsets=settings.offsets, poss_from_possessive=settings.poss_from_possessive)
        table = table1(scores, min_count=settings.min_count, dev_store=store, bootstrap=settings.bootstrap,
                       confidence=settings.confidence, seed=settings.seed, forced_relations=FORCED_BY_SCHEME[scheme])
        kind_rows = _kind_rows(kind, table)
        rows += kind_rows
        best[kind] = next((r for r in kind_rows if r["relation"] == "All"), None)
        n_words = scores.n_words
    frame = pd.DataFrame(rows, columns=TABLE1_COLUMNS)
    return frame, {"n_words": n_words, "relation_scheme": scheme, "best_all": best}
