"""Readers of the maps on the model's device, layer by layer, as the forward pass computes them.

A :class:`LayerReader` is a stream consumer (:mod:`bertlook.attention.stream`) that does not wait for a batch's
maps on the host: the stream's per-layer callback hands it each layer's maps ``[batch, head, T, T]`` (the
``map_dtype`` values a store would hold: converted on the device, padded to the batch's longest example) on
the device where the model computed them, the model paused in its forward hook, and calls :meth:`end_batch`
once the batch's last layer is done. Nothing crosses to the host unless the reader copies it (the Fig 1 window
of :class:`ExampleWindow`; the sums of an accumulator in its ``partial()``), so a GPU keeps its maps and the
CPU's readers need no host copy of a batch's maps at all.

* :class:`PerLayer` hands every example (or a selection by id) of one map kind to an accumulator with
  ``add_layer(record, layer, a)`` (``a``: ``[head, n, n]``, the example's own map of the layer, a view) and
  ``end_example(record)``: the surface statistics, the JS sums and the rollout statistics of
  :mod:`bertlook.analyses`, attached by the ``extract-segments`` CLI;
* :class:`ExampleWindow` copies one example's map to the host (the Fig 1 example);
* :class:`LayerStore` writes a store of maps converted on the device (the word-level maps of ``extract-words``
  and ``coref-extract``: only they cross to the host).

On the CPU the callback runs in the forward pass's thread, so a reader's kernels may use every core; on a
GPU its torch calls are queued behind the forward pass's own (no reader synchronises per example).

Definitions: docs/definitions.md#token-level-extraction (the one-pass extraction)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertlook.attention.stream import (LAYER_KINDS, MAP_KINDS, LayerBatch, MapConsumer, PerExample, StoreConsumer,
                                      StreamPlan)
from bertlook.errors import check_choice


class LayerReader(MapConsumer):
    """Base class of a reader of each layer's maps on the device (every method optional)."""

    layerwise = True  # the stream hands it layers (add_layer), not host batches (add)

    def add_layer(self, batch: LayerBatch, layer: int, maps) -> None:
        """Layer ``layer`` (0 .. L-1, in order) of ``batch``: ``maps`` ``[batch, head, T, T]`` on the device."""

    def end_batch(self, batch: LayerBatch) -> None:
        """Called once after the batch's last layer."""

    def wants(self, record: dict[str, Any]) -> bool:
        """Whether it reads the maps of the example ``record`` (the stream computes ALTI only for those some reader
        wants: :mod:`bertlook.attention.alti_stream`)."""
        return True


class PerLayer(LayerReader, PerExample):
    """Hand each example of one map kind, layer by layer, to an accumulator's ``add_layer(record, layer, a)``
    (``a``: ``[head, n, n]`` on the device) and ``end_example(record)`` after its last layer.

    The layer-wise twin of :class:`bertlook.attention.stream.PerExample`, whose ``make``, ``kind``, ``ids``,
    ``start``, ``accumulator``, ``count`` and ``n_stream`` it shares (same accumulators, same results); the stream
    hands it layers, never host batches (``layerwise``). ``kind`` may also be ``alti`` (:data:`LAYER_KINDS`: the
    authors' ALTI per layer, ``a`` ``[1, n, n]`` float32, computed only for the chosen examples:
    :mod:`bertlook.attention.alti_stream`)."""

    def __init__(self, make, *, kind: str = "attention", ids: set | None = None) -> None:
        check_choice("map kind", kind, LAYER_KINDS)
        PerExample.__init__(self, make, ids=ids)
        self.map_kind = kind

    def wants(self, record: dict[str, Any]) -> bool:
        return self.chosen(record)

    def add_layer(self, batch: LayerBatch, layer: int, maps) -> None:
        for b, record in enumerate(batch.records):
            if self.chosen(record):
                n = batch.lengths[b]
                self.accumulator.add_layer(record, layer, maps[b, :, :n, :n])  # [head, query_pos, key_pos]

    def end_batch(self, batch: LayerBatch) -> None:
        for record in batch.records:
            if self.chosen(record):
                self.accumulator.end_example(record)
                self.count += 1


class ExampleWindow(LayerReader):
    """Copy the map of the example whose id is ``target`` to the host, layer by layer (the Fig 1 example):
    ``found`` says whether the stream held it, ``record`` / ``attn`` are its record and ``[layer, head, n, n]``
    map; the other examples' maps stay on the device."""

    def __init__(self, target: Any, *, kind: str = "attention") -> None:
        check_choice("map kind", kind, MAP_KINDS)
        self.target, self.map_kind = target, kind
        self.found, self.record, self.attn = False, None, None
        self.num_layers = 0

    def start(self, plan: StreamPlan) -> None:
        self.num_layers = plan.num_layers

    def add_layer(self, batch: LayerBatch, layer: int, maps) -> None:
        for b, record in enumerate(batch.records):
            if record.get("id") == self.target:
                n = batch.lengths[b]
                a = maps[b, :, :n, :n].cpu().numpy()  # [head, query_pos, key_pos]: this example only
                if self.attn is None:
                    self.attn = np.empty((self.num_layers, *a.shape), dtype=a.dtype)  # [layer, head, n, n]
                self.attn[layer] = a
                self.found, self.record = True, record


class LayerStore(LayerReader, StoreConsumer):
    """A :class:`~bertlook.attention.stream.StoreConsumer` fed layer by layer: each example's map of each layer is
    converted on the device by ``convert.maps(record, a)`` (``a``: ``[head, n, n]`` -> ``[head, m, m]``; e.g.
    :class:`bertlook.attention.alignment.WordConversion`); at the end of a batch each example's converted layers
    cross to the host as one ``[layer, head, m, m]`` array and are written under ``convert.record(record)``.
    ``convert.stored_size(record, n)`` sizes the store; ``convert.release(record)`` is called once it is written.
    The other keywords are the store consumer's."""

    def __init__(self, out_dir, *, convert, **kwargs: Any) -> None:
        StoreConsumer.__init__(self, out_dir, stored_size=convert.stored_size, **kwargs)
        self.convert = convert
        self._open: dict[int, list] = {}  # position in the batch -> its converted layers (on the device)

    def start(self, plan: StreamPlan) -> None:
        StoreConsumer.start(self, plan)
        self._open = {}

    def add_layer(self, batch: LayerBatch, layer: int, maps) -> None:
        for b, record in enumerate(batch.records):
            n = batch.lengths[b]
            self._open.setdefault(b, []).append(self.convert.maps(record, maps[b, :, :n, :n]))  # [head, m, m]

    def end_batch(self, batch: LayerBatch) -> None:
        import torch  # lazy: the maps are torch tensors; this module is imported where torch is not needed

        for b, record in enumerate(batch.records):
            attn = torch.stack(self._open.pop(b)).cpu().numpy()  # [layer, head, m, m]: the example's only copy
            self.writer.add(self.convert.record(record), attn)
            self.convert.release(record)
