"""``bertlook fetch`` for models: a hub model into the Hugging Face cache (safetensors, tokenizer and
config only), or a local / ``package:`` model checked, each as an item of the fetch summary
(:func:`bertlook.data.fetch.fetch_config` calls :func:`fetch_model` for every ``models`` entry)."""

from __future__ import annotations

import fnmatch
import logging
from pathlib import Path
from typing import Any, Callable

from huggingface_hub import snapshot_download as hf_snapshot_download

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
