"""Layer readers (bertlook.attention.layer_readers): each layer's maps on the device, inside the forward pass.

They must see exactly the values the host batches carry (the float16 maps a store holds), per example and
layer in order, keep nothing on the host they were not asked for, and be aborted like any consumer."""

from __future__ import annotations

import numpy as np
import pytest

from bertlook.attention.extraction import encode_segment, stream_maps
from bertlook.attention.layer_readers import ExampleWindow, LayerReader, PerLayer
from bertlook.attention.stream import ExampleSaver, MapConsumer, PerExample
from bertlook.errors import BertlookError
from bertlook.testing.tiny_models import make_segment

TEXTS = [
    ("the cat sat on the mat .", "the dog ran , and it was good ."),
    ("john saw mary .", "she read a book in paris ."),
    ("the king and the queen went to london .", "they said it was a very good city , and then they came home ."),
    ("a man .", "a woman ."),
    ("one , two , three .", "four five six ."),
]


@pytest.fixture(scope="module")
def examples(tokenizer):
    segs = [make_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(TEXTS)]
    return [(s, *encode_segment(s, tokenizer, "zeros")) for s in segs]


@pytest.fixture(scope="module")
def model(tiny_bert_dir):
    from bertlook.attention.modeling import load_model, resolve_model

    return load_model(resolve_model(str(tiny_bert_dir)), "cpu")


class Layers:
    """An accumulator that keeps every layer it is handed (as numpy) and checks the call order: per example,
    layers 0 .. L-1 in order, then its end_example (the examples of a batch are interleaved layer by layer)."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.maps: dict = {}
        self.ended: list = []

    def add_layer(self, record, layer, a) -> None:
        assert record["id"] not in self.ended and layer == len(self.maps.setdefault(record["id"], []))
        self.maps[record["id"]].append(a.cpu().numpy().copy())

    def end_example(self, record) -> None:
        assert len(self.maps[record["id"]]) == self.num_layers
        self.ended.append(record["id"])


class Whole:
    def __init__(self) -> None:
        self.maps: dict = {}

    def add(self, record, attn) -> None:
        self.maps[record["id"]] = np.array(attn, copy=True)


@pytest.mark.parametrize("kind", ["attention", "norm"])
def test_per_layer_sees_the_host_maps(examples, model, kind):
    """Same float16 values, layer by layer, as the host batches (batch 2: padded examples)."""
    layer, whole = PerLayer(lambda plan: Layers(plan.num_layers), kind=kind), PerExample(lambda plan: Whole(), kind=kind)
    stream_maps(examples, model, [layer, whole], batch_size=2, device="cpu", meta={}, progress_every=0, norms=True)
    got, want = layer.accumulator, whole.accumulator.maps
    assert sorted(got.ended) == sorted(want) and layer.count == len(examples) == layer.n_stream
    for ex_id, attn in want.items():
        stacked = np.stack(got.maps[ex_id])  # [layer, head, n, n]
        assert stacked.dtype == np.float16 and np.array_equal(stacked.view(np.uint16), attn.view(np.uint16))


def test_selection_and_window(examples, model):
    seen = PerLayer(lambda plan: Layers(plan.num_layers), ids={1, 3})
    window, saver = ExampleWindow(3), ExampleSaver(3)
    stream_maps(examples, model, [seen, window, saver], batch_size=2, device="cpu", meta={}, progress_every=0)
    assert sorted(seen.accumulator.ended) == [1, 3] and seen.count == 2
    assert window.found and window.record["id"] == 3
    assert np.array_equal(window.attn.view(np.uint16), saver.attn.view(np.uint16))
    assert not ExampleWindow(99).found


def test_layer_readers_alone_keep_no_host_maps(examples, model):
    """With layer readers only, the batches carry no host maps (nothing is copied off the device)."""
    batches = []

    class Batches(MapConsumer):
        map_kind = None  # reads no maps (as the stream's meta recorder)

        def add(self, batch) -> None:
            batches.append(batch)

    reader = PerLayer(lambda plan: Layers(plan.num_layers), kind="norm")
    stream_maps(examples, model, [reader, Batches()], batch_size=2, device="cpu", meta={}, progress_every=0,
                norms=True)
    assert batches and all(b.maps is None and b.norm_maps is None and b.value_norms is not None for b in batches)
    with pytest.raises(BertlookError, match="on the device"):
        batches[0].example(0)


def test_a_failing_layer_reader_aborts_every_consumer(examples, model):
    aborted = []

    class Fails(LayerReader):
        def add_layer(self, batch, layer, maps) -> None:
            if layer == 1:
                raise RuntimeError("reader failed")

        def abort(self) -> None:
            aborted.append("fails")

    class Other(MapConsumer):
        def abort(self) -> None:
            aborted.append("other")

    with pytest.raises(RuntimeError, match="reader failed"):
        stream_maps(examples, model, [Other(), Fails()], batch_size=2, device="cpu", meta={}, progress_every=0)
    assert sorted(aborted) == ["fails", "other"]


def _accumulators(L, H, causal):
    from bertlook.analyses.cluster_heads import JsAccumulator
    from bertlook.analyses.rollout import RolloutAccumulator
    from bertlook.analyses.surface_stats import SurfaceStatsAccumulator

    tok = {"cls_token": None, "sep_token": None, "causal": True} if causal else {}
    return {"stats": lambda: SurfaceStatsAccumulator(L, H, **tok), "js": lambda: JsAccumulator(L, H, causal=causal),
            "js estimator": lambda: JsAccumulator(L, H, causal=causal, rows=3),
            "rollout": lambda: RolloutAccumulator(L, H, **tok)}


@pytest.mark.parametrize("causal", [False, True])
def test_accumulators_take_a_batch_interleaved_layer_by_layer(causal):
    """The stream hands each example of a batch layer 0, then layer 1, ...: every accumulator gives the partial of
    the examples added one after the other (and refuses a layer out of order for one example)."""
    rng = np.random.default_rng(1)
    L, H = 3, 2
    records, maps = [], []
    for i, n in enumerate((7, 5, 9)):
        x = rng.random((L, H, n, n)) + 0.05
        if causal:
            x = np.tril(x)
        maps.append((x / x.sum(-1, keepdims=True)).astype(np.float16))
        tokens = ["[CLS]", *[f"w{j}" for j in range(n - 3)], ".", "[SEP]"]
        records.append({"id": i, "tokens": tokens})
    for name, make in _accumulators(L, H, causal).items():
        one, inter = make(), make()
        for r, m in zip(records, maps):
            one.add(r, m)
        for layer in range(L):
            for r, m in zip(records, maps):
                inter.add_layer(r, layer, m[layer])
        for r in records:
            inter.end_example(r)
        (m1, a1), (m2, a2) = one.partial(n_examples_in_store=3), inter.partial(n_examples_in_store=3)
        assert m1 == m2, name
        for k in a1:
            assert np.array_equal(np.asarray(a1[k]), np.asarray(a2[k]), equal_nan=True), (name, k)
        bad = make()
        bad.add_layer(records[0], 0, maps[0][0])
        with pytest.raises(BertlookError):
            bad.add_layer(records[0], 2, maps[0][2])


def test_a_layers_readers_in_threads_give_the_same_partials(examples, model):
    """reader_threads (stream_maps' workers): a layer's calls of several readers in two threads; every reader's
    partial is the same as with one thread (each reader still sees its layers in order)."""
    from bertlook.analyses.cluster_heads import JsAccumulator
    from bertlook.analyses.rollout import RolloutAccumulator
    from bertlook.analyses.surface_stats import SurfaceStatsAccumulator

    def run(workers):
        readers = [PerLayer(lambda p: JsAccumulator(p.num_layers, p.num_heads)),
                   PerLayer(lambda p: SurfaceStatsAccumulator(p.num_layers, p.num_heads), kind="norm"),
                   PerLayer(lambda p: SurfaceStatsAccumulator(p.num_layers, p.num_heads)),
                   PerLayer(lambda p: RolloutAccumulator(p.num_layers, p.num_heads))]
        stream_maps(examples, model, readers, batch_size=2, device="cpu", meta={}, progress_every=0, norms=True,
                    workers=workers)
        return [r.accumulator.partial(n_examples_in_store=len(examples))[1] for r in readers]

    for one, two in zip(run(1), run(2)):
        for k in one:
            assert np.array_equal(np.asarray(one[k]), np.asarray(two[k]), equal_nan=True), k
