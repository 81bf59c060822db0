"""UAS of a probe's predicted heads (no torch): MST decoding, the result dict, the right-branching baseline.

:func:`mst_heads` decodes one sentence's dependent x candidate log-probabilities into a tree
(:func:`bertlook.analyses.trees.chu_liu_edmonds`, node 0 = ROOT); :func:`uas_dict` is the result of every
evaluation of both engines; :func:`right_branching_uas` scores the right-branching baseline of Table 3 (the
records only, no attention).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertlook.analyses.probes.data import as_probe_data
from bertlook.analyses.trees import chu_liu_edmonds  # the MST decoder (shared with tree-heads)


def mst_heads(logp: np.ndarray) -> np.ndarray:
    """Heads ``[W]`` (0 = ROOT) from a dependent x candidate matrix ``[W, W+1]`` of log-probabilities."""
    W = logp.shape[0]
    full = np.full((W + 1, W + 1), -np.inf)  # [node, node]: dependent, head; node 0 = ROOT
    full[1:, :] = logp  # [word, candidate]
    return chu_liu_edmonds(full)[1:]  # [word]


def uas_dict(correct: int, correct_mst: int | None, n_words: int, n_sentences: int) -> dict[str, Any]:
    """The UAS entries of an evaluation (``uas``, ``uas_mst`` or None, ``n_words``, ``n_sentences``)."""
    return {
        "uas": correct / n_words if n_words else float("nan"),
        "uas_mst": (correct_mst / n_words if n_words else float("nan")) if correct_mst is not None else None,
        "n_words": int(n_words),
        "n_sentences": int(n_sentences),
    }


# ================================================================================= the baseline
def right_branching_heads(n_words: int) -> np.ndarray:
    """Head of word i is word i+1; the last word's head is ROOT (0)."""
    heads = np.arange(2, n_words + 2, dtype=np.int64)  # [word]
    if n_words:
        heads[-1] = 0
    return heads


def right_branching_uas(dev_store, *, mst: bool = False) -> dict[str, Any]:
    """Right-branching baseline on ``dev_store``: ``dict(uas, uas_mst, n_words, n_sentences)``.

    The right-branching structure already is a tree, so ``uas_mst`` (when ``mst``) equals ``uas``.
    Reads only the records (no attention).
    """
    data = as_probe_data(dev_store, what="dev attention store")
    correct = 0
    for s in data.sentences:
        correct += int(((right_branching_heads(s.n_words) == s.heads) & ~s.punct).sum())
    return uas_dict(correct, correct if mst else None, data.n_eval_words, len(data.sentences))
