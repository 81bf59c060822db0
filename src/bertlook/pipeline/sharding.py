"""Scale-out: extraction shards, additive partial sums, merging word-level stores.

``extraction.shards: K`` splits every model-running step into K jobs over **contiguous ranges of its
input by index**: shard ``i`` of ``K`` (1-based) of ``N`` items is ``[(i-1)*N//K, i*N//K)`` of the
segments file (``extract-segments``, ``gradients``) or of the treebank file (``extract-words``). The
statistics that follow are additive over examples, so each shard writes **partial sums and counts**
(never means) to a plain ``.npz`` file (:func:`save_partial`, no pickle: float/int arrays plus one
JSON string) and a gather step adds them up in shard order and divides once:

* surface statistics (``bertlook surface-stats --out-partial`` / ``--partial``): per-column sums and counts;
* Jensen-Shannon divergences (``bertlook cluster-heads --out-partial`` / ``--partial``): the summed matrix,
  then MDS on the reduced matrix;
* gradients (``bertlook gradients --shard I/K --out-partial`` / ``--partial``): summed ``|dL/dA|``
  and entry counts, summed per-segment means, attention mass sums, loss sums;
* the Fig 1 example (``bertlook fig1-example``): the shard that holds it saves its one map.

With K = 1 each reduction adds one partial to zeros, so the numbers are bit-identical to an
unsharded computation. Word-level stores are gathered by :func:`merge_stores` (``bertlook
merge-stores``): shard files are hard-linked (copied where the file system cannot link), the indexes
are concatenated with shard ids renumbered and put back into the unsharded store's order
(length-sorted, ties by id), and the result is validated with
:func:`bertlook.attention.store.open_store`; Table 1 and the probes read one store as before.
Extraction summaries are gathered by :func:`merge_summaries` (``bertlook gather-extraction`` for the
segments, ``merge-stores --part-summary`` for the words): counts are summed, settings must agree,
id lists are concatenated, rates recomputed.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any, Sequence

from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path

PARTIAL_FORMAT = "bertlook-partial/1"
_META_KEY = "__meta__"
_SHARD_SPEC = re.compile(r"^\s*(\d+)\s*(?:/|of)\s*(\d+)\s*$")


# --------------------------------------------------------------------------------------------
# shard ranges

def parse_shard(text: Any) -> tuple[int, int]:
    """``"2/4"`` or ``"2of4"`` -> ``(2, 4)`` (1-based shard index, number of shards)."""
    m = _SHARD_SPEC.match(str(text))
    if not m:
        raise BertlookError(f"--shard: expected I/K (e.g. 2/4), got {text!r}")
    i, k = int(m.group(1)), int(m.group(2))
    if k < 1 or not 1 <= i <= k:
        raise BertlookError(f"--shard {text!r}: need 1 <= I <= K")
    return i, k


def shard_label(i: int, k: int) -> str:
    """File-name label of shard ``i`` of ``k``: ``"1of1"``, ``"03of12"`` (zero-padded, sorts in order)."""
    return f"{int(i):0{len(str(int(k)))}d}of{int(k)}"


def shard_labels(k: int) -> list[str]:
    return [shard_label(i, k) for i in range(1, int(k) + 1)]


def shard_range(n: int, i: int, k: int) -> tuple[int, int]:
    """``[start, stop)`` of shard ``i`` (1-based) of ``k`` over ``n`` items: contiguous, by index,
    sizes differing by at most one, together exactly ``range(n)``."""
    if k < 1 or not 1 <= i <= k or n < 0:
        raise BertlookError(f"bad shard {i}/{k} of {n} items")
    return (i - 1) * n // k, i * n // k


def shard_info(n: int, i: int, k: int) -> dict[str, Any]:
    start, stop = shard_range(n, i, k)
    return {"index": int(i), "count": int(k), "label": shard_label(i, k), "start": start, "stop": stop,
            "n_total": int(n)}


# --------------------------------------------------------------------------------------------
# example selection ("the first N segments")

# --------------------------------------------------------------------------------------------
# partial files (.npz without pickle)

def save_partial(path, kind: str, meta: dict[str, Any], arrays: dict[str, Any]) -> Path:
    """Write a partial-sum file: numeric ``arrays`` plus ``meta`` (JSON in a unicode array), atomically."""
    import numpy as np  # lazy: numpy, not needed at DAG build (the Snakefile imports this module)

    out = {}
    for name, value in arrays.items():
        a = np.asarray(value)
        if a.dtype == object:
            raise BertlookError(f"partial {name!r}: object arrays are not allowed")
        out[name] = a
    if _META_KEY in out:
        raise BertlookError(f"partial array name {_META_KEY!r} is reserved")
    text = json.dumps({"format": PARTIAL_FORMAT, "kind": kind, **meta}, ensure_ascii=False)
    out[_META_KEY] = np.array(text)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **out)
    return Path(path)


def load_partial(path, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(meta, arrays)`` of a partial file written by :func:`save_partial` for ``kind`` (no pickle)."""
    import numpy as np  # lazy: numpy, not needed at DAG build (the Snakefile imports this module)

    path = Path(path)
    if not path.is_file():
        raise BertlookError(f"{path}: partial file not found")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise BertlookError(f"{path}: not a partial-sum file (.npz): {err}") from None
    raw = arrays.pop(_META_KEY, None)
    try:
        meta = json.loads(str(raw[()])) if raw is not None else None
    except (ValueError, TypeError):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != PARTIAL_FORMAT:
        raise BertlookError(f"{path}: not a bertlook partial-sum file (no {PARTIAL_FORMAT!r} metadata)")
    if meta.get("kind") != kind:
        raise BertlookError(f"{path}: a {meta.get('kind')!r} partial, expected {kind!r}")
    return meta, arrays


def partial_metas(partials: Sequence[Any], where: Sequence[Any] | None, what: str,
                  *, by_store: bool = True) -> tuple[list[Any], list[dict[str, Any]]]:
    """``(where, metas)`` of the ``(meta, arrays)`` partials a reducer adds: ``where`` as given, else each
    partial's store (``meta["attention"]``; ``by_store=False``: ``partial k``); none at all is an error."""
    if not partials:
        raise BertlookError(f"no partial {what} to reduce")
    if where is None:
        where = [m.get("attention") if by_store else f"partial {k + 1}" for k, (m, _) in enumerate(partials)]
    return list(where), [m for m, _ in partials]


def same_value(values: Sequence[Any], what: str, where: Sequence[Any]) -> Any:
    """The common value of ``values``; an error naming both files when two differ."""
    for v, w in zip(values[1:], where[1:]):
        if v != values[0]:
            raise BertlookError(f"{w}: {what} {v!r} differs from {values[0]!r} in {where[0]} "
                                "(partials of different runs?)")
    return values[0] if values else None


# --------------------------------------------------------------------------------------------
# merging summaries and store metadata

#: how a key of an extraction summary / store meta is gathered over shards
SUM_KEYS = frozenset({
    "n_input", "n_examples", "excluded_too_long", "tokens", "padded_tokens", "seconds", "estimated_bytes",
    "estimated_map_bytes", "unk_tokens", "non_special_tokens", "examples_with_unk", "examples",
    "n_sentences", "n_extracted", "excluded_alignment", "n_words", "n_split_words", "alignment", "too_long",
    "n_shards", "excluded_straddling_token", "map_bytes",
})
#: mappings of counts added key by key (extract-words: sentences excluded per alignment reason)
DICT_SUM_KEYS = frozenset({"excluded_alignment_reasons"})
CONCAT_KEYS = {"excluded_ids": None, "excluded_too_long_ids": None, "excluded_alignment_ids": None,
               "alignment_ids": None, "too_long_ids": None, "unk_examples": 5, "alignment_errors": 20}
#: lists (or lists of lists) of numbers added element by element: the ``norms`` sums and counts of
#: an extraction with ``--norms-out`` (:func:`bertlook.attention.norms.norms_summary`)
ELEMENTWISE_SUM_KEYS = frozenset({"value_norm_sums", "value_norm_counts"})
DROP_KEYS = frozenset({"shard", "store_meta"})
FIRST_KEYS = frozenset({"device_warning"})
MIN_KEYS = frozenset({"disk_free_bytes"})


def _merge_values(key: str, values: list[Any], where: list[Any]) -> Any:
    if key in SUM_KEYS and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        total = sum(values[1:], values[0])
        return round(total, 4) if key == "seconds" else total
    if key in ELEMENTWISE_SUM_KEYS:
        return _add_elementwise(key, values, where)
    if key in DICT_SUM_KEYS and all(isinstance(v, dict) for v in values):
        total: dict[str, Any] = {}
        for v in values:
            for k, n in v.items():
                total[k] = total.get(k, 0) + n
        return total
    if key in CONCAT_KEYS and all(isinstance(v, list) for v in values):
        out = [x for v in values for x in v]
        cap = CONCAT_KEYS[key]
        return out[:cap] if cap is not None else out
    if key in FIRST_KEYS:
        return next((v for v in values if v is not None), None)
    if key in MIN_KEYS:
        present = [v for v in values if v is not None]
        return min(present) if present else None
    if all(isinstance(v, dict) for v in values):
        return merge_summaries(values, where=where)
    if all(v == values[0] for v in values):
        return values[0]
    return values  # differs by shard (e.g. out_dir): kept per shard


def _add_elementwise(key: str, values: list[Any], where: list[Any]) -> Any:
    """Element-by-element sum of equally shaped nested lists of numbers, added in the order given."""
    def shape(v: Any) -> Any:  # nested tuple of lengths, None when a leaf is not a number
        if isinstance(v, list):
            inner = [shape(x) for x in v]
            return None if any(x is None for x in inner) else ("list", tuple(inner))
        return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    want = shape(values[0])
    for v, w in zip(values, where):
        got = shape(v)
        if got is None or got != want:
            raise BertlookError(f"{w}: {key!r} is not a list of numbers shaped like the one in {where[0]} "
                                "(summaries of different models?)")

    def add(a: Any, b: Any) -> Any:
        return [add(x, y) for x, y in zip(a, b)] if isinstance(a, list) else a + b

    total = values[0]
    for v in values[1:]:
        total = add(total, v)
    return total


def merge_summaries(parts: Sequence[dict[str, Any]], *, where: Sequence[Any] | None = None) -> dict[str, Any]:
    """Gather per-shard extraction summaries (or store metas) into the unsharded one.

    Counts are summed (:data:`SUM_KEYS`), id lists concatenated (:data:`CONCAT_KEYS`, capped as in a
    single run), settings kept when equal (a list of the per-shard values otherwise), rates and
    fractions recomputed from the summed counts; the per-shard ``shard`` / ``store_meta`` entries are
    dropped. One part comes back unchanged (apart from the dropped keys).
    """
    parts = list(parts)
    if not parts:
        raise BertlookError("nothing to merge")
    where = list(where) if where is not None else [f"part {i + 1}" for i in range(len(parts))]
    keys: list[str] = []
    for p in parts:
        keys += [k for k in p if k not in keys]
    out: dict[str, Any] = {}
    for key in keys:
        if key in DROP_KEYS:
            continue
        have = [(p[key], w) for p, w in zip(parts, where) if key in p]  # a key some shards lack: the others'
        out[key] = _merge_values(key, [v for v, _ in have], [w for _, w in have])
    if len(parts) > 1:
        _recompute_rates(out)
    return out


def _recompute_rates(out: dict[str, Any]) -> None:
    if "unk_rate" in out and isinstance(out.get("unk_tokens"), int) and isinstance(out.get("non_special_tokens"), int):
        out["unk_rate"] = out["unk_tokens"] / out["non_special_tokens"] if out["non_special_tokens"] else None
    if "split_word_fraction" in out and isinstance(out.get("n_words"), int):
        out["split_word_fraction"] = round(out["n_split_words"] / out["n_words"], 6) if out["n_words"] else None
    if "tokens_per_second" in out and isinstance(out.get("seconds"), (int, float)) and isinstance(out.get("tokens"), int):
        out["tokens_per_second"] = round(out["tokens"] / out["seconds"], 1) if out["seconds"] else None
    for value in out.values():
        if isinstance(value, dict):
            _recompute_rates(value)


def shard_entry(summary: dict[str, Any], path: Any) -> dict[str, Any]:
    """What the gathered summary keeps of one shard (a list entry: per-shard, never summed)."""
    info = summary.get("shard") or {}
    return {"shard": info.get("label"), "start": info.get("start"), "stop": info.get("stop"),
            "n_examples": summary.get("n_examples"), "seconds": summary.get("seconds"),
            "tokens_per_second": summary.get("tokens_per_second"), "device": summary.get("device"),
            "summary": str(path)}


def read_json_object(path, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object (``what`` names it in errors: missing, unreadable, invalid)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise BertlookError(f"{path}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BertlookError(f"{path}: cannot read {what}: {err}") from None
    except json.JSONDecodeError as err:
        raise BertlookError(f"{path}:{err.lineno}: {what} is not valid JSON: {err.msg}") from None
    if not isinstance(data, dict):
        raise BertlookError(f"{path}: {what} must be a JSON object")
    return data


def check_shards(summaries: Sequence[dict[str, Any]], paths: Sequence[Any]) -> None:
    """The summaries are shards 1..K of one K-way split, in order (or one unsharded summary)."""
    infos = [s.get("shard") for s in summaries]
    if all(i is None for i in infos) and len(infos) == 1:
        return
    for pos, (info, path) in enumerate(zip(infos, paths), 1):
        if not isinstance(info, dict):
            raise BertlookError(f"{path}: not the summary of a shard (no 'shard' entry; run with --shard I/K)")
        if info.get("count") != len(summaries) or info.get("index") != pos:
            raise BertlookError(f"{path}: shard {info.get('index')}/{info.get('count')}, expected {pos}/{len(summaries)} "
                                "(give every shard's summary once, in order)")


def gather_extraction(summary_paths: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(summary, store_meta)`` of the unsharded extraction from the shards' summaries."""
    summaries = [read_json_object(p, "extraction summary") for p in summary_paths]
    check_shards(summaries, summary_paths)
    metas = []
    for s, p in zip(summaries, summary_paths):
        meta = s.get("store_meta")
        if not isinstance(meta, dict):
            raise BertlookError(f"{p}: no 'store_meta' (written by `bertlook extract-segments --shard I/K`)")
        metas.append(meta)
    summary = merge_summaries(summaries, where=summary_paths)
    summary["shards"] = [shard_entry(s, p) for s, p in zip(summaries, summary_paths)]
    meta = merge_store_meta(metas, where=summary_paths)
    return summary, meta


def check_same_map_kind(kinds: Sequence[str], where: Sequence[Any]) -> str:
    """The common ``meta.map`` of stores (``"attention"`` where absent); a clear error when attention
    maps and norm-based maps (Kobayashi et al. 2020) would be mixed."""
    for kind, w in zip(kinds[1:], where[1:]):
        if kind != kinds[0]:
            raise BertlookError(
                f"{w}: holds {kind!r} maps (meta.json map {kind!r}) but {where[0]} holds {kinds[0]!r} maps: "
                "attention stores and norm-based stores cannot be merged (give the shards of one kind)"
            )
    return kinds[0] if kinds else "attention"


def merge_store_meta(metas: Sequence[dict[str, Any]], *, where: Sequence[Any]) -> dict[str, Any]:
    """The meta.json of the unsharded store from the shards' meta.json."""
    for key in ("format", "num_layers", "num_heads", "dtype", "level"):
        same_value([m.get(key) for m in metas], f"store meta {key!r}", where)
    check_same_map_kind([str(m.get("map", "attention")) for m in metas], where)
    merged = merge_summaries(metas, where=where)
    merged.pop("shards", None)
    merged["n_examples"] = sum(int(m.get("n_examples", 0)) for m in metas)
    if len(metas) > 1:
        merged["shards"] = [m.get("shard") for m in metas]
    return merged
