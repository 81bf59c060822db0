"""Norm-based maps of decoder-only models: the value vectors tapped from GPT-2's fused c_attn, GPT-NeoX's
per-head query_key_value, Llama/Qwen2's v_proj with grouped-query heads are exactly what each head mixes:
sum_j A_h[i, j] v_h[j] equals the head's slice of the output projection's input, for every layer."""

from __future__ import annotations

import pytest

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big and old."] * 3


@pytest.mark.parametrize("arch, kv_heads", [("gpt2", None), ("gpt_neox", None), ("llama", 1), ("qwen2", 1),
                                            ("llama", None)])
def test_value_taps_reconstruct_the_heads_output(tmp_path, arch, kv_heads):
    import torch

    from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model
    from bertlook.attention.norms import capture_values, find_attention_modules, value_norms
    from bertlook.testing.tiny_models import make_tiny_decoder

    path = make_tiny_decoder(tmp_path / arch, arch, TEXTS, heads=4, hidden=32, kv_heads=kv_heads)
    resolved = resolve_model(str(path))
    model, tok = load_model(resolved), load_tokenizer(resolved)
    H = 4
    modules = find_attention_modules(model, H)
    assert len(modules) == 2
    # the output projection's input of each layer: concat over heads of sum_j A_h[i, j] v_h[j]
    dense_in = [None] * len(modules)
    handles = []
    layers = model.h if arch == "gpt2" else model.layers
    for i, layer in enumerate(layers):
        proj = layer.attn.c_proj if arch == "gpt2" else (layer.attention.dense if arch == "gpt_neox"
                                                         else layer.self_attn.o_proj)
        handles.append(proj.register_forward_pre_hook(lambda m, args, i=i: dense_in.__setitem__(i, args[0].detach())))
    enc = tok("The cat sat on the mat . A dog ran", return_tensors="pt")
    try:
        with capture_values(modules) as captured, torch.no_grad():
            attns = model(**enc, output_attentions=True).attentions
    finally:
        for h in handles:
            h.remove()
    for layer, ((_, dense), a) in enumerate(zip(modules, attns)):
        v = captured[layer]  # [batch, seq, H * d_head]
        B, T, D = v.shape
        vh = v.reshape(B, T, H, D // H).permute(0, 2, 1, 3)  # [batch, head, seq, d_head]
        mixed = (a @ vh).permute(0, 2, 1, 3).reshape(B, T, D)  # [batch, seq, H * d_head]
        assert torch.allclose(mixed, dense_in[layer], atol=1e-5), (arch, layer)
        # ||f_h(x_j)|| = || v_h(x_j) W_O^h^T ||
        w = torch.as_tensor(dense.weight)  # [d_model, H * d_head]
        direct = torch.stack([(vh[:, h] @ w[:, h * (D // H):(h + 1) * (D // H)].T).norm(dim=-1) for h in range(H)], 1)
        assert torch.allclose(value_norms(v, w, H), direct, rtol=1e-4, atol=1e-6)
