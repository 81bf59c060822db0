"""Helpers of the tests that run the real `snakemake`: the tiny configuration and the invocation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
GENSIM_DUMP = "package:gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
RUN = "tiny-rand"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


TINY_CONFIG = ROOT / ".test" / "config.yaml"


def tiny_config(workdir: Path, model_dir: Path) -> dict:
    """The tiny configuration (.test/config.yaml: 3 articles, 12 segments, 20 + 15 silver sentences)
    with a tiny random BERT (``model_dir``) as its one model and every path under ``workdir``.

    .test/config.yaml is the one tiny configuration: a user runs it as it is (all-MiniLM-L6-v2, paths
    relative to the repository root); tests only replace the model and the paths here."""
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config.update(
        run_name="tiny",
        results_dir=str(workdir / "results"),
        resources_dir=str(workdir / "resources"),
        models=[{"label": "rand", "name_or_path": str(model_dir), "revision": None}],
    )
    # relative to the repository root in the file; the tests run snakemake in ``workdir``
    config["coref"]["conll"] = [str(ROOT / path) for path in config["coref"]["conll"]]
    return config


def without_contributions(config: dict) -> dict:
    """``config`` with the ``contributions`` section switched off (ALTI, value zeroing, the faithfulness table:
    four jobs per model), for a workflow test that tests something else (sharding, languages, a killed run,
    the shell): those steps run in the main tiny run (tests/test_workflow_e2e.py), the encoder + decoder fan-out
    (tests/test_workflow_decoder.py) and the paper configuration, and their code in the unit tests."""
    config["contributions"] = {**config.get("contributions", {}), "enabled": False}
    return config


def fewer_analyses(config: dict, *, keep: tuple[str, ...] = ()) -> dict:
    """``config`` with the analyses beyond the paper switched off and one probe seed, as in the tiny atlas
    (:func:`bertlook.testing.tiny_atlas.fewest_analyses`: norm maps, rollout, tree decoding, the head report, the
    explorer, head detectors, contributions, the coreference fixture), but the sections named in ``keep``: for a
    workflow test whose subject is not those steps (the workflow as a module, the languages DAG, a killed run, the
    SLURM executor); every step runs in the main tiny run (tests/test_workflow_e2e.py) and the encoder + decoder
    fan-out."""
    from bertlook.testing.tiny_atlas import fewest_analyses

    return fewest_analyses(config, keep=keep)


def snakemake(workdir: Path, *args: str, configfile: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """The real snakemake on ``workdir/config.yaml`` (or ``configfile``), 2 cores."""
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(configfile or workdir / "config.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)


def job_counts(out: str) -> dict[str, int]:
    """Jobs per rule in the first "Job stats:" table of Snakemake's output ``out`` (the total left out)."""
    table = out[out.index("Job stats:"):].split("\n\n", 1)[0]
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.M)}
    counts.pop("total", None)
    return counts
