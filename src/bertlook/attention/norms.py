"""Norm-based attention maps (Kobayashi et al. 2020, "Attention is Not Only a Weight").

For head ``h`` of a layer, ``N_h[i, j] = alpha_h[i, j] * || f_h(x_j) ||`` with
``f_h(x) = (x W_V + b_V)_h W_O^h``: token ``j``'s value vector for the head, through the head's slice
of the attention output projection (its bias left out). bertlook stores the ROW-NORMALISED map
``N_hat[i, j] = N[i, j] / sum_j N[i, j]`` (a distribution like attention, the "share" the paper
reports), in a second attention store (``meta.json`` ``"map": "norm"``) written in the same forward
pass as the attention maps (:func:`bertlook.attention.extraction.extract_to_store` ``norms_out_dir``).

- :func:`find_attention_modules` finds, per layer, the value ``Linear`` and the output projection
  ``Linear`` of a Hugging Face encoder (:func:`encoder_layout`: BERT-like ones, BERT, RoBERTa, ELECTRA, MiniLM:
  ``encoder.layer[i].attention.self.value`` / ``.attention.output.dense``; DeBERTa-v2/v3: ``attention.self
  .value_proj`` / ``attention.output.dense``; DistilBERT: ``transformer.layer[i].attention.v_lin`` / ``.out_lin``;
  ALBERT: ``attention.value`` / ``.dense`` of the ``AlbertLayer`` each layer runs, one shared by all layers in the
  released models; ModernBERT: the value part of ``layers[i].attn.Wqkv`` / ``attn.Wo``) or of a decoder
  (:func:`decoder_layers`);
- :func:`capture_values` (a context manager) hooks the value ``Linear`` of every layer and keeps
  its output ``x W_V + b_V`` of the last forward pass (a module shared by several layers: by call order,
  :mod:`bertlook.attention.layer_calls`);
- :func:`value_norms` gives ``|| f_h(x_j) ||`` ``[batch, head, key_pos]``; :func:`norm_maps` the
  row-normalised maps;
- :func:`token_classes` / :func:`class_sums` the per-layer sums of ``|| f(x_j) ||`` (mean over heads)
  per token class of ``j`` ([CLS], [SEP], ". ,", other) and the token counts, additive over shards;
  :func:`reduce_norm_summaries` adds them up from extraction summaries (``norms`` key) for the figure.

torch is imported inside the functions that need it: this module is also imported by the figures
step (analysis environment, no torch).

Definitions: docs/definitions.md#norm-based-attention-kobayashi-et-al-2020
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import numpy as np

from bertlook.attention import layer_calls
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import check_shards, read_json_object

MAP_KINDS = ("attention", "norm")
#: what a norm-based store adds to the stream's store meta (``map`` and the definition, ``norm``)
NORM_STORE_META = {
    "map": "norm",
    "norm": {
        "definition": "N[i, j] = alpha[i, j] * ||f(x_j)||, f(x) = (x W_V + b_V)_h W_O^h (output bias not included); "
                      "stored row-normalised: N[i, j] / sum_j N[i, j]",
        "reference": "Kobayashi et al. 2020, Attention is Not Only a Weight: Analyzing Transformers with Vector Norms",
    },
}
#: token classes of the value-norm sums, in column order
TOKEN_CLASSES = ("cls", "sep", "punct", "other")
#: the tokens of the "punct" class (as in bertlook.analyses.surface_stats)
PUNCT_TOKENS = (".", ",")


# --------------------------------------------------------------------------------------------
# modules and hooks

#: the encoder layouts :func:`encoder_layout` reads: kind -> (value projection, output projection, post-LN) of a layer
#: module, as attribute paths (the post-LN: the LayerNorm after the attention residual, ALTI's; None: a pre-LN
#: encoder, whose values come from the LayerNorm before the attention, as a decoder's)
ENCODER_LAYOUTS = {
    "bert": ("attention.self.value", "attention.output.dense", "attention.output.LayerNorm"),  # BERT, RoBERTa, ...
    "deberta": ("attention.self.value_proj", "attention.output.dense", "attention.output.LayerNorm"),  # DeBERTa-v2/v3
    "distilbert": ("attention.v_lin", "attention.out_lin", "sa_layer_norm"),
    "albert": ("attention.value", "attention.dense", "attention.LayerNorm"),  # one AlbertLayer, shared
    "modernbert": ("attn.Wqkv", "attn.Wo", None),  # the value part of a fused q|k|v projection; pre-LN (attn_norm)
}


def _albert_layers(encoder, config) -> list:
    """ALBERT's layer module of every layer, in order: layer ``i`` runs group ``int(i / (L / G))`` (transformers'
    own rule; ``albert-base-v2``: one group, its one ``AlbertLayer`` for all 12 layers)."""
    groups = list(encoder.albert_layer_groups)
    n_layers = int(config.num_hidden_layers)
    inner = {len(g.albert_layers) for g in groups}
    if inner != {1}:
        raise BertlookError(f"model class ALBERT with {sorted(inner)} layers per layer group (inner_group_num > 1): "
                            "each of its layers runs several attention modules, which bertlook does not map to "
                            "layers (supported: inner_group_num 1, as every released ALBERT)")
    return [groups[int(i / (n_layers / len(groups)))].albert_layers[0] for i in range(n_layers)]


def encoder_layout(model) -> tuple[str, list] | None:
    """``(kind, layers)`` of an encoder (or of its base model), ``layers`` the layer module of every layer in order
    (:data:`ENCODER_LAYOUTS`): ``bert`` (``encoder.layer[i]``: BERT, RoBERTa, ELECTRA, MiniLM), ``deberta``
    (``encoder.layer[i]`` with ``attention.self.value_proj``: DeBERTa-v2/v3), ``distilbert`` (``transformer.layer[i]``),
    ``albert`` (``encoder.albert_layer_groups``: one module may serve several layers,
    :mod:`bertlook.attention.layer_calls`), ``modernbert`` (``layers[i]`` with ``attn.Wqkv``: ModernBERT, pre-LN);
    None for anything else."""
    for candidate in (model, getattr(model, "base_model", None), getattr(model, "bert", None)):
        if candidate is None:
            continue
        encoder = getattr(candidate, "encoder", None)
        layers = getattr(encoder, "layer", None) if encoder is not None else None
        if layers is not None:
            try:
                layers = list(layers)
            except TypeError:
                return None
            deberta = layers and hasattr(layer_module(layers[0], "attention.self"), "value_proj")
            return ("deberta" if deberta else "bert"), layers
        if encoder is not None and getattr(encoder, "albert_layer_groups", None) is not None:
            return "albert", _albert_layers(encoder, candidate.config)
        layers = getattr(getattr(candidate, "transformer", None), "layer", None)
        if layers is not None and len(layers) and hasattr(getattr(layers[0], "attention", None), "v_lin"):
            return "distilbert", list(layers)
        layers = getattr(candidate, "layers", None)
        if layers is not None and len(layers) and hasattr(getattr(layers[0], "attn", None), "Wqkv"):
            return "modernbert", list(layers)
    return None


def encoder_layers(model):
    """The layer module of every layer of an encoder (:func:`encoder_layout`; a shared module repeated), else None."""
    found = encoder_layout(model)
    return found[1] if found else None


def layer_module(layer, path: str):
    """The submodule of ``layer`` at the attribute ``path`` (``"attention.self.value"``), else None."""
    for name in path.split("."):
        layer = getattr(layer, name, None)
    return layer


class LayerModules(list):
    """The per-layer ``(value, output projection)`` pairs of :func:`find_attention_modules`, with the ``model`` they
    were found in (:func:`capture_values` needs its forward passes where one module serves several layers)."""

    def __init__(self, items, model=None) -> None:
        super().__init__(items)
        self.model = model


class ValueTap:
    """The module whose output gives a layer's value vectors, with the ``transform`` that turns that output into
    ``[batch, seq, heads * d_head]`` (one slice per attention head, in head order): a decoder's fused q/k/v
    projection (GPT-2, GPT-NeoX: the value part), or grouped-query value heads (Llama, Qwen2, Mistral: each
    key/value head repeated for the query heads that share it). :func:`capture_values` hooks ``module``.
    ``value_part(width)``: which of the module's ``width`` output features are value features (a bool tensor;
    None: all), for value zeroing (:mod:`bertlook.attention.value_zeroing`)."""

    def __init__(self, module, transform, value_part=None) -> None:
        self.module, self.transform, self.value_part = module, transform, value_part

    def register_forward_hook(self, hook):
        return self.module.register_forward_hook(lambda m, inputs, output: hook(m, inputs, self.transform(output)))


class OutputProjection:
    """A layer's attention output projection as ``weight [d_model, heads * d_head]`` (out, in), as a ``Linear``
    stores it (GPT-2's ``Conv1D`` stores it transposed), and its ``bias`` (``[d_model]`` or None)."""

    def __init__(self, weight, bias=None) -> None:
        self.weight, self.bias = weight, bias


def decoder_layers(model) -> tuple[str, list] | None:
    """``(kind, layers)`` of a decoder-only model (or its base model): ``llama`` (``layers[i].self_attn`` with
    ``v_proj`` / ``o_proj``: Llama, Qwen2, Mistral, ...), ``neox`` (``layers[i].attention.query_key_value`` /
    ``dense``) or ``gpt2`` (``h[i].attn.c_attn`` / ``c_proj``); None for anything else."""
    for candidate in (model, getattr(model, "base_model", None)):
        if candidate is None:
            continue
        layers = getattr(candidate, "layers", None)
        if layers is not None and len(layers):
            first = layers[0]
            attn = getattr(first, "self_attn", None)
            if attn is not None and hasattr(attn, "v_proj") and hasattr(attn, "o_proj"):
                return "llama", list(layers)
            attn = getattr(first, "attention", None)
            if attn is not None and hasattr(attn, "query_key_value") and hasattr(attn, "dense"):
                return "neox", list(layers)
        h = getattr(candidate, "h", None)
        if h is not None and len(h) and hasattr(getattr(h[0], "attn", None), "c_attn"):
            return "gpt2", list(h)
    return None


def _part(width: int, period: int, start: int):
    """Bool ``[width]``: features ``start..period-1`` of every block of ``period`` (a fused q|k|v projection's v)."""
    import torch  # lazy: see the module docstring

    return (torch.arange(int(width)) % int(period)) >= int(start)


def _decoder_modules(kind: str, layers: list, num_heads: int, config) -> list[tuple[Any, Any]]:
    """:func:`find_attention_modules` of a decoder (``kind`` of :func:`decoder_layers`)."""
    H = int(num_heads)
    out = []
    for layer in layers:
        if kind == "llama":
            attn = layer.self_attn
            d_head = int(attn.o_proj.weight.shape[1]) // H
            kv = int(attn.v_proj.weight.shape[0]) // d_head
            if H % kv:
                raise BertlookError(f"norm-based maps: {kv} key/value heads do not divide {H} heads")
            rep = H // kv

            def gqa(o, kv=kv, rep=rep, d_head=d_head):  # [batch, seq, kv * d_head] -> [batch, seq, H * d_head]
                if rep == 1:
                    return o
                return o.reshape(*o.shape[:-1], kv, d_head).repeat_interleave(rep, dim=-2).flatten(-2)
            out.append((ValueTap(attn.v_proj, gqa), attn.o_proj))  # v_proj: value features only
        elif kind == "neox":
            attn = layer.attention
            d_head = int(attn.dense.weight.shape[1]) // H

            def neox(o, d_head=d_head):  # [batch, seq, H * 3 d_head], per head q|k|v -> v of each head
                return o.reshape(*o.shape[:-1], -1, 3 * d_head)[..., 2 * d_head:].flatten(-2)
            out.append((ValueTap(attn.query_key_value, neox, lambda w, d_head=d_head: _part(w, 3 * d_head, 2 * d_head)),
                        attn.dense))
        else:
            attn = layer.attn
            d = int(attn.c_proj.weight.shape[0])

            def gpt2(o, d=d):  # [batch, seq, 3 d_model]: q | k | v
                return o[..., 2 * d:]
            out.append((ValueTap(attn.c_attn, gpt2, lambda w, d=d: _part(w, 3 * d, 2 * d)),
                        OutputProjection(attn.c_proj.weight.t(), attn.c_proj.bias)))
    return out


def _modernbert_modules(layers: list, cls_name: str, num_heads: int | None) -> list[tuple[Any, Any]]:
    """:func:`find_attention_modules` of a ModernBERT: the value part of ``attn.Wqkv`` (its output ``[q | k | v]``,
    each ``d_model`` features with the heads in order, as ``ModernBertAttention`` views it) and ``attn.Wo``."""
    out = []
    for i, layer in enumerate(layers):
        fused, dense = layer_module(layer, "attn.Wqkv"), layer_module(layer, "attn.Wo")
        d = int(getattr(dense, "in_features", 0) or 0)
        if fused is None or dense is None or not d or int(fused.out_features) != 3 * d:
            raise BertlookError(f"norm-based maps: model class {cls_name}, layer {i + 1}: attn.Wqkv (q|k|v, "
                                f"3 x {d} features) and attn.Wo (Linear modules of its modernbert layout) not found")
        if num_heads is not None and d % int(num_heads):
            raise BertlookError(f"norm-based maps: model class {cls_name}, layer {i + 1}: output projection input "
                                f"size {d} does not fit {num_heads} heads")

        def value(o, d=d):  # [batch, seq, 3 d_model]: q | k | v
            return o[..., 2 * d:]
        out.append((ValueTap(fused, value, lambda w, d=d: _part(w, 3 * d, 2 * d)), dense))
    return out


def find_attention_modules(model, num_heads: int | None = None) -> LayerModules:
    """Per layer, ``(value_linear, output_dense)`` of an encoder (:func:`encoder_layout`: BERT-like, DeBERTa-v2/v3,
    DistilBERT, ALBERT, ModernBERT), or of a decoder-only model (:func:`decoder_layers`: the value part of its
    projection as a :class:`ValueTap`, its output projection), as a :class:`LayerModules` list (``.model``:
    ``model``).

    ``value_linear`` gives ``x W_V + b_V`` (BERT: ``layer.attention.self.value``; DeBERTa ``attention.self
    .value_proj``; DistilBERT ``attention.v_lin``; ALBERT ``attention.value``; ModernBERT: the value part of
    ``attn.Wqkv``, a :class:`ValueTap`), ``output_dense`` is ``W_O``, weight ``[d_model, d_model]`` (out, in)
    (BERT, DeBERTa: ``layer.attention.output.dense``; DistilBERT ``attention.out_lin``; ALBERT ``attention.dense``;
    ModernBERT ``attn.Wo``). ALBERT's shared layer gives the same pair for every layer that runs it. Raises
    :class:`BertlookError` naming the model class when they are not found or do not fit (the hidden size must be a
    multiple of ``num_heads``; the layer count must be the config's).
    """
    cls_name = type(model).__name__
    layout = encoder_layout(model)
    decoder = decoder_layers(model) if not layout or not layout[1] else None
    if decoder is not None:
        if num_heads is None:
            num_heads = int(getattr(model.config, "num_attention_heads", 0) or getattr(model.config, "n_head"))
        return LayerModules(_decoder_modules(decoder[0], decoder[1], int(num_heads), model.config), model)
    if not layout or not layout[1]:
        raise BertlookError(
            f"norm-based maps: model class {cls_name} has no encoder layer list (supported: BERT-like encoders "
            "such as BERT, RoBERTa, ELECTRA, MiniLM, DeBERTa-v2/v3 (encoder.layer), DistilBERT "
            "(transformer.layer), ALBERT (encoder.albert_layer_groups), ModernBERT (layers[i].attn.Wqkv); decoders "
            "with v_proj/o_proj (Llama, Qwen2, Mistral), query_key_value/dense (GPT-NeoX) or c_attn/c_proj (GPT-2))"
        )
    kind, layers = layout
    value_path, dense_path, _ = ENCODER_LAYOUTS[kind]
    out = _modernbert_modules(layers, cls_name, num_heads) if kind == "modernbert" else []
    for i, layer in enumerate(layers if kind != "modernbert" else ()):
        value, dense = layer_module(layer, value_path), layer_module(layer, dense_path)
        w_v, w_o = getattr(value, "weight", None), getattr(dense, "weight", None)
        if value is None or dense is None or w_v is None or w_o is None or w_o.dim() != 2:
            raise BertlookError(
                f"norm-based maps: model class {cls_name}, layer {i + 1}: {value_path} and {dense_path} (Linear "
                f"modules of its {kind} layout) not found"
            )
        d_in = int(w_o.shape[1])
        if int(w_v.shape[0]) != d_in or (num_heads is not None and d_in % int(num_heads)):
            raise BertlookError(
                f"norm-based maps: model class {cls_name}, layer {i + 1}: value output size {int(w_v.shape[0])} "
                f"and output projection input size {d_in} do not fit {num_heads} heads"
            )
        out.append((value, dense))
    cfg_layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if cfg_layers is not None and int(cfg_layers) != len(out):
        raise BertlookError(f"norm-based maps: model class {cls_name}: {len(out)} encoder layers found, "
                            f"config says {cfg_layers}")
    return LayerModules(out, model)


@contextlib.contextmanager
def capture_values(modules: Sequence[tuple[Any, Any]], model=None) -> Iterator[list]:
    """Hook the value ``Linear`` of every layer; yields a list whose entry ``i`` is layer ``i``'s last
    output ``x W_V + b_V`` (``[batch, seq, d_model]``, a tensor on the model's device; None before a
    forward pass). A value module shared by several layers (ALBERT) is read by call order
    (:func:`bertlook.attention.layer_calls.layer_hooks`), which needs ``model`` (default: ``modules.model`` of a
    :class:`LayerModules`). The hooks are removed on exit, also on an error."""
    captured: list = [None] * len(modules)

    def hook(i: int, _module, _inputs, output):
        captured[i] = output.detach()  # [batch, seq, d_model]

    model = getattr(modules, "model", None) if model is None else model
    with layer_calls.layer_hooks(model, [value for value, _dense in modules], hook, what="norm-based maps"):
        yield captured


# --------------------------------------------------------------------------------------------
# norms and maps (torch tensors)

def head_gram(w_o, num_heads: int):
    """``G_h = W_O^h^T W_O^h`` for every head: ``[head, d_head, d_head]`` (float32, computed in float64), so that
    ``|| v W_O^h^T ||^2 = v G_h v^T`` (:func:`value_norms`)."""
    import torch  # lazy: see the module docstring

    w = torch.as_tensor(w_o).to(dtype=torch.float64)  # [d_model, d_model] (out, in)
    D, H = w.shape[1], int(num_heads)
    if D % H:
        raise BertlookError(f"head_gram: W_O of shape {list(w.shape)} does not fit {H} heads")
    wh = w.reshape(w.shape[0], H, D // H)  # [d_model, head, d_head]
    return torch.einsum("ohd,ohe->hde", wh, wh).to(torch.float32)  # [head, d_head, d_head]


def value_norms(values, w_o, num_heads: int, gram=None):
    """``|| f_h(x_j) ||`` for every head and token: ``[batch, head, key_pos]`` (float32).

    ``values``: ``x W_V + b_V`` ``[batch, seq, d_model]`` (head ``h`` = columns
    ``h*d_head:(h+1)*d_head``); ``w_o``: the output projection weight ``[d_model, d_model]`` (out, in),
    ``W_O^h = w_o[:, h*d_head:(h+1)*d_head]``; ``f_h(x_j) = v_h(x_j) W_O^h^T`` (the output bias is not
    included). Computed as ``sqrt(v_h G_h v_h^T)`` with the heads' Gram matrices ``G_h`` (:func:`head_gram`;
    ``gram``: precomputed, for the same ``w_o``): d_head x d_head products per token and head instead of
    d_head x d_model (12x fewer at BERT's shapes; within 3e-7 of the float64 norm, as the direct product).
    """
    import torch  # lazy: see the module docstring

    v = torch.as_tensor(values).float()  # [batch, seq, d_model]
    B, S, D = v.shape
    H = int(num_heads)
    if D % H or torch.as_tensor(w_o).shape[1] != D:
        raise BertlookError(f"value_norms: values of size {D} and W_O of shape {list(torch.as_tensor(w_o).shape)} "
                            f"do not fit {H} heads")
    G = head_gram(w_o, H) if gram is None else gram  # [head, d_head, d_head]
    vh = v.reshape(B, S, H, D // H)  # [batch, seq, head, d_head]
    q = (torch.einsum("bshd,hde->bshe", vh, G.to(v.device)) * vh).sum(-1)  # [batch, seq, head]: ||f||^2
    return q.clamp_min_(0).sqrt_().permute(0, 2, 1)  # [batch, head, key_pos]


def norm_maps(attn, value_norm, *, lengths: Sequence[int] | None = None, ids: Sequence[Any] | None = None):
    """Row-normalised norm-based maps ``N_hat`` ``[batch, head, query_pos, key_pos]`` (float32).

    ``N[i, j] = attn[i, j] * value_norm[j]``; ``N_hat[i, j] = N[i, j] / sum_j N[i, j]``. ``attn``:
    ``[batch, head, query_pos, key_pos]``; ``value_norm``: ``[batch, head, key_pos]``. ``lengths``:
    each example's own token count (rows beyond it are padding, left as they come out, 0 where their
    sum is 0). A row of an example (within its length) whose sum is not positive and finite raises
    :class:`BertlookError` naming the example (``ids``) -- impossible for a real model (softmax
    weights are positive, a value vector of norm 0 for every token of a row is not), but never divided by.
    """
    import torch  # lazy: see the module docstring

    a = torch.as_tensor(attn).float()  # [batch, head, query_pos, key_pos]
    vn = torch.as_tensor(value_norm).to(device=a.device, dtype=torch.float32)  # [batch, head, key_pos]
    if a.dim() != 4 or vn.shape != (a.shape[0], a.shape[1], a.shape[3]):
        raise BertlookError(f"norm_maps: attention {list(a.shape)} and value norms {list(vn.shape)} do not fit "
                            "([batch, head, query_pos, key_pos] and [batch, head, key_pos])")
    n = a * vn[:, :, None, :]  # [batch, head, query_pos, key_pos]
    sums = n.sum(dim=-1, keepdim=True)  # [batch, head, query_pos, 1]
    good = torch.isfinite(sums) & (sums > 0)  # [batch, head, query_pos, 1]
    B, _, T, _ = a.shape
    lens = [T] * B if lengths is None else [int(m) for m in lengths]
    for b, m in enumerate(lens):
        bad = ~good[b, :, :m, 0]  # [head, query_pos]
        if bool(bad.any()):
            h, i = (int(x) for x in torch.nonzero(bad)[0])
            rid = ids[b] if ids is not None else b
            raise BertlookError(
                f"example {rid!r}: norm-based map row with sum {float(sums[b, h, i, 0])} (head {h + 1}, row {i}): "
                "every value vector of the row has norm 0 or is not finite; cannot row-normalise"
            )
    # in place, one pass: every other row is divided by 1 and zeroed (padding rows with no positive sum)
    n.div_(torch.where(good, sums, torch.ones_like(sums)))  # [batch, head, query_pos, key_pos]
    if not bool(good.all()):
        n.masked_fill_(~good, 0.0)
    return n  # [batch, head, query_pos, key_pos]


# --------------------------------------------------------------------------------------------
# class sums (numpy)

def token_classes(tokens: Sequence[str], cls_token: str = "[CLS]", sep_token: str = "[SEP]") -> np.ndarray:
    """Class index per token (:data:`TOKEN_CLASSES` order): 0 [CLS], 1 [SEP], 2 ``"."``/``","``, 3 other."""
    toks = np.asarray(list(tokens), dtype=object)  # [seq]
    out = np.full(toks.shape, 3, dtype=np.int64)  # [seq]
    out[np.isin(toks, PUNCT_TOKENS)] = 2
    out[toks == sep_token] = 1
    out[toks == cls_token] = 0
    return out


def zero_class_sums(num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Zeros to add :func:`class_sums` to: ``(sums [layer, class] float64, counts [class] int64)``."""
    k = len(TOKEN_CLASSES)
    return np.zeros((int(num_layers), k)), np.zeros(k, dtype=np.int64)  # [layer, class], [class]


def class_sums(value_norm: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One example's ``(sums [layer, class], counts [class])``: per layer the sum over its tokens of
    each class of ``|| f(x_j) ||`` averaged over heads, and the number of tokens per class.

    ``value_norm``: ``[layer, head, key_pos]``; ``classes``: ``[key_pos]`` (:func:`token_classes`).
    """
    vn = np.asarray(value_norm, dtype=np.float64)  # [layer, head, key_pos]
    cl = np.asarray(classes, dtype=np.int64)  # [key_pos]
    if vn.ndim != 3 or cl.shape != (vn.shape[2],):
        raise BertlookError(f"class_sums: value norms {list(vn.shape)} and classes {list(cl.shape)} do not fit")
    k = len(TOKEN_CLASSES)
    onehot = np.zeros((cl.size, k))  # [key_pos, class]
    onehot[np.arange(cl.size), cl] = 1.0
    per_token = vn.mean(axis=1)  # [layer, key_pos]
    sums = per_token @ onehot  # [layer, class]
    counts = np.bincount(cl, minlength=k).astype(np.int64)  # [class]
    return sums, counts


class NormClassSums:
    """A consumer of the extraction stream (:mod:`bertlook.attention.stream`): adds every example's
    :func:`class_sums` of the value norms; :meth:`summary` is the ``norms`` entry of the extraction summary."""

    map_kind = None  # reads the batches' value norms, no maps

    def __init__(self) -> None:
        self.sums = self.counts = None
        self.cls_token, self.sep_token = "[CLS]", "[SEP]"

    def start(self, plan) -> None:
        if not plan.norms:
            raise BertlookError("norm class sums need the norm-based maps of the stream (norms on)")
        specials = plan.meta.get("special_tokens") or {}
        self.cls_token, self.sep_token = specials.get("cls") or "[CLS]", specials.get("sep") or "[SEP]"
        self.sums, self.counts = zero_class_sums(plan.num_layers)  # [layer, class], [class]

    def add(self, batch) -> None:
        for b, record in enumerate(batch.records):
            n = batch.lengths[b]
            classes = token_classes(record["tokens"], self.cls_token, self.sep_token)  # [key_pos]
            ex_sums, ex_counts = class_sums(batch.value_norms[b, :, :, :n], classes)  # [layer, class], [class]
            self.sums += ex_sums
            self.counts += ex_counts

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def summary(self, store: Any) -> dict[str, Any]:
        """The ``norms`` entry (``store``: where the norm maps went, or a description when none was written)."""
        return norms_summary(store, self.sums, self.counts)


def norms_summary(store: Any, sums: np.ndarray, counts: np.ndarray) -> dict[str, Any]:
    """The ``norms`` entry of an extraction summary (additive over shards)."""
    return {
        "store": str(store),
        "classes": list(TOKEN_CLASSES),
        "value_norm_sums": [[float(x) for x in row] for row in np.asarray(sums, dtype=np.float64)],
        "value_norm_counts": [int(c) for c in np.asarray(counts)],
    }


def reduce_norm_summaries(summaries: Sequence[Any]) -> dict[str, Any]:
    """Add up the ``norms`` entries of extraction summaries (paths or dicts), in the order given.

    Either one summary (unsharded, or already gathered by ``gather-extraction`` / ``merge-stores``)
    or every shard's summary once, in shard order (checked as ``gather-extraction`` does). Returns
    ``classes``, ``sums [layer, class]``, ``counts [class]``, ``means [layer, class]`` (sums / counts,
    NaN for a class without tokens) and ``num_layers``.
    """
    if not summaries:
        raise BertlookError("norm summaries: none given")
    paths = [s if not isinstance(s, dict) else f"summary {k + 1}" for k, s in enumerate(summaries)]
    data = [s if isinstance(s, dict) else read_json_object(s, "extraction summary") for s in summaries]
    check_shards(data, paths)
    total = None
    counts = None
    for d, p in zip(data, paths):
        norms = d.get("norms")
        if not isinstance(norms, dict):
            raise BertlookError(f"{p}: no 'norms' entry (run the extraction with --norms-out DIR)")
        if list(norms.get("classes") or []) != list(TOKEN_CLASSES):
            raise BertlookError(f"{p}: norms classes {norms.get('classes')!r}, expected {list(TOKEN_CLASSES)}")
        try:
            s = np.asarray(norms["value_norm_sums"], dtype=np.float64)  # [layer, class]
            c = np.asarray(norms["value_norm_counts"], dtype=np.int64)  # [class]
        except (KeyError, TypeError, ValueError) as err:
            raise BertlookError(f"{p}: malformed 'norms' entry: {err}") from None
        if s.ndim != 2 or s.shape[1] != len(TOKEN_CLASSES) or s.shape[0] < 1 or c.shape != (len(TOKEN_CLASSES),):
            raise BertlookError(f"{p}: 'norms' sums of shape {list(s.shape)} / counts {list(c.shape)}, expected "
                                f"[layers, {len(TOKEN_CLASSES)}] / [{len(TOKEN_CLASSES)}]")
        if not np.isfinite(s).all() or (s < 0).any() or (c < 0).any():
            raise BertlookError(f"{p}: 'norms' sums must be finite and >= 0, counts >= 0")
        if total is None:
            total, counts = np.zeros_like(s), np.zeros_like(c)  # [layer, class], [class]
        elif s.shape != total.shape:
            raise BertlookError(f"{p}: norms of {s.shape[0]} layers, but {paths[0]} has {total.shape[0]}")
        total = total + s  # [layer, class]
        counts = counts + c  # [class]
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, total / np.maximum(counts, 1), np.nan)  # [layer, class]
    return {"classes": list(TOKEN_CLASSES), "sums": total, "counts": counts, "means": means,
            "num_layers": int(total.shape[0]), "summaries": [str(p) for p in paths]}

