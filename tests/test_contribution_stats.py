"""The ``contributions`` step: surface statistics and Table 1 per map kind (attention, norm, rollout, ALTI, ALTI per
head, ALTI over layers, value zeroing) on seeded samples, for a tiny BERT and a tiny GPT-2; the CLI's files and
its error path."""

from __future__ import annotations

import json

import numpy as np
import pytest

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big and old."] * 3

#: two hand-made sentences (the tiny BERT's vocabulary), UD relations
SENTENCES = [
    [("The", 2, "det"), ("cat", 3, "nsubj"), ("saw", 0, "root"), ("the", 5, "det"), ("dog", 3, "obj"),
     (".", 3, "punct")],
    [("John", 2, "nsubj"), ("read", 0, "root"), ("a", 5, "det"), ("big", 5, "amod"), ("book", 2, "obj"),
     ("in", 8, "case"), ("the", 8, "det"), ("house", 2, "obl"), (".", 2, "punct")],
]


def write_conllu(path, sentences=SENTENCES) -> None:
    out = []
    for k, rows in enumerate(sentences):
        out.append(f"# sent_id = s{k + 1}\n# text = x\n")
        out += [f"{i}\t{w}\t{w.lower()}\tX\tX\t_\t{h}\t{r}\t_\t_\n" for i, (w, h, r) in enumerate(rows, 1)]
        out.append("\n")
    path.write_text("".join(out), encoding="utf-8")


def write_segments(path, tokenizer) -> None:
    from bertlook.testing.tiny_models import make_segment

    segs = [make_segment(tokenizer, 0, "The cat sat on the mat.", "A dog ran, far away."),
            make_segment(tokenizer, 1, "John read a big book.", "Mary wrote it in Paris."),
            make_segment(tokenizer, 2, "The king saw the queen.", "She said it, and he went.")]
    path.write_text("".join(json.dumps(s) + "\n" for s in segs), encoding="utf-8")


@pytest.fixture()
def bert_inputs(tmp_path, tokenizer):
    seg, tb = tmp_path / "segments.jsonl", tmp_path / "dev.conllu"
    write_segments(seg, tokenizer)
    write_conllu(tb)
    return seg, tb


def _options(**kw):
    from bertlook.analyses.contribution_stats import ContributionOptions
    from bertlook.analyses.contribution_table1 import Table1Settings

    return ContributionOptions(segments=kw.pop("segments", 2), sentences=2, seed=3, batch_size=2, device="cpu",
                               table1=Table1Settings(min_count=1, bootstrap=0, treebank_kind="ud"), **kw)


def test_seeded_sample_is_deterministic_sorted_and_capped():
    from bertlook.analyses.contribution_maps import seeded_sample

    a = seeded_sample(100, 10, seed=7)
    assert a == seeded_sample(100, 10, seed=7) and a == sorted(a) and len(set(a)) == 10
    assert a != seeded_sample(100, 10, seed=8)
    assert seeded_sample(3, 10, seed=0) == [0, 1, 2]


def test_bert_statistics_and_table1_per_kind(tiny_bert_dir, bert_inputs):
    from bertlook.analyses.contribution_maps import KINDS, PER_HEAD_KINDS
    from bertlook.analyses.contribution_stats import run_contributions

    seg, tb = bert_inputs
    result = run_contributions(str(tiny_bert_dir), seg, tb, _options())
    stats, heads, t1, s = result.stats, result.heads, result.table1, result.summary
    assert list(dict.fromkeys(stats["kind"])) == list(KINDS) and len(stats) == 2 * len(KINDS)
    # every map's rows are distributions: the four shares add up to 1, per layer and per head
    for frame in (stats, heads):
        total = frame[["cls", "sep", "punct", "other"]].sum(axis=1)
        assert np.allclose(total, 1.0, atol=1e-6), frame
        assert (frame["entropy"] > 0).all()
    assert set(heads["kind"]) == set(PER_HEAD_KINDS) and len(heads) == 3 * 2 * 2
    assert set(stats.loc[stats["kind"].isin(PER_HEAD_KINDS), "per"]) == {"head_mean"}
    assert set(stats.loc[~stats["kind"].isin(PER_HEAD_KINDS), "per"]) == {"layer"}
    # a per-head kind's layer row is the mean of its heads
    att = heads[heads["kind"] == "alti_heads"].groupby("layer")["sep"].mean().to_numpy()
    assert np.allclose(stats.loc[stats["kind"] == "alti_heads", "sep"].to_numpy(), att)
    # the sample: 2 of the 3 segments, seeded; rollout's first layer differs from attention's (the residual)
    assert len(s["statistics"]["sample_ids"]) == 2 and s["seed"] == 3 and s["n_examples"] == 2
    assert s["padded_key_mass_max"] < 1e-6
    assert s["value_zeroing_layer_passes"]["statistics"] > 0 and s["value_zeroing_layer_passes"]["table1"] > 0
    # Table 1: every kind scored on the same 2 sentences (13 words, 11 without punct: All counts them all)
    assert list(dict.fromkeys(t1["kind"])) == list(KINDS)
    all_rows = t1[t1["relation"] == "All"]
    assert len(all_rows) == len(KINDS) and len(set(all_rows["count"])) == 1
    per_layer = all_rows[all_rows["per"] == "layer"]
    assert per_layer["best"].str.fullmatch(r"[12]").all()
    assert all_rows[all_rows["per"] == "head"]["best"].str.fullmatch(r"[12]-[12]").all()
    assert s["table1"]["sample_ids"] == ["s1", "s2"]


def test_padding_is_excluded(tiny_bert_dir, tokenizer):
    """A batch of two lengths gives each example the maps it has alone (rows and keys beyond its length cut)."""
    from bertlook.analyses.contribution_maps import RunTimes, token_maps
    from bertlook.attention.modeling import load_model, resolve_model

    model = load_model(resolve_model(str(tiny_bert_dir)))
    short = tokenizer("the cat sat")["input_ids"]
    long = tokenizer("the old king saw the big city by the river")["input_ids"]
    times = RunTimes()
    batch = token_maps(model, [long, short], pad_id=0, causal=False, times=times)
    alone = token_maps(model, [short], pad_id=0, causal=False, times=RunTimes())[0]
    assert batch[1]["alti"].shape[-1] == len(short)
    for kind, m in alone.items():
        assert np.allclose(batch[1][kind], m, atol=2e-5), kind
    assert times.padded_mass_max < 1e-6


def test_gpt2_maps_are_causal_and_roles_are_first_token(tmp_path):
    from bertlook.analyses.contribution_maps import KINDS, RunTimes, token_maps
    from bertlook.analyses.contribution_stats import StatSums
    from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model
    from bertlook.testing.tiny_models import make_tiny_decoder

    path = make_tiny_decoder(tmp_path / "gpt2", "gpt2", TEXTS, heads=2, hidden=32)
    resolved = resolve_model(str(path))
    model, tok = load_model(resolved), load_tokenizer(resolved)
    ids = [tok("The cat sat on the mat. A dog ran")["input_ids"], tok("Paris is a city")["input_ids"]]
    maps = token_maps(model, ids, pad_id=0, causal=True, times=RunTimes())
    for ex, row in zip(maps, ids):
        n = len(row)
        for kind in KINDS:
            m = ex[kind]
            assert m.shape[-1] == n
            assert np.abs(np.triu(m, k=1)).max() < 1e-6, kind  # nothing from later tokens
            assert np.allclose(m.sum(-1), 1.0, atol=1e-5), kind
    sums = StatSums(None, tok.eos_token, True)
    for ex, row in zip(maps, ids):
        sums.add(tok.convert_ids_to_tokens(row), ex)
    stats, heads = sums.frames()
    assert np.allclose(stats[["cls", "sep", "punct", "other"]].sum(axis=1), 1.0, atol=1e-6)
    # the first row sees only the first token: a causal map's [CLS] (first token) share is at least 1/n
    assert (stats["cls"] >= 1.0 / max(len(r) for r in ids) - 1e-9).all()
    assert (stats["sep"] == 0).all()  # no EOS in these sequences


def test_gpt2_table1_per_kind(tmp_path, wiki_bz2):
    """Table 1 per kind for a decoder: the word alignment of extract-words and causal scoring."""
    from bertlook.analyses.contribution_maps import KINDS
    from bertlook.analyses.contribution_stats import run_contributions
    from bertlook.attention.modeling import load_tokenizer, resolve_model
    from bertlook.data.documents import iter_documents
    from bertlook.data.segments import build_segments, write_segments
    from bertlook.testing.tiny_models import make_tiny_decoder

    words = [w for rows in SENTENCES for w, _h, _r in rows]
    path = make_tiny_decoder(tmp_path / "gpt2", "gpt2", [*TEXTS, " ".join(words)], heads=2, hidden=32)
    tok = load_tokenizer(resolve_model(str(path)))
    segs, _ = build_segments(iter_documents(wiki_bz2), tok, n_segments=2, max_seq_len=40, seed=0)
    seg = tmp_path / "segments.jsonl"
    write_segments(seg, segs)
    tb = tmp_path / "dev.conllu"
    write_conllu(tb)
    result = run_contributions(str(path), seg, tb, _options())
    assert result.summary["family"] == "decoder"
    all_rows = result.table1[result.table1["relation"] == "All"]
    assert list(all_rows["kind"]) == list(KINDS)
    assert ((all_rows["accuracy"] >= 0) & (all_rows["accuracy"] <= 1)).all()


def _cli_args(tmp_path, seg, tb, model):
    out = tmp_path / "out"
    return out, ["contributions", "--model", str(model), "--segments", str(seg), "--treebank", str(tb),
                 "--n-segments", "2", "--n-sentences", "2", "--seed", "1", "--batch-size", "2", "--device", "cpu",
                 "--min-count", "1", "--bootstrap", "20", "--treebank-kind", "ud",
                 "--out-stats", str(out / "tables/contribution_stats.csv"),
                 "--out-heads", str(out / "tables/contribution_heads.csv"),
                 "--out-table", str(out / "tables/table1_contributions.csv"),
                 "--out-markdown", str(out / "tables/table1_contributions.md"),
                 "--summary", str(out / "tables/contribution_stats.summary.json")]


def test_cli_writes_every_file_deterministically(tmp_path, tiny_bert_dir, bert_inputs, capsys):
    from bertlook.cli import main

    seg, tb = bert_inputs
    out, argv = _cli_args(tmp_path, seg, tb, tiny_bert_dir)
    assert main(argv) == 0
    names = ["tables/contribution_stats.csv", "tables/contribution_heads.csv", "tables/table1_contributions.csv",
             "tables/table1_contributions.md"]
    first = {n: (out / n).read_bytes() for n in names}
    summary = json.loads((out / "tables/contribution_stats.summary.json").read_text())
    assert summary["seconds"]["value_zeroing"] > 0 and summary["statistics"]["excluded"]
    assert "| alti_rollout | All | layer " in first["tables/table1_contributions.md"].decode()
    assert main(argv) == 0
    assert {n: (out / n).read_bytes() for n in names if n.endswith((".csv", ".md"))} == \
        {n: v for n, v in first.items() if n.endswith((".csv", ".md"))}
    assert "contributions: value_zeroing layer 2" in capsys.readouterr().out
    # the figure: a second call, from the table alone (the analysis environment: no model)
    fig = out / "figures/fig_contributions.png"
    assert main(["contributions", "--figure-from", str(out / "tables/contribution_stats.csv"),
                 "--out-figure", str(fig)]) == 0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["contributions", "--figure-from", str(out / "tables/contribution_stats.csv"), "--out-figure",
                 str(fig), "--model", str(tiny_bert_dir)]) == 2


@pytest.mark.parametrize("problem", ["no_segments", "empty_treebank", "bad_size"])
def test_cli_error_path_writes_nothing(tmp_path, tiny_bert_dir, bert_inputs, capsys, problem):
    from bertlook.cli import main

    seg, tb = bert_inputs
    if problem == "no_segments":
        seg = tmp_path / "missing.jsonl"
    elif problem == "empty_treebank":
        tb.write_text("", encoding="utf-8")
    out, argv = _cli_args(tmp_path, seg, tb, tiny_bert_dir)
    if problem == "bad_size":
        argv[argv.index("--n-segments") + 1] = "0"
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and sum(line.startswith("error") for line in err) == 1, err
    assert "Loading weights" not in "".join(err)  # the inputs are checked before the model is loaded
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


def test_contributions_cost_is_a_model_job_that_grows_with_its_samples():
    """The sizing of the contributions rule (bertlook.pipeline.costs.contributions): a model job (a GPU would speed
    it up), its CPU time growing with contributions.segments / .sentences (value zeroing: n passes per example)."""
    from pathlib import Path

    import yaml

    from bertlook.cli import declared_costs
    from bertlook.pipeline import costs, sizing
    from bertlook.pipeline.config import validate_config

    root = Path(__file__).resolve().parents[1]
    assert declared_costs()["contributions"] is costs.CONTRIBUTIONS
    minilm = sizing.ModelDims(layers=6, heads=12, hidden=384, intermediate=1536, vocab=30522, weights_bytes=87 << 20)

    def cpu(segments: int, sentences: int) -> float:
        config = yaml.safe_load((root / "config" / "offline.yaml").read_text())
        config["contributions"] = {"segments": segments, "sentences": sentences}
        config = validate_config(config)
        return sizing.rule_resources("contributions", config, (), costs=declared_costs(),
                                     wildcards={"run": "offline-minilm"}, dims_of=lambda spec, rev: minilm)["runtime"]

    assert cpu(96, 64) > cpu(24, 64) and cpu(24, 256) > cpu(24, 64)


def test_value_zeroing_on_the_first_segments_of_the_sample_only(tiny_bert_dir, bert_inputs):
    """contributions.value_zeroing_segments: value zeroing on the first N sampled segments, every other kind on all
    of them with the same numbers as without the cap (batches never straddle N: batch 2, N 1, 3 segments)."""
    from bertlook.analyses.contribution_stats import run_contributions

    seg, tb = bert_inputs
    full = run_contributions(str(tiny_bert_dir), seg, tb, _options(segments=3))
    part = run_contributions(str(tiny_bert_dir), seg, tb, _options(segments=3, value_zeroing_segments=1))
    n = part.stats.groupby("kind")["n_examples"].first()
    assert n["value_zeroing"] == 1 and (n.drop("value_zeroing") == 3).all()
    other = full.stats["kind"] != "value_zeroing"
    assert np.array_equal(full.stats[other].to_numpy(), part.stats[other].to_numpy())
    assert not np.allclose(full.stats[~other][["sep"]].to_numpy(), part.stats[~other][["sep"]].to_numpy())
    s = part.summary["statistics"]
    assert s["value_zeroing_ids"] == s["sample_ids"][:1] and len(s["sample_ids"]) == 3
    assert part.summary["value_zeroing_layer_passes"]["statistics"] < full.summary["value_zeroing_layer_passes"]["statistics"]


def test_explorer_maps_of_the_explorer_sentences(tiny_bert_dir, bert_inputs, tmp_path):
    """explorer_sentences: word-level ALTI per head [L, H, W+2, W+2], ALTI over layers and value zeroing [L, W+2,
    W+2] of the first sentences of words[0]..words[1] words (file order), through the npz and back."""
    from bertlook.analyses.contribution_explorer import read_explorer_maps, write_explorer_maps
    from bertlook.analyses.contribution_stats import run_contributions

    seg, tb = bert_inputs
    result = run_contributions(str(tiny_bert_dir), seg, tb, _options(explorer_sentences=1, explorer_words=(7, 12)))
    ex = result.explorer
    assert ex["ids"] == ["s2"]  # s1 has 6 words: too short for (7, 12)
    W = len(SENTENCES[1]) + 2
    assert ex["alti_heads"][0].shape == (2, 2, W, W) and ex["value_zeroing"][0].shape == (2, W, W)
    assert result.summary["explorer_ids"] == ["s2"] and result.summary["value_zeroing_layer_passes"]["explorer"] > 0
    path = tmp_path / "explorer.npz"
    write_explorer_maps(path, ex)
    back = read_explorer_maps(path)
    assert set(back) == {"s2"} and np.allclose(back["s2"]["alti_rollout"], ex["alti_rollout"][0], atol=1e-3)
    # word rows are distributions (ALTI over layers: float16 in the file)
    assert np.allclose(back["s2"]["alti_rollout"].sum(-1), 1.0, atol=1e-2)
    assert run_contributions(str(tiny_bert_dir), seg, tb, _options()).explorer is None
