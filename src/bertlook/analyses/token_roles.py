"""Which tokens play the roles of [CLS] and [SEP] in a map: an encoder's special tokens, or a decoder's first
token and its EOS tokens.

The surface statistics and the rollout report the share of attention to ``cls`` and ``sep``. For an encoder
(the paper's segments ``[CLS] A [SEP] B [SEP]``) these are the tokens equal to the tokenizer's CLS and SEP
strings, as in the released code. A decoder has neither: ``cls`` is then the **first token** (position 0,
BOS or the first word: where an attention sink forms, Xiao et al. 2023) and ``sep`` the tokenizer's EOS token
where a segment holds one (none in the segments of GPT-2, Pythia, Llama or Qwen2: a share of 0). A store says
which through its meta: ``special_tokens.cls`` null and ``model.family`` ``decoder``
(:func:`bertlook.attention.extraction.extract_segments`).

Definitions: docs/definitions.md#surface-statistics (decoders)
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

FIRST_TOKEN = None  # a ``cls_token`` of None: the role is the first token (position 0)


def role_masks(tokens: Sequence[str], cls_token: str | None, sep_token: str | None) -> tuple[np.ndarray, np.ndarray]:
    """``(is_cls, is_sep)`` boolean ``[key_pos]`` masks: ``cls_token`` None -> position 0 only; ``sep_token``
    None -> no token."""
    toks = np.asarray(tokens, dtype=object)  # [key_pos]
    if cls_token is FIRST_TOKEN:
        is_cls = np.zeros(len(toks), dtype=bool)
        is_cls[:1] = True
    else:
        is_cls = toks == cls_token
    is_sep = toks == sep_token if sep_token is not None else np.zeros(len(toks), dtype=bool)
    return is_cls, is_sep


def is_causal(meta: Mapping[str, Any]) -> bool:
    """Whether a store's (or stream's) maps are causal: its model is a decoder (``meta["model"]["family"]``)."""
    return str((meta.get("model") or {}).get("family") or "encoder") == "decoder"


def describe_roles(cls_token: str | None, sep_token: str | None) -> dict[str, str]:
    """The roles in words, for summaries."""
    return {"cls": "the first token (position 0)" if cls_token is FIRST_TOKEN else f"tokens {cls_token}",
            "sep": f"tokens {sep_token}" if sep_token is not None else "none"}
