"""Word-level maps of a decoder-only model: the sentence between its BOS and EOS tokens (the encoder's layout
start w1..wn end), causal at the word level; Table 1 runs on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

TEXTS = ["Agriculture is the cultivation of animals , plants and fungi for food .",
         "The cat sat on the mat . A dog ran far away ."] * 3
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    from bertlook.testing.tiny_models import make_tiny_decoder

    return {arch: make_tiny_decoder(tmp_path_factory.mktemp(arch), arch, TEXTS, max_positions=200)
            for arch in ("gpt2", "llama")}


def test_wrap_tokens(decoders, tokenizer):
    from transformers import AutoTokenizer

    from bertlook.attention.alignment import align_words, word_wrap_tokens

    assert word_wrap_tokens(tokenizer) is None  # an encoder keeps its own [CLS] ... [SEP]
    gpt2, llama = (AutoTokenizer.from_pretrained(decoders[a]) for a in ("gpt2", "llama"))
    assert word_wrap_tokens(gpt2) == ("<|endoftext|>", "<|endoftext|>")
    assert word_wrap_tokens(llama) == ("<s>", "</s>")
    al = align_words(["The", "cat", "sat"], llama)
    assert al.tokens[0] == "<s>" and al.tokens[-1] == "</s>" and al.tokens.count("<s>") == 1
    assert al.word_of_token[0] == al.word_of_token[-1] == -1 and al.n_words == 3
    assert al.groups().tolist()[0] == 0 and al.groups().tolist()[-1] == 4


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_decoder_word_store_is_causal_and_scored(decoders, tmp_path, arch):
    from bertlook.analyses.heads_step import HeadsOptions, run_heads
    from bertlook.attention.extract_words import extract_word_attention
    from bertlook.attention.store import open_store

    summary = extract_word_attention(FIXTURES / "silver_dev.conllu", str(decoders[arch]), tmp_path / "words",
                                     device="cpu", progress_every=0, max_unk_rate=0.0, max_seq_len=200)
    # every sentence aligned (over-long ones excluded and counted); BOS/EOS are no unknown words
    assert summary["n_examples"] + summary["excluded_too_long"] == 60 and summary["excluded_alignment"] == 0
    assert summary["n_examples"] >= 50 and summary["unk_tokens"] == 0
    store = open_store(tmp_path / "words", level="word")
    assert store.meta["model"]["family"] == "decoder"
    for record, attn in store:
        a = attn.astype(np.float32)  # [layer, head, W+2, W+2]: start, words, end
        assert np.triu(a, 1).max() < 1e-6  # a word never attends to a later word (nor to the end token)
        assert np.allclose(a.sum(-1), 1.0, atol=2e-3)
    result = run_heads(tmp_path / "words", options=HeadsOptions(bootstrap=0, min_count=5, treebank_kind="silver"))
    assert len(result.accuracy) > 0 and np.isfinite(result.accuracy["accuracy"]).all()


def _causal_store(tmp_path, maps, heads, rels):
    """A word store of causal maps ``[L, H, W+2, W+2]`` (one sentence each) with the given trees."""
    from bertlook.attention.store import AttentionWriter

    meta = {"model": {"family": "decoder"}, "treebank_kind": "silver"}
    w = AttentionWriter(tmp_path / "store", num_layers=1, num_heads=1, level="word", meta=meta)
    for i, (m, hd, rl) in enumerate(zip(maps, heads, rels)):
        W = len(hd)
        w.add({"id": f"s{i}", "tokens": ["<s>", *[f"w{j}" for j in range(W)], "</s>"], "heads": hd, "rels": rl,
               "upos": ["X"] * W, "xpos": ["X"] * W}, np.asarray(m, dtype=np.float16)[None, None])
    w.close(excluded={})
    return tmp_path / "store"


def test_visible_heads_by_hand(tmp_path):
    """Three words w1 w2 w3, gold heads 2, 0 (root), 2: w1 <- w2 -> w3. A causal previous-word head (row i puts
    all on word i-1; w1 on <s>): dep2head sees w3's head w2 (correct) but not w1's (w2 comes later)."""
    from bertlook.analyses.heads import score_heads
    from bertlook.analyses.table1 import table1
    from bertlook.attention.store import open_store

    m = np.zeros((5, 5))
    m[0, 0] = 1.0  # <s>
    m[1, 0] = 1.0  # w1 -> <s>
    m[2, 1] = 1.0  # w2 -> w1
    m[3, 2] = 1.0  # w3 -> w2
    m[4, 3] = 1.0  # </s> -> w3
    store = _causal_store(tmp_path, [m], [[2, 0, 2]], [["nsubj", "root", "obj"]])
    scores = score_heads(open_store(store, level="word"), offsets=(-1, 1))
    vis, base_vis = scores.visible_for("All")
    # dep2head visible: w3 (head w2 before it) only; head2dep visible: w1 (its head w2 comes after it) only
    assert vis.tolist() == [1, 1]
    r_obj, r_nsubj = scores.relation_index("obj"), scores.relation_index("nsubj")
    assert scores.visible[r_obj].tolist() == [1, 0] and scores.visible[r_nsubj].tolist() == [0, 1]
    # offset -1 (previous word) is right for w3 (dep2head visible); +1 is right for w1, which is not visible
    assert base_vis.tolist() == [1, 0]
    t = table1(scores, min_count=0, bootstrap=0).set_index("relation")
    assert t.loc["obj", "visible_dep2head"] == 1.0 and t.loc["obj", "accuracy_visible"] == 1.0
    assert t.loc["All", "visible_dep2head"] == pytest.approx(1 / 3)
    assert t.loc["All", "baseline_offset_visible"] == -1 and t.loc["All", "baseline_accuracy_visible"] == 1.0


def test_uniformity_of_causal_maps_is_measured_against_ln_i_plus_1(tmp_path):
    from bertlook.analyses.uniformity import row_entropy_by_layer

    n = 5  # <s> w1 w2 w3 </s>
    m = np.tril(np.ones((n, n)))
    m /= m.sum(axis=1, keepdims=True)  # uniform over what each row sees; float16 rounding aside
    store = _causal_store(tmp_path, [m], [[2, 0, 2]], [["nsubj", "root", "obj"]])
    (layer,) = row_entropy_by_layer(store)
    assert layer["mean_ln_n"] == pytest.approx(np.log(np.arange(1, n + 1)).mean())
    assert layer["ratio"] == pytest.approx(1.0, abs=1e-3) and layer["mean_row_ratio"] == pytest.approx(1.0, abs=1e-3)
