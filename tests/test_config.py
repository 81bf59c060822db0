"""Configuration loading and validation (root config.yaml and config/offline.yaml)."""

from pathlib import Path

import pytest
import yaml

from bertlook.config import load_config, resolve_data_path, run_names, schema_path, validate_config
from bertlook.errors import BertlookError

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_configs_are_valid():
    paper = load_config(ROOT / "config.yaml")
    offline = load_config(ROOT / "config" / "offline.yaml")
    assert run_names(paper) == ["paper-bert-base-uncased"]
    assert run_names(offline) == ["offline-minilm"]
    assert paper["segments"] == {"n_segments": 1000, "max_seq_len": 128}
    assert paper["extraction"]["segment_ids"] == "zeros"
    assert resolve_data_path(offline["wikipedia"]["path"]).is_file()


def test_packaged_schema_matches_workflow_schema():
    packaged = ROOT / "src" / "bertlook" / "config.schema.yaml"
    assert packaged.read_text() == (ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text()
    assert schema_path().is_file()


def _paper():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c.update(bogus=1), "bogus"),
        (lambda c: c["extraction"].update(segment_ids="ab"), "extraction.segment_ids"),
        (lambda c: c["segments"].update(n_segments=0), "segments.n_segments"),
        (lambda c: c["models"][0].update(label="has space"), "models.0.label"),
        (lambda c: c["clustering"].update(mds_eps=-1), "clustering.mds_eps"),
        (lambda c: c["figures"].update(example_heads=["8"]), "figures.example_heads"),
    ],
)
def test_bad_key_or_value_is_named(mutate, key):
    config = _paper()
    mutate(config)
    with pytest.raises(BertlookError, match=key.replace(".", r"\.")):
        validate_config(config)


def test_duplicate_labels_and_defaults():
    config = _paper()
    config["models"].append(dict(config["models"][0]))
    with pytest.raises(BertlookError, match="duplicate label"):
        validate_config(config)
    config = _paper()
    del config["extraction"]["shard_mb"]
    assert validate_config(config)["extraction"]["shard_mb"] == 256


def test_yaml_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("run_name: x\nmodels: [\n")
    with pytest.raises(BertlookError, match=r"c\.yaml:\d+: not valid YAML"):
        load_config(bad)
    with pytest.raises(BertlookError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_package_data_path_errors():
    with pytest.raises(BertlookError, match="not installed"):
        resolve_data_path("package:no_such_pkg_xyz/a.txt")
    with pytest.raises(BertlookError, match="does not exist"):
        resolve_data_path("package:gensim/no/such/file.bz2")
