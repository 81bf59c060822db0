"""The ``contributions`` step (numbers only): surface statistics and Table 1 per map kind, ALTI and value zeroing
beside attention, norm-based maps and rollout, on seeded samples.

A step of its own, not a reader inside the extraction stream: value zeroing needs ``n`` extra layer passes per
layer and example, so the step loads the model and runs it on a seeded sample of ``segments`` segments
(:func:`bertlook.analyses.contribution_maps.seeded_sample`, the run's ``seed``) for the statistics and of
``sentences`` dev sentences for Table 1 (:mod:`bertlook.analyses.contribution_table1`).

Statistics (:func:`example_kind_stats`): per example, kind and layer (per head for a per-head kind), the shares
of [CLS], [SEP], ". ," and the other tokens and the mean row entropy, exactly as the rollout statistics define
them (:func:`bertlook.analyses.rollout.rollout_example_stats`: column sums over rows / n, the surface statistics'
smoothed row entropy, over the visible keys for a decoder; [CLS] / [SEP] roles of
:mod:`bertlook.analyses.token_roles`), averaged over the sampled examples. ``contribution_stats.csv`` has one
row per kind and layer (a per-head kind: the mean over its heads, ``per`` = ``head_mean``; a per-layer kind:
``per`` = ``layer``); ``contribution_heads.csv`` the per-head rows of the per-head kinds (attention, norm,
ALTI per head). :func:`run_contributions` is the step without the command line.

Definitions: docs/definitions.md#alti-and-value-zeroing
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from bertlook.analyses.contribution_explorer import explorer_maps
from bertlook.analyses.contribution_maps import KINDS, PER_HEAD_KINDS, RunTimes, seeded_sample, token_maps
from bertlook.analyses.contribution_table1 import Table1Settings, sample_sentences, score_kinds, word_maps
from bertlook.analyses.rollout import rollout_example_stats
from bertlook.analyses.token_roles import describe_roles
from bertlook.errors import BertlookError

SHARES = ("cls", "sep", "punct", "other", "entropy")
STATS_COLUMNS = ["kind", "per", "layer", *SHARES, "n_examples"]
HEAD_COLUMNS = ["kind", "layer", "head", *SHARES]


def example_kind_stats(m: "np.ndarray", tokens: list[str], *, cls_token: str | None, sep_token: str | None,
                       causal: bool) -> "np.ndarray":
    """``[stat, layer]`` (a per-layer map ``[layer, n, n]``) or ``[stat, layer, head]`` (a per-head map ``[layer,
    head, n, n]``) of one example: :data:`SHARES` by :func:`bertlook.analyses.rollout.rollout_example_stats`."""
    a = np.asarray(m, dtype=np.float64)
    shape = a.shape[:-2]
    s = rollout_example_stats(a.reshape(-1, *a.shape[-2:]), tokens, cls_token=cls_token, sep_token=sep_token,
                              causal=causal)
    return np.stack([s[c].reshape(shape) for c in SHARES])


@dataclass
class StatSums:
    """Sums of :func:`example_kind_stats` per kind over the examples added."""

    cls_token: str | None
    sep_token: str | None
    causal: bool
    sums: dict[str, "np.ndarray"] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # examples per kind (value zeroing: maybe fewer)
    n_examples: int = 0

    def add(self, tokens: list[str], maps: dict[str, "np.ndarray"]) -> None:
        for kind in KINDS:
            if kind not in maps:
                continue
            s = example_kind_stats(maps[kind], tokens, cls_token=self.cls_token, sep_token=self.sep_token,
                                   causal=self.causal)
            self.sums[kind] = s if kind not in self.sums else self.sums[kind] + s
            self.counts[kind] = self.counts.get(kind, 0) + 1
        self.n_examples += 1

    def frames(self) -> tuple["pd.DataFrame", "pd.DataFrame"]:
        """``(contribution_stats, contribution_heads)`` (:data:`STATS_COLUMNS`, :data:`HEAD_COLUMNS`)."""
        if not self.n_examples:
            raise BertlookError("contributions: no examples to compute statistics on")
        rows, heads = [], []
        for kind in KINDS:
            if not self.counts.get(kind):
                raise BertlookError(f"contributions: no example has {kind} maps")
            mean = self.sums[kind] / self.counts[kind]  # [stat, layer(, head)]
            per_head = kind in PER_HEAD_KINDS
            layer_mean = mean.mean(axis=-1) if per_head else mean  # [stat, layer]
            for l in range(layer_mean.shape[1]):
                rows.append({"kind": kind, "per": "head_mean" if per_head else "layer", "layer": l + 1,
                             **{c: float(layer_mean[i, l]) for i, c in enumerate(SHARES)},
                             "n_examples": self.counts[kind]})
                if per_head:
                    heads += [{"kind": kind, "layer": l + 1, "head": h + 1,
                               **{c: float(mean[i, l, h]) for i, c in enumerate(SHARES)}}
                              for h in range(mean.shape[2])]
        return pd.DataFrame(rows, columns=STATS_COLUMNS), pd.DataFrame(heads, columns=HEAD_COLUMNS)


@dataclass(frozen=True)
class ContributionOptions:
    """The step's settings: sample sizes (``contributions.segments`` / ``.sentences``), ``seed`` (the run's),
    ``batch_size`` of the forward passes, ``device``, the largest segment (``max_seq_len``) and Table 1's
    scoring (:class:`~bertlook.analyses.contribution_table1.Table1Settings`)."""

    segments: int = 24
    sentences: int = 64
    value_zeroing_segments: int | None = None
    explorer_sentences: int = 0  # the explorer's short dev sentences (0: none; contribution_explorer.py)
    explorer_words: tuple[int, int] = (4, 18)
    seed: int = 0
    batch_size: int = 1
    device: str = "cpu"
    max_seq_len: int = 512
    revision: str | None = None
    table1: Table1Settings = Table1Settings()


@dataclass(frozen=True)
class ContributionResult:
    """What :func:`run_contributions` computed: the two statistics tables, Table 1 per kind, the summary."""

    stats: pd.DataFrame
    heads: pd.DataFrame
    table1: pd.DataFrame
    summary: dict[str, Any]
    explorer: dict[str, Any] | None = None


@dataclass
class _Model:
    model: Any
    tokenizer: Any
    causal: bool
    roles: dict[str, Any]
    pad_id: int
    max_len: int


def _load(model_spec: str, opts: ContributionOptions) -> _Model:
    from bertlook.attention.extraction import special_token_roles  # lazy: torch, transformers
    from bertlook.attention.modeling import (DECODER, load_model, load_tokenizer, model_family, pick_device,
                                             resolve_model)  # lazy: see above

    resolved = resolve_model(model_spec, opts.revision)
    tokenizer = load_tokenizer(resolved)
    model = load_model(resolved, pick_device(opts.device))
    causal = model_family(model.config) == DECODER
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return _Model(model, tokenizer, causal, special_token_roles(tokenizer, model), int(pad),
                  min(int(max_pos or opts.max_seq_len), opts.max_seq_len))


def _read_inputs(segments_path, treebank_path) -> tuple[list, list]:
    """The segments and the dev sentences (checked before the model is loaded: a bad file costs nothing)."""
    from bertlook.data.segments import read_segments  # lazy: see _load
    from bertlook.data.treebank import read_conllu  # lazy: see _load

    segments = read_segments(segments_path)
    if not segments:
        raise BertlookError(f"{segments_path}: no segments")
    sentences = list(read_conllu(treebank_path, allow_empty=True))
    if not sentences:
        raise BertlookError(f"{treebank_path}: no sentences")
    return segments, sentences


def _segments_part(m: _Model, segments: list, segments_path, opts: ContributionOptions,
                   times: RunTimes) -> tuple[StatSums, dict]:
    """The statistics of the seeded sample of segments."""
    from bertlook.attention.extraction import encode_segment  # lazy: see _load

    picked = seeded_sample(len(segments), opts.segments, opts.seed)
    chosen, too_long = [], []
    for i in picked:
        seg = segments[i]
        ids, _ = encode_segment(seg, m.tokenizer)
        (too_long if len(ids) > m.max_len else chosen).append((seg, ids))
    sums = StatSums(m.roles["cls"], m.roles["sep"], m.causal)
    n_vz = len(chosen) if opts.value_zeroing_segments is None else min(len(chosen), opts.value_zeroing_segments)
    without_vz = tuple(k for k in KINDS if k != "value_zeroing")
    # value zeroing on the first n_vz segments of the sample only: batches never straddle n_vz
    starts = [*range(0, n_vz, opts.batch_size), *range(n_vz, len(chosen), opts.batch_size)]
    for b0 in starts:
        batch = chosen[b0:min(b0 + opts.batch_size, n_vz if b0 < n_vz else len(chosen))]
        kinds = KINDS if b0 < n_vz else without_vz
        for (seg, _ids), maps in zip(batch, token_maps(m.model, [ids for _, ids in batch], pad_id=m.pad_id,
                                                       causal=m.causal, times=times, kinds=kinds)):
            sums.add(list(seg["tokens"]), maps)
    if not chosen:
        raise BertlookError(f"{segments_path}: every sampled segment is longer than the model's {m.max_len} positions")
    info = {"segments": str(segments_path), "n_segments_in_file": len(segments), "sample_size": opts.segments,
            "sample_ids": [seg["id"] for seg, _ in chosen],
            "value_zeroing_ids": [seg["id"] for seg, _ in chosen[:n_vz]],
            "excluded": {"longer than the model's positions": len(too_long)},
            "excluded_ids": [seg["id"] for seg, _ in too_long]}
    return sums, info


def _sentences_part(m: _Model, sentences: list, treebank_path, opts: ContributionOptions,
                    times: RunTimes) -> tuple[pd.DataFrame, dict]:
    """Table 1 per kind on the seeded sample of dev sentences."""
    from bertlook.attention.extract_words import prepare_word_examples  # lazy: see _load

    picked = seeded_sample(len(sentences), opts.sentences, opts.seed)
    reasons: dict[str, int] = {}
    examples, alignments, bad_ids, _errors = prepare_word_examples(
        sample_sentences(sentences, picked), m.tokenizer, path=treebank_path, text=opts.table1.text, reasons=reasons)
    no_tree = [ex[0]["id"] for ex in examples if ex[0].get("heads") is None]
    too_long = [ex[0]["id"] for ex in examples if len(ex[1]) > m.max_len]
    examples = [ex for ex in examples if ex[0]["id"] not in set(no_tree) | set(too_long)]
    if not examples:
        raise BertlookError(f"{treebank_path}: none of the {len(picked)} sampled sentences can be scored "
                            f"({len(bad_ids)} not aligned, {len(no_tree)} without a tree, {len(too_long)} too long)")
    records, maps = word_maps(m.model, examples, alignments, pad_id=m.pad_id, causal=m.causal,
                              batch_size=opts.batch_size, from_split=opts.table1.from_split, times=times)
    meta = {"model": {"family": "decoder" if m.causal else "encoder"}, "treebank_kind": opts.table1.treebank_kind}
    t0 = time.perf_counter()
    table, scored = score_kinds(records, maps, opts.table1, where=str(treebank_path), meta=meta)
    scored["seconds_scoring"] = round(time.perf_counter() - t0, 3)
    info = {"treebank": str(treebank_path), "n_sentences_in_file": len(sentences), "sample_size": opts.sentences,
            "sample_ids": [r["id"] for r in records], "n_sentences": len(records), **scored,
            "excluded": {**{f"not aligned: {k}": v for k, v in reasons.items() if v},
                         "no gold tree": len(no_tree), "longer than the model's positions": len(too_long)},
            "excluded_ids": [*bad_ids, *no_tree, *too_long],
            "settings": {k: (list(v) if isinstance(v, tuple) else v)
                         for k, v in opts.table1.__dict__.items()}}
    return table, info


def run_contributions(model_spec: str, segments_path, treebank_path, opts: ContributionOptions) -> ContributionResult:
    """The ``contributions`` step: load the model, the statistics of the segment sample, Table 1 per kind on the
    sentence sample, the summary (sample sizes and ids, seconds per part, value zeroing layer passes,
    exclusions). Everything is computed before the caller writes anything."""
    from bertlook.attention.modeling import model_dims  # lazy: see _load

    segments, sentences = _read_inputs(segments_path, treebank_path)
    t0 = time.perf_counter()
    m = _load(model_spec, opts)
    load_s = time.perf_counter() - t0
    seg_times, sent_times = RunTimes(), RunTimes()
    t1 = time.perf_counter()
    sums, seg_info = _segments_part(m, segments, segments_path, opts, seg_times)
    stats, heads = sums.frames()
    seg_info["seconds"] = round(time.perf_counter() - t1, 3)
    t2 = time.perf_counter()
    table, sent_info = _sentences_part(m, sentences, treebank_path, opts, sent_times)
    sent_info["seconds"] = round(time.perf_counter() - t2, 3)
    explorer, exp_times = None, RunTimes()
    if opts.explorer_sentences:
        explorer = explorer_maps(m, sentences, treebank_path, n_sentences=opts.explorer_sentences,
                                 words=opts.explorer_words, from_split=opts.table1.from_split, text=opts.table1.text,
                                 times=exp_times)
    L, H = model_dims(m.model)
    summary = {
        "model": model_spec, "revision": opts.revision, "family": "decoder" if m.causal else "encoder",
        "num_layers": L, "num_heads": H, "seed": opts.seed, "kinds": list(KINDS), "per_head_kinds": list(PER_HEAD_KINDS),
        "roles": describe_roles(m.roles["cls"], m.roles["sep"]), "n_examples": sums.n_examples,
        "statistics": seg_info, "table1": sent_info,
        "seconds": {"load": round(load_s, 3),
                    "alti_and_maps": round(seg_times.maps + sent_times.maps, 3),
                    "value_zeroing": round(seg_times.value_zeroing + sent_times.value_zeroing, 3),
                    "statistics": seg_info["seconds"], "table1": sent_info["seconds"],
                    "total": round(time.perf_counter() - t0, 3)},
        "value_zeroing_layer_passes": {"statistics": seg_times.layer_passes, "table1": sent_times.layer_passes,
                                       "explorer": exp_times.layer_passes},
        "explorer_ids": None if explorer is None else explorer["ids"],
        "padded_key_mass_max": max(seg_times.padded_mass_max, sent_times.padded_mass_max),
        "design": "a step of its own on seeded samples (not a reader inside the extraction stream): value zeroing "
                  "costs n extra layer passes per layer and example",
    }
    return ContributionResult(stats, heads, table, summary, explorer)
