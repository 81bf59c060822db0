"""The probes of paper Table 3 (Section 4.2) and what they read: the catalogue and the word-level data.

The probe ids, labels and groups (:data:`PROBES`: Attn, Attn+GloVe, also with the released code's off-by-one,
Distances+GloVe, random-init, right-branching, the controls of the random-init probe and the positional / MLP
variants of issue 16), Table 3's columns and notes, the sizes both engines share (:data:`N_DIST`, :data:`HIDDEN`,
:data:`MAX_BATCH_ELEMENTS`), the checks of probe names and seeds, :class:`ProbeTask` (one probe to train with
every seed) and :class:`ProbeData` (a word-level store plus per-sentence metadata; attention read on demand).

No torch here: reporting (tables, compare) reads the labels in the analysis env (envs/analysis.yaml). The rest
of the probe code, by role:

* :mod:`bertlook.analyses.probe_features`: feature tensors, padded batches, the batch schedule (torch);
* :mod:`bertlook.analyses.probe_models`: score functions, loss and the ``nn.Module`` of each probe (torch);
* :mod:`bertlook.analyses.probe_diagnostics`: optional training diagnostics (loss curve, feature scale; torch);
* :mod:`bertlook.analyses.probe_reference`: the one-model-at-a-time reference, :func:`train_probe
  <bertlook.analyses.probe_reference.train_probe>`, ``evaluate_probe``, ``run_probes``, ``run_layer_ablations``;
* :mod:`bertlook.analyses.probe_uas`: UAS bookkeeping, MST decoding, the right-branching baseline;
* :mod:`bertlook.analyses.probe_frames`: Table 3 and the per-layer ablations as frames, from per-seed fits;
* :mod:`bertlook.analyses.probe_rows`: Table 3's frame of rows and the rows file of ``--rows-out`` / ``--add-rows``;
* :mod:`bertlook.analyses.probe_split`, :mod:`~bertlook.analyses.probe_cohorts`, :mod:`~bertlook.analyses.probe_batch`:
  the batched engine (every probe x seed in one loop, issue 24), driven by :mod:`bertlook.analyses.probe_tables`.

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.attention.store import AttentionStore, open_store
from bertlook.data.glove import GloveVectors
from bertlook.errors import BertlookError

# Table 3 rows, in the paper's order, then bertlook's control probes (no paper number; issue 14), then
# the probe controls of issue 16 (no paper number).
PROBES = ("right_branching", "distances_glove", "random_init_attn_glove", "attn", "attn_glove",
          "attn_glove_released", "glove_only", "attn_glove_uniform", "distances_only", "attn_glove_mlp")
#: controls of the random-init probe: GloVe only (no attention features), Attn+GloVe on exactly uniform maps
CONTROL_PROBES = ("glove_only", "attn_glove_uniform")
#: issue 16: the positional features of Distances+GloVe alone, and Attn+GloVe with an MLP for its weights
VARIANT_PROBES = ("distances_only", "attn_glove_mlp")
#: the rows without a paper number
OWN_PROBES = CONTROL_PROBES + VARIANT_PROBES
TRAINED_PROBES = tuple(p for p in PROBES if p != "right_branching")
GLOVE_PROBES = ("distances_glove", "random_init_attn_glove", "attn_glove", "attn_glove_released", "glove_only",
                "attn_glove_uniform", "attn_glove_mlp")
#: per-layer ablations of Attn+GloVe (`bertlook probe-ablations`): only layer l's attention features kept,
#: or layer l's removed
ABLATION_MODES = ("keep", "drop")
PROBE_LABELS = {
    "right_branching": "Right-branching",
    "distances_glove": "Distances + GloVe",
    "random_init_attn_glove": "Random-init Attn + GloVe",
    "attn": "Attn",
    "attn_glove": "Attn + GloVe",
    "attn_glove_released": "Attn + GloVe (released off-by-one)",
    "glove_only": "GloVe only (control)",
    "attn_glove_uniform": "Attn + GloVe, uniform maps (control)",
    "distances_only": "Distances only (control)",
    "attn_glove_mlp": "Attn + GloVe, MLP weights",
}
#: ``train_probe(feature_scale=...)``: ``none`` (the paper's features), ``n`` (attention features times the
#: sentence's map size ``W+2``: a uniform map gives 1)
FEATURE_SCALES = ("none", "n")
#: the run's Table 3 columns; tables/table3.csv adds ``paper_uas`` (reporting.paper_join.join_table3)
TABLE_COLUMNS = ["probe", "uas_mean", "uas_sd", "n_seeds", "uas_mst_mean", "uas_mst_sd", "note"]
STRUCTURAL_PROBE_NOTE = (
    "Hewitt & Manning's structural probe (80 UUAS, quoted in the paper's text) is not comparable: "
    "UUAS scores undirected edges of a minimum spanning tree, not heads."
)

PTB_PUNCT_XPOS = frozenset({"``", "''", ",", ".", ":", "-LRB-", "-RRB-", "#", "$"})
# Labels that exist in Stanford Dependencies (or ClearNLP) but not in UD: their presence means "SD".
SD_ONLY_RELS = frozenset({
    "pobj", "prep", "nn", "dobj", "possessive", "num", "auxpass", "nsubjpass", "csubjpass", "rcmod",
    "partmod", "infmod", "tmod", "npadvmod", "pcomp", "predet", "preconj", "quantmod", "number",
    "abbrev", "purpcl", "attr", "complm", "rel", "prt",
})
N_DIST = 8  # the positional features of a (dependent, candidate) pair (probe_features.distance_features)
BUCKET_POOL_BATCHES = 50  # training batches are cut from length-sorted pools of 50 batches
MAX_BATCH_ELEMENTS = 2**24  # largest padded [B, K, Wm, Wm+1] (or [B, Wm, Wm+1, 256]) tensor run at once
HIDDEN = 256  # the tanh hidden layer of Distances+GloVe, GloVe only, Distances only and the MLP weights
DEFAULT_SEEDS = (0, 1, 2)


# ===================================================================================== the checks
def check_probes(probes: Sequence[str]) -> None:
    """Every name is one of :data:`PROBES` (else a :class:`BertlookError` listing them)."""
    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise BertlookError(f"unknown probe(s) {', '.join(map(repr, unknown))}; choose from {', '.join(PROBES)}")


def check_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds as a non-empty list of distinct integers."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise BertlookError("at least one seed is needed")
    if len(set(seeds)) != len(seeds):
        raise BertlookError(f"seeds must be distinct, got {seeds}")
    return seeds


def base_kind(kind: str) -> tuple[str, bool]:
    """(model family, released_offbyone) of a Table 3 probe name."""
    if kind == "attn":
        return "attn", False
    if kind in ("attn_glove", "random_init_attn_glove"):
        return "attn_glove", False
    if kind == "attn_glove_released":
        return "attn_glove", True
    if kind == "attn_glove_uniform":
        return "attn_glove", False
    if kind == "distances_glove":
        return "distances_glove", False
    if kind == "glove_only":
        return "glove_only", False
    if kind == "distances_only":
        return "distances_only", False
    if kind == "attn_glove_mlp":
        return "attn_glove_mlp", False
    raise BertlookError(f"unknown probe {kind!r} (trainable probes: {', '.join(TRAINED_PROBES)})")


def is_missing(v) -> bool:
    """``v`` is NaN / None / NA (``pd.isna``; False for values it cannot judge, e.g. lists)."""
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# =========================================================================================== data
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


# ========================================================================================== tasks
# The batched engine (bertlook.analyses.probe_batch, torch) trains every probe x seed of Table 3, of Table 3
# on the norm maps and of the per-layer ablations together (driven by bertlook.analyses.probe_tables); the
# task type and the corpus check they share are here, below both.
#: probes of the attention family (one Attn+GloVe cohort per attention source)
ATTN_PROBES = ("attn", "attn_glove", "attn_glove_released", "attn_glove_uniform", "random_init_attn_glove")
#: probes that read no attention (identical on every store of the same sentences)
NO_ATTENTION_PROBES = ("distances_glove", "glove_only", "distances_only")


@dataclasses.dataclass(frozen=True)
class ProbeTask:
    """One probe to train with every seed: ``probe`` (a name of :data:`PROBES`), the attention ``source``
    it reads (``model``, ``norm``, ``random``), ``heads`` (flattened head indices read, ascending; None = all)."""

    probe: str
    source: str = "model"
    heads: tuple[int, ...] | None = None

    @property
    def family(self) -> str:
        """The batched engine's cohort family: ``attn``, ``mlp``, ``hidden`` or ``offset``."""
        if self.probe in ATTN_PROBES:
            return "attn"
        try:
            return {"attn_glove_mlp": "mlp", "distances_glove": "hidden", "glove_only": "hidden",
                    "distances_only": "offset"}[self.probe]
        except KeyError:
            raise BertlookError(f"probe {self.probe!r} is not trained (no batched form)") from None

    @property
    def maps(self) -> str:
        """The attention read: ``uniform`` (exactly uniform maps of the sentences) or ``source``."""
        return "uniform" if self.probe == "attn_glove_uniform" else self.source


def corpus_signature(data: ProbeData) -> tuple:
    """What two stores must share for their probes to train in one loop (and for a probe reading no
    attention to give the same result on both): sentence ids, words, gold heads, punctuation."""
    recs = data.store.records
    return tuple((s.id, tuple(recs[s.index]["tokens"]), s.heads.tobytes(), s.punct.tobytes())
                 for s in data.sentences)
