"""bertlook used as a Snakemake module from another directory, as a user deploying it with snakedeploy would:
their own Snakefile (`module bertlook:` + `use rule * from bertlook`) and config, in a folder that holds no copy
of the workflow. The dry run plans every step (make test); the real run makes the tiny run's outputs (slow)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from workflow_helpers import ENV, ROOT, SNAKEMAKE, fewer_analyses, tiny_config

pytestmark = pytest.mark.e2e

USER_SNAKEFILE = """\
configfile: "config/config.yaml"


module bertlook:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from bertlook as bertlook_*
"""


def _deployment(tmp_path, tiny_bert_dir):
    (tmp_path / "config").mkdir()
    # the analyses beyond the paper off (but the explorer, the head report it needs and coreference): the module is
    # what is tested here, not the steps
    config = fewer_analyses(tiny_config(tmp_path, tiny_bert_dir), keep=("explorer", "head_report", "coref"))
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    # the workflow's own file, where the catalog and snakedeploy look (the top-level Snakefile links to it)
    (tmp_path / "Snakefile").write_text(USER_SNAKEFILE.format(snakefile=ROOT / "workflow" / "Snakefile"))
    return tmp_path


def _snakemake(workdir, *args, timeout=600):
    return subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=workdir, capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def test_the_workflow_as_a_module_plans_every_step(tmp_path, tiny_bert_dir):
    workdir = _deployment(tmp_path, tiny_bert_dir)
    proc = _snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for step in ("segments", "extract_segments", "heads", "probes", "coref_extract", "explorer", "report_pages"):
        assert f"rule bertlook_{step}:" in proc.stdout, step
    assert not (workdir / "workflow").exists()  # nothing of the workflow copied into the user's folder


@pytest.mark.slow  # a whole tiny run (~1.5 min): make test-all, CI
def test_the_workflow_as_a_module_runs(tmp_path, tiny_bert_dir):
    workdir = _deployment(tmp_path, tiny_bert_dir)
    proc = _snakemake(workdir, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    run = workdir / "results" / "tiny-rand"
    for path in ("tables/table1.csv", "tables/table3.csv", "explorer.html", "manifest.json", "comparison.md"):
        assert (run / path).is_file(), path
