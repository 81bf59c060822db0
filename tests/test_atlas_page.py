"""The atlas (``bertlook atlas CONFIG``, bertlook.reporting.atlas): hand-made run directories of an encoder, two
decoders (one with a BOS token, one without), a model that failed (its logs), one that crashed with a traceback,
one that stopped without a manifest and one never run; the records against the files they were read from, the
reasons, the token roles named for the family, the CSV, the tidy frame of ``bertlook.open_atlas``, the CLI's
exit codes, and the page in headless Chromium (sorting, family filter, plots, no script error)."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import bertlook
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json
from bertlook.reporting.atlas import atlas_data, atlas_html, read_atlas, write_atlas
from bertlook.reporting.atlas_runs import relative_depth, thirds
from test_explorer import _run_page_in_chromium

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _run(results: Path, label: str, *, kind: str, model_type: str, L: int, H: int, cls: str | None, sep: str | None,
         firsts: list[str] | None = None, params: int | None = None, probes: bool = True, detectors: bool = True,
         no_sep_anywhere: bool = False) -> Path:
    """A finished run ``atlas-{label}``: head (l, h) has cls share l/10 + h/100, sep share 0.01 l, entropy l + h;
    Table 1's All accuracy 0.5 + L/100 (baseline 0.3) and det 0.9 (baseline 0.8)."""
    run = results / f"atlas-{label}"
    write_json(run / "manifest.json", {
        "run": run.name, "config": {}, "packages": {"bertlook": "0.1.0"},
        "model": {"config": {"label": label}, "provenance": {"family": kind, "model_type": model_type,
                                                              "num_layers": L, "num_heads": H}}})
    causal = kind == "decoder"  # a decoder's Table 1 also has the accuracy over the words a head can see
    _write(run / "tables" / "table1.csv",
           "relation,best_head,direction,accuracy,baseline_offset,baseline_accuracy,vs_baseline_significant"
           + (",accuracy_visible\n" if causal else "\n")
           + f"All,1-1,dep2head,{0.5 + L / 100},1,0.3,True" + (",0.75\n" if causal else "\n")
           + f"det,{L}-1,head2dep,0.9,-1,0.8,False" + (",\n" if causal else "\n"))
    if probes:
        _write(run / "tables" / "table3.csv", "probe,uas_mean,note\nattn,0.61,\nright_branching,0.26,\n")
    _write(run / "tables" / "attention_stats.csv", "layer,head,cls,sep,entropy\n" + "".join(
        f"{l},{h},{l / 10 + h / 100},{0.01 * l},{l + h}\n" for l in range(1, L + 1) for h in range(1, H + 1)))
    n = 4
    write_json(run / "tables" / "attention_stats.summary.json", {
        "n_examples": n, "special_tokens": {"cls": cls, "sep": sep},
        "excluded_from_column": {"sep_sep (no [SEP] token)": n if no_sep_anywhere else 0}})
    behaviours = ["[CLS]", "broad", "previous token", "[SEP]"]
    _write(run / "tables" / "head_clusters.csv", "layer,head,x,y,behavior\n" + "".join(
        f"{l},{h},0,0,{behaviours[(l * H + h) % 4]}\n" for l in range(1, L + 1) for h in range(1, H + 1)))
    if detectors:
        det = {name: {"n_detected": k, "top_heads": [{"head": f"{L}-1", "score": 0.5 + k / 10}]}
               for k, name in enumerate(("prev_token", "duplicate_token", "induction"))}
        write_json(run / "tables" / "head_detectors.summary.json", {
            "threshold": 0.5, "detectors": det, "sink_share_per_layer": [0.1 * l for l in range(1, L + 1)]})
    if firsts is not None:
        _write(run / "corpus" / "segments.jsonl", "".join(json.dumps({"id": k, "tokens": [t, "x"]}) + "\n"
                                                          for k, t in enumerate(firsts)))
    if params is not None:
        write_json(run / "attention" / "randwords-dev.summary.json",
                   {"random_init": {"n_kept_elements": params // 4, "n_reinitialized_elements": params - params // 4}})
    _write(run / "explorer.html", "<html></html>")
    return run


MODELS = [("bert", "BERT"), ("gpt", "GPT-2"), ("llama", "Llama"), ("broken", "GPT-2"), ("crashed", "Qwen2"),
          ("stopped", "BERT"), ("absent", "Pythia")]


@pytest.fixture
def atlas_config(tmp_path):
    """A validated configuration (config/offline.yaml with seven models) and its results directory."""
    from bertlook.pipeline.config import load_config

    results = tmp_path / "results"
    _run(results, "bert", kind="encoder", model_type="bert", L=3, H=2, cls="[CLS]", sep="[SEP]", params=1000)
    _run(results, "gpt", kind="decoder", model_type="gpt2", L=2, H=2, cls=None, sep="<|endoftext|>",
         firsts=["<|endoftext|>"] * 3, params=8000, probes=False, no_sep_anywhere=True)
    llama = _run(results, "llama", kind="decoder", model_type="llama", L=4, H=1, cls=None, sep="</s>",
                 firsts=["The", "A", "The"], detectors=False)
    _write(llama / "tables" / "table3.csv", "probe,uas_mean\nattn,abc\n")  # unreadable: a problem, not a failure
    broken = results / "atlas-broken"
    _write(broken / "logs" / "old.log", "error: an older failure\n")
    _write(broken / "logs" / "sub" / "extract_segments.log",
           "loading\nerror: model gpt2-xl: CUDA out of memory </script><b>\nerror: a second line\n")
    os.utime(broken / "logs" / "old.log", (1_000_000, 1_000_000))
    _write(results / "atlas-crashed" / "logs" / "heads.log",
           "Traceback (most recent call last):\n  File \"x.py\", line 1\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    _write(results / "atlas-stopped" / "tables" / "table1.csv", "relation\n")
    cfg = yaml.safe_load((ROOT / "config" / "offline.yaml").read_text())
    cfg.update(run_name="atlas", results_dir=str(results),
               models=[{"label": label, "name_or_path": f"org/{label}"} for label, _ in MODELS])
    path = tmp_path / "atlas.yaml"
    path.write_text(yaml.safe_dump(cfg))
    config = load_config(path)
    for m, (_, family) in zip(config["models"], MODELS):
        m["family"] = family  # the `family` key of a models entry (config.schema.yaml, issue 43)
    return config, path, results


def test_records_against_the_run_files(atlas_config):
    config, _, _ = atlas_config
    data = atlas_data(config)
    rec = {r["label"]: r for r in data["models"]}
    assert [r["status"] for r in data["models"]] == ["ran", "ran", "ran", "did not run", "did not run", "incomplete",
                                                      "not run yet"]
    assert data["counts"] == {"ran": 3, "did not run": 2, "incomplete": 1, "not run yet": 1}
    # the newest log first, its first error: line
    assert rec["broken"]["reason"] == "logs/sub/extract_segments.log: model gpt2-xl: CUDA out of memory </script><b>"
    assert rec["crashed"]["reason"] == "logs/heads.log: torch.OutOfMemoryError: CUDA out of memory."
    assert rec["absent"]["reason"] is None and rec["broken"]["values"] == {}
    b = rec["bert"]
    assert (b["family"], b["kind"], b["layers"], b["heads"], b["parameters"]) == ("BERT", "encoder", 3, 2, 1000)
    assert b["values"]["t1:All"] == pytest.approx(0.53) and b["values"]["t1_baseline:det"] == pytest.approx(0.8)
    assert b["details"]["t1:det"].startswith("head 3-1 head2dep; baseline offset -1: 80.0%")
    assert b["flags"] == {"t1:All": "above", "t1:det": "not above"}
    assert b["values"]["probe:attn"] == pytest.approx(0.61)
    # 3 layers: thirds 1, 2, 3; layer 2's cls share: mean of 0.21 and 0.22
    assert thirds(3) == {"early": (1, 1), "middle": (2, 2), "late": (3, 3)} and thirds(2) == {"middle": (1, 2)}
    assert b["values"]["first_share:middle"] == pytest.approx(0.215) and b["values"]["entropy:late"] == pytest.approx(4.5)
    assert b["profiles"]["sep_share"] == pytest.approx([0.01, 0.02, 0.03])
    assert b["values"]["induction:heads"] == 2 and b["values"]["induction:best"] == pytest.approx(0.7)
    assert b["details"]["induction:best"] == "head 3-1" and b["profiles"]["sink_random"] == pytest.approx([0.1, 0.2, 0.3])
    # behaviours of heads (l, h) -> index (2l + h) % 4: [CLS] 2, broad 1, previous token 1, [SEP] 2 of 6
    assert b["values"]["behaviour:first token"] == pytest.approx(2 / 6) and b["values"]["behaviour:broad"] == 1 / 6
    assert b["values"]["behaviour:[SEP] / EOS"] == pytest.approx(2 / 6) and "behaviour:[CLS]" not in b["values"]
    assert b["explorer"] == "../atlas-bert/explorer.html" and b["problems"] == []
    # token roles named for the family, with the model's own token
    assert b["roles"]["first"]["token"] == "[CLS]" and rec["gpt"]["roles"]["first"]["token"] == "<|endoftext|>"
    assert "BOS" in rec["gpt"]["roles"]["first"]["note"] and "in none of the 4 segments" in rec["gpt"]["roles"]["sep"]["note"]
    assert rec["llama"]["roles"]["first"] == {"token": None, "note": "the first word (no BOS): 2 different first tokens"}
    # a metric the run does not have is empty, never invented; an unreadable table is a problem of its model
    g, ll = rec["gpt"], rec["llama"]
    assert g["details"]["t1:All"].endswith("; over the words it can see (causal): 75.0%")
    assert "can see" not in g["details"]["t1:det"] and "can see" not in b["details"]["t1:All"]
    assert "probe:attn" not in g["values"] and g["parameters"] == 8000 and "first_share:early" not in g["values"]
    assert ll["parameters"] is None and "no random-init" in ll["parameters_source"] and "induction:heads" not in ll["values"]
    assert len(ll["problems"]) == 1 and "table3.csv:2: expected a number, got 'abc'" in ll["problems"][0]
    assert ll["values"]["t1:All"] == pytest.approx(0.54)


def test_files_csv_and_tidy_frame(atlas_config, tmp_path):
    config, _, _ = atlas_config
    paths = write_atlas(atlas_data(config), tmp_path / "out")
    csv = pd.read_csv(paths["csv"], keep_default_na=False)
    assert csv["label"].tolist() == [m for m, _ in MODELS]
    bert = csv[csv["label"] == "bert"].iloc[0]
    assert bert["parameters"] == "1000" and float(bert["t1:All"]) == pytest.approx(0.53)
    assert bert["first_token"] == "[CLS]" and csv[csv["label"] == "gpt"].iloc[0]["probe:attn"] == ""
    assert csv[csv["label"] == "broken"].iloc[0]["status"] == "did not run"
    for frame in (bertlook.open_atlas(tmp_path / "out"), bertlook.api.open_atlas(paths["json"])):
        prof = frame[(frame["section"] == "profile") & (frame["metric"] == "first_share")]
        assert prof.groupby("model").size().to_dict() == {"bert": 3, "gpt": 2, "llama": 4}
        row = prof[(prof["model"] == "llama") & (prof["layer"] == 2)].iloc[0]
        assert row["depth"] == pytest.approx(relative_depth(2, 4)) == pytest.approx(0.375)
        assert row["value"] == pytest.approx(0.21)
        status = frame[frame["metric"] == "status"].set_index("model")["detail"]
        assert status["absent"] == "not run yet" and status["crashed"].endswith("CUDA out of memory.")
        t1 = frame[(frame["model"] == "bert") & (frame["metric"] == "t1:All")].iloc[0]
        assert t1["section"] == "Table 1: best head" and t1["value"] == pytest.approx(0.53)
    with pytest.raises(BertlookError, match="no atlas"):
        read_atlas(tmp_path)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(BertlookError, match="not a bertlook-atlas/1 file"):
        read_atlas(tmp_path / "bad.json")


def test_the_page_escapes_what_the_logs_say(atlas_config):
    config, _, _ = atlas_config
    page = atlas_html(atlas_data(config))
    assert page.count("</script>") == 2 and "__DATA__" not in page and "http://" not in page.replace(
        "http://www.w3.org/2000/svg", "")  # no network: the only URL is the SVG namespace
    start = page.index('id="data">') + len('id="data">')
    data = json.loads(page[start:page.index("</script>", start)].replace("<\\/", "</"))
    assert data["models"][3]["reason"].endswith("</script><b>")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bertlook", "atlas", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=120)


def test_the_command_never_fails_because_a_model_did(atlas_config, tmp_path):
    _, path, results = atlas_config
    proc = _cli(path)
    assert proc.returncode == 0, proc.stderr
    assert "atlas: broken: did not run: logs/sub/extract_segments.log: model gpt2-xl" in proc.stdout
    assert "atlas: llama: warning: left out: tables/table3.csv" in proc.stdout
    assert "7 model(s): 3 ran, 2 did not run, 1 incomplete, 1 not run yet" in proc.stdout
    assert sorted(p.name for p in (results / "atlas-atlas").iterdir()) == ["atlas.csv", "atlas.html", "atlas.json"]
    # the workflow's JSON dump of its validated config (clustering.mds_eps 1e-09: a string to a YAML 1.1 reader)
    from bertlook.pipeline.config import load_config

    dumped = tmp_path / "config-0123.json"
    dumped.write_text(json.dumps(load_config(path), sort_keys=True, indent=1))
    assert '"mds_eps": 1e-09' in dumped.read_text()
    proc = _cli(dumped, "--out", tmp_path / "from-json")
    assert proc.returncode == 0 and (tmp_path / "from-json" / "atlas.html").is_file(), proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("run_name: x\n")
    proc = _cli(bad, "--out", tmp_path / "nothing")
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {bad}") and not (tmp_path / "nothing").exists()


DRIVER = """<script>
window.addEventListener("load", function () {
  const out = {};
  const order = function () { return Array.from(document.querySelectorAll("tr.model-row")).filter(
    function (tr) { return !tr.hidden; }).map(function (tr) { return tr.dataset.model; }); };
  try {
    out.initial = order();
    out.headers = Array.from(document.querySelectorAll("#atlas th[data-key]")).length;
    document.querySelector('th[data-key="parameters"] button').click();
    out.by_params = order();
    document.querySelector('th[data-key="parameters"] button').click();
    out.by_params_desc = order();
    out.aria = document.querySelector('th[data-key="parameters"]').getAttribute("aria-sort");
    document.querySelector('th[data-key="t1:All"] button').click();
    out.by_all = order();
    const cell = document.querySelector('tr[data-model="bert"] td[data-key="t1:All"]');
    out.cell = cell.textContent + " " + cell.dataset.vsBaseline + " " + getComputedStyle(cell).fontWeight;
    out.reason = document.querySelector('tr[data-model="broken"] td.status').textContent;
    out.link = document.querySelector('tr[data-model="gpt"] td.model a').getAttribute("href");
    out.roles = ["bert", "gpt", "llama"].map(function (m) {
      return document.querySelectorAll('tr[data-model="' + m + '"] td.text')[3].textContent; });
    out.points = document.querySelectorAll("#scatter circle.point").length;
    out.note = document.getElementById("scatter-note").textContent;
    out.lines = document.querySelectorAll("#profile polyline.profile").length;
    const gpt2 = document.querySelector('#families input[value="GPT-2"]');
    gpt2.click();
    out.after_filter = order();
    out.lines_after = document.querySelectorAll("#profile polyline.profile").length;
    out.points_after = document.querySelectorAll("#scatter circle.point").length;
    document.querySelector('#sections input[value="Probe UAS"]').click();
    out.probe_headers = document.querySelectorAll('th[data-key^="probe:"]').length;
    out.baseline_headers = document.querySelectorAll('th[data-key^="t1_baseline:"]').length;
  } catch (e) { out.error = String(e); }
  const pre = document.createElement("pre"); pre.id = "test-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.integration
def test_the_page_in_a_headless_browser(atlas_config, tmp_path):
    config, _, _ = atlas_config
    out = _run_page_in_chromium(tmp_path, atlas_html(atlas_data(config)).replace("</body>", DRIVER + "</body>"))
    assert out["initial"] == [m for m, _ in MODELS]  # config order; the ones that ran come first anyway
    assert out["by_params"] == ["bert", "gpt", "llama", "broken", "crashed", "stopped", "absent"]
    assert out["by_params_desc"][:3] == ["gpt", "bert", "llama"] and out["aria"] == "descending"  # empty: last
    assert out["by_all"][:3] == ["gpt", "bert", "llama"]  # 0.52, 0.53, 0.54
    assert out["cell"] == "53.0 above 700" and out["reason"].startswith("did not run: logs/sub/extract_segments.log")
    assert html.unescape(out["reason"]).endswith("</script><b>") and out["link"] == "../atlas-gpt/explorer.html"
    assert [html.unescape(r) for r in out["roles"]] == ["[CLS]", "<|endoftext|>", "first word"]
    assert out["points"] == 2 and out["note"] == "Not plotted (the run records no parameter count): llama"
    assert out["lines"] == 3 and out["lines_after"] == 2 and out["points_after"] == 1
    assert out["after_filter"] == ["bert", "llama", "crashed", "stopped", "absent"]
    assert out["probe_headers"] == 0 and out["baseline_headers"] == 0  # hidden groups
    assert out["headers"] > 20
