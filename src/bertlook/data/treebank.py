"""Dependency treebanks for head accuracy and the probes (``bertlook treebank``).

The paper (Clark et al. 2019, Section 4) scored attention heads against the WSJ Penn Treebank converted
to Stanford Dependencies (PTB-SD; LDC licensed, not downloadable). ``bertlook treebank`` turns any of three
sources into the same normalized files, ``train.conllu`` and ``dev.conllu`` (CoNLL-U, one
:class:`Sentence` per block) plus a JSON summary; this module holds their data model, readers, writer and
summaries:

* **local** (:func:`bertlook.data.gold_treebank.prepare_local`): files you supply by path, CoNLL-X (PTB-SD
  as the paper used it) or CoNLL-U (any Universal Dependencies treebank);
* **ud** (:func:`bertlook.data.gold_treebank.prepare_ud`): a UD treebank downloaded from GitHub at a pinned
  release tag (default ``UD_English-EWT`` ``r2.14``), with optional sha256 checks;
* **silver** (:func:`bertlook.data.silver_treebank.prepare_silver`): spaCy parses (ClearNLP labels:
  ``dobj``, ``pobj``, ``prep``, ``poss``, ...) of Wikipedia sentences from documents of the segments'
  dump that no segment uses, split into dev and train by whole documents.

Readers (:func:`read_conllu`, :func:`read_conllx`) validate every sentence and raise
:class:`~bertlook.errors.BertlookError` naming ``path:line`` (and the sentence id where known).
Files are UTF-8 (a leading BOM is skipped) with LF or CRLF line endings; bytes that are not UTF-8,
CR-only (old Mac) line endings and a ``sent_id`` holding a tab or other control character are
``path:line`` errors (:func:`iter_text_lines`).
Nothing is dropped silently: multi-word-token lines, empty nodes, stripped subtypes, multi-root
sentences and, for silver trees, every skipped sentence are counted and written to the summary.
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path
from bertlook.pipeline.config import CONLLU_SUFFIXES, CONLLX_SUFFIXES

#: Keys of the ``counts`` dict filled by the readers.
READ_COUNT_KEYS = (
    "sentences",
    "words",
    "multiword_tokens_skipped",  # CoNLL-U range lines such as ``3-4  don't``
    "empty_nodes_skipped",       # CoNLL-U empty nodes such as ``5.1``
    "multi_root_sentences",      # more than one word with head 0 (kept)
    "subtypes_stripped",         # relations such as ``nmod:poss`` turned into ``nmod``
)

_SENT_ID = re.compile(r"^#\s*sent_id\s*=\s*(.*?)\s*$")
_INT = re.compile(r"^[0-9]+$")
_RANGE_ID = re.compile(r"^[0-9]+-[0-9]+$")
_EMPTY_ID = re.compile(r"^[0-9]+\.[0-9]+$")
_MAX_ID_DIGITS = 9  # word ids and heads: longer digit strings are rejected before int()


def iter_text_lines(fh, path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line of a binary file: UTF-8 (a BOM at the start is skipped),
    LF or CRLF line endings (the ending is removed).

    Raises :class:`BertlookError` ``"<path>:<line>: ..."`` for bytes that are not UTF-8 and for a
    carriage return inside a line (a file with CR-only line endings reads as one line holding CRs).
    """
    for lineno, raw in enumerate(fh, start=1):
        try:
            line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise BertlookError(f"{path}:{lineno}: not UTF-8 text ({err.reason} at byte {err.start + 1} "
                                "of the line)") from None
        line = line.rstrip("\n")
        if line.endswith("\r"):
            line = line[:-1]
        if "\r" in line:
            q = shlex.quote(str(path))
            raise BertlookError(
                f"{path}:{lineno}: carriage return (CR) inside a line: CR-only line endings (old Mac "
                f"format) or a stray CR; convert with: tr '\\r' '\\n' < {q} > {shlex.quote(str(path) + '.lf')}")
        yield lineno, line


def _no_space_after(misc: str) -> bool:
    """True when a CoNLL-U MISC column holds ``SpaceAfter=No`` (``|``-separated attributes)."""
    return "SpaceAfter=No" in misc.strip().split("|")


def _control_char(text: str) -> str | None:
    """The first control / line-separator character of ``text`` (tab, CR, NUL, U+2028, ...), else None."""
    return next((c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)


# ------------------------------------------------------------------------------------ data model

@dataclass
class Sentence:
    """One dependency tree. Index ``i`` of each list is word ``i + 1``.

    ``heads[i]`` is the 1-based index of word ``i + 1``'s head, 0 for the root. ``source`` (file) and
    ``line`` (line number of the first token line, 1-based) say where it was read; they do not take
    part in ``==``, so a sentence read back from a written file compares equal to the original.
    ``space_after[i]`` is False when word ``i + 1`` is written without a space after it (CoNLL-U MISC
    ``SpaceAfter=No``; on a multi-word-token range line it applies to the range's last word); it
    defaults to all True (CoNLL-X and silver trees have no such information).
    """

    sent_id: str
    words: list[str]
    heads: list[int]
    rels: list[str]
    upos: list[str]
    xpos: list[str]
    source: str = field(default="", compare=False)
    line: int = field(default=0, compare=False)
    space_after: list[bool] | None = None

    def __post_init__(self) -> None:
        if self.space_after is None:
            self.space_after = [True] * len(self.words)

    def n(self) -> int:
        """Number of words."""
        return len(self.words)


# -------------------------------------------------------------------------------------- reading

def detect_format(path: str | os.PathLike) -> str:
    """``"conllu"`` for ``.conllu``; ``"conllx"`` for ``.conll``/``.conllx``/``.txt``/``.tsv``/``.sd``."""
    suffix = Path(path).suffix.lower()
    if suffix in CONLLU_SUFFIXES:
        return "conllu"
    if suffix in CONLLX_SUFFIXES:
        return "conllx"
    raise BertlookError(
        f"{path}: cannot tell the treebank format from the extension {suffix or '(none)'!r}: use "
        f".conllu for CoNLL-U or one of {', '.join(CONLLX_SUFFIXES)} for CoNLL-X, or give the format "
        "explicitly (--format conllu|conllx)"
    )


def _tree_problem(heads: list[int]) -> tuple[int, str] | None:
    """(0-based word, message) for a cycle in ``heads`` (all in range, at least one root), else None."""
    n = len(heads)
    state = [0] * n  # 0 = unvisited, 1 = on the current path, 2 = reaches the root
    for start in range(n):
        path: list[int] = []
        i = start
        while i >= 0 and state[i] == 0:
            state[i] = 1
            path.append(i)
            i = heads[i] - 1
        if i >= 0 and state[i] == 1:  # came back onto the current path: a cycle
            cycle = path[path.index(i):]
            chain = " -> ".join(str(w + 1) for w in cycle + [i])
            return i, f"cycle in the heads (words {chain})"
        for w in path:
            state[w] = 2
    return None


class _Reader:
    """Shared line-by-line reader of CoNLL-U and CoNLL-X files."""

    def __init__(self, path: Path, fmt: str, strip_subtypes: bool, counts: dict[str, int]):
        self.path, self.fmt, self.strip_subtypes, self.counts = path, fmt, strip_subtypes, counts
        self.sentences: list[Sentence] = []
        self.seen_ids: dict[str, int] = {}
        self._reset()

    def _reset(self) -> None:
        self.sent_id: str | None = None
        self.sent_id_line = 0
        self.words: list[str] = []
        self.heads: list[int] = []
        self.rels: list[str] = []
        self.upos: list[str] = []
        self.xpos: list[str] = []
        self.lines: list[int] = []
        self.space_after: list[bool] = []
        self.range_no_space: list[int] = []  # last word id of each multi-word token marked SpaceAfter=No

    def error(self, line: int, message: str) -> BertlookError:
        where = f"{self.path}:{line}: "
        if self.sent_id is not None:
            where += f"sentence {self.sent_id}: "
        return BertlookError(where + message)

    def comment(self, lineno: int, text: str) -> None:
        if self.words:
            raise self.error(lineno, "comment line inside a sentence (comments must come before the "
                                     "first word line of a sentence)")
        m = _SENT_ID.match(text)
        if m:
            bad = _control_char(m.group(1))
            if bad is not None:
                raise BertlookError(f"{self.path}:{lineno}: sent_id {m.group(1)!r} contains the control "
                                    f"character {bad!r} (sentence ids are written to TSV and JSON outputs)")
            self.sent_id, self.sent_id_line = m.group(1), lineno

    def token(self, lineno: int, line: str) -> None:
        cols = line.split("\t")
        if self.fmt == "conllu":
            if len(cols) != 10:
                raise self.error(lineno, f"expected 10 tab-separated columns (CoNLL-U), found "
                                         f"{len(cols)}" + self._tab_hint(line, cols))
        elif len(cols) < 8:
            raise self.error(lineno, f"expected 8 to 10 tab-separated columns (CoNLL-X: ID FORM LEMMA "
                                     f"CPOSTAG POSTAG FEATS HEAD DEPREL [PHEAD PDEPREL]), found "
                                     f"{len(cols)}" + self._tab_hint(line, cols))
        wid = cols[0].strip()
        if self.fmt == "conllu" and _RANGE_ID.match(wid):
            self.counts["multiword_tokens_skipped"] += 1
            if _no_space_after(cols[9]):
                end = wid.split("-", 1)[1]
                if len(end) <= _MAX_ID_DIGITS:
                    self.range_no_space.append(int(end))
            return
        if self.fmt == "conllu" and _EMPTY_ID.match(wid):
            self.counts["empty_nodes_skipped"] += 1
            return
        if not _INT.match(wid):
            raise self.error(lineno, f"non-integer word id {cols[0]!r}")
        if len(wid) > _MAX_ID_DIGITS:
            raise self.error(lineno, f"word id {wid[:20]}... has more than {_MAX_ID_DIGITS} digits")
        expected = len(self.words) + 1
        if int(wid) != expected:
            raise self.error(lineno, f"word id {int(wid)} out of order: ids must run 1..n, "
                                     f"expected {expected}")
        form = cols[1]
        if not form.strip():
            raise self.error(lineno, f"word {expected} has an empty FORM")
        head = cols[6].strip()
        if not _INT.match(head):
            raise self.error(lineno, f"non-integer head {cols[6]!r} of word {expected}")
        if len(head) > _MAX_ID_DIGITS:
            raise self.error(lineno, f"head {head[:20]}... of word {expected} has more than "
                                     f"{_MAX_ID_DIGITS} digits")
        rel = cols[7].strip()
        if self.strip_subtypes and ":" in rel:
            rel = rel.split(":", 1)[0]
            self.counts["subtypes_stripped"] += 1
        self.words.append(form)
        self.heads.append(int(head))
        self.rels.append(rel)
        self.upos.append(cols[3].strip())
        self.xpos.append(cols[4].strip())
        self.lines.append(lineno)
        self.space_after.append(not (self.fmt == "conllu" and _no_space_after(cols[9])))

    @staticmethod
    def _tab_hint(line: str, cols: list[str]) -> str:
        if len(cols) == 1 and len(line.split()) >= 8:
            return " (columns must be separated by tabs, not spaces)"
        return ""

    def end_sentence(self) -> None:
        if not self.words:  # a block of comments only (e.g. file-level comments): nothing to keep
            self._reset()
            return
        k = len(self.sentences) + 1
        n = len(self.words)
        if self.sent_id is None or self.sent_id == "":
            self.sent_id = f"{self.path.stem}-{k}"
        elif self.sent_id in self.seen_ids:
            raise self.error(self.sent_id_line, f"duplicate sent_id (first used on line "
                                                f"{self.seen_ids[self.sent_id]})")
        else:
            self.seen_ids[self.sent_id] = self.sent_id_line
        for i, h in enumerate(self.heads):
            if h > n:
                raise self.error(self.lines[i], f"head {h} of word {i + 1} out of range 0..{n}")
        roots = [i for i, h in enumerate(self.heads) if h == 0]
        if not roots:
            raise self.error(self.lines[0], f"no root: no word of the {n} has head 0")
        problem = _tree_problem(self.heads)
        if problem:
            i, message = problem
            raise self.error(self.lines[i], message)
        if len(roots) > 1:
            self.counts["multi_root_sentences"] += 1
        for end in self.range_no_space:  # a range line's SpaceAfter=No: after the range's last word
            if 1 <= end <= n:
                self.space_after[end - 1] = False
        self.counts["sentences"] += 1
        self.counts["words"] += n
        self.sentences.append(Sentence(
            sent_id=self.sent_id, words=self.words, heads=self.heads, rels=self.rels,
            upos=self.upos, xpos=self.xpos, source=str(self.path), line=self.lines[0],
            space_after=self.space_after,
        ))
        self._reset()

    def run(self, allow_empty: bool) -> list[Sentence]:
        path = self.path
        if not path.exists():
            raise BertlookError(f"{path}: treebank file not found")
        if not path.is_file():
            raise BertlookError(f"{path}: not a file")
        try:
            fh = open(path, "rb")
        except OSError as err:
            raise BertlookError(f"{path}: cannot read the treebank ({err.strerror or err})") from err
        with fh:
            for lineno, line in iter_text_lines(fh, path):
                if not line.strip():
                    self.end_sentence()
                elif line.startswith("#"):
                    self.comment(lineno, line)
                else:
                    self.token(lineno, line)
            self.end_sentence()
        if not self.sentences and not allow_empty:
            what = "empty file" if path.stat().st_size == 0 else "no sentences in the file"
            raise BertlookError(f"{path}: {what} (expected a {'CoNLL-U' if self.fmt == 'conllu' else 'CoNLL-X'}"
                                " treebank)")
        return self.sentences


def _read(path, fmt: str, strip_subtypes: bool, counts: dict[str, int] | None,
          allow_empty: bool) -> list[Sentence]:
    if counts is None:
        counts = {}
    for key in READ_COUNT_KEYS:
        counts.setdefault(key, 0)
    return _Reader(Path(path), fmt, strip_subtypes, counts).run(allow_empty)


def read_conllu(path: str | os.PathLike, *, strip_subtypes: bool = False,
                counts: dict[str, int] | None = None, allow_empty: bool = False) -> list[Sentence]:
    """Read a Universal Dependencies CoNLL-U file (10 tab-separated columns).

    Multi-word-token range lines (``3-4  don't``) and empty nodes (``5.1``) are skipped and counted
    in ``counts`` (keys :data:`READ_COUNT_KEYS`); the words of the basic tree are kept. Sentence ids
    come from ``# sent_id = ...`` comments (they must be unique), else ``"{file stem}-{k}"`` with
    ``k`` the 1-based position of the sentence in the file. ``strip_subtypes=True`` turns
    ``nmod:poss`` into ``nmod``.

    Every sentence is validated; each problem raises :class:`BertlookError` naming ``path:line`` and
    the sentence id where known: wrong column count, non-integer id or head, ids not ``1..n`` in order,
    a head out of range, no root, a cycle. More than one root is accepted (UD and PTB-SD trees have a
    single root, so it signals a conversion problem) and counted in ``counts["multi_root_sentences"]``.
    A file without sentences is an error, unless ``allow_empty=True`` (the train file that
    ``bertlook treebank --source local`` writes when no train split was given has no sentences).
    """
    return _read(path, "conllu", strip_subtypes, counts, allow_empty)


def read_conllx(path: str | os.PathLike, *, strip_subtypes: bool = False,
                counts: dict[str, int] | None = None, allow_empty: bool = False) -> list[Sentence]:
    """Read a CoNLL-X file: PTB converted to Stanford Dependencies, as the paper used it.

    Columns ``ID FORM LEMMA CPOSTAG POSTAG FEATS HEAD DEPREL [PHEAD PDEPREL]`` separated by tabs (8 or
    more; PHEAD/PDEPREL are optional and ignored), one blank line between sentences. CPOSTAG is stored
    as ``upos``, POSTAG as ``xpos``. Ids are ``"{file stem}-{k}"`` (k 1-based) unless a
    ``# sent_id = ...`` comment precedes the sentence. Validation, counts and ``allow_empty`` as in
    :func:`read_conllu` (PTB-SD trees have a single root; more are counted, not rejected).
    """
    return _read(path, "conllx", strip_subtypes, counts, allow_empty)


def read_treebank(path: str | os.PathLike, fmt: str = "auto", **kwargs) -> list[Sentence]:
    """:func:`read_conllu` or :func:`read_conllx`; ``fmt="auto"`` uses :func:`detect_format`."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "conllu":
        return read_conllu(path, **kwargs)
    if fmt == "conllx":
        return read_conllx(path, **kwargs)
    raise BertlookError(f"unknown treebank format {fmt!r} (expected auto, conllu or conllx)")


# -------------------------------------------------------------------------------------- writing

def _field(value: str, what: str, sent: Sentence) -> str:
    value = "_" if value is None or value == "" else str(value)
    if "\t" in value or "\n" in value or "\r" in value:
        raise BertlookError(f"sentence {sent.sent_id}: {what} {value!r} contains a tab or newline")
    return value


def write_conllu(path: str | os.PathLike, sentences: Iterable[Sentence], *,
                 comments: dict[str, Any] | None = None) -> int:
    """Write ``sentences`` as CoNLL-U, atomically; returns the number of sentences written.

    Each sentence gets ``# sent_id`` and ``# text`` comments and 10 columns (LEMMA, FEATS and DEPS are
    ``_``; MISC is ``SpaceAfter=No`` for a word whose ``space_after`` is False, else ``_``; an empty
    UPOS/XPOS/DEPREL is written as ``_``). ``# text`` is the words joined by single spaces, not the
    original text (``SpaceAfter=No`` is ignored there, and multi-word tokens are not written: their
    syntactic words are); the MISC column keeps the flags, so ``read_conllu`` gives them back.
    ``comments`` (e.g. ``{"source": "silver: spaCy ..."}``) are written once, as ``# key = value``
    lines at the top of the file. ``read_conllu(path) == list(sentences)`` (``source`` and ``line``
    do not take part in the comparison). With no sentences the file holds only the comments; read it
    with ``read_conllu(path, allow_empty=True)``.
    """
    written = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            for key, value in (comments or {}).items():
                text = f"{key} = {value}"
                if "\n" in text or "\r" in text:
                    raise BertlookError(f"{path}: comment {key!r} contains a newline")
                fh.write(f"# {text}\n")
            for sent in sentences:
                n = len(sent.words)
                flags = sent.space_after if sent.space_after is not None else [True] * n
                for name in ("heads", "rels", "upos", "xpos", "space_after"):
                    values = flags if name == "space_after" else getattr(sent, name)
                    if len(values) != n:
                        raise BertlookError(f"sentence {sent.sent_id}: {len(values)} {name} for {n} words")
                if n == 0:
                    raise BertlookError(f"sentence {sent.sent_id}: no words")
                sid = _field(sent.sent_id, "sent_id", sent)
                fh.write(f"# sent_id = {sid}\n# text = {' '.join(sent.words)}\n")
                for i in range(n):
                    head = int(sent.heads[i])
                    if not 0 <= head <= n:
                        raise BertlookError(f"sentence {sent.sent_id}: head {head} of word {i + 1} "
                                            f"out of range 0..{n}")
                    cols = [str(i + 1), _field(sent.words[i], "word", sent), "_",
                            _field(sent.upos[i], "UPOS", sent), _field(sent.xpos[i], "XPOS", sent),
                            "_", str(head), _field(sent.rels[i], "DEPREL", sent), "_",
                            "_" if flags[i] else "SpaceAfter=No"]
                    if not sent.words[i].strip():
                        raise BertlookError(f"sentence {sent.sent_id}: word {i + 1} is empty or "
                                            "whitespace")
                    fh.write("\t".join(cols) + "\n")
                fh.write("\n")
                written += 1
    return written


# ---------------------------------------------------------------------- UD v1 -> v2 relations

#: UD v1 relation labels renamed in UD v2 (universaldependencies.org, "changes from v1 to v2"), label for
#: label. Everything else (including subtypes such as ``nmod:poss``, ``acl:relcl``, ``compound:prt``) is
#: the same in both versions. Structural v2 changes (cc/punct attachment, copula heads) are not undone.
UD_V1_TO_V2 = {
    "dobj": "obj",                  # direct object: v2 calls it obj (indirect object iobj unchanged)
    "nsubjpass": "nsubj:pass",      # passive nominal subject became a subtype of nsubj
    "csubjpass": "csubj:pass",      # passive clausal subject became a subtype of csubj
    "auxpass": "aux:pass",          # passive auxiliary became a subtype of aux
    "mwe": "fixed",                 # fixed multiword expressions ("because of", "as well as")
    "name": "flat",                 # multiword names: v2 uses flat (headless, first word the head)
    "foreign": "flat:foreign",      # foreign-language strings: v2 uses the flat:foreign subtype
    "remnant": "orphan",            # ellipsis: v2 promotes a dependent and links the rest with orphan
}
#: v1 ``neg`` was removed in v2 (negation is the feature Polarity=Neg): a negating adverb ("not",
#: "nicht") is advmod, a negating determiner ("no", "kein") det. Chosen by the word's UPOS.
UD_V1_NEG_BY_UPOS = {"DET": "det"}
UD_V1_NEG_DEFAULT = "advmod"
#: v2 introduced obl for nominals attached to a predicate (v1 used nmod for them): nmod (and its
#: subtypes tmod/npmod) whose head is a VERB, ADJ or ADV becomes obl (obl:tmod, obl:npmod). Needs the
#: head's UPOS, and is applied only to a file with a v1-only label (:func:`normalise_ud_relations`): a v2 file
#: may attach nmod to such heads on purpose and is left unchanged.
UD_V2_OBL_HEAD_UPOS = frozenset({"VERB", "ADJ", "ADV"})
_NMOD_TO_OBL = {"nmod": "obl", "nmod:tmod": "obl:tmod", "nmod:npmod": "obl:npmod"}


def normalise_ud_relation(label: str, upos: str | None = None, head_upos: str | None = None) -> str:
    """The UD v2 name of a relation ``label`` (a v1 label is renamed, any other is returned as it is).

    ``upos``: the dependent's UPOS (``neg``: DET -> ``det``, anything else or unknown -> ``advmod``);
    ``head_upos``: the head's UPOS (``nmod``/``nmod:tmod``/``nmod:npmod`` on a VERB/ADJ/ADV head ->
    ``obl``/``obl:tmod``/``obl:npmod``; without it nmod is left alone). See :data:`UD_V1_TO_V2`.
    """
    if label in UD_V1_TO_V2:
        return UD_V1_TO_V2[label]
    if label == "neg":
        return UD_V1_NEG_BY_UPOS.get(upos or "", UD_V1_NEG_DEFAULT)
    if label in _NMOD_TO_OBL and head_upos in UD_V2_OBL_HEAD_UPOS:
        return _NMOD_TO_OBL[label]
    return label


def normalise_ud_relations(sentences: Iterable[Sentence], renamed: collections.Counter | None = None,
                           *, strip_subtypes: bool = False) -> collections.Counter:
    """Rename the UD v1 relations of ``sentences`` in place (:func:`normalise_ud_relation`).

    Returns (and adds to ``renamed``) the number of renamed words per ``"old->new"`` key. With
    ``strip_subtypes`` a new subtyped label (``nsubj:pass``) is cut to its base (``nsubj``), as the
    reader does for labels read with ``strip_subtypes``.
    """
    renamed = collections.Counter() if renamed is None else renamed
    sentences = list(sentences)
    # nmod -> obl only in a v1 file (one with a v1-only label): UD v2 files may have nmod under an
    # ADJ / VERB head on purpose, and must come out unchanged
    v1 = any(rel in UD_V1_TO_V2 or rel == "neg" for sent in sentences for rel in sent.rels)
    for sent in sentences:
        for i, rel in enumerate(sent.rels):
            h = sent.heads[i]
            head_upos = sent.upos[h - 1] if h > 0 and v1 else None
            new = normalise_ud_relation(rel, sent.upos[i] or None, head_upos)
            if strip_subtypes and ":" in new:
                new = new.split(":", 1)[0]
            if new != rel:
                renamed[f"{rel}->{new}"] += 1
                sent.rels[i] = new
    return renamed


# ------------------------------------------------------------------------------------ summaries

def relation_counts(sentences: Iterable[Sentence]) -> collections.Counter:
    """Number of words per relation label."""
    counter: collections.Counter = collections.Counter()
    for sent in sentences:
        counter.update(sent.rels)
    return counter


def split_summary(sentences: list[Sentence], **extra) -> dict[str, Any]:
    """The summary of one written split: ``extra`` (input, output, counts, ...), then its number of
    sentences and words and its 20 most frequent relations."""
    rels = relation_counts(sentences)
    return {
        **extra,
        "sentences": len(sentences),
        "words": sum(len(s.words) for s in sentences),
        "relations_top20": dict(rels.most_common(20)),
    }
