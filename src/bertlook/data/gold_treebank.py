"""The gold sources of ``bertlook treebank``: files you supply (:func:`prepare_local`; CoNLL-X as the paper's
PTB-SD, or CoNLL-U) and a Universal Dependencies treebank downloaded at a pinned release (:func:`prepare_ud`),
each read and validated by :mod:`bertlook.data.treebank` and written as the normalized ``train.conllu`` /
``dev.conllu`` with a JSON summary (the silver trees: :mod:`bertlook.data.silver_treebank`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from bertlook.data.download import download, present_as_recorded
from bertlook.data.treebank import (READ_COUNT_KEYS, Sentence, detect_format, normalise_ud_relations, read_conllu,
                                    read_treebank, split_summary, write_conllu)
from bertlook.errors import BertlookError
from bertlook.io_utils import sha256_file, write_json

log = logging.getLogger(__name__)

UD_URL_TEMPLATE = "https://raw.githubusercontent.com/UniversalDependencies/{repo}/{release}/{file}"
UD_DEFAULT_REPO = "UD_English-EWT"
UD_DEFAULT_RELEASE = "r2.14"
UD_DEFAULT_TRAIN_FILE = "en_ewt-ud-train.conllu"
UD_DEFAULT_DEV_FILE = "en_ewt-ud-dev.conllu"


# ---------------------------------------------------------------------------------- local files

def _read_local(src: Path, fmt: str, strip_subtypes: bool,
                ud_v2_relations: bool = False) -> tuple[list[Sentence], dict[str, Any]]:
    fmt = detect_format(src) if fmt == "auto" else fmt
    counts: dict[str, int] = {}
    sentences = read_treebank(src, fmt, strip_subtypes=strip_subtypes, counts=counts)
    renamed = normalise_ud_relations(sentences, strip_subtypes=strip_subtypes) if ud_v2_relations else {}
    info = {"input": str(src), "input_sha256": sha256_file(src), "format": fmt,
            **{k: counts[k] for k in READ_COUNT_KEYS if k not in ("sentences", "words")},
            "relations_renamed": dict(sorted(renamed.items()))}
    return sentences, info


def _write_split(out, sentences: list[Sentence], info: dict[str, Any], comment: str) -> dict[str, Any]:
    write_conllu(out, sentences, comments={"source": comment})
    return split_summary(sentences, **info, output=str(out))


def prepare_local(
    train_path: str | os.PathLike | None,
    dev_path: str | os.PathLike,
    fmt: str = "auto",
    out_train: str | os.PathLike | None = None,
    out_dev: str | os.PathLike | None = None,
    strip_subtypes: bool = False,
    *,
    summary: str | os.PathLike | None = None,
    ud_v2_relations: bool = False,
) -> dict[str, Any]:
    """Normalize treebank files you supply (PTB-SD CoNLL-X, or any UD CoNLL-U) to CoNLL-U.

    ``ud_v2_relations``: rename UD v1 relations to their v2 names (:func:`normalise_ud_relations`;
    for UD files only: PTB-SD's ``dobj``/``nsubjpass`` would be renamed too); each split's summary
    gets ``relations_renamed`` (``{"dobj->obj": n, ...}``, empty when off).

    ``fmt`` is ``auto`` (by extension, :func:`detect_format`), ``conllu`` or ``conllx``. Every input
    is fully validated before anything is written. ``train_path`` may be ``None``: then the summary
    records ``"train": null``, and when ``out_train`` is given a CoNLL-U file with zero sentences is
    written there (read it with ``allow_empty=True``) so that pipelines with a fixed output list work;
    the caller decides how to do without a train split (head selection on dev, as in the paper).
    Returns the summary (also written to ``summary`` when given).
    """
    if out_dev is None:
        raise BertlookError("prepare_local: no output path for the dev split")
    if fmt not in ("auto", "conllu", "conllx"):
        raise BertlookError(f"unknown treebank format {fmt!r} (expected auto, conllu or conllx)")
    dev_src = Path(dev_path)
    warnings: list[str] = []
    # Read and validate every input before writing anything.
    dev_sents, dev_info = _read_local(dev_src, fmt, strip_subtypes, ud_v2_relations)
    train_sents = train_info = None
    if train_path is not None:
        train_src = Path(train_path)
        if out_train is None:
            raise BertlookError("prepare_local: a train file was given but no output path for it")
        if train_src.resolve() == dev_src.resolve():
            warnings.append(f"the train and dev files are the same file ({dev_src}): heads chosen on "
                            "train are not held out")
        train_sents, train_info = _read_local(train_src, fmt, strip_subtypes, ud_v2_relations)
    dev_info = _write_split(out_dev, dev_sents, dev_info, f"local: {dev_src}")
    if train_sents is not None:
        train_info = _write_split(out_train, train_sents, train_info, f"local: {train_path}")
    elif out_train is not None:
        write_conllu(out_train, [], comments={
            "note": "no train split: no train file was given (bertlook treebank --source local)"})
    result = {
        "source": "local",
        "strip_subtypes": strip_subtypes,
        "ud_v2_relations": ud_v2_relations,
        "dev": dev_info,
        "train": train_info,
        "train_output_empty": str(out_train) if train_path is None and out_train is not None else None,
        "warnings": warnings,
    }
    for w in warnings:
        log.warning("%s", w)
    if summary is not None:
        write_json(summary, result)
    return result


# ----------------------------------------------------------------------------------- UD download

def ud_url(template: str, repo: str, release: str, file: str) -> str:
    """Fill ``{repo}``, ``{release}`` and ``{file}`` into a URL template."""
    try:
        return template.format(repo=repo, release=release, file=file)
    except (KeyError, IndexError, ValueError) as err:
        raise BertlookError(f"bad UD URL template {template!r}: only {{repo}}, {{release}} and "
                            f"{{file}} may appear ({err!r})") from err


def prepare_ud(
    repo: str = UD_DEFAULT_REPO,
    release: str = UD_DEFAULT_RELEASE,
    out_train: str | os.PathLike | None = None,
    out_dev: str | os.PathLike | None = None,
    *,
    download_dir: str | os.PathLike,
    train_file: str = UD_DEFAULT_TRAIN_FILE,
    dev_file: str = UD_DEFAULT_DEV_FILE,
    base_url: str = UD_URL_TEMPLATE,
    train_sha256: str | None = None,
    dev_sha256: str | None = None,
    strip_subtypes: bool = False,
    retries: int = 3,
    timeout: float = 60.0,
    backoff: float = 1.0,
    summary: str | os.PathLike | None = None,
    ud_v2_relations: bool = False,
) -> dict[str, Any]:
    """Download a UD treebank at a pinned release and normalize its train/dev files to CoNLL-U.

    ``ud_v2_relations``: rename UD v1 relations (releases before 2.0) to their v2 names
    (:func:`normalise_ud_relations`); each split's summary gets ``relations_renamed`` (empty when off).

    Files are fetched from ``base_url`` (default :data:`UD_URL_TEMPLATE`, GitHub raw files of
    ``UniversalDependencies/{repo}`` at tag ``{release}``) into ``download_dir/{file}`` with
    :func:`bertlook.data.download.download` (retries, atomic write, skipped when the file is already there
    with the given sha256); a given sha256 that does not match is an error and nothing is written.
    German: ``repo="UD_German-GSD", train_file="de_gsd-ud-train.conllu", dev_file=...``.
    The sha256 of each file is recorded in the summary (pin it with ``train_sha256``/``dev_sha256``).
    """
    if out_train is None or out_dev is None:
        raise BertlookError("prepare_ud: output paths for the train and dev splits are required")
    download_dir = Path(download_dir)
    files: dict[str, dict[str, Any]] = {}
    for split, name, sha in (("dev", dev_file, dev_sha256), ("train", train_file, train_sha256)):
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise BertlookError(f"bad UD {split} file name {name!r}: a plain file name is expected")
        url = ud_url(base_url, repo, release, name)
        # without a pinned sha256, a file `bertlook fetch` left here (with its .download.json) is used
        # as it is: no network needed on a compute node
        recorded = present_as_recorded(download_dir / name, url) if sha is None else None
        files[split] = recorded or download(url, download_dir / name, sha256=sha, retries=retries,
                                            timeout=timeout, backoff=backoff)
        files[split]["sha256_pinned"] = sha is not None
    result: dict[str, Any] = {"source": "ud", "repo": repo, "release": release,
                              "strip_subtypes": strip_subtypes, "ud_v2_relations": ud_v2_relations}
    parsed = {}
    for split in ("dev", "train"):
        counts: dict[str, int] = {}
        path = Path(files[split]["path"])
        sentences = read_conllu(path, strip_subtypes=strip_subtypes, counts=counts)
        renamed = normalise_ud_relations(sentences, strip_subtypes=strip_subtypes) if ud_v2_relations else {}
        parsed[split] = (sentences, counts, renamed)
    for split, out in (("dev", out_dev), ("train", out_train)):
        sentences, counts, renamed = parsed[split]
        write_conllu(out, sentences,
                     comments={"source": f"ud: {repo} {release} {Path(files[split]['path']).name}"})
        result[split] = split_summary(
            sentences, input=files[split]["path"], url=files[split]["url"],
            input_sha256=files[split]["sha256"], sha256_pinned=files[split]["sha256_pinned"],
            format="conllu", output=str(out),
            **{k: counts[k] for k in READ_COUNT_KEYS if k not in ("sentences", "words")},
            relations_renamed=dict(sorted(renamed.items())))
    result["warnings"] = []
    if summary is not None:
        write_json(summary, result)
    return result
