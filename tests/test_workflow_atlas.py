"""One failure is one model: a small tiny atlas (bertlook.testing.tiny_atlas: a tiny BERT, a tiny GPT-2 and the
GPT-NeoX with truncated weights) through the real snakemake with the default profile (keep-going). The broken
model's jobs fail with an `error:` line, every other model's run is complete, snakemake exits non-zero and its
onerror handler runs `bertlook atlas`; after the model is repaired a rerun runs only that model's jobs, the
cross-model summaries and the atlas. The whole tiny atlas (eight families and the offline MiniLM) runs on a
SLURM cluster in tests/test_slurm.py (`make test-slurm`), and locally with `make test-atlas`
(BERTLOOK_TINY_ATLAS=all: this file on all nine models; about 14 minutes on 2 cores, too long for `make test-all`)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from bertlook.testing.tiny_atlas import TINY_ATLAS_MODELS, make_tiny_atlas, make_tiny_atlas_model
from workflow_helpers import ROOT, snakemake, tiny_config

BROKEN = "pythia"
#: BERTLOOK_TINY_ATLAS=all (`make test-atlas`): the whole tiny atlas, every family and the offline MiniLM
WHOLE_ATLAS = os.environ.get("BERTLOOK_TINY_ATLAS") == "all"
#: the models of the local atlas: an encoder, a decoder and the broken decoder (three families), or all eight
LABELS = list(TINY_ATLAS_MODELS) if WHOLE_ATLAS else ["bert", "gpt2", BROKEN]
#: every model of the run (the MiniLM beside the tiny ones in the whole atlas)
RUN_LABELS = [*LABELS, "minilm"] if WHOLE_ATLAS else LABELS
DEFAULT_PROFILE = ["--workflow-profile", str(ROOT / "profiles" / "default")]
# rules of the cross-model outputs, which need every model: they run (again) in the rerun
ACROSS_MODELS = {"models_summary", "resources_summary", "report_pages_summary", "atlas", "all"}


def jobs(log: str) -> list[tuple[str, str]]:
    """(rule, run wildcard or "") of every job snakemake started (its `rule NAME:` block)."""
    out = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule \w+:)", log):
        m = re.search(r"^(?:local)?rule (\w+):$", block, flags=re.M)
        if m:
            run = re.search(r"^    wildcards: .*?\brun=([\w.-]+)", block, flags=re.M)
            out.append((m.group(1), run.group(1) if run else ""))
    return out


def failed(log: str) -> list[tuple[str, str]]:
    """(rule, its log file) of every job snakemake reports as failed, once each (on SLURM it reports a job more
    than once)."""
    return sorted(set(re.findall(r"^Error in rule (\w+):\n(?:    .*\n)*?    log: ([^\s,]+)", log, flags=re.M)))


def logs_of_failed_jobs(log: str) -> dict[str, str]:
    """{log file: its text} of every job snakemake reports as failed in ``log``."""
    return {job_log: Path(job_log).read_text() if Path(job_log).is_file() else "" for _, job_log in failed(log)}


def run_complete(run: Path) -> bool:
    """The run's results, manifest and resources tables (the last output of a run) exist."""
    return all((run / name).is_file() for name in ("manifest.json", "comparison.csv", "resources.csv",
                                                   "tables/table1.csv", "tables/attention_stats.csv"))


def state(results: Path) -> dict[str, bool]:
    """Which runs under ``results`` are complete (:func:`run_complete`), and whether the cross-model summary
    exists (key "models_summary"): taken after the first run, before the rerun completes the rest."""
    out = {run.name: run_complete(run) for run in sorted(results.iterdir()) if run.is_dir()}
    out["models_summary"] = (results / "tiny-all-models" / "models_summary.csv").is_file()
    return out


@pytest.fixture(scope="module")
def atlas_runs(tmp_path_factory):
    """The tiny atlas run once with the broken model, then again after its repair."""
    workdir = tmp_path_factory.mktemp("atlas")
    configfile = make_tiny_atlas(workdir, tiny_config(workdir, workdir / "unused"), labels=LABELS, broken=BROKEN,
                                 minilm=WHOLE_ATLAS)
    start = time.monotonic()
    first = snakemake(workdir, *DEFAULT_PROFILE, configfile=configfile, timeout=1500)
    first_wall = time.monotonic() - start
    out = {"workdir": workdir, "first": first.stdout + first.stderr, "first_code": first.returncode}
    out["failed_logs"] = logs_of_failed_jobs(out["first"])  # before the rerun writes them again
    out["after_first"] = state(workdir / "results")
    handler_log = workdir / "results" / "tiny-all-models" / "logs" / "atlas_onerror.log"
    out["handler"] = handler_log.read_text() if handler_log.is_file() else None
    page = workdir / "results" / "tiny-atlas" / "atlas.html"
    out["first_page"] = page.read_text() if page.is_file() else None  # the onerror handler's page
    data = page.with_name("atlas.json")
    out["first_atlas"] = json.loads(data.read_text()) if data.is_file() else {"models": []}
    make_tiny_atlas_model(workdir / "models", BROKEN)  # the repair: the same model, whole
    start = time.monotonic()
    rerun = snakemake(workdir, *DEFAULT_PROFILE, configfile=configfile, timeout=900)
    out.update(rerun=rerun.stdout + rerun.stderr, rerun_code=rerun.returncode)
    print(f"\ntiny atlas ({len(RUN_LABELS)} models, one broken), 2 cores: {first_wall:.0f} s, "
          f"the rerun after the repair {time.monotonic() - start:.0f} s")
    return out


@pytest.mark.slow  # three whole tiny runs and a rerun (make test-all, CI)
def test_a_failed_model_stops_only_its_own_jobs(atlas_runs):
    log = atlas_runs["first"]
    assert atlas_runs["first_code"] != 0, log[-3000:]
    errors = failed(log)
    assert errors, log[-3000:]
    for rule, job_log in errors:  # only the broken model's jobs, each saying why in one `error:` line
        assert f"/tiny-{BROKEN}/" in job_log, (rule, job_log)
        assert "error: " in atlas_runs["failed_logs"][job_log], job_log
        assert "corrupt or truncated safetensors" in atlas_runs["failed_logs"][job_log], job_log
    assert {rule for rule, _ in errors} >= {"extract_segments", "extract_words"}
    labels = RUN_LABELS
    after_first = atlas_runs["after_first"]
    assert {label for label in labels if after_first[f"tiny-{label}"]} == set(labels) - {BROKEN}
    assert not after_first["models_summary"]  # it needs every model


@pytest.mark.slow
def test_the_onerror_handler_renders_the_atlas(atlas_runs):
    handler = atlas_runs["handler"]
    assert handler is not None, "the onerror handler did not run (no tiny-all-models/logs/atlas_onerror.log)"
    command = handler.splitlines()[0]  # the handler writes its command line first
    out_dir = atlas_runs["workdir"] / "results" / "tiny-atlas"
    assert re.search(r" -m bertlook atlas \.snakemake/bertlook/config-[0-9a-f]{16}\.json --out ", command), command
    assert command.endswith(f" --out {out_dir}"), command
    assert "the atlas of the models that ran" in atlas_runs["first"]
    assert (out_dir / "atlas.html").is_file()
    records = {r["label"]: r for r in atlas_runs["first_atlas"]["models"]}  # atlas.json as the handler wrote it
    assert records[BROKEN]["status"] == "did not run", records[BROKEN]
    assert "corrupt or truncated safetensors" in records[BROKEN]["reason"]
    assert all(r["status"] == "ran" for label, r in records.items() if label != BROKEN)


@pytest.mark.slow
def test_the_rerun_runs_only_what_is_missing(atlas_runs):
    log = atlas_runs["rerun"]
    ran = jobs(log)
    assert ran, log[-3000:]
    others = [(rule, run) for rule, run in ran if run != f"tiny-{BROKEN}" and rule not in ACROSS_MODELS]
    assert not others, f"the rerun ran jobs of models that had finished: {others}"
    rules = {rule for rule, _ in ran}
    assert {"extract_segments", "extract_words", "manifest", "atlas", "models_summary"} <= rules
    assert "segments" not in rules and "treebank" not in rules  # the broken model's jobs that had finished
    assert atlas_runs["rerun_code"] == 0, log[-3000:]
    assert (atlas_runs["workdir"] / "results" / "tiny-atlas" / "atlas.html").is_file()
    assert run_complete(atlas_runs["workdir"] / "results" / f"tiny-{BROKEN}")


def test_the_tiny_atlas_lists_its_models(tmp_path):
    """make_tiny_atlas (two models here: fast): the config lists them and the MiniLM, the broken one's weights
    are truncated, and make_tiny_atlas_model repairs it."""
    import yaml

    base = tiny_config(tmp_path, tmp_path / "unused")
    configfile = make_tiny_atlas(tmp_path, base, labels=["distilbert", "llama"], broken="llama")
    config = yaml.safe_load(configfile.read_text())
    assert [m["label"] for m in config["models"]] == ["distilbert", "llama", "minilm"]
    assert config["norms"]["enabled"] is False and config["probes"]["seeds"] == [0]
    weights = tmp_path / "models" / "llama" / "model.safetensors"
    broken_size = weights.stat().st_size
    make_tiny_atlas_model(tmp_path / "models", "llama")
    assert weights.stat().st_size > broken_size == weights.stat().st_size // 2
    llama = yaml.safe_load((tmp_path / "models" / "llama" / "config.json").read_text())
    assert llama["model_type"] == "llama" and llama["num_key_value_heads"] < llama["num_attention_heads"]
    with pytest.raises(ValueError, match="not among"):
        make_tiny_atlas(tmp_path / "x", base, labels=["bert"], broken="llama")


@pytest.mark.e2e  # snakemake -n; the default with two models and with one in make test, the switch both ways in CI's
@pytest.mark.parametrize("n_models, enabled, planned", [  # make test-all (one dry run each, ~1.8 s)
    (2, None, True), (1, None, False), pytest.param(1, True, True, marks=pytest.mark.slow),
    pytest.param(2, False, False, marks=pytest.mark.slow)])
def test_the_atlas_rule_is_planned_with_several_models_or_when_asked(tmp_path, tiny_bert_dir, n_models, enabled,
                                                                      planned):
    import yaml

    config = tiny_config(tmp_path, tiny_bert_dir)
    config["models"] = [{"label": f"m{i}", "name_or_path": str(tiny_bert_dir), "revision": None}
                        for i in range(n_models)]
    if enabled is not None:
        config["atlas"] = {"enabled": enabled}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("rule atlas:" in proc.stdout) is planned
    if planned:  # after every model's run, the page beside the runs; CONFIG: the effective config, quoted
        block = proc.stdout[proc.stdout.index("rule atlas:"):]
        assert f"output: {tmp_path}/results/tiny-atlas/atlas.html" in block
        assert all(f"{tmp_path}/results/tiny-m{i}/resources.csv" in block.split("\n    output:")[0]
                   for i in range(n_models))
        assert re.search(r"-m bertlook atlas \.snakemake/bertlook/config-[0-9a-f]{16}\.json --out \S+tiny-atlas ",
                         block)
        written = next((tmp_path / ".snakemake" / "bertlook").glob("config-*.json"))
        assert yaml.safe_load(written.read_text())["models"][0]["label"] == "m0"


ATLAS_DRIVER = """<script>
window.addEventListener("load", function () {
  const out = {};
  const rows = function () { return Array.from(document.querySelectorAll("tr.model-row")).filter(
    function (tr) { return !tr.hidden; }).map(function (tr) { return tr.dataset.model; }); };
  try {
    out.initial = rows();
    document.querySelector('th[data-key="parameters"] button').click();
    out.by_params = rows();
    out.status = Object.fromEntries(Array.from(document.querySelectorAll("tr.model-row")).map(function (tr) {
      const cell = tr.querySelector("td.status"); return [tr.dataset.model, cell ? cell.textContent : ""]; }));
    out.families = Array.from(document.querySelectorAll("#families input")).map(function (i) { return i.value; });
    document.querySelector('#families input[value="FAMILY"]').click();
    out.after_filter = rows();
    out.lines = document.querySelectorAll("#profile polyline.profile").length;
  } catch (e) { out.error = String(e); }
  const pre = document.createElement("pre"); pre.id = "test-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.slow
@pytest.mark.integration
def test_the_tiny_atlas_page_in_a_headless_browser(atlas_runs, tmp_path):
    """The page the onerror handler wrote after the failed run, in headless Chromium: a row per model, the broken
    one saying why, sorting and a family filter work, no script error."""
    from test_explorer import _run_page_in_chromium

    page = atlas_runs["first_page"]
    assert page is not None, "no atlas.html after the failed run"
    family = {r["label"]: r["family"] for r in atlas_runs["first_atlas"]["models"]}
    driver = ATLAS_DRIVER.replace("FAMILY", json.dumps(family["gpt2"])[1:-1])
    out = _run_page_in_chromium(tmp_path, page.replace("</body>", driver + "</body>"))
    labels = RUN_LABELS
    assert sorted(out["initial"]) == sorted(labels)
    assert out["by_params"][-1] == BROKEN  # a model that did not run sorts last
    assert out["status"][BROKEN].startswith("did not run") and "safetensors" in out["status"][BROKEN]
    assert all(not out["status"][m].startswith("did not run") for m in labels if m != BROKEN)
    assert sorted(out["families"]) == sorted(set(family.values())) and len(out["families"]) >= len(LABELS)
    assert sorted(out["after_filter"]) == sorted(m for m in labels if family[m] != family["gpt2"])
    shown_ran = [m for m in out["after_filter"] if m != BROKEN]
    assert 0 < out["lines"] <= len(shown_ran)  # a depth profile per shown model that ran (and has one)
