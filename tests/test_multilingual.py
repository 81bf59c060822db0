"""Word alignment across tokenizers and scripts (issue 13): WordPiece (mBERT), SentencePiece (XLM-R ``▁``)
and byte-level BPE (RoBERTa ``Ġ``) on German, Chinese and Japanese, in both text modes (``--text spaces``:
words joined by spaces; ``--text original``: the text rebuilt from ``SpaceAfter=No``); tiny models whose
tokenizers are trained on the fly (:func:`bertlook.testing.tiny_models.make_tiny_multilingual`); the
hand-written UD fixtures; UD v1 -> v2 relation names.

Expected tokens and ``word_of_token`` of the hand-built tokenizers below are worked out by hand from
their vocabularies (WordPiece: greedy longest match; Unigram: best total score; BPE: merges in order).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertlook.attention.alignment import ALIGNMENT_ERROR_REASONS, AlignmentError, align_words
from bertlook.attention.extract_words import prepare_word_examples
from bertlook.attention.store import AttentionStore
from bertlook.cli import main
from bertlook.data.treebank import Sentence, normalise_ud_relation, read_conllu, write_conllu

FIXTURES = Path(__file__).parent / "fixtures" / "ud"
SPECIALS_BERT = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIALS_XLMR = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]

# "„Hallo“, sagte das Mädchen." and "Das Fußballspiel beginnt pünktlich." (de-train-10, de-train-6)
DE_QUOTE = (["„", "Hallo", "“", ",", "sagte", "das", "Mädchen", "."],
            [False, False, False, True, True, True, False, True])
DE_COMPOUND = (["Das", "Fußballspiel", "beginnt", "pünktlich", "."], [True, True, True, False, True])
DE_MUSIK = (["Er", "hört", "gern", "Musik", ",", "sagt", "sie", "."], [True, True, True, False, True, True, False, True])
ZH = (["我", "喜欢", "学习", "中文", "。"], [False] * 5)
JA = (["猫", "が", "魚", "を", "食べ", "た", "。"], [False] * 7)


# ------------------------------------------------------------------------------ hand-built tokenizers

def _wordpiece(extra=()):
    from transformers import BertTokenizer

    pieces = ["„", "Hallo", "“", ",", "sagte", "das", "Mäd", "##chen", ".", "Das", "Fuß", "##ball", "##spiel",
              "beginnt", "pünkt", "##lich", "我", "喜", "欢", "学", "习", "中", "文", "。",
              "猫", "が", "魚", "を", "食", "べ", "##た", "た", *extra]
    vocab = {t: i for i, t in enumerate(SPECIALS_BERT + pieces)}
    return BertTokenizer(vocab=vocab, do_lower_case=False, strip_accents=False, tokenize_chinese_chars=True)


def _sentencepiece(pieces: dict[str, float]):
    """XLM-R tokenizer (WhitespaceSplit + Metaspace ``▁`` + Unigram) over ``pieces`` plus every character (-10)."""
    from transformers import XLMRobertaTokenizer

    chars = sorted({c for p in pieces for c in p.replace("\u2581", "")} - set(pieces))
    vocab = [(t, 0.0) for t in SPECIALS_XLMR] + list(pieces.items()) + [(c, -10.0) for c in chars]
    return XLMRobertaTokenizer(vocab=vocab)


XLMR_DE = {"\u2581Er": -2.0, "\u2581hört": -2.0, "\u2581gern": -2.0, "\u2581Musik": -2.0, ",": -2.0,
           "\u2581sagt": -2.0, "\u2581sie": -2.0, ".": -2.0, "\u2581": -3.0}
XLMR_ZH = {"\u2581我": -2.0, "喜欢": -2.0, "学习": -2.0, "中文": -2.0, "。": -2.0, "\u2581": -3.0}


def _bytebpe(trim_offsets: bool, merges: list[tuple[str, str]]):
    from tokenizers import pre_tokenizers
    from transformers import RobertaTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = SPECIALS_XLMR + alphabet + ["".join(m) for m in merges]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    return RobertaTokenizer(vocab=vocab, merges=merges, add_prefix_space=False, trim_offsets=trim_offsets)


def _byte_symbols(text: str) -> list[str]:
    """The byte-level BPE symbols (GPT-2 byte -> unicode map) of ``text``'s UTF-8 bytes."""
    from tokenizers import pre_tokenizers

    return [s for s, _ in pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)][0]


# ------------------------------------------------------------------------------ alignment, by hand

@pytest.mark.parametrize("mode", ["spaces", "original"])
def test_wordpiece_german_chinese_japanese(mode):
    tok = _wordpiece()
    flags = (lambda f: f) if mode == "original" else (lambda f: None)
    # punctuation glued by SpaceAfter=No: BERT's pre-tokenizer splits it off, so both modes agree
    al = align_words(DE_QUOTE[0], tok, space_after=flags(DE_QUOTE[1]))
    assert al.tokens == ["[CLS]", "„", "Hallo", "“", ",", "sagte", "das", "Mäd", "##chen", ".", "[SEP]"]
    assert al.word_of_token == [-1, 0, 1, 2, 3, 4, 5, 6, 6, 7, -1]
    # compound, umlaut and ß kept (strip_accents=False, cased)
    al = align_words(DE_COMPOUND[0], tok, space_after=flags(DE_COMPOUND[1]))
    assert al.tokens == ["[CLS]", "Das", "Fuß", "##ball", "##spiel", "beginnt", "pünkt", "##lich", ".", "[SEP]"]
    assert al.word_of_token == [-1, 0, 1, 1, 1, 2, 3, 3, 4, -1]
    assert al.token_spans == [(1, 2), (2, 5), (5, 6), (6, 8), (8, 9)] and al.split_words == 2
    # Chinese: every ideograph is its own pre-token (handle_chinese_chars), with or without spaces
    al = align_words(ZH[0], tok, space_after=flags(ZH[1]))
    assert al.tokens[1:-1] == ["我", "喜", "欢", "学", "习", "中", "文", "。"]
    assert al.word_of_token == [-1, 0, 1, 1, 2, 2, 3, 3, 4, -1]


def test_wordpiece_japanese_kana_run():
    tok = _wordpiece()
    # spaces: "食べ た" -> 食 | べ | た ; original "猫が魚を食べた。": kana are not split off, so "べた" is one
    # pre-token: WordPiece gives べ ##た, and ##た lies in the word た
    al = align_words(JA[0], tok)
    assert al.tokens[1:-1] == ["猫", "が", "魚", "を", "食", "べ", "た", "。"]
    assert al.word_of_token == [-1, 0, 1, 2, 3, 4, 4, 5, 6, -1]
    al = align_words(JA[0], tok, space_after=JA[1])
    assert al.tokens[1:-1] == ["猫", "が", "魚", "を", "食", "べ", "##た", "。"]
    assert al.word_of_token == [-1, 0, 1, 2, 3, 4, 4, 5, 6, -1]
    # with the whole piece "べた" in the vocabulary the token straddles 食べ|た: the sentence is unalignable
    tok = _wordpiece(extra=["べた"])
    with pytest.raises(AlignmentError, match=r"'べた' \(characters 5-7 of '猫が魚を食べた。'\) does not lie within one word") as err:
        align_words(JA[0], tok, sent_id="ja-1", space_after=JA[1])
    assert err.value.reason == "straddling_token"
    assert align_words(JA[0], tok).word_of_token == [-1, 0, 1, 2, 3, 4, 4, 5, 6, -1]  # spaces: fine


def test_sentencepiece_german_lone_metaspace():
    tok = _sentencepiece(XLMR_DE)
    words, flags = DE_MUSIK
    # original "Er hört gern Musik, sagt sie.": "▁Musik," -> ▁Musik + "," ; "▁sie." -> ▁sie + "."
    al = align_words(words, tok, space_after=flags)
    assert al.tokens == ["<s>", "▁Er", "▁hört", "▁gern", "▁Musik", ",", "▁sagt", "▁sie", ".", "</s>"]
    assert al.word_of_token == [-1, 0, 1, 2, 3, 4, 5, 6, 7, -1]
    # spaces "... Musik , sagt sie .": "▁," is no piece -> a lone "▁" (its offsets: the comma) + ","
    al = align_words(words, tok)
    assert al.tokens == ["<s>", "▁Er", "▁hört", "▁gern", "▁Musik", "▁", ",", "▁sagt", "▁sie", "▁", ".", "</s>"]
    assert al.word_of_token == [-1, 0, 1, 2, 3, 4, 4, 5, 6, 7, 7, -1]
    assert al.split_words == 2


def test_sentencepiece_chinese_both_modes_and_straddle():
    tok = _sentencepiece(XLMR_ZH)
    al = align_words(ZH[0], tok, space_after=ZH[1])  # "▁我喜欢学习中文。" as one whitespace piece
    assert al.tokens[1:-1] == ["▁我", "喜欢", "学习", "中文", "。"]
    assert al.word_of_token == [-1, 0, 1, 2, 3, 4, -1]
    al = align_words(ZH[0], tok)  # "我 喜欢 学习 中文 。": ▁ before each word, a lone ▁ where "▁喜欢" is no piece
    assert al.tokens[1:-1] == ["▁我", "▁", "喜欢", "▁", "学习", "▁", "中文", "▁", "。"]
    assert al.word_of_token == [-1, 0, 1, 1, 2, 2, 3, 3, 4, 4, -1]
    # a piece over two words ("喜欢学习" scores -1 > -2 + -2): unalignable as written, fine with spaces
    tok = _sentencepiece({**XLMR_ZH, "喜欢学习": -1.0})
    with pytest.raises(AlignmentError, match="does not lie within one word") as err:
        align_words(ZH[0], tok, space_after=ZH[1])
    assert err.value.reason == "straddling_token"
    assert align_words(ZH[0], tok).word_of_token == [-1, 0, 1, 1, 2, 2, 3, 3, 4, 4, -1]


def test_sentencepiece_metaspace_only_space_span():
    """XLM-R's original tokenizer.json: Metaspace alone (no WhitespaceSplit): "▁" stands for the space itself."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    pieces = [(t, 0.0) for t in SPECIALS_XLMR] + [(p, s) for p, s in XLMR_DE.items()] + [
        (c, -10.0) for c in sorted(set("Erhögnmusiktsa") - set(XLMR_DE))]
    backend = Tokenizer(models.Unigram(pieces, unk_id=3, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    backend.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", cls_token="<s>", sep_token="</s>")
    words, flags = DE_MUSIK
    enc = tok(" ".join(words), return_offsets_mapping=True)
    lone = [i for i, t in enumerate(tok.convert_ids_to_tokens(enc["input_ids"])) if t == "\u2581"]
    assert lone and all(" ".join(words)[slice(*enc["offset_mapping"][i])].strip() == "" for i in lone)
    al = align_words(words, tok)  # the lone ▁ (span: the space before ",") goes to the word after it
    assert al.tokens == ["<s>", "▁Er", "▁hört", "▁gern", "▁Musik", "▁", ",", "▁sagt", "▁sie", "▁", ".", "</s>"]
    assert al.word_of_token == [-1, 0, 1, 2, 3, 4, 4, 5, 6, 7, 7, -1]


@pytest.mark.parametrize("trim_offsets", [True, False])
def test_bytebpe_german_offsets(trim_offsets):
    merges = [("Ġ", "h"), ("Ã", "¶"), ("Ġh", "Ã¶"), ("ĠhÃ¶", "r"), ("ĠhÃ¶r", "t")]  # " hört" -> one token
    tok = _bytebpe(trim_offsets, merges)
    words = ["Er", "hört", "."]
    al = align_words(words, tok)  # "Er hört .": E r | ĠhÃ¶rt | Ġ . (a lone Ġ: empty span or the space)
    assert al.tokens == ["<s>", "E", "r", "ĠhÃ¶rt", "Ġ", ".", "</s>"]
    assert al.word_of_token == [-1, 0, 0, 1, 2, 2, -1]
    al = align_words(words, tok, space_after=[True, False, True])  # "Er hört."
    assert al.tokens == ["<s>", "E", "r", "ĠhÃ¶rt", ".", "</s>"]
    assert al.word_of_token == [-1, 0, 0, 1, 2, -1]


@pytest.mark.parametrize("trim_offsets", [True, False])
def test_bytebpe_chinese_bytes_and_straddle(trim_offsets):
    words, flags = ["我", "喜欢"], [False, False]
    tok = _bytebpe(trim_offsets, [])
    al = align_words(words, tok, space_after=flags)  # 3 UTF-8 bytes per ideograph, one token each
    assert al.word_of_token == [-1, 0, 0, 0, 1, 1, 1, 1, 1, 1, -1]
    # a merge of 我's last byte with 喜's first byte: that token straddles the two words
    wo, xi = _byte_symbols("我"), _byte_symbols("喜")
    tok = _bytebpe(trim_offsets, [(wo[2], xi[0])])
    with pytest.raises(AlignmentError) as err:
        align_words(words, tok, space_after=flags)
    assert err.value.reason == "straddling_token"
    al = align_words(words, tok)  # "我 喜欢": the space keeps the bytes apart
    assert al.word_of_token == [-1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, -1]  # + the Ġ of " 喜欢"


def test_space_after_validation_and_reasons():
    tok = _wordpiece(extra=["べた"])
    with pytest.raises(AlignmentError, match="one boolean per word") as err:
        align_words(["猫", "が"], tok, space_after=[True])
    assert err.value.reason == "bad_space_after"
    sents = [Sentence("ja-1", list(JA[0]), [5, 1, 5, 3, 0, 5, 5], ["nsubj", "case", "obj", "case", "root", "aux", "punct"],
                      ["_"] * 7, ["_"] * 7, space_after=list(JA[1])),
             Sentence("zh-1", list(ZH[0]), [2, 0, 2, 3, 2], ["nsubj", "root", "xcomp", "obj", "punct"], ["_"] * 5,
                      ["_"] * 5, space_after=list(ZH[1]))]
    for text, excluded in (("spaces", []), ("original", ["ja-1"])):
        reasons: dict[str, int] = {}
        examples, alignments, bad, errors = prepare_word_examples(sents, tok, text=text, reasons=reasons)
        assert bad == excluded and set(reasons) == set(ALIGNMENT_ERROR_REASONS)
        assert reasons["straddling_token"] == len(excluded) and sum(reasons.values()) == len(excluded)
        assert [ex[0]["id"] for ex in examples] == [s.sent_id for s in sents if s.sent_id not in excluded]


# ------------------------------------------------------------------------------ fixtures and treebank I/O

FIXTURE_FILES = ["de_tiny-ud-train.conllu", "de_tiny-ud-dev.conllu", "zh_tiny-ud-train.conllu",
                 "zh_tiny-ud-dev.conllu", "ja_tiny-ud-dev.conllu", "en_v1_tiny.conllu"]


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_fixtures_parse_and_keep_space_after(name, tmp_path):
    counts: dict[str, int] = {}
    sents = read_conllu(FIXTURES / name, counts=counts)
    n = {"de_tiny-ud-train.conllu": 12, "de_tiny-ud-dev.conllu": 8, "zh_tiny-ud-train.conllu": 13,
         "zh_tiny-ud-dev.conllu": 8, "ja_tiny-ud-dev.conllu": 6, "en_v1_tiny.conllu": 4}[name]
    assert counts["sentences"] == n and counts["multi_root_sentences"] == 0
    if name.startswith(("zh", "ja")):
        assert all(not any(s.space_after) for s in sents)  # no spaces at all
    # the "# text" comment of the fixture is the text rebuilt from SpaceAfter=No (no multi-word tokens)
    texts = [line[len("# text = "):] for line in (FIXTURES / name).read_text("utf-8").splitlines()
             if line.startswith("# text = ")]
    for s, text in zip(sents, texts):
        if s.sent_id in ("de-train-11", "de-dev-8"):  # "im" = in dem, "zum" = zu dem: syntactic words
            continue
        assert "".join(w + (" " if f else "") for w, f in zip(s.words, s.space_after)).rstrip() == text
    write_conllu(tmp_path / "x.conllu", sents)  # MISC SpaceAfter=No written back
    assert read_conllu(tmp_path / "x.conllu") == sents


def test_german_fixture_flags_by_hand():
    sents = {s.sent_id: s for s in read_conllu(FIXTURES / "de_tiny-ud-train.conllu")}
    assert sents["de-train-10"].space_after == [False, False, False, True, True, True, False, True]
    # "im" (4-5) is written "im Garten": the range line has no SpaceAfter=No, so after "dem" a space
    assert sents["de-train-11"].words == ["Die", "Kinder", "spielen", "in", "dem", "Garten", "."]
    assert sents["de-train-11"].space_after == [True, True, True, True, True, False, True]
    rels = {r for s in sents.values() for r in s.rels}
    assert {"obj", "det", "case", "nsubj", "amod", "punct", "compound:prt"} <= rels


def test_range_line_space_after(tmp_path):
    p = tmp_path / "mwt.conllu"
    p.write_text("# sent_id = m1\n1-2\tzum\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n1\tzu\t_\tADP\t_\t_\t3\tcase\t_\t_\n"
                 "2\tdem\t_\tDET\t_\t_\t3\tdet\t_\t_\n3\tEssen\t_\tNOUN\t_\t_\t0\troot\t_\tFoo=1|SpaceAfter=No\n"
                 "4\t.\t_\tPUNCT\t_\t_\t3\tpunct\t_\t_\n\n", encoding="utf-8")
    (s,) = read_conllu(p)
    assert s.space_after == [True, False, False, True]
    from bertlook.data.treebank import read_conllx

    assert all(all(x.space_after) for x in read_conllx(FIXTURES.parent / "tiny_sd.conllx"))  # CoNLL-X: no MISC


def test_normalise_ud_relation_labels():
    assert normalise_ud_relation("dobj") == "obj"
    assert normalise_ud_relation("nsubjpass") == "nsubj:pass"
    assert normalise_ud_relation("csubjpass") == "csubj:pass"
    assert normalise_ud_relation("auxpass") == "aux:pass"
    assert normalise_ud_relation("mwe") == "fixed"
    assert normalise_ud_relation("name") == "flat"
    assert normalise_ud_relation("foreign") == "flat:foreign"
    assert normalise_ud_relation("remnant") == "orphan"
    assert normalise_ud_relation("neg", "PART") == "advmod"
    assert normalise_ud_relation("neg", "ADV") == "advmod"
    assert normalise_ud_relation("neg") == "advmod"
    assert normalise_ud_relation("neg", "DET") == "det"
    assert normalise_ud_relation("nmod", head_upos="VERB") == "obl"
    assert normalise_ud_relation("nmod:tmod", head_upos="ADJ") == "obl:tmod"
    assert normalise_ud_relation("nmod", head_upos="NOUN") == "nmod"
    assert normalise_ud_relation("nmod") == "nmod"
    for v2 in ("obj", "nsubj:pass", "nmod:poss", "compound:prt", "flat", "fixed", "root", "punct"):
        assert normalise_ud_relation(v2) == v2


def test_treebank_cli_ud_v2_relations(tmp_path, capsys):
    out = tmp_path / "tb"
    args = ["treebank", "--source", "local", "--dev", str(FIXTURES / "en_v1_tiny.conllu"), "--out-train",
            str(out / "train.conllu"), "--out-dev", str(out / "dev.conllu"), "--summary", str(out / "s.json")]
    assert main(args + ["--ud-v2-relations"]) == 0
    summary = json.loads((out / "s.json").read_text())
    assert summary["ud_v2_relations"] is True
    # by hand: en-v1-1 nsubjpass, auxpass, nmod (John <- written: VERB), name; en-v1-2 neg (PART), dobj;
    # en-v1-3 neg (DET), mwe, nmod (rain <- came: VERB); en-v1-4 nmod (Paris <- city: NOUN) stays
    assert summary["dev"]["relations_renamed"] == {
        "auxpass->aux:pass": 1, "dobj->obj": 1, "mwe->fixed": 1, "name->flat": 1, "neg->advmod": 1,
        "neg->det": 1, "nmod->obl": 2, "nsubjpass->nsubj:pass": 1}
    dev = {s.sent_id: s for s in read_conllu(out / "dev.conllu")}
    assert dev["en-v1-1"].rels == ["det", "nsubj:pass", "aux:pass", "root", "case", "obl", "flat", "punct"]
    assert dev["en-v1-2"].rels == ["nsubj", "aux", "advmod", "root", "det", "obj", "punct"]
    assert dev["en-v1-3"].rels == ["det", "nsubj", "root", "case", "fixed", "det", "obl", "punct"]
    assert dev["en-v1-4"].rels == ["det", "nsubj", "case", "nmod", "cop", "root", "punct"]
    assert dev["en-v1-1"].space_after == [True] * 6 + [False, True]  # MISC kept through `bertlook treebank`
    # without the flag nothing is renamed; --strip-subtypes cuts the new subtypes
    assert main(args) == 0
    summary = json.loads((out / "s.json").read_text())
    assert summary["ud_v2_relations"] is False and summary["dev"]["relations_renamed"] == {}
    assert [s.rels[1] for s in read_conllu(out / "dev.conllu")][:1] == ["nsubjpass"]
    assert main(args + ["--ud-v2-relations", "--strip-subtypes"]) == 0
    summary = json.loads((out / "s.json").read_text())
    assert summary["dev"]["relations_renamed"]["nsubjpass->nsubj"] == 1
    assert read_conllu(out / "dev.conllu")[0].rels[1:3] == ["nsubj", "aux"]


def test_treebank_cli_keeps_space_after(tmp_path):
    out = tmp_path / "tb"
    assert main(["treebank", "--source", "local", "--dev", str(FIXTURES / "zh_tiny-ud-dev.conllu"), "--train",
                 str(FIXTURES / "zh_tiny-ud-train.conllu"), "--out-train", str(out / "train.conllu"),
                 "--out-dev", str(out / "dev.conllu"), "--summary", str(out / "s.json")]) == 0
    assert read_conllu(out / "dev.conllu") == read_conllu(FIXTURES / "zh_tiny-ud-dev.conllu")
    assert all(not any(s.space_after) for s in read_conllu(out / "train.conllu"))


# ------------------------------------------------------------------------------ trained tiny models

def _fixture_texts() -> list[str]:
    texts = []
    for name in FIXTURE_FILES[:5]:
        for s in read_conllu(FIXTURES / name):
            texts.append(" ".join(s.words))
            texts.append("".join(w + (" " if f else "") for w, f in zip(s.words, s.space_after)).strip())
    return texts


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from bertlook.testing.tiny_models import make_tiny_multilingual

    root = tmp_path_factory.mktemp("multilingual")
    texts = _fixture_texts()
    return {kind: make_tiny_multilingual(root / kind, kind, texts, vocab_size=400, seed=0)
            for kind in ("wordpiece", "sentencepiece", "bytebpe")}


def test_make_tiny_multilingual_loads_and_is_deterministic(tiny_models, tmp_path):
    from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model
    from bertlook.testing.tiny_models import make_tiny_multilingual

    want = {"wordpiece": ("BertTokenizer", "BertModel", "[CLS]", "[SEP]"),
            "sentencepiece": ("XLMRobertaTokenizer", "XLMRobertaModel", "<s>", "</s>"),
            "bytebpe": ("RobertaTokenizer", "RobertaModel", "<s>", "</s>")}
    for kind, path in tiny_models.items():
        resolved = resolve_model(str(path))
        tok, model = load_tokenizer(resolved), load_model(resolved)
        assert (type(tok).__name__, type(model).__name__, tok.cls_token, tok.sep_token) == want[kind]
        assert model.config.num_hidden_layers == 2 and model.config.num_attention_heads == 2
        assert (path / "model.safetensors").is_file()
        again = make_tiny_multilingual(tmp_path / kind, kind, _fixture_texts(), vocab_size=400, seed=0)
        for name in ("tokenizer.json", "model.safetensors", "config.json"):
            assert (again / name).read_bytes() == (path / name).read_bytes(), (kind, name)
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        make_tiny_multilingual(tmp_path / "x", "bpe", ["a"])


def _pieces_text(kind: str, tokens: list[str]) -> str:
    """The text a word's tokens spell (independent of offsets): ## / ▁ / byte-level symbols undone."""
    if kind == "wordpiece":
        return "".join(t[2:] if t.startswith("##") else t for t in tokens)
    if kind == "sentencepiece":
        return "".join(tokens).replace("\u2581", "")
    from tokenizers import decoders

    return decoders.ByteLevel().decode(tokens).strip()


@pytest.mark.parametrize("mode", ["spaces", "original"])
def test_trained_tokenizers_align_fixture_words(tiny_models, mode):
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    straddles = {}
    for kind, path in tiny_models.items():
        tok = load_tokenizer(resolve_model(str(path)))
        n_bad = 0
        for name in FIXTURE_FILES[:5]:
            for s in read_conllu(FIXTURES / name):
                try:
                    al = align_words(s.words, tok, sent_id=s.sent_id,
                                     space_after=s.space_after if mode == "original" else None)
                except AlignmentError as err:
                    assert mode == "original" and err.reason == "straddling_token", str(err)
                    n_bad += 1
                    continue
                assert al.n_words == len(s.words) and tok.unk_token not in al.tokens
                for w, (a, b) in zip(s.words, al.token_spans):
                    assert _pieces_text(kind, al.tokens[a:b]) == w, (kind, s.sent_id, w, al.tokens[a:b])
        straddles[kind] = n_bad
    if mode == "spaces":
        assert straddles == {"wordpiece": 0, "sentencepiece": 0, "bytebpe": 0}
    else:
        assert straddles["wordpiece"] == 0  # BERT splits every ideograph and punctuation mark off


# ------------------------------------------------------------------------------ extract-words end to end

@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
@pytest.mark.parametrize("lang", ["de", "zh"])
@pytest.mark.parametrize("mode", ["spaces", "original"])
def test_extract_words_cli(tiny_models, tmp_path, capsys, kind, lang, mode):
    treebank = FIXTURES / f"{lang}_tiny-ud-dev.conllu"
    gold = {s.sent_id: s for s in read_conllu(treebank)}
    out, summary_path = tmp_path / "store", tmp_path / "summary.json"
    assert main(["extract-words", "--treebank", str(treebank), "--model", str(tiny_models[kind]), "--out", str(out),
                 "--device", "cpu", "--batch-size", "3", "--text", mode, "--summary", str(summary_path)]) == 0
    assert f"text {mode}" in capsys.readouterr().out
    summary = json.loads(summary_path.read_text())
    assert summary["text"] == mode and summary["n_sentences"] == 8
    reasons = summary["excluded_alignment_reasons"]
    assert set(reasons) == set(ALIGNMENT_ERROR_REASONS)
    assert summary["n_extracted"] + summary["excluded_alignment"] == 8 == summary["n_extracted"] + sum(reasons.values())
    assert summary["excluded_straddling_token"] == reasons["straddling_token"] == summary["excluded_alignment"]
    if mode == "spaces" or kind == "wordpiece":
        assert summary["excluded_alignment"] == 0
    store = AttentionStore(out)
    assert store.meta["text"] == mode and store.meta["level"] == "word"
    assert store.meta["excluded_alignment_reasons"] == reasons
    specials = ("[CLS]", "[SEP]") if kind == "wordpiece" else ("<s>", "</s>")
    seen = 0
    for rec, attn in store:
        words = gold[rec["id"]].words
        assert rec["tokens"] == [specials[0], *words, specials[1]]  # the treebank's words, one row each
        assert attn.shape == (2, 2, len(words) + 2, len(words) + 2)
        np.testing.assert_allclose(np.asarray(attn, np.float32).sum(-1), 1.0, atol=5e-3)
        seen += 1
    assert seen == summary["n_extracted"] and summary["n_words"] == sum(
        len(gold[r["id"]].words) for r in store.records)


def test_extract_segments_with_tiny_xlmr(tiny_models, tmp_path):
    from bertlook.attention.modeling import load_tokenizer, resolve_model
    from bertlook.data.segments import write_segments
    from bertlook.testing.tiny_models import make_segment

    tok = load_tokenizer(resolve_model(str(tiny_models["sentencepiece"])))
    pairs = [("Der Hund frisst den Knochen.", "Die Straße führt über den Fluss."),
             ("我喜欢学习中文。", "天气很好。"), ("猫が魚を食べた。", "東京に行きます。")]
    segs = [make_segment(tok, i, a, b) for i, (a, b) in enumerate(pairs)]
    write_segments(tmp_path / "segments.jsonl", segs)
    out = tmp_path / "seg_store"
    assert main(["extract-segments", "--segments", str(tmp_path / "segments.jsonl"), "--model",
                 str(tiny_models["sentencepiece"]), "--out", str(out), "--device", "cpu",
                 "--summary", str(tmp_path / "s.json"), "--norms-out", str(tmp_path / "norms")]) == 0
    store = AttentionStore(out)
    assert len(store) == 3
    for rec, attn in store:
        assert rec["tokens"][0] == "<s>" and rec["tokens"][-1] == "</s>"
        np.testing.assert_allclose(np.asarray(attn, np.float32).sum(-1), 1.0, atol=5e-3)
    assert main(["surface-stats", "--attention", str(out), "--out", str(tmp_path / "stats.csv"),
                 "--summary", str(tmp_path / "stats.json")]) == 0


def test_a_ud_v2_file_with_nmod_under_a_verb_is_left_unchanged():
    """nmod -> obl is a v1 -> v2 rename only: a file with no v1-only label keeps its nmod (counted: 0)."""
    from bertlook.data.treebank import normalise_ud_relations

    def sent(rels):
        return Sentence(sent_id="s", words=["ran", "of", "it"], heads=[0, 3, 1], rels=rels,
                        upos=["VERB", "ADP", "PRON"], xpos=["_"] * 3)

    v2 = [sent(["root", "case", "nmod"])]
    assert normalise_ud_relations(v2) == {} and v2[0].rels == ["root", "case", "nmod"]
    v1 = [sent(["root", "case", "nmod"]), sent(["root", "case", "dobj"])]
    assert dict(normalise_ud_relations(v1)) == {"nmod->obl": 1, "dobj->obj": 1}
    assert v1[0].rels == ["root", "case", "obl"]
