"""The random-init baseline of a decoder: its word embeddings (and GPT-2's learned positions) kept bit for bit,
every other weight re-initialised by the model's own _init_weights, deterministic for a seed."""

from __future__ import annotations

import pytest

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big."] * 3


@pytest.mark.parametrize("arch, kept", [("gpt2", {"wte.weight", "wpe.weight"}), ("llama", {"embed_tokens.weight"}),
                                        ("gpt_neox", {"embed_in.weight"})])
def test_decoder_random_init_keeps_its_embeddings(tmp_path, arch, kept):
    import torch

    from bertlook.attention.modeling import load_model, resolve_model
    from bertlook.attention.random_init import load_random_init_model
    from bertlook.testing.tiny_models import make_tiny_decoder

    resolved = resolve_model(str(make_tiny_decoder(tmp_path / arch, arch, TEXTS)))
    pretrained = dict(load_model(resolved).named_parameters())
    model, info = load_random_init_model(resolved, seed=3)
    params = dict(model.named_parameters())
    assert set(info["kept_parameters"]) == kept
    for name in kept:
        assert torch.equal(params[name], pretrained[name])
    # every matrix redrawn (the tiny model's norms and biases are already at their init values: 1 and 0)
    matrices = [n for n in info["reinitialized_parameters"] if params[n].dim() == 2]
    assert matrices and all(not torch.equal(params[n], pretrained[n]) for n in matrices)
    again, _ = load_random_init_model(resolved, seed=3)
    assert all(torch.equal(p, params[n]) for n, p in again.named_parameters())
