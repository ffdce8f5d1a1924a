"""tessera.numpy.linalg (cholesky, solve, inv, det, slogdet, multi_dot, tensorsolve, tensorinv), tessera.lax.linalg
(cholesky, triangular_solve, lu) and tessera.scipy.linalg (solve_triangular, cho_factor, cho_solve) against
numpy.linalg and loops in numpy; multi_dot's order against every parenthesisation; gradients against central
differences of the numpy functions in float64."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax
from tessera.scipy import linalg as tsl

from comparisons import arr, close
from finite_differences import finite_difference


def spd(rng, shape, dtype=np.float64):
    n = shape[-1]
    m = rng.uniform(-1, 1, shape)
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(dtype)


def well_conditioned(rng, shape, dtype=np.float64):
    n = shape[-1]
    return (rng.uniform(-1, 1, shape) + 3 * np.eye(n)).astype(dtype)


TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 3, 5, 5)])
def test_cholesky_matches_numpy(dtype, shape):
    a = spd(np.random.default_rng(0), shape, dtype)
    l = tnp.linalg.cholesky(arr(a))
    close(l, np.linalg.cholesky(a.astype(np.float64)), **TOL[dtype])
    assert np.asarray(l).dtype == dtype
    close(tnp.linalg.cholesky(arr(a), upper=True), np.swapaxes(np.linalg.cholesky(a.astype(np.float64)), -1, -2), **TOL[dtype])


def test_cholesky_of_an_indefinite_matrix_is_nans():
    l = np.asarray(tnp.linalg.cholesky(arr([[1.0, 2.0], [2.0, 1.0]])))
    assert np.isnan([l[0, 0], l[1, 0], l[1, 1]]).all() and l[0, 1] == 0.0  # JAX's


def test_cholesky_symmetrizes_unless_asked_not_to():
    a = np.array([[4.0, 1.0], [3.0, 3.0]])  # symmetric part [[4, 2], [2, 3]]
    close(lax.linalg.cholesky(arr(a)), np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]])))
    close(lax.linalg.cholesky(arr(a), symmetrize_input=False), np.linalg.cholesky(np.array([[4.0, 3.0], [3.0, 3.0]])))


def substitute(t, b, lower):
    """t x = b by substitution, column by column (t triangular)."""
    n = t.shape[0]
    x = np.zeros_like(b)
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        x[i] = (b[i] - t[i] @ x) / t[i, i]
    return x


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("unit_diagonal", [True, False])
def test_triangular_solve_matches_substitution(left_side, lower, transpose_a, unit_diagonal):
    rng = np.random.default_rng(1)
    a = well_conditioned(rng, (4, 4))
    b = rng.uniform(-1, 1, (4, 3) if left_side else (3, 4))
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        np.fill_diagonal(t, 1.0)
    op = t.T if transpose_a else t
    want = substitute(op, b, lower != transpose_a) if left_side else substitute(op.T, b.T, lower == transpose_a).T
    got = lax.linalg.triangular_solve(arr(a), arr(b), left_side=left_side, lower=lower, transpose_a=transpose_a,
                                      unit_diagonal=unit_diagonal)
    close(got, want, rtol=1e-12, atol=1e-12)


def test_lu_reconstructs_and_pivots_as_lapack():
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (3, 5, 5))
    lu, pivots, perm = lax.linalg.lu(arr(a))
    lu, pivots, perm = np.asarray(lu), np.asarray(pivots), np.asarray(perm)
    assert pivots.dtype == np.int32 and perm.dtype == np.int32
    for k in range(3):
        l = np.tril(lu[k], -1) + np.eye(5)
        u = np.triu(lu[k])
        close(l @ u, a[k][perm[k]], rtol=1e-12, atol=1e-12)
        p = list(range(5))
        for i, j in enumerate(pivots[k]):
            p[i], p[j] = p[j], p[i]
        assert p == list(perm[k])
        assert np.all(np.abs(np.tril(lu[k], -1)) <= 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solve_inv_det_slogdet_match_numpy(dtype):
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (2, 4, 4)).astype(dtype)
    b = rng.uniform(-1, 1, (2, 4, 3)).astype(dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = dict(rtol=2e-3, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-10)
    assert np.asarray(tnp.linalg.solve(arr(a), arr(b))).dtype == dtype
    close(tnp.linalg.solve(arr(a), arr(b)), np.linalg.solve(a64, b64), **tol)
    close(tnp.linalg.solve(arr(a[0]), arr(b[0, :, 0])), np.linalg.solve(a64[0], b64[0, :, 0]), **tol)
    close(tnp.linalg.inv(arr(a)), np.linalg.inv(a64), **tol)
    close(tnp.linalg.det(arr(a)), np.linalg.det(a64), **tol)
    sign, logabsdet = tnp.linalg.slogdet(arr(a))
    want_sign, want_log = np.linalg.slogdet(a64)
    close(sign, want_sign)
    close(logabsdet, want_log, **tol)


def test_det_of_a_permutation_and_of_a_singular_matrix():
    close(tnp.linalg.det(arr([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])), 1.0)
    close(tnp.linalg.det(arr([[0.0, 1.0], [1.0, 0.0]])), -1.0)
    close(tnp.linalg.det(arr([[1.0, 2.0], [2.0, 4.0]])), 0.0)
    sign, logabsdet = tnp.linalg.slogdet(arr([[1.0, 2.0], [2.0, 4.0]]))
    assert float(np.asarray(sign)) == 0.0 and np.asarray(logabsdet) == -np.inf


def test_solve_broadcasts_batch_dims():
    rng = np.random.default_rng(4)
    a = well_conditioned(rng, (4, 4))
    b = rng.uniform(-1, 1, (3, 4, 2))
    close(tnp.linalg.solve(arr(a), arr(b)), np.linalg.solve(a, b), rtol=1e-10, atol=1e-12)


def test_scipy_linalg():
    rng = np.random.default_rng(5)
    a = spd(rng, (4, 4))
    b = rng.uniform(-1, 1, (4,))
    for lower in (True, False):
        c, low = tsl.cho_factor(arr(a), lower=lower)
        assert low == lower
        c = np.asarray(c)
        close(c @ c.T if lower else c.T @ c, a, rtol=1e-12, atol=1e-12)
        close(tsl.cho_solve((arr(c), lower), arr(b)), np.linalg.solve(a, b), rtol=1e-10, atol=1e-12)
    t = np.triu(well_conditioned(rng, (4, 4)))
    close(tsl.solve_triangular(arr(t), arr(b)), np.linalg.solve(t, b), rtol=1e-12, atol=1e-12)
    close(tsl.solve_triangular(arr(t), arr(b), trans="T"), np.linalg.solve(t.T, b), rtol=1e-12, atol=1e-12)
    close(tsl.solve_triangular(arr(t.T), arr(b), lower=True, trans=1), np.linalg.solve(t, b), rtol=1e-12, atol=1e-12)


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(6)
    a = spd(rng, (3, 3))
    m = well_conditioned(rng, (3, 3))
    b = rng.uniform(-1, 1, (3, 2))
    w = rng.uniform(-1, 1, (3, 3))
    w2 = rng.uniform(-1, 1, (3, 2))

    def sym(x):
        return (x + x.T) / 2

    cases = [
        (lambda x: tnp.sum(tnp.linalg.cholesky(x) * arr(w)), lambda x: np.sum(np.linalg.cholesky(sym(x)) * w), a),
        (lambda x: tnp.sum(tnp.linalg.solve(x, arr(b)) * arr(w2)), lambda x: np.sum(np.linalg.solve(x, b) * w2), m),
        (lambda x: tnp.sum(tnp.linalg.inv(x) * arr(w)), lambda x: np.sum(np.linalg.inv(x) * w), m),
        (lambda x: tnp.linalg.det(x), lambda x: np.linalg.det(x), m),
        (lambda x: tnp.linalg.slogdet(x)[1], lambda x: np.linalg.slogdet(x)[1], m),
        (lambda x: tnp.sum(lax.linalg.triangular_solve(x, arr(b), left_side=True, lower=True) * arr(w2)),
         lambda x: np.sum(np.linalg.solve(np.tril(x), b) * w2), m),
    ]
    for f, ref, x in cases:
        close(tessera.grad(f)(arr(x)), finite_difference(ref, x), rtol=1e-6, atol=1e-7)
        close(tessera.jit(tessera.grad(f))(arr(x)), finite_difference(ref, x), rtol=1e-6, atol=1e-7)


def test_vmap_of_cholesky_and_solve():
    rng = np.random.default_rng(7)
    a = spd(rng, (3, 4, 4))
    b = rng.uniform(-1, 1, (3, 4))
    close(tessera.vmap(tnp.linalg.cholesky)(arr(a)), np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)
    close(tessera.vmap(tnp.linalg.solve)(arr(a), arr(b)), np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-10, atol=1e-12)


def test_errors_name_the_op_and_shape():
    with pytest.raises(ValueError, match="square"):
        tnp.linalg.cholesky(np.zeros((2, 3)))
    with pytest.raises(tessera.TesseraError, match="triangular_solve"):
        lax.linalg.triangular_solve(np.eye(3), np.zeros((2, 3)), left_side=True)
    with pytest.raises(tessera.TesseraError, match="lu"):
        lax.linalg.lu(np.zeros((2, 3), np.int32))


def chain_cost(tree, dims):
    """(multiplications, rows, cols) of a parenthesisation: an int k is matrix k [dims[k], dims[k + 1]], a pair
    the product of its two halves."""
    if isinstance(tree, int):
        return 0, dims[tree], dims[tree + 1]
    (cl, m, k), (cr, _, n) = chain_cost(tree[0], dims), chain_cost(tree[1], dims)
    return cl + cr + m * k * n, m, n


def parenthesisations(i, j):
    """Every way to multiply matrices i..j, by enumeration (the independent reference for the chain order)."""
    if i == j:
        yield i
        return
    for k in range(i, j):
        for left in parenthesisations(i, k):
            for right in parenthesisations(k + 1, j):
                yield (left, right)


def tree_of(split, i, j):
    return i if i == j else (tree_of(split, i, split[i][j]), tree_of(split, split[i][j] + 1, j))


@pytest.mark.parametrize("dims", [[10, 100, 5, 50], [30, 35, 15, 5, 10, 20, 25], [2, 40, 3, 50, 4, 60, 1],
                                  [5, 5, 5, 5, 5]])
def test_multi_dot_order_is_the_cheapest(dims):
    from tessera._np_linalg import _chain_order
    n = len(dims) - 1
    best = min(chain_cost(t, dims)[0] for t in parenthesisations(0, n - 1))
    assert chain_cost(tree_of(_chain_order(dims), 0, n - 1), dims)[0] == best


@pytest.mark.parametrize("shapes", [[(3, 4), (4, 5)], [(4,), (4, 5)], [(3, 4), (4,)], [(4,), (4,)],
                                    [(10, 30), (30, 5), (5, 60)], [(6,), (6, 20), (20, 3), (3, 7), (7,)],
                                    [(2, 9), (9, 30), (30, 4), (4, 8), (8, 1)]])
def test_multi_dot_matches_numpy(shapes):
    rng = np.random.default_rng(len(shapes) * 10 + len(shapes[0]))
    arrays = [rng.standard_normal(s) for s in shapes]
    want = np.linalg.multi_dot(arrays)
    close(tnp.linalg.multi_dot([arr(a) for a in arrays]), want, rtol=1e-12, atol=1e-12)
    close(tessera.jit(tnp.linalg.multi_dot)([arr(a) for a in arrays]), want, rtol=1e-12, atol=1e-12)


def test_multi_dot_gradient_and_errors():
    rng = np.random.default_rng(11)
    a, b, c = rng.standard_normal((4,)), rng.standard_normal((4, 6)), rng.standard_normal((6, 2))
    w = rng.standard_normal(2)
    g = tessera.grad(lambda x: tnp.sum(tnp.linalg.multi_dot([arr(a), x, arr(c)]) * arr(w)))(arr(b))
    close(g, finite_difference(lambda x: np.sum(np.linalg.multi_dot([a, x, c]) * w), b), rtol=1e-7, atol=1e-8)
    with pytest.raises(ValueError, match="at least two arrays"):
        tnp.linalg.multi_dot([arr(b)])
    with pytest.raises(ValueError, match=r"two-dimensional.*\(4, 6, 1\)"):
        tnp.linalg.multi_dot([arr(a), arr(b[..., None]), arr(c)])
    with pytest.raises(ValueError, match="must match first dimension"):
        tnp.linalg.multi_dot([arr(b), arr(b)])


@pytest.mark.parametrize("a_shape,b_shape,axes", [((6, 6), (6,), None), ((2, 3, 6), (2, 3), None),
                                                  ((3, 4, 2, 6), (3, 4), None), ((4, 6, 2, 12), (2, 12), (0, 1)),
                                                  ((6, 2, 3), (2, 3), (0,))])
def test_tensorsolve_matches_numpy(a_shape, b_shape, axes):
    rng = np.random.default_rng(len(a_shape))
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    want = np.linalg.tensorsolve(a, b, axes=axes)
    close(tnp.linalg.tensorsolve(arr(a), arr(b), axes=axes), want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shape,ind", [((4, 6, 8, 3), 2), ((24, 8, 3), 1), ((2, 3, 6), 2), ((3, 4, 2, 6), 2)])
def test_tensorinv_matches_numpy(shape, ind):
    a = np.random.default_rng(sum(shape)).standard_normal(shape)
    got = tnp.linalg.tensorinv(arr(a), ind=ind)
    close(got, np.linalg.tensorinv(a, ind=ind), rtol=1e-9, atol=1e-10)
    close(np.tensordot(np.asarray(got), a, ind), np.eye(int(np.prod(shape[ind:]))).reshape(shape[ind:] * 2),
          atol=1e-10)


def test_tensorsolve_and_tensorinv_errors():
    with pytest.raises(ValueError, match=r"leading shape of a must match shape of b.*\(2, 3, 6\)"):
        tnp.linalg.tensorsolve(np.ones((2, 3, 6)), np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"prod\(a.shape\[:b.ndim\]\) == prod\(a.shape\[b.ndim:\]\)"):
        tnp.linalg.tensorsolve(np.ones((2, 3, 5)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="ind must be a positive integer"):
        tnp.linalg.tensorinv(np.ones((2, 2)), ind=0)
    with pytest.raises(ValueError, match=r"product of the first `ind` dimensions.*\(2, 3, 4\)"):
        tnp.linalg.tensorinv(np.ones((2, 3, 4)), ind=1)
