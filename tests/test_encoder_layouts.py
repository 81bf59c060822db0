"""Two encoder layouts beside BERT's through every model-side reader: DistilBERT (``transformer.layer[i]``:
``attention.v_lin`` / ``out_lin``, ``sa_layer_norm``) and ALBERT with shared layers (``num_hidden_groups`` 1: ONE
``AlbertLayer`` run for every layer, as albert-base-v2; read by call order, ``attention/layer_calls.py``).

Norm-based maps against a hand computation, ALTI's decomposition against the real post-LN output, value zeroing
against the layer run by hand on its input, the layer-by-layer capture against ``output_attentions=True``, head
ablation of one layer of a shared module against a hand-counted hook, a wrong call count, and ``extract-segments``
with the norm store on tiny DistilBERT and ALBERT directories."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from bertlook.errors import BertlookError

IDS = [[2, 7, 11, 5, 9, 3]]


def _random_ln(model, seed):
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.copy_(1.0 + 0.5 * torch.randn(mod.weight.shape, generator=gen))
                mod.bias.copy_(0.5 * torch.randn(mod.bias.shape, generator=gen))
    return model


def _distil(layers=2, hidden=16, heads=2, seed=0, mlm=False):
    import torch
    from transformers import DistilBertConfig, DistilBertForMaskedLM, DistilBertModel

    cfg = DistilBertConfig(vocab_size=30, dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=2 * hidden,
                           max_position_embeddings=16, initializer_range=0.3, attn_implementation="eager")
    torch.manual_seed(seed)
    return _random_ln((DistilBertForMaskedLM if mlm else DistilBertModel)(cfg).eval(), seed)


def _albert(layers=3, hidden=16, heads=2, seed=0, groups=1, mlm=False):
    import torch
    from transformers import AlbertConfig, AlbertForMaskedLM, AlbertModel

    cfg = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=hidden, num_hidden_layers=layers,
                       num_hidden_groups=groups, num_attention_heads=heads, intermediate_size=2 * hidden,
                       max_position_embeddings=16, initializer_range=0.3, attn_implementation="eager")
    torch.manual_seed(seed)
    return _random_ln((AlbertForMaskedLM if mlm else AlbertModel)(cfg).eval(), seed)


MODELS = {"distilbert": _distil, "albert": _albert}
#: per layout: (value, output projection, post-LN) of layer l of the base model
PARTS = {
    "distilbert": lambda m, l: (m.transformer.layer[l].attention.v_lin, m.transformer.layer[l].attention.out_lin,
                                m.transformer.layer[l].sa_layer_norm),
    "albert": lambda m, l: (m.encoder.albert_layer_groups[0].albert_layers[0].attention.value,
                            m.encoder.albert_layer_groups[0].albert_layers[0].attention.dense,
                            m.encoder.albert_layer_groups[0].albert_layers[0].attention.LayerNorm),
}


def _run(model, ids=IDS):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), output_attentions=True, output_hidden_states=True)


def test_the_layouts_are_found_and_albert_shares_one_module():
    from bertlook.attention import layer_calls, norms
    from bertlook.attention.layer_capture import attention_modules

    d, a = _distil(), _albert()
    assert norms.encoder_layout(d)[0] == "distilbert" and len(norms.encoder_layers(d)) == 2
    kind, layers = norms.encoder_layout(a)
    assert kind == "albert" and len(layers) == 3 and all(layer is layers[0] for layer in layers)
    mods = norms.find_attention_modules(a, 2)
    assert len(mods) == 3 and mods.model is a and layer_calls.is_shared([v for v, _ in mods])
    assert [m for _, m, _ in attention_modules(a)] == [layers[0].attention] * 3
    assert not layer_calls.is_shared([v for v, _ in norms.find_attention_modules(d)])
    # two groups over four layers: layers 1-2 run group 1's layer, 3-4 group 2's (transformers' rule)
    two = _albert(layers=4, groups=2)
    groups = two.encoder.albert_layer_groups
    assert norms.encoder_layers(two) == [groups[0].albert_layers[0]] * 2 + [groups[1].albert_layers[0]] * 2


def test_albert_with_several_layers_per_group_is_refused_with_the_reason():
    import torch
    from transformers import AlbertConfig, AlbertModel

    from bertlook.attention import norms

    torch.manual_seed(0)
    model = AlbertModel(AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32, inner_group_num=2))
    with pytest.raises(BertlookError, match="inner_group_num > 1"):
        norms.find_attention_modules(model)


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_norm_maps_equal_a_hand_computation(arch):
    """x W_V + b_V captured per layer (ALBERT: by call order) and the norm-based maps, against x from
    output_hidden_states through each layer's own weights, in float64 numpy."""
    import torch

    from bertlook.attention import norms

    model = MODELS[arch]()
    mods = norms.find_attention_modules(model, 2)
    with norms.capture_values(mods) as values:
        out = _run(model)
    L, H = len(mods), 2
    for l in range(L):
        value, dense, _ = PARTS[arch](model, l)
        x = out.hidden_states[l][0].double().numpy()
        v = x @ value.weight.detach().double().numpy().T + value.bias.detach().double().numpy()
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
    if arch == "albert":  # the layers' inputs differ, so do their values: one captured tensor per call
        assert not torch.allclose(values[0], values[1])


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_alti_decomposition_adds_up_to_the_post_layernorm_output(arch):
    """sum_j T_i(x_j) + L(b_O) / sigma_i + beta = the output of sa_layer_norm (DistilBERT) / the attention's
    LayerNorm (ALBERT, its call of each layer) to 1e-6; example_maps' ALTI is the min_sum map of these T."""
    import torch

    from bertlook.attention import contributions

    model = MODELS[arch]()
    L = model.config.num_hidden_layers
    ln_mods = {id(PARTS[arch](model, l)[2]): PARTS[arch](model, l)[2] for l in range(L)}  # ALBERT: one
    ln_out: list = []
    hooks = [m.register_forward_hook(lambda m, i, o: ln_out.append(o)) for m in ln_mods.values()]  # in call order
    try:
        out = _run(model)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(ln_out) == L
    maps = contributions.example_maps(model, {"input_ids": torch.tensor(IDS)})
    for l in range(L):
        value, dense, ln = PARTS[arch](model, l)
        post = contributions.post_layer_norm(model, l)
        assert post.weight is not None and torch.equal(post.weight, ln.weight.detach())
        x = out.hidden_states[l][0].double().numpy()
        a = out.attentions[l][0].double().numpy()
        v = x @ value.weight.detach().double().numpy().T + value.bias.detach().double().numpy()
        w, b = dense.weight.detach().double().numpy(), dense.bias.detach().double().numpy()
        g, beta = ln.weight.detach().double().numpy(), ln.bias.detach().double().numpy()
        nh, n = a.shape[0], a.shape[1]
        dh = v.shape[1] // nh
        f = np.stack([[w[:, h * dh:(h + 1) * dh] @ v[j, h * dh:(h + 1) * dh] for j in range(n)] for h in range(nh)])
        centre = lambda u: g * (u - u.mean(-1, keepdims=True))  # noqa: E731
        want = np.zeros((n, n))
        for i in range(n):
            raw = np.stack([sum(a[h, i, j] * f[h, j] for h in range(nh)) + (x[i] if i == j else 0) for j in range(n)])
            pre = raw.sum(0) + b
            sigma = np.sqrt(pre.var() + ln.eps)
            t = centre(raw) / sigma
            y = t.sum(0) + centre(b) / sigma + beta
            np.testing.assert_allclose(y, ln_out[l][0, i].double().numpy(), atol=1e-6)
            want[i] = np.maximum(0, np.abs(y).sum() - np.abs(y - t).sum(-1))
            want[i] /= want[i].sum()
        np.testing.assert_allclose(maps["alti"][0, l].numpy(), want, atol=2e-6)
        np.testing.assert_allclose(maps["attention"][0, l].numpy(), out.attentions[l][0].numpy())


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_value_zeroing_rows_against_the_layer_run_by_hand(arch):
    """Rows >= 0 summing to 1; each layer's raw distances equal the layer module called by hand on its input
    (output_hidden_states) with token j's value features zeroed, against the next hidden state."""
    import torch

    from bertlook.attention import norms
    from bertlook.attention.value_zeroing import value_zeroing

    model = MODELS[arch]()
    ids = torch.tensor(IDS)
    vz = value_zeroing(model, {"input_ids": ids})
    L, n = model.config.num_hidden_layers, ids.shape[1]
    assert vz.shape == (L, n, n) and (vz >= 0).all()
    np.testing.assert_allclose(vz.sum(-1).numpy(), 1.0, atol=1e-12)
    raw = value_zeroing(model, {"input_ids": ids}, normalise=False, chunk=4)
    out = _run(model)
    layers = norms.encoder_layers(model)
    for l in range(L):
        value = PARTS[arch](model, l)[0]
        for j in range(n):
            hook = value.register_forward_hook(lambda m, i, o, j=j: o.index_fill(1, torch.tensor([j]), 0.0))
            try:
                with torch.no_grad():
                    new = layers[l](out.hidden_states[l])
            finally:
                hook.remove()
            new = (new[0] if isinstance(new, tuple) else new)[0].double()
            ref = out.hidden_states[l + 1][0].double()
            d = 1 - (new * ref).sum(-1) / (new.norm(dim=-1) * ref.norm(dim=-1))
            np.testing.assert_allclose(raw[l, :, j].numpy(), d.numpy(), atol=1e-6)
    assert raw.amax() > 1e-4  # zeroing moves something


def test_shared_albert_maps_captured_layer_by_layer_equal_output_attentions():
    import torch

    from bertlook.attention.layer_capture import capture_layers

    model = _albert(layers=4)
    got: dict = {}
    with capture_layers(model, lambda layer, w: got.setdefault(layer, []).append(w.clone())) as n_layers:
        with torch.no_grad():
            model(input_ids=torch.tensor(IDS))
            model(input_ids=torch.tensor(IDS))  # a second pass: the call counter starts again
    assert n_layers == 4 and sorted(got) == [0, 1, 2, 3] and all(len(v) == 2 for v in got.values())
    want = _run(model).attentions
    for layer in range(4):
        assert torch.equal(got[layer][0], want[layer]) and torch.equal(got[layer][1], want[layer])
    assert not torch.allclose(want[0], want[1])


def test_the_stream_of_a_shared_albert_gives_its_maps_and_norms():
    import torch

    from bertlook.attention import norms
    from bertlook.attention.stream import map_batches

    model = _albert()
    kept = [({"id": i, "tokens": ["x"] * 6}, IDS[0], [0] * 6) for i in range(2)]
    mods = norms.find_attention_modules(model, 2)
    (batch,) = map_batches(kept, model, batch_size=2, device="cpu", num_layers=3, num_heads=2, map_dtype="float32",
                           norm_modules=mods, use_token_types=False)
    out = _run(model)
    for l in range(3):
        np.testing.assert_allclose(batch.maps[0, l], out.attentions[l][0].numpy(), atol=1e-6)
    with norms.capture_values(mods) as values:
        _run(model)
    for l in range(3):
        vn = norms.value_norms(values[l], mods[l][1].weight.detach(), 2)
        np.testing.assert_allclose(batch.value_norms[0, l], vn[0].numpy(), atol=1e-5)
        np.testing.assert_allclose(batch.norm_maps[0, l], norms.norm_maps(out.attentions[l], vn)[0].numpy(),
                                   atol=1e-5)
    assert not np.allclose(batch.value_norms[0, 0], batch.value_norms[0, 1])
    del torch


@pytest.mark.parametrize("layers", [2, 4])
def test_a_wrong_number_of_calls_of_a_shared_module_is_an_error(layers):
    """The capture is set up for 3 layers; a forward pass running the shared layer 2 or 4 times is an error."""
    import torch

    from bertlook.attention.layer_capture import capture_layers

    model = _albert(layers=3)
    with capture_layers(model, lambda layer, w: None):
        model.config.num_hidden_layers = layers  # AlbertTransformer runs its layer this many times
        try:
            with pytest.raises(BertlookError, match=f"called {layers} times in one forward pass"), torch.no_grad():
                model(input_ids=torch.tensor(IDS))
        finally:
            model.config.num_hidden_layers = 3
        with torch.no_grad():
            model(input_ids=torch.tensor(IDS))  # the next pass starts counting again


def test_a_shared_module_without_the_model_is_refused():
    from bertlook.attention import norms

    model = _albert()
    with pytest.raises(BertlookError, match="needs the model"):
        with norms.capture_values(list(norms.find_attention_modules(model))):
            pass


def _masked(ids, pos, label):
    from bertlook.analyses.gradient_pass import IGNORE_INDEX, MaskedSegment

    labels = [IGNORE_INDEX] * len(ids)
    labels[pos] = label
    return MaskedSegment(id=0, tokens=["x"] * len(ids), input_tokens=["x"] * len(ids), input_ids=list(ids),
                         token_type_ids=[0] * len(ids), labels=labels, masked_positions=[pos], actions=["mask"])


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_zero_ablation_of_one_layers_head_against_a_hand_counted_hook(arch):
    """Head ablation changes layer l's call of the output projection only (ALBERT: the l-th call of the one shared
    projection, counted here by hand), head h's input slice set to 0."""
    import torch

    from bertlook.analyses.head_ablation import head_ablation
    from bertlook.attention.mlm import mlm_head_module

    model = MODELS[arch](mlm=True)
    head = mlm_head_module(model)
    assert head is not None
    ex = _masked(IDS[0], 3, 12)
    change, base = head_ablation(model, head, [ex], False, "cpu", "zero")
    L, H = model.config.num_hidden_layers, 2
    assert change.shape == (1, L * H)
    ce = torch.nn.functional.cross_entropy
    for layer in range(L):
        dense = PARTS[arch](model.base_model, layer)[1]
        dh = dense.weight.shape[1] // H
        for h in range(H):
            calls = []

            def hook(_m, args, layer=layer, h=h):
                calls.append(1)
                if len(calls) - 1 == layer or arch == "distilbert":
                    x = args[0].clone()
                    x[..., h * dh:(h + 1) * dh] = 0
                    return (x,)
                return None
            handle = dense.register_forward_pre_hook(hook)
            try:
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor(IDS)).logits
            finally:
                handle.remove()
            loss = float(ce(logits[0, 3][None], torch.tensor([12])))
            assert change[0, layer * H + h] == pytest.approx(loss - base[0], abs=1e-5), (layer, h)
    assert len(set(np.round(change[0], 6))) == L * H  # every layer's head changes the loss its own way
    mean_change, _ = head_ablation(model, head, [ex], False, "cpu", "mean")
    assert mean_change.shape == change.shape and not np.allclose(mean_change, change)


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_the_faithfulness_maps_of_a_segment(arch):
    from bertlook.analyses.faithfulness_pass import MEASURES, segment_maps
    from bertlook.attention.mlm import mlm_head_module

    model = MODELS[arch](mlm=True)
    seconds = {"maps": 0.0, "value_zeroing": 0.0, "gradients": 0.0}
    maps, importance = segment_maps(model, mlm_head_module(model) is not None, _masked(IDS[0], 3, 12), False, "cpu",
                                    seconds)
    assert set(maps) == set(MEASURES) and importance.shape == (model.config.num_hidden_layers, 2)
    for name, m in maps.items():
        assert m.shape == (6, 6) and np.isfinite(m).all(), name
        if name not in ("grad_attention",):
            np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_cli_extract_segments_with_the_norm_store(tmp_path, arch, tokenizer, capsys):
    """extract-segments --norms-out on a tiny DistilBERT / shared-layer ALBERT directory (make_tiny_encoder)."""
    from bertlook.attention.store import open_store
    from bertlook.cli.extract_segments import register_cli
    from bertlook.testing.tiny_models import make_segment, make_tiny_encoder

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3)
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["model_type"] == arch and (arch != "albert" or cfg["num_hidden_groups"] == 1)
    texts = [("the cat sat on the mat .", "the dog ran to the house ."), ("john read a book .", "mary wrote it .")]
    seg_path = tmp_path / "segments.jsonl"
    seg_path.write_text("".join(json.dumps(make_segment(tokenizer, i, a, b)) + "\n" for i, (a, b) in enumerate(texts)))
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
    assert not np.allclose(maps[0][0], maps[0][1], atol=1e-3)  # three layers, three different maps
    summary = json.loads((tmp_path / "s.json").read_text())
    assert sum(summary["norms"]["value_norm_counts"]) == summary["tokens"]
    assert len(summary["norms"]["value_norm_sums"]) == 3


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_cli_extract_words_with_the_norm_store_and_random_init(tmp_path, arch):
    """extract-words --norms-out --random-init-seed (the atlas's word-level jobs) on the tiny directories."""
    from bertlook.attention.store import open_store
    from bertlook.cli.extract_words import register_cli
    from bertlook.testing.tiny_models import make_tiny_encoder

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3)
    sents = [["The", "cat", "sat", "."], ["John's", "dog", "sang", "42", ","], ["the", "queen", "went", "to", "london"]]
    lines = []
    for k, words in enumerate(sents):
        lines.append(f"# sent_id = s{k}")
        lines += [f"{j}\t{w}\t{w}\tX\tX\t_\t{0 if j == 1 else 1}\t{'root' if j == 1 else 'dep'}\t_\t_"
                  for j, w in enumerate(words, 1)]
        lines.append("")
    conllu = tmp_path / "dev.conllu"
    conllu.write_text("\n".join(lines) + "\n", encoding="utf-8")
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


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_every_map_kind_of_the_contributions_step_on_a_padded_batch(arch):
    """contribution_maps.token_maps (the contributions step's model work): every kind for two examples of different
    lengths in one padded batch equals the same kind of each example alone (batch 1, no padding)."""
    from bertlook.analyses.contribution_maps import KINDS, RunTimes, token_maps

    model = MODELS[arch]()
    rows = [[2, 7, 11, 5, 9, 3], [2, 8, 6, 3]]
    both = token_maps(model, rows, pad_id=0, causal=False, times=RunTimes())
    for b, row in enumerate(rows):
        (alone,) = token_maps(model, [row], pad_id=0, causal=False, times=RunTimes())
        assert set(both[b]) == set(KINDS) == set(alone)
        for kind in KINDS:
            n = len(row)
            assert both[b][kind].shape[-2:] == (n, n) and np.isfinite(both[b][kind]).all(), kind
            np.testing.assert_allclose(both[b][kind], alone[kind], atol=2e-5, err_msg=kind)


@pytest.mark.parametrize("arch", ["distilbert", "albert"])
def test_the_faithfulness_table_of_a_tiny_masked_lm(tmp_path, arch):
    """run_faithfulness (the faithfulness step) on tiny DistilBertForMaskedLM / shared-layer AlbertForMaskedLM
    directories: every measure against both ground truths, the loss rows run (the heads are found), one head
    ablation row per head."""
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
