"""The atlas (``bertlook atlas CONFIG``): every model of a configuration's ``models:`` list in one page.

:func:`atlas_data` reads each model's run directory ``{results_dir}/{run_name}-{label}`` with
:func:`bertlook.reporting.atlas_runs.model_metrics` (a model that did not run is a row that says why) and lays
the records out as columns (:func:`columns`: Table 1's best head per relation against its offset baseline, the
probes' UAS, the first-token and [SEP] / EOS shares and the entropy by relative depth, the head detectors, the
behaviour mix of the clustering) and profiles per layer. :func:`write_atlas` writes ``atlas.json`` (the data),
``atlas.csv`` (one row per model, one column per metric) and ``atlas.html`` (self-contained: the data embedded
as JSON, a sortable models x metrics table with family filters, a metric against parameter count and the
profiles against relative depth drawn as SVG by the page's own script; no network). :func:`tidy_frame` is the
notebook's view of an atlas (``bertlook.open_atlas``): one row per model x metric x layer.

Definitions: docs/guide/outputs.md#the-atlas
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from bertlook.errors import BertlookError
from bertlook.io_utils import json_safe, write_csv, write_json, write_text
from bertlook.reporting.atlas_runs import DETECTORS, FAILED, INCOMPLETE, NOT_RUN, RAN, model_metrics, relative_depth

FORMAT = "bertlook-atlas/1"
TEMPLATE = Path(__file__).with_name("atlas_template.html")
FIRST_ROLE = "first token ([CLS] / BOS)"
SEP_ROLE = "[SEP] / EOS token"
THIRDS = ("early", "middle", "late")
#: the profiles per layer: key, label, unit
PROFILES = (("first_share", f"attention to the {FIRST_ROLE}", "share"),
            ("sep_share", f"attention to the {SEP_ROLE}", "share"),
            ("entropy", "entropy of a row (nats)", "nats"),
            ("sink_random", "first-token (sink) share on repeated random tokens (head detectors)", "share"))
#: the wide CSV's leading columns (then one per metric)
FACTS = ("label", "status", "reason", "family", "kind", "model_type", "name_or_path", "revision", "gated",
         "parameters", "parameters_source", "layers", "heads", "first_token", "sep_token", "explorer", "problems")
TIDY_COLUMNS = ["model", "family", "kind", "status", "section", "metric", "label", "layer", "depth", "value",
                "detail"]


def _ordered_union(records: list[dict[str, Any]], prefix: str) -> list[str]:
    """The items of the metrics ``prefix:item`` of any record, in first-seen order."""
    out: list[str] = []
    for rec in records:
        for key in rec["values"]:
            if key.startswith(prefix) and key[len(prefix):] not in out:
                out.append(key[len(prefix):])
    return out


def columns(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The metric columns of the atlas, in page order: ``key`` (as in each record's ``values``), ``section``,
    ``label``, ``format`` (pct, num, int) and a ``title`` (what the number is)."""
    cols: list[dict[str, str]] = []

    def add(key: str, section: str, label: str, fmt: str, title: str) -> None:
        cols.append({"key": key, "section": section, "label": label, "format": fmt, "title": title})

    for rel in _ordered_union(records, "t1:"):
        add(f"t1:{rel}", "Table 1: best head", rel, "pct", f"best-head accuracy for {rel} (all heads, both "
            "directions); the cell's note: the head and the offset baseline")
    for rel in _ordered_union(records, "t1_baseline:"):
        add(f"t1_baseline:{rel}", "Table 1: offset baseline", rel, "pct", f"best fixed-offset baseline for {rel}")
    for probe in _ordered_union(records, "probe:"):
        add(f"probe:{probe}", "Probe UAS", probe, "pct", f"Table 3: UAS of probe {probe} (mean over seeds)")
    for key, section in (("first_share", f"share to the {FIRST_ROLE}"), ("sep_share", f"share to the {SEP_ROLE}"),
                         ("entropy", "entropy (nats)")):
        for third in THIRDS:
            if any(f"{key}:{third}" in r["values"] for r in records):
                add(f"{key}:{third}", section, f"{third} third", "num" if key == "entropy" else "pct",
                    f"mean over the heads of the {third} third of the layers (relative depth)")
    for name, words in DETECTORS:
        add(f"{name}:heads", "Head detectors", f"{words} heads", "int", f"heads whose {words} score is above the "
            "detectors' threshold (repeated random tokens)")
        add(f"{name}:best", "Head detectors", f"best {words}", "num", f"the highest {words} score of any head")
    for name in _ordered_union(records, "behaviour:"):
        add(f"behaviour:{name}", "Behaviour mix (JS clustering)", name, "pct", f"share of the heads labelled {name}")
    return cols


def atlas_data(config: dict[str, Any], *, title: str | None = None) -> dict[str, Any]:
    """The atlas of a validated configuration: one record per model in config order, the columns and profiles,
    the counts per status. Reads ``{results_dir}/{run_name}-{label}``; never fails because of one model."""
    results = Path(config["results_dir"])
    records = [model_metrics(results / f"{config['run_name']}-{m['label']}", m) for m in config["models"]]
    for rec in records:
        rec["first_token"] = (rec["roles"].get("first") or {}).get("token")
        rec["sep_token"] = (rec["roles"].get("sep") or {}).get("token")
    counts = {s: sum(r["status"] == s for r in records) for s in (RAN, FAILED, INCOMPLETE, NOT_RUN)}
    return {"format": FORMAT, "title": title or f"Atlas: {config['run_name']}", "run_name": config["run_name"],
            "roles": {"first": FIRST_ROLE, "sep": SEP_ROLE}, "columns": columns(records),
            "profiles": [{"key": k, "label": lab, "unit": u} for k, lab, u in PROFILES],
            "counts": counts, "models": records}


def wide_frame(data: dict[str, Any]):
    """``atlas.csv``: one row per model, :data:`FACTS` then one column per metric key (empty: not measured)."""
    import pandas as pd  # lazy: the CLI's parse time stays light

    keys = [c["key"] for c in data["columns"]]
    rows = []
    for rec in data["models"]:
        row = {f: rec.get(f) for f in FACTS}
        row["problems"] = "; ".join(rec.get("problems") or [])
        row.update({k: rec["values"].get(k) for k in keys})
        rows.append(row)
    df = pd.DataFrame(rows, columns=[*FACTS, *keys])
    for col in ("parameters", "layers", "heads", *(c["key"] for c in data["columns"] if c["format"] == "int")):
        df[col] = df[col].astype("Int64")  # counts stay integers beside the empty cells
    return df


def _section_of(data: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["key"]: c for c in data["columns"]}


def tidy_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model x metric (``layer``/``depth`` empty) and per model x profile x layer (``depth`` the
    layer's relative depth, :func:`bertlook.reporting.atlas_runs.relative_depth`); facts of the model
    (parameters, layers, heads; the token roles and the status in ``detail``) in section ``model``."""
    cols = _section_of(data)
    nan = math.nan
    out: list[dict[str, Any]] = []
    for rec in data["models"]:
        base = {"model": rec["label"], "family": rec["family"], "kind": rec.get("kind"), "status": rec["status"]}

        def row(section, metric, label, value, detail="", layer=nan, depth=nan):
            out.append({**base, "section": section, "metric": metric, "label": label, "layer": layer,
                        "depth": depth, "value": nan if value is None else float(value), "detail": detail})

        row("model", "status", "status", None, rec.get("reason") or rec["status"])
        if rec["status"] != RAN:
            continue
        for key, label in (("parameters", "parameters"), ("layers", "layers"), ("heads", "heads per layer")):
            row("model", key, label, rec.get(key), rec.get("parameters_source") or "" if key == "parameters" else "")
        for role, label in (("first", FIRST_ROLE), ("sep", SEP_ROLE)):
            r = rec["roles"].get(role) or {}
            row("model", f"{role}_token", label, None, f"{r.get('token') or '(none)'}: {r.get('note', '')}")
        for key, value in rec["values"].items():
            col = cols.get(key, {"section": "", "label": key})
            row(col["section"], key, col["label"], value, rec["details"].get(key, ""))
        for key, prof in rec["profiles"].items():
            L = len(prof)
            for layer, value in enumerate(prof, 1):
                row("profile", key, dict((k, lab) for k, lab, _ in PROFILES).get(key, key), value, "",
                    layer, relative_depth(layer, L))
    return out


def tidy_frame(data: dict[str, Any]):
    """:func:`tidy_rows` as a pandas DataFrame (columns :data:`TIDY_COLUMNS`)."""
    import pandas as pd  # lazy: the CLI's parse time stays light

    df = pd.DataFrame(tidy_rows(data), columns=TIDY_COLUMNS)
    df["value"] = df["value"].astype("float64")
    df["depth"] = df["depth"].astype("float64")
    df.attrs["run_name"] = data.get("run_name")
    return df


def atlas_html(data: dict[str, Any]) -> str:
    """The page: :data:`TEMPLATE` with ``data`` embedded as JSON (``</`` escaped: no early end of the script)."""
    payload = json.dumps(json_safe(data), ensure_ascii=True, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    title = str(data["title"]).replace("&", "&amp;").replace("<", "&lt;")
    return TEMPLATE.read_text(encoding="utf-8").replace("__TITLE__", title).replace("__DATA__", payload)


def write_atlas(data: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write ``atlas.json``, ``atlas.csv`` and ``atlas.html`` into ``out_dir`` (each atomically)."""
    out_dir = Path(out_dir)
    paths = {"json": out_dir / "atlas.json", "csv": out_dir / "atlas.csv", "html": out_dir / "atlas.html"}
    page, frame = atlas_html(data), wide_frame(data)  # everything made before anything is written
    write_json(paths["json"], json_safe(data))
    write_csv(paths["csv"], frame)
    write_text(paths["html"], page)
    return paths


def read_atlas(path: str | os.PathLike) -> dict[str, Any]:
    """An atlas's data from ``path``: the atlas folder or its ``atlas.json``."""
    path = Path(path)
    if path.is_dir():
        path = path / "atlas.json"
    if not path.is_file():
        raise BertlookError(f"{path}: no atlas (run `bertlook atlas CONFIG`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BertlookError(f"{path}: not readable as JSON: {err}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BertlookError(f"{path}: not a {FORMAT} file")
    return data
