"""tessera.lax.dot_general and associative_scan against numpy: dot_general's dimension numbers against np.einsum,
associative_scan's parallel prefix against a sequential loop of the same fn, on arrays and pytrees, forwards,
reversed and along other axes, with gradients against finite differences."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax
from finite_differences import finite_difference
from comparisons import same


# ---- dot_general ------------------------------------------------------------------------------------------

_A = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
_B = np.random.default_rng(2).standard_normal((5, 3, 6)).astype(np.float32)


@pytest.mark.parametrize("lhs,rhs,dims,spec", [
    (_A[0], _B[:, 0], (((1,), (0,)), ((), ())), "ik,kj->ij"),
    (_A, _B, (((2,), (0,)), ((0,), (1,))), "bik,kbj->bij"),
    (_A, _B, (((2,), (0,)), ((), ())), "aik,kbj->aibj"),
    (_A[0], _B[0], (((), ()), ((), ())), "ij,kl->ijkl"),
    (_A, np.transpose(_A, (2, 0, 1)), (((0, 2), (1, 0)), ((), ())), "ajk,kal->jl"),
    (_A, _A, (((1,), (1,)), ((2,), (2,))), "ajc,bjc->cab"),
])
def test_dot_general_matches_einsum(lhs, rhs, dims, spec):
    same(lax.dot_general(lhs, rhs, dims), np.einsum(spec, lhs, rhs), dtype=np.float32)


def test_dot_general_dtypes_and_errors():
    ai = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    bi = np.arange(8, dtype=np.int32).reshape(4, 2) - 3
    dims = (((1,), (0,)), ((), ()))
    same(lax.dot_general(ai, bi, dims), ai @ bi, dtype=np.int32)
    same(lax.dot_general(ai, bi, dims, preferred_element_type=np.float32), ai @ bi, dtype=np.float32)
    lo = tnp.asarray(_A[0], tnp.bfloat16)
    out = lax.dot_general(lo, tnp.asarray(_B[:, 0], tnp.bfloat16), dims, preferred_element_type=np.float32)
    assert out.dtype == np.float32
    same(out, np.asarray(lo) @ np.asarray(tnp.asarray(_B[:, 0], tnp.bfloat16)), rtol=1e-5)
    with pytest.raises(TypeError, match="contracting dimension 1"):
        lax.dot_general(_A, _B, (((1,), (0,)), ((), ())))
    with pytest.raises(TypeError, match="equal lengths"):
        lax.dot_general(_A, _B, (((2, 1), (0,)), ((), ())))
    with pytest.raises(TypeError, match="out of range"):
        lax.dot_general(_A, _B, (((3,), (0,)), ((), ())))


def test_dot_general_gradient_and_vmap():
    dims = (((2,), (0,)), ((0,), (1,)))
    a, b = _A[:2, :2, :3], _B[:3, :2, :2]
    ga, gb = tessera.grad(lambda u, v: (lax.dot_general(u, v, dims) ** 2).sum(), argnums=(0, 1))(a, b)
    f = lambda u, v: (np.einsum("bik,kbj->bij", u, v) ** 2).sum()
    same(ga, finite_difference(lambda u: f(u, b.astype(np.float64)), a), rtol=1e-4)
    same(gb, finite_difference(lambda v: f(a.astype(np.float64), v), b), rtol=1e-4)
    got = tessera.vmap(lambda u: lax.dot_general(u, _B[:, 0], (((1,), (0,)), ((), ()))))(_A)
    same(got, np.einsum("aik,kj->aij", _A, _B[:, 0]))


# ---- associative_scan -------------------------------------------------------------------------------------


def _sequential(fn, elems, reverse=False, axis=0):
    """The inclusive prefix by a loop over axis: the independent reference. reverse runs the loop from the end
    (JAX's: the scan of the flipped elements, flipped back, so the accumulated value stays fn's first operand)."""
    tree = isinstance(elems, tuple)
    leaves = elems if tree else (elems,)
    n = leaves[0].shape[axis]
    order = range(n - 1, -1, -1) if reverse else range(n)
    out, acc = [None] * n, None
    for i in order:
        x = tuple(np.take(leaf, i, axis) for leaf in leaves)
        acc = x if acc is None else (fn(acc, x) if tree else (fn(acc[0], x[0]),))
        out[i] = acc
    stacked = tuple(np.stack([o[k] for o in out], axis) for k in range(len(leaves)))
    return stacked if isinstance(elems, tuple) else stacked[0]


_XS = np.random.default_rng(3).standard_normal((11, 3)).astype(np.float32)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 8, 11])
@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_sums_like_a_loop(n, reverse):
    got = lax.associative_scan(tnp.add, _XS[:n], reverse=reverse)
    want = np.flip(np.cumsum(np.flip(_XS[:n], 0), 0), 0) if reverse else np.cumsum(_XS[:n], 0)
    same(got, want)


def test_associative_scan_axes_dtypes_and_fns():
    same(lax.associative_scan(tnp.maximum, _XS, axis=1), np.maximum.accumulate(_XS, 1))
    same(lax.associative_scan(tnp.maximum, _XS, axis=-1, reverse=True),
          np.flip(np.maximum.accumulate(np.flip(_XS, 1), 1), 1))
    ints = lax.associative_scan(tnp.add, np.arange(13, dtype=np.int32))
    same(ints, np.cumsum(np.arange(13)), dtype=np.int32)
    flags = np.array([False, False, True, False, False])
    same(lax.associative_scan(tnp.logical_or, flags), np.logical_or.accumulate(flags))
    # Matrix products: associative, not commutative, so the order of the combination shows.
    mats = (np.random.default_rng(4).standard_normal((7, 2, 2)) * 0.5).astype(np.float32)
    same(lax.associative_scan(tnp.matmul, mats), _sequential(lambda p, q: p @ q, mats))
    same(lax.associative_scan(tnp.matmul, mats, reverse=True), _sequential(lambda p, q: p @ q, mats, reverse=True))


def _affine(p, q):
    # (a1, b1) then (a2, b2): x -> a2 (a1 x + b1) + b2, the linear recurrence h_t = a_t h_{t-1} + b_t.
    return p[0] * q[0], p[1] * q[0] + q[1]


def test_associative_scan_pytrees():
    a, b = _XS[:, 0] * 0.3 + 0.7, _XS[:, 1]
    got = lax.associative_scan(_affine, (a, b))
    same(got[1], _sequential(lambda p, q: _affine(p, q), (a, b))[1])
    got = lax.associative_scan(lambda p, q: {"s": p["s"] + q["s"], "m": tnp.maximum(p["m"], q["m"])},
                               {"s": _XS, "m": _XS})
    same(got["s"], np.cumsum(_XS, 0))
    same(got["m"], np.maximum.accumulate(_XS, 0))
    with pytest.raises(ValueError, match="same size"):
        lax.associative_scan(tnp.add, (_XS, _XS[:3]))
    with pytest.raises(TypeError, match="callable"):
        lax.associative_scan(None, _XS)


def test_associative_scan_gradient_jit_and_vmap():
    v = _XS[:, 0] * 0.2 + 1
    g = tessera.grad(lambda x: (lax.associative_scan(tnp.multiply, x) ** 2).sum())(v)
    same(g, finite_difference(lambda x: (np.cumprod(x) ** 2).sum(), v.astype(np.float64)), rtol=1e-4)
    same(tessera.jit(lambda x: lax.associative_scan(tnp.add, x, axis=1))(_XS), np.cumsum(_XS, 1))
    same(tessera.vmap(lambda x: lax.associative_scan(tnp.add, x))(_XS), np.cumsum(_XS, 1))
