"""``bertlook fetch`` for models: a hub model into the Hugging Face cache (safetensors, tokenizer and
config only), or a local / ``package:`` model checked, each as an item of the fetch summary
(:func:`bertlook.data.fetch.fetch_config` calls :func:`fetch_model` for every ``models`` entry).

A hub model is fetched in two steps, both through ``huggingface_hub`` (so ``HF_ENDPOINT``, ``HF_HOME`` /
``HF_HUB_CACHE`` and the token of ``HF_TOKEN`` or ``hf auth login`` apply as they do for transformers):

1. **plan** (:func:`hub_plan`): the hub's metadata of the pinned revision (``model_info`` with file sizes)
   gives the commit and the files :data:`HUB_ALLOW_PATTERNS` selects; the bytes of those not yet in the
   cache are compared with the free space of the cache's disk, and a model that does not fit is refused
   before a byte is downloaded (:func:`check_disk`). A gated model the token cannot open is refused here
   too, with its licence page.
2. **download**: ``snapshot_download`` at the pinned revision. Files already in the cache are not fetched
   again (an interrupted fetch resumes file by file); a connection that drops mid-file is resumed by
   ``huggingface_hub`` itself with an HTTP ``Range`` request, from the last whole chunk it wrote.

The token is never put into a message, a log line or the summary: the client sends it to the hub, and
any text taken from a hub error is scrubbed of it (:func:`scrub_token`).
"""

from __future__ import annotations

import fnmatch
import logging
import shutil
from pathlib import Path
from typing import Any, Callable

import huggingface_hub
from huggingface_hub import snapshot_download as hf_snapshot_download
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import filter_repo_objects

from bertlook.attention import modeling
from bertlook.data.download import file_digests
from bertlook.errors import BertlookError

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


LICENCE_PAGE = "https://huggingface.co/{repo_id}"


def scrub_token(text: str) -> str:
    """``text`` with the Hugging Face token the client would send (if any) replaced by ``***``."""
    token = huggingface_hub.get_token()
    return text.replace(token, "***") if token and len(token) >= 4 else text


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache the client writes to (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    return Path(huggingface_hub.constants.HF_HUB_CACHE)


def free_bytes(path: Path) -> int:
    """Free bytes on the disk of ``path`` (its nearest existing ancestor: the cache may not exist yet)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def _size(n: int) -> str:
    return f"{n} bytes ({n / 1e9:.2f} GB)" if n >= 1e7 else f"{n} bytes"


def _hub_error(spec: str, repo_id: str, revision: str | None, err: Exception) -> BertlookError:
    """One message for a failed hub call: gated (with the licence page), no such model or revision,
    or the hub unreachable. The token, if the error text held it, is scrubbed."""
    first = scrub_token((str(err).strip().splitlines() or [type(err).__name__])[0][:200])
    if isinstance(err, GatedRepoError):
        why = ("no Hugging Face token is set (export HF_TOKEN, or `hf auth login`)"
               if huggingface_hub.get_token() is None else
               "the Hugging Face token set (HF_TOKEN or `hf auth login`) has no access to it")
        return BertlookError(f"model {spec!r} is gated and {why}: accept its licence at "
                             f"{LICENCE_PAGE.format(repo_id=repo_id)} with your account, then fetch again; "
                             "nothing downloaded")
    if isinstance(err, RevisionNotFoundError):
        return BertlookError(f"model {spec!r}: revision {revision!r} does not exist on the hub")
    if isinstance(err, RepositoryNotFoundError):
        return BertlookError(f"model {spec!r}: the Hugging Face hub has no such model, or it is private "
                             f"or gated and no token is set ({first})")
    return BertlookError(modeling.hub_unreachable_message(spec, revision, f"{type(err).__name__}: {first}"))


def hub_plan(spec: str, repo_id: str, revision: str | None) -> dict[str, Any]:
    """What fetching ``repo_id`` at ``revision`` would download, from the hub's metadata (no file is
    fetched): ``commit`` (the sha the revision names), ``files`` (name and bytes of every file
    :data:`HUB_ALLOW_PATTERNS` selects), ``download_bytes`` (of those not yet in the cache)."""
    try:
        info = huggingface_hub.HfApi().model_info(repo_id, revision=revision, files_metadata=True,
                                                  timeout=modeling.HUB_TIMEOUT_S)
    except Exception as err:  # GatedRepoError, RepositoryNotFoundError, connection errors ...
        raise _hub_error(spec, repo_id, revision, err) from None
    wanted = list(filter_repo_objects(info.siblings or [], allow_patterns=list(HUB_ALLOW_PATTERNS),
                                      key=lambda sib: sib.rfilename))
    files = [{"name": sib.rfilename, "bytes": int(sib.size or 0)} for sib in wanted]
    missing = [f for f in files if modeling.cached_file(repo_id, f["name"], info.sha) is None]
    return {"commit": info.sha, "files": files, "download_bytes": sum(f["bytes"] for f in missing),
            "download_files": len(missing)}


def check_disk(spec: str, plan: dict[str, Any], cache: Path) -> int:
    """Refuse (BertlookError) a download that does not fit the free space of ``cache``'s disk; returns
    the free bytes."""
    free = free_bytes(cache)
    need = plan["download_bytes"]
    if need > free:
        raise BertlookError(
            f"model {spec!r}: not enough disk space for its download: {_size(need)} needed "
            f"({plan['download_files']} file(s)) but {_size(free)} free in the Hugging Face cache {cache}; "
            "nothing downloaded (free space, or point HF_HUB_CACHE / HF_HOME at a larger disk)")
    return free


def _download_hub(spec: str, repo_id: str, revision: str | None, item: dict[str, Any],
                  echo: Callable[[str], None] | None) -> Path:
    """Plan, check the disk, download; the snapshot directory. ``item`` gains commit and sizes."""
    plan = hub_plan(spec, repo_id, revision)
    cache = hub_cache_dir()
    free = check_disk(spec, plan, cache)
    item.update(commit=plan["commit"], download_bytes=plan["download_bytes"],
                total_bytes=sum(f["bytes"] for f in plan["files"]))
    if echo is not None:
        echo(f"fetch: model       plan       {spec}@{plan['commit']}: {plan['download_files']} file(s), "
             f"{_size(plan['download_bytes'])} to download, {_size(free)} free in {cache}")
    try:
        local_dir = Path(hf_snapshot_download(repo_id=repo_id, revision=revision,
                                              allow_patterns=list(HUB_ALLOW_PATTERNS)))
    except Exception as err:  # a dropped connection after the client's own retries, a full disk ...
        raise _hub_error(spec, repo_id, revision, err) from None
    if not any(local_dir.glob("*.safetensors")):
        raise BertlookError(
            f"model {spec!r}{f' (revision {revision})' if revision else ''}: the hub snapshot has no "
            "safetensors weights (only pickled weights, which bertlook refuses to load); convert the "
            "checkpoint to safetensors where you trust it and point models[].name_or_path at that directory")
    return local_dir


def fetch_model(spec: str, revision: str | None = None, *,
                echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Fetch a hub model into the HF cache (safetensors, tokenizer, config only; disk checked first),
    or check a local / ``package:`` model. Returns a summary item; raises :class:`BertlookError`
    when it cannot (one message: gated with the licence page, no disk space, no such model ...)."""
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
        status, local_dir = "downloaded", _download_hub(spec, resolved.path_or_id, revision, item, echo)
    _check_model_dir(spec, local_dir, "local")  # the snapshot directory, checked like a local model
    files = _file_records(local_dir)
    item.update(status=status, path=str(local_dir), files=files)
    return item
