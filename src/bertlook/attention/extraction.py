"""Batched attention extraction into an attention store (``bertlook extract-segments``).

:func:`extract_segments` reads the segments, loads the model and tokenizer, encodes the wordpieces
(:func:`encode_segment`) and calls :func:`extract_to_store`, which runs the model in length-sorted
batches and streams float16 maps ``[layer, head, from, to]`` to disk (:func:`stream_maps`: one pass of the
model handed to any consumers of :mod:`bertlook.attention.stream`). The guards checked before the pass
(unknown-token rate, disk space) are in :mod:`bertlook.attention.guards`.

Definitions and the differences from the released code (token type ids, over-long examples,
padding): docs/definitions.md#token-level-extraction
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from bertlook.attention.guards import (DEFAULT_MAX_UNK_RATE, STORE_DTYPE, check_max_unk_rate, check_stores_space,
                                       check_unk_rate, segment_unk_words, unk_statistics, unk_summary)
from bertlook.attention.layer_readers import LayerStore
from bertlook.attention.norms import NORM_STORE_META, NormClassSums, find_attention_modules
from bertlook.attention.store import STORE_ITEMSIZE, id_sort_key
from bertlook.attention.stream import StoreConsumer, StreamMeta, StreamPlan, choose_schedule, map_batches, run_consumers
from bertlook.data.segments import read_segments
from bertlook.errors import BertlookError, check_at_least, check_choice
from bertlook.pipeline.sharding import shard_info

SEGMENT_ID_MODES = ("zeros", "pair")

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
    check_choice("segment ids mode", segment_ids_mode, SEGMENT_ID_MODES)
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
# extraction

def model_device(model):
    """The device of ``model``'s first parameter (the CPU for a model without parameters)."""
    import torch  # lazy: not in envs/analysis.yaml, whose steps import this module (progress_bar)

    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def accepts_token_type_ids(model) -> bool:
    """The model's ``forward`` takes ``token_type_ids`` (BERT does; GPT-2 style models and DistilBERT do not)."""
    try:
        return "token_type_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return True


def prepare_examples(examples: Sequence[tuple[dict[str, Any], Sequence[int], Sequence[int]]], model, *,
                     max_seq_len: int) -> tuple[list[tuple[dict[str, Any], Sequence[int], Sequence[int]]], list[Any], bool]:
    """Check the examples against the model and put them in storage order: ``(kept, excluded_ids, use_tt)``.

    Ids must be unique, input ids, token type ids and tokens of equal length, token types and ids within
    the model's vocabularies (:class:`BertlookError` naming the example). Examples longer than
    ``max_seq_len`` are excluded (``excluded_ids``, in input order); the rest are sorted by length, longest
    first, ties by id. ``use_tt``: whether the model takes token type ids (never a decoder's: their segment ids
    are not passed to the model).
    """
    check_at_least("max_seq_len", max_seq_len, 1)
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is not None and max_seq_len > int(max_pos):
        raise BertlookError(f"max_seq_len {max_seq_len} exceeds the model's max_position_embeddings {max_pos}")
    from bertlook.pipeline.model_spec import DECODER, model_family  # lazy: huggingface_hub (analysis env)

    decoder = model_family(model.config) == DECODER
    use_tt = accepts_token_type_ids(model) and not decoder  # GPT-2 would embed them as words: never for a decoder
    n_types = int(getattr(model.config, "type_vocab_size", 2) or 2)
    kept: list[tuple[dict[str, Any], Sequence[int], Sequence[int]]] = []
    excluded_ids: list[Any] = []
    seen: set[Any] = set()
    for record, input_ids, tt_ids in examples:
        rid = record.get("id")
        if rid is None:
            raise BertlookError("an example record has no 'id'")
        key = id_sort_key(rid)
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
        if not use_tt and not decoder and any(tt_ids):
            raise BertlookError(f"example {rid!r}: the model takes no token type ids but non-zero ones were given")
        if use_tt and any(int(t) >= n_types for t in tt_ids):  # XLM-R / RoBERTa: one token type
            raise BertlookError(f"example {rid!r}: token type id {max(int(t) for t in tt_ids)} but the model has "
                                f"type_vocab_size {n_types} (set extraction.segment_ids: zeros for this model)")
        if n > max_seq_len:
            excluded_ids.append(rid)
            continue
        kept.append((record, input_ids, tt_ids))
    kept.sort(key=lambda ex: (-len(ex[1]), id_sort_key(ex[0]["id"])))
    _check_vocabulary(kept, getattr(model.config, "vocab_size", None))
    return kept, excluded_ids, use_tt


def _check_vocabulary(kept, vocab_size) -> None:
    if not vocab_size:
        return
    for record, input_ids, _ in kept:
        bad = [int(i) for i in input_ids if not 0 <= int(i) < int(vocab_size)]
        if bad:
            raise BertlookError(
                f"example {record['id']!r}: token id(s) {bad[:5]} outside the model's vocabulary of "
                f"{vocab_size} (does the tokenizer belong to this model?)"
            )



def stream_maps(
    examples: Sequence[tuple[dict[str, Any], Sequence[int], Sequence[int]]],
    model,
    consumers: Sequence[Any],
    *,
    batch_size: int = 16,
    max_seq_len: int = 128,
    device=None,
    meta: dict[str, Any] | None = None,
    norms: bool = False,
    map_dtype: str = "float16",
    progress_every: int = 256,
    check_disk: bool = True,
    step: str = "extract-segments",
    workers: int = 1,
    schedule: str = "auto",
) -> dict[str, Any]:
    """Run ``model`` once over ``examples`` and hand every batch of maps to every consumer (one pass).

    ``examples``: ``(record, input_ids, token_type_ids)``; ``record`` holds ``id`` (unique) and ``tokens``.
    They are checked and put in storage order by :func:`prepare_examples` (over-long examples excluded and
    counted; :func:`plan_stream` makes the plan every consumer starts from); the model runs in batches of
    ``batch_size`` (:func:`bertlook.attention.stream.map_batches`) and each batch goes to the ``consumers``
    (:mod:`bertlook.attention.stream`) in order (``workers`` > 1: in that many threads, beside the next batch's
    forward pass or after each one, by ``schedule``: :func:`~bertlook.attention.stream.choose_schedule`).
    ``norms``: the batches also carry the norm-based maps (Kobayashi et al. 2020) and value norms
    (``map_dtype``: the dtype the maps leave the device in; float32 where a consumer transforms them).
    ``device``: where the model runs (None: where its parameters are). Stores among the consumers are sized and
    their disk space checked before the first forward pass (:func:`bertlook.attention.guards.check_stores_space`;
    ``check_disk``, ``step`` names the step in the log); ``progress_every`` (0: silent) switches the progress bar
    and the closing rate line. On an error every consumer is aborted (nothing is left half-written).

    Returns the summary (:func:`_stream_summary`): n_examples, n_input, excluded_too_long, excluded_ids, tokens,
    padded_tokens, seconds, tokens_per_second, device, device_warning, schedule (the readers' schedule and why;
    null with one worker), batch_size, dtype, max_seq_len, num_layers, num_heads, estimated_bytes /
    estimated_map_bytes (the stores written; 0 without one), map_bytes (float16 bytes of the stream's maps,
    stored or not), disk_free_bytes.
    """
    import torch  # lazy: not in envs/analysis.yaml, whose steps import this module (progress_bar)

    from bertlook.attention.modeling import cuda_visibility_warning, model_dims  # lazy: imports torch

    check_at_least("batch size", batch_size, 1)
    kept, use_tt, plan = plan_stream(examples, model, model_dims(model), batch_size=batch_size,
                                     max_seq_len=max_seq_len, meta=meta, norms=norms)
    alti = any(getattr(c, "map_kind", None) == "alti" for c in consumers)  # ALTI readers read the value vectors too
    norm_modules = find_attention_modules(model, plan.num_heads) if norms or alti else None
    device = model_device(model) if device is None else torch.device(device)
    sizes = check_stores_space([c for c in consumers if isinstance(c, StoreConsumer)], plan,
                               check_disk=check_disk, step=step)
    device_warning = cuda_visibility_warning() if device.type == "cpu" else None
    sched, why = choose_schedule(device, schedule) if workers > 1 and consumers else ("overlap", "")
    seconds = _run_stream(kept, model, consumers, plan, batch_size=batch_size, device=device, map_dtype=map_dtype,
                          norm_modules=norm_modules, norm_maps=norms, use_tt=use_tt, workers=workers, schedule=sched,
                          progress_every=progress_every, step=step)
    summary = _stream_summary(kept, plan, seconds=seconds, batch_size=batch_size, max_seq_len=max_seq_len,
                              norms=norms, device=device, device_warning=device_warning,
                              schedule=f"{sched} ({why})" if why else None, sizes=sizes)
    if progress_every:
        print(f"{step}: {len(kept)} examples, {summary['tokens'] / max(seconds, 1e-9):.0f} tokens/s",
              file=sys.stderr, flush=True)
    return summary


def plan_stream(examples: Sequence[tuple[dict[str, Any], Sequence[int], Sequence[int]]], model,
                dims: tuple[int, int], *, batch_size: int, max_seq_len: int, meta: dict[str, Any] | None,
                norms: bool) -> tuple[list[tuple[dict[str, Any], Sequence[int], Sequence[int]]], bool, StreamPlan]:
    """``(kept, use_tt, plan)``: the examples checked and in storage order (:func:`prepare_examples`) and the
    :class:`~bertlook.attention.stream.StreamPlan` every consumer starts from: the kept records, the model's
    layers and heads (``dims``), the exclusions (``meta["excluded"]``, the caller's own, plus the over-long
    examples) and the store meta (``meta`` with the run's ``max_seq_len``, ``batch_size``, order and map kind)."""
    num_layers, num_heads = dims
    kept, excluded_ids, use_tt = prepare_examples(examples, model, max_seq_len=max_seq_len)
    store_meta = dict(meta or {})
    store_meta.update({"max_seq_len": int(max_seq_len), "batch_size": int(batch_size), "order": "length-sorted",
                       "map": "attention"})
    excluded = dict(store_meta.pop("excluded", None) or {})
    excluded.update({"too_long": len(excluded_ids), "too_long_ids": excluded_ids, "max_seq_len": int(max_seq_len)})
    plan = StreamPlan(records=[ex[0] for ex in kept], num_layers=num_layers, num_heads=num_heads,
                      excluded=excluded, meta=store_meta, norms=norms)
    return kept, use_tt, plan


def _run_stream(kept, model, consumers: Sequence[Any], plan: StreamPlan, *, batch_size: int, device, map_dtype: str,
                norm_modules, norm_maps: bool, use_tt: bool, workers: int, schedule: str, progress_every: int,
                step: str) -> float:
    """The pass itself: the model's map batches (:func:`bertlook.attention.stream.map_batches`) handed to the
    consumers (:func:`bertlook.attention.stream.run_consumers`) under a progress bar; returns its seconds."""
    bar = progress_bar(total=len(kept), desc=step, unit="ex", enabled=bool(progress_every))
    t0 = time.perf_counter()
    layer_readers = [c for c in consumers if getattr(c, "layerwise", False)]
    host = {c.map_kind for c in consumers if not getattr(c, "layerwise", False)}  # kinds a batch reader needs
    batches = map_batches(kept, model, batch_size=batch_size, device=device, num_layers=plan.num_layers,
                          num_heads=plan.num_heads, map_dtype=map_dtype, norm_modules=norm_modules,
                          use_token_types=use_tt, on_batch=bar.update, layer_readers=layer_readers, host=host,
                          reader_threads=workers, norm_maps=norm_maps)
    try:
        run_consumers(batches, consumers, plan, workers=workers, schedule=schedule)
    finally:
        # close the generator here, in this thread, on an error too: it left its torch.inference_mode() and
        # hooks at a yield, and closing it whenever it is garbage-collected would reset this thread's grad
        # mode in the middle of whatever runs then (a later forward pass)
        batches.close()
        bar.close()
    return time.perf_counter() - t0


def _stream_summary(kept, plan: StreamPlan, *, seconds: float, batch_size: int, max_seq_len: int, norms: bool,
                    device, device_warning: str | None, schedule: str | None,
                    sizes: dict[str, Any]) -> dict[str, Any]:
    """The summary of a finished pass (:func:`stream_maps`): its counts, device, schedule and store sizes."""
    excluded_ids = plan.excluded["too_long_ids"]
    n_tokens = sum(len(ex[1]) for ex in kept)
    return {
        "n_input": len(kept) + len(excluded_ids),
        "n_examples": len(kept),
        "excluded_too_long": len(excluded_ids),
        "excluded_ids": excluded_ids,
        "tokens": n_tokens,
        "padded_tokens": sum(batch_size_tokens(kept, batch_size)),
        "seconds": round(seconds, 4),
        "tokens_per_second": round(n_tokens / seconds, 1) if seconds > 0 else None,
        "device": str(device),
        "device_warning": device_warning,
        "schedule": schedule,
        "batch_size": int(batch_size),
        "max_seq_len": int(max_seq_len),
        "dtype": STORE_DTYPE,
        "num_layers": plan.num_layers,
        "num_heads": plan.num_heads,
        **sizes,
        "map_bytes": (2 if norms else 1) * sum(plan.num_layers * plan.num_heads * STORE_ITEMSIZE * len(ex[1]) ** 2
                                               for ex in kept),
    }


def batch_size_tokens(kept, batch_size: int) -> list[int]:
    """Padded tokens of each batch of the storage-ordered examples (batch size x its longest example)."""
    return [len(kept[s:s + batch_size]) * max(len(ex[1]) for ex in kept[s:s + batch_size])
            for s in range(0, len(kept), batch_size)]


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
    transform: Any = None,
    check_disk: bool = True,
    extra_meta: dict[str, Any] | None = None,
    norms_out_dir=None,
    step: str = "extract-segments",
    workers: int = 1,
) -> dict[str, Any]:
    """Run ``model`` on ``examples`` and write their attention maps to a new store at ``out_dir``
    (:func:`stream_maps` with a :class:`bertlook.attention.stream.StoreConsumer`).

    **Store order is processing order (length-sorted, longest first, ties by id), not input order**: use each
    record's ``id`` to match store entries to their inputs. Over-long examples (``max_seq_len``) are excluded
    and counted in the summary and in the store's ``meta.json`` (``excluded``); a ``meta["excluded"]`` dict
    (the caller's own exclusions) is merged there. ``meta`` is merged into ``meta.json`` (callers put the
    model provenance and ``special_tokens`` there); ``extra_meta`` is added when the store is closed. On any
    error nothing is left at ``out_dir``.

    ``transform``: converts every example before it is written, on the model's device, layer by layer
    (:class:`bertlook.attention.layer_readers.LayerStore`; e.g. token -> word level,
    :class:`bertlook.attention.alignment.WordConversion`: it receives each layer's float32 ``[H, n, n]`` map); only
    the converted maps cross to the host.

    ``norms_out_dir``: also the row-normalised norm-based maps (Kobayashi et al. 2020) of the same pass, in a
    second store (``meta.json`` ``"map": "norm"``, ``transform`` applied too); the summary gains ``norms``
    (per-layer sums of ``|| f(x_j) ||`` per token class, :func:`bertlook.attention.norms.norms_summary`).

    Returns :func:`stream_maps`'s summary plus ``out_dir``.
    """
    if norms_out_dir is not None and Path(norms_out_dir).absolute() == Path(out_dir).absolute():
        raise BertlookError(f"{norms_out_dir}: the norm-based store must not be the attention store's path")
    common = dict(level=level, shard_mb=shard_mb, extra_meta=extra_meta)
    store = StoreConsumer if transform is None else functools.partial(LayerStore, convert=transform)
    consumers: list[Any] = [store(out_dir, **common)]
    class_sums = None
    if norms_out_dir is not None:
        class_sums = NormClassSums()
        consumers += [store(norms_out_dir, kind="norm", meta=NORM_STORE_META, **common), class_sums]
    summary = stream_maps(examples, model, consumers, batch_size=batch_size, max_seq_len=max_seq_len,
                          device=device, meta=meta, norms=norms_out_dir is not None,
                          map_dtype="float16" if transform is None else "float32", progress_every=progress_every,
                          check_disk=check_disk, step=step, workers=workers)
    summary["out_dir"] = str(out_dir)
    if class_sums is not None:
        summary["norms"] = class_sums.summary(norms_out_dir)
    return summary


def special_token_roles(tokenizer, model) -> dict[str, str | None]:
    """The store meta's ``special_tokens``: an encoder's CLS and SEP strings; a decoder's ``cls`` null (its first
    token plays [CLS]) and ``sep`` its EOS token (:mod:`bertlook.analyses.token_roles`)."""
    from bertlook.pipeline.model_spec import DECODER, model_family  # lazy: huggingface_hub (analysis env)

    if model_family(model.config) == DECODER:
        return {"cls": None, "sep": getattr(tokenizer, "eos_token", None)}
    return {"cls": tokenizer.cls_token, "sep": tokenizer.sep_token}


def _check_special_tokens(segments: Iterable[dict[str, Any]], cls: str | None, sep: str | None, path) -> None:
    for seg in segments:
        toks = seg.get("tokens") or []
        if cls is not None and sep is not None and toks and (toks[0] != cls or toks[-1] != sep):
            raise BertlookError(
                f"{path}: segment {seg.get('id')!r} does not start with {cls} and end with {sep} "
                f"(starts {toks[0]!r}, ends {toks[-1]!r}); were the segments made with this model's tokenizer?"
            )


def segment_examples(segments_path, tokenizer, *, segment_ids: str = "zeros", max_unk_rate: float = DEFAULT_MAX_UNK_RATE,
                     shard: tuple[int, int] | None = None, model_spec: str = ""):
    """``(examples, unk, info, n_segments)``: the segments of ``segments_path`` encoded for the model
    (:func:`encode_segment`), the unknown-token counts (checked on the whole file: the same decision whatever
    the sharding), the shard (:func:`bertlook.pipeline.sharding.shard_info`, None unsharded) and the number of
    segments in the file. With ``shard``, ``examples`` and ``unk`` are the shard's own."""
    check_choice("--segment-ids", segment_ids, SEGMENT_ID_MODES)
    max_unk_rate = check_max_unk_rate(max_unk_rate)
    segments = read_segments(segments_path)
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
    return examples, unk, info, len(segments)


def extract_segments(
    segments_path,
    model_spec: str,
    out_dir=None,
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
    norms: bool = False,
    consumers: Sequence[Any] = (),
    workers: int = 1,
    model_dtype: str = "float32",
    schedule: str = "auto",
) -> dict[str, Any]:
    """Read ``segments.jsonl``, load the model (``model_dtype``: :func:`bertlook.attention.modeling.load_model`), run it once over the segments and hand the maps to the
    stores and the ``consumers`` (:mod:`bertlook.attention.stream`; the statistics of the one-pass step).

    ``out_dir``: the token-level attention store (None: no store is written). ``norms_out``: the norm-based
    maps of the same pass in a second store; ``norms``: compute the norm-based maps for the consumers
    without storing them (implied by ``norms_out``; the summary gains ``norms``, the per-class sums of
    ``|| f(x) ||``). The store meta (also ``summary["store_meta"]`` when sharded, or no store is written)
    records the model provenance, the special tokens, the segment ids mode, the segments file and the
    unknown-token counts; the unknown-token rate is checked (``max_unk_rate``) before the model is loaded.

    ``shard=(i, k)``: only shard ``i`` of ``k`` (1-based), the contiguous range
    :func:`bertlook.pipeline.sharding.shard_range` of the file's segments; counts are the shard's own (they
    add up over the shards); the summary holds ``shard`` and ``store_meta``, which ``bertlook
    gather-extraction`` turns into the unsharded summary and meta.
    """
    # lazy: modeling imports torch, not in envs/analysis.yaml (whose steps import this module)
    from bertlook.attention.modeling import load_model, load_tokenizer, pick_device, resolve_model

    resolved = resolve_model(model_spec, revision)
    dev = pick_device(device)
    tokenizer = load_tokenizer(resolved)
    examples, unk, info, n_segments = segment_examples(segments_path, tokenizer, segment_ids=segment_ids,
                                                       max_unk_rate=max_unk_rate, shard=shard, model_spec=model_spec)
    if out_dir is None and norms_out is None and not consumers:
        raise BertlookError("extract-segments: nothing to compute (no store and no statistic asked for)")
    norms = bool(norms or norms_out is not None)
    model = load_model(resolved, dev, model_dtype=model_dtype)
    meta = {
        "model": resolved.provenance(model.config),
        "special_tokens": special_token_roles(tokenizer, model),
        "segment_ids": segment_ids,
        "segments_path": str(segments_path),
        "n_segments": n_segments,
        "unknown_tokens": unk,
    }
    extra = {"shard": info} if info else None
    recorder = StreamMeta(extra_meta=extra)
    stores = [StoreConsumer(out_dir, shard_mb=shard_mb, extra_meta=extra)] if out_dir is not None else []
    class_sums = NormClassSums() if norms else None
    if norms_out is not None:
        stores.append(StoreConsumer(norms_out, kind="norm", meta=NORM_STORE_META, shard_mb=shard_mb, extra_meta=extra))
    summary = stream_maps(examples, model, [recorder, *stores, *([class_sums] if class_sums else []), *consumers],
                          batch_size=batch_size, max_seq_len=max_seq_len, device=dev, meta=meta, norms=norms,
                          progress_every=progress_every, workers=workers, schedule=schedule)
    summary.update({"out_dir": None if out_dir is None else str(out_dir), "model": model_spec,
                    "revision": revision, "segments": str(segments_path), "segment_ids": segment_ids,
                    "n_segments": n_segments, "stores": [str(s.out_dir) for s in stores],
                    "special_tokens": dict(meta["special_tokens"])})
    summary.update(unk_summary(unk, max_unk_rate))
    if class_sums is not None:
        summary["norms"] = class_sums.summary(norms_out if norms_out is not None else "not stored")
    if info is not None:
        summary["shard"] = info
    if info is not None or out_dir is None:
        summary["store_meta"] = recorder.meta()
    return summary


def add_shard_fields(summary: dict[str, Any], info: dict[str, Any], out_dir) -> None:
    """``shard`` and ``store_meta`` (the written store's meta.json) in a shard's extraction summary."""
    with open(Path(out_dir) / "meta.json", encoding="utf-8") as fh:
        store_meta = json.load(fh)
    summary["shard"] = info
    summary["store_meta"] = store_meta


def resolve_options(cls, options, overrides: dict[str, Any]):
    """``options`` (default: ``cls()``; the run settings of a step, e.g.
    :class:`~bertlook.attention.extract_words.WordExtractionOptions`,
    :class:`~bertlook.analyses.gradients.GradientOptions`) with the keyword ``overrides`` of the caller applied."""
    if options is None:
        options = cls()
    elif not isinstance(options, cls):
        raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
    return dataclasses.replace(options, **overrides) if overrides else options
