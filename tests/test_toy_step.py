"""A new analysis in five files (docs/ADDING_A_STEP.md): the toy steps of tests/fixtures/toy_step (mean
surface statistics per layer; and a model-running one, the mean hidden-state norm per layer, whose
declaration gives its cost) are added to a copy of the project, and nothing else is changed. The copy's
CLI registers their commands, their declarations are gathered, the real `snakemake` puts their rules in
the DAG (the model step with the resources its declared cost gives), `all` asks for their outputs, the
report gets their pages, the manifest their summaries, the regression gate the golden group, and the
documentation checks (config keys, lint) still pass."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workflow_helpers import ENV, ROOT, SNAKEMAKE, tiny_config

# the real `snakemake` (DAG, lint) on a copy of the project: make test and CI, not make test-unit
pytestmark = pytest.mark.e2e

FIXTURE = ROOT / "tests" / "fixtures" / "toy_step"
#: what the step adds or changes, relative to the project root
FIVE = ("src/bertlook/analyses/layer_profile.py", "src/bertlook/cli/layer_profile.py",
        "workflow/rules/layer_profile.smk", "src/bertlook/pipeline/config.schema.yaml", "docs/definitions.md")
#: what the model-running toy step adds or changes (the schema and the definitions are the same two files)
MODEL_FIVE = ("src/bertlook/analyses/hidden_norms.py", "src/bertlook/cli/hidden_norms.py",
              "workflow/rules/hidden_norms.smk", FIVE[3], FIVE[4])
COPIED = ("Snakefile", "README.md", "src", "workflow", "envs", "config", "docs", ".test")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


def add_toy_step(root: Path, files=FIVE, name: str = "layer_profile", suffix: str = "") -> None:
    """The five ``files`` of a toy step (``name``: its module, CLI module and rule file; ``suffix``: of its
    schema and definition fixtures), written into the project at ``root``."""
    shutil.copy(FIXTURE / f"{name}.py", root / files[0])
    shutil.copy(FIXTURE / f"cli_{name}.py", root / files[1])
    shutil.copy(FIXTURE / f"{name}.smk", root / files[2])
    schema_path = root / files[3]
    schema = yaml.safe_load(schema_path.read_text())
    schema["properties"].update(yaml.safe_load((FIXTURE / f"schema{suffix}.yaml").read_text()))
    schema_path.write_text(yaml.safe_dump(schema, sort_keys=False))
    definitions = root / files[4]
    definitions.write_text(definitions.read_text() + "\n" + (FIXTURE / f"definition{suffix}.md").read_text())


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("toy") / "project"
    root.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, symlinks=True, ignore=SKIP)
        else:
            shutil.copy(src, root / name)
    add_toy_step(root)
    add_toy_step(root, MODEL_FIVE, "hidden_norms", "_hidden_norms")
    return root


def _changed(root: Path) -> list[str]:
    """The files of ``root`` that are new or differ from the project's (the copied folders)."""
    out = []
    for name in COPIED:
        for path in sorted((root / name).rglob("*") if (root / name).is_dir() else [root / name]):
            if path.is_file() and "__pycache__" not in path.parts and not path.is_symlink():
                rel = path.relative_to(root)
                if not (ROOT / rel).is_file() or not filecmp.cmp(path, ROOT / rel, shallow=False):
                    out.append(str(rel))
    return sorted(out)


def _env(root: Path) -> dict[str, str]:
    return dict(ENV, PYTHONPATH=str(root / "src"), BERTLOOK_SRC=str(root / "src"))


def _python(root: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(root),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_toy_steps_touch_five_files_each(project):
    assert _changed(project) == sorted(set(FIVE) | set(MODEL_FIVE))  # no sixth file for either step


def test_the_copy_finds_its_command_and_declaration(project):
    out = json.loads(_python(project, (
        "import json; from bertlook import cli; from bertlook.pipeline import steps; "
        "s = cli.declared_steps(); "
        "print(json.dumps({'commands': list(cli.COMMANDS), 'steps': [x.name for x in s], "
        "'golden': [t.group for t in steps.golden_tables(s)], 'help': cli.build_parser().format_help()}))")))
    assert out["commands"][-2:] == ["hidden-norms", "layer-profile"]  # modules outside cli.ORDER come last
    assert out["steps"][-2:] == ["hidden_norms", "layer_profile"]  # beyond the paper: after the paper's steps
    assert "layer_profile" in out["golden"]
    assert "layer-profile" in out["help"] and "mean surface statistics per layer" in out["help"]


def _dry_run(project: Path, workdir: Path, *args: str) -> str:
    proc = subprocess.run([SNAKEMAKE, "--snakefile", str(project / "Snakefile"), "--directory", str(workdir),
                           "--configfile", str(workdir / "config.yaml"), "--cores", "2", *args],
                          capture_output=True, text=True, env=_env(project), timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def _write_config(workdir: Path, model_dir: Path, enabled: bool) -> None:
    config = tiny_config(workdir, model_dir)
    config["layer_profile"] = {"enabled": enabled}
    config["hidden_norms"] = {"enabled": enabled, "max_examples": 4}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def test_the_dag_and_the_report_have_the_toy_step(project, tmp_path, tiny_bert_dir):
    _write_config(tmp_path, tiny_bert_dir, enabled=True)
    out = _dry_run(project, tmp_path, "-n", "-p", "--forceall")
    run_dir = tmp_path / "results" / "tiny-rand"
    assert f"rule layer_profile:" in out
    assert "bertlook layer-profile --stats" in out and str(run_dir / "tables" / "attention_stats.csv") in out
    # `all` asks for its outputs, the report_pages job makes its page from its markdown table
    report_job = out[out.index("rule report_pages:"):].split("\n\n", 1)[0]
    assert str(run_dir / "report" / "layer_profile.html") in report_job
    assert str(run_dir / "tables" / "layer_profile.md") in report_job
    # the manifest lists its summary among the steps beyond the paper
    manifest_job = out[out.index("rule manifest:"):].split("\n\n", 1)[0]
    assert str(run_dir / "tables" / "layer_profile.summary.json") in manifest_job

    # the model-running step: in the DAG, in the report and the manifest, and planned with the resources its
    # declared cost gives (a forward pass of the run's model over its segments: above the interpreter alone)
    job = out[out.index("rule hidden_norms:"):].split("\n\n", 1)[0]
    assert "bertlook hidden-norms --model" in job and "--max-examples 4" in job
    assert str(run_dir / "report" / "hidden_norms.html") in report_job
    assert str(run_dir / "tables" / "hidden_norms.summary.json") in manifest_job
    planned = dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", job).group(1).split(", "))
    sized = json.loads(_python(project, (
        "import json, yaml; from bertlook import cli; from bertlook.pipeline import costs, sizing; "
        "from bertlook.pipeline.config import validate_config; "
        f"config = validate_config(yaml.safe_load(open({str(tmp_path / 'config.yaml')!r}))); "
        "cost = cli.declared_costs()['hidden_norms']; "
        "job = sizing.Job('hidden_norms', config, [], {'run': 'tiny-rand'}, sizing.model_dims); "
        "print(json.dumps({**sizing.rule_resources('hidden_norms', config, [], wildcards={'run': 'tiny-rand'}, "
        "costs=cli.declared_costs()), 'rss': cost.estimate(job, cost)[0], 'base': costs.BASE_TORCH_MB}))")))
    assert (int(planned["mem_mb"]), int(planned["runtime"])) == (sized["mem_mb"], sized["runtime"])
    assert sized["rss"] > sized["base"]

    _write_config(tmp_path, tiny_bert_dir, enabled=False)
    off = _dry_run(project, tmp_path, "-n", "--forceall")
    assert "rule layer_profile:" not in off and "layer_profile.html" not in off
    assert "rule hidden_norms:" not in off and "hidden_norms.html" not in off


def test_the_copy_is_lint_clean(project, tmp_path, tiny_bert_dir):
    _write_config(tmp_path, tiny_bert_dir, enabled=True)
    proc = subprocess.run([SNAKEMAKE, "--snakefile", str(project / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "config.yaml"), "--lint"],
                          capture_output=True, text=True, env=_env(project), timeout=600)
    lint = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "layer_profile" not in lint and "hidden_norms" not in lint, proc.stdout[-3000:]


def test_the_command_runs_and_the_golden_group_reads_its_table(project, tmp_path):
    stats = tmp_path / "run" / "tables" / "attention_stats.csv"
    stats.parent.mkdir(parents=True)
    stats.write_text("layer,head,cls,sep,entropy,prev\n1,1,0.5,0.1,2.0,0\n1,2,0.3,0.3,1.0,0\n2,1,0.1,0.7,3.0,0\n")
    tables = stats.parent
    proc = subprocess.run([sys.executable, "-m", "bertlook", "layer-profile", "--stats", str(stats),
                           "--out", str(tables / "layer_profile.csv"),
                           "--out-markdown", str(tables / "layer_profile.md"),
                           "--summary", str(tables / "layer_profile.summary.json")],
                          capture_output=True, text=True, env=_env(project), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tables / "layer_profile.csv").read_text().splitlines() == [
        "layer,cls,sep,entropy", "1,0.4,0.2,1.5", "2,0.1,0.7,3"]
    group = json.loads(_python(project, (
        "import json; from bertlook import cli; from bertlook.pipeline import steps; "
        "from pathlib import Path; from bertlook.reporting.golden import table_group; "
        "(t,) = [t for t in steps.golden_tables(cli.declared_steps()) if t.group == 'layer_profile']; "
        f"print(json.dumps(table_group(t)(Path({str(tmp_path / 'run')!r}))))")))
    assert group["values"]["status"] == "ok"
    assert {k: v for k, v in group["values"].items() if k.startswith("2/")} == {
        "2/cls": 0.1, "2/sep": 0.7, "2/entropy": 3.0}


def test_the_documentation_checks_pass_on_the_copy(project):
    """The layout, naming, config-key and import-layer checks accept the copy: the new section documents
    itself in the schema (`description`), the step follows the naming rule (no DESIGN row), its module
    sits in analyses/ (no README or DESIGN line): none of those files is a sixth one."""
    tests = ("test_config_docs.py", "test_layout.py", "test_step_names.py", "test_import_layers.py")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *(str(ROOT / "tests" / name) for name in tests)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(_env(project), BERTLOOK_DOCS_ROOT=str(project)), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.slow  # runs the fixture's command on the tiny BERT (CI's make test-all); the DAG checks above need no run
def test_the_model_step_runs_the_model(project, tmp_path, tiny_bert_dir):
    segments = tmp_path / "segments.jsonl"
    segments.write_text("".join(json.dumps({"id": i, "doc": "d", "text_a": "a b", "text_b": "c", "truncated": False,
                                            "tokens": ["[CLS]", "a", "b", "[SEP]", "c", "[SEP]"][:6 - i],
                                            "segment_ids": [0] * (6 - i)}) + "\n" for i in range(3)))
    tables = tmp_path / "tables"
    proc = subprocess.run([sys.executable, "-m", "bertlook", "hidden-norms", "--model", str(tiny_bert_dir),
                           "--segments", str(segments), "--max-examples", "2", "--device", "cpu",
                           "--out", str(tables / "hidden_norms.csv"), "--out-markdown", str(tables / "hidden_norms.md"),
                           "--summary", str(tables / "hidden_norms.summary.json")],
                          capture_output=True, text=True, env=_env(project), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tables / "hidden_norms.summary.json").read_text())
    assert (summary["n_examples"], summary["n_tokens"], summary["n_layers"]) == (2, 11, 2)
    rows = (tables / "hidden_norms.csv").read_text().splitlines()
    assert rows[0] == "layer,mean_norm" and len(rows) == 4 and all(float(r.split(",")[1]) > 0 for r in rows[1:])
