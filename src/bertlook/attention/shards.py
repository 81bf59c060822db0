"""The attention side of sharding: which examples of a store a statistic reads (the same whatever the
sharding) and merging the shard stores of one extraction into one store.

The shard arithmetic, the partial files and the summaries' merge rules are in
:mod:`bertlook.pipeline.sharding` (no store access there).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from bertlook.attention.store import id_sort_key, open_store, publish_store
from bertlook.data.segments import read_segments
from bertlook.errors import BertlookError, check_at_least
from bertlook.io_utils import remove_stale_temporaries, temp_prefix, umask, write_error
from bertlook.pipeline.sharding import check_same_map_kind, merge_store_meta, same_value


def first_segment_ids(segments_path, max_examples: int) -> set:
    """Ids of the first ``max_examples`` segments of a segments file."""
    return {seg["id"] for seg in read_segments(segments_path)[: max(0, int(max_examples))]}


def select_examples(store, max_examples: int | None = None, segments=None) -> list[int]:
    """Store positions (storage order) of the examples a statistic uses.

    ``max_examples`` None: all. Otherwise, with ``segments`` (the segments file the store was
    extracted from): the examples among the **first N segments of that file** (the same examples
    whatever the sharding); without it: the first N examples of the store (storage order).
    """
    n = len(store)
    if max_examples is None:
        return list(range(n))
    check_at_least("max_examples", max_examples, 0)
    if segments is None:
        return list(range(min(n, int(max_examples))))
    wanted = first_segment_ids(segments, max_examples)
    return [k for k, rec in enumerate(store.records) if rec.get("id") in wanted]


# --------------------------------------------------------------------------------------------
# merging stores

def _order_key(level: str):
    def key(rec: dict[str, Any]):
        n = rec.get("n_wordpieces") if level == "word" and isinstance(rec.get("n_wordpieces"), int) else rec["n"]
        return (-int(n), id_sort_key(rec["id"]))

    return key


def _link_or_copy(src: Path, dst: Path, link: bool) -> str:
    if link:
        try:
            os.link(src, dst)
            return "link"
        except OSError:
            pass
    shutil.copyfile(src, dst)
    return "copy"


def merge_stores(stores: Sequence[Any], out_dir, *, link: bool = True) -> dict[str, Any]:
    """Gather shard stores into one store at ``out_dir``; returns what was done.

    Every input is opened (validated) with ``open_store``; layouts must agree and ids be unique.
    Shard files holding examples are hard-linked (``link``; copied when linking fails) as
    ``shard-NNNNN.bin`` in input order, index entries keep their offsets with the shard ids
    renumbered, and, for stores written in length-sorted order, the index is put into the order one
    unsharded run writes (longest first by model tokens, ties by id), so every reader sees the same
    sequence of examples whatever the sharding. ``meta.json``: layout recomputed, counts summed,
    exclusions concatenated (:func:`merge_store_meta`). Built under a temporary name beside
    ``out_dir``, renamed into place, then opened again to validate.
    """
    if not stores:
        raise BertlookError("merge-stores: give at least one --store")
    opened = [open_store(s) for s in stores]
    for key in ("level", "num_layers", "num_heads"):
        same_value([getattr(s, key) for s in opened], key, [s.path for s in opened])
    check_same_map_kind([str(s.meta.get("map", "attention")) for s in opened], [s.path for s in opened])
    order = same_value([s.meta.get("order") for s in opened], "store order", [s.path for s in opened])
    entries, sources = _merged_index(opened)
    if order == "length-sorted":
        entries.sort(key=_order_key(opened[0].level))
    meta = merge_store_meta([s.meta for s in opened], where=[s.path for s in opened])
    meta["n_shards"] = max(1, len(sources))
    meta["n_examples"] = len(entries)
    layout = {k: meta[k] for k in ("format", "num_layers", "num_heads", "dtype", "level", "n_examples", "n_shards")}
    meta = {**layout, "excluded": meta.get("excluded") or {}, **meta, **layout}
    out = Path(out_dir)
    how = _write_merged(out, sources, entries, meta, link=link)
    merged = open_store(out)  # the layout of the result is validated like any store's
    return {"out_dir": str(out), "n_examples": len(merged), "n_shard_files": len(sources),
            "linked": how["link"], "copied": how["copy"], "inputs": [str(s.path) for s in opened]}


def _merged_index(opened: Sequence[Any]) -> tuple[list[dict[str, Any]], list[Path]]:
    """``(entries, sources)``: the index entries of every store in input order, their shard ids renumbered to
    positions in ``sources`` (the shard files holding examples); an id in two stores is an error."""
    seen: dict[Any, Path] = {}
    entries: list[dict[str, Any]] = []
    shard_map: dict[tuple[int, int], int] = {}
    sources: list[Path] = []
    for p, store in enumerate(opened):
        used = sorted({rec["shard"] for rec in store.records})
        for old in used:
            shard_map[(p, old)] = len(sources)
            sources.append(store.path / f"shard-{old:05d}.bin")
        for rec in store.records:
            key = id_sort_key(rec["id"])
            if key in seen:
                raise BertlookError(f"{store.path}: example {rec['id']!r} is also in {seen[key]} (overlapping shards?)")
            seen[key] = store.path
            entry = dict(rec)
            entry["shard"] = shard_map[(p, rec["shard"])]
            entries.append(entry)
    return entries, sources


def _write_merged(out: Path, sources: Sequence[Path], entries: list[dict[str, Any]], meta: dict[str, Any], *,
                  link: bool) -> dict[str, int]:
    """Build the merged store under a temporary name beside ``out`` (shard files linked or copied, index, meta)
    and swap it into place; returns how many shard files were linked and copied."""
    how: dict[str, int] = {"link": 0, "copy": 0}
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(out)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out, "tmp-"), dir=out.parent))
        os.chmod(tmp, 0o777 & ~umask())
        for k, src in enumerate(sources):
            how[_link_or_copy(src, tmp / f"shard-{k:05d}.bin", link)] += 1
        if not sources:
            (tmp / "shard-00000.bin").write_bytes(b"")
        publish_store(tmp, out, entries, meta)
        tmp = None
    except OSError as err:
        raise write_error(out, err, what="attention store") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return how


__all__ = ["first_segment_ids", "merge_stores", "select_examples"]
