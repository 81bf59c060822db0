"""bertlook.reporting.report_pages: the HTML report's pages (tables as HTML in percent, page-sized
figures), on hand-made inputs with hand-computed expected cells."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertlook.errors import BertlookError
from bertlook.reporting import report_pages as rp


def cells(html: str) -> list[list[str]]:
    """The text of every body row's cells (tags stripped)."""
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)]


def header(html: str) -> list[str]:
    return re.findall(r"<th>(.*?)</th>", html.split("<thead>", 1)[1].split("</thead>", 1)[0])


def test_number_formats_by_hand():
    assert rp.fmt_pct(0.0155909) == "1.6" and rp.fmt_pct(0.5) == "50.0" and rp.fmt_pct(None) == "–"
    assert rp.fmt_num(15881.7) == "15,882" and rp.fmt_num(123.456) == "123.5" and rp.fmt_num(1.23456) == "1.235"
    assert rp.fmt_num(0.0123456) == "0.01235" and rp.fmt_num(-0.5) == "-0.5" and rp.fmt_num(None) == "–"
    assert rp.fmt_int(1234.0) == "1,234" and rp.fmt_signed(-3.0) == "-3" and rp.fmt_signed(2.0) == "+2"
    assert rp.fmt_fixed(2)(4.85197) == "4.85" and rp.fmt_bool("True") == "yes" and rp.fmt_bool("") == "–"
    assert rp.fmt_direction("dep2head") == "d→h" and rp.fmt_direction("head2dep") == "h→d"


def test_csv_page_formats_each_column(tmp_path):
    """attention_stats.csv: fractions as percents with one decimal, nats with two, offsets signed."""
    csv = tmp_path / "attention_stats.csv"
    csv.write_text(
        "layer,head,cls,sep,punct,self,prev,next,sep_sep,rest_sep,entropy,cls_entropy,max_attention,"
        "positional_offset,positional_fraction\n"
        "1,1,0.00787049,0.0155909,0.0254339,0.0077909,0.00775,0.007752,0.0156663,0.0155897,4.85197,4.85198,"
        "0.00801574,-3,0.0130208\n"
        "1,2,0.5,0.25,0.125,0,1,0.999,,0.0625,0.01,3,0.75,1,0.9\n")
    out = rp.csv_page(csv, tmp_path / "page.html")
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<title>Surface statistics per head</title>" in html
    assert header(html)[:4] == ["layer", "head", "cls (%)", "sep (%)"] and header(html)[10] == "entropy (nats)"
    assert cells(html) == [
        ["1", "1", "0.8", "1.6", "2.5", "0.8", "0.8", "0.8", "1.6", "1.6", "4.85", "4.85", "0.8", "-3", "1.3"],
        ["1", "2", "50.0", "25.0", "12.5", "0.0", "100.0", "99.9", "–", "6.2", "0.01", "3.00", "75.0", "+1", "90.0"],
    ]
    assert "2 rows" in html and "attention_stats.csv" in html


def test_csv_page_keeps_unknown_columns_and_escapes_text(tmp_path):
    csv = tmp_path / "sep_gradients.csv"
    csv.write_text("layer,target,mean_abs_grad,attention_mass,note,extra\n"
                   "1,[SEP],1.2345e-05,0.5,<b>x</b> & y,0.123456789\n")
    html = rp.csv_page(csv, tmp_path / "p.html").read_text()
    assert cells(html) == [["1", "[SEP]", "1.234e-05", "50.0", "&lt;b&gt;x&lt;/b&gt; &amp; y", "0.123456789"]]
    assert "<b>x</b>" not in html


def test_csv_page_pivots_head_accuracy_with_the_best_head_in_bold(tmp_path):
    csv = tmp_path / "head_accuracy.csv"
    rows = ["relation,layer,head,direction,accuracy,count"]
    acc = {("All", "dep2head"): [0.1, 0.4], ("All", "head2dep"): [0.3, 0.2],
           ("det", "dep2head"): [0.75, 0.5], ("det", "head2dep"): [0.0, 0.0]}
    for (rel, d), values in acc.items():
        for (layer, head), a in zip([(2, 1), (1, 2)], values):  # heads out of order in the file
            rows.append(f"{rel},{layer},{head},{d},{a},{212 if rel == 'All' else 1234}")
    csv.write_text("\n".join(rows) + "\n")
    html = rp.csv_page(csv, tmp_path / "p.html").read_text()
    assert header(html) == ["relation", "direction", "n", "1-2", "2-1"]
    assert cells(html) == [
        ["All", "d→h", "212", "40.0", "10.0"],
        ["All", "h→d", "212", "20.0", "30.0"],
        ["det", "d→h", "1,234", "50.0", "75.0"],
        ["det", "h→d", "1,234", "0.0", "0.0"],
    ]
    assert "<td><b>40.0</b></td><td>10.0</td>" in html and "<td><b>75.0</b></td>" in html
    assert html.count("<b>") == 3  # one per row, none in the all-zero det h→d row
    csv.write_text("\n".join(rows + [rows[1]]) + "\n")  # the first row again, as line 10
    with pytest.raises(BertlookError, match=r"head_accuracy.csv:10: relation 'All', head 2-1, dep2head appears twice"):
        rp.csv_page(csv, tmp_path / "p.html")


def test_bad_inputs_are_errors_naming_file_and_line(tmp_path):
    csv = tmp_path / "rollout_stats.csv"
    csv.write_text("layer,cls,sep,punct,other,entropy,uniform_entropy\n1,0.1,0.2,0.3,0.4,1,2\n2,oops,0,0,1,1,2\n")
    out = tmp_path / "p.html"
    with pytest.raises(BertlookError, match=r"rollout_stats.csv:3: column cls: 'oops' is not a number"):
        rp.csv_page(csv, out)
    assert not out.exists()  # nothing written half-way
    other = tmp_path / "mystery.csv"
    other.write_text("a\n1\n")
    with pytest.raises(BertlookError, match="no report page format for a table named 'mystery'"):
        rp.csv_page(other, out)
    with pytest.raises(BertlookError, match=r"\.txt file"):
        rp.write_page(tmp_path / "table.txt", out)
    with pytest.raises(BertlookError, match=r"must be a \.html file"):
        rp.write_page(csv, tmp_path / "p.png")


def test_markdown_page_renders_tables_and_escapes_html(tmp_path):
    md = tmp_path / "table1.md"
    md.write_text("# Table 1 twin: tiny\n\nSome `code` and <script>alert(1)</script>.\n\n"
                  "| Relation | n | Accuracy |\n|---|---:|---:|\n| All | 212 | 6.1 [4.2, 8.0] |\n| det \\* | 19 | 10.5 |\n")
    html = rp.markdown_page(md, tmp_path / "t.html").read_text()
    assert "<title>Table 1 twin: tiny</title>" in html and "<h1>Table 1 twin: tiny</h1>" in html
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert '<td style="text-align:right">6.1 [4.2, 8.0]</td>' in html and "<td>det *</td>" in html
    assert "<code>code</code>" in html
    (tmp_path / "empty.md").write_text("\n")
    with pytest.raises(BertlookError, match="empty Markdown"):
        rp.markdown_page(tmp_path / "empty.md", tmp_path / "e.html")


def test_figure_copy_fits_the_page_and_never_enlarges(tmp_path):
    from PIL import Image

    rgba = np.zeros((500, 3200, 4), dtype=np.uint8)  # [y, x, rgba]: transparent, a red bar, a grey band
    rgba[100:200, :, :] = (255, 0, 0, 255)
    rgba[300:400, :, :] = (0, 0, 0, 128)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "wide.png")
    before, after = rp.figure_copy(tmp_path / "wide.png", tmp_path / "page.png")
    assert before == (3200, 500) and after == (1600, 250)
    with Image.open(tmp_path / "page.png") as img:
        assert img.mode == "P" and img.size == (1600, 250)
        rgb = np.asarray(img.convert("RGB"))  # [y, x, rgb]
    close = lambda px, want: all(abs(int(v) - w) <= 3 for v, w in zip(px, want))  # palette rounding
    assert close(rgb[10, 10], (255, 255, 255))  # transparency on white
    assert close(rgb[75, 800], (255, 0, 0))
    assert close(rgb[175, 800], (127, 127, 127))  # half-transparent black on white: grey
    Image.fromarray(rgba[:, :800], "RGBA").save(tmp_path / "small.png")
    assert rp.figure_copy(tmp_path / "small.png", tmp_path / "s.png")[1] == (800, 500)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(BertlookError, match="not a readable image"):
        rp.figure_copy(tmp_path / "broken.png", tmp_path / "b.png")


def test_cli_pairs_sources_with_pages(tmp_path):
    md = tmp_path / "comparison.md"
    md.write_text("# Comparison\n\n| a |\n|---|\n| 1 |\n")
    run = lambda *args: subprocess.run([sys.executable, "-m", "bertlook", "report-pages", *args],
                                       capture_output=True, text=True)
    ok = run("--source", str(md), "--page", str(tmp_path / "c.html"))
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "c.html").read_text().count("<table>") == 1
    bad = run("--source", str(md), "--source", str(md), "--page", str(tmp_path / "c.html"))
    assert bad.returncode == 2 and "2 --source but 1 --page" in bad.stderr


def test_tree_heads_page_in_percent(tmp_path):
    """The single-head trees table (issue 16) has a page format: fractions as percent, counts as integers."""
    csv = tmp_path / "tree_heads.csv"
    csv.write_text("layer,head,uas_dep2head,uas_head2dep,uuas,n_words\n1,3,0.288617,0.0719661,0.507432,10630\n")
    html = rp.csv_page(csv, tmp_path / "tree_heads.html").read_text()
    for text in ("28.9", "7.2", "50.7", "10,630"):
        assert text in html, text
    assert "0.288617" not in html


def test_an_html_page_of_its_own_is_copied(tmp_path):
    """The head explorer: a self-contained page goes into the report as it is."""
    from bertlook.reporting.report_pages import write_page

    src = tmp_path / "explorer.html"
    src.write_text("<!DOCTYPE html><html><body><script>1</script></body></html>", encoding="utf-8")
    line = write_page(src, tmp_path / "report" / "explorer.html")
    assert (tmp_path / "report" / "explorer.html").read_text(encoding="utf-8") == src.read_text(encoding="utf-8")
    assert "the page itself" in line
