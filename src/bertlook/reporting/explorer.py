"""The head explorer (``bertlook explorer``): one self-contained HTML page about every head of a run.

:func:`explorer_data` joins what the run's tables say about each head -- the report card
(``head_report.csv``), its relations with accuracy and word counts (``head_accuracy.csv``), its nearest heads in
the MDS embedding of the Jensen-Shannon clustering (``head_clusters.csv``), the [SEP] share and, with the
norm-based statistics, the norm/attention ratio of the [CLS] share (``attention_stats{,_norm}.csv``) -- into
one JSON object; :func:`explorer_html` embeds it in a page with no server, no network and no library: a
layer x head grid coloured by a chosen metric (values in each cell's label, keyboard navigation with the
arrow keys), and the selected head's card, relations and neighbours. Numbers only come from the tables;
nothing is recomputed.

Definitions: docs/definitions.md#head-explorer
"""

from __future__ import annotations

import base64
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from bertlook.analyses.contribution_explorer import read_explorer_maps
from bertlook.analyses.rollout import rollout
from bertlook.attention.fig1_example import fig1_special, fig1_window, load_fig1_example
from bertlook.attention.store import open_store
from bertlook.errors import BertlookError
from bertlook.io_utils import read_csv_strings

#: the grid's metrics: (key, label, kind); numeric ones are coloured on a sequential scale
METRICS = (
    ("behaviour", "behaviour (JS clustering)", "category"),
    ("entropy", "entropy of a row (nats)", "numeric"),
    ("sink", "[CLS] / first-token (sink) share", "numeric"),
    ("sep", "[SEP] share", "numeric"),
    ("best_accuracy", "best relation accuracy", "numeric"),
    ("importance", "importance (Michel et al. 2019)", "numeric"),
    ("positional_fraction", "positional fraction", "numeric"),
    ("prev_token", "previous-token score", "numeric"),
    ("induction", "induction score", "numeric"),
    ("norm_ratio", "[CLS] share: norm-based / attention", "numeric"),
    ("alti_sep", "[SEP] share of ALTI per head", "numeric"),
    ("ablation_loss", "loss change of removing the head", "numeric"),
)
CARD_COLUMNS = ("behaviour", "entropy", "confidence", "sink", "positional_offset", "positional_fraction",
                "best_relation", "best_direction", "best_accuracy", "coref_accuracy", "importance",
                "prev_token", "duplicate_token", "induction", "alti_sink", "alti_sep", "ablation_loss")


def _number(text: str, where: str) -> float | None:
    text = str(text).strip()
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise BertlookError(f"{where}: expected a number, got {text!r}") from None
    return value if math.isfinite(value) else None


def _by_head(df, path: Path) -> dict[str, int]:
    """``"L-H"`` -> row index, each head once."""
    out: dict[str, int] = {}
    for i, (layer, head) in enumerate(zip(df["layer"], df["head"])):
        label = f"{int(layer)}-{int(head)}"
        if label in out:
            raise BertlookError(f"{path}:{i + 2}: head {label} appears twice")
        out[label] = i
    return out


WILSON_Z = 1.959963984540054  # the normal quantile of a two-sided 95% interval


def wilson_interval(accuracy: float | None, count: int, z: float = WILSON_Z) -> tuple[float | None, float | None]:
    """The 95% Wilson score interval of a proportion ``accuracy`` of ``count`` words (words taken as independent:
    narrower than Table 1's bootstrap over sentences, which this page cannot redo without the maps)."""
    if accuracy is None or count <= 0:
        return None, None
    n, p = float(count), float(accuracy)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _baselines(path: Path | None) -> dict[str, dict[str, Any]]:
    """Per relation of Table 1 its best offset baseline: offset, accuracy and bootstrap interval (table1.csv)."""
    if path is None:
        return {}
    cols = ("relation", "baseline_offset", "baseline_accuracy", "baseline_ci_low", "baseline_ci_high")
    df = read_csv_strings(path, required=cols, what="Table 1")
    out = {}
    for i, r in df.iterrows():
        where = f"{path}:{i + 2}"
        offset = _number(r["baseline_offset"], where)
        out[r["relation"].strip()] = {"offset": None if offset is None else int(offset),
                                      **{k: _number(r[f"baseline_{k}"], where) for k in ("accuracy", "ci_low",
                                                                                       "ci_high")}}
    return out


def _relations(path: Path, labels: list[str], top: int,
               baselines: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per head its ``top`` relations by accuracy (both directions; "All" first), from head_accuracy.csv, each
    with its Wilson interval (:func:`wilson_interval`) and the relation's offset baseline (``baselines``)."""
    df = read_csv_strings(path, required=("relation", "layer", "head", "direction", "accuracy", "count"),
                          what="head accuracy table")
    rows: dict[str, list[dict[str, Any]]] = {lab: [] for lab in labels}
    for i, r in df.iterrows():
        label = f"{int(r['layer'])}-{int(r['head'])}"
        if label not in rows:
            raise BertlookError(f"{path}:{i + 2}: head {label} is not in the report card")
        accuracy, count, relation = _number(r["accuracy"], f"{path}:{i + 2}"), int(r["count"]), r["relation"].strip()
        low, high = wilson_interval(accuracy, count)
        rows[label].append({"relation": relation, "direction": r["direction"].strip(), "accuracy": accuracy,
                            "ci_low": low, "ci_high": high, "count": count, "baseline": baselines.get(relation)})
    for label, rel in rows.items():
        rel.sort(key=lambda x: (x["relation"] != "All", -(x["accuracy"] or 0.0), x["relation"], x["direction"]))
        rows[label] = rel[:top]
    return rows


def _neighbours(path: Path, labels: list[str], k: int) -> dict[str, list[str]]:
    """Per head the ``k`` nearest heads in the MDS embedding of head_clusters.csv (Euclidean; ties by label)."""
    df = read_csv_strings(path, required=("layer", "head", "x", "y"), what="head clusters table")
    pos = {f"{int(l)}-{int(h)}": (_number(x, f"{path}:{i + 2}"), _number(y, f"{path}:{i + 2}"))
           for i, (l, h, x, y) in enumerate(zip(df["layer"], df["head"], df["x"], df["y"]))}
    out = {}
    for lab in labels:
        if lab not in pos or None in pos[lab]:
            out[lab] = []
            continue
        x0, y0 = pos[lab]
        dist = sorted((math.hypot(x - x0, y - y0), other) for other, (x, y) in pos.items()
                      if other != lab and x is not None and y is not None)
        out[lab] = [other for _, other in dist[:k]]
    return out


def _stats_column(path: Path | None, column: str, labels: list[str]) -> dict[str, float | None]:
    if path is None:
        return {lab: None for lab in labels}
    df = read_csv_strings(path, required=("layer", "head", column), what="surface statistics")
    index = _by_head(df, path)
    return {lab: (_number(df[column].iloc[index[lab]], f"{path}:{index[lab] + 2}") if lab in index else None)
            for lab in labels}


def explorer_data(head_report: str | os.PathLike, head_accuracy: str | os.PathLike, clusters: str | os.PathLike,
                  stats: str | os.PathLike, norm_stats: str | os.PathLike | None = None, *, run: str,
                  table1: str | os.PathLike | None = None,
                  top_relations: int = 8, neighbours: int = 5, sample: dict[str, Any] | None = None) -> dict[str, Any]:
    """The explorer's data: the grid's layout, every metric's per-head values and each head's card, relations
    (with Table 1's offset baselines, ``table1``) and nearest neighbours, and the maps of ``sample``
    (:func:`explorer_sample`). Bad input is a BertlookError naming the file and line."""
    head_report = Path(head_report)
    card_df = read_csv_strings(head_report, required=("layer", "head", *CARD_COLUMNS), what="head report card")
    index = _by_head(card_df, head_report)
    labels = list(index)
    L = max(int(x) for x in card_df["layer"])
    H = max(int(x) for x in card_df["head"])
    if len(labels) != L * H:
        raise BertlookError(f"{head_report}: {len(labels)} heads, expected {L} x {H}")
    sep = _stats_column(Path(stats), "sep", labels)
    cls_att = _stats_column(Path(stats), "cls", labels)
    cls_norm = _stats_column(Path(norm_stats) if norm_stats else None, "cls", labels)
    heads = []
    for lab in labels:
        row = card_df.iloc[index[lab]]
        where = f"{head_report}:{index[lab] + 2}"
        card = {c: (row[c].strip() if c in ("behaviour", "best_relation", "best_direction")
                    else _number(row[c], where)) for c in CARD_COLUMNS}
        ratio = (cls_norm[lab] / cls_att[lab]) if cls_norm[lab] is not None and cls_att[lab] else None
        heads.append({"label": lab, "layer": int(row["layer"]), "head": int(row["head"]), "card": card,
                      "metrics": {"sep": sep[lab], "norm_ratio": ratio,
                                  **{m: card.get(m) for m, _, _ in METRICS if m not in ("sep", "norm_ratio")}}})
    heads.sort(key=lambda h: (h["layer"], h["head"]))
    relations = _relations(Path(head_accuracy), labels, top_relations, _baselines(Path(table1) if table1 else None))
    near = _neighbours(Path(clusters), labels, neighbours)
    for h in heads:
        h["relations"], h["neighbours"] = relations[h["label"]], near[h["label"]]
    metrics = [{"key": k, "label": lab, "kind": kind} for k, lab, kind in METRICS
               if any(h["metrics"].get(k) is not None for h in heads)]
    if sample is not None and (sample.get("format") != SAMPLE_FORMAT or sample["num_layers"] != L
                               or sample["num_heads"] != H):
        raise BertlookError(f"explorer sample ({sample.get('source')}): not a {SAMPLE_FORMAT} sample of a "
                            f"{L} x {H} model")
    return {"run": run, "num_layers": L, "num_heads": H, "metrics": metrics, "heads": heads,
            "sentences": (sample or {}).get("sentences", [])}


SAMPLE_FORMAT = "bertlook-explorer-sample/1"
SAMPLE_SENTENCES = 6  # dev sentences in the explorer
SAMPLE_WORDS = (4, 18)  # of this many words (fewer lines: readable)


def _quantised(a) -> str:
    """A map's values in [0, 1] as base64 of uint8 ``round(255 a)`` (row-major)."""
    q = np.clip(np.rint(np.asarray(a, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)
    return base64.b64encode(q.tobytes()).decode("ascii")


def dequantised(text: str, shape: tuple[int, ...]):
    """The float32 array of a :func:`_quantised` map (multiples of 1/255), reshaped to ``shape``."""
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8).reshape(shape).astype(np.float32) / 255.0


def explorer_sample(dev_attention: str | os.PathLike, norm_attention: str | os.PathLike | None = None, *,
                    segment_examples: list[str | os.PathLike] | None = None, n_sentences: int = SAMPLE_SENTENCES,
                    words: tuple[int, int] = SAMPLE_WORDS,
                    contributions: str | os.PathLike | None = None) -> dict[str, Any]:
    """The explorer's maps: the first ``n_sentences`` dev sentences of ``words[0]..words[1]`` words of the word
    store, with their words and gold trees; per sentence the attention maps ``[L, H, W+2, W+2]``, the norm-based
    maps of the same sentence (``norm_attention``) and the rollout ``[L, W+2, W+2]``
    (:func:`bertlook.analyses.rollout.rollout`), each quantised to 8 bits (:func:`_quantised`); then the
    :func:`segment_windows` of the Fig 1 example (``segment_examples``: every shard's Fig 1 file). ``contributions``:
    the ``contributions --out-explorer`` file: its ALTI per head, ALTI over layers and value zeroing maps of the same
    sentences, joined by id (a sentence it lacks has no such maps)."""
    store = open_store(dev_attention, level="word", what="word-level attention store")
    norm = open_store(norm_attention, level="word", what="norm-based word store") if norm_attention else None
    norm_index = {r.get("id"): k for k, r in enumerate(norm.records)} if norm is not None else {}
    extra = read_explorer_maps(contributions) if contributions else {}
    out = []
    for k, rec in enumerate(store.records):
        W = len(rec.get("heads") or [])
        if not words[0] <= W <= words[1]:
            continue
        attn = store.get(k)  # [layer, head, W+2, W+2]
        item = {"id": rec.get("id"), "tokens": list(rec["tokens"]), "heads": [int(h) for h in rec["heads"]],
                "rels": list(rec["rels"]), "n": int(attn.shape[-1]), "attention": _quantised(attn),
                "rollout": _quantised(rollout(attn))}
        if rec.get("id") in norm_index:
            item["norm"] = _quantised(norm.get(norm_index[rec.get("id")]))
        for kind, m in extra.get(rec.get("id"), {}).items():
            if m.shape[-1] != attn.shape[-1]:
                raise BertlookError(f"{contributions}: sentence {rec.get('id')!r}: {kind} maps of {m.shape[-1] - 2} "
                                    f"words, the word store's of {attn.shape[-1] - 2}")
            item[kind] = _quantised(m)
        out.append(item)
        if len(out) >= n_sentences:
            break
    if segment_examples:
        meta, attn = load_fig1_example(list(segment_examples))
        if (meta["num_layers"], meta["num_heads"]) != (store.num_layers, store.num_heads):
            raise BertlookError(f"{segment_examples[0]}: a {meta['num_layers']} x {meta['num_heads']} model's Fig 1 "
                                f"example, but the word store {dev_attention} is {store.num_layers} x {store.num_heads}")
        out += segment_windows(meta, attn)
    return {"format": SAMPLE_FORMAT, "source": str(dev_attention), "num_layers": store.num_layers,
            "num_heads": store.num_heads, "sentences": out}


SEGMENT_WINDOW = 30  # tokens of a segment window (the Fig 1 window's size)


def segment_windows(meta: dict[str, Any], attn, size: int = SEGMENT_WINDOW) -> list[dict[str, Any]]:
    """Windows of at most ``size`` tokens of the Fig 1 example segment (``meta``, ``attn [L, H, n, n]`` of
    :func:`bertlook.attention.fig1_example.load_fig1_example`): Fig 1's own window
    (:func:`~bertlook.attention.fig1_example.fig1_window`: [CLS] and the tokens up to the first [SEP]) and, for
    a longer segment, [CLS] with its last ``size - 1`` tokens (the final [SEP]). A window's map is the block of
    its positions: rows keep only the attention inside the window. No gold arcs, norm-based maps or rollout."""
    tokens = [str(t) for t in meta["tokens"]]
    special = fig1_special(meta.get("special_tokens", {}).values())
    n = len(tokens)
    windows = [fig1_window(tokens, special, size)]
    if n > size:
        windows.append([0, *range(n - (size - 1), n)])
    out = []
    for k, keep in enumerate(dict.fromkeys(tuple(w) for w in windows)):
        block = attn[:, :, list(keep)][:, :, :, list(keep)]
        out.append({"id": f"segment {meta['id']} window {k + 1}", "kind": "segment", "positions": list(keep),
                    "length": n, "tokens": [tokens[i] for i in keep], "heads": [], "rels": [], "n": len(keep),
                    "attention": _quantised(block)})
    return out


TEMPLATE = Path(__file__).with_name("explorer_template.html")  # the page: HTML, CSS and JavaScript, no library


DATA_KEYS = ("run", "num_layers", "num_heads", "metrics", "heads", "sentences")


def side_by_side(models: list[dict[str, Any]], *, title: str, where: list[str] | None = None) -> dict[str, Any]:
    """The data of a page with several runs' explorers side by side (two panes, each showing any of them):
    ``models`` are :func:`explorer_data` objects (a fan-out's runs, e.g. read back from their explorer.json);
    ``where`` names them in errors."""
    where = where or [f"model {k + 1}" for k in range(len(models))]
    if len(models) < 2:
        raise BertlookError(f"explorer: side by side needs at least two runs' data, got {len(models)}")
    for data, name in zip(models, where):
        missing = [k for k in DATA_KEYS if not isinstance(data, dict) or k not in data]
        if missing:
            raise BertlookError(f"{name}: not a head explorer's data (missing {', '.join(missing)})")
    runs = [m["run"] for m in models]
    if len(set(runs)) != len(runs):
        raise BertlookError(f"explorer: a run appears twice side by side: {', '.join(runs)}")
    return {"title": title, "models": models}


def explorer_html(data: dict[str, Any]) -> str:
    """The page: :data:`TEMPLATE` with ``data`` (one run's :func:`explorer_data`, or :func:`side_by_side`)
    embedded as JSON (``</`` escaped: no early end of the script)."""
    payload = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    title = f"Head explorer: {data.get('title', data.get('run'))}".replace("&", "&amp;").replace("<", "&lt;")
    return TEMPLATE.read_text(encoding="utf-8").replace("__TITLE__", title).replace("__DATA__", payload)
