"""tessera.random's samplers (tessera/_random_sampling.py) against their distributions: the Kolmogorov-Smirnov
distance of 20,000 samples from the CDF (written here from its formula, in float64), the total variation
distance from the probability mass function (or the CDF's largest gap) for the discrete ones, and moments
where neither is closed-form.
Keys are fixed, so each test is deterministic; the bounds are several times the distances a correct sampler
gives (about 0.007 for KS at this size), and a wrong transform misses them by far."""
import math

import numpy as np
import pytest

import tessera
from tessera import random

N = 20000
KS_BOUND = 0.02


def ks_distance(samples, cdf):
    x = np.sort(np.asarray(samples, np.float64).ravel())
    f = cdf(x)
    n = x.size
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


def normal_cdf(x):
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gamma_cdf(a, x):
    """The regularized lower incomplete gamma function P(a, x) by its series (x >= 0)."""
    x = np.asarray(x, np.float64)
    out = np.zeros_like(x)
    for i, v in enumerate(x.ravel()):
        if v <= 0:
            continue
        term = 1.0 / a
        total = term
        n = 1
        while term > 1e-17 * total and n < 2000:
            term *= v / (a + n)
            total += term
            n += 1
        out.flat[i] = min(1.0, math.exp(a * math.log(v) - v - math.lgamma(a)) * total)
    return out


def key(n):
    return random.PRNGKey(n)


@pytest.mark.parametrize("name,args,cdf", [
    ("exponential", (), lambda x: 1 - np.exp(-x)),
    ("gumbel", (), lambda x: np.exp(-np.exp(-x))),
    ("laplace", (), lambda x: np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0)), 1 - 0.5 * np.exp(-np.maximum(x, 0)))),
    ("logistic", (), lambda x: 1 / (1 + np.exp(-x))),
    ("cauchy", (), lambda x: 0.5 + np.arctan(x) / np.pi),
    ("maxwell", (), lambda x: np.vectorize(math.erf)(x / math.sqrt(2)) - np.sqrt(2 / np.pi) * x * np.exp(-x * x / 2)),
])
def test_standard_distributions_follow_their_cdf(name, args, cdf):
    s = getattr(random, name)(key(1), (N,), *args)
    assert ks_distance(s, cdf) < KS_BOUND


@pytest.mark.parametrize("name,call,cdf", [
    ("pareto", lambda k: random.pareto(k, 3.0, (N,)), lambda x: 1 - x ** -3.0),
    ("rayleigh", lambda k: random.rayleigh(k, 2.0, (N,)), lambda x: 1 - np.exp(-x * x / 8)),
    ("weibull_min", lambda k: random.weibull_min(k, 2.0, 1.5, (N,)), lambda x: 1 - np.exp(-(x / 2) ** 1.5)),
    ("triangular", lambda k: random.triangular(k, 0.0, 1.0, 3.0, (N,)),
     lambda x: np.where(x < 1, x * x / 3, 1 - (3 - x) ** 2 / 6)),
    ("truncated_normal", lambda k: random.truncated_normal(k, -1.0, 2.0, (N,)),
     lambda x: (normal_cdf(x) - normal_cdf(-1.0)) / (normal_cdf(2.0) - normal_cdf(-1.0))),
    ("lognormal", lambda k: random.lognormal(k, 0.5, (N,)), lambda x: normal_cdf(np.log(x) / 0.5)),
    ("chisquare", lambda k: random.chisquare(k, 4.0, (N,)), lambda x: gamma_cdf(2.0, x / 2)),
    ("beta", lambda k: random.beta(k, 2.0, 3.0, (N,)),
     lambda x: sum(math.comb(4, j) * x ** j * (1 - x) ** (4 - j) for j in (2, 3, 4))),
    ("generalized_normal p=1", lambda k: random.generalized_normal(k, 1.0, (N,)),
     lambda x: np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0)), 1 - 0.5 * np.exp(-np.maximum(x, 0)))),
    ("generalized_normal p=2", lambda k: random.generalized_normal(k, 2.0, (N,)),
     lambda x: normal_cdf(x * math.sqrt(2))),
    ("loggamma", lambda k: np.exp(np.asarray(random.loggamma(k, 0.4, (N,)), np.float64)),
     lambda x: gamma_cdf(0.4, x)),
])
def test_parameterized_distributions_follow_their_cdf(name, call, cdf):
    assert ks_distance(call(key(2)), cdf) < KS_BOUND, name


@pytest.mark.parametrize("a", [0.3, 1.0, 2.5, 9.0])
def test_gamma_follows_the_incomplete_gamma_function(a):
    s = random.gamma(key(3), a, (N,))
    assert ks_distance(s, lambda x: gamma_cdf(a, x)) < KS_BOUND


def test_gamma_with_an_array_of_shapes_and_under_jit():
    a = np.array([0.5, 4.0], np.float32)
    s = np.asarray(tessera.jit(lambda k: random.gamma(k, a, (N, 2)))(key(4)))
    for j in range(2):
        assert ks_distance(s[:, j], lambda x: gamma_cdf(float(a[j]), x)) < KS_BOUND


def test_t_f_wald_dirichlet_moments():
    t = np.asarray(random.t(key(5), 8.0, (N,)), np.float64)
    assert abs(t.mean()) < 0.03 and abs(t.var() - 8 / 6) < 0.06
    f = np.asarray(random.f(key(6), 5.0, 12.0, (N,)), np.float64)
    assert abs(f.mean() - 12 / 10) < 0.03
    w = np.asarray(random.wald(key(7), 1.5, (N,)), np.float64)
    assert abs(w.mean() - 1.5) < 0.05 and abs(w.var() - 1.5 ** 3) < 0.3
    alpha = np.array([0.5, 2.0, 4.5], np.float32)
    d = np.asarray(random.dirichlet(key(8), alpha, (N,)), np.float64)
    np.testing.assert_allclose(d.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(d.mean(0), alpha / alpha.sum(), atol=0.01)
    # each marginal is Beta(alpha_i, sum - alpha_i): variance a b / ((a + b)^2 (a + b + 1))
    a0 = alpha.sum()
    np.testing.assert_allclose(d.var(0), alpha * (a0 - alpha) / (a0 ** 2 * (a0 + 1)), rtol=0.08)


def total_variation(samples, pmf, support):
    s = np.asarray(samples).ravel()
    freq = np.array([(s == k).mean() for k in support])
    return 0.5 * (np.abs(freq - pmf).sum() + (1 - freq.sum()))


@pytest.mark.parametrize("lam", [0.5, 3.0, 9.5, 10.0, 30.0, 200.0])
def test_poisson_follows_its_pmf(lam):
    s = random.poisson(key(9), lam, (N,))
    assert np.asarray(s).dtype == np.int32
    support = np.arange(0, int(lam + 12 * math.sqrt(lam) + 12))
    pmf = np.exp(support * math.log(lam) - lam - np.array([math.lgamma(k + 1) for k in support]))
    # the largest gap between the empirical and the exact CDF at the integers (KS for a discrete law)
    s = np.asarray(s)
    empirical = np.array([(s <= k).mean() for k in support])
    assert np.max(np.abs(empirical - np.cumsum(pmf))) < KS_BOUND
    assert abs(s.mean() - lam) < 4 * math.sqrt(lam / N) + 1e-9


def test_geometric_rademacher_and_randint_follow_their_pmf():
    p = 0.3
    support = np.arange(1, 60)
    assert total_variation(random.geometric(key(10), p, (N,)), p * (1 - p) ** (support - 1), support) < 0.02
    r = np.asarray(random.rademacher(key(11), (N,)))
    assert set(np.unique(r)) == {-1, 1} and abs(r.mean()) < 0.03
    s = random.randint(key(12), (N,), -3, 7)
    assert total_variation(s, np.full(10, 0.1), np.arange(-3, 7)) < 0.02
    lo = np.array([[0], [100]], np.int32)
    s = np.asarray(random.randint(key(13), (2, N), lo, lo + 5))
    assert s[0].min() == 0 and s[0].max() == 4 and s[1].min() == 100 and s[1].max() == 104
    big = np.asarray(random.randint(key(14), (N,), -2 ** 31, 2 ** 31 - 1), np.int64)
    assert big.min() < -2 ** 30 and big.max() > 2 ** 30  # the whole int32 range is reached
    assert (np.asarray(random.randint(key(15), (5,), 4, 4)) == 4).all()  # an empty range gives minval


def test_permutation_shuffle_and_choice():
    p = np.asarray(random.permutation(key(16), 50))
    assert sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.asarray(random.permutation(key(17), x, axis=1))
    assert sorted(y[0].tolist()) == [0, 1, 2, 3] and (y - y[:, :1] == x - x[:, :1])[:, :].any()
    np.testing.assert_array_equal(y[1] - y[0], 4)  # one permutation for every row
    # independent rows: all 24 orders of 4 appear about equally often
    rows = np.asarray(random.permutation(key(18), np.tile(np.arange(4), (24000, 1)), axis=1, independent=True))
    codes = rows @ np.array([64, 16, 4, 1])
    _, counts = np.unique(codes, return_counts=True)
    assert len(counts) == 24 and counts.min() > 850 and counts.max() < 1150
    w = np.array([0.1, 0.6, 0.3], np.float32)
    c = random.choice(key(19), 3, (N,), p=w)
    assert total_variation(c, w, np.arange(3)) < 0.02
    c = np.asarray(random.choice(key(20), np.arange(10, 20), (7,), replace=False))
    assert len(set(c.tolist())) == 7 and c.min() >= 10 and c.max() < 20
    firsts = np.array([int(np.asarray(random.choice(random.fold_in(key(21), i), 3, (2,), replace=False, p=w))[0])
                       for i in range(3000)])
    assert total_variation(firsts, w, np.arange(3)) < 0.04  # the first of a weighted draw follows p
    with pytest.raises(ValueError, match="without replacement"):
        random.choice(key(22), 3, (4,), replace=False)


def test_multivariate_normal_orthogonal_ball():
    cov = np.array([[2.0, 0.6], [0.6, 0.5]], np.float32)
    mean = np.array([1.0, -1.0], np.float32)
    for method in ("cholesky", "eigh", "svd"):
        s = np.asarray(random.multivariate_normal(key(23), mean, cov, (N,), method=method), np.float64)
        np.testing.assert_allclose(s.mean(0), mean, atol=0.03)
        np.testing.assert_allclose(np.cov(s.T), cov, atol=0.05)
    q = np.asarray(random.orthogonal(key(24), 5, (3,)), np.float64)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(5), (3, 5, 5)), atol=1e-5)
    b = np.asarray(random.ball(key(25), 3, shape=(N,)), np.float64)
    r = np.linalg.norm(b, axis=-1)
    assert r.max() <= 1.0 + 1e-6
    assert ks_distance(r ** 3, lambda x: np.clip(x, 0, 1)) < KS_BOUND  # uniform in volume
    m = np.asarray(random.double_sided_maxwell(key(26), 2.0, 0.5, (N,)), np.float64)
    assert ks_distance(np.abs(m - 2.0) / 0.5, lambda x: np.vectorize(math.erf)(x / math.sqrt(2))
                       - np.sqrt(2 / np.pi) * x * np.exp(-x * x / 2)) < KS_BOUND
    assert abs(np.mean(m > 2.0) - 0.5) < 0.02


def test_samplers_trace_and_keys_round_trip():
    k = key(27)
    f = tessera.jit(lambda k: (random.randint(k, (6,), 0, 9), random.exponential(k, (4,)), random.poisson(k, 4.0, (5,)),
                               random.permutation(k, 8), random.beta(k, 2.0, 2.0, (3,))))
    for a, b in zip(f(k), (random.randint(k, (6,), 0, 9), random.exponential(k, (4,)), random.poisson(k, 4.0, (5,)),
                           random.permutation(k, 8), random.beta(k, 2.0, 2.0, (3,)))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(random.wrap_key_data(random.key_data(k))), np.asarray(k))
    assert random.key_impl(k) == "threefry2x32" and random.clone(k) is k
    with pytest.raises(TypeError, match="u32"):
        random.wrap_key_data(np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="float dtype"):
        random.exponential(k, (2,), dtype=np.int32)


@pytest.mark.parametrize("n,p", [(20, 0.3), (7, 0.05), (1000, 0.4), (50, 0.9), (60, 0.5)])
def test_binomial_follows_its_cdf(n, p):
    s = np.asarray(random.binomial(key(28), n, p, (N,)))
    support = np.arange(0, n + 1)
    pmf = np.array([math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in support])
    empirical = np.array([(s <= k).mean() for k in support])
    assert np.max(np.abs(empirical - np.cumsum(pmf))) < KS_BOUND
    assert s.min() >= 0 and s.max() <= n


def test_binomial_edges_and_multinomial():
    assert (np.asarray(random.binomial(key(29), 5, 0.0, (10,))) == 0).all()
    assert (np.asarray(random.binomial(key(29), 5, 1.0, (10,))) == 5).all()
    assert (np.asarray(random.binomial(key(29), 0, 0.5, (10,))) == 0).all()
    n = np.array([10.0, 200.0], np.float32)
    s = np.asarray(tessera.jit(lambda k: random.binomial(k, n, 0.25, (N, 2)))(key(30)), np.float64)
    np.testing.assert_allclose(s.mean(0), n * 0.25, rtol=0.02)
    p = np.array([0.2, 0.5, 0.3], np.float32)
    m = np.asarray(random.multinomial(key(31), 30, p, shape=(N, 3)), np.float64)
    assert (m.sum(1) == 30).all()
    np.testing.assert_allclose(m.mean(0), 30 * p, rtol=0.02)
    np.testing.assert_allclose(m.var(0), 30 * p * (1 - p), rtol=0.06)
    cov01 = np.mean((m[:, 0] - m[:, 0].mean()) * (m[:, 1] - m[:, 1].mean()))
    assert abs(cov01 - (-30 * p[0] * p[1])) < 0.15  # categories compete for the draws
