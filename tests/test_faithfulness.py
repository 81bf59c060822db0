"""Which measure to trust (bertlook faithfulness): the table for a tiny BERT and a tiny GPT-2 decoder, a planted
case where the agreement fails, the bootstrap's determinism, token removal by hand and the CLI's error path."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bertlook.analyses.faithfulness_stats import bootstrap_indices, segment_agreement, spearman

TEXTS = [("the cat sat on the mat .", "the dog ran to the house ."),
         ("john read a book in paris .", "mary wrote two books in london ."),
         ("the king saw the queen .", "they went to the river and the city ."),
         ("he said that she was there .", "it was a very old house .")]
DECODER_TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big and old.",
                 "Anarchism is a political philosophy. It is sceptical of authority."] * 3


@pytest.fixture(scope="module")
def bert_segments(tmp_path_factory, tiny_mlm_dir):
    from transformers import AutoTokenizer

    from bertlook.testing.tiny_models import make_segment

    tok = AutoTokenizer.from_pretrained(tiny_mlm_dir)
    path = tmp_path_factory.mktemp("faith_bert") / "segments.jsonl"
    path.write_text("".join(json.dumps(make_segment(tok, i, a, b)) + "\n" for i, (a, b) in enumerate(TEXTS)))
    return path


@pytest.fixture(scope="module")
def decoder(tmp_path_factory, fixtures_dir):
    import bz2

    from transformers import AutoTokenizer

    from bertlook.data.documents import iter_documents
    from bertlook.data.segments import build_segments, write_segments
    from bertlook.testing.tiny_models import make_tiny_decoder

    tmp = tmp_path_factory.mktemp("faith_gpt2")
    lm = make_tiny_decoder(tmp / "gpt2_lm", "gpt2", DECODER_TEXTS, max_positions=200, lm_head=True)
    dump = tmp / "wiki.xml.bz2"
    dump.write_bytes(bz2.compress((fixtures_dir / "tiny_wiki.xml").read_bytes()))
    segs, _ = build_segments(iter_documents(dump), AutoTokenizer.from_pretrained(lm), n_segments=4, max_seq_len=40,
                             seed=0)
    write_segments(tmp / "segments.jsonl", segs)
    return {"lm": lm, "segments": tmp / "segments.jsonl"}


def _options(**kw):
    from bertlook.analyses.faithfulness import FaithfulnessOptions

    return FaithfulnessOptions(**{"segments": 3, "ablated_tokens": 5, "bootstrap": 200, "device": "cpu", **kw})


def _check_table(result, n_segments: int):
    from bertlook.analyses.faithfulness import COLUMNS, GROUND_TRUTHS
    from bertlook.analyses.faithfulness_pass import MEASURES

    t = result.table
    assert list(t.columns) == COLUMNS and len(t) == len(MEASURES) * len(GROUND_TRUTHS)
    assert set(t["measure"]) == set(MEASURES) and set(t["ground_truth"]) == set(GROUND_TRUTHS)
    rho = t["spearman"].astype(float)
    assert rho.notna().all() and (rho.abs() <= 1).all(), t
    assert (t["ci_low"].astype(float) <= rho + 1e-12).all() and (rho <= t["ci_high"].astype(float) + 1e-12).all()
    assert (t["n_segments"] == n_segments).all() and (t["n_pairs"] > 0).all() and t["note"].isna().all()
    s = result.summary
    assert s["status"] == "ok" and s["loss_status"] == "ok" and len(s["sample_ids"]) == n_segments
    assert set(s["seconds"]) == {"load", "maps", "value_zeroing", "gradients", "ablations", "head_ablation",
                                 "agreement"}
    # every token of the sample is removed or counted under a reason
    removed = sum(len(r["removed"]) for r in s["removed_tokens"])
    assert removed + sum(s["excluded_tokens"].values()) == sum(r["tokens"] for r in s["removed_tokens"])
    h = result.heads
    assert len(h) == 2 * 2 and h["note"].isna().all() and np.isfinite(h["loss_change"].astype(float)).all()
    assert sorted(h["rank_loss_change"]) == [1, 2, 3, 4]
    assert s["head_ablation"]["status"] == "ok" and -1 <= s["head_ablation"]["spearman"] <= 1


def test_faithfulness_table_of_a_tiny_bert(bert_segments, tiny_mlm_dir):
    from bertlook.analyses.faithfulness import run_faithfulness

    result = run_faithfulness(bert_segments, str(tiny_mlm_dir), _options())
    _check_table(result, 3)
    assert result.summary["objective"] == "masked-LM"
    assert {"first token", "last token", "masked (a loss target)"} <= set(result.summary["excluded_tokens"])
    again = run_faithfulness(bert_segments, str(tiny_mlm_dir), _options())  # deterministic
    pd.testing.assert_frame_equal(result.table, again.table)
    pd.testing.assert_frame_equal(result.heads, again.heads)


def test_faithfulness_table_of_a_tiny_decoder(decoder):
    from bertlook.analyses.faithfulness import run_faithfulness

    result = run_faithfulness(decoder["segments"], str(decoder["lm"]), _options(head_ablation="zero"))
    _check_table(result, 3)
    assert result.summary["objective"] == "next-token" and result.summary["head_ablation"]["mode"] == "zero"
    assert "fewer than 3 later tokens" in result.summary["excluded_tokens"]


def test_a_model_without_its_head_has_no_loss_rows(bert_segments, tiny_bert_dir):
    from bertlook.analyses.faithfulness import run_faithfulness

    result = run_faithfulness(bert_segments, str(tiny_bert_dir), _options(segments=2, ablated_tokens=4,
                                                                          value_zeroing_layers="last"))
    t = result.table
    loss = t[(t["ground_truth"] == "loss_change") | t["measure"].isin(["grad_attention", "value_zeroing_rollout"])]
    assert loss["spearman"].isna().all() and loss["note"].str.startswith("not run").all()
    assert t.loc[t["measure"] == "value_zeroing_rollout", "note"].str.contains("last layer only").all()
    rep = t.drop(loss.index)
    assert rep["spearman"].notna().all() and len(rep) == 7
    assert result.summary["loss_status"] == "not run" and result.heads["note"].iloc[0].startswith("not run")


def test_token_removal_by_hand(tiny_mlm_dir):
    """The ablation pass against a forward pass of the shorter sequence itself."""
    import torch

    from bertlook.analyses.faithfulness_pass import token_ablations
    from bertlook.analyses.gradient_pass import IGNORE_INDEX, MaskedSegment
    from bertlook.attention.mlm import load_mlm_checked, mlm_head_module
    from bertlook.attention.modeling import resolve_model

    model, ok, _, _ = load_mlm_checked(resolve_model(str(tiny_mlm_dir)))
    ids = [2, 10, 11, 12, 13, 14, 3]
    labels = [IGNORE_INDEX] * 7
    labels[4] = 13
    ex = MaskedSegment(id=0, tokens=["x"] * 7, input_tokens=["x"] * 7, input_ids=[2, 10, 11, 12, 4, 14, 3],
                       token_type_ids=[0] * 7, labels=labels, masked_positions=[4], actions=["mask"])
    out = token_ablations(model, mlm_head_module(model), ex, [2], False, "cpu")
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ex.input_ids]), output_hidden_states=True)
        short_ids = [2, 10, 12, 4, 14, 3]
        short = model(input_ids=torch.tensor([short_ids]), output_hidden_states=True)
    h0, h1 = full.hidden_states[-1][0].double(), short.hidden_states[-1][0].double()
    want = 1 - torch.nn.functional.cosine_similarity(h0[[0, 1, 3, 4, 5, 6]], h1, dim=-1)
    got = out["change"][0]
    assert np.isnan(got[2]) and np.allclose(np.delete(got, 2), want.numpy(), atol=1e-6)
    ce = torch.nn.functional.cross_entropy
    loss0 = float(ce(full.logits[0, 4][None], torch.tensor([13])))
    loss1 = float(ce(short.logits[0, 3][None], torch.tensor([13])))
    assert out["loss"][0] == pytest.approx(loss1 - loss0, abs=1e-5)


def test_a_planted_reverse_measure_disagrees():
    """The correlation can fail: a measure that ranks the tokens in the reverse order of the ground truth gets -1,
    one that agrees +1, noise about 0 (the agreement is not built to come out positive)."""
    rng = np.random.default_rng(0)
    truth = [rng.random(12) for _ in range(6)]
    idx = bootstrap_indices(6, 500, 0)
    agree = segment_agreement([[spearman(t, 2 * t + 1)] for t in truth], idx)
    reverse = segment_agreement([[spearman(t, -t)] for t in truth], idx)
    noise = segment_agreement([[spearman(t, rng.random(12))] for t in truth], idx)
    assert agree.spearman == pytest.approx(1.0) and reverse.spearman == pytest.approx(-1.0)
    assert reverse.ci_high == pytest.approx(-1.0) and -0.8 < noise.spearman < 0.8 and noise.ci_low < noise.ci_high
    assert np.isnan(spearman(np.ones(5), np.arange(5.0)))  # a constant side: undefined, not 0
    assert spearman(np.array([1.0, 2.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(0.9486833)


def test_bootstrap_is_deterministic():
    per = [[0.1, 0.5], [0.3], [-0.2, 0.4, float("nan")], [0.9]]
    a = segment_agreement(per, bootstrap_indices(4, 300, 7))
    b = segment_agreement(per, bootstrap_indices(4, 300, 7))
    c = segment_agreement(per, bootstrap_indices(4, 300, 8))
    assert a == b and (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert a.spearman == pytest.approx(np.mean([0.1, 0.5, 0.3, -0.2, 0.4, 0.9])) and a.n_undefined == 1


def test_cli_writes_everything_or_nothing(tmp_path, bert_segments, tiny_mlm_dir, capsys):
    from bertlook.cli import main

    outs = {f: tmp_path / name for f, name in (("--out-table", "f.csv"), ("--out-markdown", "f.md"),
                                                ("--out-heads", "h.csv"), ("--summary", "s.json"))}
    flags = [x for f, p in outs.items() for x in (f, str(p))]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 0, "tokens": []}\n')
    assert main(["faithfulness", "--segments", str(bad), "--model", str(tiny_mlm_dir), *flags]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not any(p.exists() for p in outs.values())
    assert main(["faithfulness", "--segments", str(bert_segments), "--model", str(tiny_mlm_dir), *flags,
                 "--n-segments", "2", "--ablated-tokens", "3", "--bootstrap", "100", "--device", "cpu"]) == 0
    assert all(p.exists() for p in outs.values())
    png = tmp_path / "f.png"
    assert main(["faithfulness", "--figure-from", str(outs["--out-table"]), "--out-figure", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["faithfulness", "--figure-from", str(bad), "--out-figure", str(tmp_path / "g.png")]) == 2
    assert not (tmp_path / "g.png").exists()
    assert "# Which measure to trust" in outs["--out-markdown"].read_text()
    summary = json.loads(outs["--summary"].read_text())
    assert summary["settings"]["seed"] == 0 and summary["settings"]["segments"] == 2


def test_zero_ablation_of_a_head_is_zero_values(tiny_mlm_dir):
    """Zeroing head h's slice at the output projection's input = a model whose value weights and bias of head h are
    0 (the head's output is sum_j alpha_ij 0): the loss changes agree; mean ablation differs."""
    import copy

    import torch

    from bertlook.analyses.gradient_pass import IGNORE_INDEX, MaskedSegment
    from bertlook.analyses.head_ablation import head_ablation
    from bertlook.attention.mlm import load_mlm_checked, mlm_head_module
    from bertlook.attention.modeling import resolve_model

    model, _, _, _ = load_mlm_checked(resolve_model(str(tiny_mlm_dir)))
    ids = [2, 10, 11, 4, 13, 14, 3]
    labels = [IGNORE_INDEX] * 7
    labels[3] = 12
    ex = MaskedSegment(id=0, tokens=["x"] * 7, input_tokens=["x"] * 7, input_ids=ids, token_type_ids=[0] * 7,
                       labels=labels, masked_positions=[3], actions=["mask"])
    change, base = head_ablation(model, mlm_head_module(model), [ex], False, "cpu", "zero")
    ce = torch.nn.functional.cross_entropy
    d_head = model.config.hidden_size // 2
    with torch.no_grad():
        for k in range(4):
            cut = copy.deepcopy(model)
            value = cut.bert.encoder.layer[k // 2].attention.self.value
            value.weight[(k % 2) * d_head:(k % 2 + 1) * d_head] = 0.0
            value.bias[(k % 2) * d_head:(k % 2 + 1) * d_head] = 0.0
            out = cut(input_ids=torch.tensor([ids]))
            loss = float(ce(out.logits[0, 3][None], torch.tensor([12])))
            assert abs(loss - base[0]) > 1e-6 and change[0, k] == pytest.approx(loss - base[0], abs=1e-5), k
    mean_change, _ = head_ablation(model, mlm_head_module(model), [ex], False, "cpu", "mean")
    assert not np.allclose(mean_change, change)  # the mean of a head's output is not 0
