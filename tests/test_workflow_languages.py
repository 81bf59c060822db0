"""Issue 13 end to end: the real Snakemake on a local parquet corpus in German (segments.language: de,
bertlook's rule-based splitter) and two tiny UD treebanks in two languages (German = the main treebank,
Chinese = a `treebanks` entry read as written, without spaces) with a tiny multilingual (mBERT-like,
WordPiece trained on the fly) model: every output of the main run, the Chinese syntax run, and the
cross-language summary, checked against the runs' own per-head accuracies recomputed here."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bertlook.data.treebank import read_conllu
from workflow_helpers import ROOT, fewer_analyses, snakemake, tiny_config

# several full runs of the tiny DAG (minutes): `make test-all` and CI run it, `make test` does not
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

UD = ROOT / "tests" / "fixtures" / "ud"
ARTICLES = {
    "Berlin": [
        "Berlin ist die Hauptstadt der Bundesrepublik Deutschland.",
        "Die Stadt liegt an der Spree und hat fast vier Millionen Einwohner.",
        "Im Jahr 1990 wurde die Stadt wieder vereinigt.",
        "Viele Menschen besuchen jedes Jahr die Museen der Stadt.",
        "Der Fernsehturm steht am Alexanderplatz.",
        "Die Universität wurde im Jahr 1810 gegründet.",
    ],
    "Rhein": [
        "Der Rhein ist einer der längsten Flüsse Europas.",
        "Er entspringt in den Alpen und mündet in die Nordsee.",
        "Am Ufer stehen viele alte Burgen.",
        "Schiffe transportieren auf dem Fluss Kohle und Getreide.",
        "Die Stadt Köln liegt am Rhein.",
        "Im Sommer fahren Touristen mit dem Schiff.",
    ],
    "Kaffee": [
        "Kaffee ist ein Getränk aus gerösteten Bohnen.",
        "Die Pflanze stammt ursprünglich aus Äthiopien.",
        "Heute wird Kaffee in vielen Ländern angebaut.",
        "Die Deutschen trinken gern Kaffee am Morgen.",
        "Der Geschmack hängt von der Röstung ab.",
        "Manche Menschen trinken ihn mit Milch und Zucker.",
    ],
}


def _treebank_text(path: Path) -> list[str]:
    return [" ".join(s.words) for s in read_conllu(path)]


@pytest.fixture(scope="module")
def languages_run(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertlook.testing.tiny_models import make_tiny_multilingual

    work = tmp_path_factory.mktemp("languages")
    parquet = work / "dewiki.parquet"
    pq.write_table(pa.table({"title": list(ARTICLES), "text": [" ".join(s) for s in ARTICLES.values()]}), parquet)
    texts = [s for sents in ARTICLES.values() for s in sents]
    for name in ("de_tiny-ud-train", "de_tiny-ud-dev", "zh_tiny-ud-train", "zh_tiny-ud-dev"):
        texts += _treebank_text(UD / f"{name}.conllu")
    model = make_tiny_multilingual(work / "model", "wordpiece", texts, vocab_size=600, mlm_head=True, seed=0)
    # the analyses beyond the paper off but the head report (its languages are what is tested here)
    config = fewer_analyses(tiny_config(work, model), keep=("head_report",))
    config["models"] = [{"label": "mini", "name_or_path": str(model), "revision": None}]
    config["wikipedia"].update(path=None, url=None, max_articles=None,
                               hf_dataset={"path": "parquet", "data_files": str(parquet)})
    config["segments"].update(n_segments=6, language="de", splitter="rules")
    config["treebank"] = {"source": "local", "language": "de", "label": "de",
                          "local": {"train": str(UD / "de_tiny-ud-train.conllu"),
                                    "dev": str(UD / "de_tiny-ud-dev.conllu"), "kind": "ud"}}
    config["treebanks"] = [{"label": "zh", "language": "zh", "source": "local", "text": "original",
                            "local": {"train": str(UD / "zh_tiny-ud-train.conllu"),
                                      "dev": str(UD / "zh_tiny-ud-dev.conllu"), "kind": "ud"}}]
    config["heads"]["min_count"] = 2
    config["coref"]["conll"] = []  # English CoNLL-2012 fixture: not this model's languages
    (work / "config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    proc = snakemake(work, timeout=1500)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return work


def test_the_corpus_is_split_into_german_sentences_by_the_rules_splitter(languages_run):
    results = languages_run / "results"
    summary = json.loads((results / "tiny-mini" / "corpus" / "segments.summary.json").read_text())
    assert summary["language"] == "de" and summary["splitter"] == "rules"
    segments = [json.loads(line) for line in (results / "tiny-mini" / "corpus" / "segments.jsonl").open()]
    # each article fits one 128-piece chunk: one segment per article (fewer than n_segments: 6)
    assert sorted(seg["doc"] for seg in segments) == sorted(ARTICLES)
    for seg in segments:  # A | B split at a sentence boundary of the six sentences
        sents = ARTICLES[seg["doc"]]
        cuts = [" ".join(sents[:k]) for k in range(1, len(sents))]
        assert seg["text_a"] in cuts, seg["text_a"]
        assert seg["text_a"] + " " + seg["text_b"] == " ".join(sents)


def test_each_treebank_has_its_run_and_the_chinese_one_reads_the_text_as_written(languages_run):
    results = languages_run / "results"
    for run, name in (("tiny-mini", "de_tiny-ud-dev"), ("tiny-mini-zh", "zh_tiny-ud-dev")):
        gold = read_conllu(UD / f"{name}.conllu")
        summary = json.loads((results / run / "attention" / "words-dev.summary.json").read_text())
        excluded = summary.get("excluded_alignment", 0) + summary.get("excluded_too_long", 0)
        assert summary["n_extracted"] + excluded == len(gold), summary
        assert summary["text"] == ("original" if run.endswith("zh") else "spaces")
        table1 = pd.read_csv(results / run / "tables" / "table1.csv")
        assert len(table1) > 0
    # the syntax run has no segment analyses and no probes
    zh = results / "tiny-mini-zh"
    assert not (zh / "tables" / "attention_stats.csv").exists() and not (zh / "tables" / "table3.csv").exists()
    # the main run has everything, as with one treebank
    main = results / "tiny-mini"
    for name in ("attention_stats.csv", "table3.csv", "head_report.csv", "sep_gradients.csv"):
        assert (main / "tables" / name).is_file(), name


def test_the_cross_language_summary_agrees_with_the_runs_per_head_accuracies(languages_run):
    results = languages_run / "results"
    out = results / "tiny-languages" / "mini"
    best = pd.read_csv(out / "best_heads.csv")
    agreement = pd.read_csv(out / "agreement.csv")
    summary = json.loads((out / "languages.summary.json").read_text())
    assert summary["labels"] == ["de", "zh"] and summary["languages"] == {"de": "de", "zh": "zh"}
    assert (out / "fig_languages.png").stat().st_size > 1000
    assert "zh" in (out / "languages.md").read_text()
    # recompute each treebank's best head for "All" from its head_accuracy.csv (ties: lowest layer, head)
    for label, run in (("de", "tiny-mini"), ("zh", "tiny-mini-zh")):
        acc = pd.read_csv(results / run / "tables" / "head_accuracy.csv")
        for direction in acc["direction"].unique():
            rows = acc[(acc["relation"] == "All") & (acc["direction"] == direction)]
            top = rows.sort_values(["accuracy", "layer", "head"], ascending=[False, True, True]).iloc[0]
            got = best[(best["treebank"] == label) & (best["relation"] == "All") & (best["direction"] == direction)]
            assert got["best_head"].tolist() == [f"{int(top['layer'])}-{int(top['head'])}"], (label, direction)
            assert got["accuracy"].iloc[0] == pytest.approx(top["accuracy"], abs=1e-6)
    all_rows = agreement[agreement["relation"] == "All"]
    assert set(all_rows["n_treebanks"]) == {2}
    for _, row in all_rows.iterrows():
        heads = set(best[(best["relation"] == "All") & (best["direction"] == row["direction"])]["best_head"])
        assert bool(row["same_best_head"]) == (len(heads) == 1)
