"""CoNLL-2012 coreference reader: document parts, their parse trees and gold mentions.

Reads CoNLL-2012 ``*_conll`` / ``*.gold_conll`` files (OntoNotes layout, whitespace-separated columns:
doc id, part number, word index, word, POS, parse bit, predicate lemma, frameset id, word sense,
speaker, named entities, predicate arguments (any number of columns, possibly none), coreference =
LAST column). ``#begin document (<doc>); part <NNN>`` ... ``#end document``; a blank line ends a
sentence. The unit is the **document part** (:class:`Document`, what CoNLL-2012 scores).
Coreference cells are ``-`` or ``|``-joined items ``(12``, ``12)``, ``(12)``, processed left to right
as the reference scorer does; a closing item closes the most recent open mention of that id (LIFO).
A close without an open, or a mention still open at ``#end document``, is a
:class:`~bertlook.errors.BertlookError` naming ``file:line``. Exact duplicate mentions (same span and
cluster) are kept once and counted. Parts without any mention are skipped and counted. The parse bits
of a sentence (``(TOP(S(NP*`` ... ``*))``, ``*`` = the word with its POS as preterminal) must form one
tree (:func:`parse_tree`); when a sentence's bits do not (bad syntax, unbalanced brackets, several
roots, ``-``) the **whole part** gets no trees (``trees = [None, ...]``), the reason is kept with
``file:line`` and the part is counted, and its mentions use the last-word head rule
(:func:`bertlook.data.coref_mentions.mention_heads`).

Used by :mod:`bertlook.attention.coref_maps` (``coref-extract``); the choices are listed in
``docs/coreference.md``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from bertlook.data.treebank import iter_text_lines
from bertlook.errors import BertlookError

#: How many ids / error messages a count list keeps (the counts themselves are complete).
MAX_LISTED = 20

_BEGIN = re.compile(r"^#begin\s+document\s+\((.*)\)\s*(?:;\s*part\s+(\S+))?\s*$")
_PARSE_BIT = re.compile(r"^((?:\([^()\s*]+)*)\*(\)*)$")
_OPEN_LABEL = re.compile(r"\(([^()\s*]+)")
_SINGLE = re.compile(r"^\(([0-9]{1,18})\)$")
_OPEN = re.compile(r"^\(([0-9]{1,18})$")
_CLOSE = re.compile(r"^([0-9]{1,18})\)$")
_INTEGER = re.compile(r"^[+-]?[0-9]{1,18}$")
MIN_COLUMNS = 12


# --------------------------------------------------------------------------------------------------
# data structures
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Node:
    """A constituent (or a preterminal when ``children`` is empty); ``start``/``end`` are inclusive
    word indices over the whole part."""

    label: str
    start: int
    end: int = -1
    children: list["Node"] = dataclasses.field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        """True for a preterminal (a word under its POS tag)."""
        return not self.children

    def bracketed(self, words: Sequence[str] | None = None) -> str:
        """PTB-style string, e.g. ``(NP (DT the) (NN dog))`` (for messages and tests)."""
        if self.is_preterminal:
            w = words[self.start] if words is not None else str(self.start)
            return f"({self.label} {w})"
        return f"({self.label} " + " ".join(c.bracketed(words) for c in self.children) + ")"


@dataclasses.dataclass(frozen=True, order=True)
class Mention:
    """A gold mention: inclusive word indices over the whole part, cluster id, line of its opening."""

    start: int
    end: int
    cluster: int
    line: int = dataclasses.field(default=0, compare=False)


@dataclasses.dataclass
class Document:
    """One CoNLL-2012 document part.

    ``sentences``: ``(start, end)`` word ranges (end exclusive); ``trees``: one :class:`Node` per
    sentence, or ``None`` for every sentence when the part's parse bits are unusable
    (``tree_error`` then says why, with ``file:line``). ``mentions`` are sorted by
    (start, end, cluster). ``source`` / ``line``: file and line of ``#begin document``.
    """

    doc_id: str
    part: int
    words: list[str]
    pos: list[str]
    sentences: list[tuple[int, int]]
    trees: list[Node | None]
    mentions: list[Mention]
    source: str
    line: int
    tree_error: str | None = None
    _spans: dict[tuple[int, int], Node] | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def id(self) -> str:
        """``<doc id>#<part>`` (part with 3 digits): the id of the part's store record."""
        return f"{self.doc_id}#{self.part:03d}"

    @property
    def where(self) -> str:
        """``file:line: document <doc id> part <NNN>`` (for messages)."""
        return f"{self.source}:{self.line}: document {self.doc_id} part {self.part:03d}"

    def clusters(self) -> dict[int, list[Mention]]:
        """Mentions by cluster id, each list in mention order."""
        out: dict[int, list[Mention]] = {}
        for m in self.mentions:
            out.setdefault(m.cluster, []).append(m)
        return out

    def has_trees(self) -> bool:
        """True when the part has sentences and every one has a usable tree."""
        return bool(self.trees) and all(t is not None for t in self.trees)

    def constituent(self, start: int, end: int) -> Node | None:
        """The highest constituent (or preterminal) spanning exactly words ``start..end``."""
        if not self.has_trees():
            return None
        if self._spans is None:
            spans: dict[tuple[int, int], Node] = {}
            for tree in self.trees:
                stack = [tree]
                while stack:
                    node = stack.pop()
                    spans.setdefault((node.start, node.end), node)  # pre-order: the highest node first
                    stack.extend(reversed(node.children))
            self._spans = spans
        return self._spans.get((start, end))


# --------------------------------------------------------------------------------------------------
# reader
# --------------------------------------------------------------------------------------------------


def parse_tree(bits: Sequence[str], pos: Sequence[str], offset: int = 0) -> Node:
    """Build one sentence's tree from its parse bits; the ``*`` of word i becomes ``(POS_i word_i)``.

    Raises :class:`BertlookError` (message without location; callers add ``file:line``) when a bit
    is malformed, brackets do not balance, or the bits do not form exactly one tree.
    """
    stack: list[Node] = []
    roots: list[Node] = []

    def attach(node: Node) -> None:
        (stack[-1].children if stack else roots).append(node)

    for k, bit in enumerate(bits):
        m = _PARSE_BIT.match(bit)
        if not m:
            raise BertlookError(f"word {k + 1}: parse bit {bit!r} is not of the form (X(Y*))")
        i = offset + k
        for label in _OPEN_LABEL.findall(m.group(1)):
            node = Node(label=label, start=i)
            attach(node)
            stack.append(node)
        attach(Node(label=pos[k], start=i, end=i))
        for _ in range(len(m.group(2))):
            if not stack:
                raise BertlookError(f"word {k + 1}: parse bit {bit!r} closes a bracket that is not open")
            stack.pop().end = i
    if stack:
        raise BertlookError(f"{len(stack)} bracket(s) of the parse bits still open at the end of the sentence")
    if len(roots) != 1:
        raise BertlookError(f"the parse bits form {len(roots)} trees, not one")
    return roots[0]


def _parse_coref_cell(cell: str, where: str) -> list[tuple[str, int]]:
    """``(1|(2)|3)`` -> ``[("open", 1), ("single", 2), ("close", 3)]``; ``-`` -> ``[]``."""
    if cell == "-":
        return []
    out: list[tuple[str, int]] = []
    for item in cell.split("|"):
        if m := _SINGLE.match(item):
            out.append(("single", int(m.group(1))))
        elif m := _OPEN.match(item):
            out.append(("open", int(m.group(1))))
        elif m := _CLOSE.match(item):
            out.append(("close", int(m.group(1))))
        else:
            raise BertlookError(f"{where}: bad coreference item {item!r} in {cell!r} (expected (N, N) or (N))")
    return out


class _PartBuilder:
    def __init__(self, doc_id: str, part: int, source: str, line: int) -> None:
        self.doc_id, self.part, self.source, self.line = doc_id, part, source, line
        self.words: list[str] = []
        self.pos: list[str] = []
        self.sentences: list[tuple[int, int]] = []
        self.trees: list[Node | None] = []
        self.tree_error: str | None = None
        self.mentions: set[Mention] = set()
        self.duplicates = 0
        self.open: dict[int, list[tuple[int, int]]] = {}
        self._sent: list[tuple[int, list[str]]] = []  # (line, columns)

    def add_line(self, lineno: int, cols: list[str], path: str) -> None:
        where = f"{path}:{lineno}"
        if len(cols) < MIN_COLUMNS:
            raise BertlookError(f"{where}: {len(cols)} columns; a CoNLL-2012 line has at least {MIN_COLUMNS} "
                                "(doc id, part, index, word, POS, parse, lemma, frameset, sense, speaker, NE, "
                                "[predicate arguments], coreference)")
        if self._sent and len(cols) != len(self._sent[0][1]):
            raise BertlookError(f"{where}: {len(cols)} columns, but the sentence's first line "
                                f"({path}:{self._sent[0][0]}) has {len(self._sent[0][1])}")
        if cols[0] != self.doc_id:
            raise BertlookError(f"{where}: document id {cols[0]!r} inside document {self.doc_id!r}")
        if not (_INTEGER.match(cols[1]) and _INTEGER.match(cols[2])):
            raise BertlookError(f"{where}: part number {cols[1]!r} and word index {cols[2]!r} must be integers")
        part = int(cols[1])
        index = int(cols[2])
        if part != self.part:
            raise BertlookError(f"{where}: part number {part} inside part {self.part:03d} of {self.doc_id!r}")
        if index != len(self._sent):
            raise BertlookError(f"{where}: word index {index}, expected {len(self._sent)} (indices restart at 0 "
                                "in every sentence)")
        self._sent.append((lineno, cols))
        i = len(self.words)
        self.words.append(cols[3])
        self.pos.append(cols[4])
        for kind, cid in _parse_coref_cell(cols[-1], where):
            if kind == "single":
                self._add(Mention(i, i, cid, lineno))
            elif kind == "open":
                self.open.setdefault(cid, []).append((i, lineno))
            else:
                opened = self.open.get(cid)
                if not opened:
                    raise BertlookError(f"{where}: coreference bracket '{cid})' closes a mention of cluster {cid} "
                                        "that is not open (unbalanced brackets)")
                start, open_line = opened.pop()
                self._add(Mention(start, i, cid, open_line))

    def _add(self, m: Mention) -> None:
        if m in self.mentions:
            self.duplicates += 1
        else:
            self.mentions.add(m)

    def end_sentence(self, path: str) -> None:
        if not self._sent:
            return
        start = len(self.words) - len(self._sent)
        first_line = self._sent[0][0]
        bits = [cols[5] for _, cols in self._sent]
        pos = [cols[4] for _, cols in self._sent]
        tree = None
        if self.tree_error is None:
            try:
                tree = parse_tree(bits, pos, offset=start)
            except BertlookError as err:
                self.tree_error = f"{path}:{first_line}: sentence {len(self.sentences) + 1}: {err}"
        self.sentences.append((start, len(self.words)))
        self.trees.append(tree)
        self._sent = []

    def finish(self, path: str, end_line: int) -> Document:
        self.end_sentence(path)
        for cid, opened in sorted(self.open.items()):
            if opened:
                start, line = opened[0]
                raise BertlookError(f"{path}:{line}: coreference bracket '({cid}' is never closed before "
                                    f"#end document (line {end_line}; unbalanced brackets)")
        trees = self.trees if self.tree_error is None else [None] * len(self.sentences)
        return Document(doc_id=self.doc_id, part=self.part, words=self.words, pos=self.pos,
                        sentences=self.sentences, trees=trees, mentions=sorted(self.mentions),
                        source=path, line=self.line, tree_error=self.tree_error)


def new_read_counts() -> dict[str, Any]:
    """The reader's counts, all zero (keys: see :func:`read_conll_files`)."""
    return {
        "files": 0, "documents": 0, "parts": 0, "sentences": 0, "words": 0, "mentions": 0, "clusters": 0,
        "duplicate_mentions": 0, "comment_lines": 0,
        "documents_without_mentions": 0, "parts_without_mentions": 0, "parts_without_mentions_ids": [],
        "parts_with_unusable_tree": 0, "unusable_tree_ids": [], "unusable_tree_errors": [],
    }


def read_conll(path, *, counts: dict[str, Any] | None = None, keep_empty: bool = False) -> list[Document]:
    """Document parts of one CoNLL-2012 file, in file order.

    Parts without mentions are left out (``keep_empty=False``) and counted. ``counts`` (a dict, updated
    in place; see :func:`read_conll_files`) receives the reader's counts. Malformed input raises
    :class:`BertlookError` with ``file:line``. The file is UTF-8 (a leading BOM is skipped) with LF or
    CRLF line endings; bytes that are not UTF-8, CR-only (old Mac) line endings, and a file without
    any ``#begin document`` (e.g. empty) are errors too.
    """
    p = Path(path)
    if not p.is_file():
        raise BertlookError(f"{p}: CoNLL-2012 file not found")
    c = counts if counts is not None else new_read_counts()
    for key, value in new_read_counts().items():
        c.setdefault(key, value)
    c["files"] += 1
    src = str(p)
    docs: list[Document] = []
    builder: _PartBuilder | None = None
    doc_ids: dict[str, bool] = {}  # doc id -> has any mention (this file)

    lineno = 0
    begun = 0
    try:
        fh = open(p, "rb")
    except OSError as err:
        raise BertlookError(f"{p}: cannot read ({err.strerror or err})") from None
    with fh:
        # UTF-8 (a leading BOM is skipped), LF or CRLF; bad bytes and CR-only endings are file:line errors
        for lineno, raw in iter_text_lines(fh, p):
            line = raw.strip()
            if line.startswith("#begin"):
                builder = _begin_part(line, builder, p, lineno)
                begun += 1
            elif line.startswith("#end document"):
                if builder is None:
                    raise BertlookError(f"{p}:{lineno}: #end document without #begin document")
                doc = builder.finish(src, lineno)
                builder = None
                if _count_part(doc, c, doc_ids, keep_empty):
                    docs.append(doc)
            elif line.startswith("#"):
                c["comment_lines"] += 1
            elif not line:
                if builder is not None:
                    builder.end_sentence(src)
            else:
                if builder is None:
                    raise BertlookError(f"{p}:{lineno}: data line outside a document (no #begin document before it)")
                builder.add_line(lineno, line.split(), src)
                if builder.duplicates:
                    c["duplicate_mentions"] += builder.duplicates
                    builder.duplicates = 0
    if builder is not None:
        raise BertlookError(f"{p}:{builder.line}: document {builder.doc_id!r} part {builder.part:03d} has no "
                            "#end document")
    if not begun:
        what = "empty file" if lineno == 0 else f"no '#begin document' line in its {lineno} lines"
        raise BertlookError(f"{p}: {what} (expected a CoNLL-2012 *_conll / *.gold_conll file)")
    c["documents"] += len(doc_ids)
    c["documents_without_mentions"] += sum(1 for has in doc_ids.values() if not has)
    return docs


def _begin_part(line: str, builder: _PartBuilder | None, p: Path, lineno: int) -> _PartBuilder:
    """The builder of the part a ``#begin document (<doc>); part <NNN>`` line opens (no part may be open)."""
    m = _BEGIN.match(line)
    if not m:
        raise BertlookError(f"{p}:{lineno}: malformed line {line!r} "
                            "(expected '#begin document (<doc>); part <NNN>')")
    if builder is not None:
        raise BertlookError(f"{p}:{lineno}: #begin document inside document {builder.doc_id!r} "
                            f"(begun at line {builder.line}; missing #end document)")
    if m.group(2) is not None and not _INTEGER.match(m.group(2)):
        raise BertlookError(f"{p}:{lineno}: part {m.group(2)!r} is not an integer")
    part = int(m.group(2)) if m.group(2) is not None else 0
    return _PartBuilder(m.group(1), part, str(p), lineno)


def _count_part(doc: Document, c: dict[str, Any], doc_ids: dict[str, bool], keep_empty: bool) -> bool:
    """Count a finished part in ``c`` (``doc_ids``: doc id -> has any mention); whether the part is kept (it has
    mentions, or ``keep_empty``)."""
    c["parts"] += 1
    c["sentences"] += len(doc.sentences)
    c["words"] += len(doc.words)
    if doc.tree_error is not None:
        c["parts_with_unusable_tree"] += 1
        c["unusable_tree_ids"].append(doc.id)
        if len(c["unusable_tree_errors"]) < MAX_LISTED:
            c["unusable_tree_errors"].append(doc.tree_error)
    doc_ids[doc.doc_id] = doc_ids.get(doc.doc_id, False) or bool(doc.mentions)
    if not doc.mentions:
        c["parts_without_mentions"] += 1
        c["parts_without_mentions_ids"].append(doc.id)
        if not keep_empty:
            return False
    c["mentions"] += len(doc.mentions)
    c["clusters"] += len(doc.clusters())
    return True


def expand_conll_paths(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Files as given; a directory stands for every ``*gold_conll`` file below it (sorted)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*gold_conll") if f.is_file())
            if not found:
                raise BertlookError(f"{p}: directory holds no *gold_conll file")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise BertlookError(f"{p}: CoNLL-2012 file not found")
    if not out:
        raise BertlookError("no CoNLL-2012 input given")
    return out


def read_conll_files(paths: Iterable[str | os.PathLike], *, counts: dict[str, Any] | None = None) -> list[Document]:
    """Every part of every file (directories expanded, see :func:`expand_conll_paths`).

    ``counts`` receives: files, documents, parts, sentences, words, mentions, clusters,
    duplicate_mentions, comment_lines, documents_without_mentions, parts_without_mentions (+ ids),
    parts_with_unusable_tree (+ ids, first errors). A part id seen twice is an error, and so is
    input without a single mention (nothing could be scored), naming the files.
    """
    c = counts if counts is not None else new_read_counts()
    docs: list[Document] = []
    seen: dict[str, str] = {}
    files = expand_conll_paths(paths)
    for path in files:
        for doc in read_conll(path, counts=c):
            if doc.id in seen:
                raise BertlookError(f"{doc.source}:{doc.line}: document {doc.doc_id} part {doc.part:03d} "
                                    f"already read at {seen[doc.id]}")
            seen[doc.id] = f"{doc.source}:{doc.line}"
            docs.append(doc)
    if not docs:  # every part of every file is without mentions (each file has parts: read_conll)
        shown = ", ".join(map(str, files[:MAX_LISTED]))
        if len(files) > MAX_LISTED:
            shown += f" (and {len(files) - MAX_LISTED} more files)"
        raise BertlookError(f"{shown}: no coreference mention in any of the {c['parts']} document part(s) "
                            "(the last column is '-' everywhere): nothing to score; give CoNLL-2012 files "
                            "with gold coreference (*.gold_conll)")
    return docs
