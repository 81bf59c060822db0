"""The one-pass surface-statistics kernels (bertlook.analyses.layer_stats) against the reference functions of
bertlook.analyses.surface_stats: the numba kernel gives an encoder's numbers bit for bit, a decoder's causal
entropy within the float32 logarithm's rounding; the torch kernel (run here on CPU tensors) the same within
the tolerances measured below; add() and add_layer() are one code path; the threads do not change a bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertlook.analyses import layer_stats as ls
from bertlook.analyses.surface_stats import (STAT_COLUMNS, SurfaceStatsAccumulator, argmax_offset_counts,
                                             causal_row_entropy, example_stats, xlogx_table)
from bertlook.analyses.token_roles import role_masks
from bertlook.errors import BertlookError

# torch kernel vs numba kernel, entropy columns: float32 logarithms (log1p near p = 1) and float32 row sums;
# measured max relative difference 1.1e-7 (a [CLS] row, n = 9); every other column adds float16 values in float64:
# exact, equal bit for bit
TORCH_ENTROPY_RTOL = 1e-6
# numba causal entropy (float32 Cephes logf; its polynomial on q = p - 1 where a > 0.75) vs the float64
# causal_row_entropy: measured max 9.9e-8 nats absolute, 2.0e-8 relative per example on the maps of a random
# GPT-2 (4 x 16 heads, n 355-1,024), 7e-8 relative on the peaked maps here
CAUSAL_ATOL = 2e-7
CAUSAL_RTOL = 1e-6
WORDS = ["a", ".", ",", "[SEP]", "b", "c"]


def _example(rng, L, H, n, *, causal, peak=8.0, ties=True):
    a = rng.random((L, H, n, n)) ** peak  # [layer, head, query_pos, key_pos]
    if causal:
        a = np.tril(a)
    a = (a / a.sum(-1, keepdims=True)).astype(np.float16)
    if ties and n > 2:  # a row of equal values (argmax: the lowest column) and a tie of two maxima
        i = n // 2
        a[0, 0, i, : (i + 1 if causal else n)] = a[0, 0, i, 0]
        a[-1, -1, i - 1, 0] = a[-1, -1, i - 1, i - 1] = np.float16(0.5)
    toks = ["[CLS]"] + [str(rng.choice(WORDS)) for _ in range(n - 1)]
    return a, toks


def _roles(toks, causal):
    is_cls, is_sep = role_masks(toks, None if causal else "[CLS]", "[SEP]")
    return ls.Roles(is_cls, is_sep, np.isin(np.asarray(toks, dtype=object), [".", ","]))


def _old_partial(examples, L, H, causal):
    """The accumulator before add_layer: example_stats and argmax_offset_counts of the whole map."""
    sums = {c: np.zeros((L, H)) for c in STAT_COLUMNS}
    counts = {c: 0 for c in STAT_COLUMNS}
    offsets = None
    for a, toks in examples:
        st = example_stats(a, toks, cls_token=None if causal else "[CLS]", sep_token="[SEP]", causal=causal)
        for c in STAT_COLUMNS:
            if not np.isnan(st[c]).any():
                sums[c] += st[c]
                counts[c] += 1
        offs = argmax_offset_counts(a)
        offsets = offs if offsets is None else offsets + offs  # (same n here)
    return sums, counts, offsets


def _partial(examples, L, H, causal, **kw):
    acc = SurfaceStatsAccumulator(L, H, cls_token=None if causal else "[CLS]", sep_token="[SEP]", causal=causal, **kw)
    for k, (a, toks) in enumerate(examples):
        _add(acc, {"id": k, "tokens": toks}, a)
    return acc.partial(n_examples_in_store=len(examples))


def _add(acc, record, a):
    """``acc.add``; the torch kernel takes tensors, one layer at a time (as the stream hands them)."""
    if acc.kernel != "torch":
        acc.add(record, a)
        return
    t = torch.from_numpy(a)
    for layer in range(a.shape[0]):
        acc.add_layer(record, layer, t[layer])
    acc.end_example(record)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 127, 128, 129, 300])
def test_numba_kernel_gives_an_encoders_numbers_bit_for_bit(n):
    rng = np.random.default_rng(n)
    examples = [_example(rng, 2, 3, n, causal=False) for _ in range(2)]
    sums, counts, offsets = _old_partial(examples, 2, 3, False)
    meta, arrays = _partial(examples, 2, 3, False)
    for i, c in enumerate(STAT_COLUMNS):
        assert meta["counts"][c] == counts[c], c
        assert np.array_equal(arrays["sums"][i], sums[c]), c
    assert np.array_equal(arrays["offset_counts"], offsets)


@pytest.mark.parametrize("n", [1, 2, 9, 128, 300])
def test_numba_kernel_on_causal_maps_within_the_float32_log(n):
    rng = np.random.default_rng(100 + n)
    examples = [_example(rng, 2, 3, n, causal=True, peak=p) for p in (1.0, 8.0, 40.0)]
    sums, counts, offsets = _old_partial(examples, 2, 3, True)
    meta, arrays = _partial(examples, 2, 3, True)
    for i, c in enumerate(STAT_COLUMNS):
        assert meta["counts"][c] == counts[c], c
        if c == "entropy":
            assert np.allclose(arrays["sums"][i], sums[c], rtol=CAUSAL_RTOL, atol=len(examples) * CAUSAL_ATOL)
        else:
            assert np.array_equal(arrays["sums"][i], sums[c]), c
    assert np.array_equal(arrays["offset_counts"], offsets)


def test_causal_entropy_error_per_example_is_below_the_stated_bound():
    rng = np.random.default_rng(7)
    for n, peak in ((3, 40.0), (64, 1.0), (300, 8.0), (700, 40.0)):
        a, toks = _example(rng, 1, 4, n, causal=True, peak=peak, ties=False)
        raw, finite = ls.layer_stats_cpu(a[0], _roles(toks, True), None, causal=True,
                                         offs=np.zeros((4, 2 * n - 1), np.int64), smoothing=1e-4)
        ref = causal_row_entropy(a[0].astype(np.float64)).mean(-1)  # [head]
        got = raw[:, ls.SLOTS.index("entropy")] / n
        assert finite and np.allclose(got, ref, rtol=CAUSAL_RTOL, atol=CAUSAL_ATOL), (n, got - ref)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 3, 9, 130, 300])
def test_torch_kernel_on_cpu_tensors_matches_the_numba_kernel(n, causal):
    rng = np.random.default_rng(200 + n)
    a, toks = _example(rng, 1, 3, n, causal=causal)
    roles = _roles(toks, causal)
    offs_c = np.zeros((3, 2 * n - 1), np.int64)
    raw_c, fin_c = ls.layer_stats_cpu(a[0], roles, None if causal else xlogx_table(n), causal=causal,
                                      offs=offs_c, smoothing=1e-4)
    for block in (3 * n * 7, 1 << 24):  # blocks of 7 rows, and one block
        offs_t = torch.zeros((3, 2 * n - 1), dtype=torch.int64)
        raw_t, fin_t = ls.layer_stats_torch(torch.from_numpy(a[0]), roles, ls.device_roles(roles, torch.zeros(0)),
                                            causal=causal, offs=offs_t, smoothing=1e-4, block_entries=block)
        raw_t = raw_t.numpy()
        assert bool(fin_t) and fin_c
        assert np.array_equal(offs_t.numpy(), offs_c)
        for k, slot in enumerate(ls.SLOTS):
            if slot in ("entropy", "cls_entropy"):
                assert np.allclose(raw_t[:, k], raw_c[:, k], rtol=TORCH_ENTROPY_RTOL, atol=0, equal_nan=True), slot
            else:
                assert np.array_equal(raw_t[:, k], raw_c[:, k]), slot


@pytest.mark.parametrize("causal", [False, True])
def test_torch_kernel_accumulator_matches_the_reference(causal):
    rng = np.random.default_rng(5)
    examples = [_example(rng, 2, 3, n, causal=causal) for n in (5, 40, 40, 17)]
    meta_c, arr_c = _partial(examples, 2, 3, causal)
    meta_t, arr_t = _partial(examples, 2, 3, causal, kernel="torch")
    assert meta_t == meta_c
    assert np.array_equal(arr_t["offset_counts"], arr_c["offset_counts"])
    assert np.allclose(arr_t["sums"], arr_c["sums"], rtol=TORCH_ENTROPY_RTOL, atol=0)
    assert arr_t["sum_log_n"] == arr_c["sum_log_n"]


def test_add_is_add_layer_then_end_example():
    rng = np.random.default_rng(6)
    examples = [_example(rng, 3, 2, n, causal=False) for n in (4, 30, 12)]
    meta, arrays = _partial(examples, 3, 2, False)
    acc = SurfaceStatsAccumulator(3, 2)
    for k, (a, toks) in enumerate(examples):
        t = torch.from_numpy(a)  # as the stream hands them: CPU tensors, one layer at a time
        for layer in range(3):
            acc.add_layer({"id": k, "tokens": toks}, layer, t[layer])
        acc.end_example({"id": k, "tokens": toks})
    meta2, arrays2 = acc.partial(n_examples_in_store=len(examples))
    assert meta2 == meta
    for key in arrays:
        assert np.array_equal(arrays2[key], arrays[key]), key


@pytest.mark.parametrize("causal", [False, True])
def test_results_do_not_depend_on_the_thread_count(causal):
    rng = np.random.default_rng(8)
    n = 260  # 16 heads x 260^2 entries: above THREADS_FROM, the heads are shared
    a, toks = _example(rng, 1, 16, n, causal=causal)
    assert a[0].size >= ls.THREADS_FROM
    parts = [_partial([(a, toks)], 1, 16, causal, num_threads=t) for t in (1, 2, 3)]
    for meta, arrays in parts[1:]:
        assert meta == parts[0][0]
        for key in arrays:
            assert np.array_equal(arrays[key], parts[0][1][key]), key


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("kernel", ["auto", "torch"])
def test_a_non_finite_map_is_refused_naming_the_example(causal, bad, kernel):
    rng = np.random.default_rng(9)
    a, toks = _example(rng, 2, 3, 12, causal=causal)
    a[1, 2, 7, 3] = bad  # visible in a causal map too
    acc = SurfaceStatsAccumulator(2, 3, cls_token=None if causal else "[CLS]", causal=causal, where="w",
                                  kernel=kernel)
    with pytest.raises(BertlookError, match=r"w: example 'ex7' has non-finite attention values"):
        _add(acc, {"id": "ex7", "tokens": toks}, a)
        acc.partial(n_examples_in_store=1)  # the torch kernel refuses it when the sums come back


def test_no_tokens_is_refused():
    acc = SurfaceStatsAccumulator(1, 1)
    with pytest.raises(BertlookError, match="example 'e' has no tokens"):
        acc.add({"id": "e", "tokens": []}, np.zeros((1, 1, 0, 0), dtype=np.float16))


def test_negative_values_keep_numpys_semantics():
    """A negative value (not an attention map, but a float16 map may hold one): the encoder's entropy is NaN
    (its column leaves the example out, as before), the max and argmax are the float ones; -0 is 0."""
    rng = np.random.default_rng(10)
    a, toks = _example(rng, 1, 2, 20, causal=False)
    a[0, 0, 3, 5] = np.float16(-0.25)
    a[0, 1, 4, 6] = np.float16(-0.0)
    sums, counts, offsets = _old_partial([(a, toks)], 1, 2, False)
    meta, arrays = _partial([(a, toks)], 1, 2, False)
    assert meta["counts"] == counts and counts["entropy"] == 0
    for i, c in enumerate(STAT_COLUMNS):
        assert np.array_equal(arrays["sums"][i], sums[c]), c
    assert np.array_equal(arrays["offset_counts"], offsets)


def test_layers_out_of_order_or_missing_are_refused():
    rng = np.random.default_rng(11)
    a, toks = _example(rng, 2, 1, 5, causal=False)
    acc = SurfaceStatsAccumulator(2, 1)
    acc.add_layer({"id": 1, "tokens": toks}, 0, a[0])
    with pytest.raises(BertlookError, match="1 of 2 layers"):
        acc.end_example({"id": 1, "tokens": toks})
    with pytest.raises(BertlookError, match="layer 1 of shape"):  # a layer without its layer 0
        acc.add_layer({"id": 2, "tokens": toks}, 1, a[1])


def test_pairwise_plan_is_numpys_order():
    rng = np.random.default_rng(12)
    for n in (1, 7, 8, 128, 129, 300, 1000, 4099):
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)  # magnitudes that show the order
        leaves, prog = ls.pairwise_plan(n)
        got = ls._pairwise64(x, leaves, prog, np.empty(leaves.shape[0]), np.empty(prog.size))
        assert got == x.sum(), n
