"""The fused CPU kernels of ALTI (src/bertlook/attention/alti_kernels.py) against the torch path of
src/bertlook/attention/contributions.py (``CPU_KERNELS = False``): random inputs with and without a post-LN,
causal and padded maps, both ``sigma`` choices, a tiny BERT's and a tiny GPT-2's real tensors; the thread count
changes no bit.

The torch path works in float32 and its own rounding grows with ``d_model``: at MiniLM's shapes (d 384, rows
summing |y| ~ 300) its normalised values are 3e-5 from the float64 result, where the kernels (float64 sums) are
within 2e-7. So the reference of the 1e-6 relative / 1e-7 absolute tolerance is the torch path run in float64
(``Tensor.float`` made ``Tensor.double`` for the call: the same code, the same operations, inputs rounded alike);
the kernels must also be no farther from it than the float32 torch path is (at d 32-48: 1e-6 to 5e-6)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from bertlook.attention import alti_kernels, norms
from bertlook.attention import contributions as C

RTOL, ATOL = 1e-6, 1e-7


@contextlib.contextmanager
def torch_path(float64: bool = False):
    """Within the block contributions' functions take the torch path (float64 throughout with ``float64``)."""
    old, C.CPU_KERNELS = C.CPU_KERNELS, False
    real = torch.Tensor.float
    if float64:
        torch.Tensor.float = lambda self, *a, **k: self.double()  # the path's every .float(): its only casts
    try:
        yield
    finally:
        C.CPU_KERNELS = old
        torch.Tensor.float = real


def _close(kernel, ref):
    np.testing.assert_allclose(kernel.numpy(), ref.float().numpy(), rtol=RTOL, atol=ATOL)


def _check(kernel, ref64, ref32):
    """Within the tolerance of the float64 torch path, and no farther from it than the float32 torch path is."""
    _close(kernel, ref64)
    err, err32 = (kernel.double() - ref64.double()).abs().max(), (ref32.double() - ref64.double()).abs().max()
    assert err <= err32 + ATOL, (err, err32)


def _random_layer(seed: int, *, B=2, H=4, n=21, d=48, causal=False, ln=True, pad=5):
    """Random ``(x, attn, values, w_o, b_o, ln)`` of one layer; batch entry 1 has its last ``pad`` keys masked."""
    g = torch.Generator().manual_seed(seed)
    scores = 2 * torch.randn(B, H, n, n, generator=g)
    mask = torch.zeros(B, 1, 1, n, dtype=torch.bool)
    mask[1:, ..., n - pad:] = True
    if causal:
        mask = mask | torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    attn = torch.softmax(scores.masked_fill(mask, float("-inf")), -1)
    x = torch.randn(B, n, d, generator=g)
    values = torch.randn(B, n, d, generator=g)
    w_o, b_o = torch.randn(d, d, generator=g) / d**0.5, torch.randn(d, generator=g)
    post = C.PostLayerNorm(torch.rand(d, generator=g) + 0.5, 0.1 * torch.randn(d, generator=g), 1e-12) if ln else None
    return x, attn, values, w_o, b_o, post


CASES = [(ln, causal) for ln in (True, False) for causal in (False, True)]


@pytest.mark.parametrize("ln,causal", CASES)
def test_alti_layer_matches_the_torch_path(ln, causal):
    x, attn, values, w_o, b_o, post = _random_layer(1, ln=ln, causal=causal)
    for sigma in ("layernorm", "unbiased_std") if ln else ("layernorm",):
        got = C.alti_layer(x, attn, values, w_o, b_o, post, sigma=sigma)
        with torch_path(float64=True):
            ref64 = C.alti_layer(x, attn, values, w_o, b_o, post, sigma=sigma)
        with torch_path():
            ref32 = C.alti_layer(x, attn, values, w_o, b_o, post, sigma=sigma)
        _check(got, ref64, ref32)
        assert got.dtype == torch.float32 and got.shape == (2, 21, 21)
        if causal:
            assert not torch.triu(got, 1).any()  # a token never moves rows before it: exactly 0
        assert not got[1, :-5, -5:].any()  # padded keys of the real rows: exactly 0
        assert torch.allclose(got.sum(-1), torch.ones(2, 21))


@pytest.mark.parametrize("ln,causal", CASES)
def test_alti_heads_matches_the_torch_path(ln, causal):
    _x, attn, values, w_o, _b, post = _random_layer(2, ln=ln, causal=causal)
    got = C.alti_heads(attn, values, w_o, post)
    with torch_path(float64=True):
        ref64 = C.alti_heads(attn, values, w_o, post)
    with torch_path():
        ref32 = C.alti_heads(attn, values, w_o, post)
    _check(got, ref64, ref32)
    assert got.shape == (2, 4, 21, 21)
    if causal:
        assert not torch.triu(got, 1).any()


@pytest.mark.parametrize("heads", [1, 3, 6, 9])
def test_head_counts_that_are_not_multiples_of_four(heads):
    """The per-layer kernel sums heads four at a time, the last group padded with weight 0."""
    x, attn, values, w_o, b_o, post = _random_layer(8, H=heads, d=36, causal=heads % 2 == 1)
    got = C.alti_layer(x, attn, values, w_o, b_o, post)
    with torch_path(float64=True):
        ref64 = C.alti_layer(x, attn, values, w_o, b_o, post)
    with torch_path():
        ref32 = C.alti_layer(x, attn, values, w_o, b_o, post)
    _check(got, ref64, ref32)


def test_minilm_shapes_kernel_nearer_float64_than_the_float32_torch_path():
    """At d 384 the float32 torch path is ~1e-5 off; the kernel stays within the tolerance of the float64 path."""
    x, attn, values, w_o, b_o, post = _random_layer(3, B=1, H=12, n=64, d=384, pad=0)
    got = C.alti_layer(x, attn, values, w_o, b_o, post)
    with torch_path(float64=True):
        ref64 = C.alti_layer(x, attn, values, w_o, b_o, post)
    _close(got, ref64)
    got_h = C.alti_heads(attn, values, w_o, post)
    with torch_path(float64=True):
        _close(got_h, C.alti_heads(attn, values, w_o, post))


def test_thread_count_changes_no_bit():
    g = np.random.default_rng(4)
    B, H, n, d = 3, 5, 43, 24
    a = g.random((B, H, n, n), dtype=np.float32)
    f, u = g.standard_normal((B, H, n, d), dtype=np.float32), g.standard_normal((B, H, n, d), dtype=np.float32)
    x, y = g.standard_normal((B, n, d), dtype=np.float32), g.standard_normal((B, n, d), dtype=np.float32)
    s, gamma = g.random((B, n), dtype=np.float32) + 0.5, g.random(d, dtype=np.float32) + 0.5
    one = alti_kernels.alti_layer_rows(a, f, x, y, s, gamma, num_threads=1)
    heads = alti_kernels.alti_heads_rows(a, u, num_threads=1)
    assert one.any() and heads.any()
    for threads in (2, 3):
        np.testing.assert_array_equal(alti_kernels.alti_layer_rows(a, f, x, y, s, gamma, num_threads=threads), one)
        np.testing.assert_array_equal(alti_kernels.alti_heads_rows(a, u, num_threads=threads), heads)


def test_torch_thread_count_through_contributions():
    """Through alti_layer / alti_heads (kernel threads = torch's), 1 vs 2 threads: within the tolerance."""
    x, attn, values, w_o, b_o, post = _random_layer(9, B=3, n=40)
    before = torch.get_num_threads()
    got = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            got[threads] = C.alti_layer(x, attn, values, w_o, b_o, post), C.alti_heads(attn, values, w_o, post)
    finally:
        torch.set_num_threads(before)
    _close(got[2][0], got[1][0])
    _close(got[2][1], got[1][1])


def test_cpu_tensors_go_through_the_kernels(monkeypatch):
    """The dispatch: CPU tensors reach the kernels (a test that fails if contributions stops calling them)."""
    x, attn, values, w_o, b_o, post = _random_layer(5)
    calls = []
    for name in ("alti_layer_rows", "alti_heads_rows"):
        real = getattr(alti_kernels, name)
        monkeypatch.setattr(alti_kernels, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    C.alti_layer(x, attn, values, w_o, b_o, post)
    C.alti_heads(attn, values, w_o, post)
    with torch_path():
        C.alti_layer(x, attn, values, w_o, b_o, post)
    assert calls == ["alti_layer_rows", "alti_heads_rows"]


def test_nan_rows_stay_nan_as_in_the_torch_path():
    x, attn, values, w_o, b_o, post = _random_layer(6)
    attn[0, 1, 3, 4] = float("nan")
    got = C.alti_layer(x, attn, values, w_o, b_o, post)
    with torch_path():
        ref = C.alti_layer(x, attn, values, w_o, b_o, post)
    assert torch.equal(got.isnan(), ref.isnan()) and got[0, 3].isnan().all()
    got_h = C.alti_heads(attn, values, w_o, post)
    with torch_path():
        assert torch.equal(got_h.isnan(), C.alti_heads(attn, values, w_o, post).isnan())


def _tiny(kind: str):
    from transformers import GPT2Config, GPT2Model

    from bertlook.testing.tiny_models import random_ln_bert

    if kind == "bert":  # random LayerNorms: gamma and beta take part in the post-LN kernels
        model = random_ln_bert(layers=2, hidden=32, heads=4, vocab=60, intermediate=64, max_positions=64, seed=7,
                               pooling=False)
    else:
        torch.manual_seed(7)
        model = GPT2Model(GPT2Config(vocab_size=60, n_embd=32, n_layer=2, n_head=4, n_positions=64))
        model.config._attn_implementation = "eager"
    ids = torch.randint(0, 60, (2, 19))
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0  # a padded example
    return model.eval(), {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_real_tensors_of_a_tiny_model(kind):
    """Each layer's ALTI (per layer and per head) of a tiny random BERT (post-LN) and GPT-2 (pre-LN, causal)."""
    model, inputs = _tiny(kind)
    mods = norms.find_attention_modules(model)
    with torch.no_grad(), norms.capture_values(mods) as values:
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
        for l, (_tap, dense) in enumerate(mods):
            ln = C.post_layer_norm(model, l)
            assert (ln is None) == (kind == "gpt2")
            args = (out.hidden_states[l], out.attentions[l], values[l], dense.weight, dense.bias, ln)
            got, got_h = C.alti_layer(*args), C.alti_heads(out.attentions[l], values[l], dense.weight, ln)
            refs = {}
            for float64 in (True, False):
                with torch_path(float64):
                    refs[float64] = C.alti_layer(*args), C.alti_heads(out.attentions[l], values[l], dense.weight, ln)
            _check(got, refs[True][0], refs[False][0])
            _check(got_h, refs[True][1], refs[False][1])
    maps = C.example_maps(model, inputs)
    with torch_path():
        ref = C.example_maps(model, inputs)
    for key in ("alti", "alti_heads"):  # the float32 torch path: its own rounding, ~1e-6 at d 32
        np.testing.assert_allclose(maps[key].numpy(), ref[key].numpy(), rtol=1e-5, atol=1e-5)


def test_benchmark_script_runs_small(tmp_path, capsys):
    """scripts/bench_contributions.py (make bench) on a random MiniLM-shaped BERT, tiny sizes."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_contributions.py"
    spec = importlib.util.spec_from_file_location("bench_contributions", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--random", "--batch", "2", "--torch-batch", "1", "--seq-len", "12", "--chunks", "4",
                       "--repeats", "1", "--matmul-reps", "1", "--threads", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["alti"]["alti_layer"]["macs"] == 2 * 12 * 12 * 12 * 384
    assert result["value_zeroing"]["all_layers"]["seconds"] > 0 and "4" in result["value_zeroing"]["chunks"]
    assert "value zeroing" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["layer", "heads"])
def test_torch_path_skips_the_keys_no_row_weights(kind, monkeypatch):
    """The torch path (a GPU's) computes each chunk of rows on the keys up to the last one any of them weights
    (C._key_stop): on a causal map about half the pairs, on padded keys none of the padding; the maps equal the
    torch path on every key (the skipped contributions are exactly 0 either way)."""
    x, attn, values, w_o, b_o, post = _random_layer(3, causal=True, pad=7)
    monkeypatch.setattr(C, "CHUNK_ELEMENTS", 2 * 21 * 48 * 3)  # 3 rows per chunk: 7 chunks
    real, keys = C._key_stop, []
    monkeypatch.setattr(C, "_key_stop", lambda w, i1: keys.append(real(w, i1)) or keys[-1])

    def run():
        keys.clear()
        if kind == "layer":
            return C.alti_layer(x, attn, values, w_o, b_o, post)
        return C.alti_heads(attn, values, w_o, post)

    with torch_path():
        skipped, used = run(), list(keys)
        monkeypatch.setattr(C, "_key_stop", lambda w, i1: 21)  # every key, as before the skip
        every = run()
    assert used[:7] == [3, 6, 9, 12, 15, 18, 21]  # causal: rows i0:i1 need keys :i1
    assert sum(used) < 0.6 * 21 * len(used)
    np.testing.assert_allclose(skipped.numpy(), every.numpy(), rtol=0, atol=1e-7)
    assert torch.equal(skipped[..., 20], every[..., 20])  # nothing beyond: the last key of the last chunk
