"""Sentence splitting in the language of the corpus (``segments.language``, ``segments.splitter``).

Two splitters, both deterministic:

* ``spacy``: spaCy's rule-based ``sentencizer`` on ``spacy.blank(language)`` (no trained model). For
  ``language="en"`` this is exactly what :func:`bertlook.data.segments.split_sentences` always did;
* ``rules``: :func:`split_sentences_rules`, bertlook's own splitter, which needs nothing installed and
  also works for scripts written without spaces between words (Chinese, Japanese, Thai, ...), where
  ``spacy.blank`` either needs extra packages (a word segmenter) or is not available.

``auto`` (:func:`resolve_splitter`) picks ``spacy`` for the languages of :data:`SPACY_LANGUAGES` and
``rules`` for every other one; with ``en`` it is ``spacy``, so English corpora are split as before.

:func:`is_usable_sentence` is the sentence filter of every corpus source: at least 3 whitespace-separated
words for spaced scripts, at least 3 letters for :data:`NO_SPACE_LANGUAGES`, and a letter in both cases.

Only the standard library is imported at module level (spaCy lazily): steps of ``envs/analysis.yaml``
import :mod:`bertlook.data.segments`, which imports this module.
"""

from __future__ import annotations

import functools
import re

from bertlook.errors import BertlookError

SPLITTERS = ("auto", "spacy", "rules")

# ISO 639-1 codes of scripts written without spaces between words: Chinese, Japanese, Thai, Lao, Khmer,
# Burmese, Tibetan (and Dzongkha, same script).
NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "dz"})

# Languages for which ``spacy.blank(code)`` + ``add_pipe("sentencizer")`` works with only spaCy installed.
# Determined with spaCy 3.8.18 (the version constraints.txt pins) in the project's virtualenv (no
# SudachiPy, mecab-ko, PyThaiNLP, pyvi, jieba, pkuseg, pymorphy installed) by trying every language
# module of ``spacy.lang``: ``spacy.blank(code)``, add the sentencizer, split "Test one. Test two.".
# Failed: ja (needs SudachiPy), ko (mecab-ko), th (PyThaiNLP), vi (pyvi). Worked but left out: zh and
# bo (written without spaces: NO_SPACE_LANGUAGES get the rule-based splitter; zh's default segmenter
# is per character) and xx (spaCy's multi-language code, not an ISO code). Hard-coded so that ``auto``
# does not depend on what else is installed.
SPACY_LANGUAGES = frozenset({
    "af", "am", "ar", "az", "bg", "bn", "ca", "cs", "da", "de", "dsb", "el", "en", "es", "et", "eu",
    "fa", "fi", "fo", "fr", "ga", "gd", "grc", "gu", "he", "hi", "hr", "hsb", "ht", "hu", "hy", "id",
    "is", "it", "kmr", "kn", "ky", "la", "lb", "lg", "lij", "lt", "lv", "mk", "ml", "mr", "ms", "nb",
    "ne", "nl", "nn", "pl", "pt", "ro", "ru", "sa", "si", "sk", "sl", "sq", "sr", "sv", "ta", "te",
    "ti", "tl", "tn", "tr", "tt", "uk", "ur", "yo",
})

# Terminators that end a sentence with or without following whitespace: CJK / full-width (and their
# small / vertical / doubled variants), Devanagari danda and double danda, Arabic question mark, Urdu
# full stop, Ethiopic full stop, Armenian full stop.
ANYWHERE_TERMINATORS = frozenset("。！？｡︒﹒︕︖﹗﹖‼⁇⁈⁉" "।॥" "؟۔" "።" "։")
# Terminators that end a sentence only before whitespace and a non-lowercase start.
SPACED_TERMINATORS = frozenset(".!?…")
# Closing quotes and brackets that stay with the sentence they follow (directly after a terminator;
# includes the German closing quotes “ ‘ and both guillemets).
CLOSERS = frozenset("\"'”’“‘»«›‹)]}）」』】〉》〕］｝")
# Opening punctuation skipped when looking at how the next sentence starts.
_OPENERS = frozenset("\"'“‘„‚«»‹›([{¿¡（「『【〈《〔［｛-–—")

# Small per-language abbreviation lists (lowercase, with their final dot). Tokens made of single
# letters each followed by a dot ("J.", "U.S.", "e.g.", "z.B.", "d.h.") are abbreviations in every
# language (:func:`_is_non_final`), so they need no entry here.
ABBREVIATIONS: dict[str, frozenset[str]] = {
    "en": frozenset({"mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "jr.", "sr.", "vs.", "etc.", "e.g.",
                     "i.e.", "no.", "fig."}),
    "de": frozenset({"z.b.", "bzw.", "nr.", "dr.", "ca.", "usw.", "vgl.", "prof.", "str.", "geb.",
                     "d.h.", "u.a.", "s.", "abb."}),
}

# Languages that write ordinal numbers as digits + "." ("am 1. Januar", "im 19. Jahrhundert"): a dot
# after a number of at most two digits does not end the sentence there (years like "1990." still do).
ORDINAL_DOT_LANGUAGES = frozenset({"de", "da", "nb", "nn", "no", "fi", "is", "et", "cs", "sk", "sl",
                                   "hr", "sr", "bs", "hu", "lv", "fo"})

_INITIALS = re.compile(r"^(?:[^\W\d_]\.)+$")


LANGUAGE_PATTERN = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")  # the schema's segments.language


def check_language(language: str) -> str:
    """``language`` when it is an ISO 639 code with an optional subtag (``en``, ``zh-Hans``), else an error."""
    if not isinstance(language, str) or not LANGUAGE_PATTERN.fullmatch(language):
        raise BertlookError(f"bad language code {language!r}: expected an ISO 639 code such as en, de, zh "
                            "or zh-Hans (lowercase letters, optional -subtag)")
    return language


def base_language(language: str) -> str:
    """``"zh-Hans"`` -> ``"zh"``: the ISO code without its region / script subtag, lowercased."""
    return language.split("-", 1)[0].lower()


def resolve_splitter(language: str, splitter: str) -> str:
    """``auto`` -> ``spacy`` when the language is in :data:`SPACY_LANGUAGES`, else ``rules``."""
    if splitter not in SPLITTERS:
        raise BertlookError(f"unknown sentence splitter {splitter!r} (expected one of {', '.join(SPLITTERS)})")
    if splitter != "auto":
        return splitter
    return "spacy" if base_language(language) in SPACY_LANGUAGES else "rules"


# ------------------------------------------------------------------------------------ rules

def _starts_sentence(text: str, pos: int) -> bool:
    """Whether what follows ``pos`` (whitespace, then opening punctuation) starts with a non-lowercase."""
    i = pos
    while i < len(text) and (text[i].isspace() or text[i] in _OPENERS):
        i += 1
    return i >= len(text) or not text[i].islower()


def _next_char(text: str, pos: int) -> str:
    i = pos
    while i < len(text) and text[i].isspace():
        i += 1
    return text[i] if i < len(text) else ""


def _is_non_final(text: str, dot: int, after: int, language: str) -> bool:
    """Whether the ``.`` at ``dot`` (run ends at ``after``) ends an abbreviation, initial or number."""
    start = dot
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    token = text[start:dot + 1]
    while token and token[0] in _OPENERS:
        token = token[1:]
    word = token[:-1]
    if not word:
        return False
    if _INITIALS.match(token):  # "J.", "U.S.", "e.g.", "z.B."
        return True
    if token.lower() in ABBREVIATIONS.get(language, ()):
        return True
    if word.isdigit():
        if _next_char(text, after).isdigit():  # "1. 2", numbered items
            return True
        if language in ORDINAL_DOT_LANGUAGES and len(word) <= 2:  # "am 1. Januar"
            return True
    return False


def _split_paragraph(para: str, language: str) -> list[str]:
    pieces: list[str] = []
    start = i = 0
    n = len(para)
    while i < n:
        c = para[i]
        if c in ANYWHERE_TERMINATORS:
            j = i + 1
            while j < n and (para[j] in ANYWHERE_TERMINATORS or para[j] in SPACED_TERMINATORS):
                j += 1
            while j < n and para[j] in CLOSERS:
                j += 1
            pieces.append(para[start:j])
            start = i = j
            continue
        if c in SPACED_TERMINATORS:
            j = i + 1
            while j < n and para[j] in SPACED_TERMINATORS:
                j += 1
            run_end = j
            while j < n and para[j] in CLOSERS:
                j += 1
            if (j < n and para[j].isspace() and _starts_sentence(para, j)
                    and not (para[i:run_end] == "." and _is_non_final(para, i, j, language))):
                pieces.append(para[start:j])
                start = j
            i = j
            continue
        i += 1
    pieces.append(para[start:])
    return pieces


def split_sentences_rules(text: str, language: str) -> list[str]:
    """bertlook's rule-based splitter: ``text`` -> sentences, paragraph by paragraph (one per line).

    Inside a paragraph a sentence ends

    * after ``.`` ``!`` ``?`` ``…`` (a run of them, plus closing quotes / brackets) followed by
      whitespace and a start that is not lowercase (opening quotes / brackets skipped), except after a
      single ``.`` that ends initials or letter abbreviations (``J.``, ``U.S.``, ``e.g.``, ``z.B.``),
      a word of the language's :data:`ABBREVIATIONS` (``Mr.``, ``bzw.``), or a number followed by a
      digit (``1. 2``) or, in :data:`ORDINAL_DOT_LANGUAGES`, a number of at most two digits
      (``am 1. Januar``);
    * after any of :data:`ANYWHERE_TERMINATORS` (``。！？`` and their variants, ``।`` ``॥``, ``؟`` ``۔``,
      ``።``, ``։``; plus closing quotes / brackets), with or without following whitespace.

    Sentences are stripped; for spaced languages whitespace inside a sentence is collapsed to single
    spaces, for :data:`NO_SPACE_LANGUAGES` the text is kept as is. Empty sentences are omitted.
    Limits: no splitting without punctuation (Thai, Lao, Khmer end sentences with a space), and a
    sentence ending in an initial or a listed abbreviation is joined with the next one.
    """
    lang = base_language(language)
    keep_spaces = lang in NO_SPACE_LANGUAGES
    sentences: list[str] = []
    for para in text.split("\n"):
        para = para.strip()
        if not para:
            continue
        for piece in _split_paragraph(para, lang):
            s = piece.strip() if keep_spaces else " ".join(piece.split())
            if s:
                sentences.append(s)
    return sentences


# ------------------------------------------------------------------------------------ spaCy

@functools.lru_cache(maxsize=4)
def _sentencizer(language: str = "en"):
    import spacy  # lazy: not in envs/analysis.yaml, whose steps import this module

    try:
        nlp = spacy.blank(language)
    except Exception as err:  # ImportError (missing segmenter package) or spaCy's unknown-language error
        raise BertlookError(
            f"spaCy cannot build a blank pipeline for language {language!r} ({type(err).__name__}: "
            f"{str(err).strip().splitlines()[0] if str(err).strip() else err!r}); use the rule-based "
            "splitter instead (segments.splitter: rules, or --splitter rules)") from err
    nlp.add_pipe("sentencizer")
    nlp.max_length = 10_000_000
    return nlp


def _split_spacy(text: str, language: str) -> list[str]:
    paragraphs = [p for p in text.split("\n") if p.strip()]
    sentences: list[str] = []
    for doc in _sentencizer(base_language(language)).pipe(paragraphs):
        for sent in doc.sents:
            s = " ".join(sent.text.split())
            if s:
                sentences.append(s)
    return sentences


def split_sentences(text: str, language: str = "en", splitter: str = "spacy") -> list[str]:
    """Split ``text`` into sentences, paragraph by paragraph (one paragraph per line).

    ``splitter="spacy"``: spaCy's rule-based ``sentencizer`` on ``spacy.blank(language)`` (a
    :class:`BertlookError` naming the language and suggesting ``splitter: rules`` when spaCy cannot
    build it); whitespace inside a sentence is collapsed. ``"rules"``: :func:`split_sentences_rules`.
    ``"auto"``: :func:`resolve_splitter`. Deterministic; empty sentences are omitted.
    """
    splitter = resolve_splitter(language, splitter)
    if splitter == "rules":
        return split_sentences_rules(text, language)
    return _split_spacy(text, language)


def is_usable_sentence(sentence: str, language: str = "en") -> bool:
    """Spaced scripts: at least 3 whitespace-separated words and at least one letter.

    :data:`NO_SPACE_LANGUAGES`: at least 3 letters (``str.isalpha``: CJK ideographs and kana count).
    """
    if base_language(language) in NO_SPACE_LANGUAGES:
        return sum(1 for c in sentence if c.isalpha()) >= 3
    return len(sentence.split()) >= 3 and any(c.isalpha() for c in sentence)


def prose_end_pattern(language: str) -> re.Pattern[str]:
    """How a paragraph must end to count as prose (:func:`bertlook.data.documents.plain_text_paragraphs`).

    ``en``: ``. ! ? :`` optionally followed by a closing quote or bracket (the pattern English corpora
    have always been read with, unchanged). Every other language also accepts the
    :data:`ANYWHERE_TERMINATORS` (``。`` ``।`` ``؟`` ...) and more closing marks (``」`` ``»`` ``）``).
    """
    if base_language(language) == "en":
        return _PROSE_END_EN
    return _PROSE_END_ANY


_PROSE_END_EN = re.compile(r"[.!?:][\"'\u201d\u2019)\]]*$")
_PROSE_END_ANY = re.compile("[.!?:…" + re.escape("".join(sorted(ANYWHERE_TERMINATORS))) + "]["
                            + re.escape("".join(sorted(CLOSERS))) + "]*$")

__all__ = ["ABBREVIATIONS", "ANYWHERE_TERMINATORS", "NO_SPACE_LANGUAGES", "ORDINAL_DOT_LANGUAGES",
           "SPACY_LANGUAGES", "SPLITTERS", "base_language", "check_language", "is_usable_sentence", "prose_end_pattern",
           "resolve_splitter", "split_sentences", "split_sentences_rules"]
