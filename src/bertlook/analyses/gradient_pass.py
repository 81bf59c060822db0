"""The model's side of the gradients step (twin of Fig 3): masked examples, the forward and backward pass,
per-batch sums (procedure: docs/definitions.md#gradient-importance-of-attention-to-sep).

:func:`mask_segments` masks the segments as in BERT pre-training (one seeded generator), :func:`next_token_examples`
gives a decoder's examples; :func:`attention_gradients` differentiates the loss with respect to every attention
probability; :func:`batch_statistics` sums ``|dL/dA|``, the attention mass and ``|dL/dxi_h|`` per example, layer
and target ([SEP], ". ,", other), on the device. :mod:`bertlook.analyses.gradients` runs and reduces them
(torch is imported inside the functions that run the model: the reduction runs in the analysis env, no torch).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from bertlook.attention.extraction import accepts_token_type_ids, encode_segment, model_device
from bertlook.attention.mlm import mlm_head_module
from bertlook.errors import BertlookError, check_choice
from bertlook.pipeline.model_spec import DECODER, model_family

PUNCT_TOKENS = (".", ",")
MASK_MODES = ("bert", "mask_only")
TARGET_TOKEN_MODES = ("original", "input")
IGNORE_INDEX = -100
# BERT's 80 / 10 / 10 split of the chosen positions: [MASK] / unchanged / random token
P_MASK, P_KEEP = 0.8, 0.1


# --------------------------------------------------------------------------------------------------
# masking
# --------------------------------------------------------------------------------------------------



@dataclasses.dataclass
class MaskedSegment:
    """One segment prepared for the masked-LM loss.

    ``tokens``: the original wordpieces; ``input_tokens`` / ``input_ids``: what the model is fed
    (after masking); ``labels``: the original id at masked positions, ``-100`` elsewhere;
    ``masked_positions`` (ascending) and ``actions`` (``"mask"``, ``"keep"`` or ``"random"``, one per
    masked position).
    """

    id: Any
    tokens: list[str]
    input_tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    labels: list[int]
    masked_positions: list[int]
    actions: list[str]

    @property
    def n(self) -> int:
        return len(self.input_ids)


def never_masked(tokenizer) -> set[str]:
    names = ("cls_token", "sep_token", "pad_token", "mask_token")
    return {str(getattr(tokenizer, a)) for a in names if getattr(tokenizer, a, None) is not None}


def _random_pool(tokenizer):
    special = set(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))
    pool = np.array([i for i in range(len(tokenizer)) if i not in special], dtype=np.int64)
    if pool.size == 0:
        raise BertlookError("the tokenizer has no non-special tokens to draw random replacements from")
    return pool


def mask_segments(
    segments: Sequence[dict[str, Any]],
    tokenizer,
    *,
    seed: int,
    rate: float = 0.15,
    mask_mode: str = "bert",
    segment_ids: str = "zeros",
) -> list[MaskedSegment]:
    """Mask ``segments`` as in BERT pre-training (procedure: docs/definitions.md#gradient-importance-of-attention-to-sep).

    Deterministic for a given ``seed`` and segment order; one ``numpy.random.default_rng(seed)``
    is consumed segment by segment. A segment without candidates (only special tokens) comes back
    with no masked position; callers exclude it.
    """
    if not (0.0 < float(rate) <= 1.0) or not math.isfinite(float(rate)):
        raise BertlookError(f"mask rate must be in (0, 1], got {rate!r}")
    check_choice("mask mode", mask_mode, MASK_MODES)
    mask_token = getattr(tokenizer, "mask_token", None)
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_token is None or mask_id is None:
        raise BertlookError("the tokenizer has no mask token; masked-LM gradients need one")
    never = never_masked(tokenizer)
    pool = _random_pool(tokenizer) if mask_mode == "bert" else None
    rng = np.random.default_rng(seed)
    out: list[MaskedSegment] = []
    for seg in segments:
        ids, tts = encode_segment(seg, tokenizer, segment_ids)
        tokens = list(seg["tokens"])
        cand = np.array([i for i, t in enumerate(tokens) if t not in never], dtype=np.int64)
        k = min(len(cand), max(1, int(round(rate * len(cand))))) if len(cand) else 0
        chosen = np.sort(cand[rng.permutation(len(cand))[:k]]) if k else cand[:0]
        input_ids = list(ids)
        input_tokens = list(tokens)
        labels = [IGNORE_INDEX] * len(ids)
        actions: list[str] = []
        for pos in chosen.tolist():
            labels[pos] = ids[pos]
            if mask_mode == "mask_only":
                action = "mask"
            else:
                u = float(rng.random())
                action = "mask" if u < P_MASK else "keep" if u < P_MASK + P_KEEP else "random"
            if action == "mask":
                input_ids[pos] = int(mask_id)
                input_tokens[pos] = str(mask_token)
            elif action == "random":
                new = int(pool[rng.integers(len(pool))])
                input_ids[pos] = new
                input_tokens[pos] = str(tokenizer.convert_ids_to_tokens(new))
            actions.append(action)
        out.append(MaskedSegment(id=seg.get("id"), tokens=tokens, input_tokens=input_tokens,
                                 input_ids=input_ids, token_type_ids=list(tts), labels=labels,
                                 masked_positions=chosen.tolist(), actions=actions))
    return out


def next_token_examples(segments: Sequence[dict[str, Any]], tokenizer) -> list[MaskedSegment]:
    """A decoder's examples for the next-token loss: nothing is masked; every position but the last predicts
    the token after it (``labels[i] = input_ids[i + 1]``, ``masked_positions`` = 0..n-2, action ``next``).
    Deterministic (no generator). A one-token segment predicts nothing; callers exclude it."""
    out: list[MaskedSegment] = []
    for seg in segments:
        ids, _ = encode_segment(seg, tokenizer, "zeros")
        n = len(ids)
        labels = [int(i) for i in ids[1:]] + [IGNORE_INDEX]
        out.append(MaskedSegment(id=seg.get("id"), tokens=list(seg["tokens"]), input_tokens=list(seg["tokens"]),
                                 input_ids=list(ids), token_type_ids=[0] * n, labels=labels,
                                 masked_positions=list(range(n - 1)), actions=["next"] * (n - 1)))
    return out


# --------------------------------------------------------------------------------------------------
# gradients
# --------------------------------------------------------------------------------------------------


def _padded_inputs(model, batch: Sequence[MaskedSegment], device):
    """The model's keyword arguments for one batch padded to its longest segment, the labels (``-100`` off
    the masked positions) and the real lengths: ``(kwargs, labels [batch, seq], lengths)``."""
    import torch  # lazy: torch, absent from the analysis env that reduces the sums

    lengths = [ex.n for ex in batch]
    B, T = len(batch), max(lengths)
    pad_id = getattr(model.config, "pad_token_id", None)
    pad_id = 0 if pad_id is None else int(pad_id)
    ids = torch.full((B, T), pad_id, dtype=torch.long)  # [batch, seq]
    tts = torch.zeros((B, T), dtype=torch.long)  # [batch, seq]
    mask = torch.zeros((B, T), dtype=torch.long)  # [batch, seq]
    labels = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)  # [batch, seq]
    for b, ex in enumerate(batch):
        if not ex.masked_positions:
            raise BertlookError(f"segment {ex.id!r}: no masked position (nothing to compute a loss on)")
        n = ex.n
        ids[b, :n] = torch.as_tensor(ex.input_ids, dtype=torch.long)
        tts[b, :n] = torch.as_tensor(ex.token_type_ids, dtype=torch.long)
        mask[b, :n] = 1
        labels[b, :n] = torch.as_tensor(ex.labels, dtype=torch.long)
    kwargs = dict(input_ids=ids.to(device), attention_mask=mask.to(device), output_attentions=True)
    if accepts_token_type_ids(model) and model_family(model.config) != DECODER:  # GPT-2 would embed them
        kwargs["token_type_ids"] = tts.to(device)
    elif bool(tts.any()):
        raise BertlookError("the model takes no token type ids but non-zero ones were given (use segment ids 'zeros')")
    labels = labels.to(device)
    return kwargs, labels, lengths


def _forward_backward(model, batch: Sequence[MaskedSegment], device=None):
    """One padded batch: ``(attentions, grads, losses, lengths)``.

    ``attentions`` and ``grads``: one ``[B, H, T, T]`` tensor per layer (detached, on the device);
    ``losses``: ``[B]`` per-segment mean cross-entropy; ``lengths``: real lengths.
    """
    import torch  # lazy: as in _padded_inputs
    import torch.nn.functional as F  # lazy: as above

    if not batch:
        raise BertlookError("empty batch")
    device = model_device(model) if device is None else torch.device(device)
    kwargs, labels, lengths = _padded_inputs(model, batch, device)
    B, T = len(batch), max(lengths)
    if model.training:
        raise BertlookError("the model must be in eval mode (dropout off) for attention gradients")
    selected = labels != IGNORE_INDEX  # [batch, seq]: the masked positions
    head = mlm_head_module(model)
    hook = None
    if head is not None:
        # the MLM head works position by position: apply it to the masked positions only (the
        # vocabulary projection of every position would cost as much as the encoder on a CPU)
        def _gather(module, args):
            return (args[0][selected], *args[1:])  # [masked_pos, d_model]

        hook = head.register_forward_pre_hook(_gather)
    try:
        with torch.enable_grad():
            out = model(**kwargs)
            attns = out.attentions  # layer x [batch, head, query_pos, key_pos]
            if attns is None or len(attns) == 0 or any(a is None for a in attns):
                raise BertlookError(
                    "the model returned no attention weights (it must be loaded with attn_implementation='eager')"
                )
            if not all(a.requires_grad for a in attns):
                raise BertlookError("the returned attention weights are not part of the autograd graph")
            logits = out.logits  # [masked_pos, vocab] (head hook) or [batch, seq, vocab]
            if logits.dim() == 3:  # no head hook: logits of every position
                logits = logits[selected]  # [masked_pos, vocab]
            if logits.dim() != 2 or logits.shape[0] != int(selected.sum()):
                raise BertlookError(f"unexpected masked-LM logits of shape {tuple(out.logits.shape)}")
            batch_of = torch.arange(B, device=device)[:, None].expand(B, T)[selected]  # [masked_pos]
            ce = F.cross_entropy(logits.float(), labels[selected], reduction="none")  # [masked_pos]
            n_masked = selected.sum(dim=1)  # [batch]
            losses = torch.zeros(B, dtype=ce.dtype, device=device).index_add(0, batch_of, ce) / n_masked  # [batch]
            loss = losses.sum()  # sum of per-segment means: each segment's gradient is its batch-1 gradient
            try:
                grads = torch.autograd.grad(loss, list(attns))  # layer x [batch, head, query_pos, key_pos]
            except RuntimeError as err:
                raise BertlookError(
                    "the attention weights returned by the model are not on the path to the masked-LM loss "
                    f"(cannot take gradients with respect to them): {str(err).splitlines()[0]}"
                ) from None
    finally:
        if hook is not None:
            hook.remove()
    # layer x [batch, head, query_pos, key_pos] (attns, grads), [batch], lengths
    return [a.detach() for a in attns], [g.detach() for g in grads], losses.detach(), lengths


def attention_gradients(model, examples: Sequence[MaskedSegment], *, device=None) -> list[dict[str, Any]]:
    """Per example ``{"id", "loss", "attn", "grad"}`` for one batch of masked segments.

    ``attn`` and ``grad`` are float32 numpy arrays ``[layers, heads, n, n]`` (row = FROM token, column
    = TO token) cut to the example's own length: the attention probabilities and ``dL/dA`` of the
    example's loss (mean cross-entropy over its masked positions). Padding never changes them.
    """
    attns, grads, losses, lengths = _forward_backward(model, examples, device)
    out = []
    for b, ex in enumerate(examples):
        n = lengths[b]
        out.append({
            "id": ex.id,
            "loss": float(losses[b]),
            # [layer, head, query_pos, key_pos]
            "attn": np.stack([a[b, :, :n, :n].float().cpu().numpy() for a in attns]),
            # [layer, head, query_pos, key_pos]
            "grad": np.stack([g[b, :, :n, :n].float().cpu().numpy() for g in grads]),
        })
    return out


def _class_masks(examples: Sequence[MaskedSegment], T: int, sep_token: str | None, target_tokens: str):
    """``[B, 3, T]`` float masks of the to-token classes (zeros on padding), ``[B, T]`` row mask.
    ``sep_token`` None (a decoder): the first class is the first token (position 0)."""
    B = len(examples)
    cls = np.zeros((B, 3, T), dtype=np.float32)  # [batch, target, key_pos]: [SEP], ". ,", other
    rows = np.zeros((B, T), dtype=np.float32)  # [batch, query_pos]
    for b, ex in enumerate(examples):
        toks = np.asarray(ex.tokens if target_tokens == "original" else ex.input_tokens, dtype=object)  # [seq]
        is_sep = toks == sep_token if sep_token is not None else np.arange(len(toks)) == 0  # [seq]
        is_punct = np.isin(toks, PUNCT_TOKENS) & ~is_sep  # [seq]
        n = len(toks)
        cls[b, 0, :n] = is_sep
        cls[b, 1, :n] = is_punct
        cls[b, 2, :n] = ~(is_sep | is_punct)
        rows[b, :n] = 1.0
    return cls, rows


def batch_statistics(model, examples: Sequence[MaskedSegment], *, sep_token: str | None = "[SEP]",
                     target_tokens: str = "original", device=None) -> dict[str, Any]:
    """Per-example sums for one batch (reduced on the device).

    Returns ``grad_sum [B, L, 3]`` (sum of ``|dL/dA|`` over heads, real rows and the class's columns),
    ``count [B, 3]`` (number of those entries per layer: heads x n x columns of the class),
    ``mass [B, L, 3]`` (attention mass per from-token, averaged over heads), ``loss [B]``, ``n [B]``,
    ``importance [B, L, H]``: ``|sum_ij dL/dA_h[i, j] * A_h[i, j]|`` over the real rows and columns, the
    absolute derivative of the example's loss with respect to a gate multiplying head h's output, at 1.
    ``sep_token`` None (a decoder): the first target is the first token, and only the entries a causal row
    sees (``j <= i``) are summed and counted: the others are 0 by construction, their gradient means nothing.
    """
    import torch  # lazy: as in _padded_inputs

    check_choice("target tokens mode", target_tokens, TARGET_TOKEN_MODES)
    attns, grads, losses, lengths = _forward_backward(model, examples, device)
    T = max(lengths)
    H = int(attns[0].shape[1])
    # [batch, target, key_pos], [batch, query_pos]
    cls_np, rows_np = _class_masks(examples, T, sep_token, target_tokens)
    dev = attns[0].device
    cls = torch.as_tensor(cls_np, device=dev)  # [batch, target, key_pos]
    rows = torch.as_tensor(rows_np, device=dev)  # [batch, query_pos]
    n = torch.as_tensor(lengths, dtype=torch.float64, device=dev)  # [batch]
    causal = sep_token is None
    visible = torch.tril(torch.ones(T, T, device=dev)) if causal else None  # [query_pos, key_pos]
    g_sums, masses, gates = [], [], []
    for a, g in zip(attns, grads):
        if visible is not None:
            g = g * visible  # [batch, head, query_pos, key_pos]: a causal map's entries above the diagonal left out
        ga = (g.double() * a.double()).sum(dim=-1)  # [batch, head, query_pos]: padded keys have a = 0
        gates.append(torch.einsum("bhi,bi->bh", ga, rows.double()).abs())  # [batch, head]: |dL/dxi_h|
        g_h = g.float().abs().sum(dim=1)  # [batch, query_pos, key_pos]: summed over heads
        a_h = a.float().sum(dim=1)  # [batch, query_pos, key_pos]
        g_rows = torch.einsum("bij,bi->bj", g_h, rows)  # [batch, key_pos]: summed over real rows
        a_rows = torch.einsum("bij,bi->bj", a_h, rows)  # [batch, key_pos]
        g_sums.append(torch.einsum("bj,bcj->bc", g_rows.double(), cls.double()))  # [batch, target]
        masses.append(torch.einsum("bj,bcj->bc", a_rows.double(), cls.double()) / (H * n)[:, None])  # [batch, target]
    if causal:  # column j is seen by the rows j..n-1: n - j entries per head
        seen = np.maximum(np.asarray(lengths, dtype=np.float64)[:, None] - np.arange(T)[None, :], 0)  # [batch, key_pos]
        count = H * np.einsum("bcj,bj->bc", cls_np.astype(np.float64), seen)  # [batch, target]
    else:
        ncols = cls_np.sum(axis=2).astype(np.float64)  # [batch, target]
        count = H * np.asarray(lengths, dtype=np.float64)[:, None] * ncols  # [batch, target]
    return {
        "ids": [ex.id for ex in examples],
        "grad_sum": torch.stack(g_sums, dim=1).cpu().numpy(),  # [batch, layer, target]
        "count": count,
        "mass": torch.stack(masses, dim=1).cpu().numpy(),  # [batch, layer, target]
        "loss": losses.double().cpu().numpy(),  # [batch]
        "n": np.asarray(lengths, dtype=np.int64),  # [batch]
        "n_masked": np.asarray([len(ex.masked_positions) for ex in examples], dtype=np.int64),  # [batch]
        "importance": torch.stack(gates, dim=1).cpu().numpy(),  # [batch, layer, head]
    }
