"""ALTI (Ferrando et al. 2022) as a reader of the extraction stream: the authors' per-layer contribution maps of
the same forward pass that computes the attention maps, on the model's device, one layer at a time.

ALTI of layer ``l`` (:func:`bertlook.attention.contributions.alti_layer`) needs, besides the layer's attention
weights, the per-head value vectors (the ones the norm-based maps read: :func:`bertlook.attention.norms.capture_values`),
the layer's input ``x`` (the residual stream before the layer: a forward pre-hook on the layer module, the
hidden state ``hidden_states[l]`` of ``output_hidden_states``), ``W_O``, ``b_O`` and, in a post-LN encoder, the
LayerNorm after the attention residual. :class:`AltiLayers` holds what is fixed per model and captures ``x``;
:meth:`AltiLayers.layer_maps` gives a layer's maps as a :class:`LazyLayerMaps`, which computes one example's map,
cut to its own tokens, the first time a reader asks for it (``maps[b, :, :n, :n]``, the indexing of
:class:`bertlook.attention.layer_readers.PerLayer`): ALTI costs ``~2 n^2 H d`` per layer and example, so only the
examples a reader chose (``--alti-max-examples``) are computed. A map is ``[1, n, n]`` float32 (one "head": ALTI
has one map per layer), rows normalised, exactly :func:`~bertlook.attention.contributions.example_maps`' ``alti``
of the example run alone.

Definitions: docs/definitions.md#alti-and-value-zeroing
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence

from bertlook.attention import layer_calls, norms
from bertlook.attention.contributions import alti_layer, post_layer_norm
from bertlook.errors import BertlookError

#: the map kind of the stream's ALTI readers (:class:`bertlook.attention.layer_readers.PerLayer`)
ALTI_KIND = "alti"


def layer_modules(model) -> list:
    """The module of every layer of ``model`` in order (an encoder's: :func:`bertlook.attention.norms.encoder_layout`,
    a shared ALBERT module repeated; a decoder's: :func:`~bertlook.attention.norms.decoder_layers`); a BertlookError
    naming the model class for any other layout."""
    found = norms.encoder_layout(model) or norms.decoder_layers(model)
    if not found or not found[1]:
        raise BertlookError(f"ALTI: model class {type(model).__name__}: no layer list found (supported: the encoder "
                            "and decoder layouts of the norm-based maps, docs/definitions.md#supported-layouts)")
    return list(found[1])


class AltiLayers:
    """What ALTI needs of each layer of ``model`` besides its maps and value vectors: ``W_O`` and ``b_O`` of the
    output projections ``norm_modules`` (:func:`bertlook.attention.norms.find_attention_modules`), the post-LN
    (:func:`~bertlook.attention.contributions.post_layer_norm`; None in a pre-LN model) and, within
    :meth:`capture`, the input of each layer of the current forward pass (``inputs[l]``: ``[batch, seq, d_model]``)."""

    def __init__(self, model, norm_modules: Sequence[tuple[Any, Any]]) -> None:
        self.model = model
        self.layers = layer_modules(model)
        if len(self.layers) != len(norm_modules):
            raise BertlookError(f"ALTI: model class {type(model).__name__}: {len(self.layers)} layers but "
                                f"{len(norm_modules)} attention output projections")
        self.dense = [(dense.weight.detach(), _bias(dense)) for _tap, dense in norm_modules]
        self.post_ln = [post_layer_norm(model, layer) for layer in range(len(self.layers))]
        self.inputs: list = [None] * len(self.layers)

    @contextlib.contextmanager
    def capture(self) -> Iterator["AltiLayers"]:
        """Within the block, each forward pass of the model records every layer's input in ``inputs`` (a forward
        pre-hook on the layer module; read by call order where one module serves several layers, ALBERT's)."""

        def hook(layer: int, _module, args, kwargs):
            x = args[0] if args else kwargs.get("hidden_states", kwargs.get("x"))
            if x is None:
                raise BertlookError(f"ALTI: layer {layer + 1} was called without its hidden states")
            self.inputs[layer] = x.detach()  # [batch, seq, d_model]

        self.inputs = [None] * len(self.layers)
        with layer_calls.layer_hooks(self.model, self.layers, hook, what="ALTI", pre=True, with_kwargs=True):
            yield self

    def layer_maps(self, layer: int, attn, values, lengths: Sequence[int]) -> "LazyLayerMaps":
        """Layer ``layer``'s ALTI maps of the batch, computed per example on demand: ``attn`` its weights
        ``[batch, head, T, T]`` (float32, as the model computed them), ``values`` its value vectors
        ``[batch, T, heads * d_head]``, ``lengths`` each example's tokens."""
        x = self.inputs[layer]
        if x is None or values is None:
            raise BertlookError(f"ALTI: layer {layer + 1}: its input or value vectors were not captured in the "
                                "forward pass")
        w_o, b_o = self.dense[layer]
        ln = self.post_ln[layer]

        def one(b: int, n: int):  # [1, n, n]: example b alone, cut to its n tokens
            return alti_layer(x[b:b + 1, :n], attn[b:b + 1, :, :n, :n], values[b:b + 1, :n], w_o, b_o, ln)

        return LazyLayerMaps(one, lengths)

    def release(self, layer: int) -> None:
        """Forget layer ``layer``'s input (its maps are done)."""
        self.inputs[layer] = None


def _bias(dense):
    bias = getattr(dense, "bias", None)
    return None if bias is None else bias.detach()


class LazyLayerMaps:
    """One layer's per-layer maps of a batch, ``[batch, 1, T, T]`` to a reader: ``maps[b, :, :n, :n]`` (the only
    indexing it accepts, ``n`` example ``b``'s length) computes example ``b``'s map ``[1, n, n]`` with ``one(b, n)``
    the first time, then gives the same tensor (thread-safe: readers of a layer may run in several threads)."""

    def __init__(self, one: Callable[[int, int], Any], lengths: Sequence[int]) -> None:
        self._one, self._lengths = one, list(lengths)
        self._done: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __getitem__(self, key):
        b, n = _example_key(key, self._lengths)
        with self._lock:
            if b not in self._done:
                self._done[b] = self._one(b, n)
            return self._done[b]


def _example_key(key, lengths: Sequence[int]) -> tuple[int, int]:
    """``(b, n)`` of the key ``(b, :, :n, :n)`` with ``n`` example ``b``'s length; a BertlookError for any other."""
    if isinstance(key, tuple) and len(key) == 4 and isinstance(key[0], int) and 0 <= key[0] < len(lengths):
        b, heads, rows, cols = key
        n = lengths[b]
        whole = heads == slice(None)
        if whole and rows == slice(None, n) and cols == slice(None, n):
            return b, n
    raise BertlookError(f"ALTI maps of a layer are read one example at a time, as maps[b, :, :n, :n] (got {key!r})")
