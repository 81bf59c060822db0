"""Tests for bertlook.reporting.figures and example_figures: PNG twins of the paper's Figs 1, 2, 4 and 6
(synthetic inputs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertlook.cli import figures as figures_cli
from bertlook.reporting import example_figures, figures
from bertlook import naming
from bertlook.attention.store import AttentionWriter
from bertlook.errors import BertlookError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NUM_LAYERS, NUM_HEADS = 2, 3
STATS_COLUMNS = ["layer", "head", "cls", "sep", "punct", "self", "prev", "next", "sep_sep", "rest_sep",
                 "entropy", "cls_entropy"]


def assert_png(path: Path) -> tuple[int, ...]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    path = Path(path)
    assert path.is_file(), path
    data = path.read_bytes()
    assert len(data) > 1000
    assert data[:8] == PNG_MAGIC
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    assert img.shape[0] > 100 and img.shape[1] > 100
    # not a blank canvas
    assert float(np.asarray(img[..., :3]).std()) > 0.01
    # no temporary file left behind
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".") and "tmp" in p.name]
    return img.shape


def stats_frame() -> pd.DataFrame:
    """2 layers x 3 heads; each behaviour has a clear winner (see test_choose_example_heads)."""
    rng = np.random.default_rng(0)
    rows = []
    for layer in range(1, NUM_LAYERS + 1):
        for head in range(1, NUM_HEADS + 1):
            rows.append({
                "layer": layer, "head": head,
                "cls": rng.uniform(0, 0.2), "sep": rng.uniform(0, 0.3), "punct": rng.uniform(0, 0.2),
                "self": rng.uniform(0, 0.2), "prev": rng.uniform(0, 0.2), "next": rng.uniform(0, 0.2),
                "sep_sep": rng.uniform(0.5, 1), "rest_sep": rng.uniform(0, 0.3),
                "entropy": rng.uniform(0.5, 1.5), "cls_entropy": rng.uniform(0.5, 1.8),
            })
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(1)
    tokens = ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "it", "ran", ",", "far", "[SEP]"]
    n = len(tokens)
    store = tmp_path / "attention"
    with AttentionWriter(store, num_layers=NUM_LAYERS, num_heads=NUM_HEADS) as w:
        w.add({"id": 0, "tokens": tokens}, rng.dirichlet(np.full(n, 0.3), size=(NUM_LAYERS, NUM_HEADS, n)))
        w.add({"id": 1, "tokens": tokens[:6]}, rng.dirichlet(np.ones(6), size=(NUM_LAYERS, NUM_HEADS, 6)))
    stats = tmp_path / "attention_stats.csv"
    stats_frame().to_csv(stats, index=False)
    summary = tmp_path / "stats_summary.json"
    summary.write_text(json.dumps({"n_examples": 2, "uniform_entropy": float(np.log([11, 6]).mean()),
                                   "mean_tokens": 8.5}))
    clusters = tmp_path / "head_clusters.csv"
    pd.DataFrame({
        "layer": [1, 1, 1, 2, 2, 2], "head": [1, 2, 3, 1, 2, 3],
        "x": rng.normal(size=6), "y": rng.normal(size=6),
        "behavior": ["broad", "next token", "other", "[SEP]", "punctuation", "other"],
    }).to_csv(clusters, index=False)
    return {"store": store, "stats": stats, "summary": summary, "clusters": clusters, "dir": tmp_path}


# -- head labels ----------------------------------------------------------------------------------


def test_parse_head_labels_ok():
    assert naming.parse_head_label("8-10") == (8, 10)
    assert naming.parse_head_labels("1-1, 2-3", NUM_LAYERS, NUM_HEADS) == [(1, 1), (2, 3)]
    assert naming.parse_head_labels(["2-1"], NUM_LAYERS, NUM_HEADS) == [(2, 1)]


@pytest.mark.parametrize("label", ["x", "13-1", "1-4", "0-1", "1-0", "1", "1-2-3", "-1-1", "a-b"])
def test_parse_head_label_errors_name_the_label(label):
    with pytest.raises(BertlookError, match=repr(label).replace("[", r"\[")):
        naming.parse_head_labels(f"1-1,{label}", NUM_LAYERS, NUM_HEADS)


def test_parse_head_labels_empty():
    with pytest.raises(BertlookError):
        naming.parse_head_labels(" , ", NUM_LAYERS, NUM_HEADS)


# -- choose_example_heads -------------------------------------------------------------------------


def test_choose_example_heads_picks_best_per_behaviour():
    df = stats_frame()

    def put(layer, head, **vals):
        for k, v in vals.items():
            df.loc[(df["layer"] == layer) & (df["head"] == head), k] = v

    put(1, 2, entropy=3.0)
    put(2, 1, next=0.9)
    put(2, 3, sep=0.95)
    put(1, 3, punct=0.8)
    assert example_figures.choose_example_heads(df) == [
        (1, 2, "broadest attention (entropy 3.00 nats)", True),
        (2, 1, "most attention to next token (mean 0.90)", True),
        (2, 3, "most attention to [SEP] (mean 0.95)", True),
        (1, 3, "most attention to . and , (mean 0.80)", True),
    ]


def test_choose_example_heads_distinct_heads():
    df = stats_frame()
    # head 2-2 is the best at everything; it is used once, then each behaviour takes its runner-up
    sel = (df["layer"] == 2) & (df["head"] == 2)
    df.loc[sel, ["entropy", "next", "sep", "punct"]] = [9.0, 0.99, 0.99, 0.99]
    df.loc[(df["layer"] == 1) & (df["head"] == 1), "next"] = 0.55
    df.loc[(df["layer"] == 1) & (df["head"] == 2), "sep"] = 0.65
    df.loc[(df["layer"] == 2) & (df["head"] == 1), "punct"] = 0.65
    chosen = example_figures.choose_example_heads(df)
    assert [(c.layer, c.head) for c in chosen] == [(2, 2), (1, 1), (1, 2), (2, 1)]
    assert len({(c.layer, c.head) for c in chosen}) == 4 and all(c.shown for c in chosen)


def test_choose_example_heads_says_when_a_behaviour_is_absent():
    """A behaviour whose best head is not above Fig 6's label threshold (next > 0.5, [SEP] > 0.6,
    . , > 0.6) is absent: not drawn, labelled so, and its head stays free (hand-made: MiniLM-like,
    whose best [SEP] head gives [SEP] 7% of its attention and mostly attends to [CLS])."""
    df = stats_frame()
    df[["next", "sep", "punct"]] = 0.01
    df["entropy"] = 1.0

    def put(layer, head, **vals):
        for k, v in vals.items():
            df.loc[(df["layer"] == layer) & (df["head"] == head), k] = v

    put(1, 1, entropy=4.0)
    put(1, 2, next=0.66)
    put(2, 1, sep=0.07, cls=0.6)  # the "least bad" [SEP] head
    put(2, 2, punct=0.6)  # exactly the threshold: not above it
    put(2, 3, punct=0.2, sep=0.05)
    chosen = example_figures.choose_example_heads(df)
    assert chosen == [
        (1, 1, "broadest attention (entropy 4.00 nats)", True),
        (1, 2, "most attention to next token (mean 0.66)", True),
        (2, 1, "no head attends mostly to [SEP] (best: 2-1, mean 0.07; needs > 0.60)", False),
        (2, 2, "no head attends mostly to . and , (best: 2-2, mean 0.60; needs > 0.60)", False),
    ]
    # a next-token head at exactly 0.5 is not one either; at 0.51 it is
    put(1, 2, next=0.5)
    assert example_figures.choose_example_heads(df)[1].shown is False
    put(1, 2, next=0.51)
    assert example_figures.choose_example_heads(df)[1] == (1, 2, "most attention to next token (mean 0.51)", True)


def test_fig1_draws_a_statement_for_an_absent_behaviour(inputs, tmp_path):
    """The absent panel draws no lines (its ink is the title and the statement only), and a panel
    that draws no head without saying why is refused."""
    import matplotlib.image as mpimg

    label = "no head attends mostly to [SEP] (best: 2-1, mean 0.07; needs > 0.60)"
    both = tmp_path / "both.png"
    example_figures.fig1_example_heads(inputs["store"], [(1, 1), (2, 1)], both, labels=["broad", label],
                               shown=[True, False])
    img = mpimg.imread(both)[..., :3]  # [y, x, rgb]
    half = img.shape[1] // 2
    ink = lambda part: float((part.mean(axis=2) < 0.9).mean())  # share of non-white pixels
    assert ink(img[:, :half]) > 2 * ink(img[:, half:]) > 0  # lines on the left, text only on the right
    with pytest.raises(BertlookError, match="label"):
        example_figures.fig1_example_heads(inputs["store"], [(1, 1)], tmp_path / "x.png", shown=[False])


def test_choose_example_heads_few_heads_and_missing_column():
    df = stats_frame().iloc[:2].copy()
    df.loc[:, "next"] = [0.1, 0.9]  # 1-1 the broadest, 1-2 a next-token head: no head left for [SEP], . ,
    df.loc[:, "entropy"] = [2.0, 1.0]
    chosen = example_figures.choose_example_heads(df)
    assert [(c.layer, c.head, c.shown) for c in chosen] == [(1, 1, True), (1, 2, True)]
    df.loc[:, "next"] = [0.1, 0.2]  # no next-token head: 1-2 stays free, and is [SEP]'s and . ,'s best (absent)
    assert [(c.layer, c.head, c.shown) for c in example_figures.choose_example_heads(df)] == [
        (1, 1, True), (1, 2, False), (1, 2, False), (1, 2, False)]
    with pytest.raises(BertlookError, match="punct"):
        example_figures.choose_example_heads(stats_frame().drop(columns=["punct"]))


# -- figures --------------------------------------------------------------------------------------


def test_fig1_example_heads(inputs):
    out = inputs["dir"] / "figs" / "fig1.png"
    example_figures.fig1_example_heads(inputs["store"], [(1, 1), (2, 3)], out, labels=["attends broadly", None])
    assert_png(out)
    out2 = inputs["dir"] / "figs" / "fig1b.png"
    example_figures.fig1_example_heads(inputs["store"], [(2, 2)], out2, example_index=1)
    assert_png(out2)


def test_fig1_errors(inputs):
    out = inputs["dir"] / "fig1.png"
    with pytest.raises(BertlookError, match="'3-1'"):
        example_figures.fig1_example_heads(inputs["store"], [(3, 1)], out)
    with pytest.raises(BertlookError, match="example index 5"):
        example_figures.fig1_example_heads(inputs["store"], [(1, 1)], out, example_index=5)
    with pytest.raises(BertlookError, match="not an attention store"):
        example_figures.fig1_example_heads(inputs["dir"] / "nope", [(1, 1)], out)
    assert not out.exists()


def test_fig2_special_tokens(inputs):
    out = inputs["dir"] / "fig2.png"
    figures.fig2_special_tokens(inputs["stats"], out)
    h, w, _ = assert_png(out)
    assert w > h  # three panels side by side


def test_fig4_entropy(inputs):
    out = inputs["dir"] / "fig4.png"
    figures.fig4_entropy(inputs["stats"], inputs["summary"], out)
    assert_png(out)


def test_fig6_head_clusters(inputs):
    out = inputs["dir"] / "fig6.png"
    figures.fig6_head_clusters(inputs["clusters"], out)
    h, w, _ = assert_png(out)
    assert w > h


def test_outputs_replaced_atomically(inputs):
    out = inputs["dir"] / "fig2.png"
    out.write_bytes(b"old")
    figures.fig2_special_tokens(inputs["stats"], out)
    assert_png(out)
    # a failing call leaves the previous file untouched and no temporary file
    bad = inputs["dir"] / "bad.csv"
    bad.write_text("layer,head,cls,sep\n1,1,0.1,0.2\n")
    with pytest.raises(BertlookError, match="punct"):
        figures.fig2_special_tokens(bad, out)
    assert_png(out)


def test_bad_tables_name_file_and_line(inputs, tmp_path):
    bad = tmp_path / "stats_bad.csv"
    df = stats_frame()
    df["sep"] = df["sep"].astype(object)
    df.loc[3, "sep"] = "lots"
    df.to_csv(bad, index=False)
    with pytest.raises(BertlookError, match=r"stats_bad\.csv:5: column 'sep'"):
        figures.fig2_special_tokens(bad, tmp_path / "x.png")

    clusters = pd.read_csv(inputs["clusters"])
    clusters.loc[2, "behavior"] = "weird"
    bad_cl = tmp_path / "clusters_bad.csv"
    clusters.to_csv(bad_cl, index=False)
    with pytest.raises(BertlookError, match=r"clusters_bad\.csv:4: unknown behavior 'weird'"):
        figures.fig6_head_clusters(bad_cl, tmp_path / "x.png")

    summary = tmp_path / "summary_bad.json"
    summary.write_text(json.dumps({"n_examples": 3}))
    with pytest.raises(BertlookError, match="uniform_entropy"):
        figures.fig4_entropy(inputs["stats"], summary, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


# -- CLI ------------------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertlook")
    figures_cli.register_cli(parser.add_subparsers(dest="command", required=True))
    return parser


def cli_args(inputs, out_dir, *extra):
    return [
        "figures", "--attention", str(inputs["store"]), "--stats", str(inputs["stats"]),
        "--stats-summary", str(inputs["summary"]), "--clusters", str(inputs["clusters"]),
        "--out-dir", str(out_dir), *extra,
    ]


def test_cli_auto(inputs, capsys):
    out_dir = inputs["dir"] / "out"
    args = make_parser().parse_args(cli_args(inputs, out_dir))
    assert args.example_heads == "auto" and args.example_index == 0
    assert args.func(args) == 0
    for name in figures.FIGURE_FILES.values():
        assert_png(out_dir / name)
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(figures.FIGURE_FILES.values())
    assert "fig6_head_clusters.png" in capsys.readouterr().out


def test_cli_explicit_heads(inputs):
    out_dir = inputs["dir"] / "out2"
    args = make_parser().parse_args(cli_args(inputs, out_dir, "--example-heads", "1-1,2-3", "--example-index", "1"))
    assert args.func(args) == 0
    assert_png(out_dir / "fig1_example_heads.png")


@pytest.mark.parametrize("spec", ["13-1", "x", "1-1,2-9"])
def test_cli_bad_head_label(inputs, spec):
    out_dir = inputs["dir"] / "out3"
    args = make_parser().parse_args(cli_args(inputs, out_dir, "--example-heads", spec))
    bad = spec.split(",")[-1]
    with pytest.raises(BertlookError, match=f"'{bad}'"):
        args.func(args)
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_cli_help_lists_inputs_and_outputs(capsys):
    with pytest.raises(SystemExit):
        make_parser().parse_args(["figures", "--help"])
    text = capsys.readouterr().out
    for word in ["--attention", "--stats", "--stats-summary", "--clusters", "--out-dir", "--example-heads",
                 "--example-index", *figures.FIGURE_FILES.values()]:
        assert word in text


def test_undefined_stats_are_not_plotted(inputs, tmp_path):
    """surface_stats writes empty cells (NaN) for statistics undefined on every example."""
    df = stats_frame()
    df["cls_entropy"] = np.nan
    df.loc[0, "punct"] = np.nan
    path = tmp_path / "stats_nan.csv"
    df.to_csv(path, index=False)
    figures.fig2_special_tokens(path, tmp_path / "fig2.png")
    figures.fig4_entropy(path, inputs["summary"], tmp_path / "fig4.png")
    assert_png(tmp_path / "fig2.png")
    assert_png(tmp_path / "fig4.png")


def test_dollar_signs_in_notes_and_tokens_are_text_not_mathtext(tmp_path):
    """A model path or token with two "$" on one line (a shell payload, "$5 ... $10") is drawn as text:
    matplotlib would parse it as mathtext and fail on "$(touch x)"."""
    note = """not run: /m/v ;touch P-3; '$(touch P-4)' "$(touch P-5)" has no masked-LM head"""
    assert_png(figures._fig3_note_figure(note, tmp_path / "fig3.png"))
    tokens = ["[CLS]", "$", "5", "'$(x)' \"$y", "$10$", "[SEP]"]
    n = len(tokens)
    attn = np.full((1, 1, n, n), 1.0 / n, dtype=np.float32)  # [layer, head, from, to]
    assert_png(example_figures.draw_fig1(tokens, attn, [(1, 1)], tmp_path / "fig1.png"))


def test_fig1_window_keeps_cls_and_the_tokens_up_to_sep():
    from bertlook.attention.fig1_example import fig1_window

    special = {"[CLS]", "[SEP]"}
    short = ["[CLS]", "a", "[SEP]", "b", "[SEP]"]
    assert fig1_window(short, special, 30) == [0, 1, 2, 3, 4]
    toks = ["[CLS]", *[f"a{i}" for i in range(50)], "[SEP]", *[f"b{i}" for i in range(40)], "[SEP]"]
    w = fig1_window(toks, special, 30)
    assert len(w) == 30 and w[0] == 0 and w[-1] == 51 and w[1:] == list(range(23, 52))  # [CLS], ..., first [SEP]
    early = ["[CLS]", "a", "[SEP]", *[f"b{i}" for i in range(60)], "[SEP]"]
    assert fig1_window(early, special, 30) == list(range(30))  # the [SEP] is in the first 30 tokens
