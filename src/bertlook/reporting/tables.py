"""Markdown of Tables 1-3: the analyses' frames joined with the paper's numbers, rendered in one place."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from bertlook.analyses.coref import COLUMNS as COREF_COLUMNS
from bertlook.analyses.heads import DIRECTION_ARROWS, TREEBANK_KINDS
from bertlook.analyses.probes.catalogue import PROBE_LABELS, STRUCTURAL_PROBE_NOTE, is_missing
from bertlook.analyses.tree_heads import BASELINE_LABELS, BASELINES
from bertlook.reporting.formatting import MISSING, pct

if TYPE_CHECKING:  # pragma: no cover
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
    return col in df.columns and bool(df[col].map(lambda v: not (pd.isna(v) or v == "")).any())


def _table1_cells(row, *, below: bool, heldout: bool, crossfit: bool, paper: bool, diff: bool,
                  notes: list[str]) -> list[str]:
    """One relation's cells of :func:`table1_markdown` (the optional column groups as flagged); a note on the
    paper's number goes to ``notes``."""
    rel = str(row.relation) + (" \\*" if below else "")
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
    if crossfit:
        ha_, hb = str(row.crossfit_head_a or ""), str(row.crossfit_head_b or "")
        cells += [f"{ha_} {DIRECTION_ARROWS.get(row.crossfit_direction_a, '')} / "
                  f"{hb} {DIRECTION_ARROWS.get(row.crossfit_direction_b, '')}" if ha_ and hb else "",
                  pct(row.crossfit_accuracy)]
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
    return cells


def table1_markdown(df: "pd.DataFrame", *, title: str, corpus_note: str) -> str:
    """Markdown twin of the paper's Table 1: percents with one decimal, 95% bootstrap CI in brackets."""
    heldout = _has(df, "heldout_head")
    crossfit = "crossfit_accuracy" in df.columns
    paper = _has(df, "paper_head")
    diff = _has(df, "diff_accuracy")
    header = ["Relation", "n", "Head", "Accuracy", "Baseline (offset)"]
    if heldout:
        header += ["Held-out head", "Held-out accuracy"]
    if crossfit:
        header += ["Cross-fit heads (A / B)", "Cross-fit accuracy"]
    if paper:
        header += ["Paper head", "Paper accuracy", "Paper baseline"]
    if diff:
        header += ["Diff (points)"]
    lines = [f"# {title}", "", corpus_note, "", "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    notes: list[str] = []
    any_below = False
    for row in df.itertuples(index=False):
        below = bool(getattr(row, "below_min_count", False))
        any_below = any_below or below
        cells = _table1_cells(row, below=below, heldout=heldout, crossfit=crossfit, paper=paper, diff=diff,
                              notes=notes)
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Accuracy: % of the relation's words whose gold head is the word the head attends to most "
        "(d\u2192h: the word's own attention; h\u2192d: the word attending most to it), best of all heads "
        "and both directions. Baseline: best fixed offset k (in parentheses) chosen on the same words: the "
        "word i+k, clipped to the sentence (i+k < 1 predicts the first word, i+k > n the last, which can be "
        "the word itself and is then wrong); ties go to the first offset of the list. Brackets: 95% bootstrap "
        "interval over sentences. All = every word (punctuation and root included). Heads are layer-head, "
        "1-indexed.",
    ]
    if heldout:
        lines.append("Held-out: head chosen on the train split, accuracy measured on this (dev) split; "
                     "the main columns choose and score on the same data, as the paper did (optimistic).")
    if crossfit:
        lines.append("Cross-fit: dev sentences split into two seeded halves A and B; the head chosen on A is "
                     "scored on B and the head chosen on B on A; accuracy pooled over both halves (no train "
                     "split needed).")
    if any_below:
        lines.append("\\* fewer words than the minimum count; shown because the design requires this row.")
    if paper:
        lines.append("Paper: Clark et al. 2019, Table 1 (BERT-base, WSJ dev, Stanford Dependencies); a "
                     "relation in parentheses is the paper's label of the matching row.")
    if notes:
        lines += ["", "Notes on paper numbers:", *notes]
    if "vs_baseline_p_holm" in df.columns:
        lines += ["", *_paired_markdown(df)]
    if "nopunct_accuracy" in df.columns:
        lines += ["", *_nopunct_markdown(df)]
    return "\n".join(lines) + "\n"


def _pval(p: Any) -> str:
    if p is None or pd.isna(p):
        return MISSING
    p = float(p)
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _points(d: Any, lo: Any = None, hi: Any = None) -> str:
    if d is None or pd.isna(d):
        return MISSING
    text = f"{100 * float(d):+.1f}"
    if lo is not None and hi is not None and not (pd.isna(lo) or pd.isna(hi)):
        text += f" [{100 * float(lo):+.1f}, {100 * float(hi):+.1f}]"
    return text


def _paired_markdown(df: "pd.DataFrame") -> list[str]:
    """The paired-test table under Table 1 (columns ``vs_baseline_*``, ``runner_up_*``, ``vs_runner_up_*``)."""
    def sig(v: Any) -> str:
        return MISSING if v is None or pd.isna(v) else ("yes" if bool(v) else "no")

    def bc(b: Any, c: Any) -> str:
        return MISSING if pd.isna(b) or pd.isna(c) else f"{int(b)} / {int(c)}"

    header = ["Relation", "n", "Head \u2212 baseline (points)", "b / c", "p", "p (Holm)", "Significant",
              "Runner-up", "Head \u2212 runner-up (points)", "b / c", "p", "p (Holm)", "Significant"]
    lines = ["## Paired tests: best head vs best offset baseline and vs runner-up head", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for r in df.itertuples(index=False):
        ru = str(r.runner_up_head or "")
        lines.append("| " + " | ".join([
            str(r.relation), f"{int(r.count):,}",
            _points(r.vs_baseline_diff, r.vs_baseline_diff_ci_low, r.vs_baseline_diff_ci_high),
            bc(r.vs_baseline_b, r.vs_baseline_c), _pval(r.vs_baseline_p), _pval(r.vs_baseline_p_holm),
            sig(r.vs_baseline_significant),
            f"{ru} {DIRECTION_ARROWS.get(r.runner_up_direction, '')} {pct(r.runner_up_accuracy)}" if ru else MISSING,
            _points(r.vs_runner_up_diff, r.vs_runner_up_diff_ci_low, r.vs_runner_up_diff_ci_high),
            bc(r.vs_runner_up_b, r.vs_runner_up_c), _pval(r.vs_runner_up_p), _pval(r.vs_runner_up_p_holm),
            sig(r.vs_runner_up_significant),
        ]) + " |")
    alpha = f"{float(df.attrs['alpha']):g}" if "alpha" in df.attrs else "heads.alpha"
    lines += [
        "",
        "On the words of each row, b = words the best head gets right and the comparison gets wrong, c = the "
        "reverse; difference = (b \u2212 c) / n (the accuracy difference), brackets: 95% percentile bootstrap "
        "interval over sentences (the replicates of the accuracy intervals). p: two-sided exact McNemar test, "
        "min(1, 2 \u00b7 BinomCDF(min(b, c); b + c, 1/2)); p (Holm): Holm step-down adjustment over the rows "
        "of this table (All included), separately for the two comparisons; Significant: adjusted p \u2264 "
        f"alpha = {alpha}. Baseline: the row's best offset, as above. Runner-up: the "
        "best (head, direction) among the other layer-heads. The best head, the offset and the runner-up are "
        "chosen on the same words they are tested on, so these tests are optimistic (selection); the "
        "held-out and cross-fit columns show how much of the lead survives an honest choice.",
    ]
    return lines


def _nopunct_markdown(df: "pd.DataFrame") -> list[str]:
    """The candidate-set table under Table 1: the best head with punctuation excluded as a candidate."""
    header = ["Relation", "n", "Accuracy, every word a candidate", "Head, no punctuation candidate",
              "Accuracy, no punctuation candidate", "Change (points)", "Words headed by punctuation"]
    lines = ["## Candidate sets: punctuation excluded as a candidate head", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for r in df.itertuples(index=False):
        every = float(r.nopunct_accuracy) - float(r.nopunct_delta)
        lines.append("| " + " | ".join([
            str(r.relation), f"{int(r.count):,}", pct(every),
            f"{r.nopunct_head} {DIRECTION_ARROWS.get(r.nopunct_direction, r.nopunct_direction)}",
            pct(r.nopunct_accuracy), _points(r.nopunct_delta), f"{int(r.gold_head_punct):,}",
        ]) + " |")
    lines += [
        "",
        "Punctuation: a word whose relation is punct (PTB: P) or whose UPOS is PUNCT. With punctuation "
        "excluded, no head may predict a punctuation word (both directions); the best head is chosen again. "
        "Change: best accuracy without punctuation candidates minus best accuracy with every word a "
        "candidate. Words headed by punctuation can never be right without punctuation candidates. The "
        "offset baselines are the same for both candidate sets. The main table uses "
        + ("no punctuation candidates (heads.exclude_punct_candidates: true)."
           if bool(df.attrs.get("exclude_punct_candidates")) else
           "every word as a candidate (heads.exclude_punct_candidates: false)."),
    ]
    return lines


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
        cells = [label, *(pct(getattr(row, c)) for c in COREF_COLUMNS),
                 *(_paper_pct(getattr(row, f"paper_{c}")) for c in COREF_COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    counts = df[df.system == "nearest"].iloc[0] if (df.system == "nearest").any() else None
    if counts is not None:
        lines.append("| Mentions scored (n) | " + " | ".join(
            f"{int(counts[f'n_{c}']):,}" for c in COREF_COLUMNS) + " | | | | |")
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
    has_mst = df["uas_mst_mean"].notna().any()
    head = ["Probe", "UAS", "sd", "seeds"] + (["UAS (MST)", "sd (MST)"] if has_mst else []) + ["paper", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 2) + ["---"]) + "|"]
    for r in df.itertuples(index=False):
        seeds = "–" if is_missing(r.n_seeds) or int(r.n_seeds) == 0 else str(int(r.n_seeds))
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


# --------------------------------------------------------------------------------------------------
# Single-head trees (tree-heads; beyond the paper)
# --------------------------------------------------------------------------------------------------
def tree_heads_markdown(best: "pd.DataFrame", *, note: str = "") -> str:
    """The best single-head trees per layer (:func:`bertlook.analyses.tree_heads.best_heads`) next to
    the baselines, in percent."""
    lines = ["| Layer | best UAS head | direction | UAS | best UUAS head | UUAS |",
             "|---|---|---|---:|---|---:|"]
    for r in best.itertuples(index=False):
        row = BASELINE_LABELS.get(r.row, r.row) if r.row in BASELINES else r.row
        cells = [f"*{row}*" if r.row in BASELINES else row, str(r.uas_head or "–"), str(r.uas_direction or "–"),
                 pct(r.uas), str(r.uuas_head or "–"), pct(r.uuas)]
        lines.append("| " + " | ".join(cells) + " |")
    n = int(best["n_words"].iloc[0]) if len(best) else 0
    notes = [note.strip()] if note.strip() else []
    notes.append(
        "One tree per head and dev sentence (Htut et al. 2019): UAS of the maximum spanning arborescence "
        "(Chu-Liu-Edmonds) of the head's word-word map with the gold root word attached to ROOT (dep2head: "
        "score of head j for word i = A(i -> j); head2dep: A(j -> i)); UUAS of the undirected maximum "
        "spanning tree of A + A^T (share of the gold edges found). "
        f"Scored: the {n} non-punctuation words that are not the gold root (as Table 3, minus the root, "
        "whose head is given). Baselines on the same words: right-branching with the gold root (each word's "
        "head is the next word, the last word's the root) and the adjacent chain w1-w2-...-wW (UUAS)."
    )
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"


def probe_ablations_markdown(df: "pd.DataFrame", *, note: str = "") -> str:
    """The per-layer ablations of Attn+GloVe (:func:`bertlook.analyses.probes.reference.run_layer_ablations`) in percent."""
    has_mst = df["uas_mst_mean"].notna().any()
    head = ["Attention features", "heads", "UAS", "sd", "Δ UAS", "seeds"] + (
        ["UAS (MST)", "sd (MST)", "Δ (MST)"] if has_mst else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    what = {"all": "every layer (Table 3's Attn + GloVe)", "keep": "only layer {l}", "drop": "every layer but {l}"}

    def delta(x):
        return MISSING if is_missing(x) else f"{100 * float(x):+.1f}"

    for r in df.itertuples(index=False):
        cells = [what.get(r.ablation, r.ablation).format(l=r.layer), str(int(r.n_heads)), pct(r.uas_mean),
                 pct(r.uas_sd), delta(r.delta_uas) if r.ablation != "all" else MISSING, str(int(r.n_seeds))]
        if has_mst:
            cells += [pct(r.uas_mst_mean), pct(r.uas_mst_sd),
                      delta(r.delta_uas_mst) if r.ablation != "all" else MISSING]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [note.strip()] if note.strip() else []
    notes.append(
        "Attn + GloVe (Table 3) trained on the attention features of some layers only: a head's features are its "
        "A(i -> j), A(j -> i) and ROOT parts; 'only layer l' keeps layer l's heads, 'every layer but l' removes "
        "them. UAS: percent of non-punctuation dev words whose highest-scoring candidate is the gold head; mean "
        "and sample sd over seeds, the same seeds and training as Table 3; Δ: the row's mean minus the first row's."
    )
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"


# ---- Table 1 caption
def trees_note(kind: str | None, name: str | None = None, *, comparable: bool = False) -> str:
    """One or two sentences on the trees used and whether the numbers are comparable to the paper."""
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


# --------------------------------------------------------------------------------------------------
# Cross-language summary
# --------------------------------------------------------------------------------------------------


def languages_markdown(best: "pd.DataFrame", agreement: "pd.DataFrame", labels: list[str],
                       languages: list[str], *, min_count: int | None = None,
                       base_relations: bool = False) -> str:
    """Markdown of the cross-language summary (:mod:`bertlook.analyses.languages`): one row per relation
    and direction, the best head and its accuracy (percent, one decimal) in each treebank (``labels``,
    with ``languages`` in the same order), then whether the treebanks agree."""
    header = ["Relation", "Dir.", *(f"{lab} ({lang})" if lang and lang != lab else str(lab)
                                     for lab, lang in zip(labels, languages)),
              "Same head", "Distinct", "Spearman", "Transfer"]
    lines = ["# Cross-language summary", "",
             f"Best attention head per relation in {len(labels)} treebanks of one model"
             + (f" (relations with at least {min_count:,} words in a treebank)" if min_count is not None else "")
             + (", UD subtypes merged into their base relation." if base_relations else "."),
             "", "| " + " | ".join(header) + " |",
             "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    cells = {(str(r.relation), str(r.direction), str(r.treebank)): r for r in best.itertuples(index=False)}
    agree = {(str(r.relation), str(r.direction)): r for r in agreement.itertuples(index=False)}
    keys = list(dict.fromkeys((str(r.relation), str(r.direction)) for r in best.itertuples(index=False)))
    for rel, direction in keys:
        row = [rel.replace("|", "/"), DIRECTION_ARROWS.get(direction, direction)]
        for lab in labels:
            b = cells.get((rel, direction, str(lab)))
            row.append(MISSING if b is None else f"{b.best_head} {pct(b.accuracy)}")
        a = agree.get((rel, direction))
        if a is None:
            row += [MISSING] * 4
        else:
            rho = float(a.mean_spearman)
            row += ["yes" if bool(a.same_best_head) else "no", str(int(a.n_distinct_best_heads)),
                    MISSING if pd.isna(rho) else f"{rho:.2f}", pct(a.transfer)]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Cells: the best head (layer-head, 1-indexed) of the relation in that treebank and its accuracy "
        "(% of the relation's dev words whose gold head is the word the head attends to most; d\u2192h: "
        "the word's own attention, h\u2192d: the word attending most to it); ties go to the lowest layer, "
        f"then head. {MISSING}: too few words in that treebank (counted in the summary JSON). "
        "Same head: every treebank with the relation has the same best head; Distinct: the number of "
        "different best heads. Spearman: mean over treebank pairs of the rank correlation of all heads' "
        "accuracies (1 = the heads rank alike). Transfer: mean over ordered pairs (A, B) of the accuracy "
        "in B of A's best head divided by B's best accuracy (100% = A's head is as good in B as B's own). "
        "Root and punctuation are not rows of their own (All counts every word, as in Table 1). Definitions: docs/definitions.md#cross-language-summary.",
    ]
    return "\n".join(lines) + "\n"


def table1_contributions_markdown(table: "pd.DataFrame", *, title: str, note: str) -> str:
    """``table1_contributions.md``: per kind and relation the best head (or layer), its accuracy and the best
    offset baseline (percent, one decimal), and the word count."""
    lines = [f"# {title}", "", note, "",
             "| kind | relation | best head / layer | accuracy | baseline | n |", "|---|---|---|---:|---:|---:|"]
    for r in table.itertuples(index=False):
        best = f"{r.best} ({r.direction})" if r.per == "head" else f"layer {r.best} ({r.direction})"
        lines.append(f"| {r.kind} | {r.relation} | {best} | {100 * r.accuracy:.1f} | "
                     f"{100 * r.baseline_accuracy:.1f} (offset {r.baseline_offset:+d}) | {r.count} |")
    return "\n".join(lines) + "\n"
