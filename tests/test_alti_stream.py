"""ALTI as a reader of the extraction stream (bertlook.attention.alti_stream): the maps it hands a layer reader are
the authors' per-layer ALTI of each example run alone (bertlook.attention.contributions.example_maps), in padded
batches, for post-LN and pre-LN encoders, a shared-layer ALBERT and causal decoders (grouped-query Llama included);
only the examples a reader chose are computed."""

from __future__ import annotations

import numpy as np
import pytest

from bertlook.attention.alti_stream import LazyLayerMaps, layer_modules
from bertlook.attention.extraction import stream_maps
from bertlook.attention.layer_readers import PerLayer
from bertlook.errors import BertlookError

#: lengths of the examples (batch 3: padded batches of mixed lengths)
LENGTHS = (5, 9, 7, 12, 6, 3, 10)


class Layers:
    """Keeps every layer's map of every example (float64 numpy) and checks the call order."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers, self.maps, self.ended = num_layers, {}, []

    def add_layer(self, record, layer, a) -> None:
        assert layer == len(self.maps.setdefault(record["id"], []))
        self.maps[record["id"]].append(a.detach().double().cpu().numpy())

    def end_example(self, record) -> None:
        assert len(self.maps[record["id"]]) == self.num_layers
        self.ended.append(record["id"])


def _examples(vocab: int, seed: int = 5):
    """``(record, ids, token types)`` of random token ids (no special tokens needed: ALTI reads no roles)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(LENGTHS):
        ids = [int(t) for t in rng.integers(4, vocab, size=n)]
        out.append(({"id": f"ex{i}", "tokens": [f"t{t}" for t in ids]}, ids, [0] * n))
    return out


def _encoder(arch: str):
    from bertlook.testing.tiny_models import random_ln_bert, random_ln_encoder

    if arch == "bert":
        return random_ln_bert(layers=2, hidden=16, heads=2, vocab=30, max_positions=32, initializer_range=0.3)
    return random_ln_encoder(arch, layers=2, hidden=16, heads=2, vocab=30, max_positions=32)


def _decoder(arch: str):
    import torch
    from transformers import AutoModel, GPT2Config, GPTNeoXConfig, LlamaConfig

    common = dict(vocab_size=30, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    if arch == "gpt2":
        cfg = GPT2Config(n_embd=16, n_layer=2, n_head=4, n_inner=32, n_positions=32, **common)
    elif arch == "gpt_neox":
        cfg = GPTNeoXConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
                            max_position_embeddings=32, **common)
    else:  # grouped-query: 2 key/value heads for 4 query heads
        cfg = LlamaConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          intermediate_size=32, max_position_embeddings=32, **common)
    torch.manual_seed(0)
    return AutoModel.from_config(cfg).eval()


def _stream_alti(model, examples, ids=None, batch_size=3):
    reader = PerLayer(lambda plan: Layers(plan.num_layers), kind="alti", ids=ids)
    summary = stream_maps(examples, model, [reader], batch_size=batch_size, device="cpu", meta={}, progress_every=0,
                          max_seq_len=32)
    return reader, summary


def _alone(model, ids):
    import torch

    from bertlook.attention.contributions import example_maps

    maps = example_maps(model, {"input_ids": torch.tensor([ids])}, heads=False)
    return maps["alti"][0].double().numpy()  # [layer, n, n]


@pytest.mark.parametrize("arch", ["bert", "albert", "distilbert", "deberta_v2", "modernbert", "gpt2", "gpt_neox",
                                  "llama"])
def test_stream_alti_is_each_example_run_alone(arch):
    """Per example and layer, the stream's map [1, n, n] equals example_maps' ALTI of the example run alone (to
    float32 rounding of the padded batch); rows sum to 1; a decoder's rows never reach a later token."""
    model = _decoder(arch) if arch in ("gpt2", "gpt_neox", "llama") else _encoder(arch)
    examples = _examples(30)
    reader, summary = _stream_alti(model, examples)
    got = reader.accumulator
    assert sorted(got.ended) == sorted(r["id"] for r, _, _ in examples) and reader.count == len(examples)
    assert summary["n_examples"] == len(examples)
    for record, ids, _ in examples:
        stream = np.stack(got.maps[record["id"]])[:, 0]  # [layer, n, n]
        alone = _alone(model, ids)
        assert stream.shape == alone.shape == (2, len(ids), len(ids))
        np.testing.assert_allclose(stream, alone, atol=2e-5, err_msg=f"{arch} {record['id']}")
        np.testing.assert_allclose(stream.sum(-1), 1.0, atol=1e-5)
        if arch in ("gpt2", "gpt_neox", "llama"):
            assert (stream[:, np.triu_indices(len(ids), 1)[0], np.triu_indices(len(ids), 1)[1]] == 0).all()


def test_only_the_chosen_examples_are_computed(monkeypatch):
    from bertlook.attention import alti_stream

    calls = []
    real = alti_stream.alti_layer

    def counted(x, *args, **kwargs):
        calls.append(tuple(x.shape[:2]))  # (examples, tokens) of the call
        return real(x, *args, **kwargs)

    monkeypatch.setattr(alti_stream, "alti_layer", counted)
    model = _encoder("bert")
    examples = _examples(30)
    # batches of 3, longest first: (ex3 12, ex6 10, ex1 9), (ex2 7, ex4 6, ex0 5), (ex5 3)
    reader, _ = _stream_alti(model, examples, ids={"ex1", "ex4"})
    assert sorted(reader.accumulator.ended) == ["ex1", "ex4"] and reader.count == 2
    assert sorted(calls) == [(1, 6)] * 2 + [(1, 9)] * 2  # 2 layers each, nothing else
    calls.clear()
    reader, _ = _stream_alti(model, examples, ids={"ex1", "ex6", "ex5"})
    assert calls == [(2, 10), (2, 10), (1, 3), (1, 3)]  # ex6 and ex1 together, padded to 10 tokens


def test_alti_beside_the_attention_and_norm_readers_leaves_them_unchanged():
    """Asking for ALTI does not move the attention or the norm-based maps the other readers get."""
    model = _encoder("bert")
    examples = _examples(30)
    plain = [PerLayer(lambda plan: Layers(plan.num_layers), kind=k) for k in ("attention", "norm")]
    stream_maps(examples, model, plain, batch_size=3, device="cpu", meta={}, progress_every=0, norms=True,
                max_seq_len=32)
    both = [PerLayer(lambda plan: Layers(plan.num_layers), kind=k) for k in ("attention", "norm", "alti")]
    stream_maps(examples, model, both, batch_size=3, device="cpu", meta={}, progress_every=0, norms=True,
                max_seq_len=32)
    for before, after in zip(plain, both):
        for ex_id, maps in before.accumulator.maps.items():
            for a, b in zip(maps, after.accumulator.maps[ex_id]):
                assert np.array_equal(a, b)


def test_lazy_maps_compute_the_wanted_examples_together_and_accept_one_example_at_a_time():
    done = []
    lazy = LazyLayerMaps(lambda rows: done.append(list(rows)) or [f"map{b}" for b in rows], [4, 2, 3], [0, 2])
    assert lazy[2, :, :3, :3] == "map2" and done == [[0, 2]]  # the first read: every wanted example, one call
    assert lazy[0, :, :4, :4] == "map0" and lazy[2, :, :3, :3] == "map2" and done == [[0, 2]]
    assert lazy[1, :, :2, :2] == "map1" and done == [[0, 2], [1]]  # not wanted: alone
    for key in [(0, slice(None), slice(None, 3), slice(None, 3)), (3, slice(None), slice(None, 2), slice(None, 2)),
                (0, 0, slice(None, 4), slice(None, 4)), 0]:
        with pytest.raises(BertlookError, match=r"maps\[b, :, :n, :n\]"):
            lazy[key]


def test_unknown_layouts_and_kinds_are_refused():
    import torch

    with pytest.raises(BertlookError, match="ALTI: model class Linear: no layer list"):
        layer_modules(torch.nn.Linear(2, 2))
    with pytest.raises(BertlookError, match="map kind"):
        PerLayer(lambda plan: None, kind="value_zeroing")


TEXTS = [("the cat sat on the mat .", "the dog ran , and it was good ."), ("john saw mary .", "she read a book ."),
         ("the king and the queen went to london .", "they said it was a very good city ."), ("a man .", "a woman .")]


@pytest.fixture(scope="module")
def segments_file(tmp_path_factory, tokenizer):
    import json

    from bertlook.testing.tiny_models import make_segment

    path = tmp_path_factory.mktemp("alti_cli") / "segments.jsonl"
    path.write_text("".join(json.dumps(make_segment(tokenizer, i, a, b)) + "\n" for i, (a, b) in enumerate(TEXTS)))
    return path


def test_cli_alti_statistics_of_the_first_segments(segments_file, tiny_bert_dir, tmp_path, capsys):
    """extract-segments --alti-stats-partial on the first 2 segments, reduced by surface-stats: one row per layer
    (head 1), the same numbers as the accumulator fed each segment's ALTI run alone; --alti-max-examples 0 refused."""
    import json

    import torch

    from bertlook.analyses.surface_stats import SurfaceStatsAccumulator, reduce_surface_stats, run_surface_stats_step
    from bertlook.attention.contributions import example_maps
    from bertlook.attention.extraction import encode_segment
    from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model
    from bertlook.cli import main

    args = ["extract-segments", "--segments", str(segments_file), "--model", str(tiny_bert_dir), "--device", "cpu",
            "--alti-stats-partial", str(tmp_path / "alti.npz"), "--summary", str(tmp_path / "summary.json")]
    assert main([*args, "--alti-max-examples", "2"]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["readers"]["surface_stats_alti"]["examples"] == 2
    got = run_surface_stats_step(partials=[tmp_path / "alti.npz"])
    assert got.summary["n_examples"] == 2 and got.summary["num_heads"] == 1
    assert list(got.frame["layer"]) == [1, 2] and (got.frame["head"] == 1).all()
    spec = resolve_model(str(tiny_bert_dir))
    model, tok = load_model(spec, "cpu"), load_tokenizer(spec)
    acc = SurfaceStatsAccumulator(2, 1)
    for line in segments_file.read_text().splitlines()[:2]:
        seg = json.loads(line)
        ids, tts = encode_segment(seg, tok, "zeros")
        alti = example_maps(model, {"input_ids": torch.tensor([ids]), "token_type_ids": torch.tensor([tts])},
                            heads=False)["alti"][0]  # [layer, n, n]
        acc.add(seg, alti[:, None].numpy())
    cols = ["cls", "sep", "punct", "self", "prev", "next", "entropy", "max_attention"]
    want, _ = reduce_surface_stats([acc.partial(n_examples_in_store=4, max_examples=2)])
    np.testing.assert_allclose(got.frame[cols].to_numpy(), want[cols].to_numpy(), atol=1e-6)
    capsys.readouterr()
    assert main([*args, "--alti-max-examples", "0"]) == 2
    assert "error:" in capsys.readouterr().err


def test_the_torch_path_a_gpu_runs_agrees_with_the_cpu_kernels(monkeypatch):
    """On a GPU the stream's ALTI runs alti_layer's torch path (float32 sums); on the CPU the numba kernels (float64
    sums): the same maps within 1e-4 (scripts/gpu_check.py's tolerance for device vs CPU), here on the CPU."""
    from bertlook.attention import contributions

    model, examples = _encoder("bert"), _examples(30)
    kernels, _ = _stream_alti(model, examples)
    monkeypatch.setattr(contributions, "CPU_KERNELS", False)
    torch_path, _ = _stream_alti(model, examples)
    worst = max(float(np.abs(np.stack(a) - np.stack(torch_path.accumulator.maps[k])).max())
                for k, a in kernels.accumulator.maps.items())
    assert 0 < worst < 1e-4


def test_cli_alti_statistics_of_two_shards_add_up(segments_file, tiny_bert_dir, tmp_path):
    """--alti-max-examples counts the first segments of the whole file: two shards (segments 0-1 and 2-3) with the
    first 3 give, reduced by surface-stats, the table of one job (within float rounding of the sums)."""
    from bertlook.analyses.surface_stats import run_surface_stats_step
    from bertlook.cli import main

    def run(out, *extra):
        assert main(["extract-segments", "--segments", str(segments_file), "--model", str(tiny_bert_dir), "--device",
                     "cpu", "--alti-stats-partial", str(out), "--alti-max-examples", "3", *extra]) == 0
        return out

    whole = run_surface_stats_step(partials=[run(tmp_path / "all.npz")])
    parts = run_surface_stats_step(partials=[run(tmp_path / "s1.npz", "--shard", "1of2"),
                                             run(tmp_path / "s2.npz", "--shard", "2of2")])
    assert whole.summary["n_examples"] == parts.summary["n_examples"] == 3
    cols = ["cls", "sep", "punct", "self", "prev", "next", "entropy", "max_attention"]
    np.testing.assert_allclose(parts.frame[cols].to_numpy(), whole.frame[cols].to_numpy(), rtol=1e-12, atol=1e-14)
