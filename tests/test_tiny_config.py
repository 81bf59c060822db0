""".test/config.yaml, the tiny configuration (`snakemake --configfile .test/config.yaml --cores 2`,
`make lint`, and the start of tests/workflow_helpers.tiny_config): valid, in step with the offline
configuration, and planning every rule of the workflow (dry runs only)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from bertlook.pipeline.config import load_yaml_strict, validate_config
from workflow_helpers import ROOT, SNAKEMAKE, TINY_CONFIG, tiny_config

ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def _key_paths(data, prefix=""):
    """Dotted names of every mapping key (lists are leaves)."""
    if not isinstance(data, dict):
        return set()
    out = set()
    for key, value in data.items():
        name = f"{prefix}{key}"
        out |= {name} | _key_paths(value, name + ".")
    return out


def test_tiny_config_validates():
    raw = load_yaml_strict(TINY_CONFIG)  # strict: a duplicate key is an error
    config = validate_config(raw, source=str(TINY_CONFIG))
    assert config["run_name"] == "tiny" and config["segments"]["n_segments"] <= 20
    assert config["models"][0]["name_or_path"].startswith("package:")  # offline: a PyPI package
    assert config["wikipedia"]["path"].startswith("package:") and config["glove"]["path"].startswith("package:")


def test_tiny_config_sets_the_keys_the_offline_config_sets():
    """Shrunk from config/offline.yaml: a key added there (with a tiny value) belongs here too."""
    offline = yaml.safe_load((ROOT / "config" / "offline.yaml").read_text())
    tiny = yaml.safe_load(TINY_CONFIG.read_text())
    assert _key_paths(offline) - _key_paths(tiny) == set()


def test_tiny_config_helper_starts_from_the_file(tmp_path):
    """workflow_helpers.tiny_config = .test/config.yaml with the test's model and paths."""
    tiny = yaml.safe_load(TINY_CONFIG.read_text())
    config = tiny_config(tmp_path, tmp_path / "model")
    changed = {key for key in tiny if config[key] != tiny[key]}
    assert changed == {"results_dir", "resources_dir", "models", "coref"}
    assert config["coref"]["conll"] == [str(ROOT / p) for p in tiny["coref"]["conll"]]
    assert all(Path(p).is_file() for p in config["coref"]["conll"])
    validate_config(config)


@pytest.mark.e2e  # snakemake --lint, --list-rules and -n
def test_tiny_config_lints_and_plans_every_rule(tmp_path):
    """`snakemake --lint` is clean and `snakemake -n` schedules a job of every rule the workflow
    defines with this configuration (coreference included), run as a user would: relative paths."""
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # coref.conll is relative to the run directory
    base = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--configfile", str(TINY_CONFIG),
            "--directory", str(tmp_path)]
    lint = subprocess.run(base + ["--lint"], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert lint.returncode == 0 and "Congratulations" in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    rules = subprocess.run(base + ["--list-rules"], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert rules.returncode == 0, rules.stderr[-3000:]
    defined = {name for name in rules.stdout.split() if not name.startswith("_")}  # the templates make no job
    assert {"all", "segments", "extract_segments", "heads", "probes", "coref_extract", "gradients"} <= defined
    dry = subprocess.run(base + ["-n", "--cores", "2"], capture_output=True, text=True, env=ENV, cwd=ROOT,
                         timeout=300)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    planned = set(re.findall(r"^(?:local)?rule (\w+):", dry.stdout, flags=re.M)) | {"all"}
    assert defined - planned == set(), f"rules the tiny configuration never plans: {sorted(defined - planned)}"
    assert "results/tiny-minilm/tables/table1.csv" in dry.stdout
