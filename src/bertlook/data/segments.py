"""Documents -> paper-style segments, or document windows for long contexts (``bertlook segments``).

The paper (Clark et al. 2019, Section 3) ran BERT over 1000 Wikipedia segments ``[CLS] A [SEP] B [SEP]``
of at most 128 wordpieces, made the way BERT's ``create_pretraining_data.py`` makes its pre-training
examples, without the random "next sentence": sentences of one document are collected into a chunk
until it holds ``max_seq_len - 3`` wordpieces, the chunk is split at a random sentence boundary into
A and B, and over-long pairs are cut one token at a time from a random end of the longer part (layout
``pair``, the default). Layout ``window`` (long contexts, decoders at up to their context length): a document's
consecutive sentences up to ``max_seq_len`` less the template's special tokens, as one part (no A/B split, no
random truncation; the last sentence is cut at the end).

Steps:
  * :func:`bertlook.data.documents.iter_documents` reads the documents of a MediaWiki dump (markup stripped,
    prose paragraphs kept, split into usable sentences; :mod:`bertlook.data.hf_corpus` reads them from a
    Hugging Face ``datasets`` corpus instead);
  * :func:`bertlook.data.sentences.split_sentences` splits text in the corpus language (spaCy's
    rule-based ``sentencizer``, or bertlook's rule-based splitter; deterministic);
  * :func:`build_segments` makes the segments; :func:`write_segments` / :func:`read_segments` store
    them as JSONL (format in docs/DESIGN.md);
  * :func:`run_segments_step` is ``bertlook segments`` without the command line: documents -> segments and
    the summary JSON (:class:`SegmentsStepResult`; settings in :class:`SegmentOptions`).

Everything excluded is counted (``counts`` / the summary JSON).
"""

from __future__ import annotations

import functools
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from bertlook.data.documents import Document, count_text, iter_documents
from bertlook.data.sentences import check_language, resolve_splitter
from bertlook.data.sentences import split_sentences  # noqa: F401 (re-exported: the old name of the splitter)
from bertlook.data.token_template import special_template
from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path
from bertlook.pipeline.config import resolve_data_path

SEGMENT_KEYS = ("id", "doc", "doc_index", "text_a", "text_b", "tokens", "segment_ids", "truncated")
REQUIRED_SEGMENT_KEYS = ("id", "doc", "text_a", "text_b", "tokens", "segment_ids", "truncated")
CLS_LIKE = frozenset({"[CLS]", "<s>", "<cls>", "[cls]"})
PAIR, WINDOW = "pair", "window"
LAYOUTS = (PAIR, WINDOW)  # a segment's "layout": [CLS] A [SEP] B [SEP] (the paper's), or one document window
# a probe of two sentences: does the tokenizer put the space between them into the second one's first token?
_JOIN_PROBE = ("It was here.", "It was there.")

# ----------------------------------------------------------------------------------- segments

def _truncate_seq_pair(tokens_a: list[str], tokens_b: list[str], max_num_tokens: int,
                       rng: random.Random) -> bool:
    """BERT's ``truncate_seq_pair``: cut the longer side (B on a tie) at a random end, in place."""
    truncated = False
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()
        truncated = True
    return truncated


TOKENIZER_TEMPLATE = "tokenizer"  # a segment's "template": the tokenizer's own, not [CLS] A [SEP] B [SEP]


@dataclass(frozen=True)
class SegmentTemplate:
    """How a segment wraps its two halves A and B: the paper's ``[CLS] A [SEP] B [SEP]`` (a tokenizer with a
    CLS and a SEP token: BERT, RoBERTa, XLM-R), or the tokenizer's own ``prefix A B suffix`` (a decoder-only
    model's tokenizer: ``<s> A B`` for Llama, ``A B`` for GPT-2, Pythia, Qwen2;
    :func:`bertlook.data.token_template.special_template`)."""

    paper: bool
    prefix: tuple[str, ...]
    suffix: tuple[str, ...]
    sep: str | None = None

    @property
    def n_special(self) -> int:
        return 3 if self.paper else len(self.prefix) + len(self.suffix)

    def wrap(self, tokens_a: list[str], tokens_b: list[str]) -> tuple[list[str], list[int]]:
        """``(tokens, segment_ids)`` of a segment: ids 0 for the prefix and A (with its [SEP]), 1 for B and the rest."""
        if self.paper:
            cls = self.prefix[0]
            return ([cls, *tokens_a, self.sep, *tokens_b, self.sep],
                    [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1))
        return ([*self.prefix, *tokens_a, *tokens_b, *self.suffix],
                [0] * (len(self.prefix) + len(tokens_a)) + [1] * (len(tokens_b) + len(self.suffix)))

    def n_special_for(self, layout: str) -> int:
        """The special tokens of one segment of ``layout``: a window has one part (``[CLS] W [SEP]``: 2)."""
        if layout == WINDOW and self.paper:
            return 2
        return self.n_special

    def wrap_window(self, tokens: list[str]) -> tuple[list[str], list[int]]:
        """``(tokens, segment_ids)`` of a window: ``[CLS] W [SEP]`` or ``prefix W suffix``, every id 0."""
        out = [self.prefix[0], *tokens, self.sep] if self.paper else [*self.prefix, *tokens, *self.suffix]
        return out, [0] * len(out)

    def describe(self, layout: str = PAIR) -> str:
        """The template in words: ``[CLS] A [SEP] B [SEP]``, ``<s> A B``; a window's ``[CLS] W [SEP]``, ``<s> W``."""
        if self.paper:
            cls = self.prefix[0]
            return f"{cls} W {self.sep}" if layout == WINDOW else f"{cls} A {self.sep} B {self.sep}"
        return " ".join([*self.prefix, *(["W"] if layout == WINDOW else ["A", "B"]), *self.suffix])


def segment_template(tokenizer) -> SegmentTemplate:
    """The :class:`SegmentTemplate` of ``tokenizer``: the paper's when it has a CLS and a SEP token, else its own."""
    cls_token, sep_token = getattr(tokenizer, "cls_token", None), getattr(tokenizer, "sep_token", None)
    if cls_token and sep_token:
        return SegmentTemplate(paper=True, prefix=(cls_token,), suffix=(sep_token,), sep=sep_token)
    prefix, suffix = special_template(tokenizer)
    return SegmentTemplate(paper=False, prefix=tuple(tokenizer.convert_ids_to_tokens(prefix)),
                           suffix=tuple(tokenizer.convert_ids_to_tokens(suffix)))


def build_segments(
    documents: Iterable[Document],
    tokenizer,
    *,
    n_segments: int,
    max_seq_len: int = 128,
    seed: int = 0,
    layout: str = PAIR,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Make up to ``n_segments`` paper-style segments ``[CLS] A [SEP] B [SEP]``; return (segments, summary).

    A tokenizer without a CLS and a SEP token (a decoder-only model's) wraps A and B its own way,
    ``prefix A B suffix`` (:func:`segment_template`; ``max_seq_len`` less the prefix and suffix for A + B);
    such segments carry ``"template": "tokenizer"`` and the summary's ``template`` says which.

    For each document in order, sentences (tokenised with ``tokenizer.tokenize``) are accumulated
    into a chunk until it holds ``max_seq_len - 3`` wordpieces or the document ends; a chunk of >= 2
    sentences is split at ``rng.randint(1, len(chunk) - 1)`` and the pair truncated as in BERT's
    ``create_pretraining_data.py``; single-sentence chunks are skipped and counted. Stops when
    ``n_segments`` segments exist, shuffles them with the same ``random.Random(seed)`` and numbers
    them 0..k-1 in shuffled order. Producing fewer than requested is not an error (see
    ``summary["segments_produced"]``).

    ``layout="window"`` (:func:`_windows`): each segment is one document window instead, its sentences
    accumulated the same way up to ``max_seq_len`` less the template's special tokens (``[CLS] W [SEP]``: 2;
    a decoder's prefix and suffix), the last sentence cut at the end (``truncated``), wrapped as one part
    (segment ids all 0, ``text_b`` empty, ``"layout": "window"``); a window of one sentence is kept. The
    same shuffling and numbering.
    """
    if n_segments < 1:
        raise BertlookError(f"n_segments must be at least 1, got {n_segments}")
    if layout not in LAYOUTS:
        raise BertlookError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == PAIR and max_seq_len < 5:
        raise BertlookError(f"max_seq_len must be at least 5 ([CLS] A [SEP] B [SEP]), got {max_seq_len}")
    template = segment_template(tokenizer)
    max_num_tokens = max_seq_len - template.n_special_for(layout)
    if max_num_tokens < 1:
        raise BertlookError(f"max_seq_len must be at least {max_seq_len - max_num_tokens + 1} "
                            f"({template.describe(layout)}), got {max_seq_len}")

    rng = random.Random(seed)
    segments: list[dict[str, Any]] = []
    stats = dict(documents_read=0, single_sentence_chunks_skipped=0, sentences_used=0,
                 sentences_unused=0, sentences_without_tokens=0)
    docs_used: set[int] = set()
    make = (_pair_segments if layout == PAIR
            else functools.partial(_window_segments, joiner=sentence_joiner(tokenizer)))
    for doc in documents:
        stats["documents_read"] += 1
        for seg in make(doc, tokenizer, template, max_num_tokens, rng, stats):
            segments.append(seg)
            docs_used.add(doc.index)
            if len(segments) >= n_segments:
                break
        if len(segments) >= n_segments:
            break  # do not pull another document from a lazy reader

    rng.shuffle(segments)
    for i, seg in enumerate(segments):
        seg["id"] = i
    summary = _segments_summary(segments, stats, n_segments=n_segments, docs_used=len(docs_used),
                                max_seq_len=max_seq_len, seed=seed, template=template, layout=layout)
    return segments, summary


def _pair_segments(doc: Document, tokenizer, template: SegmentTemplate, max_num_tokens: int, rng: random.Random,
                   stats: dict[str, int]) -> Iterator[dict[str, Any]]:
    """The paper's segments of one document (:func:`_chunks`, :func:`_pair_segment`), in document order."""
    for chunk in _chunks(doc, tokenizer, max_num_tokens, stats):
        seg = _pair_segment(doc, chunk, template, max_num_tokens, rng, stats)
        if seg is not None:
            yield seg


def _chunks(doc: Document, tokenizer, max_num_tokens: int,
            stats: dict[str, int]) -> Iterator[list[tuple[str, list[str]]]]:
    """The chunks of one document: its sentences (with their wordpieces; a sentence without any is counted and
    left out) accumulated until a chunk holds ``max_num_tokens`` wordpieces or the document ends."""
    tokenized = []
    for sent in doc.sentences:
        toks = tokenizer.tokenize(sent)
        if toks:
            tokenized.append((sent, toks))
        else:
            stats["sentences_without_tokens"] += 1
    chunk: list[tuple[str, list[str]]] = []
    length = 0
    for i, item in enumerate(tokenized):
        chunk.append(item)
        length += len(item[1])
        if i == len(tokenized) - 1 or length >= max_num_tokens:
            yield chunk
            chunk, length = [], 0


def _pair_segment(doc: Document, chunk: list[tuple[str, list[str]]], template: SegmentTemplate,
                  max_num_tokens: int, rng: random.Random, stats: dict[str, int]) -> dict[str, Any] | None:
    """One chunk split at a random sentence boundary into A and B, the pair truncated and wrapped by ``template``
    (id -1 until the segments are numbered); None, counted, for a chunk of one sentence."""
    if len(chunk) < 2:
        stats["single_sentence_chunks_skipped"] += 1
        stats["sentences_unused"] += len(chunk)
        return None
    a_end = rng.randint(1, len(chunk) - 1)
    tokens_a = [t for _, toks in chunk[:a_end] for t in toks]
    tokens_b = [t for _, toks in chunk[a_end:] for t in toks]
    truncated = _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
    tokens, segment_ids = template.wrap(tokens_a, tokens_b)
    stats["sentences_used"] += len(chunk)
    return {
        "id": -1,
        "doc": doc.title,
        "doc_index": doc.index,
        "text_a": " ".join(s for s, _ in chunk[:a_end]),
        "text_b": " ".join(s for s, _ in chunk[a_end:]),
        "tokens": tokens,
        "segment_ids": segment_ids,
        "truncated": truncated,
        **({"template": TOKENIZER_TEMPLATE} if not template.paper else {}),
    }


def sentence_joiner(tokenizer) -> str:
    """``" "`` when ``tokenizer`` puts the space between two sentences into the second one's first token (a
    byte-level BPE: ``"ĠIt"``, not the ``"It"`` of the sentence alone), else ``""`` (WordPiece, SentencePiece):
    the prefix with which a window tokenizes every sentence after its first, so that its tokens are those of its
    text (``text_a``, the sentences joined by spaces) where the tokenizer splits at sentence ends."""
    first, second = _JOIN_PROBE
    joined = tokenizer.tokenize(f"{first} {second}")
    alone = tokenizer.tokenize(first) + tokenizer.tokenize(second)
    return " " if joined != alone and joined == tokenizer.tokenize(first) + tokenizer.tokenize(f" {second}") else ""


def _windows(doc: Document, tokenizer, max_num_tokens: int, joiner: str,
             stats: dict[str, int]) -> Iterator[tuple[list[str], list[str], bool]]:
    """``(sentences, tokens, truncated)`` of each window of one document: consecutive sentences (a sentence
    without tokens counted and left out; the ones after a window's first tokenized after ``joiner``,
    :func:`sentence_joiner`) until they hold ``max_num_tokens`` tokens or the document ends; the tokens cut
    after ``max_num_tokens`` (``truncated``: the last sentence lost its end). Sentences are read lazily."""
    window: list[str] = []
    tokens: list[str] = []
    for sent in doc.sentences:
        toks = tokenizer.tokenize(sent)
        if not toks:
            stats["sentences_without_tokens"] += 1
            continue
        if window and joiner:
            toks = tokenizer.tokenize(joiner + sent)
        window.append(sent)
        tokens += toks
        if len(tokens) >= max_num_tokens:
            yield window, tokens[:max_num_tokens], len(tokens) > max_num_tokens
            window, tokens = [], []
    if window:
        yield window, tokens, False


def _window_segments(doc: Document, tokenizer, template: SegmentTemplate, max_num_tokens: int, rng: random.Random,
                     stats: dict[str, int], *, joiner: str = "") -> Iterator[dict[str, Any]]:
    """The window segments of one document (:func:`_windows`; ``joiner``: :func:`sentence_joiner`), in document
    order (id -1 until numbered); ``rng`` is not used (no random split or truncation)."""
    for sentences, tokens, truncated in _windows(doc, tokenizer, max_num_tokens, joiner, stats):
        wrapped, segment_ids = template.wrap_window(tokens)
        stats["sentences_used"] += len(sentences)
        yield {
            "id": -1,
            "doc": doc.title,
            "doc_index": doc.index,
            "text_a": " ".join(sentences),
            "text_b": "",
            "tokens": wrapped,
            "segment_ids": segment_ids,
            "truncated": truncated,
            **({"template": TOKENIZER_TEMPLATE} if not template.paper else {}),
            "layout": WINDOW,
        }


def _segments_summary(segments: list[dict[str, Any]], stats: dict[str, int], *, n_segments: int, docs_used: int,
                      max_seq_len: int, seed: int, template: SegmentTemplate, layout: str) -> dict[str, Any]:
    lengths = [len(s["tokens"]) for s in segments]
    return {
        "segments_requested": n_segments,
        "segments_produced": len(segments),
        "documents_used": docs_used,
        "documents_read": stats["documents_read"],
        "truncated_segments": sum(1 for s in segments if s["truncated"]),
        "single_sentence_chunks_skipped": stats["single_sentence_chunks_skipped"],
        "sentences_used": stats["sentences_used"],
        "sentences_unused": stats["sentences_unused"],
        "sentences_without_tokens": stats["sentences_without_tokens"],
        "mean_tokens": round(sum(lengths) / len(lengths), 3) if lengths else 0.0,
        "max_tokens": max(lengths) if lengths else 0,
        "max_seq_len": max_seq_len,
        "seed": seed,
        "template": template.describe(layout),
        "layout": layout,
    }


# ------------------------------------------------------------------------------------ the step

@dataclass(frozen=True)
class SegmentOptions:
    """The settings of :func:`run_segments_step` (the flags of ``bertlook segments`` of the same names):
    ``splitter`` one of :data:`bertlook.data.sentences.SPLITTERS` (``auto`` resolved for ``language``),
    ``layout`` one of :data:`LAYOUTS` (:func:`build_segments`)."""

    n_segments: int = 1000
    max_seq_len: int = 128
    seed: int = 0
    max_articles: int | None = None
    language: str = "en"
    splitter: str = "auto"
    layout: str = PAIR


@dataclass(frozen=True)
class SegmentsStepResult:
    """The segments (:func:`build_segments`), the summary JSON of ``bertlook segments`` (its ``warnings``: a
    shortfall) and the corpus counts (:data:`bertlook.data.documents.DOCUMENT_COUNT_KEYS`, also in the summary)."""

    segments: list[dict[str, Any]]
    summary: dict[str, Any]
    counts: dict[str, int]

    @property
    def warnings(self) -> list[str]:
        return self.summary["warnings"]


def run_segments_step(tokenizer, dump: str | os.PathLike | None = None, *,
                      reader: Callable[..., Iterator[Document]] | None = None, corpus: dict[str, Any] | None = None,
                      source: str | None = None, options: SegmentOptions = SegmentOptions(),
                      model: str | None = None, revision: str | None = None) -> SegmentsStepResult:
    """``bertlook segments`` without the command line: documents -> paper-style segments (``tokenizer``:
    ``tokenize``, ``cls_token``, ``sep_token``) and the summary JSON.

    The documents: the MediaWiki dump ``dump`` (a path or ``package:PKG/relative/path``; :func:`iter_documents`),
    or ``reader(max_articles=, counts=, language=, splitter=)``, e.g.
    ``functools.partial(bertlook.data.hf_corpus.iter_hf_documents, spec)``, with ``corpus`` (its description,
    e.g. ``describe_hf_dataset(spec)``, recorded in the summary) and ``source`` (its name in messages).
    ``model`` / ``revision``: the tokenizer's model, recorded in the summary. No segment at all is an error;
    fewer than ``options.n_segments`` is a warning of the summary."""
    language = check_language(options.language)
    splitter = resolve_splitter(language, options.splitter)
    if (dump is None) == (reader is None):
        raise BertlookError("segments: give a dump or a document reader (one of them)")
    counts: dict[str, int] = {}
    kw = dict(max_articles=options.max_articles, counts=counts, language=language, splitter=splitter)
    if dump is not None:
        dump = resolve_data_path(str(dump))
        source = str(dump)
        docs = iter_documents(dump, **kw)
    else:
        source = source or "the corpus"
        docs = reader(**kw)
    try:
        segments, summary = build_segments(docs, tokenizer, n_segments=options.n_segments,
                                           max_seq_len=options.max_seq_len, seed=options.seed, layout=options.layout)
    finally:
        close = getattr(docs, "close", None)
        if close is not None:
            close()
    if not segments:
        raise BertlookError(
            f"{source}: no segment could be made ({summary['documents_read']} usable articles read, "
            f"{summary['single_sentence_chunks_skipped']} single-sentence chunks skipped, "
            f"{summary['sentences_without_tokens']} sentences without tokens; {count_text(counts)})"
            + (": a segment needs two sentences of one article" if options.layout == PAIR else ""))
    warnings = []
    if summary["segments_produced"] < summary["segments_requested"]:
        warnings.append(f"only {summary['segments_produced']} of {summary['segments_requested']} segments "
                        f"could be made from {source}: its {summary['documents_read']} usable articles ran out"
                        + (f" (max_articles {options.max_articles})" if options.max_articles else ""))
    summary = {"dump": str(dump) if dump is not None else None, **({"corpus": corpus} if corpus else {}),
               "model": model, "revision": revision,
               "max_articles": options.max_articles, "language": language, "splitter": splitter,
               **summary, **counts, "warnings": warnings}
    return SegmentsStepResult(segments=segments, summary=summary, counts=counts)


# ------------------------------------------------------------------------------------ JSONL I/O

def write_segments(path: str | os.PathLike, segments: Iterable[dict[str, Any]]) -> None:
    """Write segments as JSONL (one object per line, keys in the DESIGN.md order), atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            for seg in segments:
                ordered = {k: seg[k] for k in SEGMENT_KEYS if k in seg}
                ordered.update({k: v for k, v in seg.items() if k not in ordered})
                fh.write(json.dumps(ordered, ensure_ascii=False))
                fh.write("\n")


def _validate_segment(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return "not a JSON object"
    missing = [k for k in REQUIRED_SEGMENT_KEYS if k not in obj]
    if missing:
        return f"missing key(s) {', '.join(missing)}"
    if not isinstance(obj["id"], int) or isinstance(obj["id"], bool):
        return f"id must be an integer, got {obj['id']!r}"
    tokens, seg_ids = obj["tokens"], obj["segment_ids"]
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        return "tokens must be a non-empty list of strings"
    if not isinstance(seg_ids, list) or not all(s in (0, 1) and not isinstance(s, bool) for s in seg_ids):
        return "segment_ids must be a list of 0/1"
    if len(tokens) != len(seg_ids):
        return f"len(tokens) = {len(tokens)} but len(segment_ids) = {len(seg_ids)}"
    layout = obj.get("layout", PAIR)
    if not isinstance(layout, str) or layout not in LAYOUTS:
        return f"layout must be \"{PAIR}\" or \"{WINDOW}\", got {layout!r}"
    if layout == WINDOW and any(seg_ids):
        return "segment_ids must be all 0 in a window (layout \"window\": one part, no A/B split)"
    if obj.get("template", "paper") not in ("paper", TOKENIZER_TEMPLATE):
        return f"template must be \"paper\" or \"{TOKENIZER_TEMPLATE}\", got {obj['template']!r}"
    if obj.get("template") != TOKENIZER_TEMPLATE and tokens[0] not in CLS_LIKE:
        return f"first token must be a [CLS]-like token, got {tokens[0]!r}"
    if not isinstance(obj["truncated"], bool):
        return "truncated must be true or false"
    return None


def read_segments(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read and validate a segments JSONL file; errors are ``BertlookError("<path>:<line>: ...")``."""
    path = Path(path)
    try:
        fh = open(path, encoding="utf-8")
    except OSError as err:
        raise BertlookError(f"{path}: cannot read segments file ({err.strerror or err})") from err
    segments: list[dict[str, Any]] = []
    seen: dict[int, int] = {}
    with fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise BertlookError(f"{path}:{lineno}: invalid JSON ({err.msg})") from err
                problem = _validate_segment(obj)
                if problem:
                    raise BertlookError(f"{path}:{lineno}: {problem}")
                if obj["id"] in seen:
                    raise BertlookError(f"{path}:{lineno}: duplicate id {obj['id']} "
                                        f"(first on line {seen[obj['id']]})")
                seen[obj["id"]] = lineno
                segments.append(obj)
        except UnicodeDecodeError as err:
            raise BertlookError(f"{path}: not UTF-8 text ({err})") from err
    return segments
