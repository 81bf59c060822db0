"""ALTI (Ferrando et al. 2022) as a reader of the extraction stream: the authors' per-layer contribution maps of
the same forward pass that computes the attention maps, on the model's device, one layer at a time.

ALTI of layer ``l`` (:func:`bertlook.attention.contributions.alti_layer`) needs, besides the layer's attention
weights, the per-head value vectors (the ones the norm-based maps read:
:func:`bertlook.attention.norms.capture_values`), the layer's input ``x`` (the residual stream before the layer: a
forward pre-hook on the layer module, the hidden state ``hidden_states[l]`` of ``output_hidden_states``), ``W_O``,
``b_O`` and, in a post-LN encoder, the LayerNorm after the attention residual. :class:`AltiLayers` holds what is
fixed per model and captures ``x``; :meth:`AltiLayers.layer_maps` gives a layer's maps as a :class:`LazyLayerMaps`,
read as ``maps[b, :, :n, :n]`` (the indexing of :class:`bertlook.attention.layer_readers.PerLayer`): the first read
computes, in one call, the maps of every example of the batch that a reader wants (``LayerReader.wants``; ALTI costs
``~2 n^2 H d`` per layer and example, so only the examples a reader chose, ``--alti-max-examples``, are computed),
on the batch's rows padded to the longest of them (a padded key has weight 0 in every head, so its contribution is
0: skipped by the kernels); one call per layer instead of one per example is 1.65x faster on the CPU
(``scripts/bench_contributions.py``). A map is ``[1, n, n]`` float32 (one "head": ALTI has one map per layer), rows
normalised: the ``alti`` of :func:`~bertlook.attention.contributions.example_maps` of the example run alone, up to
float32 rounding.

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

    def layer_maps(self, layer: int, attn, values, lengths: Sequence[int],
                   wanted: Sequence[int] | None = None) -> "LazyLayerMaps":
        """Layer ``layer``'s ALTI maps of the batch, computed on the first read: ``attn`` its weights
        ``[batch, head, T, T]`` (float32, as the model computed them), ``values`` its value vectors
        ``[batch, T, heads * d_head]``, ``lengths`` each example's tokens, ``wanted`` the examples to compute
        together (None: every one; another example read is computed alone)."""
        x = self.inputs[layer]
        if x is None or values is None:
            raise BertlookError(f"ALTI: layer {layer + 1}: its input or value vectors were not captured in the "
                                "forward pass")
        w_o, b_o = self.dense[layer]
        ln = self.post_ln[layer]

        def some(rows: Sequence[int]) -> list:  # [1, n, n] of each example of rows, cut to its n tokens
            import torch  # lazy: the tensors are torch's; this module is imported by the stream only where needed

            t = max(lengths[b] for b in rows)
            idx = torch.as_tensor(list(rows), device=attn.device)
            c = alti_layer(x[idx, :t], attn[idx][:, :, :t, :t], values[idx, :t], w_o, b_o, ln)  # [rows, t, t]
            return [c[k:k + 1, :lengths[b], :lengths[b]] for k, b in enumerate(rows)]

        return LazyLayerMaps(some, lengths, range(len(lengths)) if wanted is None else wanted)

    def release(self, layer: int) -> None:
        """Forget layer ``layer``'s input (its maps are done)."""
        self.inputs[layer] = None


def _bias(dense):
    bias = getattr(dense, "bias", None)
    return None if bias is None else bias.detach()


class LazyLayerMaps:
    """One layer's per-layer maps of a batch, ``[batch, 1, T, T]`` to a reader: ``maps[b, :, :n, :n]`` (the only
    indexing it accepts, ``n`` example ``b``'s length) gives example ``b``'s map ``[1, n, n]``. The first read
    computes the maps of every example of ``wanted`` with one call ``some(wanted)`` (a list of maps, in that
    order); an example outside ``wanted`` is computed alone, ``some([b])``. Thread-safe: readers of a layer may
    run in several threads."""

    def __init__(self, some: Callable[[Sequence[int]], list], lengths: Sequence[int], wanted: Sequence[int]) -> None:
        self._some, self._lengths, self._wanted = some, list(lengths), list(wanted)
        self._done: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __getitem__(self, key):
        b, _n = _example_key(key, self._lengths)
        with self._lock:
            if b not in self._done:
                rows = self._wanted if b in self._wanted else [b]
                self._done.update(zip(rows, self._some(rows)))
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
