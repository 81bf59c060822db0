"""MediaWiki dump -> documents -> sentences -> paper-style segments (``bertlook segments``).

The paper (Clark et al. 2019, Section 3) ran BERT over 1000 Wikipedia segments ``[CLS] A [SEP] B [SEP]``
of at most 128 wordpieces, made the way BERT's ``create_pretraining_data.py`` makes its pre-training
examples, without the random "next sentence": sentences of one document are collected into a chunk
until it holds ``max_seq_len - 3`` wordpieces, the chunk is split at a random sentence boundary into
A and B, and over-long pairs are cut one token at a time from a random end of the longer part.

Steps:
  * :func:`iter_documents` reads a ``.xml.bz2`` / ``.xml`` dump lazily (gensim's ``extract_pages``),
    keeps namespace-0 articles that are not redirects, strips the markup and keeps prose paragraphs
    (:func:`iter_dump_articles`), then :func:`make_document` splits them into usable sentences;
    :mod:`bertlook.data.hf_corpus` reads documents from a Hugging Face ``datasets`` corpus instead
    (plain text: :func:`plain_text_paragraphs`, then the same :func:`make_document`);
  * :func:`bertlook.data.sentences.split_sentences` splits text in the corpus language (spaCy's
    rule-based ``sentencizer``, or bertlook's rule-based splitter; deterministic);
  * :func:`build_segments` makes the segments; :func:`write_segments` / :func:`read_segments` store
    them as JSONL (format in docs/DESIGN.md);
  * :func:`run_segments_step` is ``bertlook segments`` without the command line: documents -> segments and
    the summary JSON (:class:`SegmentsStepResult`; settings in :class:`SegmentOptions`).

Everything excluded is counted (``counts`` / the summary JSON).
"""

from __future__ import annotations

import bz2
import html
import json
import os
import random
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from bertlook.data.sentences import (  # noqa: F401 (split_sentences re-exported)
    check_language,
    is_usable_sentence,
    prose_end_pattern,
    resolve_splitter,
    split_sentences,
)
from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path

SEGMENT_KEYS = ("id", "doc", "doc_index", "text_a", "text_b", "tokens", "segment_ids", "truncated")
REQUIRED_SEGMENT_KEYS = ("id", "doc", "text_a", "text_b", "tokens", "segment_ids", "truncated")
CLS_LIKE = frozenset({"[CLS]", "<s>", "<cls>", "[cls]"})

DOCUMENT_COUNT_KEYS = (
    "pages_read",                  # every <page> read, any namespace
    "non_article_pages_skipped",   # namespace != 0
    "redirects_skipped",           # #REDIRECT pages
    "null_text_rows_skipped",      # Hugging Face datasets rows whose text is null (0 for dumps)
    "documents_without_sentences",  # articles with no usable sentence after cleaning
    "documents_kept",
    "non_prose_lines_skipped",     # headings, lists, tables, captions, template remnants, ...
    "short_sentences_skipped",     # < 3 words or no letter
    "sentences_kept",
)


@dataclass
class Document:
    """One article: ``index`` is its 0-based position among the kept articles of the dump."""

    index: int
    title: str
    sentences: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ cleaning

_HEADING = re.compile(r"^=+.*=+$")
_MARKUP_START = ("*", "#", ":", ";", "|", "!", "{", "}", "-", "=")
_FILE_LINE = re.compile(r"^(?:file|image|media|category)\s*:", re.IGNORECASE)
_BOLD_ITALIC = re.compile(r"'{2,}")
_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_TAG = re.compile(r"<[^<>\n]{0,300}>")
_EMPTY_PARENS = re.compile(r"[(\[]\s*[,;:]?\s*[)\]]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")
_SPACE_AFTER_OPEN = re.compile(r"([(])\s+")


_FILE_LINK_START = re.compile(r"\[\[\s*(?:file|image|media)\s*:", re.IGNORECASE)


def _remove_file_links(raw: str) -> str:
    """Drop ``[[File:...]]`` / ``[[Image:...]]`` links with their captions (links may nest)."""
    out: list[str] = []
    pos = 0
    while True:
        m = _FILE_LINK_START.search(raw, pos)
        if not m:
            out.append(raw[pos:])
            return "".join(out)
        out.append(raw[pos:m.start()])
        depth, i = 0, m.start()
        while i < len(raw):
            if raw.startswith("[[", i):
                depth += 1
                i += 2
            elif raw.startswith("]]", i):
                depth -= 1
                i += 2
                if depth == 0:
                    break
            else:
                i += 1
        pos = i


def _remove_tables(raw: str) -> tuple[str, int]:
    """Drop ``{| ... |}`` table blocks (tables may nest); return (text, number of lines dropped)."""
    kept: list[str] = []
    depth = dropped = 0
    for line in raw.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("{|"):
            depth += 1
        if depth:
            dropped += 1
            if stripped.startswith("|}"):
                depth -= 1
            continue
        kept.append(line)
    return "\n".join(kept), dropped


def _clean_line(line: str) -> str:
    """Inline cleanup of one line left by ``filter_wiki``; returns '' for pure markup."""
    line = html.unescape(line.replace("&nbsp;", " "))
    line = _BOLD_ITALIC.sub("", line)
    for _ in range(5):  # nested templates, innermost first
        new = _TEMPLATE.sub("", line)
        if new == line:
            break
        line = new
    line = line.replace("{{", "").replace("}}", "")
    line = _TAG.sub("", line)
    line = " ".join(line.split())  # collapses \xa0, tabs, runs of spaces
    line = _EMPTY_PARENS.sub("", line)
    line = _SPACE_BEFORE_PUNCT.sub(r"\1", line)
    line = _SPACE_AFTER_OPEN.sub(r"\1", line)
    return " ".join(line.split())


def clean_wiki_text(raw: str, counts: dict[str, int] | None = None, language: str = "en") -> list[str]:
    """Wiki markup -> prose paragraphs (one string per paragraph).

    File/image links (with their captions) and ``{| ... |}`` tables are removed, then
    ``gensim.corpora.wikicorpus.filter_wiki`` removes links, references and templates; then headings, list / table / caption lines and template remnants are dropped, bold and
    italic quotes, leftover tags and entities removed, whitespace collapsed. A paragraph is kept only
    when it ends like prose (``. ! ? :``, optionally followed by a closing quote or bracket; other
    languages than ``en`` also ``。 । ؟`` ...: :func:`bertlook.data.sentences.prose_end_pattern`).
    Dropped non-empty lines are counted in ``counts["non_prose_lines_skipped"]``.
    """
    from gensim.corpora.wikicorpus import filter_wiki  # lazy: not in envs/analysis.yaml, whose steps import this module

    prose_end = prose_end_pattern(language)
    text, skipped = _remove_tables(_remove_file_links(raw))
    text = filter_wiki(text)
    paragraphs: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if (_HEADING.match(line) or line.startswith(_MARKUP_START) or _FILE_LINE.match(line)
                or "|" in line):
            skipped += 1
            continue
        line = _clean_line(line)
        if not line:
            skipped += 1
            continue
        if not prose_end.search(line):
            skipped += 1
            continue
        paragraphs.append(line)
    if counts is not None:
        counts["non_prose_lines_skipped"] = counts.get("non_prose_lines_skipped", 0) + skipped
    return paragraphs


# ---------------------------------------------------------------------------------- reading dumps

def _open_dump(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(3)
    if path.suffix == ".bz2" or magic == b"BZh":
        return bz2.open(path, "rb")
    return open(path, "rb")


def count_text(counts: dict[str, int]) -> str:
    """The corpus counts (:data:`DOCUMENT_COUNT_KEYS`) that explain a shortfall, as one phrase."""
    return (f"pages read {counts['pages_read']}, non-article pages {counts['non_article_pages_skipped']}, "
            f"redirects {counts['redirects_skipped']}, articles without a usable sentence "
            f"{counts['documents_without_sentences']}")


def init_counts(counts: dict[str, int] | None) -> dict[str, int]:
    """``counts`` (a new dict when None) with every key of :data:`DOCUMENT_COUNT_KEYS` present (0 if new)."""
    if counts is None:
        counts = {}
    for key in DOCUMENT_COUNT_KEYS:
        counts.setdefault(key, 0)
    return counts


def _check_dump_file(path: Path) -> None:
    if not path.exists():
        raise BertlookError(f"{path}: Wikipedia dump not found")
    if not path.is_file():
        raise BertlookError(f"{path}: not a file (expected a MediaWiki .xml.bz2 or .xml dump)")
    if path.stat().st_size == 0:
        raise BertlookError(f"{path}: empty file (expected a MediaWiki .xml.bz2 or .xml dump)")


def plain_text_paragraphs(text: str, counts: dict[str, int] | None = None,
                          language: str = "en") -> list[str]:
    """Plain text (one paragraph per line) -> prose paragraphs, for corpora without wiki markup.

    The plain-text steps of :func:`clean_wiki_text`: lines are stripped and their whitespace
    collapsed, empty lines dropped, and a line is kept only when it ends like prose (``. ! ? :``,
    optionally followed by a closing quote or bracket; this drops section headings and most list
    items of e.g. the Hugging Face ``wikimedia/wikipedia`` text; other languages than ``en`` also accept
    ``。 । ؟`` ...: :func:`bertlook.data.sentences.prose_end_pattern`). Dropped non-empty lines are counted
    in ``counts["non_prose_lines_skipped"]``. The output of :func:`clean_wiki_text`, joined with
    newlines, comes back unchanged, so a corpus of cleaned dump articles gives the dump's documents.
    """
    prose_end = prose_end_pattern(language)
    paragraphs: list[str] = []
    skipped = 0
    for line in text.splitlines():
        line = " ".join(line.split())
        if not line:
            continue
        if not prose_end.search(line):
            skipped += 1
            continue
        paragraphs.append(line)
    if counts is not None:
        counts["non_prose_lines_skipped"] = counts.get("non_prose_lines_skipped", 0) + skipped
    return paragraphs


def make_document(index: int, title: str, paragraphs: list[str],
                  counts: dict[str, int], *, language: str = "en", splitter: str = "spacy") -> Document | None:
    """Prose paragraphs of one article -> its :class:`Document` (None when no sentence is usable).

    The one sentence step of every corpus source: :func:`bertlook.data.sentences.split_sentences`
    (``language``, ``splitter``), then :func:`bertlook.data.sentences.is_usable_sentence`; updates ``short_sentences_skipped``, ``documents_without_sentences``,
    ``documents_kept`` and ``sentences_kept`` in ``counts``.
    """
    counts = init_counts(counts)
    sentences: list[str] = []
    for sent in split_sentences("\n".join(paragraphs), language, splitter):
        if is_usable_sentence(sent, language):
            sentences.append(sent)
        else:
            counts["short_sentences_skipped"] += 1
    if not sentences:
        counts["documents_without_sentences"] += 1
        return None
    counts["documents_kept"] += 1
    counts["sentences_kept"] += len(sentences)
    return Document(index=index, title=title, sentences=sentences)


def iter_dump_articles(
    dump_path: str | os.PathLike,
    *,
    counts: dict[str, int] | None = None,
    language: str = "en",
) -> Iterator[tuple[str, list[str]]]:
    """Yield ``(title, prose paragraphs)`` of the namespace-0, non-redirect pages of a dump, lazily.

    Paragraphs are :func:`clean_wiki_text`'s output (possibly empty). Updates ``pages_read``,
    ``non_article_pages_skipped``, ``redirects_skipped`` and ``non_prose_lines_skipped`` in ``counts``.
    Missing, empty, corrupt or invalid files raise :class:`BertlookError` naming the file (and the
    line for XML errors).
    """
    from gensim.corpora.wikicorpus import extract_pages  # lazy: not in envs/analysis.yaml, whose steps import this module

    path = Path(dump_path)
    counts = init_counts(counts)
    _check_dump_file(path)

    page: dict[str, Any] = {}

    def _inspect(elem, namespace=None, ns_path=None, **_kw) -> bool:
        ns_el = elem.find(ns_path) if ns_path else None
        page["ns"] = (ns_el.text or "0").strip() if ns_el is not None else "0"
        page["redirect"] = elem.find(f"{{{namespace}}}redirect") is not None
        return True

    try:
        with _open_dump(path) as fh:
            for title, text, _pageid in extract_pages(fh, filter_articles=_inspect):
                counts["pages_read"] += 1
                if page.get("ns", "0") != "0":
                    counts["non_article_pages_skipped"] += 1
                    continue
                if page.get("redirect") or text.lstrip()[:9].upper() == "#REDIRECT":
                    counts["redirects_skipped"] += 1
                    continue
                yield title or "", clean_wiki_text(text, counts, language)
    except ET.ParseError as err:
        line = err.position[0] if getattr(err, "position", None) else "?"
        if counts["pages_read"] == 0 and "no element found" in str(err) and line == 1:
            raise BertlookError(f"{path}: empty dump (no XML inside)") from err
        raise BertlookError(f"{path}:{line}: invalid XML in the Wikipedia dump ({err})") from err
    except EOFError as err:
        raise BertlookError(f"{path}: truncated compressed file ({err}); re-download it") from err
    except OSError as err:
        raise BertlookError(f"{path}: cannot read the dump ({err}); the file may be corrupt, "
                            "re-download it") from err
    except (ValueError, AttributeError, RuntimeError) as err:
        raise BertlookError(f"{path}: not a MediaWiki XML dump ({err})") from err


def iter_documents(
    dump_path: str | os.PathLike,
    *,
    max_articles: int | None = None,
    counts: dict[str, int] | None = None,
    language: str = "en",
    splitter: str = "spacy",
) -> Iterator[Document]:
    """Yield the prose articles of a MediaWiki XML dump (``.xml.bz2`` or ``.xml``), lazily.

    Namespace-0 pages only (:func:`iter_dump_articles`); redirects and articles without a usable
    sentence (:func:`make_document`) are skipped and counted in ``counts`` (keys
    :data:`DOCUMENT_COUNT_KEYS`, updated as pages are read); ``language`` and ``splitter`` go to
    :func:`clean_wiki_text` and :func:`make_document`. ``max_articles``
    stops after that many kept documents. Missing, empty, corrupt or invalid files raise
    :class:`BertlookError` naming the file (and the line for XML errors), and so does a dump that
    ends without a single usable article (all redirects, other namespaces, or no prose).
    """
    path = Path(dump_path)
    counts = init_counts(counts)
    _check_dump_file(path)
    if max_articles is not None and max_articles < 1:
        raise BertlookError(f"max_articles must be at least 1, got {max_articles}")

    kept = 0
    articles = iter_dump_articles(path, counts=counts, language=language)
    try:
        for title, paragraphs in articles:
            doc = make_document(kept, title, paragraphs, counts, language=language, splitter=splitter)
            if doc is None:
                continue
            yield doc
            kept += 1
            if max_articles is not None and kept >= max_articles:
                return
    finally:
        articles.close()
    if kept == 0:
        raise BertlookError(f"{path}: no usable article in the Wikipedia dump ({count_text(counts)})")


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

    def describe(self) -> str:
        if self.paper:
            return f"{self.prefix[0]} A {self.sep} B {self.sep}"
        return " ".join([*self.prefix, "A", "B", *self.suffix])


def segment_template(tokenizer) -> SegmentTemplate:
    """The :class:`SegmentTemplate` of ``tokenizer``: the paper's when it has a CLS and a SEP token, else its own."""
    cls_token, sep_token = getattr(tokenizer, "cls_token", None), getattr(tokenizer, "sep_token", None)
    if cls_token and sep_token:
        return SegmentTemplate(paper=True, prefix=(cls_token,), suffix=(sep_token,), sep=sep_token)
    from bertlook.data.token_template import special_template

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
    """
    if n_segments < 1:
        raise BertlookError(f"n_segments must be at least 1, got {n_segments}")
    if max_seq_len < 5:
        raise BertlookError(f"max_seq_len must be at least 5 ([CLS] A [SEP] B [SEP]), got {max_seq_len}")
    template = segment_template(tokenizer)

    rng = random.Random(seed)
    max_num_tokens = max_seq_len - template.n_special
    segments: list[dict[str, Any]] = []
    stats = dict(documents_read=0, single_sentence_chunks_skipped=0, sentences_used=0,
                 sentences_unused=0, sentences_without_tokens=0)
    docs_used: set[int] = set()

    def emit(doc: Document, chunk: list[tuple[str, list[str]]]) -> None:
        if len(chunk) < 2:
            stats["single_sentence_chunks_skipped"] += 1
            stats["sentences_unused"] += len(chunk)
            return
        a_end = rng.randint(1, len(chunk) - 1)
        tokens_a = [t for _, toks in chunk[:a_end] for t in toks]
        tokens_b = [t for _, toks in chunk[a_end:] for t in toks]
        truncated = _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        tokens, segment_ids = template.wrap(tokens_a, tokens_b)
        segments.append({
            "id": -1,
            "doc": doc.title,
            "doc_index": doc.index,
            "text_a": " ".join(s for s, _ in chunk[:a_end]),
            "text_b": " ".join(s for s, _ in chunk[a_end:]),
            "tokens": tokens,
            "segment_ids": segment_ids,
            "truncated": truncated,
            **({"template": TOKENIZER_TEMPLATE} if not template.paper else {}),
        })
        stats["sentences_used"] += len(chunk)
        docs_used.add(doc.index)

    for doc in documents:
        stats["documents_read"] += 1
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
                emit(doc, chunk)
                chunk, length = [], 0
                if len(segments) >= n_segments:
                    break
        if len(segments) >= n_segments:
            break  # do not pull another document from a lazy reader

    rng.shuffle(segments)
    for i, seg in enumerate(segments):
        seg["id"] = i
    summary = _segments_summary(segments, stats, n_segments=n_segments, docs_used=len(docs_used),
                                max_seq_len=max_seq_len, seed=seed, template=template)
    return segments, summary


def _segments_summary(segments: list[dict[str, Any]], stats: dict[str, int], *, n_segments: int, docs_used: int,
                      max_seq_len: int, seed: int, template: SegmentTemplate) -> dict[str, Any]:
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
        "template": template.describe(),
    }


# ------------------------------------------------------------------------------------ the step

@dataclass(frozen=True)
class SegmentOptions:
    """The settings of :func:`run_segments_step` (the flags of ``bertlook segments`` of the same names):
    ``splitter`` one of :data:`bertlook.data.sentences.SPLITTERS` (``auto`` resolved for ``language``)."""

    n_segments: int = 1000
    max_seq_len: int = 128
    seed: int = 0
    max_articles: int | None = None
    language: str = "en"
    splitter: str = "auto"


@dataclass(frozen=True)
class SegmentsStepResult:
    """The segments (:func:`build_segments`), the summary JSON of ``bertlook segments`` (its ``warnings``: a
    shortfall) and the corpus counts (:data:`DOCUMENT_COUNT_KEYS`, also in the summary)."""

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
    from bertlook.pipeline.config import resolve_data_path

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
                                           max_seq_len=options.max_seq_len, seed=options.seed)
    finally:
        close = getattr(docs, "close", None)
        if close is not None:
            close()
    if not segments:
        raise BertlookError(
            f"{source}: no segment could be made ({summary['documents_read']} usable articles read, "
            f"{summary['single_sentence_chunks_skipped']} single-sentence chunks skipped, "
            f"{summary['sentences_without_tokens']} sentences without tokens; {count_text(counts)}): a "
            "segment needs two sentences of one article")
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
