"""The whole workflow on a decoder-only model: a tiny GPT-2 beside a tiny BERT in one configuration (a fan-out of
two models) runs every step, and the cross-model summary puts the encoder and the decoder side by side."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from workflow_helpers import ROOT, snakemake, tiny_config

pytestmark = pytest.mark.e2e


def _decoder(path):
    from bertlook.testing.tiny_models import make_tiny_decoder

    texts = [line[len("# text = "):].strip() for line in (ROOT / "tests" / "fixtures" / "silver_dev.conllu")
             .read_text().splitlines() if line.startswith("# text = ")]
    return make_tiny_decoder(path, "gpt2", texts, vocab_size=600, max_positions=256, lm_head=True)


def _config(tmp_path, tiny_bert_dir):
    config = tiny_config(tmp_path, tiny_bert_dir)
    config["models"].append({"label": "gpt2", "name_or_path": str(_decoder(tmp_path / "gpt2")), "revision": None})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return config


def test_a_decoder_in_the_dag(tmp_path, tiny_bert_dir):
    """Dry run: the decoder gets every step an encoder gets (make test; the real run is `slow`)."""
    _config(tmp_path, tiny_bert_dir)
    proc = snakemake(tmp_path, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for step in ("segments", "extract_segments", "heads", "probes", "gradients", "coref", "head_detectors",
                 "tree_heads", "head_report", "compare"):
        assert out.count(f"rule {step}:") >= 2, step  # for each model (some once per map kind)
    for path in ("tables/table1.csv", "tables/table3.csv", "tables/sep_gradients.csv", "tables/head_report.csv",
                 "tables/table2.csv", "manifest.json"):
        assert f"results/tiny-gpt2/{path}" in out, path
    assert out.count("rule models_summary:") == 1
    assert out.count("rule explorer_models:") == 1 and "results/tiny-all-models/explorer.html" in out


@pytest.mark.slow  # two whole tiny runs (~2.5 min here): make test-all, CI
def test_encoder_and_decoder_fan_out_with_one_cross_model_summary(tmp_path, tiny_bert_dir):
    _config(tmp_path, tiny_bert_dir)
    proc = snakemake(tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    enc, dec = tmp_path / "results" / "tiny-rand", tmp_path / "results" / "tiny-gpt2"
    stats = json.loads((dec / "tables" / "attention_stats.summary.json").read_text())
    assert stats["causal"] is True and stats["special_tokens"]["cls"] is None
    assert "causal" not in json.loads((enc / "tables" / "attention_stats.summary.json").read_text())
    t1_dec, t1_enc = pd.read_csv(dec / "tables" / "table1.csv"), pd.read_csv(enc / "tables" / "table1.csv")
    assert {"visible_dep2head", "accuracy_visible", "baseline_accuracy_visible"} <= set(t1_dec.columns)
    assert "visible_dep2head" not in t1_enc.columns
    grads = json.loads((dec / "tables" / "sep_gradients.summary.json").read_text())
    assert grads["status"] == "ok" and grads["objective"] == "next-token"
    card = pd.read_csv(dec / "tables" / "head_report.csv")
    assert card[["prev_token", "duplicate_token", "induction", "importance"]].notna().all().all()
    assert json.loads((dec / "tables" / "head_detectors.summary.json").read_text())["family"] == "decoder"
    assert json.loads((dec / "manifest.json").read_text())["model"]["provenance"]["family"] == "decoder"
    md = (tmp_path / "results" / "tiny-all-models" / "models_summary.md").read_text()
    assert "| model | family | encoder or decoder | encoder | decoder |" in md
    assert "| detectors | induction heads |" in md
    page = (tmp_path / "results" / "tiny-all-models" / "explorer.html").read_text()
    start = page.index('id="data">') + len('id="data">')
    data = json.loads(page[start:page.index("</script>", start)].replace("<\\/", "</"))
    assert [m["run"] for m in data["models"]] == ["tiny-rand", "tiny-gpt2"]
    assert all(m["sentences"] and len(m["heads"]) == m["num_layers"] * m["num_heads"] for m in data["models"])
