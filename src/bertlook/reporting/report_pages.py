"""The pages of the HTML report (``snakemake --report``): every table as an HTML page, every figure as
a page-sized PNG.

Snakemake's report shows an entry inline when it is an image or an HTML file, and offers anything else
(a CSV) as a download only. So every table of a run gets a small standalone HTML page, and every
figure a copy sized for the page; the CSVs (full precision, fractions) and the full-resolution PNGs
stay in ``results/`` as they are (the CSVs also as downloads of the report).

- :func:`markdown_page`: a Markdown table of bertlook (``table1.md``, ``comparison.md``, ...) as HTML,
  rendered by markdown-it-py (CommonMark with pipe tables); the Markdown is the one the step wrote,
  percents and all, so the page shows exactly its numbers.
- :func:`csv_page`: a CSV that has no Markdown twin (``attention_stats.csv``, ``head_accuracy.csv``, ...)
  as an HTML table, each column formatted by its :data:`TABLE_FORMATS` entry: fractions as percents
  (:func:`bertlook.reporting.formatting.pct`, one decimal), nats with two decimals, counts as integers;
  ``head_accuracy`` pivoted to one row per relation and direction, one column per head.
- :func:`figure_copy`: a PNG shrunk to at most :data:`PAGE_WIDTH_PX` pixels wide (Lanczos, aspect kept,
  never enlarged) and stored with an adaptive palette of :data:`PALETTE_COLOURS` colours (Pillow, fast octree).

Every page is written atomically (:func:`bertlook.io_utils.atomic_path`). The table cells are built
here rather than by ``DataFrame.to_html``: each column needs its own formatter *and* alignment (numbers
right, text left), and a bad cell must be an error naming the file and line.
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from markdown_it import MarkdownIt
from PIL import Image, UnidentifiedImageError

from bertlook.analyses.heads import DIRECTION_ARROWS
from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path, read_csv_strings
from bertlook.reporting.formatting import MISSING, pct

#: Figures are copied at most this wide (pixels): about the width of the report's content pane on a
#: 1920-pixel screen; the full-resolution PNG stays in results/{run}/figures/.
PAGE_WIDTH_PX = 1600
#: Colours of the palette of a page-sized figure copy (8-bit PNG).
PALETTE_COLOURS = 256

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 14px; color: #1e293b;
       margin: 1.2em; line-height: 1.45; background: #fff; }
h1 { font-size: 1.35em; margin: 0 0 .5em 0; }
h2 { font-size: 1.15em; margin: 1.4em 0 .4em 0; }
p, ul { max-width: 72em; }
table { border-collapse: collapse; margin: .6em 0 1em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #cbd5e1; padding: 2px 8px; }
th { background: #e2e8f0; position: sticky; top: 0; text-align: center; }
td { text-align: left; }
td[style*="right"] { white-space: nowrap; }
table.csv td { text-align: right; white-space: nowrap; }
table.csv td.t { text-align: left; white-space: normal; }
tbody tr:nth-child(even) td { background: #f8fafc; }
code { background: #f1f5f9; padding: 0 .2em; border-radius: 3px; }
.source { color: #475569; font-size: .92em; }
"""


def page_html(title: str, body: str) -> str:
    """A standalone HTML page (UTF-8, its own stylesheet): what the report shows in its frame."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def _write(out: str | os.PathLike, text: str) -> Path:
    with atomic_path(out) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return Path(out)


# ---- Markdown pages --------------------------------------------------------------------------------


def markdown_html(text: str) -> str:
    """HTML of bertlook's Markdown (CommonMark + pipe tables; raw HTML in the source is escaped)."""
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def markdown_page(md_path: str | os.PathLike, out_html: str | os.PathLike, *, title: str | None = None) -> Path:
    """``md_path`` (a table written by a bertlook step) as an HTML page; the title is its first
    ``# `` heading (or the file name), ``title`` when given."""
    path = Path(md_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise BertlookError(f"{path}: cannot read the Markdown table: {err}") from None
    if not text.strip():
        raise BertlookError(f"{path}: empty Markdown file")
    heading = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), None)
    note = f'<p class="source">From <code>{html.escape(path.name)}</code>.</p>'
    return _write(out_html, page_html(title or heading or path.name, markdown_html(text) + note))


# ---- CSV pages -------------------------------------------------------------------------------------


def _float(value: str, where: str) -> float | None:
    if value.strip() == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise BertlookError(f"{where}: {value!r} is not a number") from None


def fmt_pct(value: float | None) -> str:
    return MISSING if value is None else pct(value)


def fmt_fixed(digits: int) -> Callable[[float | None], str]:
    def fmt(value: float | None) -> str:
        return MISSING if value is None or math.isnan(value) else f"{value:.{digits}f}"

    return fmt


def fmt_int(value: float | None) -> str:
    if value is None or math.isnan(value):
        return MISSING
    return f"{int(round(value)):,}"


def fmt_signed(value: float | None) -> str:
    if value is None or math.isnan(value):
        return MISSING
    return f"{int(round(value)):+d}"


def fmt_num(value: float | None) -> str:
    """About four significant digits, no exponent above 1e-4: 15,882 / 123.5 / 1.235 / 0.01235."""
    if value is None or math.isnan(value):
        return MISSING
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 1:
        return f"{value:.{3 - int(math.floor(math.log10(a)))}f}"
    return f"{value:.4g}"


def fmt_bool(value: str) -> str:
    v = value.strip().lower()
    return {"true": "yes", "false": "no", "": MISSING}.get(v, value)


def fmt_direction(value: str) -> str:
    return DIRECTION_ARROWS.get(value, value) if value else MISSING


#: column kind -> (formatter, numeric?, header suffix). Numeric formatters take a float (None: empty cell).
KINDS: dict[str, tuple[Callable[[Any], str], bool, str]] = {
    "pct": (fmt_pct, True, " (%)"),
    "nats": (fmt_fixed(2), True, " (nats)"),
    "int": (fmt_int, True, ""),
    "offset": (fmt_signed, True, ""),
    "num": (fmt_num, True, ""),
    "bool": (fmt_bool, False, ""),
    "direction": (fmt_direction, False, ""),
    "text": (lambda v: v if v != "" else MISSING, False, ""),
}


@dataclass(frozen=True)
class TableFormat:
    """How one CSV of bertlook is shown: a title, a sentence on its units, and each column's kind
    (:data:`KINDS`); a column not listed is shown as it is in the CSV (nothing is left out)."""

    title: str
    units: str
    columns: Mapping[str, str] = field(default_factory=dict)
    pivot_heads: bool = False  # head_accuracy: one row per (relation, direction), one column per head


_STATS = {"layer": "int", "head": "int", **{c: "pct" for c in ("cls", "sep", "punct", "self", "prev", "next",
                                                                  "sep_sep", "rest_sep", "max_attention")},
          "entropy": "nats", "cls_entropy": "nats", "positional_offset": "offset", "positional_fraction": "pct"}
_STATS_UNITS = ("Percent of each from-token's attention (averaged over tokens and segments) given to the "
                "target; entropies in nats; positional offset: the most frequent argmax_j - i. Layer and "
                "head 1-indexed.")
_CLUSTERS = {"layer": "int", "head": "int", "x": "num", "y": "num", "behavior": "text"}
_CLUSTERS_UNITS = ("x, y: the head's 2-D MDS coordinates (Fig 6; JS-divergence units, the axes are arbitrary); "
                   "behaviour: the label from the surface statistics (next > 50%, previous > 50%, entropy "
                   "> 3.8 nats, [CLS] / [SEP] / . , > 60%).")
_ACCURACY_UNITS = ("Percent of the relation's words whose gold head is the head's prediction, for every head "
                   "(columns, layer-head) and both directions (d→h: the word's own attention, h→d: the word "
                   "attending most to it); n: the relation's words. The bold cell of a row is its best head.")

#: CSV file stem -> how its page shows it.
TABLE_FORMATS: dict[str, TableFormat] = {
    "attention_stats": TableFormat("Surface statistics per head", _STATS_UNITS, _STATS),
    "attention_stats_norm": TableFormat("Surface statistics per head, norm-based maps", _STATS_UNITS, _STATS),
    "attention_stats_alti": TableFormat("Surface statistics per layer, ALTI (one map per layer: head 1)", _STATS_UNITS,
                                        _STATS),
    "head_clusters": TableFormat("Head embedding and behaviour labels (Fig 6)", _CLUSTERS_UNITS, _CLUSTERS),
    "head_clusters_norm": TableFormat("Head embedding and behaviour labels, norm-based maps", _CLUSTERS_UNITS,
                                      _CLUSTERS),
    "js_divergence": TableFormat(
        "Jensen-Shannon divergence between heads (Fig 6)",
        "D(i, j): the JS divergence (nats) of the two heads' attention rows, summed over every from-token of "
        "every segment; the distances that Fig 6 embeds in 2-D.", {"head": "text"}),
    "head_accuracy": TableFormat("Accuracy of every head per relation", _ACCURACY_UNITS, pivot_heads=True),
    "head_accuracy_norm": TableFormat("Accuracy of every head per relation, norm-based maps", _ACCURACY_UNITS,
                                      pivot_heads=True),
    "sep_gradients": TableFormat(
        "Gradients of attention to [SEP] per layer (Fig 3)",
        "mean |grad|: the mean absolute gradient of the masked-LM loss with respect to one attention weight "
        "to a token of the class; attention: percent of each token's attention given to the class (on the "
        "masked input).",
        {"layer": "int", "target": "text", "mean_abs_grad": "num", "attention_mass": "pct", "note": "text"}),
    "rollout_stats": TableFormat(
        "Attention rollout per layer",
        "Percent of the rollout (attention followed through the layers, Abnar & Zuidema 2020) from each token "
        "to the class; entropies in nats (uniform: ln n).",
        {"layer": "int", "cls": "pct", "sep": "pct", "punct": "pct", "other": "pct", "entropy": "nats",
         "uniform_entropy": "nats"}),
    "contribution_stats": TableFormat(
        "ALTI and value zeroing: shares and entropy per layer and map kind",
        "Percent of each map's rows (averaged over tokens and the sampled segments) going to the class, for every "
        "map kind (attention, norm-based, rollout, ALTI, ALTI per head, ALTI over layers, value zeroing); entropies "
        "in nats; per: head_mean = the mean over the heads of a per-head kind, layer = a kind defined per layer.",
        {"kind": "text", "per": "text", "layer": "int", "cls": "pct", "sep": "pct", "punct": "pct", "other": "pct",
         "entropy": "nats", "n_examples": "int"}),
    "head_report": TableFormat(
        "Per-head report card",
        "importance: gate gradient, l2-normalised per layer; confidence, positional fraction, sink and the "
        "accuracies in percent; entropy in nats.",
        {"layer": "int", "head": "int", "importance": "num", "confidence": "pct", "positional_offset": "offset",
         "positional_fraction": "pct", "positional": "bool", "sink": "pct", "sink_head": "bool",
         "entropy": "nats", "behaviour": "text", "best_relation": "text", "best_direction": "direction",
         "best_accuracy": "pct", "coref_accuracy": "pct"}),
    "tree_heads": TableFormat(
        "Single-head trees, every head",
        "Percent of the scored words (non-punctuation, not the gold root; n) whose head in the tree decoded from the "
        "head's map is the gold head: UAS with Chu-Liu-Edmonds and the gold root, for d→h (A(i→j)) and h→d "
        "(A(j→i)) scores; UUAS: percent of the gold edges in the undirected maximum spanning tree of A + Aᵀ.",
        {"layer": "int", "head": "int", "uas_dep2head": "pct", "uas_head2dep": "pct", "uuas": "pct",
         "n_words": "int"}),
}


def format_for(csv_path: str | os.PathLike) -> TableFormat:
    stem = Path(csv_path).stem
    if stem not in TABLE_FORMATS:
        raise BertlookError(f"{csv_path}: no report page format for a table named {stem!r} "
                            f"(known: {', '.join(sorted(TABLE_FORMATS))})")
    return TABLE_FORMATS[stem]


def _cell(text: str, numeric: bool, bold: bool = False) -> str:
    inner = f"<b>{html.escape(text)}</b>" if bold else html.escape(text)
    return f"<td>{inner}</td>" if numeric else f'<td class="t">{inner}</td>'


def html_table(header: Sequence[str], rows: Sequence[Sequence[tuple[str, bool, bool]]]) -> str:
    """``<table class="csv">`` of (text, numeric, bold) cells (numbers right-aligned, text left); every
    text is HTML-escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(_cell(*c) for c in row) + "</tr>" for row in rows)
    return f'<table class="csv">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>'


def _format_rows(df, spec: TableFormat, path: Path) -> tuple[list[str], list[list[tuple[str, bool, bool]]]]:
    header, kinds = [], []
    for col in df.columns:
        kind = spec.columns.get(col, "text")
        if kind not in KINDS:
            raise BertlookError(f"report page format of {path.name}: unknown kind {kind!r} of column {col!r}")
        fmt, numeric, suffix = KINDS[kind]
        header.append(f"{col}{suffix}")
        kinds.append((col, fmt, numeric))
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        row = []
        for col, fmt, numeric in kinds:
            value = rec[col]
            if numeric:
                row.append((fmt(_float(value, f"{path}:{i + 2}: column {col}")), True, False))
            else:
                row.append((fmt(value), False, False))
        rows.append(row)
    return header, rows


def _pivot_heads(df, path: Path) -> tuple[list[str], list[list[tuple[str, bool, bool]]]]:
    """head_accuracy.csv (relation, layer, head, direction, accuracy, count) -> one row per relation and
    direction (in the CSV's order), one column per head (layer-major), the best cell(s) of a row bold
    (none when the best is 0, e.g. root words, which no head can predict)."""
    for col in ("relation", "layer", "head", "direction", "accuracy", "count"):
        if col not in df.columns:
            raise BertlookError(f"{path}:1: missing column {col!r}")
    heads: dict[tuple[int, int], None] = {}
    cells: dict[tuple[str, str], dict[tuple[int, int], float | None]] = {}
    counts: dict[tuple[str, str], str] = {}
    for i, rec in enumerate(df.to_dict("records")):
        where = f"{path}:{i + 2}"
        try:
            key = (int(rec["layer"]), int(rec["head"]))
        except ValueError:
            raise BertlookError(f"{where}: layer/head {rec['layer']!r}/{rec['head']!r} are not integers") from None
        heads[key] = None
        row = (rec["relation"], rec["direction"])
        if key in cells.setdefault(row, {}):
            raise BertlookError(f"{where}: relation {row[0]!r}, head {key[0]}-{key[1]}, {row[1]} appears twice")
        cells[row][key] = _float(rec["accuracy"], f"{where}: column accuracy")
        counts.setdefault(row, rec["count"])
    order = sorted(heads)
    header = ["relation", "direction", "n", *(f"{l}-{h}" for l, h in order)]
    rows = []
    for (rel, direction), values in cells.items():
        present = [v for v in values.values() if v is not None and not math.isnan(v)]
        best = max(present) if present else None
        row = [(rel, False, False), (fmt_direction(direction), False, False),
               (fmt_int(_float(counts[(rel, direction)], f"{path}: column count")), True, False)]
        for key in order:
            v = values.get(key)
            row.append((fmt_pct(v), True, v is not None and best is not None and best > 0 and v == best))
        rows.append(row)
    return header, rows


def csv_page(csv_path: str | os.PathLike, out_html: str | os.PathLike, *, title: str | None = None) -> Path:
    """``csv_path`` (a table of bertlook with no Markdown twin) as an HTML page, formatted by its
    :data:`TABLE_FORMATS` entry (chosen by the file name)."""
    path = Path(csv_path)
    spec = format_for(path)
    df = read_csv_strings(path, what="table")
    header, rows = _pivot_heads(df, path) if spec.pivot_heads else _format_rows(df, spec, path)
    name = html.escape(path.name)
    body = (f"<h1>{html.escape(title or spec.title)}</h1>\n<p>{html.escape(spec.units)}</p>\n"
            f"{html_table(header, rows)}\n"
            f'<p class="source">From <code>{name}</code> ({len(df)} rows; the CSV holds the full-precision '
            f"numbers, fractions rather than percents: \"Data files (CSV)\" in this report).</p>")
    return _write(out_html, page_html(title or spec.title, body))


# ---- figures ---------------------------------------------------------------------------------------


def figure_copy(png: str | os.PathLike, out_png: str | os.PathLike, *, max_width: int = PAGE_WIDTH_PX,
                colours: int = PALETTE_COLOURS) -> tuple[tuple[int, int], tuple[int, int]]:
    """A copy of ``png`` at most ``max_width`` pixels wide (aspect kept, never enlarged), white behind
    any transparency, with an adaptive palette of ``colours``; returns the (width, height) before and after."""
    path = Path(png)
    try:
        with Image.open(path) as img:
            img.load()
            size = img.size
            rgba = img.convert("RGBA")
    except (OSError, UnidentifiedImageError) as err:
        raise BertlookError(f"{path}: not a readable image: {err}") from None
    flat = Image.new("RGB", size, (255, 255, 255))
    flat.paste(rgba, mask=rgba.getchannel("A"))
    if size[0] > max_width:
        flat = flat.resize((max_width, max(1, round(size[1] * max_width / size[0]))), Image.Resampling.LANCZOS)
    small = flat.quantize(colors=colours, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    with atomic_path(out_png) as tmp:
        small.save(tmp, format="PNG", optimize=True)
    return size, small.size


# ---- one call per job ------------------------------------------------------------------------------


def write_page(source: str | os.PathLike, out: str | os.PathLike) -> str:
    """The report page of ``source`` at ``out``, by the source's kind (``.md``, ``.csv``, ``.png``; an ``.html``
    page of its own, such as the head explorer, is copied as it is); returns a line saying what was written."""
    src, dst = Path(source), Path(out)
    kind = src.suffix.lower()
    want = {".md": ".html", ".csv": ".html", ".png": ".png", ".html": ".html"}
    if kind not in want:
        raise BertlookError(f"{src}: no report page for a {kind or 'suffix-less'} file (give .md, .csv, .png or .html)")
    if dst.suffix.lower() != want[kind]:
        raise BertlookError(f"{dst}: the page of {src.name} must be a {want[kind]} file")
    if kind == ".html":
        _write(dst, src.read_text(encoding="utf-8"))
        return f"{src} -> {dst} (the page itself, {dst.stat().st_size:,} bytes)"
    if kind == ".md":
        markdown_page(src, dst)
        return f"{src} -> {dst} (HTML, {dst.stat().st_size:,} bytes)"
    if kind == ".csv":
        csv_page(src, dst)
        return f"{src} -> {dst} (HTML, {dst.stat().st_size:,} bytes)"
    before, after = figure_copy(src, dst)
    return (f"{src} ({before[0]}x{before[1]}, {src.stat().st_size:,} bytes) -> {dst} "
            f"({after[0]}x{after[1]}, {dst.stat().st_size:,} bytes)")
