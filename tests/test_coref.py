"""Coreference: CoNLL-2012 reader (bertlook.data.conll2012), head words (.data.coref_mentions),
truncation (.attention.coref_maps), antecedent selection metric and baselines (.analyses.coref), CLI."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses import coref
from bertlook.attention import coref_maps
from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.cli import coref as coref_cli
from bertlook.data import conll2012, coref_mentions
from bertlook.data.conll2012 import Document, Mention
from bertlook.errors import BertlookError
from bertlook.reporting.tables import table2_markdown
from bertlook.reporting.paper_join import join_table2

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_coref.gold_conll"
P0, P1, D2 = "nw/tiny/00/tiny_0001#000", "nw/tiny/00/tiny_0001#001", "bc/tiny/00/tiny_0002#000"

# gold mentions (start, end, cluster), word indices over the whole part
MENTIONS = {
    P0: [(0, 0, 1), (2, 3, 2), (2, 4, 3), (6, 7, 3), (10, 10, 1), (12, 12, 2), (14, 14, 3), (16, 16, 1)],
    P1: [(0, 1, 4), (3, 3, 4), (3, 4, 5), (8, 12, 6), (11, 12, 4), (16, 16, 6), (18, 19, 5)],
    D2: [(0, 1, 7), (4, 4, 8), (6, 6, 7), (8, 8, 8), (12, 12, 9), (14, 15, 7), (16, 16, 8)],
}
# head words: Collins rules on the gold trees vs the last word of the mention
TREE_HEADS = {P0: [0, 2, 4, 7, 10, 12, 14, 16], P1: [1, 3, 4, 9, 12, 16, 19], D2: [1, 4, 6, 8, 12, 15, 16]}
LAST_HEADS = {P0: [0, 3, 4, 7, 10, 12, 14, 16], P1: [1, 3, 4, 12, 12, 16, 19], D2: [1, 4, 6, 8, 12, 15, 16]}

# Mentions with antecedents, by hand: P0: the dog (nominal), him, She, it (pronouns), John (proper);
# P1: its, They (pronouns), the city, the river (nominal); D2: Smith, London, Mary Smith (proper),
# there (RB -> nominal).  n = all 13, pronoun 5, proper 4, nominal 4.
N = [13, 5, 4, 4]
# Baselines computed by hand on the fixture (correct counts: all, pronoun, proper, nominal):
#  nearest:    P0 the dog <- Mary 's dog (ok); P1 its <- The city (ok); every other nearest mention is
#              of another cluster.
#  head_match: P0 the dog (dog), John (john); P1 the city (city; "The kings of the city" has head
#              "kings"), the river; D2 Smith, London, Mary Smith.  Pronouns never find their head word.
#  rule_based: P0 the dog (head), him -> the dog (agreement, wrong), She -> the dog (wrong; "him" is
#              male), it -> the dog (ok; She/him do not agree), John (exact); P1 its -> The city
#              (agreement), the city (exact), They -> The kings of the city (plural; "the city" is
#              singular), the river (head); D2 Smith (head), London (exact), Mary Smith (exact),
#              there -> Mary Smith (agreement, wrong).
BASELINES = {"nearest": [2, 1, 0, 1], "head_match": [7, 0, 4, 3], "rule_based": [10, 3, 4, 3]}


def _docs(path=FIXTURE, **kw):
    counts: dict = {}
    docs = conll2012.read_conll_files([path], counts=counts, **kw)
    return {d.id: d for d in docs}, counts


def _lines() -> list[str]:
    return FIXTURE.read_text(encoding="utf-8").splitlines()


def _write(tmp_path, lines, name="bad.gold_conll") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _line_no(lines, needle: str) -> int:
    """1-based number of the first line containing all whitespace-separated parts of needle."""
    parts = needle.split()
    for k, line in enumerate(lines, 1):
        cols = line.split()
        if cols[:1] and all(p in cols for p in parts):
            return k
    raise AssertionError(needle)


def _replace_col(lines, lineno: int, col: int, value: str) -> list[str]:
    out = list(lines)
    cols = out[lineno - 1].split()
    cols[col] = value
    out[lineno - 1] = "  ".join(cols)
    return out


# ------------------------------------------------------------------------------------------ reader

def test_reader_reconstructs_mentions_and_clusters():
    docs, counts = _docs()
    assert list(docs) == [P0, P1, D2]  # the part without mentions is skipped
    for pid, expected in MENTIONS.items():
        assert [(m.start, m.end, m.cluster) for m in docs[pid].mentions] == expected
    d = docs[P0]
    assert d.doc_id == "nw/tiny/00/tiny_0001" and d.part == 0 and docs[P1].part == 1
    assert d.sentences == [(0, 6), (6, 12), (12, 18)]
    assert d.words[2:5] == ["Mary", "'s", "dog"] and d.pos[2:5] == ["NNP", "POS", "NN"]
    assert d.source == str(FIXTURE) and d.line == 1
    clusters = {c: [(m.start, m.end) for m in ms] for c, ms in d.clusters().items()}
    assert clusters == {1: [(0, 0), (10, 10), (16, 16)], 2: [(2, 3), (12, 12)], 3: [(2, 4), (6, 7), (14, 14)]}
    # nested "(5|(4)" on one word and "4)|6)" closing two mentions on one word
    p1 = {(m.start, m.end): m.cluster for m in docs[P1].mentions}
    assert p1[(3, 3)] == 4 and p1[(3, 4)] == 5 and p1[(11, 12)] == 4 and p1[(8, 12)] == 6
    assert counts["files"] == 1 and counts["documents"] == 3 and counts["parts"] == 4
    assert counts["parts_without_mentions"] == 1
    assert counts["parts_without_mentions_ids"] == ["wb/tiny/00/tiny_0003#000"]
    assert counts["documents_without_mentions"] == 1
    assert counts["mentions"] == 22 and counts["clusters"] == 9 and counts["sentences"] == 10
    assert counts["parts_with_unusable_tree"] == 0 and counts["duplicate_mentions"] == 0
    kept = conll2012.read_conll(FIXTURE, keep_empty=True)
    assert [d.id for d in kept][-1] == "wb/tiny/00/tiny_0003#000" and not kept[-1].mentions


def test_trees_from_parse_bits():
    docs, _ = _docs()
    d = docs[P0]
    assert d.has_trees() and len(d.trees) == 3
    assert d.trees[0].bracketed(d.words) == (
        "(TOP (S (NP (NNP John)) (VP (VBD saw) (NP (NP (NNP Mary) (POS 's)) (NN dog))) (. .)))")
    assert d.trees[2].start == 12 and d.trees[2].end == 17  # part-level word indices
    assert d.constituent(2, 4).label == "NP" and d.constituent(1, 2) is None
    assert d.constituent(0, 0).label == "NP"  # the highest node of the unary chain NP -> NNP


def test_head_words_tree_vs_last():
    docs, _ = _docs()
    for pid in MENTIONS:
        tree = coref_mentions.mention_heads(docs[pid], "tree")
        last = coref_mentions.mention_heads(docs[pid], "last")
        assert [h for h, _ in tree] == TREE_HEADS[pid], pid
        assert all(s == "tree" for _, s in tree)
        assert [h for h, _ in last] == LAST_HEADS[pid] and all(s == "last" for _, s in last)
    # "Mary 's" -> Mary (a final POS is skipped); "The kings of the city" -> kings (leftmost NP)
    assert docs[P0].words[TREE_HEADS[P0][1]] == "Mary" and docs[P0].words[LAST_HEADS[P0][1]] == "'s"
    assert docs[P1].words[TREE_HEADS[P1][3]] == "kings" and docs[P1].words[LAST_HEADS[P1][3]] == "city"
    with pytest.raises(BertlookError, match="head rule"):
        coref_mentions.mention_heads(docs[P0], "first")


@pytest.mark.parametrize("bits,pos,head", [
    # Collins: VP -> leftmost verb; PP -> IN; S -> VP; ADJP; QP; NP coordination -> leftmost NP
    (["(VP*", "(NP*", "*))"], ["VBD", "DT", "NN"], 0),
    (["(PP*", "(NP*))"], ["IN", "NNP"], 0),
    (["(S(NP*)", "(VP*)", "*)"], ["PRP", "VBD", "."], 1),
    (["(ADJP*", "*)"], ["RB", "JJ"], 1),
    (["(NP(NP*)", "*", "(NP*))"], ["NNP", "CC", "NNP"], 0),
    (["(NP*", "*", "*)"], ["DT", "JJ", "NNS"], 2),
    (["(NP*", "*)"], ["DT", "CD"], 1),
    (["(NP*", "*", "*)"], ["NNP", "NNP", "POS"], 1),  # coref adaptation: not the POS
    (["(NP-SBJ=2*", "*)"], ["DT", "NN"], 1),  # function tags / indices stripped
    (["(WHNP*", "*)"], ["WDT", "NN"], 0),
])
def test_collins_head_rules(bits, pos, head):
    assert coref_mentions.head_word(conll2012.parse_tree(bits, pos)) == head


@pytest.mark.parametrize("bits,msg", [
    (["(S*", "*"], "still open"),
    (["(S*)", "*)"], "not open"),
    (["(S*)", "(S*)"], "2 trees"),
    (["(S*x", "*)"], "not of the form"),
    (["-", "-"], "not of the form"),
])
def test_parse_tree_errors(bits, msg):
    with pytest.raises(BertlookError, match=msg):
        conll2012.parse_tree(bits, ["NN", "NN"])


def test_span_not_constituent_falls_back_to_last_word(tmp_path):
    lines = _lines()
    k = _line_no(lines, "saw VBD (VP* see")
    lines = _replace_col(lines, k, -1, "(10")
    lines = _replace_col(lines, k + 1, -1, "(3|(2|10)")  # "saw Mary": not a constituent
    docs, _ = _docs(_write(tmp_path, lines))
    d = docs[P0]
    i = [(m.start, m.end) for m in d.mentions].index((1, 2))
    assert coref_mentions.mention_heads(d, "tree")[i] == (2, "not_constituent")


def test_broken_parse_bit_falls_back_and_is_counted(tmp_path):
    lines = _lines()
    k = _line_no(lines, "dog NN *)) 3)")
    bad = _write(tmp_path, _replace_col(lines, k, 5, "*)))"))
    docs, counts = _docs(bad)
    d = docs[P0]
    assert d.tree_error is not None and f"{bad}:{k - 4}:" in d.tree_error and "not open" in d.tree_error
    assert d.trees == [None, None, None] and not d.has_trees()
    assert counts["parts_with_unusable_tree"] == 1 and counts["unusable_tree_ids"] == [P0]
    assert counts["unusable_tree_errors"] == [d.tree_error]
    heads = coref_mentions.mention_heads(d, "tree")
    assert [h for h, _ in heads] == LAST_HEADS[P0] and {s for _, s in heads} == {"no_tree"}
    assert docs[P1].has_trees() and [h for h, _ in coref_mentions.mention_heads(docs[P1])] == TREE_HEADS[P1]
    # the records say where the heads came from
    rec = coref_maps.coref_record(d)
    assert rec["head_source"] == ["no_tree"] * 8 and rec["tree_error"] == d.tree_error


def test_unbalanced_coreference_brackets_name_file_and_line(tmp_path):
    lines = _lines()
    k = _line_no(lines, "dog NN *)) 3)")
    # the mention opened on "Mary" is never closed: error at the line that opened it
    bad = _write(tmp_path, _replace_col(lines, k, -1, "-"))
    with pytest.raises(BertlookError, match=rf"{bad}:{k - 2}: .*'\(3' is never closed"):
        conll2012.read_conll(bad)
    # a close without an open: error at that line
    k2 = _line_no(lines, "saw VBD (VP* see")
    bad = _write(tmp_path, _replace_col(lines, k2, -1, "7)"), "bad2.gold_conll")
    with pytest.raises(BertlookError, match=rf"{bad}:{k2}: .*'7\)' closes .*not open"):
        conll2012.read_conll(bad)
    bad = _write(tmp_path, _replace_col(lines, k2, -1, "(x)"), "bad3.gold_conll")
    with pytest.raises(BertlookError, match=rf"{bad}:{k2}: bad coreference item"):
        conll2012.read_conll(bad)


@pytest.mark.parametrize("edit,msg", [
    (lambda ls: ls[:-1], "has no #end document"),
    (lambda ls: ls[1:], "outside a document"),
    (lambda ls: [ls[0].replace("part 000", "part 00x")] + ls[1:], "not an integer"),
    (lambda ls: [ls[0], ls[1].replace("nw/tiny/00/tiny_0001", "other", 1)] + ls[2:], "document id 'other'"),
    (lambda ls: [ls[0], ls[1].replace("  0  0  John", "  0  1  John", 1)] + ls[2:], "word index 1, expected 0"),
    (lambda ls: [ls[0], " ".join(ls[1].split()[:8])] + ls[2:], "at least 12"),
    (lambda ls: [ls[0], ls[1], ls[2].replace("(V*)", "(V*) *")] + ls[3:], "sentence's first line"),
    (lambda ls: ls[:7] + [ls[0]] + ls[7:], "inside document"),
])
def test_malformed_files(tmp_path, edit, msg):
    bad = _write(tmp_path, edit(_lines()))
    with pytest.raises(BertlookError, match=msg) as info:
        conll2012.read_conll(bad)
    assert str(bad) in str(info.value)


def test_duplicate_parts_directories_and_duplicate_mentions(tmp_path):
    with pytest.raises(BertlookError, match="already read"):
        conll2012.read_conll_files([FIXTURE, FIXTURE])
    d = tmp_path / "corpus" / "dev"
    d.mkdir(parents=True)
    (d / "a.v4_gold_conll").write_text(FIXTURE.read_text())
    (d / "a.v4_auto_conll").write_text("garbage\n")
    assert conll2012.expand_conll_paths([tmp_path / "corpus"]) == [d / "a.v4_gold_conll"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BertlookError, match="no \\*gold_conll"):
        conll2012.expand_conll_paths([empty])
    with pytest.raises(BertlookError, match="not found"):
        conll2012.read_conll_files([tmp_path / "missing.gold_conll"])
    lines = _lines()
    k = _line_no(lines, "him PRP (NP*)))")
    docs, counts = _docs(_write(tmp_path, _replace_col(lines, k, -1, "(1)|(1)")))
    assert counts["duplicate_mentions"] == 1 and [(m.start, m.end, m.cluster) for m in docs[P0].mentions] == MENTIONS[P0]


# -------------------------------------------------------------------------------------- truncation

def test_truncation_point_and_split():
    assert coref_maps.truncation_point([1, 1, 2, 1], 7) == 4
    assert coref_maps.truncation_point([1, 1, 2, 1], 6) == 3
    assert coref_maps.truncation_point([5], 6) == 0
    assert coref_maps.truncation_point([], 6) == 0
    ms = [Mention(0, 0, 1), Mention(1, 3, 2), Mention(3, 3, 2), Mention(4, 5, 1)]
    assert coref_maps.split_mentions(ms, 3) == ([0], [1], [2, 3])
    assert coref_maps.split_mentions(ms, 6) == ([0, 1, 2, 3], [], [])
    assert coref_maps.model_word("-LRB-") == "(" and coref_maps.model_word("/.") == "." and coref_maps.model_word("a/b") == "a/b"


def test_truncation_counts_with_tokenizer(tokenizer):
    docs, _ = _docs()
    pieces, n_special = coref_maps.piece_counts(["John", "saw", "Mary", "'s", "dog", "Smith"], tokenizer, sent_id="x")
    assert pieces == [1, 1, 1, 2, 1, 5] and n_special == 2  # "'s" -> ' s; smith is spelled out
    # max_seq_len 7 = [CLS] + 5 pieces + [SEP]: P0 keeps "John saw Mary 's" (Mary 's dog is cut),
    # P1 keeps "The city said its river", D2 keeps "Mary" (Mary Smith is cut)
    examples, alignments, c = coref_maps.prepare_coref_examples(list(docs.values()), tokenizer, max_seq_len=7)
    recs = {rec["id"]: rec for rec, _, _ in examples}
    assert set(recs) == set(alignments) == {P0, P1, D2}
    assert recs[P0]["words"] == ["John", "saw", "Mary", "'s"] and recs[P0]["mentions"] == [[0, 0, 1], [2, 3, 2]]
    assert (recs[P0]["mentions_cut"], recs[P0]["mentions_outside"]) == (1, 5)
    assert (recs[P1]["mentions_cut"], recs[P1]["mentions_outside"], len(recs[P1]["mentions"])) == (0, 4, 3)
    assert (recs[D2]["mentions_cut"], recs[D2]["mentions_outside"], recs[D2]["mentions"]) == (1, 6, [])
    assert all(len(ids) <= 7 for _, ids, _ in examples)
    assert recs[P0]["tokens"] == ["[CLS]", "john", "saw", "mary", "'", "s", "[SEP]"]
    assert c["mentions_in"] == 22 and c["mentions_kept"] == 5
    assert c["mentions_dropped_cut"] == 2 and c["mentions_dropped_outside"] == 15
    assert c["parts_truncated"] == 3 and c["words_kept"] == 4 + 5 + 1
    assert c["mentions_with_antecedents"] == {"all": 1, "pronoun": 1, "proper": 0, "nominal": 0}  # its <- The city
    # untruncated: every mention kept
    _, _, c = coref_maps.prepare_coref_examples(list(docs.values()), tokenizer, max_seq_len=128)
    assert c["mentions_kept"] == 22 and c["parts_truncated"] == 0
    assert c["mentions_with_antecedents"] == dict(zip(coref_mentions.COLUMNS, N))
    assert c["head_source"]["tree"] == 22


def test_parts_that_cannot_be_extracted_are_counted(tokenizer):
    def doc(words, pid):
        return Document(doc_id=pid, part=0, words=words, pos=["NN"] * len(words), sentences=[(0, len(words))],
                        trees=[None], mentions=[Mention(0, 0, 1), Mention(1, 1, 1)], source="x", line=1)

    examples, _, c = coref_maps.prepare_coref_examples([doc(["Smith", "said"], "a"), doc(["\x07", "cat"], "b")],
                                                  tokenizer, max_seq_len=5)
    assert examples == []
    assert c["parts_excluded_empty_ids"] == ["a#000"] and c["parts_excluded_alignment_ids"] == ["b#000"]
    assert c["mentions_in_excluded_parts"] == 4 and "b#000" in c["alignment_errors"][0]


# ------------------------------------------------------------------------------------------ metric

def _records(head_rule="tree"):
    docs, _ = _docs()
    return [coref_maps.coref_record(docs[pid], head_rule=head_rule) for pid in (P0, P1, D2)]


def _make_store(tmp_path, records, name="store"):
    """Heads: (0, 0) each scored mention -> its nearest antecedent's head word; (0, 1) every word -> the
    next word; (0, 2) scored mentions -> 0.5 on the final '.' and 0.3 on the antecedent's head word."""
    L, H = 1, 3
    with AttentionWriter(tmp_path / name, num_layers=L, num_heads=H, level="word",
                         meta={"coref": {"head_rule": "tree", "max_seq_len": 128}}) as w:
        for rec in records:
            n = len(rec["tokens"])
            W = n - 2
            a = np.full((L, H, n, n), 1e-3, dtype=np.float32)
            _, scored, ants = coref_mentions.antecedent_structure(rec["mentions"])
            heads = rec["mention_heads"]
            for i in scored:
                r = heads[i] + 1
                ant = heads[max(ants[i])] + 1
                a[0, 0, r, ant] = 1.0
                a[0, 2, r, W] = 0.5
                a[0, 2, r, ant] = 0.3
            for r in range(n):
                a[0, 1, r, min(r + 1, n - 1)] = 1.0
            a /= a.sum(axis=-1, keepdims=True)
            w.add(rec, a)
    return tmp_path / name


def test_metric_on_hand_built_store(tmp_path):
    store = _make_store(tmp_path, _records())
    sc = coref.score_store(store)
    assert list(sc.counts) == N
    acc = sc.head_accuracy()
    np.testing.assert_array_equal(acc[0, 0], [1, 1, 1, 1])  # points each mention to an antecedent
    np.testing.assert_array_equal(acc[0, 1], [0, 0, 0, 0])  # next word
    np.testing.assert_array_equal(acc[0, 2], [0, 0, 0, 0])  # '.' wins among all words
    assert sc.best_head() == (0, 0) and sc.n_parts == 3 and sc.mentions_kept == 22
    ment = coref.score_store(store, candidates="mentions")
    np.testing.assert_array_equal(ment.head_accuracy()[0, 2], [1, 1, 1, 1])  # '.' is no mention head
    np.testing.assert_array_equal(ment.head_accuracy()[0, 0], [1, 1, 1, 1])
    for name, correct in BASELINES.items():
        assert list(sc.baseline_correct[name]) == correct, name
        np.testing.assert_allclose(sc.baseline_accuracy(name), np.array(correct) / np.array(N))
    assert sc.own_head_only == 0 and sc.no_candidates == 0
    with pytest.raises(BertlookError, match="candidates"):
        coref.score_store(store, candidates="some")


def test_baselines_with_last_word_heads(tmp_path):
    # with last-word heads "The kings of the city" has head "city", so head match sends "the city" there
    sc = coref.score_store(_make_store(tmp_path, _records("last")))
    assert list(sc.baseline_correct["head_match"]) == [6, 0, 4, 2]
    assert sc.head_source == {"tree": 0, "not_constituent": 0, "no_tree": 0, "last": 22}


def test_vectorized_scoring_matches_a_loop(tmp_path):
    rng = np.random.default_rng(0)
    for rec in _records():
        n = len(rec["tokens"])
        W = n - 2
        attn = rng.random((2, 3, n, n)).astype(np.float16)
        n_earlier, scored, ants = coref_mentions.antecedent_structure(rec["mentions"])
        heads = rec["mention_heads"]
        for cand in coref.CANDIDATES:
            got = coref.score_part(rec, attn, candidates=cand)["head_correct"][..., 0]
            want = np.zeros((2, 3), dtype=np.int64)
            for layer in range(2):
                for h in range(3):
                    for i in scored:
                        row = attn[layer, h, heads[i] + 1, 1:W + 1].astype(np.float32)
                        options = (range(W) if cand == "all" else {heads[j] for j in range(n_earlier[i])})
                        options = [j for j in options if j != heads[i]]
                        best = max(options, key=lambda j: (row[j], -j))
                        want[layer, h] += best in {heads[j] for j in ants[i]}
            np.testing.assert_array_equal(got, want)


def test_antecedent_with_the_same_head_word_never_counts():
    rec = {"id": "x", "tokens": ["[CLS]", "the", "dog", "ran", "[SEP]"], "pos": ["DT", "NN", "VBD"],
           "mentions": [[0, 1, 1], [1, 1, 1]], "mention_heads": [1, 1], "head_pos": ["NN", "NN"]}
    attn = np.full((1, 1, 5, 5), 0.2, dtype=np.float32)
    for cand in coref.CANDIDATES:
        r = coref.score_part(rec, attn, candidates=cand)
        assert list(r["counts"]) == [1, 0, 0, 1] and r["own_head_only"] == 1
        assert r["head_correct"].sum() == 0
    assert coref.score_part(rec, attn, candidates="mentions")["no_candidates"] == 1
    bad = dict(rec, mention_heads=[1, 3])
    with pytest.raises(BertlookError, match="outside"):
        coref.score_part(bad, attn)
    with pytest.raises(BertlookError, match="not a coreference store"):
        coref.score_part({"id": "x", "tokens": rec["tokens"]}, attn)
    # every record coref-extract writes has one POS tag per word; no head-POS-only fallback
    with pytest.raises(BertlookError, match="record has no 'pos'"):
        coref.score_part({k: v for k, v in rec.items() if k != "pos"}, attn)
    with pytest.raises(BertlookError, match="2 POS tags for 3 words"):
        coref.score_part(dict(rec, pos=["DT", "NN"]), attn)


def test_agreement_features():
    assert coref.mention_features("He", "PRP") == (3, "sg", "male")
    assert coref.mention_features("them", "PRP") == (3, "pl", None)
    assert coref.mention_features("kings", "NNS") == (3, "pl", None)
    assert coref.mention_features("city", "NN") == (3, "sg", None)
    assert coref.mention_features("who", "WP") == (None, None, None)
    it, they, she = (coref.mention_features(w, "PRP") for w in ("it", "they", "she"))
    assert coref.agree(it, coref.mention_features("city", "NN")) and not coref.agree(they, it)
    assert coref.agree(they, coref.mention_features("Smiths", "NNPS")) and not coref.agree(she, it)
    assert not coref.agree(coref.mention_features("I", "PRP"), coref.mention_features("John", "NNP"))
    assert [coref_mentions.mention_type(p) for p in ("PRP$", "WP", "NNPS", "NN", "RB", "VBD")] == [
        "pronoun", "pronoun", "proper", "nominal", "nominal", "nominal"]


# ------------------------------------------------------------------------------------------ tables

def test_table2_frame_and_markdown(tmp_path):
    sc = coref.score_store(_make_store(tmp_path, _records()))
    plain = coref.table2_frame(sc)
    assert list(plain.columns) == list(coref.TABLE2_RUN_COLUMNS)  # the analysis knows nothing of the paper
    df = join_table2(plain, coref.TABLE2_CSV_COLUMNS)
    assert list(df.columns) == list(coref.TABLE2_CSV_COLUMNS)
    assert df.set_index("system").loc["neural", "note"].startswith("paper only: ")
    assert list(df.system) == ["nearest", "head_match", "rule_based", "neural", "best_head"]
    row = df.set_index("system")
    assert row.loc["rule_based", "all"] == pytest.approx(10 / 13)
    assert row.loc["rule_based", "paper_all"] == pytest.approx(0.69)
    assert row.loc["best_head", "head"] == "1-1" and row.loc["best_head", "paper_head"] == "5-4"
    assert row.loc["best_head", "all"] == 1.0 and row.loc["best_head", "paper_nominal"] == pytest.approx(0.58)
    assert pd.isna(row.loc["neural", "all"]) and row.loc["neural", "paper_all"] == pytest.approx(0.83)
    assert pd.isna(row.loc["neural", "paper_pronoun"]) and pd.isna(row.loc["neural", "n_all"])
    assert row.loc["nearest", "paper_nominal"] == pytest.approx(0.19) and row.loc["head_match", "n_proper"] == 4
    md = table2_markdown(df, title="T2", note="a note")
    assert "| Rule-based (4 sieves) | 76.9 | 60.0 | 100.0 | 75.0 | 69 | 70 | 77 | 60 |" in md
    assert "| Best head 1-1 (paper: 5-4) | 100.0 |" in md and "| Neural coref (paper only) | – | – | – | – | 83 | – |" in md
    assert "| Mentions scored (n) | 13 | 5 | 4 | 4 |" in md
    heads = coref.heads_frame(sc)
    assert list(heads.columns) == list(coref.HEADS_CSV_COLUMNS) and len(heads) == 3
    assert list(heads.iloc[0][["layer", "head", "all", "n"]]) == [1, 1, 1.0, 13]


def test_not_run_tables(tmp_path):
    t, m, h = tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "h.csv"
    note = coref.write_not_run(t, m, h, "no coreference corpus configured")
    assert note == "not run: no coreference corpus configured"
    df = pd.read_csv(t)
    assert list(df.system) == ["not run"] and df.note[0] == note and "all" in df.columns
    hd = pd.read_csv(h)
    assert list(hd.columns) == [*coref.HEADS_CSV_COLUMNS, "note"] and hd.note[0] == note
    assert "Not run: no coreference corpus configured" in m.read_text()



def test_coref_step_without_the_cli(tmp_path):
    """run_coref_step: the frames and the summary JSON of `bertlook coref`; not_run_summary: the --not-run one."""
    result = coref.run_coref_step(_make_store(tmp_path, _records()), candidates="mentions")
    summary = result.summary
    assert list(summary)[:3] == ["status", "attention", "counts"] and summary["status"] == "ok"
    assert summary["candidates"] == "mentions" and summary["parts"] == result.scores.n_parts == 3
    assert summary["mentions_with_antecedents"] == dict(zip(coref_mentions.COLUMNS, N))
    assert summary["best_head"] == "1-1" and summary["best_head_accuracy"]["all"] == 1.0
    assert list(result.table.columns) == list(coref.TABLE2_RUN_COLUMNS) and len(result.heads) == 3
    assert summary == coref.coref_summary(result.store, result.scores)
    assert coref.not_run_summary("no corpus") == {"status": "not run", "reason": "not run: no corpus"}
    assert coref.not_run_summary("Not run here") == {"status": "not run", "reason": "Not run here"}


# --------------------------------------------------------------------------------------------- CLI

def _cli(argv) -> int:
    parser = argparse.ArgumentParser(prog="bertlook")
    sub = parser.add_subparsers(dest="step")
    coref_cli.register_cli(sub)
    args = parser.parse_args([str(a) for a in argv])
    return args.func(args)


def test_cli_help_lists_inputs_and_outputs(capsys):
    for step in ("coref-extract", "coref"):
        with pytest.raises(SystemExit):
            _cli([step, "--help"])
        out = capsys.readouterr().out
        assert "inputs:" in out and "outputs:" in out


def test_cli_not_run(tmp_path):
    outs = ["--out-table", tmp_path / "t.csv", "--out-markdown", tmp_path / "t.md",
            "--out-heads", tmp_path / "h.csv", "--summary", tmp_path / "s.json"]
    assert _cli(["coref", "--not-run", "no coreference corpus configured", *outs]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["status"] == "not run"
    assert pd.read_csv(tmp_path / "t.csv").system[0] == "not run"
    with pytest.raises(BertlookError, match="--attention"):
        _cli(["coref", *outs])


def test_cli_end_to_end(tmp_path, tiny_bert_dir):
    store = tmp_path / "attention" / "coref"
    rc = _cli(["coref-extract", "--conll", FIXTURE, "--model", tiny_bert_dir, "--out", store,
               "--max-seq-len", 128, "--from-split", "mean", "--head-rule", "tree", "--batch-size", 2,
               "--device", "cpu", "--summary", tmp_path / "extract.json"])
    assert rc == 0
    s = json.loads((tmp_path / "extract.json").read_text())
    assert s["n_examples"] == 3 and s["read"]["parts_without_mentions"] == 1 and s["read"]["documents"] == 3
    assert s["truncation"]["mentions_kept"] == 22 and s["truncation"]["mentions_dropped_cut"] == 0
    assert s["truncation"]["mentions_with_antecedents"] == dict(zip(coref_mentions.COLUMNS, N))
    assert len(s["inputs"][0]["sha256"]) == 64
    st = AttentionStore(store)
    assert st.meta["level"] == "word" and st.meta["coref"]["head_rule"] == "tree"
    recs = {r["id"]: (r, a) for r, a in st}
    r, a = recs[P0]
    assert r["tokens"][0] == "[CLS]" and r["tokens"][1:-1] == _docs()[0][P0].words and r["tokens"][-1] == "[SEP]"
    assert a.shape == (2, 2, 20, 20) and np.allclose(a.astype(np.float32).sum(-1), 1, atol=1e-2)
    assert r["mentions"] == [list(m) for m in MENTIONS[P0]] and r["mention_heads"] == TREE_HEADS[P0]
    assert r["head_pos"][1] == "NNP" and r["n_wordpieces"] == 23 and r["split_words"] == 2

    outs = ["--out-table", tmp_path / "table2.csv", "--out-markdown", tmp_path / "table2.md",
            "--out-heads", tmp_path / "coref_heads.csv", "--summary", tmp_path / "coref.json"]
    assert _cli(["coref", "--attention", store, "--candidates", "all", *outs]) == 0
    t = pd.read_csv(tmp_path / "table2.csv")
    assert list(t.columns) == list(coref.TABLE2_CSV_COLUMNS)
    base = t.set_index("system")
    assert base.loc["rule_based", "all"] == pytest.approx(10 / 13) and base.loc["nearest", "n_all"] == 13
    heads = pd.read_csv(tmp_path / "coref_heads.csv")
    assert len(heads) == 4 and heads["n"].eq(13).all()
    best = heads.loc[heads["all"].idxmax()]
    assert base.loc["best_head", "head"] == f"{int(best.layer)}-{int(best['head'])}"
    summ = json.loads((tmp_path / "coref.json").read_text())
    assert summ["mentions_with_antecedents"] == dict(zip(coref_mentions.COLUMNS, N))
    assert summ["extraction"]["read"]["parts_without_mentions"] == 1
    assert summ["extraction"]["truncation"]["mentions_dropped_outside"] == 0
    assert "Table 2 twin" in (tmp_path / "table2.md").read_text()
    assert _cli(["coref", "--attention", store, "--candidates", "mentions", *outs]) == 0
    assert json.loads((tmp_path / "coref.json").read_text())["candidates"] == "mentions"

    # truncated to 7 wordpieces, last-word heads, first-token rows
    small = tmp_path / "attention" / "small"
    assert _cli(["coref-extract", "--conll", FIXTURE, "--model", tiny_bert_dir, "--out", small, "--max-seq-len", 7,
                 "--head-rule", "last", "--from-split", "first", "--device", "cpu",
                 "--summary", tmp_path / "small.json"]) == 0
    t = json.loads((tmp_path / "small.json").read_text())["truncation"]
    assert (t["mentions_kept"], t["mentions_dropped_cut"], t["mentions_dropped_outside"]) == (5, 2, 15)
    assert t["head_source"]["last"] == 5 and t["parts_truncated"] == 3
    assert _cli(["coref", "--attention", small, *outs]) == 0
    c = json.loads((tmp_path / "coref.json").read_text())["counts"]
    assert c["mentions_dropped_cut"] == 2 and c["mentions_dropped_outside"] == 15 and c["parts_read"] == 4
    assert c["parts_skipped_without_mentions"] == 1 and c["documents_without_mentions"] == 1
    assert c["mentions_with_antecedents"] == {"all": 1, "pronoun": 1, "proper": 0, "nominal": 0}


def test_coref_extract_unk_counts_gate_and_size_estimate(tmp_path, tiny_bert_dir, monkeypatch):
    from bertlook.attention import modeling

    s = coref_maps.extract_coref_attention([FIXTURE], str(tiny_bert_dir), tmp_path / "st", device="cpu", progress_every=0)
    assert s["unk_tokens"] == 0 and s["unk_rate"] == 0.0 and s["max_unk_rate"] == 0.05
    assert s["non_special_tokens"] == s["tokens"] - 2 * s["n_examples"]
    st = AttentionStore(tmp_path / "st")
    shards = sum(p.stat().st_size for p in (tmp_path / "st").glob("shard-*.bin"))
    assert s["estimated_map_bytes"] == shards == sum(2 * 2 * 2 * len(r["tokens"]) ** 2 for r in st.records)
    assert sum(p.stat().st_size for p in (tmp_path / "st").iterdir()) <= s["estimated_bytes"]

    lines = _lines()
    k = _line_no(lines, "nw/tiny/00/tiny_0001 0 1 saw")
    bad = _write(tmp_path, _replace_col(lines, k, 3, "☃"))
    s = coref_maps.extract_coref_attention([bad], str(tiny_bert_dir), tmp_path / "unk", device="cpu", progress_every=0)
    assert s["unk_tokens"] == 1 and s["unk_examples"] == [{"id": P0, "unk_tokens": 1, "words": ["☃"]}]
    monkeypatch.setattr(modeling, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(BertlookError) as err:
        _cli(["coref-extract", "--conll", bad, "--model", tiny_bert_dir, "--out", tmp_path / "x",
              "--device", "cpu", "--max-unk-rate", "0"])
    assert f"'{P0}': '☃'" in str(err.value) and "--max-unk-rate" in str(err.value)
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------ hostile input (issue 9)

def _summary(docs):
    return [(d.id, d.words, d.mentions, d.line) for d in docs]


def test_bom_and_crlf_are_accepted(tmp_path):
    data = FIXTURE.read_bytes()
    expected = _summary(conll2012.read_conll(FIXTURE))
    for name, variant in (("bom", b"\xef\xbb\xbf" + data), ("crlf", data.replace(b"\n", b"\r\n")),
                          ("bom_crlf", b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n"))):
        path = tmp_path / f"{name}.gold_conll"
        path.write_bytes(variant)
        assert _summary(conll2012.read_conll(path)) == expected, name


def test_cr_only_line_endings_get_a_hint(tmp_path):
    path = tmp_path / "mac.gold_conll"
    path.write_bytes(FIXTURE.read_bytes().replace(b"\n", b"\r"))
    with pytest.raises(BertlookError, match=rf"{path}:1: carriage return \(CR\) inside a line: CR-only line "
                                            r"endings .*convert with: tr '\\r' '\\n'"):
        conll2012.read_conll(path)


def test_bad_utf8_names_the_right_line_deep_in_the_file(tmp_path):
    """A text-mode reader decodes 8 KB chunks ahead: the error must name the line of the bad byte."""
    lines = _lines()
    k = _line_no(lines, "him PRP (NP*)))")
    filler = ["# a comment line to push the bad byte past the first chunk"] * 400
    path = tmp_path / "deep.gold_conll"
    data = "\n".join(filler + lines).encode().replace(b" him ", b" h\xffm ", 1)
    path.write_bytes(data + b"\n")
    with pytest.raises(BertlookError, match=rf"{path}:{len(filler) + k}: not UTF-8"):
        conll2012.read_conll(path)


@pytest.mark.parametrize("content, msg", [
    (b"", "empty file"),
    (b"# only a comment\n\n", "no '#begin document' line in its 2 lines"),
])
def test_file_without_documents_is_an_error(tmp_path, content, msg):
    path = tmp_path / "x.gold_conll"
    path.write_bytes(content)
    with pytest.raises(BertlookError, match=re.escape(f"{path}: {msg}")):
        conll2012.read_conll(path)


def test_corpus_without_mentions_names_the_files(tmp_path, capsys):
    lines = [" ".join(line.split()[:-1] + ["-"]) if line.strip() and not line.startswith("#") else line
             for line in _lines()]
    a = _write(tmp_path, lines, "a.gold_conll")
    with pytest.raises(BertlookError, match=re.escape(f"{a}: no coreference mention in any of the 4 document "
                                                      "part(s)")):
        conll2012.read_conll_files([a])
    assert conll2012.read_conll(a) == []  # one file on its own: parts without mentions are skipped, counted
    from bertlook.cli import main

    b = _write(tmp_path, lines[:8] + ["#end document"], "b.gold_conll")
    code = main(["coref-extract", "--conll", str(a), "--conll", str(b), "--model", "unused",
                 "--out", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"error: {a}, {b}: no coreference mention in any of the 5 document part(s)" in err
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("col, value", [(-1, "(" + "9" * 5000 + ")"), (2, "9" * 5000), (1, "9" * 5000)])
def test_huge_numbers_are_line_errors(tmp_path, col, value):
    lines = _lines()
    k = _line_no(lines, "saw VBD (VP* see")
    bad = _write(tmp_path, _replace_col(lines, k, col, value))
    with pytest.raises(BertlookError, match=rf"{bad}:{k}: "):
        conll2012.read_conll(bad)
