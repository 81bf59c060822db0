"""bertlook.reporting.golden (+ golden_ranges, golden_rules): the regression gate.

A synthetic run directory (tests/test_compare.make_run) is turned into a golden file; a copy of the run
whose numbers move by float rounding or by as many words as the computation allows must pass; one that
moves by more, or changes a head choice that was not near-tied, must fail.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from bertlook.errors import BertlookError
from bertlook.reporting import golden
from bertlook.reporting.golden_ranges import (
    bootstrap_weight_bound, mcnemar_range, near_tied, poisson_k,
)
from test_compare import NUM_HEADS, NUM_LAYERS, _csv, make_run

TOL = golden.Tolerances(argmax_lambda=0.01, tree_factor=2, probe_words=4, positional_lambda_per_row=1e-5)


@pytest.fixture
def run_dir(tmp_path):
    return make_run(tmp_path)


# --------------------------------------------------------------------------------- the primitives
def test_poisson_k_is_the_quantile():
    assert poisson_k(0.0) == 0
    # P(Poisson(1) > k) for k = 8, 9: 1.1e-6, 1.0e-7
    assert poisson_k(1.0) == 9
    assert poisson_k(1.0, risk=1e-3) == 5
    lam, k = 3.5, poisson_k(3.5)
    tail = 1 - sum(math.exp(-lam) * lam**i / math.factorial(i) for i in range(k + 1))
    tail_before = 1 - sum(math.exp(-lam) * lam**i / math.factorial(i) for i in range(k))
    assert tail <= 1e-6 < tail_before


def test_mcnemar_range_covers_every_count_within_k():
    from bertlook.analyses.table1 import mcnemar_exact

    for b, c, k in [(2081, 1138, 3), (5, 7, 2), (0, 0, 1), (30, 10, 4)]:
        lo, hi = mcnemar_range(b, c, k)
        ps = [mcnemar_exact(b + x, c + y) for x in range(-k, k + 1) for y in range(-k, k + 1)
              if abs(x) + abs(y) <= k and b + x >= 0 and c + y >= 0]
        assert lo <= min(ps) and max(ps) <= hi and hi - max(ps) <= 1e-9 and min(ps) - lo <= 1e-9 * min(ps) + 1e-300


def test_bootstrap_weight_bound_replays_the_draws():
    rng = np.random.default_rng(7)
    w = np.concatenate([rng.multinomial(50, np.full(50, 1 / 50), size=b) for b in (200, 100)])
    assert bootstrap_weight_bound(50, 300, 7) == int(w.max())
    assert bootstrap_weight_bound(0, 300, 7) == 0 and bootstrap_weight_bound(50, 0, 7) == 0


def test_matches_checks():
    m = golden.matches
    assert m(0.5, 0.5 + 1e-7, 1e-6, 0) and not m(0.5, 0.5001, 1e-6, 0)
    rng = {"value": 0.5, "min": 0.49, "max": 0.51}
    assert m(rng, 0.49, 0, 0) and m(rng, 0.51 + 1e-12, 1e-9, 0) and not m(rng, 0.512, 1e-6, 0)
    assert not m(rng, None, 0, 0) and not m(rng, "0.5", 0, 0)
    assert m({"value": "3-2", "any_of": ["3-2", "4-1"]}, "4-1", 0, 0)
    assert not m({"value": "3-2", "any_of": ["3-2", "4-1"]}, "5-1", 0, 0)
    assert m({"value": 3, "unchecked": "why"}, 99, 0, 0)
    assert m(3, 3, 0, 0) and not m(3, 4, 1, 1)  # integers exact
    assert m(None, None, 0, 0) and not m(None, 0.0, 1, 1)


def test_near_tied_uses_both_heads_tolerances():
    sel = {"n": 100, "candidates": [
        {"head": "3-2", "direction": "dep2head", "words": 60, "fragile": 40, "eval_words": 60, "eval_fragile": 40},
        {"head": "4-1", "direction": "head2dep", "words": 57, "fragile": 0, "eval_words": 57, "eval_fragile": 0},
        {"head": "5-1", "direction": "dep2head", "words": 50, "fragile": 0, "eval_words": 50, "eval_fragile": 0}]}
    k = lambda f: 3 if f else 0  # noqa: E731
    assert [c["head"] for c in near_tied(sel, k)] == ["3-2", "4-1"]
    assert [c["head"] for c in near_tied(sel, lambda f: 0)] == ["3-2"]


# ------------------------------------------------------------------------------------- tolerances
def test_read_tolerances_and_its_errors(tmp_path):
    doc = {"format": "bertlook-tolerances/1", "measured": "2026-12-03", "groups": {
        "argmax": {"lambda_per_fragile": 0.005, "risk": 1e-6, "why": "w"}, "tree": {"factor": 2, "why": "t"},
        "probe": {"words": 6, "why": "p"}, "positional": {"lambda_per_row": 2e-5, "why": "r"}}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    tol = golden.read_tolerances(path)
    assert tol.probe_words == 6 and tol.tree_factor == 2 and tol.argmax_lambda == 0.005
    assert tol.k_argmax(0) == 0 and tol.k_argmax(200) == poisson_k(1.0) and tol.k_tree(200) == 2 * poisson_k(1.0)
    assert golden.read_tolerances(None).k_argmax(10**6) == 0  # no file: exact words
    doc["groups"]["probe"]["words"] = 2.5
    path.write_text(json.dumps(doc))
    with pytest.raises(BertlookError, match="probe.words must be a number >= 0 \\(whole words\\)"):
        golden.read_tolerances(path)
    path.write_text(json.dumps({"format": "x"}))
    with pytest.raises(BertlookError, match="not a tolerances file"):
        golden.read_tolerances(path)


def test_committed_tolerances_file_is_valid():
    from pathlib import Path

    tol = golden.read_tolerances(Path(__file__).parent / "golden" / "tolerances.json")
    assert tol.argmax_lambda > 0 and tol.probe_words > 0 and tol.tree_factor >= 2 and tol.positional_lambda_per_row > 0
    # the contributions / faithfulness tables: measured spreads (scripts/contribution_spread.py) x 10, words x 4
    assert 0 < tol.contribution_atol <= tol.faithfulness_atol < 0.01 and tol.contribution_words >= 4


def test_contribution_ranges(tmp_path):
    """The contributions groups: every number within the measured atol (counts exact); Table 1 per map kind's
    accuracies within k words of the row's count (a float in the table), its chosen head exact."""
    from bertlook.reporting.golden_rules import RANGERS
    from bertlook.reporting.golden_ranges import RunFiles

    tol = golden.Tolerances(contribution_atol=1e-4, faithfulness_atol=1e-3, contribution_words=4)
    stats = {"status": "ok", "alti/1/cls": 0.25, "alti/1/n_examples": 8.0, "alti/1/per": "layer"}
    RANGERS["contribution_stats"](stats, RunFiles(tmp_path), tol, name="contribution_stats", groups={})
    assert stats["alti/1/cls"] == {"value": 0.25, "min": 0.25 - 1e-4, "max": 0.25 + 1e-4}
    assert stats["alti/1/n_examples"] == 8.0 and stats["alti/1/per"] == "layer"
    faith = {"status": "ok", "alti/representation_change/spearman": 0.5}
    RANGERS["faithfulness"](faith, RunFiles(tmp_path), tol, name="faithfulness", groups={})
    assert faith["alti/representation_change/spearman"]["max"] == pytest.approx(0.501)
    t1 = {"status": "ok", "alti/All/accuracy": 0.5, "alti/All/count": 200.0, "alti/All/best": "3"}
    why = RANGERS["table1_contributions"](t1, RunFiles(tmp_path), tol, name="table1_contributions", groups={})
    assert t1["alti/All/accuracy"]["min"] == pytest.approx(0.48) and t1["alti/All/best"] == "3" and "4 words" in why
    assert not golden.matches(t1["alti/All/accuracy"], 0.475, 0.0, 0.0) and golden.matches(t1["alti/All/accuracy"], 0.485, 0.0, 0.0)


# ---------------------------------------------------------------------------------- ranges in a run
def _selections(run_dir, fragile: int = 100):
    """A heads summary whose `selections` make det's best head 3-2 near-tied with 4-1, nothing else near."""
    t1 = pd.read_csv(run_dir / "tables" / "table1.csv")
    sel = {}
    for rel, head, direction, acc, n in zip(t1["relation"], t1["best_head"], t1["direction"], t1["accuracy"],
                                            t1["count"]):
        words = int(round(acc * n))
        cands = [{"head": head, "direction": direction, "words": words, "fragile": fragile, "eval_words": words,
                  "eval_fragile": fragile}]
        if rel == "det":
            cands.append({"head": "4-1", "direction": "head2dep", "words": words - 1, "fragile": 0,
                          "eval_words": words - 1, "eval_fragile": 0})
        cands.append({"head": "1-1", "direction": "dep2head", "words": words - 20, "fragile": 0,
                      "eval_words": words - 20, "eval_fragile": 0})
        sel[rel] = {"best": {"n": int(n), "candidates": cands},
                    "heldout": {"n": 4 * int(n), "candidates": [
                        {"head": head, "direction": direction, "words": 4 * words, "fragile": fragile,
                         "eval_words": words - 3, "eval_fragile": fragile}]}}
    acc = pd.read_csv(run_dir / "tables" / "head_accuracy.csv")
    acc["fragile"] = fragile
    _csv(run_dir / "tables" / "head_accuracy.csv", acc)
    (run_dir / "tables" / "head_accuracy.summary.json").write_text(json.dumps(
        {"n_words": 100, "n_sentences": 20, "bootstrap": 50, "seed": 0, "alpha": 0.05, "selections": sel}))


def test_table1_ranges_accept_float_noise_and_near_ties_only(run_dir, tmp_path):
    _selections(run_dir)
    doc = golden.make_golden(run_dir, TOL)
    g = doc["groups"]["table1"]
    k = TOL.k_argmax(100)
    acc = g["values"]["det/accuracy"]
    assert k >= 1 and acc["max"] - acc["value"] == pytest.approx(k / 150)
    assert g["values"]["det/best_head"] == {"value": g["values"]["det/best_head"]["value"],
                                            "any_of": [g["values"]["det/best_head"]["value"], "4-1"]}
    assert not isinstance(g["values"]["pobj/best_head"], dict)  # no near tie: exact
    assert "k(f)" in g["tolerance"] and doc["tolerances"]["argmax_lambda"] == 0.01
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert golden.check_against_golden(run_dir, path, out=lambda s: None) == 0

    t1 = pd.read_csv(run_dir / "tables" / "table1.csv")
    det = t1["relation"] == "det"
    base = t1.copy()
    t1.loc[det, "accuracy"] += (k - 0.5) / 150  # within k words
    t1.loc[det, "best_head"] = "4-1"  # a near-tied head
    t1.loc[det, "direction"] = "head2dep"
    _csv(run_dir / "tables" / "table1.csv", t1)
    assert golden.check_against_golden(run_dir, path, out=lambda s: None) == 0
    t1.loc[det, "accuracy"] += 2 / 150  # beyond k words
    _csv(run_dir / "tables" / "table1.csv", t1)
    lines = []
    assert golden.check_against_golden(run_dir, path, out=lines.append) == 1
    assert any("table1/det/accuracy" in x and "accepted" in x for x in lines)
    base.loc[base["relation"] == "pobj", "best_head"] = "4-1"  # a head that was not near-tied
    _csv(run_dir / "tables" / "table1.csv", base)
    assert golden.check_against_golden(run_dir, path, out=lambda s: None) == 1


def test_exact_words_without_tolerances(run_dir):
    _selections(run_dir)
    g = golden.make_golden(run_dir)["groups"]["table1"]["values"]
    assert not isinstance(g["det/accuracy"], dict)
    assert not isinstance(g["det/best_head"], dict)  # 4-1 is one word behind: not within 0 + 0 words


def test_probe_ranges(run_dir):
    (run_dir / "tables" / "table3.summary.json").write_text(json.dumps({"data": {"dev": {"n_eval_words": 1000}}}))
    v = golden.make_golden(run_dir, TOL)["groups"]["table3"]["values"]
    assert v["attn/uas_mean"]["max"] - v["attn/uas_mean"]["value"] == pytest.approx(4 / 1000)
    assert v["attn/uas_sd"]["max"] - v["attn/uas_sd"]["value"] == pytest.approx(math.sqrt(1.5) * 4 / 1000)
    assert not isinstance(v["right_branching/uas_mean"], dict)  # not trained: exact
    assert v["attn/n_seeds"] == 3


def test_behaviour_labels_near_a_threshold_go_either_way(run_dir):
    stats = pd.read_csv(run_dir / "tables" / "attention_stats.csv")
    stats.loc[0, "prev"] = 0.5 + 1e-7  # within rounding of the 0.5 threshold
    _csv(run_dir / "tables" / "attention_stats.csv", stats, "%.8g")
    v = golden.make_golden(run_dir, TOL)["groups"]["head_clusters"]["values"]
    assert isinstance(v["1-1"], dict) and "previous token" in v["1-1"]["any_of"]
    assert not isinstance(v["2-2"], dict)


def test_counts_exclude_near_tie_lists(run_dir):
    (run_dir / "tables").joinpath("head_accuracy.summary.json").write_text(json.dumps(
        {"n_words": 5, "selections": {"All": {"best": {"n": 5, "candidates": []}}}}))
    counts = golden.make_golden(run_dir)["groups"]["counts"]["values"]
    assert "heads/n_words" in counts and not any("selections" in k for k in counts)


def test_read_golden_refuses_bad_checks(tmp_path):
    path = tmp_path / "g.json"
    for values, msg in [({"a": {"value": 1, "min": 2, "max": 1}}, "min <= max"),
                        ({"a": {"value": 1, "any_of": "x"}}, "any_of"),
                        ({"a": {"value": 1, "min": 0, "any_of": [1]}}, "exactly one"),
                        ({"a": {"min": 0, "max": 1}}, "must have `value`")]:
        path.write_text(json.dumps({"format": golden.GOLDEN_FORMAT, "groups": {"g": {"rtol": 0, "atol": 0,
                                                                                       "values": values}}}))
        with pytest.raises(BertlookError, match=msg):
            golden.read_golden(path)
    path.write_text(json.dumps({"format": "bertlook-golden/1", "groups": {}}))
    with pytest.raises(BertlookError, match="regenerate it"):
        golden.read_golden(path)


# ------------------------------------------------------------------------------------ golden file
def test_golden_roundtrip_change_missing_extra(run_dir, tmp_path, capsys, cli_main):
    gpath = tmp_path / "golden" / "run.json"
    assert cli_main(["make-golden", str(run_dir), "--out", str(gpath)]) == 0
    doc = json.loads(gpath.read_text())
    assert doc["format"] == golden.GOLDEN_FORMAT and "float summation order" in doc["comparison"]
    g = doc["groups"]
    assert g["attention_stats"]["values"]["7-1/prev"] == pytest.approx(0.7)
    assert len(g["attention_stats"]["values"]) == NUM_LAYERS * NUM_HEADS * 11
    assert g["table1"]["values"]["All/best_head"] == "3-2" and g["table1"]["values"]["pobj/baseline_offset"] == "-2"
    assert g["table1"]["values"]["det/accuracy"] == pytest.approx(0.8) and g["table1"]["rtol"] == 1e-6
    assert len(g["head_accuracy_all"]["values"]) == NUM_LAYERS * NUM_HEADS * 2
    assert g["table3"]["values"]["random_init_attn_glove/uas_mean"] is None
    assert g["table3"]["values"]["attn/n_seeds"] == 3
    assert g["table2"]["values"]["best_head/head"] == "5-4" and g["table2"]["values"]["nearest/n_all"] == 40
    assert g["sep_gradients"]["values"]["2/[SEP]/mean_abs_grad"] == pytest.approx(5e-4)
    assert g["head_clusters"]["values"]["1-1"] == "broad" and g["head_clusters"]["rtol"] == 0
    js = g["js_divergence"]["values"]
    assert js["n_heads"] == NUM_LAYERS * NUM_HEADS and set(js) == {"n_heads", "sum", *(f"largest/{k}" for k in range(1, 6))}
    assert js["largest/1"] >= js["largest/5"]
    counts = g["counts"]["values"]
    assert counts["segments/truncated_segments"] == 3 and counts["treebank/skipped/too_long"] == 1
    assert "segments/mean_tokens" not in counts and "segments/truncated" not in counts  # floats, bools skipped

    assert cli_main(["check-regression", str(run_dir), "--against", str(gpath)]) == 0
    assert "match" in capsys.readouterr().out

    # one statistic changed by 1e-3 -> exit 1 naming it
    stats = pd.read_csv(run_dir / "tables" / "attention_stats.csv")
    stats.loc[(stats["layer"] == 3) & (stats["head"] == 2), "sep"] += 1e-3
    _csv(run_dir / "tables" / "attention_stats.csv", stats, "%.6g")
    assert cli_main(["check-regression", str(run_dir), "--against", str(gpath)]) == 1
    out = capsys.readouterr().out
    assert "differs: attention_stats/3-2/sep: golden 0.1, got 0.101" in out
    assert out.count("differs:") == 1

    # a key missing in the run, and one only in the run
    t1 = pd.read_csv(run_dir / "tables" / "table1.csv")
    t1 = t1[t1["relation"] != "mark"]
    t1.loc[len(t1) + 5] = {**t1.iloc[0].to_dict(), "relation": "xcomp"}
    _csv(run_dir / "tables" / "table1.csv", t1)
    assert cli_main(["check-regression", str(run_dir), "--against", str(gpath)]) == 1
    out = capsys.readouterr().out
    assert "missing in run: table1/mark/accuracy" in out
    assert "not in golden (extra in run): table1/xcomp/accuracy" in out


def test_golden_tolerance_and_status_changes(run_dir, tmp_path):
    gdoc = golden.make_golden(run_dir)
    # a change below the group's rtol is float rounding, not a regression
    cur = json.loads(json.dumps(gdoc))
    cur["groups"]["table1"]["values"]["det/accuracy"] *= 1 + 1e-8
    cur["groups"]["attention_stats"]["values"]["1-1/sep"] *= 1 + 5e-6
    assert golden.compare_golden(gdoc, cur) == []
    cur["groups"]["table1"]["values"]["det/accuracy"] *= 1 + 1e-5
    assert [d["path"] for d in golden.compare_golden(gdoc, cur)] == ["table1/det/accuracy"]
    # strings and integers are exact; None only equals None
    cur = json.loads(json.dumps(gdoc))
    cur["groups"]["table1"]["values"]["All/best_head"] = "3-3"
    cur["groups"]["counts"]["values"]["segments/segments_produced"] = 11
    cur["groups"]["table3"]["values"]["random_init_attn_glove/uas_mean"] = 0.3
    paths = {d["path"] for d in golden.compare_golden(gdoc, cur)}
    assert paths == {"table1/All/best_head", "counts/segments/segments_produced", "table3/random_init_attn_glove/uas_mean"}
    # a stage that stopped running: status differs and its numbers are missing
    (run_dir / "tables" / "table2.csv").unlink()
    diffs = golden.compare_golden(gdoc, golden.make_golden(run_dir))
    kinds = {(d["path"], d["kind"]) for d in diffs}
    assert ("table2/status", "differs") in kinds and ("table2/nearest/all", "missing in run") in kinds
    # a whole group missing / extra
    cur = json.loads(json.dumps(gdoc))
    del cur["groups"]["js_divergence"]
    cur["groups"]["new"] = {"rtol": 0, "atol": 0, "values": {"a": 1}}
    kinds = {(d["path"], d["kind"]) for d in golden.compare_golden(gdoc, cur)}
    assert ("js_divergence", "missing in run") in kinds and ("new", "not in golden") in kinds


def test_not_run_stages_in_golden(tmp_path):
    run = make_run(tmp_path, coref=False, probes=False, gradients=False)
    g = golden.make_golden(run)["groups"]
    assert g["table2"]["values"] == {"status": "not run"}
    assert g["sep_gradients"]["values"] == {"status": "not run"}
    assert g["table3"]["values"] == {"status": "absent"}




def test_golden_table1_stats_group(run_dir):
    """The columns beyond the paper (cross-fit, paired tests, punctuation candidates) form their own group:
    `absent` for a table without them; per relation floats, ints (b, c), strings (heads, flags)."""
    assert golden.make_golden(run_dir)["groups"]["table1_stats"]["values"] == {"status": "absent"}
    t1 = pd.read_csv(run_dir / "tables" / "table1.csv")
    t1["crossfit_head_a"], t1["crossfit_direction_a"] = "3-1", "dep2head"
    t1["crossfit_accuracy"] = 0.5
    t1["vs_baseline_b"], t1["vs_baseline_c"] = 9, 6
    t1["vs_baseline_p_holm"] = 0.75
    t1["vs_baseline_significant"] = False
    t1["runner_up_head"] = ""
    t1["vs_runner_up_b"] = np.nan
    t1["nopunct_delta"] = 0.01
    t1["gold_head_punct"] = 2
    _csv(run_dir / "tables" / "table1.csv", t1)
    g = golden.make_golden(run_dir)["groups"]["table1_stats"]
    v = g["values"]
    assert v["status"] == "ok" and g["rtol"] == 1e-6
    assert v["det/crossfit_head_a"] == "3-1" and v["det/crossfit_direction_a"] == "dep2head"
    assert v["det/crossfit_accuracy"] == pytest.approx(0.5) and v["det/vs_baseline_p_holm"] == pytest.approx(0.75)
    assert v["det/vs_baseline_b"] == 9 and isinstance(v["det/vs_baseline_c"], int)
    assert v["det/vs_baseline_significant"] == "False" and v["det/runner_up_head"] == ""
    assert v["det/vs_runner_up_b"] is None and v["det/gold_head_punct"] == 2
    assert v["All/nopunct_delta"] == pytest.approx(0.01)
    assert "det/accuracy" not in v  # the paper-twin numbers stay in the table1 group
    assert golden.make_golden(run_dir)["groups"]["table1_norm_stats"]["values"] == {"status": "absent"}
