"""The model's side of the faithfulness table: one segment's maps of every measure, and what removing a token does.

:func:`segment_maps` gives every measure's ``[n, n]`` map of one prepared example (row ``i`` = the token that
receives, column ``j`` = the token it receives from: ``i <- j``) from :func:`bertlook.attention.contributions.
example_maps` (attention, ALTI), :mod:`bertlook.attention.norms` (norm-based maps), :func:`bertlook.analyses.rollout.
rollout`, :func:`bertlook.attention.value_zeroing.value_zeroing` and, when the model has its pre-training head, the
gradient of the loss with respect to the attention weights (:func:`bertlook.analyses.gradient_pass.
attention_gradients`). :func:`token_ablations` removes each sampled token in turn (the sequence one shorter) and
measures every other token's final-layer change ``1 - cos`` and the loss change over the same targets;
:func:`target_losses` is the loss of a batch per target (the gradients step's loss: an encoder's masked-LM
cross-entropy at the masked positions, a decoder's next-token cross-entropy). torch is imported inside the functions.

Definitions: docs/definitions.md#which-measure-to-trust-faithfulness
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from bertlook.analyses.gradient_pass import IGNORE_INDEX, MaskedSegment, attention_gradients
from bertlook.analyses.rollout import rollout
from bertlook.attention import norms
from bertlook.attention.contributions import alti_rollout, example_maps
from bertlook.attention.extraction import accepts_token_type_ids
from bertlook.attention.value_zeroing import value_zeroing
from bertlook.errors import BertlookError

#: measure -> its map kind (the kind names used everywhere; two measures of the same kind differ by layers)
MEASURES = {
    "attention": "attention",  # last layer, mean over heads
    "attention_layer_mean": "attention",  # mean over layers and heads
    "norm": "norm",  # last layer, mean over heads of the row-normalised norm-based maps
    "rollout": "rollout",  # attention rollout up to the last layer
    "alti": "alti",  # last layer
    "alti_rollout": "alti_rollout",  # ALTI over all layers (last layer of alti_rollout)
    "value_zeroing": "value_zeroing",  # last layer
    "value_zeroing_rollout": "value_zeroing",  # value zeroing composed over layers as alti_rollout
    "grad_attention": "grad_attention",  # sum over layers and heads of |alpha * dLoss/dalpha|
}
#: the measures that need the pre-training loss (a model without its head: not run)
LOSS_MEASURES = ("grad_attention",)


def model_inputs(model, ids, tts, causal: bool, mask=None) -> dict[str, Any]:
    """The keyword inputs of ``model`` for ``ids`` / ``tts`` [batch, n] (long tensors on its device); token type ids
    only for an encoder that takes them."""
    import torch  # lazy: torch only where a model runs

    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids) if mask is None else mask}
    if not causal and accepts_token_type_ids(model):
        kwargs["token_type_ids"] = tts
    return kwargs


def target_losses(model, head, ids, tts, labels, causal: bool, mask=None):
    """``(hidden, ce)``: the final-layer hidden states ``[batch, n, d]`` of the base model and the cross-entropy
    ``[batch, n]`` of every labelled position (NaN elsewhere; ``labels`` ``[batch, n]``, :data:`IGNORE_INDEX` = none;
    ``head`` None: no loss, ``ce`` None). The head runs on the labelled positions only."""
    import torch  # lazy: as model_inputs
    import torch.nn.functional as F  # lazy: as above

    with torch.no_grad():
        out = model.base_model(**model_inputs(model.base_model, ids, tts, causal, mask))
        hidden = out.last_hidden_state  # [batch, n, d]
        if head is None or labels is None:
            return hidden, None
        sel = labels != IGNORE_INDEX  # [batch, n]
        logits = head(hidden[sel])  # [labelled, vocab]
        ce = torch.full(labels.shape, float("nan"), dtype=torch.float64, device=hidden.device)
        ce[sel] = F.cross_entropy(logits.float(), labels[sel], reduction="none").double()
    return hidden, ce


def example_tensors(ex: MaskedSegment, device, drop: int | None = None):
    """``(ids, tts, labels)`` [1, n] long tensors of ``ex`` (``drop``: without token ``drop``; a decoder's labels are
    recomputed: every position predicts the next token of the shorter sequence)."""
    import torch  # lazy: as model_inputs

    keep = [p for p in range(ex.n) if p != drop]
    ids = [ex.input_ids[p] for p in keep]
    tts = [ex.token_type_ids[p] for p in keep]
    if ex.actions and ex.actions[0] == "next":  # a decoder: next-token labels
        labels = ids[1:] + [IGNORE_INDEX]
    else:
        labels = [ex.labels[p] for p in keep]
    return tuple(torch.tensor([v], dtype=torch.long, device=device) for v in (ids, tts, labels))


def _target_index(ex: MaskedSegment, causal: bool, drop: int | None = None) -> np.ndarray:
    """For each position of ``ex`` (without ``drop``): the original index of the token its label predicts (-1: no
    label)."""
    keep = np.array([p for p in range(ex.n) if p != drop], dtype=np.int64)  # [n'] original indices
    out = np.full(len(keep), -1, dtype=np.int64)
    if causal:
        out[:-1] = keep[1:]
    else:
        labelled = np.array([ex.labels[p] != IGNORE_INDEX for p in keep], dtype=bool)
        out[labelled] = keep[labelled]
    return out


def _by_target(ce_row, index: np.ndarray) -> dict[int, float]:
    """``{original target index: cross-entropy}`` of one row of :func:`target_losses`."""
    values = ce_row.cpu().numpy()
    return {int(t): float(values[p]) for p, t in enumerate(index) if t >= 0}


def token_ablations(model, head, ex: MaskedSegment, positions: Sequence[int], causal: bool, device,
                    batch: int = 16) -> dict[str, Any]:
    """Remove each token of ``positions`` in turn (the sequence one shorter) -> ``{"change": [k, n]`` the final-layer
    change ``1 - cos(h_i, h_i^(without j))`` of every other token (NaN at ``j``; a decoder: also at ``i < j``, which
    cannot change), ``"loss": [k]`` the loss without ``j`` minus the loss with it over the same targets (every
    target but ``j``'s own; NaN without ``head``)}."""
    import torch  # lazy: as model_inputs

    ids, tts, labels = example_tensors(ex, device)
    h0, ce0 = target_losses(model, head, ids, tts, labels, causal)
    h0 = h0[0].double()  # [n, d]
    base = _by_target(ce0[0], _target_index(ex, causal)) if ce0 is not None else {}
    n, k = ex.n, len(positions)
    change = np.full((k, n), np.nan)
    loss = np.full(k, np.nan)
    for start in range(0, k, batch):
        chunk = list(positions[start:start + batch])
        parts = [example_tensors(ex, device, drop=j) for j in chunk]
        hid, ce = target_losses(model, head, *(torch.cat(p) for p in zip(*parts)), causal)
        for b, j in enumerate(chunk):
            orig = [p for p in range(n) if p != j]
            h1 = hid[b].double()  # [n - 1, d]
            ref = h0[orig]  # [n - 1, d]
            cos = (h1 * ref).sum(-1) / (h1.norm(dim=-1) * ref.norm(dim=-1)).clamp_min(1e-300)
            change[start + b, orig] = (1.0 - cos).cpu().numpy()
            if causal:
                change[start + b, :j] = np.nan
            if ce is not None:
                after = _by_target(ce[b], _target_index(ex, causal, drop=j))
                common = sorted(set(after) & set(base))
                if common:
                    loss[start + b] = (np.mean([after[t] for t in common]) - np.mean([base[t] for t in common]))
    return {"change": change, "loss": loss}


def _norm_map(attn_last, value, dense, num_heads: int):
    """The last layer's norm-based map, mean over heads: ``[n, n]`` float64 (:mod:`bertlook.attention.norms`)."""
    vn = norms.value_norms(value, dense.weight.detach(), num_heads)  # [1, head, key_pos]
    return norms.norm_maps(attn_last, vn)[0].double().mean(0).cpu().numpy()  # [query_pos, key_pos]


def segment_maps(model, has_head: bool, ex: MaskedSegment, causal: bool, device, seconds: dict[str, float], *,
                 all_layers: bool = True) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Every :data:`MEASURES` map of ``ex`` (``[n, n]`` float64; ``grad_attention`` only with ``has_head``) and the
    per-head gradient importance ``|sum_ij alpha_h[i, j] dL/dalpha_h[i, j]|`` ``[layer, head]`` (None without a head);
    ``seconds``: the time of each part added to its entry; ``all_layers`` False: value zeroing of the last layer
    only (no ``value_zeroing_rollout``)."""
    base = model.base_model
    ids, tts, _ = example_tensors(ex, device)
    inputs = model_inputs(base, ids, tts, causal)
    t0 = time.perf_counter()
    mods = norms.find_attention_modules(base)
    with norms.capture_values(mods) as values:
        maps = example_maps(base, inputs, heads=False)
    attn = maps["attention"][0]  # [layer, head, q, k]
    L, H = int(attn.shape[0]), int(attn.shape[1])
    attn64 = attn.double().cpu().numpy()
    alti = maps["alti"][0]  # [layer, q, k]
    out = {
        "attention": attn64[-1].mean(0),
        "attention_layer_mean": attn64.mean((0, 1)),
        "norm": _norm_map(attn[-1][None], values[L - 1], mods[L - 1][1], H),
        "rollout": rollout(attn64)[-1],
        "alti": alti[-1].double().cpu().numpy(),
        "alti_rollout": alti_rollout(alti)[-1].cpu().numpy(),
    }
    t1 = time.perf_counter()
    vz = value_zeroing(base, inputs, causal=causal, layers=None if all_layers else [L - 1])  # [layer, q, k] float64
    out["value_zeroing"] = vz[-1].numpy()
    if all_layers:
        out["value_zeroing_rollout"] = alti_rollout(vz)[-1].numpy()
    t2 = time.perf_counter()
    seconds["maps"] += t1 - t0
    seconds["value_zeroing"] += t2 - t1
    importance = None
    if has_head:
        (g,) = attention_gradients(model, [ex], device=device)  # attn, grad: [layer, head, n, n] float32
        prod = g["attn"].astype(np.float64) * g["grad"].astype(np.float64)
        out["grad_attention"] = np.abs(prod).sum((0, 1))
        importance = np.abs(prod.sum((2, 3)))  # [layer, head]: |dL/dxi_h| (the gradients step's head importance)
        seconds["gradients"] += time.perf_counter() - t2
    if any(not np.isfinite(m).all() for m in out.values()):
        raise BertlookError(f"segment {ex.id!r}: a non-finite map value")
    return out, importance
