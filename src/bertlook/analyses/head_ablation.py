"""Head ablation: remove one attention head at a time and measure the change of the model's loss.

A head is removed at the input of its layer's attention output projection (the heads' outputs side by side, head
``h`` = features ``h * d_head : (h + 1) * d_head``): ``mean`` replaces its slice by its mean over every real token of
the sample (one pass records it), ``zero`` by 0. The loss is the gradients step's (an encoder's masked-LM loss at the
masked positions, a decoder's next-token loss; :func:`bertlook.analyses.faithfulness_pass.target_losses`), per
segment; the loss change is the ablated loss minus the intact one. :func:`output_projections` finds the projection
module of every layer (:func:`bertlook.attention.norms.find_attention_modules`; GPT-2's is the ``c_proj`` module).
One padded batch of the sample per head (right padding: no real token sees a padded one). A projection shared by
several layers (ALBERT's one layer) is hooked by call order (:mod:`bertlook.attention.layer_calls`): only the
ablated layer's call is changed. torch is imported inside the functions.

Definitions: docs/definitions.md#which-measure-to-trust-faithfulness
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import numpy as np

from bertlook.analyses.faithfulness_pass import target_losses
from bertlook.analyses.gradient_pass import IGNORE_INDEX, MaskedSegment
from bertlook.attention import layer_calls, norms
from bertlook.errors import BertlookError, check_choice

ABLATION_MODES = ("mean", "zero")


def output_projections(model) -> list:
    """The attention output projection module of every layer (its input: the heads' outputs in head order)."""
    import torch  # lazy: torch only where a model runs

    base = model.base_model
    found = norms.decoder_layers(base)
    out = []
    for layer, (_value, dense) in enumerate(norms.find_attention_modules(base)):
        if isinstance(dense, torch.nn.Module):
            out.append(dense)
        elif found is not None and found[0] == "gpt2":
            out.append(found[1][layer].attn.c_proj)
        else:
            raise BertlookError(f"head ablation: model class {type(model).__name__}, layer {layer + 1}: no output "
                                "projection module")
    return out


def padded_batch(examples: Sequence[MaskedSegment], causal: bool, device):
    """``(ids, tts, mask, labels)`` [batch, T] long tensors of ``examples``, right-padded (padding: id 0, mask 0, no
    label); a decoder's labels are its next tokens."""
    import torch  # lazy: as output_projections

    T = max(ex.n for ex in examples)
    ids, tts, mask = (torch.zeros((len(examples), T), dtype=torch.long) for _ in range(3))
    labels = torch.full((len(examples), T), IGNORE_INDEX, dtype=torch.long)
    for b, ex in enumerate(examples):
        n = ex.n
        ids[b, :n] = torch.tensor(ex.input_ids)
        tts[b, :n] = torch.tensor(ex.token_type_ids)
        mask[b, :n] = 1
        labels[b, :n] = torch.tensor(ex.input_ids[1:] + [IGNORE_INDEX] if causal else ex.labels)
    return tuple(t.to(device) for t in (ids, tts, mask, labels))


def _mean_losses(model, head, batch, causal: bool) -> np.ndarray:
    """Per example, the mean cross-entropy over its labelled positions: ``[batch]`` float64."""
    _, ce = target_losses(model, head, batch[0], batch[1], batch[3], causal, mask=batch[2])
    return np.nanmean(ce.cpu().numpy(), axis=1)


@contextlib.contextmanager
def _replace_head(model, projections, layer: int, first: int, width: int, value) -> Iterator[None]:
    """Within the block, features ``first : first + width`` of layer ``layer``'s output projection input are
    ``value`` (a [width] tensor); a projection shared by several layers (ALBERT) only in ``layer``'s call."""
    if not layer_calls.is_shared(projections):  # one hook on the one module (as ever)
        projections, layer_of = [projections[layer]], [layer]
    else:
        layer_of = list(range(len(projections)))

    def hook(i, _m, args):
        if layer_of[i] != layer:
            return None
        x = args[0].clone()
        x[..., first:first + width] = value
        return (x, *args[1:])

    with layer_calls.layer_hooks(model.base_model, projections, hook, what="head ablation", pre=True):
        yield


def _head_means(model, projections, head, batch, causal: bool) -> list:
    """Per layer, the mean over the batch's real tokens of its output projection's input: ``[features]`` tensors."""
    sums: list = [None] * len(projections)
    mask = batch[2].bool()

    def record(layer, _m, args):
        sums[layer] = args[0][mask].double().mean(0)  # [features]

    with layer_calls.layer_hooks(model.base_model, projections, record, what="head ablation", pre=True):
        target_losses(model, head, batch[0], batch[1], None, causal, mask=batch[2])
    return sums


def head_ablation(model, head, examples: Sequence[MaskedSegment], causal: bool, device, mode: str = "mean"):
    """``(change, base)``: ``change`` ``[segment, layer * head]`` the loss with head ``h`` removed (``mode``, module
    docstring) minus the intact loss, ``base`` ``[segment]`` the intact loss (float64)."""
    import torch  # lazy: as output_projections

    check_choice("head ablation", mode, ABLATION_MODES)
    if not examples:
        raise BertlookError("head ablation: no segment")
    projections = output_projections(model)
    H = int(getattr(model.config, "num_attention_heads", 0) or getattr(model.config, "n_head"))
    batch = padded_batch(examples, causal, device)
    base = _mean_losses(model, head, batch, causal)
    means = _head_means(model, projections, head, batch, causal) if mode == "mean" else None
    change = np.zeros((len(examples), len(projections) * H))
    for layer, proj in enumerate(projections):
        width = int(proj.weight.shape[1] if isinstance(proj, torch.nn.Linear) else proj.weight.shape[0]) // H
        for h in range(H):
            s = slice(h * width, (h + 1) * width)
            value = means[layer][s].float() if means is not None else 0.0
            with _replace_head(model, projections, layer, h * width, width, value):
                change[:, layer * H + h] = _mean_losses(model, head, batch, causal) - base
    return change, base
