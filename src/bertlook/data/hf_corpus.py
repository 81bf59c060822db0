"""Text corpora through Hugging Face ``datasets``: the ``wikipedia.hf_dataset`` corpus source.

A spec (a dict; ``bertlook segments --hf-dataset JSON``) names a dataset the way
``datasets.load_dataset`` does:

  ``path``        a Hub dataset id (``wikimedia/wikipedia``), a packaged builder (``parquet``, ``json``,
                  ``csv``, ``text``, ``arrow``) with ``data_files``, or a local directory (a directory of
                  data files, or one written by ``Dataset.save_to_disk``); required
  ``name``        the configuration (``20231101.en``); default none
  ``split``       default ``"train"``
  ``data_files``  a path / glob, a list of them, or ``{split: paths}``; local files are checked and their
                  sha256 recorded (``package:PKG/path`` entries are resolved like ``--dump``)
  ``streaming``   default true for Hub datasets (reads only the first rows it needs), false for local
                  ones (memory-mapped Arrow, iterated row by row; gives a fingerprint)
  ``revision``    Hub datasets only: a branch, tag or commit; the commit it resolves to is what is
                  loaded and recorded (without one, the current head's commit is pinned at run time)
  ``text_field``  default ``"text"``; ``title_field`` default ``"title"`` (``null``: titles are the
                  row numbers)

Documents (:func:`iter_hf_documents`) are the rows in dataset order: the text is plain (no wiki markup),
so of the dump path's cleaning only the plain-text steps apply
(:func:`bertlook.data.documents.plain_text_paragraphs`: whitespace collapsed, lines that do not end like
prose dropped), then the same sentence step (:func:`bertlook.data.documents.make_document`). A corpus
whose text is the dump's cleaned articles (``"\\n".join(clean_wiki_text(...))``) therefore gives the
same documents, hence the same segments, as the dump. ``datasets`` and ``huggingface_hub`` are imported
inside the functions: this module imports without them.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any, Iterator

from bertlook.data.documents import (DOCUMENT_COUNT_KEYS, Document, init_counts, make_document,
                                     plain_text_paragraphs)
from bertlook.errors import BertlookError
from bertlook.io_utils import sha256_file
from bertlook.pipeline.config import resolve_data_path

HF_SPEC_KEYS = ("path", "name", "split", "data_files", "streaming", "revision", "text_field", "title_field")
PACKAGED_BUILDERS = frozenset({"parquet", "json", "csv", "text", "arrow", "pandas", "webdataset"})
HUB_TIMEOUT_S = 10.0
HUB_ADVICE = ("to run without the hub, give wikipedia.hf_dataset local files "
              "({path: parquet, data_files: FILE}) or use wikipedia.dump")
_GLOB_CHARS = frozenset("*?[")


def dataset_label(spec: dict[str, Any]) -> str:
    name = f" ({spec['name']})" if spec.get("name") else ""
    files = f" data_files {spec['data_files']!r}" if spec.get("data_files") else ""
    return f"dataset {spec['path']!r}{name}{files}"


def is_hub_dataset(spec: dict[str, Any]) -> bool:
    """True when ``spec["path"]`` is neither a packaged builder nor an existing local path."""
    path = spec["path"]
    return path not in PACKAGED_BUILDERS and not Path(os.path.expanduser(path)).exists()


def _resolve_file(entry: str) -> str:
    if entry.startswith("package:"):
        return str(resolve_data_path(entry))
    return os.path.expanduser(entry)


def _map_data_files(data_files: Any, fn) -> Any:
    if isinstance(data_files, str):
        return fn(data_files)
    if isinstance(data_files, list):
        return [fn(f) for f in data_files]
    return {k: _map_data_files(v, fn) for k, v in data_files.items()}


def _flat_files(data_files: Any) -> list[str]:
    if data_files is None:
        return []
    if isinstance(data_files, str):
        return [data_files]
    if isinstance(data_files, list):
        return list(data_files)
    return [f for v in data_files.values() for f in _flat_files(v)]


def parse_spec_json(text: str) -> dict[str, Any]:
    """The ``--hf-dataset`` value: a JSON object (the spec of :mod:`bertlook.data.hf_corpus`)."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise BertlookError(f"--hf-dataset: invalid JSON ({err.msg} at character {err.pos}): {text!r}") from err
    if not isinstance(spec, dict):
        raise BertlookError(f"--hf-dataset: expected a JSON object such as "
                            f'{{"path": "parquet", "data_files": "articles.parquet"}}, got {text!r}')
    return spec


def normalize_spec(spec: Any) -> dict[str, Any]:
    """Check a spec and fill in its defaults; bad specs raise :class:`BertlookError` naming the key."""
    if not isinstance(spec, dict):
        raise BertlookError(f"hf_dataset must be a mapping with keys {', '.join(HF_SPEC_KEYS)}, got {spec!r}")
    unknown = sorted(set(spec) - set(HF_SPEC_KEYS))
    if unknown:
        raise BertlookError(f"hf_dataset: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(HF_SPEC_KEYS)})")
    path = spec.get("path")
    if not isinstance(path, str) or not path.strip():
        raise BertlookError(f"hf_dataset: 'path' must be a non-empty string, got {path!r}")
    out: dict[str, Any] = {"path": path, "name": spec.get("name"), "split": spec.get("split", "train"),
                           "data_files": spec.get("data_files"), "revision": spec.get("revision"),
                           "text_field": spec.get("text_field", "text"),
                           "title_field": spec.get("title_field", "title")}
    for key in ("name", "revision", "title_field"):
        if out[key] is not None and (not isinstance(out[key], str) or not out[key]):
            raise BertlookError(f"hf_dataset {path!r}: {key!r} must be a non-empty string or null, "
                                f"got {out[key]!r}")
    for key in ("split", "text_field"):
        if not isinstance(out[key], str) or not out[key]:
            raise BertlookError(f"hf_dataset {path!r}: {key!r} must be a non-empty string, got {out[key]!r}")
    files = out["data_files"]
    ok = (files is None or isinstance(files, str)
          or (isinstance(files, list) and files and all(isinstance(f, str) and f for f in files))
          or (isinstance(files, dict) and files and all(
              isinstance(k, str) and (isinstance(v, str) or (isinstance(v, list) and v and all(
                  isinstance(f, str) and f for f in v))) for k, v in files.items())))
    if not ok or files == "":
        raise BertlookError(f"hf_dataset {path!r}: 'data_files' must be a path, a list of paths or "
                            f"{{split: paths}}, got {files!r}")
    if path in PACKAGED_BUILDERS and files is None:
        raise BertlookError(f"hf_dataset {path!r}: the packaged builder {path!r} needs 'data_files'")
    hub = is_hub_dataset(out)
    streaming = spec.get("streaming")
    if streaming is None:
        streaming = hub
    if not isinstance(streaming, bool):
        raise BertlookError(f"hf_dataset {path!r}: 'streaming' must be true or false, got {streaming!r}")
    out["streaming"] = streaming
    if out["revision"] is not None and not hub:
        raise BertlookError(f"hf_dataset {path!r}: 'revision' applies to Hub datasets only "
                            "(this is a local dataset)")
    if not hub:
        if files is not None:
            out["data_files"] = _map_data_files(files, _resolve_file)
        out["path"] = path if path in PACKAGED_BUILDERS else os.path.expanduser(path)
    return out


def _local_files(spec: dict[str, Any]) -> list[Path]:
    """The local files a (normalised, non-Hub) spec reads, each checked to exist; sorted, no duplicates."""
    found: list[Path] = []
    for entry in _flat_files(spec["data_files"]):
        if _GLOB_CHARS & set(entry):
            matches = sorted(glob.glob(entry, recursive=True))
            if not matches:
                raise BertlookError(f"{dataset_label(spec)}: no file matches {entry!r}")
            found.extend(Path(m) for m in matches if Path(m).is_file())
        else:
            p = Path(entry)
            if not p.is_file():
                raise BertlookError(f"{dataset_label(spec)}: data file {entry} not found")
            found.append(p)
    if spec["path"] not in PACKAGED_BUILDERS:
        root = Path(spec["path"])
        if root.is_file():
            found.append(root)
        else:
            found.extend(p for p in sorted(root.rglob("*")) if p.is_file())
    return sorted(set(found))


def _hub_offline() -> bool:
    import huggingface_hub  # lazy: see the module docstring

    if huggingface_hub.constants.HF_HUB_OFFLINE:
        return True
    return any(os.environ.get(v, "").upper() in {"1", "ON", "YES", "TRUE"}
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


_RESOLVED: dict[tuple[str, str | None], str] = {}


def resolve_hub_revision(repo_id: str, revision: str | None) -> str:
    """The commit sha that ``revision`` (default: the main branch) of a Hub dataset points to.

    Asks the hub once per process (answers are remembered, so the description and the reading use
    the same commit); an unreachable hub, offline mode, an unknown dataset or revision raise
    :class:`BertlookError` naming the dataset, without retries.
    """
    key = (repo_id, revision)
    if key in _RESOLVED:
        return _RESOLVED[key]
    rev = f" (revision {revision})" if revision else ""
    what = f"cannot read Hugging Face dataset {repo_id!r}{rev}"
    if _hub_offline():
        raise BertlookError(f"{what}: offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and it is "
                            f"not a local path; {HUB_ADVICE}")
    import huggingface_hub  # lazy: see the module docstring
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError  # lazy: idem

    try:
        info = huggingface_hub.HfApi().dataset_info(repo_id, revision=revision, timeout=HUB_TIMEOUT_S)
    except GatedRepoError as err:
        raise BertlookError(f"{what}: the dataset is gated (log in with `hf auth login`); {HUB_ADVICE}") from err
    except RevisionNotFoundError as err:
        raise BertlookError(f"{what}: revision {revision!r} does not exist on the hub") from err
    except RepositoryNotFoundError as err:
        raise BertlookError(f"{what}: no such dataset on the hub (or it is private), and no such local "
                            f"path; {HUB_ADVICE}") from err
    except Exception as err:  # connection refused, DNS, timeout, proxy ...
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise BertlookError(f"{what}: the Hugging Face hub could not be reached ({type(err).__name__}"
                            f"{': ' + first if first else ''}); {HUB_ADVICE}") from err
    if not info.sha:
        raise BertlookError(f"{what}: the hub gave no commit for it")
    _RESOLVED[key] = info.sha
    return info.sha


def _why(err: BaseException) -> str:
    """``Type: first line`` of an exception and of its cause (datasets wraps the reader's error)."""
    parts = []
    while err is not None and len(parts) < 2:
        text = str(err).strip()
        parts.append(f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__)
        err = err.__cause__ or err.__context__
    return "; caused by ".join(parts)


def _load(spec: dict[str, Any]):
    """``datasets`` object of a normalised spec: (dataset, resolved revision or None)."""
    import datasets  # lazy: see the module docstring

    hub = is_hub_dataset(spec)
    revision = resolve_hub_revision(spec["path"], spec["revision"]) if hub else None
    if not hub:
        _local_files(spec)  # clear error for a missing file before datasets' own
    try:
        root = Path(spec["path"])
        if not hub and root.is_dir() and any((root / n).is_file() for n in ("state.json", "dataset_dict.json")):
            ds = datasets.load_from_disk(spec["path"])
            if isinstance(ds, datasets.DatasetDict):
                if spec["split"] not in ds:
                    raise BertlookError(f"{dataset_label(spec)}: no split {spec['split']!r} (splits: "
                                        f"{', '.join(ds)})")
                ds = ds[spec["split"]]
            if spec["streaming"]:
                ds = ds.to_iterable_dataset()
        else:
            ds = datasets.load_dataset(spec["path"], spec["name"], split=spec["split"],
                                       data_files=spec["data_files"], streaming=spec["streaming"],
                                       revision=revision)
    except BertlookError:
        raise
    except Exception as err:
        raise BertlookError(f"cannot load {dataset_label(spec)} (split {spec['split']!r}): "
                            f"{_why(err)}") from err
    return ds, revision


def _columns(ds) -> list[str] | None:
    names = getattr(ds, "column_names", None)
    return list(names) if names is not None else None


def _check_row(row: dict[str, Any], row_index: int, text_field: str, title_field: str | None, label: str) -> None:
    """The row's text and title fields must be present and strings; a null text is allowed (the caller
    skips and counts the row), a null title is not (it names the document)."""
    for field_name in (text_field, title_field):
        if field_name is None:
            continue
        if field_name not in row:
            raise BertlookError(f"{label}: row {row_index} has no field {field_name!r} "
                                f"(fields: {', '.join(row)})")
        value = row[field_name]
        if value is None and field_name == text_field:
            continue
        if value is None:
            raise BertlookError(f"{label}: row {row_index}: {field_name!r} is missing (null)")
        if not isinstance(value, str):
            raise BertlookError(f"{label}: row {row_index}: {field_name!r} must be a string, got "
                                f"{type(value).__name__}")


def iter_hf_documents(
    spec: dict[str, Any],
    *,
    max_articles: int | None = None,
    counts: dict[str, int] | None = None,
    language: str = "en",
    splitter: str = "spacy",
) -> Iterator[Document]:
    """Yield the documents of a Hugging Face dataset (rows in dataset order), lazily.

    Each row's ``text_field`` goes through :func:`bertlook.data.documents.plain_text_paragraphs` and
    :func:`bertlook.data.documents.make_document` (the dump path's steps after the markup is gone;
    ``language`` and ``splitter`` as in :func:`bertlook.data.documents.iter_documents`);
    its ``title_field`` is the title (the row number when ``title_field`` is null). Counts use the keys
    :data:`bertlook.data.documents.DOCUMENT_COUNT_KEYS`: ``pages_read`` is the rows read, the
    namespace and redirect counts stay 0; a row whose text is null is skipped and counted in
    ``null_text_rows_skipped`` (the run stops only when no usable document is left).
    ``max_articles`` stops after that many kept documents (with streaming, nothing beyond is
    fetched). A bad spec, a missing file, a missing column, a row whose text is neither a string nor
    null or whose title is not a string, an empty dataset or one without a usable document raise
    :class:`BertlookError` naming the dataset (and the row index).
    """
    spec = normalize_spec(spec)
    counts = init_counts(counts)
    if max_articles is not None and max_articles < 1:
        raise BertlookError(f"max_articles must be at least 1, got {max_articles}")
    ds, _revision = _load(spec)
    label = dataset_label(spec)
    text_field, title_field = spec["text_field"], spec["title_field"]
    columns = _columns(ds)
    if columns is not None:
        for field_name in (text_field, title_field):
            if field_name is not None and field_name not in columns:
                raise BertlookError(f"{label}: no column {field_name!r} (columns: {', '.join(columns)}); "
                                    "set text_field / title_field")
    kept = 0
    rows = iter(ds)
    row_index = -1
    while True:
        try:
            row = next(rows)
        except StopIteration:
            break
        except Exception as err:
            raise BertlookError(f"{label}: cannot read row {row_index + 1} ({_why(err)})") from err
        row_index += 1
        counts["pages_read"] += 1
        _check_row(row, row_index, text_field, title_field, label)
        if row[text_field] is None:
            counts["null_text_rows_skipped"] += 1
            continue
        title = row[title_field] if title_field is not None else str(row_index)
        doc = make_document(kept, title, plain_text_paragraphs(row[text_field], counts, language), counts,
                            language=language, splitter=splitter)
        if doc is None:
            continue
        yield doc
        kept += 1
        if max_articles is not None and kept >= max_articles:
            return
    if row_index < 0:
        raise BertlookError(f"{label}: the dataset (split {spec['split']!r}) has no rows")
    if kept == 0:
        raise BertlookError(f"{label}: no usable document in the dataset ({counts['pages_read']} rows read, "
                            f"{counts['null_text_rows_skipped']} with null text, "
                            f"{counts['documents_without_sentences']} without a usable sentence)")


def describe_hf_dataset(spec: dict[str, Any]) -> dict[str, Any]:
    """Provenance of a spec, for the step summaries and the manifest.

    ``{"source": "hf_dataset", "path", "name", "split", "streaming", "revision", "fingerprint",
    "text_field", "title_field", "data_files_sha256"}``: ``revision`` is the resolved Hub commit (null
    for local datasets), ``fingerprint`` the dataset's ``_fingerprint`` when not streaming (else null),
    ``data_files_sha256`` ``{path: sha256}`` of the local files read (null for Hub datasets).
    """
    spec = normalize_spec(spec)
    hub = is_hub_dataset(spec)
    fingerprint = None
    if spec["streaming"]:
        revision = resolve_hub_revision(spec["path"], spec["revision"]) if hub else None
    else:
        ds, revision = _load(spec)
        fingerprint = getattr(ds, "_fingerprint", None)
    files = None if hub else {str(p): sha256_file(p) for p in _local_files(spec)}
    return {"source": "hf_dataset", "path": spec["path"], "name": spec["name"], "split": spec["split"],
            "streaming": spec["streaming"], "revision": revision, "fingerprint": fingerprint,
            "text_field": spec["text_field"], "title_field": spec["title_field"],
            "data_files": spec["data_files"], "data_files_sha256": files}


__all__ = ["DOCUMENT_COUNT_KEYS", "HF_SPEC_KEYS", "dataset_label", "describe_hf_dataset", "is_hub_dataset",
           "iter_hf_documents", "normalize_spec", "parse_spec_json", "resolve_hub_revision"]
