"""Words -> subword tokens and token-level -> word-level attention (the alignment under ``extract-words`` and
``coref-extract``).

:func:`align_words` aligns a sentence's words to the model's tokens (fast-tokenizer character offsets);
:func:`token_to_word_attention` turns a token-level map ``[L, H, n, n]`` into a word-level one
``[L, H, W+2, W+2]`` ([CLS], words, [SEP]; ``from_split`` = ``mean`` | ``first`` | ``max``).

Definitions: docs/definitions.md#word-level-attention
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from bertlook.errors import BertlookError, check_choice

FROM_SPLIT_MODES = ("mean", "first", "max")
#: Why a sentence could not be aligned (:attr:`AlignmentError.reason`; summary ``excluded_alignment_reasons``).
ALIGNMENT_ERROR_REASONS = (
    "no_words",             # the sentence has no words
    "blank_word",           # a word is empty or whitespace only
    "bad_space_after",      # space_after does not have one boolean per word
    "special_tokens",       # the tokenizer did not add exactly one special token at each end
    "straddling_token",     # a token spans characters of two words (CJK written without spaces, ...)
    "token_without_word",   # a token lies in no word (e.g. on a space only)
    "word_without_token",   # the tokenizer produced no token for a word (dropped control character, ...)
    "token_order",          # tokens are not in word order
    "other",                # any other BertlookError raised while aligning
)


class AlignmentError(BertlookError):
    """A sentence that cannot be aligned; ``reason`` is one of :data:`ALIGNMENT_ERROR_REASONS`."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------------------------
# alignment

@dataclasses.dataclass(frozen=True)
class Alignment:
    """Tokenization of one sentence and the word each token belongs to.

    ``input_ids`` / ``tokens``: the model input including the special tokens (first and last).
    ``word_of_token``: per token, ``-1`` for the two special tokens, else the 0-based word index
    (non-decreasing: every word's tokens are contiguous). ``token_spans``: per word, its
    ``[start, end)`` range of token positions (``end - start >= 1``).
    """

    input_ids: list[int]
    tokens: list[str]
    word_of_token: list[int]
    token_spans: list[tuple[int, int]]

    @property
    def n_words(self) -> int:
        return len(self.token_spans)

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def split_words(self) -> int:
        """Number of words split into more than one token."""
        return sum(1 for s, e in self.token_spans if e - s > 1)

    def groups(self) -> np.ndarray:
        """Per token, its row/column in the word-level map: 0 = first special, 1..W = words, W+1 = last special.

        Raises :class:`BertlookError` when the alignment is not ``special, contiguous words, special``.
        """
        wot = np.asarray(self.word_of_token, dtype=np.int64)  # [seq]
        n, w = wot.size, self.n_words
        if n < 2 or wot[0] != -1 or wot[-1] != -1:
            raise BertlookError("alignment must start and end with a special token")
        inner = wot[1:-1]  # [seq - 2]: words' tokens
        if (inner < 0).any():
            raise BertlookError(
                f"alignment has a special token inside the sentence (token {int(np.argmax(inner < 0)) + 1}); "
                "word-level attention needs a single segment [CLS] w1..wn [SEP]"
            )
        expected = np.repeat(np.arange(w), [e - s for s, e in self.token_spans]) if w else np.zeros(0, np.int64)  # [seq - 2]
        if inner.size != expected.size or not np.array_equal(inner, expected):
            raise BertlookError("alignment word_of_token and token_spans disagree (tokens must be contiguous per word)")
        return np.concatenate([[0], inner + 1, [w + 1]])  # [seq]: values in 0..W+1


def _char_to_word(words: Sequence[str], space_after: Sequence[bool] | None = None,
                  ) -> tuple[str, np.ndarray, list[tuple[int, int]]]:
    """The text of ``words`` (a space after each word but the last, or only where ``space_after``), the
    word owning each character (``-1`` for spaces) and each word's ``[start, end)`` character span."""
    spans: list[tuple[int, int]] = []
    parts: list[str] = []
    pos = 0
    last = len(words) - 1
    for i, w in enumerate(words):
        spans.append((pos, pos + len(w)))
        sep = " " if i < last and (space_after is None or space_after[i]) else ""
        parts.append(w + sep)
        pos += len(w) + len(sep)
    text = "".join(parts)
    owner = np.full(len(text) + 1, -1, dtype=np.int64)  # [char + 1]: +1: an empty span at the very end
    for i, (s, e) in enumerate(spans):
        owner[s:e] = i
    return text, owner, spans


def word_wrap_tokens(tokenizer) -> tuple[str, str] | None:
    """The tokens around a sentence in a word-level map of a decoder-only model's tokenizer (no CLS/SEP
    token): ``(start, end)`` = (its BOS token, or EOS when it has no BOS; its EOS token), added by bertlook
    whatever the tokenizer adds itself, so that a decoder's word-level map has an encoder's layout
    ``start w1..wn end``; None for an encoder's tokenizer (its own ``[CLS] ... [SEP]``) and for a tokenizer with
    neither CLS/SEP nor BOS/EOS tokens."""
    if getattr(tokenizer, "cls_token", None) and getattr(tokenizer, "sep_token", None):
        return None
    eos = getattr(tokenizer, "eos_token", None)
    start = getattr(tokenizer, "bos_token", None) or eos
    if not start or not eos:
        return None  # neither: its own encoding, which align_words refuses per sentence ("special_tokens")
    return str(start), str(eos)


def _encode(tokenizer, text: str) -> tuple[list[int], list, list]:
    """``(input_ids, offsets, sequence ids)`` of ``text`` with the special tokens: the tokenizer's own for an
    encoder, :func:`word_wrap_tokens` around the bare encoding for a decoder (offsets ``(0, 0)``, sequence id
    None for the two added tokens)."""
    wrap = word_wrap_tokens(tokenizer)
    enc = tokenizer(text, add_special_tokens=wrap is None, return_offsets_mapping=True, return_attention_mask=False,
                    return_token_type_ids=False, truncation=False, verbose=False)
    input_ids = [int(i) for i in enc["input_ids"]]
    if wrap is None:
        return input_ids, enc["offset_mapping"], enc.sequence_ids()
    start, end = (int(tokenizer.convert_tokens_to_ids(t)) for t in wrap)
    return ([start, *input_ids, end], [(0, 0), *enc["offset_mapping"], (0, 0)],
            [None, *([0] * len(input_ids)), None])


def align_words(words: Sequence[str], tokenizer, *, sent_id: Any = None,
                space_after: Sequence[bool] | None = None) -> Alignment:
    """Tokenize the text of ``words`` with the fast ``tokenizer`` and align its tokens to the words.

    The text: ``space_after=None``, the words joined with single spaces (``--text spaces``); else one
    boolean per word (CoNLL-U MISC ``SpaceAfter=No`` -> False) and the sentence as written, with no
    space after a word whose flag is False (``--text original``; e.g. ``"Hallo, Welt!"`` or Chinese
    with no space at all). The treebank's words stay the unit either way: tokens are mapped to them
    by character offsets.

    Each non-special token goes to the word whose character span holds the token's first
    non-space character (byte-level BPE offsets may include the leading space when
    ``trim_offsets`` is off; a SentencePiece ``▁`` covers the word's first character); a token with
    no non-space character (a lone ``Ġ``/``▁`` with an empty or space-only span) goes to the word
    that starts right after it. The special tokens are the first and last tokens of the encoding
    (tokens the post-processor added; ``[CLS]``/``[SEP]``, ``<s>``/``</s>``; a decoder-only model's
    tokenizer: its BOS and EOS, added by bertlook, :func:`word_wrap_tokens`).

    Raises :class:`AlignmentError` (a :class:`BertlookError`; ``reason`` one of
    :data:`ALIGNMENT_ERROR_REASONS`) naming ``sent_id`` when a word is empty or blank, when the
    tokenizer drops a word entirely (e.g. a lone control character under BERT's normalizer), when a
    token straddles two words (``straddling_token``: with ``space_after``, two words written
    together can share a token), or when the encoding is not ``special, tokens, special``; callers
    (:func:`prepare_word_examples`) count and list such sentences and skip them.
    """
    where = f"sentence {sent_id!r}" if sent_id is not None else "sentence"
    words = list(words)
    space_after = _checked_words(words, space_after, where)
    if not getattr(tokenizer, "is_fast", False):
        raise BertlookError("word alignment needs a fast tokenizer (character offsets)")
    text, owner, spans = _char_to_word(words, space_after)
    input_ids, offsets, seq_ids = _encode(tokenizer, text)
    n = len(input_ids)
    special = [i for i, s in enumerate(seq_ids) if s is None]
    if n < 2 or special != [0, n - 1]:
        raise AlignmentError(
            f"{where}: expected the tokenizer to add exactly one special token at each end "
            f"(special token positions {special} of {n}); word-level attention needs [CLS] w1..wn [SEP]",
            "special_tokens",
        )
    word_of_token = [-1, *_token_words(text, owner, offsets, input_ids, tokenizer, where), -1]
    return Alignment(input_ids=input_ids, tokens=tokenizer.convert_ids_to_tokens(input_ids),
                     word_of_token=word_of_token, token_spans=_token_spans(word_of_token, words, where))


def _checked_words(words: list, space_after: Sequence[bool] | None, where: str) -> list[bool] | None:
    """``space_after`` as a list, after checking that every word has characters and a flag (None: none given)."""
    if not words:
        raise AlignmentError(f"{where}: no words", "no_words")
    for i, w in enumerate(words):
        if not isinstance(w, str) or not w.strip():
            raise AlignmentError(f"{where}: word {i + 1} is empty or blank ({w!r})", "blank_word")
    if space_after is None:
        return None
    space_after = list(space_after)
    if len(space_after) != len(words) or not all(isinstance(f, bool) for f in space_after):
        raise AlignmentError(f"{where}: space_after must hold one boolean per word ({len(space_after)} "
                             f"values for {len(words)} words)", "bad_space_after")
    return space_after


def _token_words(text: str, owner: np.ndarray, offsets, input_ids: list[int], tokenizer, where: str) -> list[int]:
    """The word of each token between the two special tokens, by its character offsets in ``text`` (``owner``:
    the word of each character, :func:`_char_to_word`); the rules are :func:`align_words`'s."""
    out = []
    for t in range(1, len(input_ids) - 1):
        s, e = int(offsets[t][0]), int(offsets[t][1])
        piece = text[s:e]
        stripped = piece.lstrip()
        if stripped:
            first = s + (len(piece) - len(stripped))
            last = s + len(piece.rstrip()) - 1
            w = int(owner[first])
            if w < 0 or int(owner[last]) != w:
                raise AlignmentError(
                    f"{where}: token {t} {tokenizer.convert_ids_to_tokens(input_ids[t])!r} (characters {s}-{e} "
                    f"of {text!r}) does not lie within one word", "straddling_token" if w >= 0 else "token_without_word"
                )
        else:  # empty or whitespace-only span (a lone space marker): the word starting right after it
            w = int(owner[e]) if 0 <= e < owner.size else -1
            if w < 0:
                raise AlignmentError(
                    f"{where}: token {t} {tokenizer.convert_ids_to_tokens(input_ids[t])!r} (characters {s}-{e}) "
                    "belongs to no word", "token_without_word"
                )
        out.append(w)
    return out


def _token_spans(word_of_token: list[int], words: list, where: str) -> list[tuple[int, int]]:
    """Each word's ``[start, end)`` token positions; every word must have a token, in word order."""
    inner = np.asarray(word_of_token[1:-1], dtype=np.int64)  # [seq - 2]
    counts = np.bincount(inner, minlength=len(words)) if inner.size else np.zeros(len(words), np.int64)  # [word]
    missing = [i for i in range(len(words)) if counts[i] == 0]
    if missing:
        shown = ", ".join(f"{i + 1} {words[i]!r}" for i in missing[:5])
        raise AlignmentError(f"{where}: the tokenizer produced no token for word(s) {shown}", "word_without_token")
    if inner.size and (np.diff(inner) < 0).any():
        raise AlignmentError(f"{where}: tokens are not in word order (a word's tokens must be contiguous)",
                             "token_order")
    ends = np.cumsum(counts) + 1  # [word]
    return [(int(e - c), int(e)) for e, c in zip(ends, counts)]


# --------------------------------------------------------------------------------------------
# token -> word attention

def word_slots(alignment: Alignment) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, counts)``, each ``[W+2]``: the first token position and the number of tokens of each row/column
    of the word-level map (0 = the first special token, 1..W = the words, W+1 = the last special token); checked
    by :meth:`Alignment.groups`."""
    alignment.groups()
    n = alignment.n_tokens
    starts = np.array([0, *[s for s, _ in alignment.token_spans], n - 1], dtype=np.int64)  # [word]
    counts = np.array([1, *[e - s for s, e in alignment.token_spans], 1], dtype=np.int64)  # [word]
    return starts, counts


def token_to_word_maps(a, starts, counts, *, from_split: str = "mean"):
    """The word-level maps of token-level maps ``a`` (torch, ``[..., n, n]``, row = FROM, column = TO) on their
    own device: ``[..., W+2, W+2]`` in ``a``'s dtype, with ``starts`` / ``counts`` of :func:`word_slots` (torch
    int64 tensors on ``a``'s device, or numpy arrays).

    Columns: the sum over the word's tokens; rows (``from_split``) of the column-summed map: ``mean`` (each token
    row times 1 / the word's token count, then summed), ``first`` token's row, or ``max`` (element-wise max,
    renormalised to sum to 1). A word's tokens are added one after the other in token order, by gathers rather
    than a matrix product or an atomic scatter, so the values are the same on every device and thread count. On
    the CPU (float32) a numba kernel does those additions in one pass per map (:mod:`bertlook.attention.word_kernels`;
    the same values bit for bit), elsewhere torch operations.
    """
    import torch  # lazy: the word-level maps run where the model does; this module is also imported without torch

    check_choice("from_split", from_split, FROM_SPLIT_MODES)
    if a.device.type == "cpu" and a.dtype == torch.float32:  # the same sums in one pass per map (word_kernels)
        from bertlook.attention.word_kernels import word_maps  # lazy: numba, for the CPU only

        out = torch.from_numpy(word_maps(a.detach().numpy(), np.asarray(starts), np.asarray(counts), from_split))
    else:
        out = _torch_word_maps(a, starts, counts, from_split)  # [..., query_word, key_word]
    if from_split != "max":
        return out
    total = out.sum(dim=-1, keepdim=True)  # [..., query_word, 1]
    return torch.where(total > 0, out / torch.where(total > 0, total, 1), 0)


def _torch_word_maps(a, starts, counts, from_split: str):
    """The conversion as torch operations, on any device (``max``: not yet renormalised)."""
    import torch  # lazy: see token_to_word_maps

    st = torch.as_tensor(starts, device=a.device)  # [word]
    ct = torch.as_tensor(counts, device=a.device)  # [word]
    cols = _segments(a, st, ct, dim=-1, reduce="sum")  # [..., query_pos, key_word]
    if from_split == "first":
        return cols.index_select(-2, st)  # [..., query_word, key_word]
    if from_split == "mean":
        weight = (1.0 / ct.to(a.dtype)).repeat_interleave(ct)  # [query_pos]: 1 / the word's token count
        return _segments(cols * weight[:, None], st, ct, dim=-2, reduce="sum")  # [..., query_word, key_word]
    return _segments(cols, st, ct, dim=-2, reduce="max")  # [..., query_word, key_word]


def _segments(x, st, ct, *, dim: int, reduce: str):
    """Along ``dim`` of ``x``: per word, the sum (``reduce="sum"``, in token order) or the maximum of its tokens'
    slices (``st`` / ``ct``: each word's first token and token count)."""
    import torch  # lazy: see token_to_word_maps

    out = x.index_select(dim, st)  # the words' first tokens
    shape = [1] * x.dim()
    shape[dim] = -1
    for j in range(1, int(ct.max()) if ct.numel() else 1):
        has = ct > j  # [word]: words with a (j+1)-th token
        nxt = x.index_select(dim, torch.where(has, st + j, st))
        if reduce == "sum":
            out = out + torch.where(has.view(shape), nxt, 0)  # + exact zero where the word has no such token
        else:
            out = torch.maximum(out, nxt)  # a word without a (j+1)-th token gathers its first again: no change
    return out


def token_to_word_attention(attn, alignment: Alignment, *, from_split: str = "mean") -> np.ndarray:
    """Convert token-level maps ``[L, H, n, n]`` (row = FROM, column = TO) to word level ``[L, H, W+2, W+2]``.

    Index 0 is the first special token ([CLS]), 1..W the words, W+1 the last special token ([SEP]).
    Columns: sum over the word's tokens. Rows (``from_split``): ``mean`` of the word's token rows
    (paper), ``first`` token's row (released code), or ``max`` (element-wise max over the rows,
    renormalised to sum to 1). Rows are taken of the column-summed map, as in the released code.
    Returns float32; each row sums to 1 when the input rows do. The host (numpy) face of
    :func:`token_to_word_maps`, which ``extract-words`` and ``coref-extract`` run on the model's device.
    """
    import torch  # lazy: see token_to_word_maps

    check_choice("from_split", from_split, FROM_SPLIT_MODES)
    a = np.ascontiguousarray(attn, dtype=np.float32)  # [layer, head, query_pos, key_pos]
    n = alignment.n_tokens
    if a.ndim != 4 or a.shape[2:] != (n, n):
        raise BertlookError(f"attention of shape {list(a.shape)} does not match the alignment's {n} tokens "
                            "(expected [layers, heads, n, n])")
    starts, counts = word_slots(alignment)
    out = token_to_word_maps(torch.from_numpy(a), starts, counts, from_split=from_split)
    return np.ascontiguousarray(out.numpy(), dtype=np.float32)  # [layer, head, query_word, key_word]


class WordConversion:
    """How ``extract-words`` and ``coref-extract`` turn a token-level example into the word-level one they store,
    for :class:`bertlook.attention.layer_readers.LayerStore`: :meth:`record` (the host record) and :meth:`maps`
    (each layer's ``[head, n, n]`` map -> ``[head, W+2, W+2]`` by :func:`token_to_word_maps`, on the maps' device).

    ``alignments``: id -> :class:`Alignment`; ``make_record(record, alignment)``: the word-level record
    (``tokens`` = the W+2 word-level tokens). The slots of an example are moved to the device once and dropped by
    :meth:`release` once its layers are done."""

    def __init__(self, alignments: dict[Any, Alignment], make_record, from_split: str = "mean") -> None:
        check_choice("from_split", from_split, FROM_SPLIT_MODES)
        self.alignments, self.make_record, self.from_split = alignments, make_record, from_split
        self._slots: dict[tuple[Any, str], tuple[Any, Any]] = {}  # (id, device) -> (starts, counts) there

    def stored_size(self, record: dict[str, Any], n: int) -> int:
        """Rows of the stored map of ``record`` (its words + 2)."""
        return self.alignments[record["id"]].n_words + 2

    def record(self, record: dict[str, Any]) -> dict[str, Any]:
        return self.make_record(record, self.alignments[record["id"]])

    def maps(self, record: dict[str, Any], a):
        """``a``: one layer's ``[head, n, n]`` map of ``record`` (torch, any device) -> ``[head, W+2, W+2]``."""
        import torch  # lazy: see token_to_word_maps

        key = (record["id"], str(a.device))
        if key not in self._slots:
            starts, counts = word_slots(self.alignments[record["id"]])
            self._slots[key] = (torch.from_numpy(starts).to(a.device), torch.from_numpy(counts).to(a.device))
        return token_to_word_maps(a, *self._slots[key], from_split=self.from_split)  # [head, query_word, key_word]

    def release(self, record: dict[str, Any]) -> None:
        for key in [k for k in self._slots if k[0] == record["id"]]:
            del self._slots[key]
