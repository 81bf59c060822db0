"""Surface statistics on tiny hand-written attention maps (expected numbers worked out by hand)."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pandas as pd
import pytest

from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.errors import BertlookError
from bertlook.analyses.surface_stats import COLUMNS, compute_surface_stats
from bertlook.cli.surface_stats import register_cli

# ---------------------------------------------------------------------------------------------
# Example 1: n = 4, tokens [CLS] a . [SEP]; 2 layers x 2 heads (all values exact in float16).
TOKENS_1 = ["[CLS]", "a", ".", "[SEP]"]
IDENTITY = np.eye(4)  # layer 1 head 1: every token attends to itself
SHIFT_NEXT = np.array(  # layer 1 head 2: to the next token, the last row to [CLS]
    [[0, 1, 0, 0],
     [0, 0, 1, 0],
     [0, 0, 0, 1],
     [1, 0, 0, 0]], dtype=float)
UNIFORM = np.full((4, 4), 0.25)  # layer 2 head 1
MIXED = np.array(  # layer 2 head 2
    [[0.5, 0, 0, 0.5],
     [0.5, 0, 0.5, 0],
     [0, 0.5, 0, 0.5],
     [0, 0, 0, 1]], dtype=float)
ATTN_1 = np.stack([np.stack([IDENTITY, SHIFT_NEXT]), np.stack([UNIFORM, MIXED])])  # [2, 2, 4, 4]

# Example 2: n = 3, tokens [CLS] b [SEP]; every head sends everything to [SEP].
TOKENS_2 = ["[CLS]", "b", "[SEP]"]
TO_SEP = np.array([[0, 0, 1], [0, 0, 1], [0, 0, 1]], dtype=float)
ATTN_2 = np.broadcast_to(TO_SEP, (2, 2, 3, 3)).copy()

# Entropies of smoothed rows a~ = 0.9999 a + 0.0001 / n, written out by hand:
# one-hot row, n = 4: one entry 0.9999 + 0.000025 = 0.999925, three entries 0.000025
H_ONEHOT_4 = -(0.999925 * math.log(0.999925) + 3 * 0.000025 * math.log(0.000025))
# two halves, n = 4: two entries 0.49995 + 0.000025 = 0.499975, two entries 0.000025
H_HALVES_4 = -(2 * 0.499975 * math.log(0.499975) + 2 * 0.000025 * math.log(0.000025))
# one-hot row, n = 3: one entry 0.9999 + 0.0001/3, two entries 0.0001/3
H_ONEHOT_3 = -((0.9999 + 0.0001 / 3) * math.log(0.9999 + 0.0001 / 3) + 2 * (0.0001 / 3) * math.log(0.0001 / 3))

# Expected per-head values on example 1 (counted by hand from the matrices above; e.g. MIXED:
# self = (a00 + a33) / 4 = 1.5 / 4, next = (a12 + a23) / 4, prev = (a10 + a21) / 4, rest_sep = (a03 + a23) / 3).
EXPECTED_1 = {
    (1, 1): dict(cls=0.25, sep=0.25, punct=0.25, self=1.0, prev=0.0, next=0.0,
                 sep_sep=1.0, rest_sep=0.0, entropy=H_ONEHOT_4, cls_entropy=H_ONEHOT_4),
    (1, 2): dict(cls=0.25, sep=0.25, punct=0.25, self=0.0, prev=0.0, next=0.75,
                 sep_sep=0.0, rest_sep=1 / 3, entropy=H_ONEHOT_4, cls_entropy=H_ONEHOT_4),
    (2, 1): dict(cls=0.25, sep=0.25, punct=0.25, self=0.25, prev=0.1875, next=0.1875,
                 sep_sep=0.25, rest_sep=0.25, entropy=math.log(4), cls_entropy=math.log(4)),
    (2, 2): dict(cls=0.25, sep=0.5, punct=0.125, self=0.375, prev=0.25, next=0.25,
                 sep_sep=1.0, rest_sep=1 / 3, entropy=(3 * H_HALVES_4 + H_ONEHOT_4) / 4,
                 cls_entropy=H_HALVES_4),
}
# Example 2, same for every head: [SEP] gets all 3 rows; self only at row 2; next only 1->2.
EXPECTED_2 = dict(cls=0.0, sep=1.0, punct=0.0, self=1 / 3, prev=0.0, next=1 / 3,
                  sep_sep=1.0, rest_sep=1.0, entropy=H_ONEHOT_3, cls_entropy=H_ONEHOT_3)


def make_store(path, examples, *, num_layers=2, num_heads=2, meta=None):
    with AttentionWriter(path, num_layers=num_layers, num_heads=num_heads, meta=meta) as w:
        for i, (tokens, attn) in enumerate(examples):
            w.add({"id": i, "tokens": tokens}, attn)
    return AttentionStore(path)


def row_of(frame, layer, head):
    rows = frame[(frame["layer"] == layer) & (frame["head"] == head)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_single_example_hand_values(tmp_path):
    store = make_store(tmp_path / "s", [(TOKENS_1, ATTN_1)])
    frame, summary = compute_surface_stats(store)
    for (layer, head), expected in EXPECTED_1.items():
        row = row_of(frame, layer, head)
        for col, value in expected.items():
            assert row[col] == pytest.approx(value, abs=1e-9), (layer, head, col)
    assert summary["n_examples"] == 1
    assert summary["uniform_entropy"] == pytest.approx(math.log(4))
    assert summary["mean_tokens"] == 4


def test_mean_over_examples_of_different_lengths(tmp_path):
    store = make_store(tmp_path / "s", [(TOKENS_1, ATTN_1), (TOKENS_2, ATTN_2)])
    frame, summary = compute_surface_stats(store)
    for (layer, head), expected in EXPECTED_1.items():
        row = row_of(frame, layer, head)
        for col, value in expected.items():
            assert row[col] == pytest.approx((value + EXPECTED_2[col]) / 2, abs=1e-9), (layer, head, col)
    # a few written out in full: identity head (1-1) and the mixed head (2-2)
    assert row_of(frame, 1, 1)["self"] == pytest.approx((1 + 1 / 3) / 2)
    assert row_of(frame, 1, 1)["sep"] == pytest.approx(0.625)
    assert row_of(frame, 2, 2)["rest_sep"] == pytest.approx(2 / 3)
    assert summary["n_examples"] == 2
    assert summary["uniform_entropy"] == pytest.approx((math.log(4) + math.log(3)) / 2)
    assert summary["mean_tokens"] == pytest.approx(3.5)
    assert all(v == 0 for v in summary["excluded_from_column"].values())


def test_max_examples(tmp_path):
    store = make_store(tmp_path / "s", [(TOKENS_1, ATTN_1), (TOKENS_2, ATTN_2)])
    frame, summary = compute_surface_stats(store, max_examples=1)
    assert summary["n_examples"] == 1 and summary["n_examples_in_store"] == 2
    assert row_of(frame, 1, 2)["next"] == pytest.approx(0.75)


def test_columns_order_and_one_indexing(tmp_path):
    store = make_store(tmp_path / "s", [(TOKENS_1, ATTN_1)])
    frame, _ = compute_surface_stats(store)
    assert list(frame.columns) == [
        "layer", "head", "cls", "sep", "punct", "self", "prev", "next",
        "sep_sep", "rest_sep", "entropy", "cls_entropy", "max_attention",
        "positional_offset", "positional_fraction",  # appended last: the earlier columns never move
    ]
    assert list(frame.columns) == COLUMNS
    assert frame[["layer", "head"]].values.tolist() == [[1, 1], [1, 2], [2, 1], [2, 2]]
    assert pd.api.types.is_integer_dtype(frame["layer"]) and pd.api.types.is_integer_dtype(frame["head"])


def test_uniform_row_entropy_is_log_n(tmp_path):
    n = 7
    attn = np.full((1, 1, n, n), 1.0 / n)  # 1/7 is rounded to float16 in the store
    tokens = ["[CLS]"] + ["x"] * (n - 2) + ["[SEP]"]
    store = make_store(tmp_path / "s", [(tokens, attn)], num_layers=1, num_heads=1)
    frame, summary = compute_surface_stats(store)
    assert frame["entropy"][0] == pytest.approx(math.log(7), abs=1e-3)
    assert frame["cls_entropy"][0] == pytest.approx(math.log(7), abs=1e-3)
    assert summary["uniform_entropy"] == pytest.approx(math.log(7))
    assert frame["max_attention"][0] == pytest.approx(1 / 7, abs=1e-3)  # largest weight of a uniform row


def test_max_attention_is_mean_of_row_maxima(tmp_path):
    attn = np.array([[[[1.0, 0.0, 0.0], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]]]])
    store = make_store(tmp_path / "s", [(["[CLS]", "a", "[SEP]"], attn)], num_layers=1, num_heads=1)
    frame, _ = compute_surface_stats(store)
    assert frame["max_attention"][0] == pytest.approx((1.0 + 0.5 + 0.6) / 3, abs=1e-3)


def test_example_without_sep_is_left_out_of_sep_sep_and_counted(tmp_path):
    no_sep = ["[CLS]", "a", "b"]
    attn = np.broadcast_to(np.eye(3), (2, 2, 3, 3)).copy()
    store = make_store(tmp_path / "s", [(TOKENS_1, ATTN_1), (no_sep, attn)])
    frame, summary = compute_surface_stats(store)
    # sep_sep only from example 1; sep averages 0.25 (ex. 1) and 0 (ex. 2)
    assert row_of(frame, 1, 1)["sep_sep"] == pytest.approx(1.0)
    assert row_of(frame, 1, 1)["sep"] == pytest.approx(0.125)
    assert summary["excluded_from_column"]["sep_sep (no [SEP] token)"] == 1
    assert summary["excluded_from_column"]["rest_sep (only [SEP] tokens)"] == 0


def test_special_tokens_from_meta(tmp_path):
    tokens = ["<s>", "a", ".", "</s>"]
    store = make_store(tmp_path / "s", [(tokens, ATTN_1)], meta={"special_tokens": {"cls": "<s>", "sep": "</s>"}})
    frame, _ = compute_surface_stats(store)
    assert row_of(frame, 2, 2)["sep"] == pytest.approx(0.5)
    assert row_of(frame, 2, 2)["cls"] == pytest.approx(0.25)


def test_empty_store_is_an_error(tmp_path):
    store = make_store(tmp_path / "s", [])
    with pytest.raises(BertlookError, match="no examples"):
        compute_surface_stats(store)


def _parser():
    parser = argparse.ArgumentParser(prog="bertlook")
    register_cli(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli(tmp_path, capsys):
    make_store(tmp_path / "s", [(TOKENS_1, ATTN_1), (TOKENS_2, ATTN_2)])
    args = _parser().parse_args([
        "surface-stats", "--attention", str(tmp_path / "s"), "--out", str(tmp_path / "o" / "attention_stats.csv"),
        "--summary", str(tmp_path / "o" / "summary.json"),
    ])
    assert args.func(args) == 0
    frame = pd.read_csv(tmp_path / "o" / "attention_stats.csv")
    assert list(frame.columns) == COLUMNS and len(frame) == 4
    assert frame.loc[(frame["layer"] == 1) & (frame["head"] == 2), "next"].item() == pytest.approx((0.75 + 1 / 3) / 2, rel=1e-5)
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["n_examples"] == 2 and summary["mean_tokens"] == 3.5
    assert "2 of 2 examples" in capsys.readouterr().out
    help_text = _parser()._subparsers._group_actions[0].choices["surface-stats"].format_help()
    for flag in ("--attention", "--out", "--summary", "--max-examples"):
        assert flag in help_text



def test_surface_stats_step_without_the_cli(tmp_path):
    """run_surface_stats_step: the table and the summary JSON of `bertlook surface-stats`, from a store or from
    partial files (the shards' store paths then in ``attention``)."""
    from bertlook.analyses.surface_stats import run_surface_stats_step, surface_stats_partial
    from bertlook.pipeline.sharding import save_partial

    make_store(tmp_path / "s", [(TOKENS_1, ATTN_1), (TOKENS_2, ATTN_2)])
    frame, summary = run_surface_stats_step(str(tmp_path / "s"))
    assert list(summary)[:2] == ["attention", "n_examples"] and summary["attention"] == str(tmp_path / "s")
    assert summary["n_examples"] == 2 and summary["mean_tokens"] == 3.5 and len(frame) == 4
    assert run_surface_stats_step(tmp_path / "s", max_examples=1).summary["n_examples"] == 1
    paths = []
    for name, example in (("a", (TOKENS_1, ATTN_1)), ("b", (TOKENS_2, ATTN_2))):
        save_partial(tmp_path / f"{name}.npz", "surface-stats", *surface_stats_partial(make_store(tmp_path / name,
                                                                                                  [example])))
        paths.append(tmp_path / f"{name}.npz")
    reduced = run_surface_stats_step(partials=paths)
    assert reduced.summary["attention"] == [str(tmp_path / "a"), str(tmp_path / "b")]
    np.testing.assert_allclose(reduced.frame.iloc[:, 2:].to_numpy(float), frame.iloc[:, 2:].to_numpy(float))
    assert run_surface_stats_step(partials=paths[:1]).summary["attention"] == str(tmp_path / "a")
    with pytest.raises(BertlookError, match="one of them"):
        run_surface_stats_step()


def test_cli_missing_store(tmp_path):
    args = _parser().parse_args([
        "surface-stats", "--attention", str(tmp_path / "nope"), "--out", str(tmp_path / "a.csv"),
        "--summary", str(tmp_path / "s.json"),
    ])
    with pytest.raises(BertlookError, match="nope"):
        args.func(args)
    assert not (tmp_path / "a.csv").exists()


# ---------------------------------------------------------------------------------------------
# positional offsets: the most frequent argmax_j a[i, j] - i and the fraction of rows at it

def test_positional_offsets_hand_values(tmp_path):
    """Example 1 alone, counted by hand from the matrices at the top.

    1-1 IDENTITY: every row at offset 0 -> (0, 1.0). 1-2 SHIFT_NEXT: rows 0..2 at +1, row 3 at -3 ->
    (+1, 0.75). 2-1 UNIFORM: ties go to the lowest column -> offsets 0, -1, -2, -3, one each -> mode
    tie broken by the smallest |k| -> (0, 0.25). 2-2 MIXED: argmaxes 0, 0, 1, 3 (ties to the lowest
    column) -> offsets 0, -1, -1, 0: tie between 0 and -1 -> 0 (smallest |k|), fraction 0.5.
    """
    store = make_store(tmp_path / "s", [(TOKENS_1, ATTN_1)])
    frame, _ = compute_surface_stats(store)
    want = {(1, 1): (0, 1.0), (1, 2): (1, 0.75), (2, 1): (0, 0.25), (2, 2): (0, 0.5)}
    for (layer, head), (offset, fraction) in want.items():
        row = row_of(frame, layer, head)
        assert (row["positional_offset"], row["positional_fraction"]) == (offset, pytest.approx(fraction)), (layer, head)
    assert pd.api.types.is_integer_dtype(frame["positional_offset"])


def test_positional_offsets_over_examples_of_different_lengths(tmp_path):
    """Example 1 (n = 4) + example 2 (n = 3, every row to [SEP] at column 2: offsets +2, +1, 0)."""
    store = make_store(tmp_path / "s", [(TOKENS_1, ATTN_1), (TOKENS_2, ATTN_2)])
    frame, _ = compute_surface_stats(store)
    # 1-1: 0 x4 (ex 1) + {+2, +1, 0} -> 0 in 5 of 7 rows
    assert (row_of(frame, 1, 1)["positional_offset"], row_of(frame, 1, 1)["positional_fraction"]) == (0, pytest.approx(5 / 7))
    # 1-2: +1 x3, -3 (ex 1) + {+2, +1, 0} -> +1 in 4 of 7 rows
    assert (row_of(frame, 1, 2)["positional_offset"], row_of(frame, 1, 2)["positional_fraction"]) == (1, pytest.approx(4 / 7))


def test_positional_mode_ties_smallest_abs_then_smaller_offset():
    from bertlook.analyses.surface_stats import positional_offsets

    m = 3  # offsets -2..2 at index k + 2
    counts = np.array([[[0, 2, 0, 2, 1],    # tie -1 / +1 -> -1
                        [3, 0, 0, 0, 3],    # tie -2 / +2 -> -2
                        [0, 1, 1, 0, 0],    # tie -1 / 0 -> 0
                        [0, 0, 0, 0, 5]]])  # +2 alone
    assert counts.shape[-1] == 2 * m - 1
    offset, fraction = positional_offsets(counts)
    assert offset.tolist() == [[-1, -2, 0, 2]]
    np.testing.assert_allclose(fraction, [[2 / 5, 3 / 6, 1 / 2, 1.0]])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_positional_counts_add_over_shards(tmp_path, k):
    """Shards with different longest examples: histograms aligned on offset 0 add up to the whole."""
    from bertlook.analyses.surface_stats import reduce_surface_stats, surface_stats_partial
    from bertlook.pipeline.sharding import load_partial, save_partial

    rng = np.random.default_rng(5)
    examples = []
    for n in (9, 3, 6, 4, 8, 5):
        tokens = ["[CLS]"] + ["x"] * (n - 2) + ["[SEP]"]
        examples.append((tokens, rng.dirichlet(np.ones(n) * 0.3, size=(2, 2, n))))
    whole, _ = compute_surface_stats(make_store(tmp_path / "whole", examples))
    parts = []
    for i, chunk in enumerate(np.array_split(np.arange(len(examples)), k)):
        store = make_store(tmp_path / f"s{i}", [examples[j] for j in chunk])
        save_partial(tmp_path / f"p{i}.npz", "surface-stats", *surface_stats_partial(store))
        parts.append(load_partial(tmp_path / f"p{i}.npz", "surface-stats"))
    got, _ = reduce_surface_stats(parts)
    assert got["positional_offset"].tolist() == whole["positional_offset"].tolist()
    np.testing.assert_allclose(got.iloc[:, 2:].to_numpy(float), whole.iloc[:, 2:].to_numpy(float), rtol=1e-12)
    # brute force over every row of every example
    for layer in range(2):
        for head in range(2):
            offs = [int(np.argmax(np.asarray(a, np.float16)[layer, head, i])) - i
                    for _, a in examples for i in range(a.shape[-1])]
            vals, cnt = np.unique(offs, return_counts=True)
            best = min((v for v, c in zip(vals, cnt) if c == cnt.max()), key=lambda v: (abs(v), v))
            row = row_of(got, layer + 1, head + 1)
            assert row["positional_offset"] == best
            assert row["positional_fraction"] == pytest.approx(cnt.max() / len(offs))


def test_old_or_inconsistent_partials_are_refused(tmp_path):
    from bertlook.analyses.surface_stats import reduce_surface_stats, surface_stats_partial

    meta, arrays = surface_stats_partial(make_store(tmp_path / "s", [(TOKENS_1, ATTN_1)]))
    old = {k: v for k, v in meta.items() if k != "partial_version"}
    with pytest.raises(BertlookError, match="old.npz: surface-stats partial version None"):
        reduce_surface_stats([(old, arrays)], where=["old.npz"])
    bad = dict(arrays, offset_counts=arrays["offset_counts"][..., :-1])
    with pytest.raises(BertlookError, match="bad.npz: offset_counts"):
        reduce_surface_stats([(meta, bad)], where=["bad.npz"])
    short = dict(arrays, offset_counts=arrays["offset_counts"] * 2)
    with pytest.raises(BertlookError, match="x.npz: offset_counts hold 32 rows, expected"):
        reduce_surface_stats([(meta, short)], where=["x.npz"])


def test_positional_candidates_list_the_near_tied_offsets():
    from bertlook.analyses.surface_stats import positional_candidates

    counts = np.zeros((1, 2, 5), dtype=np.int64)  # offsets -2..2
    counts[0, 0] = [0, 100, 10, 98, 0]  # mode -1, +1 within 2 rows
    counts[0, 1] = [0, 0, 500, 0, 0]  # alone
    got = positional_candidates(counts, window=5)
    assert got == {"1-1": [[-1, 100], [1, 98]], "1-2": [[0, 500]]}
    assert positional_candidates(counts, window=0)["1-1"] == [[-1, 100]]
