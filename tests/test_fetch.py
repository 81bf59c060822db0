"""`bertlook fetch`: every input of a configuration fetched where the workflow reads it.

Downloads run against a local HTTP server on 127.0.0.1 (tests/local_http.py) serving a Wikipedia dump
(gensim's packaged excerpt), a Wikimedia-style sha1sums list, a GloVe zip and two UD files. Hub models
are fetched from a local hub server by the real ``huggingface_hub`` client in tests/test_hub_fetch.py
(pinned revision, file patterns, gated models and the token, disk check, resume).
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml
from local_http import FileHandler, local_http_server
from workflow_helpers import RUN, snakemake, tiny_config

from bertlook import cli
from bertlook.attention import model_fetch
from bertlook.data import fetch
from bertlook.pipeline.config import resolve_data_path, validate_config
from bertlook.data.download import present_as_recorded
from bertlook.errors import BertlookError
from bertlook.pipeline.preflight import glove_download_target, ud_download_dir, wikipedia_target
from bertlook.data.gold_treebank import prepare_ud

FIXTURES = Path(__file__).parent / "fixtures"
DUMP_NAME = "enwiki-20990101-pages-articles1.xml-p1p30302.bz2"
GLOVE_TEXT = "the 0.1 0.2 0.3\ncat 0.4 0.5 0.6\n"
FAST = dict(retries=2, timeout=5.0, backoff=0.01, fetch_model=model_fetch.fetch_model)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture()
def served(tmp_path):
    """The local server and the bytes it serves: dump, sha1sums.txt, glove.zip, UD train/dev."""
    root = tmp_path / "served"
    dump = resolve_data_path(
        "package:gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    ).read_bytes()
    (root / "wiki").mkdir(parents=True)
    (root / "wiki" / DUMP_NAME).write_bytes(dump)
    (root / "wiki" / "sha1sums.txt").write_text(
        f"{'a' * 40}  enwiki-20990101-pages-articles.xml.bz2\n{hashlib.sha1(dump).hexdigest()}  {DUMP_NAME}\n")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("glove.6B.50d.txt", GLOVE_TEXT)
    glove = buf.getvalue()
    (root / "glove").mkdir()
    (root / "glove" / "glove.6B.zip").write_bytes(glove)
    ud = root / "ud" / "UD_Tiny" / "r9.9"
    ud.mkdir(parents=True)
    conllu = (FIXTURES / "tiny.conllu").read_bytes()
    (ud / "tiny-ud-train.conllu").write_bytes(conllu)
    (ud / "tiny-ud-dev.conllu").write_bytes(conllu)
    with local_http_server(root, FileHandler) as srv:
        srv.data = {"dump": dump, "glove": glove, "conllu": conllu}
        yield srv


def _net_config(workdir: Path, model_dir: Path, base: str, *, checksums: bool = True, data=None) -> dict:
    """The tiny test configuration with every input downloaded from ``base``."""
    config = tiny_config(workdir, model_dir)
    config["wikipedia"].update(path=None, url=f"{base}/wiki/{DUMP_NAME}",
                               sha1sums_url=f"{base}/wiki/sha1sums.txt" if checksums else None,
                               sha256=_sha256(data["dump"]) if checksums else None)
    config["glove"].update(path=None, url=f"{base}/glove/glove.6B.zip", member="glove.6B.50d.txt",
                           sha256=_sha256(data["glove"]) if checksums else None)
    config["treebank"]["source"] = "ud"
    config["treebank"]["ud"] = {
        "repo": "UD_Tiny", "release": "r9.9", "train_file": "tiny-ud-train.conllu",
        "dev_file": "tiny-ud-dev.conllu", "base_url": base + "/ud/{repo}/{release}/{file}",
        "train_sha256": _sha256(data["conllu"]) if checksums else None,
        "dev_sha256": _sha256(data["conllu"]) if checksums else None,
    }
    return validate_config(config)


def _files(config: dict) -> list[Path]:
    ud = ud_download_dir(config)
    return [wikipedia_target(config), glove_download_target(config),
            ud / "tiny-ud-train.conllu", ud / "tiny-ud-dev.conllu"]


def test_fetch_downloads_every_input_where_the_workflow_reads_it(served, tmp_path, tiny_bert_dir):
    config = _net_config(tmp_path, tiny_bert_dir, served.base, data=served.data)
    lines: list[str] = []
    out = fetch.fetch_config(config, echo=lines.append, **FAST)
    assert out["ok"] and out["errors"] == []
    dump, glove, train, dev = _files(config)
    assert dump == tmp_path / "resources" / "wikipedia" / DUMP_NAME
    assert dump.read_bytes() == served.data["dump"] and glove.read_bytes() == served.data["glove"]
    assert train.read_bytes() == dev.read_bytes() == served.data["conllu"]
    for path, data in ((dump, "dump"), (glove, "glove"), (train, "conllu"), (dev, "conllu")):
        # the download rules' summary, same keys and values as `bertlook download --summary`
        summary = json.loads(path.with_name(path.name + ".download.json").read_text())
        assert summary == {"url": summary["url"], "path": str(path), "sha256": _sha256(served.data[data]),
                           "sha1": hashlib.sha1(served.data[data]).hexdigest(), "bytes": len(served.data[data])}
        assert any(_sha256(served.data[data]) in line and str(path) in line for line in lines), path
    recorded = json.loads((tmp_path / "resources" / "fetch.json").read_text())
    by_kind = {}
    for item in recorded["items"]:
        by_kind.setdefault(item["kind"], []).append(item)
    assert [i["status"] for i in by_kind["wikipedia"]] == ["downloaded"]
    assert by_kind["wikipedia"][0]["sha1_verified"] and by_kind["wikipedia"][0]["sha256_verified"]
    assert [i["status"] for i in by_kind["ud"]] == ["downloaded", "downloaded"]
    assert by_kind["glove"][0]["sha256"] == _sha256(served.data["glove"])
    assert by_kind["model"][0]["status"] == "checked" and by_kind["model"][0]["source"] == "local"
    assert len(by_kind["model"][0]["sha256"]) == 64
    assert served.hits == {f"/wiki/sha1sums.txt": 1, f"/wiki/{DUMP_NAME}": 1, "/glove/glove.6B.zip": 1,
                           "/ud/UD_Tiny/r9.9/tiny-ud-train.conllu": 1, "/ud/UD_Tiny/r9.9/tiny-ud-dev.conllu": 1}


@pytest.mark.parametrize("checksums", [True, False], ids=["pinned", "unpinned"])
def test_second_fetch_downloads_nothing(served, tmp_path, tiny_bert_dir, checksums):
    """Pinned: files match their configured checksums. Unpinned: they match the sha256 recorded in
    their .download.json. Either way nothing is requested again, not even the sha1sums list."""
    config = _net_config(tmp_path, tiny_bert_dir, served.base, checksums=checksums, data=served.data)
    assert fetch.fetch_config(config, echo=lambda _: None, **FAST)["ok"]
    hits = dict(served.hits)
    mtimes = {p: (p.stat().st_mtime_ns, p.with_name(p.name + ".download.json").stat().st_mtime_ns)
              for p in _files(config)}
    out = fetch.fetch_config(config, echo=lambda _: None, **FAST)
    assert out["ok"] and served.hits == hits
    assert {i["status"] for i in out["items"] if i["kind"] in ("wikipedia", "ud", "glove")} == {"present"}
    assert {p: (p.stat().st_mtime_ns, p.with_name(p.name + ".download.json").stat().st_mtime_ns)
            for p in _files(config)} == mtimes  # nothing rewritten


def test_changed_file_is_downloaded_again(served, tmp_path, tiny_bert_dir):
    """Unpinned, but the file no longer matches its recorded sha256: fetched again."""
    config = _net_config(tmp_path, tiny_bert_dir, served.base, checksums=False, data=served.data)
    fetch.fetch_config(config, echo=lambda _: None, **FAST)
    dump = wikipedia_target(config)
    dump.write_bytes(b"truncated")
    out = fetch.fetch_config(config, echo=lambda _: None, **FAST)
    assert out["ok"] and dump.read_bytes() == served.data["dump"]
    assert served.hits[f"/wiki/{DUMP_NAME}"] == 2
    assert [i["status"] for i in out["items"] if i["kind"] == "wikipedia"] == ["downloaded"]


def test_checksum_mismatch_is_refused_and_the_rest_fetched(served, tmp_path, tiny_bert_dir, capsys):
    config = _net_config(tmp_path, tiny_bert_dir, served.base, data=served.data)
    config["wikipedia"]["sha256"] = "0" * 64
    config["glove"]["sha256"] = "f" * 64
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    assert cli.main(["fetch", str(tmp_path / "bad.yaml"), "--retries", "1", "--timeout", "5"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3, err  # dump, GloVe, and the closing line
    assert "Wikipedia dump" in errors[0] and "checksum mismatch" in errors[0] and "0" * 64 in errors[0]
    assert "GloVe" in errors[1] and "checksum mismatch" in errors[1]
    assert "2 input(s) could not be fetched" in errors[2] and "Traceback" not in err
    dump, glove, train, dev = _files(config)
    for path in (dump, glove):
        assert not path.exists() and not path.with_name(path.name + ".download.json").exists()
        assert [p.name for p in path.parent.iterdir()] == []  # no temporary left
    assert train.is_file() and dev.is_file()  # UD fetched anyway
    recorded = json.loads((tmp_path / "resources" / "fetch.json").read_text())
    assert not recorded["ok"] and len(recorded["errors"]) == 2
    # a sha1sums list that disagrees is refused too
    config = _net_config(tmp_path, tiny_bert_dir, served.base, data=served.data)
    config["wikipedia"]["sha256"] = None
    (served.root / "wiki" / "sha1sums.txt").write_text(f"{'b' * 40}  {DUMP_NAME}\n")
    out = fetch.fetch_config(config, echo=lambda _: None, **FAST)
    assert len(out["errors"]) == 1 and "expected sha1 " + "b" * 40 in out["errors"][0]
    assert not dump.exists()


def test_missing_glove_member_is_an_error(served, tmp_path, tiny_bert_dir):
    config = _net_config(tmp_path, tiny_bert_dir, served.base, data=served.data)
    config["glove"]["member"] = "glove.6B.100d.txt"
    out = fetch.fetch_config(config, echo=lambda _: None, **FAST)
    assert len(out["errors"]) == 1 and "glove.member 'glove.6B.100d.txt' is not in" in out["errors"][0]


def test_unreachable_inputs_exit_2_with_error_lines(tmp_path, tiny_bert_dir, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there afterwards
    config = _net_config(tmp_path, tiny_bert_dir, base, data={"dump": b"", "glove": b"", "conllu": b""})
    config["models"].append({"label": "gone", "name_or_path": str(tmp_path / "no-such-model"), "revision": None})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert cli.main(["fetch", str(tmp_path / "c.yaml"), "--retries", "1", "--timeout", "5"]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 6, captured.err  # missing model, dump, 2 UD files, GloVe, closing line
    assert "no-such-model" in errors[0] and "does not exist" in errors[0]
    for line, what in zip(errors[1:5], ["Wikipedia dump", "UD treebank", "UD treebank", "GloVe vectors"]):
        assert line.startswith(f"error: {what} {base}") and "cannot reach" in line, line
    assert "fetch: model" in captured.out  # the reachable model is still checked and printed


# ---- models ------------------------------------------------------------------------------------

def _fake_snapshot(target: Path, model_dir: Path, *, weights: str = "model.safetensors") -> Path:
    """What snapshot_download returns: a directory with config, weights and tokenizer files."""
    target.mkdir(parents=True, exist_ok=True)
    for p in model_dir.iterdir():
        if p.name != "model.safetensors":
            shutil.copy(p, target / p.name)
    shutil.copy(model_dir / "model.safetensors", target / weights)
    return target


def test_local_models_are_checked_not_fetched(tmp_path, tiny_bert_dir):
    item = model_fetch.fetch_model(str(tiny_bert_dir))
    assert item["status"] == "checked" and item["sha256"] == _sha256((tiny_bert_dir / "model.safetensors").read_bytes())
    pickled = _fake_snapshot(tmp_path / "pickled", tiny_bert_dir, weights="pytorch_model.bin")
    with pytest.raises(BertlookError, match="refusing pickled weights"):
        model_fetch.fetch_model(str(pickled))


# ---- the workflow finds what fetch left ----------------------------------------------------------

def test_ud_step_uses_fetched_unpinned_files_without_network(served, tmp_path, tiny_bert_dir):
    config = _net_config(tmp_path, tiny_bert_dir, served.base, checksums=False, data=served.data)
    fetch.fetch_config(config, echo=lambda _: None, **FAST)
    served.root.joinpath("ud").rename(served.root / "gone")  # the server would now answer 404
    ud = config["treebank"]["ud"]
    url = ud["base_url"].format(repo="UD_Tiny", release="r9.9", file="tiny-ud-dev.conllu")
    assert present_as_recorded(ud_download_dir(config) / "tiny-ud-dev.conllu", url)["bytes"] == len(served.data["conllu"])
    hits = dict(served.hits)
    result = prepare_ud("UD_Tiny", "r9.9", tmp_path / "train.conllu", tmp_path / "dev.conllu",
                        download_dir=ud_download_dir(config), train_file=ud["train_file"],
                        dev_file=ud["dev_file"], base_url=ud["base_url"], retries=1)
    assert served.hits == hits and result["dev"]["sentences"] > 0


@pytest.mark.e2e
def test_snakemake_schedules_no_download_job_after_fetch(served, tmp_path, tiny_bert_dir):
    """Real snakemake on the tiny configuration with a downloaded dump, UD files and GloVe zip: before
    fetch the dry run schedules both download rules; after it, none; and the first steps then run
    with the server gone (no download attempted)."""
    config = _net_config(tmp_path, tiny_bert_dir, served.base, checksums=False, data=served.data)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    before = snakemake(tmp_path, "-n")
    assert before.returncode == 0, before.stderr[-3000:]
    assert "rule download_wikipedia:" in before.stdout and "rule download_glove:" in before.stdout
    assert cli.main(["fetch", str(tmp_path / "config.yaml"), "--retries", "1", "--timeout", "5"]) == 0
    after = snakemake(tmp_path, "-n")
    assert after.returncode == 0, after.stderr[-3000:]
    assert "rule download" not in after.stdout and "rule segments:" in after.stdout, after.stdout[-3000:]
    for name in ("wiki", "ud", "glove"):
        served.root.joinpath(name).rename(served.root / f"{name}-gone")
    hits = dict(served.hits)
    run = tmp_path / "results" / RUN
    proc = snakemake(tmp_path, str(run / "corpus" / "segments.jsonl"), str(run / "treebank" / "dev.conllu"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert served.hits == hits
    assert (run / "corpus" / "segments.jsonl").stat().st_size > 0


def test_fetch_and_preflight_cover_every_treebanks_entry(served, tmp_path, tiny_bert_dir):
    """`treebanks` (issue 13): a second UD release is fetched into its own cache directory, and a
    missing local file of an entry is named by its key (treebanks.N.local.dev)."""
    from bertlook.cli.preflight import reach
    from bertlook.pipeline.preflight import preflight_problems

    config = _net_config(tmp_path, tiny_bert_dir, served.base, data=served.data)
    extra = dict(copy.deepcopy(config["treebank"]), label="second", language="de")
    second = tmp_path / "served" / "ud" / "UD_Second" / "r1.0"  # served from here on
    second.mkdir(parents=True)
    for name in ("tiny-ud-train.conllu", "tiny-ud-dev.conllu"):
        (second / name).write_bytes(served.data["conllu"])
    extra["ud"].update(repo="UD_Second", release="r1.0")
    config["treebanks"] = [extra]
    config = validate_config(config)
    lines: list[str] = []
    out = fetch.fetch_config(config, echo=lines.append, **FAST)
    assert out["ok"] and out["errors"] == []
    cache = ud_download_dir(config, config["treebanks"][0])
    assert cache == tmp_path / "resources" / "ud" / "UD_Second" / "r1.0"
    for name in ("tiny-ud-train.conllu", "tiny-ud-dev.conllu"):
        assert (cache / name).read_bytes() == served.data["conllu"]
        assert (ud_download_dir(config) / name).is_file()  # and the main treebank's
    missing = dict(copy.deepcopy(config["treebanks"][0]), source="local",
                   local={"train": None, "dev": str(tmp_path / "nope.conllu"), "format": "auto", "kind": "ud"})
    config["treebanks"] = [missing]
    problems = preflight_problems(validate_config(config), reach())
    assert any(p.startswith("treebanks.0.local.dev:") and "nope.conllu" in p for p in problems), problems
