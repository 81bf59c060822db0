"""Corpus documents for the segments and the silver trees: a MediaWiki dump (or plain text) -> prose
paragraphs -> :class:`Document` s of usable sentences.

:func:`iter_documents` reads a ``.xml.bz2`` / ``.xml`` dump lazily (gensim's ``extract_pages``), keeps
namespace-0 articles that are not redirects, strips the markup and keeps prose paragraphs
(:func:`iter_dump_articles`, :func:`clean_wiki_text`), then :func:`make_document` splits them into usable
sentences (:func:`bertlook.data.sentences.split_sentences`); :mod:`bertlook.data.hf_corpus` reads documents
from a Hugging Face ``datasets`` corpus instead (plain text: :func:`plain_text_paragraphs`, then the same
:func:`make_document`). Everything skipped is counted (``counts``, keys :data:`DOCUMENT_COUNT_KEYS`).
"""

from __future__ import annotations

import bz2
import html
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bertlook.data.sentences import is_usable_sentence, prose_end_pattern, split_sentences
from bertlook.errors import BertlookError

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

    text, skipped = _remove_tables(_remove_file_links(raw))
    cleaned: list[str] = []  # one line each (whitespace collapsed), not yet checked for a prose ending
    for line in filter_wiki(text).splitlines():
        line = line.strip()
        if not line:
            continue
        markup = _HEADING.match(line) or line.startswith(_MARKUP_START) or _FILE_LINE.match(line) or "|" in line
        line = "" if markup else _clean_line(line)
        if not line:
            skipped += 1
            continue
        cleaned.append(line)
    if counts is not None:
        counts["non_prose_lines_skipped"] = counts.get("non_prose_lines_skipped", 0) + skipped
    return plain_text_paragraphs("\n".join(cleaned), counts, language)  # the prose check


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
