"""The paper's printed numbers (``paper_reference.yaml``, shipped inside the package).

- :func:`load_reference` -- the whole YAML document as a dict (validated).
- :func:`table1_reference` -- Table 1 rows keyed by relation, optionally renamed into the relation
  scheme of another treebank (``"ud"``, ``"clearnlp"``), see ``docs/relations.md``.
- :func:`relation_map` -- SD -> UD / ClearNLP relation names.
- :func:`table2_reference` -- Table 2 (coreference antecedent selection) rows keyed by system.
- :func:`table3_reference` -- Table 3 (dependency-parsing probes, UAS) rows keyed by probe.
- :func:`figure_facts` -- checks read off the paper's figures and text (attention to [SEP], previous /
  next-token heads, [CLS] entropy, ...), each with the statistic that measures it.

Every number carries a ``source`` (where in the paper it is printed) and a ``tolerance``; the
validation run on loading enforces it.

Percentages stay percentages here (as printed); :mod:`bertlook.analyses.heads` converts them to
fractions for its CSV.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
from typing import Any, Sequence

import yaml

from bertlook.errors import BertlookError

RESOURCE = "paper_reference.yaml"
DIRECTIONS = ("dep2head", "head2dep")
#: Relation schemes a treebank can use, and the map that renames SD labels into each.
SCHEMES = {"sd": None, "ud": "relation_map_sd_to_ud", "clearnlp": "relation_map_sd_to_clearnlp"}
TABLE2_SYSTEMS = ("nearest", "head_match", "rule_based", "neural", "best_head")
TABLE2_COLUMNS = ("all", "pronoun", "proper", "nominal")
TABLE1_REQUIRED = ("relation", "head", "direction", "accuracy", "baseline", "baseline_offset", "tolerance", "source")
TABLE3_REQUIRED = ("probe", "uas", "tolerance", "source")
FACT_REQUIRED = ("id", "source", "description", "metric", "op", "value", "tolerance")
#: ``op`` of a figure fact; the run's number x passes when (relaxed by the tolerance t):
#: ``>`` x > v - t, ``>=`` x >= v - t, ``<`` x < v + t, ``<=`` x <= v + t, ``==`` |x - v| <= t.
FACT_OPS = (">", ">=", "<", "<=", "==")
FACT_AGGREGATES = ("mean", "max", "min", "count_above")
FILTER_OPS = (">", ">=", "<", "<=")


@functools.lru_cache(maxsize=1)
def _load_cached() -> dict[str, Any]:
    try:
        text = importlib.resources.files("bertlook.reporting").joinpath(RESOURCE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError) as err:
        raise BertlookError(f"bertlook/reporting/{RESOURCE}: cannot read the packaged paper reference: {err}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise BertlookError(f"bertlook/{RESOURCE}: invalid YAML: {err}") from None
    _validate(doc)
    return doc


def _keyed_rows(rows: Any, section: str, key: str, required: Sequence[str], where: str):
    """Yield ``(name, row)`` of a reference section after the checks every section shares: a
    non-empty list of mappings, each with the ``required`` keys and a unique ``key`` value."""
    if not isinstance(rows, list) or not rows:
        raise BertlookError(f"{where}: `{section}` must be a non-empty list")
    seen: set[str] = set()
    for k, row in enumerate(rows):
        if not isinstance(row, dict):
            raise BertlookError(f"{where}: {section}[{k}] is not a mapping")
        missing = [name for name in required if name not in row]
        if missing:
            raise BertlookError(f"{where}: {section}[{k}] ({row.get(key)!r}) lacks {', '.join(missing)}")
        name = str(row[key])
        if name in seen:
            raise BertlookError(f"{where}: {section} {key} {name!r} appears twice")
        seen.add(name)
        yield name, row


def _validate(doc: Any) -> None:
    where = f"bertlook/{RESOURCE}"
    if not isinstance(doc, dict) or not isinstance(doc.get("table1"), list):
        raise BertlookError(f"{where}: expected a mapping with a `table1` list")
    for rel, row in _keyed_rows(doc["table1"], "table1", "relation", TABLE1_REQUIRED, where):
        if row["direction"] not in DIRECTIONS:
            raise BertlookError(f"{where}: table1 {rel}: direction must be one of {DIRECTIONS}")
        parts = str(row["head"]).split("-")
        if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise BertlookError(f"{where}: table1 {rel}: head {row['head']!r} is not a 1-indexed 'L-H' label")
        for key in ("accuracy", "baseline", "tolerance"):
            if not isinstance(row[key], (int, float)) or isinstance(row[key], bool) or not 0 <= row[key] <= 100:
                raise BertlookError(f"{where}: table1 {rel}: {key} must be a percentage, got {row[key]!r}")
        if not isinstance(row["baseline_offset"], int) or isinstance(row["baseline_offset"], bool):
            raise BertlookError(f"{where}: table1 {rel}: baseline_offset must be an integer")
    if "table2" in doc:
        _validate_table2(doc["table2"], where)
    if "table3" in doc:
        _validate_table3(doc["table3"], where)
    if "figure_facts" in doc:
        _validate_figure_facts(doc["figure_facts"], where)
    if "kobayashi2020" in doc:
        _validate_figure_facts(doc["kobayashi2020"], where, section="kobayashi2020")
        for fid, fact in _keyed_rows(doc["kobayashi2020"], "kobayashi2020", "id", FACT_REQUIRED, where):
            if not str(fact.get("reading", "")).strip():
                raise BertlookError(f"{where}: kobayashi2020 {fid}: empty `reading` (how bertlook reads the claim)")
            if "comparable" in fact and not isinstance(fact["comparable"], bool):
                raise BertlookError(f"{where}: kobayashi2020 {fid}: `comparable` must be true or false")
            if fact["metric"]["aggregate"] == "count_above":
                raise BertlookError(f"{where}: kobayashi2020 {fid}: a ratio of shares needs mean/max/min")
    for name in ("relation_map_sd_to_ud", "relation_map_sd_to_clearnlp"):
        mapping = doc.get(name)
        if not isinstance(mapping, dict):
            raise BertlookError(f"{where}: missing mapping `{name}`")
        for sd, entry in mapping.items():
            target = entry.get("target") if isinstance(entry, dict) else None
            targets = target if isinstance(target, list) else [target]
            if not targets or not all(isinstance(t, str) and t for t in targets):
                raise BertlookError(f"{where}: {name}.{sd}: `target` must be a label or a list of labels")


def _validate_table2(rows: Any, where: str) -> None:
    if not isinstance(rows, list):
        raise BertlookError(f"{where}: `table2` must be a list")
    seen: set[str] = set()
    for k, row in enumerate(rows):
        if not isinstance(row, dict) or "system" not in row or "source" not in row:
            raise BertlookError(f"{where}: table2[{k}] must be a mapping with `system` and `source`")
        system = str(row["system"])
        if system not in TABLE2_SYSTEMS:
            raise BertlookError(f"{where}: table2[{k}]: unknown system {system!r} (expected one of {TABLE2_SYSTEMS})")
        if system in seen:
            raise BertlookError(f"{where}: table2 system {system!r} appears twice")
        seen.add(system)
        for key in TABLE2_COLUMNS:
            v = row.get(key)
            if v is None and system == "neural" and key != "all":
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 100:
                raise BertlookError(f"{where}: table2 {system}: {key} must be a percentage, got {v!r}")
        if "head" in row:
            parts = str(row["head"]).split("-")
            if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
                raise BertlookError(f"{where}: table2 {system}: head {row['head']!r} is not a 1-indexed 'L-H' label")
        if not _is_number(row.get("tolerance")) or row["tolerance"] < 0:
            raise BertlookError(f"{where}: table2 {system}: `tolerance` must be a number >= 0, got {row.get('tolerance')!r}")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _validate_table3(rows: Any, where: str) -> None:
    for probe, row in _keyed_rows(rows, "table3", "probe", TABLE3_REQUIRED, where):
        for key in ("uas", "printed_by_code"):
            if key in row and (not _is_number(row[key]) or not 0 <= row[key] <= 100):
                raise BertlookError(f"{where}: table3 {probe}: {key} must be a percentage, got {row[key]!r}")
        if not _is_number(row["tolerance"]) or row["tolerance"] < 0:
            raise BertlookError(f"{where}: table3 {probe}: `tolerance` must be a number >= 0, got {row['tolerance']!r}")
        if "comparable" in row and not isinstance(row["comparable"], bool):
            raise BertlookError(f"{where}: table3 {probe}: `comparable` must be true or false")
        if not str(row["source"]).strip():
            raise BertlookError(f"{where}: table3 {probe}: empty `source`")


def _validate_figure_facts(facts: Any, where: str, section: str = "figure_facts") -> None:
    for fid, fact in _keyed_rows(facts, section, "id", FACT_REQUIRED, where):
        name = f"{where}: figure fact {fid}" if section == "figure_facts" else f"{where}: {section} {fid}"
        if not str(fact["source"]).strip():
            raise BertlookError(f"{name}: empty `source`")
        if fact["op"] not in FACT_OPS:
            raise BertlookError(f"{name}: op {fact['op']!r} is not one of {', '.join(FACT_OPS)}")
        for key in ("value", "tolerance"):
            if not _is_number(fact[key]):
                raise BertlookError(f"{name}: `{key}` must be a number, got {fact[key]!r}")
        if fact["tolerance"] < 0:
            raise BertlookError(f"{name}: `tolerance` must be >= 0, got {fact['tolerance']!r}")
        _validate_metric(fact["metric"], name)


def _is_layer_range(layers: Any) -> bool:
    return (isinstance(layers, list) and len(layers) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in layers)
            and layers[0] <= layers[1])


def _validate_metric(metric: Any, name: str) -> None:
    if not isinstance(metric, dict) or not isinstance(metric.get("stat"), str) or not metric["stat"]:
        raise BertlookError(f"{name}: `metric` must be a mapping with a `stat` (a column of attention_stats.csv)")
    agg = metric.get("aggregate")
    if agg not in FACT_AGGREGATES:
        raise BertlookError(f"{name}: metric aggregate {agg!r} is not one of {', '.join(FACT_AGGREGATES)}")
    if agg == "count_above" and not _is_number(metric.get("threshold")):
        raise BertlookError(f"{name}: metric aggregate count_above needs a numeric `threshold`")
    layers = metric.get("layers")
    if not (layers is None or layers == "last" or _is_layer_range(layers)):
        raise BertlookError(f"{name}: metric layers must be null, \"last\" or [first, last] (1-indexed), got {layers!r}")
    ref_layers = metric.get("reference_layers")
    if ref_layers is not None and not _is_layer_range(ref_layers):
        raise BertlookError(f"{name}: metric reference_layers must be [first, last] (1-indexed), got {ref_layers!r}")
    flt = metric.get("where")
    if flt is not None and not (isinstance(flt, dict) and isinstance(flt.get("stat"), str)
                                and flt.get("op") in FILTER_OPS and _is_number(flt.get("value"))):
        raise BertlookError(f"{name}: metric `where` must be {{stat, op ({', '.join(FILTER_OPS)}), value}}, got {flt!r}")


def load_reference() -> dict[str, Any]:
    """The packaged ``paper_reference.yaml`` (``yaml.safe_load``), validated; a fresh copy per call."""
    return copy.deepcopy(_load_cached())


def relation_map(scheme: str = "ud") -> dict[str, dict[str, Any]]:
    """SD label -> ``{"target": label | [labels], "direction_reversed": bool, "note": str?}``."""
    key = SCHEMES.get(scheme)
    if scheme not in SCHEMES:
        raise BertlookError(f"unknown relation scheme {scheme!r} (expected one of: {', '.join(SCHEMES)})")
    if key is None:
        return {}
    out = {}
    for sd, entry in load_reference()[key].items():
        out[str(sd)] = {"direction_reversed": False, **entry}
    return out


def table1_reference(scheme: str = "sd") -> dict[str, dict[str, Any]]:
    """Paper Table 1 rows keyed by relation name (``"All"`` included), in the paper's row order.

    Each row: ``relation, head ("L-H", 1-indexed), direction, accuracy, baseline (percent),
    baseline_offset, tolerance, source`` (+ ``notebook_accuracy``, ``notebook_baseline``, ``note``
    where the paper and the authors' notebook disagree) and ``paper_relation`` (the SD label).

    ``scheme="sd"`` (default) keys rows by the paper's own labels. ``"clearnlp"`` / ``"ud"`` rename
    them into that scheme (``nn`` -> ``compound``, ``dobj`` -> ``obj`` in UD, ...); rows whose UD
    counterpart has the opposite arc direction (``prep``, ``pobj``) or several candidate labels are
    left out for UD, since no row of that name measures the same thing.
    """
    if scheme not in SCHEMES:
        raise BertlookError(f"unknown relation scheme {scheme!r} (expected one of: {', '.join(SCHEMES)})")
    mapping = relation_map(scheme)
    out: dict[str, dict[str, Any]] = {}
    for row in load_reference()["table1"]:
        sd = str(row["relation"])
        row = dict(row, paper_relation=sd)
        entry = mapping.get(sd)
        name = sd
        if entry is not None:
            if entry.get("direction_reversed") or isinstance(entry["target"], list):
                continue
            name = entry["target"]
        row["relation"] = name
        out[name] = row
    return out


def table2_reference() -> dict[str, dict[str, Any]]:
    """Paper Table 2 rows keyed by system, in the paper's row order.

    Systems: ``nearest``, ``head_match``, ``rule_based``, ``neural`` (All only; the other columns are
    ``None``), ``best_head`` (``head: "5-4"``). Each row: ``system, label, all, pronoun, proper,
    nominal`` (percent, as printed), ``source`` (+ ``head``, ``note``).
    """
    doc = load_reference()
    if "table2" not in doc:
        raise BertlookError(f"bertlook/{RESOURCE}: no `table2` section")
    return {str(row["system"]): dict(row) for row in doc["table2"]}


def table3_reference() -> dict[str, dict[str, Any]]:
    """Paper Table 3 rows keyed by probe id (:data:`bertlook.analyses.probes.catalogue.PROBES` plus ``structural_probe``).

    Each row: ``probe, label, uas`` (percent, as printed), ``tolerance`` (points), ``source``; plus
    ``printed_by_code`` (``attn_glove``: 78.0, what the authors' run printed), ``comparable: false``
    and ``metric: UUAS`` (``structural_probe``: context only) and ``note`` where relevant.
    ``comparable`` defaults to true.
    """
    doc = load_reference()
    if "table3" not in doc:
        raise BertlookError(f"bertlook/{RESOURCE}: no `table3` section")
    return {str(row["probe"]): {"comparable": True, **row} for row in doc["table3"]}


def figure_facts() -> list[dict[str, Any]]:
    """Checks read off the paper's figures and text, in file order.

    Each fact: ``id, source, description, metric, op, value, tolerance`` (+ ``scope_note``), where
    ``metric`` = ``{stat, aggregate, layers, threshold?, where?}`` says how to compute the run's number
    from ``tables/attention_stats.csv`` (see the comments in ``paper_reference.yaml`` and
    :data:`FACT_OPS`).
    """
    doc = load_reference()
    if "figure_facts" not in doc:
        raise BertlookError(f"bertlook/{RESOURCE}: no `figure_facts` section")
    return [dict(f) for f in doc["figure_facts"]]


def kobayashi_facts() -> list[dict[str, Any]]:
    """The second reference (Kobayashi et al. 2020, norm-based attention), in file order.

    Each fact is a figure fact (``id, source, description, metric, op, value, tolerance``) plus
    ``reading`` (bertlook's reading of the paper's qualitative claim) and ``comparable`` (default
    true); ``value``/``op`` apply to the ratio norm-based share / attention share of ``metric``.
    """
    doc = load_reference()
    if "kobayashi2020" not in doc:
        raise BertlookError(f"bertlook/{RESOURCE}: no `kobayashi2020` section")
    return [{"comparable": True, **f} for f in doc["kobayashi2020"]]
