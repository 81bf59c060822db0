"""Property-based fuzzing of the corpus readers (issue 9, part 6).

For any bytes (random bytes, or mutations of the valid fixtures in tests/fixtures/), each reader
either parses or raises :class:`BertlookError` naming the file (and ``file:line`` where the format
has lines), never another exception. Runs are seeded (``derandomize=True``) and short.
"""

from __future__ import annotations

import bz2
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bertlook.attention.coref_maps import coref_record
from bertlook.data.conll2012 import read_conll_files
from bertlook.data.coref_mentions import HEAD_RULES, mention_heads
from bertlook.data.documents import iter_documents
from bertlook.errors import BertlookError
from bertlook.data.treebank import read_conllu, read_conllx, write_conllu

FIXTURES = Path(__file__).parent / "fixtures"
CONLLU = (FIXTURES / "tiny.conllu").read_bytes()
CONLLX = (FIXTURES / "tiny_sd.conllx").read_bytes()
CONLL2012 = (FIXTURES / "tiny_coref.gold_conll").read_bytes()
WIKI = (FIXTURES / "tiny_wiki.xml").read_bytes()

# Seeded and short by default; BERTLOOK_FUZZ_EXAMPLES=5000 runs a longer, unseeded campaign.
_CAMPAIGN = int(os.environ.get("BERTLOOK_FUZZ_EXAMPLES", "0"))
FUZZ = settings(derandomize=not _CAMPAIGN, max_examples=_CAMPAIGN or 200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Byte strings that tend to break readers: line endings, BOMs, bad UTF-8, separators, huge numbers,
# brackets of the CoNLL-2012 columns, XML specials, Unicode line separators.
SPECIAL = [b"\r", b"\r\n", b"\n", b"\n\n", b"\t", b" ", b"\xef\xbb\xbf", b"\xff", b"\xc3", b"\x00", b"\x0b",
           b"\x1c", "\u2028".encode(), "\x85".encode(), b"#", b"# sent_id = a\tb", b"#begin document (x); part 0",
           b"#end document", b"(", b")", b"(1", b"1)", b"(1)", b"|", b"-", b"_", b"0", b"-1", b"1-2", b"1.1",
           b"9" * 30, b"9" * 5000, b"*", b"(TOP*", b"*)", b"&amp;", b"&#0;", b"&bogus;", b"<", b">", b"]]>",
           b"<page>", b"</page>", b"<text>", b"#REDIRECT", b"{{", b"}}", b"[[", b"]]", b"{|", b"|}", b"=="]


@st.composite
def mutated(draw, base: bytes) -> bytes:
    """``base`` with 1..6 byte- or line-level edits."""
    data = bytearray(base)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 6]))):
        op = draw(st.sampled_from(["flip", "insert", "special", "delete", "truncate", "dup_line", "drop_line",
                                   "swap_lines", "crlf", "cr_only", "field", "field", "field"]))
        pos = draw(st.integers(0, max(len(data), 1) - 1)) if data else 0
        if op == "flip" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "special":
            data[pos:pos] = draw(st.sampled_from(SPECIAL))
        elif op == "delete" and data:
            del data[pos:pos + draw(st.integers(1, 40))]
        elif op == "truncate":
            del data[pos:]
        elif op == "crlf":
            data = bytearray(bytes(data).replace(b"\n", b"\r\n"))
        elif op == "cr_only":
            data = bytearray(bytes(data).replace(b"\n", b"\r"))
        else:
            lines = bytes(data).split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if op == "dup_line":
                lines.insert(j, lines[i])
            elif op == "drop_line":
                del lines[i]
            elif op == "swap_lines":
                lines[i], lines[j] = lines[j], lines[i]
            elif op == "field":  # replace one column of one line (tab- or space-separated)
                sep = b"\t" if b"\t" in lines[i] else b" "
                cols = lines[i].split(sep)
                k = draw(st.integers(0, len(cols) - 1))
                cols[k] = draw(st.one_of(st.sampled_from(SPECIAL), st.binary(max_size=6)))
                lines[i] = sep.join(cols)
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def inputs(base: bytes):
    return st.one_of(st.binary(max_size=300), mutated(base), mutated(base), mutated(base))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# messages about the whole file (no line to name)
WHOLE_FILE = ("empty file", "no sentences in the file", "no '#begin document' line", "no coreference mention")


def _check_error(err: BertlookError, path: Path, *, lines: bool) -> None:
    msg = str(err)
    event("BertlookError")
    assert str(path) in msg, msg
    if lines:
        assert re.search(re.escape(str(path)) + r":\d+: ", msg) or any(w in msg for w in WHOLE_FILE), msg


def _treebank_roundtrip(sentences, path: Path) -> None:
    """What the reader accepted is written and read back unchanged (words, heads, ids)."""
    event("parsed")
    out = path.with_name(path.name + ".out.conllu")
    write_conllu(out, sentences)
    again = read_conllu(out)
    assert [(s.sent_id, s.words, s.heads) for s in again] == [(s.sent_id, s.words, s.heads) for s in sentences]


@FUZZ
@given(data=inputs(CONLLU))
def test_conllu_reader_parses_or_names_file_and_line(workdir, data):
    path = workdir / "fuzz.conllu"
    path.write_bytes(data)
    try:
        sentences = read_conllu(path)
    except BertlookError as err:
        _check_error(err, path, lines=True)
        return
    assert sentences and all(s.n() == len(s.heads) for s in sentences)
    _treebank_roundtrip(sentences, path)


@FUZZ
@given(data=inputs(CONLLX))
def test_conllx_reader_parses_or_names_file_and_line(workdir, data):
    path = workdir / "fuzz.conllx"
    path.write_bytes(data)
    try:
        sentences = read_conllx(path)
    except BertlookError as err:
        _check_error(err, path, lines=True)
        return
    assert sentences
    _treebank_roundtrip(sentences, path)


@FUZZ
@given(data=inputs(CONLL2012))
def test_conll2012_reader_parses_or_names_file_and_line(workdir, data):
    path = workdir / "fuzz.gold_conll"
    path.write_bytes(data)
    try:
        docs = read_conll_files([path])
    except BertlookError as err:
        _check_error(err, path, lines=True)
        return
    assert docs and all(d.mentions for d in docs)
    event("parsed")
    for doc in docs:  # what the reader returns is usable downstream
        for rule in HEAD_RULES:
            heads = mention_heads(doc, rule)
            assert len(heads) == len(doc.mentions)
            assert all(m.start <= h <= m.end for (h, _), m in zip(heads, doc.mentions))
        coref_record(doc, head_rule="tree")


def _read_wiki(path: Path) -> None:
    docs = list(iter_documents(path))
    assert docs and all(doc.title is not None and doc.sentences for doc in docs)
    event("parsed")


@FUZZ
@given(data=inputs(WIKI))
def test_mediawiki_xml_reader_parses_or_names_file(workdir, data):
    path = workdir / "fuzz.xml"
    path.write_bytes(data)
    try:
        _read_wiki(path)
    except BertlookError as err:
        _check_error(err, path, lines=False)


@settings(FUZZ, max_examples=_CAMPAIGN or 60)
@given(data=st.one_of(mutated(WIKI).map(bz2.compress), mutated(bz2.compress(WIKI))))
def test_mediawiki_bz2_reader_parses_or_names_file(workdir, data):
    path = workdir / "fuzz.xml.bz2"
    path.write_bytes(data)
    try:
        _read_wiki(path)
    except BertlookError as err:
        _check_error(err, path, lines=False)
