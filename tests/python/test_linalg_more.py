"""tessera.scipy.linalg's cholesky, det, inv, solve, block_diag, qr_multiply, hessenberg, schur, polar,
eigh_tridiagonal, expm_frechet, solve_sylvester and special matrices (tessera/_scipy_linalg.py,
_scipy_linalg_special.py), and tessera.numpy.linalg's array API names, against numpy in float64, naive loops over
the definitions, values stored from scipy 1.17 (scipy is not installed beside tessera), and gradients against
central differences of numpy functions."""
import math

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera.scipy import linalg

from comparisons import arr, close, taylor_expm
from finite_differences import finite_difference

F64 = dict(rtol=1e-10, atol=1e-12)


def mT(x):
    return np.swapaxes(x, -1, -2)


def rand(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape)


def spd(shape, seed=0):
    a = rand(shape, seed)
    return a @ mT(a) + shape[-1] * np.eye(shape[-1])


# ---- cholesky, det, inv, solve ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 3, 5, 5)])
def test_cholesky_upper_by_default_and_lower(shape):
    a = spd(shape)
    low = np.linalg.cholesky(a)
    # Garbage in the triangle that is not read: scipy's cholesky reads the upper one unless lower=True.
    upper_only = np.triu(a) + np.tril(np.full(shape, 7.0), -1)
    lower_only = np.tril(a) + np.triu(np.full(shape, 7.0), 1)
    close(linalg.cholesky(arr(upper_only)), mT(low), **F64)
    close(linalg.cholesky(arr(lower_only), lower=True), low, **F64)
    close(tessera.jit(linalg.cholesky)(arr(upper_only)), mT(low), **F64)


def test_cholesky_empty_float32_and_not_positive_definite():
    assert np.asarray(linalg.cholesky(arr(np.zeros((0, 0))))).shape == (0, 0)
    a = spd((3, 3)).astype(np.float32)
    got = linalg.cholesky(arr(a))
    assert np.asarray(got).dtype == np.float32
    close(got, mT(np.linalg.cholesky(a.astype(np.float64))), rtol=1e-5, atol=1e-6)
    assert np.isnan(np.asarray(linalg.cholesky(arr(-np.eye(2))))).any()


@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_gradient_matches_finite_differences(lower):
    a, c = spd((3, 3), 1), rand((3, 3), 2)

    def ref(x):  # the factor of the symmetric matrix that the named triangle defines
        t = np.tril(x) if lower else np.triu(x)
        s = t + mT(t) - np.diag(np.diag(x))
        l = np.linalg.cholesky(s)
        return np.sum((l if lower else mT(l)) * c)

    g = tessera.grad(lambda x: tnp.sum(linalg.cholesky(x, lower=lower) * arr(c)))(arr(a))
    close(g, finite_difference(ref, a), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 2, 4, 4)])
def test_det_and_inv_match_numpy(shape):
    a = rand(shape, 3)
    close(linalg.det(arr(a)), np.linalg.det(a), **F64)
    close(linalg.inv(arr(a)), np.linalg.inv(a), rtol=1e-9, atol=1e-11)
    close(tessera.vmap(linalg.inv)(arr(a.reshape((-1,) + shape[-2:]))), np.linalg.inv(a).reshape((-1,) + shape[-2:]),
          rtol=1e-9, atol=1e-11)


def test_det_and_inv_of_empty_matrices():
    close(linalg.det(arr(np.zeros((0, 0)))), 1.0)
    assert np.asarray(linalg.inv(arr(np.zeros((2, 0, 0))))).shape == (2, 0, 0)


def test_det_and_inv_gradients_match_finite_differences():
    a, c = rand((3, 3), 4) + 2 * np.eye(3), rand((3, 3), 5)
    close(tessera.grad(lambda x: linalg.det(x))(arr(a)), finite_difference(np.linalg.det, a), rtol=1e-7, atol=1e-8)
    g = tessera.jit(tessera.grad(lambda x: tnp.sum(linalg.inv(x) * arr(c))))(arr(a))
    close(g, finite_difference(lambda x: np.sum(np.linalg.inv(x) * c), a), rtol=1e-6, atol=1e-8)


def _per_matrix_solve(a, b, vector):
    """numpy's solve matrix by matrix of a [2, n, n], b broadcast to a batch of vectors or matrices."""
    b = np.broadcast_to(b, (2,) + b.shape[-1 if vector else -2:])
    return np.stack([np.linalg.solve(x, y) for x, y in zip(a, b)])


@pytest.mark.parametrize("assume_a", ["gen", "sym", "her", "pos"])
@pytest.mark.parametrize("b_shape", [(4,), (4, 3), (2, 4), (2, 4, 3), (1, 4, 3)])
def test_solve_matches_numpy(assume_a, b_shape):
    a = spd((2, 4, 4), 6)  # symmetric positive definite, so every assume_a applies
    b = rand(b_shape, 7)
    # JAX's: b is a vector when 1-D (jax.numpy.linalg.solve since 0.5), or for 'pos' (lax's solve) when it has one
    # axis less than a; b [2, 4] against a [2, 4, 4] is refused by the first, b [4, 3] by the second.
    if b_shape == (2, 4) and assume_a != "pos":
        with pytest.raises(ValueError, match="Invalid shapes for solve"):
            linalg.solve(arr(a), arr(b), assume_a=assume_a)
        return
    if b_shape == (4, 3) and assume_a == "pos":
        with pytest.raises(ValueError, match="does not fit"):
            linalg.solve(arr(a), arr(b), assume_a=assume_a)
        return
    want = _per_matrix_solve(a, b, len(b_shape) == 1 or b_shape == (2, 4))
    close(linalg.solve(arr(a), arr(b), assume_a=assume_a), want, rtol=1e-9, atol=1e-11)
    close(tessera.jit(lambda x, y: linalg.solve(x, y, assume_a=assume_a, lower=True))(arr(a), arr(b)), want,
          rtol=1e-9, atol=1e-11)


def test_solve_pos_reads_the_named_triangle():
    a, b = spd((3, 3), 8), rand((3,), 9)
    want = np.linalg.solve(a, b)
    close(linalg.solve(arr(np.tril(a)), arr(b), assume_a="pos", lower=True), want, rtol=1e-9)
    close(linalg.solve(arr(np.triu(a)), arr(b), assume_a="pos"), want, rtol=1e-9)


@pytest.mark.parametrize("assume_a", ["gen", "pos"])
def test_solve_gradients_match_finite_differences(assume_a):
    # JAX's 'pos' solve is a custom_linear_solve of the whole matrix: its gradient is that of the plain solve.
    a, b, c = spd((3, 3), 10), rand((3, 2), 11), rand((3, 2), 12)
    ga, gb = tessera.grad(lambda x, y: tnp.sum(linalg.solve(x, y, assume_a=assume_a) * arr(c)), argnums=(0, 1))(
        arr(a), arr(b))
    close(ga, finite_difference(lambda x: np.sum(np.linalg.solve(x, b) * c), a), rtol=1e-6, atol=1e-8)
    close(gb, finite_difference(lambda y: np.sum(np.linalg.solve(a, y) * c), b), rtol=1e-6, atol=1e-8)


def test_solve_rejects_an_unknown_assume_a():
    with pytest.raises(ValueError, match=r"Expected assume_a to be one of \['gen', 'sym', 'her', 'pos'\]; got 'tri'"):
        linalg.solve(arr(np.eye(2)), arr(np.ones(2)), assume_a="tri")


# ---- block_diag, qr_multiply --------------------------------------------------------------------------------


def test_block_diag_places_the_blocks():
    blocks = [np.array(1.5), np.arange(2.0), rand((2, 3), 13), np.zeros((0, 2)), rand((1, 1), 14)]
    want = np.zeros((1 + 1 + 2 + 0 + 1, 1 + 2 + 3 + 2 + 1))
    r = c = 0
    for blk in blocks:
        blk = np.atleast_2d(blk)
        want[r:r + blk.shape[0], c:c + blk.shape[1]] = blk
        r, c = r + blk.shape[0], c + blk.shape[1]
    close(linalg.block_diag(*map(arr, blocks)), want)
    close(tessera.jit(linalg.block_diag)(*map(arr, blocks)), want)
    assert np.asarray(linalg.block_diag()).shape == (1, 0)
    mixed = linalg.block_diag(arr(np.ones((1, 1), np.int32)), arr(np.ones((1, 1), np.float64)))
    assert np.asarray(mixed).dtype == np.float64
    with pytest.raises(ValueError, match="at most 2 dimensions"):
        linalg.block_diag(arr(np.ones((1, 1, 1))))


def test_block_diag_gradient():
    x = rand((2, 2), 15)
    g = tessera.grad(lambda a, b: tnp.sum(linalg.block_diag(a, b) ** 2), argnums=(0, 1))(arr(x), arr(2 * x))
    close(g[0], 2 * x)
    close(g[1], 4 * x)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 5, 3)])
def test_qr_multiply_matches_numpy_qr(shape):
    a = rand(shape, 16)
    m, n = shape[-2:]
    k = min(m, n)
    q, r = np.linalg.qr(a)  # reduced: LAPACK's factors, as the qr op's
    c_right = rand(shape[:-2] + (2, m), 17)
    got, got_r = linalg.qr_multiply(arr(a), arr(c_right))
    close(got, c_right @ q, **F64)
    close(got_r, r, **F64)
    c_left = rand(shape[:-2] + (k, 3), 18)
    got, got_r = linalg.qr_multiply(arr(a), arr(c_left), mode="left")
    close(got, q @ c_left, **F64)
    assert np.asarray(got_r).shape == shape[:-2] + (k, n)


def test_qr_multiply_vectors_and_errors():
    a = rand((4, 3), 19)
    q, r = np.linalg.qr(a)
    v = rand((4,), 20)
    close(linalg.qr_multiply(arr(a), arr(v))[0], v @ q, **F64)
    close(linalg.qr_multiply(arr(a), arr(v[:3]), mode="left")[0], q @ v[:3], **F64)
    with pytest.raises(ValueError, match="Q has 4 rows, but c has 3 columns"):
        linalg.qr_multiply(arr(a), arr(v[:3]))
    with pytest.raises(ValueError, match="mode must be 'right' or 'left'"):
        linalg.qr_multiply(arr(a), arr(v), mode="up")



# scipy.linalg.qr(rand(shape, seed), pivoting=True)[2] (LAPACK's ?geqp3), and of a tie (columns 1 and 2 equal).
PIVOTS = [((5, 4), 60, [3, 2, 1, 0]), ((4, 6), 61, [1, 5, 4, 2, 3, 0]),
          ((2, 6, 6), 62, [[5, 2, 0, 4, 3, 1], [2, 5, 3, 0, 1, 4]])]


@pytest.mark.parametrize("shape,seed,pivots", PIVOTS)
def test_qr_with_column_pivoting_matches_scipy(shape, seed, pivots):
    a = rand(shape, seed)
    q, r, p = (np.asarray(x) for x in tessera.jit(lambda x: linalg.qr(x, pivoting=True))(arr(a)))
    assert p.dtype == np.int32
    np.testing.assert_array_equal(p, pivots)
    permuted = np.take_along_axis(a, p[..., None, :], axis=-1)
    close(q @ r, permuted, **F64)
    close(np.abs(r), np.abs(np.linalg.qr(permuted, mode="complete")[1]), **F64)
    # |R|'s diagonal does not increase: each pivot is the largest remaining column.
    d = np.abs(np.diagonal(r, 0, -2, -1))
    assert (d[..., 1:] <= d[..., :-1] + 1e-12).all()
    r_only, p_only = linalg.qr(arr(a), pivoting=True, mode="r")
    close(r_only, r, **F64)
    tie = np.array([[1.0, 2.0, 2.0], [0.0, 1.0, 1.0], [3.0, 0.0, 0.0]])
    np.testing.assert_array_equal(np.asarray(linalg.qr(arr(tie), pivoting=True)[2]), [0, 1, 2])


def test_pivoted_qr_multiply_and_gradient():
    a, c = rand((5, 4), 60), rand((2, 5), 63)
    p = [3, 2, 1, 0]
    q, r = np.linalg.qr(a[:, p])
    got, got_r, got_p = linalg.qr_multiply(arr(a), arr(c), pivoting=True)
    close(got, c @ q, **F64)
    close(got_r, r, **F64)
    np.testing.assert_array_equal(np.asarray(got_p), p)
    g = tessera.grad(lambda x: tnp.sum(linalg.qr(x, pivoting=True, mode="economic")[1]))(arr(a))
    close(g, finite_difference(lambda x: np.sum(np.linalg.qr(x[:, p])[1]), a), rtol=1e-6, atol=1e-8)

# ---- hessenberg, polar, eigh_tridiagonal --------------------------------------------------------------------

# scipy.linalg.hessenberg(HESS_A, calc_q=True) (LAPACK's ?gehrd; JAX's gives the same).
HESS_A = np.array([[1., 2., 3., 4.], [1., 4., 2., 3.], [3., 2., 1., 4.], [2., 3., 2., 2.]])
HESS_H = np.array([[1., -5.0779635963360645, 1.1674774785852047, 1.3606182606749222],
                   [-3.7416573867739413, 5.785714285714285, -3.6129700430703773, -1.8245822889364376],
                   [0., -2.992337152236202, 2.4934879934879945, -0.5771624540444946],
                   [0., 0., -0.04263997021964593, -1.2792022792022792]])
HESS_Q = np.array([[1., 0., 0., 0.],
                   [0., -0.2672612419124243, 0.912291144468219, -0.31031644541708764],
                   [0., -0.8017837257372732, -0.38915915952840097, -0.45353942022497423],
                   [0., -0.5345224838248488, 0.1275931670584923, 0.8354673530460051]])


def test_hessenberg_matches_scipy():
    h, q = linalg.hessenberg(arr(HESS_A), calc_q=True)
    close(h, HESS_H, **F64)
    close(q, HESS_Q, **F64)
    close(tessera.jit(linalg.hessenberg)(arr(HESS_A)), HESS_H, **F64)


@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (2, 2), (6, 6), (3, 5, 5)])
def test_hessenberg_reconstructs_batches(shape):
    a = rand(shape, 21)
    if shape[-1] > 2:
        a[..., 2:, 0] = 0.0  # a column that needs no reflection
    h, q = (np.asarray(x) for x in linalg.hessenberg(arr(a), calc_q=True))
    assert h.shape == q.shape == shape
    if shape[-1] == 0:
        return
    close(np.tril(h, -2), np.zeros(shape), atol=0)
    close(q @ h @ mT(q), a, **F64)
    close(mT(q) @ q, np.broadcast_to(np.eye(shape[-1]), shape), **F64)


def test_hessenberg_gradient_of_an_invariant():
    # The trace of H (and of H^2) equals that of a: the gradient is the identity's (2 a^T's).
    a = rand((4, 4), 22)
    close(tessera.grad(lambda x: tnp.trace(linalg.hessenberg(x)))(arr(a)), np.eye(4), rtol=1e-9, atol=1e-10)
    g = tessera.grad(lambda x: tnp.trace(linalg.hessenberg(x) @ linalg.hessenberg(x)))(arr(a))
    close(g, 2 * a.T, rtol=1e-8, atol=1e-9)



def eigenvalues_of_real_schur(t):
    """The eigenvalues of a real Schur form t [n, n], checking its shape on the way: zeros below the subdiagonal,
    no two subdiagonal entries in a row, and each 2x2 block standard (equal diagonal, off-diagonals of opposite
    signs: the complex pair a +- sqrt(-b c) i)."""
    n = len(t)
    assert not np.tril(t, -2).any()
    ev, i = [], 0
    while i < n:
        if i + 1 < n and t[i + 1, i] != 0:
            a, b, c, d = t[i, i], t[i, i + 1], t[i + 1, i], t[i + 1, i + 1]
            assert a == d and b * c < 0, (a, b, c, d)
            assert i + 2 >= n or t[i + 2, i + 1] == 0
            ev += [a + 1j * np.sqrt(-b * c), a - 1j * np.sqrt(-b * c)]
            i += 2
        else:
            ev.append(t[i, i])
            i += 1
    return np.sort_complex(np.array(ev))


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (9, 9), (3, 6, 6)])
def test_schur_real_form(shape):
    a = rand(shape, 49)
    t, z = (np.asarray(x) for x in tessera.jit(linalg.schur)(arr(a)))
    assert t.shape == z.shape == shape
    close(z @ t @ mT(z), a, rtol=1e-12, atol=1e-12)
    close(mT(z) @ z, np.broadcast_to(np.eye(shape[-1]), shape), rtol=1e-12, atol=1e-13)
    for tt, aa in zip(t.reshape((-1,) + shape[-2:]), a.reshape((-1,) + shape[-2:])):
        close(eigenvalues_of_real_schur(tt), np.sort_complex(np.linalg.eigvals(aa)), rtol=1e-10, atol=1e-10)


def test_schur_of_special_matrices_and_float32():
    s = rand((6, 6), 50)
    t, z = (np.asarray(x) for x in linalg.schur(arr(s + s.T)))
    close(np.sort(np.diag(t)), np.linalg.eigvalsh(s + s.T), rtol=1e-10, atol=1e-12)
    close(t, np.diag(np.diag(t)), atol=1e-12)
    rotation = np.array([[0.0, 1.0], [-1.0, 0.0]])  # eigenvalues +-i, already standard
    close(linalg.schur(arr(rotation))[0], rotation)
    nilpotent = np.diag(np.ones(3), 1)
    close(linalg.schur(arr(nilpotent))[0], nilpotent)
    assert np.asarray(linalg.schur(arr(np.zeros((0, 0))))[0]).shape == (0, 0)
    a = rand((5, 5), 51).astype(np.float32)
    t, z = (np.asarray(x) for x in linalg.schur(arr(a)))
    assert t.dtype == np.float32
    close(z.astype(np.float64) @ t @ z.T, a, rtol=1e-5, atol=1e-5)


def test_schur_errors():
    with pytest.raises(NotImplementedError, match="complex"):
        linalg.schur(arr(np.eye(2)), output="complex")
    with pytest.raises(ValueError, match="Expected 'output' to be either 'real' or 'complex'"):
        linalg.schur(arr(np.eye(2)), output="upper")

POLAR_A = np.array([[1., 2., 3.], [5., 4., 2.], [3., 2., 1.]])
POLAR_U = np.array([[-0.19778868392475424, 0.23903231160728244, 0.9506540856268343],
                    [0.486223677549027, 0.8660214261243098, -0.116590843912873],
                    [0.851155785918191, -0.43917017601528335, 0.28751240772650405]])
POLAR_P = np.array([[4.786797061574956, 3.251628914182983, 1.2302370892419832],
                    [3.251628914182983, 3.063809975681237, 2.009969611055184],
                    [1.2302370892419832, 2.009969611055184, 2.906292976781261]])


def test_polar_matches_scipy():
    u, p = linalg.polar(arr(POLAR_A))
    close(u, POLAR_U, **F64)
    close(p, POLAR_P, **F64)
    u, p = linalg.polar(arr(POLAR_A), side="left", method="svd")
    close(u, POLAR_U, **F64)
    close(p @ u, POLAR_A, **F64)


@pytest.mark.parametrize("shape,side", [((5, 3), "right"), ((3, 5), "left"), ((2, 4, 4), "right")])
def test_polar_properties(shape, side):
    a = rand(shape, 23)
    u, p = (np.asarray(x) for x in tessera.jit(lambda x: linalg.polar(x, side=side))(arr(a)))
    close(u @ p if side == "right" else p @ u, a, **F64)
    small = min(shape[-2:])
    close(mT(u) @ u if side == "right" else u @ mT(u), np.broadcast_to(np.eye(small), shape[:-2] + (small, small)),
          **F64)
    close(p, mT(p), **F64)
    assert np.linalg.eigvalsh(p).min() > -1e-12


def test_polar_errors():
    with pytest.raises(NotImplementedError, match="qdwh"):
        linalg.polar(arr(rand((3, 5))))
    with pytest.raises(ValueError, match="Unknown polar decomposition method"):
        linalg.polar(arr(rand((3, 3))), method="newton")
    with pytest.raises(ValueError, match="at least a 2-D array"):
        linalg.polar(arr(rand((3,))))


def test_eigh_tridiagonal_matches_numpy():
    d, e = rand((6,), 24), rand((5,), 25)
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    want = np.linalg.eigvalsh(t)
    close(linalg.eigh_tridiagonal(arr(d), arr(e), eigvals_only=True), want, **F64)
    w, v = (np.asarray(x) for x in tessera.jit(linalg.eigh_tridiagonal)(arr(d), arr(e)))
    close(w, want, **F64)
    close(t @ v, v * w, **F64)
    close(linalg.eigh_tridiagonal(arr(d), arr(e), eigvals_only=True, select="i", select_range=(1, 3)), want[1:4],
          **F64)
    w1, v1 = linalg.eigh_tridiagonal(arr(d[:1]), arr(e[:0]))
    close(w1, d[:1])
    close(v1, np.eye(1))


def test_eigh_tridiagonal_errors():
    d, e = arr(rand((3,))), arr(rand((2,)))
    with pytest.raises(NotImplementedError, match="select='v'"):
        linalg.eigh_tridiagonal(d, e, select="v", select_range=(0.0, 1.0))
    with pytest.raises(ValueError, match="select_range must be specified"):
        linalg.eigh_tridiagonal(d, e, select="i")
    with pytest.raises(TypeError, match="same dtype"):
        linalg.eigh_tridiagonal(d, arr(rand((2,)).astype(np.float32)))


# ---- expm_frechet, solve_sylvester --------------------------------------------------------------------------


def np_frechet(a, e):
    """The Frechet derivative of exp at a in direction e: the upper right block of exp([[a, e], [0, a]])."""
    n = len(a)
    big = np.block([[a, e], [np.zeros((n, n)), a]])
    return taylor_expm(big)[:n, n:]


@pytest.mark.parametrize("scale", [0.2, 3.0])
def test_expm_frechet_matches_the_block_exponential(scale):
    a, e = rand((4, 4), 26) * scale, rand((4, 4), 27)
    expm_a, l = linalg.expm_frechet(arr(a), arr(e))
    close(expm_a, taylor_expm(a), rtol=1e-10, atol=1e-12)
    close(l, np_frechet(a, e), rtol=1e-9, atol=1e-11)
    close(linalg.expm_frechet(arr(a), arr(e), compute_expm=False), np_frechet(a, e), rtol=1e-9, atol=1e-11)


def test_expm_frechet_batched_jit_and_gradient():
    a, e, c = rand((2, 3, 3), 28), rand((2, 3, 3), 29), rand((3, 3), 30)
    got = tessera.jit(lambda x, y: linalg.expm_frechet(x, y, compute_expm=False))(arr(a), arr(e))
    close(got, np.stack([np_frechet(x, y) for x, y in zip(a, e)]), rtol=1e-9, atol=1e-11)
    g = tessera.grad(lambda x: tnp.sum(linalg.expm_frechet(x, arr(e[0]), compute_expm=False) * arr(c)))(arr(a[0]))
    close(g, finite_difference(lambda x: np.sum(np_frechet(x, e[0]) * c), a[0]), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="expected A and E to be the same shape"):
        linalg.expm_frechet(arr(a), arr(e[0]))


SYL_A = np.array([[3., 1., 0.], [1., 4., 1.], [0., 2., 5.]])
SYL_B = np.array([[2., -1.], [0.5, 1.]])
SYL_C = np.array([[1., 2.], [3., 4.], [5., 6.]])
SYL_X = np.array([[0.09494950652147775, 0.36952175830722295],  # scipy.linalg.solve_sylvester
                  [0.3404915882390004, 0.6168624732925869],
                  [0.5536697273982254, 0.8866574634688419]])


def np_sylvester(a, b, c):
    """A X + X B = C by the Kronecker form in column-major vec: (I (x) A + B^T (x) I) vec(X) = vec(C)."""
    m, n = c.shape
    k = np.kron(np.eye(n), a) + np.kron(b.T, np.eye(m))
    return np.linalg.solve(k, c.reshape(-1, order="F")).reshape((m, n), order="F")


def test_solve_sylvester_matches_scipy():
    close(linalg.solve_sylvester(arr(SYL_A), arr(SYL_B), arr(SYL_C)), SYL_X, **F64)


def test_solve_sylvester_batched_jit_and_gradient():
    a, b, c = rand((2, 3, 3), 31) + 3 * np.eye(3), rand((2, 2), 32) + 3 * np.eye(2), rand((2, 3, 2), 33)
    x = np.asarray(tessera.jit(linalg.solve_sylvester)(arr(a), arr(b), arr(c)))
    close(a @ x + x @ b, c, **F64)
    close(x[1], np_sylvester(a[1], b, c[1]), **F64)
    w = rand((3, 2), 34)
    ga, gb, gc = tessera.grad(lambda p, q, r: tnp.sum(linalg.solve_sylvester(p, q, r) * arr(w)), argnums=(0, 1, 2))(
        arr(a[0]), arr(b), arr(c[0]))
    close(ga, finite_difference(lambda p: np.sum(np_sylvester(p, b, c[0]) * w), a[0]), rtol=1e-6, atol=1e-8)
    close(gb, finite_difference(lambda q: np.sum(np_sylvester(a[0], q, c[0]) * w), b), rtol=1e-6, atol=1e-8)
    close(gc, finite_difference(lambda r: np.sum(np_sylvester(a[0], b, r) * w), c[0]), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("m,n", [(1, 1), (1, 3), (4, 1), (5, 4), (8, 8)])
def test_solve_sylvester_with_complex_eigenvalues(m, n):
    # Rotation blocks give A and B complex eigenvalue pairs: 2x2 blocks in their real Schur forms.
    rng = np.random.default_rng(m * 10 + n)
    a = rng.standard_normal((m, m))
    if m >= 4:
        a[:2, :2] += np.array([[0.0, 3.0], [-3.0, 0.0]])
    b, c = rng.standard_normal((n, n)), rng.standard_normal((m, n))
    x = np.asarray(linalg.solve_sylvester(arr(a), arr(b), arr(c)))
    close(x, np_sylvester(a, b, c), rtol=1e-9, atol=1e-10)
    close(a @ x + x @ b, c, rtol=1e-10, atol=1e-10)


def test_solve_sylvester_singular_gives_nans_and_errors():
    a, b = np.diag([1.0, 2.0]), np.diag([-1.0, 3.0])  # 1 + (-1) = 0: no unique solution
    assert np.isnan(np.asarray(linalg.solve_sylvester(arr(a), arr(b), arr(np.ones((2, 2)))))).all()
    # Non-normal: eigenvalue sums 2 (JAX's test passes) though the operator's smallest singular value is ~4e-12.
    a = np.array([[1.0, 1e12], [0.0, 1.0]])
    x = np.asarray(linalg.solve_sylvester(arr(a), arr(np.ones((1, 1))), arr(np.array([[2.0 + 1e12], [2.0]]))))
    close(x, np.ones((2, 1)), rtol=1e-6)
    with pytest.raises(ValueError, match="Incompatible shapes for Sylvester equation"):
        linalg.solve_sylvester(arr(a), arr(b), arr(np.ones((3, 2))))
    with pytest.raises(ValueError, match="Unrecognized method"):
        linalg.solve_sylvester(arr(a), arr(b), arr(np.ones((2, 2))), method="qz")


# ---- special matrices ---------------------------------------------------------------------------------------


def test_toeplitz_hankel_circulant_match_their_definitions():
    c, r = rand((4,), 35), rand((3,), 36)
    t = np.array([[c[i - j] if i >= j else r[j - i] for j in range(3)] for i in range(4)])
    close(linalg.toeplitz(arr(c), arr(r)), t)
    sym = np.array([[c[abs(i - j)] for j in range(4)] for i in range(4)])
    close(linalg.toeplitz(arr(c)), sym)
    v = np.concatenate([c, r[1:]])
    close(linalg.hankel(arr(c), arr(r)), np.array([[v[i + j] for j in range(3)] for i in range(4)]))
    v0 = np.concatenate([c, np.zeros(3)])
    close(linalg.hankel(arr(c)), np.array([[v0[i + j] for j in range(4)] for i in range(4)]))
    close(linalg.circulant(arr(c)), np.array([[c[(i - j) % 4] for j in range(4)] for i in range(4)]))
    assert np.asarray(linalg.toeplitz(arr(np.zeros(0)), arr(r))).shape == (0, 3)
    close(linalg.toeplitz(arr(np.array(2.0))), np.full((1, 1), 2.0))
    with pytest.raises(ValueError, match="hankel: c must be at least 1-dimensional"):
        linalg.hankel(arr(np.array(1.0)))


def test_toeplitz_batches_and_differentiates():
    c, r = rand((2, 4), 37), rand((3,), 38)
    got = tessera.jit(linalg.toeplitz)(arr(c), arr(r))
    close(got, np.stack([np.array([[x[i - j] if i >= j else r[j - i] for j in range(3)] for i in range(4)])
                         for x in c]))
    w = rand((4, 4), 39)
    g = tessera.grad(lambda x: tnp.sum(linalg.toeplitz(x) * arr(w)))(arr(c[0]))
    close(g, [sum(w[i, j] for i in range(4) for j in range(4) if abs(i - j) == k) for k in range(4)])


def test_leslie_companion_fiedler():
    f, s = rand((4,), 40), rand((3,), 41)
    les = np.zeros((4, 4))
    les[0] = f
    les[np.arange(1, 4), np.arange(3)] = s
    close(linalg.leslie(arr(f), arr(s)), les)
    a = rand((5,), 42)
    comp = np.zeros((4, 4))
    comp[0] = -a[1:] / a[0]
    comp[np.arange(1, 4), np.arange(3)] = 1.0
    close(linalg.companion(arr(a)), comp)
    # The companion matrix's eigenvalues are the polynomial's roots.
    close(np.sort_complex(np.linalg.eigvals(np.asarray(linalg.fiedler_companion(arr(a))))),
          np.sort_complex(np.roots(a)), rtol=1e-9, atol=1e-9)
    close(linalg.fiedler(arr(a)), np.abs(a[:, None] - a[None, :]))
    close(tessera.vmap(linalg.companion)(arr(np.stack([a, 2 * a]))), np.stack([comp, comp]))
    with pytest.raises(ValueError, match="The length of s along the last axis must be one less"):
        linalg.leslie(arr(f), arr(s[:2]))
    with pytest.raises(ValueError, match="at least 2"):
        linalg.companion(arr(a[:1]))


# scipy.linalg.fiedler_companion([1, 2, 3, 4, 5]).
FIEDLER_COMPANION = np.array([[-2., -3., 1., 0.], [1., 0., 0., 0.], [0., -4., 0., -5.], [0., 1., 0., 0.]])


def test_fiedler_companion_matches_scipy():
    close(linalg.fiedler_companion(arr(np.arange(1.0, 6.0))), FIEDLER_COMPANION)
    close(linalg.fiedler_companion(arr(np.array([2.0, 4.0]))), [[-2.0]])
    assert np.asarray(linalg.fiedler_companion(arr(np.array([2.0])))).shape == (0, 0)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("m,n", [(5, 3), (2, 4), (3, 3)])
def test_convolution_matrix_convolves(mode, m, n):
    a, v = rand((m,), 43), rand((n,), 44)
    close(np.asarray(linalg.convolution_matrix(arr(a), n, mode)) @ v, np.convolve(a, v, mode), **F64)


def test_static_special_matrices():
    n = 5
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    hil = linalg.hilbert(n)
    assert np.asarray(hil).dtype == np.float32
    close(hil, 1.0 / (i + j + 1))
    close(linalg.invhilbert(4), [[16., -120., 240., -140.], [-120., 1200., -2700., 1680.],
                                 [240., -2700., 6480., -4200.], [-140., 1680., -4200., 2800.]])
    close(np.asarray(linalg.invhilbert(n), np.float64) @ (1.0 / (i + j + 1)), np.eye(n), atol=1e-6)
    low = np.array([[math.comb(r, c) for c in range(n)] for r in range(n)], dtype=np.float64)
    close(linalg.pascal(n), [[math.comb(r + c, r) for c in range(n)] for r in range(n)])
    close(linalg.pascal(n, "lower"), low)
    close(linalg.pascal(n, "upper"), low.T)
    for kind in ("symmetric", "lower", "upper"):
        close(np.asarray(linalg.invpascal(n, kind), np.float64) @ np.asarray(linalg.pascal(n, kind), np.float64),
              np.eye(n))
    with pytest.raises(ValueError, match="Expected kind"):
        linalg.pascal(3, "diag")
    h = np.asarray(linalg.helmert(n, full=True), np.float64)
    close(h @ h.T, np.eye(n), atol=1e-6)
    close(h[0], np.full(n, 1 / np.sqrt(n)))
    close(linalg.helmert(n), h[1:])
    close(h[2], [1 / np.sqrt(6), 1 / np.sqrt(6), -2 / np.sqrt(6), 0, 0])
    had = np.asarray(linalg.hadamard(8))
    assert had.dtype == np.int32 and set(np.unique(had)) == {-1, 1}
    close(had @ had.T, 8 * np.eye(8))
    with pytest.raises(ValueError, match="power of 2"):
        linalg.hadamard(6)


# ---- tessera.numpy.linalg's array API names -----------------------------------------------------------------


def test_numpy_linalg_array_api_names():
    la = tnp.linalg
    x, y = rand((2, 3, 4), 45), rand((2, 4, 3), 46)
    close(la.matmul(arr(x), arr(y)), x @ y, **F64)
    close(la.matrix_transpose(arr(x)), mT(x))
    close(la.diagonal(arr(x), offset=1), np.diagonal(x, 1, -2, -1))
    close(la.trace(arr(x), offset=-1), np.trace(x, -1, -2, -1), **F64)
    close(la.vecdot(arr(x), arr(x[0]), axis=1), np.sum(x * x[0], axis=1), **F64)
    close(la.outer(arr(x[0, 0]), arr(y[0, 0])), np.outer(x[0, 0], y[0, 0]))
    close(la.tensordot(arr(x), arr(y), axes=([1, 2], [2, 1])), np.tensordot(x, y, axes=([1, 2], [2, 1])), **F64)
    close(la.cross(arr(x[..., :3]), arr(y[:, None, 0, :])), np.cross(x[..., :3], y[:, None, 0, :]), **F64)
    for ord in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        close(la.matrix_norm(arr(x), ord=ord), np.linalg.norm(x, ord=ord, axis=(-2, -1)), **F64)
    close(la.matrix_norm(arr(x), keepdims=True), np.linalg.norm(x, axis=(-2, -1), keepdims=True), **F64)
    for ord in (2, 1, 0, np.inf, -np.inf, 3, 0.5):
        close(la.vector_norm(arr(x), ord=ord), np.linalg.norm(x.ravel(), ord=ord), **F64)
        cols = np.moveaxis(x, 1, 0).reshape(3, -1)
        close(la.vector_norm(arr(x), ord=ord, axis=(0, 2), keepdims=True),
              np.linalg.norm(cols, ord=ord, axis=1).reshape(1, 3, 1), **F64)
    close(la.vector_norm(arr(np.zeros(0)), ord=np.inf), 0.0)
    assert np.asarray(la.vector_norm(arr(np.arange(3)))).dtype == np.float32
    assert np.asarray(la.matmul(arr(np.ones((2, 2), np.int32)), arr(np.ones((2, 2), np.int32)),
                                preferred_element_type="float32")).dtype == np.float32


def test_numpy_linalg_array_api_errors_and_gradient():
    la = tnp.linalg
    with pytest.raises(ValueError, match="3-dimensional vectors"):
        la.cross(arr(np.ones(2)), arr(np.ones(2)))
    with pytest.raises(ValueError, match="Input arrays must be one-dimensional"):
        la.outer(arr(np.ones((2, 2))), arr(np.ones(2)))
    with pytest.raises(ValueError, match="matrix_transpose requires at least 2 dimensions"):
        la.matrix_transpose(arr(np.ones(2)))
    with pytest.raises(ValueError, match="Invalid order 'inf' for vector norm"):
        la.vector_norm(arr(np.ones(2)), ord="inf")
    x = rand((3, 4), 47)
    close(tessera.grad(lambda v: la.vector_norm(v, ord=3))(arr(x)),
          finite_difference(lambda v: np.sum(np.abs(v) ** 3) ** (1 / 3), x), rtol=1e-6, atol=1e-8)
    close(tessera.jit(tessera.vmap(lambda v: la.trace(v)))(arr(rand((2, 3, 3), 48))),
          np.trace(rand((2, 3, 3), 48), axis1=-2, axis2=-1), **F64)
