"""Tests for bertlook.analyses.heads and .table1: per-head dependency accuracy, Table 1 twin; Fig 5 twin
(bertlook.analyses.syntax_heads, bertlook.reporting.example_figures)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses import heads as ha
from bertlook.analyses import heads_step as hs
from bertlook.analyses import second_pass as sp
from bertlook.analyses import table1 as ta
from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.cli import heads as heads_cli
from bertlook.errors import BertlookError
from bertlook.reporting.paper_join import TABLE1_PAPER_COLUMNS, join_table1
from bertlook.reporting import example_figures
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
            for key in ("xpos", "upos"):
                if key in s:
                    rec[key] = s[key]
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
    assert list(df.columns) == [*ha.ACCURACY_COLUMNS, ha.FRAGILE_COLUMN]
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
    df = ta.table1(sc, min_count=100, bootstrap=0)
    assert list(df.columns) == ta.TABLE1_COLUMNS
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
    assert ta.table1(tie, min_count=1, bootstrap=0).best_head.tolist() == ["1-1", "1-1"]
    assert ta.table1(tie, min_count=1, bootstrap=0).direction.tolist() == ["dep2head", "dep2head"]
    # P (PTB punctuation) and ROOT skipped too
    p = synthetic_scores({"P": 300, "ROOT": 200, "SBJ": 150}, {})
    assert ta.table1(p, bootstrap=0).relation.tolist() == ["All", "SBJ"]


def test_heldout_selection_uses_train_head():
    dev = synthetic_scores({"nn": 300, "det": 200}, {"nn": (0, 0, 1), "det": (1, 1, 0)}, seed=1)
    train = synthetic_scores({"nn": 900, "det": 700, "amod": 5}, {"nn": (1, 0, 0), "det": (1, 1, 0)}, seed=2)
    df = ta.table1(dev, min_count=100, train_scores=train, bootstrap=0).set_index("relation")
    assert list(df.columns[-3:]) == ta.HELDOUT_COLUMNS
    assert df.loc["nn", "best_head"] == "1-1" and df.loc["nn", "heldout_head"] == "2-1"
    assert df.loc["nn", "heldout_direction"] == "dep2head"
    assert df.loc["nn", "heldout_accuracy"] == pytest.approx(dev.correct[0, 1, 0, 0] / 300)
    assert df.loc["nn", "heldout_accuracy"] <= df.loc["nn", "accuracy"]
    assert df.loc["det", "heldout_head"] == "2-2"
    assert df.loc["det", "heldout_accuracy"] == pytest.approx(df.loc["det", "accuracy"])
    # a relation missing from train gets no held-out choice
    dev2 = synthetic_scores({"nn": 300, "mark": 200}, {})
    df2 = ta.table1(dev2, min_count=100, train_scores=train, bootstrap=0).set_index("relation")
    assert df2.loc["mark", "heldout_head"] == "" and np.isnan(df2.loc["mark", "heldout_accuracy"])


def test_paper_columns_and_comparable():
    dev = synthetic_scores({"prep": 300, "det": 200, "xcomp": 150}, {})
    plain = ta.table1(dev, bootstrap=0)
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
    a = ta.table1(sc, min_count=5, bootstrap=300, seed=7)
    b = ta.table1(sc, min_count=5, dev_store=tmp_path / "r", bootstrap=300, seed=7)
    c = ta.table1(sc, min_count=5, bootstrap=300, seed=8)
    pd.testing.assert_frame_equal(a, b)
    assert not a.ci_low.equals(c.ci_low)
    assert a[["ci_low", "ci_high", "baseline_ci_low", "baseline_ci_high"]].notna().all().all()
    assert (a.ci_low <= a.accuracy + 1e-12).all() and (a.accuracy <= a.ci_high + 1e-12).all()
    assert (a.baseline_ci_low <= a.baseline_accuracy + 1e-12).all()
    assert (a.baseline_accuracy <= a.baseline_ci_high + 1e-12).all()
    assert (a.ci_high - a.ci_low > 0).all()
    wide = ta.table1(sc, min_count=5, bootstrap=300, seed=7, confidence=0.99)
    assert (wide.ci_high - wide.ci_low >= a.ci_high - a.ci_low - 1e-12).all()


def test_sentence_correct_sums_to_totals(tmp_path):
    store = random_store(tmp_path / "r", n_sent=20, seed=4)
    sc = ha.score_heads(store)
    sel = [("All", 1, 2, 1), (sc.relations[1], 0, 1, 0), ("poss", 1, 0, 0)]
    per = sp.sentence_correct(store, sc, sel)
    assert per.shape == (20, 3)
    assert per[:, 0].sum() == sc.correct.sum(axis=0)[1, 2, 1]
    assert per[:, 1].sum() == sc.correct[1, 0, 1, 0]
    assert per[:, 2].sum() == sc.correct[sc.relations.index("poss"), 1, 0, 0]
    other = random_store(tmp_path / "o", n_sent=20, seed=4, id_prefix="t")
    with pytest.raises(BertlookError, match="does not match"):
        sp.sentence_correct(other, sc, sel)


def test_bootstrap_ci_function_matches_direct_resampling():
    rng = np.random.default_rng(0)
    num = rng.integers(0, 5, size=(30, 2)).astype(float)
    den = num + rng.integers(1, 4, size=(30, 2))
    low, high = ta.bootstrap_ci(num, den, replicates=500, seed=3)
    # same multinomial draws by hand
    r2 = np.random.default_rng(3)
    w = np.concatenate([r2.multinomial(30, np.full(30, 1 / 30), size=200),
                        r2.multinomial(30, np.full(30, 1 / 30), size=200),
                        r2.multinomial(30, np.full(30, 1 / 30), size=100)])
    stats = (w @ num) / (w @ den)
    assert np.allclose(low, np.percentile(stats, 2.5, axis=0))
    assert np.allclose(high, np.percentile(stats, 97.5, axis=0))
    nan_low, _ = ta.bootstrap_ci(num, den, replicates=0)
    assert np.isnan(nan_low).all()


# ------------------------------------------------------------------------------- markdown, figure
def test_markdown_percent_and_columns():
    dev = synthetic_scores(COUNTS, {"nn": (1, 0, 0)})
    train = synthetic_scores(COUNTS, {"nn": (0, 1, 0)}, seed=3)
    df = join_table1(ta.table1(dev, bootstrap=0, train_scores=train), comparable=True)
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
    plain = table1_markdown(ta.table1(dev, bootstrap=0), title="t", corpus_note=silver)
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
    orig = example_figures.message_panel

    def spy(ax, title, text):
        messages.append((title, text))
        orig(ax, title, text)

    monkeypatch.setattr(example_figures, "message_panel", spy)
    path = fig_store(tmp_path, with_pobj=False)
    sc = ha.score_heads(AttentionStore(path))
    df = ta.table1(sc, min_count=1, bootstrap=0)
    assert "pobj" not in df.relation.tolist()
    out = example_figures.fig5_syntax_heads(path, df, tmp_path / "out" / "fig5.png")
    data = Path(out).read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    assert [m[0] for m in messages] == ["pobj"] and "does not occur" in messages[0][1]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    # all three present, sentence chosen per relation
    messages.clear()
    path2 = fig_store(tmp_path / "b", with_pobj=True)
    df2 = ta.table1(ha.score_heads(AttentionStore(path2)), min_count=1, bootstrap=0)
    example_figures.fig5_syntax_heads(path2, df2, tmp_path / "fig5b.png")
    assert messages == [] and (tmp_path / "fig5b.png").read_bytes()[:8] == PNG_MAGIC
    # a fixed example without the relation says so
    example_figures.fig5_syntax_heads(path2, df2, tmp_path / "fig5c.png", example_index=0)
    assert [m[0] for m in messages] == ["pobj"] and "example 0" in messages[0][1]
    with pytest.raises(BertlookError, match="out of range"):
        example_figures.fig5_syntax_heads(path2, df2, tmp_path / "x.png", example_index=5)


# ------------------------------------------------------------------------------------------- run_heads
def test_run_heads_without_the_cli(tmp_path):
    """The heads step as a library call: the tables (no paper columns, no files written) and the summary
    the CLI writes."""
    dev = random_store(tmp_path / "dev", n_sent=12, seed=5)
    random_store(tmp_path / "train", n_sent=10, seed=6)
    options = hs.HeadsOptions(min_count=5, offsets=(-1, 1), bootstrap=20, treebank_kind="silver",
                              treebank_name="parser X", paper_comparable=True)
    logged: list[str] = []
    res = hs.run_heads(dev, tmp_path / "train", options, outputs={"table": tmp_path / "t.csv"}, log=logged.append)
    assert logged == ["heads: warning: --paper-comparable with silver trees; the paper used gold PTB SD trees"]
    s = res.summary
    assert list(s)[:3] == ["dev_attention", "train_attention", "treebank_kind"] and list(s)[-1] == "outputs"
    assert s["dev_attention"] == str(dev.path) and s["train_attention"] == str(tmp_path / "train")
    assert (s["treebank_kind"], s["treebank_name"], s["relation_scheme"]) == ("silver", "parser X", "clearnlp")
    assert (res.treebank_kind, res.relation_scheme) == ("silver", "clearnlp")
    assert s["n_sentences"] == res.dev.n_sentences == 12 and s["train"]["n_sentences"] == res.train.n_sentences == 10
    assert s["offsets"] == [-1, 1] and s["bootstrap"] == 20 and s["alpha"] == 0.05
    assert s["rows"] == res.table.relation.tolist() and s["rows"][0] == "All"
    assert s["all"]["best_head"] == res.table.best_head.iloc[0]
    assert s["all"]["accuracy"] == pytest.approx(float(res.table.accuracy.iloc[0]))
    assert s["paired"]["vs_baseline"]["n_tests"] == len(res.table)
    assert s["outputs"] == {"table": str(tmp_path / "t.csv")}
    assert not any(c.startswith("paper_") for c in res.table.columns)
    pd.testing.assert_frame_equal(res.accuracy, ha.head_accuracy_table(res.dev))
    json.dumps(s)  # JSON as it is
    assert not list(tmp_path.glob("*.csv"))
    # without a log the warning is a Python warning; no train store, no outputs; a bad alpha is refused
    with pytest.warns(UserWarning, match="paper-comparable"):
        res2 = hs.run_heads(str(dev.path), options=options)
    assert res2.train is None and res2.summary["train"] is None and res2.summary["train_attention"] is None
    assert res2.summary["outputs"] == {}
    with pytest.raises(BertlookError, match="alpha"):
        hs.run_heads(dev, options=hs.HeadsOptions(treebank_kind="silver", alpha=1.5))


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
    assert list(acc.columns) == [*ha.ACCURACY_COLUMNS, ha.FRAGILE_COLUMN] and len(acc) == (1 + 10) * 2 * 3 * 2
    exact = ha.head_accuracy_table(ha.score_heads(dev)).accuracy.to_numpy()
    assert np.array_equal(acc.accuracy.to_numpy(), exact)  # full precision in the CSV
    t1 = pd.read_csv(out / "table1.csv", keep_default_na=False)
    assert t1.columns.tolist() == (ta.TABLE1_COLUMNS + ta.HELDOUT_COLUMNS + TABLE1_PAPER_COLUMNS + ta.CROSSFIT_COLUMNS
                                   + ta.PAIRED_COLUMNS + ta.NOPUNCT_COLUMNS)
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
    assert summary["alpha"] == 0.05 and summary["exclude_punct_candidates"] is False
    assert sum(summary["crossfit"]["fold_sentences"]) == 15 and summary["crossfit"]["fold_sentences"][0] == 8
    assert summary["paired"]["vs_baseline"]["n_tests"] == len(t1)
    assert summary["punctuation"]["n_punct_words"] == sum(r["rels"].count("punct") for r in dev.records)
    assert "## Paired tests" in md and "## Candidate sets" in md
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
                 "--bootstrap", "--seed", "--treebank-kind", "--treebank-name", "--paper-comparable", "--alpha",
                 "--exclude-punct-candidates"):
        assert flag in text
    assert "inputs:" in text and "outputs:" in text


def test_design_card_rows_are_forced_per_scheme():
    """dobj/det/pobj rows (SD, ClearNLP) and their UD analogues obj/det/case always appear."""
    from types import SimpleNamespace

    from bertlook.analyses.heads import FORCED_BY_SCHEME
    from bertlook.analyses.table1 import table1_relations

    scores = SimpleNamespace(relations=["nsubj", "obj", "case", "det", "dobj", "punct"],
                             word_counts=[500, 5, 4, 3, 2, 900])
    ud = table1_relations(scores, 100, FORCED_BY_SCHEME["ud"])
    assert ud == [("All", False), ("nsubj", False), ("obj", True), ("case", True), ("det", True)]
    sd = table1_relations(scores, 100, FORCED_BY_SCHEME["sd"])
    assert sd == [("All", False), ("nsubj", False), ("det", True), ("dobj", True)]


# ---------------------------------------------------------------- beyond the paper: statistics
def test_mcnemar_exact_hand_values():
    assert ta.mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # 2 * C(5,0) / 2**5
    assert ta.mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert ta.mcnemar_exact(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)  # 0.109375
    assert ta.mcnemar_exact(9, 6) == pytest.approx(2 * (1 + 15 + 105 + 455 + 1365 + 3003 + 5005) / 2 ** 15)
    assert ta.mcnemar_exact(1, 0) == 1.0  # 2 * 1/2, capped
    assert ta.mcnemar_exact(3, 3) == 1.0 and ta.mcnemar_exact(0, 0) == 1.0
    with pytest.raises(BertlookError):
        ta.mcnemar_exact(-1, 2)


def test_holm_hand_values():
    # sorted 0.01, 0.03, 0.04 (m = 3) -> 3 * 0.01, 2 * 0.03, max(0.06, 1 * 0.04)
    got = ta.holm(np.array([0.01, 0.04, 0.03, np.nan]))
    assert got[:3] == pytest.approx([0.03, 0.06, 0.06]) and np.isnan(got[3])
    assert ta.holm(np.array([0.5, 0.6])).tolist() == [1.0, 1.0]  # 2 * 0.5 = 1, then monotone
    assert ta.holm(np.array([0.2])).tolist() == [0.2]
    assert np.isnan(ta.holm(np.array([np.nan]))).all() and ta.holm(np.array([])).size == 0


def test_punctuation_mask_relation_or_upos():
    assert ha.punctuation_mask(["nsubj", "punct", "P", "dep"]).tolist() == [False, True, True, False]
    got = ha.punctuation_mask(["nsubj", "punct", "nmod", "dep"], ["NOUN", "PUNCT", "PUNCT", "SYM"])
    assert got.tolist() == [False, True, True, False]  # UPOS PUNCT counts, SYM ($, #) does not


def test_predict_heads_without_punct_candidates():
    # dogs bark . : dogs attends to '.', bark to '.', '.' to dogs (map indices: 0 [CLS], 1..3, 4 [SEP])
    a = pointer_map(5, {0: 0, 1: 3, 2: 3, 3: 1, 4: 0})[None, None]
    cand = np.array([True, True, False])  # '.' is not a candidate
    every = ha.predict_heads(a, 3)[0, 0]
    nopunct = ha.predict_heads(a, 3, candidates=cand)[0, 0]
    assert every[0].tolist() == [3, 3, 1]  # dep2head: dogs -> '.', bark -> '.', '.' -> dogs
    assert nopunct[0].tolist() == [2, 1, 1]  # dogs -> bark, bark -> dogs (tie: lowest), '.' unchanged
    assert every[1].tolist() == [3, 1, 1]  # head2dep: '.' attends most to dogs; ties -> lowest other word
    assert nopunct[1].tolist() == [2, 1, 1]  # the '.' row may not be chosen
    f16 = ha.predict_heads(a.astype(np.float16), 3, candidates=cand)
    assert np.array_equal(f16[0, 0], nopunct)
    # a word whose only other word is punctuation has no candidate: 0 (never correct)
    b = pointer_map(4, {0: 0, 1: 2, 2: 1, 3: 0})[None, None]
    assert ha.predict_heads(b, 2, candidates=np.array([False, True]))[0, 0].tolist() == [[2, 0], [2, 0]]


DBP = {"words": ["dogs", "bark", "."], "heads": [2, 0, 2], "rels": ["nsubj", "root", "punct"],
       "upos": ["NOUN", "VERB", "PUNCT"]}
DASH = {"words": ["-", "x"], "heads": [0, 1], "rels": ["root", "dep"], "upos": ["PUNCT", "X"]}


def test_score_heads_candidate_sets_hand_built(tmp_path):
    # head 1-1: dogs -> '.', bark -> '.', '.' -> dogs; in "- x": x -> '-' (its gold head, punctuation)
    a1 = pointer_map(5, {0: 0, 1: 3, 2: 3, 3: 1, 4: 0})[None, None]
    a2 = pointer_map(4, {0: 0, 1: 2, 2: 1, 3: 0})[None, None]
    store = make_store(tmp_path / "s", [DBP, DASH], [a1, a2])
    every = ha.score_heads(store, compare_punct_candidates=True)
    nop = ha.score_heads(store, exclude_punct_candidates=True, compare_punct_candidates=True)
    # every word a candidate: nsubj dep2head wrong (-> '.'), head2dep wrong ('.' attends most to dogs)
    assert every.counts_for("nsubj")[0][0, 0].tolist() == [0, 0]
    assert every.counts_for("dep")[0][0, 0].tolist() == [1, 1]  # x -> '-'; '-' attends most to x
    # no punctuation candidate: nsubj right both ways; x has no candidate left
    assert nop.counts_for("nsubj")[0][0, 0].tolist() == [1, 1]
    assert nop.counts_for("dep")[0][0, 0].tolist() == [0, 0]
    assert np.array_equal(every.correct_alt, nop.correct) and np.array_equal(nop.correct_alt, every.correct)
    assert every.punct_words.sum() == 2 and every.punct_gold_head.tolist() == [
        1 if r == "dep" else 0 for r in every.relations]
    plain = ha.score_heads(store)
    assert np.array_equal(plain.correct, every.correct) and plain.correct_alt is None
    df = ta.table1(every, min_count=1, bootstrap=0).set_index("relation")
    assert list(df.columns[-len(ta.NOPUNCT_COLUMNS):]) == ta.NOPUNCT_COLUMNS
    assert df.loc["nsubj", "nopunct_accuracy"] == 1.0 and df.loc["nsubj", "nopunct_delta"] == 1.0
    assert df.loc["nsubj", "nopunct_head"] == "1-1" and df.loc["nsubj", "nopunct_direction"] == "dep2head"
    assert df.loc["dep", "nopunct_delta"] == -1.0 and df.loc["dep", "gold_head_punct"] == 1
    # All: 5 words; every candidate: dep2head right on '.'? no ('.' -> dogs, gold bark); x right -> 1 of 5
    assert df.loc["All", "accuracy"] == pytest.approx(1 / 5)
    assert df.loc["All", "nopunct_accuracy"] == pytest.approx(1 / 5)  # dogs right, x lost
    # with the switch on, the main columns are the no-punctuation ones and the delta is the same
    df_on = ta.table1(nop, min_count=1, bootstrap=0).set_index("relation")
    assert df_on.loc["nsubj", "accuracy"] == 1.0
    assert df_on.nopunct_delta.tolist() == df.nopunct_delta.tolist()


# Four sentences "w1 w2 w3": w1 -det-> w2 (root), w3 -dobj-> w2; w2 attends to [CLS]. dep2head targets
# of w1 / w3 per sentence: head 1-1 [2,2,2,3] / [2,2,1,1], head 1-2 [2,3,3,3] / [2,2,2,1].
# By hand: det 1-1 d->h 3/4 (1-2 h->d also 3/4: tie -> 1-1 d->h), runner-up 1-2 h->d; dobj 1-2 d->h
# 3/4, runner-up 1-1 d->h 2/4; All 1-1 d->h 5/12, runner-up 1-2 d->h 4/12; offsets (-1, +1): det +1
# 4/4, dobj -1 4/4, All -1 4/12 (tie with +1 -> first).
T11 = ([2, 2, 2, 3], [2, 2, 1, 1])
T12 = ([2, 3, 3, 3], [2, 2, 2, 1])


def paired_store(path: Path, repeat: int = 3) -> AttentionStore:
    sents, maps = [], []
    for rep in range(repeat):
        for s in range(4):
            heads = [pointer_map(5, {0: 0, 1: t[0][s], 2: 0, 3: t[1][s], 4: 0}) for t in (T11, T12)]
            sents.append({"id": f"r{rep}s{s}", "words": ["w1", "w2", "w3"], "heads": [2, 0, 2],
                          "rels": ["det", "root", "dobj"]})
            maps.append(np.stack(heads)[None])
    return make_store(path, sents, maps)


def test_paired_counts_hand_built(tmp_path):
    store = paired_store(tmp_path / "p", repeat=1)
    sc = ha.score_heads(store, offsets=(-1, 1))
    assert sc.counts_for("det")[0][0].tolist() == [[3, 2], [1, 3]]  # [head, direction]
    assert sc.counts_for("dobj")[0][0].tolist() == [[2, 0], [3, 0]]
    b, c = sp.paired_counts(store, sc, [
        ("det", ("head", 0, 0, 0), ("offset", 1)),  # 1-1 d->h vs +1
        ("All", ("head", 0, 0, 0), ("offset", 0)),  # 1-1 d->h vs -1
        ("All", ("head", 0, 0, 0), ("head", 0, 1, 0)),  # 1-1 d->h vs 1-2 d->h
        ("dobj", ("head", 0, 1, 0), ("head", 0, 0, 0)),
    ])
    assert b.shape == c.shape == (4, 4)
    assert b.sum(axis=0).tolist() == [0, 3, 2, 1]
    assert c.sum(axis=0).tolist() == [1, 2, 1, 0]
    assert b[:, 1].tolist() == [1, 1, 1, 0] and c[:, 1].tolist() == [0, 0, 1, 1]  # per sentence
    with pytest.raises(BertlookError, match="bad predictor"):
        sp.paired_counts(store, sc, [("det", ("head", 0, 0, 0), ("offset", 5))])


def test_table1_paired_columns_hand_built(tmp_path):
    store = paired_store(tmp_path / "p", repeat=3)
    sc = ha.score_heads(store, offsets=(-1, 1))
    df = ta.table1(sc, min_count=1, bootstrap=0, paired=True).set_index("relation")
    assert df.index.tolist() == ["All", "det", "dobj"]
    assert list(df.columns[-len(ta.PAIRED_COLUMNS):]) == ta.PAIRED_COLUMNS
    assert df.best_head.tolist() == ["1-1", "1-1", "1-2"] and df.baseline_offset.tolist() == [-1, 1, -1]
    assert df.runner_up_head.tolist() == ["1-2", "1-2", "1-1"]
    assert df.runner_up_direction.tolist() == ["dep2head", "head2dep", "dep2head"]
    assert df.runner_up_accuracy.tolist() == pytest.approx([12 / 36, 9 / 12, 6 / 12])
    assert df.vs_baseline_b.tolist() == [9, 0, 0] and df.vs_baseline_c.tolist() == [6, 3, 3]
    assert df.vs_runner_up_b.tolist() == [6, 0, 3] and df.vs_runner_up_c.tolist() == [3, 0, 0]
    assert df.vs_baseline_diff.tolist() == pytest.approx([3 / 36, -3 / 12, -3 / 12])
    assert np.allclose(df.vs_baseline_diff, df.accuracy - df.baseline_accuracy)
    p_all = 2 * (1 + 15 + 105 + 455 + 1365 + 3003 + 5005) / 2 ** 15  # McNemar(9, 6)
    assert df.vs_baseline_p.tolist() == pytest.approx([p_all, 0.25, 0.25])
    assert df.vs_runner_up_p.tolist() == pytest.approx([2 * (1 + 9 + 36 + 84) / 512, 1.0, 0.25])
    # Holm, vs baseline: sorted 0.25, 0.25, 0.607 -> 0.75, max(0.75, 0.5), max(0.75, 0.607)
    assert df.vs_baseline_p_holm.tolist() == pytest.approx([0.75, 0.75, 0.75])
    # vs runner-up: sorted 0.25 (dobj), 0.508 (All), 1 (det) -> 0.75, min(1, 1.016), 1
    assert df.vs_runner_up_p_holm.tolist() == pytest.approx([1.0, 1.0, 0.75])
    assert df.vs_baseline_significant.tolist() == [False, False, False]
    assert df[["vs_baseline_diff_ci_low", "vs_runner_up_diff_ci_high"]].isna().all().all()  # bootstrap 0
    loose = ta.table1(sc, min_count=1, bootstrap=0, paired=True, alpha=0.8).set_index("relation")
    assert loose.vs_baseline_significant.tolist() == [True, True, True]
    assert loose.vs_runner_up_significant.tolist() == [False, False, True]
    with pytest.raises(BertlookError, match="alpha"):
        ta.table1(sc, min_count=1, bootstrap=0, paired=True, alpha=1.0)


def test_paired_bootstrap_of_difference(tmp_path):
    store = random_store(tmp_path / "r", n_sent=40, seed=2)
    sc = ha.score_heads(store)
    plain = ta.table1(sc, min_count=5, bootstrap=300, seed=7)
    df = ta.table1(sc, min_count=5, bootstrap=300, seed=7, paired=True)
    pd.testing.assert_frame_equal(df[plain.columns], plain)  # the paper-twin columns do not move
    sel = [(r, *ha.head_index_of_label(h), ha.DIRECTIONS.index(d))
           for r, h, d in zip(df.relation, df.best_head, df.direction)]
    k = [sc.offsets.index(o) for o in df.baseline_offset]
    b, c = sp.paired_counts(store, sc, [(r, ("head", l, h, d), ("offset", kk)) for (r, l, h, d), kk in zip(sel, k)])
    den = np.stack([sc.sentence_counts.sum(axis=1) if r == "All" else sc.sentence_counts[:, sc.relations.index(r)]
                    for r in df.relation], axis=1)  # [sentence, row]
    low, high = ta.bootstrap_ci(b - c, den, replicates=300, seed=7)
    assert np.allclose(df.vs_baseline_diff_ci_low, low) and np.allclose(df.vs_baseline_diff_ci_high, high)
    assert (df.vs_baseline_diff_ci_low <= df.vs_baseline_diff + 1e-12).all()
    assert (df.vs_baseline_diff <= df.vs_baseline_diff_ci_high + 1e-12).all()
    assert df.vs_baseline_b.tolist() == b.sum(axis=0).tolist()
    with pytest.raises(BertlookError, match="dev store"):
        ta.table1(synthetic_scores({"det": 10}, {}), min_count=1, bootstrap=0, paired=True)


def test_crossfit_folds_and_choice():
    fold = ha.crossfit_folds(7, 3)
    order = np.random.default_rng(3).permutation(7)
    assert fold.tolist() == [0 if i in order[:4].tolist() else 1 for i in range(7)]
    assert np.array_equal(ha.crossfit_folds(7, 3), fold) and not np.array_equal(ha.crossfit_folds(7, 4), fold)
    # hand-made fold counts: det (4 + 4 words), heads [1, 2, 2]; fold A best 1-1 d->h (3), fold B best
    # 1-2 d->h (2): 1-1 scores 1 on B, 1-2 scores 1 on A -> (1 + 1) / 8, below both in-fold maxima
    sc = synthetic_scores({"det": 8}, {})
    sc.fold_correct = np.array([[[[[3, 0], [1, 0]]]], [[[[1, 0], [2, 0]]]]])  # [fold, relation, layer, head, dir]
    sc.fold_word_counts = np.array([[4], [4]])
    row = ta._crossfit_row(sc, "det")
    assert row == {"crossfit_head_a": "1-1", "crossfit_direction_a": "dep2head", "crossfit_head_b": "1-2",
                   "crossfit_direction_b": "dep2head", "crossfit_accuracy": 0.25}
    sc.fold_word_counts = np.array([[4], [0]])
    assert np.isnan(ta._crossfit_row(sc, "det")["crossfit_accuracy"])


def test_crossfit_scores_sum_to_totals(tmp_path):
    store = random_store(tmp_path / "r", n_sent=21, seed=5)
    sc = ha.score_heads(store, crossfit_seed=11)
    assert np.array_equal(sc.fold_correct.sum(axis=0), sc.correct)
    assert np.array_equal(sc.fold_word_counts.sum(axis=0), sc.word_counts)
    assert (sc.fold_of == 0).sum() == 11 and np.array_equal(sc.fold_of, ha.crossfit_folds(21, 11))
    df = ta.table1(sc, min_count=5, bootstrap=0).set_index("relation")
    assert list(df.columns[-len(ta.CROSSFIT_COLUMNS):]) == ta.CROSSFIT_COLUMNS
    corr_a, n_a = sc.fold_counts_for("All", 0)
    corr_b, n_b = sc.fold_counts_for("All", 1)
    la, hh, da = ta._best(corr_a)
    lb, hb, db = ta._best(corr_b)
    assert df.loc["All", "crossfit_head_a"] == f"{la + 1}-{hh + 1}"
    assert df.loc["All", "crossfit_accuracy"] == pytest.approx((corr_b[la, hh, da] + corr_a[lb, hb, db]) / (n_a + n_b))
    assert (df.crossfit_accuracy <= df.accuracy + 1e-12).all()  # never above choosing on all the data


def test_paper_columns_stay_before_the_additions(tmp_path):
    store = paired_store(tmp_path / "p", repeat=1)
    sc = ha.score_heads(store, offsets=(-1, 1), compare_punct_candidates=True, crossfit_seed=0)
    df = join_table1(ta.table1(sc, min_count=1, bootstrap=0, paired=True))
    assert df.columns.tolist() == (ta.TABLE1_COLUMNS + TABLE1_PAPER_COLUMNS + ta.CROSSFIT_COLUMNS
                                   + ta.PAIRED_COLUMNS + ta.NOPUNCT_COLUMNS)
    md = table1_markdown(df, title="t", corpus_note="n")
    assert "| Cross-fit heads (A / B) | Cross-fit accuracy |" in md
    det = next(line for line in md.splitlines() if line.startswith("| det | 4 | -25.0"))
    assert "0 / 1" in det and "1-2 h\u2192d 75.0" in det
    assert "alpha = 0.05" in md and "## Candidate sets" in md and "heads.exclude_punct_candidates: false" in md


def test_cli_exclude_punct_candidates_and_bad_alpha(tmp_path):
    dev = random_store(tmp_path / "dev", n_sent=12, seed=3)
    out = tmp_path / "out"
    argv = ["heads", "--dev-attention", str(dev.path), "--out-accuracy", str(out / "a.csv"),
            "--out-table", str(out / "t.csv"), "--out-markdown", str(out / "t.md"), "--out-figure",
            str(out / "f.png"), "--summary", str(out / "s.json"), "--min-count", "3", "--bootstrap", "20",
            "--treebank-kind", "silver"]
    assert run_cli(argv + ["--exclude-punct-candidates", "--alpha", "0.1"]) == 0
    t1 = pd.read_csv(out / "t.csv", keep_default_na=False)
    every = ha.score_heads(dev)
    nop = ha.score_heads(dev, exclude_punct_candidates=True)
    assert np.array_equal(pd.read_csv(out / "a.csv").accuracy.to_numpy(), ha.head_accuracy_table(nop).accuracy.to_numpy())
    assert t1.accuracy.tolist() == t1.nopunct_accuracy.tolist()
    assert t1.accuracy.iloc[0] == pytest.approx(nop.correct.sum(axis=0).max() / nop.n_words)  # All
    assert t1.nopunct_delta.iloc[0] == pytest.approx((nop.correct.sum(axis=0).max() - every.correct.sum(axis=0).max())
                                                     / every.n_words)
    summary = json.loads((out / "s.json").read_text())
    assert summary["exclude_punct_candidates"] is True and summary["alpha"] == 0.1
    assert "heads.exclude_punct_candidates: true" in (out / "t.md").read_text()
    assert "alpha = 0.1" in (out / "t.md").read_text()
    with pytest.raises(BertlookError, match="alpha"):
        run_cli(argv + ["--alpha", "1.5"])


def test_fragile_decisions_by_hand():
    """A word's correctness is fragile when it rests on a float16 near-tie (one ulp): a correct word whose
    runner-up is within one ulp of its pick, a wrong word whose gold head is within one ulp of the pick."""
    W = 3
    a = np.zeros((1, 1, W + 2, W + 2), dtype=np.float16)  # [layer, head, query, key]: [CLS] w1 w2 w3 [SEP]
    below = np.nextafter(np.float16(0.3), np.float16(0))  # one float16 ulp under 0.3
    a[0, 0, 1, 2:4] = [0.25, 0.25]  # w1 -> w2 = w3: a tie, argmax w2 (= gold): correct, fragile
    a[0, 0, 2, [1, 3]] = [0.5, 0.25]  # w2 -> w1 (gold), far ahead: correct, not fragile
    a[0, 0, 3, [1, 2]] = [0.3, below]  # w3 -> w1, but gold w2 one ulp under: wrong, fragile
    gold = np.array([2, 1, 2])
    dec = ha.decision_blocks(a, W)
    pred = ha.predict_from_decision(dec, W)  # [layer, head, direction, word]
    assert pred[0, 0, 0].tolist() == [2, 1, 1]
    frag = ha.fragile_decisions(dec, pred, gold)
    assert frag[0, 0, 0].tolist() == [True, False, True]
    # two ulps apart is not fragile; a ROOT word (gold 0) never is
    a[0, 0, 3, 2] = np.nextafter(below, np.float16(0))
    dec = ha.decision_blocks(a, W)
    assert ha.fragile_decisions(dec, ha.predict_from_decision(dec, W), gold)[0, 0, 0].tolist() == [True, False, False]
    assert not ha.fragile_decisions(dec, ha.predict_from_decision(dec, W), np.array([0, 0, 0])).any()
    # float maps (rollout): within 2**-10 of the larger value
    f = a.astype(np.float32)
    f[0, 0, 3, [1, 2]] = [0.3, 0.3 * (1 - 2.0**-11)]
    dec = ha.decision_blocks(f, W)
    assert ha.fragile_decisions(dec, ha.predict_from_decision(dec, W), gold)[0, 0, 0].tolist() == [True, False, True]


def test_scores_count_fragile_words_and_selection_candidates(tmp_path):
    """score_heads counts the near-tied words per relation, head and direction (head_accuracy.csv's
    `fragile`), by the same rule as fragile_decisions; selection_candidates lists the heads within the window
    of each choice, with those counts."""
    store = random_store(tmp_path / "s", n_sent=20)
    scores = ha.score_heads(store, crossfit_seed=0, compare_punct_candidates=True)
    assert scores.fragile.shape == scores.correct.shape
    assert (scores.fragile <= scores.word_counts[:, None, None, None]).all()
    # a store of float16 ties: every row of every head spread evenly -> many fragile words
    tie = make_store(tmp_path / "tie", [DCC], [np.full((1, 2, 5, 5), 0.2)])
    t = ha.score_heads(tie)
    assert t.fragile.sum() > 0
    table = ta.table1(scores, min_count=0, dev_store=store, bootstrap=0)
    sel = ta.selection_candidates(table, scores, window=10**6)
    best = sel["All"]["best"]
    first = best["candidates"][0]
    assert best["n"] == scores.n_words and first["head"] == table.iloc[0]["best_head"]
    assert {"words", "fragile", "eval_words", "eval_fragile", "direction"} <= set(first)
    assert all(c["words"] <= first["words"] for c in best["candidates"])
    assert len(best["candidates"]) == 2 * store.num_layers * store.num_heads  # an unlimited window: every head
    assert set(sel["All"]) >= {"best", "runner_up", "crossfit_a", "crossfit_b", "nopunct"}
    narrow = ta.selection_candidates(table, scores, window=0)
    assert all(c["words"] == narrow["All"]["best"]["candidates"][0]["words"]
               for c in narrow["All"]["best"]["candidates"])
