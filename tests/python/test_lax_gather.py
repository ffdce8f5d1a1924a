"""tessera.lax.gather against a naive loop over the output that reads XLA's gather semantics off the dimension
numbers element by element: offset, collapsed and batching dims, start_index_map, the clamped starts of 'clip'
and 'promise_in_bounds' and the filled windows of 'fill'; gradients against finite differences, jit and vmap."""
import itertools

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax
from finite_differences import finite_difference

G = lax.GatherDimensionNumbers


def _reference(operand, indices, dn, slice_sizes, mode="clip", fill=np.nan):
    """XLA's gather by a loop over the output's elements."""
    obatch = tuple(getattr(dn, "operand_batching_dims", ()))
    ibatch = tuple(getattr(dn, "start_indices_batching_dims", ()))
    batch_shape = indices.shape[:-1]
    out_rank = len(batch_shape) + len(dn.offset_dims)
    batch_out = [d for d in range(out_rank) if d not in dn.offset_dims]
    windowed = [d for d in range(operand.ndim) if d not in dn.collapsed_slice_dims and d not in obatch]
    out_shape = [0] * out_rank
    for d, s in zip(batch_out, batch_shape):
        out_shape[d] = s
    for d, od in zip(windowed, dn.offset_dims):
        out_shape[od] = slice_sizes[d]
    out = np.zeros(out_shape, operand.dtype)
    for o in itertools.product(*map(range, out_shape)):
        b = tuple(o[d] for d in batch_out)
        start = [0] * operand.ndim
        fits = True
        for k, d in enumerate(dn.start_index_map):
            s = int(indices[b + (k,)])
            fits &= 0 <= s <= operand.shape[d] - slice_sizes[d]
            start[d] = min(max(s, 0), operand.shape[d] - slice_sizes[d])
        for d, j in zip(obatch, ibatch):
            start[d] = b[j]
        for d, od in zip(windowed, dn.offset_dims):
            start[d] += o[od]
        out[o] = operand[tuple(start)] if fits or mode != "fill" else fill
    return out


_OP = np.random.default_rng(6).standard_normal((5, 6, 7)).astype(np.float32)
_IDX1 = np.array([[0], [2], [4], [-1], [5], [3]], np.int32)
_IDX2 = np.array([[0, 1], [3, 4], [4, 5], [-2, 0], [2, 6]], np.int32)
_CASES = {
    "rows": (_IDX1, G(offset_dims=(1, 2), collapsed_slice_dims=(0,), start_index_map=(0,)), (1, 6, 7)),
    "points": (_IDX2, G(offset_dims=(1,), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)), (1, 1, 7)),
    "windows": (_IDX2, G(offset_dims=(1, 2, 3), collapsed_slice_dims=(), start_index_map=(0, 1)), (2, 3, 4)),
    "window_in_the_middle": (_IDX2[:, :1], G(offset_dims=(0, 2), collapsed_slice_dims=(1,), start_index_map=(1,)),
                             (5, 1, 3)),
    "swapped_map": (_IDX2, G(offset_dims=(1, 2), collapsed_slice_dims=(1,), start_index_map=(1, 0)), (2, 1, 3)),
    "batched_indices": (np.stack([_IDX2[:4], _IDX2[1:]]),
                        G(offset_dims=(2,), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)), (1, 1, 7)),
    "offset_first": (np.stack([_IDX2[:4], _IDX2[1:]]),
                     G(offset_dims=(0,), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)), (1, 1, 7)),
    "operand_batching": (np.array([[[1], [6], [0]], [[2], [7], [-1]], [[5], [0], [3]], [[4], [4], [4]],
                                   [[0], [1], [2]]], np.int32),
                         G(offset_dims=(2,), collapsed_slice_dims=(2,), start_index_map=(2,),
                           operand_batching_dims=(0,), start_indices_batching_dims=(0,)), (1, 6, 1)),
    "scalar_index": (np.array([2, 3], np.int32), G(offset_dims=(0,), collapsed_slice_dims=(0, 1),
                                                   start_index_map=(0, 1)), (1, 1, 7)),
}


@pytest.mark.parametrize("mode", [None, "clip", "promise_in_bounds", "fill"])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_gather_matches_the_naive_loop(case, mode):
    indices, dn, sizes = _CASES[case]
    got = lax.gather(_OP, indices, dn, sizes, mode=mode)
    want = _reference(_OP, indices, dn, sizes, "fill" if mode == "fill" else "clip")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), want)


def test_gather_fill_values_by_dtype():
    indices, dn, sizes = np.array([[0], [5]], np.int32), G(offset_dims=(1,), collapsed_slice_dims=(1,),
                                                             start_index_map=(1,)), (2, 1)
    ints = np.arange(6).reshape(2, 3)
    for dtype, fill in [("int32", -2**31), ("uint32", 2**32 - 1), ("uint8", 255), ("bool", True)]:
        got = lax.gather(tnp.asarray(ints % 2 if dtype == "bool" else ints, dtype), indices, dn, sizes, mode="fill")
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(got)[1], [fill, fill])  # index 5: past the 3 columns
    got = lax.gather(ints.astype(np.float32), indices, dn, sizes, mode="fill", fill_value=-2)
    np.testing.assert_array_equal(np.asarray(got), [[0, 3], [-2, -2]])
    got = lax.gather(ints.astype(np.float32), indices, dn, sizes, mode=lax.GatherScatterMode.CLIP)
    np.testing.assert_array_equal(np.asarray(got), [[0, 3], [2, 5]])


def test_gather_errors():
    with pytest.raises(TypeError, match="start_index_map"):
        lax.gather(_OP, _IDX2, G(offset_dims=(1,), collapsed_slice_dims=(0, 1), start_index_map=(0,)), (1, 1, 7))
    with pytest.raises(TypeError, match="slice size 0 or 1"):
        lax.gather(_OP, _IDX2, G(offset_dims=(1,), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)), (1, 2, 7))
    with pytest.raises(TypeError, match="offset dimension"):
        lax.gather(_OP, _IDX2, G(offset_dims=(1, 2), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)), (1, 1, 7))
    with pytest.raises(TypeError, match="out of range"):
        lax.gather(_OP, _IDX2, G(offset_dims=(1,), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)), (1, 1, 8))
    with pytest.raises(ValueError, match="integer"):
        lax.gather(_OP, _IDX2.astype(np.float32), G(offset_dims=(1,), collapsed_slice_dims=(0, 1),
                                                      start_index_map=(0, 1)), (1, 1, 7))
    with pytest.raises(ValueError, match="Unknown gather mode"):
        lax.gather(_OP, _IDX1, *_CASES["rows"][1:], mode="wrap")


def test_gather_gradient_jit_and_vmap():
    indices, dn, sizes = _CASES["windows"]
    op = _OP[:4, :5, :3]
    sizes = (2, 3, 2)
    g = tessera.grad(lambda o: (lax.gather(o, indices, dn, sizes, mode="clip") ** 2).sum())(op)
    want = finite_difference(lambda o: (_reference(o, indices, dn, sizes) ** 2).sum(), op.astype(np.float64))
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-5)
    g = tessera.grad(lambda o: lax.gather(o, _IDX1, *_CASES["rows"][1:], mode="fill", fill_value=0.0).sum())(_OP)
    counts = np.zeros(5)
    for i in _IDX1[:, 0]:
        if 0 <= i < 5:
            counts[i] += 1  # filled windows read nothing
    np.testing.assert_allclose(np.asarray(g), np.broadcast_to(counts[:, None, None], _OP.shape))
    indices, dn, sizes = _CASES["points"]
    got = tessera.jit(lambda o, i: lax.gather(o, i, dn, sizes))(_OP, indices)
    np.testing.assert_array_equal(np.asarray(got), _reference(_OP, indices, dn, sizes))
    both = np.stack([indices, indices[::-1]])
    got = tessera.vmap(lambda i: lax.gather(_OP, i, dn, sizes))(both)
    np.testing.assert_array_equal(np.asarray(got), [_reference(_OP, i, dn, sizes) for i in both])
