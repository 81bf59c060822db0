"""The Fig 1 example's attention map, picked out below the figures: which example it is, the file that
holds its map, and reading that file back (the drawing is :mod:`bertlook.reporting.example_figures`).

``figures.example_index`` counts in the order of the unsharded store (length-sorted, longest first, ties by
id, over-long segments excluded), which every shard, and the extraction stream, can work out from the
segments file; the shard holding the example saves its map (``bertlook fig1-example``, ``extract-segments
--fig1-example``) and :func:`load_fig1_example` reads it back from the one file that has it. Of a long example
Fig 1 (and the head explorer) draws a window of tokens only (:func:`fig1_window`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from bertlook.attention.store import id_sort_key, open_store
from bertlook.data.segments import read_segments
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import load_partial

FIG1_KIND = "fig1-example"
FIG1_WINDOW = 30  # tokens drawn per panel: a 128-token segment's lines are too dense to read


def fig1_special(special_tokens: Iterable[Any]) -> set[str]:
    """The tokens Fig 1 (and its windows) treat as special: [CLS], [SEP] and the model's own ``special_tokens``
    (values of a store's ``meta["special_tokens"]``; None skipped: a decoder has no [CLS])."""
    return {"[CLS]", "[SEP]", *(str(v) for v in special_tokens if v is not None)}


def fig1_window(tokens: Sequence[str], special: set[str], size: int = FIG1_WINDOW) -> list[int]:
    """The token positions Fig 1 draws: all of a short example; of a longer one, its first token ([CLS]) and the
    ``size - 1`` tokens up to and including the first separator ([SEP]; without one, the tokens after the first),
    so that attention to [CLS], to [SEP], to the previous and the next token all show."""
    n = len(tokens)
    if n <= size:
        return list(range(n))
    sep = next((i for i, t in enumerate(tokens) if i > 0 and str(t) in special), None)
    end = max(size - 1, sep if sep is not None else size - 1)
    return [0, *range(end - (size - 2), end + 1)]


def example_id_from_segments(segments_path, example_index: int, max_seq_len: int | None) -> tuple[Any, int]:
    """``(id, n)``: the id of the ``example_index``-th example of an unsharded store of these segments
    (storage order: longest first, ties by id; segments over ``max_seq_len`` excluded) and ``n``, the
    number of examples such a store holds. Out of range is an error."""
    kept = [s for s in read_segments(segments_path) if max_seq_len is None or len(s["tokens"]) <= int(max_seq_len)]
    kept.sort(key=lambda s: (-len(s["tokens"]), id_sort_key(s["id"])))
    if not 0 <= int(example_index) < len(kept):
        raise BertlookError(
            f"{segments_path}: example index {example_index} out of range (the store holds {len(kept)} examples)"
        )
    return kept[int(example_index)]["id"], len(kept)


def fig1_example_partial(store_path, segments_path, example_index: int = 0):
    """``(meta, arrays)``: the Fig 1 example if the (shard) store holds it, else ``found: false``."""
    store = open_store(store_path, level="token")
    target, n_total = example_id_from_segments(segments_path, example_index, store.meta.get("max_seq_len"))
    k = next((k for k, rec in enumerate(store.records) if rec["id"] == target), None)
    return fig1_partial(where=store_path, example_index=example_index, target=target, n_total=n_total,
                        num_layers=store.num_layers, num_heads=store.num_heads,
                        special_tokens=store.meta.get("special_tokens") or {},
                        record=None if k is None else store.records[k], attn=None if k is None else store.get(k))


def fig1_partial(*, where, example_index: int, target, n_total: int, num_layers: int, num_heads: int,
                 special_tokens: dict, record: dict | None = None, attn=None):
    """``(meta, arrays)`` of a Fig 1 example file: ``record`` / ``attn`` ``[layer, head, n, n]`` of the example
    when this shard (or the extraction stream) holds it, else None (``found: false``)."""
    meta = {"attention": str(where), "example_index": int(example_index), "id": target,
            "n_examples_total": int(n_total), "num_layers": int(num_layers), "num_heads": int(num_heads),
            "special_tokens": dict(special_tokens), "found": record is not None}
    if record is None:
        return meta, {"attn": np.zeros((0,), dtype=np.float16)}
    meta["tokens"] = list(record["tokens"])
    return meta, {"attn": np.asarray(attn, dtype=np.float16)}


def load_fig1_example(paths: Sequence[Any]):
    """``(meta, attn)`` of the one file (of the shards' ``fig1-example`` files) that holds the example."""
    found = []
    for path in paths:
        meta, arrays = load_partial(path, FIG1_KIND)
        if meta.get("found"):
            found.append((path, meta, arrays["attn"]))
    if len(found) != 1:
        listed = ", ".join(str(p) for p in paths)
        raise BertlookError(f"{listed}: {len(found)} of the Fig 1 example files hold the example (expected one; "
                            "give every shard's file of the same run)")
    path, meta, attn = found[0]
    L, H, n = meta["num_layers"], meta["num_heads"], len(meta["tokens"])
    if tuple(attn.shape) != (L, H, n, n):
        raise BertlookError(f"{path}: example map of shape {list(attn.shape)}, expected {[L, H, n, n]}")
    return meta, attn


