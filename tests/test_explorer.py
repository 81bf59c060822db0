"""The head explorer: its data from hand-written tables (nearest heads, relation order, the norm ratio), the page's
escaping, and the page in headless Chromium: a click and arrow keys select heads, the card, relations and
neighbours follow, the metric menu recolours the grid with a legend; no script error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from bertlook.errors import BertlookError
from bertlook.reporting.explorer import explorer_data, explorer_html

REPORT_HEADER = ("layer,head,importance,confidence,positional_offset,positional_fraction,positional,sink,sink_head,"
                 "entropy,behaviour,best_relation,best_direction,best_accuracy,coref_accuracy,prev_token,"
                 "duplicate_token,induction")


def _tables(tmp_path, *, duplicate=False):
    rows = [(1, 1, "previous token", 0.9), (1, 2, "[CLS]", 0.1), (2, 1, "broad", 0.2), (2, 2, "other", 0.3)]
    if duplicate:
        rows.append((2, 2, "other", 0.3))
    report = tmp_path / "head_report.csv"
    report.write_text(REPORT_HEADER + "\n" + "".join(
        f"{l},{h},,0.5,-1,0.5,False,0.2,False,2.0,{b},det,dep2head,0.4,,{p},0.1,0.05\n" for l, h, b, p in rows))
    acc = tmp_path / "head_accuracy.csv"
    acc.write_text("relation,layer,head,direction,accuracy,count\n" + "".join(
        f"{rel},{l},{h},{d},{a},{n}\n" for l, h, _, _ in rows[:4] for rel, d, a, n in
        (("All", "dep2head", 0.1, 100), ("det", "dep2head", 0.4, 20), ("nsubj", "head2dep", 0.6, 10))))
    clusters = tmp_path / "head_clusters.csv"
    # MDS positions: 1-1 at 0, 1-2 at 1, 2-1 at 3, 2-2 at 10 on the x axis
    clusters.write_text("layer,head,x,y,behavior\n1,1,0,0,a\n1,2,1,0,b\n2,1,3,0,c\n2,2,10,0,d\n")
    stats = tmp_path / "attention_stats.csv"
    stats.write_text("layer,head,cls,sep\n1,1,0.5,0.1\n1,2,0.2,0.2\n2,1,0.4,0.3\n2,2,0.8,0.4\n")
    norm = tmp_path / "attention_stats_norm.csv"
    norm.write_text("layer,head,cls,sep\n1,1,0.05,0.1\n1,2,0.1,0.2\n2,1,0.4,0.3\n2,2,0.2,0.4\n")
    return report, acc, clusters, stats, norm


def test_data_by_hand(tmp_path):
    data = explorer_data(*_tables(tmp_path), run="tiny", neighbours=2)
    assert (data["num_layers"], data["num_heads"]) == (2, 2)
    heads = {h["label"]: h for h in data["heads"]}
    assert heads["1-1"]["neighbours"] == ["1-2", "2-1"] and heads["2-2"]["neighbours"] == ["2-1", "1-2"]
    assert [r["relation"] for r in heads["1-1"]["relations"]] == ["All", "nsubj", "det"]  # All first, then accuracy
    assert heads["1-1"]["metrics"]["norm_ratio"] == pytest.approx(0.1) and heads["2-2"]["metrics"]["sep"] == 0.4
    assert heads["1-1"]["card"]["behaviour"] == "previous token" and heads["1-1"]["metrics"]["prev_token"] == 0.9
    keys = [m["key"] for m in data["metrics"]]
    assert "importance" not in keys and {"behaviour", "norm_ratio", "induction"} <= set(keys)  # no value: no metric


def test_bad_tables_name_file_and_line(tmp_path):
    with pytest.raises(BertlookError, match=r"head_report.csv:6: head 2-2 appears twice"):
        explorer_data(*_tables(tmp_path, duplicate=True), run="tiny")
    report, acc, clusters, stats, norm = _tables(tmp_path)
    acc.write_text(acc.read_text() + "det,3,1,dep2head,0.1,5\n")
    with pytest.raises(BertlookError, match=r"head_accuracy.csv:14: head 3-1 is not in the report card"):
        explorer_data(report, acc, clusters, stats, norm, run="tiny")


def test_page_escapes_the_data(tmp_path):
    data = explorer_data(*_tables(tmp_path), run="a</script><b>")
    html = explorer_html(data)
    assert html.count("</script>") == 2  # the data's and the code's own, none from the run name
    assert "<title>Head explorer: a&lt;/script>&lt;b></title>" in html
    start = html.index('id="data">') + len('id="data">')
    assert json.loads(html[start:html.index("</script>", start)].replace("<\\/", "</"))["run"] == "a</script><b>"


def _chromium():
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if browser is None:
        why = "no headless Chromium on PATH (Debian package `chromium`: apt-get install -y chromium)"
        if os.environ.get("BERTLOOK_REQUIRE_CHROMIUM") or os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return browser


DRIVER = """<script>
window.addEventListener("load", function () {
  const out = {};
  try {
    document.querySelector('.cell[data-head="1-2"]').click();
    out.after_click = document.getElementById("card").dataset.head;
    document.activeElement.blur();
    document.querySelector('.cell[data-head="1-2"]').dispatchEvent(
      new KeyboardEvent("keydown", {key: "ArrowDown", bubbles: true}));
    out.after_down = document.getElementById("card").dataset.head;
    document.activeElement.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowLeft", bubbles: true}));
    out.after_left = document.getElementById("card").dataset.head;
    out.focused = document.activeElement.dataset.head;
    out.card_rows = document.querySelectorAll("#card-table tr").length;
    out.relations = document.querySelectorAll("#relations tr").length;
    document.querySelector("#neighbours button").click();
    out.after_neighbour = document.getElementById("card").dataset.head;
    const sel = document.getElementById("metric");
    sel.value = "norm_ratio"; sel.dispatchEvent(new Event("change"));
    out.legend = document.getElementById("legend").textContent;
    out.label = document.querySelector('.cell[data-head="2-2"]').getAttribute("aria-label");
    out.pressed = document.querySelectorAll('.cell[aria-pressed="true"]').length;
  } catch (e) { out.error = String(e); }
  const pre = document.createElement("pre"); pre.id = "test-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.integration
def test_the_page_in_a_headless_browser(tmp_path):
    browser = _chromium()
    page = tmp_path / "explorer.html"
    page.write_text(explorer_html(explorer_data(*_tables(tmp_path), run="tiny", neighbours=2))
                    .replace("</body>", DRIVER + "</body>"), encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not [line for line in proc.stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    marker = '<pre id="test-result">'
    out = json.loads(proc.stdout.split(marker, 1)[1].split("</pre>", 1)[0].replace("&quot;", '"'))
    assert "error" not in out, out
    assert (out["after_click"], out["after_down"], out["after_left"], out["focused"]) == ("1-2", "2-2", "2-1", "2-1")
    assert out["card_rows"] == 14 and out["relations"] == 3
    assert out["after_neighbour"] == "1-2"  # 2-1's nearest head in the MDS embedding (at 3: 1-2 at 1, 2-2 at 10)
    assert out["legend"].startswith("[CLS] share: norm-based / attention: 0.100 (dark) to 1.000 (light)")
    assert out["label"] == "head 2-2, [CLS] share: norm-based / attention: 0.250" and out["pressed"] == 1
