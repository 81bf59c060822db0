"""``bertlook fetch CONFIG``: fetch every input of a configuration before a cluster run.

Meant for a login node with network access, before the jobs run on nodes without it. For every input
of the configuration:

* **models** -- a hub id is downloaded at its pinned ``revision`` into the Hugging Face cache (the one
  the workflow reads: ``HF_HOME`` / ``HF_HUB_CACHE``) with ``huggingface_hub.snapshot_download``,
  restricted to :data:`bertlook.attention.model_fetch.HUB_ALLOW_PATTERNS` (``config.json``, safetensors weights, tokenizer files):
  pickled weights are never fetched, since bertlook refuses them. The snapshot must then hold
  safetensors weights and tokenizer files. Before downloading, the hub's file sizes are checked against
  the free space of the cache's disk (a model that does not fit is one ``error:``, nothing of it
  downloaded); a gated model is fetched with the token of ``HF_TOKEN`` (or ``hf auth login``), and one
  the token cannot open is one ``error:`` naming its licence page. The token is never written anywhere.
  Local directories and ``package:`` specs are only checked (safetensors headers, tokenizer files), as
  ``bertlook preflight`` does.
* **Wikipedia dump** (``wikipedia.url``) -- into :func:`bertlook.pipeline.preflight.wikipedia_target`, checked
  against ``wikipedia.sha256`` and/or the sha1 listed in ``wikipedia.sha1sums_url``;
* **UD treebank** (``treebank.source: ud``) -- the train and dev files into
  :func:`bertlook.pipeline.preflight.ud_download_dir`, checked against ``treebank.ud.{train,dev}_sha256``;
* **GloVe** (``glove.url``) -- into :func:`bertlook.pipeline.preflight.glove_download_target`, checked against
  ``glove.sha256`` (and ``glove.member`` must be in the zip);
* local paths (``wikipedia.path``, ``glove.path``, local treebank files, coreference files) and the
  spaCy model of silver trees are checked, not fetched.

Downloads go through :func:`bertlook.data.download.download` (retries, atomic write, checksums). Beside
every downloaded file a ``{file}.download.json`` summary is written, in the format of the workflow's
download rules (``{url, path, sha256, sha1, bytes}``), so that Snakemake finds the download rules'
outputs complete and schedules no download job.

Idempotent: a file already there is not downloaded again when it matches the configured checksum,
or, without one, the sha256 recorded in its ``.download.json`` (for the same URL). Every file's
sha256 is printed, and everything is written to ``{resources_dir}/fetch.json`` (one item per input,
with its ``kind`` and ``status``: downloaded, present, checked or error). Inputs that cannot be fetched or
found are reported as ``error:`` lines, one per input (all of them, after fetching the rest); exit 2.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import logging
import zipfile
from pathlib import Path
from typing import Any, Callable

from bertlook.data.download import file_digests, download, fetch_sha1_from_sums, present_as_recorded, summary_path
from bertlook.data.gold_treebank import ud_url
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json
from bertlook.pipeline.config import resolve_data_path
from bertlook.pipeline.preflight import glove_download_target, treebank_entries, ud_download_dir, wikipedia_target

log = logging.getLogger(__name__)

def _fetch_file(kind: str, name: str, url: str, dest: Path, *, sha256: str | None = None,
                sha1sums_url: str | None = None, retries: int = 3, timeout: float = 60.0,
                backoff: float = 1.0) -> dict[str, Any]:
    """Download ``url`` to ``dest`` unless already there (checksum or recorded summary), then write
    ``{dest}.download.json``. Returns a summary item."""
    item: dict[str, Any] = {"kind": kind, "name": name, "url": url, "path": str(dest)}
    info = None
    if dest.is_file():
        if sha256:
            d256, d1, size = file_digests(dest)
            if d256 == sha256:
                info = {"url": url, "path": str(dest), "sha256": d256, "sha1": d1, "bytes": size}
        else:
            info = present_as_recorded(dest, url)
    if info is not None:
        item["status"] = "present"
    else:
        sha1 = None
        if sha1sums_url:
            sha1 = fetch_sha1_from_sums(sha1sums_url, url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1],
                                        timeout, retries=retries, backoff=backoff)
        existed = dest.is_file()
        info = download(url, dest, sha256=sha256, sha1=sha1, retries=retries, timeout=timeout,
                        backoff=backoff)
        # download() keeps a file that already matches the sha1 of the sums list
        item["status"] = "present" if existed and sha1 and info["sha1"] == sha1 else "downloaded"
        item["sha1_verified"] = bool(sha1)
    item["sha256_verified"] = bool(sha256)
    item.update(sha256=info["sha256"], sha1=info["sha1"], bytes=info["bytes"])
    summary = {"url": url, "path": str(dest), "sha256": info["sha256"], "sha1": info["sha1"],
               "bytes": info["bytes"]}
    try:
        unchanged = json.loads(summary_path(dest).read_text(encoding="utf-8")) == summary
    except (OSError, ValueError):
        unchanged = False
    if not unchanged:  # rewritten only when it changes (idempotent)
        write_json(summary_path(dest), summary)
    return item


def _check_path(kind: str, name: str, path: str | Path) -> dict[str, Any]:
    if not Path(path).exists():
        raise BertlookError(f"{name}: {path} does not exist")
    return {"kind": kind, "name": name, "path": str(path), "status": "checked"}


def _check_package(kind: str, name: str, module: str) -> dict[str, Any]:
    if importlib.util.find_spec(module) is None:
        raise BertlookError(f"{name}: Python package {module!r} is not installed "
                            f"(pip install {module.replace('_', '-')})")
    return {"kind": kind, "name": name, "path": f"package:{module}", "status": "checked"}


def _tasks(config: dict[str, Any], net: dict[str, Any],
           fetch_model: Callable[[str, str | None], dict[str, Any]]) -> list[tuple[str, str, Callable[[], dict]]]:
    """(what, kind, thunk) for every input of the configuration, in pipeline order."""
    tasks: list[tuple[str, str, Callable[[], dict]]] = []
    for model in config["models"]:
        tasks.append((f"model {model['name_or_path']!r} (models[label={model['label']}])", "model",
                      lambda m=model: fetch_model(m["name_or_path"], m.get("revision"))))
    wiki = config["wikipedia"]
    if wiki.get("hf_dataset"):
        # read by `bertlook segments` through `datasets` (a Hub dataset is streamed: on a cluster without
        # network, convert it to local parquet first and point data_files at it)
        pass
    elif wiki.get("path"):
        tasks.append(("wikipedia.path", "wikipedia", lambda: _check_path("wikipedia", "wikipedia.path",
                                                            resolve_data_path(wiki["path"]))))
    else:
        tasks.append((f"Wikipedia dump {wiki.get('url')}", "wikipedia", lambda: _fetch_file(
            "wikipedia", "wikipedia.url", wiki["url"], wikipedia_target(config), sha256=wiki.get("sha256"),
            sha1sums_url=wiki.get("sha1sums_url"), **net)))
    for key, tb in treebank_entries(config):  # treebank, then each treebanks.N
        if tb.get("source") == "ud":
            ud = tb["ud"]
            for split in ("train", "dev"):
                fname = ud[f"{split}_file"]
                url = ud_url(ud["base_url"], ud["repo"], ud["release"], fname)
                tasks.append((f"UD treebank {url}", "ud", lambda f=fname, u=url, s=split, k=key, t=tb: _fetch_file(
                    "ud", f"{k}.ud.{s}_file", u, ud_download_dir(config, t) / f,
                    sha256=t["ud"].get(f"{s}_sha256"), **net)))
        elif tb.get("source") == "local":
            for split in ("train", "dev"):
                if tb["local"].get(split):
                    tasks.append((f"{key}.local.{split}", "treebank", lambda s=split, k=key, t=tb: _check_path(
                        "treebank", f"{k}.local.{s}", t["local"][s])))
        elif tb.get("source") == "silver":
            spacy_model = tb["silver"]["spacy_model"]
            tasks.append((f"spaCy model {spacy_model}", "spacy_model", lambda m=spacy_model, k=key: _check_package(
                "spacy_model", f"{k}.silver.spacy_model", m)))
    glove = config.get("glove") or {}
    if glove.get("path"):
        if glove["path"].startswith("package:"):
            tasks.append(("glove.path", "glove", lambda: _check_package("glove", "glove.path",
                                                               glove["path"][len("package:"):])))
        else:
            tasks.append(("glove.path", "glove", lambda: _check_path("glove", "glove.path", glove["path"])))
    elif glove.get("url"):
        def fetch_glove() -> dict[str, Any]:
            dest = glove_download_target(config)
            item = _fetch_file("glove", "glove.url", glove["url"], dest, sha256=glove.get("sha256"), **net)
            member = glove.get("member")
            if member and dest.suffix.lower() == ".zip":
                try:
                    with zipfile.ZipFile(dest) as zf:
                        names = zf.namelist()
                except (OSError, zipfile.BadZipFile) as err:
                    raise BertlookError(f"{dest}: not a readable zip file ({err})") from None
                if member not in names:
                    raise BertlookError(f"glove.member {member!r} is not in {dest} (it holds {', '.join(names[:8])})")
            return item

        tasks.append((f"GloVe vectors {glove['url']}", "glove", fetch_glove))
    for i, path in enumerate((config.get("coref") or {}).get("conll") or []):
        tasks.append((f"coref.conll[{i}]", "coref", lambda p=path, i=i: _check_path("coref", f"coref.conll[{i}]", p)))
    return tasks


def fetch_config(config: dict[str, Any], *, fetch_model: Callable[[str, str | None], dict[str, Any]],
                 retries: int = 3, timeout: float = 60.0, backoff: float = 1.0, summary: str | Path | None = None,
                 echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Fetch (or check) every input of a validated ``config``; write the summary (default
    ``{resources_dir}/fetch.json``) and return it. Failures are collected in ``errors``, not raised.
    ``fetch_model(spec, revision)``: fetches or checks one model and returns its summary item
    (:func:`bertlook.attention.model_fetch.fetch_model`; passed in by ``bertlook fetch``: the models are
    the attention layer's, above this one)."""
    net = {"retries": retries, "timeout": timeout, "backoff": backoff}
    items: list[dict[str, Any]] = []
    errors: list[str] = []
    for what, kind, thunk in _tasks(config, net, fetch_model):
        try:
            item = thunk()
        except BertlookError as err:  # one error per input; the others are fetched all the same
            errors.append(f"{what}: {err}")
            items.append({"kind": kind, "name": what, "status": "error", "error": str(err)})
            continue
        items.append(item)
        _echo_item(item, echo)
    out = {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "resources_dir": str(config["resources_dir"]),
        "ok": not errors,
        "items": items,
        "errors": errors,
    }
    write_json(Path(summary) if summary else Path(config["resources_dir"]) / "fetch.json", out)
    return out


def _echo_item(item: dict[str, Any], echo: Callable[[str], None]) -> None:
    head = f"fetch: {item['kind']:<11} {item['status']:<10}"
    if item["kind"] == "model" and item.get("source") == "hub":
        echo(f"{head} {item['name']}@{item.get('revision') or 'newest'} -> {item['path']}")
        for rec in item.get("files") or []:
            echo(f"         {rec['name']:<32} sha256 {rec['sha256']}  ({rec['bytes']} bytes)")
    elif item.get("sha256"):
        size = f" ({item['bytes']} bytes)" if "bytes" in item else ""
        echo(f"{head} {item['path']}  sha256 {item['sha256']}{size}")
    else:
        echo(f"{head} {item['path']}")
