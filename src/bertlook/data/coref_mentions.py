"""Gold coreference mentions as the metric sees them: head words, mention types, antecedents.

**Head words** (:func:`mention_heads`, ``head_rule``). ``tree`` (default): the highest constituent
whose span equals the mention span, then Collins (1999) head rules down to a word, with the NP rule
adapted for coreference (a final possessive ``POS`` is never the head: "Mary 's" -> "Mary"); a span
that is not a constituent, or a part without trees, falls back to the mention's last word. ``last``:
always the last word. Every head records its source (``tree``, ``not_constituent``, ``no_tree``,
``last``), counted in the summaries.

**Mention types** (:func:`mention_type`, by the head word's POS): pronoun (PRP, PRP$, WP, WP$),
proper (NNP, NNPS), nominal (everything else).

**Antecedents** (:func:`antecedent_structure`): an antecedent of mention m is an *earlier* mention of
m's cluster (starts before m, or same start and ends before m).

Shared by the extraction (:mod:`bertlook.attention.coref_maps`) and the scoring
(:mod:`bertlook.analyses.coref`); the trees come from :mod:`bertlook.data.conll2012`.
"""

from __future__ import annotations

import re
from typing import Sequence

from bertlook.data.conll2012 import Document, Node
from bertlook.errors import BertlookError, check_choice

HEAD_RULES = ("tree", "last")
HEAD_SOURCES = ("tree", "not_constituent", "no_tree", "last")
MENTION_TYPES = ("pronoun", "proper", "nominal")
#: the columns of every per-type count and table: all mentions, then each mention type
COLUMNS = ("all", *MENTION_TYPES)
PRONOUN_POS = frozenset({"PRP", "PRP$", "WP", "WP$"})
PROPER_POS = frozenset({"NNP", "NNPS"})


# --------------------------------------------------------------------------------------------------
# head words
# --------------------------------------------------------------------------------------------------


def base_label(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``; labels starting with ``-`` (``-NONE-``, ``-LRB-``) stay."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


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
    check_choice("head rule", head_rule, HEAD_RULES)
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
# antecedents
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
