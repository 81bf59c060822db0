"""Long contexts as a configuration (issue 42, item 4): window segments (``segments.layout: window``, ``bertlook
segments --layout window``), their validation, their extraction by a decoder and an encoder, the refusal of a
``max_seq_len`` beyond the model's positions at long lengths, and ``config/long-context.yaml``."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import pytest
import yaml

from bertlook.data.documents import Document, iter_documents
from bertlook.data.segments import (LAYOUTS, build_segments, read_segments, segment_template, sentence_joiner,
                                    write_segments)
from bertlook.errors import BertlookError

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big and old.",
         "Anarchism is a political philosophy. It is sceptical of authority."] * 3
_WORDS = ("the a cat dog mat sat saw ran man woman house city river king queen book read wrote john mary paris "
          "london france england war world people time year first new old good great long many some other").split()


def _docs(n_docs=5, n_sents=12, seed=7) -> list[Document]:
    """Hand-made documents: sentences of 3..14 words; document 3 is one long sentence of 60 words, document 4 one
    short sentence (both single-sentence windows)."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        sents = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 14))).capitalize() + "."
                 for _ in range(n_sents)]
        if d == 3:
            sents = [" ".join(rng.choice(_WORDS) for _ in range(60)).capitalize() + "."]
        elif d == 4:
            sents = ["The cat sat on the mat."]
        docs.append(Document(index=d, title=f"Doc {d}", sentences=sents))
    return docs


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    from bertlook.testing.tiny_models import make_tiny_decoder

    texts = TEXTS + [" ".join(_WORDS).capitalize() + "."]
    return {arch: make_tiny_decoder(tmp_path_factory.mktemp(arch), arch, texts, max_positions=64)
            for arch in ("gpt_neox", "llama")}


def _tok(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _inner(seg, template):
    """A window's tokens without the template's special tokens."""
    tokens = seg["tokens"]
    if template.paper:
        return tokens[1:-1]
    return tokens[len(template.prefix):len(tokens) - len(template.suffix)]


def _check_windows(segments, summary, tokenizer, max_seq_len, docs):
    template = segment_template(tokenizer)
    by_index = {d.index: d for d in docs}
    room = max_seq_len - template.n_special_for("window")
    assert summary["layout"] == "window" and summary["template"] == template.describe("window")
    assert [s["id"] for s in segments] == list(range(len(segments)))
    for seg in segments:
        assert seg["layout"] == "window" and seg["text_b"] == ""
        assert seg["segment_ids"] == [0] * len(seg["tokens"]) and len(seg["tokens"]) <= max_seq_len
        inner = _inner(seg, template)
        wrapped, _ = template.wrap_window(inner)
        assert wrapped == seg["tokens"]
        # the window's tokens are those of its text (the sentences joined by spaces), cut at the end when truncated
        full = tokenizer.tokenize(seg["text_a"])
        assert seg["truncated"] == (len(full) > room)
        assert inner == full[:room]
        if seg["truncated"]:
            assert len(seg["tokens"]) == max_seq_len
        # consecutive sentences of one document
        doc = by_index[seg["doc_index"]]
        assert seg["doc"] == doc.title and seg["text_a"] in " ".join(doc.sentences)
        assert ("template" in seg) == (not template.paper)
    return template


@pytest.mark.parametrize("max_seq_len", [16, 40, 400])
def test_windows_of_an_encoder_tokenizer(tokenizer, max_seq_len):
    docs = _docs()
    segments, summary = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=max_seq_len, seed=0,
                                       layout="window")
    _check_windows(segments, summary, tokenizer, max_seq_len, docs)
    assert summary["template"] == "[CLS] W [SEP]" and summary["single_sentence_chunks_skipped"] == 0
    assert all(s["tokens"][0] == "[CLS]" and s["tokens"][-1] == "[SEP]" and s["tokens"].count("[SEP]") == 1
               for s in segments)
    # every sentence is used, each document's windows in order are its sentences (no random split, no skip)
    assert summary["sentences_used"] == sum(len(d.sentences) for d in docs)
    for doc in docs:
        own = [s for s in segments if s["doc_index"] == doc.index]
        assert " ".join(s["text_a"] for s in _document_order(own, doc)) == " ".join(doc.sentences)
    # single-sentence windows are kept: the long sentence (cut at small lengths) and the short one
    singles = {s["doc_index"]: s for s in segments if s["doc_index"] in (3, 4)}
    assert singles[4]["text_a"] == "The cat sat on the mat." and not singles[4]["truncated"]
    assert singles[3]["truncated"] == (max_seq_len < 400)
    if max_seq_len == 16:
        assert summary["truncated_segments"] > 0


def _document_order(segments, doc):
    text = " ".join(doc.sentences)
    return sorted(segments, key=lambda s: text.index(s["text_a"]))


@pytest.mark.parametrize("arch, prefix", [("gpt_neox", []), ("llama", ["<s>"])])
def test_windows_of_a_decoder_tokenizer(decoders, arch, prefix):
    tok = _tok(decoders[arch])
    assert sentence_joiner(tok) == " "  # byte-level BPE: the space goes into the next sentence's first token
    docs = _docs()
    segments, summary = build_segments(docs, tok, n_segments=1000, max_seq_len=48, seed=0, layout="window")
    template = _check_windows(segments, summary, tok, 48, docs)
    assert list(template.prefix) == prefix and summary["template"] == " ".join([*prefix, "W"])
    assert all(s["template"] == "tokenizer" for s in segments)
    assert summary["truncated_segments"] > 0 and any(not s["truncated"] for s in segments)


def test_the_joiner_of_wordpiece_is_empty(tokenizer):
    assert sentence_joiner(tokenizer) == ""


def test_windows_are_deterministic_by_seed_and_shuffled(tokenizer):
    docs = _docs(n_docs=8)
    a1, s1 = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=32, seed=0, layout="window")
    a2, s2 = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=32, seed=0, layout="window")
    b, _ = build_segments(docs, tokenizer, n_segments=1000, max_seq_len=32, seed=5, layout="window")
    assert a1 == a2 and s1 == s2
    # another seed: the same windows (no random cut), in another order
    key = lambda s: (s["doc_index"], s["text_a"])  # noqa: E731
    assert sorted(map(key, a1)) == sorted(map(key, b)) and list(map(key, a1)) != list(map(key, b))
    assert [s["doc_index"] for s in a1] != sorted(s["doc_index"] for s in a1)
    # n_segments: the first windows in document order are kept, then shuffled
    few, summary = build_segments(docs, tokenizer, n_segments=5, max_seq_len=32, seed=0, layout="window")
    assert len(few) == summary["segments_produced"] == 5


def test_window_round_trip_and_read_back(tokenizer, tmp_path):
    segments, _ = build_segments(_docs(), tokenizer, n_segments=1000, max_seq_len=32, seed=0, layout="window")
    path = tmp_path / "w.jsonl"
    write_segments(path, segments)
    assert read_segments(path) == segments
    first = json.loads(path.read_text().splitlines()[0])
    assert list(first)[:8] == ["id", "doc", "doc_index", "text_a", "text_b", "tokens", "segment_ids", "truncated"]
    assert first["layout"] == "window"


# recorded with the code before the window layout (3463b2c): the paper's segments did not change
# (sha256 of the JSON of [segments, summary] of the tiny BERT's tokenizer, segments.build_segments of 3463b2c)
PAIR_SHA256 = {(32, 0): "dc014884dd238d1962ba7988f1f79aec1c067662ffc580d4d6c1230d1439924c",
               (64, 1): "073c0383b0a53f69a19ade0cccff576059a0bcc5958762b7c4dfbe6f3ab16990",
               (128, 3): "bdec54562b1084418e8bbfeb0d6020e7b2ce3ca69064a02ecc37909c5ecfb7ab"}


def _pair_digest(tokenizer, max_seq_len, seed, **kw):
    segments, summary = build_segments(_docs(n_docs=8), tokenizer, n_segments=1000, max_seq_len=max_seq_len,
                                       seed=seed, **kw)
    summary = {k: v for k, v in summary.items() if k != "layout"}
    return hashlib.sha256(json.dumps([segments, summary], sort_keys=True).encode()).hexdigest(), segments


@pytest.mark.parametrize("max_seq_len, seed", sorted(PAIR_SHA256))
def test_pair_layout_is_unchanged(tokenizer, max_seq_len, seed):
    digest, segments = _pair_digest(tokenizer, max_seq_len, seed)
    assert digest == PAIR_SHA256[(max_seq_len, seed)]
    assert _pair_digest(tokenizer, max_seq_len, seed, layout="pair")[0] == digest
    assert all("layout" not in s and s["tokens"].count("[SEP]") == 2 for s in segments)


def test_bad_layout_and_lengths(tokenizer, decoders):
    with pytest.raises(BertlookError, match="layout must be one of pair, window, got 'windows'"):
        build_segments(_docs(), tokenizer, n_segments=3, layout="windows")
    with pytest.raises(BertlookError, match=r"max_seq_len must be at least 3 \(\[CLS\] W \[SEP\]\), got 2"):
        build_segments(_docs(), tokenizer, n_segments=3, max_seq_len=2, layout="window")
    # a window needs only one token beside the template: GPT-NeoX has none
    segs, _ = build_segments(_docs(), _tok(decoders["gpt_neox"]), n_segments=3, max_seq_len=1, layout="window")
    assert all(len(s["tokens"]) == 1 for s in segs)
    assert LAYOUTS == ("pair", "window")


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s.update(layout="windows"), 'layout must be "pair" or "window", got \'windows\''),
    (lambda s: s.update(layout=["window"]), 'layout must be "pair" or "window"'),
    (lambda s: s.update(segment_ids=[0, 1] + [0] * (len(s["tokens"]) - 2)), "segment_ids must be all 0 in a window"),
    (lambda s: s.update(tokens=["x", *s["tokens"][1:]]), r"first token must be a \[CLS\]-like token"),
])
def test_bad_window_lines_name_file_and_line(tokenizer, tmp_path, mutate, message):
    segments, _ = build_segments(_docs(), tokenizer, n_segments=3, max_seq_len=32, seed=0, layout="window")
    mutate(segments[1])
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in segments))
    with pytest.raises(BertlookError, match=rf"bad.jsonl:2: {message}"):
        read_segments(path)


# ---------------------------------------------------------------------------------------- CLI

def _parse(argv):
    from bertlook.cli import segments as segments_cli

    parser = argparse.ArgumentParser(prog="bertlook")
    segments_cli.register_cli(parser.add_subparsers(dest="step"))
    return parser.parse_args(argv)


def test_cli_layout_window(fake_modeling, tiny_bert_dir, wiki_bz2, tmp_path, capsys):
    out, summary_path = tmp_path / "segments.jsonl", tmp_path / "summary.json"
    argv = ["segments", "--dump", str(wiki_bz2), "--model", str(tiny_bert_dir), "--out", str(out),
            "--summary", str(summary_path), "--n-segments", "50", "--max-seq-len", "48"]
    args = _parse([*argv, "--layout", "window"])
    assert args.func(args) == 0
    segments = read_segments(out)
    summary = json.loads(summary_path.read_text())
    assert segments and all(s["layout"] == "window" for s in segments)
    assert summary["layout"] == "window" and summary["template"] == "[CLS] W [SEP]"
    assert summary["sentences_used"] == 13  # every kept sentence of the two articles
    assert capsys.readouterr().out.startswith(f"segments: {len(segments)}/50 window segments from 2 documents")
    args = _parse(argv)  # default: the paper's pairs
    assert args.layout == "pair" and args.func(args) == 0
    assert json.loads(summary_path.read_text())["layout"] == "pair"
    assert all("layout" not in s for s in read_segments(out))


def test_cli_layout_choices(capsys):
    with pytest.raises(SystemExit):
        _parse(["segments", "--dump", "d", "--model", "m", "--out", "o", "--summary", "s", "--layout", "triple"])
    assert "invalid choice: 'triple'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["segments", "--help"])
    assert "--layout {pair,window}" in capsys.readouterr().out


# ------------------------------------------------------------------------------- extraction

@pytest.mark.parametrize("arch", ["gpt_neox", "llama"])
def test_decoder_windows_extract_to_causal_maps(decoders, tmp_path, arch):
    import numpy as np

    from bertlook.attention.extraction import extract_segments
    from bertlook.attention.store import open_store

    segs, _ = build_segments(_docs(), _tok(decoders[arch]), n_segments=4, max_seq_len=64, seed=0, layout="window")
    path = tmp_path / "segments.jsonl"
    write_segments(path, segs)
    summary = extract_segments(path, str(decoders[arch]), tmp_path / "store", device="cpu", max_seq_len=64,
                               segment_ids="pair", progress_every=0, max_unk_rate=1.0)
    assert summary["n_segments"] == 4 and summary["excluded_too_long"] == 0
    store = open_store(tmp_path / "store", level="token")
    lengths = {s["id"]: len(s["tokens"]) for s in segs}
    for record, attn in store:
        a = attn.astype(np.float32)  # [layer, head, query_pos, key_pos]
        assert a.shape[-1] == lengths[record["id"]]
        assert np.triu(a, 1).max() == 0.0


def test_decoder_windows_through_the_one_pass_readers(decoders, tmp_path):
    """`extract-segments` with the statistics, JS and rollout readers of the one pass, on windows of a decoder."""
    from bertlook.cli import main

    segs, _ = build_segments(_docs(), _tok(decoders["gpt_neox"]), n_segments=3, max_seq_len=64, seed=0,
                             layout="window")
    path = tmp_path / "segments.jsonl"
    write_segments(path, segs)
    flags = ("--stats-partial", "--js-partial", "--rollout-partial")
    outs = {flag: tmp_path / f"{flag.strip('-')}.npz" for flag in flags}
    rc = main(["extract-segments", "--segments", str(path), "--model", str(decoders["gpt_neox"]), "--device", "cpu",
               "--max-unk-rate", "1", "--max-seq-len", "64", "--summary", str(tmp_path / "summary.json"),
               *[tok for flag, out in outs.items() for tok in (flag, str(out))]])
    assert rc == 0 and all(out.is_file() for out in outs.values())
    assert json.loads((tmp_path / "summary.json").read_text())["n_segments"] == 3


def test_encoder_windows_extract(tiny_bert_dir, tokenizer, tmp_path):
    """The paper's template with one part, [CLS] W [SEP], is a valid encoder input (segment ids 0): allowed."""
    from bertlook.attention.extraction import extract_segments

    segs, _ = build_segments(_docs(), tokenizer, n_segments=3, max_seq_len=48, seed=0, layout="window")
    path = tmp_path / "segments.jsonl"
    write_segments(path, segs)
    summary = extract_segments(path, str(tiny_bert_dir), tmp_path / "store", device="cpu", max_seq_len=48,
                               segment_ids="pair", progress_every=0, max_unk_rate=1.0)
    assert summary["n_segments"] == 3 and summary["excluded_too_long"] == 0


def test_max_seq_len_beyond_the_decoders_positions_is_refused(decoders, tmp_path, capsys):
    """A long max_seq_len (2,048, as config/long-context.yaml) against a decoder of 64 positions: `error:`."""
    from bertlook.cli import main

    segs, _ = build_segments(_docs(), _tok(decoders["gpt_neox"]), n_segments=2, max_seq_len=64, seed=0,
                             layout="window")
    path = tmp_path / "segments.jsonl"
    write_segments(path, segs)
    rc = main(["extract-segments", "--segments", str(path), "--model", str(decoders["gpt_neox"]), "--device", "cpu",
               "--max-unk-rate", "1", "--max-seq-len", "2048", "--stats-partial", str(tmp_path / "stats.npz")])
    assert rc == 2
    assert "error: max_seq_len 2048 exceeds the model's max_position_embeddings 64" in capsys.readouterr().err
    assert not (tmp_path / "stats.npz").exists()


# ---------------------------------------------------------------------------------- configuration

def test_long_context_config_is_valid():
    from bertlook.pipeline.config import load_config, run_names

    config = load_config(ROOT / "config" / "long-context.yaml")
    assert run_names(config) == ["long-pythia-160m"]
    assert config["segments"]["layout"] == "window" and config["segments"]["max_seq_len"] == 2048
    assert config["models"][0]["name_or_path"] == "EleutherAI/pythia-160m"
    assert config["extraction"]["keep_maps"] is False
    assert config["clustering"]["js_rows"] == 64 and config["clustering"]["max_examples"] is None


def test_schema_layout_and_max_seq_len_cap():
    from bertlook.pipeline.config import validate_config

    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    assert validate_config(base)["segments"]["layout"] == "pair"  # the default: the paper's segments
    for value in (2048, 131072):
        config = yaml.safe_load((ROOT / "config.yaml").read_text())
        config["segments"]["max_seq_len"] = value
        assert validate_config(config)["segments"]["max_seq_len"] == value
    for key, value in (("max_seq_len", 131073), ("layout", "windows")):
        config = yaml.safe_load((ROOT / "config.yaml").read_text())
        config["segments"][key] = value
        with pytest.raises(BertlookError, match=f"segments.{key}"):
            validate_config(config)


@pytest.mark.parametrize("configfile, flags", [
    ("config/long-context.yaml", ["--layout window", "--max-seq-len 2048", "--n-segments 200"]),
    ("config/offline.yaml", ["--max-seq-len 128"]),
])
def test_the_segments_command_of_a_dry_run(configfile, flags, tmp_path):
    """segments.layout reaches `bertlook segments` as --layout only for windows: the paper's pair layout passes no
    flag, so that the command line (a rerun trigger) of existing runs does not change."""
    import subprocess

    from workflow_helpers import ENV, SNAKEMAKE

    proc = subprocess.run([SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--configfile", str(ROOT / configfile),
                           "-n", "-p", "--directory", str(tmp_path)], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if "bertlook segments " in ln)
    for flag in flags:
        assert flag in line
    assert ("--layout" in line) == (configfile == "config/long-context.yaml")
