"""The encoder layouts beside BERT's that the layout tests (tests/test_encoder_layouts.py, one set of checks over
every layout; tests/test_deberta_modernbert.py, each layout's own checks) run through bertlook's model-side readers,
and where each layout keeps the parts those tests compute by hand.

- DistilBERT: ``transformer.layer[i]``, ``attention.v_lin`` / ``out_lin``, post-LN ``sa_layer_norm``.
- ALBERT with shared layers (``num_hidden_groups`` 1, as albert-base-v2): ONE ``AlbertLayer`` run for every layer
  (``attention.value`` / ``dense`` / ``LayerNorm``), read by call order (``attention/layer_calls.py``).
- DeBERTa-v2/v3: ``encoder.layer[i].attention.self.value_proj`` / ``attention.output.dense``, post-LN
  ``attention.output.LayerNorm``; disentangled relative-position attention.
- ModernBERT: ``layers[i].attn.Wqkv`` (fused q|k|v: the value is its last third), ``attn.Wo``, pre-LN ``attn_norm``
  (an identity in layer 0), global and sliding-window layers, bidirectional; biases on here (they must count).

Models: :func:`bertlook.testing.tiny_models.random_ln_encoder` with each layout's sizes (as its tests always had
them: DistilBERT 2 layers, the others 3; 6 or 10 tokens)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from alti_by_hand import alti_by_hand


class Layout(NamedTuple):
    layers: int  # layers of the tiny model in memory
    max_positions: int
    ids: list  # the one example its checks run on
    extra: dict  # more config keys
    layer_runs_alone: bool  # the layer module runs on its input alone (value zeroing checked by calling it)


_IDS_6 = [[2, 7, 11, 5, 9, 3]]
_IDS_10 = [[2, 7, 11, 5, 9, 3, 8, 6, 4, 3]]
LAYOUTS = {
    "distilbert": Layout(2, 16, _IDS_6, {}, True),
    "albert": Layout(3, 16, _IDS_6, {}, True),
    "deberta_v2": Layout(3, 32, _IDS_10, {}, False),
    "modernbert": Layout(3, 32, _IDS_10, {"attention_bias": True, "norm_bias": True}, False),
}
ARCHS = tuple(LAYOUTS)
#: the model_type a saved tiny directory of each layout declares
MODEL_TYPES = {"distilbert": "distilbert", "albert": "albert", "deberta_v2": "deberta-v2", "modernbert": "modernbert"}


def tiny(arch: str, *, mlm: bool = False, **overrides):
    """The layout's tiny random model in memory (eager attention, random LayerNorms); ``overrides``: other sizes."""
    from bertlook.testing.tiny_models import random_ln_encoder

    lay = LAYOUTS[arch]
    sizes = {"layers": lay.layers, "max_positions": lay.max_positions, **lay.extra, **overrides}
    return random_ln_encoder(arch, mlm=mlm, **sizes)


def layer(arch: str, model, l: int):
    """Layer ``l``'s module of ``model`` (or of its base model): ALBERT's one shared layer for every ``l``."""
    base = model.base_model
    if arch == "distilbert":
        return base.transformer.layer[l]
    if arch == "albert":
        return base.encoder.albert_layer_groups[0].albert_layers[0]
    return base.encoder.layer[l] if arch == "deberta_v2" else base.layers[l]


def parts(arch: str, model, l: int):
    """(value module, output projection, post-LN or None (pre-LN), the value slice of the value module's output)."""
    mod = layer(arch, model, l)
    if arch == "distilbert":
        return mod.attention.v_lin, mod.attention.out_lin, mod.sa_layer_norm, slice(None)
    if arch == "albert":
        return mod.attention.value, mod.attention.dense, mod.attention.LayerNorm, slice(None)
    if arch == "deberta_v2":
        return mod.attention.self.value_proj, mod.attention.output.dense, mod.attention.output.LayerNorm, slice(None)
    d = mod.attn.Wo.in_features
    return mod.attn.Wqkv, mod.attn.Wo, None, slice(2 * d, 3 * d)


def value_input(arch: str, model, l: int, x):
    """The input of layer ``l``'s value projection, from the layer's input ``x`` (ModernBERT: through attn_norm)."""
    import torch

    if arch != "modernbert":
        return x
    with torch.no_grad():
        return layer(arch, model, l).attn_norm(x)


def run(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), output_attentions=True, output_hidden_states=True)


def hand_values(arch: str, model, out, l: int) -> np.ndarray:
    """x W_V + b_V of layer ``l`` in float64 numpy, x its input from ``out.hidden_states`` (the first example)."""
    value, _, _, part = parts(arch, model, l)
    x = value_input(arch, model, l, out.hidden_states[l])[0].double().numpy()
    return (x @ value.weight.detach().double().numpy().T + value.bias.detach().double().numpy())[:, part]


def hand_alti(arch: str, model, out, l: int):
    """:func:`alti_by_hand.alti_by_hand` of layer ``l``'s attention block, every input from ``out`` (hidden states
    and attentions of the first example) through the layer's own weights."""
    _, dense, ln, _ = parts(arch, model, l)
    ln_params = None if ln is None else (ln.weight.detach().double().numpy(), ln.bias.detach().double().numpy(),
                                         ln.eps)
    return alti_by_hand(out.hidden_states[l][0].double().numpy(), out.attentions[l][0].double().numpy(),
                        hand_values(arch, model, out, l), dense.weight.detach().double().numpy(),
                        dense.bias.detach().double().numpy(), ln_params)


def masked(ids, pos, label):
    """A MaskedSegment of ``ids`` with position ``pos`` masked, its label ``label``."""
    from bertlook.analyses.gradient_pass import IGNORE_INDEX, MaskedSegment

    labels = [IGNORE_INDEX] * len(ids)
    labels[pos] = label
    return MaskedSegment(id=0, tokens=["x"] * len(ids), input_tokens=["x"] * len(ids), input_ids=list(ids),
                         token_type_ids=[0] * len(ids), labels=labels, masked_positions=[pos], actions=["mask"])


def treebank(tmp_path: Path) -> Path:
    """A three-sentence CoNLL-U file (the extract-words tests' treebank)."""
    sents = [["The", "cat", "sat", "."], ["John's", "dog", "sang", "42", ","], ["the", "queen", "went", "to", "london"]]
    lines = []
    for k, words in enumerate(sents):
        lines.append(f"# sent_id = s{k}")
        lines += [f"{j}\t{w}\t{w}\tX\tX\t_\t{0 if j == 1 else 1}\t{'root' if j == 1 else 'dep'}\t_\t_"
                  for j, w in enumerate(words, 1)]
        lines.append("")
    conllu = tmp_path / "dev.conllu"
    conllu.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conllu
