"""Single-head trees (tree-heads, Htut et al. 2019) and the spanning-tree decoders of analyses/trees.py."""

from __future__ import annotations

import importlib.util
import itertools
import json

import numpy as np
import pandas as pd
import pytest
from scipy.sparse.csgraph import minimum_spanning_tree

from bertlook.analyses.trees import (
    chu_liu_edmonds,
    chu_liu_edmonds_batch,
    gold_root_scores,
    max_spanning_tree_batch,
)
from bertlook.analyses.tree_heads import (
    BEST_COLUMNS,
    HEAD_COLUMNS,
    baseline_counts,
    best_heads,
    gold_root_right_branching,
    run_tree_heads,
    sentence_trees,
    tree_heads,
)
from bertlook.attention.store import AttentionWriter
from bertlook.errors import BertlookError
from bertlook.io_utils import json_safe
from workflow_helpers import ROOT

NEG = -np.inf


# ================================================================================== the decoders
def _tree_score(s: np.ndarray, heads: np.ndarray) -> float:
    return float(sum(s[d, heads[d]] for d in range(1, len(heads))))


def _is_tree(heads: np.ndarray) -> bool:
    n = len(heads)
    for d in range(1, n):
        v, steps = d, 0
        while v != 0:
            v, steps = int(heads[v]), steps + 1
            if steps > n:
                return False
    return heads[0] == -1


def _brute_force(s: np.ndarray) -> float:
    """The best summed score of any arborescence rooted at node 0 (every head assignment tried)."""
    n = s.shape[0]
    best = -np.inf
    for heads in itertools.product(range(n), repeat=n - 1):
        h = np.array((-1, *heads))
        if any(h[d] == d for d in range(1, n)) or not _is_tree(h):
            continue
        best = max(best, _tree_score(s, h))
    return best


def test_batched_cle_breaks_a_cycle_by_hand():
    # words 1 and 2 prefer each other (greedy: a cycle 1 -> 2 -> 1); ROOT is word 1's second choice:
    # breaking the cycle at 1 (1 -> ROOT: 0.4, 2 -> 1: 0.9) = 1.3 beats breaking it at 2 (1 -> 2: 0.6,
    # 2 -> ROOT: 0.1) = 0.7
    s = np.full((3, 3), NEG)
    s[1] = [0.4, NEG, 0.6]
    s[2] = [0.1, 0.9, NEG]
    assert chu_liu_edmonds_batch(s[None])[0].tolist() == [-1, 0, 1] == chu_liu_edmonds(s).tolist()


def test_batched_cle_nested_cycles_by_hand():
    # greedy: 1 <-> 2 (a cycle), 3 -> 1. Contract {1, 2} -> c: c's best entry is 2 -> 3 (0.5 - 0.9 = -0.4)
    # vs 1 -> ROOT (0.3 - 0.8 = -0.5) and 2 -> ROOT (0.0 - 0.9); c <-> 3 is then a cycle: 3 -> c (0.7)
    # vs 3 -> ROOT (0.2, loss 0.5), c -> 3 (-0.4) vs c -> ROOT (-0.5, loss 0.1): break at c: c -> ROOT,
    # i.e. 1 -> ROOT, 2 -> 1, 3 -> 1: 0.3 + 0.9 + 0.7 = 1.9 (every other tree: at most 1.5)
    s = np.full((4, 4), NEG)
    s[1] = [0.3, NEG, 0.8, 0.1]
    s[2] = [0.0, 0.9, NEG, 0.5]
    s[3] = [0.2, 0.7, 0.1, NEG]
    heads = chu_liu_edmonds_batch(s[None])[0]
    assert heads.tolist() == [-1, 0, 1, 1]
    assert _tree_score(s, heads) == pytest.approx(1.9) == pytest.approx(_brute_force(s))


def test_batched_cle_matches_brute_force_and_the_per_matrix_decoder():
    rng = np.random.default_rng(0)
    for trial in range(120):
        n, B = int(rng.integers(2, 7)), int(rng.integers(1, 6))
        s = rng.standard_normal((B, n, n))
        if trial % 3 == 0:
            s = np.round(s)  # ties
        if trial % 4 == 0:  # forbidden edges, every node keeps a finite edge to ROOT
            s[rng.random((B, n, n)) < 0.4] = NEG
            s[:, :, 0] = rng.standard_normal((B, n))
        got = chu_liu_edmonds_batch(s)
        assert got.shape == (B, n)
        for b in range(B):
            m = s[b].copy()
            np.fill_diagonal(m, NEG)
            m[0] = NEG
            assert _is_tree(got[b]), (trial, b)
            assert _tree_score(m, got[b]) == pytest.approx(_brute_force(m))
            assert _tree_score(m, got[b]) == pytest.approx(_tree_score(m, chu_liu_edmonds(s[b])))


def test_batched_cle_larger_matrices_agree_with_the_per_matrix_decoder():
    rng = np.random.default_rng(1)
    s = rng.dirichlet(np.full(30, 0.2), size=(8, 30))  # [batch, node, node]: peaked rows, many cycles
    got = chu_liu_edmonds_batch(s)
    for b in range(8):
        ref = chu_liu_edmonds(s[b])
        m = s[b].copy()
        np.fill_diagonal(m, NEG)
        m[0] = NEG
        assert _is_tree(got[b]) and _tree_score(m, got[b]) == pytest.approx(_tree_score(m, ref))


def test_compiled_cle_gives_the_numpy_forms_trees_ties_included():
    """analyses/trees_numba.py contracts the same cycles in the same order as the numpy form: the same heads
    (not only the same score) on tied, forbidden-edge and attention-like inputs."""
    pytest.importorskip("numba", reason="the compiled decoder needs numba (a pinned dependency)")
    rng = np.random.default_rng(3)
    for trial in range(150):
        n, B = int(rng.integers(2, 12)), int(rng.integers(1, 6))
        s = rng.dirichlet(np.full(n, 0.3), size=(B, n)) if trial % 2 else rng.standard_normal((B, n, n))
        if trial % 3 == 0:
            s = np.round(s, 1)  # many ties
        if trial % 5 == 0:
            s[rng.random((B, n, n)) < 0.3] = NEG
            s[:, :, 0] = rng.standard_normal((B, n))
        compiled, numpy_form = chu_liu_edmonds_batch(s, compiled=True), chu_liu_edmonds_batch(s, compiled=False)
        assert np.array_equal(compiled, numpy_form), trial


def test_batched_cle_input_checks():
    with pytest.raises(ValueError, match=r"\[B, n, n\]"):
        chu_liu_edmonds_batch(np.zeros((3, 3)))
    assert chu_liu_edmonds_batch(np.zeros((2, 1, 1))).tolist() == [[-1], [-1]]


def test_gold_root_scores_fix_the_root():
    w = np.array([[0.0, 0.9, 0.1], [0.5, 0.0, 0.5], [0.2, 0.8, 0.0]])  # [word, word]: dependent, head
    s = gold_root_scores(w, [1])  # word 2 (0-based 1) is the gold root
    assert s[2].tolist() == [0.0, NEG, NEG, NEG]  # the root takes ROOT, and only ROOT
    assert s[1, 0] == NEG and s[3, 0] == NEG  # no other word may take ROOT
    heads = chu_liu_edmonds(s)
    assert heads.tolist() == [-1, 2, 0, 2]  # 1 -> 2 (0.9), 3 -> 2 (0.8)


def test_prim_batch_by_hand_and_against_scipy():
    # 4 nodes: edges 0-1 5, 1-2 1, 0-2 2, 2-3 4, 1-3 3, 0-3 0: the maximum tree is 0-1, 2-3, 1-3 (12)
    w = np.zeros((4, 4))
    for (i, j), v in {(0, 1): 5, (1, 2): 1, (0, 2): 2, (2, 3): 4, (1, 3): 3, (0, 3): 0}.items():
        w[i, j] = w[j, i] = v
    parent = max_spanning_tree_batch(w[None])[0]
    assert parent.tolist() == [-1, 0, 3, 1]
    rng = np.random.default_rng(2)
    for _ in range(40):
        n = int(rng.integers(2, 15))
        x = rng.random((3, n, n))
        x = x + x.transpose(0, 2, 1)
        parents = max_spanning_tree_batch(x)
        for b in range(3):
            ours = sum(x[b, v, parents[b, v]] for v in range(1, n))
            c = x[b].max() + 1.0
            y = c - x[b]
            np.fill_diagonal(y, 0.0)
            t = minimum_spanning_tree(y).tocoo()
            assert len(t.row) == n - 1
            assert ours == pytest.approx(float(sum(c - y[i, j] for i, j in zip(t.row, t.col))))


# ====================================================================== a 4-word sentence by hand
# gold tree: w1 <- w2 (root), w3 <- w2, w4 <- w3; heads 1-based
GOLD = np.array([2, 0, 2, 3])
# word-word attention A[i, j] (rows: the attending word w_{i+1}); the rest of each row goes to [CLS]/[SEP]
WORDS = np.array([
    [0.0, 0.5, 0.15, 0.1],
    [0.3, 0.0, 0.1, 0.2],
    [0.0, 0.2, 0.0, 0.6],
    [0.05, 0.05, 0.5, 0.0],
])


def _full_map(words: np.ndarray) -> np.ndarray:
    """[W+2, W+2] rows summing to 1: [CLS] and [SEP] rows uniform, each word row's rest split over them."""
    W = words.shape[0]
    n = W + 2
    A = np.full((n, n), 1.0 / n)  # [query_word, key_word]
    A[1 : W + 1, 1 : W + 1] = words
    rest = 1.0 - words.sum(axis=1)  # [word]
    A[1 : W + 1, 0] = rest / 2
    A[1 : W + 1, W + 1] = rest / 2
    return A


def _write(path, sentences, *, L=1, H=2):
    """sentences: (forms, heads, rels, [K, W+2, W+2] maps)."""
    with AttentionWriter(path, num_layers=L, num_heads=H, level="word") as w:
        for sid, (forms, heads, rels, maps) in enumerate(sentences):
            W = len(forms)
            rec = {"id": f"s{sid}", "tokens": ["[CLS]", *forms, "[SEP]"], "heads": [int(h) for h in heads],
                   "rels": rels, "upos": ["X"] * W, "xpos": ["XX"] * W}
            w.add(rec, np.asarray(maps).reshape(L, H, W + 2, W + 2))
    return path


def test_hand_computed_sentence_trees():
    """dep2head: greedy w3 -> w4 -> w3 is a cycle; breaking it at w3 (w3 -> w2: 0.5 + 0.2 + 0.5 = 1.2)
    beats breaking it at w4 (w4 -> w1 or w2: 0.5 + 0.6 + 0.05 = 1.15): heads [2, 0, 2, 3], all 3 scored
    words right. head2dep (scores A(h -> d)): w1 -> w2 (0.3); w3: 1 0.15, 2 0.1, 4 0.5; w4: 1 0.1, 2 0.2,
    3 0.6: the cycle w3 <-> w4 broken at w3 (w3 -> w1: 0.3 + 0.15 + 0.6 = 1.05) beats w4 -> w2
    (0.3 + 0.5 + 0.2 = 1.0): heads [2, 0, 1, 3], 2 of 3. Undirected A + A^T: 3-4 1.1, 1-2 0.8, 2-3 0.3,
    2-4 0.25, 1-3 0.15, 1-4 0.15: the tree {3-4, 1-2, 2-3} holds the 3 gold edges."""
    attn = np.stack([_full_map(WORDS), np.full((6, 6), 1.0 / 6)])  # [K, W+2, W+2]; head 2 uniform
    scored = np.array([True, False, True, True])  # the gold root (w2) is not scored
    res = sentence_trees(attn, GOLD, scored)
    assert res["pred"][0, 0].tolist() == [2, 0, 2, 3]
    assert res["pred"][1, 0].tolist() == [2, 0, 1, 3]
    assert res["correct"][:, 0].tolist() == [3, 2]
    assert res["uuas_hits"][0] == 3
    # the uniform head: every word tree is a tree hanging from the gold root (all ties)
    for d in range(2):
        p = res["pred"][d, 1]
        assert p[1] == 0 and (p[[0, 2, 3]] > 0).all()


def test_hand_computed_baselines():
    # right-branching with root w2: w1 -> 2 (right), w2 -> ROOT, w3 -> 4 (wrong), w4 -> the root 2 (wrong):
    # UAS 1/3; its undirected edges 1-2, 3-4, 4-2 hold 1-2 and 3-4 of the gold edges 1-2, 3-2, 4-3: 2/3.
    # The chain 1-2-3-4 holds all three.
    scored = np.array([True, False, True, True])
    assert gold_root_right_branching(GOLD).tolist() == [2, 0, 4, 2]
    assert baseline_counts(GOLD, scored) == {"right_branching_correct": 1, "right_branching_uuas_hits": 2,
                                             "adjacent_chain_uuas_hits": 3}


def test_right_branching_with_several_or_final_roots():
    assert gold_root_right_branching(np.array([2, 3, 0])).tolist() == [2, 3, 0]  # the last word is the root
    assert gold_root_right_branching(np.array([0, 1, 1])).tolist() == [0, 3, 1]  # the last word -> the root
    # two roots (w1, w3): each takes ROOT, the last word the last root
    assert gold_root_right_branching(np.array([0, 1, 0, 3, 4])).tolist() == [0, 3, 0, 5, 3]
    assert gold_root_right_branching(np.array([0])).tolist() == [0]


def test_tree_heads_on_a_hand_written_store(tmp_path):
    """Two sentences: the 4-word one above, and the same with w4 as punctuation (then only w1 and w3 are
    scored: dep2head 2/2, head2dep 1/2, UUAS 2/2, right-branching 1/2 and UUAS 1/2, chain 2/2)."""
    maps = np.stack([_full_map(WORDS), np.full((6, 6), 1.0 / 6)])
    forms = ["the", "cat", "sat", "down"]
    store = _write(tmp_path / "dev", [
        (forms, GOLD, ["det", "root", "dep", "dep"], maps),
        ([*forms[:3], "."], GOLD, ["det", "root", "dep", "punct"], maps),
    ])
    per_head, info = tree_heads(store)
    assert list(per_head.columns) == HEAD_COLUMNS
    head1 = per_head.iloc[0]
    assert (int(head1["layer"]), int(head1["head"]), int(head1["n_words"])) == (1, 1, 5)
    assert head1["uas_dep2head"] == pytest.approx(5 / 5)
    assert head1["uas_head2dep"] == pytest.approx(3 / 5)
    assert head1["uuas"] == pytest.approx(5 / 5)
    assert info["baselines"]["right_branching"] == {"uas": pytest.approx(2 / 5), "uuas": pytest.approx(3 / 5)}
    assert info["baselines"]["adjacent_chain"]["uuas"] == pytest.approx(5 / 5)
    c = info["counts"]
    assert (c["n_sentences"], c["n_words"], c["n_scored_words"], c["n_punct_words_excluded"],
            c["n_root_words_excluded"], c["trees_decoded"]) == (2, 8, 5, 1, 2, 8)
    best = best_heads(per_head, info["baselines"])
    assert list(best.columns) == BEST_COLUMNS
    assert best["row"].tolist() == ["layer 1", "all layers", "right_branching", "adjacent_chain"]
    top = best.iloc[0]
    assert (top["uas_head"], top["uas_direction"], top["uuas_head"]) == ("1-1", "dep2head", "1-1")
    assert top["uas"] == pytest.approx(1.0)
    assert best.iloc[2]["uas"] == pytest.approx(0.4) and pd.isna(best.iloc[3]["uas"])


def test_best_heads_ties_take_the_first_head_and_dep2head():
    per_head = pd.DataFrame({"layer": [1, 1, 2, 2], "head": [1, 2, 1, 2],
                             "uas_dep2head": [0.2, 0.3, 0.1, 0.1], "uas_head2dep": [0.3, 0.1, 0.4, 0.4],
                             "uuas": [0.5, 0.5, 0.6, 0.7], "n_words": [10] * 4})
    base = {"right_branching": {"uas": 0.25, "uuas": 0.5}, "adjacent_chain": {"uas": None, "uuas": 0.55}}
    best = best_heads(per_head, base).set_index("row")
    # layer 1: 1-1 head2dep 0.3 ties 1-2 dep2head 0.3: the first head wins; UUAS tie 0.5: 1-1
    assert (best.loc["layer 1", "uas_head"], best.loc["layer 1", "uas_direction"]) == ("1-1", "head2dep")
    assert best.loc["layer 1", "uuas_head"] == "1-1"
    assert (best.loc["layer 2", "uas_head"], best.loc["all layers", "uas_head"]) == ("2-1", "2-1")
    assert best.loc["all layers", "uuas_head"] == "2-2" and best.loc["all layers", "uuas"] == pytest.approx(0.7)


def test_a_store_without_gold_heads_or_root_is_refused(tmp_path):
    with AttentionWriter(tmp_path / "bad", num_layers=1, num_heads=1, level="word") as w:
        w.add({"id": "x", "tokens": ["[CLS]", "a", "b", "[SEP]"]}, np.full((1, 1, 4, 4), 0.25))
    with pytest.raises(BertlookError, match="no gold `heads`"):
        tree_heads(tmp_path / "bad")
    with pytest.raises(BertlookError, match="no root"):
        sentence_trees(np.full((1, 4, 4), 0.25), np.array([2, 1]), np.array([True, True]))


def test_run_tree_heads_without_the_cli(tmp_path):
    """The tree-heads step as a library call: the tables and the summary the CLI writes (JSON-safe)."""
    maps = np.stack([_full_map(WORDS), np.full((6, 6), 1.0 / 6)])
    forms = ["the", "cat", "sat", "down"]
    store = _write(tmp_path / "dev", [
        (forms, GOLD, ["det", "root", "dep", "dep"], maps),
        ([*forms[:3], "."], GOLD, ["det", "root", "dep", "punct"], maps),
    ])
    logged: list[str] = []
    res = run_tree_heads(tmp_path / "dev", log=logged.append)
    assert logged == []  # progress every 100 sentences
    per_head, info = tree_heads(store)
    pd.testing.assert_frame_equal(res.per_head, per_head)
    pd.testing.assert_frame_equal(res.best, best_heads(per_head, info["baselines"]))
    s = res.summary
    assert list(s)[:3] == ["dev_attention", "max_sentences", "n_sentences"]
    assert list(s)[-2:] == ["seconds", "trees_per_s"]
    assert s["dev_attention"] == str(tmp_path / "dev") and s["max_sentences"] is None
    assert (s["n_sentences"], s["n_scored_words"], s["trees_decoded"]) == (2, 5, 8)
    assert s["baselines"]["right_branching"]["uas"] == pytest.approx(2 / 5)
    assert [r["row"] for r in s["best"]] == ["layer 1", "all layers", "right_branching", "adjacent_chain"]
    assert s["best"][-1]["uas"] is None  # NaN in the table, None in the JSON
    json.dumps(s, allow_nan=False)
    assert run_tree_heads(store, max_sentences=1).summary["n_sentences"] == 1
    with pytest.raises(BertlookError, match="max_sentences"):
        run_tree_heads(store, max_sentences=0)
    assert json_safe({"a": (np.float64(np.nan), np.int64(3)), "b": float("inf")}) == {"a": [None, 3], "b": None}


def test_cli_writes_every_output(tmp_path, capsys):
    from bertlook.cli import main as cli_main

    maps = np.stack([_full_map(WORDS), np.full((6, 6), 1.0 / 6)])
    store = _write(tmp_path / "dev", [(["the", "cat", "sat", "down"], GOLD, ["det", "root", "dep", "dep"], maps)])
    out = {k: tmp_path / name for k, name in (("table", "t.csv"), ("best", "b.csv"), ("md", "t.md"),
                                              ("fig", "f.png"), ("summary", "s.json"))}
    assert cli_main(["tree-heads", "--dev-attention", str(store), "--out-table", str(out["table"]),
                     "--out-best", str(out["best"]), "--out-markdown", str(out["md"]),
                     "--out-figure", str(out["fig"]), "--summary", str(out["summary"]), "--note", "tiny"]) == 0
    assert "best UAS 100.0 (1-1 dep2head) vs right-branching 33.3" in capsys.readouterr().out
    assert pd.read_csv(out["table"]).shape == (2, len(HEAD_COLUMNS))
    md = out["md"].read_text()
    assert "| layer 1 | 1-1 | dep2head | 100.0 | 1-1 | 100.0 |" in md and md.startswith("| Layer")
    assert "*right-branching (gold root)* | – | – | 33.3 | – | 66.7 |" in md and "tiny" in md
    s = json.loads(out["summary"].read_text())
    assert s["n_scored_words"] == 3 and s["baselines"]["adjacent_chain"]["uuas"] == 1.0
    assert out["fig"].stat().st_size > 1000
    # bad input: a token-level store -> exit 2 naming it
    assert cli_main(["tree-heads", "--dev-attention", str(tmp_path / "missing"), "--out-table", str(out["table"]),
                     "--out-best", str(out["best"]), "--out-markdown", str(out["md"]),
                     "--out-figure", str(out["fig"]), "--summary", str(out["summary"])]) == 2
    assert "missing" in capsys.readouterr().err


def test_bench_script_runs_small():
    spec = importlib.util.spec_from_file_location("bench_tree_heads", ROOT / "scripts" / "bench_tree_heads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--sentences", "2", "--max-sentences", "2"]) == 0


def test_golden_groups_hold_the_new_tables(tmp_path):
    """make-golden's groups tree_heads, tree_heads_best and probe_ablations (declared with their steps):
    every cell of the tables ("absent" when the step is switched off), and the tree-heads summary's counts."""
    from bertlook.cli import declared_steps, main as cli_main
    from bertlook.pipeline.steps import golden_tables
    from bertlook.reporting.golden import COUNT_SUMMARIES, _g_counts, table_group

    GOLDEN_GROUPS = {t.group: table_group(t) for t in golden_tables(declared_steps())}

    run = tmp_path / "run"
    assert GOLDEN_GROUPS["tree_heads"](run)["values"] == {"status": "absent"}
    assert GOLDEN_GROUPS["probe_ablations"](run)["values"] == {"status": "absent"}
    maps = np.stack([_full_map(WORDS), np.full((6, 6), 1.0 / 6)])
    store = _write(tmp_path / "dev", [(["the", "cat", "sat", "down"], GOLD, ["det", "root", "dep", "dep"], maps)])
    t = run / "tables"
    assert cli_main(["tree-heads", "--dev-attention", str(store), "--out-table", str(t / "tree_heads.csv"),
                     "--out-best", str(t / "tree_heads_best.csv"), "--out-markdown", str(t / "tree_heads.md"),
                     "--out-figure", str(run / "figures" / "fig_tree_heads.png"),
                     "--summary", str(t / "tree_heads.summary.json")]) == 0
    per_head = GOLDEN_GROUPS["tree_heads"](run)["values"]
    assert per_head["1/1/uas_dep2head"] == 1.0 and per_head["1/1/uas_head2dep"] == pytest.approx(2 / 3, rel=1e-5)
    assert per_head["1/2/n_words"] == 3.0
    best = GOLDEN_GROUPS["tree_heads_best"](run)["values"]
    assert best["layer 1/uas_head"] == "1-1" and best["layer 1/uas_direction"] == "dep2head"
    assert best["right_branching/uas"] == pytest.approx(1 / 3, rel=1e-5) and best["adjacent_chain/uas"] is None
    assert "tree_heads" in COUNT_SUMMARIES
    (run / "corpus").mkdir()
    (run / "treebank").mkdir()
    (run / "corpus" / "segments.summary.json").write_text("{}")
    (run / "treebank" / "treebank.summary.json").write_text("{}")
    counts = _g_counts(run)["values"]
    assert counts["tree_heads/n_scored_words"] == 3 and counts["tree_heads/trees_decoded"] == 4
