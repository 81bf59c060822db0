"""Tests for bertlook.analyses.heads: per-head dependency accuracy, Table 1 twin, Fig 5 twin."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses import heads as ha
from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.cli import heads as heads_cli
from bertlook.errors import BertlookError
from bertlook.reporting.paper_join import TABLE1_PAPER_COLUMNS, join_table1
from bertlook.reporting import figures
from bertlook.reporting.tables import table1_markdown, trees_note

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BASE, BIG = 0.01, 0.9


# ------------------------------------------------------------------------------------------ helpers
def pointer_map(n: int, targets: dict[int, int], base: float = BASE, big: float = BIG) -> np.ndarray:
    """[n, n] map: row i puts ``big`` on column targets[i], ``base`` everywhere else; rows are then
    normalised to sum to 1 (stores refuse other rows), which keeps every row's and column's argmax
    when every row has a target."""
    a = np.full((n, n), base)
    for i, j in targets.items():
        a[i, j] = big
    return a / a.sum(-1, keepdims=True)


def make_store(path: Path, sentences: list[dict], maps: list[np.ndarray], *, level: str = "word",
               meta: dict | None = None) -> AttentionStore:
    L, H = maps[0].shape[:2]
    with AttentionWriter(path, num_layers=L, num_heads=H, level=level, meta=meta) as w:
        for k, (s, a) in enumerate(zip(sentences, maps)):
            rec = {"id": s.get("id", k), "tokens": ["[CLS]", *s["words"], "[SEP]"], "heads": s["heads"],
                   "rels": s["rels"]}
            if "xpos" in s:
                rec["xpos"] = s["xpos"]
            w.add(rec, a)
    return AttentionStore(path)


# "dogs chase cats": dogs -nsubj-> chase, chase = root, cats -dobj-> chase
DCC = {"words": ["dogs", "chase", "cats"], "heads": [2, 0, 2], "rels": ["nsubj", "root", "dobj"]}


def dcc_maps() -> np.ndarray:
    n = 5  # [CLS] dogs chase cats [SEP]
    gold = pointer_map(n, {0: 4, 1: 2, 2: 1, 3: 2, 4: 0})  # head 1: every word attends to its gold head
    nxt = pointer_map(n, {0: 1, 1: 2, 2: 3, 3: 4, 4: 4})  # head 2: every word attends to the next token
    return np.stack([gold, nxt])[None]  # [1, 2, 5, 5]


def random_store(path: Path, *, n_sent: int = 30, L: int = 2, H: int = 3, seed: int = 0,
                 rels=("det", "nsubj", "dobj", "amod", "prep", "pobj", "punct", "nn", "poss"),
                 with_poss: bool = True, id_prefix: str = "s") -> AttentionStore:
    rng = np.random.default_rng(seed)
    sents, maps = [], []
    for k in range(n_sent):
        W = int(rng.integers(2, 12))
        heads = [int(h) for h in rng.integers(1, W + 1, size=W)]
        heads = [h if h != i + 1 else 0 for i, h in enumerate(heads)]
        heads[int(rng.integers(W))] = 0
        rr = [str(rng.choice(rels)) if h else "root" for h in heads]
        words = [f"w{i}" for i in range(W)]
        xpos = ["NN"] * W
        if with_poss and W >= 3 and k % 3 == 0:  # a poss word followed by 's
            rr[0], words[1], xpos[1] = "poss", "'s", "POS"
            heads[0] = 3 if heads[0] in (0, 1) else heads[0]
        sents.append({"id": f"{id_prefix}{k}", "words": words, "heads": heads, "rels": rr, "xpos": xpos})
        maps.append(rng.dirichlet(np.full(W + 2, 0.5), size=(L, H, W + 2)))
    return make_store(path, sents, maps)


def naive_counts(store: AttentionStore, offsets, poss_switch=True):
    """Per-head Python loop over words: {relation: [correct[L, H, 2], count, baseline[K]]}."""
    out: dict[str, list] = {}
    for rec, attn in store:
        W = len(rec["heads"])
        a = np.asarray(attn, dtype=np.float64)
        src = list(range(W))
        for i in range(W - 1):
            if poss_switch and rec["rels"][i] in ("poss", "nmod:poss") and (
                    rec.get("xpos", [None] * W)[i + 1] == "POS" or rec["tokens"][i + 2].lower() in ("'s", "'")):
                src[i] = i + 1
        for i in range(W):
            gold, rel = rec["heads"][i], rec["rels"][i]
            entry = out.setdefault(rel, [np.zeros((store.num_layers, store.num_heads, 2), int), 0,
                                         np.zeros(len(offsets), int)])
            entry[1] += 1
            s = src[i] + 1  # map index of the word whose prediction is used
            for layer in range(store.num_layers):
                for head in range(store.num_heads):
                    m = a[layer, head]
                    cands = [j for j in range(1, W + 1) if j != s]
                    d2h = max(cands, key=lambda j: (m[s, j], -j))
                    h2d = max(cands, key=lambda j: (m[j, s], -j))
                    entry[0][layer, head, 0] += int(gold > 0 and d2h == gold)
                    entry[0][layer, head, 1] += int(gold > 0 and h2d == gold)
            for kk, off in enumerate(offsets):
                entry[2][kk] += int(gold > 0 and min(max(s + off, 1), W) == gold)
    return out


# ------------------------------------------------------------------------------------ score_heads
def test_exact_accuracies_hand_built(tmp_path):
    store = make_store(tmp_path / "s", [DCC], [dcc_maps()])
    sc = ha.score_heads(store)
    assert sc.relations == ["dobj", "nsubj", "root"]  # all frequency 1: by name
    got = {r: sc.counts_for(r) for r in [*sc.relations, "All"]}
    # head 1 (gold pointer): dep2head nsubj, dobj right; head2dep only nsubj (col of dogs: chase -> dogs)
    assert got["nsubj"][0][0, 0].tolist() == [1, 1]
    assert got["dobj"][0][0, 0].tolist() == [1, 0]
    assert got["root"][0].sum() == 0  # ROOT never correct
    # head 2 (next token): dep2head nsubj right; cats -> [SEP] is excluded -> tie -> lowest word (dogs)
    assert got["nsubj"][0][0, 1].tolist() == [1, 1]
    assert got["dobj"][0][0, 1].tolist() == [0, 1]  # head2dep: chase attends most to cats
    assert got["All"][1] == 3 and got["All"][0][0, 0].tolist() == [2, 1] and got["All"][0][0, 1].tolist() == [1, 2]
    df = ha.head_accuracy_table(sc)
    assert list(df.columns) == ha.ACCURACY_COLUMNS
    assert len(df) == 4 * 1 * 2 * 2
    row = df[(df.relation == "All") & (df.layer == 1) & (df["head"] == 1) & (df.direction == "dep2head")]
    assert row.accuracy.item() == pytest.approx(2 / 3) and row["count"].item() == 3
    row = df[(df.relation == "dobj") & (df["head"] == 2) & (df.direction == "head2dep")]
    assert row.accuracy.item() == 1.0


def test_head2dep_is_dep2head_of_transposed_map(tmp_path):
    rng = np.random.default_rng(3)
    sents, maps = [], []
    for k in range(6):
        W = int(rng.integers(2, 9))
        heads = [0] + [int(rng.integers(1, i + 1)) for i in range(1, W)]
        sents.append({"words": [f"w{i}" for i in range(W)], "heads": heads, "rels": ["root"] + ["dep"] * (W - 1)})
        a = rng.dirichlet(np.ones(W + 2), size=(1, 1, W + 2))
        for _ in range(200):  # Sinkhorn: doubly stochastic, so the transpose's rows also sum to 1
            a = a / a.sum(-2, keepdims=True)
            a = a / a.sum(-1, keepdims=True)
        maps.append(np.concatenate([a, np.swapaxes(a, -1, -2)], axis=1))  # head 2 = transpose of head 1
    sc = ha.score_heads(make_store(tmp_path / "s", sents, maps))
    corr = sc.correct  # [R, 1, 2, 2]
    assert np.array_equal(corr[:, 0, 1, 1], corr[:, 0, 0, 0])
    assert np.array_equal(corr[:, 0, 1, 0], corr[:, 0, 0, 1])
    assert corr[:, 0, 0, 0].sum() > 0


def test_self_cls_sep_never_predicted():
    W = 4
    n = W + 2
    a = np.full((1, 1, n, n), 0.001)
    a[0, 0, :, 0] = 0.95  # everyone attends to [CLS]
    a[0, 0, :, n - 1] = 0.97  # ... and more to [SEP]
    a[0, 0, np.arange(n), np.arange(n)] = 0.99  # ... and most to itself
    a[0, 0, 1, 3] = 0.01  # word 1's best real candidate is word 3
    a[0, 0, 3, 2] = 0.01  # column of word 2: word 3 attends most to it
    pred = ha.predict_heads(a, W)
    assert pred.shape == (1, 1, 2, W)
    assert pred[0, 0, 0, 0] == 3
    assert pred[0, 0, 1, 1] == 3  # head2dep of word 2
    assert set(pred.ravel().tolist()) <= set(range(1, W + 1))
    assert all(pred[0, 0, d, i] != i + 1 for d in range(2) for i in range(W))
    # ties (all other candidates equal) -> lowest word index
    assert pred[0, 0, 0, 1] == 1 and pred[0, 0, 0, 0] == 3


def test_float16_bit_pattern_argmax_matches_float_argmax():
    rng = np.random.default_rng(5)
    W = 9
    a16 = rng.dirichlet(np.full(W + 2, 0.3), size=(3, 4, W + 2)).astype(np.float16)
    a16[0, 0, 2, :] = np.float16(0.25)  # a row of ties -> lowest candidate
    a16[1, 1, :, 3] = 0  # a column of zeros
    a16[2, 2, 4, 5] = np.float16(-0.0)  # negative zero reads as zero
    a16[2, 3, 1:-1, 1:-1] = np.float16(6e-8)  # subnormals
    fast = ha.predict_heads(a16, W)
    slow = ha.predict_heads(a16.astype(np.float32), W)
    assert np.array_equal(fast, slow)
    bad = a16.copy()
    bad[0, 0, 1, 2] = np.float16(-0.5)
    with pytest.raises(BertlookError, match="negative"):
        ha.predict_heads(bad, W)
    bad[0, 0, 1, 2] = np.float16(np.inf)
    with pytest.raises(BertlookError, match="non-finite"):
        ha.predict_heads(bad, W)


def test_root_never_correct_even_single_word(tmp_path):
    one = {"words": ["Hi"], "heads": [0], "rels": ["root"]}
    store = make_store(tmp_path / "s", [one], [np.full((1, 1, 3, 3), 1 / 3)])
    sc = ha.score_heads(store)
    assert sc.word_counts.tolist() == [1]
    assert sc.correct.sum() == 0 and sc.baseline_correct.sum() == 0


def test_offset_baseline_clipped(tmp_path):
    offsets = (-3, -2, -1, 1, 2, 3)
    s2 = {"words": ["a", "b", "c"], "heads": [0, 1, 1], "rels": ["root", "x", "y"]}
    store = make_store(tmp_path / "s", [DCC, s2], [dcc_maps(), dcc_maps()])
    sc = ha.score_heads(store, offsets=offsets)
    base = {r: sc.counts_for(r)[2].tolist() for r in sc.relations}
    assert base["nsubj"] == [0, 0, 0, 1, 0, 0]  # dogs: only +1 reaches chase
    assert base["dobj"] == [0, 0, 1, 0, 0, 0]  # cats: -1; +1..+3 clip to cats itself
    assert base["y"] == [1, 1, 0, 0, 0, 0]  # c (word 3) -> a: -2, and -3 clipped to word 1
    assert base["x"] == [1, 1, 1, 0, 0, 0]  # b (word 2) -> a: -1, -2 and -3 clipped to word 1
    assert base["root"] == [0] * 6
    with pytest.raises(BertlookError):
        ha.score_heads(store, offsets=(0, 1))


def test_poss_switch_changes_prediction_source(tmp_path):
    # John 's dog barks: John -poss-> dog, 's -possessive-> John, dog -nsubj-> barks, barks root
    s = {"words": ["John", "'s", "dog", "barks"], "heads": [3, 1, 4, 0],
         "rels": ["poss", "possessive", "nsubj", "root"], "xpos": ["NNP", "POS", "NN", "VBZ"]}
    # head 1: John attends to barks (wrong), 's attends to dog (the poss word's gold head)
    a = pointer_map(6, {0: 5, 1: 4, 2: 3, 3: 4, 4: 0, 5: 0})[None, None]
    on = ha.score_heads(make_store(tmp_path / "on", [s], [a]), offsets=(1, 2))
    off = ha.score_heads(make_store(tmp_path / "off", [s], [a]), offsets=(1, 2), poss_from_possessive=False)
    assert on.n_poss == off.n_poss == 1
    assert on.n_poss_affected == 1 and off.n_poss_affected == 0
    assert on.counts_for("poss")[0][0, 0, 0] == 1
    assert off.counts_for("poss")[0][0, 0, 0] == 0
    # other relations untouched
    assert on.counts_for("possessive")[0].tolist() == off.counts_for("possessive")[0].tolist()
    # baselines use the marker's position too (as the released code): +1 from 's reaches dog
    assert on.counts_for("poss")[2].tolist() == [1, 0]
    assert off.counts_for("poss")[2].tolist() == [0, 1]
    # detection from the token alone (no xpos) and for UD nmod:poss
    s_ud = dict(s, rels=["nmod:poss", "case", "nsubj", "root"])
    del s_ud["xpos"]
    ud = ha.score_heads(make_store(tmp_path / "ud", [s_ud], [a]))
    assert ud.n_poss_affected == 1 and ud.counts_for("nmod:poss")[0][0, 0, 0] == 1


def test_matches_naive_loop_on_random_store(tmp_path):
    store = random_store(tmp_path / "r", n_sent=25, seed=1)
    offsets = (-2, -1, 1, 3)
    sc = ha.score_heads(store, offsets=offsets)
    assert sc.n_poss_affected > 0
    naive = naive_counts(store, offsets)
    assert set(naive) == set(sc.relations)
    for r in sc.relations:
        corr, count, base = sc.counts_for(r)
        assert count == naive[r][1]
        assert np.array_equal(corr, naive[r][0]), r
        assert np.array_equal(base, naive[r][2]), r
    assert sc.sentence_counts.sum(axis=0).tolist() == sc.word_counts.tolist()
    assert np.array_equal(sc.sentence_baseline_correct.sum(axis=0), sc.baseline_correct)


def test_max_examples_and_bad_input(tmp_path):
    store = random_store(tmp_path / "r", n_sent=10)
    assert ha.score_heads(store, max_examples=4).n_sentences == 4
    tok = make_store(tmp_path / "tok", [DCC], [dcc_maps()], level="token")
    with pytest.raises(BertlookError, match="word-level"):
        ha.score_heads(tok)
    bad = dict(DCC, heads=[2, 0, 7])
    with pytest.raises(BertlookError, match="bad head"):
        ha.score_heads(make_store(tmp_path / "bad", [bad], [dcc_maps()]))
    short = dict(DCC, rels=["nsubj", "root"])
    with pytest.raises(BertlookError, match="2 relations for 3 words"):
        ha.score_heads(make_store(tmp_path / "short", [short], [dcc_maps()]))
    nan = dcc_maps()
    nan[0, 1, 2, 3] = np.nan
    with pytest.raises(BertlookError, match="non-finite"):
        ha.score_heads(make_store(tmp_path / "nan", [DCC], [nan]))


# ----------------------------------------------------------------------------------------- table1
def synthetic_scores(counts: dict[str, int], best: dict[str, tuple[int, int, int]], L=2, H=2, seed=0,
                     offsets=(-1, 1)) -> ha.HeadScores:
    rels = list(counts)
    rng = np.random.default_rng(seed)
    R = len(rels)
    wc = np.array([counts[r] for r in rels], dtype=np.int64)
    corr = np.zeros((R, L, H, 2), dtype=np.int64)
    for i, r in enumerate(rels):
        corr[i] = rng.integers(0, max(1, wc[i] // 3), size=(L, H, 2))
        if r in best:
            corr[i][best[r]] = wc[i] // 2 + 1
    base = np.stack([np.minimum(rng.integers(0, wc + 1), wc // 2) for _ in offsets], axis=1)
    return ha.HeadScores(
        relations=rels, num_layers=L, num_heads=H, offsets=tuple(offsets), word_counts=wc, correct=corr,
        baseline_correct=base, n_sentences=0, sentence_ids=[], sentence_counts=None,
        sentence_baseline_correct=None, poss_from_possessive=True, n_poss=0, n_poss_affected=0,
    )


COUNTS = {"punct": 500, "nn": 300, "root": 200, "amod": 150, "prep": 120, "dobj": 50, "det": 20, "xcomp": 10}


def test_table1_rows_order_min_count_forced():
    sc = synthetic_scores(COUNTS, {"nn": (1, 0, 0), "amod": (0, 1, 1), "dobj": (1, 1, 0)})
    df = ha.table1(sc, min_count=100, bootstrap=0)
    assert list(df.columns) == ha.TABLE1_COLUMNS
    assert df.relation.tolist() == ["All", "nn", "amod", "prep", "dobj", "det"]
    assert df.below_min_count.tolist() == [False, False, False, False, True, True]
    assert df["count"].tolist() == [sum(COUNTS.values()), 300, 150, 120, 50, 20]
    nn = df.set_index("relation").loc["nn"]
    assert nn.best_head == "2-1" and nn.direction == "dep2head"
    assert nn.accuracy == pytest.approx(151 / 300)
    amod = df.set_index("relation").loc["amod"]
    assert amod.best_head == "1-2" and amod.direction == "head2dep"
    assert df[["ci_low", "ci_high", "baseline_ci_low"]].isna().all().all()  # bootstrap=0
    k = int(np.argmax(sc.baseline_correct[sc.relations.index("nn")]))
    assert nn.baseline_offset == sc.offsets[k]
    assert nn.baseline_accuracy == pytest.approx(sc.baseline_correct[sc.relations.index("nn"), k] / 300)
    # ties between heads: lowest layer, head, dep2head first
    tie = synthetic_scores({"det": 10}, {})
    tie.correct[:] = 3
    assert ha.table1(tie, min_count=1, bootstrap=0).best_head.tolist() == ["1-1", "1-1"]
    assert ha.table1(tie, min_count=1, bootstrap=0).direction.tolist() == ["dep2head", "dep2head"]
    # P (PTB punctuation) and ROOT skipped too
    p = synthetic_scores({"P": 300, "ROOT": 200, "SBJ": 150}, {})
    assert ha.table1(p, bootstrap=0).relation.tolist() == ["All", "SBJ"]


def test_heldout_selection_uses_train_head():
    dev = synthetic_scores({"nn": 300, "det": 200}, {"nn": (0, 0, 1), "det": (1, 1, 0)}, seed=1)
    train = synthetic_scores({"nn": 900, "det": 700, "amod": 5}, {"nn": (1, 0, 0), "det": (1, 1, 0)}, seed=2)
    df = ha.table1(dev, min_count=100, train_scores=train, bootstrap=0).set_index("relation")
    assert list(df.columns[-3:]) == ha.HELDOUT_COLUMNS
    assert df.loc["nn", "best_head"] == "1-1" and df.loc["nn", "heldout_head"] == "2-1"
    assert df.loc["nn", "heldout_direction"] == "dep2head"
    assert df.loc["nn", "heldout_accuracy"] == pytest.approx(dev.correct[0, 1, 0, 0] / 300)
    assert df.loc["nn", "heldout_accuracy"] <= df.loc["nn", "accuracy"]
    assert df.loc["det", "heldout_head"] == "2-2"
    assert df.loc["det", "heldout_accuracy"] == pytest.approx(df.loc["det", "accuracy"])
    # a relation missing from train gets no held-out choice
    dev2 = synthetic_scores({"nn": 300, "mark": 200}, {})
    df2 = ha.table1(dev2, min_count=100, train_scores=train, bootstrap=0).set_index("relation")
    assert df2.loc["mark", "heldout_head"] == "" and np.isnan(df2.loc["mark", "heldout_accuracy"])


def test_paper_columns_and_comparable():
    dev = synthetic_scores({"prep": 300, "det": 200, "xcomp": 150}, {})
    plain = ha.table1(dev, bootstrap=0)
    assert not any(c.startswith("paper") for c in plain.columns)  # the analysis knows nothing of the paper
    df = join_table1(plain).set_index("relation")
    assert list(df.columns[-len(TABLE1_PAPER_COLUMNS):]) == TABLE1_PAPER_COLUMNS
    assert df.loc["det", "paper_head"] == "8-11"
    assert df.loc["det", "paper_accuracy"] == pytest.approx(0.943)
    assert df.loc["det", "paper_baseline_offset"] == 1
    assert df.loc["All", "paper_head"] == "7-6"
    assert df.loc["xcomp", "paper_head"] == "" and np.isnan(df.loc["xcomp", "paper_accuracy"])
    assert df.diff_accuracy.isna().all()
    dfc = join_table1(plain, comparable=True).set_index("relation")
    assert dfc.loc["prep", "diff_accuracy"] == pytest.approx(dfc.loc["prep", "accuracy"] - 0.667)
    assert np.isnan(dfc.loc["xcomp", "diff_accuracy"])


def test_bootstrap_ci_contains_estimate_and_is_deterministic(tmp_path):
    store = random_store(tmp_path / "r", n_sent=40, seed=2)
    sc = ha.score_heads(store)
    a = ha.table1(sc, min_count=5, bootstrap=300, seed=7)
    b = ha.table1(sc, min_count=5, dev_store=tmp_path / "r", bootstrap=300, seed=7)
    c = ha.table1(sc, min_count=5, bootstrap=300, seed=8)
    pd.testing.assert_frame_equal(a, b)
    assert not a.ci_low.equals(c.ci_low)
    assert a[["ci_low", "ci_high", "baseline_ci_low", "baseline_ci_high"]].notna().all().all()
    assert (a.ci_low <= a.accuracy + 1e-12).all() and (a.accuracy <= a.ci_high + 1e-12).all()
    assert (a.baseline_ci_low <= a.baseline_accuracy + 1e-12).all()
    assert (a.baseline_accuracy <= a.baseline_ci_high + 1e-12).all()
    assert (a.ci_high - a.ci_low > 0).all()
    wide = ha.table1(sc, min_count=5, bootstrap=300, seed=7, confidence=0.99)
    assert (wide.ci_high - wide.ci_low >= a.ci_high - a.ci_low - 1e-12).all()


def test_sentence_correct_sums_to_totals(tmp_path):
    store = random_store(tmp_path / "r", n_sent=20, seed=4)
    sc = ha.score_heads(store)
    sel = [("All", 1, 2, 1), (sc.relations[1], 0, 1, 0), ("poss", 1, 0, 0)]
    per = ha.sentence_correct(store, sc, sel)
    assert per.shape == (20, 3)
    assert per[:, 0].sum() == sc.correct.sum(axis=0)[1, 2, 1]
    assert per[:, 1].sum() == sc.correct[1, 0, 1, 0]
    assert per[:, 2].sum() == sc.correct[sc.relations.index("poss"), 1, 0, 0]
    other = random_store(tmp_path / "o", n_sent=20, seed=4, id_prefix="t")
    with pytest.raises(BertlookError, match="does not match"):
        ha.sentence_correct(other, sc, sel)


def test_bootstrap_ci_function_matches_direct_resampling():
    rng = np.random.default_rng(0)
    num = rng.integers(0, 5, size=(30, 2)).astype(float)
    den = num + rng.integers(1, 4, size=(30, 2))
    low, high = ha.bootstrap_ci(num, den, replicates=500, seed=3)
    # same multinomial draws by hand
    r2 = np.random.default_rng(3)
    w = np.concatenate([r2.multinomial(30, np.full(30, 1 / 30), size=200),
                        r2.multinomial(30, np.full(30, 1 / 30), size=200),
                        r2.multinomial(30, np.full(30, 1 / 30), size=100)])
    stats = (w @ num) / (w @ den)
    assert np.allclose(low, np.percentile(stats, 2.5, axis=0))
    assert np.allclose(high, np.percentile(stats, 97.5, axis=0))
    nan_low, _ = ha.bootstrap_ci(num, den, replicates=0)
    assert np.isnan(nan_low).all()


# ------------------------------------------------------------------------------- markdown, figure
def test_markdown_percent_and_columns():
    dev = synthetic_scores(COUNTS, {"nn": (1, 0, 0)})
    train = synthetic_scores(COUNTS, {"nn": (0, 1, 0)}, seed=3)
    df = join_table1(ha.table1(dev, bootstrap=0, train_scores=train), comparable=True)
    df.loc[1, ["ci_low", "ci_high"]] = [0.45, 0.55]
    md = table1_markdown(df, title="Table 1 twin", corpus_note=trees_note("ptb_sd", comparable=True))
    assert md.startswith("# Table 1 twin")
    assert "| Relation | n | Head | Accuracy | Baseline (offset) | Held-out head | Held-out accuracy | Paper head" in md
    assert "Diff (points)" in md
    nn_line = next(line for line in md.splitlines() if line.startswith("| nn |"))
    assert f"{100 * 151 / 300:.1f} [45.0, 55.0]" in nn_line
    assert "2-1 d\u2192h" in nn_line and "70.4" in nn_line and "70.2 (+1)" in nn_line
    assert "| dobj \\* |" in md and "fewer words than the minimum count" in md
    assert "Comparable to the paper" in md and "gold trees" in md
    silver = trees_note("silver", "spaCy en_core_web_sm 3.8.0")
    assert "silver" in silver and "en_core_web_sm" in silver and "Not comparable" in silver
    plain = table1_markdown(ha.table1(dev, bootstrap=0), title="t", corpus_note=silver)
    assert "Held-out" not in plain and "Paper head" not in plain and "Diff" not in plain


def fig_store(tmp_path: Path, with_pobj: bool) -> Path:
    s1 = {"words": ["the", "dog", "ate", "the", "bone"], "heads": [2, 3, 0, 5, 3],
          "rels": ["det", "nsubj", "root", "det", "dobj"]}
    s2 = {"words": ["sat", "on", "mats"], "heads": [0, 1, 2], "rels": ["root", "prep", "pobj"]}
    rng = np.random.default_rng(0)
    sents = [s1, s2] if with_pobj else [s1]
    maps = [rng.dirichlet(np.ones(len(s["words"]) + 2), size=(2, 2, len(s["words"]) + 2)) for s in sents]
    make_store(tmp_path / "fig", sents, maps)
    return tmp_path / "fig"


def test_fig5_png_and_absent_relation_panel(tmp_path, monkeypatch):
    messages = []
    orig = figures._message_panel

    def spy(ax, title, text):
        messages.append((title, text))
        orig(ax, title, text)

    monkeypatch.setattr(figures, "_message_panel", spy)
    path = fig_store(tmp_path, with_pobj=False)
    sc = ha.score_heads(AttentionStore(path))
    df = ha.table1(sc, min_count=1, bootstrap=0)
    assert "pobj" not in df.relation.tolist()
    out = figures.fig5_syntax_heads(path, df, tmp_path / "out" / "fig5.png")
    data = Path(out).read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    assert [m[0] for m in messages] == ["pobj"] and "does not occur" in messages[0][1]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    # all three present, sentence chosen per relation
    messages.clear()
    path2 = fig_store(tmp_path / "b", with_pobj=True)
    df2 = ha.table1(ha.score_heads(AttentionStore(path2)), min_count=1, bootstrap=0)
    figures.fig5_syntax_heads(path2, df2, tmp_path / "fig5b.png")
    assert messages == [] and (tmp_path / "fig5b.png").read_bytes()[:8] == PNG_MAGIC
    # a fixed example without the relation says so
    figures.fig5_syntax_heads(path2, df2, tmp_path / "fig5c.png", example_index=0)
    assert [m[0] for m in messages] == ["pobj"] and "example 0" in messages[0][1]
    with pytest.raises(BertlookError, match="out of range"):
        figures.fig5_syntax_heads(path2, df2, tmp_path / "x.png", example_index=5)


# ------------------------------------------------------------------------------------------- CLI
def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    heads_cli.register_cli(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_heads_end_to_end(tmp_path, capsys):
    dev = random_store(tmp_path / "dev", n_sent=15, seed=8)
    random_store(tmp_path / "train", n_sent=15, seed=9)
    out = tmp_path / "out"
    argv = ["heads", "--dev-attention", str(dev.path), "--train-attention", str(tmp_path / "train"),
            "--out-accuracy", str(out / "head_accuracy.csv"), "--out-table", str(out / "table1.csv"),
            "--out-markdown", str(out / "table1.md"), "--out-figure", str(out / "fig5.png"),
            "--summary", str(out / "summary.json"), "--min-count", "5", "--offsets=-2,-1,1,2",
            "--bootstrap", "50", "--treebank-kind", "silver", "--treebank-name", "spaCy en_core_web_sm"]
    assert run_cli(argv) == 0
    acc = pd.read_csv(out / "head_accuracy.csv")
    assert list(acc.columns) == ha.ACCURACY_COLUMNS and len(acc) == (1 + 10) * 2 * 3 * 2
    exact = ha.head_accuracy_table(ha.score_heads(dev)).accuracy.to_numpy()
    assert np.array_equal(acc.accuracy.to_numpy(), exact)  # full precision in the CSV
    t1 = pd.read_csv(out / "table1.csv", keep_default_na=False)
    assert t1.columns.tolist() == ha.TABLE1_COLUMNS + ha.HELDOUT_COLUMNS + TABLE1_PAPER_COLUMNS
    assert t1.relation.iloc[0] == "All"
    assert (out / "fig5.png").read_bytes()[:8] == PNG_MAGIC
    md = (out / "table1.md").read_text()
    assert "silver trees (spaCy en_core_web_sm" in md
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_sentences"] == 15 and summary["offsets"] == [-2, -1, 1, 2]
    assert summary["treebank_kind"] == "silver" and summary["relation_scheme"] == "clearnlp"
    expected_poss = sum(1 for r in dev.records if r["rels"][0] == "poss" and r["tokens"][2] == "'s")
    assert summary["n_poss_switched"] == expected_poss > 0 and summary["train"]["n_sentences"] == 15
    assert set(summary["skipped_relations"]) <= {"root", "punct"}
    assert "heads: 15 sentences" in capsys.readouterr().out
    # --no-poss-from-possessive, tree kind from the store's meta missing -> clear error
    argv2 = [a for a in argv if a not in ("--treebank-kind", "silver")] + ["--no-poss-from-possessive"]
    with pytest.raises(BertlookError, match="--treebank-kind"):
        run_cli(argv2)
    with pytest.raises(SystemExit):
        run_cli(argv[:-4] + ["--offsets=0,1"])


def test_cli_help_lists_inputs_outputs(capsys):
    with pytest.raises(SystemExit):
        run_cli(["heads", "--help"])
    text = capsys.readouterr().out
    for flag in ("--dev-attention", "--train-attention", "--out-accuracy", "--out-table", "--out-markdown",
                 "--out-figure", "--summary", "--min-count", "--offsets", "--no-poss-from-possessive",
                 "--bootstrap", "--seed", "--treebank-kind", "--treebank-name", "--paper-comparable"):
        assert flag in text
    assert "inputs:" in text and "outputs:" in text


def test_design_card_rows_are_forced_per_scheme():
    """dobj/det/pobj rows (SD, ClearNLP) and their UD analogues obj/det/case always appear."""
    from types import SimpleNamespace

    from bertlook.analyses.heads import FORCED_BY_SCHEME, table1_relations

    scores = SimpleNamespace(relations=["nsubj", "obj", "case", "det", "dobj", "punct"],
                             word_counts=[500, 5, 4, 3, 2, 900])
    ud = table1_relations(scores, 100, FORCED_BY_SCHEME["ud"])
    assert ud == [("All", False), ("nsubj", False), ("obj", True), ("case", True), ("det", True)]
    sd = table1_relations(scores, 100, FORCED_BY_SCHEME["sd"])
    assert sd == [("All", False), ("nsubj", False), ("det", True), ("dobj", True)]
