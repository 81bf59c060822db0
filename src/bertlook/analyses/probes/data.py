"""The word-level data the probes of Table 3 read: :class:`ProbeData` (a word-level store plus per-sentence
metadata, :class:`SentenceMeta`; attention read on demand) and what two stores must share to train together.

No torch here. Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from bertlook.analyses.probes.catalogue import PTB_PUNCT_XPOS, SD_ONLY_RELS
from bertlook.attention.store import AttentionStore, open_store
from bertlook.data.glove import GloveVectors
from bertlook.errors import BertlookError


@dataclasses.dataclass
class SentenceMeta:
    """What is kept in RAM per sentence (no attention)."""

    index: int  # position in the store
    id: Any
    n_words: int
    heads: np.ndarray  # [word] int64, 0 = ROOT
    punct: np.ndarray  # [word] bool
    glove_rows: np.ndarray | None = None  # [word] int64, -1 = unknown word


class ProbeData:
    """A word-level store plus per-sentence metadata; attention is read batch by batch."""

    def __init__(self, store: "AttentionStore | str | os.PathLike", *, glove: "GloveVectors | None" = None,
                 punct_by_xpos: bool | None = None, max_sentences: int | None = None,
                 what: str = "attention store") -> None:
        self.store = open_store(store, level="word", what=what)
        self.path = str(self.store.path)
        self.num_heads_total = self.store.num_layers * self.store.num_heads
        records = self.store.records
        if max_sentences is not None:
            records = records[: max(0, int(max_sentences))]
        self.relation_scheme = self._scheme(records) if punct_by_xpos is None else ("sd" if punct_by_xpos else "ud")
        self.punct_by_xpos = self.relation_scheme in ("sd", "clearnlp")
        self.sentences: list[SentenceMeta] = []
        self.n_empty = 0
        for idx, rec in enumerate(records):
            meta = self._sentence(idx, rec)
            if meta.n_words == 0:
                self.n_empty += 1
                continue
            self.sentences.append(meta)
        self.n_words = int(sum(s.n_words for s in self.sentences))
        self.n_eval_words = int(sum(int((~s.punct).sum()) for s in self.sentences))
        self.glove = None
        self.n_oov = 0
        if glove is not None:
            self.attach_glove(glove)

    def _scheme(self, records) -> str:
        declared = str(self.store.meta.get("relation_scheme", "") or "").lower()
        if declared in ("sd", "clearnlp", "ud"):
            return declared
        for rec in records:
            if any(str(r) in SD_ONLY_RELS for r in rec.get("rels", ()) or ()):
                return "sd"
        return "ud"

    def _sentence(self, idx: int, rec: dict) -> SentenceMeta:
        sid = rec.get("id", idx)
        where = f"{self.path}: sentence {sid!r}"
        tokens = rec.get("tokens")
        n = int(rec.get("n", len(tokens) if tokens is not None else -1))
        if tokens is None or len(tokens) != n or n < 2:
            raise BertlookError(f"{where}: expected tokens [CLS] w1..wW [SEP], got {n} positions")
        W = n - 2
        heads = rec.get("heads")
        rels = rec.get("rels")
        if heads is None or rels is None:
            raise BertlookError(f"{where}: record has no gold `heads` / `rels` (not a treebank word store?)")
        if len(heads) != W or len(rels) != W:
            raise BertlookError(f"{where}: {len(heads)} heads and {len(rels)} relations for {W} words")
        try:
            heads_a = np.asarray([int(h) for h in heads], dtype=np.int64)  # [word]
        except (TypeError, ValueError):
            raise BertlookError(f"{where}: heads must be integers, got {heads[:10]!r}") from None
        if W and (heads_a.min() < 0 or heads_a.max() > W):
            raise BertlookError(f"{where}: head indices must lie in 0..{W}, got {heads_a.tolist()}")
        xpos = rec.get("xpos") or [None] * W
        punct = np.array([
            str(r) == "punct" or (self.punct_by_xpos and x in PTB_PUNCT_XPOS) for r, x in zip(rels, xpos)
        ], dtype=bool).reshape(W)  # [word]
        return SentenceMeta(index=idx, id=sid, n_words=W, heads=heads_a, punct=punct)

    def attach_glove(self, glove: "GloveVectors") -> None:
        """Look up every word once (row numbers only; vectors are read per batch)."""
        if self.glove is glove:
            return
        self.glove = glove
        self.n_oov = 0
        for s in self.sentences:
            words = self.store.records[s.index]["tokens"][1:-1]
            s.glove_rows, oov = glove.rows(words)  # [word], int
            self.n_oov += oov

    def summary(self) -> dict[str, Any]:
        out = {
            "path": self.path,
            "n_sentences": len(self.sentences),
            "n_words": self.n_words,
            "n_eval_words": self.n_eval_words,
            "n_punct_words": self.n_words - self.n_eval_words,
            "empty_sentences_skipped": self.n_empty,
            "store_excluded": self.store.meta.get("excluded", {}),
            "relation_scheme": self.relation_scheme,
            "punct_by_xpos": self.punct_by_xpos,
            "num_heads_total": self.num_heads_total,
        }
        if self.glove is not None:
            out["glove_oov_words"] = self.n_oov
            out["glove_oov_rate"] = self.n_oov / self.n_words if self.n_words else 0.0
        return out


def as_probe_data(store, *, glove=None, max_sentences=None, what="attention store") -> ProbeData:
    """``store`` as a :class:`ProbeData` (a path or store is opened; a :class:`ProbeData` is returned as is, with
    ``glove`` attached, or re-opened on its first ``max_sentences`` sentences when that cuts it)."""
    if isinstance(store, ProbeData):
        if max_sentences is not None and max_sentences < len(store.sentences):
            data = ProbeData(store.store, glove=glove if glove is not None else store.glove,
                             max_sentences=max_sentences,
                             punct_by_xpos=store.punct_by_xpos, what=what)
            return data
        if glove is not None:
            store.attach_glove(glove)
        return store
    return ProbeData(store, glove=glove, max_sentences=max_sentences, what=what)


def corpus_signature(data: ProbeData) -> tuple:
    """What two stores must share for their probes to train in one loop (and for a probe reading no
    attention to give the same result on both): sentence ids, words, gold heads, punctuation."""
    recs = data.store.records
    return tuple((s.id, tuple(recs[s.index]["tokens"]), s.heads.tobytes(), s.punct.tobytes())
                 for s in data.sentences)
