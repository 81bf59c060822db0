"""bertlook.data.hf_corpus: documents from Hugging Face ``datasets`` corpora (local files only, no network)."""

from __future__ import annotations

import hashlib
import json
import time
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertlook.cli import main
from bertlook.data import silver_treebank as tb
from bertlook.data.hf_corpus import describe_hf_dataset, iter_hf_documents
from bertlook.data.documents import DOCUMENT_COUNT_KEYS, iter_documents, iter_dump_articles
from bertlook.data.segments import build_segments, read_segments, write_segments
from bertlook.errors import BertlookError

# no network for datasets, its cache in the test's tmp dir (conftest.hf_offline_cache)
pytestmark = pytest.mark.usefixtures("hf_offline_cache")

GENSIM_DUMP = ("package:gensim/test/test_data/"
               "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
SAME_COUNTS = ("documents_without_sentences", "documents_kept", "short_sentences_skipped", "sentences_kept")


def _articles(dump: Path) -> list[tuple[str, str]]:
    """The dump's namespace-0 articles as (title, cleaned text): what a converted corpus would hold."""
    return [(title, "\n".join(paragraphs)) for title, paragraphs in iter_dump_articles(dump)]


def _write_parquet(path: Path, articles: list[tuple[str, str]]) -> Path:
    pq.write_table(pa.table({"title": [t for t, _ in articles], "text": [x for _, x in articles]}), path)
    return path


@pytest.fixture(scope="module")
def gensim_corpus(tmp_path_factory):
    """The packaged gensim dump excerpt and a parquet of its cleaned articles."""
    from bertlook.pipeline.config import resolve_data_path

    root = tmp_path_factory.mktemp("gensim-hf")
    dump = resolve_data_path(GENSIM_DUMP)
    articles = _articles(dump)
    return {"dump": dump, "articles": articles, "parquet": _write_parquet(root / "articles.parquet", articles),
            "docs": list(iter_documents(dump))}


def _check_same_documents(dump: Path, spec: dict) -> None:
    c_dump, c_hf = {}, {}
    docs_dump = list(iter_documents(dump, counts=c_dump))
    docs_hf = list(iter_hf_documents(spec, counts=c_hf))
    assert docs_hf == docs_dump and docs_dump
    assert set(c_hf) == set(c_dump) == set(DOCUMENT_COUNT_KEYS)
    for key in SAME_COUNTS:
        assert c_hf[key] == c_dump[key], key
    assert c_hf["pages_read"] == c_dump["pages_read"] - c_dump["redirects_skipped"] - c_dump[
        "non_article_pages_skipped"]


# ------------------------------------------------------------------------------- same documents

@pytest.mark.integration  # gensim's real Wikipedia excerpt through the corpus readers (seconds)
def test_parquet_of_cleaned_articles_gives_the_dump_documents(wiki_bz2, tmp_path):
    parquet = _write_parquet(tmp_path / "a.parquet", _articles(wiki_bz2))
    _check_same_documents(wiki_bz2, {"path": "parquet", "data_files": str(parquet)})


@pytest.mark.integration  # gensim's real Wikipedia excerpt through the corpus readers (seconds)
@pytest.mark.parametrize("streaming", [False, True])
def test_gensim_excerpt_same_segments(gensim_corpus, tokenizer, streaming):
    spec = {"path": "parquet", "data_files": str(gensim_corpus["parquet"]), "streaming": streaming}
    for seed in (0, 3):
        from_dump, s_dump = build_segments(iter_documents(gensim_corpus["dump"]), tokenizer,
                                           n_segments=60, max_seq_len=64, seed=seed)
        from_hf, s_hf = build_segments(iter_hf_documents(spec), tokenizer, n_segments=60, max_seq_len=64,
                                       seed=seed)
        assert len(from_dump) == 60
        assert json.dumps(from_hf) == json.dumps(from_dump)  # byte-identical
        assert s_hf == s_dump


def test_jsonl_and_arrow_datasets(wiki_bz2, tmp_path):
    import datasets

    articles = _articles(wiki_bz2)
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"title": t, "body": x}) + "\n" for t, x in articles))
    _check_same_documents(wiki_bz2, {"path": "json", "data_files": [str(jsonl)], "text_field": "body"})
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"title": [t for t, _ in articles], "text": [x for _, x in articles]}
                               ).save_to_disk(str(saved))
    _check_same_documents(wiki_bz2, {"path": str(saved)})
    _check_same_documents(wiki_bz2, {"path": str(saved), "streaming": True})


def test_plain_text_cleaning_and_max_articles(tmp_path):
    text = ("History\n\n  The  cat sat on the mat.   It was happy there all day.\n"
            "* list item without an end\nShort one.\n")
    parquet = _write_parquet(tmp_path / "p.parquet", [("Cat", text), ("Empty", "Heading only"),
                                                     ("Dog", "The dog ran home. It was late at night.")])
    counts: dict[str, int] = {}
    docs = list(iter_hf_documents({"path": "parquet", "data_files": str(parquet)}, counts=counts))
    assert [(d.index, d.title) for d in docs] == [(0, "Cat"), (1, "Dog")]
    assert docs[0].sentences == ["The cat sat on the mat.", "It was happy there all day."]
    assert counts["non_prose_lines_skipped"] == 3  # History, the list item, "Heading only"
    assert counts["short_sentences_skipped"] == 1  # "Short one."
    assert counts["documents_without_sentences"] == 1 and counts["pages_read"] == 3
    one = list(iter_hf_documents({"path": "parquet", "data_files": str(parquet), "title_field": None},
                                 max_articles=1))
    assert [(d.index, d.title) for d in one] == [(0, "0")]


def test_describe(tmp_path, wiki_bz2):
    parquet = _write_parquet(tmp_path / "a.parquet", _articles(wiki_bz2))
    sha = hashlib.sha256(parquet.read_bytes()).hexdigest()
    desc = describe_hf_dataset({"path": "parquet", "data_files": str(parquet)})
    assert desc["fingerprint"] and desc["revision"] is None and desc["split"] == "train"
    assert desc["data_files_sha256"] == {str(parquet): sha}
    assert describe_hf_dataset({"path": "parquet", "data_files": str(parquet)})["fingerprint"] == desc["fingerprint"]
    streamed = describe_hf_dataset({"path": "parquet", "data_files": str(parquet), "streaming": True})
    assert streamed["fingerprint"] is None and streamed["data_files_sha256"] == {str(parquet): sha}


# ------------------------------------------------------------------------------------ bad input

def _segments_cli(tiny_bert_dir, out_dir: Path, *source: str) -> int:
    return main(["segments", *source, "--model", str(tiny_bert_dir), "--out", str(out_dir / "segments.jsonl"),
                 "--summary", str(out_dir / "summary.json"), "--n-segments", "50", "--max-seq-len", "64"])


@pytest.mark.integration  # gensim's real Wikipedia excerpt through the corpus readers (seconds)
def test_cli_hf_dataset_matches_dump(fake_modeling, tiny_bert_dir, gensim_corpus, tmp_path, capsys):
    spec = json.dumps({"path": "parquet", "data_files": str(gensim_corpus["parquet"])})
    assert _segments_cli(tiny_bert_dir, tmp_path / "hf", "--hf-dataset", spec) == 0
    assert _segments_cli(tiny_bert_dir, tmp_path / "dump", "--dump", str(gensim_corpus["dump"])) == 0
    assert (tmp_path / "hf" / "segments.jsonl").read_bytes() == (tmp_path / "dump" / "segments.jsonl").read_bytes()
    summary = json.loads((tmp_path / "hf" / "summary.json").read_text())
    assert summary["dump"] is None and summary["corpus"]["path"] == "parquet"
    assert summary["corpus"]["fingerprint"] and summary["corpus"]["data_files_sha256"]
    assert "corpus" not in json.loads((tmp_path / "dump" / "summary.json").read_text())
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # exactly one source (argparse)
        _segments_cli(tiny_bert_dir, tmp_path / "both", "--hf-dataset", spec, "--dump", "x")
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def _empty_parquet(path: Path) -> Path:
    pq.write_table(pa.table({"title": pa.array([], pa.string()), "text": pa.array([], pa.string())}), path)
    return path


@pytest.mark.parametrize("make_spec, message", [
    (lambda d: {"path": "parquet", "data_files": str(d["parquet"]), "colour": "red"}, "unknown key(s) colour"),
    (lambda d: {"path": "parquet", "data_files": str(d["parquet"]), "text_field": "body"}, "no column 'body'"),
    (lambda d: {"path": "parquet", "data_files": str(d["empty"])}, "cannot load dataset 'parquet'"),
    (lambda d: {"path": "parquet", "data_files": str(d["empty"]), "streaming": True}, "cannot read row 0"),
    (lambda d: {"path": "csv", "data_files": str(d["empty_csv"])}, "corresponds to no data"),
    (lambda d: {"path": "csv", "data_files": str(d["empty_csv"]), "streaming": True}, "has no rows"),
    (lambda d: {"path": "parquet", "data_files": str(d["root"] / "nope.parquet")}, "nope.parquet not found"),
    (lambda d: {"path": "parquet", "data_files": str(d["nulls"])},
     "no usable document in the dataset (2 rows read, 2 with null text, 0 without a usable sentence)"),
    (lambda d: {"path": "json", "data_files": str(d["ragged"]), "streaming": True},
     "row 1: 'title' is missing (null)"),
    (lambda d: {"path": "parquet", "data_files": str(d["ints"])}, "row 0: 'title' must be a string, got int"),
    (lambda d: {"path": "parquet"}, "needs 'data_files'"),
    (lambda d: {"path": "parquet", "data_files": str(d["parquet"]), "revision": "main"}, "Hub datasets only"),
    (lambda d: "not json {", "invalid JSON"),
    (lambda d: [1, 2], "expected a JSON object"),
])
def test_bad_specs_exit_2_naming_the_dataset(fake_modeling, tiny_bert_dir, tmp_path, capsys, make_spec, message):
    d = {"root": tmp_path, "parquet": _write_parquet(tmp_path / "ok.parquet", [("A", "The cat sat. The dog ran.")]),
         "empty": _empty_parquet(tmp_path / "empty.parquet"), "ragged": tmp_path / "ragged.jsonl"}
    d["nulls"] = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"title": ["A", "B"], "text": pa.array([None, None], pa.string())}), d["nulls"])
    d["empty_csv"] = tmp_path / "empty.csv"
    d["empty_csv"].write_text("title,text\n")
    d["ints"] = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"title": [7], "text": ["The cat sat on the mat."]}), d["ints"])
    d["ragged"].write_text('{"title": "A", "text": "The cat sat on the mat."}\n{"text": "The dog ran home."}\n')
    spec = make_spec(d)
    arg = spec if isinstance(spec, str) else json.dumps(spec)
    assert _segments_cli(tiny_bert_dir, tmp_path / "out", "--hf-dataset", arg) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") or "\nerror: " in err
    assert message in err, err
    assert not (tmp_path / "out").exists()  # nothing written half-way


@pytest.mark.parametrize("streaming", [False, True])
def test_null_text_rows_are_skipped_and_counted(tmp_path, streaming):
    texts = [None, "The cat sat on the mat.", None, "The dog ran to the old house.", None]
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"title": list("ABCDE"), "text": pa.array(texts, pa.string())}), path)
    counts: dict[str, int] = {}
    docs = list(iter_hf_documents({"path": "parquet", "data_files": str(path), "streaming": streaming},
                                  counts=counts))
    assert [d.title for d in docs] == ["B", "D"] and [d.index for d in docs] == [0, 1]
    assert counts["null_text_rows_skipped"] == 3 and counts["pages_read"] == 5
    assert counts["documents_kept"] == 2


def test_cli_summary_counts_null_text_rows(fake_modeling, tiny_bert_dir, tmp_path, capsys):
    path = _write_parquet(tmp_path / "ok.parquet", [("A", "The cat sat. The dog ran. A bird sang today.")] * 3)
    table = pq.read_table(path).to_pydict()
    table["title"].append("N")
    table["text"].append(None)
    pq.write_table(pa.table({k: pa.array(v, pa.string()) for k, v in table.items()}), path)
    assert _segments_cli(tiny_bert_dir, tmp_path / "out", "--hf-dataset",
                         json.dumps({"path": "parquet", "data_files": str(path)})) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["null_text_rows_skipped"] == 1 and summary["pages_read"] == 4
    capsys.readouterr()


def test_hub_without_network_fails_fast_naming_the_dataset(monkeypatch):
    import huggingface_hub

    from bertlook.data import hf_corpus

    spec = {"path": "wikimedia/wikipedia", "name": "20231101.en"}
    start = time.monotonic()
    with pytest.raises(BertlookError, match=r"'wikimedia/wikipedia'.*offline mode"):
        list(iter_hf_documents(spec))
    # hub mode on, but no network: the one metadata call fails, no retries, no download
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    calls = []

    def no_network(self, repo_id, **kw):
        calls.append((repo_id, kw.get("revision")))
        raise ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", no_network)
    monkeypatch.setattr(hf_corpus, "_RESOLVED", {})
    with pytest.raises(BertlookError, match=r"'wikimedia/wikipedia' \(revision v1\).*could not be reached"):
        describe_hf_dataset({**spec, "revision": "v1"})
    assert calls == [("wikimedia/wikipedia", "v1")]
    assert time.monotonic() - start < 10
    assert hf_corpus.normalize_spec(spec)["streaming"] is True  # Hub default: stream


def test_hub_revision_is_pinned_to_the_resolved_commit(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub

    from bertlook.data import hf_corpus

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_corpus, "_RESOLVED", {})
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info",
                        lambda self, repo_id, **kw: types.SimpleNamespace(sha="a" * 40))
    seen = {}
    rows = [{"title": "Cat", "text": "The cat sat on the mat. It was a good cat."}]

    def fake_load(path, name=None, **kw):
        seen.update(path=path, name=name, **kw)
        return datasets.Dataset.from_list(rows).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    spec = {"path": "wikimedia/wikipedia", "name": "20231101.en"}
    docs = list(iter_hf_documents(spec, max_articles=1))
    assert [d.title for d in docs] == ["Cat"]
    assert seen["revision"] == "a" * 40 and seen["streaming"] is True and seen["split"] == "train"
    desc = describe_hf_dataset(spec)
    assert desc["revision"] == "a" * 40 and desc["fingerprint"] is None and desc["data_files_sha256"] is None


# ----------------------------------------------------------------------------------- silver trees

@pytest.mark.integration  # gensim's real Wikipedia excerpt through the corpus readers (seconds)
def test_silver_from_parquet_matches_dump_and_excludes_segment_documents(gensim_corpus, tokenizer, tmp_path,
                                                                         capsys):
    spec = {"path": "parquet", "data_files": str(gensim_corpus["parquet"])}
    segments, _ = build_segments(iter_hf_documents(spec), tokenizer, n_segments=20, max_seq_len=64, seed=0)
    seg_path = tmp_path / "segments.jsonl"
    write_segments(seg_path, segments)
    used = {s["doc_index"] for s in read_segments(seg_path)}
    assert used
    out = {}
    for name, dump, hf in (("dump", gensim_corpus["dump"], None), ("hf", None, spec)):
        root = tmp_path / name
        result = tb.prepare_silver(dump, seg_path, root / "train.conllu", root / "dev.conllu",
                                   train_sentences=20, dev_sentences=10, seed=0, hf_dataset=hf)
        out[name] = (result, (root / "train.conllu").read_bytes(), (root / "dev.conllu").read_bytes())
    result = out["hf"][0]
    assert out["hf"][1:] == out["dump"][1:]  # the same trees from either source
    docs = set(result["dev"]["document_indices"]) | set(result["train"]["document_indices"])
    assert docs and not docs & used
    assert result["documents_used_by_segments"] == len(used)
    assert result["documents_available"] == result["documents_in_dump"] - len(used)
    assert result["dump"] is None and result["corpus"]["fingerprint"]
    # through the CLI, and exactly one corpus
    root = tmp_path / "cli"
    argv = ["treebank", "--source", "silver", "--hf-dataset", json.dumps(spec), "--segments", str(seg_path),
            "--out-train", str(root / "train.conllu"), "--out-dev", str(root / "dev.conllu"),
            "--summary", str(root / "summary.json"), "--train-sentences", "20", "--dev-sentences", "10"]
    assert main(argv) == 0
    assert (root / "train.conllu").read_bytes() == out["hf"][1]
    assert main(argv + ["--dump", str(gensim_corpus["dump"])]) == 2
    assert "exactly one of --dump, --hf-dataset" in capsys.readouterr().err
