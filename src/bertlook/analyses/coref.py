"""Coreference: attention heads as antecedent selectors (twin of Table 2 of Clark et al. 2019).

The authors released no coreference code, so every choice below is ours; ``docs/coreference.md``
lists them with the reasons, and the ambiguous ones are switches. This module scores a coreference
attention store; the earlier stages live below it: the CoNLL-2012 reader in
:mod:`bertlook.data.conll2012`, head words, mention types and antecedents in
:mod:`bertlook.data.coref_mentions`, truncation and extraction (``coref-extract``) in
:mod:`bertlook.attention.coref_maps`.

**Metric** (:func:`score_store`). Mentions are ordered by (start, end); an antecedent of mention m is
an *earlier* mention of m's cluster inside the truncated part (starts before m, or same start and ends
before m). Every mention with at least one antecedent is scored, typed by its head word's POS
(pronoun: PRP, PRP$, WP, WP$; proper: NNP, NNPS; nominal: everything else). A head is correct for m
when, in the row of m's head word, the largest attention among the candidates goes to the head word
of one of m's antecedents. Candidates (``candidates``): ``all`` = every word of the part except m's
head word itself ([CLS]/[SEP] are never candidates; paper reading, default), or ``mentions`` = the
head words of all earlier mentions (any cluster), again without m's own head word. An antecedent whose
head word is m's own head word therefore never makes m correct (such mentions are counted). Ties go to
the lowest word index. All L x H heads are scored at once per mention row (one argmax over
``[L, H, mentions, words]``).

**Baselines** (no attention; same scored mentions). ``nearest``: the nearest earlier mention (the last
one in (start, end) order), right when it is in m's cluster. ``head_match``: the nearest earlier
mention whose head word equals m's (lower-cased); wrong when there is none. ``rule_based``: sieves
(1) exact match of the lower-cased mention text, (2) head-word match, (3) number / gender / person
agreement (:data:`PRONOUN_FEATURES`; non-pronouns are third person, plural when the head is NNS/NNPS,
singular when NN/NNP, gender unknown), (4) any earlier mention; the nearest mention passing the first
sieve that any earlier mention passes is chosen.

**Outputs** (:func:`table2_frame`, :func:`write_not_run`, CLI ``coref``; the Markdown:
:func:`bertlook.reporting.tables.table2_markdown`):
``table2.csv`` (fractions), ``table2.md`` (percents), ``coref_heads.csv`` (every head) and a summary
JSON with every count; without a corpus, ``coref --not-run REASON`` writes tables that say so.
:func:`run_coref_step` is the scoring step without the command line (the frames and the summary JSON,
:class:`CorefStepResult`); :func:`coref_summary` / :func:`not_run_summary` are the two summaries.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd

from bertlook.attention.store import AttentionStore, open_store
from bertlook.data.coref_mentions import (
    COLUMNS,
    HEAD_SOURCES,
    MENTION_TYPES,
    PRONOUN_POS,
    antecedent_structure,
    mention_type,
)
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv_full, write_text
from bertlook.naming import head_label

CANDIDATES = ("all", "mentions")
SYSTEMS = ("nearest", "head_match", "rule_based", "neural", "best_head")
BASELINES = ("nearest", "head_match", "rule_based")
SYSTEM_LABELS = {
    "nearest": "Nearest mention",
    "head_match": "Head-word match",
    "rule_based": "Rule-based (4 sieves)",
    "neural": "Neural coref (paper only)",
    "best_head": "Best head",
}
NOT_RUN_REASON = "no coreference corpus configured"
#: the run's own Table 2 columns (:func:`table2_frame`)
TABLE2_RUN_COLUMNS = (
    "system", "all", "pronoun", "proper", "nominal", "n_all", "n_pronoun", "n_proper", "n_nominal",
    "head", "label", "note",
)
#: the columns of tables/table2.csv: the run's, with the paper's joined in (reporting.paper_join)
TABLE2_CSV_COLUMNS = (
    "system", "all", "pronoun", "proper", "nominal", "n_all", "n_pronoun", "n_proper", "n_nominal",
    "paper_all", "paper_pronoun", "paper_proper", "paper_nominal", "head", "paper_head", "label", "note",
)
HEADS_CSV_COLUMNS = ("layer", "head", "all", "pronoun", "proper", "nominal", "n")

#: Lower-cased pronoun -> (person, number, gender); ``None`` = unknown (agrees with anything).
PRONOUN_FEATURES: dict[str, tuple[int | None, str | None, str | None]] = {
    **{w: (1, "sg", None) for w in ("i", "me", "my", "mine", "myself")},
    **{w: (1, "pl", None) for w in ("we", "us", "our", "ours", "ourselves")},
    **{w: (2, None, None) for w in ("you", "your", "yours")},
    "yourself": (2, "sg", None),
    "yourselves": (2, "pl", None),
    **{w: (3, "sg", "male") for w in ("he", "him", "his", "himself")},
    **{w: (3, "sg", "female") for w in ("she", "her", "hers", "herself")},
    **{w: (3, "sg", "neuter") for w in ("it", "its", "itself")},
    **{w: (3, "pl", None) for w in ("they", "them", "their", "theirs", "themselves")},
}


# --------------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------------


def mention_features(head: str, pos: str) -> tuple[int | None, str | None, str | None]:
    """(person, number, gender) for the agreement sieve; ``None`` = unknown (agrees with anything)."""
    if pos in PRONOUN_POS:
        return PRONOUN_FEATURES.get(head.lower(), (None, None, None))
    number = "pl" if pos in ("NNS", "NNPS") else "sg" if pos in ("NN", "NNP") else None
    return (3, number, None)


def agree(a: tuple, b: tuple) -> bool:
    """Two (person, number, gender) triples agree: equal wherever both are known (``None`` = unknown)."""
    return all(x is None or y is None or x == y for x, y in zip(a, b))


def baseline_predictions(words: Sequence[str], pos: Sequence[str], mentions: Sequence[Sequence[int]],
                         heads: Sequence[int]) -> dict[str, list[int | None]]:
    """Chosen antecedent (mention index, or None) of every mention for the three baselines."""
    n_earlier, _, _ = antecedent_structure(mentions)
    lw = [w.lower() for w in words]
    text = [" ".join(lw[int(s): int(e) + 1]) for s, e, _ in mentions]
    hw = [lw[h] for h in heads]
    feats = [mention_features(words[h], pos[h]) for h in heads]
    out: dict[str, list[int | None]] = {b: [] for b in BASELINES}
    for i in range(len(mentions)):
        earlier = range(n_earlier[i] - 1, -1, -1)  # nearest first
        nearest = n_earlier[i] - 1 if n_earlier[i] else None
        out["nearest"].append(nearest)
        out["head_match"].append(next((j for j in earlier if hw[j] == hw[i]), None))
        choice = None
        for sieve in (lambda j: text[j] == text[i], lambda j: hw[j] == hw[i],
                      lambda j: agree(feats[j], feats[i]), lambda j: True):
            choice = next((j for j in earlier if sieve(j)), None)
            if choice is not None:
                break
        out["rule_based"].append(choice)
    return out


@dataclasses.dataclass
class CorefScores:
    """Correct counts over a store. Column order everywhere: all, pronoun, proper, nominal."""

    num_layers: int
    num_heads: int
    candidates: str
    head_correct: "np.ndarray"  # [layer, head, column] int64; column: all, pronoun, proper, nominal
    counts: "np.ndarray"  # [column] int64: mentions with antecedents
    baseline_correct: dict[str, "np.ndarray"]  # name -> [column]
    n_parts: int = 0
    n_parts_scored: int = 0
    mentions_kept: int = 0
    own_head_only: int = 0
    no_candidates: int = 0
    head_source: dict[str, int] = dataclasses.field(default_factory=dict)

    def head_accuracy(self) -> "np.ndarray":
        """``[L, H, 4]`` accuracies (NaN where a column has no mention)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            # [layer, head, column]
            return np.where(self.counts > 0, self.head_correct / np.maximum(self.counts, 1), np.nan)

    def baseline_accuracy(self, name: str) -> "np.ndarray":
        """``[4]`` accuracies of baseline ``name`` (NaN where a column has no mention)."""
        return np.where(self.counts > 0, self.baseline_correct[name] / np.maximum(self.counts, 1), np.nan)  # [column]

    def best_head(self) -> tuple[int, int] | None:
        """0-based (layer, head) with the best All accuracy (ties: lowest layer, then head); None if no mention."""
        if self.counts[0] == 0:
            return None
        flat = int(np.argmax(self.head_correct[:, :, 0].reshape(-1)))
        return divmod(flat, self.num_heads)


def _type_onehot(types: Sequence[str]) -> "np.ndarray":
    T = np.zeros((len(types), 4), dtype=np.int64)  # [mention, column]
    T[:, 0] = 1
    for r, t in enumerate(types):
        T[r, 1 + MENTION_TYPES.index(t)] = 1
    return T


def _check_record(rec: dict[str, Any], n: int, where: str) -> tuple[int, list, list[int], list[str]]:
    for key in ("mentions", "mention_heads", "head_pos", "pos", "tokens"):
        if key not in rec:
            raise BertlookError(f"{where}: record has no {key!r} (not a coreference store; run coref-extract)")
    W = n - 2
    mentions, heads, hpos = rec["mentions"], [int(h) for h in rec["mention_heads"]], list(rec["head_pos"])
    if not (len(mentions) == len(heads) == len(hpos)):
        raise BertlookError(f"{where}: {len(mentions)} mentions, {len(heads)} heads and {len(hpos)} head POS")
    if len(rec["pos"]) != W:
        raise BertlookError(f"{where}: {len(rec['pos'])} POS tags for {W} words")
    for (s, e, _), h in zip(mentions, heads):
        if not (0 <= int(s) <= int(e) < W and int(s) <= h <= int(e)):
            raise BertlookError(f"{where}: mention [{s}, {e}] with head {h} lies outside the part's {W} words")
    return W, mentions, heads, hpos


def score_part(rec: dict[str, Any], attn, *, candidates: str = "all", where: str = "part") -> dict[str, Any]:
    """Score one part: per-head correct counts ``[L, H, 4]``, counts ``[4]``, baseline correct ``[4]`` each."""
    if candidates not in CANDIDATES:
        raise BertlookError(f"unknown candidates {candidates!r} (use one of {', '.join(CANDIDATES)})")
    a = np.asarray(attn)  # [layer, head, query_word, key_word]
    L, H, n = a.shape[0], a.shape[1], a.shape[2]
    W, mentions, heads, hpos = _check_record(rec, n, where)
    n_earlier, scored, ants = antecedent_structure(mentions)
    # head_correct [layer, head, column]; counts, baseline_correct [column]
    out: dict[str, Any] = {"head_correct": np.zeros((L, H, 4), np.int64), "counts": np.zeros(4, np.int64),
                           "baseline_correct": {b: np.zeros(4, np.int64) for b in BASELINES},
                           "own_head_only": 0, "no_candidates": 0, "scored": len(scored)}
    if not scored:
        return out
    types = [mention_type(hpos[i]) for i in scored]
    T = _type_onehot(types)  # [mention, column]
    out["counts"] = T.sum(axis=0)  # [column]
    S = len(scored)
    gold = np.zeros((S, W), dtype=bool)  # [mention, word]
    cand = np.ones((S, W), dtype=bool) if candidates == "all" else np.zeros((S, W), dtype=bool)  # [mention, word]
    for r, i in enumerate(scored):
        for j in ants[i]:
            gold[r, heads[j]] = True
        if candidates == "mentions":
            cand[r, [heads[j] for j in range(n_earlier[i])]] = True
        gold[r, heads[i]] = False
        cand[r, heads[i]] = False
        out["own_head_only"] += int(not gold[r].any())
        out["no_candidates"] += int(not cand[r].any())
    # [mention]: query_word of each mention's head word
    rows = np.asarray([heads[i] for i in scored], dtype=np.intp) + 1
    block = np.asarray(a[:, :, rows, 1: W + 1], dtype=np.float32)  # [layer, head, mention, word]
    if not np.isfinite(block).all():
        raise BertlookError(f"{where}: non-finite attention values")
    block = np.where(cand[None, None], block, -np.inf)  # [layer, head, mention, word]
    pred = block.argmax(axis=-1)  # [layer, head, mention]
    # [layer, head, mention]
    correct = np.take_along_axis(np.broadcast_to(gold, (L, H, S, W)), pred[..., None], axis=-1)[..., 0]
    correct &= cand.any(axis=-1)[None, None]  # [layer, head, mention]
    out["head_correct"] = correct.astype(np.int64) @ T  # [layer, head, column]

    words = list(rec["tokens"][1:-1])
    preds = baseline_predictions(words, list(rec["pos"]), mentions, heads)
    for name, chosen in preds.items():
        ok = np.array([chosen[i] is not None and mentions[chosen[i]][2] == mentions[i][2] for i in scored],  # [mention]
                      dtype=np.int64)
        out["baseline_correct"][name] = ok @ T  # [column]
    return out


def score_store(path_or_store, *, candidates: str = "all", max_examples: int | None = None) -> CorefScores:
    """Score every part of a coreference store (one example in memory at a time)."""
    if candidates not in CANDIDATES:
        raise BertlookError(f"unknown candidates {candidates!r} (use one of {', '.join(CANDIDATES)})")

    store = open_store(path_or_store, level="word", what="coreference attention store")
    L, H = store.num_layers, store.num_heads
    # head_correct [layer, head, column]; counts, baseline_correct [column]
    sc = CorefScores(num_layers=L, num_heads=H, candidates=candidates, head_correct=np.zeros((L, H, 4), np.int64),
                     counts=np.zeros(4, np.int64), baseline_correct={b: np.zeros(4, np.int64) for b in BASELINES},
                     head_source={s: 0 for s in HEAD_SOURCES})
    for k, (rec, attn) in enumerate(store):
        if max_examples is not None and k >= max_examples:
            break
        where = f"{store.path}: part {rec.get('id')!r}"
        r = score_part(rec, attn, candidates=candidates, where=where)
        sc.n_parts += 1
        sc.n_parts_scored += int(r["scored"] > 0)
        sc.mentions_kept += len(rec["mentions"])
        sc.head_correct += r["head_correct"]
        sc.counts += r["counts"]
        for b in BASELINES:
            sc.baseline_correct[b] += r["baseline_correct"][b]
        sc.own_head_only += r["own_head_only"]
        sc.no_candidates += r["no_candidates"]
        for s in rec.get("head_source") or []:
            sc.head_source[s] = sc.head_source.get(s, 0) + 1
    return sc


# --------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------



def heads_frame(scores: CorefScores) -> "pd.DataFrame":
    """``coref_heads.csv``: layer, head (1-indexed), all, pronoun, proper, nominal (fractions), n."""
    acc = scores.head_accuracy()  # [layer, head, column]
    L, H = scores.num_layers, scores.num_heads
    layer, head = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")  # [layer, head] each
    data = {"layer": layer.reshape(-1), "head": head.reshape(-1)}  # [layer*head] each
    for c, name in enumerate(COLUMNS):
        data[name] = acc[:, :, c].reshape(-1)  # [layer*head]
    data["n"] = np.full(L * H, int(scores.counts[0]))  # [layer*head]
    return pd.DataFrame(data, columns=list(HEADS_CSV_COLUMNS))


def table2_frame(scores: CorefScores) -> "pd.DataFrame":
    """Table 2 twin: rows nearest, head_match, rule_based, neural (not run: NaN), best_head; fractions.

    Columns :data:`TABLE2_RUN_COLUMNS`; the paper's numbers are joined by
    :func:`bertlook.reporting.paper_join.join_table2` (giving :data:`TABLE2_CSV_COLUMNS`)."""
    n = [int(x) for x in scores.counts]
    best = scores.best_head()
    acc = scores.head_accuracy()  # [layer, head, column]
    rows = []
    for system in SYSTEMS:
        row: dict[str, Any] = {"system": system, "label": SYSTEM_LABELS[system], "head": "", "note": ""}
        if system in BASELINES:
            vals = list(scores.baseline_accuracy(system))  # [column]
        elif system == "best_head" and best is not None:
            vals = list(acc[best[0], best[1]])  # [column]
            row["head"] = head_label(*best)
            row["note"] = "chosen on this data (best All accuracy)"
        else:
            vals = [float("nan")] * 4
        counts: list[Any] = [float("nan")] * 4 if system == "neural" else n
        for c, name in enumerate(COLUMNS):
            row[name] = float(vals[c])
            row[f"n_{name}"] = counts[c]
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(TABLE2_RUN_COLUMNS))
    for name in COLUMNS:
        df[f"n_{name}"] = df[f"n_{name}"].astype("Int64")
    return df


def not_run_note(reason: str = NOT_RUN_REASON) -> str:
    """The note of a step that did not run: ``reason``, starting with "not run" (default :data:`NOT_RUN_REASON`)."""
    reason = (reason or NOT_RUN_REASON).strip()
    return reason if reason.lower().startswith("not run") else f"not run: {reason}"


def not_run_summary(reason: str = NOT_RUN_REASON) -> dict[str, Any]:
    """The summary JSON of ``bertlook coref --not-run REASON``."""
    return {"status": "not run", "reason": not_run_note(reason)}


def write_not_run(out_table_csv, out_md, out_heads_csv, reason: str = NOT_RUN_REASON) -> str:
    """Tables that say the step did not run (no corpus configured); returns the note written.

    ``table2.csv``: the usual columns plus ``note``, one row ``system="not run"``; ``coref_heads.csv``:
    its columns plus ``note``, one row with empty numbers; ``table2.md``: the sentence.
    """
    note = not_run_note(reason)
    row = {c: "" for c in TABLE2_CSV_COLUMNS}
    row.update({"system": "not run", "label": "not run", "note": note})
    write_csv_full(out_table_csv, pd.DataFrame([row], columns=list(TABLE2_CSV_COLUMNS)))
    heads = {c: "" for c in HEADS_CSV_COLUMNS}
    heads["note"] = note
    write_csv_full(out_heads_csv, pd.DataFrame([heads], columns=[*HEADS_CSV_COLUMNS, "note"]))
    write_text(out_md, "# Coreference: antecedent selection accuracy (Table 2 twin)\n\n"
                       f"{note[0].upper()}{note[1:]}.\n\n"
                       "Set a CoNLL-2012 (OntoNotes) corpus to run this step; see docs/coreference.md.\n")
    return note


def score_summary(store: "AttentionStore", scores: CorefScores) -> dict[str, Any]:
    """The summary JSON of ``bertlook coref``: the store's reader / truncation counts and the scores."""
    best = scores.best_head()
    coref = store.meta.get("coref") or {}
    read = coref.get("read") or {}
    trunc = coref.get("truncation") or {}
    counts = {
        "documents_read": read.get("documents"),
        "documents_without_mentions": read.get("documents_without_mentions"),
        "parts_read": read.get("parts"),
        "parts_skipped_without_mentions": read.get("parts_without_mentions"),
        "parts_with_unusable_tree": read.get("parts_with_unusable_tree"),
        "parts_excluded_alignment": trunc.get("parts_excluded_alignment"),
        "parts_excluded_empty": trunc.get("parts_excluded_empty"),
        "parts_truncated": trunc.get("parts_truncated"),
        "parts_scored": scores.n_parts,
        "mentions_read": read.get("mentions"),
        "mentions_kept": scores.mentions_kept,
        "mentions_dropped_cut": trunc.get("mentions_dropped_cut"),
        "mentions_dropped_outside": trunc.get("mentions_dropped_outside"),
        "mentions_in_excluded_parts": trunc.get("mentions_in_excluded_parts"),
        "mentions_with_antecedents": {c: int(v) for c, v in zip(COLUMNS, scores.counts)},
    }
    return {
        "attention": str(store.path),
        "counts": counts,
        "candidates": scores.candidates,
        "num_layers": scores.num_layers,
        "num_heads": scores.num_heads,
        "parts": scores.n_parts,
        "parts_with_scored_mentions": scores.n_parts_scored,
        "mentions_kept": scores.mentions_kept,
        "mentions_with_antecedents": {c: int(v) for c, v in zip(COLUMNS, scores.counts)},
        "mentions_antecedent_heads_only_own_head": scores.own_head_only,
        "mentions_without_candidates": scores.no_candidates,
        "head_source": scores.head_source,
        "best_head": head_label(*best) if best else None,
        "best_head_accuracy": ({c: float(v) for c, v in zip(COLUMNS, scores.head_accuracy()[best[0], best[1]])}
                               if best else None),
        "baselines": {b: {c: float(v) for c, v in zip(COLUMNS, scores.baseline_accuracy(b))} for b in BASELINES},
        "extraction": {
            "inputs": coref.get("inputs"),
            "head_rule": coref.get("head_rule"),
            "from_split": coref.get("from_split"),
            "max_seq_len": coref.get("max_seq_len"),
            "read": coref.get("read"),
            "truncation": coref.get("truncation"),
            "excluded": store.meta.get("excluded"),
        },
    }


def coref_summary(store: "AttentionStore", scores: CorefScores) -> dict[str, Any]:
    """The summary JSON of ``bertlook coref``: ``status`` ok, then :func:`score_summary`."""
    return {"status": "ok", **score_summary(store, scores)}


class CorefStepResult(NamedTuple):
    """What :func:`run_coref_step` computed. ``table``: Table 2 with the run's numbers
    (:data:`TABLE2_RUN_COLUMNS`; the paper's are joined by :func:`bertlook.reporting.paper_join.join_table2`),
    ``heads``: ``coref_heads.csv``, ``summary``: the summary JSON, ``store`` the store scored."""

    store: AttentionStore
    scores: CorefScores
    table: "pd.DataFrame"
    heads: "pd.DataFrame"
    summary: dict[str, Any]


def run_coref_step(attention, *, candidates: str = "all", max_examples: int | None = None) -> CorefStepResult:
    """``bertlook coref`` without the command line: score the coreference store ``attention`` (a directory or an
    open store, from ``coref-extract``) and build its tables and summary JSON."""
    store = open_store(attention, level="word", what="coreference attention store")
    scores = score_store(store, candidates=candidates, max_examples=max_examples)
    return CorefStepResult(store=store, scores=scores, table=table2_frame(scores), heads=heads_frame(scores),
                           summary=coref_summary(store, scores))
