"""``bertlook fetch CONFIG``: fetch every input of a configuration before a cluster run.

Meant for a login node with network access, before the jobs run on nodes without it. For every input
of the configuration:

* **models** -- a hub id is downloaded at its pinned ``revision`` into the Hugging Face cache (the one
  the workflow reads: ``HF_HOME`` / ``HF_HUB_CACHE``) with ``huggingface_hub.snapshot_download``,
  restricted to :data:`HUB_ALLOW_PATTERNS` (``config.json``, safetensors weights, tokenizer files):
  pickled weights are never fetched, since bertlook refuses them. The snapshot must then hold
  safetensors weights and tokenizer files. Local directories and ``package:`` specs are only
  checked (safetensors headers, tokenizer files), as ``bertlook preflight`` does.
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
sha256 is printed, and everything is written to ``{resources_dir}/fetch.json``. Inputs that cannot be
fetched or found are reported as ``error:`` lines (all of them, after fetching the rest); exit 2.
"""

from __future__ import annotations

import datetime
import fnmatch
import importlib.util
import json
import logging
import zipfile
from pathlib import Path
from typing import Any, Callable

from huggingface_hub import snapshot_download as hf_snapshot_download

from bertlook.attention import modeling
from bertlook.data.download import file_digests, download, fetch_sha1_from_sums, present_as_recorded, summary_path
from bertlook.data.treebank import ud_url
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json
from bertlook.pipeline.config import resolve_data_path
from bertlook.pipeline.preflight import glove_download_target, treebank_entries, ud_download_dir, wikipedia_target

log = logging.getLogger(__name__)

# What snapshot_download fetches of a hub model: config, safetensors weights (single or sharded, with
# the shard index) and every tokenizer file format transformers reads. No *.bin / *.pt / *.ckpt.
HUB_ALLOW_PATTERNS = [
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "*.model",
]
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def _snapshot_download(**kwargs) -> str:
    """``huggingface_hub.snapshot_download`` (one indirection, so tests can replace it offline)."""
    return hf_snapshot_download(**kwargs)


def _cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The snapshot directory of ``repo_id`` at ``revision`` when the HF cache already holds its
    config, safetensors weights and a tokenizer file; else None."""
    if not modeling.in_hf_cache(repo_id, revision):
        return None
    if not any(modeling.cached_file(repo_id, name, revision) for name in _TOKENIZER_FILES):
        return None
    config = modeling.cached_file(repo_id, "config.json", revision)
    return Path(config).parent if config else None


def _file_records(root: Path) -> list[dict[str, Any]]:
    """sha256 and size of every file under ``root`` that :data:`HUB_ALLOW_PATTERNS` selects (symlinks
    of the HF cache followed), by name. Other files a snapshot may hold (fetched by other tools) are
    left out."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()
                       and any(fnmatch.fnmatch(p.name, pat) for pat in HUB_ALLOW_PATTERNS)):
        d256, _, size = file_digests(path)
        out.append({"name": path.relative_to(root).as_posix(), "sha256": d256, "bytes": size})
    return out


def _check_model_dir(spec: str, directory: Path, source: str) -> None:
    """Safetensors weights (headers opened, pickles refused) and tokenizer files in ``directory``."""
    as_local = modeling.ResolvedModel(spec=spec, path_or_id=str(directory), source=source)
    modeling.check_weights_files(as_local)
    problem = modeling.tokenizer_files_problem(as_local)
    if problem:
        raise BertlookError(problem)


def fetch_model(spec: str, revision: str | None = None, *,
                snapshot_download: Callable[..., str] | None = None) -> dict[str, Any]:
    """Fetch a hub model into the HF cache (safetensors, tokenizer, config only), or check a local /
    ``package:`` model. Returns a summary item; raises :class:`BertlookError` when it cannot."""
    resolved = modeling.resolve_model(spec, revision)
    item: dict[str, Any] = {"kind": "model", "name": spec, "source": resolved.source}
    if not resolved.is_hub:
        _check_model_dir(spec, Path(resolved.path_or_id), resolved.source)
        item.update(status="checked", path=resolved.path_or_id,
                    sha256=resolved.compute_weights_sha256(), files=resolved.weights_files)
        return item
    item["revision"] = revision
    if revision is None:
        log.warning("model %s has no pinned revision: fetching the newest (set models[].revision)", spec)
    cached = _cached_snapshot(resolved.path_or_id, revision)
    if cached is not None:
        status, local_dir = "present", cached
    else:
        if modeling.hub_offline():
            raise BertlookError(modeling.hub_unreachable_message(
                spec, revision, "offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): unset it to fetch"))
        call = snapshot_download or _snapshot_download
        try:
            local_dir = Path(call(repo_id=resolved.path_or_id, revision=revision,
                                  allow_patterns=list(HUB_ALLOW_PATTERNS)))
        except Exception as err:  # RepositoryNotFoundError, RevisionNotFoundError, connection errors ...
            name = type(err).__name__
            first = (str(err).strip().splitlines() or [name])[0][:200]
            if name == "RevisionNotFoundError":
                raise BertlookError(f"model {spec!r}: revision {revision!r} does not exist on the hub") from None
            if name in ("RepositoryNotFoundError", "GatedRepoError"):
                raise BertlookError(f"model {spec!r}: the Hugging Face hub has no such model, or it is private "
                                    f"or gated and no token is set ({first})") from None
            raise BertlookError(modeling.hub_unreachable_message(spec, revision, f"{name}: {first}")) from None
        status = "downloaded"
        if not any(local_dir.glob("*.safetensors")):
            raise BertlookError(
                f"model {spec!r}{f' (revision {revision})' if revision else ''}: the hub snapshot has no "
                "safetensors weights (only pickled weights, which bertlook refuses to load); convert the "
                "checkpoint to safetensors where you trust it and point models[].name_or_path at that directory")
    _check_model_dir(spec, local_dir, "local")  # the snapshot directory, checked like a local model
    files = _file_records(local_dir)
    item.update(status=status, path=str(local_dir), files=files)
    return item


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
           snapshot_download: Callable[..., str] | None) -> list[tuple[str, Callable[[], dict]]]:
    """(what, thunk) for every input of the configuration, in pipeline order."""
    tasks: list[tuple[str, Callable[[], dict]]] = []
    for model in config["models"]:
        tasks.append((f"model {model['name_or_path']!r} (models[label={model['label']}])",
                      lambda m=model: fetch_model(m["name_or_path"], m.get("revision"),
                                                  snapshot_download=snapshot_download)))
    wiki = config["wikipedia"]
    if wiki.get("hf_dataset"):
        # read by `bertlook segments` through `datasets` (a Hub dataset is streamed: on a cluster without
        # network, convert it to local parquet first and point data_files at it)
        pass
    elif wiki.get("path"):
        tasks.append(("wikipedia.path", lambda: _check_path("wikipedia", "wikipedia.path",
                                                            resolve_data_path(wiki["path"]))))
    else:
        tasks.append((f"Wikipedia dump {wiki.get('url')}", lambda: _fetch_file(
            "wikipedia", "wikipedia.url", wiki["url"], wikipedia_target(config), sha256=wiki.get("sha256"),
            sha1sums_url=wiki.get("sha1sums_url"), **net)))
    for key, tb in treebank_entries(config):  # treebank, then each treebanks.N
        if tb.get("source") == "ud":
            ud = tb["ud"]
            for split in ("train", "dev"):
                fname = ud[f"{split}_file"]
                url = ud_url(ud["base_url"], ud["repo"], ud["release"], fname)
                tasks.append((f"UD treebank {url}", lambda f=fname, u=url, s=split, k=key, t=tb: _fetch_file(
                    "ud", f"{k}.ud.{s}_file", u, ud_download_dir(config, t) / f,
                    sha256=t["ud"].get(f"{s}_sha256"), **net)))
        elif tb.get("source") == "local":
            for split in ("train", "dev"):
                if tb["local"].get(split):
                    tasks.append((f"{key}.local.{split}", lambda s=split, k=key, t=tb: _check_path(
                        "treebank", f"{k}.local.{s}", t["local"][s])))
        elif tb.get("source") == "silver":
            spacy_model = tb["silver"]["spacy_model"]
            tasks.append((f"spaCy model {spacy_model}", lambda m=spacy_model, k=key: _check_package(
                "spacy_model", f"{k}.silver.spacy_model", m)))
    glove = config.get("glove") or {}
    if glove.get("path"):
        if glove["path"].startswith("package:"):
            tasks.append(("glove.path", lambda: _check_package("glove", "glove.path",
                                                               glove["path"][len("package:"):])))
        else:
            tasks.append(("glove.path", lambda: _check_path("glove", "glove.path", glove["path"])))
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

        tasks.append((f"GloVe vectors {glove['url']}", fetch_glove))
    for i, path in enumerate((config.get("coref") or {}).get("conll") or []):
        tasks.append((f"coref.conll[{i}]", lambda p=path, i=i: _check_path("coref", f"coref.conll[{i}]", p)))
    return tasks


def fetch_config(config: dict[str, Any], *, retries: int = 3, timeout: float = 60.0, backoff: float = 1.0,
                 snapshot_download: Callable[..., str] | None = None, summary: str | Path | None = None,
                 echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Fetch (or check) every input of a validated ``config``; write the summary (default
    ``{resources_dir}/fetch.json``) and return it. Failures are collected in ``errors``, not raised."""
    net = {"retries": retries, "timeout": timeout, "backoff": backoff}
    items: list[dict[str, Any]] = []
    errors: list[str] = []
    for what, thunk in _tasks(config, net, snapshot_download):
        try:
            item = thunk()
        except BertlookError as err:
            errors.append(f"{what}: {err}")
            items.append({"name": what, "status": "error", "error": str(err)})
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
