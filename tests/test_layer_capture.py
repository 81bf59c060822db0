"""Extraction holds at most one layer's float32 maps: each layer's weights leave the forward pass through a hook
the moment the layer computes them, and nothing else keeps them (with output_attentions=True transformers keeps
every layer's until the end: the control)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big."] * 3


def _models(tmp_path, tiny_bert_dir):
    from bertlook.testing.tiny_models import make_tiny_decoder

    return {"bert": tiny_bert_dir, "gpt2": make_tiny_decoder(tmp_path / "gpt2", "gpt2", TEXTS, layers=4),
            "llama": make_tiny_decoder(tmp_path / "llama", "llama", TEXTS, layers=4, kv_heads=1)}


class _AliveCounter:
    """A second hook on every attention module: at each layer, how many earlier layers' maps are still alive.
    Every object made before it is frozen (gc.freeze, until :meth:`close`), so that the full collection in each hook
    (maps kept alive by a reference cycle only are freed by it) scans only what the forward pass made: in a test
    worker that has loaded many modules a full collection takes ~0.3 s, and it runs once per layer and pass."""

    def __init__(self, model):
        from bertlook.attention.layer_capture import attention_modules

        self.refs: list = []
        self.alive_at_layer: list[int] = []
        self.handles = [m.register_forward_hook(self._hook(i)) for _, m, i in attention_modules(model)]
        gc.collect()
        gc.freeze()

    def _hook(self, index):
        def hook(_m, _inputs, output):
            gc.collect()
            self.alive_at_layer.append(sum(r() is not None for r in self.refs))
            self.refs.append(weakref.ref(output[index]))
        return hook

    def close(self):
        for h in self.handles:
            h.remove()
        gc.unfreeze()


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_extraction_holds_one_layer_of_float32_maps(tmp_path, tiny_bert_dir, name):
    import torch

    from bertlook.attention.modeling import load_model, load_tokenizer, model_dims, resolve_model
    from bertlook.attention.stream import map_batches

    resolved = resolve_model(str(_models(tmp_path, tiny_bert_dir)[name]))
    model, tok = load_model(resolved), load_tokenizer(resolved)
    L, H = model_dims(model)
    ids = tok("The cat sat on the mat . A dog ran far away", add_special_tokens=True)["input_ids"]
    kept = [({"id": i, "tokens": ["x"] * len(ids)}, ids, [0] * len(ids)) for i in range(3)]

    counter = _AliveCounter(model)
    try:
        batches = list(map_batches(kept, model, batch_size=3, device="cpu", num_layers=L, num_heads=H,
                                   map_dtype="float16", use_token_types=False))
    finally:
        counter.close()
    assert counter.alive_at_layer == [0] * L  # when layer k runs, no earlier layer's float32 maps are alive
    # ... and the maps are the model's own (output_attentions=True), converted to float16
    with torch.inference_mode():
        want = model(input_ids=torch.tensor([ids] * 3), output_attentions=True).attentions
    got = batches[0].maps  # [batch, layer, head, T, T]
    for layer in range(L):
        assert np.array_equal(got[:, layer], want[layer].to(torch.float16).numpy())

    control = _AliveCounter(model)  # the control: transformers' own recording keeps every layer
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([ids]), output_attentions=True)
    finally:
        control.close()
    assert control.alive_at_layer == list(range(L))
