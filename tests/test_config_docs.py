"""config/README.md documents every key of the configuration schema, and no key the schema lacks; a key
may instead document itself with a ``description`` in the schema (a step added later: docs/ADDING_A_STEP.md).

BERTLOOK_DOCS_ROOT: check another copy of the project (tests/test_toy_step.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from workflow_helpers import ROOT as REPO

ROOT = Path(os.environ.get("BERTLOOK_DOCS_ROOT") or REPO)
DOC = ROOT / "config" / "README.md"
SCHEMAS = [ROOT / "workflow" / "schemas" / "config.schema.yaml",
           ROOT / "src" / "bertlook" / "pipeline" / "config.schema.yaml"]


def schema_keys(schema: dict, prefix: str = "", *, described: bool | None = None) -> set[str]:
    """Dotted names of every property (``extraction.shards``); list items as ``models[].label``;
    ``described``: only those with (True) or without (False) a ``description`` in the schema."""
    keys: set[str] = set()
    for name, sub in (schema.get("properties") or {}).items():
        key = prefix + name
        if described is None or bool(sub.get("description")) == described:
            keys.add(key)
        keys |= schema_keys(sub, key + ".", described=described)
        items = sub.get("items")
        if isinstance(items, dict) and items.get("properties"):
            keys |= schema_keys(items, key + "[].", described=described)
    return keys


def test_schema_walk_finds_nested_and_list_keys():
    keys = schema_keys(yaml.safe_load(SCHEMAS[0].read_text()))
    assert {"run_name", "models[].label", "extraction.shards", "treebank.ud.base_url",
            "treebank.silver.max_articles", "gradients.mask_mode"} <= keys
    mini = {"properties": {"toy": {"description": "a step", "properties": {"enabled": {"type": "boolean"},
                                                                           "n": {"description": "how many"}}}}}
    assert schema_keys(mini, described=False) == {"toy.enabled"}  # still needs a README row
    assert schema_keys(mini, described=True) == {"toy", "toy.n"}


def documented_keys(doc: str, top: list[str]) -> tuple[set[str], set[str]]:
    """(keys in the key column of a table row, keys in a section heading) of config/README.md."""
    names = "|".join(re.escape(k) for k in top)
    key = rf"((?:{names})(?:\[\])?(?:\.[A-Za-z0-9_]+)*)"
    rows = set(re.findall(rf"^\| `{key}` \|", doc, flags=re.M))
    headings = set(re.findall(rf"^#+ `{key}`", doc, flags=re.M))
    return rows, headings


def test_every_schema_key_is_documented():
    """A key added to the schema without its row (or section) in config/README.md, or a description of its
    own in the schema, fails here."""
    doc = DOC.read_text()
    for path in SCHEMAS:
        schema = yaml.safe_load(path.read_text())
        rows, headings = documented_keys(doc, list(schema["properties"]))
        # `treebanks` entries have the keys of `treebank` (one YAML anchor in the schema; the README's
        # `treebanks` row says so): treebanks[].X is explained by the row of treebank.X
        rows |= {"treebanks[]." + k.split(".", 1)[1] for k in rows | headings if k.startswith("treebank.")}
        missing = sorted(schema_keys(schema, described=False) - rows - headings)
        assert not missing, (f"{path.relative_to(ROOT)}: keys neither explained in config/README.md nor "
                             f"described in the schema: {missing}")


def test_documented_keys_exist():
    """A key removed from (or misspelt against) the schema but still in config/README.md fails here."""
    schema = yaml.safe_load(SCHEMAS[0].read_text())
    rows, headings = documented_keys(DOC.read_text(), list(schema["properties"]))
    assert len(rows) > 50 and len(headings) > 10
    assert sorted((rows | headings) - schema_keys(schema)) == []


def test_the_shipped_configurations_are_named():
    doc = DOC.read_text()
    for name in ("config.yaml", "config/offline.yaml", "config/multilingual.yaml", "config/gpt2.yaml",
                 "config/long-context.yaml", ".test/config.yaml"):
        assert f"`{name}`" in doc
