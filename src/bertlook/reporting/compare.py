"""A run's numbers against the paper's, and the regression check against the paper (the run's files are read by
:mod:`bertlook.reporting.run_files`).

**Comparison with the paper** (:func:`build_comparison`, CLI ``compare``). One row per checked number
(columns :data:`COLUMNS`) in four sections:

- ``Table 1``: per paper row (``paper_reference.table1``, Stanford Dependencies labels) the best-head
  accuracy and the best fixed-offset baseline accuracy of ``tables/table1.csv``, matched through its
  ``paper_relation`` column (so a silver ``compound`` row stands for the paper's ``nn``); whether the
  best head is the paper's head is a note;
- ``Table 2``: ``tables/table2.csv`` (coreference; "not run" when the stage did not run);
- ``Table 3``: ``uas_mean`` of ``tables/table3.csv`` per probe (probes; "not run" when absent);
- ``Figure facts``: the checks of ``paper_reference.figure_facts`` computed from
  ``tables/attention_stats.csv`` (:func:`bertlook.reporting.figure_facts.fact_value`).

Table sections are in percent (as the paper prints them); figure facts in their own units (fractions,
head counts, nats). ``difference`` = reproduced - paper. ``status``: ``PASS`` / ``FAIL`` (the number is
within / outside the tolerance of the paper's, or for a figure fact passes / fails its ``op``),
``not comparable`` (the section is not comparable to the paper: both numbers and the difference are
shown, it never fails), ``not run`` (the stage did not run), ``not measured`` (the run has no such
number, e.g. a relation below ``min_count``, or a statistic the pipeline does not compute).

Which sections are comparable comes from the run's ``manifest.json`` (:func:`comparability`): Table 1
and Table 3 need the model flagged ``compare_with_paper`` **and** gold PTB trees in Stanford
Dependencies (treebank kind ``ptb_sd``); Table 2 needs the flag and a coreference stage that ran;
figure facts need the flag (the unlabeled text is Wikipedia in both). :func:`section_comparability` is
the one definition; the workflow's ``heads --paper-comparable`` comes from it too (:func:`paper_comparable`).

**Regression checks** (CLI ``check-regression RUN_DIR --against paper|FILE``). ``paper``: exit 1 when
a comparable row FAILs (:func:`check_against_paper`). ``FILE``: a golden JSON: :mod:`bertlook.reporting.golden`.

Several runs side by side (CLI ``models-summary``) are :mod:`bertlook.reporting.models_summary`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_text
from bertlook.reporting.figure_facts import fact_passes, fact_value, passes_when
from bertlook.reporting.paper_reference import (
    figure_facts, kobayashi_facts, table1_reference, table2_reference, table3_reference,
)
from bertlook.reporting.run_files import (
    NORM_STATS_CSV, TABLE1_CSV, TABLE2_COLUMNS, TABLE2_CSV, TABLE3_CSV, check_run_dir, parse_number, read_manifest,
    read_run_csv, read_run_stats,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

COLUMNS = ["section", "item", "metric", "paper", "reproduced", "difference", "tolerance", "status", "note"]
PASS, FAIL = "PASS", "FAIL"
NOT_COMPARABLE, NOT_RUN, NOT_MEASURED = "not comparable", "not run", "not measured"
STATUSES = (PASS, FAIL, NOT_COMPARABLE, NOT_RUN, NOT_MEASURED)
#: section key -> title used in the ``section`` column and the markdown
SECTIONS = {"table1": "Table 1", "table2": "Table 2", "table3": "Table 3", "figure_facts": "Figure facts",
            "kobayashi2020": "Norms (Kobayashi et al. 2020)"}
NOTHING_COMPARABLE = "nothing comparable to the paper in this run"


TREES = {
    "ptb_sd": ("gold", "Penn Treebank WSJ, Stanford Dependencies"),
    "ud": ("gold", "Universal Dependencies"),
    "silver": ("silver", "parser output, not gold"),
}
DIRECTION_SHORT = {"dep2head": "d→h", "head2dep": "h→d"}


# ===================================================================================== comparability
#: the trees of the paper's Tables 1 and 3: gold PTB WSJ in Stanford Dependencies
PAPER_TREEBANK_KIND = "ptb_sd"


def config_treebank_kind(treebank: dict[str, Any]) -> str | None:
    """``ptb_sd`` / ``ud`` / ``silver`` (or None) of a configuration's ``treebank`` section: the source,
    or for ``source: local`` its ``local.kind`` (default ``ptb_sd``). The workflow's TREEBANK_KIND."""
    source = (treebank or {}).get("source")
    if source == "local":
        return str((treebank.get("local") or {}).get("kind") or PAPER_TREEBANK_KIND)
    return str(source) if source else None


def treebank_kind(manifest: dict[str, Any]) -> str | None:
    """``ptb_sd`` / ``ud`` / ``silver`` (or None): the heads step's record, else the configuration."""
    heads = (manifest.get("steps") or {}).get("heads") or {}
    if heads.get("treebank_kind"):
        return str(heads["treebank_kind"])
    return config_treebank_kind((manifest.get("config") or {}).get("treebank") or {})


def _treebank_name(manifest: dict[str, Any]) -> str | None:
    steps = manifest.get("steps") or {}
    name = (steps.get("heads") or {}).get("treebank_name")
    if name:
        return str(name)
    parser = (steps.get("treebank") or {}).get("parser") or {}
    return f"spaCy {parser['name']}" if parser.get("name") else None


def _compare_flag(manifest: dict[str, Any]) -> bool:
    model = (manifest.get("model") or {}).get("config") or {}
    return bool(model.get("compare_with_paper", False))


def coref_ran(manifest: dict[str, Any], run_dir: str | os.PathLike | None = None) -> bool:
    """Whether the coreference stage scored a corpus (manifest step status, else ``table2.csv``)."""
    step = (manifest.get("steps") or {}).get("coref")
    if isinstance(step, dict) and "status" in step:
        return step["status"] == "ok"
    if run_dir is not None and (Path(run_dir) / TABLE2_CSV).is_file():
        systems = read_run_csv(Path(run_dir) / TABLE2_CSV, required=("system",))["system"].str.strip()
        return not (systems == "not run").all()
    return False


def section_comparability(model: dict[str, Any], kind: str | None, ran_coref: bool = False) -> dict[str, dict[str, Any]]:
    """THE definition of "comparable with the paper", per section key: ``{"comparable": bool, "reason": str}``.

    ``model``: the run's model entry of the configuration (``models[]``: its ``compare_with_paper``);
    ``kind``: the treebank kind (:func:`config_treebank_kind`); ``ran_coref``: whether the coreference
    stage scored a corpus. Used by :func:`comparability` (a run's manifest) and, through
    :func:`paper_comparable`, by the workflow (``heads --paper-comparable``)."""
    flag = bool((model or {}).get("compare_with_paper", False))
    ran = bool(ran_coref)
    model_reason = "" if flag else "the model is not flagged compare_with_paper (not the paper's model)"
    trees_ok = kind == PAPER_TREEBANK_KIND
    trees_reason = "" if trees_ok else f"trees are {kind or 'of unrecorded origin'}, not gold PTB in Stanford Dependencies (ptb_sd)"

    def entry(ok: bool, *reasons: str) -> dict[str, Any]:
        why = "; ".join(r for r in reasons if r)
        return {"comparable": ok, "reason": why or "same model and data as the paper"}

    return {
        "table1": entry(flag and trees_ok, model_reason, trees_reason),
        "table2": entry(flag and ran, model_reason, "" if ran else "the coreference stage did not run"),
        "table3": entry(flag and trees_ok, model_reason, trees_reason),
        "figure_facts": entry(flag, model_reason),
        # the second reference's claims are about bert-base-uncased too; the run's data need not match
        "kobayashi2020": entry(flag, model_reason),
    }


def paper_comparable(model: dict[str, Any], kind: str | None) -> bool:
    """Whether Table 1 of a run of ``model`` on ``kind`` trees is comparable with the paper (the
    workflow's ``heads --paper-comparable``; :func:`section_comparability`)."""
    return section_comparability(model, kind)["table1"]["comparable"]


def comparability(manifest: dict[str, Any], run_dir: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """Per section key: ``{"comparable": bool, "reason": str}`` read from a run's manifest
    (:func:`section_comparability` of its model entry, treebank kind and coreference stage)."""
    model = (manifest.get("model") or {}).get("config") or {}
    return section_comparability(model, treebank_kind(manifest), coref_ran(manifest, run_dir))


def _comparable_lookup(comparable: dict[str, Any]) -> dict[str, bool]:
    out = {}
    titles = {v.lower(): k for k, v in SECTIONS.items()}
    for key, value in comparable.items():
        k = str(key)
        k = k if k in SECTIONS else titles.get(k.lower())
        if k is None:
            raise BertlookError(f"comparable: unknown section {key!r} (use one of: {', '.join(SECTIONS)})")
        out[k] = bool(value["comparable"] if isinstance(value, dict) else value)
    return {k: out.get(k, False) for k in SECTIONS}


# ========================================================================================= the rows
def _row(section: str, item: str, metric: str, paper: Any, reproduced: Any, tolerance: Any, status: str,
         note: str = "") -> dict[str, Any]:
    p = parse_number(paper)
    r = parse_number(reproduced)
    diff = r - p if not (math.isnan(p) or math.isnan(r)) else math.nan
    return {"section": SECTIONS[section], "item": item, "metric": metric, "paper": p, "reproduced": r,
            "difference": diff, "tolerance": parse_number(tolerance), "status": status, "note": note.strip()}


def _judge(comparable: bool, ok: bool) -> str:
    if not comparable:
        return NOT_COMPARABLE
    return PASS if ok else FAIL


def _within(reproduced: float, paper: float, tolerance: float) -> bool:
    # a hair of slack so that 2.0-point differences computed in floating point count as within 2.0
    return abs(reproduced - paper) <= tolerance + 1e-9


def head_text(head: str, direction: str) -> str:
    """``"L-H d→h"``: a head label and its direction, shortened (the head alone without a direction)."""
    d = DIRECTION_SHORT.get(direction, direction)
    return f"{head} {d}".strip()


# ---- Table 1
def _table1_rows(run_dir: Path, comparable: bool, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    from bertlook.analyses.heads import TREEBANK_KINDS  # lazy: imports numpy/pandas; compare is read at DAG build

    path = run_dir / TABLE1_CSV
    df = read_run_csv(path, required=("relation", "best_head", "direction", "accuracy", "baseline_offset",
                                   "baseline_accuracy", "paper_relation"), what="Table 1 twin")
    scheme = TREEBANK_KINDS.get(treebank_kind(manifest) or "", ("sd",))[0]
    key = df["paper_relation"].str.strip()
    counts = ((manifest.get("steps") or {}).get("heads") or {}).get("relation_counts") or {}
    run_name = {row["paper_relation"]: name for name, row in table1_reference(scheme).items()}
    rows: list[dict[str, Any]] = []
    for rel, ref in table1_reference("sd").items():
        tol = ref["tolerance"]
        hit = df.index[key == rel]
        paper_head = head_text(ref["head"], ref["direction"])
        if len(hit) == 0:
            n = [f"{name}: {counts[name]} words" for name in (run_name.get(rel, rel),) if name in counts]
            why = ("no row of tables/table1.csv matches the paper's relation (absent from the dev trees or "
                   "below heads.min_count" + (f"; {n[0]}" if n else "") + ")")
            rows.append(_row("table1", rel, "best-head accuracy (%)", ref["accuracy"], None, tol, NOT_MEASURED, why))
            rows.append(_row("table1", rel, "baseline accuracy (%)", ref["baseline"], None, tol, NOT_MEASURED, why))
            continue
        i = hit[0]
        r = df.loc[i]
        where = f"{path}:{i + 2}"
        acc = 100.0 * parse_number(r["accuracy"], where)
        base = 100.0 * parse_number(r["baseline_accuracy"], where)
        head = head_text(str(r["best_head"]).strip(), str(r["direction"]).strip())
        same = str(r["best_head"]).strip() == ref["head"] and str(r["direction"]).strip() == ref["direction"]
        note = f"best head {head}; " + ("the paper's head" if same else f"the paper's: {paper_head}")
        if str(r["relation"]).strip() != rel:
            note += f"; run relation {r['relation'].strip()}"
        if str(r.get("below_min_count", "")).strip().lower() == "true":
            note += "; below heads.min_count"
        if "notebook_accuracy" in ref and not math.isnan(acc):
            note += (f"; the authors' notebook prints {ref['notebook_accuracy']} (difference "
                     f"{acc - ref['notebook_accuracy']:+.1f})")
        status = NOT_MEASURED if math.isnan(acc) else _judge(comparable, _within(acc, ref["accuracy"], tol))
        rows.append(_row("table1", rel, "best-head accuracy (%)", ref["accuracy"], acc, tol, status, note))
        off = str(r["baseline_offset"]).strip()
        try:
            off_txt = f"{int(float(off)):+d}"
        except ValueError:
            off_txt = off
        bnote = f"offset {off_txt}; " + (
            "the paper's offset" if off_txt == f"{ref['baseline_offset']:+d}" else f"the paper's: {ref['baseline_offset']:+d}")
        if "notebook_baseline" in ref and not math.isnan(base):
            bnote += (f"; the authors' notebook prints {ref['notebook_baseline']} (difference "
                      f"{base - ref['notebook_baseline']:+.1f})")
        status = NOT_MEASURED if math.isnan(base) else _judge(comparable, _within(base, ref["baseline"], tol))
        rows.append(_row("table1", rel, "baseline accuracy (%)", ref["baseline"], base, tol, status, bnote))
    return rows


# ---- Tables 2 and 3
def _read_twin(run_dir: Path, name: str, required: tuple[str, ...], what: str, stage: str):
    """``(path, table, None)`` of a twin table of the run, or ``(path, None, note)`` when its stage did not run."""
    path = run_dir / name
    if not path.is_file():
        return path, None, f"{name} not found: the {stage} stage did not run"
    return path, read_run_csv(path, required=required, what=what), None


def _table2_rows(run_dir: Path, comparable: bool) -> list[dict[str, Any]]:
    ref = table2_reference()
    path, df, not_run = _read_twin(run_dir, TABLE2_CSV, ("system", *TABLE2_COLUMNS), "Table 2 twin", "coreference")
    if df is not None and (df["system"].str.strip() == "not run").all():
        notes = [n for n in df.get("note", []) if str(n).strip()]
        not_run = str(notes[0]).strip() if notes else "the coreference stage did not run"
    rows = []
    for system, pref in ref.items():
        label = str(pref.get("label", system))
        tol = pref.get("tolerance", math.nan)
        for col in TABLE2_COLUMNS:
            paper = pref.get(col)
            if paper is None:
                continue
            metric = f"{col} (%)"
            if not_run is not None:
                rows.append(_row("table2", label, metric, paper, None, tol, NOT_RUN, not_run))
                continue
            if system == "neural":
                rows.append(_row("table2", label, metric, paper, None, tol, NOT_MEASURED,
                                 "the paper's number only: bertlook runs no neural coreference system"))
                continue
            hit = df.index[df["system"].str.strip() == system]
            if len(hit) == 0:
                rows.append(_row("table2", label, metric, paper, None, tol, NOT_MEASURED,
                                 f"no `{system}` row in {TABLE2_CSV}"))
                continue
            r = df.loc[hit[0]]
            value = 100.0 * parse_number(r[col], f"{path}:{hit[0] + 2}")
            note = ""
            if system == "best_head":
                head = str(r.get("head", "")).strip()
                paper_head = str(pref.get("head", ""))
                note = (f"best head {head or '-'}; "
                        + ("the paper's head" if head == paper_head else f"the paper's: {paper_head}"))
            if math.isnan(value):
                rows.append(_row("table2", label, metric, paper, None, tol, NOT_MEASURED,
                                 (note + "; " if note else "") + "no mention of this type scored"))
                continue
            rows.append(_row("table2", label, metric, paper, value, tol,
                             _judge(comparable, _within(value, paper, tol)), note))
    return rows


def _table3_rows(run_dir: Path, comparable: bool) -> list[dict[str, Any]]:
    ref = table3_reference()
    path, df, missing = _read_twin(run_dir, TABLE3_CSV, ("probe", "uas_mean"), "Table 3 twin", "probes")
    rows = []
    for probe, pref in ref.items():
        label = str(pref.get("label", probe))
        metric = f"{pref.get('metric', 'UAS')} (%)"
        tol = pref["tolerance"]
        if not pref.get("comparable", True):
            rows.append(_row("table3", label, metric, pref["uas"], None, tol, NOT_COMPARABLE,
                             " ".join(str(pref.get("note", "context only")).split())))
            continue
        if missing:
            rows.append(_row("table3", label, metric, pref["uas"], None, tol, NOT_RUN, missing))
            continue
        hit = df.index[df["probe"].str.strip() == probe]
        if len(hit) == 0:
            rows.append(_row("table3", label, metric, pref["uas"], None, tol, NOT_RUN, f"no `{probe}` row in {TABLE3_CSV}"))
            continue
        r = df.loc[hit[0]]
        where = f"{path}:{hit[0] + 2}"
        uas = 100.0 * parse_number(r["uas_mean"], where)
        if math.isnan(uas):
            why = str(r.get("note", "")).strip() or "no UAS in the table"
            rows.append(_row("table3", label, metric, pref["uas"], None, tol, NOT_RUN, why))
            continue
        notes = []
        sd = parse_number(r.get("uas_sd"), where) if "uas_sd" in r else math.nan
        n_seeds = str(r.get("n_seeds", "")).strip()
        if not math.isnan(sd):
            notes.append(f"sd {100 * sd:.1f} over {n_seeds} seeds")
        if "printed_by_code" in pref:
            notes.append(f"the authors' run printed {pref['printed_by_code']} (difference {uas - pref['printed_by_code']:+.1f})")
        rows.append(_row("table3", label, metric, pref["uas"], uas, tol,
                         _judge(comparable, _within(uas, pref["uas"], tol)), "; ".join(notes)))
    return rows


# ---- figure facts
def _fact_rows(stats: "pd.DataFrame", comparable: bool) -> list[dict[str, Any]]:
    rows = []
    for fact in figure_facts():
        m = fact["metric"]
        metric = f"{'number of heads' if m['aggregate'] == 'count_above' else m['aggregate']} {m['stat']}"
        metric += f" {fact['op']} paper"
        value, note = fact_value(stats, m)
        note = f"{fact['source']}: {fact['description']}. " + note
        if value is None:
            rows.append(_row("figure_facts", fact["id"], metric, fact["value"], None, fact["tolerance"], NOT_MEASURED, note))
            continue
        note += f"; passes when {passes_when(fact['op'], fact['value'], fact['tolerance'])}"
        if m.get("reference_layers"):
            ref_value, ref_note = fact_value(stats, m, layers=m["reference_layers"])
            if ref_value is not None:
                note += f"; for reference, {ref_note}: {ref_value:.3g}"
        ok = fact_passes(value, fact["op"], float(fact["value"]), float(fact["tolerance"]))
        rows.append(_row("figure_facts", fact["id"], metric, fact["value"], value, fact["tolerance"],
                         _judge(comparable, ok), note))
    return rows


def _kobayashi_rows(run_dir: Path, stats: "pd.DataFrame", comparable: bool) -> list[dict[str, Any]]:
    """The second reference (Kobayashi et al. 2020): per fact, the run's norm-based share over its
    attention share (same heads, same layers), judged against the fact's reading of the claim."""
    facts = kobayashi_facts()
    norm = read_run_stats(run_dir, NORM_STATS_CSV) if (run_dir / NORM_STATS_CSV).is_file() else None
    rows = []
    for fact in facts:
        m = fact["metric"]
        metric = f"{m['aggregate']} {m['stat']}: norm share / attention share {fact['op']} value"
        note = f"{fact['source']}: {fact['description']}. bertlook's reading: {fact['reading']}"
        if norm is None:
            rows.append(_row("kobayashi2020", fact["id"], metric, fact["value"], None, fact["tolerance"], NOT_RUN,
                             f"{NORM_STATS_CSV} not found: norm-based maps were not extracted (norms.enabled)"))
            continue
        v_norm, norm_note = fact_value(norm, m)
        v_attn, attn_note = fact_value(stats, m)
        if v_norm is None or v_attn is None or v_attn <= 0:
            why = norm_note if v_norm is None else attn_note if v_attn is None else "attention share is 0"
            rows.append(_row("kobayashi2020", fact["id"], metric, fact["value"], None, fact["tolerance"],
                             NOT_MEASURED, f"{note}; {why}"))
            continue
        ratio = v_norm / v_attn
        note += f"; norm share {v_norm:.3g} vs attention share {v_attn:.3g} ({attn_note})"
        note += f"; passes when {passes_when(fact['op'], fact['value'], fact['tolerance'])}"
        ok = fact_passes(ratio, fact["op"], float(fact["value"]), float(fact["tolerance"]))
        status = _judge(comparable, ok) if fact.get("comparable", True) else NOT_COMPARABLE
        if not fact.get("comparable", True):
            note += "; context only, never judged"
        rows.append(_row("kobayashi2020", fact["id"], metric, fact["value"], ratio, fact["tolerance"], status, note))
    return rows


def build_comparison(run_dir: str | os.PathLike, *, comparable: dict[str, Any] | None = None) -> "pd.DataFrame":
    """The run's numbers against the paper's: one row per check, columns :data:`COLUMNS`.

    ``comparable``: section key (``table1``, ``table2``, ``table3``, ``figure_facts``; titles such as
    ``"Table 1"`` work too) -> bool (or a :func:`comparability` entry); a section not named is not
    comparable. ``None`` reads it from ``RUN_DIR/manifest.json`` (:func:`comparability`).
    ``df.attrs``: ``run``, ``comparable`` and ``context`` (model, corpus, trees) for the markdown.
    """
    import pandas as pd  # lazy: compare is read at DAG build (paper_comparable)

    run_dir = check_run_dir(run_dir)
    manifest = read_manifest(run_dir)
    comp = comparability(manifest, run_dir)
    if comparable is None:
        flags = {k: v["comparable"] for k, v in comp.items()}
    else:
        flags = _comparable_lookup(comparable)
        for k, v in flags.items():
            if v != comp[k]["comparable"]:
                comp[k] = {"comparable": v, "reason": "as given by the caller"}
    stats = read_run_stats(run_dir)
    rows = [
        *_table1_rows(run_dir, flags["table1"], manifest),
        *_table2_rows(run_dir, flags["table2"]),
        *_table3_rows(run_dir, flags["table3"]),
        *_fact_rows(stats, flags["figure_facts"]),
        *_kobayashi_rows(run_dir, stats, flags["kobayashi2020"]),
    ]
    df = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("paper", "reproduced", "difference", "tolerance"):
        df[col] = df[col].astype("float64")
    df.attrs["run"] = str(manifest.get("run") or run_dir.name)
    df.attrs["comparable"] = comp
    df.attrs["context"] = run_context(manifest)
    return df


def run_context(manifest: dict[str, Any]) -> dict[str, str]:
    """Model, corpus and trees of a run, in words (the comparison's header)."""
    model_cfg = (manifest.get("model") or {}).get("config") or {}
    prov = (manifest.get("model") or {}).get("provenance") or {}
    model = str(model_cfg.get("name_or_path") or prov.get("spec") or "unknown model")
    model_note = []
    if model_cfg.get("revision"):
        model_note.append(f"revision {str(model_cfg['revision'])[:10]}")
    if prov.get("num_layers"):
        model_note.append(f"{prov['num_layers']} layers x {prov.get('num_heads')} heads")
    corpus_cfg = (manifest.get("corpus") or {})
    wiki = corpus_cfg.get("wikipedia") or {}
    hf = wiki.get("hf_dataset") or {}
    corpus = str(wiki.get("path") or wiki.get("url") or corpus_cfg.get("dump_file")
                 or (f"Hugging Face dataset {hf.get('path')}" + (f" ({hf['name']})" if hf.get("name") else "")
                     if hf else "unknown corpus"))
    n_seg = ((manifest.get("steps") or {}).get("segments") or {}).get("segments_produced")
    if n_seg is not None:
        corpus += f", {n_seg} segments"
    kind = treebank_kind(manifest)
    gold, what = TREES.get(kind or "", ("unknown", "trees of unrecorded origin"))
    name = _treebank_name(manifest)
    trees = f"{gold} ({what}; kind `{kind}`)" + (f": {name}" if name else "") if kind else "unknown"
    return {"model": model, "model_note": ", ".join(model_note), "corpus": corpus, "trees": trees,
            "trees_kind": kind or "", "compare_with_paper": str(_compare_flag(manifest)).lower()}


# ========================================================================================= markdown
def _fmt(x: Any, section: str, *, signed: bool = False) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "–"
    if math.isnan(v):
        return "–"
    if section in (SECTIONS["figure_facts"], SECTIONS["kobayashi2020"]):
        return f"{v:+.3g}" if signed else f"{v:.3g}"
    return f"{v:+.1f}" if signed else f"{v:.1f}"


def status_counts(df: "pd.DataFrame") -> dict[str, int]:
    """Rows of a comparison per status (every status of :data:`STATUSES`, 0 when absent)."""
    return {s: int((df["status"] == s).sum()) for s in STATUSES}


def comparison_markdown(df: "pd.DataFrame") -> str:
    """Markdown: a header (model, corpus, trees, PASS/FAIL counts) and one table per section."""
    ctx = df.attrs.get("context", {})
    comp = df.attrs.get("comparable", {})
    counts = status_counts(df)
    judged = counts[PASS] + counts[FAIL]
    lines = [f"# Comparison with the paper: {df.attrs.get('run', '')}", ""]
    lines += [
        f"- Model: `{ctx.get('model', '?')}` ("
        + (f"{ctx['model_note']}; " if ctx.get("model_note") else "")
        + f"compare_with_paper: {ctx.get('compare_with_paper', '?')})",
        f"- Corpus: {ctx.get('corpus', '?')}",
        f"- Trees: {ctx.get('trees', '?')}",
        f"- Result: **{counts[PASS]} PASS, {counts[FAIL]} FAIL** of {judged} comparable checks; "
        f"{counts[NOT_COMPARABLE]} not comparable, {counts[NOT_RUN]} not run, {counts[NOT_MEASURED]} not measured",
        "",
    ]
    if judged == 0:
        lines += [f"**{NOTHING_COMPARABLE[0].upper()}{NOTHING_COMPARABLE[1:]}**: the numbers below are for "
                  "orientation only and never fail.", ""]
    lines += ["Comparable to the paper:", ""]
    for key, title in SECTIONS.items():
        c = comp.get(key, {"comparable": False, "reason": "unknown"})
        lines.append(f"- {title}: {'yes' if c['comparable'] else 'no'} ({c['reason']})")
    lines += ["", "Paper: Clark et al. 2019; tables in percent as printed, figure facts in their own units "
              "(fractions, head counts, nats). Difference = reproduced - paper. A non-comparable row shows "
              "both numbers and never fails. Norms: the second reference, Kobayashi et al. 2020 (EMNLP), whose claim "
              "is qualitative: each row is bertlook's reading of it, the run's norm-based share over its "
              "attention share (see the note).", ""]
    for key, title in SECTIONS.items():
        part = df[df["section"] == title]
        lines += [f"## {title}", ""]
        if part.empty:
            lines += ["No rows.", ""]
            continue
        if (part["status"] == NOT_RUN).all() and part["note"].nunique() == 1:
            note = str(part["note"].iloc[0])
            if not note.lower().startswith("not run"):
                note = f"not run: {note}"
            lines += [f"{note[0].upper()}{note[1:]}", ""]
            continue
        lines += ["| Item | Metric | Paper | Reproduced | Difference | Tolerance | Status | Note |",
                  "|---|---|---:|---:|---:|---:|---|---|"]
        for r in part.itertuples(index=False):
            status = f"**{r.status}**" if r.status == FAIL else r.status
            note = str(r.note).replace("|", "/").replace("\n", " ")
            lines.append(
                f"| {r.item} | {r.metric} | {_fmt(r.paper, title)} | {_fmt(r.reproduced, title)} | "
                f"{_fmt(r.difference, title, signed=True)} | ±{_fmt(r.tolerance, title)} | {status} | {note} |"
            )
        lines.append("")
    return "\n".join(lines)


def write_comparison(run_dir: str | os.PathLike, out_csv: str | os.PathLike, out_markdown: str | os.PathLike,
                     *, comparable: dict[str, Any] | None = None) -> "pd.DataFrame":
    """Write :func:`build_comparison` as CSV and :func:`comparison_markdown` as Markdown; return the frame."""
    df = build_comparison(run_dir, comparable=comparable)
    write_csv(out_csv, df)
    write_text(out_markdown, comparison_markdown(df))
    return df


# ================================================================================ check vs the paper
def check_against_paper(run_dir: str | os.PathLike, out: Callable[[str], None] = print) -> int:
    """Exit code: 1 when a comparable row FAILs (printed), 0 otherwise (incl. nothing comparable)."""
    df = build_comparison(run_dir)
    counts = status_counts(df)
    run = df.attrs.get("run", str(run_dir))
    if counts[PASS] + counts[FAIL] == 0:
        out(f"{run}: {NOTHING_COMPARABLE}:")
        for key, c in df.attrs["comparable"].items():
            out(f"  {SECTIONS[key]}: {'comparable, but no number was measured' if c['comparable'] else c['reason']}")
        return 0
    fails = df[df["status"] == FAIL]
    if not fails.empty:
        out(f"{run}: {len(fails)} of {counts[PASS] + counts[FAIL]} comparable checks FAIL against the paper:")
        for r in fails.itertuples(index=False):
            out(f"  FAIL {r.section} | {r.item} | {r.metric}: paper {_fmt(r.paper, r.section)}, reproduced "
                f"{_fmt(r.reproduced, r.section)} (difference {_fmt(r.difference, r.section, signed=True)}, "
                f"tolerance ±{_fmt(r.tolerance, r.section)})" + (f" -- {r.note}" if r.note else ""))
        return 1
    out(f"{run}: all {counts[PASS]} comparable checks PASS against the paper "
        f"({counts[NOT_COMPARABLE]} not comparable, {counts[NOT_RUN]} not run, {counts[NOT_MEASURED]} not measured)")
    return 0
