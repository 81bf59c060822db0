"""Word-level extraction (``extract-words``).

:func:`extract_word_attention` reads a CoNLL-U treebank (``bertlook.data.treebank.read_conllu``), runs
the model through :func:`bertlook.attention.extraction.extract_to_store`, turns each sentence's token-level
map into a word-level one (:mod:`bertlook.attention.alignment`: words -> subword tokens) and streams them
into an attention store (``level: "word"``) whose records carry the gold ``heads``/``rels``/``upos``/``xpos``;
:class:`WordExtractionOptions` holds the run's settings.

Definitions: docs/definitions.md#word-level-attention
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Iterable

from bertlook.attention.alignment import (ALIGNMENT_ERROR_REASONS, FROM_SPLIT_MODES, Alignment, WordConversion,
                                          align_words)
from bertlook.attention.extraction import add_shard_fields, extract_to_store, resolve_options
from bertlook.attention.guards import (DEFAULT_MAX_UNK_RATE, aligned_unk_words, check_max_unk_rate, check_unk_rate,
                                       unk_statistics, unk_summary)
from bertlook.attention.random_init import KEEP_CHOICES, load_random_init_model
from bertlook.data.treebank import read_conllu
from bertlook.errors import BertlookError, check_choice
from bertlook.pipeline.sharding import shard_info

#: ``--text``: ``spaces`` = the words joined by single spaces (default); ``original`` = the sentence as
#: written, rebuilt from the treebank's ``SpaceAfter=No`` flags (no space after such a word).
TEXT_MODES = ("spaces", "original")
MAX_LISTED_ERRORS = 20


# --------------------------------------------------------------------------------------------
# word-level extraction

def _read_treebank(path) -> tuple[list, dict[str, int]]:
    """Sentences of a CoNLL-U file (``bertlook.data.treebank.read_conllu``) and the reader's counts."""
    counts: dict[str, int] = {}
    return list(read_conllu(path, allow_empty=True, counts=counts)), counts


def sentence_id(sent, index: int) -> str:
    """The store id of a treebank sentence: its ``sent_id``, else its 1-based position in the file."""
    sid = getattr(sent, "sent_id", None)
    return str(sid) if sid not in (None, "") else str(index + 1)


def _sentence_fields(sent, index: int, path) -> dict[str, Any]:
    sid = sentence_id(sent, index)
    words = list(sent.words)
    fields = {"words": words}
    for name in ("heads", "rels", "upos", "xpos"):
        value = getattr(sent, name, None)
        value = list(value) if value is not None else None
        if value is not None and len(value) != len(words):
            raise BertlookError(f"{path}: sentence {sid!r}: {len(value)} {name} for {len(words)} words")
        fields[name] = value
    if fields["heads"] is not None:
        fields["heads"] = [int(h) for h in fields["heads"]]
    fields["id"] = sid
    return fields


def check_text_mode(text: str) -> str:
    """``text`` when it is one of :data:`TEXT_MODES`, else a :class:`BertlookError`."""
    check_choice("--text", text, TEXT_MODES)
    return text


def _space_after(sent) -> list[bool] | None:
    """The sentence's ``space_after`` flags (``Sentence.space_after``), None when it has none (all True)."""
    flags = getattr(sent, "space_after", None)
    return None if flags is None else [bool(f) for f in flags]


def prepare_word_examples(sentences: Iterable, tokenizer, *, path: Any = "<sentences>", text: str = "spaces",
                          reasons: dict[str, int] | None = None,
                          reason_by_id: dict[str, str] | None = None) -> tuple[list, dict, list, list[str]]:
    """Align treebank sentences (objects with ``sent_id, words, heads, rels, upos, xpos`` and optionally
    ``space_after``).

    ``text``: ``spaces`` (the words joined by single spaces) or ``original`` (the sentence as written:
    no space after a word whose ``space_after`` flag is False; a sentence without flags is read as
    spaces everywhere); see :func:`align_words`.

    Returns ``(examples, alignments, excluded_ids, errors)``: ``examples`` are the
    ``(record, input_ids, token_type_ids)`` triples for :func:`~bertlook.attention.extraction.extract_to_store`
    (record: ``id``, wordpiece ``tokens`` and the gold fields), ``alignments`` maps id ->
    :class:`Alignment`; sentences that cannot be aligned are left out, their ids listed in
    ``excluded_ids`` and their messages in ``errors``. ``reasons`` (when given) receives the number of
    excluded sentences per :data:`ALIGNMENT_ERROR_REASONS` key (every key present, 0 when none),
    ``reason_by_id`` (when given) each excluded id's reason.
    """
    check_text_mode(text)
    if reasons is not None:
        for key in ALIGNMENT_ERROR_REASONS:
            reasons.setdefault(key, 0)
    examples: list = []
    alignments: dict[str, Alignment] = {}
    excluded_ids: list[str] = []
    errors: list[str] = []
    seen: set[str] = set()
    for index, sent in enumerate(sentences):
        fields = _sentence_fields(sent, index, path)
        sid = fields["id"]
        if sid in seen:
            raise BertlookError(f"{path}: duplicate sentence id {sid!r}")
        seen.add(sid)
        flags = _space_after(sent) if text == "original" else None
        try:
            al = align_words(fields["words"], tokenizer, sent_id=sid, space_after=flags)
        except BertlookError as err:
            reason = getattr(err, "reason", "other")
            excluded_ids.append(sid)
            errors.append(str(err))
            if reasons is not None:
                reasons[reason] = reasons.get(reason, 0) + 1
            if reason_by_id is not None:
                reason_by_id[sid] = reason
            continue
        record = {"id": sid, "tokens": al.tokens, **{k: v for k, v in fields.items() if k not in ("id",)}}
        examples.append((record, al.input_ids, [0] * al.n_tokens))
        alignments[sid] = al
    return examples, alignments, excluded_ids, errors


def _word_record(record: dict[str, Any], al: Alignment) -> dict[str, Any]:
    """The stored word-level record of a treebank sentence's token-level ``record``."""
    return {
        "id": record["id"],
        "tokens": [al.tokens[0], *record["words"], al.tokens[-1]],
        "heads": record.get("heads"),
        "rels": record.get("rels"),
        "upos": record.get("upos"),
        "xpos": record.get("xpos"),
        "n_wordpieces": al.n_tokens,
        "split_words": al.split_words,
    }


def make_word_transform(alignments: dict[str, Alignment], from_split: str = "mean") -> WordConversion:
    """The ``transform`` of ``extract_to_store``: token-level record + maps -> word-level record + maps (the maps
    converted on the model's device, :class:`~bertlook.attention.alignment.WordConversion`)."""
    return WordConversion(alignments, _word_record, from_split)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WordExtractionOptions:
    """The settings of a word-level extraction, shared by :func:`extract_word_attention` and
    :func:`extract_word_attention_from_sentences`.

    ``revision``: hub revision of the model; ``batch_size``: sentences per batch; ``max_seq_len``:
    sentences with more tokens (incl. the special tokens) are excluded and counted; ``device``:
    ``auto``, ``cpu`` or ``cuda``; ``model_dtype``: ``float32`` or ``auto`` (the checkpoint's dtype on a GPU,
    :func:`bertlook.attention.modeling.load_model`); ``from_split``: :data:`FROM_SPLIT_MODES` (attention FROM a split
    word); ``shard_mb``: size of the store's shard files; ``progress_every``: 0 turns the progress
    bar off; ``max_unk_rate``: largest allowed fraction of unknown tokens (None: the default 0.05,
    :data:`bertlook.attention.guards.DEFAULT_MAX_UNK_RATE`); ``random_init_seed``: the
    random-init baseline's seed (None: the model itself; see
    :func:`extract_word_attention_from_sentences`); ``random_init_keep``: its reading
    (``embeddings`` or ``none``); ``text``: :data:`TEXT_MODES` (how a sentence is written for the
    tokenizer). Build it once and pass it to every call (each shard gets the same options); checked
    by :meth:`check` when a run starts.
    """

    revision: str | None = None
    batch_size: int = 16
    max_seq_len: int = 128
    device: str = "auto"
    model_dtype: str = "float32"
    from_split: str = "mean"
    shard_mb: float = 256
    progress_every: int = 256
    max_unk_rate: float | None = None
    random_init_seed: int | None = None
    random_init_keep: str = "embeddings"
    text: str = "spaces"

    def check(self) -> float:
        """Raise :class:`BertlookError` on an unknown mode or unknown-token rate; return the rate in force."""
        check_choice("--from-split", self.from_split, FROM_SPLIT_MODES)
        check_text_mode(self.text)
        check_choice("--random-init-keep", self.random_init_keep, KEEP_CHOICES)
        return check_max_unk_rate(DEFAULT_MAX_UNK_RATE if self.max_unk_rate is None else self.max_unk_rate)


@dataclasses.dataclass
class _WordRun:
    """What :func:`extract_word_attention_from_sentences` prepares once for every model it runs."""

    examples: list
    alignments: dict
    bad_ids: list
    bad_msgs: list
    reasons: dict
    unk: dict
    max_unk_rate: float
    n_sentences: int
    n_words: int
    n_split: int
    special: dict
    info: dict | None
    src: Any
    model_spec: str
    options: WordExtractionOptions
    device: Any
    summary_extra: dict | None


def _shard_part(sentences: list, shard: tuple[int, int], examples: list, bad_ids: list, bad_msgs: list):
    """``(info, examples, bad_ids, bad_msgs)`` of shard ``shard=(i, k)`` of the sentences only."""
    info = shard_info(len(sentences), *shard)
    mine = {sentence_id(sent, k) for k, sent in enumerate(sentences) if info["start"] <= k < info["stop"]}
    examples = [ex for ex in examples if ex[0]["id"] in mine]
    kept_bad = [(sid, msg) for sid, msg in zip(bad_ids, bad_msgs) if sid in mine]
    return info, examples, [sid for sid, _ in kept_bad], [msg for _, msg in kept_bad]


def _prepare_word_run(sentences: list, tokenizer, model_spec: str, opts: WordExtractionOptions, *,
                      max_unk_rate: float, device, src: Any, shard: tuple[int, int] | None,
                      summary_extra: dict[str, Any] | None) -> _WordRun:
    """Align the sentences, check the unknown-token rate over all of them, keep the shard's and count
    the words of those that will be stored."""
    reason_by_id: dict[str, str] = {}
    examples, alignments, bad_ids, bad_msgs = prepare_word_examples(sentences, tokenizer, path=src, text=opts.text,
                                                                    reason_by_id=reason_by_id)
    unk = unk_statistics(examples, tokenizer, words_of=aligned_unk_words(alignments))
    check_unk_rate(unk, max_unk_rate, model_spec, what=f"sentences of {src}", step="extract-words")
    n_sentences = len(sentences)
    info = None
    if shard is not None:
        info, examples, bad_ids, bad_msgs = _shard_part(sentences, shard, examples, bad_ids, bad_msgs)
        unk = unk_statistics(examples, tokenizer, words_of=aligned_unk_words(alignments))
        n_sentences = info["stop"] - info["start"]
        print(f"extract-words: shard {info['index']}/{info['count']}: sentences {info['start'] + 1}..{info['stop']} "
              f"of {len(sentences)}", file=sys.stderr, flush=True)

    reasons = {key: 0 for key in ALIGNMENT_ERROR_REASONS}  # over this run's (shard's) sentences
    for sid in bad_ids:
        reasons[reason_by_id[sid]] += 1

    # word statistics over the sentences that will be stored (over-long ones are excluded below)
    kept = [alignments[rec["id"]] for rec, ids, _ in examples if len(ids) <= opts.max_seq_len]
    n_words = sum(al.n_words for al in kept)
    n_split = sum(al.split_words for al in kept)
    if kept:
        special = {"cls": kept[0].tokens[0], "sep": kept[0].tokens[-1]}
    else:
        special = {"cls": tokenizer.cls_token, "sep": tokenizer.sep_token}
    return _WordRun(examples=examples, alignments=alignments, bad_ids=bad_ids, bad_msgs=bad_msgs, reasons=reasons,
                    unk=unk, max_unk_rate=max_unk_rate, n_sentences=n_sentences, n_words=n_words, n_split=n_split,
                    special=special, info=info, src=src, model_spec=model_spec, options=opts, device=device,
                    summary_extra=summary_extra)


def extract_word_attention_from_sentences(
    sentences: Iterable,
    model_spec: str,
    out_dir,
    options: WordExtractionOptions | None = None,
    *,
    shard: tuple[int, int] | None = None,
    norms_out=None,
    random_init_out=None,
    summary_extra: dict[str, Any] | None = None,
    source: Any = None,
    **overrides: Any,
) -> dict[str, Any]:
    """:func:`extract_word_attention` on already-read sentences (``source`` names them in errors and meta).

    ``options``: the run's :class:`WordExtractionOptions` (default: its defaults); keyword
    ``overrides`` (``batch_size=2``, ...; the fields of :class:`WordExtractionOptions`) replace single
    fields of it.

    ``random_init_out``: run the model into ``out_dir`` and then, on the same prepared sentences, the random-init
    baseline (``random_init_seed``) into ``random_init_out``; its summary is ``summary["random_init_run"]``.
    ``random_init_seed`` (without ``random_init_out``): run the random-init baseline of the probes instead of the model itself:
    the model re-initialised in memory by :func:`bertlook.attention.random_init.load_random_init_model` (the
    weights of ``bertlook random-init --seed SEED``, bit for bit); ``meta.json`` and the summary then
    hold ``random_init`` (what ``bertlook_random_init.json`` records). ``random_init_keep``: its reading,
    ``embeddings`` (the pretrained word and position embeddings kept, the paper's) or ``none`` (every
    weight re-initialised); ignored without ``random_init_seed``.

    ``shard=(i, k)``: only shard ``i`` of ``k``, the contiguous range
    :func:`bertlook.pipeline.sharding.shard_range` of the sentences. Every sentence is still aligned and the
    unknown-token check is made on all of them (the same decision whatever ``k``); counts in the
    summary and ``meta.json`` are the shard's own, and the summary also holds ``shard`` and
    ``store_meta`` for ``bertlook merge-stores``.

    ``norms_out``: also write the word-level norm-based maps (Kobayashi et al. 2020, the same
    token -> word conversion applied to the row-normalised token maps) of the same pass to a store
    there (:func:`bertlook.attention.extraction.extract_to_store` ``norms_out_dir``; summary ``norms``).

    ``text``: how the sentence is written for the tokenizer (:data:`TEXT_MODES`, :func:`align_words`):
    ``spaces`` (words joined by single spaces; default) or ``original`` (``SpaceAfter=No`` respected);
    recorded in ``meta.json`` and the summary (``text``). Unalignable sentences are counted per reason
    (summary ``excluded_alignment_reasons``; ``excluded_straddling_token``: a token over two words).
    ``summary_extra``: entries added to the summary.
    """
    # lazy: modeling imports torch, which the extract-words and coref-extract parsers do not need
    from bertlook.attention.modeling import load_model, load_tokenizer, pick_device, resolve_model

    opts = resolve_options(WordExtractionOptions, options, overrides)
    max_unk_rate = opts.check()
    src = source if source is not None else "<sentences>"
    resolved = resolve_model(model_spec, opts.revision)
    dev = pick_device(opts.device)
    tokenizer = load_tokenizer(resolved)
    prep = _prepare_word_run(list(sentences), tokenizer, model_spec, opts, max_unk_rate=max_unk_rate, device=dev,
                             src=src, shard=shard, summary_extra=summary_extra)
    seed, keep = opts.random_init_seed, opts.random_init_keep
    if random_init_out is None:
        if seed is None:
            return _extract_words_with(prep, load_model(resolved, dev, model_dtype=opts.model_dtype), None, resolved, out_dir, norms_out)
        model, random_init = load_random_init_model(resolved, int(seed), dev, keep=keep)
        return _extract_words_with(prep, model, random_init, resolved, out_dir, norms_out)
    if seed is None:
        raise BertlookError("--random-init-out needs --random-init-seed (the random-init model's seed)")
    summary = _extract_words_with(prep, load_model(resolved, dev, model_dtype=opts.model_dtype), None, resolved, out_dir, norms_out)
    model, random_init = load_random_init_model(resolved, int(seed), dev, keep=keep)
    summary["random_init_run"] = _extract_words_with(prep, model, random_init, resolved, random_init_out, None)
    return summary


def _extract_words_with(p: _WordRun, model, random_init, resolved, out_dir, norms_out) -> dict[str, Any]:
    """One model's word-level maps of the prepared sentences ``p`` into ``out_dir`` (and ``norms_out``)."""
    o = p.options
    meta = {
        "model": resolved.provenance(model.config),
        "special_tokens": p.special,
        "from_split": o.from_split,
        "treebank": str(p.src),
        "n_sentences": p.n_sentences,
        "n_words": p.n_words,
        "n_split_words": p.n_split,
        "split_word_fraction": round(p.n_split / p.n_words, 6) if p.n_words else None,
        "text": o.text,
        "excluded": {"alignment": len(p.bad_ids), "alignment_ids": p.bad_ids},
        "excluded_alignment_reasons": p.reasons,
        "token_type_ids": "zeros",
        "unknown_tokens": p.unk,
    }
    if random_init is not None:
        meta["random_init"] = random_init
    # workers=1: the store writers run between batches and the model keeps both cores; a helper thread beside the
    # model's two measured 2.5% slower (BERT-base shape, the scale check's dev split: 28.9-29.2 vs 28.2-28.4 s)
    summary = extract_to_store(p.examples, model, out_dir, batch_size=o.batch_size, max_seq_len=o.max_seq_len,
                               device=p.device, level="word", meta=meta, progress_every=o.progress_every,
                               shard_mb=o.shard_mb, transform=make_word_transform(p.alignments, o.from_split),
                               extra_meta={"shard": p.info} if p.info else None, norms_out_dir=norms_out,
                               step="extract-words", workers=1)
    summary.update({
        "treebank": str(p.src),
        "model": p.model_spec,
        "revision": o.revision,
        "from_split": o.from_split,
        "n_sentences": p.n_sentences,
        "n_extracted": summary["n_examples"],
        "excluded_too_long_ids": summary["excluded_ids"],
        "excluded_alignment": len(p.bad_ids),
        "excluded_alignment_ids": p.bad_ids,
        "excluded_alignment_reasons": p.reasons,
        "excluded_straddling_token": p.reasons["straddling_token"],
        "alignment_errors": p.bad_msgs[:MAX_LISTED_ERRORS],
        "text": o.text,
        "n_words": p.n_words,
        "n_split_words": p.n_split,
        "split_word_fraction": meta["split_word_fraction"],
        "special_tokens": p.special,
        "level": "word",
    })
    if random_init is not None:
        summary["random_init"] = random_init
    summary.update(unk_summary(p.unk, p.max_unk_rate))
    if p.summary_extra:
        summary.update(p.summary_extra)
    if p.info is not None:
        add_shard_fields(summary, p.info, out_dir)
    return summary


def extract_word_attention(
    conllu_path,
    model_spec: str,
    out_dir,
    options: WordExtractionOptions | None = None,
    *,
    shard: tuple[int, int] | None = None,
    norms_out=None,
    random_init_out=None,
    summary_extra: dict[str, Any] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Word-level attention of every sentence of a CoNLL-U treebank, streamed into a store at ``out_dir``.

    ``options``: the run's :class:`WordExtractionOptions` (default: its defaults); keyword
    ``overrides`` (the fields of :class:`WordExtractionOptions`) replace single fields of it.
    The model runs on ``[CLS] w1 .. wn [SEP]`` (single segment, token type ids 0) in length-sorted
    batches; sentences with more than ``max_seq_len`` tokens and sentences that cannot be aligned
    are excluded, counted and their ids listed (summary and ``meta.json`` ``excluded``). The run
    stops before the model is loaded when more than ``max_unk_rate`` (default 0.05) of the tokens
    are the unknown token (:func:`bertlook.attention.guards.check_unk_rate`). Store
    records: ``id`` (sent_id), ``tokens`` = ``[CLS, *words, SEP]``, gold ``heads``/``rels``/
    ``upos``/``xpos``, ``n_wordpieces``, ``split_words``; maps ``[L, H, W+2, W+2]`` (float16).
    Returns the summary dict (counts, split-word fraction, tokens/s, device, ...). ``shard=(i, k)``:
    only the i-th of k contiguous ranges of the sentences (see :func:`extract_word_attention_from_sentences`).
    ``random_init_seed``: the maps of the model re-initialised in memory (the probes' random-init baseline);
    ``random_init_keep``: which reading of it (``embeddings``, the default, or ``none``).
    ``norms_out``: also the word-level norm-based maps, in a second store there.
    ``text``: ``spaces`` (words joined by single spaces) or ``original`` (the sentence as written, from the
    treebank's ``SpaceAfter=No``); see :func:`align_words`. ``random_init_out``: the model's maps and then,
    on the same sentences, the random-init baseline's (``random_init_seed``) there
    (:func:`extract_word_attention_from_sentences`).
    """
    opts = resolve_options(WordExtractionOptions, options, overrides)
    path = Path(conllu_path)
    if not path.is_file():
        raise BertlookError(f"{path}: treebank file not found")
    sentences, read_counts = _read_treebank(path)
    extra = {"treebank_counts": read_counts} if read_counts else {}
    extra.update(summary_extra or {})
    return extract_word_attention_from_sentences(
        sentences, model_spec, out_dir, opts, shard=shard, norms_out=norms_out,
        random_init_out=random_init_out, summary_extra=extra, source=path,
    )
