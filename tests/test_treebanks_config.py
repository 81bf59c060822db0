"""`treebanks`: more treebanks (other languages) for every model. The config rules (labels, sources,
run-name collisions, defaults inside the entries) and the DAG they fan out to (snakemake -n): a syntax
run per model and treebank, the UD download rule on the login node, the cross-language summary."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from bertlook.errors import BertlookError
from bertlook.pipeline.config import load_config, validate_config
from workflow_helpers import ROOT, job_counts, snakemake, tiny_config

OFFLINE = ROOT / "config" / "offline.yaml"
DE = {"label": "de", "language": "de", "source": "local",
      "local": {"train": "tests/fixtures/tiny.conllu", "dev": "tests/fixtures/tiny.conllu", "kind": "ud"}}
EWT = {"label": "ewt", "language": "en", "source": "ud"}


def _config(*treebanks, **main):
    config = copy.deepcopy(load_config(OFFLINE))
    config["treebank"].update(main)
    config["treebanks"] = [copy.deepcopy(t) for t in treebanks]
    return config


def _problems(config) -> str:
    with pytest.raises(BertlookError) as err:
        validate_config(config)
    return str(err.value)


def test_defaults_are_filled_inside_every_entry_and_the_main_treebank():
    config = validate_config(_config(DE, EWT))
    assert config["treebank"]["language"] == "en" and config["treebank"]["text"] == "spaces"
    assert config["treebank"]["label"] is None
    de, ewt = config["treebanks"]
    assert de["strip_subtypes"] is False and de["text"] == "spaces" and de["local"]["format"] == "auto"
    assert ewt["ud"]["repo"] == "UD_English-EWT" and ewt["ud"]["release"] == "r2.14"
    assert validate_config(_config())["treebanks"] == []  # left out: no extra treebank


def test_an_entry_needs_a_label_and_may_not_be_silver():
    assert "treebanks.0.label" in _problems(_config(dict(DE, label=None)))
    missing = _config(DE)
    del missing["treebanks"][0]["label"]
    assert "'label' is a required property" in _problems(missing)
    assert "treebanks.0.source" in _problems(_config({"label": "s", "source": "silver"}))


def test_labels_are_unique_including_the_main_treebank_s_language():
    assert "duplicate treebank label(s) ['de']" in _problems(_config(DE, dict(EWT, label="de")))
    # the main treebank (silver, language en, no label) is called "en"
    assert "duplicate treebank label(s) ['en']" in _problems(_config(dict(EWT, label="en")))
    validate_config(_config(dict(EWT, label="en"), label="silver-en"))


def test_run_names_may_not_collide():
    config = _config(DE)
    config["models"] = [{"label": "m", "name_or_path": "x"}, {"label": "m-de", "name_or_path": "y"}]
    assert "collides with another run directory" in _problems(config)
    config = _config()
    config["models"][0]["label"] = "languages"
    assert "reserved" in _problems(config)


def test_per_entry_local_and_ud_checks_name_the_entry():
    bad = dict(DE, local={"train": "a.txt2", "dev": None, "kind": "ud"})
    text = _problems(_config(bad))
    assert "treebanks.0.local.dev" in text and "treebanks.0.local.train" in text
    assert "treebanks.0.ud.base_url" in _problems(_config(dict(EWT, ud={"base_url": "https://x/{repo}"})))


def test_bad_language_codes_and_text_modes_are_schema_errors():
    assert "treebanks.0.language" in _problems(_config(dict(DE, language="German; rm -rf /")))
    assert "treebank.text" in _problems(_config(text="natural"))


# ---- the DAG ----------------------------------------------------------------------------------------



def _write(workdir: Path, model_dir: Path, treebanks) -> Path:
    config = tiny_config(workdir, model_dir)
    config["treebanks"] = treebanks
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.e2e
def test_treebanks_fan_out_a_syntax_run_per_model_and_treebank(tmp_path, tiny_bert_dir):
    de = copy.deepcopy(DE)
    de["local"] = {k: str(ROOT / v) if k != "kind" else v for k, v in de["local"].items()}
    _write(tmp_path, tiny_bert_dir, [de, EWT])
    proc = snakemake(tmp_path, "-n", "-p")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    counts = job_counts(out)
    # the main run (silver) + tiny-rand-de (local) build trees; tiny-rand-ewt downloads (treebank_ud)
    assert counts["treebank"] == 2 and counts["treebank_ud"] == 1
    # heads: one per run, plus the main run's norm twin ({maps} = _norm)
    assert counts["heads"] == 3 + 1 and counts["languages"] == 1
    # the segment steps and the probes run once, for the model run only
    # + the norm twin and ALTI's
    assert counts["segments"] == 1 and counts["surface_stats"] == 1 + 2 and counts["probes"] == 1
    assert counts["compare"] == 1 and counts["manifest"] == 1
    results = tmp_path / "results"
    for run in ("tiny-rand-de", "tiny-rand-ewt"):
        assert str(results / run / "tables" / "table1.csv") in out
        assert str(results / run / "tables" / "table3.csv") not in out
        assert str(results / run / "tables" / "attention_stats.csv") not in out
    assert str(results / "tiny-languages" / "rand" / "best_heads.csv") in out
    # the languages command names the treebanks in config order, main first, with their languages
    cmd = next(line for line in out.splitlines() if " languages " in line and "--head-accuracy" in line)
    assert re.findall(r"--label (\S+)", cmd) == ["en", "de", "ewt"]
    assert re.findall(r"--language (\S+)", cmd) == ["en", "de", "en"]
    assert cmd.index("tiny-rand/tables/head_accuracy.csv") < cmd.index("tiny-rand-de/tables/head_accuracy.csv")
    # the local treebank of the de run is its own input; the ud one downloads into its release's cache
    assert str(ROOT / "tests/fixtures/tiny.conllu") in out
    assert str(tmp_path / "resources" / "ud" / "UD_English-EWT" / "r2.14") in out


@pytest.mark.e2e
def test_without_treebanks_no_syntax_runs_and_no_languages_summary(tmp_path, tiny_bert_dir):
    _write(tmp_path, tiny_bert_dir, [])
    proc = snakemake(tmp_path, "-n")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert not re.search(r"^languages\s+\d+$", out, flags=re.M) and "treebank_ud" not in out


@pytest.mark.e2e  # snakemake -n
def test_the_multilingual_configuration_is_valid_and_plans_three_treebanks(tmp_path):
    """config/multilingual.yaml (docs/guide/languages.md): mBERT, English main treebank, German and
    Chinese UD treebanks; the DAG plans a UD download per treebank and one cross-language summary."""
    config = load_config(ROOT / "config" / "multilingual.yaml")
    assert [tb["label"] for tb in config["treebanks"]] == ["de", "zh"]
    assert config["treebanks"][1]["text"] == "original"
    config.update(results_dir=str(tmp_path / "results"), resources_dir=str(tmp_path / "resources"))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    proc = snakemake(tmp_path, "-n", configfile=path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"^treebank_ud\s+3$", out, flags=re.M) and re.search(r"^languages\s+1$", out, flags=re.M)
