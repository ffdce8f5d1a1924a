"""tessera.numpy.linalg's decompositions (eigh, eigvalsh, svd, svdvals, qr) and what is written with them (pinv,
matrix_rank, lstsq, cond, matrix_power, norm ord 2/-2/'nuc'), tessera.lax.linalg's eigh/svd/qr and
tessera.scipy.linalg's, against numpy.linalg; gradients against central differences of numpy functions in
float64. Eigenvectors and singular vectors are compared through sign-free quantities (reconstructions, |v|)."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax
from tessera.scipy import linalg as tsl

from comparisons import arr, close
from finite_differences import finite_difference


TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


def mT(x):
    return np.swapaxes(x, -1, -2)


def rand(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (2, 3, 4, 4)])
def test_eigh_matches_numpy(dtype, shape):
    a = rand(shape, dtype)
    sym = (a + mT(a)) / 2
    w, v = tnp.linalg.eigh(arr(a))  # symmetrizes, as JAX
    w_np = np.linalg.eigvalsh(sym.astype(np.float64))
    close(w, w_np, **TOL[dtype])
    assert np.asarray(v).dtype == dtype
    v = np.asarray(v, np.float64)
    close(v @ (np.asarray(w)[..., None] * mT(v)), sym, **TOL[dtype])
    close(mT(v) @ v, np.broadcast_to(np.eye(shape[-1]), v.shape), **TOL[dtype])
    close(tnp.linalg.eigvalsh(arr(a)), w_np, **TOL[dtype])
    r = tnp.linalg.eigh(arr(a))
    assert r.eigenvalues is r[0] and r.eigenvectors is r[1]


def test_eigh_reads_the_named_triangle_unless_it_symmetrizes():
    a = np.array([[2.0, 5.0], [1.0, 2.0]])
    close(tnp.linalg.eigvalsh(arr(a), symmetrize_input=False), np.linalg.eigvalsh(a, UPLO="L"), rtol=1e-14)
    close(tnp.linalg.eigvalsh(arr(a), UPLO="U", symmetrize_input=False), np.linalg.eigvalsh(a, UPLO="U"), rtol=1e-14)
    close(tnp.linalg.eigvalsh(arr(a)), np.linalg.eigvalsh((a + a.T) / 2), rtol=1e-14)
    v, w = lax.linalg.eigh(arr(a), lower=False, symmetrize_input=False)
    close(w, np.linalg.eigvalsh(a, UPLO="U"), rtol=1e-14)
    w2, v2 = tsl.eigh(arr(a), lower=False)
    close(w2, w, rtol=1e-14)
    close(tsl.eigh(arr(a), eigvals_only=True), np.linalg.eigvalsh(a, UPLO="L"), rtol=1e-14)
    with pytest.raises(ValueError, match="UPLO"):
        tnp.linalg.eigh(arr(a), UPLO="X")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 3, 5, 5), (1, 1)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_matches_numpy(dtype, shape, full):
    a = rand(shape, dtype, seed=1)
    u, s, vh = tnp.linalg.svd(arr(a), full_matrices=full)
    u_np, s_np, vh_np = np.linalg.svd(a.astype(np.float64), full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (u_np.shape, s_np.shape, vh_np.shape)
    close(s, s_np, **TOL[dtype])
    k = s_np.shape[-1]
    u, vh = np.asarray(u, np.float64), np.asarray(vh, np.float64)
    close(u[..., :k] * np.asarray(s)[..., None, :] @ vh[..., :k, :], a, **TOL[dtype])
    close(mT(u) @ u, np.broadcast_to(np.eye(u.shape[-1]), u.shape[:-2] + (u.shape[-1],) * 2), **TOL[dtype])
    close(vh @ mT(vh), np.broadcast_to(np.eye(vh.shape[-2]), vh.shape[:-2] + (vh.shape[-2],) * 2), **TOL[dtype])
    close(tnp.linalg.svd(arr(a), compute_uv=False), s_np, **TOL[dtype])
    close(tnp.linalg.svdvals(arr(a)), s_np, **TOL[dtype])
    # lax.linalg.svd and scipy's are full by default, as JAX's.
    assert lax.linalg.svd(arr(a))[0].shape == np.linalg.svd(a)[0].shape
    assert tsl.svd(arr(a))[2].shape == np.linalg.svd(a)[2].shape


def test_svd_hermitian_uses_the_eigendecomposition():
    a = rand((5, 5), seed=2)
    a = a + a.T
    u, s, vh = tnp.linalg.svd(arr(a), hermitian=True)
    close(s, np.linalg.svd(a, hermitian=True, compute_uv=False), rtol=1e-12)
    close(np.asarray(u) * np.asarray(s)[None, :] @ np.asarray(vh), a, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 3, 5, 5)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_matches_numpy(dtype, shape, mode):
    a = rand(shape, dtype, seed=3)
    q, r = tnp.linalg.qr(arr(a), mode=mode)
    q_np, r_np = np.linalg.qr(a.astype(np.float64), mode=mode)
    assert (q.shape, r.shape) == (q_np.shape, r_np.shape)
    q, r = np.asarray(q, np.float64), np.asarray(r, np.float64)
    close(q @ r, a, **TOL[dtype])
    close(np.abs(r), np.abs(r_np), **TOL[dtype])  # the same up to the signs of r's rows
    close(np.triu(r), r, rtol=0, atol=0)
    close(mT(q) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2), **TOL[dtype])
    close(np.abs(tnp.linalg.qr(arr(a), mode="r")), np.abs(np.linalg.qr(a.astype(np.float64), mode="r")), **TOL[dtype])


def test_qr_modes_of_lax_and_scipy():
    a = rand((5, 3), seed=4)
    q, r = lax.linalg.qr(arr(a))
    assert (q.shape, r.shape) == ((5, 5), (5, 3))
    q, r = lax.linalg.qr(arr(a), full_matrices=False)
    assert (q.shape, r.shape) == ((5, 3), (3, 3))
    q, r = tsl.qr(arr(a), mode="economic")
    assert (q.shape, r.shape) == ((5, 3), (3, 3))
    (r,) = tsl.qr(arr(a), mode="r")
    assert r.shape == (5, 3)
    with pytest.raises(ValueError, match="mode"):
        tnp.linalg.qr(arr(a), mode="thin")


def householder_q(h, tau):
    """Q [..., m, k] of numpy's raw QR (h [..., n, m], tau [..., k]) as the product of its reflectors
    I - tau_j v_j v_j^T, v_j = (0, ..., 0, 1, h[j, j+1:]), formed by a plain loop."""
    m, k = h.shape[-1], tau.shape[-1]
    q = np.broadcast_to(np.eye(m), h.shape[:-2] + (m, m)).copy()
    for j in range(k):
        v = np.zeros(h.shape[:-2] + (m,))
        v[..., j] = 1
        v[..., j + 1:] = h[..., j, j + 1:]
        q = q - (q @ v[..., :, None]) * (tau[..., j, None, None] * v[..., None, :])
    return q[..., :, :k]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5), (6, 1), (1, 6), (1, 1), (2, 3, 5, 4), (0, 3), (3, 0)])
def test_qr_raw_matches_numpy(dtype, shape):
    a = rand(shape, dtype, seed=14)
    h, tau = tnp.linalg.qr(arr(a), mode="raw")
    h_np, tau_np = np.linalg.qr(a, mode="raw")
    assert np.asarray(h).dtype == np.asarray(tau).dtype == dtype
    close(h, h_np, **TOL[dtype])
    close(tau, tau_np, **TOL[dtype])
    # Q from the reflectors, R from h's upper triangle: Q R = a, Q^T Q = I.
    k = min(shape[-2:])
    h64, tau64 = np.asarray(h, np.float64), np.asarray(tau, np.float64)
    q = householder_q(h64, tau64)
    r = np.triu(mT(h64))[..., :k, :]
    close(q @ r, a, **TOL[dtype])
    close(mT(q) @ q, np.broadcast_to(np.eye(k), shape[:-2] + (k, k)), **TOL[dtype])


def test_qr_raw_of_special_columns_matches_numpy():
    rng = np.random.default_rng(15)
    cases = [np.triu(rng.uniform(-1, 1, (4, 4))),  # nothing below the diagonal: every tau is 0
             np.c_[np.zeros(4), rng.uniform(-1, 1, (4, 2))],  # a zero column
             np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]),  # alpha = 0: beta is -|x|, tau 1
             -np.triu(rng.uniform(1, 2, (3, 4))),
             np.zeros((3, 3)),
             rng.uniform(-1, 1, (5, 3)) * 1e-300]
    for a in cases:
        h, tau = tnp.linalg.qr(arr(a), mode="raw")
        h_np, tau_np = np.linalg.qr(a, mode="raw")
        close(h, h_np, rtol=1e-12, atol=1e-12 * np.abs(a).max())
        close(tau, tau_np, rtol=1e-12, atol=1e-14)
    # f32 near its largest and smallest normal values: the column norms neither overflow nor underflow.
    for scale in (1e30, 1e-30):
        a = (rng.uniform(-1, 1, (5, 3)) * scale).astype(np.float32)
        h, tau = tnp.linalg.qr(arr(a), mode="raw")
        h_np, tau_np = np.linalg.qr(a, mode="raw")
        close(h, h_np, rtol=1e-5, atol=1e-6 * scale)
        close(tau, tau_np, rtol=1e-5, atol=1e-6)


def test_qr_raw_under_jit_vmap_and_grad():
    a = rand((3, 5, 4), seed=16)
    h_np, tau_np = np.linalg.qr(a, mode="raw")
    raw = lambda x: tnp.linalg.qr(x, mode="raw")
    for f in (tessera.jit(raw), tessera.vmap(raw), tessera.jit(tessera.vmap(raw))):
        h, tau = f(arr(a))
        close(h, h_np, **TOL[np.float64])
        close(tau, tau_np, **TOL[np.float64])
    # JAX refuses this gradient; tessera's follows the Householder steps, here against central differences.
    w, c = rand((4, 5), seed=17), rand(4, seed=18)
    g = tessera.grad(lambda x: tnp.sum(raw(x)[0] * arr(w)) + tnp.sum(raw(x)[1] * arr(c)))(arr(a[0]))
    want = finite_difference(lambda x: np.sum(np.linalg.qr(x, mode="raw")[0] * w)
                             + np.sum(np.linalg.qr(x, mode="raw")[1] * c), a[0])
    close(g, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
def test_pinv_matrix_rank_lstsq_match_numpy(shape):
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, shape)
    close(tnp.linalg.pinv(arr(a)), np.linalg.pinv(a), rtol=1e-10, atol=1e-12)
    # Rank deficient: the third column is the sum of the first two.
    low = a.copy()
    low[:, 2] = low[:, 0] + low[:, 1]
    close(tnp.linalg.pinv(arr(low)), np.linalg.pinv(low), rtol=1e-8, atol=1e-10)
    assert int(tnp.linalg.matrix_rank(arr(low))) == np.linalg.matrix_rank(low) == {(5, 3): 2, (3, 5): 3, (4, 4): 3}[shape]
    assert int(tnp.linalg.matrix_rank(arr(a))) == np.linalg.matrix_rank(a)
    assert int(tnp.linalg.matrix_rank(arr(np.zeros(3)))) == 0
    b = rng.uniform(-1, 1, (shape[0], 2))
    x, resid, rank, s = tnp.linalg.lstsq(arr(a), arr(b))
    x_np, resid_np, rank_np, s_np = np.linalg.lstsq(a, b, rcond=None)
    close(x, x_np, rtol=1e-10, atol=1e-12)
    assert int(rank) == rank_np
    close(s, s_np, rtol=1e-12)
    if resid_np.size:
        close(resid, resid_np, rtol=1e-10, atol=1e-12)
    x1, *_ = tnp.linalg.lstsq(arr(a), arr(b[:, 0]))
    close(x1, x_np[:, 0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
def test_singular_value_norms_match_numpy(ord):
    a = rand((3, 4, 5), seed=6)
    close(tnp.linalg.norm(arr(a[0]), ord=ord), np.linalg.norm(a[0], ord=ord), rtol=1e-12)
    close(tnp.linalg.norm(arr(a), ord=ord, axis=(0, 2)), np.linalg.norm(a, ord=ord, axis=(0, 2)), rtol=1e-12)
    close(tnp.linalg.norm(arr(a), ord=ord, axis=(2, 1), keepdims=True),
          np.linalg.norm(a, ord=ord, axis=(2, 1), keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, -1, np.inf, -np.inf])
def test_cond_matches_numpy(p):
    a = rand((2, 4, 4), seed=7) + 2 * np.eye(4)
    close(tnp.linalg.cond(arr(a), p), np.linalg.cond(a, p), rtol=1e-10)


@pytest.mark.parametrize("n", [0, 1, 2, 5, -1, -3])
def test_matrix_power_matches_numpy(n):
    a = rand((2, 3, 3), seed=8) + 2 * np.eye(3)
    close(tnp.linalg.matrix_power(arr(a), n), np.linalg.matrix_power(a, n), rtol=1e-10, atol=1e-12)
    with pytest.raises(TypeError, match="integer"):
        tnp.linalg.matrix_power(arr(a), 1.5)


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(9)
    a = rng.uniform(-1, 1, (4, 4))
    c = rng.uniform(-1, 1, 4)
    w = rng.uniform(-1, 1, (5, 3))
    t = rng.uniform(-1, 1, (5, 3))

    def check(f_t, f_np, x):
        g = np.asarray(tessera.grad(f_t)(arr(x)))
        close(g, finite_difference(f_np, x), rtol=1e-6, atol=1e-7)

    check(lambda x: tnp.sum(tnp.linalg.eigvalsh(x) * arr(c)), lambda x: np.sum(np.linalg.eigvalsh((x + x.T) / 2) * c), a)
    check(lambda x: tnp.sum(tnp.abs(tnp.linalg.eigh(x)[1]) * arr(a)),
          lambda x: np.sum(np.abs(np.linalg.eigh((x + x.T) / 2)[1]) * a), a)
    check(lambda x: tnp.linalg.norm(x, 2), lambda x: np.linalg.norm(x, 2), w)
    check(lambda x: tnp.linalg.norm(x, "nuc"), lambda x: np.linalg.norm(x, "nuc"), w)
    check(lambda x: tnp.sum(tnp.linalg.pinv(x) * arr(t.T)), lambda x: np.sum(np.linalg.pinv(x) * t.T), w)

    def usv(svd):
        def f(x):
            u, s, vh = svd(x)
            return (u * s[None, :]) @ vh, u @ u.T
        return f

    def f_t(x):
        y, p = usv(lambda x: tnp.linalg.svd(x, full_matrices=False))(x)
        return tnp.sum(y * arr(t)) + tnp.sum(p * p * arr(np.eye(5) + 1))

    def f_np(x):
        y, p = usv(lambda x: np.linalg.svd(x, full_matrices=False))(x)
        return np.sum(y * t) + np.sum(p * p * (np.eye(5) + 1))

    check(f_t, f_np, w)
    check(lambda x: tnp.sum(tnp.abs(tnp.linalg.qr(x)[1]) * arr(a[:3, :3])),
          lambda x: np.sum(np.abs(np.linalg.qr(x)[1]) * a[:3, :3]), w)


def test_gradient_of_a_full_svd_is_refused_with_its_reason():
    with pytest.raises(tessera.TesseraError, match="full_matrices"):
        tessera.grad(lambda x: tnp.sum(tnp.linalg.svd(x)[0]))(arr(rand((4, 2))))
    # The singular values alone differentiate whatever full_matrices says.
    g = tessera.grad(lambda x: tnp.sum(tnp.linalg.svd(x, compute_uv=False)))(arr(rand((4, 2))))
    assert np.isfinite(np.asarray(g)).all()


def test_jit_and_vmap_give_the_eager_values():
    a = rand((3, 5, 4), seed=10)
    f = lambda x: tnp.linalg.svd(x, full_matrices=False)[1]
    close(tessera.jit(f)(arr(a)), f(arr(a)), rtol=1e-13)
    close(tessera.vmap(f)(arr(a)), np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    g = lambda x: tnp.linalg.qr(x)[1]
    close(np.abs(tessera.vmap(g)(arr(a))), np.abs(np.linalg.qr(a)[1]), rtol=1e-12, atol=1e-13)
    h = lambda x: tnp.linalg.eigvalsh(x @ x.T)
    close(tessera.vmap(h)(arr(a)), np.linalg.eigvalsh(a @ mT(a)), rtol=1e-10, atol=1e-12)


def test_errors_name_the_function_and_shape():
    with pytest.raises(ValueError, match="eigh.*square"):
        tnp.linalg.eigh(arr(rand((2, 3))))
    with pytest.raises(ValueError, match="svd.*two axes"):
        tnp.linalg.svd(arr(rand(3)))
    with pytest.raises(ValueError, match="lstsq"):
        tnp.linalg.lstsq(arr(rand((3, 2))), arr(rand((4,))))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_rectangular_lu_and_scipy_lu_match_numpy(shape):
    a = rand(shape, seed=11)
    lu, pivots, perm = lax.linalg.lu(arr(a))
    m, n = shape[-2:]
    k = min(m, n)
    assert (lu.shape, pivots.shape, perm.shape) == (shape, shape[:-2] + (k,), shape[:-2] + (m,))
    lu = np.asarray(lu)
    l = np.tril(lu[..., :, :k], -1) + np.eye(m, k)
    u = np.triu(lu[..., :k, :])
    close(l @ u, np.take_along_axis(a, np.asarray(perm)[..., None], axis=-2), rtol=1e-12, atol=1e-14)
    p, l2, u2 = tsl.lu(arr(a))
    close(np.asarray(p) @ np.asarray(l2) @ np.asarray(u2), a, rtol=1e-12, atol=1e-14)
    pl, u3 = tsl.lu(arr(a), permute_l=True)
    close(np.asarray(pl) @ np.asarray(u3), a, rtol=1e-12, atol=1e-14)
    # Partial pivoting: |l| <= 1 below the diagonal (the largest pivot of each column is taken).
    assert np.all(np.abs(np.tril(lu[..., :, :k], -1)) <= 1 + 1e-12)
    # The gradient of the non-square factorisation against central differences.
    if len(shape) == 2:
        w = rand(shape, seed=12)

        def doolittle(x):  # numpy has no lu: the reference is Doolittle's loop with partial pivoting
            x = x.copy()
            for j in range(k):
                piv = j + int(np.argmax(np.abs(x[j:, j])))
                x[[j, piv]] = x[[piv, j]]
                x[j + 1:, j] /= x[j, j]
                x[j + 1:, j + 1:] -= np.outer(x[j + 1:, j], x[j, j + 1:])
            return x
        g = np.asarray(tessera.grad(lambda x: tnp.sum(lax.linalg.lu(x)[0] * arr(w)))(arr(a)))
        close(g, finite_difference(lambda x: np.sum(doolittle(x) * w), a), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("trans", [0, 1])
def test_lu_factor_and_lu_solve_match_numpy(trans):
    rng = np.random.default_rng(13)
    a = rng.uniform(-1, 1, (5, 5)) + 2 * np.eye(5)
    b = rng.uniform(-1, 1, (5, 3))
    lu_piv = tsl.lu_factor(arr(a))
    want = np.linalg.solve(a if trans == 0 else a.T, b)
    close(tsl.lu_solve(lu_piv, arr(b), trans=trans), want, rtol=1e-10, atol=1e-12)
    close(tsl.lu_solve(lu_piv, arr(b[:, 0]), trans=trans), want[:, 0], rtol=1e-10, atol=1e-12)
