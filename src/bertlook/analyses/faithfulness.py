"""Which measure to trust: the agreement of each map kind with what removing a token or a head does (the step).

:func:`run_faithfulness` draws a seeded sample of segments and, in each, a seeded sample of tokens; the model's side
(:mod:`bertlook.analyses.faithfulness_pass`) gives every measure's map and, per removed token ``j``, the final-layer
change of every other token (the representation ground truth) and the loss change (the loss ground truth; only with
the model's pre-training head); :func:`agreement_table` turns them into Spearman correlations averaged over the
columns with a bootstrap interval over segments (:mod:`bertlook.analyses.faithfulness_stats`);
:func:`head_table` compares the loss change of removing each head (:mod:`bertlook.analyses.head_ablation`) with
the gradient importance of the head report (Michel et al. 2019). :func:`faithfulness_markdown` is the report's
"Which measure to trust" page. The result (:class:`FaithfulnessResult`) holds the two tables and the summary.

Definitions: docs/definitions.md#which-measure-to-trust-faithfulness
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.faithfulness_pass import LOSS_MEASURES, MEASURES, segment_maps, token_ablations
from bertlook.analyses.faithfulness_stats import (MIN_POINTS, bootstrap_indices, heads_agreement, ranks,
                                                  segment_agreement, spearman)
from bertlook.analyses.gradient_pass import MaskedSegment, mask_segments, next_token_examples
from bertlook.data.segments import read_segments
from bertlook.errors import BertlookError, check_at_least, check_choice
from bertlook.pipeline.model_spec import DECODER, model_family

#: the ground truths (values of the ``ground_truth`` column)
GROUND_TRUTHS = ("representation_change", "loss_change")
COLUMNS = ["measure", "kind", "ground_truth", "spearman", "ci_low", "ci_high", "n_segments", "n_pairs", "note"]
HEAD_COLUMNS = ["layer", "head", "loss_change", "abs_loss_change", "gradient_importance", "gradient_importance_raw",
                "rank_loss_change", "rank_gradient_importance", "note"]
#: value zeroing of every layer (its rollout too) or of the last layer only (n layer passes instead of L n)
VALUE_ZEROING_LAYERS = ("all", "last")
#: the parts whose seconds the summary reports
PARTS = ("load", "maps", "value_zeroing", "gradients", "ablations", "head_ablation", "agreement")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FaithfulnessOptions:
    """The step's settings: ``segments`` (contributions.faithfulness_segments), ``ablated_tokens``
    (contributions.ablated_tokens), ``head_ablation`` (``mean`` / ``zero``), ``bootstrap`` (resamples over
    segments), ``seed`` (the run's seed: the samples, the masks and the resamples), ``segment_ids``, ``device``,
    ``revision``, ``mask_rate`` (the gradients step's), ``value_zeroing_layers`` (:data:`VALUE_ZEROING_LAYERS`)."""

    segments: int = 8
    ablated_tokens: int = 16
    head_ablation: str = "mean"
    bootstrap: int = 1000
    seed: int = 0
    segment_ids: str = "zeros"
    device: str = "auto"
    revision: str | None = None
    mask_rate: float = 0.15
    value_zeroing_layers: str = "all"

    def check(self) -> None:
        check_at_least("faithfulness segments", self.segments, 1)
        check_at_least("ablated tokens", self.ablated_tokens, 1)
        check_at_least("bootstrap resamples", self.bootstrap, 1)
        check_choice("head ablation", self.head_ablation, ("mean", "zero"))
        check_choice("value zeroing layers", self.value_zeroing_layers, VALUE_ZEROING_LAYERS)


def _skipped(opts: FaithfulnessOptions) -> dict[str, str]:
    """``{measure: why}`` of the measures the options leave out (value zeroing of the last layer only: no rollout)."""
    if opts.value_zeroing_layers == "last":
        return {"value_zeroing_rollout": "not run: value zeroing of the last layer only (value_zeroing_layers last)"}
    return {}


@dataclasses.dataclass
class FaithfulnessResult:
    """The step's outputs: ``table`` (faithfulness.csv), ``heads`` (head_ablation.csv), ``summary``."""

    table: pd.DataFrame
    heads: pd.DataFrame
    summary: dict[str, Any]


def eligible_positions(ex: MaskedSegment, causal: bool) -> tuple[list[int], dict[str, int]]:
    """The tokens that may be removed, and the others counted by reason. An encoder: never the first token
    ([CLS]) nor the last ([SEP]), nor a masked position (a target of the loss); a decoder: never the first token
    (the sink), nor one with fewer than :data:`MIN_POINTS` tokens after it (its column would have too few pairs)."""
    n = ex.n
    short = f"fewer than {MIN_POINTS} later tokens"
    reasons = {"first token": 1, **({short: 0} if causal else {"last token": 0, "masked (a loss target)": 0})}
    masked = set() if causal else set(ex.masked_positions)
    out = []
    for p in range(1, n):
        if causal and p > n - 1 - MIN_POINTS:
            reasons[short] += 1
        elif not causal and p == n - 1:
            reasons["last token"] += 1
        elif p in masked:
            reasons["masked (a loss target)"] += 1
        else:
            out.append(p)
    return out, reasons


def _prepare(segments: Sequence[dict[str, Any]], tokenizer, causal: bool, opts: FaithfulnessOptions):
    """The sample's examples: an encoder's masked as the gradients step does (seed, rate), a decoder's next-token."""
    if causal:
        return next_token_examples(segments, tokenizer)
    return mask_segments(segments, tokenizer, seed=opts.seed, rate=opts.mask_rate, segment_ids=opts.segment_ids)


def draw_sample(segments: Sequence[dict[str, Any]], max_len: int, opts: FaithfulnessOptions):
    """``(chosen, excluded)``: the seeded sample of segment indices (ascending) among those that fit the model
    (``max_len``; 0 = no limit) and have ``2 + MIN_POINTS`` tokens at least, and the others counted by reason."""
    too_long = [i for i, s in enumerate(segments) if max_len and len(s["tokens"]) > max_len]
    too_short = [i for i, s in enumerate(segments) if len(s["tokens"]) < 2 + MIN_POINTS]
    usable = [i for i in range(len(segments)) if i not in set(too_long) | set(too_short)]
    if not usable:
        raise BertlookError(f"no usable segment ({len(too_long)} too long, {len(too_short)} too short)")
    rng = np.random.default_rng(opts.seed)
    k = min(opts.segments, len(usable))
    chosen = sorted(int(usable[i]) for i in rng.choice(len(usable), size=k, replace=False))
    return chosen, {"longer than the model's positions": len(too_long),
                    f"fewer than {2 + MIN_POINTS} tokens": len(too_short),
                    "not sampled": len(usable) - k}


def _column_correlations(maps: dict[str, np.ndarray], positions: Sequence[int], abl: dict[str, Any],
                         measures: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per measure and ground truth, one segment's correlations (one per removed token) and its pair count."""
    out: dict[str, dict[str, Any]] = {}
    for m in measures:
        cols, pairs, totals = [], 0, []
        for k, j in enumerate(positions):
            rows = np.isfinite(abl["change"][k])  # [n]: the other tokens (a decoder: those after j)
            rho = spearman(maps[m][rows, j], abl["change"][k][rows])
            cols.append(rho)
            pairs += int(rows.sum()) if np.isfinite(rho) else 0
            totals.append(float(maps[m][rows, j].sum()))
        loss = np.abs(abl["loss"])
        finite = np.isfinite(loss)
        rho_loss = spearman(np.asarray(totals)[finite], loss[finite])
        out[m] = {"representation_change": (cols, pairs),
                  "loss_change": ([rho_loss], int(finite.sum()) if np.isfinite(rho_loss) else 0)}
    return out


def agreement_table(per_segment: Sequence[dict[str, dict[str, Any]]], measures: Sequence[str], *, bootstrap: int,
                    seed: int, not_run: str | None,
                    skipped: dict[str, str] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """faithfulness.csv from every segment's :func:`_column_correlations`: per measure and ground truth the mean
    correlation, its interval (the same resamples for every row) and counts; ``not_run``: why the loss rows and the
    loss measures have no numbers (None: they have); ``skipped``: ``{measure: why}`` of the other measures not
    computed."""
    idx = bootstrap_indices(len(per_segment), bootstrap, seed) if len(per_segment) > 1 else None
    rows, undefined = [], {}
    for gt in GROUND_TRUTHS:
        for m in MEASURES:
            if m not in measures or (gt == "loss_change" and not_run):
                note = (skipped or {}).get(m) or not_run
                rows.append({"measure": m, "kind": MEASURES[m], "ground_truth": gt, "spearman": None, "ci_low": None,
                             "ci_high": None, "n_segments": 0, "n_pairs": 0, "note": note})
                continue
            a = segment_agreement([seg[m][gt][0] for seg in per_segment], idx)
            undefined[f"{m}/{gt}"] = a.n_undefined
            rows.append({"measure": m, "kind": MEASURES[m], "ground_truth": gt, "spearman": a.spearman,
                         "ci_low": a.ci_low, "ci_high": a.ci_high, "n_segments": a.n_segments,
                         "n_pairs": sum(seg[m][gt][1] for seg in per_segment), "note": None})
    return pd.DataFrame(rows, columns=COLUMNS), undefined


def layer_normalised(raw: np.ndarray, layers: int) -> np.ndarray:
    """The head report's importance: ``raw`` [layer * head] divided by the l2 norm of its layer (NaN for a layer of
    zeros), as :func:`bertlook.analyses.gradients.reduce_head_importance`."""
    g = np.asarray(raw, dtype=np.float64).reshape(layers, -1)  # [layer, head]
    norm = np.sqrt((g * g).sum(axis=1, keepdims=True))  # [layer, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, g / norm, np.nan).reshape(-1)


def head_table(change: np.ndarray, importance: np.ndarray, layers: int, *, bootstrap: int, seed: int):
    """head_ablation.csv and its agreement: ``change`` [segment, layer * head] loss changes, ``importance``
    [segment, layer * head] |dL/dxi_h|; the correlation of the mean |loss change| with the head report's
    importance (and with the raw mean) across heads, bootstrapped over segments."""
    H = change.shape[1] // layers
    abs_change = np.abs(change)
    raw = importance.mean(axis=0)
    norm = layer_normalised(raw, layers)
    frame = pd.DataFrame({
        "layer": np.repeat(np.arange(1, layers + 1), H), "head": np.tile(np.arange(1, H + 1), layers),
        "loss_change": change.mean(axis=0), "abs_loss_change": abs_change.mean(axis=0),
        "gradient_importance": norm, "gradient_importance_raw": raw,
        "rank_loss_change": len(raw) + 1 - ranks(abs_change.mean(axis=0)),
        "rank_gradient_importance": len(raw) + 1 - ranks(np.nan_to_num(norm, nan=-1.0)), "note": None,
    }, columns=HEAD_COLUMNS)
    idx = bootstrap_indices(change.shape[0], bootstrap, seed) if change.shape[0] > 1 else None
    rho, lo, hi = heads_agreement(abs_change, importance, idx, transform=lambda v: layer_normalised(v, layers))
    rho_raw, lo_raw, hi_raw = heads_agreement(abs_change, importance, idx)
    info = {"spearman": rho, "ci_low": lo, "ci_high": hi, "n_heads": len(raw), "n_segments": int(change.shape[0]),
            "raw": {"spearman": rho_raw, "ci_low": lo_raw, "ci_high": hi_raw}}
    return frame, info


def heads_not_run(reason: str) -> pd.DataFrame:
    """head_ablation.csv of a model without its pre-training head: one row, empty numbers, ``note`` says why."""
    return pd.DataFrame([{**{c: None for c in HEAD_COLUMNS}, "note": reason}], columns=HEAD_COLUMNS)


def _load(model_spec: str, opts: FaithfulnessOptions):
    """``(model, head or None, tokenizer, causal, reason, provenance, device)`` (the head: the pre-training head
    module when the checkpoint has trained weights for it)."""
    from bertlook.attention.mlm import load_mlm_checked, mlm_head_module  # lazy: torch, transformers
    from bertlook.attention.host_memory import reuse_freed_memory  # lazy: as above (with the model)
    from bertlook.attention.modeling import load_tokenizer, pick_device, resolve_model  # lazy: as above

    reuse_freed_memory()  # the value-zeroing and ablation passes free map-sized blocks: keep them in the heap
    resolved = resolve_model(model_spec, opts.revision)
    dev = pick_device(opts.device)
    model, ok, reason, _ = load_mlm_checked(resolved, dev)
    model = model.to(dev)
    head = mlm_head_module(model) if ok else None
    if ok and head is None:
        ok, reason = False, f"not run: {model_spec}: no per-position pre-training head module (cls, lm_head)"
    causal = model_family(model.config) == DECODER
    return model, head, load_tokenizer(resolved), causal, (None if ok else reason), \
        resolved.provenance(model.config), dev


def _segments_part(model, head, examples, causal: bool, dev, opts: FaithfulnessOptions, seconds: dict[str, float]):
    """Every sampled segment's correlations, gradient importance and removed tokens (with the exclusion counts)."""
    rng = np.random.default_rng([opts.seed, 1])
    per_segment, importance, removed, excluded = [], [], [], {}
    measures = [m for m in MEASURES if (head is not None or m not in LOSS_MEASURES) and m not in _skipped(opts)]
    for ex in examples:
        eligible, reasons = eligible_positions(ex, causal)
        for k, v in reasons.items():
            excluded[k] = excluded.get(k, 0) + v
        k = min(opts.ablated_tokens, len(eligible))
        positions = sorted(int(eligible[i]) for i in rng.choice(len(eligible), size=k, replace=False))
        excluded["eligible, not sampled"] = excluded.get("eligible, not sampled", 0) + len(eligible) - k
        maps, imp = segment_maps(model, head is not None, ex, causal, dev, seconds,
                                 all_layers=opts.value_zeroing_layers == "all")
        t0 = time.perf_counter()
        abl = token_ablations(model, head, ex, positions, causal, dev)
        seconds["ablations"] += time.perf_counter() - t0
        per_segment.append(_column_correlations(maps, positions, abl, measures))
        importance.append(None if imp is None else imp.reshape(-1))
        removed.append({"id": ex.id, "tokens": ex.n, "removed": positions})
    return per_segment, importance, removed, excluded, measures


def run_faithfulness(segments_path: str | os.PathLike, model_spec: str,
                     options: FaithfulnessOptions | None = None) -> FaithfulnessResult:
    """The step (module docstring): the faithfulness table, the head-ablation table and the summary."""
    opts = options or FaithfulnessOptions()
    opts.check()
    seconds = dict.fromkeys(PARTS, 0.0)
    t0 = time.perf_counter()
    segments = read_segments(segments_path)
    if not segments:
        raise BertlookError(f"{segments_path}: no segments")
    model, head, tokenizer, causal, not_run, provenance, dev = _load(model_spec, opts)
    max_len = int(getattr(model.config, "max_position_embeddings", 0) or getattr(model.config, "n_positions", 0) or 0)
    chosen, seg_excluded = draw_sample(segments, max_len, opts)
    examples = _prepare([segments[i] for i in chosen], tokenizer, causal, opts)
    seconds["load"] = time.perf_counter() - t0
    per_segment, importance, removed, excluded, measures = _segments_part(model, head, examples, causal, dev, opts,
                                                                          seconds)
    t1 = time.perf_counter()
    table, undefined = agreement_table(per_segment, measures, bootstrap=opts.bootstrap, seed=opts.seed,
                                       not_run=not_run, skipped=_skipped(opts))
    seconds["agreement"] += time.perf_counter() - t1
    heads, head_info = _heads_part(model, head, examples, importance, causal, dev, opts, seconds, not_run)
    summary = {
        "status": "ok", "loss_status": "ok" if not not_run else "not run", "reason": not_run, "seed": opts.seed,
        "settings": {"segments_file": str(segments_path), "model": model_spec, **dataclasses.asdict(opts)},
        "objective": "next-token" if causal else "masked-LM",
        "n_segments_in_file": len(segments), "sample_ids": [segments[i].get("id") for i in chosen],
        "excluded_segments": seg_excluded, "removed_tokens": removed,
        "n_removed_tokens": sum(len(r["removed"]) for r in removed), "excluded_tokens": excluded,
        "undefined_correlations": undefined, "head_ablation": head_info,
        "seconds": {k: round(v, 3) for k, v in seconds.items()}, "seconds_total": round(sum(seconds.values()), 3),
        "device": str(dev), "model_provenance": provenance,
    }
    return FaithfulnessResult(table=table, heads=heads, summary=summary)


def _heads_part(model, head, examples, importance, causal: bool, dev, opts: FaithfulnessOptions,
                seconds: dict[str, float], not_run: str | None):
    """head_ablation.csv and its summary entry (not run without the pre-training head)."""
    if not_run:
        return heads_not_run(not_run), {"status": "not run", "reason": not_run}
    from bertlook.analyses.head_ablation import head_ablation  # lazy: only with a pre-training head

    t0 = time.perf_counter()
    change, base = head_ablation(model, head, examples, causal, dev, opts.head_ablation)
    L = int(getattr(model.config, "num_hidden_layers", 0) or getattr(model.config, "n_layer"))
    frame, info = head_table(change, np.stack(importance), L, bootstrap=opts.bootstrap, seed=opts.seed)
    seconds["head_ablation"] += time.perf_counter() - t0
    return frame, {"status": "ok", "mode": opts.head_ablation, "mean_loss": float(base.mean()), **info}


def faithfulness_markdown(table: pd.DataFrame, summary: dict[str, Any]) -> str:
    """The report page "Which measure to trust": a short reading and the table (correlations with intervals)."""
    def cell(v) -> str:
        return "–" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{float(v):+.2f}"

    lines = ["# Which measure to trust", "",
             "Spearman rank correlation of each measure of `i <- j` with what removing token `j` does: the change "
             "of every other token's final-layer representation (`1 - cos`, per removed token over the other "
             "tokens, averaged) and the change of the model's loss (per segment over the removed tokens, the "
             "measure's total received by `j`). 95% percentile bootstrap intervals over segments. "
             f"{len(summary['sample_ids'])} segments, {summary['n_removed_tokens']} removed tokens, seed "
             f"{summary['settings']['seed']}.", ""]
    if summary["reason"]:
        lines += [f"Loss ground truth: {summary['reason']}.", ""]
    lines += ["| measure | kind | ground truth | Spearman | 95% interval | segments | pairs |",
              "|---|---|---|---:|---:|---:|---:|"]
    for r in table.itertuples():
        ci = f"[{cell(r.ci_low)}, {cell(r.ci_high)}]" if cell(r.spearman) != "–" else "–"
        lines.append(f"| {r.measure} | {r.kind} | {r.ground_truth} | {cell(r.spearman)} | {ci} | {r.n_segments} | "
                     f"{r.n_pairs} |")
    h = summary["head_ablation"]
    if h.get("status") == "ok":
        lines += ["", f"Heads ({h['mode']} ablation, {h['n_heads']} heads): Spearman of the loss change with the head "
                      f"report's gradient importance {cell(h['spearman'])} [{cell(h['ci_low'])}, {cell(h['ci_high'])}]."]
    return "\n".join(lines) + "\n"
