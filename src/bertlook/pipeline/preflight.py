"""Configuration checks behind ``validate-config``, ``runs`` and ``preflight`` (CLI: :mod:`bertlook.cli.preflight`).

``preflight`` checks, in seconds and before any work starts, that every model and the Wikipedia dump
of a configuration can be reached (local path, package, HF cache, or the network). When something
cannot be reached it says what to set instead, and exits 2.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable, NamedTuple

from bertlook.errors import BertlookError
from bertlook.pipeline.config import resolve_data_path


def _url_file_name(url: str) -> str:
    """The last path component of a download URL: the file name of its cached copy."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def wikipedia_target(config: dict[str, Any]) -> Path:
    """Where the workflow reads the Wikipedia dump: ``wikipedia.path`` or the download cache."""
    wiki = config["wikipedia"]
    if wiki.get("path"):
        return resolve_data_path(wiki["path"])
    if not wiki.get("url"):
        raise BertlookError("config key 'wikipedia': set either wikipedia.path or wikipedia.url")
    return Path(config["resources_dir"]) / "wikipedia" / _url_file_name(wiki["url"])


def glove_download_target(config: dict[str, Any]) -> Path | None:
    """Where the workflow caches a downloaded GloVe file (None when ``glove.path`` is set or no url)."""
    glove = config.get("glove") or {}
    if glove.get("path") or not glove.get("url"):
        return None
    return Path(config["resources_dir"]) / "glove" / _url_file_name(glove["url"])


def ud_download_dir(config: dict[str, Any], treebank: dict[str, Any] | None = None) -> Path:
    """Where the workflow caches the files of a UD treebank release (default: the main ``treebank``'s)."""
    ud = (treebank or config["treebank"])["ud"]
    return Path(config["resources_dir"]) / "ud" / ud["repo"] / ud["release"]


class Reach(NamedTuple):
    """How preflight reaches the world: ``url(url)`` and ``model(name_or_path, revision)`` return None or
    why the thing cannot be reached. :mod:`bertlook.cli.preflight` passes
    :func:`bertlook.data.download.check_reachable` and :func:`bertlook.attention.modeling.check_reachable_model`
    (the checks live in the layers that download and load; this module sits below them)."""

    url: Callable[[str], str | None]
    model: Callable[[str, str | None], str | None]


def preflight_problems(config: dict[str, Any], reach: Reach) -> list[str]:
    """One line per thing the configuration needs but cannot reach (asked through ``reach``); empty when
    all is reachable."""
    check_reachable = reach.url
    problems = []
    for model in config["models"]:
        reason = reach.model(model["name_or_path"], model.get("revision"))
        if reason:
            problems.append(f"model {model['name_or_path']!r} (models[label={model['label']}]): {reason}")
    wiki = config["wikipedia"]
    hf = wiki.get("hf_dataset")
    if hf:
        # a Hugging Face dataset: local data files must exist; a Hub dataset is resolved (revision) and
        # streamed by `bertlook segments` itself
        files = hf.get("data_files")
        files = ([f for v in files.values() for f in (v if isinstance(v, list) else [v])]
                 if isinstance(files, dict) else [files] if isinstance(files, str) else files or [])
        for f in files:
            if not any(c in str(f) for c in "*?[") and not resolve_data_path(f).exists():
                problems.append(f"wikipedia.hf_dataset.data_files: {f} does not exist")
        target = None
    else:
        try:
            target = wikipedia_target(config)
        except BertlookError as err:
            problems.append(str(err))
            target = None
    if target is not None:
        if wiki.get("path"):
            if not target.is_file():
                problems.append(f"wikipedia.path: {target} does not exist")
        elif not target.is_file():
            reason = check_reachable(wiki["url"])
            if reason:
                problems.append(f"Wikipedia dump {wiki['url']}: {reason}")
    problems.extend(_treebank_problems(config, check_reachable))
    problems.extend(_glove_problems(config, check_reachable))
    return problems


def _glove_problems(config: dict[str, Any], check_reachable) -> list[str]:
    glove = config.get("glove") or {}
    path = glove.get("path")
    if path:
        if path.startswith("package:"):
            module = path[len("package:"):]
            if importlib.util.find_spec(module) is None:
                return [f"glove.path: Python package {module!r} is not installed (pip install {module.replace('_', '-')})"]
            return []
        return [] if Path(path).is_file() else [f"glove.path: {path} does not exist"]
    url = glove.get("url")
    if not url:
        return ["config key 'glove': set either glove.path or glove.url"]
    reason = None if glove_download_target(config).is_file() else check_reachable(url)
    return [f"GloVe vectors {url}: {reason}"] if reason else []


def treebank_entries(config: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(config key, entry)`` of every treebank: ``treebank``, then each ``treebanks.N``."""
    return [("treebank", config.get("treebank") or {}),
            *((f"treebanks.{i}", tb) for i, tb in enumerate(config.get("treebanks") or []))]


def _treebank_problems(config: dict[str, Any], check_reachable) -> list[str]:
    problems: list[str] = []
    for key, tb in treebank_entries(config):
        problems += _one_treebank_problems(config, key, tb, check_reachable)
    return problems


def _one_treebank_problems(config: dict[str, Any], key: str, tb: dict[str, Any], check_reachable) -> list[str]:
    if tb.get("source") == "local":
        local = tb.get("local") or {}
        if not local.get("dev"):
            return [f"{key}.local.dev: no dev file set (source: local)"]
        return [f"{key}.local.{split}: {local[split]} does not exist"
                for split in ("train", "dev") if local.get(split) and not Path(local[split]).is_file()]
    if tb.get("source") == "ud":
        ud = tb["ud"]
        cache = ud_download_dir(config, tb)
        missing = [f for f in (ud["train_file"], ud["dev_file"]) if not (cache / f).is_file()]
        if missing:
            url = ud["base_url"].format(repo=ud["repo"], release=ud["release"], file=missing[0])
            reason = check_reachable(url)
            if reason:
                return [f"UD treebank {url}: {reason} (or set {key}.source: local with your files)"]
    return []


HOW_TO_FIX = """\
What to do:
  - a model: set models[].name_or_path to a local directory holding the model
    (config.json, weights, tokenizer files), e.g. one saved with save_pretrained();
  - the corpus: set wikipedia.path to a local MediaWiki dump (.xml.bz2);
  - the treebank: set treebank.source: local and treebank.local.{train,dev} to CoNLL-U/CoNLL-X files;
  - GloVe: set glove.path to a local glove.6B.100d.txt (or the .zip, with glove.member);
  - or run `make demo`: the offline configuration (config/offline.yaml, packaged MiniLM model
    and gensim's packaged Wikipedia excerpt) needs no network."""
