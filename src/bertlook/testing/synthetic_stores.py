"""Synthetic word-level attention stores whose heads encode random gold trees (tests, benchmarks).

Used by the probe and store tests and by ``scripts/bench_probes.py``; no model needed.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bertlook.attention.store import AttentionStore, AttentionWriter


def random_tree(n_words: int, rng: np.random.Generator, locality: float = 2.0) -> np.ndarray:
    """A random dependency tree (heads, 1-based, 0 = ROOT) that prefers short arcs."""
    order = rng.permutation(n_words) + 1  # [word]
    heads = np.zeros(n_words, dtype=np.int64)  # [word]
    attached = [int(order[0])]
    for w in order[1:]:
        cand = np.array(attached)  # [candidate]
        p = np.exp(-np.abs(cand - w) / locality)  # [candidate]
        heads[w - 1] = int(rng.choice(cand, p=p / p.sum()))
        attached.append(int(w))
    return heads


def write_synthetic_word_store(out, *, n_sentences: int, num_layers: int = 6, num_heads: int = 12,
                               min_words: int = 8, max_words: int = 40, seed: int = 0,
                               vocab: Sequence[str] | None = None, informative=((0, 0.6), (1, 0.4)),
                               sharpness: float = 2.0) -> "AttentionStore":
    """Write a word-level store whose attention encodes random gold trees noisily.

    Head ``k`` of each ``(k, p)`` in ``informative`` points every word at its gold head (ROOT ->
    [CLS]) with probability ``p``, elsewhere at a random position; the next two heads attend to the
    next / previous word; every other head is a softmax of Gaussian logits (``sharpness``) with extra
    mass on [SEP]. Relations: ``punct`` for words whose form is "." or ",", else ``dep``.
    """
    rng = np.random.default_rng(seed)
    vocab = list(vocab) if vocab else ["the", "cat", "sat", "on", "mat", "dog", "ran", ".", ",", "a", "big",
                                       "house", "and", "of", "river", "king", "wrote", "books"]
    L, H = int(num_layers), int(num_heads)
    K = L * H
    inf = dict(informative)
    with AttentionWriter(out, num_layers=L, num_heads=H, level="word", meta={"synthetic": True}) as w:
        for sid in range(int(n_sentences)):
            W = int(rng.integers(min_words, max_words + 1))
            n = W + 2
            heads = random_tree(W, rng)
            logits = rng.standard_normal((K, n, n)).astype(np.float32) * sharpness  # [layer*head, query_word, key_word]
            logits[:, :, n - 1] += 1.5  # [layer*head, query_word]: key [SEP]
            attn = np.exp(logits - logits.max(-1, keepdims=True))  # [layer*head, query_word, key_word]
            attn /= attn.sum(-1, keepdims=True)  # [layer*head, query_word, key_word]
            rows = np.arange(1, W + 1)  # [word]: their query_word rows
            for k, p in inf.items():
                target = np.where(rng.random(W) < p, heads, rng.integers(0, n, W))  # [word]: key_word of each word
                attn[k, 1 : W + 1] = 0.0  # [word, key_word]
                attn[k, rows, target] = 1.0  # [word]
            nk = len(inf)
            if nk + 1 < K:
                attn[nk, 1 : W + 1] = 0.0  # [word, key_word]
                attn[nk, rows, rows + 1] = 1.0  # [word]: next token ([SEP] for the last word)
                attn[nk + 1, 1 : W + 1] = 0.0  # [word, key_word]
                attn[nk + 1, rows, rows - 1] = 1.0  # [word]: previous token ([CLS] for the first word)
            forms = [vocab[int(i)] for i in rng.integers(0, len(vocab), W)]
            rels = ["punct" if f in (".", ",") else "dep" for f in forms]
            rec = {"id": f"s{sid}", "tokens": ["[CLS]", *forms, "[SEP]"], "heads": heads.tolist(),
                   "rels": rels, "upos": ["X"] * W, "xpos": ["XX"] * W}
            w.add(rec, attn.reshape(L, H, n, n))  # [layer, head, query_word, key_word]
    return AttentionStore(out)
