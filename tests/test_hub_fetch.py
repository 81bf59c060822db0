"""`bertlook fetch` of hub models against a local hub (tests/local_hub.py): the real
``huggingface_hub`` client code runs (``model_info``, ``snapshot_download``, ``hf_hub_download``), only
its endpoint is 127.0.0.1.

In-process tests point the client's import-time constants (``ENDPOINT``, the cache, the offline flag,
the token file) where the environment variables would (``hub`` fixture); the CLI test runs ``bertlook
fetch`` and the offline load in subprocesses with the variables themselves, as a user and a cluster
job do.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import huggingface_hub
import pytest
import yaml
from local_hub import HubRepo, hub_headers_seen, local_hub
from test_fetch import _net_config, served  # noqa: F401 (served: the fixture of the data server)

from bertlook.attention import model_fetch
from bertlook.errors import BertlookError

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_PlantedTokenZq7Xw3Vb9Kd2Lm5Np8Rt"  # distinctive: grepped for in every output
OTHER_TOKEN = "hf_SomeoneElsesTokenAb1Cd2Ef3Gh4"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _repo_files(model_dir: Path, **extra: bytes) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in sorted(model_dir.iterdir()) if p.is_file()}
    files.update(extra)
    return files


@pytest.fixture()
def hub(tmp_path, monkeypatch, tiny_bert_dir):
    """A local hub serving ``org/tiny`` (the tiny BERT, plus a pickle and a README that fetch must not
    request) and ``org/gated`` (the same model, gated, opened by TOKEN); the client pointed at it with
    an empty cache in tmp_path, online, and no token unless a test sets HF_TOKEN."""
    tiny = HubRepo("org/tiny", _repo_files(tiny_bert_dir, **{"pytorch_model.bin": b"PICKLE",
                                                             "README.md": b"# tiny\n"}))
    gated = HubRepo("org/gated", _repo_files(tiny_bert_dir), gated_token=TOKEN)
    home = tmp_path / "hf-home"
    with local_hub([tiny, gated]) as srv:
        constants = huggingface_hub.constants
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", srv.base)
        monkeypatch.setenv("HF_HOME", str(home))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", srv.base)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", srv.base + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
        monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / ".agent_harnesses.json"))
        srv.cache = home / "hub"
        yield srv


class _RetryWaits:
    """``huggingface_hub.file_download``'s ``time`` module without the 1-s sleep before each resumed try
    (``http_get``): the waits are recorded instead of slept (five per file that never arrives)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture()
def retry_waits(monkeypatch) -> _RetryWaits:
    from huggingface_hub import file_download

    waits = _RetryWaits()
    monkeypatch.setattr(file_download, "time", waits)
    return waits


def _resolve_gets(srv, repo: str = "org/tiny") -> dict[str, int]:
    """GET requests of file downloads per file name."""
    out: dict[str, int] = {}
    for req in srv.requests:
        if req["method"] == "GET" and f"/{repo}/resolve/" in req["path"]:
            name = req["path"].split("/resolve/", 1)[1].split("/", 1)[1]
            out[name] = out.get(name, 0) + 1
    return out


def test_hub_model_is_downloaded_at_its_pinned_revision(hub, tiny_bert_dir):
    repo = hub.repos["org/tiny"]
    lines: list[str] = []
    item = model_fetch.fetch_model("org/tiny", repo.sha, echo=lines.append)
    assert item["status"] == "downloaded" and item["source"] == "hub" and item["commit"] == repo.sha
    assert Path(item["path"]) == hub.cache / "models--org--tiny" / "snapshots" / repo.sha
    files = {f["name"]: f for f in item["files"]}
    weights = (tiny_bert_dir / "model.safetensors").read_bytes()
    assert files["model.safetensors"] == {"name": "model.safetensors", "sha256": _sha256(weights),
                                          "bytes": len(weights)}
    # only config, safetensors and tokenizer files were requested: no pickle, no README
    gets = _resolve_gets(hub)
    assert set(gets) == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                         "vocab.txt"} and set(gets.values()) == {1}
    wanted = sum(len(repo.files[n]) for n in gets)
    assert item["download_bytes"] == item["total_bytes"] == wanted
    assert any(f"org/tiny@{repo.sha}: 5 file(s), {wanted} bytes to download" in line for line in lines), lines
    assert hub_headers_seen(hub, "Authorization") == []  # no token set, none sent
    # fetched again: present, and the hub is not asked anything
    before = len(hub.requests)
    again = model_fetch.fetch_model("org/tiny", repo.sha)
    assert again["status"] == "present" and len(hub.requests) == before and again["files"] == item["files"]


def test_branch_revision_is_resolved_to_its_commit(hub):
    item = model_fetch.fetch_model("org/tiny", "main")
    sha = hub.repos["org/tiny"].sha
    assert item["commit"] == sha and item["path"].endswith(sha)
    assert (hub.cache / "models--org--tiny" / "refs" / "main").read_text() == sha


def test_hub_errors_are_one_clear_message(hub):
    with pytest.raises(BertlookError, match="revision 'deadbeef' does not exist on the hub"):
        model_fetch.fetch_model("org/tiny", "deadbeef")
    with pytest.raises(BertlookError, match="the Hugging Face hub has no such model"):
        model_fetch.fetch_model("org/nothing-here", "main")
    hub.repos["org/pickled"] = HubRepo("org/pickled", {"config.json": b"{}", "pytorch_model.bin": b"P",
                                                      "vocab.txt": b"[PAD]\n"})
    with pytest.raises(BertlookError, match="no safetensors weights"):
        model_fetch.fetch_model("org/pickled", "main")
    files = dict(hub.repos["org/tiny"].files)
    files["model.safetensors"] = files["model.safetensors"][:1000]
    hub.repos["org/truncated"] = HubRepo("org/truncated", files)
    with pytest.raises(BertlookError, match="model.safetensors: corrupt or truncated"):
        model_fetch.fetch_model("org/truncated", "main")


def test_unreachable_hub_and_offline_mode(hub, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BertlookError, match="offline mode is on"):
        model_fetch.fetch_model("org/tiny", "main")
    assert hub.requests == []
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there afterwards
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", dead)
    with pytest.raises(BertlookError, match="hub could not be reached .*ConnectError"):
        model_fetch.fetch_model("org/tiny", "main")


def test_gated_model_needs_the_token_and_names_its_licence_page(hub, monkeypatch):
    with pytest.raises(BertlookError) as err:
        model_fetch.fetch_model("org/gated", "main")
    text = str(err.value)
    assert "model 'org/gated' is gated and no Hugging Face token is set" in text
    assert "https://huggingface.co/org/gated" in text and "\n" not in text
    monkeypatch.setenv("HF_TOKEN", OTHER_TOKEN)
    with pytest.raises(BertlookError, match="token set .* has no access to it: accept its licence at "
                                            "https://huggingface.co/org/gated") as err:
        model_fetch.fetch_model("org/gated", "main")
    assert OTHER_TOKEN not in str(err.value)
    assert not (hub.cache / "models--org--gated" / "blobs").exists()  # nothing downloaded
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    item = model_fetch.fetch_model("org/gated", "main")
    assert item["status"] == "downloaded" and TOKEN not in json.dumps(item)
    assert set(hub_headers_seen(hub, "Authorization")) == {f"Bearer {OTHER_TOKEN}", f"Bearer {TOKEN}"}


def test_disk_space_is_checked_before_anything_is_downloaded(hub, monkeypatch):
    repo = hub.repos["org/tiny"]
    monkeypatch.setattr(model_fetch, "free_bytes", lambda path: 1000)
    with pytest.raises(BertlookError) as err:
        model_fetch.fetch_model("org/tiny", repo.sha)
    need = sum(len(repo.files[n]) for n in ("config.json", "model.safetensors", "tokenizer.json",
                                            "tokenizer_config.json", "vocab.txt"))
    assert str(err.value).startswith("model 'org/tiny': not enough disk space for its download: "
                                      f"{need} bytes needed (5 file(s)) but 1000 bytes free in the Hugging "
                                      f"Face cache {hub.cache}; nothing downloaded"), str(err.value)
    assert _resolve_gets(hub) == {} and not any("/resolve/" in r["path"] for r in hub.requests)
    assert not (hub.cache / "models--org--tiny" / "blobs").exists()
    # what is already cached does not count: with the weights cached, only the rest must fit
    monkeypatch.setattr(model_fetch, "free_bytes", lambda path: 10**12)
    model_fetch.fetch_model("org/tiny", repo.sha)
    (hub.cache / "models--org--tiny" / "snapshots" / repo.sha / "vocab.txt").unlink()
    plan = model_fetch.hub_plan("org/tiny", "org/tiny", repo.sha)
    assert plan["download_bytes"] == len(repo.files["vocab.txt"]) and plan["download_files"] == 1


def test_free_bytes_of_a_cache_that_does_not_exist_yet(tmp_path):
    assert model_fetch.free_bytes(tmp_path / "no" / "such" / "cache") == model_fetch.free_bytes(tmp_path) > 0


def test_download_dropped_mid_file_is_resumed_with_a_range_request(hub, monkeypatch, tiny_bert_dir, retry_waits):
    """The server closes the connection after 40000 bytes of the weights, once: huggingface_hub
    resumes from the last chunk it wrote (chunks of 8192 bytes here, 10 MB by default) with
    ``Range: bytes=N-`` and the file arrives whole."""
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 8192)
    hub.drop_once[("org/tiny", "model.safetensors")] = 40000
    item = model_fetch.fetch_model("org/tiny", "main")
    assert item["status"] == "downloaded"
    weights = (tiny_bert_dir / "model.safetensors").read_bytes()
    assert Path(item["path"], "model.safetensors").read_bytes() == weights
    ranges = [r["headers"].get("Range") for r in hub.requests
              if r["method"] == "GET" and r["path"].endswith("/model.safetensors")]
    assert ranges == [None, f"bytes={40000 // 8192 * 8192}-"], ranges
    assert retry_waits.waits == [1]  # one resumed try, after the client's one-second wait
    assert not list(hub.cache.rglob("*.incomplete"))


def test_interrupted_fetch_downloads_only_what_is_missing(hub, retry_waits):
    """A fetch that cannot finish one file (the connection drops after 3000 bytes of it on every try,
    resumed tries included, until the client gives up) keeps the files it finished and no partial
    file; the next fetch requests only the missing one."""
    hub.drop_always[("org/tiny", "model.safetensors")] = 3000
    with pytest.raises(BertlookError, match="org/tiny") as err:
        model_fetch.fetch_model("org/tiny", "main")
    assert "could not be reached" in str(err.value) and "RemoteProtocolError" in str(err.value)
    done = _resolve_gets(hub)
    assert done.pop("model.safetensors") > 1 and set(done.values()) == {1} and len(done) == 4
    assert not list(hub.cache.rglob("*.incomplete"))
    assert retry_waits.waits == [1] * 5  # the client's five resumed tries, each after its wait
    hub.drop_always.clear()
    before = _resolve_gets(hub)
    item = model_fetch.fetch_model("org/tiny", "main")
    assert item["status"] == "downloaded" and item["download_bytes"] == len(hub.repos["org/tiny"].files["model.safetensors"])
    after = _resolve_gets(hub)
    assert after == dict(before, **{"model.safetensors": before["model.safetensors"] + 1})


# ---- the CLI: token hygiene, one error per model, the offline load a cluster job does ---------------

def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertlook", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.e2e
def test_fetch_cli_gated_token_hygiene_and_offline_load(served, tmp_path, tiny_bert_dir):  # noqa: F811
    """`bertlook fetch` in a subprocess with HF_ENDPOINT / HF_HOME / HF_TOKEN in its environment: an open
    model and a gated one the token opens are fetched, a gated one it does not open is ONE error: line
    with its licence page, the data inputs are fetched all the same, exit 2; the planted token is in no
    file written and in neither stdout nor stderr, and was sent to the hub only. Then a job with
    HF_HUB_OFFLINE=1 loads the fetched models from the cache at their pinned revisions."""
    tiny = HubRepo("org/tiny", _repo_files(tiny_bert_dir))
    gated = HubRepo("org/gated", _repo_files(tiny_bert_dir), gated_token=TOKEN)
    refused = HubRepo("meta-llama/Refused", _repo_files(tiny_bert_dir), gated_token=OTHER_TOKEN)
    with local_hub([tiny, gated, refused]) as srv:
        config = _net_config(tmp_path, tiny_bert_dir, served.base, data=served.data)
        config["models"] = [
            {"label": "tiny", "name_or_path": "org/tiny", "revision": tiny.sha},
            {"label": "refused", "name_or_path": "meta-llama/Refused", "revision": "main"},
            {"label": "gated", "name_or_path": "org/gated", "revision": gated.sha},
        ]
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items()
               if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGING_FACE_HUB_TOKEN")}
        env.update(HF_ENDPOINT=srv.base, HF_HOME=str(tmp_path / "hf-home"), HF_TOKEN=TOKEN,
                   PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]))
        proc = _cli(["fetch", "config.yaml", "--retries", "1", "--timeout", "5"], env, tmp_path)
        hub_requests = list(srv.requests)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, proc.stderr  # the refused model, and the closing line
    assert errors[0].startswith("error: model 'meta-llama/Refused' (models[label=refused]): model "
                                "'meta-llama/Refused' is gated") and "https://huggingface.co/meta-llama/Refused" in errors[0]
    assert "1 input(s) could not be fetched" in errors[1] and "Traceback" not in proc.stderr
    summary = json.loads((tmp_path / "resources" / "fetch.json").read_text())
    status = {(i["kind"], i["name"]): i["status"] for i in summary["items"]}
    assert status[("model", "org/tiny")] == status[("model", "org/gated")] == "downloaded"
    assert status[("model", "model 'meta-llama/Refused' (models[label=refused])")] == "error"
    assert [i["status"] for i in summary["items"] if i["kind"] in ("wikipedia", "ud", "glove")] == ["downloaded"] * 4
    # the token: sent to the hub (and only there: the data server got no Authorization), written nowhere
    sent = {v for r in hub_requests for k, v in r["headers"].items() if k.lower() == "authorization"}
    assert sent == {f"Bearer {TOKEN}"}
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == [] and TOKEN not in proc.stdout + proc.stderr
    # a cluster job: offline, the cache only, the pinned revisions
    env = {k: v for k, v in env.items() if k not in ("HF_ENDPOINT", "HF_TOKEN")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    code = (
        "from bertlook.attention import modeling\n"
        "for spec, rev in [('org/tiny', %r), ('org/gated', %r)]:\n"
        "    r = modeling.resolve_model(spec, rev)\n"
        "    assert modeling.in_hf_cache(r.path_or_id, rev), spec\n"
        "    model = modeling.load_model(r)\n"
        "    tok = modeling.load_tokenizer(r)\n"
        "    print(spec, type(model).__name__, model.config.num_hidden_layers, len(tok('a cat sat')['input_ids']))\n"
        "r = modeling.resolve_model('meta-llama/Refused', 'main')\n"
        "assert not modeling.in_hf_cache(r.path_or_id, 'main')\n"
    ) % (tiny.sha, gated.sha)
    load = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert load.returncode == 0, load.stderr[-3000:]
    lines = [line.rsplit(" ", 1)[0] for line in load.stdout.splitlines()]
    assert lines == ["org/tiny BertModel 2", "org/gated BertModel 2"], load.stdout


def test_cli_model_too_big_for_the_disk_is_one_error_and_the_others_proceed(hub, tmp_path, tiny_bert_dir,
                                                                            monkeypatch, capsys):
    """In-process `bertlook fetch` on a config of three hub models, the disk's free space set between
    the sizes of a smaller model and the tiny BERT: the tiny BERT is one error: line naming it, the bytes
    needed and free, and nothing of it is downloaded; the smaller model and the gated one (token in
    HF_TOKEN) are fetched; fetch.json lists every model's status; exit 2; the token is in no output."""
    from bertlook import cli
    from bertlook.testing.tiny_models import make_tiny_bert
    from workflow_helpers import tiny_config

    small_dir = make_tiny_bert(tmp_path / "small", num_layers=1, num_heads=1, hidden_size=8, intermediate_size=8)
    small = HubRepo("org/small", _repo_files(small_dir))
    hub.repos["org/small"] = small
    hub.repos["org/gated"] = HubRepo("org/gated", _repo_files(small_dir), gated_token=TOKEN)
    tiny = hub.repos["org/tiny"]
    small_bytes = sum(len(v) for k, v in small.files.items())
    tiny_bytes = sum(len(tiny.files[n]) for n in ("config.json", "model.safetensors", "tokenizer.json",
                                                  "tokenizer_config.json", "vocab.txt"))
    assert small_bytes < 60_000 < tiny_bytes
    monkeypatch.setattr(model_fetch, "free_bytes", lambda path: 60_000)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    config = tiny_config(tmp_path, tiny_bert_dir)
    config["models"] = [{"label": "tiny", "name_or_path": "org/tiny", "revision": tiny.sha},
                        {"label": "small", "name_or_path": "org/small", "revision": small.sha},
                        {"label": "gated", "name_or_path": "org/gated", "revision": "main"}]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert cli.main(["fetch", str(tmp_path / "c.yaml")]) == 2
    out = capsys.readouterr()
    errors = [line for line in out.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, out.err
    assert errors[0] == (f"error: model 'org/tiny' (models[label=tiny]): model 'org/tiny': not enough disk space "
                         f"for its download: {tiny_bytes} bytes needed (5 file(s)) but 60000 bytes free in the "
                         f"Hugging Face cache {hub.cache}; nothing downloaded (free space, or point HF_HUB_CACHE / "
                         "HF_HOME at a larger disk)")
    assert not (hub.cache / "models--org--tiny").exists() and "/org/tiny/resolve/" not in json.dumps(hub.requests)
    summary = json.loads((tmp_path / "resources" / "fetch.json").read_text())
    models = {i["name"]: i["status"] for i in summary["items"] if i["kind"] == "model"}
    assert models == {"model 'org/tiny' (models[label=tiny])": "error", "org/small": "downloaded",
                      "org/gated": "downloaded"}
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == [] and TOKEN not in out.out + out.err
