"""Head detectors for any model: previous-token, duplicate-token and induction heads, and the sink share.

On sequences of ``length`` distinct random tokens repeated once
(:mod:`bertlook.attention.repeated_tokens`; first copy at positions ``o .. o+k-1``, second copy at
``o+k .. o+2k-1``, ``o`` the tokenizer's prefix length, ``k = length``), each head's score is its mean
attention from a set of query positions to one target key each (Olsson et al. 2022; the detectors of
TransformerLens):

* ``prev_token``: queries ``o+1 .. o+2k-1``, target ``i - 1``;
* ``duplicate_token``: queries of the second copy, target ``i - k`` (the earlier occurrence of the same token);
* ``induction``: queries of the second copy, target ``i - k + 1`` (the token after the earlier occurrence);
* ``sink``: every query ``i >= 1``, target position 0 (the first token: [CLS], BOS or the first random token;
  Xiao et al. 2023), per head and, in the summary, per layer.

Averaged over queries and sequences. A head whose score exceeds ``threshold`` (default 0.5: most of its
attention on that one token) is listed as detected. The summary gives, per detector, the score of a head
that attends uniformly to what it sees (``1 / (i + 1)`` for a causal map, ``1 / T`` for an encoder), for
scale. Numbers from the maps; the maps come from :mod:`bertlook.attention.repeated_tokens`.

Definitions: docs/definitions.md#head-detectors
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable

import numpy as np
import pandas as pd

from bertlook.attention.repeated_tokens import make_repeated_tokens, repeated_token_batches
from bertlook.errors import BertlookError

DETECTORS = ("prev_token", "duplicate_token", "induction", "sink")
COLUMNS = ["layer", "head", *DETECTORS]
DEFAULT_THRESHOLD = 0.5


def detector_targets(offset: int, length: int, n_positions: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per detector, ``(query positions, target key positions)`` of a sequence of ``n_positions`` tokens
    whose random part starts at ``offset`` and has two copies of ``length`` tokens."""
    if offset + 2 * length > n_positions or length < 2 or offset < 0:
        raise BertlookError(f"head detectors: a sequence of {n_positions} positions cannot hold two copies of "
                            f"{length} tokens after {offset} prefix token(s)")
    both = np.arange(offset + 1, offset + 2 * length)  # [query]
    second = np.arange(offset + length, offset + 2 * length)  # [query]
    every = np.arange(1, n_positions)  # [query]
    return {
        "prev_token": (both, both - 1),
        "duplicate_token": (second, second - length),
        "induction": (second, second - length + 1),
        "sink": (every, np.zeros_like(every)),
    }


def uniform_scores(targets: dict[str, tuple[np.ndarray, np.ndarray]], n_positions: int, causal: bool) -> dict[str, float]:
    """The score of a head attending uniformly to the keys it sees: ``1/(i+1)`` (causal) or ``1/T``, averaged."""
    out = {}
    for name, (queries, _) in targets.items():
        visible = queries + 1 if causal else np.full(len(queries), n_positions)  # [query]
        out[name] = float(np.mean(1.0 / visible))
    return out


@dataclasses.dataclass
class DetectorSums:
    """Running sums of each detector's target attention per head over batches of maps."""

    targets: dict[str, tuple[np.ndarray, np.ndarray]]
    sums: dict[str, np.ndarray] | None = None  # name -> [layer, head] float64
    n_sequences: int = 0

    def add(self, maps: np.ndarray) -> None:
        """Add a batch of maps ``[batch, layer, head, T, T]``."""
        if maps.ndim != 5 or maps.shape[-1] != maps.shape[-2]:
            raise BertlookError(f"head detectors: expected maps [batch, layer, head, T, T], got shape {maps.shape}")
        for name, (queries, keys) in self.targets.items():
            # [batch, layer, head, query] -> [layer, head]
            batch_sum = maps[:, :, :, queries, keys].astype(np.float64).mean(axis=-1).sum(axis=0)
            if self.sums is None:
                self.sums = {n: np.zeros(batch_sum.shape) for n in self.targets}
            self.sums[name] += batch_sum
        self.n_sequences += maps.shape[0]

    def scores(self) -> dict[str, np.ndarray]:
        """Per detector the mean score ``[layer, head]`` over the sequences added."""
        if not self.n_sequences:
            raise BertlookError("head detectors: no sequence was scored")
        return {name: s / self.n_sequences for name, s in self.sums.items()}


def score_frame(scores: dict[str, np.ndarray]) -> pd.DataFrame:
    """``head_detectors.csv``: one row per head (``layer``, ``head`` 1-indexed) with every detector's score."""
    L, H = scores[DETECTORS[0]].shape
    layer, head = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")  # [layer, head] each
    frame = pd.DataFrame({"layer": layer.ravel(), "head": head.ravel()})
    for name in DETECTORS:
        frame[name] = scores[name].ravel()
    return frame[COLUMNS]


def detector_summary(frame: pd.DataFrame, scores: dict[str, np.ndarray], *, threshold: float,
                     uniform: dict[str, float], top: int = 5) -> dict[str, Any]:
    """Per detector: the heads above ``threshold``, the ``top`` heads and the uniform-attention score; the
    mean sink share per layer."""
    detectors = {}
    for name in DETECTORS:
        ranked = frame.sort_values([name, "layer", "head"], ascending=[False, True, True], kind="mergesort")
        label = ranked["layer"].astype(str) + "-" + ranked["head"].astype(str)
        detected = [lab for lab, v in zip(label, ranked[name]) if v > threshold]
        detectors[name] = {
            "detected_heads": detected,
            "n_detected": len(detected),
            "top_heads": [{"head": lab, "score": round(float(v), 6)} for lab, v in list(zip(label, ranked[name]))[:top]],
            "uniform_attention_score": round(uniform[name], 6),
        }
    return {"threshold": threshold, "detectors": detectors,
            "sink_share_per_layer": [round(float(v), 6) for v in scores["sink"].mean(axis=1)]}


@dataclasses.dataclass(frozen=True)
class DetectorOptions:
    """The settings of :func:`run_head_detectors` (``head_detectors`` in the config)."""

    n_sequences: int = 50
    length: int = 25
    seed: int = 0
    batch_size: int = 16
    threshold: float = DEFAULT_THRESHOLD
    device: str = "auto"
    model_dtype: str = "float32"


@dataclasses.dataclass(frozen=True)
class DetectorResult:
    frame: pd.DataFrame
    summary: dict[str, Any]


def score_batches(batches: Iterable[np.ndarray], *, offset: int, length: int, n_positions: int, causal: bool,
                  threshold: float = DEFAULT_THRESHOLD) -> DetectorResult:
    """Score a stream of map batches ``[batch, layer, head, T, T]`` of repeated-token sequences."""
    targets = detector_targets(offset, length, n_positions)
    sums = DetectorSums(targets)
    for maps in batches:
        sums.add(maps)
    scores = sums.scores()
    frame = score_frame(scores)
    summary = detector_summary(frame, scores, threshold=threshold,
                               uniform=uniform_scores(targets, n_positions, causal))
    summary.update(n_sequences=sums.n_sequences, n_positions=n_positions, offset=offset, length=length,
                   causal=causal)
    return DetectorResult(frame, summary)


def run_head_detectors(model_spec: str, options: DetectorOptions = DetectorOptions(), *,
                       revision: str | None = None) -> DetectorResult:
    """``bertlook head-detectors`` without the command line: load the model, make the sequences, score."""
    from bertlook.attention.modeling import (DECODER, check_model_family, load_model, load_tokenizer, model_dims,
                                             model_family, pick_device, resolve_model)  # lazy: torch, transformers

    t0 = time.perf_counter()
    resolved = resolve_model(model_spec, revision)
    check_model_family(resolved)  # before any work: a model whose attention cannot be read is refused
    tokenizer = load_tokenizer(resolved)
    seqs = make_repeated_tokens(tokenizer, n_sequences=options.n_sequences, length=options.length, seed=options.seed)
    device = pick_device(options.device)
    model = load_model(resolved, device, model_dtype=options.model_dtype)
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if max_pos and seqs.n_positions > int(max_pos):
        raise BertlookError(f"head detectors: sequences of {seqs.n_positions} tokens exceed the model's "
                            f"{max_pos} positions; lower head_detectors.length")
    num_layers, num_heads = model_dims(model)
    family = model_family(model.config)
    causal = family == DECODER
    batches = repeated_token_batches(model, seqs, batch_size=options.batch_size, device=device,
                                     num_layers=num_layers, num_heads=num_heads, use_token_types=not causal)
    result = score_batches(batches, offset=seqs.offset, length=seqs.length, n_positions=seqs.n_positions,
                           causal=causal, threshold=options.threshold)
    summary = {"model": model_spec, "revision": revision, "family": family,
               "settings": dataclasses.asdict(options), **result.summary,
               "model_provenance": resolved.provenance(model.config), "device": str(device),
               "seconds": round(time.perf_counter() - t0, 3)}
    return DetectorResult(result.frame, summary)
