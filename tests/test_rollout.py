"""Tests for bertlook.analyses.rollout (attention rollout, Abnar & Zuidema 2020) and `bertlook rollout`."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses import heads as ha
from bertlook.analyses.rollout import (
    COLUMNS,
    PARTIAL_KIND,
    RolloutStore,
    RolloutTable1Options,
    compute_rollout_stats,
    reduce_rollout,
    rollout,
    rollout_partial,
    run_rollout,
)
from bertlook.analyses.table1 import table1
from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.cli import main
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import load_partial, save_partial
from bertlook.testing.synthetic_stores import write_synthetic_word_store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# ---------------------------------------------------------------------------------------------
# The hand example: 2 layers x 2 heads, 3 tokens.
I3 = np.eye(3)
TO_FIRST = np.array([[1, 0, 0], [1, 0, 0], [1, 0, 0]], dtype=float)
UNIFORM3 = np.full((3, 3), 1 / 3)
TO_LAST = np.array([[0, 0, 1], [0, 0, 1], [0, 0, 1]], dtype=float)
MAPS = np.stack([np.stack([I3, TO_FIRST]), np.stack([UNIFORM3, TO_LAST])])  # [layer, head, query_pos, key_pos]
# layer 1: mean_h = [[1,0,0],[1/2,1/2,0],[1/2,0,1/2]]; A_hat_1 = 0.5 mean_h + 0.5 I:
A_HAT_1 = np.array([[1, 0, 0], [1 / 4, 3 / 4, 0], [1 / 4, 0, 3 / 4]])
# layer 2: mean_h = every row [1/6, 1/6, 2/3]; A_hat_2 = 0.5 mean_h + 0.5 I:
A_HAT_2 = np.array([[7, 1, 4], [1, 7, 4], [1, 1, 10]]) / 12
# R_1 = A_hat_1; R_2 = A_hat_2 @ R_1, row by row:
#   row 0: 7/12 [1,0,0] + 1/12 [1/4,3/4,0] + 4/12 [1/4,0,3/4] = [33, 3, 12] / 48
#   row 1: 1/12 [1,0,0] + 7/12 [1/4,3/4,0] + 4/12 [1/4,0,3/4] = [15, 21, 12] / 48
#   row 2: 1/12 [1,0,0] + 1/12 [1/4,3/4,0] + 10/12 [1/4,0,3/4] = [15, 3, 30] / 48
R_1 = A_HAT_1
R_2 = np.array([[33, 3, 12], [15, 21, 12], [15, 3, 30]]) / 48


def smoothed_entropy(row) -> float:
    n = len(row)
    return -sum(q * math.log(q) for q in (0.9999 * p + 0.0001 / n for p in row))


def make_store(path, examples, *, meta=None, level="token"):
    L, H = examples[0][1].shape[:2]
    with AttentionWriter(path, num_layers=L, num_heads=H, level=level, meta=meta) as w:
        for i, (tokens, attn) in enumerate(examples):
            w.add({"id": i, "tokens": tokens}, attn)
    return AttentionStore(path)


def random_maps(rng, L, H, n):
    logits = rng.standard_normal((L, H, n, n)) * 2.0  # [layer, head, query_pos, key_pos]
    a = np.exp(logits)  # [layer, head, query_pos, key_pos]
    return a / a.sum(-1, keepdims=True)  # [layer, head, query_pos, key_pos]


def random_examples(seed=0, count=9, L=3, H=2):
    rng = np.random.default_rng(seed)
    vocab = ["a", "b", ".", ",", "c"]
    out = []
    for _ in range(count):
        n = int(rng.integers(4, 11))
        toks = ["[CLS]", *[vocab[int(i)] for i in rng.integers(0, len(vocab), n - 3)], "[SEP]", "[SEP]"]
        out.append((toks, random_maps(rng, L, H, n)))
    return out


# --------------------------------------------------------------------------------------------- rollout
def test_hand_computed_three_token_example():
    r = rollout(MAPS)
    assert r.shape == (2, 3, 3) and r.dtype == np.float64
    np.testing.assert_allclose(r[0], R_1, rtol=0, atol=1e-15)
    np.testing.assert_allclose(r[1], R_2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(R_2, A_HAT_2 @ A_HAT_1, atol=1e-15)  # the hand rows are the product


def test_rows_sum_to_one():
    r = rollout(random_maps(np.random.default_rng(1), 6, 4, 17))
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-12)
    assert (r >= 0).all()


def test_rows_are_renormalised():
    a = MAPS * 1.001  # rows summing to 1.001 (e.g. float16 rounding): renormalised anyway
    np.testing.assert_allclose(rollout(a).sum(-1), 1.0, atol=1e-12)


def test_identity_maps_give_identity_rollout():
    r = rollout(np.broadcast_to(np.eye(5), (4, 3, 5, 5)))
    np.testing.assert_array_equal(r, np.broadcast_to(np.eye(5), (4, 5, 5)))


def test_bad_shape_is_an_error():
    with pytest.raises(BertlookError, match="shape"):
        rollout(np.ones((2, 3, 3)))


# ------------------------------------------------------------------------------ per-layer statistics
def test_shares_and_entropy_on_hand_store(tmp_path):
    # example 0: the hand maps with tokens [CLS] . [SEP]; example 1: identity maps, [CLS] a , [SEP]
    ex0 = (["[CLS]", ".", "[SEP]"], MAPS)
    ex1 = (["[CLS]", "a", ",", "[SEP]"], np.broadcast_to(np.eye(4), (2, 2, 4, 4)).copy())
    frame, summary = compute_rollout_stats(make_store(tmp_path / "s", [ex0, ex1], meta={"map": "norm"}))
    assert list(frame.columns) == COLUMNS and list(frame["layer"]) == [1, 2]
    # example 0, layer 1 (R_1 columns summed / 3): [CLS] 1.5/3, "." 0.75/3, [SEP] 0.75/3, other 0
    # example 0, layer 2: [CLS] 63/144, "." 27/144, [SEP] 54/144; example 1 (R = I): 1/4 to each token
    exp = {
        "cls": [(0.5 + 0.25) / 2, (63 / 144 + 0.25) / 2],
        "punct": [(0.25 + 0.25) / 2, (27 / 144 + 0.25) / 2],
        "sep": [(0.25 + 0.25) / 2, (54 / 144 + 0.25) / 2],
        "other": [(0 + 0.25) / 2, (0 + 0.25) / 2],
    }
    h_onehot4 = smoothed_entropy([1, 0, 0, 0])
    exp["entropy"] = [(np.mean([smoothed_entropy(row) for row in R]) + h_onehot4) / 2 for R in (R_1, R_2)]
    for col, values in exp.items():
        # the stored maps are float16 (1/3 is not exact): 1e-3
        np.testing.assert_allclose(frame[col], values, rtol=1e-3, atol=1e-4, err_msg=col)
    np.testing.assert_allclose(frame[["cls", "sep", "punct", "other"]].sum(axis=1), 1.0, atol=1e-9)
    assert frame["uniform_entropy"].tolist() == pytest.approx([(math.log(3) + math.log(4)) / 2] * 2)
    assert summary["n_examples"] == 2 and summary["map"] == "norm" and summary["mean_tokens"] == 3.5
    assert summary["excluded"] == {"not selected (max_examples)": 0}


def test_max_examples_counts_the_rest(tmp_path):
    store = make_store(tmp_path / "s", random_examples(count=5))
    frame, summary = compute_rollout_stats(store, max_examples=2)
    assert summary["n_examples"] == 2 and summary["excluded"] == {"not selected (max_examples)": 3}


def test_sharded_equals_unsharded(tmp_path):
    examples = random_examples(seed=3, count=9)
    full = make_store(tmp_path / "full", examples)
    shards = [make_store(tmp_path / f"s{i}", part) for i, part in
              enumerate((examples[:4], examples[4:5], examples[5:]))]
    ref, ref_summary = compute_rollout_stats(full)
    paths = []
    for i, s in enumerate(shards):
        meta, arrays = rollout_partial(s)
        paths.append(save_partial(tmp_path / f"p{i}.npz", PARTIAL_KIND, meta, arrays))
    frame, summary = reduce_rollout([load_partial(p, PARTIAL_KIND) for p in paths], where=paths)
    np.testing.assert_allclose(frame.to_numpy(float), ref.to_numpy(float), rtol=1e-12, atol=1e-15)
    assert summary["n_examples"] == ref_summary["n_examples"] == 9
    # one partial is bit-identical to the unsharded path
    one, _ = reduce_rollout([rollout_partial(full)])
    pd.testing.assert_frame_equal(one, ref, check_exact=True)


def test_partials_of_other_models_do_not_mix(tmp_path):
    a = make_store(tmp_path / "a", random_examples(count=2, L=3))
    b = make_store(tmp_path / "b", random_examples(count=2, L=2))
    with pytest.raises(BertlookError, match="num_layers"):
        reduce_rollout([rollout_partial(a), rollout_partial(b)])


# ----------------------------------------------------------------------------- Table 1 on rollout
def test_rollout_store_through_score_heads(tmp_path):
    base = write_synthetic_word_store(tmp_path / "w", n_sentences=12, num_layers=3, num_heads=4,
                                      min_words=4, max_words=12, seed=5)
    view = RolloutStore(base)
    assert (view.num_layers, view.num_heads, len(view), view.level) == (3, 1, 12, "word")
    assert view.meta["map"] == "rollout" and view.get(0).shape[:2] == (3, 1)
    np.testing.assert_allclose(view.get(0).sum(-1), 1.0, atol=1e-9)  # word-level rows still sum to 1
    scores = ha.score_heads(view)
    assert scores.correct.shape[1:] == (3, 1, 2)
    r = scores.relation_index("dep")
    # direct computation: dep2head argmax of the word block of each layer's rollout, diagonal excluded
    direct = np.zeros(3, dtype=int)
    count = 0
    for k, rec in enumerate(base.records):
        W = rec["n"] - 2
        gold = np.asarray(rec["heads"])
        is_dep = np.asarray(rec["rels"]) == "dep"
        count += int(is_dep.sum())
        a = base.get(k).astype(np.float64)
        a_hat = 0.5 * a.mean(axis=1) + 0.5 * np.eye(W + 2)
        a_hat /= a_hat.sum(-1, keepdims=True)
        R = a_hat[0]
        for layer in range(3):
            if layer:
                R = a_hat[layer] @ R
            block = R[1:W + 1, 1:W + 1].astype(np.float32).copy()
            np.fill_diagonal(block, -np.inf)
            pred = block.argmax(-1) + 1
            direct[layer] += int(((pred == gold) & (gold > 0) & is_dep).sum())
    assert scores.word_counts[r] == count
    np.testing.assert_array_equal(scores.correct[r, :, 0, 0], direct)
    assert direct.sum() > 0

    table = table1(scores, min_count=1, dev_store=view, bootstrap=50, seed=1,
                   forced_relations=ha.FORCED_BY_SCHEME["ud"])
    assert all(str(h).endswith("-1") for h in table["best_head"])
    assert table["ci_low"].notna().all() and (table["ci_low"] <= table["accuracy"] + 1e-12).all()
    acc = ha.head_accuracy_table(scores)
    assert set(acc["head"]) == {1} and set(acc["layer"]) == {1, 2, 3}


def test_run_rollout_without_the_cli(tmp_path):
    """The rollout step as a library call: the statistics and Table 1 on rollout with the summary the CLI
    writes; partial sums give the same statistics."""
    tok = make_store(tmp_path / "tok", random_examples(count=5))
    write_synthetic_word_store(tmp_path / "w", n_sentences=8, num_layers=3, num_heads=2, min_words=4,
                               max_words=9, seed=1)
    options = RolloutTable1Options(min_count=1, bootstrap=0, treebank_kind="ud", max_sentences=6)
    res = run_rollout(tok, word_attention=tmp_path / "w", max_examples=4, table1_options=options)
    assert list(res.summary) == ["stats", "table1"]
    stats, t = res.summary["stats"], res.summary["table1"]
    frame, expected = compute_rollout_stats(tok, max_examples=4)
    pd.testing.assert_frame_equal(res.stats, frame)
    assert stats == {"attention": str(tok.path), **expected} and stats["n_examples"] == 4
    assert t["word_attention"] == str(tmp_path / "w") and t["map"] == "rollout" and t["rollout_of"] == "attention"
    assert (t["treebank_kind"], t["relation_scheme"], t["n_sentences"], t["n_sentences_in_store"]) == ("ud", "ud", 6, 8)
    assert t["excluded"] == {"not selected (max_examples)": 2} and t["num_layers"] == 3
    assert t["rows"] == res.table["relation"].tolist() and set(t["best_layer"]) == set(t["rows"])
    assert t["best_layer"]["All"]["layer"] == int(res.table["best_head"].iloc[0].split("-")[0])
    assert res.scores.num_heads == 1 and set(res.accuracy["layer"]) == {1, 2, 3}
    json.dumps(res.summary)
    # the statistics only, from partial sums; Table 1 only
    save_partial(tmp_path / "p.npz", PARTIAL_KIND, *rollout_partial(tok, max_examples=4))
    part = run_rollout(partials=[tmp_path / "p.npz"])
    assert list(part.summary) == ["stats"] and part.table is None and part.scores is None
    pd.testing.assert_frame_equal(part.stats, frame)
    only = run_rollout(word_attention=tmp_path / "w", table1_options=options)
    assert list(only.summary) == ["table1"] and only.stats is None and only.summary["table1"] == t
    with pytest.raises(BertlookError, match="not both"):
        run_rollout(tok, partials=[tmp_path / "p.npz"])
    with pytest.raises(BertlookError, match="give"):
        run_rollout()


# ------------------------------------------------------------------------------------------- CLI
def test_cli_end_to_end(tmp_path, capsys):
    make_store(tmp_path / "tok", random_examples(count=6))
    write_synthetic_word_store(tmp_path / "w", n_sentences=10, num_layers=3, num_heads=2, min_words=4,
                               max_words=10, seed=2)
    out = tmp_path / "o"
    rc = main(["rollout", "--attention", str(tmp_path / "tok"), "--out", str(out / "rollout_stats.csv"),
               "--out-figure", str(out / "fig_rollout.png"), "--summary", str(out / "rollout.summary.json"),
               "--word-attention", str(tmp_path / "w"), "--treebank-kind", "ud",
               "--out-table", str(out / "rollout_table1.csv"), "--out-markdown", str(out / "rollout_table1.md"),
               "--out-accuracy", str(out / "rollout_accuracy.csv"), "--min-count", "1", "--bootstrap", "20"])
    assert rc == 0
    frame = pd.read_csv(out / "rollout_stats.csv")
    assert list(frame.columns) == COLUMNS and len(frame) == 3
    assert (out / "fig_rollout.png").read_bytes()[:8] == PNG_MAGIC
    table = pd.read_csv(out / "rollout_table1.csv")
    assert table["relation"].iloc[0] == "All" and all(h.endswith("-1") for h in table["best_head"])
    assert not any(c.startswith("paper") for c in table.columns)
    md = (out / "rollout_table1.md").read_text()
    assert "rollout up to layer L" in md and "Paper" not in md
    summary = json.loads((out / "rollout.summary.json").read_text())
    assert summary["stats"]["n_examples"] == 6 and summary["table1"]["n_sentences"] == 10
    assert "All" in summary["table1"]["best_layer"]
    assert "6 of 6 examples" in capsys.readouterr().out

    # sharded CLI path: --out-partial then --partial gives the same table
    rc = main(["rollout", "--attention", str(tmp_path / "tok"), "--out-partial", str(out / "p.npz")])
    assert rc == 0
    rc = main(["rollout", "--partial", str(out / "p.npz"), "--out", str(out / "r2.csv"),
               "--summary", str(out / "r2.json")])
    assert rc == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "r2.csv"), frame)


def test_cli_missing_store(tmp_path, capsys):
    rc = main(["rollout", "--attention", str(tmp_path / "nope"), "--out", str(tmp_path / "a.csv"),
               "--summary", str(tmp_path / "s.json")])
    assert rc == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "a.csv").exists() and not (tmp_path / "s.json").exists()


def test_cli_partial_of_another_step(tmp_path, capsys):
    p = save_partial(tmp_path / "stats.npz", "surface-stats", {"n_examples": 1}, {"sums": np.zeros(3)})
    rc = main(["rollout", "--partial", str(p), "--out", str(tmp_path / "a.csv"), "--summary", str(tmp_path / "s.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "error:" in err and "stats.npz" in err and "surface-stats" in err
    assert not (tmp_path / "a.csv").exists()


def test_cli_word_store_failure_writes_nothing(tmp_path, capsys):
    make_store(tmp_path / "tok", random_examples(count=2))
    out = tmp_path / "o"
    # a token-level store given as the word store: error, and not even the statistics are written
    rc = main(["rollout", "--attention", str(tmp_path / "tok"), "--out", str(out / "r.csv"),
               "--summary", str(out / "s.json"), "--word-attention", str(tmp_path / "tok"),
               "--treebank-kind", "ud", "--out-table", str(out / "t.csv"), "--out-markdown", str(out / "t.md"),
               "--out-accuracy", str(out / "a.csv")])
    assert rc == 2
    assert "word-level" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
