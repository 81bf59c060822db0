"""bertlook.data.segments: dump reading and cleaning, sentence splitting, paper-style segments, JSONL I/O."""

from __future__ import annotations

import argparse
import bz2
import json
import os
import random
from pathlib import Path

import pytest

from bertlook.cli import segments as corpora_cli
from bertlook.data import segments as corpora
from bertlook.data import documents
from bertlook.data.documents import Document, iter_documents
from bertlook.data.segments import build_segments, read_segments, write_segments
from bertlook.errors import BertlookError

CAT_SENTENCES = [
    "The cat is a small animal that sat on the mat.",
    "The cat was in the house of John and Mary.",
    "It ran to the river when the dog came.",
    "The first cat came to London in the year one.",
    "Many people said the cat was a great king.",
    "The queen had two cats and three dogs.",
    "The old man wrote a book about the cat.",
    "He read the book to the woman in the city.",
]
LONDON_SENTENCES = [
    "London is a big city in England.",
    "It is on a river.",
    "The king and the queen went to London.",
    "They saw many people there, and the people saw them.",
    "The city was old but it was good.",
]
EXPECTED_COUNTS = {
    "pages_read": 5,
    "non_article_pages_skipped": 1,
    "redirects_skipped": 1,
    "documents_without_sentences": 1,
    "documents_kept": 2,
    "short_sentences_skipped": 1,  # "Yes."
    "sentences_kept": 13,
}


@pytest.fixture()
def wiki_xml(fixtures_dir) -> Path:
    return fixtures_dir / "tiny_wiki.xml"


# ------------------------------------------------------------------------------ reading dumps

def test_iter_documents_bz2_and_plain_agree(wiki_xml, wiki_bz2):
    counts_bz2, counts_xml = {}, {}
    docs_bz2 = list(iter_documents(wiki_bz2, counts=counts_bz2))
    docs_xml = list(iter_documents(wiki_xml, counts=counts_xml))
    assert docs_bz2 == docs_xml
    assert [(d.index, d.title) for d in docs_bz2] == [(0, "The Cat"), (1, "London")]
    assert docs_bz2[0].sentences == CAT_SENTENCES
    assert docs_bz2[1].sentences == LONDON_SENTENCES
    assert counts_bz2 == counts_xml
    for key, value in EXPECTED_COUNTS.items():
        assert counts_bz2[key] == value, key
    assert counts_bz2["non_prose_lines_skipped"] > 0
    assert set(counts_bz2) == set(documents.DOCUMENT_COUNT_KEYS)


def test_cleaning_removes_markup(wiki_bz2):
    text = "\n".join(s for d in iter_documents(wiki_bz2) for s in d.sentences)
    for junk in ("'''", "''", "{{", "}}", "==", "[[", "]]", "|", "&nbsp;", "\xa0", "<ref", "ref>",
                 "Infobox", "A book about cats", "list item", "numbered item", "wikitable",
                 "Category", "thumb", "Cat on mat", "This page is about", "picture of the city",
                 "See also", "Paris", "  "):
        assert junk not in text, junk


def test_clean_wiki_text_unit():
    counts = {}
    raw = ("{{Infobox|a=b}}\n'''Bold''' and ''italic'' text is here.&lt;br/&gt;\n== Heading ==\n"
           "* a list line.\n: an indented line.\n{| class=x\n| cell.\n|}\n"
           "Some  text {{lang|fr|mot}} with ( ) empty parens and a&amp;nbsp;space.\n"
           "[[File:X.png|thumb|A caption with a [[link]].]]\nA caption without a full stop")
    paragraphs = documents.clean_wiki_text(raw, counts)
    assert paragraphs == ["Bold and italic text is here.", "Some text with empty parens and a space."]
    assert counts["non_prose_lines_skipped"] >= 5


def test_split_sentences_deterministic_and_per_paragraph():
    text = ("Dr. Smith went to Washington. He was tired! Was he really tired? Yes.\n"
            "A paragraph without a full stop\nThe next paragraph starts here.")
    first = corpora.split_sentences(text)
    assert first == corpora.split_sentences(text)
    assert first == ["Dr. Smith went to Washington.", "He was tired!", "Was he really tired?", "Yes.",
                     "A paragraph without a full stop", "The next paragraph starts here."]
    assert corpora.split_sentences("") == []


def test_is_usable_sentence():
    assert documents.is_usable_sentence("The cat sat.")
    assert not documents.is_usable_sentence("Yes.")
    assert not documents.is_usable_sentence("1 2 3 4 .")


def test_max_articles_stops_early(wiki_bz2):
    counts = {}
    docs = list(iter_documents(wiki_bz2, max_articles=1, counts=counts))
    assert [d.title for d in docs] == ["The Cat"]
    assert counts["pages_read"] == 1 and counts["documents_kept"] == 1


@pytest.mark.parametrize("kind", ["missing", "empty", "empty_bz2", "corrupt_bz2", "truncated_bz2",
                                  "bad_xml", "not_mediawiki", "directory"])
def test_bad_dumps_name_the_file(kind, tmp_path, wiki_xml):
    data = bz2.compress(wiki_xml.read_bytes())
    path = tmp_path / "dump.xml.bz2"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "empty_bz2":
        path.write_bytes(bz2.compress(b""))
    elif kind == "corrupt_bz2":
        path.write_bytes(b"BZh9" + bytes(random.Random(0).randrange(256) for _ in range(500)))
    elif kind == "truncated_bz2":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "bad_xml":
        path = tmp_path / "dump.xml"
        path.write_text(wiki_xml.read_text().replace("</title>\n    <ns>4", "\n    <ns>4", 1))
    elif kind == "not_mediawiki":
        path = tmp_path / "dump.xml"
        path.write_text("<root><page><title>x</title></page></root>")
    elif kind == "directory":
        path.mkdir()
    with pytest.raises(BertlookError) as exc:
        list(iter_documents(path))
    assert str(path) in str(exc.value)
    if kind == "bad_xml":
        assert f"{path}:" in str(exc.value) and "invalid XML" in str(exc.value)


# ---------------------------------------------------------------------------------- segments

_WORDS = ("the a cat dog mat sat saw ran man woman house city river king queen book read wrote john "
          "mary paris london france england war world people time year first new old good great long "
          "many some other after before during into over under about when while because").split()


def _synthetic_docs(n_docs=6, n_sents=30, seed=123) -> list[Document]:
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        sents = []
        for _ in range(n_sents):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
            sents.append(" ".join(words).capitalize() + ".")
        docs.append(Document(index=d, title=f"Doc {d}", sentences=sents))
    return docs


def _check_segment(seg, tokenizer, max_seq_len, docs_by_index):
    tokens, seg_ids = seg["tokens"], seg["segment_ids"]
    assert list(seg) == list(corpora.SEGMENT_KEYS)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
    assert tokens.count("[CLS]") == 1
    assert len(tokens) <= max_seq_len and len(seg_ids) == len(tokens)
    first_sep = tokens.index("[SEP]")
    assert seg_ids == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    part_a, part_b = tokens[1:first_sep], tokens[first_sep + 1:-1]
    assert part_a and part_b
    full_a, full_b = tokenizer.tokenize(seg["text_a"]), tokenizer.tokenize(seg["text_b"])
    assert seg["truncated"] == (len(full_a) + len(full_b) > max_seq_len - 3)
    for part, full in ((part_a, full_a), (part_b, full_b)):
        if not seg["truncated"]:
            assert part == full
        # truncation only removes tokens at the two ends: what is left is a contiguous slice
        assert any(full[i:i + len(part)] == part for i in range(len(full) - len(part) + 1))
    # A and B are consecutive sentences of one document
    doc = docs_by_index[seg["doc_index"]]
    assert seg["doc"] == doc.title
    joined = " ".join(doc.sentences)
    assert f"{seg['text_a']} {seg['text_b']}" in joined


def test_segment_rules(tokenizer):
    docs = _synthetic_docs()
    by_index = {d.index: d for d in docs}
    segments, summary = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=64, seed=0)
    assert segments and [s["id"] for s in segments] == list(range(len(segments)))
    for seg in segments:
        _check_segment(seg, tokenizer, 64, by_index)
    total_sentences = sum(len(d.sentences) for d in docs)
    assert summary["segments_requested"] == 1000
    assert summary["segments_produced"] == len(segments) < 1000  # fewer than asked: no error
    assert summary["documents_read"] == summary["documents_used"] == len(docs)
    assert summary["sentences_used"] + summary["sentences_unused"] == total_sentences
    assert summary["truncated_segments"] == sum(s["truncated"] for s in segments)
    assert summary["max_tokens"] == max(len(s["tokens"]) for s in segments) <= 64
    assert summary["mean_tokens"] == pytest.approx(
        sum(len(s["tokens"]) for s in segments) / len(segments), abs=1e-3)
    # shuffled: not in document order
    assert [s["doc_index"] for s in segments] != sorted(s["doc_index"] for s in segments)


def test_same_seed_same_output_other_seed_other_splits(tokenizer):
    docs = _synthetic_docs()
    a1, s1 = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=96, seed=0)
    a2, s2 = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=96, seed=0)
    b, _ = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=96, seed=1)
    assert a1 == a2 and s1 == s2
    splits = lambda segs: {(s["doc_index"], s["text_a"]) for s in segs}  # noqa: E731
    assert splits(a1) != splits(b)


def test_truncation_when_max_seq_len_small(tokenizer):
    docs = _synthetic_docs(n_docs=2)
    segments, summary = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=16, seed=0)
    assert summary["truncated_segments"] > 0
    assert all(len(s["tokens"]) <= 16 for s in segments)
    truncated = [s for s in segments if s["truncated"]]
    assert truncated and all(len(s["tokens"]) == 16 for s in truncated)
    for seg in segments:
        _check_segment(seg, tokenizer, 16, {d.index: d for d in docs})


def test_truncate_seq_pair_follows_bert():
    # BERT's truncate_seq_pair cuts the longer side, and B when both are equally long
    rng = random.Random(0)
    a, b = list("abcdef"), list("xy")
    assert corpora._truncate_seq_pair(a, b, 6, rng)
    assert len(a) == 4 and b == ["x", "y"]
    a, b = list("abc"), list("xyz")
    corpora._truncate_seq_pair(a, b, 5, random.Random(0))
    assert a == ["a", "b", "c"] and len(b) == 2
    assert not corpora._truncate_seq_pair(list("ab"), list("c"), 5, rng)


def test_n_segments_cap_and_lazy_reading(tokenizer):
    docs = _synthetic_docs()
    pulled = []

    def lazy():
        for d in docs:
            pulled.append(d.index)
            yield d

    segments, summary = build_segments(lazy(), tokenizer, n_segments=3, max_seq_len=64, seed=0)
    assert len(segments) == 3 and summary["segments_produced"] == 3
    assert sorted(s["id"] for s in segments) == [0, 1, 2]
    assert pulled == [0] and summary["documents_read"] == 1  # no document read beyond need


def test_single_sentence_chunks_are_skipped_and_counted(tokenizer):
    long_sentence = " ".join(["king"] * 40) + "."
    docs = [Document(0, "One", ["The cat sat on the mat."]),
            Document(1, "Two", [long_sentence, "The dog ran.", "The man saw it."])]
    segments, summary = build_segments(docs, tokenizer, n_segments=10, max_seq_len=32, seed=0)
    assert summary["single_sentence_chunks_skipped"] == 2
    assert summary["sentences_unused"] == 2 and summary["sentences_used"] == 2
    assert len(segments) == 1
    assert segments[0]["text_a"] == "The dog ran." and segments[0]["text_b"] == "The man saw it."
    assert summary["documents_used"] == 1 and summary["documents_read"] == 2


def test_bad_parameters(tokenizer):
    with pytest.raises(BertlookError, match="n_segments"):
        build_segments([], tokenizer, n_segments=0)
    with pytest.raises(BertlookError, match="max_seq_len"):
        build_segments([], tokenizer, n_segments=1, max_seq_len=4)


def test_segments_from_fixture_dump(wiki_bz2, tokenizer):
    docs = list(iter_documents(wiki_bz2))
    segments, summary = build_segments(docs, tokenizer, n_segments=10, max_seq_len=128, seed=0)
    assert 1 <= len(segments) <= 10
    for seg in segments:
        _check_segment(seg, tokenizer, 128, {d.index: d for d in docs})


def test_packaged_gensim_excerpt(tokenizer):
    import gensim

    path = os.path.join(os.path.dirname(gensim.__file__), "test/test_data/"
                        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    counts = {}
    docs = iter_documents(path, max_articles=5, counts=counts)
    segments, summary = build_segments(docs, tokenizer, n_segments=20, max_seq_len=128, seed=0)
    assert summary["segments_produced"] == 20 and len(segments) == 20
    assert counts["redirects_skipped"] >= 1 and counts["documents_kept"] <= 5
    titles = {s["doc"] for s in segments}
    assert "Anarchism" in titles
    for seg in segments:
        assert seg["tokens"][0] == "[CLS]" and seg["tokens"][-1] == "[SEP]"
        assert seg["tokens"].count("[SEP]") == 2 and len(seg["tokens"]) <= 128
        assert len(seg["segment_ids"]) == len(seg["tokens"])
        for junk in ("'''", "[[", "{{", "<ref", "=="):
            assert junk not in seg["text_a"] + seg["text_b"]


# ------------------------------------------------------------------------------------- JSONL

def _segments(tokenizer):
    return build_segments(_synthetic_docs(n_docs=2), tokenizer, n_segments=5, max_seq_len=32)[0]


def test_write_read_roundtrip(tokenizer, tmp_path):
    segs = _segments(tokenizer)
    path = tmp_path / "corpus" / "segments.jsonl"
    write_segments(path, segs)
    assert read_segments(path) == segs
    assert sorted(p.name for p in path.parent.iterdir()) == ["segments.jsonl"]
    first = json.loads(path.read_text().splitlines()[0])
    assert list(first) == list(corpora.SEGMENT_KEYS)


@pytest.mark.parametrize("mutate, message", [
    (lambda s: "{not json", "invalid JSON"),
    (lambda s: json.dumps({k: v for k, v in s.items() if k != "tokens"}), "missing key(s) tokens"),
    (lambda s: json.dumps({**s, "segment_ids": s["segment_ids"][:-1]}), "len(tokens)"),
    (lambda s: json.dumps({**s, "tokens": ["hello", *s["tokens"][1:]]}), "[CLS]-like"),
    (lambda s: json.dumps({**s, "id": 0}), "duplicate id 0"),
    (lambda s: json.dumps([1, 2]), "not a JSON object"),
])
def test_read_segments_bad_line_names_file_and_line(tokenizer, tmp_path, mutate, message):
    segs = sorted(_segments(tokenizer), key=lambda s: s["id"])
    path = tmp_path / "segments.jsonl"
    lines = [json.dumps(segs[0]), mutate(segs[1]), json.dumps(segs[2])]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BertlookError) as exc:
        read_segments(path)
    assert str(exc.value).startswith(f"{path}:2: ")
    assert message in str(exc.value)


def test_read_segments_missing_file(tmp_path):
    with pytest.raises(BertlookError, match="segments.jsonl"):
        read_segments(tmp_path / "segments.jsonl")



def test_segments_step_without_the_cli(wiki_bz2, tokenizer):
    """run_segments_step: the segments and the summary of `bertlook segments`, from the dump or from a reader."""
    import functools

    from bertlook.data.segments import SegmentOptions, run_segments_step

    options = SegmentOptions(n_segments=50, max_seq_len=64, seed=0, splitter="auto")
    result = run_segments_step(tokenizer, wiki_bz2, options=options, model="tiny-bert")
    summary = result.summary
    assert list(summary)[:7] == ["dump", "model", "revision", "max_articles", "language", "splitter",
                                 "segments_requested"]
    assert summary["dump"] == str(wiki_bz2) and summary["model"] == "tiny-bert" and summary["revision"] is None
    assert summary["splitter"] == "spacy" and summary["segments_produced"] == len(result.segments) < 50
    for key, value in EXPECTED_COUNTS.items():
        assert summary[key] == result.counts[key] == value, key
    assert result.warnings == summary["warnings"] == [
        f"only {len(result.segments)} of 50 segments could be made from {wiki_bz2}: its 2 usable articles ran out"]
    other = run_segments_step(tokenizer, reader=functools.partial(iter_documents, wiki_bz2), options=options,
                              corpus={"source": "test"}, source="the test corpus")
    assert other.segments == result.segments
    assert other.summary["dump"] is None and other.summary["corpus"] == {"source": "test"}
    assert "from the test corpus:" in other.warnings[0]
    with pytest.raises(BertlookError, match="one of them"):
        run_segments_step(tokenizer, options=options)


# ---------------------------------------------------------------------------------------- CLI

def _parse(argv):
    parser = argparse.ArgumentParser(prog="bertlook")
    corpora_cli.register_cli(parser.add_subparsers(dest="step"))
    return parser.parse_args(argv)


def test_cli_corpora(fake_modeling, tiny_bert_dir, wiki_bz2, tmp_path, capsys):
    out, summary_path = tmp_path / "corpus" / "segments.jsonl", tmp_path / "corpus" / "summary.json"
    args = _parse(["segments", "--dump", str(wiki_bz2), "--model", str(tiny_bert_dir),
                   "--out", str(out), "--summary", str(summary_path), "--n-segments", "50",
                   "--max-seq-len", "64", "--seed", "0"])
    assert args.func(args) == 0
    segments = read_segments(out)
    summary = json.loads(summary_path.read_text())
    assert summary["segments_produced"] == len(segments) < 50
    assert summary["segments_requested"] == 50
    for key, value in EXPECTED_COUNTS.items():
        assert summary[key] == value, key
    captured = capsys.readouterr()
    assert captured.out.startswith(f"segments: {len(segments)}/50 segments")
    assert captured.out.count("\n") == 1
    assert "warning: only" in captured.err


def test_cli_help_lists_inputs_and_outputs(capsys):
    with pytest.raises(SystemExit):
        _parse(["segments", "--help"])
    text = capsys.readouterr().out
    for word in ("Input:", "Output:", "--dump", "--model", "--revision", "--out", "--summary",
                 "--n-segments", "--max-seq-len", "--seed", "--max-articles"):
        assert word in text


# ------------------------------------------------------------------- bad and hostile dumps (issue 9)

_MW_HEAD = '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">'


def _page(title, text, ns=0, redirect=False):
    return (f"<page><title>{title}</title><ns>{ns}</ns><id>1</id>" + ("<redirect title='X'/>" if redirect else "")
            + f"<revision><id>2</id><text>{text}</text></revision></page>")


@pytest.mark.parametrize("pages, what", [
    ("", "pages read 0"),
    (_page("R", "#REDIRECT [[Cat]]", redirect=True) + _page("T", "Talk page text is here.", ns=1),
     "pages read 2, non-article pages 1, redirects 1"),
    (_page("Stub", "== Heading ==\n* a list item"), "articles without a usable sentence 1"),
])
def test_dump_without_usable_articles_is_an_error_naming_it(tmp_path, pages, what):
    path = tmp_path / "dump.xml"
    path.write_text(f"{_MW_HEAD}{pages}</mediawiki>")
    with pytest.raises(BertlookError, match="no usable article") as exc:
        list(iter_documents(path))
    assert str(path) in str(exc.value) and what in str(exc.value)
    bz = tmp_path / "dump.xml.bz2"
    bz.write_bytes(bz2.compress(path.read_bytes()))
    with pytest.raises(BertlookError, match=f"{bz}: no usable article"):
        list(iter_documents(bz))


def test_cli_corpora_empty_dump_exits_2_and_writes_nothing(fake_modeling, tiny_bert_dir, tmp_path, capsys):
    from bertlook.cli import main

    dump = tmp_path / "redirects.xml"
    dump.write_text(f"{_MW_HEAD}{_page('R', '#REDIRECT [[Cat]]')}</mediawiki>")
    out = tmp_path / "segments.jsonl"
    code = main(["segments", "--dump", str(dump), "--model", str(tiny_bert_dir), "--out", str(out),
                 "--summary", str(tmp_path / "s.json")])
    assert code == 2 and not out.exists()
    assert f"error: {dump}: no usable article in the Wikipedia dump (pages read 1" in capsys.readouterr().err


def test_cli_corpora_no_segment_possible_is_an_error(fake_modeling, tiny_bert_dir, tmp_path, capsys):
    from bertlook.cli import main

    dump = tmp_path / "one_sentence_each.xml"
    dump.write_text(f"{_MW_HEAD}{_page('A', 'The cat sat on the mat.')}{_page('B', 'The dog ran to the river.')}"
                    "</mediawiki>")
    out = tmp_path / "segments.jsonl"
    code = main(["segments", "--dump", str(dump), "--model", str(tiny_bert_dir), "--out", str(out),
                 "--summary", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert f"{dump}: no segment could be made (2 usable articles read, 2 single-sentence chunks skipped" in err


def test_cli_corpora_shortfall_is_reported_in_the_summary(fake_modeling, tiny_bert_dir, wiki_bz2, tmp_path, capsys):
    summary_path = tmp_path / "s.json"
    args = _parse(["segments", "--dump", str(wiki_bz2), "--model", str(tiny_bert_dir), "--out",
                   str(tmp_path / "seg.jsonl"), "--summary", str(summary_path), "--n-segments", "1000"])
    assert args.func(args) == 0
    summary = json.loads(summary_path.read_text())
    assert summary["warnings"] == [f"only {summary['segments_produced']} of 1000 segments could be made from "
                                   f"{wiki_bz2}: its 2 usable articles ran out"]
    assert f"warning: {summary['warnings'][0]}" in capsys.readouterr().err


def test_entity_bombs_and_external_entities_are_refused(tmp_path):
    lol = '<!ENTITY l0 "lol">' + "".join(f'<!ENTITY l{i} "{("&l%d;" % (i - 1)) * 10}">' for i in range(1, 10))
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(f"<?xml version='1.0'?><!DOCTYPE mediawiki [{lol}]>{_MW_HEAD}{_page('A', '&l9;')}</mediawiki>")
    with pytest.raises(BertlookError, match=rf"{bomb}:1: invalid XML .*amplification"):
        list(iter_documents(bomb))
    xxe = tmp_path / "xxe.xml"
    xxe.write_text("<?xml version='1.0'?><!DOCTYPE mediawiki [<!ENTITY x SYSTEM 'file:///etc/passwd'>]>"
                   f"{_MW_HEAD}{_page('A', '&x;')}</mediawiki>")
    with pytest.raises(BertlookError, match=rf"{xxe}:1: invalid XML .*undefined entity"):
        list(iter_documents(xxe))


def test_invalid_utf8_in_dump_names_file_and_line(tmp_path, wiki_xml):
    data = wiki_xml.read_bytes().replace(b"The cat was in the house", b"The cat was in the \xff house", 1)
    path = tmp_path / "bad.xml"
    path.write_bytes(data)
    line = data[: data.index(b"\xff")].count(b"\n") + 1
    with pytest.raises(BertlookError, match=rf"{path}:{line}: invalid XML"):
        list(iter_documents(path))
