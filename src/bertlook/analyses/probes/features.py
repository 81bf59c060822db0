"""The probes' inputs (torch): feature tensors, padded batches and the batch schedule.

:func:`distance_features` (the 8 positional features of Distances+GloVe), :func:`candidate_vectors` (the GloVe
vectors of a sentence's head candidates, also with the released code's off-by-one), :func:`build_features`
(the attention features ``x_ij`` in reference form), :class:`Batch` / :func:`make_batch` (sentences padded to
the longest, their maps read from the store), and which sentences make each batch: :func:`epoch_batches` (one
training epoch, drawn with a seed's generator) and :func:`split_group` (a batch cut to a memory budget). The
batched engine (:mod:`bertlook.analyses.probes.batch`) uses the same schedule, so its models see the
reference's sentence order.

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np
import torch

from bertlook.analyses.probes.catalogue import BUCKET_POOL_BATCHES, FEATURE_SCALES, N_DIST
from bertlook.analyses.probes.data import ProbeData, SentenceMeta
from bertlook.errors import BertlookError


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
    fwd_words = words.permute(0, 2, 3, 1)  # [batch, word (i), word (j), layer*head]
    bwd_words = words.permute(0, 3, 2, 1)  # [batch, word (i), word (j), layer*head] = A(j -> i)
    root_fwd = (a * root[:, 0] + b * root[:, 1]).transpose(1, 2)  # [batch, word, layer*head]
    root_bwd = (a * root[:, 2] + b * root[:, 3]).transpose(1, 2)  # [batch, word, layer*head]
    fwd = torch.cat([root_fwd.unsqueeze(2), fwd_words], dim=2)  # [batch, word, candidate, layer*head]
    bwd = torch.cat([root_bwd.unsqueeze(2), bwd_words], dim=2)  # [batch, word, candidate, layer*head]
    return torch.cat([fwd, bwd], dim=-1)  # [batch, word, candidate, probe_feature]


# ========================================================================================= batches
@dataclasses.dataclass
class Batch:
    """Sentences padded to the longest (``Wm`` words, ``Wm+1`` candidates, candidate 0 = ROOT), as the
    reference probes read them; only the inputs the probe needs are set (:func:`make_batch`)."""

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
        batch.words, batch.root = _uniform_attention(sents, Wm, data.num_heads_total if sel is None else len(sel))
    elif attn:
        batch.words, batch.root = _read_attention(data, sents, Wm, sel)
    if attn and feature_scale == "n":
        n = torch.from_numpy(lengths + 2).float()  # [batch]: map size W+2 of each sentence
        batch.words = batch.words * n[:, None, None, None]  # [batch, layer*head, word, word]
        batch.root = batch.root * n[:, None, None, None]  # [batch, root_part, layer*head, word]
    if glove:
        batch.dep_vecs, batch.cand_vecs = _glove_vectors(data, sents, Wm, released_offbyone)
    if dist:
        batch.dist = _distance_batch(sents, Wm)
    return batch


def _uniform_attention(sents: Sequence[SentenceMeta], Wm: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(words, root) of exactly uniform maps: every entry of a sentence of W words is ``1/(W+2)`` (float32)."""
    B = len(sents)
    words = np.zeros((B, K, Wm, Wm), dtype=np.float32)  # [batch, layer*head, word, word]
    root = np.zeros((B, 4, K, Wm), dtype=np.float32)  # [batch, root_part, layer*head, word]
    for b, s in enumerate(sents):
        W = s.n_words
        u = np.float32(1.0) / np.float32(W + 2)  # every entry of a uniform row over [CLS] w1..wW [SEP]
        words[b, :, :W, :W] = u  # [layer*head, word, word]
        root[b, :, :, :W] = u  # [root_part, layer*head, word]
    # [batch, layer*head, word, word], [batch, root_part, layer*head, word]
    return torch.from_numpy(words), torch.from_numpy(root)


def _read_attention(data: ProbeData, sents: Sequence[SentenceMeta], Wm: int,
                    sel: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(words, root) read from the store (the heads ``sel``, None = all), float16 -> float32."""
    B = len(sents)
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
    # [batch, layer*head, word, word], [batch, root_part, layer*head, word]
    return torch.from_numpy(words).float(), torch.from_numpy(root).float()


def _glove_vectors(data: ProbeData, sents: Sequence[SentenceMeta], Wm: int,
                   released_offbyone: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(dep_vecs ``[batch, word, d_glove]``, cand_vecs ``[batch, candidate, d_glove]``) of the sentences."""
    B = len(sents)
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
    return torch.from_numpy(dep), torch.from_numpy(cand)  # [batch, word, d_glove], [batch, candidate, d_glove]


def _distance_batch(sents: Sequence[SentenceMeta], Wm: int) -> torch.Tensor:
    """:func:`distance_features` of each sentence, padded: ``[batch, word, candidate, probe_feature]``."""
    B = len(sents)
    feats = np.zeros((B, Wm, Wm + 1, N_DIST), dtype=np.float32)  # [batch, word, candidate, probe_feature]
    for b, s in enumerate(sents):
        feats[b, : s.n_words, : s.n_words + 1] = distance_features(s.n_words)  # [word, candidate, probe_feature]
    return torch.from_numpy(feats)  # [batch, word, candidate, probe_feature]


# ================================================================================ the batch schedule
def epoch_batches(lengths: Sequence[int], batch_size: int, generator: "torch.Generator",
                  pool_batches: int = BUCKET_POOL_BATCHES) -> list[list[int]]:
    """The batches of one training epoch (lists of sentence positions), drawn with ``generator``.

    The sentences are shuffled; with ``batch_size > 1`` each run of ``pool_batches * batch_size``
    shuffled sentences is sorted by length (stable) and cut into batches, and the batches are
    shuffled, so that a batch holds sentences of similar length (less padding; the objective, a sum
    over all sentences, is unchanged). ``batch_size == 1`` is a plain shuffle.
    """
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

