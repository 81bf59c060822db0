"""The reference probes as torch modules: score functions, the loss, one ``nn.Module`` per family, make_model.

Score functions in reference form (:func:`attn_glove_scores` on
:func:`~bertlook.analyses.probes.features.build_features`) and the equivalent fast forms the modules use
(:func:`attn_scores_fast`, :func:`attn_glove_scores_fast`), the cross-entropy over each word's head candidates
(:func:`probe_loss`, :func:`gold_log_probs`, :func:`masked_log_softmax`), the modules (:class:`AttnProbe`,
:class:`AttnGloveProbe`, :class:`DistancesGloveProbe`, :class:`GloveOnlyProbe`, :class:`DistancesOnlyProbe`,
:class:`AttnGloveMLPProbe`) and :func:`make_model`, which draws a probe's parameters from torch's global generator (the batched engine
copies these initial parameters, so both engines start every (probe, seed) model alike).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from bertlook.analyses.probes.features import Batch, build_features
from bertlook.analyses.probes.catalogue import FEATURE_SCALES, HIDDEN, N_DIST, base_kind
from bertlook.errors import BertlookError


# ======================================================================================== scores
def attn_glove_scores(x: "torch.Tensor", dep_vecs: "torch.Tensor", cand_vecs: "torch.Tensor",
                      weight: "torch.Tensor", bias: "torch.Tensor") -> "torch.Tensor":
    """Reference form: ``score_ij = sum_m (weight [v_i ; v_j] + bias)_m x_ij[m]`` -> ``[B, Wm, Wm+1]``.

    ``x`` from :func:`~bertlook.analyses.probes.features.build_features`, ``cand_vecs`` ``[B, Wm+1, d]`` in candidate
    order (0 = ROOT).
    The probes use the equivalent :func:`attn_glove_scores_fast`.
    """
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
    B, K, Wm, _ = words.shape
    W2 = torch.stack([w[:K], w[K:]])  # [direction, layer*head]
    r = torch.matmul(W2, words.reshape(B, K, Wm * Wm)).reshape(B, 2, Wm, Wm)  # [batch, direction, word, word]
    s_words = r[:, 0] + r[:, 1].transpose(1, 2)  # [batch, word, word]
    rr = torch.einsum("rk,bski->bsri", W2, root)  # [batch, root_part, direction, word]
    s_root = a * (rr[:, 0, 0] + rr[:, 2, 1]) + b * (rr[:, 1, 0] + rr[:, 3, 1])  # [batch, word]
    return torch.cat([s_root.unsqueeze(2), s_words], dim=2)  # [batch, word, candidate]


def attn_glove_scores_fast(words, root, a, b, dep_vecs, cand_vecs, weight, bias) -> "torch.Tensor":
    """Attn+GloVe scores (``[B, Wm, Wm+1]``) equal to :func:`attn_glove_scores` on
    :func:`~bertlook.analyses.probes.features.build_features`.

    With ``weight [v_i ; v_j] + bias = P_i + Q_j`` (``P`` from the dependent's vector plus the bias,
    ``Q`` from the candidate's; halves 1 and 2 of the 2K features) and ``F = words``
    (``F_kij = A_k(i->j)``), the word candidates score
    ``sum_k F_kij (P1_ki + Q1_kj) + sum_k F_kji (P2_ki + Q2_kj)``; the second sum is
    ``Y_ji`` with ``Y_pq = sum_k F_kpq (Q2_kp + P2_kq)``, so only ``F`` is needed. The ROOT column
    comes from the [CLS]/[SEP] parts with ``Q_0``. Heads-first layout: the sums over ``k`` run over
    contiguous ``Wm x Wm`` planes; no ``[B, Wm, Wm+1, 2K]`` feature tensor is built.
    """
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
    """``linear(x, weight, bias)`` with its last two axes swapped."""
    return torch.nn.functional.linear(x, weight, bias).transpose(1, 2)


def masked_log_softmax(scores: "torch.Tensor", cand_mask: "torch.Tensor") -> "torch.Tensor":
    """Log-softmax over each word's candidates, the padding candidates (``~cand_mask``) excluded."""
    scores = scores.masked_fill(~cand_mask[:, None, :], float("-inf"))  # [batch, word, candidate]
    return torch.log_softmax(scores, dim=-1)  # [batch, word, candidate]


def probe_loss(scores: "torch.Tensor", heads: "torch.Tensor", dep_mask: "torch.Tensor",
               cand_mask: "torch.Tensor") -> "torch.Tensor":
    """Cross-entropy summed over the real (unpadded) words of all sentences of the batch."""
    return -gold_log_probs(scores, heads, dep_mask, cand_mask).sum()


def gold_log_probs(scores: "torch.Tensor", heads: "torch.Tensor", dep_mask: "torch.Tensor",
                   cand_mask: "torch.Tensor") -> "torch.Tensor":
    """``[B, Wm]`` log-probability of each real word's gold head, 0 on padding (:func:`probe_loss` sums it)."""
    logp = masked_log_softmax(scores, cand_mask)  # [batch, word, candidate]
    gold = logp.gather(-1, heads.unsqueeze(-1)).squeeze(-1)  # [batch, word]
    return torch.where(dep_mask, gold, torch.zeros_like(gold))  # [batch, word]


# ========================================================================================== modules
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


ATTN_FAMILIES = ("attn", "attn_glove", "attn_glove_mlp")  # the model families that read attention


def make_model(kind: str, *, num_heads_total: int | None, glove_dim: int | None, released_offbyone: bool = False,
               feature_scale: str = "none", heads: Sequence[int] | None = None):
    """The untrained module of probe ``kind`` (parameters drawn from torch's global generator).

    The module carries what its batches need: ``needs``, ``released_offbyone``, ``uniform_maps``
    (``attn_glove_uniform``: the store's maps replaced by exactly uniform rows), ``feature_scale``
    (see :func:`~bertlook.analyses.probes.features.make_batch`; only for the probes that read attention) and
    ``head_subset`` (``heads``: the flattened indices of the heads whose features it reads, None = all; the
    module is built for ``len(heads)`` heads).
    """
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
