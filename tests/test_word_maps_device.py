"""Word-level maps computed on the model's device, layer by layer (issue 42): ``token_to_word_maps`` adds a word's
tokens one after the other in token order (the same values on every device and thread count), and
``extract-words`` / ``coref-extract`` write their stores from the device (``LayerStore``) without copying the
token-level maps to the host."""

from __future__ import annotations

import numpy as np
import pytest

from bertlook.attention.alignment import Alignment, WordConversion, token_to_word_attention, word_slots

torch = pytest.importorskip("torch")


def _alignment(lens):
    spans, pos = [], 1
    for k in lens:
        spans.append((pos, pos + int(k)))
        pos += int(k)
    n = pos + 1
    wot = [-1] + [i for i, k in enumerate(lens) for _ in range(int(k))] + [-1]
    return Alignment(input_ids=list(range(n)), tokens=[f"t{i}" for i in range(n)], word_of_token=wot, token_spans=spans)


def _sequential_reference(a, al, mode):
    """One head, float32 scalars added one at a time in token order (the order token_to_word_maps promises)."""
    starts, counts = word_slots(al)
    g = len(starts)
    f = np.float32
    cols = np.zeros((a.shape[0], g), np.float32)  # [query_pos, key_word]
    for i in range(a.shape[0]):
        for w in range(g):
            acc = f(a[i, starts[w]])
            for j in range(1, counts[w]):
                acc = f(acc + f(a[i, starts[w] + j]))
            cols[i, w] = acc
    out = np.zeros((g, g), np.float32)  # [query_word, key_word]
    for w in range(g):
        rows = cols[starts[w]:starts[w] + counts[w]]
        if mode == "first":
            out[w] = rows[0]
        elif mode == "mean":
            weight = f(f(1.0) / f(counts[w]))
            acc = f(weight) * rows[0]
            for r in rows[1:]:
                acc = (acc + (weight * r).astype(np.float32)).astype(np.float32)
            out[w] = acc
        else:
            out[w] = rows.max(axis=0)
            total = out[w].sum(dtype=np.float32)
            out[w] = out[w] / total if total > 0 else 0
    return out


@pytest.mark.parametrize("mode", ["mean", "first"])
def test_word_maps_add_tokens_in_token_order_exactly(mode):
    rng = np.random.default_rng(3)
    al = _alignment([1, 3, 1, 5, 2, 1, 4])
    n = al.n_tokens
    x = rng.random((n, n)).astype(np.float32) ** 4
    x = (x / x.sum(-1, keepdims=True)).astype(np.float16).astype(np.float32)  # [query_pos, key_pos]
    got = token_to_word_attention(x[None, None], al, from_split=mode)[0, 0]
    np.testing.assert_array_equal(got, _sequential_reference(x, al, mode))


def test_word_maps_max_mode_matches_reference_to_rounding():
    rng = np.random.default_rng(4)
    al = _alignment([2, 1, 6, 1, 3])
    x = rng.random((al.n_tokens, al.n_tokens)).astype(np.float32)
    got = token_to_word_attention(x[None, None], al, from_split="max")[0, 0]
    np.testing.assert_allclose(got, _sequential_reference(x, al, "max"), rtol=1e-6)  # the row total's summation order


@pytest.mark.parametrize("threads", [1, 2])
def test_word_maps_do_not_depend_on_threads_or_batching(threads):
    """Layers converted one at a time (the device path) equal the whole [L, H, n, n] converted at once."""
    rng = np.random.default_rng(5)
    al = _alignment([1, 2, 3, 7, 1, 1, 2])
    x = rng.random((3, 4, al.n_tokens, al.n_tokens)).astype(np.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        whole = token_to_word_attention(x, al, from_split="mean")
        conv = WordConversion({"s": al}, lambda rec, a: rec, "mean")
        per_layer = np.stack([conv.maps({"id": "s"}, torch.from_numpy(x[layer])).numpy() for layer in range(3)])
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(per_layer, whole)
    conv.release({"id": "s"})
    assert conv._slots == {}


def test_word_extraction_keeps_token_maps_on_the_device(tiny_bert_dir, tokenizer, monkeypatch, tmp_path):
    """extract-words (with its norm-based store) never copies a token-level map to the host: the stream's host copy
    is made to fail, and the stores are still written, equal to the model's own maps converted afterwards."""
    from bertlook.attention import stream
    from bertlook.attention.alignment import align_words
    from bertlook.attention.extract_words import WordExtractionOptions, extract_word_attention_from_sentences
    from bertlook.attention.modeling import load_model, resolve_model
    from bertlook.attention.store import AttentionStore

    class Sent:
        def __init__(self, sid, words):
            self.sent_id, self.words = sid, words
            self.heads, self.rels, self.upos, self.xpos = [0] * len(words), ["dep"] * len(words), None, None

    sents = [Sent("a", ["the", "cat", "sat", "unbelievably"]), Sent("b", ["a", "dog", "."])]

    def no_host_copy(self, buf, layer, a16):
        raise AssertionError("a token-level map was copied to the host")

    monkeypatch.setattr(stream._LayerSink, "_host_copy", no_host_copy)
    opts = WordExtractionOptions(device="cpu", progress_every=0, batch_size=2)
    extract_word_attention_from_sentences(sents, str(tiny_bert_dir), tmp_path / "w", opts, norms_out=tmp_path / "n")
    model = load_model(resolve_model(str(tiny_bert_dir)), "cpu")
    for rec, attn in AttentionStore(tmp_path / "w"):
        al = align_words(rec["tokens"][1:-1], tokenizer)
        with torch.inference_mode():
            ids = torch.tensor([al.input_ids])
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
        want = token_to_word_attention(torch.stack(out.attentions, dim=1)[0].numpy(), al)  # [layer, head, W+2, W+2]
        np.testing.assert_allclose(np.asarray(attn, np.float32), want, atol=2e-3)
    assert len(AttentionStore(tmp_path / "n").records) == 2


@pytest.mark.parametrize("mode", ["mean", "first", "max"])
def test_the_cpu_kernel_is_the_torch_path_bit_for_bit(mode):
    """The numba kernel (word_kernels, the CPU's float32 path) against the torch operations (every other device):
    the same additions in the same order, so equal bit for bit; on many random alignments, maps of several
    layers and heads, strided (a slice of a padded batch, as the stream hands them)."""
    from bertlook.attention.alignment import _torch_word_maps, token_to_word_maps

    rng = np.random.default_rng(7)
    for trial in range(20):
        al = _alignment(rng.integers(1, 6, size=int(rng.integers(1, 25))))
        n = al.n_tokens
        padded = torch.from_numpy(rng.random((2, 3, n + 4, n + 4)).astype(np.float32) ** 3)  # [layer, head, N, N]
        a = padded[:, :, :n, :n]
        a = a / a.sum(-1, keepdim=True)
        starts, counts = word_slots(al)
        got = token_to_word_maps(a, starts, counts, from_split=mode)
        ref = _torch_word_maps(a, torch.from_numpy(starts), torch.from_numpy(counts), mode)
        if mode == "max":
            total = ref.sum(dim=-1, keepdim=True)
            ref = torch.where(total > 0, ref / torch.where(total > 0, total, 1), 0)
        assert got.dtype == torch.float32 and got.shape == (2, 3, len(starts), len(starts))
        assert torch.equal(got, ref), (trial, mode, (got - ref).abs().max())
