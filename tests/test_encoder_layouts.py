"""One set of checks of every encoder layout beside BERT's through every model-side reader, parametrized over the
layouts (tests/layout_models.py: DistilBERT, ALBERT with shared layers read by call order, DeBERTa-v2/v3,
ModernBERT), then DistilBERT's and ALBERT's own checks (the shared layer: one module found for every layer, a wrong
call count, a capture without the model; several layers per group refused). DeBERTa's and ModernBERT's own checks
(their layouts found, DeBERTa's non-legacy head, ModernBERT's sliding window) and every layout of
config/atlas.yaml: tests/test_deberta_modernbert.py.

Every layout: the values and norm-based maps against a float64 hand computation, ALTI's decomposition against the
real output of the block (the post-LN's output; ModernBERT's residual stream after the attention) to 1e-6, the
layer-by-layer capture against ``output_attentions=True``, value zeroing against the layer run by hand with one
token's values zeroed, head ablation and the masked-LM head against a hand hook, the stream's maps and norms, the
faithfulness maps and every contribution kind on a padded batch, attention gradients, and ``extract-segments`` /
``extract-words`` with the norm store, the faithfulness table and the head detectors on tiny model directories."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from bertlook.errors import BertlookError
from layout_models import (ARCHS, LAYOUTS, MODEL_TYPES, hand_alti, hand_values, layer, masked, parts, run, tiny,
                           treebank)


@pytest.mark.parametrize("arch", ARCHS)
def test_norm_maps_equal_a_hand_computation(arch):
    """x W_V + b_V captured per layer (ALBERT: by call order; ModernBERT: the v third of Wqkv(attn_norm(x))) and the
    norm-based maps, against x from output_hidden_states through each layer's own weights, in float64 numpy."""
    import torch

    from bertlook.attention import norms

    model = tiny(arch)
    mods = norms.find_attention_modules(model, 2)
    with norms.capture_values(mods) as values:
        out = run(model, LAYOUTS[arch].ids)
    H = 2
    for l in range(len(mods)):
        dense = parts(arch, model, l)[1]
        v = hand_values(arch, model, out, l)
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


@pytest.mark.parametrize("arch", ARCHS)
def test_alti_decomposition_adds_up_to_the_block_output(arch):
    """sum_j T_i(x_j) + L(b_O) / sigma_i + beta = the post-LN's output (DistilBERT's sa_layer_norm, ALBERT's
    attention LayerNorm at each of its calls, DeBERTa's attention.output.LayerNorm); ModernBERT (pre-LN, as a
    decoder but not causal): sum_j T_i(x_j) + b_O = x_i + attn(attn_norm(x))_i; to 1e-6 (tests/alti_by_hand.py).
    post_layer_norm is the block's LayerNorm (None where pre-LN); example_maps' ALTI is the min_sum map of these T,
    its attention maps are output_attentions'."""
    import torch

    from bertlook.attention import contributions

    model, ids = tiny(arch), LAYOUTS[arch].ids
    L = model.config.num_hidden_layers
    blocks = [parts(arch, model, l)[2] if arch != "modernbert" else layer(arch, model, l).attn for l in range(L)]
    outs: list = []
    hooks = [m.register_forward_hook(lambda m, i, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for m in {id(m): m for m in blocks}.values()]  # ALBERT: one module, its outputs in call order
    try:
        out = run(model, ids)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(outs) == L
    if arch == "modernbert":  # y = x + attn(attn_norm(x)): the residual stream after the attention block
        outs = [out.hidden_states[l] + outs[l] for l in range(L)]
    maps = contributions.example_maps(model, {"input_ids": torch.tensor(ids)})
    for l in range(L):
        ln, post = parts(arch, model, l)[2], contributions.post_layer_norm(model, l)
        if ln is None:
            assert post is None
        else:
            assert post.weight is not None and torch.equal(post.weight, ln.weight.detach()) and post.eps == ln.eps
        hand = hand_alti(arch, model, out, l)
        np.testing.assert_allclose(hand.y, outs[l][0].double().numpy(), atol=1e-6)
        np.testing.assert_allclose(maps["alti"][0, l].numpy(), hand.map, atol=2e-6)
        np.testing.assert_allclose(maps["attention"][0, l].numpy(), out.attentions[l][0].numpy())


@pytest.mark.parametrize("arch", ARCHS)
def test_maps_captured_layer_by_layer_equal_output_attentions(arch):
    """capture_layers, the model run without output_attentions (ALBERT: 4 layers by call order; DeBERTa's modules
    asked for their weights by a pre-hook), equals output_attentions=True bit for bit, two passes in a row (the
    call counter starts again); nothing is kept beyond the callback and the hooks go with the capture."""
    import torch

    from bertlook.attention.layer_capture import capture_layers

    model, ids = tiny(arch, **({"layers": 4} if arch == "albert" else {})), LAYOUTS[arch].ids
    L = model.config.num_hidden_layers
    got: dict = {}
    with capture_layers(model, lambda layer, w: got.setdefault(layer, []).append(w.clone())) as n_layers:
        with torch.no_grad():
            first = model(input_ids=torch.tensor(ids))
            model(input_ids=torch.tensor(ids))
    assert getattr(first, "attentions", None) is None
    assert n_layers == L and sorted(got) == list(range(L)) and all(len(v) == 2 for v in got.values())
    want = run(model, ids).attentions
    for l in range(L):
        assert torch.equal(got[l][0], want[l]) and torch.equal(got[l][1], want[l])
    assert not torch.allclose(want[0], want[1])
    with torch.no_grad():  # a plain pass returns no weights again
        assert getattr(model(input_ids=torch.tensor(ids)), "attentions", None) is None


def _zeroed_layer_outputs(arch, model, ids, l):
    """Layer l's output (the first example, float64) intact and with token j's value features zeroed, j = 0..n-1.
    Where the layer runs on its input alone (DistilBERT, ALBERT: the l-th call of the shared layer) it is called
    by hand on its input (output_hidden_states), the intact output the next hidden state; elsewhere the model runs
    again with a hook on layer l's value module (ModernBERT: the v third of Wqkv's output) and layer l's output
    is kept."""
    import torch

    value, _, _, part = parts(arch, model, l)
    if LAYOUTS[arch].layer_runs_alone:
        out = run(model, ids)
        news = []
        for j in range(len(ids[0])):
            hook = value.register_forward_hook(lambda m, i, o, j=j: o.index_fill(1, torch.tensor([j]), 0.0))
            try:
                with torch.no_grad():
                    new = layer(arch, model, l)(out.hidden_states[l])
            finally:
                hook.remove()
            news.append((new[0] if isinstance(new, tuple) else new)[0].double())
        return out.hidden_states[l + 1][0].double(), news
    cols = torch.arange(value.out_features)[part]

    def layer_output(j=None):
        kept = []
        hooks = [layer(arch, model, l).register_forward_hook(
            lambda m, i, o: kept.append(o[0] if isinstance(o, tuple) else o))]
        if j is not None:
            def zero(_m, _i, o):
                o = o.clone()
                o[:, j, cols] = 0
                return o
            hooks.append(value.register_forward_hook(zero))
        try:
            with torch.no_grad():
                model(input_ids=torch.tensor(ids))
        finally:
            for h in hooks:
                h.remove()
        return kept[0][0].double()

    return layer_output(), [layer_output(j) for j in range(len(ids[0]))]


@pytest.mark.parametrize("arch", ARCHS)
def test_value_zeroing_against_the_layer_run_with_one_token_zeroed(arch):
    """Rows >= 0 summing to 1; each layer's raw distances equal 1 - cos between the layer's output with token j's
    value features zeroed and the intact one (:func:`_zeroed_layer_outputs`)."""
    import torch

    from bertlook.attention.value_zeroing import value_zeroing

    model, ids = tiny(arch), LAYOUTS[arch].ids
    vz = value_zeroing(model, {"input_ids": torch.tensor(ids)})
    L, n = model.config.num_hidden_layers, len(ids[0])
    assert vz.shape == (L, n, n) and (vz >= 0).all()
    np.testing.assert_allclose(vz.sum(-1).numpy(), 1.0, atol=1e-12)
    raw = value_zeroing(model, {"input_ids": torch.tensor(ids)}, normalise=False, chunk=4)
    for l in range(L):
        ref, news = _zeroed_layer_outputs(arch, model, ids, l)
        for j, new in enumerate(news):
            d = 1 - (new * ref).sum(-1) / (new.norm(dim=-1) * ref.norm(dim=-1))
            np.testing.assert_allclose(raw[l, :, j].numpy(), d.numpy(), atol=1e-6)
    assert raw.amax() > 1e-4  # zeroing moves something


@pytest.mark.parametrize("arch", ARCHS)
def test_the_mlm_head_and_zero_ablation_against_a_hand_hook(arch):
    """The masked-LM head gives the model's own logits per position; zero ablation of head h of layer l changes
    layer l's call of the output projection only (ALBERT: the l-th call of the one shared projection, counted here
    by hand), head h's input slice set to 0; mean ablation differs."""
    import torch

    from bertlook.analyses.head_ablation import head_ablation
    from bertlook.attention.mlm import mlm_head_module

    model, ids = tiny(arch, mlm=True), LAYOUTS[arch].ids
    head = mlm_head_module(model)
    assert head is not None
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), output_hidden_states=True)
        last = model.base_model(input_ids=torch.tensor(ids)).last_hidden_state
        np.testing.assert_allclose(head(last[0, 3:5]).numpy(), out.logits[0, 3:5].numpy(), atol=1e-5)
    ex = masked(ids[0], 3, 12)
    change, base = head_ablation(model, head, [ex], False, "cpu", "zero")
    L, H = model.config.num_hidden_layers, 2
    assert change.shape == (1, L * H)
    ce = torch.nn.functional.cross_entropy
    shared = arch == "albert"
    for l in range(L):
        dense = parts(arch, model, l)[1]
        dh = dense.weight.shape[1] // H
        for h in range(H):
            calls = []

            def hook(_m, args, l=l, h=h):
                calls.append(1)
                if not shared or len(calls) - 1 == l:
                    x = args[0].clone()
                    x[..., h * dh:(h + 1) * dh] = 0
                    return (x,)
                return None
            handle = dense.register_forward_pre_hook(hook)
            try:
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor(ids)).logits
            finally:
                handle.remove()
            loss = float(ce(logits[0, 3][None], torch.tensor([12])))
            assert change[0, l * H + h] == pytest.approx(loss - base[0], abs=1e-5), (l, h)
    assert len(set(np.round(change[0], 6))) == L * H  # every layer's head changes the loss its own way
    mean_change, _ = head_ablation(model, head, [ex], False, "cpu", "mean")
    assert mean_change.shape == change.shape and not np.allclose(mean_change, change)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_stream_gives_the_maps_and_norms(arch):
    """map_batches (the extraction's model pass, with the norm modules) gives output_attentions' maps and the value
    norms and norm maps of the values captured by hand; the layers' value norms differ (ALBERT: by call order)."""
    from bertlook.attention import norms
    from bertlook.attention.stream import map_batches

    model, ids = tiny(arch), LAYOUTS[arch].ids
    L, n = model.config.num_hidden_layers, len(ids[0])
    kept = [({"id": i, "tokens": ["x"] * n}, ids[0], [0] * n) for i in range(2)]
    mods = norms.find_attention_modules(model, 2)
    (batch,) = map_batches(kept, model, batch_size=2, device="cpu", num_layers=L, num_heads=2, map_dtype="float32",
                           norm_modules=mods, use_token_types=False)
    out = run(model, ids)
    for l in range(L):
        np.testing.assert_allclose(batch.maps[0, l], out.attentions[l][0].numpy(), atol=1e-6)
    with norms.capture_values(mods) as values:
        run(model, ids)
    for l in range(L):
        vn = norms.value_norms(values[l], mods[l][1].weight.detach(), 2)
        np.testing.assert_allclose(batch.value_norms[0, l], vn[0].numpy(), atol=1e-5)
        np.testing.assert_allclose(batch.norm_maps[0, l], norms.norm_maps(out.attentions[l], vn)[0].numpy(),
                                   atol=1e-5)
    assert not np.allclose(batch.value_norms[0, 0], batch.value_norms[0, 1])


@pytest.mark.parametrize("arch", ARCHS)
def test_the_faithfulness_maps_of_a_segment(arch):
    from bertlook.analyses.faithfulness_pass import MEASURES, segment_maps
    from bertlook.attention.mlm import mlm_head_module

    model, ids = tiny(arch, mlm=True), LAYOUTS[arch].ids
    n = len(ids[0])
    seconds = {"maps": 0.0, "value_zeroing": 0.0, "gradients": 0.0}
    maps, importance = segment_maps(model, mlm_head_module(model) is not None, masked(ids[0], 3, 12), False, "cpu",
                                    seconds)
    assert set(maps) == set(MEASURES) and importance.shape == (model.config.num_hidden_layers, 2)
    for name, m in maps.items():
        assert m.shape == (n, n) and np.isfinite(m).all(), name
        if name != "grad_attention":
            np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_map_kind_of_the_contributions_step_on_a_padded_batch(arch):
    """contribution_maps.token_maps (the contributions step's model work): every kind for two examples of different
    lengths in one padded batch equals the same kind of each example alone (batch 1, no padding)."""
    from bertlook.analyses.contribution_maps import KINDS, RunTimes, token_maps

    model = tiny(arch)
    rows = [LAYOUTS[arch].ids[0], [2, 8, 6, 3]]
    both = token_maps(model, rows, pad_id=0, causal=False, times=RunTimes())
    for b, row in enumerate(rows):
        (alone,) = token_maps(model, [row], pad_id=0, causal=False, times=RunTimes())
        assert set(both[b]) == set(KINDS) == set(alone)
        for kind in KINDS:
            n = len(row)
            assert both[b][kind].shape[-2:] == (n, n) and np.isfinite(both[b][kind]).all(), kind
            np.testing.assert_allclose(both[b][kind], alone[kind], atol=2e-5, err_msg=kind)


@pytest.mark.parametrize("arch", ARCHS)
def test_attention_gradients(arch):
    """The gradients step's dL/dA of a masked position: one [layer, head, n, n] map per example, finite, non-zero,
    the same padded beside a longer example as alone."""
    from bertlook.analyses.gradient_pass import attention_gradients

    model, ids = tiny(arch, mlm=True), LAYOUTS[arch].ids
    L, n = model.config.num_hidden_layers, len(ids[0])
    long, short = masked(ids[0], 3, 12), masked([2, 8, 6, 5, 3], 2, 7)
    both = attention_gradients(model, [long, short])
    (alone,) = attention_gradients(model, [short])
    assert both[0]["attn"].shape == (L, 2, n, n) and both[1]["grad"].shape == (L, 2, 5, 5)
    assert np.isfinite(both[0]["grad"]).all() and np.abs(both[0]["grad"]).max() > 0
    np.testing.assert_allclose(both[1]["grad"], alone["grad"], atol=1e-5)
    np.testing.assert_allclose(both[1]["attn"], alone["attn"], atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_cli_extract_segments_with_the_norm_store(tmp_path, arch, tokenizer, capsys):
    """extract-segments --norms-out on a tiny directory of the layout (make_tiny_encoder; ALBERT: one shared layer):
    the store's maps equal output_attentions of the saved model, its three layers differ."""
    import torch
    from transformers import AutoModel

    from bertlook.testing.tiny_models import make_segment, make_tiny_encoder
    from test_norms import extract_segments_with_norms

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3)
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["model_type"] == MODEL_TYPES[arch] and (arch != "albert" or cfg["num_hidden_groups"] == 1)
    texts = [("the cat sat on the mat .", "the dog ran to the house ."), ("john read a book .", "mary wrote it .")]
    segs = [make_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(texts)]
    att, nst = extract_segments_with_norms(tmp_path, segs, model_dir, capsys)
    assert len(att) == len(nst) == 2
    maps = {rec["id"]: np.asarray(a, dtype=np.float32) for rec, a in att}
    assert all(a.shape[:2] == (3, 2) for a in maps.values())
    assert not np.allclose(maps[0][0], maps[0][1], atol=1e-3)  # three layers, three different maps
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    ids = tokenizer.convert_tokens_to_ids(segs[1]["tokens"])
    with torch.no_grad():
        want = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    for l in range(3):
        np.testing.assert_allclose(maps[1][l], want[l][0].numpy(), atol=2e-3)  # float16 in the store
    summary = json.loads((tmp_path / "s.json").read_text())
    assert sum(summary["norms"]["value_norm_counts"]) == summary["tokens"]
    assert len(summary["norms"]["value_norm_sums"]) == 3


#: the one parameter random init keeps where a layout has no learnt absolute positions (the rest: not checked here)
KEPT_BY_RANDOM_INIT = {"deberta_v2": "embeddings.word_embeddings.weight",
                       "modernbert": "embeddings.tok_embeddings.weight"}


@pytest.mark.parametrize("arch", ARCHS)
def test_cli_extract_words_with_the_norm_store_and_random_init(tmp_path, arch):
    """extract-words --norms-out --random-init-seed (the atlas's word-level jobs) on the tiny directories."""
    from bertlook.attention.store import open_store
    from bertlook.cli.extract_words import register_cli
    from bertlook.testing.tiny_models import make_tiny_encoder

    model_dir = make_tiny_encoder(tmp_path / arch, arch, layers=3)
    conllu = treebank(tmp_path)
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
        if seed and arch in KEPT_BY_RANDOM_INIT:  # the word embeddings alone keep their values
            kept = words.meta["random_init"]["kept_parameters"]
            assert kept == [KEPT_BY_RANDOM_INIT[arch]], words.meta["random_init"]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_faithfulness_table_of_a_tiny_masked_lm(tmp_path, arch):
    """run_faithfulness (the faithfulness step) on a tiny masked-LM directory of the layout: every measure against
    both ground truths, the loss rows run (the heads are found), one head ablation row per head."""
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
# DistilBERT's and ALBERT's own checks


def test_the_layouts_are_found_and_albert_shares_one_module():
    from bertlook.attention import layer_calls, norms
    from bertlook.attention.layer_capture import attention_modules

    d, a = tiny("distilbert"), tiny("albert")
    assert norms.encoder_layout(d)[0] == "distilbert" and len(norms.encoder_layers(d)) == 2
    kind, layers = norms.encoder_layout(a)
    assert kind == "albert" and len(layers) == 3 and all(layer is layers[0] for layer in layers)
    mods = norms.find_attention_modules(a, 2)
    assert len(mods) == 3 and mods.model is a and layer_calls.is_shared([v for v, _ in mods])
    assert [m for _, m, _ in attention_modules(a)] == [layers[0].attention] * 3
    assert not layer_calls.is_shared([v for v, _ in norms.find_attention_modules(d)])
    # two groups over four layers: layers 1-2 run group 1's layer, 3-4 group 2's (transformers' rule)
    two = tiny("albert", layers=4, groups=2)
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


@pytest.mark.parametrize("layers", [2, 4])
def test_a_wrong_number_of_calls_of_a_shared_module_is_an_error(layers):
    """The capture is set up for 3 layers; a forward pass running the shared layer 2 or 4 times is an error."""
    import torch

    from bertlook.attention.layer_capture import capture_layers

    model = tiny("albert", layers=3)
    with capture_layers(model, lambda layer, w: None):
        model.config.num_hidden_layers = layers  # AlbertTransformer runs its layer this many times
        try:
            with pytest.raises(BertlookError, match=f"called {layers} times in one forward pass"), torch.no_grad():
                model(input_ids=torch.tensor(LAYOUTS["albert"].ids))
        finally:
            model.config.num_hidden_layers = 3
        with torch.no_grad():
            model(input_ids=torch.tensor(LAYOUTS["albert"].ids))  # the next pass starts counting again


def test_a_shared_module_without_the_model_is_refused():
    from bertlook.attention import norms

    model = tiny("albert")
    with pytest.raises(BertlookError, match="needs the model"):
        with norms.capture_values(list(norms.find_attention_modules(model))):
            pass


