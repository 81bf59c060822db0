"""A finished run from Python (a notebook): ``bertlook.open_run("results/offline-minilm")``.

:func:`open_run` reads what the workflow wrote under ``results/{run}/`` and nothing else: the manifest (the
config that made the run, the model, the package versions), every table as a pandas frame, each step's summary,
a head's report card, the figures, the comparison with the paper, and the maps the head explorer keeps
(``explorer.json``: six short dev sentences and two windows of a corpus segment, 8-bit quantised). The attention
stores themselves are temporary in the workflow; a run kept with ``extraction.keep_maps`` has them under
``attention/`` (:mod:`bertlook.attention.store` reads them).

Definitions: docs/definitions.md#head-explorer (the maps) and the README of each table's step.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bertlook.errors import BertlookError
from bertlook.reporting.atlas import read_atlas, tidy_frame
from bertlook.reporting.explorer import dequantised
from bertlook.reporting.run_files import read_json_file

KINDS = ("attention", "norm", "rollout")  # the map kinds explorer.json may hold per example


def _read_json(path: Path, what: str) -> dict[str, Any]:
    """A run's JSON object (:func:`bertlook.reporting.run_files.read_json_file`), a missing one named as such."""
    if not path.is_file():
        raise BertlookError(f"{path}: no {what} (is the run finished?)")
    return read_json_file(path, what)


@dataclass
class Run:
    """One finished run (``results/{run}/``): see :func:`open_run`."""

    path: Path
    manifest: dict[str, Any]
    _explorer: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The run's name (``{run_name}-{model label}``)."""
        return str(self.manifest.get("run", self.path.name))

    @property
    def config(self) -> dict[str, Any]:
        """The configuration that made the run (validated, defaults filled), as the manifest recorded it."""
        return self.manifest["config"]

    @property
    def model(self) -> dict[str, Any]:
        """The model: ``config`` (label, name_or_path, revision) and ``provenance`` (weights' hash, family,
        layers, heads)."""
        return self.manifest["model"]

    def tables(self) -> list[str]:
        """The names of the run's tables (``tables/<name>.csv``), sorted."""
        return sorted(p.stem for p in (self.path / "tables").glob("*.csv"))

    def table(self, name: str):
        """The table ``tables/<name>.csv`` as a pandas DataFrame (e.g. ``"table1"``, ``"head_report"``)."""
        path = self.path / "tables" / f"{name.removesuffix('.csv')}.csv"
        if not path.is_file():
            raise BertlookError(f"{path}: no such table in run {self.name}; it has: {', '.join(self.tables())}")
        return pd.read_csv(path)

    def summary(self, name: str) -> dict[str, Any]:
        """A step's summary (``tables/<name>.summary.json``): counts, exclusions, settings, provenance."""
        return _read_json(self.path / "tables" / f"{name}.summary.json", "step summary")

    def comparison(self):
        """The run's numbers beside the paper's (``comparison.csv``), as a DataFrame."""
        path = self.path / "comparison.csv"
        if not path.is_file():
            raise BertlookError(f"{path}: no comparison with the paper in run {self.name}")
        return pd.read_csv(path)

    def head_card(self, layer: int, head: int) -> dict[str, Any]:
        """The report card of head ``layer-head`` (1-based): one row of ``head_report.csv`` as a dict."""
        card = self.table("head_report")
        row = card[(card["layer"] == int(layer)) & (card["head"] == int(head))]
        if len(row) != 1:
            raise BertlookError(f"run {self.name}: no head {layer}-{head} (layers 1..{card['layer'].max()}, "
                                f"heads 1..{card['head'].max()})")
        return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.iloc[0].to_dict().items()}

    def figures(self) -> list[Path]:
        """The run's figures (``figures/*.png``), sorted by name."""
        return sorted((self.path / "figures").glob("*.png"))

    def _explorer_data(self) -> dict[str, Any]:
        if self._explorer is None:
            self._explorer = _read_json(self.path / "explorer.json", "head explorer data (explorer.enabled)")
        return self._explorer

    def examples(self):
        """The examples whose maps the run keeps (explorer.json): position, id, kind (sentence or segment
        window), length in tokens with [CLS]/[SEP], text, and the map kinds kept."""
        rows = [{"example": k, "id": s["id"], "kind": s.get("kind", "sentence"), "n": s["n"],
                 "text": " ".join(s["tokens"]), "maps": ",".join(m for m in KINDS if m in s)}
                for k, s in enumerate(self._explorer_data()["sentences"])]
        return pd.DataFrame(rows, columns=["example", "id", "kind", "n", "text", "maps"])

    def example(self, example: int) -> dict[str, Any]:
        """Example ``example`` (a position in :meth:`examples`): tokens, gold heads and relations (sentences)."""
        sentences = self._explorer_data()["sentences"]
        if not 0 <= int(example) < len(sentences):
            raise BertlookError(f"run {self.name}: no example {example} (0..{len(sentences) - 1})")
        s = sentences[int(example)]
        return {"id": s["id"], "kind": s.get("kind", "sentence"), "tokens": list(s["tokens"]),
                "heads": list(s.get("heads", [])), "rels": list(s.get("rels", []))}

    def maps(self, example: int, layer: int, head: int | None = None, kind: str = "attention"):
        """The ``n x n`` map of head ``layer-head`` on example ``example`` (rows attend to columns), a float32
        array with the explorer's 8-bit precision (multiples of 1/255); ``kind="rollout"`` is per layer
        (``head`` ignored)."""
        data = self._explorer_data()
        self.example(example)  # the position is checked there
        s = data["sentences"][int(example)]
        if kind not in KINDS or kind not in s:
            kept = [m for m in KINDS if m in s]
            raise BertlookError(f"run {self.name}: example {example} has no {kind!r} maps (it has: {', '.join(kept)})")
        L, H, n = data["num_layers"], data["num_heads"], s["n"]
        if not 1 <= int(layer) <= L or (kind != "rollout" and not (head is not None and 1 <= int(head) <= H)):
            raise BertlookError(f"run {self.name}: no head {layer}-{head} ({L} layers x {H} heads)")
        maps = dequantised(s[kind], (L, n, n) if kind == "rollout" else (L, H, n, n))
        return maps[int(layer) - 1] if kind == "rollout" else maps[int(layer) - 1, int(head) - 1]

    def _repr_html_(self) -> str:  # a notebook shows a run as a short summary

        m = self.model
        rows = [("run", self.name), ("model", f"{m['config'].get('name_or_path')} @ {m['config'].get('revision')}"),
                ("path", str(self.path)), ("tables", str(len(self.tables()))),
                ("figures", str(len(self.figures()))), ("bertlook", self.manifest["packages"].get("bertlook"))]
        cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
        return f"<table>{cells}</table>"


def open_run(path: str | os.PathLike) -> Run:
    """A finished run: ``path`` is its folder ``results/{run}`` (holding manifest.json)."""
    path = Path(path)
    manifest = _read_json(path / "manifest.json", "run manifest")
    for key in ("config", "model", "packages"):
        if key not in manifest:
            raise BertlookError(f"{path / 'manifest.json'}: not a bertlook run manifest (no {key!r})")
    return Run(path=path, manifest=manifest)


def open_atlas(path: str | os.PathLike) -> "pd.DataFrame":
    """An atlas (``bertlook atlas CONFIG``) as one tidy frame: ``path`` is its folder ``results/{name}-atlas`` or
    its ``atlas.json``. One row per model x metric (columns ``model, family, kind, status, section, metric,
    label, layer, depth, value, detail``; ``layer`` and ``depth`` empty) and per model x profile x layer
    (section ``profile``: ``depth`` = ``(layer - 0.5) / layers``); a model that did not run has one row, metric
    ``status``, its reason in ``detail``. Shares and accuracies are fractions; an empty ``value`` is a number
    the run did not measure. :func:`bertlook.reporting.atlas.tidy_rows` defines each metric."""
    return tidy_frame(read_atlas(path))
