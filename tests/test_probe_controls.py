"""Control probes of the random-init probe (issue 14), training diagnostics and the map-uniformity measure."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertlook.analyses.probes.features import make_batch
from bertlook.analyses.probes.models import make_model
from bertlook.analyses.probes.reference import evaluate_probe, run_probes, train_probe
from bertlook.analyses.probes.reference import model_batches
from bertlook.analyses.probes.catalogue import (
    CONTROL_PROBES,
    GLOVE_PROBES,
    PROBE_LABELS,
    PROBES,
    VARIANT_PROBES,
)
from bertlook.analyses.probes.data import ProbeData
from bertlook.analyses.uniformity import row_entropies, row_entropy_by_layer
from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.data.glove import GloveVectors
from bertlook.errors import BertlookError
from bertlook.testing.synthetic_stores import random_tree

L, H = 2, 3
K = L * H
VOCAB = ["the", "cat", "sat", "on", "mat", ".", "dog", "ran", ",", "big"]


def tiny_glove(dim: int = 4, seed: int = 0) -> GloveVectors:
    rng = np.random.default_rng(seed)
    return GloveVectors(rng.standard_normal((len(VOCAB), dim)).astype(np.float32), VOCAB, source="test")


def records(n_sentences: int, *, seed: int, lengths=None) -> list[dict]:
    """Sentence records (forms, gold trees) without maps."""
    rng = np.random.default_rng(seed)
    out = []
    for sid in range(n_sentences):
        W = int(lengths[sid]) if lengths is not None else int(rng.integers(2, 9))
        forms = [VOCAB[int(i)] for i in rng.integers(0, len(VOCAB), W)]
        out.append({"id": f"c{sid}", "tokens": ["[CLS]", *forms, "[SEP]"], "heads": random_tree(W, rng).tolist(),
                    "rels": ["punct" if f in (".", ",") else "dep" for f in forms],
                    "upos": ["X"] * W, "xpos": ["XX"] * W})
    return out


def write_store(path, recs, *, map_seed: int) -> AttentionStore:
    """A word-level store of ``recs`` whose maps are random (Dirichlet rows) drawn with ``map_seed``."""
    rng = np.random.default_rng(map_seed)
    with AttentionWriter(path, num_layers=L, num_heads=H, level="word") as w:
        for rec in recs:
            n = len(rec["tokens"])
            w.add(rec, rng.dirichlet(np.full(n, 0.3), size=(K, n)).reshape(L, H, n, n))
    return AttentionStore(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("control_stores")
    train, dev = records(30, seed=1), records(10, seed=2)
    return {
        "train": write_store(root / "train", train, map_seed=11),
        "dev": write_store(root / "dev", dev, map_seed=12),
        # the same sentences, other maps
        "train_b": write_store(root / "train_b", train, map_seed=21),
        "dev_b": write_store(root / "dev_b", dev, map_seed=22),
    }


# ====================================================================================== the probe lists
def test_controls_are_listed_last_with_labels():
    assert PROBES[:6] == ("right_branching", "distances_glove", "random_init_attn_glove", "attn", "attn_glove",
                          "attn_glove_released")  # the paper's rows keep their order
    assert PROBES[6:8] == CONTROL_PROBES == ("glove_only", "attn_glove_uniform")
    assert PROBES[8:] == VARIANT_PROBES == ("distances_only", "attn_glove_mlp")  # issue 16, after them
    assert set(CONTROL_PROBES) <= set(GLOVE_PROBES)
    assert PROBE_LABELS["glove_only"] == "GloVe only (control)"
    assert PROBE_LABELS["attn_glove_uniform"] == "Attn + GloVe, uniform maps (control)"


# ====================================================================================== uniform view
def test_uniform_view_gives_exactly_uniform_rows(stores, monkeypatch):
    data = ProbeData(stores["dev"])
    sents = data.sentences[:4]
    monkeypatch.setattr(data.store, "get", lambda i: pytest.fail("the uniform view must not read the maps"))
    b = make_batch(data, sents, attn=True, glove=False, dist=False, uniform_maps=True)
    Wm = max(s.n_words for s in sents)
    assert b.words.dtype == torch.float32 and b.words.shape == (4, K, Wm, Wm) and b.root.shape == (4, 4, K, Wm)
    for i, s in enumerate(sents):
        W = s.n_words
        u = np.float32(1.0) / np.float32(W + 2)
        words = b.words[i].numpy()  # [layer*head, word, word]
        root = b.root[i].numpy()  # [root_part, layer*head, word]
        assert (words[:, :W, :W] == u).all() and (root[:, :, :W] == u).all()
        assert (words[:, W:, :] == 0).all() and (words[:, :, W:] == 0).all() and (root[:, :, W:] == 0).all()
        # a word's row: W words + [CLS] + [SEP], each exactly 1/(W+2)
        row = np.concatenate([words[0, 0, :W], [root[0, 0, 0], root[1, 0, 0]]])
        assert len(row) == W + 2 and np.unique(row).tolist() == [u]


def test_uniform_probe_ignores_the_maps(stores):
    glove = tiny_glove()
    m1, _ = train_probe("attn_glove_uniform", stores["train"], glove=glove, seed=0, batch_size=4)
    m2, _ = train_probe("attn_glove_uniform", stores["train_b"], glove=glove, seed=0, batch_size=4)
    for (k, v), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(v, v2), k
    assert evaluate_probe(m1, "attn_glove_uniform", stores["dev"], glove=glove) == \
        evaluate_probe(m1, "attn_glove_uniform", stores["dev_b"], glove=glove)
    # the same probe on the real maps differs
    m3, _ = train_probe("attn_glove", stores["train"], glove=glove, seed=0, batch_size=4)
    assert not torch.equal(m1.proj.weight, m3.proj.weight)


# ====================================================================================== GloVe only
def test_glove_only_ignores_attention(stores):
    glove = tiny_glove()
    torch.manual_seed(0)
    model = make_model("glove_only", num_heads_total=K, glove_dim=glove.dim)
    assert model.needs == {"glove"}
    with torch.no_grad():
        scores = []
        for name in ("dev", "dev_b"):
            data = ProbeData(stores[name], glove=glove)
            (batch,) = list(model_batches(data, [list(range(len(data.sentences)))], model))
            assert batch.words is None and batch.dist is None
            scores.append(model(batch))
    assert torch.equal(scores[0], scores[1])
    # by hand for one pair: out(tanh(H [v_i ; v_j] + c))
    data = ProbeData(stores["dev"], glove=glove)
    s0 = data.sentences[0]
    vecs = torch.from_numpy(glove.lookup(data.store.records[s0.index]["tokens"][1:-1]))
    b = 0  # sentence 0 is the batch's first row
    for i, j in ((0, 0), (1, 2)):
        vj = torch.zeros(glove.dim) if j == 0 else vecs[j - 1]  # candidate 0 = ROOT (zero vector)
        h = torch.tanh(model.hidden.weight @ torch.cat([vecs[i], vj]) + model.hidden.bias)
        assert torch.allclose(scores[0][b, i, j], model.out.weight[0] @ h + model.out.bias[0], atol=1e-6)
    m1, _ = train_probe("glove_only", stores["train"], glove=glove, seed=1, batch_size=4)
    m2, _ = train_probe("glove_only", stores["train_b"], glove=glove, seed=1, batch_size=4)
    for (k, v), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(v, v2), k


def test_feature_scale_needs_attention_features(stores):
    with pytest.raises(BertlookError, match="no attention features"):
        train_probe("glove_only", stores["train"], glove=tiny_glove(), seed=0, feature_scale="n")
    with pytest.raises(BertlookError, match="feature_scale must be one of"):
        train_probe("attn", stores["train"], seed=0, feature_scale="log")


# ====================================================================================== diagnostics
def test_diagnostics_keys_and_loss_curve(stores):
    n = len(stores["train"].records)  # 30
    model, info = train_probe("attn", stores["train"], seed=0, epochs=2, batch_size=1, loss_every=7,
                              eval_store=stores["dev"], eval_epochs=(1, 2), feature_stats=True)
    for key in ("loss_every", "loss_curve", "dev_uas_by_epoch", "dev_store", "feature_stats"):
        assert key in info, key
    curve = info["loss_curve"]
    assert len(curve) == 2 * math.ceil(n / 7) == 10
    assert [c["epoch"] for c in curve] == [1] * 5 + [2] * 5 and [c["window"] for c in curve] == [0, 1, 2, 3, 4] * 2
    assert [c["sentences"] for c in curve] == [7, 7, 7, 7, 2] * 2
    n_words = ProbeData(stores["train"]).n_words
    for epoch in (1, 2):
        part = [c for c in curve if c["epoch"] == epoch]
        assert sum(c["words"] for c in part) == n_words
        total = sum(c["loss_per_word"] * c["words"] for c in part) / n_words
        assert total == pytest.approx(info["loss_per_word_by_epoch"][epoch - 1], rel=1e-5)
    assert [r["epoch"] for r in info["dev_uas_by_epoch"]] == [1, 2]
    assert info["dev_uas_by_epoch"][-1]["uas"] == evaluate_probe(model, "attn", stores["dev"])["uas"]


def test_first_window_loss_is_ln_of_candidates(stores):
    # the Attn probe starts with w = 0: every score is 0, so the first sentence (before any step)
    # costs ln(W+1) per word
    _, info = train_probe("attn", stores["train"], seed=3, batch_size=1, loss_every=1)
    first = info["loss_curve"][0]
    assert first["sentences"] == 1
    assert first["loss_per_word"] == pytest.approx(math.log(first["words"] + 1), rel=1e-6)
    assert len(info["loss_curve"]) == len(stores["train"].records)


def test_diagnostics_do_not_change_training(stores):
    glove = tiny_glove()
    for kind in ("attn_glove", "random_init_attn_glove", "distances_glove"):
        plain, i1 = train_probe(kind, stores["train"], glove=glove, seed=4, epochs=2, batch_size=3)
        diag, i2 = train_probe(kind, stores["train"], glove=glove, seed=4, epochs=2, batch_size=3, loss_every=4,
                               eval_store=stores["dev"], eval_epochs=(1,), feature_stats="attn" in plain.needs)
        for (k, v), v2 in zip(plain.state_dict().items(), diag.state_dict().values()):
            assert torch.equal(v, v2), (kind, k)
        assert i1["loss_per_word_by_epoch"] == i2["loss_per_word_by_epoch"]
        assert not {"loss_curve", "dev_uas_by_epoch", "feature_stats", "feature_scale"} & set(i1)


def test_eval_epochs_checked(stores):
    with pytest.raises(BertlookError, match="eval_epochs must lie in 1..2"):
        train_probe("attn", stores["train"], seed=0, epochs=2, eval_store=stores["dev"], eval_epochs=(3,))
    with pytest.raises(BertlookError, match="without eval_store"):
        train_probe("attn", stores["train"], seed=0, eval_epochs=(1,))
    with pytest.raises(BertlookError, match="loss_every"):
        train_probe("attn", stores["train"], seed=0, loss_every=0)


@pytest.fixture(scope="module")
def two_sentence_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("two")
    return write_store(root / "s", records(2, seed=5, lengths=[3, 5]), map_seed=0)


def test_feature_scale_of_uniform_maps_by_hand(two_sentence_store):
    glove = tiny_glove()
    # W = 3 (n = 5) and W = 5 (n = 7); K = 6 heads
    _, info = train_probe("attn_glove_uniform", two_sentence_store, glove=glove, seed=0, batch_size=2,
                          feature_stats=True)
    fs = info["feature_stats"]
    assert fs["n_dependents"] == 8 and fs["n_sentences"] == 2
    # every word-word entry of sentence s is 1/n_s; entries per sentence K W^2 (9K and 25K)
    assert fs["attn_feature_mean"] == pytest.approx((9 / 5 + 25 / 7) / 34, rel=1e-6)
    assert fs["attn_feature_max"] == pytest.approx(1 / 5, rel=1e-6)
    assert fs["root_feature_mean"] == pytest.approx((3 / 5 + 5 / 7) / 8, rel=1e-6)
    # per dependent: mean over word candidates of 2K/n; over dependents (3 of n = 5, 5 of n = 7)
    assert fs["feature_sum_mean"] == pytest.approx((3 * 12 / 5 + 5 * 12 / 7) / 8, rel=1e-6)
    # ROOT candidate with a = b = 1: four parts of K values 1/n
    assert fs["root_feature_sum_mean"] == pytest.approx((3 * 24 / 5 + 5 * 24 / 7) / 8, rel=1e-6)
    # feature_scale "n": a uniform entry becomes exactly 1
    _, info = train_probe("attn_glove_uniform", two_sentence_store, glove=glove, seed=0, batch_size=2,
                          feature_stats=True, feature_scale="n")
    fs = info["feature_stats"]
    assert info["feature_scale"] == "n"
    assert fs["attn_feature_mean"] == pytest.approx(1.0) and fs["attn_feature_max"] == pytest.approx(1.0)
    assert fs["feature_sum_mean"] == pytest.approx(2 * K) and fs["root_feature_sum_mean"] == pytest.approx(4 * K)


def test_feature_scale_n_multiplies_by_map_size(stores):
    data = ProbeData(stores["dev"])
    sents = data.sentences[:3]
    plain = make_batch(data, sents, attn=True, glove=False, dist=False)
    scaled = make_batch(data, sents, attn=True, glove=False, dist=False, feature_scale="n")
    for i, s in enumerate(sents):
        assert torch.equal(scaled.words[i], plain.words[i] * (s.n_words + 2))
        assert torch.equal(scaled.root[i], plain.root[i] * (s.n_words + 2))
    # the trained model keeps the scaling for its evaluation
    model, _ = train_probe("random_init_attn_glove", stores["train"], glove=tiny_glove(), seed=0, batch_size=8,
                           feature_scale="n")
    assert model.feature_scale == "n"
    (b,) = list(model_batches(ProbeData(stores["dev"], glove=tiny_glove()), [[0, 1, 2]], model))
    assert torch.equal(b.words, scaled.words)


# ====================================================================================== the table
def test_run_probes_with_controls_and_table3_rendering(stores, tmp_path):
    from bertlook.reporting.compare import _table3_rows
    from bertlook.reporting.golden import _g_table3
    from bertlook.reporting.paper_join import join_table3
    from bertlook.reporting.tables import table3_markdown

    glove = tiny_glove()
    df = run_probes(stores["train"], stores["dev"], glove=glove, seeds=[0, 1], batch_size=8,
                    probes=["right_branching", "attn_glove", "glove_only", "attn_glove_uniform"])
    assert df["probe"].tolist() == ["right_branching", "attn_glove", "glove_only", "attn_glove_uniform"]
    assert df["uas_mean"].notna().all() and df["n_seeds"].tolist()[1:] == [2, 2, 2]
    df = join_table3(df)
    assert df.set_index("probe")["paper_uas"].iloc[2:].isna().all()
    md = table3_markdown(df)
    for probe in CONTROL_PROBES:
        line = next(li for li in md.splitlines() if li.startswith(f"| {PROBE_LABELS[probe]} |"))
        assert line.split(" | ")[-2] == "–"  # no paper number
    # compare: the controls are not judged against the paper, the golden group keeps their numbers
    (tmp_path / "tables").mkdir()
    df.to_csv(tmp_path / "tables" / "table3.csv", index=False)
    rows = _table3_rows(tmp_path, True)
    assert not any("control" in r["item"] for r in rows)
    values = _g_table3(tmp_path)["values"]
    assert values["glove_only/uas_mean"] == pytest.approx(df.set_index("probe").loc["glove_only", "uas_mean"],
                                                          abs=1e-6)


# ====================================================================================== uniformity
def test_row_entropies_by_hand():
    p = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.25, 0.25]])
    assert row_entropies(p) == pytest.approx([0.0, math.log(2), 1.5 * math.log(2)])


def test_row_entropy_by_layer_by_hand(tmp_path):
    # sentence 1: W = 1 (n = 3); layer 1 uniform, layer 2 rows [1,0,0], [.5,.5,0], [.5,.25,.25]
    # sentence 2: W = 2 (n = 4); both layers uniform
    recs = records(2, seed=0, lengths=[1, 2])
    a1 = np.empty((2, 1, 3, 3))
    a1[0, 0] = 1 / 3
    a1[1, 0] = [[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]
    a2 = np.full((2, 1, 4, 4), 0.25)
    with AttentionWriter(tmp_path / "s", num_layers=2, num_heads=1, level="word") as w:
        w.add(recs[0], a1)
        w.add(recs[1], a2)
    ln2, ln3, ln4 = math.log(2), math.log(3), math.log(4)
    out = row_entropy_by_layer(tmp_path / "s")
    assert [r["layer"] for r in out] == [1, 2] and all(r["n_rows"] == 7 and r["n_sentences"] == 2 for r in out)
    mean_ln = (3 * ln3 + 4 * ln4) / 7
    l1, l2 = out
    assert l1["mean_ln_n"] == pytest.approx(mean_ln) and l2["mean_ln_n"] == pytest.approx(mean_ln)
    assert l1["mean_entropy"] == pytest.approx(mean_ln, rel=1e-3)  # float16 1/3
    assert l1["ratio"] == pytest.approx(1.0, rel=1e-3) and l1["mean_row_ratio"] == pytest.approx(1.0, rel=1e-3)
    assert l2["mean_entropy"] == pytest.approx((2.5 * ln2 + 4 * ln4) / 7, rel=1e-6)
    assert l2["ratio"] == pytest.approx((2.5 * ln2 + 4 * ln4) / (3 * ln3 + 4 * ln4), rel=1e-6)
    assert l2["mean_row_ratio"] == pytest.approx((2.5 * ln2 / ln3 + 4) / 7, rel=1e-6)
    assert l2["min_head_ratio"] == l2["max_head_ratio"] == pytest.approx(l2["ratio"])
    first = row_entropy_by_layer(tmp_path / "s", max_sentences=1)
    assert first[1]["n_rows"] == 3 and first[1]["ratio"] == pytest.approx(2.5 * ln2 / (3 * ln3), rel=1e-6)
    assert first[0]["mean_ln_n"] == pytest.approx(ln3)
    with pytest.raises(BertlookError, match="word-level"):
        with AttentionWriter(tmp_path / "tok", num_layers=1, num_heads=1) as w:
            w.add({"id": 0, "tokens": ["[CLS]", "a", "[SEP]"]}, np.full((1, 1, 3, 3), 1 / 3))
        row_entropy_by_layer(tmp_path / "tok")



def test_random_init_note_names_the_reading_and_the_uniformity(tmp_path):
    """Table 3's random-init note (issue 14): the reading from the store meta, the entropy ratio range."""
    from bertlook.analyses.probes.frames import random_init_note

    recs = records(2, seed=0, lengths=[1, 2])
    a1 = np.empty((2, 1, 3, 3))
    a1[0, 0] = 1 / 3
    a1[1, 0] = [[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]
    for keep in ("embeddings", "none"):
        path = tmp_path / keep
        with AttentionWriter(path, num_layers=2, num_heads=1, level="word",
                             meta={"random_init": {"keep": keep}}) as w:
            w.add(recs[0], a1)
            w.add(recs[1], np.full((2, 1, 4, 4), 0.25))
        note = random_init_note(path)
        # layer 2: (2.5 ln 2 + 4 ln 4) / (3 ln 3 + 4 ln 4) = 7.2781 / 8.8410 = 0.8232; layer 1: uniform
        assert "mean row entropy 82.3-100.0% of ln n by layer (100% = uniform" in note, note
        assert (f"probes.random_init_keep: {keep}") in note
    # every layer exactly uniform: one number, not a range
    path = tmp_path / "uniform"
    with AttentionWriter(path, num_layers=2, num_heads=1, level="word", meta={"random_init": {"keep": "none"}}) as w:
        w.add(recs[1], np.full((2, 1, 4, 4), 0.25))
    assert "mean row entropy 100.0% of ln n in every layer" in random_init_note(path)


# ======================================================================== scripts/random_init_diagnostics.py
def test_diagnostics_script_on_tiny_stores(tmp_path, capsys):
    """The script of the README's numbers runs on a run directory's four word stores: entropy table, UAS after
    the asked epochs for every variant and seed, references, JSON; a missing store is an error naming it."""
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "random_init_diagnostics.py"
    spec = importlib.util.spec_from_file_location("_random_init_diagnostics", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    att = tmp_path / "run" / "attention"
    train, dev = records(12, seed=1), records(5, seed=2)
    write_store(att / "words-train", train, map_seed=11)
    write_store(att / "words-dev", dev, map_seed=12)
    glove_txt = tmp_path / "glove.txt"
    g = tiny_glove()
    glove_txt.write_text("".join(f"{w} " + " ".join(f"{x:.4f}" for x in g.matrix[i]) + "\n"
                                 for i, w in enumerate(VOCAB)))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"probes: {{batch_size: 1, lr: 0.01}}\nglove: {{path: {glove_txt}}}\n")
    args = [str(tmp_path / "run"), "--config", str(cfg), "--seeds", "0,1", "--eval-epochs", "1,2",
            "--loss-every", "5", "--out", str(tmp_path / "d.json")]
    assert mod.main(args) == 2  # the random-init stores are missing
    assert "randwords-dev" in capsys.readouterr().err
    write_store(att / "randwords-train", train, map_seed=21)
    write_store(att / "randwords-dev", dev, map_seed=22)
    assert mod.main(args) == 0
    doc = json.loads((tmp_path / "d.json").read_text())
    assert set(doc["entropy"]) == {"words-dev", "randwords-dev"} and len(doc["entropy"]["words-dev"]) == L
    assert {(s["variant"], s["epoch"]) for s in doc["summary"]} == {(v, e) for v in mod.VARIANTS for e in (1, 2)}
    assert all(s["n_seeds"] == 2 and 0 <= s["uas_mean"] <= 1 for s in doc["summary"])
    assert len(doc["runs"]) == 2 * len(mod.VARIANTS)
    # 12 training sentences in windows of 5: 3 points per epoch, 2 epochs
    assert all(len(r["loss_curve"]) == 6 for r in doc["runs"])
    # chance = mean of 1/(W+1) over the evaluated (non-punctuation) dev words, by hand
    num = sum(sum(1 for f in r["tokens"][1:-1] if f not in (".", ",")) / (len(r["tokens"]) - 1) for r in dev)
    den = sum(sum(1 for f in r["tokens"][1:-1] if f not in (".", ",")) for r in dev)
    assert doc["reference"]["chance"] == pytest.approx(num / den)
