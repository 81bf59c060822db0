"""Coreference attention extraction (``coref-extract``): CoNLL-2012 parts -> word-level attention
store with the gold mentions.

**Truncation and extraction** (:func:`extract_coref_attention`). Each part is cut to the first
``max_seq_len`` wordpieces including the special tokens: ``[CLS] w1 .. wk [SEP]``, one segment
(token type ids 0), with as many whole words as fit. Mentions ending after word k ("cut") and
mentions starting after it ("outside") are dropped and counted separately; nothing else is dropped.
Words go to the model with PTB bracket escapes undone (``-LRB-`` -> ``(`` ...) and the ``/.``-style
escapes of conversational OntoNotes text unescaped (:func:`model_word`). The maps are converted to
word level exactly as for Table 1 (``bertlook.attention.alignment``: TO a split word = sum, FROM = ``mean`` by
default) and streamed into a word-level attention store whose records carry ``id``
(``<doc id>#<part>``), ``tokens`` (``[CLS], words.., [SEP]``), ``pos``, ``mentions``
(``[start, end, cluster]``, 0-based inclusive word indices, sorted), ``mention_heads``, ``head_pos``,
``head_source`` and the truncation counts, so scoring (:mod:`bertlook.analyses.coref`) needs only
the store.

The reader is :mod:`bertlook.data.conll2012`, the head words :mod:`bertlook.data.coref_mentions`.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

from bertlook.attention.alignment import FROM_SPLIT_MODES, WordConversion, align_words
from bertlook.attention.extraction import extract_to_store
from bertlook.attention.guards import (DEFAULT_MAX_UNK_RATE, aligned_unk_words, check_max_unk_rate, check_unk_rate,
                                       unk_statistics, unk_summary)
from bertlook.data.conll2012 import (
    MAX_LISTED,
    Document,
    Mention,
    expand_conll_paths,
    new_read_counts,
    read_conll_files,
)
from bertlook.data.coref_mentions import (
    COLUMNS,
    HEAD_RULES,
    HEAD_SOURCES,
    antecedent_structure,
    mention_heads,
    mention_type,
)
from bertlook.errors import BertlookError, check_choice
from bertlook.io_utils import sha256_file

# torch / transformers (bertlook.attention.modeling, .extraction, .extract_words) are imported inside
# extract_coref_attention and the tokenizer helpers only: `bertlook coref` (scoring) runs in the
# analysis env (envs/analysis.yaml), which has no torch; `coref-extract` runs in envs/torch.yaml.

# PTB escapes in OntoNotes word columns -> the characters a model should see.
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}
_SLASH_ESCAPE = re.compile(r"^/([.?!\-])$")


# --------------------------------------------------------------------------------------------------
# truncation and records
# --------------------------------------------------------------------------------------------------


def model_word(word: str) -> str:
    """The word as the model should see it: PTB bracket escapes and ``/.``-style escapes undone."""
    if word in _PTB_ESCAPES:
        return _PTB_ESCAPES[word]
    m = _SLASH_ESCAPE.match(word)
    return m.group(1) if m else word


def truncation_point(piece_counts: Sequence[int], max_seq_len: int, n_special: int = 2) -> int:
    """Number k of leading words whose wordpieces plus ``n_special`` fit in ``max_seq_len``."""
    budget = int(max_seq_len) - int(n_special)
    total = 0
    for k, c in enumerate(piece_counts):
        if total + int(c) > budget:
            return k
        total += int(c)
    return len(piece_counts)


def split_mentions(mentions: Sequence[Mention], n_words: int) -> tuple[list[int], list[int], list[int]]:
    """Indices of mentions kept (end < n_words), cut (start < n_words <= end), outside (start >= n_words)."""
    kept, cut, outside = [], [], []
    for i, m in enumerate(mentions):
        if m.end < n_words:
            kept.append(i)
        elif m.start < n_words:
            cut.append(i)
        else:
            outside.append(i)
    return kept, cut, outside


def coref_record(doc: Document, n_words: int | None = None, *, head_rule: str = "tree",
                 cls: str = "[CLS]", sep: str = "[SEP]",
                 heads: list[tuple[int, str]] | None = None) -> dict[str, Any]:
    """Word-level store record of ``doc`` truncated to its first ``n_words`` words (default: all).

    Fields: ``id``, ``doc_id``, ``part``, ``source`` (``file:line``), ``tokens`` = ``[cls, words.., sep]``
    (model words, :func:`model_word`), ``pos``, ``mentions`` (``[start, end, cluster]``), ``mention_heads``,
    ``head_pos``, ``head_source``, ``n_words_total``, ``truncated``, ``mentions_cut``,
    ``mentions_outside``, ``tree_error``.
    """
    k = len(doc.words) if n_words is None else int(n_words)
    heads = mention_heads(doc, head_rule) if heads is None else heads
    kept, cut, outside = split_mentions(doc.mentions, k)
    mentions = [doc.mentions[i] for i in kept]
    h = [heads[i] for i in kept]
    return {
        "id": doc.id,
        "doc_id": doc.doc_id,
        "part": doc.part,
        "source": f"{doc.source}:{doc.line}",
        "tokens": [cls, *(model_word(w) for w in doc.words[:k]), sep],
        "pos": list(doc.pos[:k]),
        "mentions": [[m.start, m.end, m.cluster] for m in mentions],
        "mention_heads": [x for x, _ in h],
        "head_pos": [doc.pos[x] for x, _ in h],
        "head_source": [s for _, s in h],
        "n_words_total": len(doc.words),
        "truncated": k < len(doc.words),
        "mentions_cut": len(cut),
        "mentions_outside": len(outside),
        "tree_error": doc.tree_error,
    }


def piece_counts(words: Sequence[str], tokenizer, *, sent_id: str) -> tuple[list[int], int]:
    """Wordpieces per word and number of special tokens (via ``bertlook.attention.alignment.align_words``)."""
    al = align_words(words, tokenizer, sent_id=sent_id)
    counts = [e - s for s, e in al.token_spans]
    return counts, al.n_tokens - sum(counts)


def prepare_coref_examples(docs: Sequence[Document], tokenizer, *, max_seq_len: int = 128,
                           head_rule: str = "tree") -> tuple[list, dict, dict[str, Any]]:
    """Truncate and align every part: ``(examples, alignments, counts)``.

    ``examples``: ``(record, input_ids, token_type_ids)`` for ``extract_to_store`` (record: the
    :func:`coref_record` fields, ``tokens`` = the wordpieces); ``alignments``: id -> Alignment of the
    kept words. Parts whose words cannot be aligned, or whose first word alone does not fit, are left
    out and counted with their ids.
    """
    check_choice("head rule", head_rule, HEAD_RULES)
    if max_seq_len < 3:
        raise BertlookError(f"max_seq_len must be >= 3 ([CLS] word [SEP]), got {max_seq_len}")
    c: dict[str, Any] = {
        "parts_in": len(docs), "parts_extracted": 0, "parts_truncated": 0,
        "parts_excluded_alignment": 0, "parts_excluded_alignment_ids": [], "alignment_errors": [],
        "parts_excluded_empty": 0, "parts_excluded_empty_ids": [],
        "words_total": 0, "words_kept": 0, "mentions_in": 0, "mentions_kept": 0,
        "mentions_dropped_cut": 0, "mentions_dropped_outside": 0, "mentions_in_excluded_parts": 0,
        "head_source": {s: 0 for s in HEAD_SOURCES},
        "mentions_with_antecedents": {t: 0 for t in COLUMNS},
        "retokenized_shorter": 0,
    }
    examples: list = []
    alignments: dict[str, Any] = {}
    for doc in docs:
        c["mentions_in"] += len(doc.mentions)
        c["words_total"] += len(doc.words)
        words = [model_word(w) for w in doc.words]
        prefix = words[: max_seq_len - 2]  # every word is at least one wordpiece
        try:
            counts, n_special = piece_counts(prefix, tokenizer, sent_id=doc.id)
            k = truncation_point(counts, max_seq_len, n_special)
            al = align_words(words[:k], tokenizer, sent_id=doc.id) if k else None
            while al is not None and al.n_tokens > max_seq_len:  # a tokenizer whose prefix splits differ
                k -= 1
                c["retokenized_shorter"] += 1
                al = align_words(words[:k], tokenizer, sent_id=doc.id) if k else None
        except BertlookError as err:
            c["parts_excluded_alignment"] += 1
            c["parts_excluded_alignment_ids"].append(doc.id)
            if len(c["alignment_errors"]) < MAX_LISTED:
                c["alignment_errors"].append(f"{doc.where}: {err}")
            c["mentions_in_excluded_parts"] += len(doc.mentions)
            continue
        if al is None:
            c["parts_excluded_empty"] += 1
            c["parts_excluded_empty_ids"].append(doc.id)
            c["mentions_in_excluded_parts"] += len(doc.mentions)
            continue
        record = coref_record(doc, k, head_rule=head_rule, cls=al.tokens[0], sep=al.tokens[-1])
        c["parts_extracted"] += 1
        c["parts_truncated"] += int(record["truncated"])
        c["words_kept"] += k
        c["mentions_kept"] += len(record["mentions"])
        c["mentions_dropped_cut"] += record["mentions_cut"]
        c["mentions_dropped_outside"] += record["mentions_outside"]
        for s in record["head_source"]:
            c["head_source"][s] += 1
        for i in antecedent_structure(record["mentions"])[1]:
            c["mentions_with_antecedents"]["all"] += 1
            c["mentions_with_antecedents"][mention_type(record["head_pos"][i])] += 1
        record["n_wordpieces"] = al.n_tokens
        record["split_words"] = al.split_words
        word_tokens = record["tokens"]
        record["tokens"] = al.tokens
        record["words"] = word_tokens[1:-1]
        examples.append((record, al.input_ids, [0] * al.n_tokens))
        alignments[doc.id] = al
    return examples, alignments, c


def _coref_record(record: dict[str, Any], al) -> dict[str, Any]:
    """The stored word-level record of a coreference part's wordpiece ``record``."""
    out = {k: v for k, v in record.items() if k != "words"}
    out["tokens"] = [al.tokens[0], *record["words"], al.tokens[-1]]
    return out


def make_coref_transform(alignments: dict[str, Any], from_split: str = "mean") -> WordConversion:
    """``extract_to_store`` hook: wordpiece record + maps -> word-level record + ``[L, H, W+2, W+2]`` maps (converted
    on the model's device, :class:`~bertlook.attention.alignment.WordConversion`)."""
    return WordConversion(alignments, _coref_record, from_split)


def coref_store_meta(provenance: dict[str, Any], special: dict[str, Any], coref_meta: dict[str, Any],
                     unk: dict[str, Any]) -> dict[str, Any]:
    """The store meta of ``coref-extract``: the model ``provenance``, the ``special`` tokens, the run's
    ``coref_meta`` (inputs, settings, reader and truncation counts), the unknown-token counts ``unk`` and the
    parts excluded from the store (alignment, empty)."""
    trunc = coref_meta["truncation"]
    return {
        "model": provenance,
        "special_tokens": special,
        "from_split": coref_meta["from_split"],
        "token_type_ids": "zeros",
        "kind": "coref",
        "coref": coref_meta,
        "unknown_tokens": unk,
        "excluded": {
            "alignment": trunc["parts_excluded_alignment"], "alignment_ids": trunc["parts_excluded_alignment_ids"],
            "empty": trunc["parts_excluded_empty"], "empty_ids": trunc["parts_excluded_empty_ids"],
        },
    }


def extract_coref_attention(
    conll_paths: Sequence[str | os.PathLike],
    model_spec: str,
    out_dir,
    *,
    revision: str | None = None,
    max_seq_len: int = 128,
    from_split: str = "mean",
    head_rule: str = "tree",
    batch_size: int = 16,
    device: str = "auto",
    model_dtype: str = "float32",
    shard_mb: float = 256,
    progress_every: int = 256,
    max_unk_rate: float | None = None,
) -> dict[str, Any]:
    """Read CoNLL-2012 files, truncate every part, and write a word-level attention store at ``out_dir``.

    Returns the summary: the reader's counts (``read``), truncation / exclusion / head-source counts
    (``truncation``), and ``extract_to_store``'s counts (examples, tokens/s, device). The same counts
    go into the store's ``meta.json`` under ``coref``. Stops before the model is loaded when more than
    ``max_unk_rate`` (default 0.05) of the tokens are the unknown token (summary: ``unk_tokens``, ...).
    """
    # lazy: modeling imports torch, which the coref-extract parser does not need
    from bertlook.attention.modeling import load_model, load_tokenizer, pick_device, resolve_model

    check_choice("--from-split", from_split, FROM_SPLIT_MODES)
    check_choice("--head-rule", head_rule, HEAD_RULES)
    max_unk_rate = check_max_unk_rate(DEFAULT_MAX_UNK_RATE if max_unk_rate is None else max_unk_rate)
    files = expand_conll_paths(conll_paths)
    read_counts = new_read_counts()
    docs = read_conll_files(files, counts=read_counts)
    resolved = resolve_model(model_spec, revision)
    dev = pick_device(device)
    tokenizer = load_tokenizer(resolved)
    examples, alignments, trunc = prepare_coref_examples(docs, tokenizer, max_seq_len=max_seq_len,
                                                         head_rule=head_rule)
    unk = unk_statistics(examples, tokenizer, words_of=aligned_unk_words(alignments))
    check_unk_rate(unk, max_unk_rate, model_spec, what="coreference parts", step="coref-extract")
    special = {"cls": tokenizer.cls_token, "sep": tokenizer.sep_token}
    if alignments:
        first = next(iter(alignments.values()))
        special = {"cls": first.tokens[0], "sep": first.tokens[-1]}
    inputs = [{"path": str(f), "sha256": sha256_file(f)} for f in files]
    coref_meta = {"inputs": inputs, "head_rule": head_rule, "from_split": from_split,
                  "max_seq_len": int(max_seq_len), "read": read_counts, "truncation": trunc}
    model = load_model(resolved, dev, model_dtype=model_dtype)
    meta = coref_store_meta(resolved.provenance(model.config), special, coref_meta, unk)
    summary = extract_to_store(examples, model, out_dir, batch_size=batch_size, max_seq_len=max_seq_len,
                               device=dev, level="word", meta=meta, progress_every=progress_every,
                               shard_mb=shard_mb, transform=make_coref_transform(alignments, from_split),
                               step="coref-extract")
    summary.update(unk_summary(unk, max_unk_rate))
    summary.update({
        "model": model_spec,
        "revision": revision,
        "inputs": inputs,
        "head_rule": head_rule,
        "from_split": from_split,
        "read": read_counts,
        "truncation": trunc,
        "special_tokens": special,
        "level": "word",
    })
    return summary
