"""Table 3 probes: features, gradients, training, UAS, MST, seeds, the table and the CLI."""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
import pandas as pd
import pytest
import torch

from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.errors import BertlookError
from bertlook.data.glove import GloveVectors
from bertlook.analyses.probes.features import (
    build_features,
    candidate_vectors,
    distance_features,
    epoch_batches,
    make_batch,
)
from bertlook.analyses.probes.models import (
    attn_glove_scores,
    attn_glove_scores_fast,
    attn_scores_fast,
    make_model,
    probe_loss,
)
from bertlook.analyses.probes.reference import evaluate_probe, run_probes, train_probe
from bertlook.analyses.probes.reference import model_batches as _batches
from bertlook.analyses.probes.uas import mst_heads, right_branching_heads, right_branching_uas
from bertlook.analyses.probes.catalogue import PROBES, TABLE_COLUMNS
from bertlook.analyses.probes.data import ProbeData
from bertlook.analyses.trees import chu_liu_edmonds
from bertlook.testing.synthetic_stores import random_tree, write_synthetic_word_store
from bertlook.cli.probes import register_cli
from bertlook.reporting.tables import table3_markdown
from bertlook.reporting.paper_join import join_table3

L, H = 2, 3
K = L * H
VOCAB = ["the", "cat", "sat", "on", "mat", ".", "dog", "ran", ",", "big"]


def tiny_glove(dim: int = 4, seed: int = 0) -> GloveVectors:
    rng = np.random.default_rng(seed)
    return GloveVectors(rng.standard_normal((len(VOCAB), dim)).astype(np.float32), VOCAB, source="test")


def gold_store(path, n_sentences: int, *, seed: int = 0, gold_head: int = 4, min_words=3, max_words=9):
    """Word-level store where head ``gold_head`` (flat index) attends exactly to each word's gold head."""
    rng = np.random.default_rng(seed)
    with AttentionWriter(path, num_layers=L, num_heads=H, level="word") as w:
        for sid in range(n_sentences):
            W = int(rng.integers(min_words, max_words + 1))
            n = W + 2
            heads = random_tree(W, rng)
            attn = rng.dirichlet(np.full(n, 1.0), size=(K, n))
            attn[gold_head, 1 : W + 1] = 0.0
            attn[gold_head, np.arange(1, W + 1), heads] = 1.0  # ROOT -> [CLS] (index 0)
            forms = [VOCAB[int(i)] for i in rng.integers(0, len(VOCAB), W)]
            rec = {"id": f"g{sid}", "tokens": ["[CLS]", *forms, "[SEP]"], "heads": heads.tolist(),
                   "rels": ["punct" if f in (".", ",") else "dep" for f in forms],
                   "upos": ["X"] * W, "xpos": ["XX"] * W}
            w.add(rec, attn.reshape(L, H, n, n))
    return AttentionStore(path)


def store_from_sentences(path, sentences, *, seed: int = 0):
    """``sentences``: list of dicts with forms, heads, rels (and optional xpos)."""
    rng = np.random.default_rng(seed)
    with AttentionWriter(path, num_layers=L, num_heads=H, level="word") as w:
        for sid, s in enumerate(sentences):
            W = len(s["forms"])
            n = W + 2
            attn = rng.dirichlet(np.ones(n), size=(K, n))
            rec = {"id": f"s{sid}", "tokens": ["[CLS]", *s["forms"], "[SEP]"], "heads": s["heads"],
                   "rels": s["rels"], "upos": ["X"] * W, "xpos": s.get("xpos", ["XX"] * W)}
            w.add(rec, attn.reshape(L, H, n, n))
    return AttentionStore(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe_stores")
    return {
        "train": gold_store(root / "train", 48, seed=1),
        "dev": gold_store(root / "dev", 16, seed=2),
    }


# =============================================================================== features
def _random_batch(B=3, Wm=5, d=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    words = torch.rand(B, K, Wm, Wm, generator=g, dtype=dtype)
    root = torch.rand(B, 4, K, Wm, generator=g, dtype=dtype)
    dep = torch.randn(B, Wm, d, generator=g, dtype=dtype)
    cand = torch.randn(B, Wm + 1, d, generator=g, dtype=dtype)
    return words, root, dep, cand


def test_build_features_layout():
    words, root, _, _ = _random_batch(B=1, Wm=3)
    a, b = torch.tensor(0.3, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    x = build_features(words, root, a, b)
    assert x.shape == (1, 3, 4, 2 * K)
    for i, j in itertools.product(range(3), range(3)):
        assert torch.allclose(x[0, i, j + 1, :K], words[0, :, i, j])  # A(i -> j)
        assert torch.allclose(x[0, i, j + 1, K:], words[0, :, j, i])  # A(j -> i)
    for i in range(3):
        assert torch.allclose(x[0, i, 0, :K], 0.3 * root[0, 0, :, i] + 2.0 * root[0, 1, :, i])
        assert torch.allclose(x[0, i, 0, K:], 0.3 * root[0, 2, :, i] + 2.0 * root[0, 3, :, i])


def test_fast_scores_equal_reference():
    words, root, dep, cand = _random_batch()
    g = torch.Generator().manual_seed(1)
    a, b = torch.tensor(0.7, dtype=torch.float64), torch.tensor(-1.3, dtype=torch.float64)
    w = torch.randn(2 * K, generator=g, dtype=torch.float64)
    weight = torch.randn(2 * K, 8, generator=g, dtype=torch.float64)
    bias = torch.randn(2 * K, generator=g, dtype=torch.float64)
    x = build_features(words, root, a, b)
    assert torch.allclose(attn_scores_fast(words, root, a, b, w), x @ w)
    ref = attn_glove_scores(x, dep, cand, weight, bias)
    # by hand for one pair: (W [v_i; v_j] + c) . x_ij
    i, j = 2, 3
    manual = ((weight @ torch.cat([dep[1, i], cand[1, j]]) + bias) * x[1, i, j]).sum()
    assert torch.allclose(ref[1, i, j], manual)
    assert torch.allclose(attn_glove_scores_fast(words, root, a, b, dep, cand, weight, bias), ref)


@pytest.fixture()
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead
    yield
    torch.set_num_threads(before)


def test_gradcheck_score_functions(one_thread):
    words, root, dep, cand = _random_batch(B=2, Wm=3, d=2)
    g = torch.Generator().manual_seed(2)
    ab = torch.tensor([0.5, 1.5], dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2 * K, 4, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2 * K, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2 * K, generator=g, dtype=torch.float64, requires_grad=True)

    def glove_fast(ab, weight, bias):
        return attn_glove_scores_fast(words, root, ab[0], ab[1], dep, cand, weight, bias)

    def glove_ref(ab, weight, bias):
        return attn_glove_scores(build_features(words, root, ab[0], ab[1]), dep, cand, weight, bias)

    def attn_fast(ab, w):
        return attn_scores_fast(words, root, ab[0], ab[1], w)

    assert torch.autograd.gradcheck(glove_fast, (ab, weight, bias))
    assert torch.autograd.gradcheck(glove_ref, (ab, weight, bias))
    assert torch.autograd.gradcheck(attn_fast, (ab, w))

    # the loss too (masked candidates, padded dependents)
    heads = torch.tensor([[0, 1, 2], [2, 0, 0]])
    dep_mask = torch.tensor([[True, True, True], [True, True, False]])
    cand_mask = torch.tensor([[True] * 4, [True, True, True, False]])

    def loss(ab, weight, bias):
        return probe_loss(glove_fast(ab, weight, bias), heads, dep_mask, cand_mask)

    assert torch.autograd.gradcheck(loss, (ab, weight, bias))


def test_loss_is_sum_of_per_sentence_losses():
    words, root, dep, cand = _random_batch(B=2, Wm=4, d=3, dtype=torch.float32)
    # sentence 0 has 4 words, sentence 1 has 2 (padding beyond)
    words[1, :, 2:, :] = 0
    words[1, :, :, 2:] = 0
    weight = torch.randn(2 * K, 6)
    bias = torch.randn(2 * K)
    a, b = torch.tensor(1.0), torch.tensor(0.5)
    heads = torch.tensor([[2, 0, 2, 3], [0, 1, 0, 0]])
    dep_mask = torch.tensor([[True] * 4, [True, True, False, False]])
    cand_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    s = attn_glove_scores_fast(words, root, a, b, dep, cand, weight, bias)
    total = probe_loss(s, heads, dep_mask, cand_mask)
    per = 0.0
    for bi, W in ((0, 4), (1, 2)):
        si = attn_glove_scores_fast(words[bi:bi + 1, :, :W, :W], root[bi:bi + 1, :, :, :W], a, b,
                                    dep[bi:bi + 1, :W], cand[bi:bi + 1, : W + 1], weight, bias)
        per = per + torch.nn.functional.cross_entropy(si[0], heads[bi, :W], reduction="sum")
    assert torch.allclose(total, per, atol=1e-5)


def test_candidate_vectors_offbyone():
    words = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    root = np.array([9.0, 9.0])
    right = candidate_vectors(words, root)
    assert right.tolist() == [[9, 9], [1, 1], [2, 2], [3, 3]]  # candidate j -> word j, 0 -> ROOT
    rel = candidate_vectors(words, root, released_offbyone=True)
    assert rel.tolist() == [[1, 1], [2, 2], [3, 3], [9, 9]]  # candidate j -> word j+1, last -> ROOT


def test_batch_vectors_follow_offbyone_switch(stores):
    glove = tiny_glove()
    data = ProbeData(stores["dev"], glove=glove)
    sents = data.sentences[:2]
    ok = make_batch(data, sents, attn=False, glove=True, dist=False)
    bad = make_batch(data, sents, attn=False, glove=True, dist=False, released_offbyone=True)
    s0 = sents[0]
    vecs = glove.lookup(data.store.records[s0.index]["tokens"][1:-1])
    W = s0.n_words
    assert np.allclose(ok.dep_vecs[0, :W].numpy(), vecs)
    assert np.allclose(bad.dep_vecs[0, :W].numpy(), vecs)  # dependents are not shifted
    assert np.allclose(ok.cand_vecs[0, 0].numpy(), 0) and np.allclose(ok.cand_vecs[0, 1 : W + 1].numpy(), vecs)
    assert np.allclose(bad.cand_vecs[0, :W].numpy(), vecs) and np.allclose(bad.cand_vecs[0, W].numpy(), 0)
    # the released model gets the shifted vectors
    torch.manual_seed(0)
    model = make_model("attn_glove_released", num_heads_total=K, glove_dim=glove.dim)
    assert model.released_offbyone
    (b,) = list(_batches(data, [[0]], model))
    assert np.allclose(b.cand_vecs[0, 0].numpy(), vecs[0])


def test_distance_features():
    f = distance_features(3)
    assert f.shape == (3, 4, 8)
    assert f[0, 0].tolist() == [0, 0, 0, 0, 0, 0, 0, 1]  # ROOT candidate
    # dependent 1 (row 0), candidate 3: offset +2 -> right distance 2/3, indicator +2
    assert np.allclose(f[0, 3], [2 / 3, 0, 0, 0, 0, 0, 1, 0])
    # dependent 3 (row 2), candidate 2: offset -1
    assert np.allclose(f[2, 2], [0, 1 / 3, 0, 1, 0, 0, 0, 0])
    # self
    assert np.allclose(f[1, 2], [0, 0, 1, 0, 0, 0, 0, 0])


# =================================================================================== training
def test_attn_probe_learns_gold_head(stores):
    model, info = train_probe("attn", stores["train"], seed=0, epochs=3, batch_size=4)  # Adam lr 0.002
    res = evaluate_probe(model, "attn", stores["dev"], mst=True)
    assert res["uas"] >= 0.99 and res["uas_mst"] >= 0.99, res
    assert info["steps"] == 3 * 12 and info["n_sentences"] == 48
    assert int(model.w.detach().argmax()) == 4  # the gold head's A(i -> j) feature
    assert info["loss_per_word_by_epoch"][-1] < info["loss_per_word_by_epoch"][0]


def test_seeds_reproducible_and_different(stores):
    glove = tiny_glove()
    m1, _ = train_probe("attn_glove", stores["train"], glove=glove, seed=3, batch_size=8)
    m2, _ = train_probe("attn_glove", stores["train"], glove=glove, seed=3, batch_size=8)
    m3, _ = train_probe("attn_glove", stores["train"], glove=glove, seed=4, batch_size=8)
    for (k, v), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(v, v2), k
    assert not torch.equal(m1.proj.weight, m3.proj.weight)
    r1 = evaluate_probe(m1, "attn_glove", stores["dev"], glove=glove, mst=True)
    r2 = evaluate_probe(m2, "attn_glove", stores["dev"], glove=glove, mst=True)
    assert r1 == r2


def test_epoch_batches_cover_every_sentence_once():
    lengths = [5, 3, 9, 1, 7, 7, 2, 8, 4, 6, 10]
    g = torch.Generator().manual_seed(0)
    batches = epoch_batches(lengths, 4, g, pool_batches=2)
    assert sorted(i for b in batches for i in b) == list(range(11))
    assert all(len(b) <= 4 for b in batches)
    again = epoch_batches(lengths, 4, torch.Generator().manual_seed(0), pool_batches=2)
    assert batches == again
    assert [len(b) for b in epoch_batches(lengths, 1, g)] == [1] * 11


def test_all_trainable_probes_run(stores):
    glove = tiny_glove()
    for kind in ("distances_glove", "attn_glove_released", "random_init_attn_glove"):
        model, info = train_probe(kind, stores["train"], glove=glove, seed=0, batch_size=16)
        res = evaluate_probe(model, kind, stores["dev"], glove=glove, mst=True)
        assert 0.0 <= res["uas"] <= 1.0 and 0.0 <= res["uas_mst"] <= 1.0
        assert res["n_sentences"] == 16


def test_glove_probe_without_glove_is_an_error(stores):
    with pytest.raises(BertlookError, match="GloVe"):
        train_probe("attn_glove", stores["train"], seed=0)


def test_token_level_store_rejected(tmp_path):
    with AttentionWriter(tmp_path / "tok", num_layers=1, num_heads=1) as w:
        w.add({"id": 0, "tokens": ["[CLS]", "a", "[SEP]"]}, np.full((1, 1, 3, 3), 1 / 3))
    with pytest.raises(BertlookError, match="word-level"):
        train_probe("attn", tmp_path / "tok", seed=0)


def test_bad_heads_name_the_sentence(tmp_path):
    store = store_from_sentences(tmp_path / "bad", [{"forms": ["a", "b"], "heads": [2, 5], "rels": ["x", "root"]}])
    with pytest.raises(BertlookError, match="sentence 's0'.*0..2"):
        right_branching_uas(store)


# ========================================================================================= UAS
def test_right_branching_by_hand(tmp_path):
    sents = [
        # right-branching predicts 2, 3, 0 -> words 1 and 3 right (word 2's gold head is 1)
        {"forms": ["the", "cat", "sat"], "heads": [2, 1, 0], "rels": ["det", "nsubj", "root"]},
        # predicts 2, 3, 4, 0 -> words 1, 2 right; word 4 is punctuation (not counted); word 3 wrong
        {"forms": ["big", "dog", "ran", "."], "heads": [2, 3, 0, 3], "rels": ["amod", "nsubj", "root", "punct"]},
    ]
    store = store_from_sentences(tmp_path / "rb", sents)
    assert right_branching_heads(4).tolist() == [2, 3, 4, 0]
    res = right_branching_uas(store, mst=True)
    assert res["n_words"] == 6 and res["n_sentences"] == 2
    assert res["uas"] == pytest.approx(4 / 6)
    assert res["uas_mst"] == res["uas"]


def test_punctuation_excluded_and_sd_xpos(tmp_path):
    # UD-style relations: only `punct` is excluded, a "$" word with another relation counts
    ud = store_from_sentences(tmp_path / "ud", [
        {"forms": ["a", "$", "."], "heads": [2, 0, 2], "rels": ["nummod", "root", "punct"],
         "xpos": ["CD", "$", "."]},
    ])
    data = ProbeData(ud)
    assert data.relation_scheme == "ud" and data.n_eval_words == 2
    # SD relations (pobj present): PTB punctuation tags are excluded too
    sd = store_from_sentences(tmp_path / "sd", [
        {"forms": ["on", "mat", "$", "."], "heads": [0, 1, 1, 1], "rels": ["root", "pobj", "dep", "punct"],
         "xpos": ["IN", "NN", "$", "."]},
    ])
    data = ProbeData(sd)
    assert data.relation_scheme == "sd" and data.n_eval_words == 2
    # UAS: right-branching gets word 1 wrong (2 vs 0) and word 2 wrong (3 vs 1); punctuation ignored
    assert right_branching_uas(sd)["uas"] == 0.0
    assert right_branching_uas(sd)["n_words"] == 2


def test_evaluate_counts_only_non_punct(stores):
    model, _ = train_probe("attn", stores["train"], seed=0, epochs=2, batch_size=4)
    res = evaluate_probe(model, "attn", stores["dev"])
    data = ProbeData(stores["dev"])
    assert res["n_words"] == data.n_eval_words < data.n_words


# ========================================================================================= MST
def test_mst_fixes_a_cycle():
    # words 1 and 2 prefer each other (greedy: a cycle); ROOT is a good head for word 1
    s = np.full((3, 3), -np.inf)
    s[1] = [np.log(0.4), -np.inf, np.log(0.6)]
    s[2] = [np.log(0.1), np.log(0.9), -np.inf]
    greedy = s[1:].argmax(axis=1)
    assert greedy.tolist() == [2, 1]  # 1 -> 2 -> 1
    heads = chu_liu_edmonds(s)
    assert heads.tolist() == [-1, 0, 1]
    assert mst_heads(s[1:]).tolist() == [0, 1]


def _brute_force(scores):
    n = scores.shape[0]
    best, best_heads = -np.inf, None
    for heads in itertools.product(range(n), repeat=n - 1):
        heads = (-1, *heads)
        if any(h == d for d, h in enumerate(heads) if d):
            continue
        ok = True
        for d in range(1, n):  # every node reaches ROOT
            seen, v = set(), d
            while v != 0 and ok:
                if v in seen:
                    ok = False
                seen.add(v)
                v = heads[v]
        if not ok:
            continue
        total = sum(scores[d, heads[d]] for d in range(1, n))
        if total > best:
            best, best_heads = total, heads
    return best, best_heads


def test_mst_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(2, 6))
        s = rng.standard_normal((n, n))
        heads = chu_liu_edmonds(s)
        best, _ = _brute_force(np.where(np.eye(n, dtype=bool), -np.inf, s))
        total = sum(s[d, heads[d]] for d in range(1, n))
        assert total == pytest.approx(best)
        assert heads[0] == -1 and all(heads[d] != d for d in range(1, n))


# ======================================================================================= table
def test_run_probes_table_and_missing_random_stores(stores):
    glove = tiny_glove()
    df = run_probes(stores["train"], stores["dev"], glove=glove, seeds=[0, 1, 2], epochs=1, batch_size=16,
                    mst=True, probes=["right_branching", "random_init_attn_glove", "attn"])
    assert list(df.columns) == TABLE_COLUMNS
    assert df["probe"].tolist() == ["right_branching", "random_init_attn_glove", "attn"]
    rnd = df.set_index("probe").loc["random_init_attn_glove"]
    assert "random-init" in rnd["note"] and pd.isna(rnd["uas_mean"]) and pd.isna(rnd["n_seeds"])
    attn = df.set_index("probe").loc["attn"]
    assert attn["n_seeds"] == 3 and not pd.isna(attn["uas_sd"]) and not pd.isna(attn["uas_mst_mean"])
    runs = [r for r in df.attrs["runs"] if r["probe"] == "attn"]
    uas = [r["dev_uas"] for r in runs]
    assert attn["uas_mean"] == pytest.approx(np.mean(uas))
    assert attn["uas_sd"] == pytest.approx(np.std(uas, ddof=1))
    assert "paper_uas" not in df.columns  # the analysis knows nothing of the paper
    df = join_table3(df)
    assert list(df.columns) == [*TABLE_COLUMNS[:-1], "paper_uas", "note"] and df.attrs["runs"]
    assert df.set_index("probe").loc["right_branching", "paper_uas"] == pytest.approx(0.26)
    md = table3_markdown(df, note="tiny test")
    assert "Random-init Attn + GloVe" in md and "random-init attention stores" in md
    assert "80 UUAS" in md and "tiny test" in md
    assert f"{100 * attn['uas_mean']:.1f}" in md


def test_run_probes_with_random_stores_and_no_glove(stores):
    df = run_probes(stores["train"], stores["dev"], random_train_store=stores["train"],
                    random_dev_store=stores["dev"], glove=None, seeds=[0], batch_size=16,
                    probes=["random_init_attn_glove", "distances_glove"])
    assert df["note"].str.contains("GloVe").all() and df["uas_mean"].isna().all()
    with pytest.raises(BertlookError, match="unknown probe"):
        run_probes(stores["train"], stores["dev"], glove=None, seeds=[0], probes=["nope"])


def test_cli_writes_table(stores, tmp_path):
    glove_txt = tmp_path / "glove.txt"
    rng = np.random.default_rng(0)
    glove_txt.write_text("".join(f"{w} " + " ".join(f"{v:.4f}" for v in rng.standard_normal(4)) + "\n"
                                 for w in VOCAB))
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    out = tmp_path / "out"
    args = parser.parse_args([
        "probes", "--train-attention", str(stores["train"].path), "--dev-attention", str(stores["dev"].path),
        "--glove", str(glove_txt), "--seeds", "0,1,2", "--epochs", "1", "--batch-size", "16", "--mst",
        "--probes", "right_branching,attn,attn_glove,attn_glove_released,random_init_attn_glove",
        "--out-table", str(out / "table3.csv"), "--out-markdown", str(out / "table3.md"),
        "--summary", str(out / "table3.summary.json"), "--note", "CLI test",
    ])
    assert args.func(args) == 0
    df = pd.read_csv(out / "table3.csv")
    assert list(df.columns) == [*TABLE_COLUMNS[:-1], "paper_uas", "note"]
    assert len(df) == 5 and df.loc[df.probe == "attn", "n_seeds"].item() == 3
    assert df.loc[df.probe == "random_init_attn_glove", "uas_mean"].isna().item()
    md = (out / "table3.md").read_text()
    assert md.startswith("| Probe |") and "CLI test" in md
    summary = json.loads((out / "table3.summary.json").read_text())
    assert summary["seeds"] == [0, 1, 2] and len(summary["runs"]) == 1 + 3 * 3
    assert summary["data"]["dev"]["n_sentences"] == 16



def test_probe_step_without_the_cli(stores):
    """run_probe_step: Table 3 and the summary JSON of `bertlook probes --summary`, without the command line;
    the paper's numbers only with ``paper_join``."""
    from bertlook.analyses.probes.tables import ProbeOptions, run_probe_step

    glove = tiny_glove()
    options = ProbeOptions(seeds=(0, 1), batch_size=16, mst=True)
    kw = dict(probes=["right_branching", "attn", "attn_glove"], options=options, glove=glove)
    result = run_probe_step(stores["train"].path, stores["dev"].path, **kw)
    summary = result.summary
    assert list(summary)[:6] == ["train_attention", "dev_attention", "random_train_attention",
                                 "random_dev_attention", "glove", "glove_spec"]
    assert summary["train_attention"] == str(stores["train"].path) and summary["random_dev_attention"] is None
    assert summary["glove"] == glove.describe() and summary["seeds"] == [0, 1] and summary["mst"] is True
    assert summary["probes"] == result.probes == ["right_branching", "attn", "attn_glove"]
    assert summary["engine"] == "batched" and summary["engine_timing"] == result.engine
    assert [r["probe"] for r in summary["table"]] == summary["probes"] and len(summary["runs"]) == 1 + 2 * 2
    assert summary["data"]["dev"]["n_sentences"] == 16 and "paper_uas" not in result.table3.columns
    assert result.rows is result.table3 and result.table3_norm is None and result.norm_summary is None
    assert result.ablations is None and result.ablations_summary is None
    assert options.settings() == {"seeds": [0, 1], "epochs": 1, "batch_size": 16, "lr": 0.002, "mst": True,
                                  "max_train_sentences": None, "glove_spec": None}
    joined = run_probe_step(stores["train"].path, stores["dev"].path, paper_join=join_table3, **kw)
    assert "paper_uas" in joined.table3.columns and "paper_uas" in joined.summary["table"][0]
    assert "paper_uas" not in joined.rows.columns
    pd.testing.assert_frame_equal(joined.table3.drop(columns="paper_uas"), result.table3, atol=1e-6)
    with pytest.raises(BertlookError, match="threads must be >= 1"):
        ProbeOptions(threads=0)


def test_cli_help_lists_inputs_and_outputs():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    register_cli(sub)
    text = sub.choices["probes"].format_help()
    for flag in ("--train-attention", "--dev-attention", "--random-train-attention", "--glove", "--seeds",
                 "--mst", "--out-table", "--out-markdown", "--summary",
                 # issue 24: every table in one process
                 "--norm-train-attention", "--norm-dev-attention", "--norm-probes", "--out-norm-table",
                 "--out-norm-markdown", "--norm-summary", "--ablations", "--out-ablations-table",
                 "--out-ablations-markdown", "--ablations-summary", "--engine"):
        assert flag in text
    description = " ".join(sub.choices["probes"].description.split())
    assert "Inputs:" in description and "Outputs:" in description
    assert all(p in " ".join(text.split()).replace(", ", ",") for p in PROBES)


def test_synthetic_store_is_word_level(tmp_path):
    store = write_synthetic_word_store(tmp_path / "syn", n_sentences=3, num_layers=1, num_heads=4,
                                       min_words=4, max_words=6, seed=0)
    assert store.meta["level"] == "word" and len(store) == 3
    rec, attn = next(iter(store))
    W = len(rec["heads"])
    assert attn.shape == (1, 4, W + 2, W + 2)
    assert np.allclose(np.asarray(attn, dtype=np.float32).sum(-1)[:, :, 1 : W + 1], 1.0, atol=1e-2)


def test_chunked_batches_give_the_same_update(stores):
    glove = tiny_glove()
    full, info = train_probe("attn_glove", stores["train"], glove=glove, seed=5, batch_size=16)
    chunked, info2 = train_probe("attn_glove", stores["train"], glove=glove, seed=5, batch_size=16,
                                 max_batch_elements=300)  # forces one or two sentences per chunk
    assert info["steps"] == info2["steps"] == 3
    for (k, v), v2 in zip(full.state_dict().items(), chunked.state_dict().values()):
        assert torch.allclose(v, v2, atol=1e-5), k


# ================================================================= --rows-out / --add-rows (the workflow's split)
def _glove_txt(path):
    rng = np.random.default_rng(0)
    path.write_text("".join(f"{w} " + " ".join(f"{v:.4f}" for v in rng.standard_normal(4)) + "\n" for w in VOCAB))
    return path


def _cli(argv):
    from bertlook.cli import main

    return main(argv)


def _timing_free(obj):
    """A summary without its timings (they differ from run to run)."""
    if isinstance(obj, dict):
        return {k: _timing_free(v) for k, v in obj.items()
                if k not in ("seconds", "sentences_per_s", "engine_timing")}
    if isinstance(obj, list):
        return [_timing_free(v) for v in obj]
    return obj


@pytest.fixture(scope="module")
def random_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("random_stores")
    return {"train": gold_store(root / "rtrain", 40, seed=7, gold_head=1),
            "dev": gold_store(root / "rdev", 12, seed=8, gold_head=1)}


def test_rows_out_then_add_rows_gives_the_table_of_one_run(stores, random_stores, tmp_path):
    """The random-init probe alone (no model stores) -> rows JSON; the other probes + --add-rows: the
    same table3.csv / .md, byte for byte, and the same summary (timings aside) as one run of all."""
    glove = _glove_txt(tmp_path / "glove.txt")
    common = ["--glove", str(glove), "--seeds", "0,1", "--batch-size", "16", "--mst", "--threads", "1"]
    rnd = ["--random-train-attention", str(random_stores["train"].path),
           "--random-dev-attention", str(random_stores["dev"].path)]
    own = ["--train-attention", str(stores["train"].path), "--dev-attention", str(stores["dev"].path)]

    def outputs(name):
        d = tmp_path / name
        return d, ["--out-table", str(d / "table3.csv"), "--out-markdown", str(d / "table3.md"),
                   "--summary", str(d / "table3.summary.json"), "--note", "split test"]

    one, one_out = outputs("one")
    assert _cli(["probes", *own, *rnd, *common, *one_out]) == 0
    rows = tmp_path / "partials" / "probes_random.json"
    assert _cli(["probes", *rnd, *common, "--probes", "random_init_attn_glove", "--rows-out", str(rows)]) == 0
    doc = json.loads(rows.read_text())
    assert doc["format"] == "bertlook-probe-rows" and doc["probes"] == ["random_init_attn_glove"]
    assert set(doc["data"]) == {"random_train", "random_dev"} and len(doc["runs"]) == 2
    assert doc["inputs"]["train_attention"] is None and doc["settings"]["seeds"] == [0, 1]
    split, split_out = outputs("split")
    assert _cli(["probes", *own, *common, "--add-rows", str(rows), *split_out]) == 0
    for name in ("table3.csv", "table3.md"):
        assert (split / name).read_bytes() == (one / name).read_bytes(), name
    a = json.loads((one / "table3.summary.json").read_text())
    b = json.loads((split / "table3.summary.json").read_text())
    assert list(a) == list(b) and list(a["data"]) == list(b["data"])
    assert _timing_free(a) == _timing_free(b)
    assert b["probes"] == list(PROBES) and [r["probe"] for r in b["table"]] == list(PROBES)
    assert pd.read_csv(split / "table3.csv")["n_seeds"].tolist()[1:] == [2] * (len(PROBES) - 1)


def test_random_probe_alone_needs_no_model_stores_and_others_do(random_stores, tmp_path, capsys):
    glove = _glove_txt(tmp_path / "glove.txt")
    rows = tmp_path / "rows.json"
    assert _cli(["probes", "--probes", "random_init_attn_glove", "--glove", str(glove), "--seeds", "0",
                 "--batch-size", "16", "--random-train-attention", str(random_stores["train"].path),
                 "--random-dev-attention", str(random_stores["dev"].path), "--rows-out", str(rows)]) == 0
    assert rows.is_file() and not (tmp_path / "table3.csv").exists()
    capsys.readouterr()
    assert _cli(["probes", "--probes", "attn", "--seeds", "0", "--rows-out", str(tmp_path / "x.json")]) == 2
    assert "error: probe(s) attn need the training attention store (--train-attention)" in capsys.readouterr().err
    assert _cli(["probes", "--probes", "right_branching", "--seeds", "0"]) == 2  # nothing to write
    assert "nothing to write" in capsys.readouterr().err


def _rows_doc(**edits):
    row = {"probe": "random_init_attn_glove", "uas_mean": 0.1, "uas_sd": 0.01, "n_seeds": 1, "uas_mst_mean": None,
           "uas_mst_sd": None, "note": ""}
    doc = {"format": "bertlook-probe-rows", "version": 2, "probes": ["random_init_attn_glove"],
           "settings": {"seeds": [0], "epochs": 1, "batch_size": 32, "lr": 0.002, "mst": False,
                        "max_train_sentences": None, "glove_spec": None},
           "inputs": {"train_attention": None, "dev_attention": None, "random_train_attention": "rt",
                      "random_dev_attention": "rd"},
           "glove": None, "table": [row], "runs": [{"probe": "random_init_attn_glove", "seed": 0}],
           "data": {"random_train": {}, "random_dev": {}}, "seconds": 1.0}
    for key, value in edits.items():
        if key.startswith("row_"):
            row[key[4:]] = value
        else:
            doc[key] = value
    return json.dumps(doc)


@pytest.mark.parametrize("text, message", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (_rows_doc(format="other"), "format 'other'"),
    (_rows_doc(version=1), "written by another bertlook version; rerun the job"),  # v1 rows carried paper_uas
    (_rows_doc().replace('"runs"', '"ruins"'), "missing key(s) runs"),
    (_rows_doc(probes=["nope"]), "unknown probe(s) 'nope'"),
    (_rows_doc(probes=["attn"]), "probe 'random_init_attn_glove', 'probes' says 'attn'"),
    (_rows_doc(table=[]), "'table' must be a list of 1 row(s)"),
    (_rows_doc(row_uas_mean="0.1"), "uas_mean must be a number or null"),
    (_rows_doc().replace('"uas_mean": 0.1', '"uas_mean": NaN'), "not plain JSON"),
    (_rows_doc(row_n_seeds=-1), "n_seeds must be an integer >= 0"),
    (_rows_doc(row_extra=1), "exactly the keys"),
    (_rows_doc(runs=[{"probe": "attn"}]), "'runs' must be a list of objects"),
    (_rows_doc(settings={"seeds": [0]}), "'settings' must be an object"),
    (_rows_doc(settings={"seeds": [5], "epochs": 1, "batch_size": 32, "lr": 0.002, "mst": False,
                         "max_train_sentences": None, "glove_spec": None}), "computed with seeds [5]"),
])
def test_add_rows_refuses_a_malformed_rows_file(stores, tmp_path, capsys, text, message):
    bad = tmp_path / "bad rows.json"
    bad.write_text(text)
    out = tmp_path / "out"
    code = _cli(["probes", "--train-attention", str(stores["train"].path), "--dev-attention", str(stores["dev"].path),
                 "--seeds", "0", "--add-rows", str(bad), "--out-table", str(out / "t.csv"),
                 "--out-markdown", str(out / "t.md")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {bad}") and message in err, err
    assert not out.exists()  # refused before any training


def test_add_rows_and_probes_must_not_overlap(stores, tmp_path, capsys):
    rows = tmp_path / "rows.json"
    rows.write_text(_rows_doc())
    code = _cli(["probes", "--train-attention", str(stores["train"].path), "--dev-attention", str(stores["dev"].path),
                 "--seeds", "0", "--probes", "attn,random_init_attn_glove", "--add-rows", str(rows),
                 "--out-table", str(tmp_path / "t.csv"), "--out-markdown", str(tmp_path / "t.md")])
    assert code == 2 and "in --probes and in --add-rows" in capsys.readouterr().err
    code = _cli(["probes", "--dev-attention", str(stores["dev"].path), "--seeds", "0", "--probes", "right_branching",
                 "--add-rows", str(rows), "--add-rows", str(rows),
                 "--out-table", str(tmp_path / "t.csv"), "--out-markdown", str(tmp_path / "t.md")])
    assert code == 2 and "a probe is in two of the files" in capsys.readouterr().err
    # the right rows merged into the table, in the paper's order
    assert _cli(["probes", "--dev-attention", str(stores["dev"].path), "--seeds", "0", "--probes", "right_branching",
                 "--add-rows", str(rows), "--out-table", str(tmp_path / "t.csv"),
                 "--out-markdown", str(tmp_path / "t.md")]) == 0
    df = pd.read_csv(tmp_path / "t.csv")
    assert df["probe"].tolist() == ["right_branching", "random_init_attn_glove"]
    assert df.loc[1, "uas_mean"] == 0.1 and df.loc[1, "n_seeds"] == 1
