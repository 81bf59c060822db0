"""Markdown of Tables 1-3: the analyses' frames joined with the paper's numbers, rendered in one place."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertlook.reporting.formatting import MISSING, pct

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from bertlook.attention.store import AttentionStore


# --------------------------------------------------------------------------------------------------
# Table 1
# --------------------------------------------------------------------------------------------------


def _ci(lo: Any, hi: Any) -> str:
    a, b = pct(lo), pct(hi)
    return f" [{a}, {b}]" if MISSING not in (a, b) else ""


def _offset(k: Any) -> str:
    try:
        return f"{int(k):+d}"
    except (TypeError, ValueError):
        return ""


def _has(df: "pd.DataFrame", col: str) -> bool:
    import pandas as pd

    return col in df.columns and bool(df[col].map(lambda v: not (pd.isna(v) or v == "")).any())


def table1_markdown(df: "pd.DataFrame", *, title: str, corpus_note: str) -> str:
    """Markdown twin of the paper's Table 1: percents with one decimal, 95% bootstrap CI in brackets."""
    import pandas as pd

    from bertlook.analyses.heads import DIRECTION_ARROWS

    heldout = _has(df, "heldout_head")
    paper = _has(df, "paper_head")
    diff = _has(df, "diff_accuracy")
    header = ["Relation", "n", "Head", "Accuracy", "Baseline (offset)"]
    if heldout:
        header += ["Held-out head", "Held-out accuracy"]
    if paper:
        header += ["Paper head", "Paper accuracy", "Paper baseline"]
    if diff:
        header += ["Diff (points)"]
    lines = [f"# {title}", "", corpus_note, "", "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    notes: list[str] = []
    any_below = False
    for row in df.itertuples(index=False):
        rel = str(row.relation)
        if bool(getattr(row, "below_min_count", False)):
            rel += " \\*"
            any_below = True
        cells = [
            rel,
            f"{int(row.count):,}",
            f"{row.best_head} {DIRECTION_ARROWS.get(row.direction, row.direction)}",
            f"{pct(row.accuracy)}{_ci(row.ci_low, row.ci_high)}",
            f"{pct(row.baseline_accuracy)} ({_offset(row.baseline_offset)}){_ci(row.baseline_ci_low, row.baseline_ci_high)}",
        ]
        if heldout:
            hh = str(row.heldout_head or "")
            cells += [f"{hh} {DIRECTION_ARROWS.get(row.heldout_direction, '')}".strip() if hh else "",
                      pct(row.heldout_accuracy)]
        if paper:
            ph = str(row.paper_head or "")
            pr = str(getattr(row, "paper_relation", "") or "")
            tag = f" ({pr})" if pr and pr != str(row.relation) else ""
            cells += [f"{ph} {DIRECTION_ARROWS.get(row.paper_direction, '')}{tag}".strip() if ph else "",
                      pct(row.paper_accuracy),
                      f"{pct(row.paper_baseline)} ({_offset(row.paper_baseline_offset)})"
                      if not pd.isna(row.paper_baseline) else ""]
            note = str(getattr(row, "paper_note", "") or "")
            if note:
                notes.append(f"- {row.relation}: {note}")
        if diff:
            v = row.diff_accuracy
            cells.append("" if pd.isna(v) else f"{100 * float(v):+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Accuracy: % of the relation's words whose gold head is the word the head attends to most "
        "(d\u2192h: the word's own attention; h\u2192d: the word attending most to it), best of all heads "
        "and both directions. Baseline: best fixed offset (word i+k). Brackets: 95% bootstrap interval "
        "over sentences. All = every word (punctuation and root included). Heads are layer-head, 1-indexed.",
    ]
    if heldout:
        lines.append("Held-out: head chosen on the train split, accuracy measured on this (dev) split; "
                     "the main columns choose and score on the same data, as the paper did (optimistic).")
    if any_below:
        lines.append("\\* fewer words than the minimum count; shown because the design requires this row.")
    if paper:
        lines.append("Paper: Clark et al. 2019, Table 1 (BERT-base, WSJ dev, Stanford Dependencies); a "
                     "relation in parentheses is the paper's label of the matching row.")
    if notes:
        lines += ["", "Notes on paper numbers:", *notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Table 2
# --------------------------------------------------------------------------------------------------


def _paper_pct(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(v) else f"{100 * v:.0f}"


def table2_markdown(df: "pd.DataFrame", *, title: str, note: str = "") -> str:
    """Markdown twin of Table 2: our accuracy (percent, 1 decimal) and the paper's (as printed)."""
    from bertlook.analyses.coref import COLUMNS

    header = ["System", "All", "Pronoun", "Proper", "Nominal", "Paper: All", "Pronoun", "Proper", "Nominal"]
    lines = [f"# {title}", ""]
    if note:
        lines += [note, ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in df.itertuples(index=False):
        label = str(row.label)
        if row.system == "best_head":
            label = f"Best head {row.head}" if row.head else "Best head (no mention to score)"
            if row.paper_head:
                label += f" (paper: {row.paper_head})"
        cells = [label, *(pct(getattr(row, c)) for c in COLUMNS),
                 *(_paper_pct(getattr(row, f"paper_{c}")) for c in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    counts = df[df.system == "nearest"].iloc[0] if (df.system == "nearest").any() else None
    if counts is not None:
        lines.append("| Mentions scored (n) | " + " | ".join(
            f"{int(counts[f'n_{c}']):,}" for c in COLUMNS) + " | | | | |")
    lines += [
        "",
        "Antecedent selection accuracy: % of mentions with an antecedent (an earlier mention of the same "
        "cluster inside the truncated document) for which the system picks a correct antecedent. For an "
        "attention head: the mention's head word attends most to the head word of one of its antecedents. "
        "Mention type from the head word's POS (pronoun PRP/PRP$/WP/WP$, proper NNP/NNPS, nominal the rest). "
        "Heads are layer-head, 1-indexed; the best head is chosen on the same data it is scored on. Paper: "
        "Clark et al. 2019, Table 2 (BERT-base, CoNLL-2012, documents truncated to 128 tokens); the neural "
        "row is the paper's number only (on untruncated documents). Definitions: docs/coreference.md.",
    ]
    return "\n".join(lines) + "\n"


def table2_note(store: "AttentionStore", candidates: str) -> str:
    """The sentence under Table 2: model, corpus files, truncation, head rule, candidates."""
    meta = store.meta
    coref = meta.get("coref") or {}
    model = meta.get("model") or {}
    name = model.get("spec") or model.get("name_or_path") or model.get("path_or_id") or "?"
    files = ", ".join(Path(i.get("path", "?")).name for i in coref.get("inputs", [])[:3])
    more = len(coref.get("inputs", [])) - 3
    if more > 0:
        files += f" (+{more} more)"
    return (f"Model `{name}`; corpus {files or '?'}; parts truncated to {coref.get('max_seq_len', '?')} "
            f"wordpieces; head words: `{coref.get('head_rule', '?')}`; attention FROM split words: "
            f"`{coref.get('from_split', meta.get('from_split', '?'))}`; argmax over `{candidates}` candidates.")


# --------------------------------------------------------------------------------------------------
# Table 3
# --------------------------------------------------------------------------------------------------


def table3_markdown(df: "pd.DataFrame", *, note: str = "") -> str:
    """Table 3 as Markdown: UAS in percent, mean ± sample sd over seeds, the paper's number."""
    from bertlook.analyses.probes import PROBE_LABELS, STRUCTURAL_PROBE_NOTE, _isna

    has_mst = df["uas_mst_mean"].notna().any()
    head = ["Probe", "UAS", "sd", "seeds"] + (["UAS (MST)", "sd (MST)"] if has_mst else []) + ["paper", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 2) + ["---"]) + "|"]
    for r in df.itertuples(index=False):
        seeds = "–" if _isna(r.n_seeds) or int(r.n_seeds) == 0 else str(int(r.n_seeds))
        cells = [PROBE_LABELS.get(r.probe, r.probe), pct(r.uas_mean), pct(r.uas_sd), seeds]
        if has_mst:
            cells += [pct(r.uas_mst_mean), pct(r.uas_mst_sd)]
        cells += [pct(r.paper_uas), str(r.note or "").replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    notes = []
    if note:
        notes.append(note.strip())
    notes.append(
        "UAS: percent of non-punctuation dev words whose highest-scoring candidate is the gold head "
        "(independent argmax per word); mean and sample standard deviation over seeds. "
        "Paper: Table 3 of Clark et al. 2019 (Attn + GloVe printed as 77; the authors' run printed 78.0; "
        "the released code had the off-by-one GloVe alignment reproduced by the `released` row)."
    )
    notes.append(STRUCTURAL_PROBE_NOTE)
    return text + "\n" + "\n\n".join(notes) + "\n"


# ---- Table 1 caption
def trees_note(kind: str | None, name: str | None = None, *, comparable: bool = False) -> str:
    """One or two sentences on the trees used and whether the numbers are comparable to the paper."""
    from bertlook.analyses.heads import TREEBANK_KINDS

    if kind not in TREEBANK_KINDS:
        trees = "trees of unrecorded origin"
    else:
        trees = TREEBANK_KINDS[kind][1]
        if name:
            trees = trees.replace(")", f"; {name})") if "(" in trees else f"{trees} ({name})"
    if kind == "silver":
        trees = f"silver trees ({name or 'spaCy parser'}; predicted by a parser, not gold)"
    if comparable:
        comp = "Comparable to the paper (same data and model): the Diff column is ours minus the paper."
    else:
        comp = ("Not comparable to the paper (another model and/or other trees): paper numbers are shown "
                "for orientation only, without a difference.")
    return f"Trees: {trees}. {comp}"
