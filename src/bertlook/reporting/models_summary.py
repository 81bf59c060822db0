"""Several runs (models) side by side (CLI ``models-summary``): best-head accuracy per Table 1 relation,
probe UAS and a few surface facts of each run (:func:`models_summary`), as Markdown
(:func:`models_summary_markdown`) and a two-panel figure (:func:`fig_models_summary`).

Reads each run's tables through the readers of :mod:`bertlook.reporting.run_files`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from bertlook.analyses.probes.catalogue import PROBE_LABELS
from bertlook.errors import BertlookError
from bertlook.reporting.compare import head_text
from bertlook.reporting.plotting import new_figure, plot_style, save_png
from bertlook.reporting.run_files import TABLE1_CSV, TABLE3_CSV, parse_number, read_run_csv, read_run_stats

SUMMARY_COLUMNS = ["model", "section", "item", "metric", "value", "detail"]


def middle_third(num_layers: int) -> tuple[int, int]:
    """1-indexed inclusive layer range of the middle third (12 layers: 5-8; 6 layers: 3-4)."""
    k = num_layers // 3
    return k + 1, num_layers - k


def models_summary(run_dirs: Sequence[str | os.PathLike], labels: Sequence[str] | None = None) -> "pd.DataFrame":
    """One row per (model, metric): best-head accuracy per Table 1 relation present in every run,
    probe UAS (``uas_mean``) per probe, and surface facts (mean ``sep`` over the middle third of the
    layers, largest ``prev`` and ``next``). Values are fractions (accuracy, UAS, attention)."""
    if not run_dirs:
        raise BertlookError("models-summary: give at least one --run-dir")
    dirs = [Path(d) for d in run_dirs]
    if labels is None:
        labels = [d.name for d in dirs]
    labels = [str(x).strip() for x in labels]
    if len(labels) != len(dirs):
        raise BertlookError(f"--labels: {len(labels)} label(s) for {len(dirs)} run directories")
    if len(set(labels)) != len(labels) or not all(labels):
        raise BertlookError(f"--labels must be distinct and non-empty, got {','.join(labels)}")
    for d in dirs:
        if not d.is_dir():
            raise BertlookError(f"{d}: run directory not found")
    t1 = [read_run_csv(d / TABLE1_CSV, required=("relation", "best_head", "direction", "accuracy"), what="Table 1 twin")
          for d in dirs]
    common = [r.strip() for r in t1[0]["relation"] if all((t["relation"].str.strip() == r.strip()).any() for t in t1)]
    rows: list[dict[str, Any]] = []
    for label, d, t in zip(labels, dirs, t1):
        t = t.assign(relation=t["relation"].str.strip())
        for rel in common:
            i = t.index[t["relation"] == rel][0]
            r = t.loc[i]
            rows.append({"model": label, "section": "Table 1", "item": rel, "metric": "best-head accuracy",
                         "value": parse_number(r["accuracy"], f"{d / TABLE1_CSV}:{i + 2}"),
                         "detail": head_text(r["best_head"].strip(), r["direction"].strip())})
    probes: list[str] = []
    t3 = {}
    for d in dirs:
        if (d / TABLE3_CSV).is_file():
            t3[d] = read_run_csv(d / TABLE3_CSV, required=("probe", "uas_mean"), what="Table 3 twin")
            probes += [p.strip() for p in t3[d]["probe"] if p.strip() not in probes]
    for label, d in zip(labels, dirs):
        for probe in probes:
            value, detail = math.nan, "probes not run"
            if d in t3:
                hit = t3[d].index[t3[d]["probe"].str.strip() == probe]
                if len(hit):
                    value = parse_number(t3[d].loc[hit[0], "uas_mean"], f"{d / TABLE3_CSV}:{hit[0] + 2}")
                    detail = "" if not math.isnan(value) else str(t3[d].loc[hit[0]].get("note", "")).strip()
                else:
                    detail = "probe not in table3.csv"
            rows.append({"model": label, "section": "Table 3", "item": probe, "metric": "UAS", "value": value,
                         "detail": detail})
    for label, d in zip(labels, dirs):
        rows.append({"model": label, "section": "model", "item": "family", "metric": "encoder or decoder",
                     "value": math.nan, "detail": run_family(d)})
    for label, d in zip(labels, dirs):
        stats = read_run_stats(d)
        num_layers = int(stats["layer"].max())
        lo, hi = middle_third(num_layers)
        mid = stats[(stats["layer"] >= lo) & (stats["layer"] <= hi)]
        rows.append({"model": label, "section": "surface", "item": "[SEP] share, middle third",
                     "metric": "mean sep", "value": float(mid["sep"].mean()),
                     "detail": f"layers {lo}-{hi} of {num_layers}"})
        rows.append({"model": label, "section": "surface", "item": "[CLS] / first-token (sink) share, middle third",
                     "metric": "mean cls", "value": float(mid["cls"].mean()),
                     "detail": f"layers {lo}-{hi} of {num_layers}"})
        for col, name in (("prev", "previous-token head"), ("next", "next-token head")):
            best = stats.loc[stats[col].idxmax()]
            rows.append({"model": label, "section": "surface", "item": f"strongest {name}", "metric": f"max {col}",
                         "value": float(best[col]), "detail": f"head {int(best['layer'])}-{int(best['head'])}; "
                         f"{int((stats[col] > 0.5).sum())} heads > 0.5"})
    rows += _detector_rows(labels, dirs)
    df = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    df["value"] = df["value"].astype("float64")
    df.attrs["labels"] = list(labels)
    df.attrs["run_dirs"] = [str(d) for d in dirs]
    return df


DETECTORS_SUMMARY = Path("tables") / "head_detectors.summary.json"
#: the summaries that record a run's model provenance (its ``family``), in the order they are asked
_PROVENANCE_SUMMARIES = (DETECTORS_SUMMARY, Path("tables") / "sep_gradients.summary.json")


def run_family(run_dir: Path) -> str:
    """The model family (``encoder`` | ``decoder``) of a run, from a summary that records it; ``unknown``."""
    for rel in _PROVENANCE_SUMMARIES:
        try:
            doc = json.loads((run_dir / rel).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        family = doc.get("family") or (doc.get("model_provenance") or {}).get("family")
        if family:
            return str(family)
    return "unknown"


def _detector_rows(labels: Sequence[str], dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """Per run with head detectors: the heads above the threshold per detector, the best induction score and
    the sink share of the last layer."""
    rows: list[dict[str, Any]] = []
    for label, d in zip(labels, dirs):
        try:
            doc = json.loads((d / DETECTORS_SUMMARY).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for name in ("prev_token", "duplicate_token", "induction"):
            det = doc["detectors"][name]
            top = det["top_heads"][0] if det["top_heads"] else None
            rows.append({"model": label, "section": "detectors", "item": f"{name} heads", "metric": "best score",
                         "value": top["score"] if top else math.nan,
                         "detail": f"head {top['head']}; {det['n_detected']} heads > {doc['threshold']}" if top else ""})
        sink = doc["sink_share_per_layer"]
        rows.append({"model": label, "section": "detectors", "item": "sink share, last layer", "metric": "mean sink",
                     "value": float(sink[-1]), "detail": f"layer {len(sink)}"})
    return rows


def models_summary_markdown(df: "pd.DataFrame") -> str:
    """Markdown of :func:`models_summary`: one row per (section, item, metric), one column per run
    (percent for Table 1 and Table 3, the best head or head in parentheses)."""
    labels = df.attrs.get("labels") or list(dict.fromkeys(df["model"]))
    lines = ["# Models side by side", "",
             "Runs: " + ", ".join(f"`{lab}` ({d})" for lab, d in zip(labels, df.attrs.get("run_dirs", labels))), "",
             "Table 1: best-head accuracy (%, best of all heads and both directions; head in parentheses) for "
             "the relations present in every run. Table 3: probe UAS (%, mean over seeds). Surface: attention "
             "fractions (mean [SEP] and [CLS] share over the middle third of the layers, for a decoder its EOS "
             "and first-token share; the largest previous- / next-token attention of any head). Detectors: the "
             "best previous-token, duplicate-token and induction score on repeated random tokens and the "
             "last layer's sink share. Runs with other trees or models are not comparable with one another "
             "row by row beyond orientation; a decoder's Table 1 counts heads it cannot see (its table1.csv "
             "has the visible shares).", ""]
    lines += ["| Section | Item | Metric | " + " | ".join(labels) + " |",
              "|---|---|---|" + "---:|" * len(labels)]
    for (section, item, metric), part in df.groupby(["section", "item", "metric"], sort=False):
        cells = []
        for lab in labels:
            hit = part[part["model"] == lab]
            if section == "model" and not hit.empty:
                cells.append(str(hit["detail"].iloc[0]))
                continue
            if hit.empty or math.isnan(hit["value"].iloc[0]):
                cells.append("–")
                continue
            v = hit["value"].iloc[0]
            text = f"{100 * v:.1f}" if section in ("Table 1", "Table 3") else f"{v:.3f}"
            detail = str(hit["detail"].iloc[0])
            if section == "Table 1" and detail:
                text += f" ({detail})"
            elif section in ("surface", "detectors") and detail.startswith("head"):
                text += f" ({detail.split(';')[0]})"
            cells.append(text)
        lines.append(f"| {section} | {item} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fig_models_summary(df: "pd.DataFrame", out_png: str | os.PathLike) -> Path:
    """Two panels of grouped bars: best-head accuracy per relation per model; probe UAS per probe per model."""
    labels = df.attrs.get("labels") or list(dict.fromkeys(df["model"]))
    colors = sns.color_palette("colorblind", max(3, len(labels)))
    panels = (("Table 1", "Best-head accuracy per relation", "Accuracy (%)"),
              ("Table 3", "Probe UAS", "UAS (%)"))
    n_rel = df[df["section"] == "Table 1"]["item"].nunique()
    with plot_style():
        fig = new_figure(figsize=(min(20.0, max(10.0, 0.3 * n_rel * max(1, len(labels)) + 7.0)), 4.6))
        axes = fig.subplots(1, 2, width_ratios=[max(n_rel, 1), max(3, 0.6 * n_rel)])
        for ax, (section, title, ylabel) in zip(axes, panels):
            part = df[df["section"] == section]
            items = list(dict.fromkeys(part["item"]))
            ax.set_title(title)
            if not items or part["value"].isna().all():
                ax.set_axis_off()
                ax.text(0.5, 0.5, "no probe results in these runs" if section == "Table 3" else "no common relations",
                        ha="center", va="center", transform=ax.transAxes, color="0.3")
                continue
            x = np.arange(len(items))
            width = 0.8 / len(labels)
            for k, lab in enumerate(labels):
                vals = [part[(part["item"] == it) & (part["model"] == lab)]["value"] for it in items]
                heights = [100 * float(v.iloc[0]) if len(v) and not math.isnan(v.iloc[0]) else math.nan for v in vals]
                pos = x - 0.4 + width * (k + 0.5)
                ax.bar(pos, np.nan_to_num(heights), width, label=lab, color=colors[k % len(colors)])
                for xp, h in zip(pos, heights):
                    if math.isnan(h):  # not run / no such row: say so instead of a zero-height bar
                        ax.text(xp, 1.5, "n/a", ha="center", va="bottom", fontsize="x-small", rotation=90, color="0.35")
            ax.set_xticks(x)
            names = [PROBE_LABELS.get(it, it) for it in items] if section == "Table 3" else items
            ax.set_xticklabels(names, rotation=45, ha="right")
            ax.set_ylim(0, 100)
            ax.set_ylabel(ylabel)
        handles, names = axes[0].get_legend_handles_labels()
        if not handles:
            handles, names = axes[1].get_legend_handles_labels()
        if handles:
            fig.legend(handles, names, loc="outside lower center", ncol=min(len(labels), 6), frameon=False)
        return save_png(fig, out_png)
