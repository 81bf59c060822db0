"""Gradient importance of attention to [SEP] (twin of Fig 3 of Clark et al. 2019; no released code): the step.

The model's side (masking, the backward pass, per-batch sums) is :mod:`bertlook.analyses.gradient_pass`;
:func:`aggregate` reduces the sums of ``|dL/dA|`` and the attention mass per layer and target ([SEP], ". ,",
other) into the rows of ``sep_gradients.csv``; :func:`gradient_partial` / :func:`reduce_gradients` for sharded
runs, :func:`sep_gradient_importance` for one run (both take one :class:`GradientOptions`, the run's settings);
:func:`bertlook.attention.mlm.has_mlm_head` detects a checkpoint without a masked-LM head ("not run");
:func:`reduce_head_importance` turns the per-segment ``|dL/dxi_h| = |sum_ij dL/dA_h[i, j] A_h[i, j]|``
summed by :func:`~bertlook.analyses.gradient_pass.batch_statistics` into ``head_importance.csv`` (Michel et al.
2019; docs/definitions.md#per-head-report-card);
:func:`bertlook.reporting.figures.fig3_sep_gradients` draws the figure (``bertlook gradients``).

Definitions (masking procedure, loss, averaging, switches):
docs/definitions.md#gradient-importance-of-attention-to-sep

"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.gradient_pass import (MASK_MODES, TARGET_TOKEN_MODES, MaskedSegment, batch_statistics,
                                              mask_segments, never_masked, next_token_examples)
from bertlook.attention.extraction import progress_bar, resolve_options
from bertlook.attention.mlm import load_mlm_checked
from bertlook.data.segments import read_segments
from bertlook.errors import BertlookError, check_at_least, check_choice
from bertlook.pipeline.model_spec import DECODER, model_family
from bertlook.pipeline.sharding import partial_metas, same_value, shard_info

# torch / transformers come with the model (gradient_pass, attention.modeling, imported when a run starts): the
# reduction of the per-shard sums (`bertlook gradients --partial`) runs in the analysis env, which has no torch.

TARGETS = ("[SEP]", ". ,", "other")
#: a decoder's targets: the first token (the sink, its twin of [SEP]; docs/definitions.md, decoders)
DECODER_TARGETS = ("first token", ". ,", "other")
#: the loss differentiated: an encoder's masked-LM loss, a decoder's next-token loss
OBJECTIVES = {"encoder": "masked-LM", "decoder": "next-token"}
COLUMNS = ["layer", "target", "mean_abs_grad", "attention_mass"]
NOT_RUN_COLUMNS = [*COLUMNS, "note"]
IMPORTANCE_COLUMNS = ["layer", "head", "importance", "importance_raw"]
GRAD_AVERAGES = ("pooled", "segment")
SEGMENT_ID_MODES = ("zeros", "pair")


def aggregate(stats: dict[str, Any], *, grad_average: str = "pooled"):
    """``sep_gradients`` rows from concatenated :func:`batch_statistics` -> (DataFrame, extra summary)."""
    check_choice("gradient average", grad_average, GRAD_AVERAGES)
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
# the step
# --------------------------------------------------------------------------------------------------


def not_run_frame(reason: str):
    """The one-row table written when the step cannot run (empty numbers, ``note`` says why)."""
    return pd.DataFrame([{"layer": None, "target": None, "mean_abs_grad": None, "attention_mass": None,
                          "note": reason}], columns=NOT_RUN_COLUMNS)


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
        check_choice("mask mode", self.mask_mode, MASK_MODES)
        check_choice("segment ids mode", self.segment_ids, SEGMENT_ID_MODES)
        check_choice("target tokens mode", self.target_tokens, TARGET_TOKEN_MODES)
        check_choice("gradient average", self.grad_average, GRAD_AVERAGES)
        check_at_least("batch size", self.batch_size, 1)
        check_at_least("max examples", self.max_examples, 1, optional=True)

    def settings(self, segments_path: str | os.PathLike, model_spec: str) -> dict[str, Any]:
        """The ``settings`` a partial's meta records (every shard's must agree; the summary holds them)."""
        return {
            "segments": str(segments_path), "model": model_spec, "revision": self.revision, "seed": int(self.seed),
            "batch_size": int(self.batch_size), "max_examples": self.max_examples, "segment_ids": self.segment_ids,
            "mask_rate": float(self.mask_rate), "mask_mode": self.mask_mode, "target_tokens": self.target_tokens,
            "grad_average": self.grad_average, "targets": list(TARGETS),
        }


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
    from bertlook.attention.modeling import load_tokenizer, pick_device, resolve_model  # lazy: torch, transformers

    opts = resolve_options(GradientOptions, options, overrides)
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
    never = set() if causal else never_masked(tokenizer)
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


def _add_partials(partials, where, L: int, C: int) -> dict[str, Any]:
    """The partials' sums and counts added up, each checked against ``L`` layers x ``C`` targets."""
    tot = {key: np.zeros((L, C)) for key in ("grad_sum", "seg_mean_sum", "mass_sum")}  # each [layer, target]
    tot["count_sum"] = np.zeros(C)  # [target]
    tot["seg_mean_n"] = np.zeros((L, C), dtype=np.int64)  # [layer, target]
    tot["segments_without_target"] = np.zeros(C, dtype=np.int64)  # [target]
    tot["loss_sum"] = 0.0
    for (meta, arrays), w in zip(partials, where):
        for key in ("grad_sum", "seg_mean_sum", "mass_sum"):
            part = np.asarray(arrays[key], dtype=np.float64)  # [layer, target]
            if part.shape != (L, C):
                raise BertlookError(f"{w}: {key} of shape {list(part.shape)}, expected {[L, C]}")
            tot[key] += part
        tot["count_sum"] += np.asarray(arrays["count_sum"], dtype=np.float64)  # [target]
        tot["seg_mean_n"] += np.asarray(arrays["seg_mean_n"], dtype=np.int64)  # [layer, target]
        tot["segments_without_target"] += np.asarray(arrays["segments_without_target"], dtype=np.int64)  # [target]
        tot["loss_sum"] += float(arrays["loss_sum"])
    return tot


def _ok_summary(partials, settings: dict[str, Any], targets: Sequence[str], objective: str, tot: dict[str, Any],
                N: int) -> dict[str, Any]:
    """The summary of :func:`reduce_gradients` when the step ran: settings, counts summed over the partials."""
    metas = [m for m, _ in partials]
    first = metas[0]
    C = len(targets)
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
        "mean_loss": tot["loss_sum"] / N,
        "tokens": n_tokens,
        "mean_tokens": n_tokens / N,
        "seconds": round(seconds, 3),
        "segments_per_second": round(N / seconds, 3) if seconds > 0 else None,
        "device": first["device"],
        "num_layers": len(tot["grad_sum"]),
        "segments_without_target": {targets[c]: int(tot["segments_without_target"][c]) for c in range(C)},
        "entries_per_layer": {targets[c]: int(tot["count_sum"][c]) for c in range(C)},
        "model_provenance": first["model_provenance"],
        "loading": first["loading"],
    }
    if len(partials) > 1:
        summary["shards"] = [{"shard": (m.get("shard") or {}).get("label"), "n_examples": m["n_examples"],
                              "seconds": round(float(m["seconds"]), 3), "device": m["device"]} for m in metas]
    return summary


def reduce_gradients(partials, *, where=None):
    """Add the partial sums of :func:`gradient_partial` (shard order) -> ``(frame, summary)``.

    ``mean_abs_grad``: pooled = summed ``|dL/dA|`` / summed entries; segment = summed per-segment
    means / their number; ``attention_mass`` = summed masses / segments; every count is summed. One
    partial gives exactly the numbers of an unsharded run. All partials "not run" -> the not-run table.
    """
    where, metas = partial_metas(partials, where, "gradient statistics", by_store=False)
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
    tot = _add_partials(partials, where, L, C)
    count_sum, seg_mean_n = tot["count_sum"], tot["seg_mean_n"]  # [target], [layer, target]
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
    return frame, _ok_summary(partials, settings, targets, objective, tot, N)


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
    where, metas = partial_metas(partials, where, "gradient statistics", by_store=False)
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
    partial = gradient_partial(segments_path, model_spec, resolve_options(GradientOptions, options, overrides))
    return reduce_gradients([partial], where=[str(segments_path)])
