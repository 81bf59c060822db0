"""bertlook.attention.norms: norm-based attention maps (Kobayashi et al. 2020), written beside the
attention maps by extract-segments / extract-words --norms-out, merged and gathered over shards, and
drawn by `figures --out-fig-norms`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from bertlook.attention import norms
from bertlook.attention.alignment import align_words, token_to_word_attention
from bertlook.attention.extract_words import WordExtractionOptions, extract_word_attention
from bertlook.attention.extraction import encode_segment, extract_segments, extract_to_store
from bertlook.attention.store import AttentionWriter, open_store
from bertlook.errors import BertlookError
from bertlook.attention import shards
from bertlook.pipeline import sharding
from bertlook.testing.tiny_models import make_segment

TEXTS = [  # (text_a, text_b): "." and "," occur, so every token class has tokens
    ("the cat sat on the mat .", "the dog ran , and it was good ."),
    ("john saw mary .", "she read a book in paris ."),
    ("the king and the queen went to london .", "they said it was a very good city , and then they came home ."),
    ("a man .", "a woman ."),
    ("it was a big house .", "there were many people ."),
]
SPECIALS = {"special_tokens": {"cls": "[CLS]", "sep": "[SEP]"}}
CONLLU_SENTS = [["The", "cat", "sat", "."], ["John's", "dog", "sang", "42", ","], ["a", "man", "."],
                ["it", "was", "unbelievably", "big"], ["the", "queen", "went", "to", "london", "."]]


@pytest.fixture(scope="module")
def segments(tokenizer):
    return [make_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(TEXTS)]


@pytest.fixture(scope="module")
def sharp_model(tiny_bert_dir):
    """The tiny BERT with scaled-up query/key weights (maps far from uniform) and value weights (value
    vectors of clearly different norms), so that attention and norm maps differ."""
    import torch

    from bertlook.attention.modeling import load_model, resolve_model

    model = load_model(resolve_model(str(tiny_bert_dir)), "cpu")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.encoder.layer:
            for lin in (layer.attention.self.query, layer.attention.self.key):
                lin.weight.mul_(12.0)
                lin.bias.normal_(0, 0.5, generator=gen)
            layer.attention.self.value.weight.mul_(20.0)  # value norms that differ between tokens
            layer.attention.self.value.bias.normal_(0, 0.1, generator=gen)
            layer.attention.output.dense.bias.normal_(0, 5.0, generator=gen)  # must not enter the norms
    return model


def _examples(segments, tokenizer):
    return [(seg, *encode_segment(seg, tokenizer, "zeros")) for seg in segments]


def _loop_norm_maps(model, input_ids, token_type_ids=None):
    """Independent reference, batch 1, explicit loops: ``(N_hat [L, H, n, n], fnorm [L, H, n])``.

    Layer input x from ``output_hidden_states``, ``x W_V + b_V`` by hand from the Linear's weight and
    bias, per-head slices of ``W_O``, one norm per (head, token), ``alpha`` from ``output_attentions``.
    """
    import torch

    ids = torch.tensor([input_ids])
    kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True, output_hidden_states=True)
    if token_type_ids is not None:
        kw["token_type_ids"] = torch.tensor([token_type_ids])
    with torch.inference_mode():
        out = model(**kw)
    n = len(input_ids)
    num_heads = model.config.num_attention_heads
    L = len(model.encoder.layer)
    result = np.zeros((L, num_heads, n, n))
    fnorm = np.zeros((L, num_heads, n))
    for l, layer in enumerate(model.encoder.layer):
        x = out.hidden_states[l][0].double().numpy()  # input of layer l
        wv = layer.attention.self.value.weight.detach().double().numpy()
        bv = layer.attention.self.value.bias.detach().double().numpy()
        wo = layer.attention.output.dense.weight.detach().double().numpy()
        alpha = out.attentions[l][0].double().numpy()
        d = wo.shape[1]
        dh = d // num_heads
        v = x @ wv.T + bv
        for h in range(num_heads):
            for j in range(n):
                f = wo[:, h * dh:(h + 1) * dh] @ v[j, h * dh:(h + 1) * dh]
                fnorm[l, h, j] = np.sqrt(np.sum(f * f))
            for i in range(n):
                row = [alpha[h, i, j] * fnorm[l, h, j] for j in range(n)]
                total = sum(row)
                result[l, h, i] = [r / total for r in row]
    return result, fnorm


def _by_id(path):
    store = open_store(path)
    return store, {rec["id"]: np.asarray(a, dtype=np.float32) for rec, a in store}


# ------------------------------------------------------------------------------------ (a) the definition

def test_norm_maps_match_a_loop_computation_token_level(segments, tokenizer, sharp_model, tmp_path):
    examples = _examples(segments, tokenizer)
    summary = extract_to_store(examples, sharp_model, tmp_path / "att", norms_out_dir=tmp_path / "norm",
                               batch_size=2, meta=SPECIALS, progress_every=0)
    att, amaps = _by_id(tmp_path / "att")
    nst, nmaps = _by_id(tmp_path / "norm")
    assert att.meta["map"] == "attention" and nst.meta["map"] == "norm" and "Kobayashi" in nst.meta["norm"]["reference"]
    assert [r["id"] for r in att.records] == [r["id"] for r in nst.records]  # same records, same order
    assert [r["tokens"] for r in att.records] == [r["tokens"] for r in nst.records]
    assert summary["norms"]["store"] == str(tmp_path / "norm")
    biggest = 0.0
    for seg, ids, _ in examples:
        want, _ = _loop_norm_maps(sharp_model, ids)
        got = nmaps[seg["id"]]
        np.testing.assert_allclose(got, want, atol=2e-3, rtol=2e-3)
        biggest = max(biggest, float(np.abs(got - amaps[seg["id"]]).max()))
    assert biggest > 0.05  # the norm maps are not the attention maps: the comparison means something


def test_norm_maps_word_level_match_the_loop_computation(tiny_bert_dir, tokenizer, sharp_model, tmp_path,
                                                         monkeypatch):
    import bertlook.attention.modeling as modeling

    monkeypatch.setattr(modeling, "load_model", lambda *a, **k: sharp_model)  # the sharpened model, by its loader
    conllu = _write_conllu(tmp_path / "dev.conllu")
    for mode in ("mean", "first"):
        opts = WordExtractionOptions(device="cpu", from_split=mode, batch_size=3, progress_every=0)
        summary = extract_word_attention(conllu, str(tiny_bert_dir), tmp_path / f"w-{mode}", opts,
                                         norms_out=tmp_path / f"n-{mode}")
        nst, nmaps = _by_id(tmp_path / f"n-{mode}")
        assert nst.meta["map"] == "norm" and nst.meta["level"] == "word" and nst.meta["from_split"] == mode
        assert open_store(tmp_path / f"w-{mode}").meta["map"] == "attention"
        assert summary["norms"]["value_norm_counts"][0] == summary["n_extracted"]  # one [CLS] per sentence
        for rec in nst.records:
            al = align_words(rec["tokens"][1:-1], tokenizer)
            tok_maps, _ = _loop_norm_maps(sharp_model, al.input_ids)
            want = token_to_word_attention(tok_maps, al, from_split=mode)
            np.testing.assert_allclose(nmaps[rec["id"]], want, atol=2e-3, rtol=2e-3)


# ------------------------------------------------------------------------------------ (b) padding

def test_padded_batches_equal_batch_one(segments, tokenizer, sharp_model, tmp_path):
    examples = _examples(segments, tokenizer)
    s1 = extract_to_store(examples, sharp_model, tmp_path / "a1", norms_out_dir=tmp_path / "n1", batch_size=1,
                          meta=SPECIALS, progress_every=0)
    s5 = extract_to_store(examples, sharp_model, tmp_path / "a5", norms_out_dir=tmp_path / "n5", batch_size=5,
                          meta=SPECIALS, progress_every=0)
    assert s5["padded_tokens"] > s5["tokens"]  # really padded
    _, m1 = _by_id(tmp_path / "n1")
    _, m5 = _by_id(tmp_path / "n5")
    assert m1.keys() == m5.keys()
    for k in m1:
        np.testing.assert_allclose(m1[k], m5[k], atol=1e-3)
    np.testing.assert_allclose(s1["norms"]["value_norm_sums"], s5["norms"]["value_norm_sums"], rtol=1e-5)
    assert s1["norms"]["value_norm_counts"] == s5["norms"]["value_norm_counts"]


# ------------------------------------------------------------------------------------ (c) class sums

def test_class_sums_equal_a_direct_computation(segments, tokenizer, sharp_model, tmp_path):
    examples = _examples(segments, tokenizer)
    summary = extract_to_store(examples, sharp_model, tmp_path / "a", norms_out_dir=tmp_path / "n", batch_size=2,
                               meta=SPECIALS, progress_every=0)
    L = sharp_model.config.num_hidden_layers
    want = np.zeros((L, 4))
    counts = [0, 0, 0, 0]
    for seg, ids, _ in examples:
        _, fnorm = _loop_norm_maps(sharp_model, ids)
        for j, tok in enumerate(seg["tokens"]):
            c = 0 if tok == "[CLS]" else 1 if tok == "[SEP]" else 2 if tok in (".", ",") else 3
            counts[c] += 1
            for l in range(L):
                want[l, c] += fnorm[l, :, j].mean()
    got = summary["norms"]
    assert got["classes"] == ["cls", "sep", "punct", "other"]
    assert got["value_norm_counts"] == counts and counts[0] == len(segments) and counts[1] == 2 * len(segments)
    np.testing.assert_allclose(got["value_norm_sums"], want, rtol=1e-5)
    reduced = norms.reduce_norm_summaries([summary])
    np.testing.assert_allclose(reduced["means"], want / np.asarray(counts), rtol=1e-5)


def test_value_norms_through_the_head_gram_equal_the_direct_product():
    """||v_h W_O^h^T|| as sqrt(v_h G_h v_h^T) (G_h = W_O^h^T W_O^h): the float64 direct product to float32
    rounding, at BERT-base's shapes (12 heads of 64)."""
    import torch

    from bertlook.attention.norms import head_gram, value_norms

    gen = torch.Generator().manual_seed(0)
    values = torch.randn(2, 9, 768, generator=gen)  # [batch, seq, d_model]
    w_o = torch.randn(768, 768, generator=gen) * 0.03  # [d_model (out), d_model (in)]
    direct = torch.einsum("bshd,ohd->bhso", values.double().reshape(2, 9, 12, 64), w_o.double().reshape(768, 12, 64))
    expected = torch.linalg.vector_norm(direct, dim=-1)  # [batch, head, key_pos]
    got = value_norms(values, w_o, 12)
    assert got.shape == (2, 12, 9) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expected, rtol=2e-6, atol=0)
    assert torch.equal(value_norms(values, w_o, 12, gram=head_gram(w_o, 12)), got)
    with pytest.raises(BertlookError, match="do not fit 5 heads"):
        value_norms(values, w_o, 5)


def test_norm_maps_refuses_a_zero_row_naming_the_example():
    import torch

    attn = torch.full((1, 1, 3, 3), 1 / 3)
    vn = torch.tensor([[[1.0, 2.0, 3.0]]])
    out = norms.norm_maps(attn, vn)
    np.testing.assert_allclose(out[0, 0, 0].numpy(), [1 / 6, 2 / 6, 3 / 6], rtol=1e-6)
    with pytest.raises(BertlookError, match="example 'ex7'.*row 0"):
        norms.norm_maps(attn, torch.zeros((1, 1, 3)), ids=["ex7"])
    padded = norms.norm_maps(torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]]), torch.ones((1, 1, 2)), lengths=[1])
    assert float(padded[0, 0, 1].sum()) == 0.0  # a padded row of zeros is no error


# ------------------------------------------------------------------------------------ (d) merging, gathering

def test_merge_stores_keeps_the_map_kind_and_refuses_mixing(tmp_path, tiny_bert_dir):
    conllu = _write_conllu(tmp_path / "dev.conllu")
    opts = WordExtractionOptions(batch_size=2, device="cpu", progress_every=0, max_seq_len=10)
    whole = extract_word_attention(conllu, str(tiny_bert_dir), tmp_path / "whole", opts,
                                   norms_out=tmp_path / "nwhole")
    parts = [extract_word_attention(conllu, str(tiny_bert_dir), tmp_path / f"p{i}", opts,
                                    norms_out=tmp_path / f"n{i}", shard=(i, 2)) for i in (1, 2)]
    shards.merge_stores([tmp_path / "n1", tmp_path / "n2"], tmp_path / "nmerged")
    shards.merge_stores([tmp_path / "p1", tmp_path / "p2"], tmp_path / "pmerged")
    merged, w = open_store(tmp_path / "nmerged"), open_store(tmp_path / "nwhole")
    assert merged.meta["map"] == "norm" and open_store(tmp_path / "pmerged").meta["map"] == "attention"
    assert [r["id"] for r in merged.records] == [r["id"] for r in w.records]
    for (_, a), (_, b) in zip(merged, w):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), atol=1e-3)
    with pytest.raises(BertlookError, match="norm-based stores cannot be merged"):
        shards.merge_stores([tmp_path / "p1", tmp_path / "n2"], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    # a store without the key is an attention store: merging it with a norm store is refused too
    meta = json.loads((tmp_path / "p1" / "meta.json").read_text())
    del meta["map"]
    (tmp_path / "p1" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BertlookError, match="'norm' maps"):
        shards.merge_stores([tmp_path / "p1", tmp_path / "n2"], tmp_path / "bad")
    gathered = sharding.merge_summaries(parts)
    assert gathered["norms"]["value_norm_counts"] == whole["norms"]["value_norm_counts"]
    np.testing.assert_allclose(gathered["norms"]["value_norm_sums"], whole["norms"]["value_norm_sums"], rtol=1e-5)
    assert gathered["norms"]["store"] == [str(tmp_path / "n1"), str(tmp_path / "n2")]


def test_gather_extraction_adds_up_the_norm_sums(tmp_path, tiny_bert_dir, segments):
    seg_path = tmp_path / "segments.jsonl"
    seg_path.write_text("".join(json.dumps(s) + "\n" for s in segments), encoding="utf-8")
    common = dict(batch_size=2, device="cpu", progress_every=0)
    whole = extract_segments(seg_path, str(tiny_bert_dir), tmp_path / "whole", norms_out=tmp_path / "nwhole", **common)
    paths = []
    for i in range(1, 4):
        s = extract_segments(seg_path, str(tiny_bert_dir), tmp_path / f"s{i}", shard=(i, 3),
                             norms_out=tmp_path / f"n{i}", **common)
        paths.append(tmp_path / f"s{i}.json")
        paths[-1].write_text(json.dumps(s))
    summary, meta = sharding.gather_extraction(paths)
    assert meta["map"] == "attention"
    assert summary["norms"]["value_norm_counts"] == whole["norms"]["value_norm_counts"]
    np.testing.assert_allclose(summary["norms"]["value_norm_sums"], whole["norms"]["value_norm_sums"], rtol=1e-5)
    assert summary["estimated_map_bytes"] == whole["estimated_map_bytes"]
    # the figure's reducer: the gathered summary, or every shard's in order, give the same means
    by_shards = norms.reduce_norm_summaries(paths)
    np.testing.assert_allclose(by_shards["means"], norms.reduce_norm_summaries([summary])["means"], rtol=1e-12)
    with pytest.raises(BertlookError, match="expected 1/3"):
        norms.reduce_norm_summaries(paths[1:] + paths[:1])
    bad = json.loads(paths[1].read_text())
    bad["norms"]["value_norm_sums"] = bad["norms"]["value_norm_sums"][:1]
    paths[1].write_text(json.dumps(bad))
    with pytest.raises(BertlookError, match="value_norm_sums"):
        sharding.gather_extraction(paths)


# ------------------------------------------------------------------------------------ (e) CLI, atomicity

def extract_segments_with_norms(tmp_path, segments, model_dir, capsys):
    """`bertlook extract-segments --norms-out` on ``segments`` (written to tmp_path/segments.jsonl) with the model of
    ``model_dir``, batch 2, on the CPU: exit 0 and its norm line checked; the attention and norm stores opened
    (tmp_path/att, tmp_path/norm; the summary in tmp_path/s.json). Also used by tests/test_encoder_layouts.py."""
    from bertlook.cli.extract_segments import register_cli

    seg_path = tmp_path / "segments.jsonl"
    seg_path.write_text("".join(json.dumps(s) + "\n" for s in segments), encoding="utf-8")
    parser = argparse.ArgumentParser(prog="bertlook")
    register_cli(parser.add_subparsers(dest="step"))
    args = parser.parse_args(["extract-segments", "--segments", str(seg_path), "--model", str(model_dir),
                              "--out", str(tmp_path / "att"), "--norms-out", str(tmp_path / "norm"),
                              "--device", "cpu", "--batch-size", "2", "--summary", str(tmp_path / "s.json")])
    assert args.func(args) == 0
    assert "norm-based maps -> " in capsys.readouterr().out
    att, nst = open_store(tmp_path / "att", level="token"), open_store(tmp_path / "norm", level="token")
    assert att.meta["map"] == "attention" and nst.meta["map"] == "norm"
    return att, nst


def test_cli_extract_segments_norms_out(tmp_path, tiny_bert_dir, segments, capsys):
    att, nst = extract_segments_with_norms(tmp_path, segments, tiny_bert_dir, capsys)
    assert len(att) == len(nst) == len(segments)
    for rec, n in nst:  # open_store checks every row (finite, >= 0, sums to 1); check it here too
        np.testing.assert_allclose(n.astype(np.float32).sum(-1), 1.0, atol=2e-3)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["norms"]["store"] == str(tmp_path / "norm")
    assert sum(summary["norms"]["value_norm_counts"]) == summary["tokens"]
    # the surface statistics run unchanged on the norm store
    from bertlook.analyses.surface_stats import compute_surface_stats

    frame, _ = compute_surface_stats(nst)
    assert len(frame) == 4 and ((frame[["cls", "sep", "punct"]].sum(axis=1)) <= 1.0 + 1e-3).all()


def test_cli_extract_words_norms_out_random_init_and_shard(tmp_path, tiny_bert_dir):
    from bertlook.cli.extract_words import register_cli

    conllu = _write_conllu(tmp_path / "dev.conllu")
    parser = argparse.ArgumentParser(prog="bertlook")
    register_cli(parser.add_subparsers(dest="step"))
    args = parser.parse_args(["extract-words", "--treebank", str(conllu), "--model", str(tiny_bert_dir),
                              "--out", str(tmp_path / "w"), "--norms-out", str(tmp_path / "n"), "--device", "cpu",
                              "--random-init-seed", "3", "--shard", "1/2", "--summary", str(tmp_path / "s.json")])
    assert args.func(args) == 0
    nst = open_store(tmp_path / "n", level="word")
    assert nst.meta["map"] == "norm" and nst.meta["random_init"]["seed"] == 3 and nst.meta["shard"]["index"] == 1
    assert [r["id"] for r in nst.records] == [r["id"] for r in open_store(tmp_path / "w").records]
    assert "norms" in json.loads((tmp_path / "s.json").read_text())


def test_an_error_leaves_nothing_at_either_path(segments, tokenizer, sharp_model, tmp_path, monkeypatch):
    examples = _examples(segments, tokenizer)
    calls = {"n": 0}
    real = norms.norm_maps

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated failure")
        return real(*a, **k)

    monkeypatch.setattr(norms, "norm_maps", flaky)
    with pytest.raises(RuntimeError, match="simulated"):
        extract_to_store(examples, sharp_model, tmp_path / "p" / "a", norms_out_dir=tmp_path / "p" / "n",
                         batch_size=2, progress_every=0)
    assert list((tmp_path / "p").iterdir()) == []
    monkeypatch.setattr(norms, "norm_maps", real)

    # the norm store fails while being closed, after the attention store was renamed into place
    real_finish = AttentionWriter._finish

    def failing_finish(self, *a):
        if self.out_dir.name == "n":
            raise OSError(28, "No space left on device")
        return real_finish(self, *a)

    monkeypatch.setattr(AttentionWriter, "_finish", failing_finish)
    with pytest.raises(BertlookError, match="No space left"):
        extract_to_store(examples, sharp_model, tmp_path / "q" / "a", norms_out_dir=tmp_path / "q" / "n",
                         batch_size=2, progress_every=0)
    assert list((tmp_path / "q").iterdir()) == []
    with pytest.raises(BertlookError, match="must not be the attention store"):
        extract_to_store(examples, sharp_model, tmp_path / "r", norms_out_dir=tmp_path / "r", progress_every=0)


def test_size_estimate_and_disk_check_cover_both_stores(segments, tokenizer, sharp_model, tmp_path, monkeypatch):
    import shutil as _shutil

    examples = _examples(segments, tokenizer)
    one = extract_to_store(examples, sharp_model, tmp_path / "a1", progress_every=0)
    two = extract_to_store(examples, sharp_model, tmp_path / "a2", norms_out_dir=tmp_path / "n2", progress_every=0)
    assert two["estimated_map_bytes"] == 2 * one["estimated_map_bytes"]
    written = sum(p.stat().st_size for d in ("a2", "n2") for p in (tmp_path / d).glob("shard-*.bin"))
    assert written == two["estimated_map_bytes"]
    free = 100 * 2**20 + int(1.5 * one["estimated_bytes"])  # room for one store (with margin), not two
    monkeypatch.setattr(_shutil, "disk_usage", lambda p: _shutil._ntuple_diskusage(10**12, 10**12 - free, free))
    extract_to_store(examples, sharp_model, tmp_path / "b1", progress_every=0)
    with pytest.raises(BertlookError, match="not enough disk space"):
        extract_to_store(examples, sharp_model, tmp_path / "b2", norms_out_dir=tmp_path / "bn", progress_every=0)
    assert not (tmp_path / "b2").exists() and not (tmp_path / "bn").exists()


# ------------------------------------------------------------------------------------ (f) other models

def test_a_model_without_the_modules_is_refused_naming_its_class(segments, tokenizer, tmp_path):
    import torch

    class Weird(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = type("Cfg", (), {"num_hidden_layers": 1, "num_attention_heads": 2,
                                           "max_position_embeddings": 512, "pad_token_id": 0,
                                           "vocab_size": 1000})()
            self.lin = torch.nn.Linear(4, 4)

    with pytest.raises(BertlookError, match="Weird"):
        norms.find_attention_modules(Weird())
    with pytest.raises(BertlookError, match="model class Weird"):
        extract_to_store(_examples(segments, tokenizer), Weird(), tmp_path / "a", norms_out_dir=tmp_path / "n",
                         progress_every=0)
    assert not (tmp_path / "a").exists() and not (tmp_path / "n").exists()

    # DeBERTa (v1): encoder.layer[i] like BERT, but a fused in_proj (not attention.self.value): refused, named
    # (DistilBERT, ALBERT, DeBERTa-v2/v3 and ModernBERT are read: tests/test_encoder_layouts.py,
    # tests/test_deberta_modernbert.py)
    from transformers import DebertaConfig, DebertaModel

    deberta = DebertaModel(DebertaConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32))
    with pytest.raises(BertlookError, match="DebertaModel, layer 1: attention.self.value"):
        norms.find_attention_modules(deberta)


def test_roberta_and_electra_modules_are_found():
    from transformers import ElectraConfig, ElectraModel, RobertaConfig, RobertaForMaskedLM

    rob = RobertaForMaskedLM(RobertaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                           intermediate_size=32))
    assert len(norms.find_attention_modules(rob, 2)) == 2
    ele = ElectraModel(ElectraConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                                     num_attention_heads=4, intermediate_size=32))
    mods = norms.find_attention_modules(ele, 4)
    assert len(mods) == 3 and mods[0][1] is ele.encoder.layer[0].attention.output.dense


# ------------------------------------------------------------------------------------ figure

def _stats_csv(path: Path, layers: int, heads: int, seed: int) -> Path:
    from bertlook.analyses.surface_stats import COLUMNS

    rng = np.random.default_rng(seed)
    rows = [",".join(COLUMNS)]
    for l in range(1, layers + 1):
        for h in range(1, heads + 1):
            cls, sep, punct = rng.dirichlet(np.ones(4))[:3]
            rest = rng.uniform(0, 1, size=len(COLUMNS) - 5)
            rows.append(",".join(str(x) for x in [l, h, cls, sep, punct, *rest]))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _norm_summary(path: Path, layers: int) -> Path:
    rng = np.random.default_rng(layers)
    path.write_text(json.dumps({"norms": norms.norms_summary("x", rng.uniform(1, 5, size=(layers, 4)),
                                                              np.array([10, 20, 30, 400]))}))
    return path


def test_fig_norms_draws_and_refuses_mismatched_inputs(tmp_path):
    from bertlook.reporting.extra_figures import fig_norms

    att = _stats_csv(tmp_path / "att.csv", 3, 2, 0)
    nrm = _stats_csv(tmp_path / "norm.csv", 3, 2, 1)
    summ = _norm_summary(tmp_path / "s.json", 3)
    out = fig_norms(att, nrm, [summ], tmp_path / "fig_norms.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(BertlookError, match="norm4.csv.*different models"):
        fig_norms(att, _stats_csv(tmp_path / "norm4.csv", 4, 2, 1), [summ], tmp_path / "x.png")
    with pytest.raises(BertlookError, match="norms of 5 layers"):
        fig_norms(att, nrm, [_norm_summary(tmp_path / "s5.json", 5)], tmp_path / "x.png")
    (tmp_path / "nonorms.json").write_text(json.dumps({"n_examples": 3}))
    with pytest.raises(BertlookError, match="no 'norms' entry"):
        fig_norms(att, nrm, [tmp_path / "nonorms.json"], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_figures_cli_norm_flags_go_together(tmp_path):
    from bertlook.cli import figures as figures_cli

    parser = argparse.ArgumentParser(prog="bertlook")
    figures_cli.register_cli(parser.add_subparsers(dest="command", required=True))
    base = ["figures", "--attention", "x", "--stats", "s.csv", "--stats-summary", "s.json", "--clusters", "c.csv",
            "--out-dir", str(tmp_path)]
    args = parser.parse_args(base + ["--norm-stats", "n.csv", "--out-fig-norms", str(tmp_path / "f.png")])
    with pytest.raises(BertlookError, match="all three or none"):
        args.func(args)
    args = parser.parse_args(base + ["--norm-stats", "n.csv", "--norm-summaries", "a.json", "b.json",
                                     "--out-fig-norms", "f.png"])
    assert args.norm_summaries == ["a.json", "b.json"]
    # the workflow repeats the flag, one shard summary each: every one is kept, in order
    args = parser.parse_args(base + ["--norm-stats", "n.csv", "--norm-summaries", "a.json", "--norm-summaries",
                                     "b.json", "--out-fig-norms", "f.png"])
    assert args.norm_summaries == ["a.json", "b.json"]


# ------------------------------------------------------------------------------------ helpers

def _write_conllu(path: Path) -> Path:
    lines = []
    for k, words in enumerate(CONLLU_SENTS):
        lines.append(f"# sent_id = s{k}")
        for j, w in enumerate(words, 1):
            lines.append(f"{j}\t{w}\t{w}\tX\tX\t_\t{0 if j == 1 else 1}\t{'root' if j == 1 else 'dep'}\t_\t_")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
