"""Batched attention extraction into an attention store (``bertlook extract-segments``).

:func:`extract_segments` reads the segments, loads the model and tokenizer, encodes the wordpieces
(:func:`encode_segment`) and calls :func:`extract_to_store`, which runs the model in length-sorted
batches and streams float16 maps ``[layer, head, from, to]`` to disk. Guards shared by ``extract-segments``,
``extract-words`` and ``coref-extract``: :func:`unk_statistics` / :func:`check_unk_rate`
(``--max-unk-rate``) and :func:`estimate_store_bytes` / :func:`check_disk_space`.

Definitions and the differences from the released code (token type ids, over-long examples,
padding): docs/definitions.md#token-level-extraction
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from bertlook.data.segments import read_segments
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import shard_info

SEGMENT_ID_MODES = ("zeros", "pair")
STORE_DTYPE = "float16"
STORE_ITEMSIZE = 2  # bytes per float16 value
DEFAULT_MAX_UNK_RATE = 0.05
UNK_EXAMPLES_SHOWN = 5
DISK_MARGIN_FRACTION = 0.05
DISK_MARGIN_MIN_BYTES = 100 * 2**20
#: ``meta["norm"]`` of a norm-based store (``meta["map"] == "norm"``)
NORM_META = {
    "definition": "N[i, j] = alpha[i, j] * ||f(x_j)||, f(x) = (x W_V + b_V)_h W_O^h (output bias not included); "
                  "stored row-normalised: N[i, j] / sum_j N[i, j]",
    "reference": "Kobayashi et al. 2020, Attention is Not Only a Weight: Analyzing Transformers with Vector Norms",
}
INDEX_ENTRY_OVERHEAD = 64  # bytes per index line besides the record: "n", "shard", "offset", newline
META_OVERHEAD = 4096


# --------------------------------------------------------------------------------------------
# progress

#: seconds between two progress updates in a log (``BERTLOOK_PROGRESS_INTERVAL`` overrides)
PROGRESS_INTERVAL = 30.0


def progress_bar(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it",
                 enabled: bool = True):
    """A tqdm progress bar on stderr (rate and ETA) for the long steps' logs.

    Updates at most every :data:`PROGRESS_INTERVAL` seconds (``BERTLOOK_PROGRESS_INTERVAL``), so a log
    stays short; ``enabled=False`` or ``BERTLOOK_PROGRESS=0`` gives a silent bar (same interface).
    """
    from tqdm import tqdm  # lazy: not in envs/analysis.yaml, whose steps import this module

    try:
        interval = float(os.environ.get("BERTLOOK_PROGRESS_INTERVAL", PROGRESS_INTERVAL))
    except ValueError:
        interval = PROGRESS_INTERVAL
    disable = not enabled or os.environ.get("BERTLOOK_PROGRESS", "1").strip() in ("0", "false", "no")
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, mininterval=interval,
                maxinterval=max(interval, 10.0), disable=disable, dynamic_ncols=False, ncols=100,
                ascii=True, leave=True)


# --------------------------------------------------------------------------------------------
# encoding

def encode_segment(segment: dict[str, Any], tokenizer, segment_ids_mode: str = "zeros") -> tuple[list[int], list[int]]:
    """``(input_ids, token_type_ids)`` for one segment, from its wordpieces ``segment["tokens"]``.

    Tokens are looked up in the vocabulary (``convert_tokens_to_ids``), never re-tokenized; a
    token the vocabulary lacks is an error naming the segment id. ``segment_ids_mode``: ``zeros``
    (all 0, as in the authors' code) or ``pair`` (``segment["segment_ids"]``).
    """
    sid = segment.get("id")
    tokens = segment.get("tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise BertlookError(f"segment {sid!r}: 'tokens' must be a non-empty list of strings")
    if segment_ids_mode not in SEGMENT_ID_MODES:
        raise BertlookError(f"unknown segment ids mode {segment_ids_mode!r} (use one of {', '.join(SEGMENT_ID_MODES)})")
    ids = tokenizer.convert_tokens_to_ids(tokens)
    unk_token = getattr(tokenizer, "unk_token", None)
    unk_id = getattr(tokenizer, "unk_token_id", None)
    bad = [t for t, i in zip(tokens, ids) if i is None or (i == unk_id and t != unk_token)]
    if bad:
        shown = ", ".join(repr(t) for t in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise BertlookError(
            f"segment {sid!r}: {len(bad)} token(s) not in the model's vocabulary: {shown} "
            "(were the segments made with this model's tokenizer?)"
        )
    ids = [int(i) for i in ids]
    if segment_ids_mode == "zeros":
        return ids, [0] * len(ids)
    seg_ids = segment.get("segment_ids")
    if not isinstance(seg_ids, list) or len(seg_ids) != len(tokens):
        raise BertlookError(
            f"segment {sid!r}: segment_ids mode 'pair' needs 'segment_ids' with one id per token "
            f"({len(tokens)} tokens, got {len(seg_ids) if isinstance(seg_ids, list) else seg_ids!r})"
        )
    if any(s not in (0, 1) for s in seg_ids):
        raise BertlookError(f"segment {sid!r}: segment_ids must be 0 or 1")
    return ids, [int(s) for s in seg_ids]


# --------------------------------------------------------------------------------------------
# unknown tokens

def check_max_unk_rate(value: Any) -> float:
    """``value`` as a float in [0, 1] (the ``--max-unk-rate`` / ``extraction.max_unk_rate`` setting)."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise BertlookError(f"max unknown-token rate must be a number in [0, 1], got {value!r}") from None
    if not (0.0 <= rate <= 1.0) or math.isnan(rate):
        raise BertlookError(f"max unknown-token rate must be in [0, 1], got {value!r}")
    return rate


def segment_unk_words(tokenizer) -> Callable[[dict[str, Any], list[int]], list[str]]:
    """``words_of`` for segments: the words of ``text_a``/``text_b`` the tokenizer maps to its unknown token.

    Without texts, each unknown token is shown with its neighbouring tokens.
    """
    unk_id = getattr(tokenizer, "unk_token_id", None)

    def words_of(record: dict[str, Any], positions: list[int]) -> list[str]:
        out: list[str] = []
        for key in ("text_a", "text_b"):
            text = record.get(key)
            if not isinstance(text, str) or not text:
                continue
            try:
                enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                                verbose=False)
            except Exception:  # pragma: no cover - a tokenizer without offsets
                continue
            out += [text[s:e] for i, (s, e) in zip(enc["input_ids"], enc["offset_mapping"]) if i == unk_id]
        if out:
            return out
        toks = record.get("tokens") or []
        return [" ".join(toks[max(0, p - 1):p + 2]) for p in positions]

    return words_of


def aligned_unk_words(alignments: dict[Any, Any]) -> Callable[[dict[str, Any], list[int]], list[str]]:
    """``words_of`` for word-level examples: the record's ``words`` that hold an unknown token."""

    def words_of(record: dict[str, Any], positions: list[int]) -> list[str]:
        al = alignments.get(record.get("id"))
        words = record.get("words") or []
        if al is None:
            return []
        idx = sorted({al.word_of_token[p] for p in positions if 0 <= al.word_of_token[p] < len(words)})
        return [str(words[w]) for w in idx]

    return words_of


def unk_statistics(examples: Iterable[Sequence[Any]], tokenizer, *,
                   words_of: Callable[[dict[str, Any], list[int]], list[str]] | None = None) -> dict[str, Any]:
    """Count the tokenizer's unknown token in ``examples`` (``(record, input_ids, ...)``, before any exclusion).

    Returns ``unk_token``, ``unk_tokens``, ``non_special_tokens`` (tokens that are not [CLS], [SEP],
    [PAD], [MASK] ...; [UNK] counts as non-special), ``unk_rate`` (= unk_tokens / non_special_tokens,
    None without tokens), ``examples``, ``examples_with_unk`` and ``unk_examples``: the first
    :data:`UNK_EXAMPLES_SHOWN` examples with an unknown token (``id``, ``unk_tokens``, ``words``:
    the words that became the unknown token, from ``words_of(record, positions)``).
    """
    unk_id = getattr(tokenizer, "unk_token_id", None)
    special = set(getattr(tokenizer, "all_special_ids", None) or ()) - {unk_id}
    n_unk = n_tokens = n_examples = 0
    first: list[tuple[dict[str, Any], list[int]]] = []
    n_with = 0
    for ex in examples:
        record, ids = ex[0], ex[1]
        n_examples += 1
        n_tokens += sum(1 for i in ids if i not in special)
        if unk_id is None:
            continue
        positions = [k for k, i in enumerate(ids) if i == unk_id]
        if positions:
            n_unk += len(positions)
            n_with += 1
            if len(first) < UNK_EXAMPLES_SHOWN:
                first.append((record, positions))
    shown = []
    for record, positions in first:
        words = words_of(record, positions) if words_of is not None else []
        shown.append({"id": record.get("id"), "unk_tokens": len(positions), "words": [str(w) for w in words[:5]]})
    return {
        "unk_token": getattr(tokenizer, "unk_token", None),
        "unk_tokens": n_unk,
        "non_special_tokens": n_tokens,
        "unk_rate": (n_unk / n_tokens) if n_tokens else None,
        "examples": n_examples,
        "examples_with_unk": n_with,
        "unk_examples": shown,
    }


def check_unk_rate(stats: dict[str, Any], max_rate: float, model_spec: str, *, what: str = "examples",
                   step: str = "extract-segments") -> None:
    """Log the unknown-token count; raise :class:`BertlookError` when ``unk_rate > max_rate``."""
    max_rate = check_max_unk_rate(max_rate)
    rate = stats.get("unk_rate")
    unk = stats.get("unk_token") or "[UNK]"
    shown_rate = "n/a" if rate is None else f"{100 * rate:.3f}%"
    print(f"{step}: {stats['unk_tokens']} unknown tokens ({unk}) among {stats['non_special_tokens']} tokens "
          f"({shown_rate}) in {stats['examples_with_unk']} of {stats['examples']} {what}; max {100 * max_rate:g}%",
          file=sys.stderr, flush=True)
    if rate is None or rate <= max_rate:
        return
    listed = "; ".join(
        f"{e['id']!r}: " + (", ".join(repr(w) for w in e["words"]) or f"{e['unk_tokens']} x {unk}")
        for e in stats["unk_examples"]
    )
    raise BertlookError(
        f"model {model_spec!r}: {stats['unk_tokens']} of {stats['non_special_tokens']} tokens "
        f"({100 * rate:.2f}%) are the unknown token {unk}, in {stats['examples_with_unk']} of {stats['examples']} "
        f"{what}; more than the maximum {100 * max_rate:g}% (--max-unk-rate, extraction.max_unk_rate). The "
        f"tokenizer does not fit this text (wrong vocabulary, or a lower-cased vocabulary on cased text?). "
        f"First {what} with {unk} (id: words): {listed}"
    )


# --------------------------------------------------------------------------------------------
# disk space

def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def estimate_store_bytes(records: Sequence[dict[str, Any]], sizes: Sequence[int], num_layers: int,
                         num_heads: int, *, meta: dict[str, Any] | None = None) -> dict[str, int]:
    """Size of an attention store of ``records`` whose maps are ``sizes[i] x sizes[i]`` (float16).

    ``map_bytes`` (the shards, exact) = ``sum(layers * heads * m * m * 2)``; ``index_bytes`` is an
    upper estimate of ``index.jsonl`` + ``meta.json`` (records as JSON plus a fixed overhead).
    """
    per = int(num_layers) * int(num_heads) * STORE_ITEMSIZE
    map_bytes = sum(per * int(m) * int(m) for m in sizes)
    index_bytes = sum(len(json.dumps(r, ensure_ascii=False, default=str).encode("utf-8")) + INDEX_ENTRY_OVERHEAD
                      for r in records)
    meta_bytes = META_OVERHEAD + len(json.dumps(meta or {}, indent=2, ensure_ascii=False, default=str).encode("utf-8"))
    return {"map_bytes": map_bytes, "index_bytes": index_bytes + meta_bytes,
            "total_bytes": map_bytes + index_bytes + meta_bytes}


def _existing_parent(path: Path) -> Path:
    path = path.absolute()
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path(path.anchor or ".")  # pragma: no cover


def check_disk_space(out_dir, needed: int, *, what: str = "attention store", advice: str = "") -> dict[str, Any]:
    """Raise :class:`BertlookError` when the file system of ``out_dir`` lacks ``needed`` bytes plus a margin.

    The store is built beside ``out_dir`` and renamed into place, so the free space of the nearest
    existing parent of ``out_dir`` is checked (``shutil.disk_usage``); the margin is 5% of
    ``needed``, at least 100 MiB. Returns ``{"disk_free_bytes", "disk_checked_path", "disk_margin_bytes"}``.
    """
    where = _existing_parent(Path(out_dir).parent)
    margin = max(int(DISK_MARGIN_FRACTION * needed), DISK_MARGIN_MIN_BYTES)
    try:
        free = int(shutil.disk_usage(where).free)
    except OSError as err:  # pragma: no cover - e.g. a vanished mount point
        print(f"warning: cannot check the free space of {where} ({err})", file=sys.stderr)
        return {"disk_free_bytes": None, "disk_checked_path": str(where), "disk_margin_bytes": margin}
    if free < needed + margin:
        raise BertlookError(
            f"not enough disk space for the {what} {out_dir}: it needs about {_fmt_bytes(needed)} "
            f"({needed} bytes) plus a margin of {_fmt_bytes(margin)}, but {where} has {_fmt_bytes(free)} free. "
            f"Free some space, write to another disk, or shrink the run{': ' + advice if advice else ''}"
        )
    return {"disk_free_bytes": free, "disk_checked_path": str(where), "disk_margin_bytes": margin}


SHRINK_ADVICE = (
    "fewer examples (segments.n_segments, fewer treebank sentences or coreference parts) or a smaller "
    "--max-seq-len (segments.max_seq_len; a map grows with the square of its length); the batch size "
    "does not change the store's size"
)


# --------------------------------------------------------------------------------------------
# extraction

def _same_file_system(a, b) -> bool:
    """Whether the nearest existing parents of ``a`` and ``b`` are on one file system."""
    try:
        return os.stat(_existing_parent(Path(a).parent)).st_dev == os.stat(_existing_parent(Path(b).parent)).st_dev
    except OSError:  # pragma: no cover
        return True


def _id_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return (1, str(value))
    if isinstance(value, (int, float)):
        return (0, value)
    return (1, str(value))


def _model_device(model):
    import torch  # lazy: cli/_args imports this module when the parser is built

    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _accepts_token_type_ids(model) -> bool:
    try:
        return "token_type_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return True


def extract_to_store(
    examples: Sequence[tuple[dict[str, Any], Sequence[int], Sequence[int]]],
    model,
    out_dir,
    *,
    batch_size: int = 16,
    max_seq_len: int = 128,
    device=None,
    level: str = "token",
    meta: dict[str, Any] | None = None,
    progress_every: int = 256,
    shard_mb: float = 256,
    transform: Callable[[dict[str, Any], Any], tuple[dict[str, Any], Any]] | None = None,
    stored_size: Callable[[dict[str, Any], int], int] | None = None,
    check_disk: bool = True,
    extra_meta: dict[str, Any] | None = None,
    norms_out_dir=None,
) -> dict[str, Any]:
    """Run ``model`` on ``examples`` and write their attention maps to a new store at ``out_dir``.

    ``examples``: ``(record, input_ids, token_type_ids)`` triples; ``record`` holds at least ``id``
    (unique) and ``tokens`` (one per input id) and is stored as the example's index entry.

    Examples longer than ``max_seq_len`` are excluded (not silently): counted in the summary
    (``excluded_too_long``, ``excluded_ids``) and in the store's ``meta.json``
    (``excluded: {"too_long": count, "too_long_ids": [...], "max_seq_len": ...}``).

    The rest are sorted by length (longest first; ties by id) and run in batches of
    ``batch_size``, padded to the batch's longest example with the model's pad id and an attention
    mask, under ``torch.inference_mode()`` with the model in eval mode (dropout off). The per-layer
    maps are converted to float16 on the device, cut back to each example's own ``n x n`` (padded
    rows and columns dropped; row = FROM token, column = TO token) and written batch by batch, so
    at most one batch of maps is in memory.

    **Store order is processing order (length-sorted), not input order**: use each record's
    ``id`` to match store entries to segments.

    ``meta`` is merged into the store's ``meta.json``; callers should put the model provenance
    (``model``) and ``special_tokens: {"cls": ..., "sep": ...}`` there. A ``meta["excluded"]`` dict
    (exclusions the caller made before, e.g. sentences that could not be aligned) is merged into
    the store's ``excluded`` entry next to the over-long counts. On any exception nothing is left
    at ``out_dir`` (the store is built under a temporary name).

    ``transform(record, attn) -> (record, attn)``, when given, is applied to every example just
    before it is written (e.g. token -> word level conversion: the stored record and map may then
    have another size ``m``, with ``len(record["tokens"]) == m``). It receives the example's own
    float32 ``[L, H, n, n]`` map (numpy; maps are kept in float32 instead of float16 when a
    transform is given) and the record as passed in; the store converts the result to float16.
    ``stored_size(record, n)`` gives the size ``m`` of the map the transform stores (default ``n``);
    it feeds the size estimate. ``extra_meta`` is added to ``meta.json`` when the store is closed
    (e.g. which shard of a sharded extraction the store is); it is not part of the size estimate.

    ``norms_out_dir``: also write the row-normalised norm-based maps of Kobayashi et al. 2020
    (:mod:`bertlook.attention.norms`; docs/definitions.md#norm-based-attention-kobayashi-et-al-2020) of
    the same forward pass to a second store there: same records, same order, ``transform`` applied
    too; its ``meta.json`` has ``"map": "norm"`` (the attention store's ``"map": "attention"``). Both
    stores are built under temporary names; on an error nothing is left at either path. The size
    estimate and the disk check then cover both stores, and the summary gains ``norms``: the per-layer
    sums of ``|| f(x_j) ||`` (mean over heads) per token class of ``j`` and the token counts
    (:func:`bertlook.attention.norms.norms_summary`, additive over shards).

    Progress (examples/s, ETA) goes to stderr through :func:`progress_bar` (``progress_every=0``: none).

    Before the first forward pass the store's size is estimated (:func:`estimate_store_bytes`),
    logged, and checked against the free space of the output's file system
    (:func:`check_disk_space`, unless ``check_disk`` is False).

    Returns a summary dict: n_examples, n_input, excluded_too_long, excluded_ids, tokens,
    padded_tokens, seconds, tokens_per_second, device, device_warning, batch_size, dtype,
    max_seq_len, num_layers, num_heads, estimated_bytes, estimated_map_bytes (both stores with
    ``norms_out_dir``), disk_free_bytes, out_dir, and ``norms`` with ``norms_out_dir``.
    """
    # lazy: cli/_args imports this module when the parser is built (no torch, numpy there)
    import torch

    from bertlook.attention.modeling import cuda_visibility_warning, model_dims
    from bertlook.attention.store import AttentionWriter

    if batch_size < 1:
        raise BertlookError(f"batch size must be >= 1, got {batch_size}")
    if max_seq_len < 1:
        raise BertlookError(f"max_seq_len must be >= 1, got {max_seq_len}")
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is not None and max_seq_len > int(max_pos):
        raise BertlookError(
            f"max_seq_len {max_seq_len} exceeds the model's max_position_embeddings {max_pos}"
        )
    num_layers, num_heads = model_dims(model)
    norm_modules = None
    if norms_out_dir is not None:
        from bertlook.attention import norms as norms_mod  # lazy: imported only when norm maps are asked for

        if Path(norms_out_dir).absolute() == Path(out_dir).absolute():
            raise BertlookError(f"{norms_out_dir}: the norm-based store must not be the attention store's path")
        norm_modules = norms_mod.find_attention_modules(model, num_heads)
    device = _model_device(model) if device is None else torch.device(device)
    pad_id = getattr(model.config, "pad_token_id", None)
    pad_id = 0 if pad_id is None else int(pad_id)
    use_tt = _accepts_token_type_ids(model)
    n_types = int(getattr(model.config, "type_vocab_size", 2) or 2)

    # ---- validate, exclude over-long examples (counted, never silently)
    kept: list[tuple[dict[str, Any], Sequence[int], Sequence[int]]] = []
    excluded_ids: list[Any] = []
    seen: set[Any] = set()
    for record, input_ids, tt_ids in examples:
        rid = record.get("id")
        if rid is None:
            raise BertlookError("an example record has no 'id'")
        key = _id_key(rid)
        if key in seen:
            raise BertlookError(f"example {rid!r}: duplicate id")
        seen.add(key)
        n = len(input_ids)
        if n == 0:
            raise BertlookError(f"example {rid!r}: no input ids")
        if len(tt_ids) != n or len(record.get("tokens", ())) != n:
            raise BertlookError(
                f"example {rid!r}: {n} input ids, {len(tt_ids)} token type ids and "
                f"{len(record.get('tokens', ()))} tokens (they must be equal)"
            )
        if not use_tt and any(tt_ids):
            raise BertlookError(f"example {rid!r}: the model takes no token type ids but non-zero ones were given")
        if use_tt and any(int(t) >= n_types for t in tt_ids):  # XLM-R / RoBERTa: one token type
            raise BertlookError(f"example {rid!r}: token type id {max(int(t) for t in tt_ids)} but the model has "
                                f"type_vocab_size {n_types} (set extraction.segment_ids: zeros for this model)")
        if n > max_seq_len:
            excluded_ids.append(rid)
            continue
        kept.append((record, input_ids, tt_ids))
    kept.sort(key=lambda ex: (-len(ex[1]), _id_key(ex[0]["id"])))
    vocab_size = getattr(model.config, "vocab_size", None)
    if vocab_size:
        for record, input_ids, _ in kept:
            bad = [int(i) for i in input_ids if not 0 <= int(i) < int(vocab_size)]
            if bad:
                raise BertlookError(
                    f"example {record['id']!r}: token id(s) {bad[:5]} outside the model's vocabulary of "
                    f"{vocab_size} (does the tokenizer belong to this model?)"
                )

    store_meta = dict(meta or {})
    store_meta.update({"max_seq_len": int(max_seq_len), "batch_size": int(batch_size), "order": "length-sorted",
                       "map": "attention"})
    excluded = dict(store_meta.pop("excluded", None) or {})
    excluded.update({"too_long": len(excluded_ids), "too_long_ids": excluded_ids, "max_seq_len": int(max_seq_len)})

    # ---- size of the store, before any forward pass
    sizes = [int(stored_size(rec, len(ids))) if stored_size is not None else len(ids) for rec, ids, _ in kept]
    estimate = estimate_store_bytes([rec for rec, _, _ in kept], sizes, num_layers, num_heads,
                                    meta={**store_meta, "excluded": excluded})
    n_stores = 1
    if norms_out_dir is not None:  # a second store of the same size (maps and index)
        n_stores = 2
        estimate = {k: 2 * v for k, v in estimate.items()}
    disk = {"disk_free_bytes": None, "disk_checked_path": None, "disk_margin_bytes": None}
    if check_disk and n_stores == 2 and not _same_file_system(out_dir, norms_out_dir):
        disk = check_disk_space(out_dir, estimate["total_bytes"] // 2, advice=SHRINK_ADVICE)
        check_disk_space(norms_out_dir, estimate["total_bytes"] // 2, advice=SHRINK_ADVICE, what="norm-based store")
    elif check_disk:
        disk = check_disk_space(out_dir, estimate["total_bytes"], advice=SHRINK_ADVICE,
                                what="attention store" if n_stores == 1 else "attention and norm-based stores")
    free = disk["disk_free_bytes"]
    print(f"extract-segments: estimated store size {_fmt_bytes(estimate['total_bytes'])} ({estimate['total_bytes']} bytes: "
          f"{len(kept)} examples x {num_layers} layers x {num_heads} heads, {STORE_DTYPE}"
          + (", attention and norm-based stores" if n_stores == 2 else "") + f") -> {out_dir}"
          + (f" and {norms_out_dir}" if n_stores == 2 else "")
          + (f"; {_fmt_bytes(free)} free on {disk['disk_checked_path']}" if free is not None else ""),
          file=sys.stderr, flush=True)
    device_warning = cuda_visibility_warning() if device.type == "cpu" else None
    map_dtype = torch.float16 if transform is None else torch.float32

    was_training = model.training
    model.eval()
    n_tokens = 0
    padded_tokens = 0
    done = 0
    norm_sums = norm_counts = None
    if norm_modules is not None:
        specials = store_meta.get("special_tokens") or {}
        cls_tok, sep_tok = specials.get("cls") or "[CLS]", specials.get("sep") or "[SEP]"
        norm_sums, norm_counts = norms_mod.zero_class_sums(num_layers)  # [layer, class], [class]
    t0 = time.perf_counter()
    bar = progress_bar(total=len(kept), desc="extract-segments", unit="ex", enabled=bool(progress_every))
    try:
        with contextlib.ExitStack() as stack:
            writer = stack.enter_context(AttentionWriter(
                out_dir, num_layers=num_layers, num_heads=num_heads, level=level,
                shard_bytes=int(shard_mb * 2**20), meta=store_meta))
            norm_writer = captured = None
            if norm_modules is not None:
                norm_writer = stack.enter_context(AttentionWriter(
                    norms_out_dir, num_layers=num_layers, num_heads=num_heads, level=level,
                    shard_bytes=int(shard_mb * 2**20), meta={**store_meta, "map": "norm", "norm": NORM_META}))
                captured = stack.enter_context(norms_mod.capture_values(norm_modules))
            stack.enter_context(torch.inference_mode())
            for start in range(0, len(kept), batch_size):
                batch = kept[start:start + batch_size]
                lengths = [len(ex[1]) for ex in batch]
                T = lengths[0]
                B = len(batch)
                ids = torch.full((B, T), pad_id, dtype=torch.long)  # [batch, seq]
                tts = torch.zeros((B, T), dtype=torch.long)  # [batch, seq]
                mask = torch.zeros((B, T), dtype=torch.long)  # [batch, seq]
                for b, (_, input_ids, tt_ids) in enumerate(batch):
                    n = lengths[b]
                    ids[b, :n] = torch.as_tensor(input_ids, dtype=torch.long)  # [seq]
                    tts[b, :n] = torch.as_tensor(tt_ids, dtype=torch.long)  # [seq]
                    mask[b, :n] = 1
                kwargs = dict(input_ids=ids.to(device), attention_mask=mask.to(device), output_attentions=True)
                if use_tt:
                    kwargs["token_type_ids"] = tts.to(device)
                if captured is not None:
                    captured[:] = [None] * len(captured)
                out = model(**kwargs)
                attns = out.attentions  # layer x [batch, head, query_pos, key_pos]
                if attns is None or len(attns) != num_layers or attns[0] is None:
                    raise BertlookError(
                        "the model returned no attention weights (it must be loaded with attn_implementation='eager')"
                    )
                # one pass: stack layers and convert to float16 (float32 for a transform) on the device
                # [batch, layer, head, query_pos, key_pos]
                maps = torch.empty((B, num_layers, num_heads, T, T), dtype=map_dtype, device=device)
                for layer, a in enumerate(attns):
                    maps[:, layer].copy_(a)  # [batch, head, query_pos, key_pos]
                nmaps = vnorms = None
                if norm_writer is not None:
                    if any(v is None for v in captured):
                        raise BertlookError(f"model class {type(model).__name__}: the value projections were not "
                                            "called in the forward pass (norm-based maps need them)")
                    batch_ids = [rec["id"] for rec, _, _ in batch]
                    # [batch, layer, head, query_pos, key_pos]
                    nmaps = torch.empty((B, num_layers, num_heads, T, T), dtype=map_dtype, device=device)
                    vnorms = torch.empty((B, num_layers, num_heads, T), dtype=torch.float32, device=device)  # [batch, layer, head, key_pos]
                    for layer, a in enumerate(attns):
                        vn = norms_mod.value_norms(captured[layer], norm_modules[layer][1].weight, num_heads)  # [batch, head, key_pos]
                        vnorms[:, layer].copy_(vn)  # [batch, head, key_pos]
                        nmaps[:, layer].copy_(norms_mod.norm_maps(a, vn, lengths=lengths, ids=batch_ids))  # [batch, head, query_pos, key_pos]
                    captured[:] = [None] * len(captured)
                    nmaps = nmaps.cpu().numpy()  # [batch, layer, head, query_pos, key_pos]
                    vnorms = vnorms.cpu().numpy()  # [batch, layer, head, key_pos]
                del out, attns
                maps = maps.cpu().numpy()  # [batch, layer, head, query_pos, key_pos]
                for b, (record, _, _) in enumerate(batch):
                    n = lengths[b]
                    if transform is None:
                        writer.add(record, maps[b, :, :, :n, :n])  # [layer, head, query_pos, key_pos]
                    else:
                        writer.add(*transform(record, maps[b, :, :, :n, :n]))  # [layer, head, query_pos, key_pos] in
                    if norm_writer is not None:
                        if transform is None:
                            norm_writer.add(record, nmaps[b, :, :, :n, :n])  # [layer, head, query_pos, key_pos]
                        else:
                            norm_writer.add(*transform(record, nmaps[b, :, :, :n, :n]))  # [layer, head, query_pos, key_pos] in
                        classes = norms_mod.token_classes(record["tokens"], cls_tok, sep_tok)  # [key_pos]
                        ex_sums, ex_counts = norms_mod.class_sums(vnorms[b, :, :, :n], classes)  # [layer, class], [class]
                        norm_sums += ex_sums
                        norm_counts += ex_counts
                del maps, nmaps, vnorms
                n_tokens += sum(lengths)
                padded_tokens += B * T
                done += B
                bar.update(B)
            writer.close(excluded=excluded, extra_meta=extra_meta)
            if norm_writer is not None:
                try:
                    norm_writer.close(excluded=excluded, extra_meta=extra_meta)
                except BaseException:
                    shutil.rmtree(out_dir, ignore_errors=True)  # nothing left at either path
                    raise
    finally:
        bar.close()
        if was_training:
            model.train()
    if progress_every:
        el = time.perf_counter() - t0
        print(f"extract-segments: {done}/{len(kept)} examples, {n_tokens / max(el, 1e-9):.0f} tokens/s",
              file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    summary = {
        "n_input": len(kept) + len(excluded_ids),
        "n_examples": len(kept),
        "excluded_too_long": len(excluded_ids),
        "excluded_ids": excluded_ids,
        "tokens": n_tokens,
        "padded_tokens": padded_tokens,
        "seconds": round(seconds, 4),
        "tokens_per_second": round(n_tokens / seconds, 1) if seconds > 0 else None,
        "device": str(device),
        "device_warning": device_warning,
        "batch_size": int(batch_size),
        "max_seq_len": int(max_seq_len),
        "dtype": STORE_DTYPE,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "estimated_bytes": estimate["total_bytes"],
        "estimated_map_bytes": estimate["map_bytes"],
        "disk_free_bytes": free,
        "out_dir": str(out_dir),
    }
    if norm_modules is not None:
        summary["norms"] = norms_mod.norms_summary(norms_out_dir, norm_sums, norm_counts)
    return summary


def _check_special_tokens(segments: Iterable[dict[str, Any]], cls: str | None, sep: str | None, path) -> None:
    for seg in segments:
        toks = seg.get("tokens") or []
        if cls is not None and sep is not None and toks and (toks[0] != cls or toks[-1] != sep):
            raise BertlookError(
                f"{path}: segment {seg.get('id')!r} does not start with {cls} and end with {sep} "
                f"(starts {toks[0]!r}, ends {toks[-1]!r}); were the segments made with this model's tokenizer?"
            )


def extract_segments(
    segments_path,
    model_spec: str,
    out_dir,
    *,
    revision: str | None = None,
    batch_size: int = 16,
    segment_ids: str = "zeros",
    max_seq_len: int = 128,
    device: str = "auto",
    shard_mb: float = 256,
    progress_every: int = 256,
    max_unk_rate: float = DEFAULT_MAX_UNK_RATE,
    shard: tuple[int, int] | None = None,
    norms_out=None,
) -> dict[str, Any]:
    """Read ``segments.jsonl``, load the model, and extract token-level attention to ``out_dir``.

    The store's ``meta.json`` records the model provenance, the special tokens, the segment ids
    mode, the segments file and the unknown-token counts. The unknown-token rate is checked
    (:func:`check_unk_rate`, ``max_unk_rate``) before the model is loaded. Returns
    :func:`extract_to_store`'s summary plus model/input fields and the unknown-token counts.

    ``shard=(i, k)``: extract only shard ``i`` of ``k`` (1-based), the contiguous range
    :func:`bertlook.pipeline.sharding.shard_range` of the file's segments. Every segment is still encoded and
    the unknown-token check is made on the whole file (the same decision whatever ``k``); the
    counts in the summary and ``meta.json`` are the shard's own (they add up over the shards). The
    summary then also holds ``shard`` (index, count, start, stop) and ``store_meta`` (the store's
    ``meta.json``), which ``bertlook gather-extraction`` turns into the unsharded summary.

    ``norms_out``: also write the norm-based maps of the same pass to a store there
    (:func:`extract_to_store` ``norms_out_dir``; the summary gains ``norms``).
    """
    # lazy: modeling imports torch; this module is imported when the CLI parser is built
    from bertlook.attention.modeling import load_model, load_tokenizer, pick_device, resolve_model

    if segment_ids not in SEGMENT_ID_MODES:
        raise BertlookError(f"unknown --segment-ids {segment_ids!r} (use one of {', '.join(SEGMENT_ID_MODES)})")
    max_unk_rate = check_max_unk_rate(max_unk_rate)
    segments = read_segments(segments_path)
    resolved = resolve_model(model_spec, revision)
    dev = pick_device(device)
    tokenizer = load_tokenizer(resolved)
    _check_special_tokens(segments, tokenizer.cls_token, tokenizer.sep_token, segments_path)
    examples = []
    for seg in segments:
        ids, tts = encode_segment(seg, tokenizer, segment_ids)
        examples.append((seg, ids, tts))
    unk = unk_statistics(examples, tokenizer, words_of=segment_unk_words(tokenizer))
    check_unk_rate(unk, max_unk_rate, model_spec, what=f"segments of {segments_path}", step="extract-segments")
    info = None
    if shard is not None:
        info = shard_info(len(segments), *shard)
        examples = examples[info["start"]:info["stop"]]
        unk = unk_statistics(examples, tokenizer, words_of=segment_unk_words(tokenizer))
        print(f"extract-segments: shard {info['index']}/{info['count']}: segments {info['start']}..{info['stop'] - 1} "
              f"of {len(segments)}", file=sys.stderr, flush=True)
    model = load_model(resolved, dev)
    provenance = resolved.provenance(model.config)
    meta = {
        "model": provenance,
        "special_tokens": {"cls": tokenizer.cls_token, "sep": tokenizer.sep_token},
        "segment_ids": segment_ids,
        "segments_path": str(segments_path),
        "n_segments": len(segments),
        "unknown_tokens": unk,
    }
    summary = extract_to_store(examples, model, out_dir, batch_size=batch_size, max_seq_len=max_seq_len,
                               device=dev, level="token", meta=meta, progress_every=progress_every,
                               shard_mb=shard_mb, extra_meta={"shard": info} if info else None,
                               norms_out_dir=norms_out)
    summary.update({"model": model_spec, "revision": revision, "segments": str(segments_path),
                    "segment_ids": segment_ids, "n_segments": len(segments)})
    summary.update(unk_summary(unk, max_unk_rate))
    if info is not None:
        add_shard_fields(summary, info, out_dir)
    return summary


def add_shard_fields(summary: dict[str, Any], info: dict[str, Any], out_dir) -> None:
    """``shard`` and ``store_meta`` (the written store's meta.json) in a shard's extraction summary."""
    with open(Path(out_dir) / "meta.json", encoding="utf-8") as fh:
        store_meta = json.load(fh)
    summary["shard"] = info
    summary["store_meta"] = store_meta


def unk_summary(stats: dict[str, Any], max_unk_rate: float) -> dict[str, Any]:
    """The summary fields of :func:`unk_statistics` (``unk_tokens``, ``unk_rate``, ... ``max_unk_rate``)."""
    return {
        "unk_token": stats["unk_token"],
        "unk_tokens": stats["unk_tokens"],
        "non_special_tokens": stats["non_special_tokens"],
        "unk_rate": stats["unk_rate"],
        "examples_with_unk": stats["examples_with_unk"],
        "unk_examples": stats["unk_examples"],
        "max_unk_rate": float(max_unk_rate),
    }
