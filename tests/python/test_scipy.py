"""tessera.scipy.special and tessera.scipy.stats (tessera/_scipy.py) against values
computed here in float64 from Python's math module and numpy (scipy is not a dependency); expm's tests are in
test_scipy_expm.py."""
import math

import numpy as np

import tessera
from tessera.scipy import special, stats

X = np.array([-4.0, -1.5, -0.3, 0.0, 0.2, 1.0, 2.5, 7.0], np.float32)
P = np.array([0.5, 1.0, 2.5, 4.0, 9.5, 20.0], np.float32)


def close(got, want, rtol=1e-5, atol=0.0):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)


def vec(f, *xs):
    return np.array([f(*v) for v in zip(*[np.asarray(x, np.float64).ravel() for x in xs])])


def test_error_and_gamma_functions():
    close(special.erf(X), vec(math.erf, X), atol=1e-7)
    close(special.erfc(X), vec(math.erfc, X), rtol=5e-6)  # exp of -49 in float32: about 49 ulp
    close(special.erfcx(X[3:]), vec(lambda v: math.exp(v * v) * math.erfc(v), X[3:]), rtol=2e-6)
    close(special.erfcx(np.float32(30.0)), 1 / (30 * math.sqrt(math.pi)) * (1 - 1 / 1800), rtol=1e-5)  # no overflow
    close(special.erfinv(special.erf(X[1:-1])), X[1:-1], rtol=1e-4, atol=1e-5)
    close(special.gammaln(P), vec(math.lgamma, P), rtol=1e-6)
    g = np.array([-2.5, -1.5, -0.5, 0.5, 3.0, 5.5], np.float32)
    close(special.gamma(g), vec(math.gamma, g), rtol=2e-6)
    close(special.gammasgn(g), np.sign(vec(math.gamma, g)))
    assert np.isnan(np.asarray(special.gammasgn(np.float32(-2.0))))
    close(special.betaln(P, P[::-1]), vec(lambda a, b: math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b), P, P[::-1]),
          rtol=1e-5, atol=1e-5)
    close(special.beta(np.float32(2.0), np.float32(3.0)), 1 / 12, rtol=1e-6)
    close(special.multigammaln(np.float32(3.5), 3),
          3 * 2 / 4 * math.log(math.pi) + sum(math.lgamma(3.5 - j / 2) for j in range(3)), rtol=1e-6)
    close(special.factorial(np.array([0, 1, 5, 10], np.float32)), [1, 1, 120, 3628800], rtol=1e-6)
    close(special.comb(np.float32(10), np.array([0, 3, 10, 11], np.float32)), [1, 120, 1, 0], rtol=1e-5)
    close(special.poch(np.float32(3.0), np.float32(4.0)), 3 * 4 * 5 * 6, rtol=1e-5)
    close(special.digamma(P), vec(lambda v: (math.lgamma(v + 1e-5) - math.lgamma(v - 1e-5)) / 2e-5, P), rtol=1e-4)


def test_logistic_entropy_and_normal_functions():
    close(special.expit(X), 1 / (1 + np.exp(-X.astype(np.float64))), rtol=1e-6)
    u = np.array([1e-4, 0.2, 0.5, 0.9], np.float32)
    close(special.logit(u), np.log(u / (1 - u.astype(np.float64))), rtol=1e-5)
    close(special.xlogy(np.array([0.0, 2.0], np.float32), np.array([0.0, 3.0], np.float32)), [0.0, 2 * math.log(3)])
    close(special.xlog1py(np.array([0.0, 2.0], np.float32), np.array([-1.0, 0.5], np.float32)), [0.0, 2 * math.log(1.5)])
    close(special.entr(np.array([0.0, 0.5, 2.0, -1.0], np.float32)), [0.0, 0.5 * math.log(2), -2 * math.log(2), -np.inf])
    x, y = np.array([0.0, 0.5, 2.0, 1.0], np.float32), np.array([1.0, 0.25, 1.0, 0.0], np.float32)
    close(special.rel_entr(x, y), [0.0, 0.5 * math.log(2), 2 * math.log(2), np.inf])
    close(special.kl_div(x, y), [1.0, 0.5 * math.log(2) - 0.25, 2 * math.log(2) - 1, np.inf], rtol=1e-6)
    ndtr = vec(lambda v: 0.5 * math.erfc(-v / math.sqrt(2)), X)
    close(special.ndtr(X), ndtr, rtol=2e-6)
    far = np.array([-30.0, -10.0, -3.0, 0.0, 2.0, 8.0], np.float32)
    want = vec(lambda v: math.log(0.5 * math.erfc(-v / math.sqrt(2))), far)
    close(special.log_ndtr(far), want, rtol=2e-6, atol=1e-7)  # finite far into the lower tail
    close(special.ndtri(special.ndtr(X[1:-1])), X[1:-1], rtol=1e-3, atol=2e-4)
    close(special.i0e(P), np.i0(P.astype(np.float64)) * np.exp(-P.astype(np.float64)), rtol=2e-6)
    close(special.boxcox(np.float32(2.0), np.array([0.0, 0.5], np.float32)), [math.log(2), (math.sqrt(2) - 1) / 0.5],
          rtol=1e-6)
    close(special.boxcox1p(np.float32(1e-4), np.float32(2.0)), ((1 + 1e-4) ** 2 - 1) / 2, rtol=1e-5)
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    close(special.logsumexp(a, axis=1), np.log(np.exp(a.astype(np.float64)).sum(1)), rtol=1e-6)


def test_distributions_densities_integrate_and_match_their_formulas():
    grid = np.linspace(-12, 12, 24001).astype(np.float32)
    step = float(grid[1] - grid[0])
    for name, args in [("norm", (0.5, 1.5)), ("laplace", (-1.0, 0.7)), ("logistic", (0.0, 1.0)),
                       ("cauchy", (0.0, 0.02)), ("uniform", (-2.0, 3.0)), ("expon", (-1.0, 2.0))]:
        pdf = np.asarray(getattr(stats, name).pdf(grid, *args), np.float64)
        assert abs(pdf.sum() * step - 1) < 3e-3, name
        cdf = np.asarray(getattr(stats, name).cdf(grid, *args), np.float64)
        integrated = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2) * step])
        assert np.max(np.abs(cdf - cdf[0] - integrated)) < 3e-3, name
    close(stats.norm.logpdf(X, 1.0, 2.0), -0.5 * ((X - 1.0) / 2.0) ** 2 - math.log(2 * math.sqrt(2 * math.pi)), rtol=1e-6)
    close(stats.norm.ppf(stats.norm.cdf(X[1:-1], 1.0, 2.0), 1.0, 2.0), X[1:-1], rtol=1e-3, atol=5e-4)
    close(stats.norm.logcdf(np.float32(-20.0)), math.log(0.5 * math.erfc(20 / math.sqrt(2))), rtol=1e-5)
    close(stats.gamma.logpdf(P, 2.5), vec(lambda v: 1.5 * math.log(v) - v - math.lgamma(2.5), P), rtol=1e-5)
    close(stats.chi2.logpdf(P, 3.0), vec(lambda v: 0.5 * math.log(v) - v / 2 - math.lgamma(1.5) - 1.5 * math.log(2), P),
          rtol=1e-5)
    b = np.array([0.1, 0.5, 0.9], np.float32)
    close(stats.beta.pdf(b, 2.0, 3.0), 12 * b * (1 - b.astype(np.float64)) ** 2, rtol=1e-5)
    close(stats.t.logpdf(X, 4.0), vec(lambda v: math.lgamma(2.5) - math.lgamma(2) - 0.5 * math.log(4 * math.pi)
                                      - 2.5 * math.log1p(v * v / 4), X), rtol=1e-5)
    close(stats.pareto.pdf(np.array([0.5, 1.0, 3.0], np.float32), 2.0), [0.0, 2.0, 2 / 27], rtol=1e-6)
    k = np.arange(0, 8).astype(np.float32)
    close(stats.poisson.pmf(k, 3.0), vec(lambda v: math.exp(v * math.log(3) - 3 - math.lgamma(v + 1)), k), rtol=1e-5)
    close(stats.bernoulli.pmf(np.array([0, 1, 2], np.float32), 0.3), [0.7, 0.3, 0.0], rtol=1e-6)
    close(stats.geom.pmf(np.array([1, 2, 5], np.float32), 0.25), [0.25, 0.1875, 0.75 ** 4 * 0.25], rtol=1e-6)
    cov = np.array([[2.0, 0.6], [0.6, 0.5]], np.float32)
    pts = np.array([[0.0, 0.0], [1.0, -0.5], [2.0, 1.0]], np.float32)
    d = pts - np.array([0.5, 0.0])
    want = -0.5 * np.einsum("ni,ij,nj->n", d, np.linalg.inv(cov.astype(np.float64)), d) - 0.5 * math.log(
        np.linalg.det(cov.astype(np.float64))) - math.log(2 * math.pi)
    close(stats.multivariate_normal.logpdf(pts, np.array([0.5, 0.0], np.float32), cov), want, rtol=1e-5)
    alpha = np.array([1.5, 2.0, 3.0], np.float32)
    x = np.array([0.2, 0.3, 0.5], np.float32)
    want = sum((a - 1) * math.log(v) for a, v in zip(alpha, x)) - (
        sum(math.lgamma(a) for a in alpha) - math.lgamma(alpha.sum()))
    close(stats.dirichlet.logpdf(x, alpha), want, rtol=1e-5)


def _lower_gamma(a, x):
    """P(a, x) in float64 by its series, summed until the terms vanish (it converges for every x)."""
    if x <= 0:
        return 0.0
    term = total = 1.0 / a
    n = 1
    while term > 1e-18 * total and n < 20000:
        term *= x / (a + n)
        total += term
        n += 1
    return math.exp(a * math.log(x) - x - math.lgamma(a)) * total


def test_incomplete_gamma_functions_and_the_cdfs_they_give():
    a = np.array([0.3, 1.0, 2.5, 9.0, 50.0], np.float32)
    x = np.array([0.01, 0.5, 2.0, 8.0, 60.0, 120.0], np.float32)
    for ai in a:
        want = np.array([_lower_gamma(float(ai), float(v)) for v in x])
        close(special.gammainc(ai, x), want, atol=1e-6)
        close(special.gammaincc(ai, x), 1 - want, atol=1e-6)
    assert np.isnan(np.asarray(special.gammainc(np.float32(-1.0), np.float32(1.0))))
    close(tessera.jit(special.gammainc)(a, x[:5]), [_lower_gamma(float(p), float(v)) for p, v in zip(a, x[:5])],
          atol=1e-6)
    g = tessera.grad(lambda v: special.gammainc(np.float32(2.5), v))(np.float32(3.0))
    close(g, math.exp(1.5 * math.log(3.0) - 3.0 - math.lgamma(2.5)), rtol=1e-4)  # the gamma density
    close(stats.gamma.cdf(np.float32(4.0), 2.5, 1.0, 2.0), _lower_gamma(2.5, 1.5), rtol=1e-5)
    close(stats.chi2.cdf(np.float32(3.0), 4.0), 1 - math.exp(-1.5) * 2.5, rtol=1e-5)
    k = np.array([-1, 0, 3, 10], np.float32)
    want = [0.0] + [sum(math.exp(-3.0) * 3.0 ** j / math.factorial(j) for j in range(int(v) + 1)) for v in k[1:]]
    close(stats.poisson.cdf(k, 3.0), want, rtol=1e-5)


def test_incomplete_beta_function_and_the_beta_and_t_cdfs():
    x = np.array([0.0, 0.02, 0.3, 0.5, 0.77, 0.99, 1.0], np.float32)
    x64 = x.astype(np.float64)
    close(special.betainc(np.float32(2.5), np.float32(1.0), x), x64 ** 2.5, rtol=1e-5, atol=1e-7)
    close(special.betainc(np.float32(1.0), np.float32(3.5), x), 1 - (1 - x64) ** 3.5, rtol=1e-5, atol=1e-7)
    close(special.betainc(np.float32(0.5), np.float32(0.5), x), 2 / np.pi * np.arcsin(np.sqrt(x64)), atol=2e-6)
    want = np.array([sum(math.comb(4, j) * v ** j * (1 - v) ** (4 - j) for j in (2, 3, 4)) for v in x64])
    close(special.betainc(np.float32(2.0), np.float32(3.0), x), want, atol=1e-6)
    close(stats.beta.cdf(x, 2.0, 3.0), want, atol=1e-6)
    a, b = np.float32(30.0), np.float32(40.0)
    close(special.betainc(a, b, x[1:-1]), 1 - np.asarray(special.betainc(b, a, 1 - x[1:-1]), np.float64), atol=2e-6)
    assert np.isnan(np.asarray(special.betainc(np.float32(-1.0), np.float32(1.0), np.float32(0.5))))
    z = np.array([-3.0, -0.5, 0.0, 1.2, 8.0], np.float32)
    close(stats.t.cdf(z, 1.0), 0.5 + np.arctan(z.astype(np.float64)) / np.pi, atol=2e-6)  # Cauchy
    close(stats.t.cdf(z, 2.0), 0.5 + z / (2 * np.sqrt(2 + z.astype(np.float64) ** 2)), atol=2e-6)
    close(tessera.jit(special.betainc)(np.float32(2.0), np.float32(3.0), np.float32(0.3)), 0.3483, atol=1e-6)


def _hurwitz_by_summation(s, q, n=200000):
    """sum_{k<n} (q+k)^-s plus the integral and half-term corrections of the tail, in float64: a brute-force
    reference (error about s (q+n)^(-s-1) / 12)."""
    k = np.arange(n, dtype=np.float64)
    w = q + n
    return np.sum((q + k) ** -s) + w ** (1 - s) / (s - 1) + 0.5 * w ** -s


def test_zeta_and_polygamma():
    # closed forms: zeta(2) = pi^2/6, zeta(4) = pi^4/90, zeta(s, 1/2) = (2^s - 1) zeta(s), Apery's constant
    np.testing.assert_allclose(float(special.zeta(2.0)), np.pi ** 2 / 6, rtol=1e-6)
    np.testing.assert_allclose(float(special.zeta(4.0)), np.pi ** 4 / 90, rtol=1e-6)
    np.testing.assert_allclose(float(special.zeta(2.0, 0.5)), 3 * np.pi ** 2 / 6, rtol=1e-6)
    np.testing.assert_allclose(float(special.zeta(3.0, 1.0)), 1.2020569031595942, rtol=1e-6)
    s = np.array([1.5, 2.0, 3.3, 7.0, 12.0], np.float32)
    q = np.array([0.3, 1.0, 2.5, 10.0, 0.8], np.float32)
    want = [_hurwitz_by_summation(float(a), float(b)) for a, b in zip(s, q)]
    np.testing.assert_allclose(np.asarray(tessera.jit(special.zeta)(s, q)), want, rtol=1e-5)
    assert np.isinf(float(special.zeta(1.0, 2.0))) and np.isnan(float(special.zeta(0.5, 2.0)))
    # polygamma(0) is digamma; polygamma(n, x) = (-1)^(n+1) n! zeta(n+1, x): trigamma(1) = pi^2/6
    np.testing.assert_allclose(float(special.polygamma(0, 2.0)), 1 - 0.5772156649015329, rtol=1e-6)
    np.testing.assert_allclose(float(special.polygamma(1, 1.0)), np.pi ** 2 / 6, rtol=1e-6)
    x = np.array([0.4, 1.7, 6.0], np.float32)
    for n in (1, 2, 3):
        want = [(-1) ** (n + 1) * math.factorial(n) * _hurwitz_by_summation(n + 1.0, float(v)) for v in x]
        np.testing.assert_allclose(np.asarray(special.polygamma(n, x)), want, rtol=2e-5)
    np.testing.assert_allclose(np.asarray(tessera.lax.polygamma(1, x)), np.asarray(special.polygamma(1, x)))
