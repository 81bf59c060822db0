"""The head explorer: its data from hand-written tables (nearest heads, relation order, the norm ratio), the page's
escaping, and the page in headless Chromium: a click and arrow keys select heads, the card, relations and
neighbours follow, the metric menu recolours the grid with a legend; no script error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bertlook.errors import BertlookError
from bertlook.reporting.explorer import explorer_data, explorer_html, explorer_sample
from headless_chromium import find_chromium, run_chromium

ROOT = Path(__file__).resolve().parents[1]

REPORT_HEADER = ("layer,head,importance,confidence,positional_offset,positional_fraction,positional,sink,sink_head,"
                 "entropy,behaviour,best_relation,best_direction,best_accuracy,coref_accuracy,prev_token,"
                 "duplicate_token,induction,alti_sink,alti_sep,ablation_loss")


def _tables(tmp_path, *, duplicate=False):
    rows = [(1, 1, "previous token", 0.9), (1, 2, "[CLS]", 0.1), (2, 1, "broad", 0.2), (2, 2, "other", 0.3)]
    if duplicate:
        rows.append((2, 2, "other", 0.3))
    report = tmp_path / "head_report.csv"
    report.write_text(REPORT_HEADER + "\n" + "".join(
        f"{l},{h},,0.5,-1,0.5,False,0.2,False,2.0,{b},det,dep2head,0.4,,{p},0.1,0.05,0.3,0.{l}{h},\n"
        for l, h, b, p in rows))
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
    table1 = tmp_path / "table1.csv"  # baselines of two of the three relations (nsubj is not a Table 1 row)
    table1.write_text("relation,best_head,direction,accuracy,baseline_offset,baseline_accuracy,baseline_ci_low,"
                      "baseline_ci_high\nAll,1-1,dep2head,0.1,1,0.05,0.04,0.06\ndet,1-1,dep2head,0.4,-1,0.5,0.3,0.7\n")
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


def test_relation_interval_and_baseline(tmp_path):
    from bertlook.reporting.explorer import wilson_interval

    # Wilson by hand: p = 0.5, n = 100, z = 1.96: centre 0.5, half-width 1.96 sqrt(0.0025 + 0.000096) / 1.0384
    low, high = wilson_interval(0.5, 100)
    assert (low, high) == pytest.approx((0.40383, 0.59617), abs=1e-5)
    assert wilson_interval(1.0, 10)[1] == pytest.approx(1.0) and wilson_interval(None, 10) == (None, None)
    assert wilson_interval(0.3, 0) == (None, None)
    report, acc, clusters, stats, norm = _tables(tmp_path)
    data = explorer_data(report, acc, clusters, stats, norm, run="tiny", table1=tmp_path / "table1.csv")
    rel = {r["relation"]: r for r in data["heads"][0]["relations"]}
    assert rel["All"]["baseline"] == {"offset": 1, "accuracy": 0.05, "ci_low": 0.04, "ci_high": 0.06}
    assert rel["det"]["baseline"]["offset"] == -1 and rel["nsubj"]["baseline"] is None
    assert (rel["det"]["ci_low"], rel["det"]["ci_high"]) == pytest.approx(wilson_interval(0.4, 20))
    assert explorer_data(report, acc, clusters, stats, norm, run="tiny")["heads"][0]["relations"][0]["baseline"] is None


def test_bad_tables_name_file_and_line(tmp_path):
    with pytest.raises(BertlookError, match=r"head_report.csv:6: head 2-2 appears twice"):
        explorer_data(*_tables(tmp_path, duplicate=True), run="tiny")
    report, acc, clusters, stats, norm = _tables(tmp_path)
    acc.write_text(acc.read_text() + "det,3,1,dep2head,0.1,5\n")
    with pytest.raises(BertlookError, match=r"head_accuracy.csv:14: head 3-1 is not in the report card"):
        explorer_data(report, acc, clusters, stats, norm, run="tiny")


def _word_store(tmp_path, name="words-dev", scale=1.0):
    """Word stores of a 2 x 2 model: sentences of 3, 5 and 2 words; head (l, h) attends to the previous word
    (row 0 to itself), values scaled by ``scale`` and the rest of the row on [CLS]."""
    import numpy as np

    from bertlook.attention.store import AttentionWriter

    w = AttentionWriter(tmp_path / name, num_layers=2, num_heads=2, level="word", meta={"treebank_kind": "silver"})
    for k, W in enumerate((3, 5, 2)):
        n = W + 2
        m = np.zeros((2, 2, n, n))
        for i in range(n):
            m[..., i, max(i - 1, 0)] += scale
            m[..., i, 0] += 1 - scale
        heads = [0] + [1] * (W - 1)  # word 1 the root, every other word's head is word 1
        w.add({"id": f"s{k}", "tokens": ["[CLS]", *[f"w{j}" for j in range(W)], "[SEP]"], "heads": heads,
               "rels": ["root"] + ["dep"] * (W - 1), "upos": ["X"] * W, "xpos": ["X"] * W}, m.astype(np.float16))
    w.close(excluded={})
    return tmp_path / name


def test_sample_of_short_sentences(tmp_path):
    import base64

    import numpy as np

    sample = explorer_sample(_word_store(tmp_path), _word_store(tmp_path, "normwords-dev", 0.5), words=(3, 5))
    assert [s["id"] for s in sample["sentences"]] == ["s0", "s1"]  # the 2-word sentence is too short
    s = sample["sentences"][1]
    assert s["n"] == 7 and s["heads"] == [0, 1, 1, 1, 1] and s["tokens"][0] == "[CLS]"
    att = np.frombuffer(base64.b64decode(s["attention"]), dtype=np.uint8).reshape(2, 2, 7, 7)
    assert att[1, 0, 3, 2] == 255 and att[1, 0, 3].sum() == 255  # word 2's row: all on word 1
    norm = np.frombuffer(base64.b64decode(s["norm"]), dtype=np.uint8).reshape(2, 2, 7, 7)
    assert norm[0, 1, 3, 2] == 128 and norm[0, 1, 3, 0] == 128  # 0.5 -> round(127.5) = 128
    roll = np.frombuffer(base64.b64decode(s["rollout"]), dtype=np.uint8).reshape(2, 7, 7)
    assert roll[0, 3, 3] == 128 and roll[0, 3, 2] == 128  # layer 1: 0.5 A + 0.5 I
    data = explorer_data(*_tables(tmp_path), run="tiny", sample=sample)
    assert len(data["sentences"]) == 2
    with pytest.raises(BertlookError, match="not a bertlook-explorer-sample/1 sample of a 2 x 2 model"):
        explorer_data(*_tables(tmp_path), run="tiny", sample={**sample, "num_layers": 3})


def _contribution_file(tmp_path, n=7, sid="s1"):
    """A contributions --out-explorer file for sentence ``sid`` of ``n - 2`` words (2 x 2 model): ALTI per head
    uniform, ALTI over layers on the diagonal, value zeroing every row on [CLS]."""
    import numpy as np

    from bertlook.analyses.contribution_explorer import write_explorer_maps

    vz = np.zeros((2, n, n), dtype=np.float16)
    vz[:, :, 0] = 1
    data = {"ids": [sid], "alti_heads": [np.full((2, 2, n, n), 1 / n, dtype=np.float16)],
            "alti_rollout": [np.broadcast_to(np.eye(n, dtype=np.float16), (2, n, n)).copy()], "value_zeroing": [vz]}
    path = tmp_path / "contribution_explorer.npz"
    write_explorer_maps(path, data)
    return path


def test_sample_joins_the_contribution_maps_by_sentence(tmp_path):
    import base64

    import numpy as np

    sample = explorer_sample(_word_store(tmp_path), words=(3, 5), contributions=_contribution_file(tmp_path))
    s0, s1 = sample["sentences"]
    assert "value_zeroing" not in s0 and {"alti_heads", "alti_rollout", "value_zeroing"} <= set(s1)
    vz = np.frombuffer(base64.b64decode(s1["value_zeroing"]), dtype=np.uint8).reshape(2, 7, 7)
    assert (vz[:, :, 0] == 255).all() and vz[:, :, 1:].sum() == 0
    assert np.frombuffer(base64.b64decode(s1["alti_heads"]), dtype=np.uint8).size == 2 * 2 * 7 * 7
    with pytest.raises(BertlookError, match=r"contribution_explorer.npz: sentence 's1': alti_heads maps of 4 words, the word store's of 5"):
        explorer_sample(_word_store(tmp_path), words=(3, 5), contributions=_contribution_file(tmp_path, n=6))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(BertlookError, match="bad.npz: not a contributions explorer file"):
        explorer_sample(_word_store(tmp_path), words=(3, 5), contributions=bad)


def _fig1_files(tmp_path, n=40, sep=10):
    """Two shards' Fig 1 files of a 2 x 2 model, the second holding a segment of ``n`` tokens ([SEP] at ``sep``
    and at the end) whose maps all attend to the next position (the last to itself)."""
    import numpy as np

    from bertlook.pipeline.sharding import save_partial
    from bertlook.attention.fig1_example import FIG1_KIND, fig1_partial

    tokens = ["[CLS]", *[f"t{i}" for i in range(1, n - 1)], "[SEP]"]
    tokens[sep] = "[SEP]"
    attn = np.zeros((2, 2, n, n), dtype=np.float16)
    attn[..., np.arange(n), np.minimum(np.arange(n) + 1, n - 1)] = 1
    paths = []
    for k, record in enumerate((None, {"tokens": tokens})):
        meta, arrays = fig1_partial(where="test", example_index=0, target=7, n_total=3, num_layers=2, num_heads=2,
                                    special_tokens={"cls": "[CLS]", "sep": "[SEP]"}, record=record, attn=attn)
        paths.append(save_partial(tmp_path / f"fig1-{k + 1}of2.npz", FIG1_KIND, meta, arrays))
    return paths


def test_segment_windows(tmp_path):
    import base64

    import numpy as np

    sample = explorer_sample(_word_store(tmp_path), segment_examples=_fig1_files(tmp_path), words=(3, 5))
    windows = [s for s in sample["sentences"] if s.get("kind") == "segment"]
    # 40 tokens, [SEP] at 10: Fig 1's window is the first 30; the second is [CLS] and the last 29 (11..39)
    assert [w["positions"] for w in windows] == [list(range(30)), [0, *range(11, 40)]]
    assert windows[1]["tokens"][:2] == ["[CLS]", "t11"] and windows[1]["tokens"][-1] == "[SEP]"
    assert windows[0]["id"] == "segment 7 window 1" and windows[0]["heads"] == [] and "norm" not in windows[0]
    m = np.frombuffer(base64.b64decode(windows[1]["attention"]), dtype=np.uint8).reshape(2, 2, 30, 30)
    assert m[1, 1, 1, 2] == 255 and m[1, 1, 0].sum() == 0  # t11 -> t12 kept; [CLS] -> t1 is outside the window
    (tmp_path / "short").mkdir()
    short = explorer_sample(_word_store(tmp_path), segment_examples=_fig1_files(tmp_path / "short", n=20), words=(3, 5))
    assert [s["positions"] for s in short["sentences"] if s.get("kind")] == [list(range(20))]  # one window
    with pytest.raises(BertlookError, match="0 of the Fig 1 example files hold the example"):
        explorer_sample(_word_store(tmp_path), segment_examples=_fig1_files(tmp_path)[:1])


def test_page_escapes_the_data(tmp_path):
    data = explorer_data(*_tables(tmp_path), run="a</script><b>")
    html = explorer_html(data)
    assert html.count("</script>") == 2  # the data's and the code's own, none from the run name
    assert "<title>Head explorer: a&lt;/script>&lt;b></title>" in html
    start = html.index('id="data">') + len('id="data">')
    assert json.loads(html[start:html.index("</script>", start)].replace("<\\/", "</"))["run"] == "a</script><b>"


DRIVER = """<script>
window.addEventListener("load", function () {
  const out = {};
  const P = document.querySelector('.pane[data-pane="0"]'), $ = function (sel) { return P.querySelector(sel); };
  try {
    document.querySelector('.cell[data-head="1-2"]').click();
    out.after_click = $(".card").dataset.head;
    document.activeElement.blur();
    document.querySelector('.cell[data-head="1-2"]').dispatchEvent(
      new KeyboardEvent("keydown", {key: "ArrowDown", bubbles: true}));
    out.after_down = $(".card").dataset.head;
    document.activeElement.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowLeft", bubbles: true}));
    out.after_left = $(".card").dataset.head;
    out.focused = document.activeElement.dataset.head;
    out.card_rows = P.querySelectorAll(".card-table tr").length;
    out.relations = P.querySelectorAll(".relations tr").length;
    out.vs_baseline = Array.from(P.querySelectorAll(".relations tr[data-relation]")).map(
      function (tr) { return tr.dataset.relation + ":" + (tr.dataset.vsBaseline || "") + ":" + tr.cells[4].textContent; });
    P.querySelector(".neighbours button").click();
    out.after_neighbour = $(".card").dataset.head;
    const sel = $(".metric");
    sel.value = "norm_ratio"; sel.dispatchEvent(new Event("change"));
    out.legend = $(".legend").textContent;
    out.label = document.querySelector('.cell[data-head="2-2"]').getAttribute("aria-label");
    out.pressed = document.querySelectorAll('.cell[aria-pressed="true"]').length;
    explorer.show(0);  // head 1-1: a previous-word head on every sentence
    const d = $(".drawing");
    out.lines = Number(d.dataset.lines); out.gold = Number(d.dataset.gold); out.kind = d.dataset.kind;
    out.svg_lines = d.querySelectorAll("line.attn").length;
    const sent = $(".sentence"); sent.selectedIndex = 1; sent.dispatchEvent(new Event("change"));
    out.lines_s1 = Number(d.dataset.lines); out.gold_s1 = Number(d.dataset.gold);
    const kind = $(".kind"); kind.value = "norm"; kind.dispatchEvent(new Event("change"));
    out.kind_after = d.dataset.kind; out.lines_norm = Number(d.dataset.lines);
    const view = $(".view"); view.value = "heatmap"; view.dispatchEvent(new Event("change"));
    out.canvas = d.querySelectorAll("canvas").length;
    out.kinds = Array.from(kind.options).map(function (o) { return o.value; });
    view.value = "lines"; kind.value = "value_zeroing"; kind.dispatchEvent(new Event("change"));
    out.kind_vz = d.dataset.kind; out.lines_vz = Number(d.dataset.lines);
    view.value = "heatmap";
    view.value = "lines"; sent.selectedIndex = 3; sent.dispatchEvent(new Event("change"));  // window 2 of the segment
    out.window_label = sent.options[3].textContent.slice(0, 47);
    out.window_kinds = Array.from(kind.options).map(function (o) { return o.value; });
    out.window_lines = Number(d.dataset.lines); out.window_gold = Number(d.dataset.gold);
  } catch (e) { out.error = String(e); }
  const pre = document.createElement("pre"); pre.id = "test-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


#: headless Chromium without network, sync or a shared profile (the page must work offline)
def _run_page_in_chromium(tmp_path, html):
    """Open ``html`` in headless Chromium with a driver script that leaves ``<pre id="test-result">`` (JSON) in
    the DOM; no uncaught script error; the driver's result."""
    page = tmp_path / "page.html"
    page.write_text(html, encoding="utf-8")
    marker = '<pre id="test-result">'
    proc = run_chromium(["--virtual-time-budget=3000", "--dump-dom", page.as_uri()], tmp_path / "profile",
                        done=lambda out: marker in out and "</html>" in out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not [line for line in proc.stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    out = json.loads(proc.stdout.split(marker, 1)[1].split("</pre>", 1)[0].replace("&quot;", '"'))
    assert "error" not in out, out
    return out


@pytest.mark.integration
def test_the_page_in_a_headless_browser(tmp_path):
    sample = explorer_sample(_word_store(tmp_path), _word_store(tmp_path, "normwords-dev", 0.5), words=(3, 5),
                             segment_examples=_fig1_files(tmp_path), contributions=_contribution_file(tmp_path))
    data = explorer_data(*_tables(tmp_path), run="tiny", neighbours=2, sample=sample, table1=tmp_path / "table1.csv")
    out = _run_page_in_chromium(tmp_path, explorer_html(data).replace("</body>", DRIVER + "</body>"))
    assert (out["after_click"], out["after_down"], out["after_left"], out["focused"]) == ("1-2", "2-2", "2-1", "2-1")
    assert out["card_rows"] == 17 and out["relations"] == 4  # a header and three relations
    # All: 0.1 of 100 words, Wilson 0.055-0.174 > 0.05; det 0.4 of 20: 0.219-0.613 holds 0.5; nsubj: no baseline
    assert out["vs_baseline"] == ["All dep2head:above:k=+1: 0.050", "nsubj head2dep::\u2013", "det dep2head:within:k=-1: 0.500"]
    assert out["after_neighbour"] == "1-2"  # 2-1's nearest head in the MDS embedding (at 3: 1-2 at 1, 2-2 at 10)
    assert out["legend"].startswith("[CLS] share: norm-based / attention: 0.100 (dark) to 1.000 (light)")
    assert out["label"] == "head 2-2, [CLS] share: norm-based / attention: 0.250" and out["pressed"] == 1
    # sentence 1 (3 words, 5 positions): one line per row to the previous position; 2 gold arcs (word 1 is root)
    assert (out["kind"], out["lines"], out["svg_lines"], out["gold"]) == ("attention", 5, 5, 2)
    assert (out["lines_s1"], out["gold_s1"]) == (7, 4)  # 5 words: 7 positions, 4 arcs
    # norm-based: half on the previous position, half on [CLS]; row 1's both halves land on [CLS]
    assert out["kind_after"] == "norm" and out["lines_norm"] == 2 * 7 - 2
    assert out["canvas"] == 1
    assert out["kinds"] == ["attention", "norm", "rollout", "alti_heads", "alti_rollout", "value_zeroing"]
    # value zeroing (head 1-1 shows its layer's map): every row of sentence 1 on [CLS], one line each
    assert out["kind_vz"] == "value_zeroing" and out["lines_vz"] == 7
    # the second window (positions 0, 11..39): every row on the next position inside the window but [CLS]'s
    # (t1 is outside) and the last (itself): 28 + 1 lines, no gold arcs, attention only
    assert out["window_label"] == "4: segment window, tokens 0, 11\u201339 of 40: [CLS]"
    assert (out["window_kinds"], out["window_lines"], out["window_gold"]) == (["attention"], 29, 0)


@pytest.mark.integration
def test_screenshot_of_the_page(tmp_path):
    """A screenshot in headless Chromium: the page draws its grid (the behaviour colours of the hand-written
    card's four heads) and its text, not a blank or error page."""
    from PIL import Image

    page, png = tmp_path / "explorer.html", tmp_path / "explorer.png"
    page.write_text(explorer_html(explorer_data(*_tables(tmp_path), run="tiny")), encoding="utf-8")
    proc = run_chromium(["--hide-scrollbars", "--window-size=1000,700", "--virtual-time-budget=3000",
                         f"--screenshot={png}", page.as_uri()], tmp_path / "profile", done=lambda _: png.exists())
    assert proc.returncode == 0 and png.exists(), proc.stderr[-3000:]
    img = Image.open(png).convert("RGB")
    assert img.size == (1000, 700)
    counts = {colour: n for n, colour in img.getcolors(maxcolors=1 << 20)}
    # behaviours sorted: "[CLS]", "broad", "other", "previous token" -> the page's first four category colours;
    # a cell is 34 x 28 px with a border: each colour fills at least 20 x 20 px
    for hex_colour in ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2"):
        rgb = tuple(int(hex_colour[k:k + 2], 16) for k in (1, 3, 5))
        assert counts.get(rgb, 0) >= 400, (hex_colour, counts.get(rgb, 0))
    dark = sum(n for colour, n in counts.items() if sum(colour) < 150)
    assert dark > 2000  # the title, hint and axis text


SIDE_BY_SIDE_DRIVER = """<script>
window.addEventListener("load", function () {
  const out = {};
  try {
    const panes = document.querySelectorAll(".pane"), A = panes[0], B = panes[1];
    out.panes = panes.length; out.title = document.getElementById("title").textContent;
    out.runs = [A.dataset.run, B.dataset.run];
    out.model_menu_shown = !B.querySelector(".model-row").hidden;
    out.cells_b = B.querySelectorAll(".cell").length;
    A.querySelector('.cell[data-head="1-2"]').click();
    out.b_after_12 = B.querySelector(".card").dataset.head;
    A.querySelector('.cell[data-head="2-2"]').click();  // B's model has one layer: no 2-2, B keeps 1-2
    out.b_after_22 = B.querySelector(".card").dataset.head;
    const sa = A.querySelector(".sentence"); sa.selectedIndex = 0; sa.dispatchEvent(new Event("change"));
    const sb = B.querySelector(".sentence");
    out.b_example = sb.options[sb.selectedIndex].textContent;  // the same sentence (s0), last in B's list
    out.b_example_index = sb.selectedIndex;
    document.getElementById("link").click();  // unlink
    A.querySelector('.cell[data-head="1-1"]').click();
    out.b_unlinked = B.querySelector(".card").dataset.head;
    const mb = B.querySelector(".model"); mb.selectedIndex = 0; mb.dispatchEvent(new Event("change"));
    out.b_run_after_menu = B.dataset.run; out.b_cells_after_menu = B.querySelectorAll(".cell").length;
    out.b_head_after_menu = B.querySelector(".card").dataset.head;  // the selected head kept: 1-2
  } catch (e) { out.error = String(e); }
  const pre = document.createElement("pre"); pre.id = "test-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _two_models(tmp_path):
    """Two runs' data: the 2 x 2 "tiny" with three sentences, and "small", its first layer only, the same
    sentences in the reverse order."""
    import copy

    sample = explorer_sample(_word_store(tmp_path), words=(2, 5))
    first = explorer_data(*_tables(tmp_path), run="tiny", sample=sample)
    second = copy.deepcopy(first)
    second.update(run="small", num_layers=1, heads=[h for h in second["heads"] if h["layer"] == 1],
                  sentences=second["sentences"][::-1])
    return first, second


def test_side_by_side_data(tmp_path):
    from bertlook.reporting.explorer import side_by_side

    first, second = _two_models(tmp_path)
    data = side_by_side([first, second], title="fan-out")
    assert [m["run"] for m in data["models"]] == ["tiny", "small"] and data["title"] == "fan-out"
    with pytest.raises(BertlookError, match="at least two runs"):
        side_by_side([first], title="x")
    with pytest.raises(BertlookError, match="b.json: not a head explorer's data \\(missing heads\\)"):
        side_by_side([first, {k: v for k, v in second.items() if k != "heads"}], title="x", where=["a.json", "b.json"])
    with pytest.raises(BertlookError, match="a run appears twice side by side: tiny, tiny"):
        side_by_side([first, first], title="x")


@pytest.mark.integration
def test_two_models_side_by_side_in_a_headless_browser(tmp_path):
    from bertlook.reporting.explorer import side_by_side

    html = explorer_html(side_by_side(list(_two_models(tmp_path)), title="fan-out"))
    out = _run_page_in_chromium(tmp_path, html.replace("</body>", SIDE_BY_SIDE_DRIVER + "</body>"))
    assert out["panes"] == 2 and out["title"] == "Head explorer: fan-out (2 models side by side)"
    assert out["runs"] == ["tiny", "small"] and out["model_menu_shown"] and out["cells_b"] == 2
    assert (out["b_after_12"], out["b_after_22"]) == ("1-2", "1-2")
    assert out["b_example"] == "3: w0 w1 w2" and out["b_example_index"] == 2  # s0 found by its id, not position
    assert out["b_unlinked"] == "1-2"
    assert (out["b_run_after_menu"], out["b_cells_after_menu"], out["b_head_after_menu"]) == ("tiny", 4, "1-2")


@pytest.mark.integration
def test_the_readme_screenshot_script(tmp_path):
    """scripts/explorer_screenshot.py (docs/img/explorer.png): a PNG of the window's size; a missing page: exit 2."""
    import sys

    from PIL import Image

    find_chromium()
    page = tmp_path / "explorer.html"
    sample = explorer_sample(_word_store(tmp_path), words=(3, 5))
    page.write_text(explorer_html(explorer_data(*_tables(tmp_path), run="tiny", sample=sample)), encoding="utf-8")
    script = ROOT / "scripts" / "explorer_screenshot.py"
    proc = subprocess.run([sys.executable, str(script), str(page), str(tmp_path / "shot.png"), "--head", "2-1",
                           "--size", "900,800"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert Image.open(tmp_path / "shot.png").size == (900, 800) and "head 2-1" in proc.stdout
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "missing.html"), str(tmp_path / "x.png")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "missing.html: no such page" in proc.stderr


def test_list_flags_as_the_workflow_passes_them():
    """The workflow passes a list as the flag once per item (pipeline.shellcmd.flag_tokens): every item arrives
    (a 4-shard run's Fig 1 files, a fan-out's runs), as they do written after one flag."""
    from bertlook.cli import build_parser
    from bertlook.pipeline.shellcmd import flag_tokens

    parser = build_parser("explorer")
    shards = [f"fig1-{k}of4.npz" for k in range(1, 5)]
    argv = ["explorer", *flag_tokens("segment_example", shards), *flag_tokens("side_by_side", ["a.json", "b.json"])]
    args = parser.parse_args(argv)
    assert args.segment_example == shards and args.side_by_side == ["a.json", "b.json"]
    args = parser.parse_args(["explorer", "--segment-example", *shards])
    assert args.segment_example == shards
