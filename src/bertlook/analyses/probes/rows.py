"""Table 3's rows (no torch): the frame of rows, plain rows, and the rows file of ``--rows-out`` / ``--add-rows``.

:func:`table_frame` builds the Table 3 frame (:data:`TABLE_COLUMNS`, per-seed runs and
store summaries in ``attrs``); :func:`table_rows` turns it back into plain values. ``bertlook probes --rows-out
JSON`` writes the rows it computed (:func:`write_probe_rows`, e.g. only random_init_attn_glove, on the
random-init stores), ``--add-rows JSON`` reads them (:func:`read_probe_rows`, validated) and puts them into the
table of another run in the order of :data:`~bertlook.analyses.probes.catalogue.PROBES` (:func:`add_probe_rows`): the
workflow's probes_random / probes rules, so that the model's word stores and the random-init ones never need
to be on disk together. Plain JSON (no NaN: missing numbers are null).
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import pandas as pd

from bertlook.analyses.probes.catalogue import PROBES, TABLE_COLUMNS, is_missing
from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path, json_safe

ROWS_FORMAT = "bertlook-probe-rows"
ROWS_VERSION = 2  # 2: no paper_uas (the paper's numbers are joined by reporting.paper_join)
ROWS_NUMBERS = ("uas_mean", "uas_sd", "uas_mst_mean", "uas_mst_sd")
ROWS_INPUTS = ("train_attention", "dev_attention", "random_train_attention", "random_dev_attention")
# the settings the rows were computed with: --add-rows refuses rows computed with other ones
ROWS_SETTINGS = ("seeds", "epochs", "batch_size", "lr", "mst", "max_train_sentences", "glove_spec")


def table_frame(rows: list[dict[str, Any]], runs: list[dict[str, Any]], data: dict[str, Any]) -> "pd.DataFrame":
    """The Table 3 frame of ``rows`` (dicts of :data:`TABLE_COLUMNS`), per-seed ``runs``
    and store summaries ``data`` in ``attrs``."""
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    for col in ROWS_NUMBERS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    df["n_seeds"] = pd.array(df["n_seeds"].tolist(), dtype="Int64")
    df.attrs["runs"] = runs
    df.attrs["data"] = data
    return df


def table_rows(df: "pd.DataFrame") -> list[dict[str, Any]]:
    """The rows of a Table 3 frame as plain values: floats (exact), None for missing numbers, ints."""
    out = []
    for rec in df.to_dict("records"):
        row: dict[str, Any] = {}
        for col in TABLE_COLUMNS:
            v = rec.get(col)
            if col == "probe":
                row[col] = str(v)
            elif col == "note":
                row[col] = "" if is_missing(v) or v is None else str(v)
            elif col == "n_seeds":
                row[col] = None if is_missing(v) or v is None else int(v)
            else:
                row[col] = None if is_missing(v) or v is None or not math.isfinite(float(v)) else float(v)
        out.append(row)
    return out


def write_probe_rows(path, df: "pd.DataFrame", *, settings: dict[str, Any], inputs: dict[str, Any],
                     glove: Any = None, seconds: float | None = None) -> dict[str, Any]:
    """Write the rows of ``df`` (with its per-seed runs and store summaries) for ``--add-rows``."""
    rows = table_rows(df)
    doc = {
        "format": ROWS_FORMAT,
        "version": ROWS_VERSION,
        "probes": [r["probe"] for r in rows],
        "settings": {k: settings.get(k) for k in ROWS_SETTINGS},
        "inputs": {k: (None if inputs.get(k) is None else str(inputs[k])) for k in ROWS_INPUTS},
        "glove": glove,
        "table": rows,
        "runs": list(df.attrs.get("runs", [])),
        "data": dict(df.attrs.get("data", {})),
        "seconds": seconds,
    }
    doc = json_safe(doc)
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, ensure_ascii=False, allow_nan=False)
            fh.write("\n")
    return doc


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_probe_rows(path, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rows file ``path`` written by ``--rows-out``, validated; with ``settings`` (this run's
    :data:`ROWS_SETTINGS`) the rows must have been computed with the same ones."""
    def bad(msg: str) -> BertlookError:
        return BertlookError(f"{path}: {msg} (not a probe rows file of `bertlook probes --rows-out`?)")

    doc = _load_json(path)
    if not isinstance(doc, dict):
        raise bad("expected a JSON object")
    if doc.get("format") == ROWS_FORMAT and doc.get("version") != ROWS_VERSION:
        raise BertlookError(f"{path}: probe rows of format version {doc.get('version')!r}, this bertlook reads "
                            f"version {ROWS_VERSION}: written by another bertlook version; rerun the job that "
                            "wrote them (`snakemake --forcerun probes_random`)")
    if doc.get("format") != ROWS_FORMAT or doc.get("version") != ROWS_VERSION:
        raise bad(f"format {doc.get('format')!r} version {doc.get('version')!r}, expected {ROWS_FORMAT!r} "
                  f"version {ROWS_VERSION}")
    missing = [k for k in ("probes", "settings", "inputs", "glove", "table", "runs", "data") if k not in doc]
    if missing:
        raise bad(f"missing key(s) {', '.join(missing)}")
    probes = doc["probes"]
    if not isinstance(probes, list) or not all(isinstance(p, str) for p in probes):
        raise bad("'probes' must be a list of probe names")
    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise bad(f"unknown probe(s) {', '.join(map(repr, unknown))}; choose from {', '.join(PROBES)}")
    if len(set(probes)) != len(probes):
        raise bad(f"a probe is listed twice in 'probes': {probes}")
    _check_table(doc["table"], probes, bad)
    runs = doc["runs"]
    if not isinstance(runs, list) or not all(isinstance(r, dict) and r.get("probe") in probes for r in runs):
        raise bad("'runs' must be a list of objects, each with the 'probe' of one of the rows")
    if not isinstance(doc["data"], dict) or not all(isinstance(v, dict) for v in doc["data"].values()):
        raise bad("'data' must be an object of store summaries")
    if not isinstance(doc["inputs"], dict) or not all(
            doc["inputs"].get(k) is None or isinstance(doc["inputs"][k], str) for k in ROWS_INPUTS):
        raise bad(f"'inputs' must be an object with the paths (or null) {', '.join(ROWS_INPUTS)}")
    if doc["glove"] is not None and not isinstance(doc["glove"], dict):
        raise bad("'glove' must be an object or null")
    got = doc["settings"]
    if not isinstance(got, dict) or set(got) != set(ROWS_SETTINGS):
        raise bad(f"'settings' must be an object with exactly the keys {', '.join(ROWS_SETTINGS)}")
    if settings is not None:
        for key in ROWS_SETTINGS:
            if got[key] != settings.get(key):
                raise BertlookError(f"{path}: the rows were computed with {key} {got[key]!r}, this run has "
                                    f"{settings.get(key)!r} (rerun the job that wrote them)")
    return doc


def _load_json(path) -> Any:
    """The JSON document of ``path`` (plain JSON: NaN and Infinity refused)."""
    def no_constant(name: str):
        raise ValueError(f"{name} is not plain JSON")

    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, parse_constant=no_constant)
    except FileNotFoundError:
        raise BertlookError(f"{path}: probe rows file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BertlookError(f"{path}: cannot read the probe rows file: {err}") from None
    except json.JSONDecodeError as err:
        raise BertlookError(f"{path}:{err.lineno}: the probe rows file is not valid JSON: {err.msg}") from None
    except ValueError as err:
        raise BertlookError(f"{path}: the probe rows file is not plain JSON: {err}") from None


def _check_table(table: Any, probes: list[str], bad) -> None:
    """The ``table`` of a rows file: one row of :data:`~bertlook.analyses.probes.catalogue.TABLE_COLUMNS` per probe of
    ``probes``, in order."""
    if not isinstance(table, list) or len(table) != len(probes):
        raise bad(f"'table' must be a list of {len(probes)} row(s), one per probe")
    for i, (row, probe) in enumerate(zip(table, probes)):
        where = f"table row {i + 1}"
        if not isinstance(row, dict) or set(row) != set(TABLE_COLUMNS):
            raise bad(f"{where}: expected an object with exactly the keys {', '.join(TABLE_COLUMNS)}")
        if row["probe"] != probe:
            raise bad(f"{where}: probe {row['probe']!r}, 'probes' says {probe!r}")
        for col in ROWS_NUMBERS:
            if row[col] is not None and not _is_number(row[col]):
                raise bad(f"{where}: {col} must be a number or null, got {row[col]!r}")
        n = row["n_seeds"]
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise bad(f"{where}: n_seeds must be an integer >= 0 or null, got {n!r}")
        if not isinstance(row["note"], str):
            raise bad(f"{where}: note must be a string, got {row['note']!r}")


def add_probe_rows(df: "pd.DataFrame", added: Sequence[dict[str, Any]]) -> "pd.DataFrame":
    """``df`` with the rows (and per-seed runs, store summaries) of :func:`read_probe_rows` documents
    added, rows and runs in the order of :data:`PROBES` (a probe must not be in two of
    them)."""
    rows = table_rows(df)
    runs = list(df.attrs.get("runs", []))
    data = dict(df.attrs.get("data", {}))
    seen = {r["probe"] for r in rows}
    for doc in added:
        twice = sorted(seen & set(doc["probes"]))
        if twice:
            raise BertlookError(f"probe(s) {', '.join(twice)} computed twice (--probes and --add-rows, or two "
                                "--add-rows)")
        seen |= set(doc["probes"])
        rows += [dict(r) for r in doc["table"]]
        runs += list(doc["runs"])
        data.update(doc["data"])
    rank = {p: i for i, p in enumerate(PROBES)}
    rows.sort(key=lambda r: rank[r["probe"]])
    runs = sorted(runs, key=lambda r: rank.get(r.get("probe"), len(PROBES)))
    order = ("train", "dev", "random_train", "random_dev")
    data = {**{k: data[k] for k in order if k in data}, **{k: v for k, v in data.items() if k not in order}}
    return table_frame(rows, runs, data)
