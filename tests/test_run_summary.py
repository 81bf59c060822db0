"""The end-of-run summary (bertlook.reporting.run_summary) on hand-written comparison tables: headline rows
beside the paper, the status counts, where the results are; a run without its comparison is still listed."""

from __future__ import annotations

from bertlook.reporting.run_summary import end_of_run_summary

HEADER = "section,item,metric,paper,reproduced,difference,tolerance,status,note\n"
ROWS = """Table 1,All,best-head accuracy (%),34.5,40.25,5.75,2,FAIL,best head 3-2 d→h; the paper's: 7-6 d→h
Table 1,All,baseline accuracy (%),26.3,26.0,-0.3,2,PASS,offset +1
Table 2,Head match,all (%),52,,,,not run,
Table 2,Head 5-4,all (%),65,61.04,,,PASS,
Table 3,Attn + GloVe,UAS (%),77,,,,not run,no GloVe
Figure facts,sep_share_layers_6_10,mean sep > paper,0.5,0.61234,,,PASS,a long note that is not shown
"""


def test_headlines_counts_and_paths(tmp_path):
    run = tmp_path / "results" / "x-bert"
    (run / "tables").mkdir(parents=True)
    (run / "explorer.html").write_text("page")
    (run / "comparison.csv").write_text(HEADER + ROWS)
    text = end_of_run_summary([run, tmp_path / "results" / "x-gpt2"], elapsed_s=374.4,
                              configfiles=["config/offline.yaml"])
    lines = text.splitlines()
    assert lines[0].startswith("bertlook: finished in 6 min 14 s.")
    assert any(line.startswith("  Table 1: best head, all relations") and line.endswith(
        "40.2%   paper   34.5%   (best head 3-2 d→h)") for line in lines)  # 40.25 -> "40.2" (round half even)
    assert any("Table 2: best coreference head" in line and "61.0%   paper   65.0%" in line for line in lines)
    assert any("Table 3: Attn + GloVe probe, UAS" in line and "not run   paper   77.0%" in line for line in lines)
    assert any(line.rstrip().endswith("0.612   paper     0.5") for line in lines)  # no note for a figure fact
    assert f"  against the paper: 1 FAIL, 3 PASS, 2 not run (6 numbers; {run / 'comparison.md'})" in lines
    assert f"  head explorer: {run / 'explorer.html'}" in lines and f"  tables:        {run / 'tables'}" in lines
    assert "figures:" not in text  # no figures folder: not listed
    assert "  no comparison with the paper yet (the run stopped short of it)" in lines  # x-gpt2
    assert lines[-1].startswith("HTML report: make report CONFIG=config/offline.yaml")
