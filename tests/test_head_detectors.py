"""Head detectors: hand-computed targets and scores, the tokenizer's template, a two-layer attention-only
model whose weights are set by hand to implement an induction head (and a control that does not), the
tiny decoders of every family and the CLI."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from bertlook.analyses.head_detectors import (DetectorSums, detector_targets, score_batches, score_frame,
                                              uniform_scores)
from bertlook.errors import BertlookError

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big and old."] * 3


# ------------------------------------------------------------------------------------ hand-computed
def test_targets_of_a_six_token_example():
    # [CLS] a b a b [SEP]: offset 1, two copies of 2 tokens
    t = detector_targets(1, 2, 6)
    assert t["prev_token"][0].tolist() == [2, 3, 4] and t["prev_token"][1].tolist() == [1, 2, 3]
    assert t["duplicate_token"][0].tolist() == [3, 4] and t["duplicate_token"][1].tolist() == [1, 2]
    assert t["induction"][0].tolist() == [3, 4] and t["induction"][1].tolist() == [2, 3]
    assert t["sink"][0].tolist() == [1, 2, 3, 4, 5] and t["sink"][1].tolist() == [0] * 5
    with pytest.raises(BertlookError, match="cannot hold"):
        detector_targets(1, 3, 6)


def test_uniform_scores_causal_and_encoder():
    t = detector_targets(0, 2, 4)  # a b a b, no specials
    u = uniform_scores(t, 4, causal=True)
    # prev: queries 1,2,3 see 2,3,4 keys; dup/induction: queries 2,3; sink: queries 1,2,3
    assert u["prev_token"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert u["induction"] == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert uniform_scores(t, 4, causal=False)["induction"] == pytest.approx(0.25)


def _causal_uniform(T):
    a = np.tril(np.ones((T, T)))
    return a / a.sum(axis=1, keepdims=True)


def test_scores_of_hand_written_maps():
    # layer 1: head 1 attends to the previous token (row 0 to itself), head 2 uniformly (causal)
    T = 4  # a b a b
    prev = np.eye(T, k=-1)
    prev[0, 0] = 1.0
    maps = np.stack([prev, _causal_uniform(T)])[None, None]  # [batch, layer, head, T, T]
    result = score_batches([maps, maps], offset=0, length=2, n_positions=T, causal=True)
    row = result.frame.set_index(["layer", "head"])
    assert row.loc[(1, 1), "prev_token"] == 1.0
    # previous token of query 2 is key 1 = the token after the earlier "a": prev-token = induction here
    assert row.loc[(1, 1), "induction"] == 1.0 and row.loc[(1, 1), "duplicate_token"] == 0.0
    assert row.loc[(1, 1), "sink"] == pytest.approx(1 / 3)  # query 1 -> key 0 only
    assert row.loc[(1, 2), "duplicate_token"] == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert result.summary["detectors"]["prev_token"]["detected_heads"] == ["1-1"]
    assert result.summary["n_sequences"] == 2
    assert result.summary["sink_share_per_layer"] == [pytest.approx(((1 / 3) + (1 / 2 + 1 / 3 + 1 / 4) / 3) / 2,
                                                                    abs=1e-6)]


def test_bad_maps_and_empty_stream():
    sums = DetectorSums(detector_targets(0, 2, 4))
    with pytest.raises(BertlookError, match="expected maps"):
        sums.add(np.zeros((1, 4, 4)))
    with pytest.raises(BertlookError, match="no sequence"):
        sums.scores()


def test_frame_is_one_indexed():
    scores = {n: np.arange(6, dtype=float).reshape(2, 3) for n in ("prev_token", "duplicate_token", "induction", "sink")}
    frame = score_frame(scores)
    assert frame[["layer", "head"]].values.tolist() == [[1, 1], [1, 2], [1, 3], [2, 1], [2, 2], [2, 3]]
    assert frame["induction"].tolist() == [0, 1, 2, 3, 4, 5]


# ------------------------------------------------------------------- a hand-built induction circuit
def _hand_built_model(vocab: int, positions: int, *, shift: int, beta: float = 30.0):
    """Two attention-only layers, one-hot residual stream [token (V) | position (P) | previous token (V)].

    Layer 1, head 1 attends from position i to position i - 1 (``shift=1``; a control: ``shift=0``, to itself)
    and writes that position's token into the "previous token" block. Layer 2, head 1 matches the current
    token (query) against the previous-token block (key): with ``shift=1`` it attends to the position after
    an earlier occurrence of the current token -- an induction head. Every second head has zero query and
    key weights (uniform over what it sees). Causal softmax with gain ``beta``. Each layer is a module that
    returns ``(output, weights)``, declared as transformers declares its attention modules
    (``_can_record_outputs``), so the extraction captures it layer by layer like a real model.
    """
    import torch

    V, P = vocab, positions

    def causal_softmax(scores, mask):
        T = scores.shape[-1]
        keep = torch.tril(torch.ones(T, T, dtype=torch.bool)) & mask[:, None, :].bool()  # [batch, query, key]
        return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)

    class Layer(torch.nn.Module):
        def __init__(self, first: bool):
            super().__init__()
            self.first = first

        def forward(self, x, mask):  # x: [batch, pos, V + P + V]
            B, T, _ = x.shape
            tok, pos, prev = x[..., :V], x[..., V:V + P], x[..., V + P:]
            if self.first:  # query = position i, key = position j + shift: score beta when j = i - shift
                key = torch.roll(torch.eye(P), shifts=shift, dims=1)[:T].expand(B, T, P)  # e_{j+shift}
                a = causal_softmax(beta * pos @ key.transpose(1, 2), mask)  # [batch, query, key]
                out = torch.cat([torch.zeros_like(tok), torch.zeros_like(pos), a @ tok], dim=-1)
            else:  # query = current token, key = the previous-token block
                a = causal_softmax(beta * tok @ prev.transpose(1, 2), mask)
                out = torch.zeros_like(x)
            uniform = causal_softmax(torch.zeros(B, T, T), mask)
            return x + out, torch.stack([a, uniform], dim=1)  # [batch, head, query, key]

    class HandBuilt(torch.nn.Module):
        _can_record_outputs = {"attentions": Layer}

        def __init__(self):
            super().__init__()
            self.config = types.SimpleNamespace(pad_token_id=0, num_hidden_layers=2, num_attention_heads=2)
            self.layers = torch.nn.ModuleList([Layer(True), Layer(False)])

        def forward(self, input_ids, attention_mask, **_):
            B, T = input_ids.shape
            x = torch.cat([torch.nn.functional.one_hot(input_ids, V).float(), torch.eye(P)[:T].expand(B, T, P),
                           torch.zeros(B, T, V)], dim=-1)
            for layer in self.layers:
                x, _ = layer(x, attention_mask)
            return types.SimpleNamespace(last_hidden_state=x)

    return HandBuilt()


def _hand_built_scores(shift: int):
    from bertlook.attention.repeated_tokens import RepeatedTokens, repeated_token_batches

    V, k, n = 40, 12, 8
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(n):
        r = rng.choice(np.arange(1, V), size=k, replace=False)
        rows.append([0, *r, *r])  # a BOS (id 0) first: position 0 attends to itself, so its "previous token" is BOS
    seqs = RepeatedTokens(ids=np.array(rows), offset=1, length=k)
    model = _hand_built_model(V, 2 * k + 2, shift=shift)
    batches = repeated_token_batches(model, seqs, batch_size=3, device="cpu", num_layers=2, num_heads=2,
                                     use_token_types=False)
    return score_batches(batches, offset=1, length=k, n_positions=2 * k + 1, causal=True)


def test_hand_built_induction_head_is_detected():
    result = _hand_built_scores(shift=1)
    row = result.frame.set_index(["layer", "head"])
    assert row.loc[(1, 1), "prev_token"] > 0.99
    assert row.loc[(2, 1), "induction"] > 0.99
    assert row.loc[(2, 1), "duplicate_token"] < 0.01
    det = result.summary["detectors"]
    assert det["induction"]["detected_heads"] == ["2-1"]
    assert det["prev_token"]["detected_heads"] == ["1-1"]
    assert row.loc[(2, 2), "induction"] == pytest.approx(det["induction"]["uniform_attention_score"], rel=1e-5)


def test_control_without_previous_token_head_is_not_an_induction_head():
    result = _hand_built_scores(shift=0)  # layer 1 attends to itself: layer 2 finds the same token again
    row = result.frame.set_index(["layer", "head"])
    assert row.loc[(2, 1), "induction"] < 0.05
    # its key block holds each position's own token: half on the earlier occurrence, half on itself
    assert row.loc[(2, 1), "duplicate_token"] == pytest.approx(0.5, abs=1e-6)
    assert result.summary["detectors"]["induction"]["detected_heads"] == []


# --------------------------------------------------------------------------- templates, real models
@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    from bertlook.testing.tiny_models import DECODER_ARCHS, make_tiny_decoder

    return {arch: make_tiny_decoder(tmp_path_factory.mktemp(arch), arch, TEXTS) for arch in DECODER_ARCHS}


def test_repeated_tokens_follow_the_tokenizer_template(tiny_bert_dir, decoders):
    from transformers import AutoTokenizer

    from bertlook.attention.repeated_tokens import make_repeated_tokens

    for path, prefix, suffix in [(tiny_bert_dir, ["[CLS]"], ["[SEP]"]), (decoders["llama"], ["<s>"], []),
                                 (decoders["gpt2"], [], [])]:
        tok = AutoTokenizer.from_pretrained(path)
        seqs = make_repeated_tokens(tok, n_sequences=4, length=6, seed=3)
        again = make_repeated_tokens(tok, n_sequences=4, length=6, seed=3)
        assert np.array_equal(seqs.ids, again.ids)
        assert seqs.offset == len(prefix) and seqs.n_positions == len(prefix) + 12 + len(suffix)
        for row in seqs.ids:
            toks = tok.convert_ids_to_tokens(row.tolist())
            assert toks[:len(prefix)] == prefix and toks[len(toks) - len(suffix):] == suffix
            body = row[len(prefix):len(prefix) + 12]
            assert np.array_equal(body[:6], body[6:]) and len(set(body[:6].tolist())) == 6
            assert not set(body.tolist()) & set(tok.all_special_ids)
    with pytest.raises(BertlookError, match="fewer than"):
        make_repeated_tokens(AutoTokenizer.from_pretrained(tiny_bert_dir), n_sequences=1, length=10_000, seed=0)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "llama", "qwen2"])
def test_every_decoder_family_is_scored_with_causal_maps(decoders, arch):
    from bertlook.analyses.head_detectors import DetectorOptions, run_head_detectors

    result = run_head_detectors(str(decoders[arch]), DetectorOptions(n_sequences=5, length=8, batch_size=2,
                                                                     device="cpu"))
    s = result.summary
    assert s["family"] == "decoder" and s["causal"] is True and s["model_provenance"]["family"] == "decoder"
    assert len(result.frame) == 4 and np.isfinite(result.frame[["prev_token", "induction"]].to_numpy()).all()
    # a random tiny model attends about uniformly: its scores are near the uniform-attention score
    for name in ("prev_token", "induction"):
        assert abs(result.frame[name].mean() - s["detectors"][name]["uniform_attention_score"]) < 0.05


def test_cli_on_an_encoder_writes_table_markdown_summary(tiny_bert_dir, tmp_path, cli_main, capsys):
    out = tmp_path / "hd.csv"
    rc = cli_main(["head-detectors", "--model", str(tiny_bert_dir), "--out", str(out), "--out-markdown",
                   str(tmp_path / "hd.md"), "--summary", str(tmp_path / "hd.json"), "--n-sequences", "4",
                   "--length", "6", "--device", "cpu"])
    assert rc == 0
    assert out.read_text().splitlines()[0] == "layer,head,prev_token,duplicate_token,induction,sink"
    summary = json.loads((tmp_path / "hd.json").read_text())
    assert summary["family"] == "encoder" and summary["n_positions"] == 14 and summary["causal"] is False
    assert "| induction |" in (tmp_path / "hd.md").read_text()
    assert "head-detectors: 4 heads" in capsys.readouterr().out
