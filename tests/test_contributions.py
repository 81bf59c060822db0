"""ALTI (bertlook.attention.contributions) and value zeroing (bertlook.attention.value_zeroing) against values
computed by hand, or step by step from the definitions in plain numpy (float64, explicit loops over tokens and
heads, never through the modules), on one-layer cases; the decomposition ALTI rests on, checked against a real
BertLayer's LayerNorm; causal rows of GPT-2, GPT-NeoX and a grouped-query Llama.

Definitions: docs/definitions.md#alti-and-value-zeroing. The agreement with the authors' reference code is in
tests/test_contributions_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from alti_by_hand import alti_by_hand
from bertlook.errors import BertlookError


def _t(a):
    import torch

    return torch.as_tensor(np.asarray(a, dtype=np.float32))


def _alti(x, attn, values, w_o, b_o=None, ln=None, sigma="layernorm"):
    """bertlook's alti_layer on numpy inputs without a batch axis -> numpy [q, k]."""
    from bertlook.attention.contributions import alti_layer

    return alti_layer(_t(x)[None], _t(attn)[None], _t(values)[None], _t(w_o), None if b_o is None else _t(b_o),
                      ln, sigma=sigma)[0].numpy()


def _post_ln(gamma, beta, eps):
    from bertlook.attention.contributions import PostLayerNorm

    return PostLayerNorm(_t(gamma), _t(beta), float(eps))


# --------------------------------------------------------------------------------------------------------------
# by hand (no LayerNorm: a pre-LN decoder's attention block, y_i = x_i + sum_j alpha f(x_j) + b_O)

# 2 tokens, 1 head, d_model 2, W_O = I (so f(x_j) = v_j), causal attention:
#   row 0: alpha = (1, 0)      T_0(x_0) = v_0 + x_0,            T_0(x_1) = 0
#   row 1: alpha = (.5, .5)    T_1(x_0) = .5 v_0,               T_1(x_1) = .5 v_1 + x_1
HAND_X = [[1.0, 0.0], [0.0, 1.0]]
HAND_V = [[2.0, 0.0], [0.0, 4.0]]
HAND_A = [[[1.0, 0.0], [0.5, 0.5]]]
EYE2 = np.eye(2)


def test_alti_by_hand_without_bias():
    # row 0: y_0 = (3, 0), ||y_0|| = 3; T_0(x_0) = y_0 -> 3 - 0 = 3; T_0(x_1) = 0 -> 3 - 3 = 0   => (1, 0)
    # row 1: T_1(x_0) = (1, 0), T_1(x_1) = (0, 3), y_1 = (1, 3), ||y_1|| = 4;
    #        ||y_1 - T_1(x_0)|| = ||(0, 3)|| = 3 -> 1;  ||y_1 - T_1(x_1)|| = ||(1, 0)|| = 1 -> 3   => (1/4, 3/4)
    got = _alti(HAND_X, HAND_A, HAND_V, EYE2)
    np.testing.assert_allclose(got, [[1.0, 0.0], [0.25, 0.75]], atol=1e-7)


def test_alti_by_hand_with_output_bias_in_the_resultant_only():
    # b_O = (0, -1) enters y_i, never a T_i(x_j):
    # row 0: y_0 = (3, -1), ||y_0|| = 4; y_0 - T_0(x_0) = (0, -1) -> 4 - 1 = 3; y_0 - 0 -> 0      => (1, 0)
    # row 1: y_1 = (1, 2), ||y_1|| = 3; y_1 - (1, 0) = (0, 2) -> 1; y_1 - (0, 3) = (1, -1) -> 1   => (1/2, 1/2)
    got = _alti(HAND_X, HAND_A, HAND_V, EYE2, b_o=[0.0, -1.0])
    np.testing.assert_allclose(got, [[1.0, 0.0], [0.5, 0.5]], atol=1e-7)


def test_min_sum_clamps_at_zero_and_a_row_of_zeros_stays_zeros():
    # 3 tokens, 1 head, d_model 2, W_O = I; v_0 = (10, 0), v_1 = (-10, 0), v_2 = (7, 7)
    x = [[1.0, 1.0], [-10.0, 0.0], [0.0, 1.0]]
    v = [[10.0, 0.0], [-10.0, 0.0], [7.0, 7.0]]
    a = [[[1.0, 0.0, 0.0],    # row 0: T(x_0) = v_0 + x_0 = (11, 1) = y_0 -> c = (12, 0, 0)
          [1.0, 0.0, 0.0],    # row 1: T(x_0) = (10, 0), T(x_1) = x_1 = (-10, 0), y_1 = 0 -> every c = max(0, -10) = 0
          [0.5, 0.5, 0.0]]]   # row 2: T = (5, 0), (-5, 0), x_2 = (0, 1); y_2 = (0, 1), ||y_2|| = 1:
    #                           1 - ||(-5, 1)|| = -5 -> 0;  1 - ||(5, 1)|| = -5 -> 0;  1 - 0 = 1  => (0, 0, 1)
    got = _alti(x, a, v, np.eye(2))
    np.testing.assert_allclose(got, [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]], atol=1e-7)
    assert np.isfinite(got).all()


def test_alti_rollout_by_hand():
    import torch

    from bertlook.attention.contributions import alti_rollout

    c = torch.tensor([[[1.0, 0.0], [0.25, 0.75]], [[1.0, 0.0], [0.5, 0.5]], [[0.5, 0.5], [0.0, 1.0]]])
    r = alti_rollout(c)
    # R_1 = C_1; R_2 = C_2 R_1 = [[1, 0], [.5 + .125, .375]]; R_3 = C_3 R_2 = [[.8125, .1875], [.625, .375]]
    expected = [[[1.0, 0.0], [0.25, 0.75]], [[1.0, 0.0], [0.625, 0.375]], [[0.8125, 0.1875], [0.625, 0.375]]]
    assert r.dtype == torch.float64
    np.testing.assert_allclose(r.numpy(), expected, atol=1e-12)
    # extra axes between layer and (q, k) (e.g. a batch) are carried through
    rb = alti_rollout(torch.stack([c, c], 1))
    np.testing.assert_allclose(rb[:, 1].numpy(), expected, atol=1e-12)


# --------------------------------------------------------------------------------------------------------------
# step by step in numpy: 3 tokens, 2 heads, d_model 4 (d_head 2)

RNG = np.random.default_rng(7)
N, H, D, DH = 3, 2, 4, 2
X = RNG.normal(size=(N, D))
VALUES = RNG.normal(size=(N, H * DH))                     # x W_V + b_V, heads side by side
W_O = RNG.normal(size=(D, H * DH))                        # (out, in), as a Linear stores it
B_O = RNG.normal(size=D)
ATTN = RNG.dirichlet(np.ones(N), size=(H, N))             # [head, q, k], rows sum to 1
GAMMA, BETA, EPS = 1.0 + 0.5 * RNG.normal(size=D), 0.5 * RNG.normal(size=D), 1e-5


def _f(h, j):
    """f_h(x_j): token j's value for head h through the head's columns of W_O."""
    return W_O[:, h * DH:(h + 1) * DH] @ VALUES[j, h * DH:(h + 1) * DH]


def _numpy_alti(post_ln: bool, sigma: str = "layernorm"):
    """ALTI of one layer from the definition, element by element."""
    L = (lambda v: GAMMA * (v - v.mean())) if post_ln else (lambda v: v)
    out = np.zeros((N, N))
    for i in range(N):
        pre = X[i] + B_O + sum(ATTN[h, i, j] * _f(h, j) for h in range(H) for j in range(N))
        if not post_ln:
            s = 1.0
        elif sigma == "layernorm":
            s = np.sqrt(np.mean((pre - pre.mean()) ** 2) + EPS)
        else:  # the authors' code: torch's unbiased std of (pre + eps)
            s = np.std(pre + EPS, ddof=1)
        y = L(pre) / s + (BETA if post_ln else 0.0)
        for j in range(N):
            t = L(sum(ATTN[h, i, j] * _f(h, j) for h in range(H)) + (X[i] if i == j else 0.0)) / s
            out[i, j] = max(0.0, np.abs(y).sum() - np.abs(y - t).sum())
        out[i] /= out[i].sum()
    return out


def _numpy_alti_heads(post_ln: bool):
    """ALTI per head (bertlook's extension): y^h_i = sum_j T^h_i(x_j), T^h_i(x_j) = L(alpha_h f_h(x_j)) / sigma_i
    (sigma_i taken from the layer's pre-LN row: it cancels, as the module says)."""
    L = (lambda v: GAMMA * (v - v.mean())) if post_ln else (lambda v: v)
    out = np.zeros((H, N, N))
    for h in range(H):
        for i in range(N):
            pre = X[i] + B_O + sum(ATTN[g, i, j] * _f(g, j) for g in range(H) for j in range(N))
            s = np.sqrt(np.mean((pre - pre.mean()) ** 2) + EPS) if post_ln else 1.0
            ts = [L(ATTN[h, i, j] * _f(h, j)) / s for j in range(N)]
            y = sum(ts)
            out[h, i] = [max(0.0, np.abs(y).sum() - np.abs(y - t).sum()) for t in ts]
            out[h, i] /= out[h, i].sum()
    return out


@pytest.mark.parametrize("post_ln, sigma", [(True, "layernorm"), (True, "unbiased_std"), (False, "layernorm")])
def test_alti_layer_step_by_step(post_ln, sigma):
    ln = _post_ln(GAMMA, BETA, EPS) if post_ln else None
    got = _alti(X, ATTN, VALUES, W_O, B_O, ln, sigma=sigma)
    expected = _numpy_alti(post_ln, sigma)
    np.testing.assert_allclose(got, expected, atol=2e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)
    assert float(np.abs(expected - 1.0 / N).max()) > 0.05  # the case is not a uniform map


def test_the_sigma_choice_moves_the_map_only_through_beta():
    """unbiased std vs the LayerNorm's sigma: the same map with beta = 0 (sigma scales every term of a row
    alike), a different one with beta != 0."""
    ln_beta0 = _post_ln(GAMMA, np.zeros(D), EPS)
    a = _alti(X, ATTN, VALUES, W_O, B_O, ln_beta0)
    b = _alti(X, ATTN, VALUES, W_O, B_O, ln_beta0, sigma="unbiased_std")
    np.testing.assert_allclose(a, b, atol=1e-6)
    ln = _post_ln(GAMMA, BETA, EPS)
    assert float(np.abs(_alti(X, ATTN, VALUES, W_O, B_O, ln) - _alti(X, ATTN, VALUES, W_O, B_O, ln,
                                                                        sigma="unbiased_std")).max()) > 1e-4


def test_unknown_sigma_is_an_error():
    with pytest.raises(BertlookError, match="unknown sigma"):
        _alti(X, ATTN, VALUES, W_O, B_O, _post_ln(GAMMA, BETA, EPS), sigma="std")


@pytest.mark.parametrize("post_ln", [True, False])
def test_alti_heads_step_by_step(post_ln):
    from bertlook.attention.contributions import alti_heads

    ln = _post_ln(GAMMA, BETA, EPS) if post_ln else None
    got = alti_heads(_t(ATTN)[None], _t(VALUES)[None], _t(W_O), ln)[0].numpy()
    np.testing.assert_allclose(got, _numpy_alti_heads(post_ln), atol=2e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)


def test_head_vectors_fit_check():
    from bertlook.attention.contributions import head_vectors

    with pytest.raises(BertlookError, match="do not fit 3 heads"):
        head_vectors(_t(VALUES)[None], _t(W_O), 3)


# --------------------------------------------------------------------------------------------------------------
# the decomposition on a real layer


def _bert():
    """A seeded random BertModel (1 layer, 2 heads, d 8) with eager attention and random LayerNorm gamma / beta."""
    from bertlook.testing.tiny_models import random_ln_bert

    return random_ln_bert(layers=1, hidden=8, heads=2, vocab=20, max_positions=16, initializer_range=0.3, seed=0)


def test_decomposition_adds_up_to_the_real_layernorm_output():
    """sum_j T_i(x_j) + L(b_O) / sigma_i + beta equals the output of the layer's attention.output.LayerNorm (a
    real BertLayer, float32) to 1e-6, with T, L and sigma computed here in float64 numpy; the authors' unbiased
    std does not add up; bertlook's map is the min_sum map of these T."""
    import torch

    model = _bert()
    layer = model.encoder.layer[0]
    ids = torch.tensor([[2, 7, 11, 5, 3]])
    got = {}
    hooks = [layer.attention.self.value.register_forward_hook(lambda m, i, o: got.__setitem__("v", o)),
             layer.attention.output.LayerNorm.register_forward_hook(lambda m, i, o: got.__setitem__("ln", o))]
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    x = out.hidden_states[0][0].double().numpy()
    a = out.attentions[0][0].double().numpy()                     # [head, q, k]
    v = got["v"][0].double().numpy()                                # [seq, heads * d_head]
    dense, ln = layer.attention.output.dense, layer.attention.output.LayerNorm
    w, b = dense.weight.detach().double().numpy(), dense.bias.detach().double().numpy()
    g, beta, eps = ln.weight.detach().double().numpy(), ln.bias.detach().double().numpy(), ln.eps
    hand = alti_by_hand(x, a, v, w, b, (g, beta, eps))             # T_i(x_j), y_i, the map, step by step
    ln_out = got["ln"][0].double().numpy()
    np.testing.assert_allclose(hand.y, ln_out, atol=1e-6)
    L = lambda u: g * (u - u.mean(-1, keepdims=True))  # noqa: E731
    for i in range(a.shape[1]):
        s_unbiased = np.std(hand.pre[i] + eps, ddof=1)
        y_unbiased = L(hand.raw[i]).sum(0) / s_unbiased + L(b) / s_unbiased + beta
        assert float(np.abs(y_unbiased - ln_out[i]).max()) > 1e-3
    from bertlook.attention.contributions import example_maps

    maps = example_maps(model, {"input_ids": ids})
    np.testing.assert_allclose(maps["alti"][0, 0].numpy(), hand.map, atol=2e-6)


# --------------------------------------------------------------------------------------------------------------
# decoders: causal rows


def _decoder(arch: str):
    """A seeded random tiny decoder (eager attention): GPT-2, GPT-NeoX or Llama with 2 key/value heads for 4
    query heads (grouped-query)."""
    import torch
    from transformers import AutoModel, GPT2Config, GPTNeoXConfig, LlamaConfig

    if arch == "gpt2":
        cfg = GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=4, n_inner=32, n_positions=32, bos_token_id=0,
                         eos_token_id=0, attn_implementation="eager")
    elif arch == "gpt_neox":
        cfg = GPTNeoXConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=32, max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                            attn_implementation="eager")
    else:
        cfg = LlamaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=32, max_position_embeddings=32, bos_token_id=0,
                          eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(0)
    return AutoModel.from_config(cfg).eval()


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "llama"])
def test_causal_rows_are_exactly_zero_above_the_diagonal(arch):
    import torch

    from bertlook.attention.contributions import example_maps, post_layer_norm
    from bertlook.attention.value_zeroing import value_zeroing

    model = _decoder(arch)
    assert post_layer_norm(model, 0) is None  # pre-LN: no LayerNorm after the attention residual
    n = 7
    inputs = {"input_ids": torch.randint(1, 50, (1, n), generator=torch.Generator().manual_seed(3))}
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    maps = example_maps(model, inputs)
    for kind in ("alti", "alti_heads"):
        assert (maps[kind][..., upper] == 0).all(), kind
    np.testing.assert_allclose(maps["alti"].sum(-1).numpy(), 1.0, atol=1e-6)
    # a head whose output nearly cancels (near-uniform attention over opposed vectors: tiny random GPT-2, layer 2,
    # head 3, row 5) has every ||y - T_j||_1 >= ||y||_1: a row of zeros, by the definition
    sums = maps["alti_heads"].sum(-1).numpy()
    assert (np.isclose(sums, 1.0, atol=1e-6) | (sums == 0)).all()
    assert float(maps["alti"][..., ~upper].max()) > 0.05
    vz = value_zeroing(model, inputs, causal=True)
    assert (vz[:, upper] == 0).all()
    np.testing.assert_allclose(vz.sum(-1).numpy(), 1.0, atol=1e-12)
    # the zeros are the model's, not only the mask's: the raw distances above the diagonal are rounding
    raw = value_zeroing(model, inputs, normalise=False)
    assert float(raw[:, upper].abs().max()) < 1e-6
    assert float(raw[:, ~upper].min()) > 0


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_pre_ln_decomposition_adds_up_to_the_residual_stream(arch):
    """In a pre-LN decoder y_i = x_i + sum_j sum_h alpha f_h(x_j) + b_O is the residual stream after attention,
    the input of the second LayerNorm (GPT-2 ln_2, Llama post_attention_layernorm): the values bertlook taps
    (GPT-2's fused c_attn, Llama's grouped-query v_proj repeated per head) and its W_O / b_O give it."""
    import torch

    from bertlook.attention import norms
    from bertlook.attention.contributions import head_vectors

    model = _decoder(arch)
    layers = model.h if arch == "gpt2" else model.layers
    ln2 = layers[1].ln_2 if arch == "gpt2" else layers[1].post_attention_layernorm
    got = {}
    hook = ln2.register_forward_pre_hook(lambda m, args: got.__setitem__("pre", args[0]))
    ids = torch.randint(1, 50, (1, 6), generator=torch.Generator().manual_seed(4))
    mods = norms.find_attention_modules(model)
    try:
        with torch.no_grad(), norms.capture_values(mods) as values:
            out = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    finally:
        hook.remove()
    _tap, dense = mods[1]
    f = head_vectors(values[1], dense.weight, 4)
    b = dense.bias if dense.bias is not None else 0.0
    y = out.hidden_states[1] + torch.einsum("bhij,bhjd->bid", out.attentions[1], f) + b
    assert torch.allclose(y, got["pre"], atol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# value zeroing on a hand-built layer


def _one_hot_attention_bert(sharp: float = 50.0):
    """A one-layer BertModel (d_model 4, 2 heads of 2) whose both heads attend only to token id 1 ("A"):

    - embeddings: words e_A = (1, -1, 1, -1), e_B = (1, 1, -1, -1), e_C = (1, -1, -1, 1) (mean 0, variance 1,
      pairwise orthogonal), no position or segment embeddings: the layer input is x_j = e_j / sqrt(1 + eps);
    - queries a constant (W_Q = 0, b_Q = (s, 0, s, 0)), keys k_j = (e_A . x_j, 0, e_A . x_j, 0): a score of
      4 s / sqrt(2) on A and 0 elsewhere, so softmax gives exactly 1 on A and 0 elsewhere in float32;
    - values and W_O random with biases (zeroing must take the value bias too); the feed-forward block is 0 and
      both LayerNorms are gamma 1, beta 0, so the layer output is y_i = LN(LN(pre_i)).
    """
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=4, hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                     max_position_embeddings=8, type_vocab_size=1, pad_token_id=0, attn_implementation="eager")
    torch.manual_seed(5)
    model = BertModel(cfg).eval()
    e = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]])
    layer = model.encoder.layer[0]
    sa = layer.attention.self
    gen = torch.Generator().manual_seed(6)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.copy_(e)
        model.embeddings.position_embeddings.weight.zero_()
        model.embeddings.token_type_embeddings.weight.zero_()
        sa.query.weight.zero_()
        sa.query.bias.copy_(torch.tensor([sharp, 0.0, sharp, 0.0]))
        sa.key.weight.zero_()
        sa.key.weight[0] = e[1]
        sa.key.weight[2] = e[1]
        sa.key.bias.zero_()
        sa.value.weight.copy_(torch.randn(4, 4, generator=gen))
        sa.value.bias.copy_(torch.randn(4, generator=gen))
        layer.attention.output.dense.weight.copy_(torch.randn(4, 4, generator=gen))
        layer.attention.output.dense.bias.copy_(torch.randn(4, generator=gen))
        for lin in (layer.intermediate.dense, layer.output.dense):
            lin.weight.zero_()
            lin.bias.zero_()
        for ln in (model.embeddings.LayerNorm, layer.attention.output.LayerNorm, layer.output.LayerNorm):
            ln.weight.fill_(1.0)
            ln.bias.zero_()
    return model, e


def _ln(u, eps):
    return (u - u.mean(-1, keepdims=True)) / np.sqrt(u.var(-1, keepdims=True) + eps)


@pytest.mark.parametrize("ids", [[1, 2, 3], [2, 1, 3, 3]])
def test_value_zeroing_by_hand_on_a_head_that_attends_to_one_token(ids):
    import torch

    from bertlook.attention.value_zeroing import value_zeroing

    model, e = _one_hot_attention_bert()
    inputs = {"input_ids": torch.tensor([ids])}
    with torch.no_grad():
        attn = model(**inputs, output_attentions=True).attentions[0][0]
    a_pos = ids.index(1)
    assert (attn[..., a_pos] == 1).all() and (attn.sum(-1) == 1).all()  # one-hot on A, both heads
    # the expected raw distances: zeroing A takes the whole attention output away (pre'_i = x_i + b_O); zeroing
    # any other token changes nothing
    eps = float(model.config.layer_norm_eps)
    layer = model.encoder.layer[0]
    x = e[ids].double().numpy() / np.sqrt(1 + eps)
    sa, out = layer.attention.self, layer.attention.output.dense
    v_a = sa.value.weight.detach().double().numpy() @ x[a_pos] + sa.value.bias.detach().double().numpy()
    w_o, b_o = out.weight.detach().double().numpy(), out.bias.detach().double().numpy()
    y = _ln(_ln(x + w_o @ v_a + b_o, eps), eps)
    y0 = _ln(_ln(x + b_o, eps), eps)
    d_a = 1 - (y * y0).sum(-1) / (np.linalg.norm(y, axis=-1) * np.linalg.norm(y0, axis=-1))
    raw = value_zeroing(model, inputs, normalise=False)[0].numpy()
    expected = np.zeros((len(ids), len(ids)))
    expected[:, a_pos] = d_a
    assert d_a.min() > 1e-3
    np.testing.assert_allclose(raw, expected, atol=1e-6)
    norm = value_zeroing(model, inputs)[0].numpy()
    onehot = np.zeros_like(expected)
    onehot[:, a_pos] = 1.0
    np.testing.assert_allclose(norm, onehot, atol=1e-9)
    np.testing.assert_allclose(norm.sum(-1), 1.0, atol=1e-12)


def test_value_zeroing_zeroes_the_value_bias_too():
    """With W_V = 0 the values are the bias b_V alone: zeroing A still takes them away (the bias is zeroed)."""
    import torch

    from bertlook.attention.value_zeroing import value_zeroing

    model, _e = _one_hot_attention_bert()
    with torch.no_grad():
        model.encoder.layer[0].attention.self.value.weight.zero_()
    raw = value_zeroing(model, {"input_ids": torch.tensor([[1, 2, 3]])}, normalise=False)[0].numpy()
    assert raw[:, 0].min() > 1e-4 and np.abs(raw[:, 1:]).max() < 1e-9


def _no_value_model():
    """The hand-built layer with W_V = 0 and b_V = 0: no value reaches the output, zeroing one changes nothing."""
    import torch

    model, _e = _one_hot_attention_bert()
    with torch.no_grad():
        model.encoder.layer[0].attention.self.value.weight.zero_()
        model.encoder.layer[0].attention.self.value.bias.zero_()
    return model


def test_value_zeroing_without_any_effect_gives_rounding_only():
    import torch

    from bertlook.attention.value_zeroing import value_zeroing

    raw = value_zeroing(_no_value_model(), {"input_ids": torch.tensor([[1, 2, 3]])}, normalise=False).numpy()
    assert np.abs(raw).max() < 1e-12


def test_value_zeroing_rows_without_any_effect_stay_zeros():
    """Bitwise-equal outputs are at distance exactly 0 (``||a/|a| - b/|b|||^2 / 2``, not ``1 - cos``, which leaves
    +-2e-16 that the row normalisation would blow up to 1/3 each)."""
    import torch

    from bertlook.attention.value_zeroing import value_zeroing

    vz = value_zeroing(_no_value_model(), {"input_ids": torch.tensor([[1, 2, 3]])}).numpy()
    assert (vz == 0).all()


def test_value_zeroing_one_example_at_a_time():
    import torch

    from bertlook.attention.value_zeroing import value_zeroing

    model, _e = _one_hot_attention_bert()
    with pytest.raises(BertlookError, match="one example at a time"):
        value_zeroing(model, {"input_ids": torch.tensor([[1, 2, 3], [1, 2, 3]])})
