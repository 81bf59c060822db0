"""bertlook.analyses.gradients: masked-LM gradients w.r.t. attention probabilities (Fig 3 twin)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses import gradient_pass, gradients
from bertlook.attention import mlm
from bertlook.cli import gradients as gradients_cli
from bertlook.errors import BertlookError
from bertlook.reporting import figures
from bertlook.testing.tiny_models import make_segment as _segment

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

TEXTS = [  # (text_a, text_b): different lengths, with "." and ","
    ("the cat sat on the mat .", "the dog ran , and the man saw it ."),
    ("john saw mary .", "she read a book in paris ."),
    ("the king and the queen went to london , then to paris .",
     "they said it was a very good city , and then they came home ."),
    ("a man .", "a woman ."),
    ("it was a big house .", "there were many people , all old ."),
]




@pytest.fixture(scope="module")
def tokenizer(tiny_mlm_dir):
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    return load_tokenizer(resolve_model(str(tiny_mlm_dir)))


@pytest.fixture(scope="module")
def mlm_model(tiny_mlm_dir):
    from bertlook.attention.modeling import load_model, resolve_model

    return load_model(resolve_model(str(tiny_mlm_dir)), "cpu", mlm=True)


@pytest.fixture(scope="module")
def segments(tokenizer):
    return [_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(TEXTS)]


@pytest.fixture(scope="module")
def segments_file(tmp_path_factory, segments):
    from bertlook.data.segments import write_segments

    path = tmp_path_factory.mktemp("grad_segments") / "segments.jsonl"
    write_segments(path, segments)
    return path


def _run_cli(argv: list[str]) -> int:
    """Parse with the module's own subcommand and call its handler, as ``bertlook.cli.main`` does."""
    parser = argparse.ArgumentParser(prog="bertlook")
    gradients_cli.register_cli(parser.add_subparsers(dest="step"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def assert_png(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert float(np.asarray(img[..., :3]).std()) > 0.01  # not blank
    assert not [p for p in Path(path).parent.iterdir() if p.name.startswith(".") and "tmp" in p.name]


# ------------------------------------------------------------------------------------------------
# reference: attention probabilities replaced by leaf tensors inside the eager attention forward
# ------------------------------------------------------------------------------------------------


def _reference_gradients(model, ex: gradient_pass.MaskedSegment, monkeypatch):
    """Independent ``dL/dA``: every layer's softmax output is swapped for a leaf with the same values."""
    import torch
    import torch.nn.functional as F
    import transformers.models.bert.modeling_bert as mb

    leaves: list[torch.Tensor] = []

    def leaf_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        scaling = query.size(-1) ** -0.5 if scaling is None else scaling
        scores = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = torch.softmax(scores, dim=-1).detach().clone().requires_grad_(True)
        leaves.append(probs)
        out = torch.matmul(probs, value).transpose(1, 2).contiguous()
        return out, probs

    monkeypatch.setattr(mb, "eager_attention_forward", leaf_attention)
    ids = torch.tensor([ex.input_ids])
    tts = torch.tensor([ex.token_type_ids])
    with torch.enable_grad():
        logits = model(input_ids=ids, token_type_ids=tts).logits[0]
        labels = torch.tensor(ex.labels)
        loss = F.cross_entropy(logits, labels, ignore_index=-100)  # mean over the masked positions
        grads = torch.autograd.grad(loss, leaves)
    monkeypatch.undo()
    assert len(leaves) == model.config.num_hidden_layers  # the replacement really ran in every layer
    return float(loss.detach()), np.stack([l[0].detach().numpy() for l in leaves]), np.stack([g[0].numpy() for g in grads])


@pytest.mark.parametrize("head_gather", [True, False], ids=["head-on-masked-positions", "head-on-all-positions"])
def test_gradients_match_autograd_on_leaf_probabilities(mlm_model, tokenizer, segments, monkeypatch, head_gather):
    ex = gradient_pass.mask_segments(segments[2:3], tokenizer, seed=3)[0]
    assert ex.masked_positions
    if not head_gather:  # no known head module: logits of every position, then the masked ones
        monkeypatch.setattr(mlm, "HEAD_NAMES", ())
    assert (mlm.mlm_head_module(mlm_model) is not None) == head_gather
    got = gradient_pass.attention_gradients(mlm_model, [ex])[0]
    loss, attn_ref, grad_ref = _reference_gradients(mlm_model, ex, monkeypatch)
    L, H = mlm_model.config.num_hidden_layers, mlm_model.config.num_attention_heads
    assert got["grad"].shape == (L, H, ex.n, ex.n) == grad_ref.shape
    assert got["loss"] == pytest.approx(loss, abs=1e-6)
    np.testing.assert_allclose(got["attn"], attn_ref, atol=1e-6, rtol=0)
    np.testing.assert_allclose(got["grad"], grad_ref, atol=1e-6, rtol=0)
    # and relative to the gradients' own scale (entries are ~1e-5 on average on the tiny model)
    assert np.abs(got["grad"] - grad_ref).max() <= 1e-4 * np.abs(grad_ref).max()
    assert np.abs(grad_ref).max() > 1e-4  # a non-trivial comparison


def test_batch_gives_batch1_gradients(mlm_model, tokenizer, segments):
    masked = gradient_pass.mask_segments([segments[i] for i in (0, 2, 3)], tokenizer, seed=0)
    assert len({m.n for m in masked}) == 3  # different lengths -> padding in the batch
    batched = gradient_pass.attention_gradients(mlm_model, masked)
    for ex, res in zip(masked, batched):
        alone = gradient_pass.attention_gradients(mlm_model, [ex])[0]
        assert res["id"] == ex.id
        assert res["grad"].shape[-1] == ex.n
        assert res["loss"] == pytest.approx(alone["loss"], abs=1e-6)
        np.testing.assert_allclose(res["attn"], alone["attn"], atol=1e-6, rtol=0)
        np.testing.assert_allclose(res["grad"], alone["grad"], atol=1e-6, rtol=1e-4)
        assert np.abs(res["grad"] - alone["grad"]).max() <= 1e-4 * np.abs(alone["grad"]).max()


def test_batch_statistics_match_numpy_definitions(mlm_model, tokenizer, segments):
    masked = gradient_pass.mask_segments(segments, tokenizer, seed=1)
    per_ex = gradient_pass.attention_gradients(mlm_model, masked)
    stats = gradient_pass.batch_statistics(mlm_model, masked[:2], sep_token="[SEP]")
    more = gradient_pass.batch_statistics(mlm_model, masked[2:], sep_token="[SEP]")
    stats = {k: np.concatenate([stats[k], more[k]]) for k in ("grad_sum", "count", "mass", "loss", "n", "n_masked")}
    frame, extra = gradients.aggregate(stats, grad_average="pooled")
    seg_frame, _ = gradients.aggregate(stats, grad_average="segment")
    L = mlm_model.config.num_hidden_layers
    for layer in range(L):
        for c, target in enumerate(gradients.TARGETS):
            sums, counts, masses, seg_means = 0.0, 0, [], []
            for ex, res in zip(masked, per_ex):
                toks = np.asarray(ex.tokens, dtype=object)
                sel = {0: toks == "[SEP]", 1: np.isin(toks, [".", ","]), 2: ~np.isin(toks, ["[SEP]", ".", ","])}[c]
                g = np.abs(res["grad"][layer][:, :, sel])  # heads x all from-rows x target columns
                sums += g.sum()
                counts += g.size
                if g.size:
                    seg_means.append(g.mean())
                masses.append(res["attn"][layer][:, :, sel].sum(axis=(-1, -2)).mean() / ex.n)
            row = frame[(frame["layer"] == layer + 1) & (frame["target"] == target)].iloc[0]
            assert row["mean_abs_grad"] == pytest.approx(sums / counts, rel=1e-5)
            assert row["attention_mass"] == pytest.approx(np.mean(masses), abs=1e-6)
            srow = seg_frame[(seg_frame["layer"] == layer + 1) & (seg_frame["target"] == target)].iloc[0]
            assert srow["mean_abs_grad"] == pytest.approx(np.mean(seg_means), rel=1e-5)
    # the three classes partition every row: masses sum to one per layer
    np.testing.assert_allclose(frame.groupby("layer")["attention_mass"].sum(), 1.0, atol=1e-5)
    assert extra["segments_without_target"]["[SEP]"] == 0


# ------------------------------------------------------------------------------------------------
# masking
# ------------------------------------------------------------------------------------------------


def _random_segments(tokenizer, n_segments: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and not w.startswith("[")]
    out = []
    for sid in range(n_segments):
        na, nb = rng.integers(3, 60, size=2)
        a = list(rng.choice(words, size=na))
        b = list(rng.choice(words, size=nb))
        out.append({"id": sid, "doc": "R", "text_a": " ".join(a), "text_b": " ".join(b),
                    "tokens": ["[CLS]", *a, "[SEP]", *b, "[SEP]"],
                    "segment_ids": [0] * (na + 2) + [1] * (nb + 1), "truncated": False})
    return out


def test_masking_deterministic_never_special_and_rate(tokenizer):
    segs = _random_segments(tokenizer, 300)
    m1 = gradient_pass.mask_segments(segs, tokenizer, seed=7)
    m2 = gradient_pass.mask_segments(segs, tokenizer, seed=7)
    m3 = gradient_pass.mask_segments(segs, tokenizer, seed=8)
    assert [(m.input_ids, m.labels) for m in m1] == [(m.input_ids, m.labels) for m in m2]
    assert [m.input_ids for m in m1] != [m.input_ids for m in m3]
    special_ids = set(tokenizer.all_special_ids)
    total_masked = total_cand = 0
    actions = {"mask": 0, "keep": 0, "random": 0}
    for seg, m in zip(segs, m1):
        toks = seg["tokens"]
        cand = [i for i, t in enumerate(toks) if t not in ("[CLS]", "[SEP]")]
        assert len(m.masked_positions) == max(1, round(0.15 * len(cand)))
        assert m.masked_positions == sorted(m.masked_positions)
        for i, t in enumerate(toks):
            if t in ("[CLS]", "[SEP]"):
                assert m.labels[i] == -100 and m.input_tokens[i] == t and i not in m.masked_positions
        ids = tokenizer.convert_tokens_to_ids(toks)
        assert [i for i, lab in enumerate(m.labels) if lab != -100] == m.masked_positions
        for pos, action in zip(m.masked_positions, m.actions):
            assert m.labels[pos] == ids[pos]
            if action == "mask":
                assert m.input_tokens[pos] == "[MASK]"
            elif action == "keep":
                assert m.input_ids[pos] == ids[pos]
            else:
                assert m.input_ids[pos] not in special_ids
            actions[action] += 1
        unmasked = [i for i in range(len(toks)) if i not in m.masked_positions]
        assert all(m.input_ids[i] == ids[i] for i in unmasked)
        total_masked += len(m.masked_positions)
        total_cand += len(cand)
    assert total_masked / total_cand == pytest.approx(0.15, abs=0.01)
    n = sum(actions.values())
    assert actions["mask"] / n == pytest.approx(0.8, abs=0.04)
    assert actions["keep"] / n == pytest.approx(0.1, abs=0.03)
    assert actions["random"] / n == pytest.approx(0.1, abs=0.03)


def test_mask_only_mode_and_bad_arguments(tokenizer, segments):
    m = gradient_pass.mask_segments(segments, tokenizer, seed=0, mask_mode="mask_only")
    assert all(set(x.actions) == {"mask"} for x in m)
    assert all(x.input_tokens[p] == "[MASK]" for x in m for p in x.masked_positions)
    short = {"id": 9, "doc": "T", "text_a": "", "text_b": "", "tokens": ["[CLS]", "[SEP]", "[SEP]"],
             "segment_ids": [0, 0, 1], "truncated": False}
    assert gradient_pass.mask_segments([short], tokenizer, seed=0)[0].masked_positions == []
    with pytest.raises(BertlookError, match="mask mode"):
        gradient_pass.mask_segments(segments, tokenizer, seed=0, mask_mode="everything")
    with pytest.raises(BertlookError, match="mask rate"):
        gradient_pass.mask_segments(segments, tokenizer, seed=0, rate=0.0)


# ------------------------------------------------------------------------------------------------
# the step: MLM model and a model without MLM head
# ------------------------------------------------------------------------------------------------


def test_has_mlm_head(tiny_mlm_dir, tiny_bert_dir):
    from bertlook.attention.modeling import resolve_model

    assert mlm.has_mlm_head(resolve_model(str(tiny_mlm_dir))) == (True, "")
    ok, reason = mlm.has_mlm_head(resolve_model(str(tiny_bert_dir)))
    assert not ok
    assert "no masked-LM head" in reason and "cls.predictions.*" in reason


def test_cli_mlm_model(tmp_path, tiny_mlm_dir, segments_file):
    table, fig, summ = tmp_path / "sep_gradients.csv", tmp_path / "fig3.png", tmp_path / "summary.json"
    rc = _run_cli(["gradients", "--segments", str(segments_file), "--model", str(tiny_mlm_dir),
                   "--out-table", str(table), "--out-figure", str(fig), "--summary", str(summ),
                   "--seed", "0", "--batch-size", "2", "--device", "cpu"])
    assert rc == 0
    df = pd.read_csv(table)
    assert list(df.columns) == ["layer", "target", "mean_abs_grad", "attention_mass"]
    assert len(df) == 2 * 3
    for layer, d in df.groupby("layer"):
        assert sorted(d["target"]) == sorted(gradients.TARGETS)
    assert sorted(df["layer"].unique()) == [1, 2]
    assert (df["mean_abs_grad"] > 0).all() and np.isfinite(df["mean_abs_grad"]).all()
    np.testing.assert_allclose(df.groupby("layer")["attention_mass"].sum(), 1.0, atol=1e-4)
    summary = json.loads(summ.read_text())
    assert summary["status"] == "ok" and summary["reason"] is None
    assert summary["n_examples"] == len(TEXTS) and summary["excluded_too_long"] == 0
    assert summary["masked_tokens"] > 0 and summary["mask_mode"] == "bert"
    assert_png(fig)

    # same seed -> identical table; batch size does not matter
    table2 = tmp_path / "again.csv"
    assert _run_cli(["gradients", "--segments", str(segments_file), "--model", str(tiny_mlm_dir),
                     "--out-table", str(table2), "--out-figure", str(tmp_path / "f2.png"),
                     "--summary", str(tmp_path / "s2.json"), "--batch-size", "5", "--device", "cpu"]) == 0
    pd.testing.assert_frame_equal(df, pd.read_csv(table2), rtol=1e-5)


def test_cli_model_without_mlm_head_is_not_run(tmp_path, tiny_bert_dir, segments_file):
    table, fig, summ = tmp_path / "sep_gradients.csv", tmp_path / "fig3.png", tmp_path / "summary.json"
    rc = _run_cli(["gradients", "--segments", str(segments_file), "--model", str(tiny_bert_dir),
                   "--out-table", str(table), "--out-figure", str(fig), "--summary", str(summ),
                   "--device", "cpu"])
    assert rc == 0
    df = pd.read_csv(table, dtype=str, keep_default_na=False)
    assert list(df.columns) == ["layer", "target", "mean_abs_grad", "attention_mass", "note"]
    assert len(df) == 1
    assert (df.iloc[0][["layer", "target", "mean_abs_grad", "attention_mass"]] == "").all()
    note = df.iloc[0]["note"]
    assert note.startswith("not run:") and "no masked-LM head" in note and "cls.predictions" in note
    summary = json.loads(summ.read_text())
    assert summary["status"] == "not run" and summary["reason"] == note
    assert_png(fig)


def test_figure_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("layer,target,mean_abs_grad,attention_mass\n1,[SEP],0.1,0.2\n1,nonsense,0.1,0.2\n")
    with pytest.raises(BertlookError, match=r"bad.csv:3: unknown target"):
        figures.fig3_sep_gradients(bad, tmp_path / "x.png")
    missing = tmp_path / "missing.csv"
    missing.write_text("layer,target\n1,[SEP]\n")
    with pytest.raises(BertlookError, match="missing column"):
        figures.fig3_sep_gradients(missing, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_bad_switches(segments_file, tiny_mlm_dir):
    with pytest.raises(BertlookError, match="gradient average"):
        gradients.sep_gradient_importance(segments_file, str(tiny_mlm_dir),
                                          gradients.GradientOptions(grad_average="median"))
    with pytest.raises(BertlookError, match="batch size"):
        gradients.sep_gradient_importance(segments_file, str(tiny_mlm_dir), gradients.GradientOptions(batch_size=0))
    with pytest.raises(BertlookError, match="batch size"):  # a keyword override of one field is checked too
        gradients.gradient_partial(segments_file, str(tiny_mlm_dir), gradients.GradientOptions(), batch_size=0)


def test_gradient_options_are_frozen_keyword_only_and_overridable(segments_file, tiny_mlm_dir):
    import dataclasses

    opts = gradients.GradientOptions(seed=2, batch_size=2, device="cpu", progress_every=0, max_examples=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.seed = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        gradients.GradientOptions("v1")  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword"):
        gradients.gradient_partial(segments_file, str(tiny_mlm_dir), opts, seeds=3)
    with pytest.raises(TypeError, match="GradientOptions"):
        gradients.gradient_partial(segments_file, str(tiny_mlm_dir), {"seed": 2})
    # keyword overrides (the per-setting keywords) give the run of the equal options object
    by_options = gradients.gradient_partial(segments_file, str(tiny_mlm_dir), opts)
    by_keywords = gradients.gradient_partial(segments_file, str(tiny_mlm_dir), seed=2, batch_size=2, device="cpu",
                                             progress_every=0, max_examples=2)
    assert by_options[0]["settings"] == by_keywords[0]["settings"]
    for key, value in by_options[1].items():
        np.testing.assert_array_equal(value, by_keywords[1][key])


def test_checkpoint_missing_base_weights_is_an_error(tmp_path, tiny_mlm_dir):
    import shutil

    from safetensors.torch import load_file, save_file

    from bertlook.attention.modeling import resolve_model

    broken = tmp_path / "broken"
    shutil.copytree(tiny_mlm_dir, broken)
    weights = load_file(broken / "model.safetensors")
    key = next(k for k in weights if "encoder.layer.0.attention.self.query.weight" in k)
    del weights[key]
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(BertlookError, match="lacks 1 weight"):
        mlm.has_mlm_head(resolve_model(str(broken)))


# ------------------------------------------------------------------------------------------------
# head importance (Michel et al. 2019): |dL/dxi_h| of a gate on the head's output
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlm_model64(tiny_mlm_dir):
    """The tiny MLM in float64, so that finite differences are accurate to ~1e-9."""
    from bertlook.attention.modeling import load_model, resolve_model

    return load_model(resolve_model(str(tiny_mlm_dir)), "cpu", mlm=True).double()


def _gated_loss(model, ex: gradient_pass.MaskedSegment, layer: int, head: int, xi: float) -> float:
    """The segment's masked-LM loss with head (layer, head)'s slice of the self-attention output times xi."""
    import torch
    import torch.nn.functional as F

    attn_self = model.bert.encoder.layer[layer].attention.self
    d = attn_self.attention_head_size
    calls = []

    def gate(module, args, output):
        context = output[0].clone()  # [batch, seq, d_model]
        context[..., head * d:(head + 1) * d] *= xi
        calls.append(1)
        return (context, *output[1:])

    handle = attn_self.register_forward_hook(gate)
    try:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ex.input_ids]),
                           token_type_ids=torch.tensor([ex.token_type_ids])).logits[0]  # [seq, vocab]
            loss = F.cross_entropy(logits, torch.tensor(ex.labels), ignore_index=-100)
    finally:
        handle.remove()
    assert calls == [1]  # the gate really ran
    return float(loss)


def test_head_importance_equals_finite_difference_of_a_gated_head(mlm_model64, tokenizer, segments):
    """Independent check: (L(1+eps) - L(1-eps)) / 2 eps of an explicit gate = sum_ij dL/dA * A."""
    masked = gradient_pass.mask_segments(segments, tokenizer, seed=4)
    stats = gradient_pass.batch_statistics(mlm_model64, masked[:3], sep_token="[SEP]")  # one padded batch
    per_ex = gradient_pass.attention_gradients(mlm_model64, masked[:3])
    L, H = mlm_model64.config.num_hidden_layers, mlm_model64.config.num_attention_heads
    assert stats["importance"].shape == (3, L, H)
    eps = 1e-4
    nontrivial = 0
    for b, ex in enumerate(masked[:3]):
        for layer, head in [(0, 0), (0, 1), (1, 0), (1, 1)]:
            fd = (_gated_loss(mlm_model64, ex, layer, head, 1 + eps)
                  - _gated_loss(mlm_model64, ex, layer, head, 1 - eps)) / (2 * eps)
            formula = float((per_ex[b]["grad"][layer, head].astype(np.float64)
                             * per_ex[b]["attn"][layer, head]).sum())  # float32 copies: ~1e-6 relative
            assert formula == pytest.approx(fd, rel=1e-4, abs=1e-9), (b, layer, head)
            assert stats["importance"][b, layer, head] == pytest.approx(abs(fd), rel=1e-6, abs=1e-12), (b, layer, head)
            nontrivial += abs(fd) > 2e-5
    assert nontrivial >= 10  # the comparison is not between zeros (|dL/dxi| ~1e-4 on the tiny model)


def test_reduce_head_importance_means_and_layer_norm():
    """Two partials by hand: raw = summed |dL/dxi| / segments; importance = raw / ||raw of the layer||_2."""
    meta = {"status": "ok", "reason": None, "num_layers": 2, "num_heads": 2}
    p1 = ({**meta, "n_examples": 1}, {"importance_sum": np.array([[3.0, 0.0], [1.0, 1.0]]), "importance_n": np.int64(1)})
    p2 = ({**meta, "n_examples": 2}, {"importance_sum": np.array([[3.0, 8.0], [0.0, 0.0]]), "importance_n": np.int64(2)})
    frame, info = gradients.reduce_head_importance([p1, p2])
    assert list(frame.columns) == ["layer", "head", "importance", "importance_raw"]
    assert frame[["layer", "head"]].values.tolist() == [[1, 1], [1, 2], [2, 1], [2, 2]]
    np.testing.assert_allclose(frame["importance_raw"], [2.0, 8 / 3, 1 / 3, 1 / 3])
    np.testing.assert_allclose(frame["importance"], [2 / (10 / 3), (8 / 3) / (10 / 3), 1 / np.sqrt(2), 1 / np.sqrt(2)])
    assert info["n_examples"] == 3
    with pytest.raises(BertlookError, match="b.npz: importance_n 2 differs"):
        gradients.reduce_head_importance([p1, ({**meta, "n_examples": 5}, p2[1])], where=["a.npz", "b.npz"])
    old = ({**meta, "n_examples": 1}, {"grad_sum": np.zeros((2, 3))})
    with pytest.raises(BertlookError, match="old.npz: gradient partial without head importance"):
        gradients.reduce_head_importance([old], where=["old.npz"])


def test_head_importance_shards_equal_one_run(tiny_mlm_dir, segments_file):
    opts = gradients.GradientOptions(seed=2, batch_size=2, device="cpu", progress_every=0)
    whole = gradients.gradient_partial(segments_file, str(tiny_mlm_dir), opts)
    want, _ = gradients.reduce_head_importance([whole])
    parts = [gradients.gradient_partial(segments_file, str(tiny_mlm_dir), opts, shard=(i, 3)) for i in (1, 2, 3)]
    got, info = gradients.reduce_head_importance(parts)
    assert info["n_examples"] == len(TEXTS)
    np.testing.assert_allclose(got["importance_raw"], want["importance_raw"], rtol=1e-5)
    np.testing.assert_allclose(got["importance"], want["importance"], rtol=1e-5)
    assert (want["importance_raw"] > 0).all()
    np.testing.assert_allclose(want.groupby("layer")["importance"].apply(lambda v: float(np.sqrt((v ** 2).sum()))), 1.0)


def test_cli_out_importance(tmp_path, tiny_mlm_dir, tiny_bert_dir, segments_file):
    out = tmp_path / "head_importance.csv"
    rc = _run_cli(["gradients", "--segments", str(segments_file), "--model", str(tiny_mlm_dir),
                   "--out-table", str(tmp_path / "t.csv"), "--out-figure", str(tmp_path / "f.png"),
                   "--summary", str(tmp_path / "s.json"), "--out-importance", str(out), "--device", "cpu"])
    assert rc == 0
    df = pd.read_csv(out)
    assert list(df.columns) == ["layer", "head", "importance", "importance_raw"] and len(df) == 4
    assert (df["importance_raw"] > 0).all()
    # via partials: the same file
    part = tmp_path / "p.npz"
    assert _run_cli(["gradients", "--segments", str(segments_file), "--model", str(tiny_mlm_dir),
                     "--out-partial", str(part), "--device", "cpu"]) == 0
    out2 = tmp_path / "again.csv"
    assert _run_cli(["gradients", "--partial", str(part), "--out-table", str(tmp_path / "t2.csv"),
                     "--out-figure", str(tmp_path / "f2.png"), "--summary", str(tmp_path / "s2.json"),
                     "--out-importance", str(out2)]) == 0
    pd.testing.assert_frame_equal(df, pd.read_csv(out2), rtol=1e-5)
    # no masked-LM head: the not-run form
    out3 = tmp_path / "not_run.csv"
    assert _run_cli(["gradients", "--segments", str(segments_file), "--model", str(tiny_bert_dir),
                     "--out-table", str(tmp_path / "t3.csv"), "--out-figure", str(tmp_path / "f3.png"),
                     "--summary", str(tmp_path / "s3.json"), "--out-importance", str(out3), "--device", "cpu"]) == 0
    nr = pd.read_csv(out3, dtype=str, keep_default_na=False)
    assert list(nr.columns) == ["layer", "head", "importance", "importance_raw", "note"] and len(nr) == 1
    assert (nr.iloc[0][["layer", "head", "importance", "importance_raw"]] == "").all()
    assert nr.iloc[0]["note"].startswith("not run:") and "no masked-LM head" in nr.iloc[0]["note"]
