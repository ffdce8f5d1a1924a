"""tessera.numpy's jax.numpy surface against numpy: the functions built from the engine's ops (pad, tile, roll,
tensordot, linalg.norm, ...), reduction keywords, Array methods that numpy's functions call, boolean masks and
the errors a user can cause. Gradients are checked against central differences of the numpy function in float64."""
import operator

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from finite_differences import finite_difference


def close(actual, expected, rtol=1e-5, atol=1e-6):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def same(actual, expected, dtype=None):
    """Equal values, shape and (when given) dtype."""
    actual = np.asarray(actual)
    assert actual.shape == np.shape(expected), (actual.shape, np.shape(expected))
    np.testing.assert_array_equal(actual, expected)
    if dtype is not None:
        assert actual.dtype == np.dtype(dtype), actual.dtype


def check_grad(tnp_fn, np_fn, x, rng, rtol=1e-3, atol=1e-4):
    """grad of sum(fn(x) * w) (w random, so every output counts differently) against finite differences."""
    w = rng.standard_normal(np.shape(np_fn(np.asarray(x, np.float64))))
    g = tessera.grad(lambda v: tnp.sum(tnp_fn(v) * tnp.asarray(w.astype(np.float32))))(tnp.asarray(x))
    close(g, finite_difference(lambda v: np.sum(np_fn(v) * w), x), rtol=rtol, atol=atol)


def sample(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- elementwise ------------------------------------------------------------------------------------------

SPECIALS = np.array([0.0, -1.5, 2.0, np.inf, -np.inf, np.nan, 1e30], np.float32)


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite", "isposinf", "isneginf"])
def test_float_classification(name):
    same(getattr(tnp, name)(tnp.asarray(SPECIALS)), getattr(np, name)(SPECIALS), bool)
    ints = np.array([0, -3, 7], np.int32)
    same(getattr(tnp, name)(tnp.asarray(ints)), getattr(np, name)(ints), bool)


@pytest.mark.parametrize("name,domain", [("log2", (0.01, 100)), ("log10", (0.01, 100)), ("arcsin", (-1, 1)),
                                         ("arccos", (-1, 1)), ("arctan", (-50, 50))])
def test_inverse_and_log_functions(rng, name, domain):
    x = rng.uniform(*domain, size=(4, 5)).astype(np.float32)
    x.flat[:2] = domain  # the ends: arccos(-1) = pi, arcsin(1) = pi / 2
    out = getattr(tnp, name)(tnp.asarray(x))
    assert out.dtype == tnp.float32
    close(out, getattr(np, name)(x.astype(np.float64)), rtol=2e-6, atol=2e-6)
    # Integers become float32, as jax.numpy.
    close(getattr(tnp, name)(tnp.asarray([1, 1])), getattr(np, name)(np.array([1.0, 1.0])), atol=1e-6)


def test_log2_and_log10_of_powers_are_exact_enough():
    close(tnp.log2(tnp.asarray([1.0, 8.0, 1024.0])), [0.0, 3.0, 10.0], rtol=1e-7)
    close(tnp.log10(tnp.asarray([1.0, 1000.0])), [0.0, 3.0], rtol=1e-7)


def test_arcsin_outside_its_domain_is_nan():
    assert np.isnan(np.asarray(tnp.arcsin(tnp.asarray([1.5, -2.0])))).all()
    assert np.isnan(np.asarray(tnp.arccos(tnp.asarray([1.5])))).all()


def test_arctan2_of_integers(rng):
    a, b = rng.integers(-5, 6, size=(2, 7))
    close(tnp.arctan2(tnp.asarray(a), tnp.asarray(b)), np.arctan2(a, b).astype(np.float32), atol=1e-6)


def test_logaddexp_matches_numpy_including_extremes(rng):
    a, b = sample(rng, (5, 6)) * 30, sample(rng, (5, 6)) * 30
    close(tnp.logaddexp(tnp.asarray(a), tnp.asarray(b)), np.logaddexp(a.astype(np.float64), b), rtol=1e-6)
    big = np.array([1e4, -1e4, 88.0, 0.0, np.inf, -np.inf, -np.inf, np.nan, 3.0], np.float32)
    other = np.array([1e4, -1e4, 89.0, -np.inf, np.inf, -np.inf, 2.0, 1.0, np.inf], np.float32)
    with np.errstate(invalid="ignore"):  # numpy warns of inf - inf, and gives what tnp does
        expected = np.logaddexp(big, other)
    close(tnp.logaddexp(tnp.asarray(big), tnp.asarray(other)), expected, rtol=1e-6)
    close(tnp.logaddexp(tnp.asarray([1, 2]), 0.5), np.logaddexp([1.0, 2.0], 0.5), rtol=1e-6)


def test_grad_of_logaddexp(rng):
    b = sample(rng, (3, 4))
    a = sample(rng, (3, 4))
    a[0, 0] = b[0, 0]  # a tie: half the gradient each
    check_grad(lambda v: tnp.logaddexp(v, tnp.asarray(b)), lambda v: np.logaddexp(v, b), a, rng)


def test_grad_of_inverse_trigonometric_functions(rng):
    x = rng.uniform(-0.9, 0.9, size=(6,)).astype(np.float32)
    for name in ("arcsin", "arccos", "arctan"):
        check_grad(getattr(tnp, name), getattr(np, name), x, rng)


def test_isclose_and_allclose_match_numpy():
    a = np.array([1.0, 1.0, np.inf, np.inf, -np.inf, np.nan, 1e-9, 100.0, 0.0], np.float32)
    b = np.array([1.0 + 1e-6, 1.1, np.inf, -np.inf, 1.0, np.nan, 0.0, 100.001, np.inf], np.float32)
    same(tnp.isclose(tnp.asarray(a), tnp.asarray(b)), np.isclose(a, b), bool)
    same(tnp.isclose(tnp.asarray(a), tnp.asarray(b), equal_nan=True), np.isclose(a, b, equal_nan=True))
    same(tnp.isclose(tnp.asarray(a), tnp.asarray(b), rtol=0.2, atol=0.0), np.isclose(a, b, rtol=0.2, atol=0.0))
    same(tnp.isclose(tnp.asarray([1, 2, 3]), tnp.asarray([1, 3, 3])), [True, False, True])
    same(tnp.isclose(tnp.asarray([1, 2]), 1.000001), np.isclose([1, 2], 1.000001))
    assert bool(tnp.allclose(tnp.asarray([1.0, 2.0]), tnp.asarray([1.0, 2.0 + 1e-6])))
    assert not bool(tnp.allclose(tnp.asarray([1.0, np.nan]), tnp.asarray([1.0, np.nan])))
    assert bool(tnp.allclose(tnp.asarray([1.0, np.nan]), tnp.asarray([1.0, np.nan]), equal_nan=True))


# ---- pad, tile, repeat, roll ------------------------------------------------------------------------------

PAD_WIDTHS = [1, (2,), (1, 2), ((1, 2),), ((0, 1), (2, 0)), [[3, 1], [0, 0]], np.array([[1, 0], [2, 3]])]


@pytest.mark.parametrize("pad_width", PAD_WIDTHS, ids=[str(p).replace("\n", "") for p in PAD_WIDTHS])
def test_pad_constant_takes_numpys_pad_width_forms(rng, pad_width):
    x = sample(rng, (3, 4))
    same(tnp.pad(tnp.asarray(x), pad_width), np.pad(x, pad_width))
    same(tnp.pad(tnp.asarray(x), pad_width, constant_values=-2.5), np.pad(x, pad_width, constant_values=-2.5))


def test_pad_constant_values_per_axis_fill_corners_as_numpy():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    for values in [((7, 8), (9, 10)), (5, 6), ((4,),)]:
        out = tnp.pad(tnp.asarray(x), ((1, 2), (2, 1)), constant_values=values)
        same(out, np.pad(x, ((1, 2), (2, 1)), constant_values=values), np.int32)


@pytest.mark.parametrize("mode", ["edge", "wrap", "reflect", "symmetric"])
def test_pad_modes_that_copy_elements(rng, mode):
    x = sample(rng, (3, 5))
    for widths in [((1, 2), (2, 2)), 2, ((0, 0), (4, 3))]:
        same(tnp.pad(tnp.asarray(x), widths, mode=mode), np.pad(x, widths, mode=mode))


def test_pad_errors():
    x = tnp.ones((2, 3))
    with pytest.raises(ValueError, match="negative"):
        tnp.pad(x, ((1, -1), (0, 0)))
    with pytest.raises(ValueError, match="rank 2"):
        tnp.pad(x, ((1, 1), (0, 0), (1, 1)))
    with pytest.raises(NotImplementedError, match="median"):
        tnp.pad(x, 1, mode="median")
    with pytest.raises(TypeError, match="integers"):
        tnp.pad(x, 1.5)


def test_pad_under_jit_with_a_traced_constant():
    x = np.arange(4, dtype=np.float32)
    out = tessera.jit(lambda a, v: tnp.pad(a, (2, 1), constant_values=v))(tnp.asarray(x), tnp.asarray(np.float32(-3)))
    same(out, np.pad(x, (2, 1), constant_values=-3))


def test_grad_of_pad(rng):
    x = sample(rng, (3, 4))
    check_grad(lambda v: tnp.pad(v, ((1, 2), (0, 3)), constant_values=1.5),
               lambda v: np.pad(v, ((1, 2), (0, 3)), constant_values=1.5), x, rng)
    check_grad(lambda v: tnp.pad(v, 2, mode="reflect"), lambda v: np.pad(v, 2, mode="reflect"), x, rng)


@pytest.mark.parametrize("shape,reps", [((3,), 2), ((3,), (2, 2)), ((2, 3), (1, 3)), ((2, 3), 2),
                                        ((2, 1, 3), (2, 1, 2)),
                                        ((), 3), ((2, 3), (0, 2))])
def test_tile(rng, shape, reps):
    x = sample(rng, shape)
    same(tnp.tile(tnp.asarray(x), reps), np.tile(x, reps))


@pytest.mark.parametrize("repeats,axis", [(2, None), (3, 0), (2, 1), (2, -1), ([1, 0, 2], 1), ([2, 1], 0),
                                          (np.array([0, 3, 1]), -1), (0, 0)])
def test_repeat(rng, repeats, axis):
    x = sample(rng, (2, 3))
    same(tnp.repeat(tnp.asarray(x), repeats, axis=axis), np.repeat(x, repeats, axis=axis))
    same(tnp.asarray(x).repeat(repeats, axis=axis), np.repeat(x, repeats, axis=axis))


def test_repeat_with_traced_counts_needs_total_repeat_length():
    x = np.array([10, 20, 30], np.int32)
    counts = np.array([2, 0, 3], np.int32)
    f = tessera.jit(lambda a, r: tnp.repeat(a, r, total_repeat_length=5))
    same(f(tnp.asarray(x), tnp.asarray(counts)), np.repeat(x, counts))
    # Longer than the counts: the last element fills the rest, as jax.numpy.
    same(tnp.repeat(tnp.asarray(x), counts, total_repeat_length=7), [10, 10, 30, 30, 30, 30, 30])
    with pytest.raises(tessera.ConcretizationError, match="total_repeat_length"):
        tessera.jit(lambda a, r: tnp.repeat(a, r))(tnp.asarray(x), tnp.asarray(counts))
    with pytest.raises(ValueError, match="3 counts"):
        tnp.repeat(tnp.ones((2, 2)), [1, 2, 3], axis=0)


def test_grad_of_tile_and_repeat(rng):
    x = sample(rng, (2, 3))
    check_grad(lambda v: tnp.tile(v, (2, 1, 2)), lambda v: np.tile(v, (2, 1, 2)), x, rng)
    check_grad(lambda v: tnp.repeat(v, 3, axis=1), lambda v: np.repeat(v, 3, axis=1), x, rng)
    check_grad(lambda v: tnp.repeat(v, [2, 0, 1], axis=1), lambda v: np.repeat(v, [2, 0, 1], axis=1), x, rng)


@pytest.mark.parametrize("shift,axis", [(1, None), (-2, None), (7, None), (1, 0), (-1, 1), (5, -1), ((1, 2), (0, 1)),
                                        ((2, -1), 1), (0, 0)])
def test_roll(rng, shift, axis):
    x = sample(rng, (3, 4))
    same(tnp.roll(tnp.asarray(x), shift, axis=axis), np.roll(x, shift, axis=axis))


def test_roll_by_a_traced_shift():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = tessera.jit(lambda a, s: tnp.roll(a, s, axis=1))
    for s in (0, 1, -3, 6):
        same(f(tnp.asarray(x), tnp.asarray(np.int32(s))), np.roll(x, s, axis=1))


def test_grad_of_roll(rng):
    x = sample(rng, (3, 4))
    check_grad(lambda v: tnp.roll(v, (1, -2), (0, 1)), lambda v: np.roll(v, (1, -2), (0, 1)), x, rng)
    check_grad(lambda v: tnp.roll(v, 5), lambda v: np.roll(v, 5), x, rng)


@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3])
def test_tril_triu_tri(rng, k):
    x = sample(rng, (2, 4, 5))
    same(tnp.tril(tnp.asarray(x), k), np.tril(x, k))
    same(tnp.triu(tnp.asarray(x), k), np.triu(x, k))
    same(tnp.tri(4, 3, k, dtype=tnp.int32), np.tri(4, 3, k, dtype=np.int32))
    with pytest.raises(ValueError, match="2 dimensions"):
        tnp.tril(tnp.ones(3))


# ---- contractions, moveaxis, linalg.norm ------------------------------------------------------------------


def test_outer(rng):
    a, b = sample(rng, (4,)), sample(rng, (2, 3))
    close(tnp.outer(tnp.asarray(a), tnp.asarray(b)), np.outer(a, b))
    same(tnp.outer(tnp.asarray([1, 2]), tnp.asarray([3, 4, 5])), np.outer([1, 2], [3, 4, 5]), np.int32)


TENSORDOTS = [((3, 4), (4, 5), 1), ((2, 3, 4), (3, 4, 5), 2), ((2, 3), (2, 3), 0),
              ((3, 4, 5), (5, 4, 2), ([1, 2], [1, 0])),
              ((2, 3, 4), (4, 3), ((2, 1), (0, 1))), ((3, 4), (3,), (0, 0)), ((2, 3), (2, 3), 2)]


@pytest.mark.parametrize("sa,sb,axes", TENSORDOTS, ids=[str(t[2]) for t in TENSORDOTS])
def test_tensordot(rng, sa, sb, axes):
    a, b = sample(rng, sa), sample(rng, sb)
    close(tnp.tensordot(tnp.asarray(a), tnp.asarray(b), axes), np.tensordot(a, b, axes), rtol=1e-5, atol=1e-5)


def test_tensordot_errors_and_grad(rng):
    with pytest.raises(ValueError, match="size"):
        tnp.tensordot(tnp.ones((2, 3)), tnp.ones((2, 3)), 1)
    a, b = sample(rng, (2, 3, 4)), sample(rng, (4, 3, 2))
    check_grad(lambda v: tnp.tensordot(v, tnp.asarray(b), ([1, 2], [1, 0])),
               lambda v: np.tensordot(v, b, ([1, 2], [1, 0])), a, rng)


@pytest.mark.parametrize("source,destination", [(0, -1), (-1, 0), (1, 2), ((0, 1), (2, 0)), ((0, 1), (1, 0)),
                                                ([0, 2], [-1, -2])])
def test_moveaxis(rng, source, destination):
    x = sample(rng, (2, 3, 4))
    same(tnp.moveaxis(tnp.asarray(x), source, destination), np.moveaxis(x, source, destination))


NORMS = [(None, None, (5,)), (2, None, (5,)), (1, 0, (4, 3)), (np.inf, -1, (4, 3)), (-np.inf, 1, (4, 3)),
         (0, None, (6,)), (3, 1, (2, 5)), (0.5, 0, (4,)), (None, None, (2, 3, 4)), (None, (0, 2), (2, 3, 4)),
         ("fro", None, (3, 4)),
         (1, None, (3, 4)), (-1, (1, 0), (3, 4)), (np.inf, (0, 1), (3, 4)), (-np.inf, None, (3, 4)), (2, (1,), (3, 4))]


@pytest.mark.parametrize("ord,axis,shape", NORMS, ids=[f"{n[0]}-{n[1]}-{len(n[2])}d" for n in NORMS])
@pytest.mark.parametrize("keepdims", [False, True])
def test_linalg_norm(rng, ord, axis, shape, keepdims):
    x = sample(rng, shape)
    if ord == 0:
        x[..., 1] = 0.0
    out = tnp.linalg.norm(tnp.asarray(x), ord=ord, axis=axis, keepdims=keepdims)
    close(out, np.linalg.norm(x.astype(np.float64), ord=ord, axis=axis, keepdims=keepdims), rtol=2e-6)


def test_linalg_norm_of_integers_and_errors():
    close(tnp.linalg.norm(tnp.asarray([3, 4])), 5.0)
    import tessera.numpy.linalg as linalg
    assert linalg.norm is tnp.linalg.norm
    close(tnp.linalg.norm(tnp.ones((2, 2)), ord=2), 2.0)  # the largest singular value of a rank-1 all-ones
    with pytest.raises(ValueError, match="invalid ord"):
        tnp.linalg.norm(tnp.ones((2, 2)), ord=3)
    with pytest.raises(ValueError, match="axis"):
        tnp.linalg.norm(tnp.ones((2, 2, 2)), ord=1)


def test_grad_of_norm(rng):
    x = sample(rng, (3, 4))
    check_grad(tnp.linalg.norm, np.linalg.norm, x, rng)
    check_grad(lambda v: tnp.linalg.norm(v, axis=1), lambda v: np.linalg.norm(v, axis=1), x, rng)
    check_grad(lambda v: tnp.linalg.norm(v, ord=3, axis=0), lambda v: np.linalg.norm(v, ord=3, axis=0), x, rng)


def test_new_functions_under_jit(rng):
    x = sample(rng, (3, 4))
    f = tessera.jit(lambda v: (tnp.pad(v, 1), tnp.tile(v, 2), tnp.repeat(v, 2, 0), tnp.roll(v, 1, 1), tnp.triu(v),
                               tnp.moveaxis(v, 0, 1), tnp.tensordot(v, v, ([0, 1], [0, 1])), tnp.linalg.norm(v, axis=0),
                               tnp.logaddexp(v, 1.0), tnp.isnan(v)))
    want = (np.pad(x, 1), np.tile(x, 2), np.repeat(x, 2, 0), np.roll(x, 1, 1), np.triu(x), np.moveaxis(x, 0, 1),
            np.tensordot(x, x, ([0, 1], [0, 1])), np.linalg.norm(x, axis=0), np.logaddexp(x, 1.0), np.isnan(x))
    for got, expected in zip(f(tnp.asarray(x)), want):
        close(got, expected, rtol=1e-5, atol=1e-5)


# ---- reductions -------------------------------------------------------------------------------------------


def test_small_unsigned_integers_sum_without_overflow():
    x = tnp.asarray(np.array([200, 200], np.uint8))
    same(tnp.sum(x), 400, np.uint32)
    same(tnp.prod(tnp.asarray(np.array([20, 20], np.uint8))), 400, np.uint32)
    same(tnp.sum(x, promote_integers=False), 144, np.uint8)  # jax.numpy's opt-out wraps as uint8 does
    same(tnp.sum(x, dtype=tnp.int32), 400, np.int32)
    close(tnp.mean(x), 200.0)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions_with_where_and_initial(rng, name, axis):
    a = sample(rng, (3, 4)) + 2.0
    mask = rng.random((3, 4)) > 0.4
    mask[:, 0] = True  # every reduced slice has an element
    mask[0, :] = True
    x = tnp.asarray(a)
    for kwargs in [dict(initial=1.5), dict(where=mask, initial=1.5), dict(where=mask[0], initial=-1.0, keepdims=True)]:
        close(getattr(tnp, name)(x, axis=axis, **kwargs), getattr(np, name)(a, axis=axis, **kwargs), rtol=1e-5)
    if name in ("sum", "prod"):
        close(getattr(tnp, name)(x, axis=axis, where=mask), getattr(np, name)(a, axis=axis, where=mask), rtol=1e-5)


def test_max_with_where_needs_initial():
    with pytest.raises(ValueError, match="initial"):
        tnp.max(tnp.ones(3), where=tnp.asarray([True, False, True]))


def test_reduction_dtypes(rng):
    a = rng.integers(-5, 6, size=(3, 4)).astype(np.int32)
    x = tnp.asarray(a)
    same(tnp.sum(x, dtype=tnp.float32), np.sum(a, dtype=np.float32), np.float32)
    same(tnp.sum(tnp.asarray([True, True, False])), 2, np.int32)
    same(tnp.prod(x, axis=0, dtype=tnp.float32), np.prod(a, axis=0, dtype=np.float32), np.float32)
    same(tnp.cumsum(x, axis=1, dtype=tnp.float32), np.cumsum(a, axis=1, dtype=np.float32), np.float32)
    close(tnp.mean(x, axis=0, dtype=tnp.float16), np.mean(a, axis=0, dtype=np.float16), rtol=1e-3)
    assert tnp.mean(x, axis=0, dtype=tnp.float16).dtype == tnp.float16


@pytest.mark.parametrize("name", ["mean", "var", "std"])
def test_mean_var_std_with_where_and_ddof(rng, name):
    a = sample(rng, (4, 5))
    mask = rng.random((4, 5)) > 0.3
    mask[:3, :] = True
    x = tnp.asarray(a)
    for kwargs in [dict(axis=0, where=mask), dict(where=mask), dict(axis=1, keepdims=True, where=mask[0])]:
        close(getattr(tnp, name)(x, **kwargs), getattr(np, name)(a, **kwargs), rtol=1e-5)
    if name != "mean":
        for kwargs in [dict(ddof=1), dict(axis=1, ddof=2, keepdims=True), dict(axis=0, ddof=1, where=mask)]:
            close(getattr(tnp, name)(x, **kwargs), getattr(np, name)(a, **kwargs), rtol=1e-5)
        close(getattr(tnp, name)(x, axis=0, correction=1), getattr(np, name)(a, axis=0, ddof=1), rtol=1e-5)


def test_any_all_with_where():
    a = np.array([[True, False, True], [False, False, True]])
    mask = np.array([[True, False, True], [True, True, False]])
    for name in ("any", "all"):
        for axis in (None, 0, 1):
            same(getattr(tnp, name)(tnp.asarray(a), axis=axis, where=mask), getattr(np, name)(a, axis=axis, where=mask))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_argmin_keepdims(rng, name, axis):
    a = sample(rng, (3, 4))
    same(getattr(tnp, name)(tnp.asarray(a), axis=axis, keepdims=True),
         getattr(np, name)(a, axis=axis, keepdims=True).astype(np.int32))


def test_out_argument_is_refused():
    x = tnp.ones((2, 3))
    for fn in (tnp.sum, tnp.mean, tnp.max, tnp.std, tnp.argmax, tnp.cumsum, tnp.all):
        with pytest.raises(TypeError, match="out="):
            fn(x, out=np.zeros(()))


# ---- Array methods and protocols --------------------------------------------------------------------------


def test_numpys_functions_call_array_methods(rng):
    a = sample(rng, (3, 4))
    x = tnp.asarray(a)
    for name in ("mean", "sum", "std", "var", "max", "min", "prod", "argmax", "argmin", "any", "all", "cumsum", "ptp"):
        got = getattr(np, name)(x)
        assert isinstance(got, tessera.Array), name  # the method ran, not numpy on a converted copy
        close(got, getattr(np, name)(a), rtol=1e-5, atol=1e-5)
    close(np.mean(x, axis=0, keepdims=True), np.mean(a, axis=0, keepdims=True))
    close(np.std(x, axis=1, ddof=1), np.std(a, axis=1, ddof=1), rtol=1e-5)
    close(np.var(x, axis=1, dtype=np.float32), np.var(a, axis=1, dtype=np.float32), rtol=1e-5)
    close(np.sum(x, axis=1, initial=2.0), np.sum(a, axis=1, initial=2.0), rtol=1e-5)
    close(np.clip(x, -0.5, 0.5), np.clip(a, -0.5, 0.5))
    close(np.round(x, 2), np.round(a, 2))
    close(np.swapaxes(x, 0, 1), np.swapaxes(a, 0, 1))
    close(np.reshape(x, (4, 3), order="F"), np.reshape(a, (4, 3), order="F"))
    close(np.cumsum(x, axis=1), np.cumsum(a, axis=1), rtol=1e-5, atol=1e-6)


def test_array_methods(rng):
    a, b = sample(rng, (3, 4)), sample(rng, (4, 2))
    x = tnp.asarray(a)
    close(x.clip(-0.2, 0.3), np.clip(a, -0.2, 0.3))
    close(x.clip(max=0.1), np.clip(a, None, 0.1))
    close(x.std(axis=0), a.std(axis=0), rtol=1e-5)
    close(x.var(), a.var(), rtol=1e-5)
    close(x.cumsum(axis=0), a.cumsum(axis=0), rtol=1e-5)
    close(x.cumprod(axis=1), a.cumprod(axis=1), rtol=1e-5)
    same(x.any(axis=1), (a != 0).any(axis=1))
    same((x > 0).all(axis=0), (a > 0).all(axis=0))
    close(x.dot(tnp.asarray(b)), a.dot(b), rtol=1e-5, atol=1e-6)
    close(x.swapaxes(1, 0), a.swapaxes(1, 0))
    close(x.round(1), a.round(1))
    close(x.take([2, 0], axis=1), a.take([2, 0], axis=1))
    close(x.sort(axis=1), np.sort(a, axis=1))
    close(x.reshape(2, 6, order="F"), a.reshape(2, 6, order="F"))
    y = x.copy()
    assert y is not x
    same(y, a)


def test_copy_has_its_own_buffer():
    x = tnp.asarray([1.0, 2.0])
    y = tnp.copy(x)
    tessera.jit(lambda v: v * 2, donate_argnums=0)(y)
    assert y.is_deleted() and not x.is_deleted()
    same(x, [1.0, 2.0])


def test_format_of_0d_arrays():
    assert f"{tnp.asarray(3.14159):.2f}" == "3.14"
    assert f"{tnp.asarray(42):>5}" == "   42"
    assert f"{tnp.asarray(2.5)}" == "2.5"
    assert format(tnp.ones(2), "") == str(tnp.ones(2))
    with pytest.raises(TypeError, match="0-d"):
        f"{tnp.ones(2):.2f}"


def test_index_protocol_takes_integer_scalars_only():
    i = tnp.asarray(2)
    assert operator.index(i) == 2
    assert list(range(i)) == [0, 1]
    assert ["a", "b", "c"][i] == "c"
    assert ["a", "b", "c"][tnp.asarray(np.uint8(1))] == "b"
    for bad in (tnp.asarray(2.0), tnp.asarray([1]), tnp.asarray(True)):
        with pytest.raises(TypeError, match="integer scalar"):
            operator.index(bad)
    with pytest.raises(TypeError):
        tessera.jit(lambda v: tnp.zeros(operator.index(v)))(i)


# ---- boolean masks ----------------------------------------------------------------------------------------


def test_boolean_mask_indexing_gathers_as_numpy(rng):
    a = sample(rng, (3, 4, 2))
    x = tnp.asarray(a)
    full = a > 0
    same(x[tnp.asarray(full)], a[full])
    same(x[full], a[full])
    lead = full[:, :, 0]
    same(x[tnp.asarray(lead)], a[lead])
    rows = np.array([True, False, True])
    same(x[rows], a[rows])
    same(x[[True, False, True]], a[[True, False, True]])
    same(x[rows, 1:3], a[rows, 1:3])
    same(x[:, np.array([False, True, True, False])], a[:, np.array([False, True, True, False])])
    same(x[:, lead[0]], a[:, lead[0]])
    same(x[np.zeros(3, bool)], a[np.zeros(3, bool)])
    with pytest.raises(IndexError, match="boolean index"):
        x[np.array([True, False])]


def test_boolean_mask_gradient_and_concrete_mask_under_jit(rng):
    a = sample(rng, (3, 4))
    mask = a > 0
    check_grad(lambda v: v[mask], lambda v: v[mask], a, rng)
    same(tessera.jit(lambda v: v[mask])(tnp.asarray(a)), a[mask])


def test_traced_boolean_mask_raises_a_clear_error():
    with pytest.raises(IndexError, match="tnp.where") as info:
        tessera.jit(lambda v: v[v > 0])(tnp.ones(3))
    assert isinstance(info.value, tnp.NonConcreteBooleanIndexError)


def test_at_with_a_boolean_mask(rng):
    a = sample(rng, (3, 4))
    mask = a > 0
    x = tnp.asarray(a)
    expected = a.copy()
    expected[mask] = 0.0
    same(x.at[mask].set(0.0), expected)
    expected = a.copy()
    expected[mask] += np.arange(mask.sum(), dtype=np.float32)
    same(x.at[tnp.asarray(mask)].add(tnp.arange(int(mask.sum()), dtype=tnp.float32)), expected)
    same(x.at[mask].get(), a[mask])


# ---- where, nonzero, expand_dims, split, swapaxes ---------------------------------------------------------


def test_where_with_the_condition_alone_is_nonzero(rng):
    a = (rng.random((3, 4)) > 0.5).astype(np.int32)
    got = tnp.where(tnp.asarray(a))
    assert isinstance(got, tuple) and len(got) == 2
    for g, e in zip(got, np.where(a)):
        same(g, e.astype(np.int32), np.int32)
    for g, e in zip(tnp.nonzero(tnp.asarray(a)), np.nonzero(a)):
        same(g, e.astype(np.int32))
    same(tnp.asarray(a).nonzero()[1], np.nonzero(a)[1].astype(np.int32))
    same(tnp.flatnonzero(tnp.asarray(a)), np.flatnonzero(a).astype(np.int32))
    same(tnp.argwhere(tnp.asarray(a)), np.argwhere(a).astype(np.int32))
    with pytest.raises(ValueError, match="x and y"):
        tnp.where(tnp.asarray(a), 1.0)
    with pytest.raises(tessera.ConcretizationError, match="size="):
        tessera.jit(lambda v: tnp.where(v))(tnp.asarray(a))


def test_nonzero_with_size_under_jit():
    a = np.array([[0, 3, 0], [4, 0, 5]], np.float32)
    rows, cols = tessera.jit(lambda v: tnp.nonzero(v, size=5, fill_value=-1))(tnp.asarray(a))
    same(rows, [0, 1, 1, -1, -1])
    same(cols, [1, 0, 2, -1, -1])
    rows, cols = tessera.jit(lambda v: tnp.where(v > 0, size=2))(tnp.asarray(a))  # truncated to size
    same(rows, [0, 1])
    same(cols, [1, 0])


@pytest.mark.parametrize("axis", [(0, 1), (0, 3), (-1, 0), (2, -1), (1,)])
def test_expand_dims_with_a_tuple(rng, axis):
    a = sample(rng, (2, 3))
    same(tnp.expand_dims(tnp.asarray(a), axis), np.expand_dims(a, axis))


def test_errors_name_the_problem():
    x = tnp.ones((2, 3))
    with pytest.raises(ValueError, match="sections must be positive"):
        tnp.split(x, 0)
    with pytest.raises(ValueError, match="axis 5 .*rank 2"):
        tnp.swapaxes(x, 0, 5)
    with pytest.raises(ValueError, match="axis -3 .*rank 2"):
        x.swapaxes(-3, 1)
    with pytest.raises(ValueError, match="repeated axis"):
        tnp.expand_dims(x, (0, 0))
    with pytest.raises(ValueError, match="axis 4"):
        tnp.expand_dims(x, (0, 4))


def test_split_into_equal_sections_of_an_empty_axis():
    parts = tnp.split(tnp.ones((0, 2)), 3)
    assert [p.shape for p in parts] == [(0, 2)] * 3


def test_new_functions_under_vmap(rng):
    x = sample(rng, (3, 4))
    mask = np.array([True, False, True, True])
    cases = [(lambda v: tnp.pad(v, 1), lambda v: np.pad(v, 1)), (tnp.linalg.norm, np.linalg.norm),
             (lambda v: tnp.roll(v, 1), lambda v: np.roll(v, 1)), (lambda v: v[mask], lambda v: v[mask]),
             (lambda v: tnp.sum(v, where=mask), lambda v: np.sum(v, where=mask))]
    for f, ref in cases:
        close(tessera.vmap(f)(tnp.asarray(x)), np.stack([ref(r) for r in x]), rtol=1e-5)


def test_take_along_axis_on_any_axis_broadcasting_like_numpy(rng):
    x = sample(rng, (4, 3, 2))
    for axis, shape in [(0, (2, 3, 2)), (1, (4, 5, 2)), (0, (2, 1, 2)), (1, (1, 2, 1)), (-1, (1, 1, 3))]:
        idx = rng.integers(0, x.shape[axis], shape)
        np.testing.assert_array_equal(np.asarray(tnp.take_along_axis(tnp.asarray(x), idx, axis=axis)),
                                      np.take_along_axis(x, idx, axis=axis))
    # d/dx sum(picked^2) is 2 x where picked (rows [1, 0, 1] of the columns), 0 elsewhere.
    v = np.arange(6.0).reshape(2, 3)
    g = tessera.grad(lambda x: tnp.sum(tnp.take_along_axis(x, np.array([[1, 0, 1]]), axis=0) ** 2))(tnp.asarray(v))
    np.testing.assert_array_equal(np.asarray(g), [[0, 2, 0], [6, 0, 10]])
    with pytest.raises(Exception, match="do not broadcast"):
        tnp.take_along_axis(tnp.asarray(x), np.zeros((3, 3, 2), np.int32), axis=1)
