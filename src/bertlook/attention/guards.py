"""Guards of the model-running steps (``extract-segments``, ``extract-words``, ``coref-extract``), checked
before the first forward pass: the tokenizer's unknown-token rate (:func:`unk_statistics` /
:func:`check_unk_rate`, ``--max-unk-rate``) and the free disk space of the stores to be written
(:func:`check_disk_space` / :func:`check_stores_space`, with :func:`bertlook.attention.store.estimate_store_bytes`).

Definitions: docs/definitions.md#token-level-extraction
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from bertlook.errors import BertlookError

STORE_DTYPE = "float16"
DEFAULT_MAX_UNK_RATE = 0.05
UNK_EXAMPLES_SHOWN = 5
#: the fields of :func:`unk_statistics` that go into a step's summary (:func:`unk_summary`)
UNK_SUMMARY_KEYS = ("unk_token", "unk_tokens", "non_special_tokens", "unk_rate", "examples_with_unk", "unk_examples")
DISK_MARGIN_FRACTION = 0.05
DISK_MARGIN_MIN_BYTES = 100 * 2**20


# --------------------------------------------------------------------------------------------
# unknown tokens

def check_max_unk_rate(value: Any) -> float:
    """``value`` as a float in [0, 1] (the ``--max-unk-rate`` / ``extraction.max_unk_rate`` setting)."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise BertlookError(f"max unknown-token rate must be a number in [0, 1], got {value!r}") from None
    if not (0.0 <= rate <= 1.0) or math.isnan(rate):
        raise BertlookError(f"max unknown-token rate must be in [0, 1], got {value!r}")
    return rate


def segment_unk_words(tokenizer) -> Callable[[dict[str, Any], list[int]], list[str]]:
    """``words_of`` for segments: the words of ``text_a``/``text_b`` the tokenizer maps to its unknown token.

    Without texts, each unknown token is shown with its neighbouring tokens.
    """
    unk_id = getattr(tokenizer, "unk_token_id", None)

    def words_of(record: dict[str, Any], positions: list[int]) -> list[str]:
        out: list[str] = []
        for key in ("text_a", "text_b"):
            text = record.get(key)
            if not isinstance(text, str) or not text:
                continue
            try:
                enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                                verbose=False)
            except Exception:  # pragma: no cover - a tokenizer without offsets
                continue
            out += [text[s:e] for i, (s, e) in zip(enc["input_ids"], enc["offset_mapping"]) if i == unk_id]
        if out:
            return out
        toks = record.get("tokens") or []
        return [" ".join(toks[max(0, p - 1):p + 2]) for p in positions]

    return words_of


def aligned_unk_words(alignments: dict[Any, Any]) -> Callable[[dict[str, Any], list[int]], list[str]]:
    """``words_of`` for word-level examples: the record's ``words`` that hold an unknown token."""

    def words_of(record: dict[str, Any], positions: list[int]) -> list[str]:
        al = alignments.get(record.get("id"))
        words = record.get("words") or []
        if al is None:
            return []
        idx = sorted({al.word_of_token[p] for p in positions if 0 <= al.word_of_token[p] < len(words)})
        return [str(words[w]) for w in idx]

    return words_of


def unk_statistics(examples: Iterable[Sequence[Any]], tokenizer, *,
                   words_of: Callable[[dict[str, Any], list[int]], list[str]] | None = None) -> dict[str, Any]:
    """Count the tokenizer's unknown token in ``examples`` (``(record, input_ids, ...)``, before any exclusion).

    Returns ``unk_token``, ``unk_tokens``, ``non_special_tokens`` (tokens that are not [CLS], [SEP],
    [PAD], [MASK] ...; [UNK] counts as non-special), ``unk_rate`` (= unk_tokens / non_special_tokens,
    None without tokens), ``examples``, ``examples_with_unk`` and ``unk_examples``: the first
    :data:`UNK_EXAMPLES_SHOWN` examples with an unknown token (``id``, ``unk_tokens``, ``words``:
    the words that became the unknown token, from ``words_of(record, positions)``).
    """
    unk_id = getattr(tokenizer, "unk_token_id", None)
    if unk_id is not None and unk_id in {getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)}:
        # GPT-2 style: <|endoftext|> is UNK, BOS and EOS at once, and a byte-level BPE never emits an unknown
        # token: every occurrence is the sequence marker (e.g. around a decoder's word-level sentence)
        unk_id = None
    special = set(getattr(tokenizer, "all_special_ids", None) or ()) - {unk_id}
    n_unk = n_tokens = n_examples = 0
    first: list[tuple[dict[str, Any], list[int]]] = []
    n_with = 0
    for ex in examples:
        record, ids = ex[0], ex[1]
        n_examples += 1
        n_tokens += sum(1 for i in ids if i not in special)
        if unk_id is None:
            continue
        positions = [k for k, i in enumerate(ids) if i == unk_id]
        if positions:
            n_unk += len(positions)
            n_with += 1
            if len(first) < UNK_EXAMPLES_SHOWN:
                first.append((record, positions))
    shown = []
    for record, positions in first:
        words = words_of(record, positions) if words_of is not None else []
        shown.append({"id": record.get("id"), "unk_tokens": len(positions), "words": [str(w) for w in words[:5]]})
    return {
        "unk_token": getattr(tokenizer, "unk_token", None),
        "unk_tokens": n_unk,
        "non_special_tokens": n_tokens,
        "unk_rate": (n_unk / n_tokens) if n_tokens else None,
        "examples": n_examples,
        "examples_with_unk": n_with,
        "unk_examples": shown,
    }


def check_unk_rate(stats: dict[str, Any], max_rate: float, model_spec: str, *, what: str = "examples",
                   step: str = "extract-segments") -> None:
    """Log the unknown-token count; raise :class:`BertlookError` when ``unk_rate > max_rate``."""
    max_rate = check_max_unk_rate(max_rate)
    rate = stats.get("unk_rate")
    unk = stats.get("unk_token") or "[UNK]"
    shown_rate = "n/a" if rate is None else f"{100 * rate:.3f}%"
    print(f"{step}: {stats['unk_tokens']} unknown tokens ({unk}) among {stats['non_special_tokens']} tokens "
          f"({shown_rate}) in {stats['examples_with_unk']} of {stats['examples']} {what}; max {100 * max_rate:g}%",
          file=sys.stderr, flush=True)
    if rate is None or rate <= max_rate:
        return
    listed = "; ".join(
        f"{e['id']!r}: " + (", ".join(repr(w) for w in e["words"]) or f"{e['unk_tokens']} x {unk}")
        for e in stats["unk_examples"]
    )
    raise BertlookError(
        f"model {model_spec!r}: {stats['unk_tokens']} of {stats['non_special_tokens']} tokens "
        f"({100 * rate:.2f}%) are the unknown token {unk}, in {stats['examples_with_unk']} of {stats['examples']} "
        f"{what}; more than the maximum {100 * max_rate:g}% (--max-unk-rate, extraction.max_unk_rate). The "
        f"tokenizer does not fit this text (wrong vocabulary, or a lower-cased vocabulary on cased text?). "
        f"First {what} with {unk} (id: words): {listed}"
    )


def unk_summary(stats: dict[str, Any], max_unk_rate: float) -> dict[str, Any]:
    """The summary fields of :func:`unk_statistics` (:data:`UNK_SUMMARY_KEYS`) and ``max_unk_rate``."""
    return {**{key: stats[key] for key in UNK_SUMMARY_KEYS}, "max_unk_rate": float(max_unk_rate)}


# --------------------------------------------------------------------------------------------
# disk space

def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _existing_parent(path: Path) -> Path:
    path = path.absolute()
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path(path.anchor or ".")  # pragma: no cover


def check_disk_space(out_dir, needed: int, *, what: str = "attention store", advice: str = "") -> dict[str, Any]:
    """Raise :class:`BertlookError` when the file system of ``out_dir`` lacks ``needed`` bytes plus a margin.

    The store is built beside ``out_dir`` and renamed into place, so the free space of the nearest
    existing parent of ``out_dir`` is checked (``shutil.disk_usage``); the margin is 5% of
    ``needed``, at least 100 MiB. Returns ``{"disk_free_bytes", "disk_checked_path", "disk_margin_bytes"}``.
    """
    where = _existing_parent(Path(out_dir).parent)
    margin = max(int(DISK_MARGIN_FRACTION * needed), DISK_MARGIN_MIN_BYTES)
    try:
        free = int(shutil.disk_usage(where).free)
    except OSError as err:  # pragma: no cover - e.g. a vanished mount point
        print(f"warning: cannot check the free space of {where} ({err})", file=sys.stderr)
        return {"disk_free_bytes": None, "disk_checked_path": str(where), "disk_margin_bytes": margin}
    if free < needed + margin:
        raise BertlookError(
            f"not enough disk space for the {what} {out_dir}: it needs about {_fmt_bytes(needed)} "
            f"({needed} bytes) plus a margin of {_fmt_bytes(margin)}, but {where} has {_fmt_bytes(free)} free. "
            f"Free some space, write to another disk, or shrink the run{': ' + advice if advice else ''}"
        )
    return {"disk_free_bytes": free, "disk_checked_path": str(where), "disk_margin_bytes": margin}


SHRINK_ADVICE = (
    "fewer examples (segments.n_segments, fewer treebank sentences or coreference parts) or a smaller "
    "--max-seq-len (segments.max_seq_len; a map grows with the square of its length); the batch size "
    "does not change the store's size"
)


def check_stores_space(stores: Sequence[Any], plan, *, check_disk: bool = True,
                       step: str = "extract-segments") -> dict[str, Any]:
    """Estimate the size of the stores the stream will write (:class:`bertlook.attention.stream.StoreConsumer`)
    and check the free space of their file systems (stores on one file system together), before any forward
    pass; log the estimate. Returns ``estimated_bytes``, ``estimated_map_bytes`` (0 without a store) and the
    free space of the (first) checked file system."""
    estimates = [s.estimate(plan) for s in stores]
    total = sum(e["total_bytes"] for e in estimates)
    disk = {"disk_free_bytes": None, "disk_checked_path": None}
    if check_disk and stores:
        by_fs: dict[Any, list[int]] = {}
        for i, s in enumerate(stores):
            by_fs.setdefault(_file_system(s.out_dir), []).append(i)
        for idx in by_fs.values():
            what = "attention store" if len(idx) == 1 else "attention and norm-based stores"
            if len(idx) == 1 and stores[idx[0]].map_kind == "norm":
                what = "norm-based store"
            got = check_disk_space(stores[idx[0]].out_dir, sum(estimates[i]["total_bytes"] for i in idx),
                                   advice=SHRINK_ADVICE, what=what)
            if disk["disk_free_bytes"] is None:
                disk = got
    if stores:
        L, H = plan.num_layers, plan.num_heads
        print(f"{step}: estimated store size {_fmt_bytes(total)} ({total} bytes: {len(plan.records)} examples x "
              f"{L} layers x {H} heads, {STORE_DTYPE}, {len(stores)} store(s)) -> "
              + " and ".join(str(s.out_dir) for s in stores)
              + (f"; {_fmt_bytes(disk['disk_free_bytes'])} free on {disk['disk_checked_path']}"
                 if disk["disk_free_bytes"] is not None else ""), file=sys.stderr, flush=True)
    return {"estimated_bytes": total, "estimated_map_bytes": sum(e["map_bytes"] for e in estimates),
            "disk_free_bytes": disk["disk_free_bytes"]}


def _file_system(path) -> Any:
    try:
        return os.stat(_existing_parent(Path(path).parent)).st_dev
    except OSError:  # pragma: no cover
        return None
