"""Every map kind of one model on a seeded sample of examples: the model runs of the ``contributions`` step.

The ``contributions`` step is a step of its own (not a reader inside the extraction stream): it loads the model
and runs it on seeded samples (:func:`seeded_sample`) of the segments and of the dev sentences, so value zeroing's
extra layer passes stay within a budget said in its summary. :func:`token_maps` gives, per example of a batch of
token id lists, its maps of every kind as float64 numpy arrays cut to the example's own length:

- per head ``[layer, head, n, n]``: ``attention`` (the weights), ``norm`` (the norm-based maps of Kobayashi et al.
  2020, :func:`bertlook.attention.norms.norm_maps`, from a second forward pass that captures the values),
  ``alti_heads`` (bertlook's ALTI per head);
- per layer ``[layer, n, n]``: ``rollout`` (of the attention weights, :func:`bertlook.analyses.rollout.rollout`),
  ``alti`` (the authors' ALTI), ``alti_rollout`` (ALTI over layers), ``value_zeroing`` (one example at a time,
  :func:`bertlook.attention.value_zeroing.value_zeroing`: ``n`` extra layer passes per layer).

The batch is right-padded; the maps of an example are cut to its ``n`` tokens, and the mass its rows put on the
padded keys (0 up to rounding: the softmax gives a masked key exactly 0) is returned for the summary.

Definitions: docs/definitions.md#alti-and-value-zeroing
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from bertlook.analyses.rollout import rollout
from bertlook.errors import BertlookError

#: the map kinds of the contribution statistics, in table and figure order
KINDS = ("attention", "norm", "rollout", "alti", "alti_heads", "alti_rollout", "value_zeroing")
#: the kinds whose definition has one map per head (the others: one per layer)
PER_HEAD_KINDS = ("attention", "norm", "alti_heads")


def seeded_sample(n_items: int, size: int, seed: int) -> list[int]:
    """``min(size, n_items)`` distinct indices of ``range(n_items)`` drawn with ``numpy.random.default_rng(seed)``,
    in ascending order (file order): the same indices on every run."""
    if size < 1:
        raise BertlookError(f"contributions: sample size must be at least 1 (got {size})")
    k = min(int(size), int(n_items))
    if k == 0:
        return []
    picked = np.random.default_rng(int(seed)).choice(int(n_items), size=k, replace=False)
    return sorted(int(i) for i in picked)


@dataclass
class RunTimes:
    """Seconds of the model work (``maps``: forward passes, ALTI, norms, rollouts; ``value_zeroing``) and the value
    zeroing layer passes done (one per zeroed token and layer), added up over calls of :func:`token_maps`."""

    maps: float = 0.0
    value_zeroing: float = 0.0
    layer_passes: int = 0
    padded_mass_max: float = 0.0
    kinds_skipped: dict[str, str] = field(default_factory=dict)


def _batch_inputs(model, id_lists: Sequence[Sequence[int]], pad_id: int) -> dict[str, Any]:
    """``input_ids`` and ``attention_mask`` ``[batch, longest]`` (right padding) on the model's device."""
    import torch  # lazy: torch only where the model runs
    from bertlook.attention.extraction import model_device  # lazy: see above

    n = max(len(ids) for ids in id_lists)
    ids = torch.full((len(id_lists), n), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(id_lists), n), dtype=torch.long)
    for b, row in enumerate(id_lists):
        ids[b, :len(row)] = torch.as_tensor([int(i) for i in row], dtype=torch.long)
        mask[b, :len(row)] = 1
    dev = model_device(model)
    return {"input_ids": ids.to(dev), "attention_mask": mask.to(dev)}


def _norm_maps(model, inputs: dict[str, Any]):
    """The norm-based maps ``[batch, layer, head, q, k]`` (float32) of one forward pass that captures the values."""
    import torch  # lazy: see _batch_inputs
    from bertlook.attention import norms  # lazy: see _batch_inputs

    mods = norms.find_attention_modules(model)
    with torch.no_grad(), norms.capture_values(mods) as values:
        out = model(**inputs, output_attentions=True)
        maps = []
        for l, (_tap, dense) in enumerate(mods):
            a = out.attentions[l].float()  # [batch, head, q, k]
            maps.append(norms.norm_maps(a, norms.value_norms(values[l], dense.weight.detach(), a.shape[1])))
    return torch.stack(maps, 1)  # [batch, layer, head, q, k]


def _cut(t, b: int, n: int) -> tuple["np.ndarray", float]:
    """Example ``b``'s map cut to its ``n`` tokens (float64 numpy) and the largest row mass on its padded keys."""
    x = t[b].double()  # [..., q, k]
    pad = float(x[..., :n, n:].sum(-1).max()) if x.shape[-1] > n else 0.0
    return x[..., :n, :n].cpu().numpy(), pad


def token_maps(model, id_lists: Sequence[Sequence[int]], *, pad_id: int, causal: bool, times: RunTimes,
               kinds: Sequence[str] = KINDS) -> list[dict[str, "np.ndarray"]]:
    """Every map kind of ``kinds`` (module docstring) for each example of one batch of token id lists: one dict per
    example, ``{kind: float64 array}`` cut to its length. ``times`` gains the seconds and layer passes."""
    import torch  # lazy: see _batch_inputs
    from bertlook.attention.contributions import alti_rollout, example_maps  # lazy: see _batch_inputs
    from bertlook.attention.value_zeroing import value_zeroing  # lazy: see _batch_inputs

    t0 = time.perf_counter()
    inputs = _batch_inputs(model, id_lists, pad_id)
    maps = example_maps(model, inputs, heads="alti_heads" in kinds)
    if "norm" in kinds:
        maps["norm"] = _norm_maps(model, inputs)
    out: list[dict[str, np.ndarray]] = []
    for b, row in enumerate(id_lists):
        n, ex = len(row), {}
        for kind in ("attention", "norm", "alti", "alti_heads"):
            if kind in maps and kind in kinds or (kind == "attention" and "rollout" in kinds):
                ex[kind], pad = _cut(maps[kind], b, n)
                times.padded_mass_max = max(times.padded_mass_max, pad)
        if "rollout" in kinds:
            ex["rollout"] = rollout(ex["attention"])  # [layer, q, k]
        if "alti_rollout" in kinds:
            ex["alti_rollout"] = alti_rollout(torch.from_numpy(_cut(maps["alti"], b, n)[0])).numpy()
        out.append(ex)
    times.maps += time.perf_counter() - t0
    if "value_zeroing" in kinds:
        t1 = time.perf_counter()
        for b, row in enumerate(id_lists):
            n = len(row)
            one = {"input_ids": inputs["input_ids"][b:b + 1, :n], "attention_mask": inputs["attention_mask"][b:b + 1, :n]}
            vz = value_zeroing(model, one, causal=causal)  # [layer, q, k] float64
            out[b]["value_zeroing"] = vz.numpy()
            times.layer_passes += int(vz.shape[0]) * n
        times.value_zeroing += time.perf_counter() - t1
    return out
