"""Contribution maps beyond attention weights: ALTI (Ferrando et al. 2022) and value zeroing (Mohebbi et al. 2023).

Both say how much token ``j`` moves token ``i``'s representation in one layer, counting what attention weights
leave out. All functions take and give torch tensors on the model's device (float32); torch is imported inside
them (this module is imported by steps that have no torch).

- **ALTI** (:func:`alti_layer`): a layer's attention block writes, for token ``i``,
  ``pre_i = x_i + sum_j sum_h alpha_h[i, j] f_h(x_j) + b_O`` (``x``: the layer's input, ``f_h(x_j)`` token ``j``'s
  value vector for head ``h`` through the head's slice of ``W_O``). In a post-LN encoder (BERT) the block's output is
  ``y_i = LN(pre_i)`` (BERT's and DeBERTa's ``attention.output.LayerNorm``, DistilBERT's ``sa_layer_norm``, ALBERT's
  ``attention.LayerNorm``: :func:`post_layer_norm`); LN is linear given row ``i``'s statistics, so
  ``y_i = sum_j T_i(x_j) + L(b_O)/sigma_i + beta`` with ``T_i(x_j) = L(sum_h alpha_h[i, j] f_h(x_j) + [i == j] x_i)
  / sigma_i``, ``L(v) = gamma * (v - mean(v))``, ``sigma_i = sqrt(var(pre_i) + eps)``. In a pre-LN model (the
  decoders GPT-2, GPT-NeoX, Llama; the encoder ModernBERT) the values already come from ``LN_1(x)`` and
  ``y_i = pre_i`` (``L`` the identity, ``sigma = 1``, ``beta = 0``). The contribution is
  ``c[i, j] = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1)``, row-normalised (the authors' "min_sum" scaling). ALTI
  per head (:func:`alti_heads`, bertlook's extension, said so in the tables): the same rule on one head's output
  alone, ``T^h_i(x_j) = L(alpha_h[i, j] f_h(x_j)) / sigma_i``, ``y^h_i = sum_j T^h_i(x_j)`` (no residual, no
  biases). ALTI over layers (:func:`alti_rollout`): ``R_1 = C_1``,
  ``R_l = C_l R_{l-1}`` (the residual is already in ``C``, so nothing is added).
- **Value zeroing** (:func:`value_zeroing`): for layer ``l`` and token ``j``, run the layer again on its
  original input with token ``j``'s value vectors zeroed in every head (bias included), and take the cosine
  distance of every token's new layer output (the whole block: attention, residual, LayerNorms, feed-forward) to
  the original: ``d[i, j] = 1 - cos(y_i^(not j), y_i)``; rows normalised to sum to 1. In a causal model zeroing
  ``j`` cannot move rows ``i < j``: they are set to exactly 0 (measured before: below 1e-6).

Choices (docs/definitions.md#alti-and-value-zeroing): L1 distances as the authors; ``sigma_i`` is the LayerNorm's
own (biased variance plus eps), so that the decomposition adds up to the model's output; the authors' code divides
by the unbiased standard deviation of ``pre_i`` (``sigma="unbiased_std"`` reproduces it); special tokens are
tokens like any other; a row whose contributions are all 0 stays all 0 (never divided by 0).

Definitions: docs/definitions.md#alti-and-value-zeroing
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from bertlook.errors import BertlookError

#: rows x key positions x d_model floats per chunk of the ALTI distance computation (~64 MiB of float32)
CHUNK_ELEMENTS = 16 << 20
#: ALTI's distances of CPU tensors through the fused kernels of :mod:`bertlook.attention.alti_kernels` (the same
#: values, nearer the float64 result than the float32 torch path; 6x (per layer) and 9-12x (per head) faster at
#: MiniLM's shapes: docs/development/benchmarks.md); False: the torch path everywhere (the tests' reference)
CPU_KERNELS = True


@dataclass(frozen=True)
class PostLayerNorm:
    """The LayerNorm after a post-LN block's residual sum: ``weight`` (gamma), ``bias`` (beta), ``eps``."""

    weight: Any
    bias: Any
    eps: float


def head_vectors(values, w_o, num_heads: int):
    """``f_h(x_j)`` for every head and token: ``[batch, head, key_pos, d_model]``.

    ``values``: ``x W_V + b_V`` ``[batch, seq, heads * d_head]``; ``w_o``: ``[d_model, heads * d_head]`` (out, in)."""
    return _head_vectors(values.float(), w_o.float(), num_heads)


def _head_vectors(v, w_o, num_heads: int):
    """:func:`head_vectors` in the dtype of ``v`` and ``w_o`` (float64 for the CPU kernel of :func:`alti_heads`)."""
    import torch  # lazy: see the module docstring

    B, S, D = v.shape
    H = int(num_heads)
    if D % H or w_o.shape[1] != D:
        raise BertlookError(f"head_vectors: values of size {D} and W_O {list(w_o.shape)} do not fit {H} heads")
    vh = v.reshape(B, S, H, D // H)  # [batch, seq, head, d_head]
    wh = w_o.reshape(w_o.shape[0], H, D // H)  # [d_model, head, d_head]
    return torch.einsum("bshe,ohe->bhso", vh, wh)  # [batch, head, key_pos, d_model]


def _centre(v, ln: PostLayerNorm | None):
    """``L(v) = gamma * (v - mean(v))`` over the last axis (the identity without a post-LN)."""
    if ln is None:
        return v
    return (v - v.mean(-1, keepdim=True)) * ln.weight.float()


def _sigma(pre, ln: PostLayerNorm | None, sigma: str):
    """``sigma_i`` of every row of ``pre`` ``[batch, seq, d_model]`` -> ``[batch, seq, 1]``."""
    import torch  # lazy: see the module docstring

    if ln is None:
        return torch.ones_like(pre[..., :1])
    if sigma == "layernorm":
        return (pre.var(-1, unbiased=False, keepdim=True) + float(ln.eps)).sqrt()
    if sigma == "unbiased_std":  # the authors' code: (pre + eps).std(-1), torch's unbiased estimate
        return (pre + float(ln.eps)).std(-1, keepdim=True)
    raise BertlookError(f"alti: unknown sigma {sigma!r} (layernorm, unbiased_std)")


def _key_stop(w, i1: int) -> int:
    """The keys rows ``..i1`` need: ``w`` ``[..., rows, key_pos]`` the rows' weights (every head and batch entry);
    past the last key any of them weights (and past ``i1``: a row's own token ``j = i`` has its residual), every
    ``T_i(x_j)`` is 0, so ``c = max(0, ||y_i|| - ||y_i||) = 0`` exactly: a causal map's later keys, padded keys."""
    live = (w != 0).flatten(0, -2).any(0).nonzero()  # [live keys, 1]
    return max(i1, int(live[-1, 0]) + 1 if live.numel() else 0)


def _min_sum(y, parts_fn: Callable[[int, int, int], Any], n: int, weights: Callable[[int, int], Any]):
    """``max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1)`` row-normalised: ``y`` ``[batch, q, d]``, ``parts_fn(i0, i1, k)``
    the transformed vectors of rows ``i0:i1`` and keys ``:k`` ``[batch, rows, k, d]``, ``weights(i0, i1)`` the
    rows' weights ``[..., rows, key_pos]``; computed in row chunks, each on the keys :func:`_key_stop` leaves it
    (the others are 0: in a causal map half the work, which on a GPU is memory traffic)."""
    import torch  # lazy: see the module docstring

    B, Q, D = y.shape
    out = torch.zeros((B, Q, n), dtype=torch.float32, device=y.device)  # [batch, query_pos, key_pos]
    step = max(1, CHUNK_ELEMENTS // max(1, B * n * D))
    ynorm = y.abs().sum(-1)  # [batch, query_pos]
    for i0 in range(0, Q, step):
        i1 = min(Q, i0 + step)
        k = _key_stop(weights(i0, i1), i1)
        t = parts_fn(i0, i1, k)  # [batch, rows, k, d]
        dist = (y[:, i0:i1, None, :] - t).abs_().sum(-1)  # [batch, rows, k]
        out[:, i0:i1, :k] = (ynorm[:, i0:i1, None] - dist).clamp_min_(0)
    sums = out.sum(-1, keepdim=True)
    return out / torch.where(sums > 0, sums, torch.ones_like(sums))


def _kernels(t):
    """:mod:`bertlook.attention.alti_kernels` where ``t`` is a CPU tensor (and :data:`CPU_KERNELS`), else None."""
    if not CPU_KERNELS or t.device.type != "cpu":
        return None
    from bertlook.attention import alti_kernels  # lazy: numba (compiled kernels) only where ALTI runs on a CPU

    return alti_kernels


def _np(t):
    """A CPU tensor's values as a numpy array (no copy where it is contiguous)."""
    return t.detach().contiguous().numpy()


def _threads() -> int:
    import torch  # lazy: see the module docstring

    return torch.get_num_threads()


def alti_layer(x, attn, values, w_o, b_o=None, ln: PostLayerNorm | None = None, *, sigma: str = "layernorm"):
    """ALTI of one layer (the authors' definition, module docstring): ``[batch, query_pos, key_pos]`` float32.

    ``x``: the layer's input ``[batch, seq, d_model]``; ``attn``: ``[batch, head, seq, seq]``; ``values``:
    ``[batch, seq, heads * d_head]``; ``w_o`` ``[d_model, heads * d_head]``, ``b_o`` ``[d_model]`` or None; ``ln``:
    the post-LN of an encoder, None for a pre-LN decoder."""
    import torch  # lazy: see the module docstring

    x, a = x.float(), attn.float()
    H, n = a.shape[1], a.shape[-1]
    f = head_vectors(values, w_o, H)  # [batch, head, key_pos, d_model]
    bias = torch.zeros_like(x[0, 0]) if b_o is None else b_o.float()
    pre = x + torch.einsum("bhij,bhjd->bid", a, f) + bias  # [batch, seq, d_model]: the LN's input
    s = _sigma(pre, ln, sigma)  # [batch, seq, 1]
    y = _centre(pre, ln) / s  # [batch, seq, d_model]: the block's output (LN(pre) with its beta below)
    if ln is not None:
        y = y + ln.bias.float()
    kernels = _kernels(x)
    if kernels is not None:  # the same values without the [batch, rows, keys, d] temporaries
        gamma = None if ln is None else _np(ln.weight.float())
        return torch.from_numpy(kernels.alti_layer_rows(_np(a), _np(f), _np(x), _np(y), _np(s[..., 0]), gamma,
                                                        num_threads=_threads()))
    eye = torch.eye(n, device=x.device, dtype=x.dtype)

    def parts(i0: int, i1: int, k: int):  # [batch, rows, k, d_model]
        t = torch.einsum("bhij,bhjd->bijd", a[:, :, i0:i1, :k], f[:, :, :k])
        t = t + eye[i0:i1, :k, None] * x[:, i0:i1, None, :]
        return _centre(t, ln) / s[:, i0:i1, None, :]

    return _min_sum(y, parts, n, lambda i0, i1: a[:, :, i0:i1])


def alti_heads(attn, values, w_o, ln: PostLayerNorm | None = None):
    """ALTI per head (bertlook's extension, module docstring): ``[batch, head, query_pos, key_pos]`` float32.

    ``sigma_i`` scales every term of row ``i`` alike, so it cancels in the normalised map and is not needed;
    ``ln`` (its ``gamma`` and the centring) still shapes the distances."""
    import torch  # lazy: see the module docstring

    a = attn.float()
    B, H, n, _ = a.shape
    kernels = _kernels(a)
    if kernels is not None:  # the same values without the [batch, rows, keys, d] temporaries; c << ||T|| can be
        # ill-conditioned, so u in float64 (float32 head vectors moved some values by 3e-7: tests/test_alti_kernels.py)
        u64 = _centre(_head_vectors(values.double(), w_o.double(), H), ln)
        return torch.from_numpy(kernels.alti_heads_rows(_np(a), _np(u64), num_threads=_threads()))
    f = head_vectors(values, w_o, H)  # [batch, head, key_pos, d_model]
    u = _centre(f, ln)  # [batch, head, key_pos, d_model]: L(f_h(x_j)); T^h_i(x_j) = alpha * u_j / sigma_i
    out = torch.empty((B, H, n, n), dtype=torch.float32, device=a.device)
    for h in range(H):
        y = torch.einsum("bij,bjd->bid", a[:, h], u[:, h])  # [batch, seq, d_model]
        out[:, h] = _min_sum(y, lambda i0, i1, k, h=h: a[:, h, i0:i1, :k, None] * u[:, h, None, :k, :], n,
                             lambda i0, i1, h=h: a[:, h, i0:i1])
    return out


def alti_rollout(layers):
    """ALTI over layers: ``layers`` ``[layer, ..., q, k]`` (float32 or float64) -> ``R`` of the same shape, float64:
    ``R_1 = C_1``, ``R_l = C_l R_{l-1}``."""
    import torch  # lazy: see the module docstring

    c = layers.double()
    out = torch.empty_like(c)
    out[0] = c[0]
    for l in range(1, c.shape[0]):
        out[l] = c[l] @ out[l - 1]
    return out


def post_layer_norm(model, layer: int) -> PostLayerNorm | None:
    """The LayerNorm after layer ``layer``'s attention residual in a post-LN encoder (``attention.output.LayerNorm``
    of BERT, RoBERTa, ELECTRA, MiniLM, DeBERTa-v2/v3; DistilBERT's ``sa_layer_norm``; ALBERT's ``attention.LayerNorm``
    of the layer module the layer runs: :data:`bertlook.attention.norms.ENCODER_LAYOUTS`); None for a pre-LN model
    (GPT-2, GPT-NeoX, Llama, and the encoder ModernBERT, whose ``attn_norm`` comes before the attention: no
    LayerNorm after the residual)."""
    from bertlook.attention import norms  # lazy: norms is heavier than this module needs for the maths

    layout = norms.encoder_layout(model)
    if not layout or not layout[1]:
        return None
    kind, layers = layout
    path = norms.ENCODER_LAYOUTS[kind][2]
    if path is None:  # a pre-LN encoder (ModernBERT): y_i = pre_i, as in a decoder
        return None
    ln = norms.layer_module(layers[layer], path)
    if ln is None:
        raise BertlookError(f"alti: model class {type(model).__name__}, layer {layer + 1}: no {path} (a post-LN "
                            "encoder must have one)")
    return PostLayerNorm(ln.weight.detach(), ln.bias.detach(), float(ln.eps))


def example_maps(model, inputs: dict[str, Any], *, heads: bool = True) -> dict[str, Any]:
    """Every per-layer map of one forward pass of ``inputs`` (any batch; eager attention): ``attention``
    ``[batch, layer, head, q, k]`` (the weights), ``alti`` ``[batch, layer, q, k]``, ``alti_heads`` (``heads``)
    ``[batch, layer, head, q, k]``; float32 on the model's device. Value zeroing needs extra passes:
    :func:`bertlook.attention.value_zeroing.value_zeroing`."""
    import torch  # lazy: see the module docstring
    from bertlook.attention import norms  # lazy: see post_layer_norm

    mods = norms.find_attention_modules(model)
    with torch.no_grad(), norms.capture_values(mods) as values:
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
        attn = [a.float() for a in out.attentions]
        alti, per_head = [], []
        for l, (_tap, dense) in enumerate(mods):
            ln = post_layer_norm(model, l)
            w, b = dense.weight.detach(), getattr(dense, "bias", None)
            alti.append(alti_layer(out.hidden_states[l], attn[l], values[l], w, b, ln))
            if heads:
                per_head.append(alti_heads(attn[l], values[l], w, ln))
    maps = {"attention": torch.stack(attn, 1), "alti": torch.stack(alti, 1)}
    if heads:
        maps["alti_heads"] = torch.stack(per_head, 1)
    return maps
