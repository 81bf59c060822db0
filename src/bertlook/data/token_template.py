"""The special tokens a tokenizer puts around a text: its own conventions, for encoders and decoders alike.

A BERT tokenizer wraps a text as ``[CLS] text [SEP]``, a Llama tokenizer as ``<s> text``, a GPT-2 or Qwen2
tokenizer adds nothing. :func:`special_template` finds the prefix and suffix by encoding a probe text with
and without special tokens, so that sequences built by bertlook (segments of a decoder, the repeated random
tokens of the head detectors) carry exactly what the model saw in training.
"""

from __future__ import annotations

from typing import NamedTuple

from bertlook.errors import BertlookError

PROBE_TEXT = "a"


class SpecialTemplate(NamedTuple):
    """The ids the tokenizer adds before (``prefix``) and after (``suffix``) a single text."""

    prefix: list[int]
    suffix: list[int]


def special_template(tokenizer) -> SpecialTemplate:
    """The :class:`SpecialTemplate` of ``tokenizer`` (a transformers tokenizer): ``tokenizer(text)`` minus
    ``tokenizer(text, add_special_tokens=False)``, which must appear in it as one contiguous run."""
    bare = list(tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(PROBE_TEXT)["input_ids"])
    if not bare:
        raise BertlookError(f"the tokenizer ({type(tokenizer).__name__}) encodes {PROBE_TEXT!r} as no token")
    for start in range(len(full) - len(bare) + 1):
        if full[start:start + len(bare)] == bare:
            return SpecialTemplate(full[:start], full[start + len(bare):])
    raise BertlookError(
        f"the tokenizer ({type(tokenizer).__name__}) changes the tokens of {PROBE_TEXT!r} when it adds its special "
        f"tokens ({bare} alone, {full} with them): bertlook cannot tell its prefix and suffix apart")
