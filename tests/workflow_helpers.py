"""Helpers of the tests that run the real `snakemake`: the tiny configuration and the invocation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
GENSIM_DUMP = "package:gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
RUN = "tiny-rand"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def tiny_config(workdir: Path, model_dir: Path) -> dict:
    """The offline configuration shrunk to seconds: a tiny random BERT, 3 articles, 12 segments."""
    offline = yaml.safe_load((ROOT / "config" / "offline.yaml").read_text())
    offline.update(
        run_name="tiny",
        results_dir=str(workdir / "results"),
        resources_dir=str(workdir / "resources"),
        models=[{"label": "rand", "name_or_path": str(model_dir), "revision": None}],
    )
    offline["wikipedia"].update(path=GENSIM_DUMP, max_articles=3)
    offline["segments"].update(n_segments=12, max_seq_len=128)
    offline["extraction"].update(batch_size=4, device="cpu")
    offline["clustering"].update(mds_n_init=1, mds_max_iter=50)
    offline["treebank"]["silver"].update(train_sentences=20, dev_sentences=15, max_words=18)
    offline["heads"].update(min_count=3, bootstrap=50)
    offline["probes"].update(seeds=[0, 1], mst=True)
    offline["coref"]["conll"] = [str(ROOT / "tests" / "fixtures" / "tiny_coref.gold_conll")]
    offline["gradients"].update(max_examples=4, batch_size=2)
    return offline


def snakemake(workdir: Path, *args: str, configfile: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """The real snakemake on ``workdir/config.yaml`` (or ``configfile``), 2 cores."""
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(configfile or workdir / "config.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
