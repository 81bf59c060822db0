"""bertlook.analyses.head_report + `bertlook head-report`: the per-head report card (tables joined, not recomputed)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses.head_report import REPORT_COLUMNS, build_head_report
from bertlook.cli import head_report as head_report_cli
from bertlook.errors import BertlookError

STATS_HEADER = ("layer,head,cls,sep,punct,self,prev,next,sep_sep,rest_sep,entropy,cls_entropy,max_attention,"
                "positional_offset,positional_fraction")


def _stats_rows():
    # layer, head, cls (sink), max_attention (confidence), entropy, offset, fraction
    return [(1, 1, 0.05, 0.95, 0.3, -1, 0.95),
            (1, 2, 0.45, 0.50, 2.0, 0, 0.20),
            (2, 1, 0.30, 0.40, 2.5, 1, 0.90),
            (2, 2, 0.31, 0.10, 4.0, 0, 0.01)]


def write_inputs(tmp_path: Path, *, stats_rows=None, with_optional=True) -> dict[str, Path]:
    rows = stats_rows or _stats_rows()
    stats = tmp_path / "attention_stats.csv"
    stats.write_text(STATS_HEADER + "\n" + "".join(
        f"{l},{h},{cls},0.1,0.1,0.1,0.1,0.1,0.5,0.1,{ent},{ent},{conf},{off},{frac}\n"
        for l, h, cls, conf, ent, off, frac in rows))
    clusters = tmp_path / "head_clusters.csv"
    clusters.write_text("layer,head,x,y,behavior\n1,1,0,0,previous token\n1,2,1,1,[CLS]\n2,1,2,2,next token\n"
                        "2,2,3,3,broad\n")
    acc = ["relation,layer,head,direction,accuracy,count"]
    table = {  # relation: (count, {(layer, head, direction): accuracy}); unlisted -> 0.1
        "All": (900, {(1, 1, "dep2head"): 0.99}),  # never a best relation
        "punct": (300, {(1, 2, "dep2head"): 0.98}),  # skipped as in Table 1
        "root": (150, {}),
        "det": (200, {(1, 1, "dep2head"): 0.8, (1, 2, "head2dep"): 0.6, (2, 2, "dep2head"): 0.5}),
        "nsubj": (120, {(1, 1, "head2dep"): 0.7, (1, 2, "dep2head"): 0.6, (2, 2, "head2dep"): 0.5}),
        "amod": (50, {(2, 1, "dep2head"): 0.97}),  # below --min-count 100
        "pobj": (100, {(2, 1, "head2dep"): 0.4}),
    }
    for rel, (count, special) in table.items():
        for l in (1, 2):
            for h in (1, 2):
                for d in ("dep2head", "head2dep"):
                    acc.append(f"{rel},{l},{h},{d},{special.get((l, h, d), 0.1)},{count}")
    head_acc = tmp_path / "head_accuracy.csv"
    head_acc.write_text("\n".join(acc) + "\n")
    out = {"stats": stats, "clusters": clusters, "head_accuracy": head_acc}
    if with_optional:
        coref = tmp_path / "coref_heads.csv"
        coref.write_text("layer,head,all,pronoun,proper,nominal,n\n1,1,0.2,0.1,0.3,0.2,50\n1,2,0.25,0.2,0.3,0.2,50\n"
                         "2,1,0.6,0.7,0.5,0.4,50\n2,2,,,,,0\n")
        imp = tmp_path / "head_importance.csv"
        imp.write_text("layer,head,importance,importance_raw\n1,1,0.6,3\n1,2,0.8,4\n2,1,1,2\n2,2,0,0\n")
        det = tmp_path / "head_detectors.csv"
        det.write_text("layer,head,prev_token,duplicate_token,induction,sink\n1,1,0.9,0.1,0.05,0.2\n"
                       "1,2,0.1,0.1,0.1,0.6\n2,1,0.2,0.3,0.85,0.1\n2,2,0.1,0.7,0.1,0.1\n")
        out.update(coref=coref, importance=imp, detectors=det)
    return out


def _build(paths, **kw):
    return build_head_report(paths["stats"], paths["clusters"], paths["head_accuracy"],
                             coref_heads_csv=paths.get("coref"), importance_csv=paths.get("importance"),
                             detectors_csv=paths.get("detectors"), **kw)


def test_report_values_by_hand(tmp_path):
    frame, summary = _build(write_inputs(tmp_path))
    assert list(frame.columns) == REPORT_COLUMNS
    rows = {(r.layer, r.head): r for r in frame.itertuples(index=False)}
    r11, r12, r21, r22 = rows[(1, 1)], rows[(1, 2)], rows[(2, 1)], rows[(2, 2)]
    # joined straight from attention_stats.csv
    assert (r11.confidence, r11.sink, r11.entropy) == (0.95, 0.05, 0.3)
    assert (r11.positional_offset, r11.positional_fraction) == (-1, 0.95)
    # thresholds: positional >= 0.9 (2-1 at exactly 0.9 is positional), sink > 0.3 (2-1 at 0.30 is not)
    assert [rows[h].positional for h in sorted(rows)] == [True, False, True, False]
    assert [rows[h].sink_head for h in sorted(rows)] == [False, True, False, True]
    assert [rows[h].behaviour for h in sorted(rows)] == ["previous token", "[CLS]", "next token", "broad"]
    # best relation: not All, not punct/root, not amod (50 < 100 words); pobj (exactly 100) counts
    assert (r11.best_relation, r11.best_direction, r11.best_accuracy) == ("det", "dep2head", 0.8)
    assert (r12.best_relation, r12.best_direction, r12.best_accuracy) == ("det", "head2dep", 0.6)
    assert (r21.best_relation, r21.best_direction, r21.best_accuracy) == ("pobj", "head2dep", 0.4)
    # tie at 0.5 between det (200 words) and nsubj (120): more words wins
    assert (r22.best_relation, r22.best_direction, r22.best_accuracy) == ("det", "dep2head", 0.5)
    assert [rows[h].importance for h in sorted(rows)] == [0.6, 0.8, 1.0, 0.0]
    assert r21.coref_accuracy == 0.6 and np.isnan(r22.coref_accuracy)
    assert summary["positional_heads"] == 2 and summary["positional_head_labels"] == ["1-1 (-1)", "2-1 (+1)"]
    assert summary["sink_heads"] == 2 and summary["sink_head_labels"] == ["1-2", "2-2"]
    assert summary["relations_below_min_count"] == {"amod": 50}
    assert summary["relations_skipped"] == ["punct", "root"]
    assert sorted(summary["relations_considered"]) == ["det", "nsubj", "pobj"]
    assert summary["importance"] == "ok" and summary["coref"] == "ok" and summary["detectors"] == "ok"
    assert summary["heads_without_coref_accuracy"] == 1
    # the head detectors' scores, joined by head (the card's sink stays the surface statistics' [CLS] share)
    assert [rows[h].prev_token for h in sorted(rows)] == [0.9, 0.1, 0.2, 0.1]
    assert [rows[h].induction for h in sorted(rows)] == [0.05, 0.1, 0.85, 0.1]
    assert [rows[h].duplicate_token for h in sorted(rows)] == [0.1, 0.1, 0.3, 0.7]


def test_min_count_and_tie_order(tmp_path):
    paths = write_inputs(tmp_path)
    frame, summary = _build(paths, min_count=30)  # amod (50 words) now counts: 2-1's best
    r21 = frame[(frame["layer"] == 2) & (frame["head"] == 1)].iloc[0]
    assert (r21["best_relation"], r21["best_accuracy"]) == ("amod", 0.97)
    frame, summary = _build(paths, min_count=1000)
    assert (frame["best_relation"] == "").all() and frame["best_accuracy"].isna().all()
    assert summary["heads_without_best_relation"] == 4


def test_optional_inputs_absent_or_not_run(tmp_path):
    paths = write_inputs(tmp_path, with_optional=False)
    frame, summary = _build(paths)
    assert frame["importance"].isna().all() and frame["coref_accuracy"].isna().all()
    assert frame["induction"].isna().all() and summary["detectors"].startswith("absent")
    assert summary["importance"].startswith("absent") and summary["coref"].startswith("absent")
    coref = tmp_path / "coref_not_run.csv"
    coref.write_text("layer,head,all,pronoun,proper,nominal,n,note\n,,,,,,,not run: no coreference corpus configured\n")
    imp = tmp_path / "imp_not_run.csv"
    imp.write_text("layer,head,importance,importance_raw,note\n,,,,not run: m has no masked-LM head\n")
    frame, summary = _build({**paths, "coref": coref, "importance": imp})
    assert frame["importance"].isna().all() and frame["coref_accuracy"].isna().all()
    assert summary["coref"] == "not run: no coreference corpus configured"
    assert summary["importance"] == "not run: m has no masked-LM head"


def test_errors_name_file_and_line(tmp_path):
    paths = write_inputs(tmp_path)
    # a head that the statistics do not have
    bad = tmp_path / "clusters_bad.csv"
    bad.write_text("layer,head,x,y,behavior\n1,1,0,0,a\n1,2,0,0,b\n2,1,0,0,c\n3,1,0,0,d\n")
    with pytest.raises(BertlookError, match=r"clusters_bad.csv:5: head 3-1 is not a head of"):
        _build({**paths, "clusters": bad})
    # a missing head
    bad.write_text("layer,head,x,y,behavior\n1,1,0,0,a\n1,2,0,0,b\n2,1,0,0,c\n")
    with pytest.raises(BertlookError, match=r"clusters_bad.csv: no row for 1 head\(s\) .*: 2-2"):
        _build({**paths, "clusters": bad})
    # missing column (old statistics without the positional columns)
    old = tmp_path / "old_stats.csv"
    old.write_text("\n".join(",".join(line.split(",")[:13]) for line in paths["stats"].read_text().splitlines()) + "\n")
    with pytest.raises(BertlookError, match=r"old_stats.csv:1: missing column\(s\) positional_offset, positional_fraction"):
        _build({**paths, "stats": old})
    # a bad number, a duplicate, a bad direction
    text = paths["stats"].read_text().replace("0.95,-1,0.95", "0.95,-1,lots")
    (tmp_path / "s2.csv").write_text(text)
    with pytest.raises(BertlookError, match=r"s2.csv:2: column 'positional_fraction'"):
        _build({**paths, "stats": tmp_path / "s2.csv"})
    acc = paths["head_accuracy"].read_text().splitlines()
    (tmp_path / "a2.csv").write_text("\n".join(acc + [acc[5]]) + "\n")
    with pytest.raises(BertlookError, match=rf"a2.csv:{len(acc) + 1}: .* appears more than once"):
        _build({**paths, "head_accuracy": tmp_path / "a2.csv"})
    (tmp_path / "a3.csv").write_text("\n".join(acc[:3] + [acc[3].replace("dep2head", "sideways")] + acc[4:]) + "\n")
    with pytest.raises(BertlookError, match=r"a3.csv:4: expected a relation and a direction"):
        _build({**paths, "head_accuracy": tmp_path / "a3.csv"})
    imp = tmp_path / "imp_bad.csv"
    imp.write_text("layer,head,importance,importance_raw\n1,1,0.6,3\n1,2,0.8,4\n2,1,1,2\n2,2,0,0\n2,3,0,0\n")
    with pytest.raises(BertlookError, match=r"imp_bad.csv:6: head 2-3 is not a head of"):
        _build({**paths, "importance": imp})
    with pytest.raises(BertlookError, match=r"nope.csv: coreference heads table not found"):
        _build({**paths, "coref": tmp_path / "nope.csv"})


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bertlook")
    head_report_cli.register_cli(parser.add_subparsers(dest="step"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_writes_table_summary_and_figure(tmp_path, capsys):
    paths = write_inputs(tmp_path)
    out, summ, fig = tmp_path / "o" / "head_report.csv", tmp_path / "o" / "s.json", tmp_path / "o" / "fig.png"
    argv = ["head-report", "--stats", str(paths["stats"]), "--clusters", str(paths["clusters"]),
            "--head-accuracy", str(paths["head_accuracy"]), "--out", str(out), "--summary", str(summ),
            "--out-figure", str(fig)]
    assert _run_cli(argv) == 0  # no optional inputs
    df = pd.read_csv(out, keep_default_na=False, dtype=str)
    assert list(df.columns) == REPORT_COLUMNS and len(df) == 4
    assert (df["importance"] == "").all() and (df["coref_accuracy"] == "").all()
    summary = json.loads(summ.read_text())
    assert summary["importance"].startswith("absent")
    assert "importance: absent" in capsys.readouterr().out
    from test_gradients import assert_png

    assert_png(fig)
    assert _run_cli(argv + ["--coref-heads", str(paths["coref"]), "--importance", str(paths["importance"])]) == 0
    df = pd.read_csv(out)
    assert df["importance"].tolist() == [0.6, 0.8, 1.0, 0.0]
    assert_png(fig)
    # bad input: nothing written
    bad = tmp_path / "bad"
    with pytest.raises(BertlookError):
        _run_cli(["head-report", "--stats", str(paths["clusters"]), "--clusters", str(paths["clusters"]),
                  "--head-accuracy", str(paths["head_accuracy"]), "--out", str(bad / "r.csv"),
                  "--summary", str(bad / "s.json"), "--out-figure", str(bad / "f.png")])
    assert not bad.exists() or not any(bad.iterdir())


def test_alti_and_head_ablation_columns(tmp_path):
    """contribution_heads.csv (its alti_heads rows only: the attention rows of the same table are not taken) ->
    alti_sink / alti_sep; head_ablation.csv loss_change -> ablation_loss; a "not run" head ablation leaves the
    column empty and says why; a table without alti_heads rows is an error naming the file."""
    paths = write_inputs(tmp_path)
    contrib = tmp_path / "contribution_heads.csv"
    rows = ["kind,layer,head,cls,sep,punct,other,entropy"]
    for kind, base in (("attention", 0.9), ("alti_heads", 0.1)):
        rows += [f"{kind},{l},{h},{base + 0.01 * (2 * l + h)},{base / 2 + 0.001 * h},0.1,0.1,1.0"
                 for l in (1, 2) for h in (1, 2)]
    contrib.write_text("\n".join(rows) + "\n")
    abl = tmp_path / "head_ablation.csv"
    abl.write_text("layer,head,loss_change,abs_loss_change,note\n1,1,0.5,0.5,\n1,2,-0.25,0.3,\n2,1,0,0.1,\n"
                   "2,2,1.5,1.5,\n")
    frame, summary = _build(paths, contribution_heads_csv=contrib, head_ablation_csv=abl)
    assert frame["alti_sink"].tolist() == pytest.approx([0.13, 0.14, 0.15, 0.16])
    assert frame["alti_sep"].tolist() == pytest.approx([0.051, 0.052, 0.051, 0.052])
    assert frame["ablation_loss"].tolist() == [0.5, -0.25, 0.0, 1.5]
    assert summary["alti"] == "ok" and summary["ablation"] == "ok"
    abl.write_text("layer,head,loss_change,abs_loss_change,note\n,,,,not run: no masked-LM head\n")
    frame, summary = _build(paths, contribution_heads_csv=contrib, head_ablation_csv=abl)
    assert frame["ablation_loss"].isna().all() and summary["ablation"] == "not run: no masked-LM head"
    frame, summary = _build(paths)
    assert frame["alti_sep"].isna().all() and summary["alti"].startswith("absent")
    contrib.write_text("\n".join(r for r in rows if not r.startswith("alti_heads")) + "\n")
    with pytest.raises(BertlookError, match="contribution_heads.csv: no rows of kind 'alti_heads'"):
        _build(paths, contribution_heads_csv=contrib)
