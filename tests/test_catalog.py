"""Catalog metadata (issue 28): one version everywhere (bertlook.__version__, pyproject, CITATION.cff, the
changelog's newest release, a run's manifest), a citation of the paper, the workflow catalog's description."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

import bertlook

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_everywhere():
    version = bertlook.__version__
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == version
    assert str(yaml.safe_load((ROOT / "CITATION.cff").read_text())["version"]) == version
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0][0] == version, releases
    from bertlook.reporting.manifest import package_versions

    assert package_versions()["bertlook"] == version


def test_citation_names_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT" and cff["authors"]
    paper = cff["preferred-citation"]
    assert paper["title"] == "What Does BERT Look At? An Analysis of BERT's Attention" and paper["year"] == 2019
    assert [a["family-names"] for a in paper["authors"]] == ["Clark", "Khandelwal", "Levy", "Manning"]
    assert paper["doi"] == "10.18653/v1/W19-4828"


def test_workflow_catalog_description():
    catalog = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())
    usage = catalog["usage"]
    assert usage["software-stack-deployment"]["conda"] is True and usage["report"] is True
    flags = usage["mandatory-flags"]["flags"]
    config = flags.split("--configfile", 1)[1].split()[0]
    assert (ROOT / config).is_file(), config  # the flag names a configuration that exists
    assert (ROOT / "Snakefile").is_file() and (ROOT / "config" / "README.md").is_file()  # what the catalog reads


def test_catalog_layout_without_copies():
    """The catalog's standardized usage reads workflow/Snakefile and config/config.yaml; the top-level
    Snakefile and config.yaml stay the entry points users know. Each is one file under two names."""
    assert (ROOT / "workflow" / "Snakefile").is_file() and not (ROOT / "workflow" / "Snakefile").is_symlink()
    assert (ROOT / "Snakefile").resolve() == (ROOT / "workflow" / "Snakefile").resolve()
    assert (ROOT / "config.yaml").is_file() and not (ROOT / "config.yaml").is_symlink()
    assert (ROOT / "config" / "config.yaml").resolve() == (ROOT / "config.yaml").resolve()
    assert (ROOT / "config" / "config.yaml").read_text() == (ROOT / "config.yaml").read_text()


@pytest.mark.e2e  # the real snakemake on the tiny configuration
def test_rule_graph_from_either_snakefile():
    """`snakemake --rulegraph` on .test/config.yaml, as the catalog renders it: from workflow/Snakefile and
    from the one Snakemake finds by itself (the top-level Snakefile, a link to it), the same graph of the
    steps' rules (the rule templates, which make no job, are not in it)."""
    import subprocess

    from workflow_helpers import ENV, SNAKEMAKE

    graphs = []
    for snakefile in (["--snakefile", "workflow/Snakefile"], []):
        proc = subprocess.run([SNAKEMAKE, *snakefile, "--rulegraph", "--configfile", ".test/config.yaml"], cwd=ROOT,
                              capture_output=True, text=True, env=ENV, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        graph = proc.stdout[proc.stdout.index("digraph"):]
        names = dict(re.findall(r'^\s*(\d+)\[label = "(\w+)"', graph, flags=re.M))
        edges = {(names[a], names[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", graph, flags=re.M)}
        graphs.append((set(names.values()), edges))
    assert graphs[0] == graphs[1]  # the same rules, the same edges (in any order)
    labels, edges = graphs[0]
    assert ("extract_segments", "surface_stats") in edges and ("manifest", "compare") in edges
    assert {"all", "segments", "extract_segments", "treebank", "extract_words", "heads", "probes", "coref",
            "gradients", "figures", "manifest", "compare", "report_pages"} <= labels
    assert not {label for label in labels if label.startswith("_")}


def test_rule_files_are_snakefmt_clean():
    """`snakefmt --check` (make lint) on the Snakefile and every rule file (line length 120, pyproject.toml)."""
    import shutil
    import subprocess
    import sys

    snakefmt = shutil.which("snakefmt", path=str(Path(sys.executable).parent)) or shutil.which("snakefmt")
    assert snakefmt, "snakefmt is not installed (it is in the test extras: make install)"
    proc = subprocess.run([snakefmt, "--check", "Snakefile", "workflow/"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
