"""The layer-wise rollout reader (bertlook.analyses.rollout.RolloutAccumulator.add_layer / end_example and
bertlook.analyses.rollout_device): the same numbers as the whole-example reference (rollout +
rollout_example_stats), bit for bit on an encoder's host maps; the torch (device) path run on CPU tensors."""

from __future__ import annotations

import numpy as np
import pytest

from bertlook.analyses import rollout as rollout_module
from bertlook.analyses import rollout_device as rd
from bertlook.analyses.map_kernels import head_mean
from bertlook.analyses.rollout import STAT_COLUMNS, RolloutAccumulator, rollout, rollout_example_stats
from bertlook.analyses.surface_stats import causal_row_entropy
from bertlook.errors import BertlookError

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True, params=["small", "running"])
def host_mode(request, monkeypatch):
    """Both host modes: a small example keeps its head means and takes its rollout at its end ("small", every
    example here at the default budget); "running": only the running R_l, statistics layer by layer."""
    if request.param == "running":
        monkeypatch.setattr(rollout_module, "HOST_KEEP_BYTES", 0)
    return request.param

L, H = 3, 4
VOCAB = ["a", "b", ".", ",", "[SEP]", "c"]


def random_maps(rng, n, *, causal=False, dtype=np.float16):
    a = np.exp(rng.standard_normal((L, H, n, n)) * 2.0)  # [layer, head, query_pos, key_pos]
    if causal:
        a = np.tril(a)
    return (a / a.sum(-1, keepdims=True)).astype(dtype)  # [layer, head, query_pos, key_pos]


def random_examples(seed, *, causal=False, dtype=np.float16, sizes=(1, 2, 5, 17, 40, 150, 300)):
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(sizes):
        tokens = ["[CLS]", *(VOCAB[int(j)] for j in rng.integers(0, len(VOCAB), n - 1))][:n]
        out.append(({"id": f"ex{i}", "tokens": tokens}, random_maps(rng, n, causal=causal, dtype=dtype)))
    return out


def roles(causal):
    return {"cls_token": None, "sep_token": "[SEP]", "causal": True} if causal else {}


def reference_sums(examples, causal):
    """The whole-example reference: rollout + rollout_example_stats, summed as the old accumulator did."""
    total = np.zeros((len(STAT_COLUMNS), L))  # [stat, layer]
    for rec, a in examples:
        st = rollout_example_stats(rollout(a), rec["tokens"], **roles(causal))
        total += np.stack([st[c] for c in STAT_COLUMNS])
    return total


def sums_of(examples, causal, *, layer_wise=False, as_tensor=False, torch_on_cpu=False):
    acc = RolloutAccumulator(L, H, **roles(causal))
    acc.torch_on_cpu = torch_on_cpu
    for rec, a in examples:
        maps = torch.from_numpy(a) if as_tensor else a
        if layer_wise:
            for layer in range(L):
                acc.add_layer(rec, layer, maps[layer])
            acc.end_example(rec)
        else:
            acc.add(rec, maps)
    meta, arrays = acc.partial(n_examples_in_store=len(examples))
    assert meta["n_examples"] == len(examples) and meta["sum_n"] == sum(a.shape[-1] for _, a in examples)
    return arrays["sums"]


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_encoder_host_path_is_the_reference_bit_for_bit(dtype):
    examples = random_examples(0, dtype=dtype)
    np.testing.assert_array_equal(sums_of(examples, False), reference_sums(examples, False))


def test_add_is_add_layer_and_end_example():
    for causal in (False, True):
        examples = random_examples(1, causal=causal)
        whole = sums_of(examples, causal)
        np.testing.assert_array_equal(sums_of(examples, causal, layer_wise=True), whole)
        np.testing.assert_array_equal(sums_of(examples, causal, layer_wise=True, as_tensor=True), whole)


def test_causal_host_path_is_the_reference_up_to_rounding():
    examples = random_examples(2, causal=True)
    np.testing.assert_allclose(sums_of(examples, True), reference_sums(examples, True), rtol=1e-13, atol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_torch_path_on_cpu_tensors_matches_the_reference(causal):
    """The device path (torch, as on a GPU) on CPU tensors: measured max relative error 1e-16; bound 1e-12."""
    examples = random_examples(3, causal=causal)
    got = sums_of(examples, causal, as_tensor=True, torch_on_cpu=True)
    np.testing.assert_allclose(got, reference_sums(examples, causal), rtol=1e-12, atol=1e-14)


def test_non_contiguous_layer_views_of_a_padded_batch():
    """The stream's maps: a view into a padded batch tensor [example, layer, head, n_max, n_max]."""
    examples = random_examples(4, sizes=(7, 12))
    batch = torch.zeros(2, L, H, 12, 12, dtype=torch.float16)  # [example, layer, head, query_pos, key_pos]
    for i, (_, a) in enumerate(examples):
        n = a.shape[-1]
        batch[i, :, :, :n, :n] = torch.from_numpy(a)
    for torch_on_cpu in (False, True):
        acc = RolloutAccumulator(L, H)
        acc.torch_on_cpu = torch_on_cpu
        for i, (rec, a) in enumerate(examples):
            n = a.shape[-1]
            for layer in range(L):
                acc.add_layer(rec, layer, batch[i, layer, :, :n, :n])
            acc.end_example(rec)
        np.testing.assert_allclose(acc.partial(n_examples_in_store=2)[1]["sums"], reference_sums(examples, False),
                                   rtol=0 if not torch_on_cpu else 1e-12, atol=0 if not torch_on_cpu else 1e-14)


@pytest.mark.parametrize("n", [1, 2, 7, 128, 129, 300, 513])
@pytest.mark.parametrize("min_block", [1, 16, 128])
def test_lower_matmul_is_the_product(n, min_block):
    rng = np.random.default_rng(n)
    a, r = np.tril(rng.random((n, n))), np.tril(rng.random((n, n)))
    got = rd.lower_matmul(a, r, min_block=min_block)
    np.testing.assert_allclose(got, a @ r, rtol=1e-13, atol=1e-13 * n)
    assert (np.triu(got, 1) == 0).all()
    got_t = rd.lower_matmul(torch.from_numpy(a), torch.from_numpy(r), min_block=min_block)
    assert isinstance(got_t, torch.Tensor)
    np.testing.assert_allclose(got_t.numpy(), a @ r, rtol=1e-13, atol=1e-13 * n)


@pytest.mark.parametrize("n", [1, 3, 128, 129, 300])
def test_causal_entropy_on_the_triangle(n):
    rng = np.random.default_rng(n)
    r = np.tril(rng.random((n, n)))
    r /= r.sum(-1, keepdims=True)
    np.testing.assert_allclose(rd.host_causal_entropy(r, block=64), causal_row_entropy(r).mean(), rtol=1e-14)


def test_device_head_mean_is_exact():
    """A float64 sum of float16 values is exact in any order: the torch head mean is head_mean's bit for bit."""
    a = random_examples(5, sizes=(33,))[0][1]  # [layer, head, query_pos, key_pos] float16
    ref, _ = head_mean(a)  # [layer, query_pos, key_pos]
    for layer in range(L):
        mean = torch.from_numpy(a[layer]).sum(dim=0, dtype=torch.float64) / H
        np.testing.assert_array_equal(mean.numpy(), ref[layer])


def bad_maps(kind):
    a = random_maps(np.random.default_rng(6), 5)  # [layer, head, query_pos, key_pos]
    if kind == "nan":
        a[1, 2, 3, 0] = np.nan
    else:  # a row of -1: sums to -1 + 0.5 after the residual, with every head negative
        a[2, :, 4, :] = -1.0
    return a


@pytest.mark.parametrize("kind,message", [("nan", "non-finite"), ("negative", "non-positive")])
def test_errors_name_the_example_on_both_paths(kind, message):
    good = random_examples(7, sizes=(5,))[0]
    rec = {"id": "bad-one", "tokens": ["[CLS]", "a", "b", ".", "[SEP]"]}
    acc = RolloutAccumulator(L, H, where="store")
    with pytest.raises(BertlookError, match=f"store: example 'bad-one': rollout: .*{message}"):
        acc.add(rec, bad_maps(kind))
    acc.add(*good)  # an example after a failed one: added as usual
    assert acc.n_examples == 1
    dev = RolloutAccumulator(L, H, where="stream")
    dev.torch_on_cpu = True
    dev.add(*good)
    dev.add(rec, torch.from_numpy(bad_maps(kind)))  # no check on the host per example: partial() raises
    dev.add(*good)
    with pytest.raises(BertlookError, match=f"stream: example 'bad-one': rollout: .*{message}"):
        dev.partial(n_examples_in_store=3)


def test_layers_out_of_order_are_errors():
    rec, a = random_examples(8, sizes=(6,))[0]
    acc = RolloutAccumulator(L, H)
    with pytest.raises(BertlookError, match="layer 1 .* after no layer 0"):
        acc.add_layer(rec, 1, a[1])
    acc.add_layer(rec, 0, a[0])
    with pytest.raises(BertlookError, match="layer 2 .* after layer 0"):
        acc.add_layer(rec, 2, a[2])
    acc.add_layer(rec, 0, a[0])
    with pytest.raises(BertlookError, match="ended after 1 layers of 3"):
        acc.end_example(rec)
    with pytest.raises(BertlookError, match="3 tokens for a map of size 6"):
        acc.add_layer({"id": 1, "tokens": ["a", "b", "c"]}, 0, a[0])
    with pytest.raises(BertlookError, match="expected maps of shape"):
        acc.add(rec, a[0])
    assert acc.n_examples == 0
    acc.add(rec, a)
    assert acc.n_examples == 1


def test_the_host_reader_refuses_maps_on_another_device():
    """rollout_partial's reader (the rollout step's env has no torch) takes host maps only."""
    rec = {"id": "x", "tokens": ["a", "b", "c"]}
    with pytest.raises(BertlookError, match="example 'x': rollout: maps on meta"):
        rollout_module.HostRolloutAccumulator(L, H).add_layer(rec, 0, torch.empty(H, 3, 3, dtype=torch.float16,
                                                                                    device="meta"))
