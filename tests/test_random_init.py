"""Random-init model: embeddings kept, everything else re-initialised, seeded, loadable."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from bertlook.errors import BertlookError
from bertlook.attention.random_init import PROVENANCE_FILE, make_random_init_model
from bertlook.cli.random_init import register_cli


@pytest.fixture(scope="module")
def source_dir(tiny_bert_dir, tmp_path_factory):
    """The tiny BERT with every tensor perturbed (so zero biases / unit LayerNorms are not a given)."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert_dir)
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    out = tmp_path_factory.mktemp("perturbed_bert")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(out)
    return out


def _state(path):
    from transformers import AutoModel

    return {k: v.clone() for k, v in AutoModel.from_pretrained(path).state_dict().items()}


def test_embeddings_kept_everything_else_reinitialised(source_dir, tmp_path):
    prov = make_random_init_model(str(source_dir), tmp_path / "rand", seed=0)
    before, after = _state(source_dir), _state(tmp_path / "rand")
    kept = {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight"}
    assert set(prov["kept_parameters"]) == kept
    for name in before:
        if name in kept:
            assert torch.equal(before[name], after[name]), name
        elif name.endswith(("position_ids", "token_type_ids")):
            continue  # buffers
        else:
            assert not torch.equal(before[name], after[name]), name
    # the model's own initialiser: LayerNorm 1 / 0, zero biases, N(0, 0.02) weights
    assert torch.equal(after["embeddings.LayerNorm.weight"], torch.ones_like(after["embeddings.LayerNorm.weight"]))
    assert torch.count_nonzero(after["encoder.layer.0.attention.self.query.bias"]) == 0
    assert after["encoder.layer.0.attention.self.query.weight"].std().item() == pytest.approx(0.02, rel=0.3)
    assert "embeddings.token_type_embeddings.weight" in prov["reinitialized_parameters"]
    assert "pooler.dense.weight" in prov["reinitialized_parameters"]
    saved = json.loads((tmp_path / "rand" / PROVENANCE_FILE).read_text())
    assert saved["seed"] == 0 and saved["source_model"]["path_or_id"] == str(source_dir.resolve())


def test_deterministic_for_a_seed_and_loadable(source_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(999)
    expected_next = torch.rand(1)
    torch.manual_seed(999)
    make_random_init_model(str(source_dir), tmp_path / "a", seed=7)
    assert torch.equal(torch.rand(1), expected_next)  # caller's RNG untouched
    make_random_init_model(str(source_dir), tmp_path / "b", seed=7)
    make_random_init_model(str(source_dir), tmp_path / "c", seed=8)
    a, b, c = _state(tmp_path / "a"), _state(tmp_path / "b"), _state(tmp_path / "c")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["encoder.layer.0.attention.self.query.weight"],
                           c["encoder.layer.0.attention.self.query.weight"])
    model = AutoModel.from_pretrained(tmp_path / "a", attn_implementation="eager")
    tok = AutoTokenizer.from_pretrained(tmp_path / "a")
    enc = tok("the cat sat", return_tensors="pt")
    out = model(**enc, output_attentions=True)
    assert len(out.attentions) == 2 and out.attentions[0].shape[1] == 2


def test_cli_and_bad_model(source_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(["random-init", "--model", str(source_dir), "--out", str(tmp_path / "m"),
                              "--seed", "3"])
    assert args.func(args) == 0
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / PROVENANCE_FILE).is_file()
    assert "re-initialised" in capsys.readouterr().out
    with pytest.raises(BertlookError):
        make_random_init_model(str(tmp_path / "missing"), tmp_path / "x", seed=0)
    assert not (tmp_path / "x").exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_random_init_copy_keeps_the_tokenizer_and_loads_through_bertlook(source_dir, tmp_path):
    """The copy must hold tokenizer files (a model-only directory is refused by load_tokenizer)."""
    from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model, tokenizer_files_problem

    make_random_init_model(str(source_dir), tmp_path / "r", seed=1)
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert {"model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(n.endswith(".bin") for n in names)
    resolved = resolve_model(str(tmp_path / "r"))
    assert tokenizer_files_problem(resolved) is None
    tok = load_tokenizer(resolved)
    assert tok.tokenize("the cat sat") == ["the", "cat", "sat"]
    assert load_model(resolved, "cpu").config.num_hidden_layers == 2


def test_stale_temporary_of_a_killed_run_is_removed_and_permissions_follow_umask(source_dir, tmp_path):
    import os
    import stat

    stale = tmp_path / ".rand.tmp-999999999-abcdefgh"  # a writer PID that does not exist
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    old = os.umask(0o022)
    try:
        make_random_init_model(str(source_dir), tmp_path / "rand", seed=0)
    finally:
        os.umask(old)
    assert not stale.exists()
    assert stat.S_IMODE((tmp_path / "rand").stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rand"]


def test_extract_words_random_init_seed_gives_the_saved_copys_maps_bit_for_bit(source_dir, fixtures_dir, tmp_path):
    """`extract-words --random-init-seed S` (in memory, the workflow's way) and `extract-words` on the
    copy `random-init --seed S` saved: the same maps, bit for bit, and the same provenance."""
    import numpy as np

    from bertlook.attention.extract_words import extract_word_attention
    from bertlook.attention.store import open_store
    from bertlook.cli import main

    conllu = fixtures_dir / "tiny.conllu"
    saved_prov = make_random_init_model(str(source_dir), tmp_path / "copy", seed=3)
    saved = tmp_path / "saved"
    extract_word_attention(conllu, str(tmp_path / "copy"), saved, batch_size=2, device="cpu", progress_every=0)
    memory = tmp_path / "memory"
    summary_path = tmp_path / "memory.summary.json"
    assert main(["extract-words", "--treebank", str(conllu), "--model", str(source_dir), "--out", str(memory),
                 "--batch-size", "2", "--device", "cpu", "--random-init-seed", "3",
                 "--summary", str(summary_path)]) == 0
    a, b = open_store(saved, level="word"), open_store(memory, level="word")
    assert len(a) == len(b) > 0
    for (rec_a, map_a), (rec_b, map_b) in zip(a, b):
        assert rec_a == rec_b
        assert map_a.dtype == map_b.dtype and np.array_equal(map_a, map_b), rec_a["id"]
    # the pretrained model gives other maps (the re-initialisation did happen)
    pretrained = tmp_path / "pretrained"
    extract_word_attention(conllu, str(source_dir), pretrained, batch_size=2, device="cpu", progress_every=0)
    c = open_store(pretrained, level="word")
    assert not all(np.array_equal(m1, m2) for (_, m1), (_, m2) in zip(b, c))
    # provenance: what bertlook_random_init.json records, in meta.json and in the summary
    summary = json.loads(summary_path.read_text())
    for prov in (b.meta["random_init"], summary["random_init"]):
        assert prov == json.loads(json.dumps(saved_prov))
        assert prov["seed"] == 3 and len(prov["kept_parameters"]) == 2
        assert prov["source_model"]["path_or_id"] == str(source_dir.resolve())
    assert "random_init" not in c.meta
