"""The paper configuration (config.yaml, what `make reproduce` runs) end to end against local servers:
its download path as a user on a login node and then a cluster job take it, with nothing from the
internet.

* the model: a stand-in random BERT with the paper model's 12 layers x 12 heads (tiny hidden size, so
  the paper's example heads 1-1, 3-1, 8-7, 11-6 exist) on the local hub (tests/local_hub.py) at a
  pinned commit, fetched by the real ``huggingface_hub`` client;
* the Wikipedia dump (gensim's packaged excerpt) with a Wikimedia-style sha1sums list, the UD train and
  dev files (the silver treebank fixtures, in UD CoNLL-U) and a GloVe zip holding ``glove.6B.100d.txt``
  (100-d vectors for the treebank's words), served by tests/local_http.py at the URLs' shapes.

Every other key is the paper's, except the sizes, which are the tiny configuration's
(.test/config.yaml: segments, articles, bootstrap, probe seeds, gradients ...). `bertlook fetch` runs
with ``HF_ENDPOINT`` and a planted ``HF_TOKEN``; then snakemake runs the whole DAG with
``HF_HUB_OFFLINE=1`` as `make reproduce` does (``bertlook preflight``, then snakemake; the servers still
up: they must see no request), and the report is written. The
token must be in no file of the run.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from local_http import FileHandler, local_http_server
from local_hub import HubRepo, local_hub
from workflow_helpers import ENV, ROOT, SNAKEMAKE, TINY_CONFIG

from bertlook.pipeline.config import resolve_data_path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIXTURES = Path(__file__).parent / "fixtures"
DUMP_NAME = "enwiki-20241101-pages-articles1.xml-p1p41242.bz2"
TOKEN = "hf_PaperRunPlantedTokenQx81Zr4Vw"
STAND_IN = "org/bert-base-uncased-stand-in"
# the tiny configuration's sizes; every other key stays the paper's
SIZE_KEYS = [("segments", "n_segments"), ("wikipedia", "max_articles"), ("heads", "bootstrap"),
             ("heads", "min_count"), ("clustering", "mds_n_init"), ("clustering", "mds_max_iter"),
             ("gradients", "max_examples"), ("gradients", "batch_size"), ("extraction", "batch_size"),
             ("head_detectors", "n_sequences"), ("head_detectors", "length"), ("probes", "seeds"),
             *(("contributions", key) for key in ("segments", "value_zeroing_segments", "sentences",
                                                  "faithfulness_segments", "ablated_tokens",
                                                  "faithfulness_value_zeroing"))]


def _glove_zip(conllu: list[bytes]) -> bytes:
    """glove.6B.100d.txt: a deterministic 100-d vector for every (lower-cased) word of the treebank."""
    words = sorted({line.split(b"\t")[1].decode().lower() for data in conllu for line in data.splitlines()
                    if line and not line.startswith(b"#") and b"\t" in line})
    rng = np.random.default_rng(0)
    lines = [w + " " + " ".join(f"{x:.4f}" for x in rng.normal(size=100)) for w in words if " " not in w]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("glove.6B.100d.txt", "\n".join(lines) + "\n")
    return buf.getvalue()


def _serve_data(root: Path) -> dict[str, bytes]:
    dump = resolve_data_path(
        "package:gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    ).read_bytes()
    (root / "enwiki" / "20241101").mkdir(parents=True)
    (root / "enwiki" / "20241101" / DUMP_NAME).write_bytes(dump)
    (root / "enwiki" / "20241101" / "enwiki-20241101-sha1sums.txt").write_text(
        f"{hashlib.sha1(dump).hexdigest()}  {DUMP_NAME}\n")
    train, dev = (FIXTURES / "silver_train.conllu").read_bytes(), (FIXTURES / "silver_dev.conllu").read_bytes()
    ud = root / "ud" / "UD_English-EWT" / "r2.14"
    ud.mkdir(parents=True)
    (ud / "en_ewt-ud-train.conllu").write_bytes(train)
    (ud / "en_ewt-ud-dev.conllu").write_bytes(dev)
    (root / "glove").mkdir()
    (root / "glove" / "glove.6B.zip").write_bytes(_glove_zip([train, dev]))
    return {"dump": dump}


def _paper_config(workdir: Path, data: str, sha: str) -> dict:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    tiny = yaml.safe_load(TINY_CONFIG.read_text())
    for section, key in SIZE_KEYS:
        config.setdefault(section, {})[key] = tiny[section][key]  # config.yaml may leave a section to its defaults
    config.update(results_dir=str(workdir / "results"), resources_dir=str(workdir / "resources"))
    assert [m["label"] for m in config["models"]] == ["bert-base-uncased"]
    config["models"][0].update(name_or_path=STAND_IN, revision=sha)
    config["wikipedia"].update(url=f"{data}/enwiki/20241101/{DUMP_NAME}",
                               sha1sums_url=f"{data}/enwiki/20241101/enwiki-20241101-sha1sums.txt")
    config["treebank"]["ud"]["base_url"] = data + "/ud/{repo}/{release}/{file}"
    config["glove"]["url"] = f"{data}/glove/glove.6B.zip"
    return config


def test_paper_configuration_end_to_end_against_local_servers(tmp_path_factory):
    from bertlook.testing.tiny_models import make_tiny_bert

    work = tmp_path_factory.mktemp("paper")
    model = make_tiny_bert(tmp_path_factory.mktemp("stand_in"), num_layers=12, num_heads=12, hidden_size=48,
                           intermediate_size=64, seed=0)
    repo = HubRepo.from_dir(STAND_IN, model)
    home = work / "hf-home"
    with local_hub([repo]) as hub, local_http_server(tmp_path_factory.mktemp("served"), FileHandler) as files:
        _serve_data(files.root)
        config = _paper_config(work, files.base, repo.sha)
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in ENV.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE")}
        env.update(HF_ENDPOINT=hub.base, HF_HOME=str(home), HF_TOKEN=TOKEN,
                   PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]))
        fetch = subprocess.run([sys.executable, "-m", "bertlook", "fetch", "config.yaml", "--timeout", "10"],
                               cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert fetch.returncode == 0, fetch.stdout[-3000:] + fetch.stderr[-3000:]
        hub_requests, data_hits = len(hub.requests), dict(files.hits)
        assert data_hits and "authorization" not in files.headers_seen  # the token went to the hub only
        # the cluster job's side: offline, the fetched cache and resources only
        env = dict(env, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        env.pop("HF_ENDPOINT")
        # what `make reproduce` runs: bertlook preflight, then snakemake
        pre = subprocess.run([sys.executable, "-m", "bertlook", "preflight", "config.yaml"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=600)
        assert pre.returncode == 0, pre.stdout[-3000:] + pre.stderr[-3000:]
        cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work),
               "--configfile", str(work / "config.yaml"), "--cores", "2"]
        dry = subprocess.run(cmd + ["-n"], env=env, capture_output=True, text=True, timeout=600)
        assert dry.returncode == 0 and "rule download" not in dry.stdout, dry.stdout[-3000:] + dry.stderr[-3000:]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        report = work / "results" / "paper-bert-base-uncased" / "report.html"
        rep = subprocess.run(cmd + ["--report", str(report)], env=env, capture_output=True, text=True, timeout=600)
        assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
        assert len(hub.requests) == hub_requests and files.hits == data_hits  # the run asked no server
    out = work / "results" / "paper-bert-base-uncased"
    manifest = json.loads((out / "manifest.json").read_text())
    assert report.stat().st_size > 100_000 and (out / "figures" / "fig1_example_heads.png").is_file()
    stats = (out / "tables" / "attention_stats.csv").read_text().splitlines()
    assert len(stats) == 1 + 144
    leaks = [str(p) for p in work.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == [] and TOKEN not in fetch.stdout + fetch.stderr + run.stdout + run.stderr
    assert repo.sha in json.dumps(manifest)  # the pinned commit is what the run records
