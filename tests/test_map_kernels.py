"""The compiled float16 kernels give numpy's numbers bit for bit (bertlook.analyses.map_kernels)."""

from __future__ import annotations

import numpy as np
import pytest

from bertlook.analyses.map_kernels import float16_values, head_mean, table_row_sums
from bertlook.analyses.rollout import rollout
from bertlook.analyses.surface_stats import row_entropy, xlogx_table


def test_table_row_sums_is_numpys_sum_bit_for_bit_at_every_length():
    rng = np.random.default_rng(0)
    table = rng.standard_normal(2**16)  # signs and magnitudes that make the summation order visible
    for n in [*range(1, 301), 512, 1000, 4099]:
        bits = rng.integers(0, 2**16, size=(3, 2, n)).astype(np.uint16)
        ref = np.take(table, bits).sum(axis=-1)
        got = table_row_sums(table, bits)
        assert got.shape == ref.shape
        assert np.array_equal(got, ref), n


def test_table_row_sums_of_empty_rows_are_zero():
    assert np.array_equal(table_row_sums(np.ones(2**16), np.zeros((2, 0), dtype=np.uint16)), np.zeros(2))


def _maps(rng, shape):
    a = rng.random(shape).astype(np.float32)
    return (a / a.sum(-1, keepdims=True)).astype(np.float16)


def test_row_entropy_of_float16_maps_equals_the_float64_formula_on_the_same_values():
    rng = np.random.default_rng(1)
    for n in (1, 5, 8, 9, 127, 128, 129, 200):
        a = _maps(rng, (2, 3, n, n))
        table_way = -np.take(xlogx_table(n), a.view(np.uint16)).sum(axis=-1)  # the numpy form this replaced
        assert np.array_equal(row_entropy(a), table_way)
        assert np.allclose(row_entropy(a), row_entropy(a.astype(np.float64)), rtol=1e-12, atol=1e-12)


def test_head_mean_is_numpys_mean_bit_for_bit():
    rng = np.random.default_rng(2)
    for shape in [(1, 1, 1, 1), (2, 12, 7, 7), (3, 5, 33, 31), (6, 12, 128, 128)]:
        a = _maps(rng, shape)
        mean, finite = head_mean(a)
        assert finite
        assert np.array_equal(mean, np.asarray(a, dtype=np.float64).mean(axis=1))


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_head_mean_sees_a_non_finite_value_and_rollout_refuses_it(bad):
    a = _maps(np.random.default_rng(3), (2, 3, 4, 4))
    a[1, 2, 3, 0] = bad
    assert head_mean(a)[1] is False
    with pytest.raises(Exception, match="non-finite"):
        rollout(a)


def test_rollout_of_float16_maps_is_the_float64_rollout_of_the_same_values():
    a = _maps(np.random.default_rng(4), (4, 6, 20, 20))
    assert np.array_equal(rollout(a), rollout(a.astype(np.float64)))


def test_float16_values_are_exact():
    v = float16_values()
    finite = np.isfinite(v)
    assert finite.sum() == 2**16 - 2 * 1024  # the 2 x 1024 inf / NaN patterns
    assert np.array_equal(v[finite].astype(np.float16).astype(np.float64), v[finite])


def test_head_mean_refuses_other_dtypes():
    with pytest.raises(ValueError, match="float16"):
        head_mean(np.zeros((1, 1, 2, 2)))
