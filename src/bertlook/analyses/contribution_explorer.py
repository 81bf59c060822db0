"""The explorer's ALTI and value-zeroing maps (``contributions --out-explorer``): the same short dev sentences the
head explorer shows (:func:`bertlook.reporting.explorer.explorer_sample`: the first ``n_sentences`` dev sentences of
``words[0]..words[1]`` words, in file order), word-level maps of ``alti_heads`` ``[layer, head, W+2, W+2]`` and of
the per-layer kinds ``alti_rollout`` and ``value_zeroing`` ``[layer, W+2, W+2]``, float16, one ``.npz`` (no pickle):
``ids`` (the sentence ids) and ``{kind}_{k}`` per sentence ``k``. The explorer joins them by id; a sentence the
word store left out (alignment, no tree) is simply not joined.

Definitions: docs/definitions.md#head-explorer
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from bertlook.analyses.contribution_maps import RunTimes
from bertlook.analyses.contribution_table1 import sample_sentences, word_maps
from bertlook.errors import BertlookError

#: the kinds the explorer's map menu gains, with their word-map shape: per head, else per layer
EXPLORER_KINDS = {"alti_heads": "head", "alti_rollout": "layer", "value_zeroing": "layer"}


def explorer_picks(sentences: Sequence, n_sentences: int, words: tuple[int, int]) -> list[int]:
    """Indices of the first sentences (file order) of ``words[0]..words[1]`` words, twice ``n_sentences`` of them (a
    sentence the word store leaves out does not leave the explorer short)."""
    picked = [i for i, s in enumerate(sentences) if words[0] <= len(s.words) <= words[1]]
    return picked[:2 * int(n_sentences)]


def explorer_maps(m, sentences: Sequence, treebank_path, *, n_sentences: int, words: tuple[int, int],
                  from_split: str, text: str, times: RunTimes) -> dict[str, Any]:
    """``{"ids": [...], kind: [maps]}`` of the explorer's sentences (module docstring); ``m``: the step's loaded
    model (:class:`bertlook.analyses.contribution_stats` ``_Model``)."""
    from bertlook.attention.extract_words import prepare_word_examples  # lazy: transformers

    picked = explorer_picks(sentences, n_sentences, words)
    if not picked:
        return {"ids": [], **{k: [] for k in EXPLORER_KINDS}}
    examples, alignments, _bad, _errors = prepare_word_examples(sample_sentences(sentences, picked), m.tokenizer,
                                                                path=treebank_path, text=text)
    examples = [ex for ex in examples if len(ex[1]) <= m.max_len][:int(n_sentences)]
    if not examples:
        return {"ids": [], **{k: [] for k in EXPLORER_KINDS}}
    records, maps = word_maps(m.model, examples, alignments, pad_id=m.pad_id, causal=m.causal, batch_size=1,
                              from_split=from_split, times=times)
    out: dict[str, Any] = {"ids": [r["id"] for r in records]}
    for kind, per in EXPLORER_KINDS.items():
        out[kind] = [(a if per == "head" else a[:, 0]).astype(np.float16) for a in maps[kind]]
    return out


def write_explorer_maps(path, data: dict[str, Any]) -> None:
    """The ``.npz`` of :func:`explorer_maps` (``ids`` as unicode, every map float16)."""
    arrays = {"ids": np.asarray(data["ids"], dtype=np.str_)}
    for kind in EXPLORER_KINDS:
        for k, a in enumerate(data[kind]):
            arrays[f"{kind}_{k}"] = a
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def read_explorer_maps(path) -> dict[str, dict[str, "np.ndarray"]]:
    """``{sentence id: {kind: float32 map}}`` of a :func:`write_explorer_maps` file; an error names the file."""
    try:
        with np.load(path, allow_pickle=False) as z:
            ids = [str(x) for x in z["ids"]]
            return {sid: {kind: z[f"{kind}_{k}"].astype(np.float32) for kind in EXPLORER_KINDS}
                    for k, sid in enumerate(ids)}
    except (OSError, KeyError, ValueError) as err:
        raise BertlookError(f"{path}: not a contributions explorer file ({err})") from None
