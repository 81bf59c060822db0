"""Coreference: attention heads as antecedent selectors (twin of Table 2 of Clark et al. 2019).

The authors released no coreference code, so every choice below is ours; ``docs/coreference.md``
lists them with the reasons, and the ambiguous ones are switches. Stages:

**Reader** (:func:`read_conll`, :func:`read_conll_files`). CoNLL-2012 ``*_conll`` / ``*.gold_conll``
files (OntoNotes layout, whitespace-separated columns: doc id, part number, word index, word, POS,
parse bit, predicate lemma, frameset id, word sense, speaker, named entities, predicate arguments
(any number of columns, possibly none), coreference = LAST column). ``#begin document (<doc>); part
<NNN>`` ... ``#end document``; a blank line ends a sentence. The unit is the **document part** (what
CoNLL-2012 scores). Coreference cells are ``-`` or ``|``-joined items ``(12``, ``12)``, ``(12)``,
processed left to right as the reference scorer does; a closing item closes the most recent open
mention of that id (LIFO). A close without an open, or a mention still open at ``#end document``, is a
:class:`~bertlook.errors.BertlookError` naming ``file:line``. Exact duplicate mentions (same span
and cluster) are kept once and counted. Parts without any mention are skipped and counted. The parse
bits of a sentence (``(TOP(S(NP*`` ... ``*))``, ``*`` = the word with its POS as preterminal) must
form one tree; when a sentence's bits do not (bad syntax, unbalanced brackets, several roots, ``-``)
the **whole part** gets no trees (``trees = [None, ...]``), the reason is kept with ``file:line``
and the part is counted, and its mentions use the last-word head rule.

**Head words** (:func:`mention_heads`, ``head_rule``). ``tree`` (default): the highest constituent
whose span equals the mention span, then Collins (1999) head rules down to a word, with the NP rule
adapted for coreference (a final possessive ``POS`` is never the head: "Mary 's" -> "Mary"); a span
that is not a constituent, or a part without trees, falls back to the mention's last word. ``last``:
always the last word. Every head records its source (``tree``, ``not_constituent``, ``no_tree``,
``last``), counted in the summaries.

**Truncation and extraction** (:func:`extract_coref_attention`). Each part is cut to the first
``max_seq_len`` wordpieces including the special tokens: ``[CLS] w1 .. wk [SEP]``, one segment
(token type ids 0), with as many whole words as fit. Mentions ending after word k ("cut") and
mentions starting after it ("outside") are dropped and counted separately; nothing else is dropped.
Words go to the model with PTB bracket escapes undone (``-LRB-`` -> ``(`` ...) and the ``/.``-style
escapes of conversational OntoNotes text unescaped (:func:`model_word`). The maps are converted to
word level exactly as for Table 1 (``bertlook.attention.extract_words``: TO a split word = sum, FROM = ``mean`` by
default) and streamed into a word-level attention store whose records carry ``id``
(``<doc id>#<part>``), ``tokens`` (``[CLS], words.., [SEP]``), ``pos``, ``mentions``
(``[start, end, cluster]``, 0-based inclusive word indices, sorted), ``mention_heads``, ``head_pos``,
``head_source`` and the truncation counts, so scoring needs only the store.

**Metric** (:func:`score_store`). Mentions are ordered by (start, end); an antecedent of mention m is
an *earlier* mention of m's cluster inside the truncated part (starts before m, or same start and ends
before m). Every mention with at least one antecedent is scored, typed by its head word's POS
(pronoun: PRP, PRP$, WP, WP$; proper: NNP, NNPS; nominal: everything else). A head is correct for m
when, in the row of m's head word, the largest attention among the candidates goes to the head word
of one of m's antecedents. Candidates (``candidates``): ``all`` = every word of the part except m's
head word itself ([CLS]/[SEP] are never candidates; paper reading, default), or ``mentions`` = the
head words of all earlier mentions (any cluster), again without m's own head word. An antecedent whose
head word is m's own head word therefore never makes m correct (such mentions are counted). Ties go to
the lowest word index. All L x H heads are scored at once per mention row (one argmax over
``[L, H, mentions, words]``).

**Baselines** (no attention; same scored mentions). ``nearest``: the nearest earlier mention (the last
one in (start, end) order), right when it is in m's cluster. ``head_match``: the nearest earlier
mention whose head word equals m's (lower-cased); wrong when there is none. ``rule_based``: sieves
(1) exact match of the lower-cased mention text, (2) head-word match, (3) number / gender / person
agreement (:data:`PRONOUN_FEATURES`; non-pronouns are third person, plural when the head is NNS/NNPS,
singular when NN/NNP, gender unknown), (4) any earlier mention; the nearest mention passing the first
sieve that any earlier mention passes is chosen.

**Outputs** (:func:`table2_frame`, :func:`write_not_run`, CLI ``coref``; the Markdown:
:func:`bertlook.reporting.tables.table2_markdown`):
``table2.csv`` (fractions), ``table2.md`` (percents), ``coref_heads.csv`` (every head) and a summary
JSON with every count; without a corpus, ``coref --not-run REASON`` writes tables that say so.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from bertlook.attention.store import AttentionStore, open_store
from bertlook.data.treebank import iter_text_lines
from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path, sha256_file, write_text
from bertlook.naming import head_label

# torch / transformers (bertlook.attention.modeling, .extraction, .extract_words) are imported inside
# extract_coref_attention and the tokenizer helpers only: `bertlook coref` (scoring) runs in the
# analysis env (envs/analysis.yaml), which has no torch; `coref-extract` runs in envs/torch.yaml.

HEAD_RULES = ("tree", "last")
CANDIDATES = ("all", "mentions")
MENTION_TYPES = ("pronoun", "proper", "nominal")
COLUMNS = ("all", *MENTION_TYPES)
PRONOUN_POS = frozenset({"PRP", "PRP$", "WP", "WP$"})
PROPER_POS = frozenset({"NNP", "NNPS"})
HEAD_SOURCES = ("tree", "not_constituent", "no_tree", "last")
SYSTEMS = ("nearest", "head_match", "rule_based", "neural", "best_head")
BASELINES = ("nearest", "head_match", "rule_based")
SYSTEM_LABELS = {
    "nearest": "Nearest mention",
    "head_match": "Head-word match",
    "rule_based": "Rule-based (4 sieves)",
    "neural": "Neural coref (paper only)",
    "best_head": "Best head",
}
NOT_RUN_REASON = "no coreference corpus configured"
MAX_LISTED = 20
#: the run's own Table 2 columns (:func:`table2_frame`)
TABLE2_RUN_COLUMNS = (
    "system", "all", "pronoun", "proper", "nominal", "n_all", "n_pronoun", "n_proper", "n_nominal",
    "head", "label", "note",
)
#: the columns of tables/table2.csv: the run's, with the paper's joined in (reporting.paper_join)
TABLE2_CSV_COLUMNS = (
    "system", "all", "pronoun", "proper", "nominal", "n_all", "n_pronoun", "n_proper", "n_nominal",
    "paper_all", "paper_pronoun", "paper_proper", "paper_nominal", "head", "paper_head", "label", "note",
)
HEADS_CSV_COLUMNS = ("layer", "head", "all", "pronoun", "proper", "nominal", "n")

#: Lower-cased pronoun -> (person, number, gender); ``None`` = unknown (agrees with anything).
PRONOUN_FEATURES: dict[str, tuple[int | None, str | None, str | None]] = {
    **{w: (1, "sg", None) for w in ("i", "me", "my", "mine", "myself")},
    **{w: (1, "pl", None) for w in ("we", "us", "our", "ours", "ourselves")},
    **{w: (2, None, None) for w in ("you", "your", "yours")},
    "yourself": (2, "sg", None),
    "yourselves": (2, "pl", None),
    **{w: (3, "sg", "male") for w in ("he", "him", "his", "himself")},
    **{w: (3, "sg", "female") for w in ("she", "her", "hers", "herself")},
    **{w: (3, "sg", "neuter") for w in ("it", "its", "itself")},
    **{w: (3, "pl", None) for w in ("they", "them", "their", "theirs", "themselves")},
}

# PTB escapes in OntoNotes word columns -> the characters a model should see.
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}
_SLASH_ESCAPE = re.compile(r"^/([.?!\-])$")

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
        return f"{self.doc_id}#{self.part:03d}"

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}: document {self.doc_id} part {self.part:03d}"

    def clusters(self) -> dict[int, list[Mention]]:
        out: dict[int, list[Mention]] = {}
        for m in self.mentions:
            out.setdefault(m.cluster, []).append(m)
        return out

    def has_trees(self) -> bool:
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


def base_label(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``; labels starting with ``-`` (``-NONE-``, ``-LRB-``) stay."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


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


def _new_counts() -> dict[str, Any]:
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
    c = counts if counts is not None else _new_counts()
    for key, value in _new_counts().items():
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
                builder = _PartBuilder(m.group(1), part, src, lineno)
                begun += 1
            elif line.startswith("#end document"):
                if builder is None:
                    raise BertlookError(f"{p}:{lineno}: #end document without #begin document")
                doc = builder.finish(src, lineno)
                builder = None
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
                        continue
                c["mentions"] += len(doc.mentions)
                c["clusters"] += len(doc.clusters())
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
    c = counts if counts is not None else _new_counts()
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


# --------------------------------------------------------------------------------------------------
# head words
# --------------------------------------------------------------------------------------------------

# Collins (1999, Appendix A) head table: label -> (direction, priority list). "left": for each label
# of the list in order, the first child from the left with that label; "right": the same from the
# right. No match: the first child in the direction. NP-like labels use _np_head_child.
_COLLINS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ADJP": ("left", ("NNS", "QP", "NN", "$", "ADVP", "JJ", "VBN", "VBG", "ADJP", "JJR", "NP", "JJS", "DT", "FW",
                      "RBR", "RBS", "SBAR", "RB")),
    "ADVP": ("right", ("RB", "RBR", "RBS", "FW", "ADVP", "TO", "CD", "JJR", "JJ", "IN", "NP", "JJS", "NN")),
    "CONJP": ("right", ("CC", "RB", "IN")),
    "FRAG": ("right", ()),
    "INTJ": ("left", ()),
    "LST": ("right", ("LS", ":")),
    "NAC": ("left", ("NN", "NNS", "NNP", "NNPS", "NP", "NAC", "EX", "$", "CD", "QP", "PRP", "VBG", "JJ", "JJS",
                     "JJR", "ADJP", "FW")),
    "PP": ("right", ("IN", "TO", "VBG", "VBN", "RP", "FW")),
    "PRN": ("left", ()),
    "PRT": ("right", ("RP",)),
    "QP": ("left", ("$", "IN", "NNS", "NN", "JJ", "RB", "DT", "CD", "NCD", "QP", "JJR", "JJS")),
    "RRC": ("right", ("VP", "NP", "ADVP", "ADJP", "PP")),
    "S": ("left", ("TO", "IN", "VP", "S", "SBAR", "ADJP", "UCP", "NP")),
    "SBAR": ("left", ("WHNP", "WHPP", "WHADVP", "WHADJP", "IN", "DT", "S", "SQ", "SINV", "SBAR", "FRAG")),
    "SBARQ": ("left", ("SQ", "S", "SINV", "SBARQ", "FRAG")),
    "SINV": ("left", ("VBZ", "VBD", "VBP", "VB", "MD", "VP", "S", "SINV", "ADJP", "NP")),
    "SQ": ("left", ("VBZ", "VBD", "VBP", "VB", "MD", "VP", "SQ")),
    "UCP": ("right", ()),
    "VP": ("left", ("TO", "VBD", "VBN", "MD", "VBZ", "VB", "VBG", "VBP", "VP", "ADJP", "NN", "NNS", "NP")),
    "WHADJP": ("left", ("CC", "WRB", "JJ", "ADJP")),
    "WHADVP": ("right", ("CC", "WRB")),
    "WHNP": ("left", ("WDT", "WP", "WP$", "WHADJP", "WHPP", "WHNP")),
    "WHPP": ("right", ("IN", "TO", "FW")),
}
_NP_LIKE = frozenset({"NP", "NML", "NX"})
_NP_NOUNS = frozenset({"NN", "NNS", "NNP", "NNPS", "NX", "NML", "JJR"})


def _np_head_child(kids: list[str]) -> int:
    """Collins' NP rule, adapted: a final POS child is skipped (possessor = head) instead of chosen."""
    idx = list(range(len(kids)))
    if len(idx) > 1 and kids[idx[-1]] == "POS":
        idx = idx[:-1]
    for i in reversed(idx):
        if kids[i] in _NP_NOUNS:
            return i
    for i in idx:
        if kids[i] == "NP":
            return i
    for group in (("$", "ADJP", "PRN"), ("CD",), ("JJ", "JJS", "RB", "QP")):
        for i in reversed(idx):
            if kids[i] in group:
                return i
    return idx[-1]


def head_child(node: Node) -> int:
    """Index of the head child of a constituent (Collins' table; see the module docstring)."""
    kids = [base_label(c.label) for c in node.children]
    if len(kids) == 1:
        return 0
    label = base_label(node.label)
    if label in _NP_LIKE:
        return _np_head_child(kids)
    direction, priority = _COLLINS.get(label, ("left", ()))
    order = list(range(len(kids))) if direction == "left" else list(range(len(kids) - 1, -1, -1))
    for want in priority:
        for i in order:
            if kids[i] == want:
                return i
    return order[0]


def head_word(node: Node) -> int:
    """Word index of a constituent's head (head children followed down to a preterminal)."""
    while node.children:
        node = node.children[head_child(node)]
    return node.start


def mention_heads(doc: Document, head_rule: str = "tree") -> list[tuple[int, str]]:
    """Per mention of ``doc`` (in order): ``(head word index, source)``.

    ``tree``: the head of the highest constituent spanning exactly the mention (source ``tree``);
    the mention's last word when the span is not a constituent (``not_constituent``) or the part has
    no usable trees (``no_tree``). ``last``: the last word (``last``).
    """
    if head_rule not in HEAD_RULES:
        raise BertlookError(f"unknown head rule {head_rule!r} (use one of {', '.join(HEAD_RULES)})")
    out: list[tuple[int, str]] = []
    trees = head_rule == "tree" and doc.has_trees()
    for m in doc.mentions:
        if head_rule == "last":
            out.append((m.end, "last"))
        elif not trees:
            out.append((m.end, "no_tree"))
        else:
            node = doc.constituent(m.start, m.end)
            if node is None:
                out.append((m.end, "not_constituent"))
            else:
                out.append((head_word(node), "tree"))
    return out


def mention_type(pos: str) -> str:
    """``pronoun`` (PRP, PRP$, WP, WP$), ``proper`` (NNP, NNPS) or ``nominal`` (any other head POS)."""
    if pos in PRONOUN_POS:
        return "pronoun"
    if pos in PROPER_POS:
        return "proper"
    return "nominal"


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


def _piece_counts(words: Sequence[str], tokenizer, *, sent_id: str) -> tuple[list[int], int]:
    """Wordpieces per word and number of special tokens (via ``bertlook.attention.extract_words.align_words``)."""
    from bertlook.attention.extract_words import align_words

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
    from bertlook.attention.extract_words import align_words

    if head_rule not in HEAD_RULES:
        raise BertlookError(f"unknown head rule {head_rule!r} (use one of {', '.join(HEAD_RULES)})")
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
            counts, n_special = _piece_counts(prefix, tokenizer, sent_id=doc.id)
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


def make_coref_transform(alignments: dict[str, Any], from_split: str = "mean"):
    """``extract_to_store`` hook: wordpiece record + map -> word-level record + ``[L, H, W+2, W+2]`` map."""
    from bertlook.attention.extract_words import token_to_word_attention

    def transform(record: dict[str, Any], attn):
        al = alignments[record["id"]]
        out = {k: v for k, v in record.items() if k != "words"}
        out["tokens"] = [al.tokens[0], *record["words"], al.tokens[-1]]
        return out, token_to_word_attention(attn, al, from_split=from_split)  # [layer, head, query_word, key_word]

    return transform


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
    from bertlook.attention.extract_words import FROM_SPLIT_MODES
    from bertlook.attention.extraction import (
        DEFAULT_MAX_UNK_RATE,
        aligned_unk_words,
        check_max_unk_rate,
        check_unk_rate,
        extract_to_store,
        unk_statistics,
        unk_summary,
    )
    from bertlook.attention.modeling import load_model, load_tokenizer, pick_device, resolve_model

    if from_split not in FROM_SPLIT_MODES:
        raise BertlookError(f"unknown --from-split {from_split!r} (use one of {', '.join(FROM_SPLIT_MODES)})")
    if head_rule not in HEAD_RULES:
        raise BertlookError(f"unknown --head-rule {head_rule!r} (use one of {', '.join(HEAD_RULES)})")
    max_unk_rate = check_max_unk_rate(DEFAULT_MAX_UNK_RATE if max_unk_rate is None else max_unk_rate)
    files = expand_conll_paths(conll_paths)
    read_counts = _new_counts()
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
    model = load_model(resolved, dev)
    meta = {
        "model": resolved.provenance(model.config),
        "special_tokens": special,
        "from_split": from_split,
        "token_type_ids": "zeros",
        "kind": "coref",
        "coref": coref_meta,
        "unknown_tokens": unk,
        "excluded": {
            "alignment": trunc["parts_excluded_alignment"], "alignment_ids": trunc["parts_excluded_alignment_ids"],
            "empty": trunc["parts_excluded_empty"], "empty_ids": trunc["parts_excluded_empty_ids"],
        },
    }
    summary = extract_to_store(examples, model, out_dir, batch_size=batch_size, max_seq_len=max_seq_len,
                               device=dev, level="word", meta=meta, progress_every=progress_every,
                               shard_mb=shard_mb, transform=make_coref_transform(alignments, from_split),
                               stored_size=lambda rec, n: len(rec["words"]) + 2, step="coref-extract")
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


# --------------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------------


def antecedent_structure(mentions: Sequence[Sequence[int]]) -> tuple[list[int], list[int], list[list[int]]]:
    """For mentions ``[start, end, cluster]`` sorted by (start, end): ``(n_earlier, scored, antecedents)``.

    ``n_earlier[i]``: mentions 0..n_earlier[i]-1 are earlier than i (start before, or same start and
    end before); ``scored``: indices with at least one antecedent; ``antecedents[i]``: indices of the
    earlier mentions in i's cluster.
    """
    keys = [(int(m[0]), int(m[1])) for m in mentions]
    for a, b in zip(keys, keys[1:]):
        if b < a:
            raise BertlookError("mentions must be sorted by (start, end)")
    n_earlier: list[int] = []
    lo = 0
    for i, key in enumerate(keys):
        if i and key != keys[i - 1]:
            lo = i
        n_earlier.append(lo)
    ants = [[j for j in range(n_earlier[i]) if mentions[j][2] == mentions[i][2]] for i in range(len(keys))]
    scored = [i for i, a in enumerate(ants) if a]
    return n_earlier, scored, ants


def mention_features(head: str, pos: str) -> tuple[int | None, str | None, str | None]:
    """(person, number, gender) for the agreement sieve; ``None`` = unknown (agrees with anything)."""
    if pos in PRONOUN_POS:
        return PRONOUN_FEATURES.get(head.lower(), (None, None, None))
    number = "pl" if pos in ("NNS", "NNPS") else "sg" if pos in ("NN", "NNP") else None
    return (3, number, None)


def agree(a: tuple, b: tuple) -> bool:
    return all(x is None or y is None or x == y for x, y in zip(a, b))


def baseline_predictions(words: Sequence[str], pos: Sequence[str], mentions: Sequence[Sequence[int]],
                         heads: Sequence[int]) -> dict[str, list[int | None]]:
    """Chosen antecedent (mention index, or None) of every mention for the three baselines."""
    n_earlier, _, _ = antecedent_structure(mentions)
    lw = [w.lower() for w in words]
    text = [" ".join(lw[int(s): int(e) + 1]) for s, e, _ in mentions]
    hw = [lw[h] for h in heads]
    feats = [mention_features(words[h], pos[h]) for h in heads]
    out: dict[str, list[int | None]] = {b: [] for b in BASELINES}
    for i in range(len(mentions)):
        earlier = range(n_earlier[i] - 1, -1, -1)  # nearest first
        nearest = n_earlier[i] - 1 if n_earlier[i] else None
        out["nearest"].append(nearest)
        out["head_match"].append(next((j for j in earlier if hw[j] == hw[i]), None))
        choice = None
        for sieve in (lambda j: text[j] == text[i], lambda j: hw[j] == hw[i],
                      lambda j: agree(feats[j], feats[i]), lambda j: True):
            choice = next((j for j in earlier if sieve(j)), None)
            if choice is not None:
                break
        out["rule_based"].append(choice)
    return out


@dataclasses.dataclass
class CorefScores:
    """Correct counts over a store. Column order everywhere: all, pronoun, proper, nominal."""

    num_layers: int
    num_heads: int
    candidates: str
    head_correct: "np.ndarray"  # [layer, head, column] int64; column: all, pronoun, proper, nominal
    counts: "np.ndarray"  # [column] int64: mentions with antecedents
    baseline_correct: dict[str, "np.ndarray"]  # name -> [column]
    n_parts: int = 0
    n_parts_scored: int = 0
    mentions_kept: int = 0
    own_head_only: int = 0
    no_candidates: int = 0
    head_source: dict[str, int] = dataclasses.field(default_factory=dict)

    def head_accuracy(self) -> "np.ndarray":
        """``[L, H, 4]`` accuracies (NaN where a column has no mention)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            # [layer, head, column]
            return np.where(self.counts > 0, self.head_correct / np.maximum(self.counts, 1), np.nan)

    def baseline_accuracy(self, name: str) -> "np.ndarray":
        return np.where(self.counts > 0, self.baseline_correct[name] / np.maximum(self.counts, 1), np.nan)  # [column]

    def best_head(self) -> tuple[int, int] | None:
        """0-based (layer, head) with the best All accuracy (ties: lowest layer, then head); None if no mention."""
        if self.counts[0] == 0:
            return None
        flat = int(np.argmax(self.head_correct[:, :, 0].reshape(-1)))
        return divmod(flat, self.num_heads)


def _type_onehot(types: Sequence[str]) -> "np.ndarray":
    T = np.zeros((len(types), 4), dtype=np.int64)  # [mention, column]
    T[:, 0] = 1
    for r, t in enumerate(types):
        T[r, 1 + MENTION_TYPES.index(t)] = 1
    return T


def _check_record(rec: dict[str, Any], n: int, where: str) -> tuple[int, list, list[int], list[str]]:
    for key in ("mentions", "mention_heads", "head_pos", "pos", "tokens"):
        if key not in rec:
            raise BertlookError(f"{where}: record has no {key!r} (not a coreference store; run coref-extract)")
    W = n - 2
    mentions, heads, hpos = rec["mentions"], [int(h) for h in rec["mention_heads"]], list(rec["head_pos"])
    if not (len(mentions) == len(heads) == len(hpos)):
        raise BertlookError(f"{where}: {len(mentions)} mentions, {len(heads)} heads and {len(hpos)} head POS")
    if len(rec["pos"]) != W:
        raise BertlookError(f"{where}: {len(rec['pos'])} POS tags for {W} words")
    for (s, e, _), h in zip(mentions, heads):
        if not (0 <= int(s) <= int(e) < W and int(s) <= h <= int(e)):
            raise BertlookError(f"{where}: mention [{s}, {e}] with head {h} lies outside the part's {W} words")
    return W, mentions, heads, hpos


def score_part(rec: dict[str, Any], attn, *, candidates: str = "all", where: str = "part") -> dict[str, Any]:
    """Score one part: per-head correct counts ``[L, H, 4]``, counts ``[4]``, baseline correct ``[4]`` each."""
    if candidates not in CANDIDATES:
        raise BertlookError(f"unknown candidates {candidates!r} (use one of {', '.join(CANDIDATES)})")
    a = np.asarray(attn)  # [layer, head, query_word, key_word]
    L, H, n = a.shape[0], a.shape[1], a.shape[2]
    W, mentions, heads, hpos = _check_record(rec, n, where)
    n_earlier, scored, ants = antecedent_structure(mentions)
    # head_correct [layer, head, column]; counts, baseline_correct [column]
    out: dict[str, Any] = {"head_correct": np.zeros((L, H, 4), np.int64), "counts": np.zeros(4, np.int64),
                           "baseline_correct": {b: np.zeros(4, np.int64) for b in BASELINES},
                           "own_head_only": 0, "no_candidates": 0, "scored": len(scored)}
    if not scored:
        return out
    types = [mention_type(hpos[i]) for i in scored]
    T = _type_onehot(types)  # [mention, column]
    out["counts"] = T.sum(axis=0)  # [column]
    S = len(scored)
    gold = np.zeros((S, W), dtype=bool)  # [mention, word]
    cand = np.ones((S, W), dtype=bool) if candidates == "all" else np.zeros((S, W), dtype=bool)  # [mention, word]
    for r, i in enumerate(scored):
        for j in ants[i]:
            gold[r, heads[j]] = True
        if candidates == "mentions":
            cand[r, [heads[j] for j in range(n_earlier[i])]] = True
        gold[r, heads[i]] = False
        cand[r, heads[i]] = False
        out["own_head_only"] += int(not gold[r].any())
        out["no_candidates"] += int(not cand[r].any())
    # [mention]: query_word of each mention's head word
    rows = np.asarray([heads[i] for i in scored], dtype=np.intp) + 1
    block = np.asarray(a[:, :, rows, 1: W + 1], dtype=np.float32)  # [layer, head, mention, word]
    if not np.isfinite(block).all():
        raise BertlookError(f"{where}: non-finite attention values")
    block = np.where(cand[None, None], block, -np.inf)  # [layer, head, mention, word]
    pred = block.argmax(axis=-1)  # [layer, head, mention]
    # [layer, head, mention]
    correct = np.take_along_axis(np.broadcast_to(gold, (L, H, S, W)), pred[..., None], axis=-1)[..., 0]
    correct &= cand.any(axis=-1)[None, None]  # [layer, head, mention]
    out["head_correct"] = correct.astype(np.int64) @ T  # [layer, head, column]

    words = list(rec["tokens"][1:-1])
    preds = baseline_predictions(words, list(rec["pos"]), mentions, heads)
    for name, chosen in preds.items():
        ok = np.array([chosen[i] is not None and mentions[chosen[i]][2] == mentions[i][2] for i in scored],  # [mention]
                      dtype=np.int64)
        out["baseline_correct"][name] = ok @ T  # [column]
    return out


def score_store(path_or_store, *, candidates: str = "all", max_examples: int | None = None) -> CorefScores:
    """Score every part of a coreference store (one example in memory at a time)."""
    if candidates not in CANDIDATES:
        raise BertlookError(f"unknown candidates {candidates!r} (use one of {', '.join(CANDIDATES)})")

    store = open_store(path_or_store, level="word", what="coreference attention store")
    L, H = store.num_layers, store.num_heads
    # head_correct [layer, head, column]; counts, baseline_correct [column]
    sc = CorefScores(num_layers=L, num_heads=H, candidates=candidates, head_correct=np.zeros((L, H, 4), np.int64),
                     counts=np.zeros(4, np.int64), baseline_correct={b: np.zeros(4, np.int64) for b in BASELINES},
                     head_source={s: 0 for s in HEAD_SOURCES})
    for k, (rec, attn) in enumerate(store):
        if max_examples is not None and k >= max_examples:
            break
        where = f"{store.path}: part {rec.get('id')!r}"
        r = score_part(rec, attn, candidates=candidates, where=where)
        sc.n_parts += 1
        sc.n_parts_scored += int(r["scored"] > 0)
        sc.mentions_kept += len(rec["mentions"])
        sc.head_correct += r["head_correct"]
        sc.counts += r["counts"]
        for b in BASELINES:
            sc.baseline_correct[b] += r["baseline_correct"][b]
        sc.own_head_only += r["own_head_only"]
        sc.no_candidates += r["no_candidates"]
        for s in rec.get("head_source") or []:
            sc.head_source[s] = sc.head_source.get(s, 0) + 1
    return sc


# --------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------



def heads_frame(scores: CorefScores) -> "pd.DataFrame":
    """``coref_heads.csv``: layer, head (1-indexed), all, pronoun, proper, nominal (fractions), n."""
    acc = scores.head_accuracy()  # [layer, head, column]
    L, H = scores.num_layers, scores.num_heads
    layer, head = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")  # [layer, head] each
    data = {"layer": layer.reshape(-1), "head": head.reshape(-1)}  # [layer*head] each
    for c, name in enumerate(COLUMNS):
        data[name] = acc[:, :, c].reshape(-1)  # [layer*head]
    data["n"] = np.full(L * H, int(scores.counts[0]))  # [layer*head]
    return pd.DataFrame(data, columns=list(HEADS_CSV_COLUMNS))


def table2_frame(scores: CorefScores) -> "pd.DataFrame":
    """Table 2 twin: rows nearest, head_match, rule_based, neural (not run: NaN), best_head; fractions.

    Columns :data:`TABLE2_RUN_COLUMNS`; the paper's numbers are joined by
    :func:`bertlook.reporting.paper_join.join_table2` (giving :data:`TABLE2_CSV_COLUMNS`)."""
    n = [int(x) for x in scores.counts]
    best = scores.best_head()
    acc = scores.head_accuracy()  # [layer, head, column]
    rows = []
    for system in SYSTEMS:
        row: dict[str, Any] = {"system": system, "label": SYSTEM_LABELS[system], "head": "", "note": ""}
        if system in BASELINES:
            vals = list(scores.baseline_accuracy(system))  # [column]
        elif system == "best_head" and best is not None:
            vals = list(acc[best[0], best[1]])  # [column]
            row["head"] = head_label(*best)
            row["note"] = "chosen on this data (best All accuracy)"
        else:
            vals = [float("nan")] * 4
        counts: list[Any] = [float("nan")] * 4 if system == "neural" else n
        for c, name in enumerate(COLUMNS):
            row[name] = float(vals[c])
            row[f"n_{name}"] = counts[c]
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(TABLE2_RUN_COLUMNS))
    for name in COLUMNS:
        df[f"n_{name}"] = df[f"n_{name}"].astype("Int64")
    return df


def write_frame_csv(path, frame) -> None:
    """``frame`` as CSV (no index, full precision), written atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def write_not_run(out_table_csv, out_md, out_heads_csv, reason: str = NOT_RUN_REASON) -> str:
    """Tables that say the step did not run (no corpus configured); returns the note written.

    ``table2.csv``: the usual columns plus ``note``, one row ``system="not run"``; ``coref_heads.csv``:
    its columns plus ``note``, one row with empty numbers; ``table2.md``: the sentence.
    """
    reason = (reason or NOT_RUN_REASON).strip()
    note = reason if reason.lower().startswith("not run") else f"not run: {reason}"
    row = {c: "" for c in TABLE2_CSV_COLUMNS}
    row.update({"system": "not run", "label": "not run", "note": note})
    write_frame_csv(out_table_csv, pd.DataFrame([row], columns=list(TABLE2_CSV_COLUMNS)))
    heads = {c: "" for c in HEADS_CSV_COLUMNS}
    heads["note"] = note
    write_frame_csv(out_heads_csv, pd.DataFrame([heads], columns=[*HEADS_CSV_COLUMNS, "note"]))
    write_text(out_md, "# Coreference: antecedent selection accuracy (Table 2 twin)\n\n"
                       f"{note[0].upper()}{note[1:]}.\n\n"
                       "Set a CoNLL-2012 (OntoNotes) corpus to run this step; see docs/coreference.md.\n")
    return note


def score_summary(store: "AttentionStore", scores: CorefScores) -> dict[str, Any]:
    best = scores.best_head()
    coref = store.meta.get("coref") or {}
    read = coref.get("read") or {}
    trunc = coref.get("truncation") or {}
    counts = {
        "documents_read": read.get("documents"),
        "documents_without_mentions": read.get("documents_without_mentions"),
        "parts_read": read.get("parts"),
        "parts_skipped_without_mentions": read.get("parts_without_mentions"),
        "parts_with_unusable_tree": read.get("parts_with_unusable_tree"),
        "parts_excluded_alignment": trunc.get("parts_excluded_alignment"),
        "parts_excluded_empty": trunc.get("parts_excluded_empty"),
        "parts_truncated": trunc.get("parts_truncated"),
        "parts_scored": scores.n_parts,
        "mentions_read": read.get("mentions"),
        "mentions_kept": scores.mentions_kept,
        "mentions_dropped_cut": trunc.get("mentions_dropped_cut"),
        "mentions_dropped_outside": trunc.get("mentions_dropped_outside"),
        "mentions_in_excluded_parts": trunc.get("mentions_in_excluded_parts"),
        "mentions_with_antecedents": {c: int(v) for c, v in zip(COLUMNS, scores.counts)},
    }
    return {
        "attention": str(store.path),
        "counts": counts,
        "candidates": scores.candidates,
        "num_layers": scores.num_layers,
        "num_heads": scores.num_heads,
        "parts": scores.n_parts,
        "parts_with_scored_mentions": scores.n_parts_scored,
        "mentions_kept": scores.mentions_kept,
        "mentions_with_antecedents": {c: int(v) for c, v in zip(COLUMNS, scores.counts)},
        "mentions_antecedent_heads_only_own_head": scores.own_head_only,
        "mentions_without_candidates": scores.no_candidates,
        "head_source": scores.head_source,
        "best_head": head_label(*best) if best else None,
        "best_head_accuracy": ({c: float(v) for c, v in zip(COLUMNS, scores.head_accuracy()[best[0], best[1]])}
                               if best else None),
        "baselines": {b: {c: float(v) for c, v in zip(COLUMNS, scores.baseline_accuracy(b))} for b in BASELINES},
        "extraction": {
            "inputs": coref.get("inputs"),
            "head_rule": coref.get("head_rule"),
            "from_split": coref.get("from_split"),
            "max_seq_len": coref.get("max_seq_len"),
            "read": coref.get("read"),
            "truncation": coref.get("truncation"),
            "excluded": store.meta.get("excluded"),
        },
    }
