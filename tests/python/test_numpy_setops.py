"""tessera.numpy's unique and its array-API forms (tessera/_np_setops.py) against numpy, and jax.numpy's size=
and fill_value= (written out: the first `size` values, then the fill, counts 0), which make unique traceable."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp


def _same(got, want, dtype=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == dtype, got.dtype
    np.testing.assert_array_equal(got, want)


_INTS = np.array([[3, 1, 4, 1, 5], [0, 2, 5, 3, 3], [1, 1, 0, 4, 2], [5, 0, 2, 2, 1]], np.int32)
_ROWS = np.array([[1, 2], [0, 5], [1, 2], [0, 1], [0, 5]], np.int32)
_NANS = np.array([3.0, np.nan, 1.0, 3.0, np.nan, -0.0, 0.0, 2.0, 1.0], np.float32)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("a", [_INTS, _ROWS], ids=["ints", "rows"])
def test_unique_matches_numpy(a, axis):
    got = tnp.unique(a, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    want = np.unique(a, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    _same(got[0], want[0], np.int32)
    _same(got[1], want[1], np.int32)
    # jax.numpy's inverse has a's shape when axis is None (numpy 2's); numpy 1's is flat.
    assert got[2].shape == (a.shape if axis is None else (a.shape[axis],))
    _same(np.ravel(got[2]), np.ravel(want[2]), np.int32)
    _same(got[3], want[3], np.int32)
    _same(tnp.unique(a, axis=axis), np.unique(a, axis=axis))


@pytest.mark.parametrize("equal_nan", [True, False])
def test_unique_nans(equal_nan):
    got = tnp.unique(_NANS, True, True, True, equal_nan=equal_nan)
    want = np.unique(_NANS, True, True, True, equal_nan=equal_nan)
    for g, w in zip(got, want):
        _same(g, w)


def test_unique_size_pads_with_the_smallest_value_or_fill_value():
    values, index, inverse, counts = tnp.unique(_INTS, True, True, True, size=8)
    # Six values 0..5; the two pads repeat the smallest value and its index, with counts 0.
    _same(values, [0, 1, 2, 3, 4, 5, 0, 0])
    first = [int(np.flatnonzero(_INTS.ravel() == v)[0]) for v in range(6)]
    _same(index, first + [first[0]] * 2)
    _same(inverse, np.unique(_INTS, return_inverse=True)[1].reshape(_INTS.shape))
    _same(counts, list(np.bincount(_INTS.ravel())) + [0, 0])
    _same(tnp.unique(_INTS, size=8, fill_value=-1), [0, 1, 2, 3, 4, 5, -1, -1])
    values, counts = tnp.unique(_INTS, return_counts=True, size=2)  # the first two only
    _same(values, [0, 1])
    _same(counts, np.bincount(_INTS.ravel())[:2])
    rows = tnp.unique(_ROWS, axis=0, size=5, fill_value=9)
    _same(rows, [[0, 1], [0, 5], [1, 2], [9, 9], [9, 9]])


def test_unique_under_jit_vmap_and_grad():
    f = tessera.jit(lambda v: tnp.unique(v, True, True, True, size=7, fill_value=0))
    got = f(_INTS)
    _same(got[0], [0, 1, 2, 3, 4, 5, 0])
    _same(got[3], list(np.bincount(_INTS.ravel())) + [0])
    with pytest.raises(tessera.ConcretizationError, match="size="):
        tessera.jit(lambda v: tnp.unique(v))(_INTS)
    _same(tessera.vmap(lambda v: tnp.unique(v, size=5))(_INTS),
          [np.pad(np.unique(r), (0, 5 - len(np.unique(r))), constant_values=np.unique(r)[0]) for r in _INTS])
    v = np.array([3.0, 1.0, 3.0, 0.5, 2.0], np.float32)
    g = tessera.grad(lambda x: (tnp.unique(x, size=5, fill_value=0.0) ** 2).sum())(v)
    # Each unique value's cotangent (2 u) goes to its first occurrence in the sorted order: the first 3.0.
    _same(g, [6.0, 2.0, 0.0, 1.0, 4.0])


def test_unique_edge_cases():
    empty = tnp.unique(np.zeros(0, np.float32), True, True, True)
    assert [e.shape for e in empty] == [(0,), (0,), (0,), (0,)]
    _same(tnp.unique(np.zeros(0, np.float32), size=3, fill_value=7), [7.0, 7.0, 7.0])
    with pytest.raises(ValueError, match="fill_value"):
        tnp.unique(np.zeros(0, np.float32), size=3)
    _same(tnp.unique(np.array([True, False, True]), return_counts=True)[1], [1, 2])
    with pytest.raises(ValueError):
        tnp.unique(_INTS, axis=2)


def test_array_api_forms():
    r = tnp.unique_all(_NANS)
    want = np.unique(_NANS, True, True, True, equal_nan=False)
    for got, w in zip((r.values, r.indices, r.inverse_indices, r.counts), want):
        _same(got, w)
    c = tnp.unique_counts(_INTS)
    _same(c.counts, np.bincount(_INTS.ravel()))
    i = tnp.unique_inverse(_INTS)
    _same(np.asarray(i.values)[np.asarray(i.inverse_indices)], _INTS)
    _same(tnp.unique_values(_NANS), np.unique(_NANS, equal_nan=False))
