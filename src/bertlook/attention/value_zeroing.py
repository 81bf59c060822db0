"""Value zeroing (Mohebbi, Zuidema, Chrupala, Alishahi 2023): one layer run again per zeroed token.

For layer ``l`` and token ``j``: the layer is called again on its original input (the previous layer's original
output) with token ``j``'s value vectors set to 0 in every head (``x_j W_V + b_V``: the bias too, as the authors'
code), and every token's new layer output ``y_i^(not j)`` (the whole block) is compared with the original
``y_i``: ``d[i, j] = 1 - cos(y_i^(not j), y_i)`` (float64). Rows are normalised to sum to 1 (a row of zeros stays
zeros). In a causal model ``j`` cannot move rows ``i < j``: those are set to exactly 0.

How: one ordinary forward pass of a single example (no padding) records each layer's call (its positional and
keyword arguments: masks, rotary tables) and output; :func:`value_zeroing` then calls the layer module itself on
a batch of copies of its input, copy ``k`` with token ``t0 + k`` zeroed by a hook on the layer's value projection
(:attr:`bertlook.attention.norms.ValueTap.value_part` says which features are values in a fused q|k|v). Batch-1
tensors among the recorded arguments broadcast over the copies. A layer module shared by several layers (ALBERT's
one ``AlbertLayer``) is recorded by call order (its ``j``-th call: the ``j``-th layer running it) and called again
on layer ``l``'s recorded input for layer ``l``; a DistilBERT ``TransformerBlock`` returns its hidden states alone
(no tuple). Cost: ``n`` extra layer passes per layer and
example (``n`` tokens): the FLOPs of ``n`` forward passes (``scripts/bench_contributions.py``).

Definitions: docs/definitions.md#alti-and-value-zeroing
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from bertlook.attention import layer_calls, norms
from bertlook.errors import BertlookError

#: copies of one example per layer call (the batch of zeroed tokens)
DEFAULT_CHUNK = 32


def transformer_layers(model) -> list:
    """The layer module of every layer of an encoder (BERT-like, DistilBERT, ALBERT: a shared module repeated for each
    layer that runs it; :func:`norms.encoder_layout`) or a supported decoder (:func:`norms.find_attention_modules`)."""
    layers = norms.encoder_layers(model)
    if not layers:
        found = norms.decoder_layers(model)
        layers = found[1] if found else None
    if not layers:
        raise BertlookError(f"value zeroing: model class {type(model).__name__} has no layer list "
                            "(encoder.layer, transformer.layer, encoder.albert_layer_groups, layers or h)")
    return layers


@contextlib.contextmanager
def record_layer_calls(layers: Sequence[Any], model=None) -> Iterator[list]:
    """Within the block, each forward pass records per layer ``{"args", "kwargs", "output"}`` (the call and its
    hidden-state output, detached); yields the list, one dict per layer. A layer module shared by several layers
    (ALBERT) is recorded by call order, its ``j``-th call the ``j``-th layer running it
    (:mod:`bertlook.attention.layer_calls`; ``model``: the model whose forward passes run the layers)."""
    calls: list = [dict() for _ in layers]

    def pre(i, _m, args, kwargs):
        calls[i]["args"], calls[i]["kwargs"] = args, dict(kwargs)

    def post(i, _m, _args, output):
        calls[i]["output"] = _hidden(output).detach()

    with contextlib.ExitStack() as stack:
        stack.enter_context(layer_calls.layer_hooks(model, layers, pre, what="value zeroing", pre=True,
                                                    with_kwargs=True))
        stack.enter_context(layer_calls.layer_hooks(model, layers, post, what="value zeroing"))
        yield calls


def _hidden(output):
    """A layer's hidden-state output (the first item of a tuple output)."""
    return output[0] if isinstance(output, (tuple, list)) else output


@contextlib.contextmanager
def zero_values(tap, first: int) -> Iterator[None]:
    """Within the block, a call of ``tap``'s module on a batch of copies zeroes, in copy ``k``, the value features of
    token ``first + k``."""
    import torch  # lazy: torch only where a model runs

    module = getattr(tap, "module", tap)
    part_fn = getattr(tap, "value_part", None)

    def hook(_m, _inputs, output):
        out = output.clone()
        width = out.shape[-1]
        part = part_fn(width).to(out.device) if part_fn is not None else torch.ones(width, dtype=torch.bool,
                                                                                     device=out.device)
        for k in range(out.shape[0]):
            out[k, first + k, part] = 0
        return out

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _cosine_distance(new, ref):
    """``1 - cos`` row by row in float64: ``new`` ``[copies, seq, d]``, ``ref`` ``[seq, d]`` -> ``[copies, seq]``.

    Computed as ``||a/|a| - b/|b|||^2 / 2`` (the same number): exactly 0 for equal rows and never negative, so
    a token that moves nothing gives a row of zeros (``1 - a.b/(|a||b|)`` leaves +-2e-16 there)."""
    a, b = new.double(), ref.double()[None]
    a = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    b = b / b.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return 0.5 * (a - b).pow(2).sum(-1)


def value_zeroing(model, inputs: dict[str, Any], *, layers: Sequence[int] | None = None, causal: bool = False,
                  chunk: int = DEFAULT_CHUNK, normalise: bool = True):
    """Value-zeroing maps of one example: ``[layer, query_pos, key_pos]`` float64 (CPU tensor).

    ``inputs``: the model's keyword inputs for ONE example, batch 1, no padding (``input_ids`` ``[1, n]``, ...);
    ``layers``: 0-based layers to compute (default all; the result has one entry per listed layer); ``causal``:
    rows ``i < j`` set to 0; ``normalise``: rows divided by their sums (False: the raw distances)."""
    import torch  # lazy: torch only where a model runs

    ids = inputs.get("input_ids")
    if ids is None or ids.shape[0] != 1:
        raise BertlookError("value zeroing: one example at a time (input_ids of batch 1)")
    mods = transformer_layers(model)
    taps = [value for value, _dense in norms.find_attention_modules(model)]
    chosen = list(range(len(mods))) if layers is None else [int(l) for l in layers]
    n = int(ids.shape[1])
    out = torch.zeros((len(chosen), n, n), dtype=torch.float64)
    with torch.no_grad():
        with record_layer_calls(mods, model) as calls:
            decoder = causal or not norms.encoder_layers(model)  # a decoder's cache would grow with each call
            model(**inputs, use_cache=False) if decoder else model(**inputs)
        for row, l in enumerate(chosen):
            args, kwargs, ref = calls[l]["args"], calls[l]["kwargs"], calls[l]["output"][0]  # ref [seq, d]
            for t0 in range(0, n, int(chunk)):
                m = min(int(chunk), n - t0)
                hidden = args[0].expand(m, *args[0].shape[1:]).contiguous()  # [copies, seq, d]
                with zero_values(taps[l], t0):
                    new = _hidden(mods[l](hidden, *args[1:], **kwargs))  # [copies, seq, d]
                out[row, :, t0:t0 + m] = _cosine_distance(new, ref).T.cpu()  # [seq, copies]
    if causal:
        out = torch.tril(out)
    if normalise:
        sums = out.sum(-1, keepdim=True)
        out = out / torch.where(sums > 0, sums, torch.ones_like(sums))
    return out
