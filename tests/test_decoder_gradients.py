"""Fig 3 and head importance of a decoder with its own objective: the next-token loss (not a masked-LM loss),
equal to the model's own loss; the first token (the sink) as the twin of [SEP]."""

from __future__ import annotations

import numpy as np
import pytest

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big and old.",
         "Anarchism is a political philosophy. It is sceptical of authority."] * 3


@pytest.fixture(scope="module")
def decoder_run(tmp_path_factory, fixtures_dir):
    import bz2

    from transformers import AutoTokenizer

    from bertlook.data.documents import iter_documents
    from bertlook.data.segments import build_segments, write_segments
    from bertlook.testing.tiny_models import make_tiny_decoder

    tmp = tmp_path_factory.mktemp("dec_grad")
    lm = make_tiny_decoder(tmp / "gpt2_lm", "gpt2", TEXTS, max_positions=200, lm_head=True)
    # a Llama base model with untied embeddings: its checkpoint lacks lm_head.weight (a GPT-2 base model would
    # not: its head is the tied input embedding)
    base = make_tiny_decoder(tmp / "llama_base", "llama", TEXTS, max_positions=200)
    dump = tmp / "wiki.xml.bz2"
    dump.write_bytes(bz2.compress((fixtures_dir / "tiny_wiki.xml").read_bytes()))
    segs, _ = build_segments(iter_documents(dump), AutoTokenizer.from_pretrained(lm), n_segments=5, max_seq_len=48,
                             seed=0)
    write_segments(tmp / "segments.jsonl", segs)
    return {"lm": lm, "base": base, "segments": tmp / "segments.jsonl", "segs": segs}


def test_next_token_examples_by_hand(decoder_run):
    from transformers import AutoTokenizer

    from bertlook.analyses.gradient_pass import IGNORE_INDEX, next_token_examples

    tok = AutoTokenizer.from_pretrained(decoder_run["lm"])
    seg = {"id": 7, "tokens": ["The", "Ġcat", "Ġsat"], "segment_ids": [0, 0, 1]}
    (ex,) = next_token_examples([seg], tok)
    ids = tok.convert_tokens_to_ids(seg["tokens"])
    assert ex.input_ids == ids and ex.labels == [ids[1], ids[2], IGNORE_INDEX]
    assert ex.masked_positions == [0, 1] and ex.actions == ["next", "next"] and ex.token_type_ids == [0, 0, 0]


def test_next_token_loss_is_the_models_own(decoder_run):
    import torch

    from bertlook.analyses.gradient_pass import attention_gradients, next_token_examples
    from bertlook.attention.mlm import load_mlm_checked
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    resolved = resolve_model(str(decoder_run["lm"]))
    model, ok, reason, _ = load_mlm_checked(resolved)
    assert ok and type(model).__name__ == "GPT2LMHeadModel"
    examples = next_token_examples(decoder_run["segs"][:3], load_tokenizer(resolved))
    out = attention_gradients(model, examples)
    for ex, o in zip(examples, out):
        ids = torch.tensor([ex.input_ids])
        with torch.no_grad():
            want = float(model(input_ids=ids, labels=ids).loss)  # transformers shifts the labels itself
        assert o["loss"] == pytest.approx(want, rel=1e-5)
        assert np.abs(np.triu(o["attn"], 1)).max() == 0.0  # causal maps


def test_gradients_of_a_decoder(decoder_run):
    from bertlook.analyses.gradients import DECODER_TARGETS, GradientOptions, sep_gradient_importance

    frame, summary = sep_gradient_importance(decoder_run["segments"], str(decoder_run["lm"]),
                                             GradientOptions(device="cpu", progress_every=0, batch_size=2))
    assert summary["status"] == "ok" and summary["objective"] == "next-token"
    assert summary["targets"] == list(DECODER_TARGETS) and summary["model_provenance"]["family"] == "decoder"
    assert frame["target"].tolist()[:3] == list(DECODER_TARGETS) and len(frame) == 2 * 3
    first = frame[frame["target"] == "first token"]
    assert (first["attention_mass"] > 0).all() and np.isfinite(frame["mean_abs_grad"]).all()
    assert summary["masked_tokens"] == sum(len(s["tokens"]) - 1 for s in decoder_run["segs"])


def test_decoder_without_lm_head_is_not_run(decoder_run):
    from bertlook.analyses.gradients import GradientOptions, sep_gradient_importance

    frame, summary = sep_gradient_importance(decoder_run["segments"], str(decoder_run["base"]),
                                             GradientOptions(device="cpu", progress_every=0))
    assert summary["status"] == "not run" and "no language-model head" in summary["reason"]


def test_fig3_of_a_decoder(decoder_run, tmp_path):
    from bertlook.analyses.gradients import GradientOptions, sep_gradient_importance
    from bertlook.io_utils import write_csv
    from bertlook.reporting.figures import fig3_sep_gradients

    frame, _ = sep_gradient_importance(decoder_run["segments"], str(decoder_run["lm"]),
                                       GradientOptions(device="cpu", progress_every=0, max_examples=2))
    write_csv(tmp_path / "g.csv", frame)
    assert fig3_sep_gradients(tmp_path / "g.csv", tmp_path / "g.png").stat().st_size > 1000


def test_causal_statistics_count_only_visible_entries(decoder_run):
    """Fig 3's mean |dL/dA| of a decoder averages over the entries a row sees: recomputed here from the raw
    gradients (lower triangle only) for one segment."""
    from bertlook.analyses.gradient_pass import attention_gradients, batch_statistics, next_token_examples
    from bertlook.attention.mlm import load_mlm_checked
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    resolved = resolve_model(str(decoder_run["lm"]))
    model, *_ = load_mlm_checked(resolved)
    (ex,) = next_token_examples(decoder_run["segs"][:1], load_tokenizer(resolved))
    stats = batch_statistics(model, [ex], sep_token=None)
    raw = attention_gradients(model, [ex])[0]["grad"]  # [layer, head, n, n]
    n, H = ex.n, raw.shape[1]
    low = np.abs(np.tril(raw))  # [layer, head, n, n]: the visible entries
    first = low[..., 0].sum(axis=(1, 2))  # [layer]: column 0, every row sees it
    assert stats["count"][0, 0] == H * n  # column 0: n rows x H heads
    assert np.allclose(stats["grad_sum"][0, :, 0], first, rtol=1e-5)
    assert stats["count"][0].sum() == H * n * (n + 1) / 2  # every visible entry, once
