"""Surface statistics and rollout on causal (decoder) maps: the first token plays [CLS], EOS tokens [SEP], row
entropies over the visible keys against ln(i+1). Hand-computed on a 3-token example; end to end through the
one-pass extraction of a tiny Llama, against the same statistics read back from its kept store."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertlook.analyses.surface_stats import (ENTROPY_SMOOTHING, SurfaceStatsAccumulator, causal_row_entropy,
                                             example_stats, reduce_surface_stats)
from bertlook.analyses.token_roles import role_masks

S = ENTROPY_SMOOTHING
# one layer, one head, tokens "The cat ." : row i sees tokens 0..i
A = np.array([[1.0, 0.0, 0.0],
              [0.5, 0.5, 0.0],
              [0.2, 0.3, 0.5]])[None, None]  # [layer, head, query_pos, key_pos]
TOKENS = ["The", "cat", "."]


def _h(ps):
    return -sum(p * math.log(p) for p in ps)


def test_roles_first_token_and_no_separator():
    is_cls, is_sep = role_masks(["The", "The", "."], None, None)
    assert is_cls.tolist() == [True, False, False] and not is_sep.any()  # position 0 only, not every "The"
    is_cls, is_sep = role_masks(["<s>", "a", "</s>"], None, "</s>")
    assert is_cls.tolist() == [True, False, False] and is_sep.tolist() == [False, False, True]
    is_cls, _ = role_masks(["[CLS]", "a", "[SEP]"], "[CLS]", "[SEP]")  # an encoder: by string, as before
    assert is_cls.tolist() == [True, False, False]


def test_causal_row_entropy_by_hand():
    ent = causal_row_entropy(A)[0, 0]
    row1 = [(1 - S) * 0.5 + S / 2] * 2
    row2 = [(1 - S) * a + S / 3 for a in (0.2, 0.3, 0.5)]
    assert ent[0] == pytest.approx(0.0, abs=1e-12)  # row 0 sees itself alone: certain
    assert ent[1] == pytest.approx(_h(row1), abs=1e-12) and ent[1] == pytest.approx(math.log(2), abs=1e-9)
    assert ent[2] == pytest.approx(_h(row2), abs=1e-12)


def test_example_stats_of_a_causal_map_by_hand():
    st = {k: float(v[0, 0]) for k, v in example_stats(A, TOKENS, cls_token=None, sep_token=None, causal=True).items()}
    assert st["cls"] == pytest.approx((1.0 + 0.5 + 0.2) / 3)  # the first token (the sink)
    assert st["sep"] == 0.0 and st["rest_sep"] == 0.0 and math.isnan(st["sep_sep"])  # no EOS: no [SEP] rows
    assert st["punct"] == pytest.approx(0.5 / 3)
    assert st["self"] == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    assert st["prev"] == pytest.approx((0.5 + 0.3) / 3)
    assert st["next"] == 0.0  # a causal row never sees i + 1
    assert st["entropy"] == pytest.approx(float(causal_row_entropy(A)[0, 0].mean()))
    assert math.isnan(st["cls_entropy"])
    assert st["max_attention"] == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    # the same map read as an encoder's smooths over all 3 keys: a different (larger) entropy
    enc = example_stats(A, ["[CLS]", "cat", "."], causal=False)
    assert float(enc["entropy"][0, 0]) > st["entropy"]


def test_accumulator_uniform_entropy_is_mean_ln_i_plus_1():
    acc = SurfaceStatsAccumulator(1, 1, cls_token=None, sep_token=None, causal=True)
    acc.add({"id": 0, "tokens": TOKENS}, A)
    frame, summary = reduce_surface_stats([acc.partial(n_examples_in_store=1)])
    assert summary["uniform_entropy"] == pytest.approx((math.log(1) + math.log(2) + math.log(3)) / 3)
    assert summary["causal"] is True and summary["token_roles"]["cls"] == "the first token (position 0)"
    assert frame["cls"].iloc[0] == pytest.approx(1.7 / 3)
    enc = SurfaceStatsAccumulator(1, 1, cls_token=None, sep_token=None)  # same roles, not causal
    enc.add({"id": 0, "tokens": TOKENS}, A)
    with pytest.raises(Exception, match="causal"):
        reduce_surface_stats([acc.partial(n_examples_in_store=1), enc.partial(n_examples_in_store=1)])


def test_rollout_of_a_causal_map_by_hand():
    from bertlook.analyses.rollout import rollout, rollout_example_stats

    R = rollout(A)  # one layer: 0.5 A + 0.5 I, rows renormalised (they already sum to 1)
    st = rollout_example_stats(R, TOKENS, cls_token=None, sep_token=None, causal=True)
    want_r = 0.5 * A[0, 0] + 0.5 * np.eye(3)
    assert np.allclose(R[0], want_r)
    assert float(st["cls"][0]) == pytest.approx(want_r[:, 0].sum() / 3)
    assert float(st["sep"][0]) == 0.0
    assert float(st["entropy"][0]) == pytest.approx(float(causal_row_entropy(want_r).mean()))


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory, fixtures_dir):
    """A tiny Llama's segments through extract-segments: the one-pass partials and the kept store."""
    import bz2

    from bertlook.cli import main
    from bertlook.data.documents import iter_documents
    from bertlook.data.segments import build_segments, write_segments
    from bertlook.testing.tiny_models import make_tiny_decoder
    from transformers import AutoTokenizer

    tmp = tmp_path_factory.mktemp("llama_run")
    texts = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big."] * 3
    model = make_tiny_decoder(tmp / "llama", "llama", texts, max_positions=200)
    dump = tmp / "wiki.xml.bz2"
    dump.write_bytes(bz2.compress((fixtures_dir / "tiny_wiki.xml").read_bytes()))
    segs, _ = build_segments(iter_documents(dump), AutoTokenizer.from_pretrained(model), n_segments=6,
                             max_seq_len=48, seed=0)
    write_segments(tmp / "segments.jsonl", segs)
    rc = main(["extract-segments", "--segments", str(tmp / "segments.jsonl"), "--model", str(model), "--out",
               str(tmp / "store"), "--device", "cpu", "--max-unk-rate", "1", "--stats-partial", str(tmp / "stats.npz"),
               "--rollout-partial", str(tmp / "rollout.npz"), "--summary", str(tmp / "summary.json")])
    assert rc == 0
    return tmp


def test_one_pass_decoder_stats_equal_the_store_read_back(llama_run):
    from bertlook.analyses.surface_stats import run_surface_stats_step

    streamed = run_surface_stats_step(partials=[llama_run / "stats.npz"])
    stored = run_surface_stats_step(llama_run / "store")
    assert streamed.summary["causal"] is True and stored.summary["causal"] is True
    assert streamed.summary["special_tokens"] == {"cls": None, "sep": "</s>"}
    cols = ["cls", "sep", "punct", "self", "prev", "next", "entropy", "max_attention"]
    assert np.allclose(streamed.frame[cols].to_numpy(), stored.frame[cols].to_numpy(), rtol=1e-12, atol=0)
    assert streamed.frame["cls_entropy"].isna().all() and (streamed.frame["next"] == 0).all()
    # the first token's share, recomputed from the store: position 0 is "<s>" in every segment
    from bertlook.attention.store import open_store

    store = open_store(llama_run / "store", level="token")
    shares = np.mean([a.astype(np.float64)[:, :, :, 0].mean(axis=-1) for _, a in store], axis=0)  # [layer, head]
    assert np.allclose(streamed.frame["cls"].to_numpy(), shares.ravel(), rtol=1e-9)
    assert streamed.summary["uniform_entropy"] < math.log(streamed.summary["mean_tokens"])


def test_one_pass_decoder_rollout(llama_run):
    from bertlook.analyses.rollout import run_rollout

    result = run_rollout(None, partials=[llama_run / "rollout.npz"])
    assert len(result.stats) == 2 and np.isfinite(result.stats["cls"]).all()
    assert (result.stats["sep"] == 0).all()  # no EOS in a Llama segment
