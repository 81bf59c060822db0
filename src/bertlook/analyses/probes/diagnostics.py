"""Training diagnostics of the reference probes (torch), beyond the paper and off by default.

:class:`LossCurve` (``train_probe(loss_every=N)``: the mean training loss per word over consecutive windows of
N sentences) and :class:`FeatureStats` / :func:`batch_feature_stats` (``train_probe(feature_stats=True)``: the
scale of the attention features the probe sees). Neither changes the training.

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

from typing import Any

import torch

from bertlook.analyses.probes.features import Batch


class LossCurve:
    """``info["loss_curve"]`` of :func:`~bertlook.analyses.probes.reference.train_probe`: the mean training loss
    per word over consecutive windows of ``every`` sentences of each epoch (in training order;
    ``ceil(n_sentences / every)`` windows per epoch)."""

    def __init__(self, every: int) -> None:
        self.every = int(every)
        self.points: list[dict[str, Any]] = []
        self.start_epoch(1)

    def start_epoch(self, epoch: int) -> None:
        """Open the first window of ``epoch``."""
        self.epoch = epoch
        self.window = [0.0, 0, 0]  # loss, words, sentences of the current window of the loss curve
        self.n_windows = 0  # windows of this epoch so far

    def add(self, per_sentence: list[float], lengths: list[int]) -> None:
        """The summed losses of a batch's sentences (in batch order) and their numbers of words."""
        for sl, w in zip(per_sentence, lengths):
            self.window[0] += sl
            self.window[1] += w
            self.window[2] += 1
            if self.window[2] == self.every:
                self.points.append(_window(self.epoch, self.n_windows, self.window))
                self.window, self.n_windows = [0.0, 0, 0], self.n_windows + 1

    def end_epoch(self) -> None:
        """Close the epoch's last window if it holds sentences."""
        if self.window[2]:
            self.points.append(_window(self.epoch, self.n_windows, self.window))


def _window(epoch: int, index: int, window: list) -> dict[str, Any]:
    """Point ``index`` (0-based, within the epoch) of the loss curve: ``window`` = [summed loss, words, sentences]."""
    return {"epoch": int(epoch), "window": int(index), "sentences": int(window[2]), "words": int(window[1]),
            "loss_per_word": window[0] / window[1] if window[1] else float("nan")}


class FeatureStats:
    """Running scale of the attention features of the batches seen (:func:`batch_feature_stats`)."""

    KEYS = ("attn_sum", "attn_count", "attn_max", "root_sum", "root_count", "root_max", "dep_sum", "root_dep_sum",
            "n_dependents", "n_sentences")

    def __init__(self) -> None:
        self.acc = {k: 0.0 for k in self.KEYS}

    def add(self, batch: Batch) -> None:
        part = batch_feature_stats(batch)
        for k in self.KEYS:
            self.acc[k] = max(self.acc[k], part[k]) if k.endswith("_max") else self.acc[k] + part[k]

    def summary(self) -> dict[str, Any]:
        a = self.acc

        def div(x, y):
            return x / y if y else float("nan")

        return {
            "attn_feature_mean": div(a["attn_sum"], a["attn_count"]),
            "attn_feature_max": a["attn_max"],
            "root_feature_mean": div(a["root_sum"], a["root_count"]),
            "root_feature_max": a["root_max"],
            "feature_sum_mean": div(a["dep_sum"], a["n_dependents"]),
            "root_feature_sum_mean": div(a["root_dep_sum"], a["n_dependents"]),
            "n_dependents": int(a["n_dependents"]),
            "n_sentences": int(a["n_sentences"]),
        }


def batch_feature_stats(batch: Batch) -> dict[str, float]:
    """Sums, counts and maxima of the attention features of one batch (as the probe sees them).

    ``attn_*``: the word-word entries ``A_k(i->j)`` (each is a feature of candidate j of dependent i, forward,
    and of candidate i of dependent j, backward); ``root_*``: the four [CLS]/[SEP] parts ``A_k(i->[CLS])``,
    ``A_k(i->[SEP])``, ``A_k([CLS]->i)``, ``A_k([SEP]->i)``; ``dep_sum``: over dependents i, the mean over
    word candidates j of the feature-vector sum ``sum_k A_k(i->j) + A_k(j->i)`` (uniform maps: ``2K/(W+2)``);
    ``root_dep_sum``: over dependents, the ROOT candidate's feature sum with ``a = b = 1`` (their initial
    values; uniform maps: ``4K/(W+2)``).
    """
    with torch.no_grad():
        words, root = batch.words, batch.root  # [batch, layer*head, word, word], [batch, root_part, layer*head, word]
        K = words.shape[1]
        W = batch.lengths.double()  # [batch]
        per_word = words.double().sum(1)  # [batch, word, word]: sum over heads (padding is 0)
        dep = (per_word.sum(2) + per_word.sum(1)) / W.clamp(min=1)[:, None]  # [batch, word]: mean over candidates
        dep = torch.where(batch.dep_mask, dep, torch.zeros_like(dep))  # [batch, word]
        root_dep = root.double().sum((1, 2))  # [batch, word]: ROOT feature sum (a = b = 1; padding is 0)
        return {
            "attn_sum": float(per_word.sum()),
            "attn_count": float(K * (W * W).sum()),
            "attn_max": float(words.max()) if words.numel() else 0.0,
            "root_sum": float(root_dep.sum()),
            "root_count": float(4 * K * W.sum()),
            "root_max": float(root.max()) if root.numel() else 0.0,
            "dep_sum": float(dep.sum()),
            "root_dep_sum": float(root_dep.sum()),
            "n_dependents": float(W.sum()),
            "n_sentences": float(len(W)),
        }
