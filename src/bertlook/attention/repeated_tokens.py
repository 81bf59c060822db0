"""Sequences of repeated random tokens and the model's maps on them (the head detectors' input).

Olsson et al. (2022) find induction heads on a sequence of random tokens repeated once: on the second
copy an induction head attends to the token *after* the earlier occurrence of the current token. Here
each sequence is the tokenizer's own prefix (``[CLS]``, ``<s>`` or nothing), ``length`` distinct random
tokens, the same tokens again, and the tokenizer's suffix (``[SEP]`` or nothing)
(:func:`bertlook.data.token_template.special_template`). The random tokens are drawn without replacement
from the vocabulary less the special tokens, with ``numpy.random.default_rng(seed)``.

:func:`repeated_token_batches` runs the model over them (:func:`bertlook.attention.stream.map_batches`,
float32 maps) and yields one ``[batch, layer, head, T, T]`` array at a time, so that a caller holds one
batch of maps, never all of them.

Definitions: docs/definitions.md#head-detectors
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import numpy as np

from bertlook.attention.stream import map_batches
from bertlook.data.token_template import special_template
from bertlook.errors import BertlookError


@dataclasses.dataclass(frozen=True)
class RepeatedTokens:
    """The sequences ``ids`` ``[sequence, T]``: ``prefix`` special ids, ``length`` random ids, the same again,
    the suffix; ``offset`` = the prefix length (position of the first random token)."""

    ids: np.ndarray  # [sequence, position] int64
    offset: int
    length: int

    @property
    def n_positions(self) -> int:
        return int(self.ids.shape[1])


def candidate_ids(tokenizer) -> np.ndarray:
    """The ids random tokens are drawn from: every id of the vocabulary except the special tokens."""
    special = set(int(i) for i in tokenizer.all_special_ids)
    return np.array(sorted(i for i in set(tokenizer.get_vocab().values()) if i not in special), dtype=np.int64)


def make_repeated_tokens(tokenizer, *, n_sequences: int, length: int, seed: int) -> RepeatedTokens:
    """``n_sequences`` sequences of ``length`` distinct random tokens repeated once, in the tokenizer's template."""
    if n_sequences < 1 or length < 2:
        raise BertlookError(f"head detectors: need n_sequences >= 1 and length >= 2, got {n_sequences} and {length}")
    pool = candidate_ids(tokenizer)
    if len(pool) < length:
        raise BertlookError(f"head detectors: the vocabulary has {len(pool)} non-special tokens, fewer than the "
                            f"{length} distinct tokens a sequence needs")
    template = special_template(tokenizer)
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n_sequences):
        rand = rng.choice(pool, size=length, replace=False)
        rows.append([*template.prefix, *rand.tolist(), *rand.tolist(), *template.suffix])
    return RepeatedTokens(ids=np.array(rows, dtype=np.int64), offset=len(template.prefix), length=length)


def repeated_token_batches(model, seqs: RepeatedTokens, *, batch_size: int, device: Any, num_layers: int,
                           num_heads: int, use_token_types: bool) -> Iterator[np.ndarray]:
    """The model's float32 maps ``[batch, layer, head, T, T]`` on ``seqs``, one batch at a time."""
    n_pos = seqs.n_positions
    kept = [({"id": i}, row.tolist(), [0] * n_pos) for i, row in enumerate(seqs.ids)]
    for batch in map_batches(kept, model, batch_size=batch_size, device=device, num_layers=num_layers,
                             num_heads=num_heads, map_dtype="float32", use_token_types=use_token_types):
        yield batch.maps  # [batch, layer, head, query_pos, key_pos]
