"""bertlook.data.sentences: sentence splitting in the corpus language (issue 13), and its wiring.

Every expected sentence list below is written out by hand.
"""

from __future__ import annotations

import bz2
import copy
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bertlook.cli import main
from bertlook.data import segments as seg_module
from bertlook.data.documents import iter_documents, iter_dump_articles, make_document, plain_text_paragraphs
from bertlook.data.sentences import (NO_SPACE_LANGUAGES, SPACY_LANGUAGES, is_usable_sentence, resolve_splitter,
                                     split_sentences, split_sentences_rules)
from bertlook.errors import BertlookError
from bertlook.pipeline.config import validate_config

# no network for datasets, its cache in the test's tmp dir (conftest.hf_offline_cache)
pytestmark = pytest.mark.usefixtures("hf_offline_cache")

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ rules splitter

GERMAN = ("Am 1. Januar 2000 begann das 21. Jahrhundert. Er kam z.B. mit Dr. Müller, bzw. mit Nr. 5 an. "
          "„Halt!“ sagte er. Dann ging er. Er starb 1990. Danach kam J. R. R. Tolkien.\n"
          "Es kamen ca. 300 Leute, vgl. Kapitel 3, und z. B. Anna.  Das  ist\tgut.\n"
          "Er sagte: „Das ist gut.“ Dann ging er nach Hause. Ist das so? Ja! Usw. geht es weiter.")
GERMAN_SENTENCES = [
    "Am 1. Januar 2000 begann das 21. Jahrhundert.",  # ordinals "1." and "21." (<= 2 digits) do not end it
    "Er kam z.B. mit Dr. Müller, bzw. mit Nr. 5 an.",  # z.B. (letters), Dr., bzw., Nr. (list)
    "„Halt!“ sagte er.",                               # "!“" then a lowercase word: no split
    "Dann ging er.",
    "Er starb 1990.",                                   # a 4-digit year ends the sentence
    "Danach kam J. R. R. Tolkien.",                     # initials
    "Es kamen ca. 300 Leute, vgl. Kapitel 3, und z. B. Anna.",  # ca., vgl., "z." "B." single letters
    "Das ist gut.",                                     # whitespace collapsed
    "Er sagte: „Das ist gut.“",                         # the closing quote stays with its sentence
    "Dann ging er nach Hause.",
    "Ist das so?",
    "Ja!",
    "Usw. geht es weiter.",                             # "Usw." is in the list (case-insensitive)
]


def test_rules_german():
    assert split_sentences_rules(GERMAN, "de") == GERMAN_SENTENCES


def test_rules_ordinals_only_in_ordinal_languages():
    # English has no ordinal dot: "1." before a capital ends the sentence; before a digit it never does.
    assert split_sentences_rules("He came on day 1. Then he left.", "en") == ["He came on day 1.",
                                                                             "Then he left."]
    assert split_sentences_rules("Am 1. Januar kam er.", "de") == ["Am 1. Januar kam er."]
    assert split_sentences_rules("Steps 1. 2. 3. Done.", "en") == ["Steps 1. 2. 3.", "Done."]


def test_rules_english():
    text = ('Mr. Smith met Dr. Jones at 3.14 p.m. yesterday. It rained, e.g. in London. '
            'J. R. R. Tolkien wrote books.\nHe said "Stop." Then he left.  It is 5 ft. tall (really). '
            'What?! No... Yes.')
    assert split_sentences_rules(text, "en") == [
        "Mr. Smith met Dr. Jones at 3.14 p.m. yesterday.",
        "It rained, e.g. in London.",
        "J. R. R. Tolkien wrote books.",
        'He said "Stop."',
        "Then he left.",
        "It is 5 ft. tall (really).",  # "ft." before a lowercase word: no split
        "What?!",
        "No...",
        "Yes.",
    ]


def test_rules_chinese():
    text = ("北京是中国的首都。它有很多人！你去过吗？我去过。\n"
            "第一句。 第二句！真的吗？！他说：“你好。”然后走了。\n"
            "我 爱 你。圆周率是3.14。")
    assert split_sentences_rules(text, "zh") == [
        "北京是中国的首都。", "它有很多人！", "你去过吗？", "我去过。",
        "第一句。", "第二句！", "真的吗？！", "他说：“你好。”", "然后走了。",
        "我 爱 你。",  # no-space languages: inner spaces kept as they are
        "圆周率是3.14。",
    ]


def test_rules_japanese():
    text = "東京は日本の首都です。人口はとても多い！行ったことがありますか？\nﾃｽﾄです｡次の文です｡"
    assert split_sentences_rules(text, "ja") == [
        "東京は日本の首都です。", "人口はとても多い！", "行ったことがありますか？", "ﾃｽﾄです｡", "次の文です｡"]


def test_rules_hindi_and_other_scripts():
    hindi = "भारत एक बड़ा देश है। यहाँ बहुत लोग रहते हैं।दिल्ली राजधानी है॥ क्या आप आएँगे? हाँ।"
    assert split_sentences_rules(hindi, "hi") == [
        "भारत एक बड़ा देश है।", "यहाँ बहुत लोग रहते हैं।", "दिल्ली राजधानी है॥", "क्या आप आएँगे?", "हाँ।"]
    assert split_sentences_rules("هل أنت هنا؟ نعم أنا هنا.", "ar") == ["هل أنت هنا؟", "نعم أنا هنا."]
    assert split_sentences_rules("ይህ ነው። ያ ነው።", "am") == ["ይህ ነው።", "ያ ነው።"]
    assert split_sentences_rules("Սա է։Նա է։", "hy") == ["Սա է։", "Նա է։"]


def test_rules_empty_and_whitespace():
    assert split_sentences_rules("", "en") == []
    assert split_sentences_rules("\n  \n", "zh") == []
    assert split_sentences("  One two three.  ", "en", "rules") == ["One two three."]


# ------------------------------------------------------------------------------------ spaCy splitter

def _old_split_sentences(text: str) -> list[str]:
    """bertlook's splitter before issue 13, verbatim (data/segments.py split_sentences)."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.max_length = 10_000_000
    paragraphs = [p for p in text.split("\n") if p.strip()]
    sentences: list[str] = []
    for doc in nlp.pipe(paragraphs):
        for sent in doc.sents:
            s = " ".join(sent.text.split())
            if s:
                sentences.append(s)
    return sentences


def test_english_spacy_is_the_old_splitter(fixtures_dir):
    text = "\n".join(p for _, paragraphs in iter_dump_articles(fixtures_dir / "tiny_wiki.xml") for p in paragraphs)
    extra = "Mr. Smith went to Washington.  He  arrived at 3 p.m. \"Hello!\" he said.\nDr. No. Yes? No!"
    for t in (text, extra, text + "\n" + extra):
        old = _old_split_sentences(t)
        assert len(old) > 3
        assert split_sentences(t) == old
        assert split_sentences(t, "en", "spacy") == old
        assert split_sentences(t, "en", "auto") == old
        assert seg_module.split_sentences(t) == old  # the alias kept in data/segments.py


def test_spacy_error_names_language_and_suggests_rules():
    import importlib.util

    if importlib.util.find_spec("sudachipy") is None:  # spaCy's Japanese needs SudachiPy
        with pytest.raises(BertlookError, match=r"'ja'.*splitter: rules"):
            split_sentences("これはテストです。", "ja", "spacy")
    with pytest.raises(BertlookError, match=r"'qq'.*splitter: rules"):
        split_sentences("Test one. Test two.", "qq", "spacy")


@pytest.mark.integration  # builds a spaCy pipeline per language (20 s)
def test_spacy_languages_really_build_with_spacy_alone():
    """The hard-coded list: spacy.blank works for each code (and not for ja, ko, th, vi here)."""
    import spacy

    assert {"en", "de", "fr", "hi", "ar", "ru"} <= SPACY_LANGUAGES
    assert not SPACY_LANGUAGES & {"zh", "ja", "th", "ko", "vi", "xx"}
    assert {"zh", "ja", "th", "lo", "km", "my", "bo"} <= NO_SPACE_LANGUAGES
    for code in sorted(SPACY_LANGUAGES):
        nlp = spacy.blank(code)
        nlp.add_pipe("sentencizer")
        assert "".join(s.text_with_ws for s in nlp("Test one. Test two.").sents) == "Test one. Test two.", code


@pytest.mark.parametrize("language, splitter, expected", [
    ("en", "auto", "spacy"), ("de", "auto", "spacy"), ("hi", "auto", "spacy"), ("en-GB", "auto", "spacy"),
    ("zh", "auto", "rules"), ("zh-Hans", "auto", "rules"), ("ja", "auto", "rules"), ("th", "auto", "rules"),
    ("ko", "auto", "rules"), ("vi", "auto", "rules"), ("xx", "auto", "rules"),
    ("zh", "spacy", "spacy"), ("en", "rules", "rules"),
])
def test_resolve_splitter(language, splitter, expected):
    assert resolve_splitter(language, splitter) == expected


def test_resolve_splitter_rejects_unknown():
    with pytest.raises(BertlookError, match="unknown sentence splitter 'nltk'"):
        resolve_splitter("en", "nltk")


# ------------------------------------------------------------------------------------ usable sentences

def test_is_usable_sentence():
    assert is_usable_sentence("你好吗", "zh")            # 3 letters
    assert is_usable_sentence("我 爱 你。", "zh")
    assert not is_usable_sentence("你好。", "zh")        # 2 letters
    assert not is_usable_sentence("１２３４５。", "zh")   # digits are not letters
    assert is_usable_sentence("ですか", "ja")
    assert not is_usable_sentence("你好吗", "en")         # one "word" for a spaced language
    assert is_usable_sentence("The cat sat.")
    assert is_usable_sentence("Der Hund bellt.", "de")
    assert not is_usable_sentence("1 2 3 4 .", "de")
    assert not is_usable_sentence("Ja gut.", "de")


def test_make_document_counts_per_language():
    counts: dict[str, int] = {}
    paragraphs = plain_text_paragraphs("北京是首都。好。\n历史\n你好！北京很大。", counts, "zh")
    assert paragraphs == ["北京是首都。好。", "你好！北京很大。"]  # "历史" has no terminator
    assert counts["non_prose_lines_skipped"] == 1
    doc = make_document(0, "北京", paragraphs, counts, language="zh", splitter="rules")
    assert doc.sentences == ["北京是首都。", "北京很大。"]
    assert counts["short_sentences_skipped"] == 2 and counts["sentences_kept"] == 2
    # the same text read as English: the Chinese lines are not prose, nothing is usable
    en_counts: dict[str, int] = {}
    assert plain_text_paragraphs("北京是首都。好。\n你好！北京很大。", en_counts) == []
    assert en_counts["non_prose_lines_skipped"] == 2


# ------------------------------------------------------------------------------------ CLI

ZH_ARTICLES = [
    ("北京", "北京是中国的首都。北京有很多人。\n历史\n北京的历史很长。人们喜欢北京！"),
    ("上海", "上海是一个大城市。上海在河边。上海有很多书。"),
    ("短", "好。\n你好。"),
]


@pytest.fixture(scope="module")
def zh_bert_dir(tmp_path_factory) -> Path:
    from bertlook.testing.tiny_models import make_tiny_bert, tiny_vocab

    chars = sorted({c for _, text in ZH_ARTICLES for c in text if not c.isspace()})
    return make_tiny_bert(tmp_path_factory.mktemp("zh_bert"), vocab=tiny_vocab(chars), seed=0)


def _zh_parquet(path: Path) -> Path:
    pq.write_table(pa.table({"title": [t for t, _ in ZH_ARTICLES], "text": [x for _, x in ZH_ARTICLES]}), path)
    return path


def _segments(model: Path, out: Path, *extra: str, n_segments: str = "10") -> int:
    return main(["segments", "--model", str(model), "--out", str(out / "segments.jsonl"),
                 "--summary", str(out / "summary.json"), "--n-segments", n_segments, "--max-seq-len", "64",
                 *extra])


def test_cli_segments_chinese_rules(fake_modeling, zh_bert_dir, tmp_path, capsys):
    spec = json.dumps({"path": "parquet", "data_files": str(_zh_parquet(tmp_path / "zh.parquet"))})
    assert _segments(zh_bert_dir, tmp_path / "rules", "--hf-dataset", spec, "--language", "zh",
                     "--splitter", "rules") == 0
    segments = [json.loads(line) for line in (tmp_path / "rules" / "segments.jsonl").read_text().splitlines()]
    by_doc = {s["doc"]: s for s in segments}
    assert sorted(by_doc) == ["上海", "北京"]
    # each document fits one chunk (<= 61 wordpieces): one segment whose wordpieces are its characters
    for title, text in (("北京", "北京是中国的首都。北京有很多人。北京的历史很长。人们喜欢北京！"),
                        ("上海", "上海是一个大城市。上海在河边。上海有很多书。")):
        tokens = by_doc[title]["tokens"]
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
        assert [t for t in tokens if t not in ("[CLS]", "[SEP]")] == list(text)
        assert "[UNK]" not in tokens
    summary = json.loads((tmp_path / "rules" / "summary.json").read_text())
    assert summary["language"] == "zh" and summary["splitter"] == "rules"
    assert summary["segments_produced"] == 2
    assert summary["documents_kept"] == 2 and summary["documents_without_sentences"] == 1
    assert summary["short_sentences_skipped"] == 2  # "好。", "你好。"
    assert summary["sentences_kept"] == 7 and summary["non_prose_lines_skipped"] == 1  # "历史"

    # auto resolves to rules for zh: the same bytes, and the resolved splitter in the summary
    assert _segments(zh_bert_dir, tmp_path / "auto", "--hf-dataset", spec, "--language", "zh") == 0
    assert ((tmp_path / "auto" / "segments.jsonl").read_bytes()
            == (tmp_path / "rules" / "segments.jsonl").read_bytes())
    assert json.loads((tmp_path / "auto" / "summary.json").read_text())["splitter"] == "rules"

    # read as English (the default), no Chinese line is prose: an error, exit 2
    capsys.readouterr()
    assert _segments(zh_bert_dir, tmp_path / "en", "--hf-dataset", spec) == 2
    assert "no usable document" in capsys.readouterr().err


def test_cli_segments_bad_language_and_splitter(fake_modeling, zh_bert_dir, tmp_path, capsys):
    spec = json.dumps({"path": "parquet", "data_files": str(_zh_parquet(tmp_path / "zh.parquet"))})
    assert _segments(zh_bert_dir, tmp_path / "x", "--hf-dataset", spec, "--language", "Chinese") == 2
    assert "bad language code 'Chinese'" in capsys.readouterr().err
    assert _segments(zh_bert_dir, tmp_path / "x", "--hf-dataset", spec, "--language", "qq",
                     "--splitter", "spacy") == 2
    assert "splitter: rules" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _segments(zh_bert_dir, tmp_path / "x", "--hf-dataset", spec, "--splitter", "nltk")


def test_cli_english_auto_is_byte_identical_to_spacy(fake_modeling, tiny_bert_dir, fixtures_dir, tmp_path):
    """Today's English path both ways: default flags (auto) and --splitter spacy give the same bytes."""
    dump = tmp_path / "tinywiki.xml.bz2"
    dump.write_bytes(bz2.compress((fixtures_dir / "tiny_wiki.xml").read_bytes()))
    assert _segments(tiny_bert_dir, tmp_path / "auto", "--dump", str(dump)) == 0
    assert _segments(tiny_bert_dir, tmp_path / "spacy", "--dump", str(dump), "--language", "en",
                     "--splitter", "spacy") == 0
    assert ((tmp_path / "auto" / "segments.jsonl").read_bytes()
            == (tmp_path / "spacy" / "segments.jsonl").read_bytes())
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert summary["language"] == "en" and summary["splitter"] == "spacy"
    # the hand-written counts of tests/test_segments.py (EXPECTED_COUNTS), unchanged
    assert (summary["documents_kept"], summary["sentences_kept"], summary["short_sentences_skipped"]) == (2, 13, 1)
    for doc in iter_documents(dump):  # every document's sentences: the old splitter's, >= 3 words
        old = _old_split_sentences("\n".join(p for title, ps in iter_dump_articles(dump) if title == doc.title
                                             for p in ps))
        assert doc.sentences == [s for s in old if len(s.split()) >= 3]


def test_silver_treebank_uses_the_segments_language(fake_modeling, zh_bert_dir, tmp_path):
    from bertlook.data.silver_treebank import prepare_silver

    spec = {"path": "parquet", "data_files": str(_zh_parquet(tmp_path / "zh.parquet"))}
    assert _segments(zh_bert_dir, tmp_path / "seg", "--hf-dataset", json.dumps(spec), "--language", "zh",
                     n_segments="1") == 0
    used = {json.loads(line)["doc_index"] for line in (tmp_path / "seg" / "segments.jsonl").read_text().splitlines()}
    assert len(used) == 1
    result = prepare_silver(None, tmp_path / "seg" / "segments.jsonl", tmp_path / "train.conllu",
                            tmp_path / "dev.conllu", train_sentences=0, dev_sentences=1, hf_dataset=spec,
                            language="zh", splitter="rules")
    assert result["language"] == "zh" and result["splitter"] == "rules"
    assert result["documents_in_dump"] == 2 and result["documents_used_by_segments"] == 1
    assert result["documents_available"] == 1
    assert result["dump_counts"]["documents_kept"] == 2


def test_treebank_cli_has_language_flags():
    import argparse

    from bertlook.cli import treebank as treebank_cli

    parser = argparse.ArgumentParser()
    treebank_cli.register_cli(parser.add_subparsers())
    args = parser.parse_args(["treebank", "--source", "silver", "--out-train", "a", "--out-dev", "b",
                              "--summary", "c", "--language", "zh", "--splitter", "rules"])
    assert (args.language, args.splitter) == ("zh", "rules")
    args = parser.parse_args(["treebank", "--source", "silver", "--out-train", "a", "--out-dev", "b",
                              "--summary", "c"])
    assert (args.language, args.splitter) == ("en", "auto")


# ------------------------------------------------------------------------------------ config

def _paper() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_config_defaults():
    config = validate_config(_paper())
    assert config["segments"]["language"] == "en" and config["segments"]["splitter"] == "auto"


@pytest.mark.parametrize("value", ["en", "de", "zh", "grc", "zh-Hans", "en-GB", "sr-Latn"])
def test_config_accepts_language(value):
    config = _paper()
    config["segments"]["language"] = value
    assert validate_config(config)["segments"]["language"] == value


@pytest.mark.parametrize("value", ["EN", "english", "e", "en\n", "en_US", "zh-", "zh-Hans-CN", "en GB", "", 5])
def test_config_rejects_language(value):
    config = _paper()
    config["segments"]["language"] = value
    with pytest.raises(BertlookError, match=r"segments\.language"):
        validate_config(config)


def test_config_splitter_enum():
    for value in ("auto", "spacy", "rules"):
        config = _paper()
        config["segments"]["splitter"] = value
        assert validate_config(config)["segments"]["splitter"] == value
    config = _paper()
    config["segments"]["splitter"] = "nltk"
    with pytest.raises(BertlookError, match=r"segments\.splitter"):
        validate_config(copy.deepcopy(config))


def test_both_schema_copies_identical():
    a = (ROOT / "src" / "bertlook" / "pipeline" / "config.schema.yaml").read_text()
    b = (ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text()
    assert a == b and "splitter:" in a
