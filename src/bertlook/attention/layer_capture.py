"""Attention maps layer by layer, as the forward pass computes them: at most one layer's float32 maps alive.

``model(..., output_attentions=True)`` keeps every layer's float32 maps until the forward pass ends:
``L x batch x H x T x T x 4`` bytes (a 7B decoder at 4k tokens: 32 x 32 x 4096^2 x 4 = 68 GB for one
sequence). :func:`capture_layers` hooks each attention module instead (the ones transformers itself records
for ``output_attentions``: ``model._can_record_outputs["attentions"]``) and hands each layer's weights to a
callback the moment the module returns them; the model is run without ``output_attentions``, so nothing else
keeps them, and a layer's float32 maps are freed before the next layer runs. What the callback keeps (the
stream: the layer converted to float16, the store's dtype) is all the caller holds. ALBERT runs one attention
module for several layers (all 12 in ``albert-base-v2``): it is hooked once and its calls are the layers in order
(:mod:`bertlook.attention.layer_calls`). DeBERTa-v2/v3 declares no attention modules to transformers: its layers'
``attention.self`` modules are hooked and asked for their weights (:data:`UNDECLARED`).

Definitions: docs/definitions.md#token-level-extraction
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from bertlook.attention import layer_calls, norms
from bertlook.errors import BertlookError

#: encoder layouts (:func:`bertlook.attention.norms.encoder_layout`) whose transformers classes do not declare their
#: attention modules (no ``_can_record_outputs``): layout -> (the attention module of a layer, as an attribute path;
#: the position of its ``output_attentions`` argument). The module returns its weights at output index 1 when that
#: argument is True, which :func:`capture_layers` sets in a forward pre-hook: DeBERTa-v2/v3's
#: ``DisentangledSelfAttention`` (its parent drops the weights unless the model was asked for them all, so each
#: layer's weights are still freed before the next layer runs).
UNDECLARED = {"deberta": ("attention.self", 2)}


def _spec(model):
    """transformers' record of the model's attention modules (``_can_record_outputs["attentions"]``), or None."""
    return (getattr(model, "_can_record_outputs", None) or {}).get("attentions")


def _undeclared(model) -> tuple[list, int] | None:
    """``(the attention module of every layer, position of its output_attentions argument)`` of a model of an
    :data:`UNDECLARED` layout, else None."""
    layout = norms.encoder_layout(model)
    if layout is None or layout[0] not in UNDECLARED:
        return None
    path, position = UNDECLARED[layout[0]]
    mods = [norms.layer_module(layer, path) for layer in layout[1]]
    return (mods, position) if mods and all(m is not None for m in mods) else None


def attention_modules(model) -> list[tuple[str, Any, int]]:
    """``(name, module, index)`` of every self-attention module of ``model`` in layer order, one entry per layer,
    ``index`` the position of the attention weights in its output tuple (transformers' own ``OutputRecorder`` of
    ``attentions``; for a model of an :data:`UNDECLARED` layout, DeBERTa-v2/v3, its layers' attention modules, index
    1). A module shared by several layers (ALBERT's: :func:`bertlook.attention.norms.encoder_layout`) is the entry of
    each of them. A BertlookError when the model does not say, or the modules do not map to its layer count."""
    spec = _spec(model)
    undeclared = _undeclared(model) if spec is None else None
    if undeclared is not None:
        names = {id(mod): name for name, mod in model.named_modules()}
        return [(names.get(id(mod), ""), mod, 1) for mod in undeclared[0]]
    if spec is None:
        raise BertlookError(f"model class {type(model).__name__} does not declare its attention modules "
                            "(transformers' _can_record_outputs); its maps cannot be captured layer by layer")
    if isinstance(spec, type):
        target, index, layer_name = spec, 1, None
    else:
        target, index, layer_name = spec.target_class, int(spec.index), spec.layer_name
    found = [(name, mod, index) for name, mod in model.named_modules()
             if isinstance(mod, target) and (not layer_name or layer_name in f".{name}")]
    n_layers = getattr(model.config, "num_hidden_layers", None) or getattr(model.config, "n_layer", None)
    if found and n_layers is not None and len(found) < int(n_layers):
        found = _shared(model, found, target) or found
    if not found or (n_layers is not None and len(found) != int(n_layers)):
        raise BertlookError(f"model class {type(model).__name__}: {len(found)} attention modules "
                            f"({target.__name__}) found for {n_layers} layers")
    return found


def _shared(model, found: list[tuple[str, Any, int]], target) -> list[tuple[str, Any, int]] | None:
    """``found`` spread over the layers that run each module (an ALBERT's layer modules,
    :func:`bertlook.attention.norms.encoder_layout`), or None where the model has no such layout."""
    layout = norms.encoder_layout(model)
    if layout is None or layout[0] != "albert":
        return None
    by_module = {id(mod): (name, mod, index) for name, mod, index in found}
    per_layer = [getattr(layer, "attention", None) for layer in layout[1]]
    if any(not isinstance(m, target) or id(m) not in by_module for m in per_layer):
        return None
    return [by_module[id(m)] for m in per_layer]


@contextlib.contextmanager
def capture_layers(model, on_layer: Callable[[int, Any], None]) -> Iterator[int]:
    """Within the block, every forward pass of ``model`` calls ``on_layer(layer, weights)`` once per layer in
    order (``weights``: that layer's ``[batch, head, query_pos, key_pos]`` maps, float32, on the device);
    yields the number of layers. Run the model without ``output_attentions``. A module shared by several layers
    (ALBERT) is read by call order (:mod:`bertlook.attention.layer_calls`: a forward pass must call it once per
    layer that runs it, else a BertlookError). Hooks removed on exit."""
    modules = attention_modules(model)

    def hook(layer: int, _module, _inputs, output):
        index = modules[layer][2]
        weights = output[index] if isinstance(output, tuple) and len(output) > index else None
        if weights is None:
            raise BertlookError(f"attention module of layer {layer + 1} returned no weights (the model must "
                                "be loaded with attn_implementation='eager')")
        on_layer(layer, weights)

    per_layer = [module for _, module, _ in modules]
    with contextlib.ExitStack() as stack:
        undeclared = _undeclared(model) if _spec(model) is None else None
        if undeclared is not None:
            stack.enter_context(_ask_weights(model, per_layer, undeclared[1]))
        stack.enter_context(layer_calls.layer_hooks(model, per_layer, hook, what="attention capture"))
        yield len(modules)


def _ask_weights(model, per_layer: list, position: int):
    """Within the block, every call of the modules ``per_layer`` is made with ``output_attentions`` True (its
    positional argument ``position``, or the keyword), so that it returns its weights (:data:`UNDECLARED`)."""

    def ask(_layer, _module, args, kwargs):
        if len(args) > position:
            args = (*args[:position], True, *args[position + 1:])
        else:
            kwargs = {**kwargs, "output_attentions": True}
        return args, kwargs

    return layer_calls.layer_hooks(model, per_layer, ask, what="attention capture", pre=True, with_kwargs=True)
