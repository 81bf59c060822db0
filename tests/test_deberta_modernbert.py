"""DeBERTa-v2/v3 and ModernBERT through every model-side reader, and every layout of config/atlas.yaml.

DeBERTa-v2/v3 (``encoder.layer[i].attention.self.value_proj`` / ``attention.output.dense``, post-LN
``attention.output.LayerNorm``; disentangled relative-position attention whose output is still softmax weights @
values -> dense; its classes declare no attention modules to transformers, so the capture asks each layer's
``attention.self`` for its weights). ModernBERT (``layers[i].attn.Wqkv`` fused q|k|v, ``attn.Wo``, pre-LN
``attn_norm`` (an identity in layer 0), global and sliding-window layers, bidirectional).

Norm-based maps against a hand computation, ALTI's decomposition against the real LayerNorm output (DeBERTa) / the
residual stream after the attention (ModernBERT) to 1e-6, the layer-by-layer capture against
``output_attentions=True``, value zeroing against the model run with one token's values zeroed in one layer, head
ablation against a hand hook, the MLM heads, ``extract-segments --norms-out`` on tiny directories; and a tiny random
instance of the class of every model of config/atlas.yaml (its fixture config.json) passes the readers' lookups and
one captured forward pass."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
IDS = [[2, 7, 11, 5, 9, 3, 8, 6, 4, 3]]
ARCHS = ("deberta_v2", "modernbert")


def _random_ln(model, seed):
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.copy_(1.0 + 0.5 * torch.randn(mod.weight.shape, generator=gen))
                if mod.bias is not None:
                    mod.bias.copy_(0.5 * torch.randn(mod.bias.shape, generator=gen))
    return model


def _model(arch, layers=3, hidden=16, heads=2, seed=0, mlm=False):
    """A tiny random model in memory, eager attention, random LayerNorms; ModernBERT with biases (they must count)."""
    import torch
    import transformers

    from bertlook.testing.tiny_models import ENCODER_ARCHS, tiny_encoder_config

    extra = {"attention_bias": True, "norm_bias": True} if arch == "modernbert" else {}
    cfg = tiny_encoder_config(arch, vocab_size=30, layers=layers, heads=heads, hidden=hidden,
                              intermediate_size=2 * hidden, max_position_embeddings=32, initializer_range=0.3,
                              attn_implementation="eager", **extra)
    torch.manual_seed(seed)
    cls = getattr(transformers, ENCODER_ARCHS[arch][2 if mlm else 1])
    return _random_ln(cls(cfg).eval(), seed)


def _layers(model):
    base = model.base_model
    return list(base.encoder.layer) if hasattr(base, "encoder") else list(base.layers)


def _parts(arch, model, l):
    """(value module, output projection, post-LN or None, the value slice of the value module's output)."""
    layer = _layers(model)[l]
    if arch == "deberta_v2":
        return layer.attention.self.value_proj, layer.attention.output.dense, layer.attention.output.LayerNorm, \
            slice(None)
    d = layer.attn.Wo.in_features
    return layer.attn.Wqkv, layer.attn.Wo, None, slice(2 * d, 3 * d)


def _value_input(arch, model, l, x):
    """The input of layer l's value projection, from the layer's input x (ModernBERT: through attn_norm)."""
    import torch

    if arch == "deberta_v2":
        return x
    with torch.no_grad():
        return _layers(model)[l].attn_norm(x)


def _run(model, ids=IDS):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), output_attentions=True, output_hidden_states=True)


def test_the_layouts_are_found():
    from bertlook.attention import contributions, norms
    from bertlook.attention.layer_capture import attention_modules

    d, m = _model("deberta_v2"), _model("modernbert")
    assert norms.encoder_layout(d)[0] == "deberta" and norms.encoder_layout(m)[0] == "modernbert"
    assert norms.decoder_layers(m) is None
    dm, mm = norms.find_attention_modules(d, 2), norms.find_attention_modules(m, 2)
    assert [v for v, _ in dm] == [layer.attention.self.value_proj for layer in d.encoder.layer]
    assert [v.module for v, _ in mm] == [layer.attn.Wqkv for layer in m.layers]
    assert [o for _, o in mm] == [layer.attn.Wo for layer in m.layers]
    assert [name for name, _, _ in attention_modules(d)] == [f"encoder.layer.{i}.attention.self" for i in range(3)]
    assert [name for name, _, _ in attention_modules(m)] == [f"layers.{i}.attn" for i in range(3)]
    assert contributions.post_layer_norm(m, 1) is None  # pre-LN
    post = contributions.post_layer_norm(d, 1)
    assert post.weight is not None and post.eps == d.encoder.layer[1].attention.output.LayerNorm.eps
    assert m.config.layer_types[:2] == ["full_attention", "sliding_attention"]  # both kinds of layer are tested
    from bertlook.errors import BertlookError

    for model in (d, m):  # 16 features do not fit 3 heads
        with pytest.raises(BertlookError, match="do(es)? not fit 3 heads"):
            norms.find_attention_modules(model, 3)


@pytest.mark.parametrize("arch", ARCHS)
def test_norm_maps_equal_a_hand_computation(arch):
    """x W_V + b_V captured per layer (ModernBERT: the v third of Wqkv(attn_norm(x))) and the norm-based maps, against
    x from output_hidden_states through each layer's own weights, in float64 numpy."""
    from bertlook.attention import norms

    model = _model(arch)
    mods = norms.find_attention_modules(model, 2)
    with norms.capture_values(mods) as values:
        out = _run(model)
    H = 2
    for l in range(len(mods)):
        value, dense, _, part = _parts(arch, model, l)
        x = _value_input(arch, model, l, out.hidden_states[l])[0].double().numpy()
        v = (x @ value.weight.detach().double().numpy().T + value.bias.detach().double().numpy())[:, part]
        np.testing.assert_allclose(values[l][0].double().numpy(), v, atol=1e-5)
        wo = dense.weight.detach().double().numpy()
        alpha = out.attentions[l][0].double().numpy()
        dh = wo.shape[1] // H
        fn = np.array([[np.linalg.norm(wo[:, h * dh:(h + 1) * dh] @ v[j, h * dh:(h + 1) * dh])
                        for j in range(v.shape[0])] for h in range(H)])  # [head, key]
        want = alpha * fn[:, None, :]
        want /= want.sum(-1, keepdims=True)
        got = norms.norm_maps(out.attentions[l], norms.value_norms(values[l], dense.weight.detach(), H))
        np.testing.assert_allclose(got[0].double().numpy(), want, atol=2e-6)
    if arch == "modernbert":  # layer 2 is a sliding-window layer: keys beyond the window get weight 0, so do their
        sliding = norms.norm_maps(out.attentions[1], norms.value_norms(values[1], mods[1][1].weight.detach(), H))
        assert float(sliding[0, :, 0, -1].abs().max()) == 0.0 and float(sliding[0, :, 0, 1].min()) > 0  # norm maps


def _attention_outputs(arch, model):
    """Per layer, the output of the module ALTI decomposes (hooks): DeBERTa's attention.output.LayerNorm, ModernBERT's
    attn (the residual added by the caller)."""
    outs: list = []
    mods = [_parts(arch, model, l)[2] if arch == "deberta_v2" else _layers(model)[l].attn for l in range(3)]
    hooks = [m.register_forward_hook(lambda m, i, o: outs.append(o[0] if isinstance(o, tuple) else o)) for m in mods]
    try:
        out = _run(model)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(outs) == 3
    if arch == "modernbert":  # y = x + attn(attn_norm(x)): the residual stream after the attention block
        outs = [out.hidden_states[l] + outs[l] for l in range(3)]
    return out, outs


@pytest.mark.parametrize("arch", ARCHS)
def test_alti_decomposition_adds_up_to_the_block_output(arch):
    """sum_j T_i(x_j) + L(b_O) / sigma_i + beta = DeBERTa's attention.output.LayerNorm output; ModernBERT (pre-LN, as
    a decoder but not causal): sum_j T_i(x_j) + b_O = x_i + attn(attn_norm(x))_i; both to 1e-6. example_maps' ALTI is
    the min_sum map of these T; its attention maps are output_attentions'."""
    import torch

    from bertlook.attention import contributions

    model = _model(arch)
    out, block = _attention_outputs(arch, model)
    maps = contributions.example_maps(model, {"input_ids": torch.tensor(IDS)})
    for l in range(3):
        value, dense, ln, part = _parts(arch, model, l)
        x = out.hidden_states[l][0].double().numpy()
        xv = _value_input(arch, model, l, out.hidden_states[l])[0].double().numpy()
        a = out.attentions[l][0].double().numpy()
        v = (xv @ value.weight.detach().double().numpy().T + value.bias.detach().double().numpy())[:, part]
        w, b = dense.weight.detach().double().numpy(), dense.bias.detach().double().numpy()
        nh, n = a.shape[0], a.shape[1]
        dh = v.shape[1] // nh
        f = np.stack([[w[:, h * dh:(h + 1) * dh] @ v[j, h * dh:(h + 1) * dh] for j in range(n)] for h in range(nh)])
        if ln is not None:
            g, beta, eps = ln.weight.detach().double().numpy(), ln.bias.detach().double().numpy(), ln.eps
            centre = lambda u: g * (u - u.mean(-1, keepdims=True))  # noqa: E731
        want = np.zeros((n, n))
        for i in range(n):
            raw = np.stack([sum(a[h, i, j] * f[h, j] for h in range(nh)) + (x[i] if i == j else 0) for j in range(n)])
            if ln is not None:
                sigma = np.sqrt((raw.sum(0) + b).var() + eps)
                t = centre(raw) / sigma
                y = t.sum(0) + centre(b) / sigma + beta
            else:
                t, y = raw, raw.sum(0) + b
            np.testing.assert_allclose(y, block[l][0, i].double().numpy(), atol=1e-6)
            want[i] = np.maximum(0, np.abs(y).sum() - np.abs(y - t).sum(-1))
            want[i] /= want[i].sum()
        np.testing.assert_allclose(maps["alti"][0, l].numpy(), want, atol=2e-6)
        np.testing.assert_allclose(maps["attention"][0, l].numpy(), out.attentions[l][0].numpy())
        if arch == "modernbert" and model.config.layer_types[l] == "sliding_attention":
            assert np.abs(want[0, 3:]).max() == 0.0  # beyond the window: no contribution (not causal: 0 < 1 < 2)


@pytest.mark.parametrize("arch", ARCHS)
def test_maps_captured_layer_by_layer_equal_output_attentions(arch):
    """capture_layers, the model run without output_attentions (DeBERTa's modules asked for their weights by a
    pre-hook, the model returning none), equals output_attentions=True bit for bit, two passes in a row."""
    import torch

    from bertlook.attention.layer_capture import capture_layers

    model = _model(arch)
    got: dict = {}
    with capture_layers(model, lambda layer, w: got.setdefault(layer, []).append(w.clone())) as n_layers:
        with torch.no_grad():
            first = model(input_ids=torch.tensor(IDS))
            model(input_ids=torch.tensor(IDS))
    assert getattr(first, "attentions", None) is None  # nothing kept beyond the callback
    assert n_layers == 3 and sorted(got) == [0, 1, 2] and all(len(v) == 2 for v in got.values())
    want = _run(model).attentions
    for layer in range(3):
        assert torch.equal(got[layer][0], want[layer]) and torch.equal(got[layer][1], want[layer])
    assert not torch.allclose(want[0], want[1])
    with torch.no_grad():  # the hooks are gone: a plain pass returns no weights again
        assert getattr(model(input_ids=torch.tensor(IDS)), "attentions", None) is None


@pytest.mark.parametrize("arch", ARCHS)
def test_value_zeroing_against_the_model_run_with_one_token_zeroed(arch):
    """Each layer's raw distances equal the model run again with token j's value features (ModernBERT: the v third
    of Wqkv's output) zeroed in that layer only, the layer's output compared with the intact one; rows sum to 1."""
    import torch

    from bertlook.attention.value_zeroing import value_zeroing

    model = _model(arch)
    ids = torch.tensor(IDS)
    vz = value_zeroing(model, {"input_ids": ids})
    n = ids.shape[1]
    assert vz.shape == (3, n, n) and (vz >= 0).all()
    np.testing.assert_allclose(vz.sum(-1).numpy(), 1.0, atol=1e-12)
    raw = value_zeroing(model, {"input_ids": ids}, normalise=False, chunk=4)

    def layer_output(l, j=None):
        value, _, _, part = _parts(arch, model, l)
        cols = torch.arange(value.out_features)[part]
        kept = []
        hooks = [_layers(model)[l].register_forward_hook(lambda m, i, o: kept.append(o[0] if isinstance(o, tuple)
                                                                                     else o))]
        if j is not None:
            def zero(_m, _i, o):
                o = o.clone()
                o[:, j, cols] = 0
                return o
            hooks.append(value.register_forward_hook(zero))
        try:
            with torch.no_grad():
                model(input_ids=ids)
        finally:
            for h in hooks:
                h.remove()
        return kept[0][0].double()

    for l in range(3):
        ref = layer_output(l)
        for j in range(n):
            new = layer_output(l, j)
            d = 1 - (new * ref).sum(-1) / (new.norm(dim=-1) * ref.norm(dim=-1))
            np.testing.assert_allclose(raw[l, :, j].numpy(), d.numpy(), atol=1e-6)
    assert raw.amax() > 1e-4
    if arch == "modernbert":  # bidirectional: zeroing a later token moves earlier rows (no causal zeros)
        assert float(raw[0, 0, n - 1]) > 0


def _masked(ids, pos, label):
    from bertlook.analyses.gradient_pass import IGNORE_INDEX, MaskedSegment

    labels = [IGNORE_INDEX] * len(ids)
    labels[pos] = label
    return MaskedSegment(id=0, tokens=["x"] * len(ids), input_tokens=["x"] * len(ids), input_ids=list(ids),
                         token_type_ids=[0] * len(ids), labels=labels, masked_positions=[pos], actions=["mask"])


@pytest.mark.parametrize("arch", ARCHS)
def test_the_mlm_head_and_zero_ablation_against_a_hand_hook(arch):
    """The masked-LM head (DeBERTa: cls, its legacy head; ModernBERT: head then decoder) gives the model's own logits
    per position; zero ablation of head h of layer l equals a hand hook on that layer's output projection."""
    import torch

    from bertlook.analyses.head_ablation import head_ablation
    from bertlook.attention.mlm import mlm_head_module

    model = _model(arch, mlm=True)
    head = mlm_head_module(model)
    assert head is not None
    with torch.no_grad():
        out = model(input_ids=torch.tensor(IDS), output_hidden_states=True)
        last = model.base_model(input_ids=torch.tensor(IDS)).last_hidden_state
        np.testing.assert_allclose(head(last[0, 3:5]).numpy(), out.logits[0, 3:5].numpy(), atol=1e-5)
    ex = _masked(IDS[0], 3, 12)
    change, base = head_ablation(model, head, [ex], False, "cpu", "zero")
    H = 2
    assert change.shape == (1, 3 * H)
    ce = torch.nn.functional.cross_entropy
    for layer in range(3):
        dense = _parts(arch, model, layer)[1]
        dh = dense.weight.shape[1] // H
        for h in range(H):
            def hook(_m, args, h=h):
                x = args[0].clone()
                x[..., h * dh:(h + 1) * dh] = 0
                return (x,)
            handle = dense.register_forward_pre_hook(hook)
            try:
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor(IDS)).logits
            finally:
                handle.remove()
            loss = float(ce(logits[0, 3][None], torch.tensor([12])))
            assert change[0, layer * H + h] == pytest.approx(loss - base[0], abs=1e-5), (layer, h)
    assert len(set(np.round(change[0], 6))) == 3 * H


@pytest.mark.parametrize("arch", ARCHS)
def test_the_faithfulness_maps_and_every_contribution_kind_on_a_padded_batch(arch):
    from bertlook.analyses.contribution_maps import KINDS, RunTimes, token_maps
    from bertlook.analyses.faithfulness_pass import MEASURES, segment_maps
    from bertlook.attention.mlm import mlm_head_module

    model = _model(arch, mlm=True)
    seconds = {"maps": 0.0, "value_zeroing": 0.0, "gradients": 0.0}
    maps, importance = segment_maps(model, mlm_head_module(model) is not None, _masked(IDS[0], 3, 12), False, "cpu",
                                    seconds)
    assert set(maps) == set(MEASURES) and importance.shape == (3, 2)
    for name, m in maps.items():
        assert m.shape == (10, 10) and np.isfinite(m).all(), name
        if name != "grad_attention":
            np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5, err_msg=name)
    base = model.base_model
    rows = [IDS[0], [2, 8, 6, 3]]
    both = token_maps(base, rows, pad_id=0, causal=False, times=RunTimes())
    for b, row in enumerate(rows):
        (alone,) = token_maps(base, [row], pad_id=0, causal=False, times=RunTimes())
        for kind in KINDS:
            n = len(row)
            assert both[b][kind].shape[-2:] == (n, n) and np.isfinite(both[b][kind]).all(), kind
            np.testing.assert_allclose(both[b][kind], alone[kind], atol=2e-5, err_msg=kind)


@pytest.mark.parametrize("arch", ARCHS)
def test_cli_extract_segments_with_the_norm_store(tmp_path, arch, tokenizer, capsys):
    """extract-segments --norms-out on a tiny DeBERTa-v2 / ModernBERT directory (make_tiny_encoder): the store's maps
    equal output_attentions of the saved model."""
    import torch
    from transformers import AutoModel

    from bertlook.attention.store import open_store
    from bertlook.cli.extract_segments import register_cli
    from bertlook.testing.tiny_models import make_segment, make_tiny_encoder

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3)
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["model_type"] == {"deberta_v2": "deberta-v2"}.get(arch, arch)
    texts = [("the cat sat on the mat .", "the dog ran to the house ."), ("john read a book .", "mary wrote it .")]
    seg_path = tmp_path / "segments.jsonl"
    segs = [make_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(texts)]
    seg_path.write_text("".join(json.dumps(s) + "\n" for s in segs))
    parser = argparse.ArgumentParser(prog="bertlook")
    register_cli(parser.add_subparsers(dest="step"))
    args = parser.parse_args(["extract-segments", "--segments", str(seg_path), "--model", str(model_dir),
                              "--out", str(tmp_path / "att"), "--norms-out", str(tmp_path / "norm"),
                              "--device", "cpu", "--batch-size", "2", "--summary", str(tmp_path / "s.json")])
    assert args.func(args) == 0
    assert "norm-based maps -> " in capsys.readouterr().out
    att, nst = open_store(tmp_path / "att", level="token"), open_store(tmp_path / "norm", level="token")
    assert att.meta["map"] == "attention" and nst.meta["map"] == "norm" and len(att) == len(nst) == 2
    maps = {rec["id"]: np.asarray(a, dtype=np.float32) for rec, a in att}
    assert all(a.shape[:2] == (3, 2) for a in maps.values())
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    ids = tokenizer.convert_tokens_to_ids(segs[1]["tokens"])
    with torch.no_grad():
        want = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    for l in range(3):
        np.testing.assert_allclose(maps[1][l], want[l][0].numpy(), atol=2e-3)  # float16 in the store
    summary = json.loads((tmp_path / "s.json").read_text())
    assert sum(summary["norms"]["value_norm_counts"]) == summary["tokens"]
    assert len(summary["norms"]["value_norm_sums"]) == 3


def test_the_non_legacy_deberta_head_gives_the_models_logits():
    """DeBERTa-v2/v3 with legacy: false has lm_predictions.lm_head(hidden, word_embeddings): found, wrapped as a
    per-position module whose logits are the model's."""
    import torch
    import transformers

    from bertlook.attention.mlm import mlm_head_module
    from bertlook.testing.tiny_models import tiny_encoder_config

    cfg = tiny_encoder_config("deberta_v2", vocab_size=30, hidden=16, intermediate_size=32,
                              max_position_embeddings=32, legacy=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.DebertaV2ForMaskedLM(cfg).eval()
    assert not hasattr(model, "cls")
    head = mlm_head_module(model)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(IDS)).logits
        last = model.base_model(input_ids=torch.tensor(IDS)).last_hidden_state
        np.testing.assert_allclose(head(last[0]).numpy(), logits[0].numpy(), atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_attention_gradients(arch):
    """The gradients step's dL/dA of a masked position: one [layer, head, n, n] map per example, finite, non-zero,
    the same padded beside a longer example as alone."""
    from bertlook.analyses.gradient_pass import attention_gradients

    model = _model(arch, mlm=True)
    long, short = _masked(IDS[0], 3, 12), _masked([2, 8, 6, 5, 3], 2, 7)
    both = attention_gradients(model, [long, short])
    (alone,) = attention_gradients(model, [short])
    assert both[0]["attn"].shape == (3, 2, 10, 10) and both[1]["grad"].shape == (3, 2, 5, 5)
    assert np.isfinite(both[0]["grad"]).all() and np.abs(both[0]["grad"]).max() > 0
    np.testing.assert_allclose(both[1]["grad"], alone["grad"], atol=1e-5)
    np.testing.assert_allclose(both[1]["attn"], alone["attn"], atol=1e-6)


def _treebank(tmp_path) -> Path:
    sents = [["The", "cat", "sat", "."], ["John's", "dog", "sang", "42", ","], ["the", "queen", "went", "to", "london"]]
    lines = []
    for k, words in enumerate(sents):
        lines.append(f"# sent_id = s{k}")
        lines += [f"{j}\t{w}\t{w}\tX\tX\t_\t{0 if j == 1 else 1}\t{'root' if j == 1 else 'dep'}\t_\t_"
                  for j, w in enumerate(words, 1)]
        lines.append("")
    conllu = tmp_path / "dev.conllu"
    conllu.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conllu


@pytest.mark.parametrize("arch", ARCHS)
def test_cli_extract_words_with_the_norm_store_and_random_init(tmp_path, arch):
    """extract-words --norms-out --random-init-seed (the atlas's word-level jobs) on the tiny directories."""
    from bertlook.attention.store import open_store
    from bertlook.cli.extract_words import register_cli
    from bertlook.testing.tiny_models import make_tiny_encoder

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3)
    conllu = _treebank(tmp_path)
    parser = argparse.ArgumentParser(prog="bertlook")
    register_cli(parser.add_subparsers(dest="step"))
    for seed in (None, "3"):
        out, nout = tmp_path / f"w{seed}", tmp_path / f"n{seed}"
        argv = ["extract-words", "--treebank", str(conllu), "--model", str(model_dir), "--out", str(out),
                "--norms-out", str(nout), "--device", "cpu"]
        args = parser.parse_args(argv + (["--random-init-seed", seed] if seed else []))
        assert args.func(args) == 0
        words, nst = open_store(out, level="word"), open_store(nout, level="word")
        assert nst.meta["map"] == "norm" and len(words) == len(nst) == 3
        assert all(np.asarray(a).shape[:2] == (3, 2) for _, a in words)
        if seed:  # no learnt absolute positions: the word embeddings alone keep their values
            word = {"deberta_v2": "embeddings.word_embeddings.weight", "modernbert": "embeddings.tok_embeddings.weight"}
            assert words.meta["random_init"]["kept_parameters"] == [word[arch]], words.meta["random_init"]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_faithfulness_table_of_a_tiny_masked_lm(tmp_path, arch):
    """run_faithfulness on tiny DebertaV2ForMaskedLM / ModernBertForMaskedLM directories: every measure against both
    ground truths, the loss rows run (the heads are found), one head ablation row per head."""
    from transformers import AutoTokenizer

    from bertlook.analyses.faithfulness import FaithfulnessOptions, run_faithfulness
    from bertlook.analyses.faithfulness_pass import MEASURES
    from bertlook.testing.tiny_models import make_segment, make_tiny_encoder

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3, mlm_head=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = [("the cat sat on the mat .", "the dog ran to the house ."),
             ("john read a book in paris .", "mary wrote two books in london ."),
             ("the king saw the queen .", "they went to the river and the city .")]
    seg_path = tmp_path / "segments.jsonl"
    seg_path.write_text("".join(json.dumps(make_segment(tok, i, a, b)) + "\n" for i, (a, b) in enumerate(texts)))
    opts = FaithfulnessOptions(segments=3, ablated_tokens=5, bootstrap=50, device="cpu")
    result = run_faithfulness(seg_path, str(model_dir), opts)
    t = result.table
    assert set(t["measure"]) == set(MEASURES) and t["note"].isna().all(), t
    assert t["spearman"].astype(float).notna().all() and result.summary["loss_status"] == "ok"
    h = result.heads
    assert len(h) == 3 * 2 and h["note"].isna().all() and np.isfinite(h["loss_change"].astype(float)).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_head_detectors_run(tmp_path, arch):
    """head-detectors (repeated random tokens, maps captured layer by layer) on the tiny directories."""
    from bertlook.analyses.head_detectors import DetectorOptions, run_head_detectors
    from bertlook.testing.tiny_models import make_tiny_encoder

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3)
    frame = run_head_detectors(str(model_dir), DetectorOptions(device="cpu", n_sequences=4, length=6)).frame
    assert len(frame) == 3 * 2 and np.isfinite(frame["induction"].astype(float)).all()


# ------------------------------------------------------------------------------------------------
# every layout of the atlas

#: config keys shrunk to build a tiny instance of an atlas model's class (where its config.json has them, under the
#: class's own name: GPT-2's n_embd for hidden_size, DistilBERT's dim)
SHRINK = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
          "embedding_size": 16, "hidden_dim": 64, "n_inner": 64, "head_dim": 16, "num_hidden_groups": 1,
          "vocab_size": 64}


def _atlas_models() -> list[tuple[str, dict]]:
    """(label, fixture config.json) of every atlas model with a fixture, one per (model_type, architecture)."""
    from bertlook.pipeline.plan_models import configs_dir_path

    atlas = yaml.safe_load((ROOT / "config" / "atlas.yaml").read_text())
    seen, out = set(), []
    for model in atlas["models"]:
        path = configs_dir_path(ROOT / "tests" / "fixtures" / "atlas_configs", model["name_or_path"])
        if not path.is_file():
            continue
        cfg = json.loads(path.read_text())
        key = (cfg["model_type"], tuple(cfg.get("architectures") or ()))
        if key not in seen:
            seen.add(key)
            out.append((model["label"], cfg))
    return out


def _tiny_from(cfg: dict):
    """A tiny random instance of the class of ``cfg`` (its model_type's AutoModel), its other settings kept."""
    import torch
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[cfg["model_type"]]
    names = getattr(config_cls, "attribute_map", {})
    keep = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype", "dtype",
                                                       "layer_types")}
    for key, value in SHRINK.items():
        if names.get(key, key) in cfg:
            keep[names.get(key, key)] = value
    if cfg.get("num_key_value_heads"):  # grouped-query attention stays grouped
        keep["num_key_value_heads"] = 1 if cfg["num_key_value_heads"] < cfg["num_attention_heads"] else 2
    config = config_cls(**keep)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if isinstance(getattr(config, key, None), int):  # the class's defaults too: within the tiny vocabulary
            setattr(config, key, 1)
    torch.manual_seed(0)
    return AutoModel.from_config(config, attn_implementation="eager").eval()


#: more config keys shrunk for a tiny instance of a class's default config (mixture-of-experts sizes)
SHRINK_DEFAULTS = {**SHRINK, "num_key_value_heads": 1, "moe_intermediate_size": 32, "num_experts": 4,
                   "num_local_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 32}


def _tiny_default(model_type: str):
    """A tiny random instance of the class of ``model_type``, from its config class's defaults."""
    import torch
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    names, defaults = getattr(config_cls, "attribute_map", {}), config_cls()
    config = config_cls(**{names.get(k, k): v for k, v in SHRINK_DEFAULTS.items()
                           if hasattr(defaults, names.get(k, k))})
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if isinstance(getattr(config, key, None), int):
            setattr(config, key, 1)
    torch.manual_seed(0)
    return AutoModel.from_config(config, attn_implementation="eager").eval()


def _readers_pass(model, label: str) -> None:
    """find_attention_modules and attention_modules give one entry per layer; one forward pass captures every
    layer's maps and value vectors; the post-LN (ALTI) of every layer is found or the model is pre-LN."""
    import torch

    from bertlook.attention import contributions, norms
    from bertlook.attention.layer_capture import attention_modules, capture_layers

    L = model.config.num_hidden_layers
    mods = norms.find_attention_modules(model)
    assert len(mods) == L and len(attention_modules(model)) == L, label
    got: dict = {}
    with norms.capture_values(mods) as values, capture_layers(model, lambda l, w: got.__setitem__(l, w)), \
            torch.no_grad():
        model(input_ids=torch.tensor([[1, 5, 9, 7, 3, 2]]))
    assert sorted(got) == list(range(L)) and all(v is not None for v in values), label
    assert all(got[l].shape == (1, model.config.num_attention_heads, 6, 6) for l in range(L)), label
    for l in range(L):
        contributions.post_layer_norm(model, l)  # raises where a post-LN encoder lacks its LayerNorm


def test_every_model_type_the_plan_accepts_with_norms_on_passes_the_readers():
    """plan_models.INSIDE_TYPES (the types `bertlook plan` accepts while norms or contributions are on): a tiny
    random model of each class passes the readers (and a type outside, OPT, does not)."""
    from bertlook.pipeline.plan_models import INSIDE_TYPES

    for model_type in sorted(INSIDE_TYPES):
        _readers_pass(_tiny_default(model_type), model_type)
    from bertlook.errors import BertlookError

    with pytest.raises(BertlookError, match="OPTModel"):
        _readers_pass(_tiny_default("opt"), "opt")


def test_every_atlas_layout_passes_the_readers():
    """A tiny random instance of the class of every model of config/atlas.yaml (from its fixture config.json; one per
    model_type and architecture): the readers pass (:func:`_readers_pass`), and its model_type is one the plan
    accepts with norms on."""
    from bertlook.pipeline.plan_models import INSIDE_TYPES

    models = _atlas_models()
    types = {cfg["model_type"] for _, cfg in models}
    assert {"bert", "distilbert", "albert", "deberta-v2", "modernbert", "gpt2", "gpt_neox", "llama"} <= types, types
    assert types <= INSIDE_TYPES
    for label, cfg in models:
        _readers_pass(_tiny_from(cfg), label)
