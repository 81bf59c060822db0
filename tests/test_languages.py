"""bertlook.analyses.languages + `bertlook languages`: the cross-language summary (issue 13).

Three fake treebanks of a 2 x 2 model; every expected number below is computed by hand in the comments.
Heads in layer-major order: 1-1, 1-2, 2-1, 2-2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses.languages import (AGREEMENT_COLUMNS, BEST_COLUMNS, agreement, base_relations,
                                         base_relations_info, best_heads, languages_summary,
                                         load_head_accuracy, spearman)
from bertlook.cli import main
from bertlook.errors import BertlookError

HEADS = [(1, 1), (1, 2), (2, 1), (2, 2)]
FLAT = 0.25  # head2dep accuracy of every head unless given: constant -> Spearman undefined

# treebank -> relation -> (count, dep2head accuracies of 1-1, 1-2, 2-1, 2-2[, head2dep accuracies])
TREEBANKS = {
    "en": {
        "All": (1000, [0.10, 0.20, 0.40, 0.30]),  # best 2-1 (0.40), runner-up 2-2 (0.30)
        "nsubj": (200, [0.50, 0.80, 0.20, 0.10]),  # best 1-2
        "det": (100, [0.90, 0.10, 0.10, 0.20]),  # best 1-1; exactly min_count: kept
        "punct": (500, [0.99, 0.0, 0.0, 0.0]),  # never scored
    },
    "de": {
        "All": (800, [0.10, 0.20, 0.40, 0.30]),  # best 2-1
        "nsubj": (150, [0.40, 0.70, 0.30, 0.20]),  # best 1-2
        "det": (50, [0.90, 0.10, 0.10, 0.20]),  # below 100 words: left out, counted
        "obj": (200, [0.10, 0.10, 0.10, 0.90]),  # only in de
    },
    "fi": {
        "All": (900, [0.40, 0.20, 0.40, 0.10]),  # tie 1-1 / 2-1 -> 1-1 (lowest layer); runner-up 2-1
        "nsubj": (120, [0.60, 0.60, 0.10, 0.30]),  # tie 1-1 / 1-2 -> 1-1 (lowest head)
        "det": (300, [0.80, 0.20, 0.30, 0.10]),  # best 1-1
        "root": (100, [0.0, 0.0, 0.0, 0.0]),  # never scored
    },
}
LANGS = {"en": "en", "de": "de", "fi": "fi"}


def frame_of(rels: dict) -> pd.DataFrame:
    rows = []
    for rel, spec in rels.items():
        count, d2h = spec[0], spec[1]
        h2d = spec[2] if len(spec) > 2 else [FLAT] * 4
        for k, (layer, head) in enumerate(HEADS):
            rows.append((rel, layer, head, "dep2head", d2h[k], count))
            rows.append((rel, layer, head, "head2dep", h2d[k], count))
    return pd.DataFrame(rows, columns=["relation", "layer", "head", "direction", "accuracy", "count"])


def write_csv(path: Path, rels: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame_of(rels).to_csv(path, index=False, float_format="%.6g")
    return path


@pytest.fixture()
def frames() -> dict[str, pd.DataFrame]:
    return {label: frame_of(rels) for label, rels in TREEBANKS.items()}


def _row(df: pd.DataFrame, **keys) -> pd.Series:
    sel = df
    for k, v in keys.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, keys
    return sel.iloc[0]


# ---------------------------------------------------------------------------------------- best heads
def test_best_heads_hand_computed(frames):
    best = best_heads(frames, min_count=100)
    assert list(best.columns) == BEST_COLUMNS
    d2h = best[best["direction"] == "dep2head"]
    # "All" first, then by words over the treebanks: nsubj 470, det 400 (en 100 + fi 300), obj 200
    assert list(dict.fromkeys(best["relation"])) == ["All", "nsubj", "det", "obj"]
    got = {(r.relation, r.treebank): (r.best_head, r.accuracy, r.runner_up_head, r.runner_up_accuracy, r.count)
           for r in d2h.itertuples()}
    assert got == {
        ("All", "en"): ("2-1", 0.40, "2-2", 0.30, 1000),
        ("All", "de"): ("2-1", 0.40, "2-2", 0.30, 800),
        ("All", "fi"): ("1-1", 0.40, "2-1", 0.40, 900),  # tie: lowest layer
        ("nsubj", "en"): ("1-2", 0.80, "1-1", 0.50, 200),
        ("nsubj", "de"): ("1-2", 0.70, "1-1", 0.40, 150),
        ("nsubj", "fi"): ("1-1", 0.60, "1-2", 0.60, 120),  # tie: lowest head
        ("det", "en"): ("1-1", 0.90, "2-2", 0.20, 100),
        ("det", "fi"): ("1-1", 0.80, "2-1", 0.30, 300),
        ("obj", "de"): ("2-2", 0.90, "1-1", 0.10, 200),  # runner-up tie 1-1 / 1-2 / 2-1 -> 1-1
    }
    # head2dep all 0.25: every head ties, the first (1-1) wins
    h2d = best[best["direction"] == "head2dep"]
    assert set(h2d["best_head"]) == {"1-1"} and set(h2d["runner_up_head"]) == {"1-2"}
    assert len(h2d) == len(d2h) == 9
    # root and punct never appear; de's det (50 words) is left out
    assert not set(best["relation"]) & {"root", "punct"}
    assert ((best["relation"] == "det") & (best["treebank"] == "de")).sum() == 0
    # treebank order as given within a relation
    assert list(d2h[d2h["relation"] == "nsubj"]["treebank"]) == ["en", "de", "fi"]


def test_min_count_changes_what_is_kept(frames):
    best = best_heads(frames, min_count=150)
    kept = {(r.relation, r.treebank) for r in best[best["direction"] == "dep2head"].itertuples()}
    # nsubj fi (120) and det en (100) drop; nsubj de (150) stays (>=)
    assert ("nsubj", "fi") not in kept and ("det", "en") not in kept and ("nsubj", "de") in kept
    with pytest.raises(BertlookError, match="min count"):
        best_heads(frames, min_count=-1)


# ----------------------------------------------------------------------------------------- agreement
def test_spearman_hand_computed():
    # ranks [3, 4, 2, 1] and [3.5, 3.5, 1, 2]: centred [.5, 1.5, -.5, -1.5] . [1, 1, -1.5, -.5] = 3.5,
    # norms^2 5 and 4.5
    assert spearman([0.5, 0.8, 0.2, 0.1], [0.6, 0.6, 0.1, 0.3]) == pytest.approx(3.5 / math.sqrt(22.5))
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert math.isnan(spearman([0.25] * 4, [1, 2, 3, 4]))


def test_agreement_hand_computed(frames):
    agree = agreement(frames, min_count=100)
    assert list(agree.columns) == AGREEMENT_COLUMNS
    # obj is in de only: no agreement row; det is in en and fi (de below min_count)
    assert list(dict.fromkeys(agree["relation"])) == ["All", "nsubj", "det"]

    nsubj = _row(agree, relation="nsubj", direction="dep2head")
    assert nsubj["n_treebanks"] == 3 and nsubj["treebanks"] == "en;de;fi"
    assert not nsubj["same_best_head"] and nsubj["n_distinct_best_heads"] == 2
    assert nsubj["modal_best_head"] == "1-2" and nsubj["modal_count"] == 2
    # rho(en, de) = 1 (same ranks); rho(en, fi) = rho(de, fi) = 3.5 / sqrt(22.5)
    assert nsubj["mean_spearman"] == pytest.approx((1 + 2 * 3.5 / math.sqrt(22.5)) / 3)
    assert nsubj["n_spearman_pairs"] == 3
    # ordered pairs: en->de 0.7/0.7, de->en 0.8/0.8, en->fi 0.6/0.6, de->fi 0.6/0.6,
    # fi->en (head 1-1) 0.5/0.8, fi->de 0.4/0.7
    assert nsubj["transfer"] == pytest.approx((4 + 0.625 + 4 / 7) / 6)
    assert nsubj["n_transfer_pairs"] == 6

    det = _row(agree, relation="det", direction="dep2head")
    assert det["n_treebanks"] == 2 and det["treebanks"] == "en;fi"
    assert det["same_best_head"] and det["n_distinct_best_heads"] == 1 and det["modal_count"] == 2
    # en ranks [4, 1.5, 1.5, 3], fi [4, 2, 3, 1]: centred product 1.5, norms^2 4.5 and 5
    assert det["mean_spearman"] == pytest.approx(1.5 / math.sqrt(22.5))
    assert det["transfer"] == pytest.approx(1.0)

    al = _row(agree, relation="All", direction="dep2head")
    assert not al["same_best_head"] and al["modal_best_head"] == "2-1" and al["modal_count"] == 2
    # en->de 1, de->en 1, en->fi fi[2-1]=0.4/0.4, de->fi 1, fi->en en[1-1]=0.1/0.4, fi->de 0.1/0.4
    assert al["transfer"] == pytest.approx((4 + 0.25 + 0.25) / 6)
    # en, de ranks [1, 2, 4, 3]; fi [3.5, 2, 3.5, 1]: centred [-1.5, -.5, 1.5, .5] . [1, -.5, 1, -1.5]
    # = -1.5 + .25 + 1.5 - .75 = -0.5, norms^2 5 and 4.5 -> rho(en, fi) = rho(de, fi) = -0.5 / sqrt(22.5);
    # rho(en, de) = 1
    assert al["mean_spearman"] == pytest.approx((1 - 2 * 0.5 / math.sqrt(22.5)) / 3)

    # head2dep: constant accuracies -> every best head 1-1 (shared), Spearman undefined, transfer 1
    h = _row(agree, relation="nsubj", direction="head2dep")
    assert h["same_best_head"] and math.isnan(h["mean_spearman"]) and h["n_spearman_pairs"] == 0
    assert h["transfer"] == pytest.approx(1.0) and h["n_transfer_pairs"] == 6


def test_transfer_skips_a_treebank_whose_best_accuracy_is_zero():
    frames = {"a": frame_of({"nsubj": (100, [0.5, 0.1, 0.2, 0.3])}),
              "b": frame_of({"nsubj": (100, [0.0, 0.0, 0.0, 0.0])})}
    row = _row(agreement(frames, min_count=1), relation="nsubj", direction="dep2head")
    # a->b undefined (b's best is 0); b->a: b's best is 1-1 (tie), a[1-1] / max a = 0.5 / 0.5
    assert row["n_transfer_pairs"] == 1 and row["transfer"] == pytest.approx(1.0)
    assert math.isnan(row["mean_spearman"])


def test_different_head_grids_are_an_error(frames):
    small = frame_of({"All": (10, [0.1, 0.2, 0.3, 0.4])})
    small = small[small["layer"] == 1]  # a 1 x 2 grid
    with pytest.raises(BertlookError, match="different head grids"):
        agreement({"en": frames["en"], "x": small}, min_count=1)


# ---------------------------------------------------------------------------------------- subtypes
def test_base_relations_recombines_correct_words():
    frame = frame_of({
        "All": (1000, [0.1, 0.2, 0.3, 0.4]),
        "nsubj": (100, [0.50, 0.20, 0.10, 0.00]),  # correct 50, 20, 10, 0
        "nsubj:pass": (50, [0.10, 0.80, 0.20, 0.40], [0.2] * 4),  # correct 5, 40, 10, 20
        # no plain nmod: becomes nmod alone; correct 1, 2, 0, 3
        "nmod:poss": (3, [1 / 3, 2 / 3, 0.0, 1.0], [1 / 3] * 4),
    })
    merged = base_relations(frame)
    rel = list(dict.fromkeys(merged["relation"]))
    assert rel == ["All", "nsubj", "nmod"]
    d2h = merged[merged["direction"] == "dep2head"]
    nsubj = d2h[d2h["relation"] == "nsubj"]
    assert (nsubj["count"] == 150).all()
    # (50+5, 20+40, 10+10, 0+20) / 150
    assert nsubj["accuracy"].tolist() == pytest.approx([55 / 150, 60 / 150, 20 / 150, 20 / 150])
    nmod = d2h[d2h["relation"] == "nmod"]
    assert nmod["accuracy"].tolist() == pytest.approx([1 / 3, 2 / 3, 0.0, 1.0]) and (nmod["count"] == 3).all()
    al = d2h[d2h["relation"] == "All"]
    assert al["accuracy"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4]) and (al["count"] == 1000).all()
    # merging changes the best head: nsubj alone 1-1 (0.5), merged 1-2 (0.4)
    before = best_heads({"a": frame, "b": frame}, min_count=1)
    after = best_heads({"a": merged, "b": merged}, min_count=1)
    assert _row(before, relation="nsubj", direction="dep2head", treebank="a")["best_head"] == "1-1"
    assert _row(after, relation="nsubj", direction="dep2head", treebank="a")["best_head"] == "1-2"
    info = base_relations_info(frame)
    assert info["merged"] == {"nsubj": ["nsubj", "nsubj:pass"], "nmod": ["nmod:poss"]}
    assert info["max_rounding_residual"] < 1e-9
    # an accuracy that is no whole number of words shows in the residual: 0.25 * 50 = 12.5
    assert base_relations_info(frame_of({"x": (50, [0.1] * 4)}))["max_rounding_residual"] == pytest.approx(0.5)


def test_base_relations_from_a_rounded_csv(tmp_path):
    # the heads step writes 6 significant digits: 0.333333 * 3 = 0.999999 -> 1 correct word
    path = write_csv(tmp_path / "a.csv", {"obl": (3, [1 / 3, 0, 0, 0]), "obl:tmod": (6, [1 / 6, 0, 0, 0])})
    assert "0.333333" in path.read_text()
    merged = base_relations(load_head_accuracy(path))
    row = _row(merged, relation="obl", direction="dep2head", layer=1, head=1)
    assert row["count"] == 9 and row["accuracy"] == pytest.approx(2 / 9)


# ----------------------------------------------------------------------------------------- summary
def test_summary_counts_exclusions(frames):
    best, agree = best_heads(frames, min_count=100), agreement(frames, min_count=100)
    s = languages_summary(frames, best, agree, languages=LANGS, min_count=100)
    assert s["n_treebanks"] == 3 and s["labels"] == ["en", "de", "fi"] and s["languages"] == LANGS
    en, de, fi = (s["treebanks"][k] for k in ("en", "de", "fi"))
    assert en["n_relations"] == 3 and en["n_relations_scored"] == 2 and en["relations_scored"] == ["nsubj", "det"]
    assert en["skipped_relations"] == {"punct": 500} and en["n_relations_below_min_count"] == 0
    assert de["relations_below_min_count"] == {"det": 50} and de["n_relations_below_min_count"] == 1
    assert de["n_relations_scored"] == 2  # nsubj, obj
    assert fi["skipped_relations"] == {"root": 100} and fi["words"] == 900
    assert fi["all_best_heads"]["dep2head"] == {"head": "1-1", "accuracy": 0.4}
    assert s["relations_in_one_treebank"] == {"obj": "de"} and s["n_relations_in_one_treebank"] == 1
    assert s["relations_compared"] == ["nsubj", "det"] and s["n_relations_compared"] == 2
    h = s["headline"]["dep2head"]
    assert h["n_relations"] == 2 and h["n_same_best_head"] == 1 and h["share_same_best_head"] == 0.5
    assert h["mean_transfer"] == pytest.approx(((4 + 0.625 + 4 / 7) / 6 + 1.0) / 2)
    assert h["all"]["same_best_head"] is False and h["all"]["n_distinct_best_heads"] == 2
    assert s["headline"]["head2dep"]["mean_spearman"] is None  # all undefined -> null, not NaN
    json.dumps(s, allow_nan=False)
    assert s["base_relations"] is False and "merged_subtypes" not in en


# ------------------------------------------------------------------------------------------- reading
def test_load_head_accuracy_checks_rows(tmp_path):
    good = write_csv(tmp_path / "good.csv", TREEBANKS["en"])
    frame = load_head_accuracy(good)
    assert list(frame.columns) == ["relation", "layer", "head", "direction", "accuracy", "count"]
    assert len(frame) == 4 * 8 and frame["count"].dtype == np.int64
    lines = good.read_text().splitlines()

    def bad(name: str, edit) -> Path:
        p = tmp_path / name
        p.write_text("\n".join(edit(list(lines))) + "\n")
        return p

    def replace(i, row):
        def f(ls):
            ls[i] = row
            return ls
        return f

    cases = [
        (bad("dir.csv", replace(2, "All,1,1,sideways,0.1,1000")), r"dir\.csv:3: direction 'sideways'"),
        (bad("acc.csv", replace(3, "All,1,2,dep2head,1.5,1000")), r"acc\.csv:4: accuracy '1.5'"),
        (bad("layer.csv", replace(4, "All,0,2,head2dep,0.1,1000")), r"layer\.csv:5: column 'layer'"),
        (bad("count.csv", replace(5, "All,2,1,dep2head,0.1,999")), r"count\.csv:6: relation 'All' has count 999"),
        (bad("dup.csv", replace(2, "All,1,1,dep2head,0.1,1000")), r"dup\.csv:3: All dep2head of head 1-1 appears"),
        (bad("gap.csv", lambda ls: ls[:2] + ls[3:]), r"gap\.csv: relation 'All' head2dep: no row for 1 head"),
        (bad("hdr.csv", replace(0, "relation,layer,head,direction,acc,count")), r"hdr\.csv:1: missing column"),
    ]
    for path, pattern in cases:
        with pytest.raises(BertlookError, match=pattern):
            load_head_accuracy(path)


# ----------------------------------------------------------------------------------------------- CLI
def _argv(paths: dict[str, Path], out: Path, *extra: str) -> list[str]:
    argv = ["languages"]
    for label, path in paths.items():
        argv += ["--head-accuracy", str(path), "--label", label, "--language", LANGS.get(label, label)]
    return argv + ["--out-best", str(out / "best_heads.csv"), "--out-agreement", str(out / "head_agreement.csv"),
                   "--out-markdown", str(out / "languages.md"), "--out-figure", str(out / "fig_languages.png"),
                   "--summary", str(out / "languages.summary.json"), *extra]


def test_cli_end_to_end(tmp_path, capsys):
    paths = {label: write_csv(tmp_path / label / "head_accuracy.csv", rels) for label, rels in TREEBANKS.items()}
    out = tmp_path / "results" / "run-languages"
    assert main(_argv(paths, out)) == 0
    best = pd.read_csv(out / "best_heads.csv", keep_default_na=False)
    assert list(best.columns) == BEST_COLUMNS and len(best) == 18
    row = _row(best, relation="nsubj", direction="dep2head", treebank="en")
    assert row["best_head"] == "1-2" and row["accuracy"] == pytest.approx(0.8) and row["count"] == 200
    agree = pd.read_csv(out / "head_agreement.csv")
    assert list(agree.columns) == AGREEMENT_COLUMNS and len(agree) == 6
    assert _row(agree, relation="nsubj", direction="dep2head")["transfer"] == pytest.approx(
        (4 + 0.625 + 4 / 7) / 6, abs=1e-6)
    md = (out / "languages.md").read_text()
    assert "| nsubj | d\u2192h | 1-2 80.0 | 1-2 70.0 | 1-1 60.0 | no | 2 | 0.83 | 86.6 |" in md
    assert "| obj | d\u2192h | \u2013 | 2-2 90.0 | \u2013 | \u2013 | \u2013 | \u2013 | \u2013 |" in md
    s = json.loads((out / "languages.summary.json").read_text())
    assert s["treebanks"]["de"]["relations_below_min_count"] == {"det": 50}
    assert s["treebanks"]["de"]["input"] == str(paths["de"])
    png = (out / "fig_languages.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "3 treebanks" in printed and "2 relations compared" in printed
    # deterministic: the same inputs give the same bytes
    assert main(_argv(paths, tmp_path / "again")) == 0
    for name in ("best_heads.csv", "head_agreement.csv", "languages.md", "languages.summary.json"):
        assert (tmp_path / "again" / name).read_text() == (out / name).read_text().replace(
            str(out), str(tmp_path / "again"))
    assert (tmp_path / "again" / "fig_languages.png").read_bytes() == png
    # --base-relations and --min-count
    sub = {"a": write_csv(tmp_path / "a.csv", {"All": (300, [0.1, 0.2, 0.3, 0.4]),
                                               "nsubj": (100, [0.50, 0.20, 0.10, 0.00]),
                                               "nsubj:pass": (50, [0.10, 0.80, 0.20, 0.40])}),
           "b": write_csv(tmp_path / "b.csv", {"All": (300, [0.1, 0.2, 0.3, 0.4]),
                                               "nsubj": (150, [0.10, 0.50, 0.20, 0.00])})}
    out2 = tmp_path / "base"
    assert main(_argv(sub, out2, "--base-relations", "--min-count", "60")) == 0
    best2 = pd.read_csv(out2 / "best_heads.csv")
    assert _row(best2, relation="nsubj", direction="dep2head", treebank="a")["best_head"] == "1-2"
    assert "nsubj:pass" not in set(best2["relation"])
    s2 = json.loads((out2 / "languages.summary.json").read_text())
    assert s2["base_relations"] is True
    assert s2["treebanks"]["a"]["merged_subtypes"] == {"nsubj": ["nsubj", "nsubj:pass"]}
    assert _row(pd.read_csv(out2 / "head_agreement.csv"), relation="nsubj", direction="dep2head")["same_best_head"]
    # without merging: nsubj:pass (50) is below 60 words, counted
    out3 = tmp_path / "nobase"
    assert main(_argv(sub, out3, "--min-count", "60")) == 0
    s3 = json.loads((out3 / "languages.summary.json").read_text())
    assert s3["treebanks"]["a"]["relations_below_min_count"] == {"nsubj:pass": 50}


def test_cli_errors_exit_2(tmp_path, capsys):
    paths = {label: write_csv(tmp_path / label / "head_accuracy.csv", rels) for label, rels in TREEBANKS.items()}
    out = tmp_path / "out"
    broken = tmp_path / "broken.csv"
    broken.write_text(paths["de"].read_text().replace("obj,2,2,dep2head,0.9,200", "obj,2,2,dep2head,high,200"))
    bad_line = broken.read_text().splitlines().index("obj,2,2,dep2head,high,200") + 1
    assert main(_argv({"en": paths["en"], "de": broken}, out)) == 2
    err = capsys.readouterr().err
    assert f"error: {broken}:{bad_line}: accuracy 'high'" in err
    assert not out.exists()  # nothing written
    # unequal repeat counts
    argv = _argv({"en": paths["en"], "de": paths["de"]}, out)
    i = argv.index("--language")
    assert main(argv[:i] + argv[i + 2:]) == 2
    assert "same number of times" in capsys.readouterr().err
    # duplicate labels
    argv = _argv({"en": paths["en"], "de": paths["de"]}, out)
    argv[argv.index("de")] = "en"
    assert main(argv) == 2
    assert "duplicate treebank label(s) en" in capsys.readouterr().err
    # a single treebank
    assert main(_argv({"en": paths["en"]}, out)) == 2
    assert "at least 2 treebanks" in capsys.readouterr().err
    # a missing file
    assert main(_argv({"en": paths["en"], "de": tmp_path / "nope.csv"}, out)) == 2
    assert "nope.csv: head accuracy table not found" in capsys.readouterr().err
    assert not out.exists()
