"""Attention-based dependency-parsing probes (paper Table 3, Section 4.2).

Trains and evaluates the Attn, Attn+GloVe (also with the released code's off-by-one), Distances+GloVe,
random-init and right-branching probes on word-level stores, plus two controls of the random-init probe
(GloVe only; Attn+GloVe on exactly uniform maps) and, issue 16, a positional control (Distances only) and
an MLP variant of Attn+GloVe: :func:`build_features`, :func:`train_probe` (with
optional training diagnostics: loss curve, dev UAS per epoch, feature scale), :func:`evaluate_probe`,
:func:`bertlook.analyses.trees.chu_liu_edmonds` (MST decoding), :func:`run_probes`,
:func:`run_layer_ablations` (per-layer ablations of Attn+GloVe): the one-model-at-a-time reference.
:func:`run_probe_tables` (issue 24): Table 3, Table 3 on the norm maps and the ablations with every model
trained in one loop by :mod:`bertlook.analyses.probe_batch` (torch, imported there only), the rows assembled
by the same :func:`table3_frame` / :func:`ablation_frame`.

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import json

import numpy as np
import pandas as pd

from bertlook.analyses.trees import chu_liu_edmonds  # the MST decoder (shared with tree-heads)
from bertlook.attention.store import AttentionStore, open_store
from bertlook.data.glove import GloveVectors
from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path

# torch is imported inside the functions that train and evaluate: the probe labels and ids here are
# also read by reporting (tables, compare) in the analysis env (envs/analysis.yaml), which has no torch.
if TYPE_CHECKING:  # pragma: no cover
    import torch

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
N_DIST = 8
BUCKET_POOL_BATCHES = 50  # training batches are cut from length-sorted pools of 50 batches
MAX_BATCH_ELEMENTS = 2**24  # largest padded [B, K, Wm, Wm+1] (or [B, Wm, Wm+1, 256]) tensor run at once
HIDDEN = 256
DEFAULT_SEEDS = (0, 1, 2)


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


def _as_data(store, *, glove=None, max_sentences=None, what="attention store") -> ProbeData:
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


# ====================================================================================== features
def candidate_vectors(word_vecs: np.ndarray, root_vec: np.ndarray, *, released_offbyone: bool = False) -> np.ndarray:
    """Vectors of the candidates ``j = 0..W`` (``[W+1, d]``) for one sentence.

    Correct: ``[v_ROOT, v_1, ..., v_W]``. Released (off by one): ``[v_1, ..., v_W, v_ROOT]``, i.e.
    candidate j gets word j+1's vector and the last candidate gets the ROOT vector.
    """
    word_vecs = np.asarray(word_vecs)  # [word, d_glove]
    root = np.asarray(root_vec, dtype=word_vecs.dtype).reshape(1, -1)  # [1, d_glove]
    if released_offbyone:
        return np.concatenate([word_vecs, root], axis=0)  # [candidate, d_glove]; ROOT last
    return np.concatenate([root, word_vecs], axis=0)  # [candidate, d_glove]


@functools.lru_cache(maxsize=512)
def distance_features(n_words: int) -> np.ndarray:
    """``[W, W+1, 8]`` float32: dependent i (rows, words 1..W) x candidate j (0 = ROOT, 1..W).

    Columns: right distance ``max(j-i, 0)/W``, left distance ``max(i-j, 0)/W``, offset ``j-i`` = 0,
    -1, +1, -2, +2 indicators, ROOT indicator (the only non-zero feature of ``j = 0``).
    """
    W = int(n_words)
    i = np.arange(1, W + 1)[:, None]  # [word, 1]
    j = np.arange(0, W + 1)[None, :]  # [1, candidate]
    off = (j - i).astype(np.float32)  # [word, candidate]
    feats = np.zeros((W, W + 1, N_DIST), dtype=np.float32)  # [word, candidate, probe_feature]
    feats[..., 0] = np.maximum(off, 0) / W  # [word, candidate]
    feats[..., 1] = np.maximum(-off, 0) / W  # [word, candidate]
    for col, k in zip(range(2, 7), (0, -1, 1, -2, 2)):
        feats[..., col] = off == k  # [word, candidate]
    feats[:, 0, :] = 0.0  # [word, probe_feature]: candidate ROOT
    feats[:, 0, 7] = 1.0  # [word]
    feats.setflags(write=False)
    return feats


def build_features(words: "torch.Tensor", root: "torch.Tensor", a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
    """Features ``x_ij`` as one tensor ``[B, Wm, Wm+1, 2K]`` (reference form; tests, gradient checks).

    Inputs in the batch layout (heads first): ``words[b, k, i, j] = A_k(word i -> word j)`` (0-based
    words), ``root[b, r, k, i]`` with ``r`` = 0: ``A_k(i->[CLS])``, 1: ``A_k(i->[SEP])``,
    2: ``A_k([CLS]->i)``, 3: ``A_k([SEP]->i)``. Candidate 0 is ROOT:
    ``x_i0 = [a root0 + b root1] ++ [a root2 + b root3]``; ``x_ij = [A(i->j)] ++ [A(j->i)]``.
    """
    import torch

    fwd_words = words.permute(0, 2, 3, 1)  # [batch, word (i), word (j), layer*head]
    bwd_words = words.permute(0, 3, 2, 1)  # [batch, word (i), word (j), layer*head] = A(j -> i)
    root_fwd = (a * root[:, 0] + b * root[:, 1]).transpose(1, 2)  # [batch, word, layer*head]
    root_bwd = (a * root[:, 2] + b * root[:, 3]).transpose(1, 2)  # [batch, word, layer*head]
    fwd = torch.cat([root_fwd.unsqueeze(2), fwd_words], dim=2)  # [batch, word, candidate, layer*head]
    bwd = torch.cat([root_bwd.unsqueeze(2), bwd_words], dim=2)  # [batch, word, candidate, layer*head]
    return torch.cat([fwd, bwd], dim=-1)  # [batch, word, candidate, probe_feature]


def attn_glove_scores(x: "torch.Tensor", dep_vecs: "torch.Tensor", cand_vecs: "torch.Tensor",
                      weight: "torch.Tensor", bias: "torch.Tensor") -> "torch.Tensor":
    """Reference form: ``score_ij = sum_m (weight [v_i ; v_j] + bias)_m x_ij[m]`` -> ``[B, Wm, Wm+1]``.

    ``x`` from :func:`build_features`, ``cand_vecs`` ``[B, Wm+1, d]`` in candidate order (0 = ROOT).
    The probes use the equivalent :func:`attn_glove_scores_fast`.
    """
    import torch

    pair = torch.nn.functional.linear(  # [batch, word, candidate, probe_feature]
        torch.cat([dep_vecs.unsqueeze(2).expand(-1, -1, cand_vecs.shape[1], -1),
                   cand_vecs.unsqueeze(1).expand(-1, dep_vecs.shape[1], -1, -1)], dim=-1),
        weight, bias)
    return (pair * x).sum(-1)  # [batch, word, candidate]


def attn_scores_fast(words, root, a, b, w) -> "torch.Tensor":
    """Attn-only scores ``w . x_ij`` (``[B, Wm, Wm+1]``) without building ``x``.

    ``w . x_ij = w1 . A(i->j) + w2 . A(j->i)``: one product of ``[w1, w2]`` with the word-word
    attention over the heads axis, the second row transposed, plus the ROOT column.
    """
    import torch

    B, K, Wm, _ = words.shape
    W2 = torch.stack([w[:K], w[K:]])  # [direction, layer*head]
    r = torch.matmul(W2, words.reshape(B, K, Wm * Wm)).reshape(B, 2, Wm, Wm)  # [batch, direction, word, word]
    s_words = r[:, 0] + r[:, 1].transpose(1, 2)  # [batch, word, word]
    rr = torch.einsum("rk,bski->bsri", W2, root)  # [batch, root_part, direction, word]
    s_root = a * (rr[:, 0, 0] + rr[:, 2, 1]) + b * (rr[:, 1, 0] + rr[:, 3, 1])  # [batch, word]
    return torch.cat([s_root.unsqueeze(2), s_words], dim=2)  # [batch, word, candidate]


def attn_glove_scores_fast(words, root, a, b, dep_vecs, cand_vecs, weight, bias) -> "torch.Tensor":
    """Attn+GloVe scores (``[B, Wm, Wm+1]``) equal to :func:`attn_glove_scores` on :func:`build_features`.

    With ``weight [v_i ; v_j] + bias = P_i + Q_j`` (``P`` from the dependent's vector plus the bias,
    ``Q`` from the candidate's; halves 1 and 2 of the 2K features) and ``F = words``
    (``F_kij = A_k(i->j)``), the word candidates score
    ``sum_k F_kij (P1_ki + Q1_kj) + sum_k F_kji (P2_ki + Q2_kj)``; the second sum is
    ``Y_ji`` with ``Y_pq = sum_k F_kpq (Q2_kp + P2_kq)``, so only ``F`` is needed. The ROOT column
    comes from the [CLS]/[SEP] parts with ``Q_0``. Heads-first layout: the sums over ``k`` run over
    contiguous ``Wm x Wm`` planes; no ``[B, Wm, Wm+1, 2K]`` feature tensor is built.
    """
    import torch

    B, K, Wm, _ = words.shape
    d = dep_vecs.shape[-1]
    P = _linear_t(dep_vecs, weight[:, :d], bias)  # [batch, probe_feature, word]
    Q = _linear_t(cand_vecs, weight[:, d:], None)  # [batch, probe_feature, candidate]
    P1, P2 = P[:, :K], P[:, K:]  # [batch, layer*head, word] each
    Q1, Q2 = Q[:, :K, 1:], Q[:, K:, 1:]  # [batch, layer*head, word] each (word candidates)
    s_words = ((words * (P1[:, :, :, None] + Q1[:, :, None, :])).sum(1)  # [batch, word, word]
               + (words * (Q2[:, :, :, None] + P2[:, :, None, :])).sum(1).transpose(1, 2))
    wr = P + Q[:, :, :1]  # [batch, probe_feature, word]: per-feature weights of the ROOT candidate
    fwd = a * root[:, 0] + b * root[:, 1]  # [batch, layer*head, word]
    bwd = a * root[:, 2] + b * root[:, 3]  # [batch, layer*head, word]
    s_root = (fwd * wr[:, :K]).sum(1) + (bwd * wr[:, K:]).sum(1)  # [batch, word]
    return torch.cat([s_root.unsqueeze(2), s_words], dim=2)  # [batch, word, candidate]


def _linear_t(x, weight, bias):
    import torch

    return torch.nn.functional.linear(x, weight, bias).transpose(1, 2)


def _masked_log_softmax(scores: "torch.Tensor", cand_mask: "torch.Tensor") -> "torch.Tensor":
    import torch

    scores = scores.masked_fill(~cand_mask[:, None, :], float("-inf"))  # [batch, word, candidate]
    return torch.log_softmax(scores, dim=-1)  # [batch, word, candidate]


def probe_loss(scores: "torch.Tensor", heads: "torch.Tensor", dep_mask: "torch.Tensor",
               cand_mask: "torch.Tensor") -> "torch.Tensor":
    """Cross-entropy summed over the real (unpadded) words of all sentences of the batch."""
    return -_gold_log_probs(scores, heads, dep_mask, cand_mask).sum()


def _gold_log_probs(scores: "torch.Tensor", heads: "torch.Tensor", dep_mask: "torch.Tensor",
                    cand_mask: "torch.Tensor") -> "torch.Tensor":
    """``[B, Wm]`` log-probability of each real word's gold head, 0 on padding (:func:`probe_loss` sums it)."""
    import torch

    logp = _masked_log_softmax(scores, cand_mask)  # [batch, word, candidate]
    gold = logp.gather(-1, heads.unsqueeze(-1)).squeeze(-1)  # [batch, word]
    return torch.where(dep_mask, gold, torch.zeros_like(gold))  # [batch, word]


# ========================================================================================= batches
@dataclasses.dataclass
class Batch:
    lengths: "torch.Tensor"  # [batch]
    heads: "torch.Tensor"  # [batch, word] long (0 on padding)
    dep_mask: "torch.Tensor"  # [batch, word] bool
    cand_mask: "torch.Tensor"  # [batch, candidate] bool
    punct: "torch.Tensor"  # [batch, word] bool
    words: "torch.Tensor | None" = None  # [batch, layer*head, word, word]: words[b, k, i, j] = A_k(i -> j)
    # [batch, root_part, layer*head, word]: A(i->[CLS]), A(i->[SEP]), A([CLS]->i), A([SEP]->i)
    root: "torch.Tensor | None" = None
    dep_vecs: "torch.Tensor | None" = None  # [batch, word, d_glove]
    cand_vecs: "torch.Tensor | None" = None  # [batch, candidate, d_glove], candidate order (0 = ROOT)
    dist: "torch.Tensor | None" = None  # [batch, word, candidate, probe_feature]


def make_batch(data: ProbeData, sents: Sequence[SentenceMeta], *, attn: bool, glove: bool, dist: bool,
               released_offbyone: bool = False, uniform_maps: bool = False, feature_scale: str = "none",
               head_subset: Sequence[int] | None = None) -> Batch:
    """Pad ``sents`` to the longest and read their attention (float16 store reads -> float32).

    ``head_subset``: the flattened head indices (``layer * num_heads + head``, ascending) whose maps make the
    attention features, in that order (the per-layer ablations); None: every head.

    ``uniform_maps``: a read-only uniform view of the store instead of its maps: every attention row of
    a sentence of W words is exactly ``1/(W+2)`` (float32) over its ``W+2`` positions; the maps are not
    read (the control ``attn_glove_uniform``). ``feature_scale="n"``: the attention features of each
    sentence multiplied by ``W+2`` (a uniform row -> 1); ``"none"``: as read.
    """
    import torch

    if feature_scale not in FEATURE_SCALES:
        raise BertlookError(f"feature_scale must be one of {', '.join(FEATURE_SCALES)}, got {feature_scale!r}")

    B = len(sents)
    Wm = max(s.n_words for s in sents)
    lengths = np.array([s.n_words for s in sents], dtype=np.int64)  # [batch]
    heads = np.zeros((B, Wm), dtype=np.int64)  # [batch, word]
    punct = np.zeros((B, Wm), dtype=bool)  # [batch, word]
    for b, s in enumerate(sents):
        heads[b, : s.n_words] = s.heads
        punct[b, : s.n_words] = s.punct
    ar = np.arange(Wm + 1)  # [candidate]
    batch = Batch(
        lengths=torch.from_numpy(lengths),
        heads=torch.from_numpy(heads),
        dep_mask=torch.from_numpy(ar[None, :Wm] < lengths[:, None]),  # [batch, word]
        cand_mask=torch.from_numpy(ar[None, :] <= lengths[:, None]),  # [batch, candidate]
        punct=torch.from_numpy(punct),
    )
    sel = None if head_subset is None else np.asarray(head_subset, dtype=np.int64)  # [layer*head]: the heads kept
    if attn and uniform_maps:
        K = data.num_heads_total if sel is None else len(sel)
        words = np.zeros((B, K, Wm, Wm), dtype=np.float32)  # [batch, layer*head, word, word]
        root = np.zeros((B, 4, K, Wm), dtype=np.float32)  # [batch, root_part, layer*head, word]
        for b, s in enumerate(sents):
            W = s.n_words
            u = np.float32(1.0) / np.float32(W + 2)  # every entry of a uniform row over [CLS] w1..wW [SEP]
            words[b, :, :W, :W] = u  # [layer*head, word, word]
            root[b, :, :, :W] = u  # [root_part, layer*head, word]
        batch.words = torch.from_numpy(words)  # [batch, layer*head, word, word]
        batch.root = torch.from_numpy(root)  # [batch, root_part, layer*head, word]
    elif attn:
        K = data.num_heads_total if sel is None else len(sel)
        # staged in float16 (copies of the checked maps read from the store), converted by torch in one call
        words = np.zeros((B, K, Wm, Wm), dtype=np.float16)  # [batch, layer*head, word, word]
        root = np.zeros((B, 4, K, Wm), dtype=np.float16)  # [batch, root_part, layer*head, word]
        for b, s in enumerate(sents):
            W = s.n_words
            A = data.store.get(s.index)  # [layer, head, query_word, key_word]
            if A.shape[-1] != W + 2:
                raise BertlookError(f"{data.path}: sentence {s.id!r}: map of size {A.shape[-1]} for {W} words")
            A = A.reshape(data.num_heads_total, W + 2, W + 2)  # [layer*head, query_word, key_word]
            if sel is not None:
                A = A[sel]  # [layer*head, query_word, key_word]: the heads kept
            words[b, :, :W, :W] = A[:, 1 : W + 1, 1 : W + 1]  # [layer*head, word, word]
            root[b, 0, :, :W] = A[:, 1 : W + 1, 0]  # [layer*head, word]: word -> [CLS]
            root[b, 1, :, :W] = A[:, 1 : W + 1, W + 1]  # [layer*head, word]: word -> [SEP]
            root[b, 2, :, :W] = A[:, 0, 1 : W + 1]  # [layer*head, word]: [CLS] -> word
            root[b, 3, :, :W] = A[:, W + 1, 1 : W + 1]  # [layer*head, word]: [SEP] -> word
        batch.words = torch.from_numpy(words).float()  # [batch, layer*head, word, word]
        batch.root = torch.from_numpy(root).float()  # [batch, root_part, layer*head, word]
    if attn and feature_scale == "n":
        n = torch.from_numpy(lengths + 2).float()  # [batch]: map size W+2 of each sentence
        batch.words = batch.words * n[:, None, None, None]  # [batch, layer*head, word, word]
        batch.root = batch.root * n[:, None, None, None]  # [batch, root_part, layer*head, word]
    if glove:
        if data.glove is None:
            raise BertlookError(f"{data.path}: this probe needs GloVe vectors")
        d = data.glove.dim
        rows = np.concatenate([s.glove_rows for s in sents])  # [word]: the words of all sentences, concatenated
        vecs = data.glove.vectors(rows)  # [word, d_glove]: all sentences, concatenated
        dep = np.zeros((B, Wm, d), dtype=np.float32)  # [batch, word, d_glove]
        cand = np.zeros((B, Wm + 1, d), dtype=np.float32)  # [batch, candidate, d_glove]
        root_vec = np.zeros(d, dtype=np.float32)  # [d_glove]: the fixed ROOT vector
        start = 0
        for b, s in enumerate(sents):
            W = s.n_words
            wv = vecs[start : start + W]  # [word, d_glove]
            start += W
            dep[b, :W] = wv
            # [candidate, d_glove]
            cand[b, : W + 1] = candidate_vectors(wv, root_vec, released_offbyone=released_offbyone)
        batch.dep_vecs = torch.from_numpy(dep)  # [batch, word, d_glove]
        batch.cand_vecs = torch.from_numpy(cand)  # [batch, candidate, d_glove]
    if dist:
        feats = np.zeros((B, Wm, Wm + 1, N_DIST), dtype=np.float32)  # [batch, word, candidate, probe_feature]
        for b, s in enumerate(sents):
            feats[b, : s.n_words, : s.n_words + 1] = distance_features(s.n_words)  # [word, candidate, probe_feature]
        batch.dist = torch.from_numpy(feats)  # [batch, word, candidate, probe_feature]
    return batch


# ========================================================================================== models
def _modules():
    import torch
    from torch import nn

    class AttnProbe(nn.Module):
        """Attn-only: ``score = w . x_ij``."""

        kind = "attn"
        needs = {"attn"}

        def __init__(self, num_heads_total: int):
            super().__init__()
            self.num_heads_total = int(num_heads_total)
            self.root_ab = nn.Parameter(torch.ones(2))
            self.w = nn.Parameter(torch.zeros(2 * self.num_heads_total))  # [probe_feature]
            self.released_offbyone = False
            self.glove_dim = None

        def forward(self, batch: Batch) -> torch.Tensor:
            # [batch, word, candidate]
            return attn_scores_fast(batch.words, batch.root, self.root_ab[0], self.root_ab[1], self.w)

        def forward_reference(self, batch: Batch) -> torch.Tensor:
            # [batch, word, candidate, probe_feature]
            x = build_features(batch.words, batch.root, self.root_ab[0], self.root_ab[1])
            return torch.matmul(x, self.w)  # [batch, word, candidate]

    class AttnGloveProbe(nn.Module):
        """Attn+GloVe: per-feature weights ``W [v_i ; v_j] + c``."""

        kind = "attn_glove"
        needs = {"attn", "glove"}

        def __init__(self, num_heads_total: int, glove_dim: int, released_offbyone: bool = False):
            super().__init__()
            self.num_heads_total = int(num_heads_total)
            self.glove_dim = int(glove_dim)
            self.released_offbyone = bool(released_offbyone)
            self.root_ab = nn.Parameter(torch.ones(2))
            self.proj = nn.Linear(2 * self.glove_dim, 2 * self.num_heads_total)

        def forward(self, batch: Batch) -> torch.Tensor:
            # [batch, word, candidate]
            return attn_glove_scores_fast(batch.words, batch.root, self.root_ab[0], self.root_ab[1],
                                          batch.dep_vecs, batch.cand_vecs, self.proj.weight, self.proj.bias)

        def forward_reference(self, batch: Batch) -> torch.Tensor:
            # [batch, word, candidate, probe_feature]
            x = build_features(batch.words, batch.root, self.root_ab[0], self.root_ab[1])
            # [batch, word, candidate]
            return attn_glove_scores(x, batch.dep_vecs, batch.cand_vecs, self.proj.weight, self.proj.bias)

    class DistancesGloveProbe(nn.Module):
        """Distances+GloVe: ``tanh(H [dist_ij ; v_i ; v_j] + c)`` -> linear score."""

        kind = "distances_glove"
        needs = {"glove", "dist"}

        def __init__(self, glove_dim: int, hidden: int = HIDDEN):
            super().__init__()
            self.glove_dim = int(glove_dim)
            self.num_heads_total = None
            self.released_offbyone = False
            self.hidden = nn.Linear(N_DIST + 2 * self.glove_dim, hidden)
            self.out = nn.Linear(hidden, 1)

        def forward(self, batch: Batch) -> torch.Tensor:
            d = self.glove_dim
            Wt = self.hidden.weight
            # [batch, word, candidate, hidden]
            h = (torch.nn.functional.linear(batch.dist, Wt[:, :N_DIST], self.hidden.bias)
                 + torch.nn.functional.linear(batch.dep_vecs, Wt[:, N_DIST : N_DIST + d]).unsqueeze(2)
                 + torch.nn.functional.linear(batch.cand_vecs, Wt[:, N_DIST + d :]).unsqueeze(1))
            return self.out(torch.tanh(h)).squeeze(-1)  # [batch, word, candidate]

    class GloveOnlyProbe(nn.Module):
        """GloVe only (control): ``tanh(H [v_i ; v_j] + c)`` -> linear score; no attention, no distances."""

        kind = "glove_only"
        needs = {"glove"}

        def __init__(self, glove_dim: int, hidden: int = HIDDEN):
            super().__init__()
            self.glove_dim = int(glove_dim)
            self.num_heads_total = None
            self.released_offbyone = False
            self.hidden = nn.Linear(2 * self.glove_dim, hidden)
            self.out = nn.Linear(hidden, 1)

        def forward(self, batch: Batch) -> torch.Tensor:
            d = self.glove_dim
            Wt = self.hidden.weight
            # [batch, word, candidate, hidden]
            h = (torch.nn.functional.linear(batch.dep_vecs, Wt[:, :d], self.hidden.bias).unsqueeze(2)
                 + torch.nn.functional.linear(batch.cand_vecs, Wt[:, d:]).unsqueeze(1))
            return self.out(torch.tanh(h)).squeeze(-1)  # [batch, word, candidate]

    class DistancesOnlyProbe(nn.Module):
        """Distances only (control): ``tanh(H dist_ij + c)`` -> linear score; the 8 positional features of
        Distances+GloVe without the word vectors."""

        kind = "distances_only"
        needs = {"dist"}

        def __init__(self, hidden: int = HIDDEN):
            super().__init__()
            self.glove_dim = None
            self.num_heads_total = None
            self.released_offbyone = False
            self.hidden = nn.Linear(N_DIST, hidden)
            self.out = nn.Linear(hidden, 1)

        def forward(self, batch: Batch) -> torch.Tensor:
            h = self.hidden(batch.dist)  # [batch, word, candidate, hidden]
            return self.out(torch.tanh(h)).squeeze(-1)  # [batch, word, candidate]

    class AttnGloveMLPProbe(nn.Module):
        """Attn+GloVe with MLP weights: per-feature weights ``W2 tanh(W1 [v_i ; v_j] + c1) + c2`` (one tanh
        hidden layer of :data:`HIDDEN`, as Distances+GloVe) instead of the linear ``W [v_i ; v_j] + c``;
        the score stays linear in the attention features."""

        kind = "attn_glove_mlp"
        needs = {"attn", "glove"}

        def __init__(self, num_heads_total: int, glove_dim: int, hidden: int = HIDDEN):
            super().__init__()
            self.num_heads_total = int(num_heads_total)
            self.glove_dim = int(glove_dim)
            self.released_offbyone = False
            self.root_ab = nn.Parameter(torch.ones(2))
            self.hidden = nn.Linear(2 * self.glove_dim, hidden)
            self.proj = nn.Linear(hidden, 2 * self.num_heads_total)

        def forward(self, batch: Batch) -> torch.Tensor:
            d = self.glove_dim
            Wt = self.hidden.weight
            # [batch, word, candidate, hidden]
            h = torch.tanh(torch.nn.functional.linear(batch.dep_vecs, Wt[:, :d], self.hidden.bias).unsqueeze(2)
                           + torch.nn.functional.linear(batch.cand_vecs, Wt[:, d:]).unsqueeze(1))
            # [batch, word, candidate, probe_feature]
            x = build_features(batch.words, batch.root, self.root_ab[0], self.root_ab[1])
            return (self.proj(h) * x).sum(-1)  # [batch, word, candidate]

    return AttnProbe, AttnGloveProbe, DistancesGloveProbe, GloveOnlyProbe, DistancesOnlyProbe, AttnGloveMLPProbe


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


ATTN_FAMILIES = ("attn", "attn_glove", "attn_glove_mlp")  # the model families that read attention


def make_model(kind: str, *, num_heads_total: int | None, glove_dim: int | None, released_offbyone: bool = False,
               feature_scale: str = "none", heads: Sequence[int] | None = None):
    """The untrained module of probe ``kind`` (parameters drawn from torch's global generator).

    The module carries what its batches need: ``needs``, ``released_offbyone``, ``uniform_maps``
    (``attn_glove_uniform``: the store's maps replaced by exactly uniform rows), ``feature_scale``
    (see :func:`make_batch`; only for the probes that read attention) and ``head_subset`` (``heads``:
    the flattened indices of the heads whose features it reads, None = all; the module is built for
    ``len(heads)`` heads).
    """
    AttnProbe, AttnGloveProbe, DistancesGloveProbe, GloveOnlyProbe, DistancesOnlyProbe, AttnGloveMLPProbe = _modules()
    family, released = base_kind(kind)
    released = released or released_offbyone
    if feature_scale not in FEATURE_SCALES:
        raise BertlookError(f"feature_scale must be one of {', '.join(FEATURE_SCALES)}, got {feature_scale!r}")
    if feature_scale != "none" and family not in ATTN_FAMILIES:
        raise BertlookError(f"feature_scale {feature_scale!r}: probe {kind!r} has no attention features")
    subset = None
    if heads is not None:
        if family not in ATTN_FAMILIES:
            raise BertlookError(f"heads: probe {kind!r} has no attention features")
        subset = tuple(int(k) for k in heads)
        if not subset or list(subset) != sorted(set(subset)) or subset[0] < 0 or (
                num_heads_total is not None and subset[-1] >= int(num_heads_total)):
            raise BertlookError(f"heads must be distinct ascending head indices in 0..{num_heads_total}, got "
                                f"{list(subset)}")
        num_heads_total = len(subset)
    if family == "attn":
        model = AttnProbe(num_heads_total)
    elif family == "distances_only":
        model = DistancesOnlyProbe()
    elif glove_dim is None:
        raise BertlookError(f"probe {kind!r} needs GloVe vectors (--glove)")
    elif family == "attn_glove":
        model = AttnGloveProbe(num_heads_total, glove_dim, released_offbyone=released)
    elif family == "attn_glove_mlp":
        model = AttnGloveMLPProbe(num_heads_total, glove_dim)
    elif family == "glove_only":
        model = GloveOnlyProbe(glove_dim)
    else:
        model = DistancesGloveProbe(glove_dim)
    model.uniform_maps = kind == "attn_glove_uniform"
    model.feature_scale = feature_scale
    model.head_subset = subset
    return model


def _batches(data: ProbeData, groups: Iterable[Sequence[int]], model) -> Iterable[Batch]:
    """One :class:`Batch` per group of sentence positions (``data.sentences`` indices)."""
    for group in groups:
        sents = [data.sentences[i] for i in group]
        yield make_batch(data, sents, attn="attn" in model.needs, glove="glove" in model.needs,
                         dist="dist" in model.needs, released_offbyone=model.released_offbyone,
                         uniform_maps=getattr(model, "uniform_maps", False),
                         feature_scale=getattr(model, "feature_scale", "none"),
                         head_subset=getattr(model, "head_subset", None))


def epoch_batches(lengths: Sequence[int], batch_size: int, generator: "torch.Generator",
                  pool_batches: int = BUCKET_POOL_BATCHES) -> list[list[int]]:
    """The batches of one training epoch (lists of sentence positions), drawn with ``generator``.

    The sentences are shuffled; with ``batch_size > 1`` each run of ``pool_batches * batch_size``
    shuffled sentences is sorted by length (stable) and cut into batches, and the batches are
    shuffled, so that a batch holds sentences of similar length (less padding; the objective, a sum
    over all sentences, is unchanged). ``batch_size == 1`` is a plain shuffle.
    """
    import torch

    n = len(lengths)
    perm = torch.randperm(n, generator=generator).tolist()
    if batch_size == 1:
        return [[i] for i in perm]
    pool = max(1, int(pool_batches)) * batch_size
    batches: list[list[int]] = []
    for start in range(0, n, pool):
        chunk = sorted(perm[start : start + pool], key=lambda i: lengths[i])
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in order]


def _width(model) -> int:
    """Values per (dependent, candidate) pair in the model's largest batch tensors."""
    if model.kind == "attn_glove_mlp":  # the features [.., 2K], the hidden layer and the weights [.., 2K]
        return 4 * int(model.num_heads_total) + HIDDEN
    return int(model.num_heads_total) if "attn" in model.needs else HIDDEN


def split_group(group: Sequence[int], lengths: Sequence[int], width: int, budget: int) -> list[list[int]]:
    """Cut a batch (in order) into chunks whose padded size ``len * maxlen^2 * width`` fits ``budget``."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in group:
        m = max(longest, lengths[i])
        if cur and (len(cur) + 1) * (m + 1) * m * width > budget:
            chunks.append(cur)
            cur, m = [], lengths[i]
        cur.append(i)
        longest = m
    if cur:
        chunks.append(cur)
    return chunks


def _eval_batches(data: ProbeData, batch_size: int, width: int, budget: int = MAX_BATCH_ELEMENTS) -> list[list[int]]:
    lengths = [s.n_words for s in data.sentences]
    order = sorted(range(len(data.sentences)), key=lambda i: lengths[i])
    out: list[list[int]] = []
    for k in range(0, len(order), batch_size):
        out += split_group(order[k : k + batch_size], lengths, width, budget)
    return out


def _check_compatible(model, data: ProbeData, what: str) -> None:
    subset = getattr(model, "head_subset", None)
    if "attn" in model.needs and subset is not None:
        if subset[-1] >= data.num_heads_total:
            raise BertlookError(f"{data.path}: {data.num_heads_total} heads per word pair, but the probe reads head "
                                f"index {subset[-1]} ({what})")
    elif "attn" in model.needs and model.num_heads_total != data.num_heads_total:
        raise BertlookError(
            f"{data.path}: {data.num_heads_total} heads per word pair, but the probe was built for "
            f"{model.num_heads_total} ({what})"
        )
    if "glove" in model.needs:
        if data.glove is None:
            raise BertlookError(f"probe {model.kind!r} needs GloVe vectors (--glove)")
        if data.glove.dim != model.glove_dim:
            raise BertlookError(
                f"GloVe vectors of dimension {data.glove.dim}, the probe was trained with {model.glove_dim}"
            )


# ======================================================================================== training
def train_probe(kind: str, train_store, *, glove: "GloveVectors | None" = None, seed: int, epochs: int = 1,
                batch_size: int = 32, lr: float = 0.002, released_offbyone: bool = False,
                max_sentences: int | None = None, max_batch_elements: int = MAX_BATCH_ELEMENTS,
                feature_scale: str = "none", loss_every: int | None = None, eval_store=None,
                eval_epochs: Sequence[int] = (), feature_stats: bool = False, heads: Sequence[int] | None = None):
    """Train one probe; returns ``(model, info)``.

    ``train_store``: a word-level store (path, ``AttentionStore`` or :class:`ProbeData`). ``kind``:
    ``attn``, ``attn_glove``, ``attn_glove_released``, ``distances_glove``, ``glove_only``,
    ``attn_glove_uniform`` (Attn+GloVe on exactly uniform maps of the store), ``distances_only``,
    ``attn_glove_mlp`` or ``random_init_attn_glove`` (= ``attn_glove``; pass the random-init store).
    ``heads``: the flattened indices (``layer * num_heads + head``) of the heads whose attention
    features the probe reads (the per-layer ablations; None = every head). ``max_sentences``:
    use only the first N sentences of the store. A batch whose padded tensors would exceed
    ``max_batch_elements`` values is run as several chunks whose gradients are summed before the one
    Adam step of the batch (the same update, bounded memory).

    Options beyond the paper (the defaults train exactly as without them):

    * ``feature_scale="n"``: attention features times the sentence's map size ``W+2`` (:func:`make_batch`),
      in training and in every evaluation of the returned model.
    * ``loss_every=N``: ``info["loss_curve"]``, the mean training loss per word over consecutive windows
      of N sentences of each epoch (in training order; ``ceil(n_sentences / N)`` windows per epoch).
    * ``eval_store`` and ``eval_epochs``: ``info["dev_uas_by_epoch"]``, the UAS on ``eval_store`` after
      each listed epoch (1-based, at most ``epochs``); evaluation does not change the training.
    * ``feature_stats``: ``info["feature_stats"]``, the scale of the attention features of the first
      epoch's batches (see :func:`batch_feature_stats`; probes with attention only).
    """
    import torch

    if epochs < 1:
        raise BertlookError(f"epochs must be >= 1, got {epochs}")
    if batch_size < 1:
        raise BertlookError(f"batch size must be >= 1, got {batch_size}")
    if not (lr > 0):
        raise BertlookError(f"learning rate must be > 0, got {lr}")
    if loss_every is not None and int(loss_every) < 1:
        raise BertlookError(f"loss_every must be >= 1 sentence, got {loss_every}")
    eval_epochs = sorted({int(e) for e in eval_epochs})
    if eval_epochs and (eval_epochs[0] < 1 or eval_epochs[-1] > int(epochs)):
        raise BertlookError(f"eval_epochs must lie in 1..{int(epochs)} (the epochs trained), got {eval_epochs}")
    if eval_epochs and eval_store is None:
        raise BertlookError("eval_epochs given without eval_store (the dev store to evaluate on)")
    family, released = base_kind(kind)
    released = released or released_offbyone
    needs_glove = family not in ("attn", "distances_only")
    if needs_glove and glove is None and not (isinstance(train_store, ProbeData) and train_store.glove is not None):
        raise BertlookError(f"probe {kind!r} needs GloVe vectors (--glove)")
    data = _as_data(train_store, glove=glove if needs_glove else None, max_sentences=max_sentences,
                    what="training attention store")
    if not data.sentences:
        raise BertlookError(f"{data.path}: no sentences to train on")
    torch.manual_seed(int(seed))
    model = make_model(kind, num_heads_total=data.num_heads_total,
                       glove_dim=data.glove.dim if (needs_glove and data.glove is not None) else None,
                       released_offbyone=released, feature_scale=feature_scale, heads=heads)
    if feature_stats and "attn" not in model.needs:
        raise BertlookError(f"feature_stats: probe {kind!r} has no attention features")
    dev = None
    if eval_epochs:
        dev = _as_data(eval_store, glove=data.glove if needs_glove else None, what="dev attention store")
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(int(seed))
    n = len(data.sentences)
    lengths = [st.n_words for st in data.sentences]
    steps = 0
    epoch_losses = []
    curve: list[dict[str, Any]] = []
    dev_uas: list[dict[str, Any]] = []
    stats = FeatureStats() if feature_stats else None
    t0 = time.perf_counter()
    from bertlook.attention.extraction import progress_bar

    bar = progress_bar(total=n * int(epochs), desc=f"probe {kind} seed {seed}", unit="sent")
    for epoch in range(1, int(epochs) + 1):
        total = 0.0
        window = [0.0, 0, 0]  # loss, words, sentences of the current window of the loss curve
        n_windows = 0  # windows of this epoch so far
        for group in epoch_batches(lengths, int(batch_size), gen):
            optimizer.zero_grad(set_to_none=True)
            for batch in _batches(data, split_group(group, lengths, _width(model), max_batch_elements), model):
                if stats is not None and epoch == 1:
                    stats.add(batch)
                if loss_every is None:
                    loss = probe_loss(model(batch), batch.heads, batch.dep_mask, batch.cand_mask)
                else:
                    gold = _gold_log_probs(model(batch), batch.heads, batch.dep_mask, batch.cand_mask)  # [batch, word]
                    loss = -gold.sum()  # = probe_loss
                    per_sentence = (-gold.detach().sum(1)).tolist()  # [batch]
                    for sl, w in zip(per_sentence, batch.lengths.tolist()):
                        window[0] += sl
                        window[1] += w
                        window[2] += 1
                        if window[2] == int(loss_every):
                            curve.append(_window(epoch, n_windows, window))
                            window, n_windows = [0.0, 0, 0], n_windows + 1
                loss.backward()
                total += float(loss.detach())
            optimizer.step()
            steps += 1
            bar.update(len(group))
        if loss_every is not None and window[2]:
            curve.append(_window(epoch, n_windows, window))
        epoch_losses.append(total / data.n_words)
        if epoch in eval_epochs:
            res = evaluate_probe(model, kind, dev)
            dev_uas.append({"epoch": epoch, "uas": res["uas"], "n_words": res["n_words"]})
            model.train()
    bar.close()
    seconds = time.perf_counter() - t0
    model.eval()
    info = {
        "probe": kind,
        "seed": int(seed),
        "epochs": int(epochs),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "released_offbyone": bool(released) if family == "attn_glove" else False,
        "train_store": data.path,
        "n_sentences": n,
        "n_words": data.n_words,
        "steps": steps,
        "seconds": seconds,
        "sentences_per_s": n * int(epochs) / seconds if seconds > 0 else float("inf"),
        "loss_per_word_by_epoch": epoch_losses,
    }
    if hasattr(model, "root_ab"):
        info["root_a"], info["root_b"] = (float(v) for v in model.root_ab.detach())
    if heads is not None:
        info["heads"] = list(model.head_subset)
    if needs_glove:
        info["glove_oov_rate"] = data.n_oov / data.n_words if data.n_words else 0.0
    # diagnostics: only when asked for (the default info is unchanged)
    if feature_scale != "none":
        info["feature_scale"] = feature_scale
    if loss_every is not None:
        info["loss_every"] = int(loss_every)
        info["loss_curve"] = curve
    if eval_epochs:
        info["dev_store"] = dev.path
        info["dev_uas_by_epoch"] = dev_uas
    if stats is not None:
        info["feature_stats"] = stats.summary()
    return model, info


def _window(epoch: int, index: int, window: list) -> dict[str, Any]:
    """Point ``index`` (0-based, within the epoch) of the loss curve: ``window`` = [summed loss, words, sentences]."""
    return {"epoch": int(epoch), "window": int(index), "sentences": int(window[2]), "words": int(window[1]),
            "loss_per_word": window[0] / window[1] if window[1] else float("nan")}


class FeatureStats:
    """Running scale of the attention features of the batches seen (:func:`batch_feature_stats`)."""

    KEYS = ("attn_sum", "attn_count", "attn_max", "root_sum", "root_count", "root_max", "dep_sum", "root_dep_sum",
            "n_dependents", "n_sentences")

    def __init__(self) -> None:
        self.acc = {k: 0.0 for k in self.KEYS}

    def add(self, batch: Batch) -> None:
        part = batch_feature_stats(batch)
        for k in self.KEYS:
            self.acc[k] = max(self.acc[k], part[k]) if k.endswith("_max") else self.acc[k] + part[k]

    def summary(self) -> dict[str, Any]:
        a = self.acc

        def div(x, y):
            return x / y if y else float("nan")

        return {
            "attn_feature_mean": div(a["attn_sum"], a["attn_count"]),
            "attn_feature_max": a["attn_max"],
            "root_feature_mean": div(a["root_sum"], a["root_count"]),
            "root_feature_max": a["root_max"],
            "feature_sum_mean": div(a["dep_sum"], a["n_dependents"]),
            "root_feature_sum_mean": div(a["root_dep_sum"], a["n_dependents"]),
            "n_dependents": int(a["n_dependents"]),
            "n_sentences": int(a["n_sentences"]),
        }


def batch_feature_stats(batch: Batch) -> dict[str, float]:
    """Sums, counts and maxima of the attention features of one batch (as the probe sees them).

    ``attn_*``: the word-word entries ``A_k(i->j)`` (each is a feature of candidate j of dependent i, forward,
    and of candidate i of dependent j, backward); ``root_*``: the four [CLS]/[SEP] parts ``A_k(i->[CLS])``,
    ``A_k(i->[SEP])``, ``A_k([CLS]->i)``, ``A_k([SEP]->i)``; ``dep_sum``: over dependents i, the mean over
    word candidates j of the feature-vector sum ``sum_k A_k(i->j) + A_k(j->i)`` (uniform maps: ``2K/(W+2)``);
    ``root_dep_sum``: over dependents, the ROOT candidate's feature sum with ``a = b = 1`` (their initial
    values; uniform maps: ``4K/(W+2)``).
    """
    import torch

    with torch.no_grad():
        words, root = batch.words, batch.root  # [batch, layer*head, word, word], [batch, root_part, layer*head, word]
        K = words.shape[1]
        W = batch.lengths.double()  # [batch]
        per_word = words.double().sum(1)  # [batch, word, word]: sum over heads (padding is 0)
        dep = (per_word.sum(2) + per_word.sum(1)) / W.clamp(min=1)[:, None]  # [batch, word]: mean over candidates
        dep = torch.where(batch.dep_mask, dep, torch.zeros_like(dep))  # [batch, word]
        root_dep = root.double().sum((1, 2))  # [batch, word]: ROOT feature sum (a = b = 1; padding is 0)
        return {
            "attn_sum": float(per_word.sum()),
            "attn_count": float(K * (W * W).sum()),
            "attn_max": float(words.max()) if words.numel() else 0.0,
            "root_sum": float(root_dep.sum()),
            "root_count": float(4 * K * W.sum()),
            "root_max": float(root.max()) if root.numel() else 0.0,
            "dep_sum": float(dep.sum()),
            "root_dep_sum": float(root_dep.sum()),
            "n_dependents": float(W.sum()),
            "n_sentences": float(len(W)),
        }


# ====================================================================================== evaluation
def mst_heads(logp: np.ndarray) -> np.ndarray:
    """Heads ``[W]`` (0 = ROOT) from a dependent x candidate matrix ``[W, W+1]`` of log-probabilities."""
    W = logp.shape[0]
    full = np.full((W + 1, W + 1), -np.inf)  # [node, node]: dependent, head; node 0 = ROOT
    full[1:, :] = logp  # [word, candidate]
    return chu_liu_edmonds(full)[1:]  # [word]


def uas_dict(correct: int, correct_mst: int | None, n_words: int, n_sentences: int) -> dict[str, Any]:
    """The UAS entries of an evaluation (``uas``, ``uas_mst`` or None, ``n_words``, ``n_sentences``)."""
    return {
        "uas": correct / n_words if n_words else float("nan"),
        "uas_mst": (correct_mst / n_words if n_words else float("nan")) if correct_mst is not None else None,
        "n_words": int(n_words),
        "n_sentences": int(n_sentences),
    }


def evaluate_probe(model, kind: str, dev_store, *, glove: "GloveVectors | None" = None, mst: bool = False,
                   batch_size: int = 64) -> dict[str, Any]:
    """UAS of a trained probe on ``dev_store`` (non-punctuation words, independent argmax per word).

    Returns ``dict(uas, uas_mst, n_words, n_sentences)``; ``uas_mst`` is None unless ``mst``.
    ``kind="right_branching"`` ignores ``model`` (see :func:`right_branching_uas`).
    """
    import torch

    if kind == "right_branching":
        return right_branching_uas(dev_store, mst=mst)
    base_kind(kind)
    needs_glove = "glove" in model.needs
    data = _as_data(dev_store, glove=glove if needs_glove else None, what="dev attention store")
    _check_compatible(model, data, "dev")
    correct = 0
    correct_mst = 0 if mst else None
    model.eval()
    with torch.no_grad():
        for batch in _batches(data, _eval_batches(data, batch_size, _width(model)), model):
            logp = _masked_log_softmax(model(batch), batch.cand_mask)  # [batch, word, candidate]
            pred = logp.argmax(dim=-1)  # [batch, word]
            counted = batch.dep_mask & ~batch.punct  # [batch, word]
            correct += int(((pred == batch.heads) & counted).sum())
            if mst:
                lp = logp.numpy()  # [batch, word, candidate]
                for b, W in enumerate(batch.lengths.tolist()):
                    h = mst_heads(lp[b, :W, : W + 1])  # [word]
                    keep = counted[b, :W].numpy()  # [word]
                    correct_mst += int(((h == batch.heads[b, :W].numpy()) & keep).sum())
    return uas_dict(correct, correct_mst, data.n_eval_words, len(data.sentences))


def right_branching_heads(n_words: int) -> np.ndarray:
    """Head of word i is word i+1; the last word's head is ROOT (0)."""
    heads = np.arange(2, n_words + 2, dtype=np.int64)  # [word]
    if n_words:
        heads[-1] = 0
    return heads


def right_branching_uas(dev_store, *, mst: bool = False) -> dict[str, Any]:
    """Right-branching baseline on ``dev_store``: ``dict(uas, uas_mst, n_words, n_sentences)``.

    The right-branching structure already is a tree, so ``uas_mst`` (when ``mst``) equals ``uas``.
    Reads only the records (no attention).
    """
    data = _as_data(dev_store, what="dev attention store")
    correct = 0
    for s in data.sentences:
        correct += int(((right_branching_heads(s.n_words) == s.heads) & ~s.punct).sum())
    return uas_dict(correct, correct if mst else None, data.n_eval_words, len(data.sentences))


# ======================================================================================== the table
def _mean_sd(values: list[float]) -> tuple[float, float]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    mean = float(np.mean(vals))
    sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")
    return mean, sd


def _row(probe: str, **kw) -> dict[str, Any]:
    row = {c: None for c in TABLE_COLUMNS}
    row.update(probe=probe, note="")
    row.update(kw)
    return row


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


@dataclasses.dataclass
class ProbeStores:
    """The stores of one Table 3 run, opened and checked (:func:`open_probe_stores`)."""

    probes: list[str]
    train: "ProbeData | None"
    dev: "ProbeData | None"
    rtrain: "ProbeData | None" = None
    rdev: "ProbeData | None" = None
    random_missing: str | None = None

    def data_summary(self) -> dict[str, Any]:
        return {k: v.summary() for k, v in (("train", self.train), ("dev", self.dev), ("random_train", self.rtrain),
                                            ("random_dev", self.rdev)) if v is not None}


def open_probe_stores(train_store, dev_store, *, random_train_store=None, random_dev_store=None,
                      glove: "GloveVectors | None" = None, probes: Sequence[str] = PROBES,
                      max_train_sentences: int | None = None) -> ProbeStores:
    """Open the stores that the Table 3 rows of ``probes`` read (the checks of :func:`run_probes`)."""
    check_probes(probes)
    gl = glove if any(p in GLOVE_PROBES for p in probes) else None
    # the model's stores only for the probes that read them (random_init_attn_glove reads the random-init ones)
    own = [p for p in probes if p != "random_init_attn_glove"]
    out = ProbeStores(list(probes), None, None)
    if any(p in TRAINED_PROBES for p in own):
        if train_store is None:
            raise BertlookError(f"probe(s) {', '.join(p for p in own if p in TRAINED_PROBES)} need the training "
                                "attention store (--train-attention)")
        out.train = _as_data(train_store, glove=gl, max_sentences=max_train_sentences, what="training attention store")
    if own:
        if dev_store is None:
            raise BertlookError(f"probe(s) {', '.join(own)} need the dev attention store (--dev-attention)")
        out.dev = _as_data(dev_store, glove=gl, what="dev attention store")
    if out.train is not None and out.train.num_heads_total != out.dev.num_heads_total:
        raise BertlookError(
            f"{out.train.path} has {out.train.num_heads_total} heads but {out.dev.path} has {out.dev.num_heads_total}"
        )
    if "random_init_attn_glove" in probes:
        if random_train_store is None or random_dev_store is None:
            out.random_missing = ("no random-init attention stores given (--random-train-attention and "
                                  "--random-dev-attention: `bertlook extract-words --random-init-seed SEED`)")
        else:
            out.rtrain = _as_data(random_train_store, glove=gl, max_sentences=max_train_sentences,
                                  what="random-init training attention store")
            out.rdev = _as_data(random_dev_store, glove=gl, what="random-init dev attention store")
            if out.rtrain.num_heads_total != out.rdev.num_heads_total:
                raise BertlookError(f"{out.rtrain.path} and {out.rdev.path} have different numbers of heads")
    return out


def table3_trainable(stores: ProbeStores, glove: "GloveVectors | None") -> list[str]:
    """The probes of ``stores`` that :func:`table3_frame` trains (the others get a note or are baselines)."""
    return [p for p in stores.probes if p in TRAINED_PROBES and not (p in GLOVE_PROBES and glove is None)
            and not (p == "random_init_attn_glove" and stores.random_missing)]


def table3_frame(stores: ProbeStores, *, glove: "GloveVectors | None", seeds: Sequence[int], mst: bool, fit,
                 log=None) -> "pd.DataFrame":
    """Table 3's frame: one row per probe of ``stores``, the trained ones from ``fit(probe, seed, train, dev)``
    -> ``(info, dev result)`` (the reference: :func:`train_probe` then :func:`evaluate_probe`)."""
    say = log or (lambda msg: None)
    rows, runs = [], []
    for probe in stores.probes:
        if probe == "right_branching":
            res = right_branching_uas(stores.dev, mst=mst)
            rows.append(_row(probe, uas_mean=res["uas"], n_seeds=0,
                             uas_mst_mean=res["uas_mst"] if mst else None))
            runs.append({"probe": probe, "seed": None, **res})
            say(f"{probe}: UAS {100 * res['uas']:.1f}")
            continue
        if probe in GLOVE_PROBES and glove is None:
            rows.append(_row(probe, note="no GloVe vectors given (--glove)"))
            say(f"{probe}: skipped, no GloVe vectors")
            continue
        if probe == "random_init_attn_glove" and stores.random_missing:
            rows.append(_row(probe, note=stores.random_missing))
            say(f"{probe}: skipped, {stores.random_missing}")
            continue
        tr, dv = (stores.rtrain, stores.rdev) if probe == "random_init_attn_glove" else (stores.train, stores.dev)
        uas, uas_mst = [], []
        for seed in seeds:
            info, res = fit(probe, seed, tr, dv)
            uas.append(res["uas"])
            if mst:
                uas_mst.append(res["uas_mst"])
            runs.append({**info, **{f"dev_{k}": v for k, v in res.items()}})
            say(f"{probe} seed {seed}: UAS {100 * res['uas']:.1f}"
                + (f", MST {100 * res['uas_mst']:.1f}" if mst else "") + f" ({info['seconds']:.1f} s)")
        m, sd = _mean_sd(uas)
        row = _row(probe, uas_mean=m, uas_sd=sd, n_seeds=len(seeds))
        if mst:
            row["uas_mst_mean"], row["uas_mst_sd"] = _mean_sd(uas_mst)
        if probe == "random_init_attn_glove":
            row["note"] = random_init_note(dv.path)
        rows.append(row)
    return _table_frame(rows, runs, stores.data_summary())


def run_probes(train_store, dev_store, *, random_train_store=None, random_dev_store=None,
               glove: "GloveVectors | None" = None, seeds: Sequence[int] = DEFAULT_SEEDS, epochs: int = 1,
               batch_size: int = 32, lr: float = 0.002, mst: bool = False,
               probes: Sequence[str] = PROBES, max_train_sentences: int | None = None,
               log=None) -> "pd.DataFrame":
    """Train and evaluate every probe in ``probes`` with every seed, one model at a time (the reference of
    :mod:`bertlook.analyses.probe_batch`); one row per probe (Table 3).

    Columns :data:`TABLE_COLUMNS` (UAS as fractions). Per-seed results are in
    ``df.attrs["runs"]``, per-store summaries in ``df.attrs["data"]``.
    """
    check_probes(probes)
    seeds = check_seeds(seeds)
    stores = open_probe_stores(train_store, dev_store, random_train_store=random_train_store,
                               random_dev_store=random_dev_store, glove=glove, probes=probes,
                               max_train_sentences=max_train_sentences)

    def fit(probe, seed, tr, dv):
        model, info = train_probe(probe, tr, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr)
        return info, evaluate_probe(model, probe, dv, mst=mst)

    return table3_frame(stores, glove=glove, seeds=seeds, mst=mst, fit=fit, log=log)


# ============================================================================ per-layer ablations
#: tables/probe_ablations.csv
ABLATION_COLUMNS = ["ablation", "layer", "n_heads", "uas_mean", "uas_sd", "n_seeds", "uas_mst_mean", "uas_mst_sd",
                    "delta_uas", "delta_uas_mst"]


def ablation_heads(mode: str, layer: int, num_layers: int, num_heads: int) -> list[int]:
    """The flattened head indices an ablation keeps: ``keep`` = the heads of ``layer`` (1-based) only,
    ``drop`` = every head but those of ``layer``."""
    if mode not in ABLATION_MODES:
        raise BertlookError(f"unknown ablation {mode!r}; choose from {', '.join(ABLATION_MODES)}")
    if not 1 <= int(layer) <= int(num_layers):
        raise BertlookError(f"layer {layer} out of range 1..{num_layers}")
    own = set(range((int(layer) - 1) * num_heads, int(layer) * num_heads))
    return sorted(own) if mode == "keep" else [k for k in range(num_layers * num_heads) if k not in own]


def ablation_plan(train: ProbeData, dev: ProbeData,
                  modes: Sequence[str]) -> list[tuple[str, int | None, list[int] | None]]:
    """``(ablation, layer, heads)`` of every row of :func:`run_layer_ablations`: first ``("all", None, None)``."""
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in ABLATION_MODES]
    if bad:
        raise BertlookError(f"unknown ablation(s) {', '.join(map(repr, bad))}; choose from {', '.join(ABLATION_MODES)}")
    if train.num_heads_total != dev.num_heads_total:
        raise BertlookError(f"{train.path} has {train.num_heads_total} heads but {dev.path} has {dev.num_heads_total}")
    L, H = train.store.num_layers, train.store.num_heads
    plan: list[tuple[str, int | None, list[int] | None]] = [("all", None, None)]
    return plan + [(m, layer, ablation_heads(m, layer, L, H)) for m in modes for layer in range(1, L + 1)]


def ablation_frame(plan, train: ProbeData, dev: ProbeData, *, seeds: Sequence[int], mst: bool, fit,
                   log=None) -> "pd.DataFrame":
    """The ablations' frame (:data:`ABLATION_COLUMNS`) of ``plan`` (:func:`ablation_plan`), each row's seeds
    from ``fit(heads, seed)`` -> ``(info, dev result)``."""
    say = log or (lambda msg: None)
    L, H = train.store.num_layers, train.store.num_heads
    rows, runs = [], []
    for ablation, layer, heads in plan:
        uas, uas_mst = [], []
        for seed in seeds:
            info, res = fit(heads, seed)
            uas.append(res["uas"])
            if mst:
                uas_mst.append(res["uas_mst"])
            runs.append({"ablation": ablation, "layer": layer, **info, **{f"dev_{k}": v for k, v in res.items()}})
            say(f"probe-ablations: {ablation}" + ("" if layer is None else f" layer {layer}") + f" seed {seed}: "
                f"UAS {100 * res['uas']:.1f}" + (f", MST {100 * res['uas_mst']:.1f}" if mst else "")
                + f" ({info['seconds']:.1f} s)")
        m, sd = _mean_sd(uas)
        mm, msd = _mean_sd(uas_mst) if mst else (float("nan"), float("nan"))
        rows.append({"ablation": ablation, "layer": "all" if layer is None else str(layer),
                     "n_heads": H * L if heads is None else len(heads), "uas_mean": m, "uas_sd": sd,
                     "n_seeds": len(seeds), "uas_mst_mean": mm, "uas_mst_sd": msd})
    ref, ref_mst = rows[0]["uas_mean"], rows[0]["uas_mst_mean"]
    for r in rows:
        r["delta_uas"] = r["uas_mean"] - ref
        r["delta_uas_mst"] = r["uas_mst_mean"] - ref_mst
    df = pd.DataFrame(rows, columns=ABLATION_COLUMNS)
    df.attrs["runs"] = runs
    df.attrs["data"] = {"train": train.summary(), "dev": dev.summary()}
    df.attrs["num_layers"], df.attrs["num_heads"] = L, H
    return df


def open_ablation_stores(train_store, dev_store, *, glove: "GloveVectors", max_train_sentences: int | None = None
                         ) -> tuple[ProbeData, ProbeData]:
    if glove is None:
        raise BertlookError("the per-layer ablations of Attn+GloVe need GloVe vectors (--glove)")
    train = _as_data(train_store, glove=glove, max_sentences=max_train_sentences, what="training attention store")
    dev = _as_data(dev_store, glove=glove, what="dev attention store")
    return train, dev


def run_layer_ablations(train_store, dev_store, *, glove: "GloveVectors", seeds: Sequence[int] = DEFAULT_SEEDS,
                        epochs: int = 1, batch_size: int = 32, lr: float = 0.002, mst: bool = False,
                        modes: Sequence[str] = ABLATION_MODES, max_train_sentences: int | None = None,
                        log=None) -> "pd.DataFrame":
    """Attn+GloVe trained on the attention features of some layers only, every seed (which layers carry
    the probe's accuracy), one model at a time (the reference of :mod:`bertlook.analyses.probe_batch`): first
    the reference (every layer: Table 3's Attn+GloVe, the same seeds and training), then for each mode of
    ``modes`` and each layer l, ``keep`` (only layer l's heads) and ``drop`` (every layer but l). One row per
    ablation, :data:`ABLATION_COLUMNS` (fractions; ``delta_*``: the row's mean minus the reference's).
    Per-seed results in ``df.attrs["runs"]``.
    """
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in ABLATION_MODES]
    if bad:
        raise BertlookError(f"unknown ablation(s) {', '.join(map(repr, bad))}; choose from {', '.join(ABLATION_MODES)}")
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise BertlookError(f"seeds must be distinct and at least one, got {seeds}")
    train, dev = open_ablation_stores(train_store, dev_store, glove=glove, max_train_sentences=max_train_sentences)
    plan = ablation_plan(train, dev, modes)

    def fit(heads, seed):
        model, info = train_probe("attn_glove", train, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr,
                                  heads=heads)
        return info, evaluate_probe(model, "attn_glove", dev, mst=mst)

    return ablation_frame(plan, train, dev, seeds=seeds, mst=mst, fit=fit, log=log)


#: sentences of the random-init dev store whose rows measure how uniform its maps are (Table 3 note)
UNIFORMITY_SENTENCES = 500


def random_init_note(random_dev_store) -> str:
    """Table 3's note on the random-init row (issue 14): which reading of the re-initialisation made the
    maps (the store meta's ``random_init.keep``) and how uniform they are (mean row entropy / ln n, the
    range over layers, first :data:`UNIFORMITY_SENTENCES` sentences)."""
    from bertlook.analyses.uniformity import row_entropy_by_layer

    st = open_store(random_dev_store, level="word", what="random-init dev attention store")
    keep = (st.meta.get("random_init") or {}).get("keep", "embeddings")
    reading = ("every weight re-initialised except the word and position embeddings (the paper's reading, "
               "probes.random_init_keep: embeddings; `none` re-initialises them too)" if keep == "embeddings" else
               "every weight re-initialised, embeddings included (probes.random_init_keep: none; the paper's "
               "reading keeps the word and position embeddings)")
    ratios = [r["ratio"] for r in row_entropy_by_layer(st, max_sentences=UNIFORMITY_SENTENCES)]
    lo, hi = f"{100 * min(ratios):.1f}", f"{100 * max(ratios):.1f}"
    span = f"{lo}% of ln n in every layer" if lo == hi else f"{lo}-{hi}% of ln n by layer"
    return f"{reading}; its maps: mean row entropy {span} (100% = uniform; README, random-init baseline)"


def _table_frame(rows: list[dict[str, Any]], runs: list[dict[str, Any]], data: dict[str, Any]) -> "pd.DataFrame":
    """The Table 3 frame of ``rows`` (dicts of :data:`TABLE_COLUMNS`), per-seed ``runs`` and store
    summaries ``data`` in ``attrs``."""
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    for col in ROWS_NUMBERS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    df["n_seeds"] = pd.array(df["n_seeds"].tolist(), dtype="Int64")
    df.attrs["runs"] = runs
    df.attrs["data"] = data
    return df


# ====================================================================== rows computed by another job
# `bertlook probes --rows-out JSON` writes the rows it computed (e.g. only random_init_attn_glove, on the
# random-init stores), `--add-rows JSON` puts such rows into the table of another run in the order of
# PROBES: the workflow's probes_random / probes rules, so that the model's word stores and the
# random-init ones never need to be on disk together. Plain JSON (no NaN: missing numbers are null).
ROWS_FORMAT = "bertlook-probe-rows"
ROWS_VERSION = 2  # 2: no paper_uas (the paper's numbers are joined by reporting.paper_join)
ROWS_NUMBERS = ("uas_mean", "uas_sd", "uas_mst_mean", "uas_mst_sd")
ROWS_INPUTS = ("train_attention", "dev_attention", "random_train_attention", "random_dev_attention")
# the settings the rows were computed with: --add-rows refuses rows computed with other ones
ROWS_SETTINGS = ("seeds", "epochs", "batch_size", "lr", "mst", "max_train_sentences", "glove_spec")


def _finite(obj: Any) -> Any:
    """``obj`` with every NaN / infinite float replaced by None (plain JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def table_rows(df: "pd.DataFrame") -> list[dict[str, Any]]:
    """The rows of a Table 3 frame as plain values: floats (exact), None for missing numbers, ints."""
    out = []
    for rec in df.to_dict("records"):
        row: dict[str, Any] = {}
        for col in TABLE_COLUMNS:
            v = rec.get(col)
            if col == "probe":
                row[col] = str(v)
            elif col == "note":
                row[col] = "" if is_missing(v) or v is None else str(v)
            elif col == "n_seeds":
                row[col] = None if is_missing(v) or v is None else int(v)
            else:
                row[col] = None if is_missing(v) or v is None or not math.isfinite(float(v)) else float(v)
        out.append(row)
    return out


def write_probe_rows(path, df: "pd.DataFrame", *, settings: dict[str, Any], inputs: dict[str, Any],
                     glove: Any = None, seconds: float | None = None) -> dict[str, Any]:
    """Write the rows of ``df`` (with its per-seed runs and store summaries) for ``--add-rows``."""
    rows = table_rows(df)
    doc = {
        "format": ROWS_FORMAT,
        "version": ROWS_VERSION,
        "probes": [r["probe"] for r in rows],
        "settings": {k: settings.get(k) for k in ROWS_SETTINGS},
        "inputs": {k: (None if inputs.get(k) is None else str(inputs[k])) for k in ROWS_INPUTS},
        "glove": glove,
        "table": rows,
        "runs": list(df.attrs.get("runs", [])),
        "data": dict(df.attrs.get("data", {})),
        "seconds": seconds,
    }
    doc = _finite(doc)
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, ensure_ascii=False, allow_nan=False)
            fh.write("\n")
    return doc


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_probe_rows(path, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rows file ``path`` written by ``--rows-out``, validated; with ``settings`` (this run's
    :data:`ROWS_SETTINGS`) the rows must have been computed with the same ones."""
    def bad(msg: str) -> BertlookError:
        return BertlookError(f"{path}: {msg} (not a probe rows file of `bertlook probes --rows-out`?)")

    def no_constant(name: str):
        raise ValueError(f"{name} is not plain JSON")

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh, parse_constant=no_constant)
    except FileNotFoundError:
        raise BertlookError(f"{path}: probe rows file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BertlookError(f"{path}: cannot read the probe rows file: {err}") from None
    except json.JSONDecodeError as err:
        raise BertlookError(f"{path}:{err.lineno}: the probe rows file is not valid JSON: {err.msg}") from None
    except ValueError as err:
        raise BertlookError(f"{path}: the probe rows file is not plain JSON: {err}") from None
    if not isinstance(doc, dict):
        raise bad("expected a JSON object")
    if doc.get("format") == ROWS_FORMAT and doc.get("version") != ROWS_VERSION:
        raise BertlookError(f"{path}: probe rows of format version {doc.get('version')!r}, this bertlook reads "
                            f"version {ROWS_VERSION}: written by another bertlook version; rerun the job that "
                            "wrote them (`snakemake --forcerun probes_random`)")
    if doc.get("format") != ROWS_FORMAT or doc.get("version") != ROWS_VERSION:
        raise bad(f"format {doc.get('format')!r} version {doc.get('version')!r}, expected {ROWS_FORMAT!r} "
                  f"version {ROWS_VERSION}")
    missing = [k for k in ("probes", "settings", "inputs", "glove", "table", "runs", "data") if k not in doc]
    if missing:
        raise bad(f"missing key(s) {', '.join(missing)}")
    probes = doc["probes"]
    if not isinstance(probes, list) or not all(isinstance(p, str) for p in probes):
        raise bad("'probes' must be a list of probe names")
    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise bad(f"unknown probe(s) {', '.join(map(repr, unknown))}; choose from {', '.join(PROBES)}")
    if len(set(probes)) != len(probes):
        raise bad(f"a probe is listed twice in 'probes': {probes}")
    table = doc["table"]
    if not isinstance(table, list) or len(table) != len(probes):
        raise bad(f"'table' must be a list of {len(probes)} row(s), one per probe")
    for i, (row, probe) in enumerate(zip(table, probes)):
        where = f"table row {i + 1}"
        if not isinstance(row, dict) or set(row) != set(TABLE_COLUMNS):
            raise bad(f"{where}: expected an object with exactly the keys {', '.join(TABLE_COLUMNS)}")
        if row["probe"] != probe:
            raise bad(f"{where}: probe {row['probe']!r}, 'probes' says {probe!r}")
        for col in ROWS_NUMBERS:
            if row[col] is not None and not _is_number(row[col]):
                raise bad(f"{where}: {col} must be a number or null, got {row[col]!r}")
        n = row["n_seeds"]
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise bad(f"{where}: n_seeds must be an integer >= 0 or null, got {n!r}")
        if not isinstance(row["note"], str):
            raise bad(f"{where}: note must be a string, got {row['note']!r}")
    runs = doc["runs"]
    if not isinstance(runs, list) or not all(isinstance(r, dict) and r.get("probe") in probes for r in runs):
        raise bad("'runs' must be a list of objects, each with the 'probe' of one of the rows")
    if not isinstance(doc["data"], dict) or not all(isinstance(v, dict) for v in doc["data"].values()):
        raise bad("'data' must be an object of store summaries")
    if not isinstance(doc["inputs"], dict) or not all(
            doc["inputs"].get(k) is None or isinstance(doc["inputs"][k], str) for k in ROWS_INPUTS):
        raise bad(f"'inputs' must be an object with the paths (or null) {', '.join(ROWS_INPUTS)}")
    if doc["glove"] is not None and not isinstance(doc["glove"], dict):
        raise bad("'glove' must be an object or null")
    got = doc["settings"]
    if not isinstance(got, dict) or set(got) != set(ROWS_SETTINGS):
        raise bad(f"'settings' must be an object with exactly the keys {', '.join(ROWS_SETTINGS)}")
    if settings is not None:
        for key in ROWS_SETTINGS:
            if got[key] != settings.get(key):
                raise BertlookError(f"{path}: the rows were computed with {key} {got[key]!r}, this run has "
                                    f"{settings.get(key)!r} (rerun the job that wrote them)")
    return doc


def add_probe_rows(df: "pd.DataFrame", added: Sequence[dict[str, Any]]) -> "pd.DataFrame":
    """``df`` with the rows (and per-seed runs, store summaries) of :func:`read_probe_rows` documents
    added, rows and runs in the order of :data:`PROBES` (a probe must not be in two of them)."""
    rows = table_rows(df)
    runs = list(df.attrs.get("runs", []))
    data = dict(df.attrs.get("data", {}))
    seen = {r["probe"] for r in rows}
    for doc in added:
        twice = sorted(seen & set(doc["probes"]))
        if twice:
            raise BertlookError(f"probe(s) {', '.join(twice)} computed twice (--probes and --add-rows, or two "
                                "--add-rows)")
        seen |= set(doc["probes"])
        rows += [dict(r) for r in doc["table"]]
        runs += list(doc["runs"])
        data.update(doc["data"])
    rank = {p: i for i, p in enumerate(PROBES)}
    rows.sort(key=lambda r: rank[r["probe"]])
    runs = sorted(runs, key=lambda r: rank.get(r.get("probe"), len(PROBES)))
    order = ("train", "dev", "random_train", "random_dev")
    data = {**{k: data[k] for k in order if k in data}, **{k: v for k, v in data.items() if k not in order}}
    return _table_frame(rows, runs, data)


def is_missing(v) -> bool:
    """``v`` is NaN / None / NA (``pd.isna``; False for values it cannot judge, e.g. lists)."""
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# ================================================================ every table in one loop (issue 24)
# The batched engine (bertlook.analyses.probe_batch, torch) trains every probe x seed of Table 3, of Table 3
# on the norm maps and of the per-layer ablations together (driven by bertlook.analyses.probe_tables); the
# task type and the corpus check it shares are here, below both.
#: probes of the attention family (one Attn+GloVe cohort per attention source)
ATTN_PROBES = ("attn", "attn_glove", "attn_glove_released", "attn_glove_uniform", "random_init_attn_glove")
#: probes that read no attention (identical on every store of the same sentences)
NO_ATTENTION_PROBES = ("distances_glove", "glove_only", "distances_only")


@dataclasses.dataclass(frozen=True)
class ProbeTask:
    """One probe to train with every seed: ``probe`` (a name of ``probes.PROBES``), the attention ``source``
    it reads (``model``, ``norm``, ``random``), ``heads`` (flattened head indices read, ascending; None = all)."""

    probe: str
    source: str = "model"
    heads: tuple[int, ...] | None = None

    @property
    def family(self) -> str:
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
