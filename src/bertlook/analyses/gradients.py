"""Gradient importance of attention to [SEP] (twin of Fig 3 of Clark et al. 2019; no released code).

:func:`mask_segments` masks the segments as in BERT pre-training (one seeded generator);
:func:`attention_gradients` differentiates the masked-LM loss with respect to every attention
probability; :func:`batch_statistics` / :func:`aggregate` reduce ``|dL/dA|`` and the attention mass per
layer and target ([SEP], ". ,", other) into the rows of ``sep_gradients.csv``; :func:`gradient_partial` /
:func:`reduce_gradients` for sharded runs, :func:`sep_gradient_importance` for one run (both take one
:class:`GradientOptions`, the run's settings);
:func:`bertlook.attention.mlm.has_mlm_head` detects a checkpoint without a masked-LM head ("not run");
:func:`reduce_head_importance` turns the per-segment ``|dL/dxi_h| = |sum_ij dL/dA_h[i, j] A_h[i, j]|``
summed by :func:`batch_statistics` into ``head_importance.csv`` (Michel et al. 2019; docs/definitions.md#per-head-report-card);
:func:`bertlook.reporting.figures.fig3_sep_gradients` draws the figure (``bertlook gradients``).

Definitions (masking procedure, loss, averaging, switches):
docs/definitions.md#gradient-importance-of-attention-to-sep

"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.data.segments import read_segments
from bertlook.attention.mlm import load_mlm_checked, mlm_head_module
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import same_value, shard_info

# torch / transformers are imported inside the functions that run the model: the reduction of the
# per-shard sums (`bertlook gradients --partial`) runs in the analysis env, which has no torch.

TARGETS = ("[SEP]", ". ,", "other")
#: a decoder's targets: the first token (the sink, its twin of [SEP]; docs/definitions.md, decoders)
DECODER_TARGETS = ("first token", ". ,", "other")
#: the loss differentiated: an encoder's masked-LM loss, a decoder's next-token loss
OBJECTIVES = {"encoder": "masked-LM", "decoder": "next-token"}
PUNCT_TOKENS = (".", ",")
COLUMNS = ["layer", "target", "mean_abs_grad", "attention_mass"]
NOT_RUN_COLUMNS = [*COLUMNS, "note"]
IMPORTANCE_COLUMNS = ["layer", "head", "importance", "importance_raw"]
MASK_MODES = ("bert", "mask_only")
TARGET_TOKEN_MODES = ("original", "input")
GRAD_AVERAGES = ("pooled", "segment")
SEGMENT_ID_MODES = ("zeros", "pair")
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


def _never_masked(tokenizer) -> set[str]:
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
    from bertlook.attention.extraction import encode_segment

    if not (0.0 < float(rate) <= 1.0) or not math.isfinite(float(rate)):
        raise BertlookError(f"mask rate must be in (0, 1], got {rate!r}")
    if mask_mode not in MASK_MODES:
        raise BertlookError(f"unknown mask mode {mask_mode!r} (use one of {', '.join(MASK_MODES)})")
    mask_token = getattr(tokenizer, "mask_token", None)
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_token is None or mask_id is None:
        raise BertlookError("the tokenizer has no mask token; masked-LM gradients need one")
    never = _never_masked(tokenizer)
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
    from bertlook.attention.extraction import encode_segment

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


def _model_device(model):
    import torch

    for p in model.parameters():
        return p.device
    return torch.device("cpu")  # pragma: no cover


def _forward_backward(model, batch: Sequence[MaskedSegment], device=None):
    """One padded batch: ``(attentions, grads, losses, lengths)``.

    ``attentions`` and ``grads``: one ``[B, H, T, T]`` tensor per layer (detached, on the device);
    ``losses``: ``[B]`` per-segment mean cross-entropy; ``lengths``: real lengths.
    """
    import torch
    import torch.nn.functional as F

    from bertlook.attention.extraction import accepts_token_type_ids
    from bertlook.pipeline.model_spec import DECODER, model_family

    if not batch:
        raise BertlookError("empty batch")
    device = _model_device(model) if device is None else torch.device(device)
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
    cls = np.zeros((B, len(TARGETS), T), dtype=np.float32)  # [batch, target, key_pos]
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
    import torch

    if target_tokens not in TARGET_TOKEN_MODES:
        raise BertlookError(f"unknown target tokens mode {target_tokens!r} (use one of {', '.join(TARGET_TOKEN_MODES)})")
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


def aggregate(stats: dict[str, Any], *, grad_average: str = "pooled"):
    """``sep_gradients`` rows from concatenated :func:`batch_statistics` -> (DataFrame, extra summary)."""
    if grad_average not in GRAD_AVERAGES:
        raise BertlookError(f"unknown gradient average {grad_average!r} (use one of {', '.join(GRAD_AVERAGES)})")
    # [segment, layer, target], [segment, target], [segment, layer, target]
    gsum, count, mass = stats["grad_sum"], stats["count"], stats["mass"]
    N, L, C = gsum.shape
    with np.errstate(invalid="ignore", divide="ignore"):
        if grad_average == "pooled":
            tot = count.sum(axis=0)  # [target]
            grad = gsum.sum(axis=0) / np.where(tot > 0, tot, np.nan)[None, :]  # [layer, target]
        else:
            per = gsum / np.where(count > 0, count, np.nan)[:, None, :]  # [segment, layer, target]
            with warnings.catch_warnings():  # a class absent from every segment -> NaN, not a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                grad = np.nanmean(per, axis=0) if N else np.full((L, C), np.nan)  # [layer, target]
    att = mass.mean(axis=0)  # [layer, target]
    rows = [
        {"layer": layer + 1, "target": TARGETS[c], "mean_abs_grad": float(grad[layer, c]),
         "attention_mass": float(att[layer, c])}
        for layer in range(L) for c in range(C)
    ]
    extra = {
        "segments_without_target": {TARGETS[c]: int((count[:, c] == 0).sum()) for c in range(C)},
        "entries_per_layer": {TARGETS[c]: int(count[:, c].sum()) for c in range(C)},
    }
    return pd.DataFrame(rows, columns=COLUMNS), extra


# --------------------------------------------------------------------------------------------------
# model loading, MLM-head check
# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# the step
# --------------------------------------------------------------------------------------------------


def not_run_frame(reason: str):
    """The one-row table written when the step cannot run (empty numbers, ``note`` says why)."""
    return pd.DataFrame([{"layer": None, "target": None, "mean_abs_grad": None, "attention_mass": None,
                          "note": reason}], columns=NOT_RUN_COLUMNS)


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise BertlookError(f"unknown {name} {value!r} (use one of {', '.join(choices)})")


PARTIAL_KIND = "sep-gradients"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradientOptions:
    """The settings of a gradient run, shared by :func:`gradient_partial` and :func:`sep_gradient_importance`.

    ``revision``: hub revision of the model; ``seed``: seed of the masking generator; ``batch_size``:
    segments per batch (>= 1); ``max_examples``: use the first N segments of the file (None: all);
    ``device``: ``auto``, ``cpu`` or ``cuda``; ``segment_ids``: :data:`SEGMENT_ID_MODES`; ``mask_rate``:
    fraction of the non-special tokens masked per segment; ``mask_mode``: :data:`MASK_MODES`;
    ``target_tokens``: :data:`TARGET_TOKEN_MODES`; ``grad_average``: :data:`GRAD_AVERAGES`;
    ``progress_every``: 0 turns the progress bar off. Build it once and pass it to every call (each
    shard of a sharded run gets the same options); checked by :meth:`check` when a run starts.
    """

    revision: str | None = None
    seed: int = 0
    batch_size: int = 8
    max_examples: int | None = None
    device: str = "auto"
    segment_ids: str = "zeros"
    mask_rate: float = 0.15
    mask_mode: str = "bert"
    target_tokens: str = "original"
    grad_average: str = "pooled"
    progress_every: int = 100

    def check(self) -> None:
        """Raise :class:`BertlookError` on an unknown mode or a batch size / ``max_examples`` below 1."""
        _check_choice("mask mode", self.mask_mode, MASK_MODES)
        _check_choice("segment ids mode", self.segment_ids, SEGMENT_ID_MODES)
        _check_choice("target tokens mode", self.target_tokens, TARGET_TOKEN_MODES)
        _check_choice("gradient average", self.grad_average, GRAD_AVERAGES)
        if self.batch_size < 1:
            raise BertlookError(f"batch size must be >= 1, got {self.batch_size}")
        if self.max_examples is not None and self.max_examples < 1:
            raise BertlookError(f"max examples must be >= 1, got {self.max_examples}")

    def settings(self, segments_path: str | os.PathLike, model_spec: str) -> dict[str, Any]:
        """The ``settings`` a partial's meta records (every shard's must agree; the summary holds them)."""
        return {
            "segments": str(segments_path), "model": model_spec, "revision": self.revision, "seed": int(self.seed),
            "batch_size": int(self.batch_size), "max_examples": self.max_examples, "segment_ids": self.segment_ids,
            "mask_rate": float(self.mask_rate), "mask_mode": self.mask_mode, "target_tokens": self.target_tokens,
            "grad_average": self.grad_average, "targets": list(TARGETS),
        }


def _resolve_options(options: GradientOptions | None, overrides: dict[str, Any]) -> GradientOptions:
    """``options`` (default: :class:`GradientOptions`) with the keyword ``overrides`` of the caller applied."""
    if options is None:
        options = GradientOptions()
    elif not isinstance(options, GradientOptions):
        raise TypeError(f"options must be a GradientOptions, got {type(options).__name__}")
    return dataclasses.replace(options, **overrides) if overrides else options


def _mask_shard(segments: Sequence[dict[str, Any]], tokenizer, opts: GradientOptions,
                info: dict[str, Any] | None, *, causal: bool = False) -> list[MaskedSegment]:
    """Mask every segment used (one generator: a segment's input is the same whatever the sharding), then
    keep the shard's range ``info`` (None: all). ``causal``: a decoder's next-token examples instead."""
    if causal:
        masked = next_token_examples(segments, tokenizer)
    else:
        masked = mask_segments(segments, tokenizer, seed=opts.seed, rate=opts.mask_rate, mask_mode=opts.mask_mode,
                               segment_ids=opts.segment_ids)
    if info is not None:
        masked = masked[info["start"]:info["stop"]]
        print(f"gradients: shard {info['index']}/{info['count']}: segments {info['start']}..{info['stop'] - 1} "
              f"of the {len(segments)} used", file=sys.stderr, flush=True)
    return masked


def _split_usable(masked: Sequence[MaskedSegment], max_pos: int):
    """``(too_long_ids, no_mask_ids, kept)``: segments longer than ``max_pos`` (0: no limit), segments
    without a masked position, and the segments the gradients are taken of (input order)."""
    too_long = [m.id for m in masked if max_pos and m.n > max_pos]
    no_mask = [m.id for m in masked if not m.masked_positions and not (max_pos and m.n > max_pos)]
    kept = [m for m in masked if m.masked_positions and not (max_pos and m.n > max_pos)]
    return too_long, no_mask, kept


def _run_batches(model, kept: Sequence[MaskedSegment], opts: GradientOptions, sep_token: str | None, device):
    """:func:`batch_statistics` of ``kept`` in length-sorted batches -> ``(parts, seconds)``."""
    from bertlook.attention.extraction import progress_bar

    order = sorted(range(len(kept)), key=lambda i: (-kept[i].n, i))  # length-sorted batches
    parts: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with progress_bar(total=len(kept), desc="gradients", unit="seg", enabled=bool(opts.progress_every)) as bar:
        for start in range(0, len(order), opts.batch_size):
            batch = [kept[i] for i in order[start:start + opts.batch_size]]
            parts.append(batch_statistics(model, batch, sep_token=sep_token, target_tokens=opts.target_tokens,
                                          device=device))
            bar.update(len(batch))
    return parts, time.perf_counter() - t0


def _stack_statistics(parts: Sequence[dict[str, Any]], config) -> tuple[dict[str, Any], int, int]:
    """The batches' :func:`batch_statistics` concatenated per segment -> ``(stats, layers, heads)``
    (empty arrays of the config's sizes when there is no batch)."""
    L = int(getattr(config, "num_hidden_layers", 0) or 0)
    H = int(getattr(config, "num_attention_heads", 0) or 0)
    if parts:
        stats = {key: np.concatenate([p[key] for p in parts])  # each [segment, ...]
                 for key in ("grad_sum", "count", "mass", "loss", "n", "n_masked", "importance")}
        L, H = (int(d) for d in stats["importance"].shape[1:])
    else:
        C = len(TARGETS)
        stats = {"grad_sum": np.zeros((0, L, C)), "count": np.zeros((0, C)), "mass": np.zeros((0, L, C)),
                 "loss": np.zeros((0,)), "n": np.zeros((0,), dtype=np.int64),
                 "n_masked": np.zeros((0,), dtype=np.int64), "importance": np.zeros((0, L, H))}
    return stats, L, H


def _partial_arrays(stats: dict[str, Any]) -> dict[str, Any]:
    """The sums and counts of :func:`gradient_partial` from the per-segment ``stats``."""
    # [segment, layer, target], [segment, target], [segment, layer, target]
    gsum, count, mass = stats["grad_sum"], stats["count"], stats["mass"]
    with np.errstate(invalid="ignore", divide="ignore"):
        per = gsum / np.where(count > 0, count, np.nan)[:, None, :]  # [segment, layer, target]
    per_valid = ~np.isnan(per)  # [segment, layer, target]
    return {
        "grad_sum": gsum.sum(axis=0),  # [layer, target]
        "count_sum": count.sum(axis=0),  # [target]
        "seg_mean_sum": np.where(per_valid, per, 0.0).sum(axis=0),  # [layer, target]
        "seg_mean_n": per_valid.sum(axis=0).astype(np.int64),  # [layer, target]
        "mass_sum": mass.sum(axis=0),  # [layer, target]
        "loss_sum": np.float64(stats["loss"].sum()),
        "segments_without_target": (count == 0).sum(axis=0).astype(np.int64),  # [target]
        "importance_sum": stats["importance"].sum(axis=0),  # [layer, head]
        "importance_n": np.int64(stats["importance"].shape[0]),
    }


def gradient_partial(
    segments_path: str | os.PathLike,
    model_spec: str,
    options: GradientOptions | None = None,
    *,
    shard: tuple[int, int] | None = None,
    **overrides: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sums and counts of the gradient statistics of (a shard of) the segments: ``(meta, arrays)``.

    ``options``: the run's :class:`GradientOptions` (default: its defaults); keyword ``overrides``
    (``seed=3``, ...; the fields of :class:`GradientOptions`) replace single fields of it.
    The segments used are the first ``max_examples`` of the file; ``shard=(i, k)`` keeps the i-th of
    k contiguous ranges of them (:func:`bertlook.pipeline.sharding.shard_range`). Masking always runs over all
    segments used, with the one generator of the module docstring, so a segment gets the same masked
    input whatever the sharding. ``arrays``: ``grad_sum`` ``[L, 3]`` (sum of ``|dL/dA|``),
    ``count_sum`` ``[3]`` (entries), ``seg_mean_sum`` / ``seg_mean_n`` ``[L, 3]`` (sum and number of
    the per-segment means, for ``grad_average="segment"``), ``mass_sum`` ``[L, 3]``, ``loss_sum``,
    ``segments_without_target`` ``[3]``, ``importance_sum`` ``[L, H]`` (sum over segments of
    ``|dL/dxi_h|``, :func:`batch_statistics`) and ``importance_n`` (its number of segments); ``meta``:
    settings, counts, excluded ids, timing, ``num_heads``. A model
    without a masked-LM head gives ``meta["status"] == "not run"`` and no arrays. Reduce with
    :func:`reduce_gradients`.
    """
    from bertlook.attention.modeling import load_tokenizer, pick_device, resolve_model
    from bertlook.pipeline.model_spec import DECODER, model_family

    opts = _resolve_options(options, overrides)
    opts.check()
    segments = read_segments(segments_path)
    n_input = len(segments)
    if opts.max_examples is not None:
        segments = segments[:opts.max_examples]
    settings = opts.settings(segments_path, model_spec)
    info = None
    if shard is not None:
        info = shard_info(len(segments), *shard)
    resolved = resolve_model(model_spec, opts.revision)
    dev = pick_device(opts.device)
    model, ok, reason, loading = load_mlm_checked(resolved, dev)
    provenance = resolved.provenance(model.config)
    base = {"settings": settings, "n_segments_in_file": n_input, "model_provenance": provenance,
            "loading": loading, "shard": info}
    if not ok:
        del model
        return {"status": "not run", "reason": reason, **base}, {}

    if not segments:
        raise BertlookError(f"{segments_path}: no segments")
    tokenizer = load_tokenizer(resolved)
    causal = model_family(model.config) == DECODER
    masked = _mask_shard(segments, tokenizer, opts, info, causal=causal)
    max_pos = int(getattr(model.config, "max_position_embeddings", 0) or 0)
    too_long, no_mask, kept = _split_usable(masked, max_pos)
    parts, seconds = _run_batches(model, kept, opts, None if causal else str(tokenizer.sep_token), dev)
    stats, L, H = _stack_statistics(parts, model.config)
    actions = [a for m in kept for a in m.actions]
    never = set() if causal else _never_masked(tokenizer)
    meta = {
        "status": "ok",
        "reason": None,
        **base,
        "objective": OBJECTIVES[DECODER if causal else "encoder"],
        "targets": list(DECODER_TARGETS if causal else TARGETS),
        "n_examples": len(kept),
        "excluded_too_long_ids": too_long,
        "max_position_embeddings": max_pos or None,
        "excluded_no_maskable_token_ids": no_mask,
        "masked_tokens": int(stats["n_masked"].sum()),
        "maskable": sum(sum(1 for t in m.tokens if t not in never) for m in kept),
        "mask_actions": {k: actions.count(k) for k in ("mask", "keep", "random")},
        "tokens": int(stats["n"].sum()),
        "seconds": seconds,
        "device": str(dev),
        "num_layers": L,
        "num_heads": H,
    }
    return meta, _partial_arrays(stats)


def reduce_gradients(partials, *, where=None):
    """Add the partial sums of :func:`gradient_partial` (shard order) -> ``(frame, summary)``.

    ``mean_abs_grad``: pooled = summed ``|dL/dA|`` / summed entries; segment = summed per-segment
    means / their number; ``attention_mass`` = summed masses / segments; every count is summed. One
    partial gives exactly the numbers of an unsharded run. All partials "not run" -> the not-run table.
    """
    if not partials:
        raise BertlookError("no partial gradient statistics to reduce")
    where = list(where) if where is not None else [f"partial {k + 1}" for k in range(len(partials))]
    metas = [m for m, _ in partials]
    settings = same_value([m["settings"] for m in metas], "gradient settings", where)
    status = same_value([m["status"] for m in metas], "status", where)
    first = metas[0]
    if status != "ok":
        summary = {"status": "not run", "reason": first["reason"], **settings,
                   "n_segments_in_file": first["n_segments_in_file"],
                   "model_provenance": first["model_provenance"], "loading": first["loading"]}
        return not_run_frame(first["reason"]), summary
    L = same_value([m["num_layers"] for m in metas], "num_layers", where)
    targets = tuple(same_value([m.get("targets", list(TARGETS)) for m in metas], "gradient targets", where))
    objective = same_value([m.get("objective", OBJECTIVES["encoder"]) for m in metas], "objective", where)
    C = len(targets)
    tot = {key: np.zeros((L, C)) for key in ("grad_sum", "seg_mean_sum", "mass_sum")}  # each [layer, target]
    count_sum = np.zeros(C)  # [target]
    seg_mean_n = np.zeros((L, C), dtype=np.int64)  # [layer, target]
    without = np.zeros(C, dtype=np.int64)  # [target]
    loss_sum = 0.0
    for (meta, arrays), w in zip(partials, where):
        for key in tot:
            part = np.asarray(arrays[key], dtype=np.float64)  # [layer, target]
            if part.shape != (L, C):
                raise BertlookError(f"{w}: {key} of shape {list(part.shape)}, expected {[L, C]}")
            tot[key] += part
        count_sum += np.asarray(arrays["count_sum"], dtype=np.float64)  # [target]
        seg_mean_n += np.asarray(arrays["seg_mean_n"], dtype=np.int64)  # [layer, target]
        without += np.asarray(arrays["segments_without_target"], dtype=np.int64)  # [target]
        loss_sum += float(arrays["loss_sum"])
    N = sum(int(m["n_examples"]) for m in metas)
    if N == 0:
        too_long = sum(len(m["excluded_too_long_ids"]) for m in metas)
        no_mask = sum(len(m["excluded_no_maskable_token_ids"]) for m in metas)
        raise BertlookError(f"{settings['segments']}: no segment left to compute gradients on "
                            f"({too_long} too long, {no_mask} without a maskable token)")
    grad_average = settings["grad_average"]
    with np.errstate(invalid="ignore", divide="ignore"):
        if grad_average == "pooled":
            grad = tot["grad_sum"] / np.where(count_sum > 0, count_sum, np.nan)[None, :]  # [layer, target]
        else:
            grad = tot["seg_mean_sum"] / np.where(seg_mean_n > 0, seg_mean_n, np.nan)  # [layer, target]
    att = tot["mass_sum"] / N  # [layer, target]
    rows = [
        {"layer": layer + 1, "target": targets[c], "mean_abs_grad": float(grad[layer, c]),
         "attention_mass": float(att[layer, c])}
        for layer in range(L) for c in range(C)
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    too_long = [i for m in metas for i in m["excluded_too_long_ids"]]
    no_mask = [i for m in metas for i in m["excluded_no_maskable_token_ids"]]
    masked_tokens = sum(int(m["masked_tokens"]) for m in metas)
    maskable = sum(int(m["maskable"]) for m in metas)
    n_tokens = sum(int(m["tokens"]) for m in metas)
    seconds = sum(float(m["seconds"]) for m in metas)
    summary = {
        "status": "ok",
        "reason": None,
        **settings,
        **({"objective": objective, "targets": list(targets)} if objective != OBJECTIVES["encoder"] else {}),
        "n_segments_in_file": first["n_segments_in_file"],
        "n_examples": N,
        "excluded_too_long": len(too_long),
        "excluded_too_long_ids": too_long,
        "max_position_embeddings": first["max_position_embeddings"],
        "excluded_no_maskable_token": len(no_mask),
        "excluded_no_maskable_token_ids": no_mask,
        "masked_tokens": masked_tokens,
        "maskable_fraction_masked": round(masked_tokens / maskable, 6) if maskable else None,
        "mask_actions": {k: sum(int(m["mask_actions"][k]) for m in metas) for k in ("mask", "keep", "random")},
        "mean_loss": loss_sum / N,
        "tokens": n_tokens,
        "mean_tokens": n_tokens / N,
        "seconds": round(seconds, 3),
        "segments_per_second": round(N / seconds, 3) if seconds > 0 else None,
        "device": first["device"],
        "num_layers": L,
        "segments_without_target": {targets[c]: int(without[c]) for c in range(C)},
        "entries_per_layer": {targets[c]: int(count_sum[c]) for c in range(C)},
        "model_provenance": first["model_provenance"],
        "loading": first["loading"],
    }
    if len(partials) > 1:
        summary["shards"] = [{"shard": (m.get("shard") or {}).get("label"), "n_examples": m["n_examples"],
                              "seconds": round(float(m["seconds"]), 3), "device": m["device"]} for m in metas]
    return frame, summary


def importance_not_run_frame(reason: str):
    """``head_importance.csv`` of a step that could not run: one row, empty numbers, ``note`` says why."""
    return pd.DataFrame([{**{c: None for c in IMPORTANCE_COLUMNS}, "note": reason}],
                        columns=[*IMPORTANCE_COLUMNS, "note"])


def reduce_head_importance(partials, *, where=None) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Head importance (Michel et al. 2019) from the partial sums of :func:`gradient_partial` -> ``(frame, info)``.

    ``importance_raw`` = summed ``|dL/dxi_h|`` / segments (the expectation over the masked segments);
    ``importance`` = ``importance_raw`` divided by the l2 norm of its layer's ``importance_raw``
    (NaN for a layer whose heads are all 0). Rows ``layer, head`` (1-indexed). All partials "not run"
    -> :func:`importance_not_run_frame`. Numbers only, no torch (the reduction runs in the analysis env).
    """
    if not partials:
        raise BertlookError("no partial gradient statistics to reduce")
    where = list(where) if where is not None else [f"partial {k + 1}" for k in range(len(partials))]
    metas = [m for m, _ in partials]
    status = same_value([m["status"] for m in metas], "status", where)
    if status != "ok":
        return importance_not_run_frame(metas[0]["reason"]), {"status": "not run", "reason": metas[0]["reason"]}
    for (meta, arrays), w in zip(partials, where):
        if "importance_sum" not in arrays or "importance_n" not in arrays or "num_heads" not in meta:
            raise BertlookError(f"{w}: gradient partial without head importance sums (written by an older "
                                "bertlook: rerun gradients --out-partial)")
    L = same_value([m["num_layers"] for m in metas], "num_layers", where)
    H = same_value([m["num_heads"] for m in metas], "num_heads", where)
    total = np.zeros((L, H))  # [layer, head]
    n = 0
    for (meta, arrays), w in zip(partials, where):
        part = np.asarray(arrays["importance_sum"], dtype=np.float64)  # [layer, head]
        if part.shape != (L, H):
            raise BertlookError(f"{w}: importance_sum of shape {list(part.shape)}, expected {[L, H]}")
        k = int(arrays["importance_n"])
        if k != int(meta["n_examples"]):
            raise BertlookError(f"{w}: importance_n {k} differs from n_examples {meta['n_examples']}")
        total += part
        n += k
    if n == 0:
        raise BertlookError(f"{where[0]}: no segment to compute head importance on")
    raw = total / n  # [layer, head]
    norm = np.sqrt((raw ** 2).sum(axis=1, keepdims=True))  # [layer, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        imp = np.where(norm > 0, raw / np.where(norm > 0, norm, 1.0), np.nan)  # [layer, head]
    layer_idx, head_idx = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")  # [layer, head] each
    frame = pd.DataFrame({"layer": layer_idx.ravel(), "head": head_idx.ravel(), "importance": imp.ravel(),
                          "importance_raw": raw.ravel()}, columns=IMPORTANCE_COLUMNS)
    return frame, {"status": "ok", "reason": None, "n_examples": n, "num_layers": L, "num_heads": H}


def sep_gradient_importance(
    segments_path: str | os.PathLike,
    model_spec: str,
    options: GradientOptions | None = None,
    **overrides: Any,
):
    """Per-layer gradient importance of attention to [SEP], ". ," and other tokens -> ``(frame, summary)``.

    ``options`` / keyword ``overrides``: as for :func:`gradient_partial` (:class:`GradientOptions`).
    ``frame`` has the columns ``layer, target, mean_abs_grad, attention_mass`` (3 rows per layer), or,
    when the model has no masked-LM head, :func:`not_run_frame` (``summary["status"] == "not run"``).
    Nothing is written; see the ``gradients`` CLI for the files. (The partial sums of one run,
    :func:`gradient_partial`, reduced by :func:`reduce_gradients`.)
    """
    partial = gradient_partial(segments_path, model_spec, _resolve_options(options, overrides))
    return reduce_gradients([partial], where=[str(segments_path)])
