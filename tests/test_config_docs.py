"""config/README.md documents every key of the configuration schema, and no key the schema lacks."""

from __future__ import annotations

import re

import yaml

from workflow_helpers import ROOT

DOC = ROOT / "config" / "README.md"
SCHEMAS = [ROOT / "workflow" / "schemas" / "config.schema.yaml", ROOT / "src" / "bertlook" / "pipeline" / "config.schema.yaml"]


def schema_keys(schema: dict, prefix: str = "") -> set[str]:
    """Dotted names of every property (``extraction.shards``); list items as ``models[].label``."""
    keys: set[str] = set()
    for name, sub in (schema.get("properties") or {}).items():
        key = prefix + name
        keys.add(key)
        keys |= schema_keys(sub, key + ".")
        items = sub.get("items")
        if isinstance(items, dict) and items.get("properties"):
            keys |= schema_keys(items, key + "[].")
    return keys


def test_schema_walk_finds_nested_and_list_keys():
    keys = schema_keys(yaml.safe_load(SCHEMAS[0].read_text()))
    assert {"run_name", "models[].label", "extraction.shards", "treebank.ud.base_url",
            "treebank.silver.max_articles", "gradients.mask_mode"} <= keys


def documented_keys(doc: str, top: list[str]) -> tuple[set[str], set[str]]:
    """(keys in the key column of a table row, keys in a section heading) of config/README.md."""
    names = "|".join(re.escape(k) for k in top)
    key = rf"((?:{names})(?:\[\])?(?:\.[A-Za-z0-9_]+)*)"
    rows = set(re.findall(rf"^\| `{key}` \|", doc, flags=re.M))
    headings = set(re.findall(rf"^#+ `{key}`", doc, flags=re.M))
    return rows, headings


def test_every_schema_key_is_documented():
    """A key added to the schema without its row (or section) in config/README.md fails here."""
    doc = DOC.read_text()
    for path in SCHEMAS:
        schema = yaml.safe_load(path.read_text())
        rows, headings = documented_keys(doc, list(schema["properties"]))
        # `treebanks` entries have the keys of `treebank` (one YAML anchor in the schema; the README's
        # `treebanks` row says so): treebanks[].X is explained by the row of treebank.X
        rows |= {"treebanks[]." + k.split(".", 1)[1] for k in rows | headings if k.startswith("treebank.")}
        missing = sorted(schema_keys(schema) - rows - headings)
        assert not missing, f"{path.relative_to(ROOT)}: keys not explained in config/README.md: {missing}"


def test_documented_keys_exist():
    """A key removed from (or misspelt against) the schema but still in config/README.md fails here."""
    schema = yaml.safe_load(SCHEMAS[0].read_text())
    rows, headings = documented_keys(DOC.read_text(), list(schema["properties"]))
    assert len(rows) > 50 and len(headings) > 10
    assert sorted((rows | headings) - schema_keys(schema)) == []


def test_the_shipped_configurations_are_named():
    doc = DOC.read_text()
    for name in ("config.yaml", "config/offline.yaml", "config/multilingual.yaml", ".test/config.yaml"):
        assert f"`{name}`" in doc
