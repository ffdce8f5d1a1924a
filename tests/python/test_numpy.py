"""tessera.numpy against numpy on random inputs."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp


def close(actual, expected, rtol=1e-5, atol=1e-6):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


UNARY = [
    ("negative", np.negative, None), ("abs", np.abs, None), ("exp", np.exp, None), ("sin", np.sin, None),
    ("cos", np.cos, None), ("tanh", np.tanh, None), ("square", np.square, None), ("sign", np.sign, None),
    ("floor", np.floor, None), ("ceil", np.ceil, None),
    ("log", np.log, "positive"), ("sqrt", np.sqrt, "positive"), ("log1p", np.log1p, "positive"),
    ("expm1", np.expm1, None), ("tan", np.tan, "small"),
]


def sample(rng, shape, domain=None):
    x = rng.standard_normal(shape).astype(np.float32)
    if domain == "positive":
        return np.abs(x) + 0.1
    if domain == "small":
        return x * 0.5
    return x


@pytest.mark.parametrize("name,ref,domain", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(), (7,), (3, 5)])
def test_unary(rng, name, ref, domain, shape):
    x = sample(rng, shape, domain)
    close(getattr(tnp, name)(tnp.asarray(x)), ref(x), rtol=2e-5, atol=2e-6)


BINARY = [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum), ("power", np.power), ("arctan2", np.arctan2),
    ("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less), ("less_equal", np.less_equal),
    ("greater", np.greater), ("greater_equal", np.greater_equal),
]


@pytest.mark.parametrize("name,ref", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", [((4, 3), (4, 3)), ((4, 3), (3,)), ((2, 1, 3), (4, 1)), ((), (5,))])
def test_binary_broadcasting(rng, name, ref, shapes):
    a, b = (sample(rng, s) for s in shapes)
    if name == "power":
        a = np.abs(a) + 0.5
    if name == "divide":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    out = getattr(tnp, name)(tnp.asarray(a), tnp.asarray(b))
    expected = ref(a, b)
    assert np.asarray(out).dtype == expected.dtype
    close(out, expected, rtol=2e-5, atol=2e-6)


def test_operators_match_numpy(rng):
    a, b = sample(rng, (3, 4)), sample(rng, (3, 4)) + 3.0
    x, y = tnp.asarray(a), tnp.asarray(b)
    close(x + y, a + b)
    close(x - y, a - b)
    close(x * y, a * b)
    close(x / y, a / b)
    close(-x, -a)
    close(abs(x), np.abs(a))
    close(y ** 2, b ** 2, rtol=1e-5)
    close(2.0 - x, 2.0 - a)
    close(1.0 / y, 1.0 / b)
    close(x < y, a < b)
    close(x >= 0, a >= 0)
    close(x == x, np.ones_like(a, dtype=bool))
    close(x @ y.T, a @ b.T, rtol=1e-5, atol=1e-5)


def test_python_scalars_keep_the_array_dtype():
    x = tnp.arange(4)
    assert (x * 2).dtype == tnp.int32
    assert (x * 2.5).dtype == tnp.float32
    h = tnp.ones((2,), tnp.float16)
    assert (h + 1.0).dtype == tnp.float16
    assert (tnp.ones((2,), tnp.bfloat16) * 3).dtype == tnp.bfloat16


def test_where_and_clip(rng):
    a, b = sample(rng, (5, 4)), sample(rng, (5, 4))
    close(tnp.where(tnp.asarray(a) > 0, tnp.asarray(a), tnp.asarray(b)), np.where(a > 0, a, b))
    close(tnp.where(tnp.asarray(a) > 0, tnp.asarray(a), 0.0), np.where(a > 0, a, 0.0))
    close(tnp.clip(tnp.asarray(a), -0.5, 0.5), np.clip(a, -0.5, 0.5))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(rng, name, axis, keepdims):
    a = sample(rng, (3, 4, 5)) * 0.5 + 1.0
    out = getattr(tnp, name)(tnp.asarray(a), axis=axis, keepdims=keepdims)
    close(out, getattr(np, name)(a, axis=axis, keepdims=keepdims), rtol=1e-4, atol=1e-5)


def test_argmax_var_std(rng):
    a = sample(rng, (6, 7))
    close(tnp.argmax(tnp.asarray(a), axis=1), np.argmax(a, axis=1).astype(np.int32))
    close(tnp.argmin(tnp.asarray(a)), np.int32(np.argmin(a)))
    close(tnp.var(tnp.asarray(a), axis=0), np.var(a, axis=0), rtol=1e-4)
    close(tnp.std(tnp.asarray(a)), np.std(a), rtol=1e-4)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((5, 2, 3, 4), (2, 4, 3)),
                                    ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,))])
def test_matmul(rng, shapes):
    a, b = (sample(rng, s) for s in shapes)
    close(tnp.matmul(tnp.asarray(a), tnp.asarray(b)), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_einsum(rng):
    a, b = sample(rng, (2, 3, 4, 5)), sample(rng, (2, 3, 6, 5))
    close(tnp.einsum("bhtd,bhsd->bhts", tnp.asarray(a), tnp.asarray(b)), np.einsum("bhtd,bhsd->bhts", a, b),
          rtol=1e-5, atol=1e-5)


def test_layout(rng):
    a = sample(rng, (2, 3, 4))
    x = tnp.asarray(a)
    close(tnp.reshape(x, (6, 4)), a.reshape(6, 4))
    close(x.reshape(4, -1), a.reshape(4, -1))
    close(tnp.transpose(x), a.T)
    close(tnp.transpose(x, (1, 0, 2)), a.transpose(1, 0, 2))
    close(x.T, a.T)
    close(tnp.swapaxes(x, 0, 2), np.swapaxes(a, 0, 2))
    close(tnp.broadcast_to(tnp.asarray(a[:, :1, :]), (2, 3, 4)), np.broadcast_to(a[:, :1, :], (2, 3, 4)))
    close(tnp.expand_dims(x, 1), np.expand_dims(a, 1))
    close(tnp.squeeze(tnp.asarray(a[:, :1])), np.squeeze(a[:, :1]))
    close(tnp.ravel(x), a.ravel())
    close(tnp.flip(x, 1), np.flip(a, 1))
    b = sample(rng, (2, 5, 4))
    close(tnp.concatenate([x, tnp.asarray(b)], axis=1), np.concatenate([a, b], axis=1))
    close(tnp.stack([x, x * 2], axis=1), np.stack([a, a * 2], axis=1))
    close(tnp.stack([x, x], axis=-1), np.stack([a, a], axis=-1))


@pytest.mark.parametrize("key", [
    0, -1, (1, 2), (slice(None), 1), (slice(1, 3),), (..., 2), (0, ..., slice(None, None, 2)),
    (None, 1), (slice(None), None, slice(2, None)), (slice(None, None, -1),), (1, slice(3, 0, -2)),
    (slice(-3, None), -2, slice(None, 4, 3)),
])
def test_basic_indexing(rng, key):
    a = sample(rng, (3, 4, 5))
    close(tnp.asarray(a)[key], a[key])


def test_integer_array_indexing(rng):
    a = sample(rng, (5, 3))
    idx = np.array([4, 0, 2, 2], dtype=np.int32)
    close(tnp.asarray(a)[idx], a[idx])
    close(tnp.asarray(a)[:, np.array([2, 0])], a[:, [2, 0]])
    close(tnp.take(tnp.asarray(a), tnp.asarray(idx), axis=0), np.take(a, idx, axis=0))


def test_index_errors():
    x = tnp.zeros((2, 3))
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, 0, 0]


def test_creation():
    close(tnp.zeros((2, 3)), np.zeros((2, 3), np.float32))
    close(tnp.ones(4, tnp.int32), np.ones(4, np.int32))
    close(tnp.full((2, 2), 7.5), np.full((2, 2), 7.5, np.float32))
    close(tnp.full((3,), 2), np.full((3,), 2, np.int32))
    close(tnp.arange(5), np.arange(5, dtype=np.int32))
    close(tnp.arange(2, 11, 3), np.arange(2, 11, 3, dtype=np.int32))
    close(tnp.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25, dtype=np.float32))
    close(tnp.eye(3), np.eye(3, dtype=np.float32))
    close(tnp.eye(3, 4, k=1), np.eye(3, 4, k=1, dtype=np.float32))
    close(tnp.linspace(0.0, 1.0, 5), np.linspace(0.0, 1.0, 5, dtype=np.float32))
    close(tnp.zeros_like(tnp.ones((2,), tnp.int32)), np.zeros(2, np.int32))


def test_dtypes_and_conversion(rng):
    a = sample(rng, (3, 4))
    assert tnp.asarray(a).dtype == np.float32
    assert tnp.asarray(a.astype(np.float64)).dtype == tnp.float32  # 64-bit mode off, as in JAX
    assert tnp.asarray([1, 2, 3]).dtype == tnp.int32
    assert tnp.asarray([True, False]).dtype == tnp.bool_
    assert tnp.asarray(a, dtype=tnp.float16).dtype == tnp.float16
    close(tnp.asarray(a, tnp.float16), a.astype(np.float16))
    b = tnp.asarray(a, dtype=tnp.bfloat16)
    assert b.dtype == tnp.bfloat16
    close(b, a, rtol=1e-2, atol=1e-2)  # bf16 keeps 8 bits of mantissa; numpy sees it as float32
    assert np.asarray(b).dtype == np.float32
    i = tnp.asarray(a).astype(tnp.int32)
    close(i, a.astype(np.int32))
    assert tnp.asarray(a).shape == (3, 4) and tnp.asarray(a).ndim == 2 and tnp.asarray(a).size == 12


def test_numpy_view_is_zero_copy_and_read_only(rng):
    x = tnp.asarray(sample(rng, (4, 4)))
    v1, v2 = np.asarray(x), np.asarray(x)
    assert v1.__array_interface__["data"][0] == v2.__array_interface__["data"][0]
    assert not v1.flags.writeable
    del x
    assert v1.shape == (4, 4) and np.isfinite(v1).all()  # the view keeps the buffer alive


def test_scalars_and_iteration():
    x = tnp.asarray([1.5, 2.5])
    assert float(x[1]) == 2.5
    assert x[0].item() == 1.5
    assert bool(x[0] > 1)
    assert [float(v) for v in x] == [1.5, 2.5]
    assert len(x) == 2
    assert x.tolist() == [1.5, 2.5]


@pytest.mark.parametrize("key", [1, (slice(None), 2), (slice(1, 3), slice(0, 5, 2)), (..., -1), (0, 1, 2)])
def test_at_set_and_add(rng, key):
    a = sample(rng, (3, 4, 5))
    expected_shape = a[key].shape
    v = sample(rng, expected_shape)
    ref_set, ref_add = a.copy(), a.copy()
    ref_set[key] = v
    ref_add[key] += v
    x = tnp.asarray(a)
    close(x.at[key].set(tnp.asarray(v)), ref_set)
    close(x.at[key].add(tnp.asarray(v)), ref_add)
    close(x.at[key].set(7.0), np.where(np.isin(np.arange(a.size).reshape(a.shape), np.arange(a.size).reshape(a.shape)[key]), 7.0, a))
    close(x.at[key].get(), a[key])
    close(x, a)  # x itself is unchanged


def test_at_with_an_integer_array(rng):
    a = sample(rng, (5, 3))
    idx = np.array([4, 1, 4], dtype=np.int32)
    v = sample(rng, (3, 3))
    ref = a.copy()
    np.add.at(ref, idx, v)  # repeated indices accumulate
    close(tnp.asarray(a).at[idx].add(tnp.asarray(v)), ref)
    ref = a.copy()
    ref[[0, 2]] = v[:2]
    close(tnp.asarray(a).at[np.array([0, 2])].set(tnp.asarray(v[:2])), ref)
    ref = a.copy()
    ref[:, [2, 0]] = 1.0
    close(tnp.asarray(a).at[:, np.array([2, 0])].set(1.0), ref)


def test_split(rng):
    a = sample(rng, (6, 4))
    for got, want in zip(tnp.split(tnp.asarray(a), 3), np.split(a, 3)):
        close(got, want)
    for got, want in zip(tnp.split(tnp.asarray(a), [1, 3], axis=1), np.split(a, [1, 3], axis=1)):
        close(got, want)
    with pytest.raises(ValueError):
        tnp.split(tnp.asarray(a), 4)


def test_asarray_stacks_sequences_of_arrays(rng):
    a, b = sample(rng, (3,)), sample(rng, (3,))
    close(tnp.asarray([tnp.asarray(a), tnp.asarray(b)]), np.stack([a, b]))
    close(tessera.jit(lambda x: tnp.asarray([[x, x * 2]]))(tnp.asarray(a)), np.stack([[a, a * 2]]))
    with pytest.raises(TypeError):
        hash(tnp.asarray(a))


def test_the_remaining_functions(rng):
    a = sample(rng, (4, 5))
    b = sample(rng, (4, 5)) + 4.0
    i = rng.integers(-50, 50, (4, 5)).astype(np.int32)
    j = rng.integers(1, 7, (4, 5)).astype(np.int32)
    x, y, ix, jx = tnp.asarray(a), tnp.asarray(b), tnp.asarray(i), tnp.asarray(j)
    close(tnp.exp2(x), np.exp2(a), rtol=2e-5)
    close(tnp.round(x * 3), np.round(a * 3))
    with np.errstate(divide="ignore"):
        close(tnp.isfinite(x / tnp.asarray(np.where(a > 0, 0.0, 1.0).astype(np.float32))),
              np.isfinite(a / np.where(a > 0, 0.0, 1.0)))
    close(tnp.remainder(ix, jx), np.remainder(i, j))
    close(tnp.mod(x, 0.7), np.mod(a, np.float32(0.7)), atol=1e-5)
    close(tnp.reciprocal(y), np.reciprocal(b))
    close(tnp.positive(x), a)
    close(tnp.logical_and(x > 0, y > 4), np.logical_and(a > 0, b > 4))
    close(tnp.logical_or(x > 0, y > 4), np.logical_or(a > 0, b > 4))
    close(tnp.logical_not(x > 0), np.logical_not(a > 0))
    close(tnp.bitwise_and(ix, jx), np.bitwise_and(i, j))
    close(tnp.bitwise_or(ix, jx), np.bitwise_or(i, j))
    close(tnp.bitwise_xor(ix, jx), np.bitwise_xor(i, j))
    close(tnp.left_shift(ix, jx), np.left_shift(i, j))
    close(tnp.right_shift(ix, jx), np.right_shift(i, j))
    close(tnp.dot(x, y.T), np.dot(a, b.T), rtol=1e-5, atol=1e-5)
    close(tnp.dot(x, 2.0), a * 2)
    close(tnp.amax(x, axis=0), np.amax(a, axis=0))
    close(tnp.amin(x, axis=1), np.amin(a, axis=1))
    close(tnp.full_like(x, 3.0), np.full_like(a, 3.0))
    close(tnp.ones_like(ix), np.ones_like(i))
    idx = np.argsort(a, axis=1).astype(np.int32)
    close(tnp.take_along_axis(x, idx, axis=1), np.take_along_axis(a, idx, axis=1))
    close(tnp.astype(x, tnp.int32), a.astype(np.int32))


def test_remainder_and_floor_divide_follow_numpy_signs(rng):
    i = rng.integers(-50, 50, (30,)).astype(np.int32)
    j = rng.choice([-7, -3, -1, 1, 2, 5], (30,)).astype(np.int32)
    a = sample(rng, (30,)) * 5
    close(tnp.asarray(i) % tnp.asarray(j), i % j)
    close(tnp.asarray(i) // tnp.asarray(j), i // j)
    close(tnp.asarray(i) % 4, i % 4)
    close(7 // tnp.asarray(j), 7 // j)
    close(tnp.asarray(a) % -1.5, a % np.float32(-1.5), atol=1e-5)
    close(tnp.asarray(a) // 1.5, a // np.float32(1.5))


@pytest.mark.parametrize("dtype,tol", [(tnp.float32, 1e-6), (tnp.float16, 2e-3), (tnp.bfloat16, 1.6e-2),
                                       (tnp.int32, 0)])
def test_dtypes_through_ops(rng, dtype, tol):
    """Each dtype against numpy in float64 on values the dtype holds exactly, rounded once at the end."""
    a = np.round(sample(rng, (3, 4)) * 4)
    b = np.round(sample(rng, (3, 4)) * 4)
    x, y = tnp.asarray(a, dtype), tnp.asarray(b, dtype)
    for got, want in [(x + y, a + b), (x * y, a * b), (tnp.maximum(x, y), np.maximum(a, b)), (-x, -a),
                      (tnp.sum(x, axis=1), a.sum(1)), (tnp.max(x, axis=0), a.max(0)),
                      (tnp.reshape(x, (4, 3)), a.reshape(4, 3)), (x.T, a.T), (x[1:, ::2], a[1:, ::2]),
                      (tnp.concatenate([x, y]), np.concatenate([a, b]))]:
        assert got.dtype == dtype
        np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=tol, atol=tol)
    assert (x < y).dtype == tnp.bool_


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_cumsum_cumprod(rng, axis):
    x = rng.uniform(0.5, 1.5, (4, 6)).astype(np.float32)
    close(tnp.cumsum(tnp.asarray(x), axis=axis), np.cumsum(x, axis=axis), rtol=1e-5)
    close(tnp.cumprod(tnp.asarray(x), axis=axis), np.cumprod(x, axis=axis), rtol=1e-5)
    xi = rng.integers(-3, 4, (4, 6)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(tnp.cumsum(tnp.asarray(xi), axis=axis)), np.cumsum(xi, axis=axis))


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_all_any(rng, axis, keepdims):
    b = rng.random((3, 4, 5)) < 0.8
    np.testing.assert_array_equal(np.asarray(tnp.all(tnp.asarray(b), axis=axis, keepdims=keepdims)),
                                  np.all(b, axis=axis, keepdims=keepdims))
    np.testing.assert_array_equal(np.asarray(tnp.any(tnp.asarray(~b), axis=axis, keepdims=keepdims)),
                                  np.any(~b, axis=axis, keepdims=keepdims))
    # Numbers are tested against zero, as numpy does.
    x = rng.integers(0, 3, (3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(tnp.all(tnp.asarray(x), axis=axis)), np.all(x, axis=axis))
    np.testing.assert_array_equal(np.asarray(tnp.any(tnp.asarray(x), axis=axis)), np.any(x, axis=axis))


def test_square_keeps_integer_dtype():
    x = np.array([-3, 0, 7], dtype=np.int32)
    out = np.asarray(tnp.square(tnp.asarray(x)))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.square(x))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_sort_argsort(rng, axis):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    x[1, 2] = x[3, 4] = np.nan
    x[2, :3] = 0.5  # ties: argsort is stable, as numpy's kind="stable"
    np.testing.assert_array_equal(np.asarray(tnp.sort(tnp.asarray(x), axis=axis)), np.sort(x, axis=axis))
    np.testing.assert_array_equal(np.asarray(tnp.argsort(tnp.asarray(x), axis=axis)),
                                  np.argsort(x, axis=axis, kind="stable"))


def test_numpy_constants_and_transpose_spellings():
    x = tnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    for t in (x.transpose(), x.transpose(1, 0), x.transpose((1, 0)), x.T):
        assert np.array_equal(np.asarray(t), np.arange(6, dtype=np.float32).reshape(2, 3).T)
    assert tnp.inf == np.inf and np.isnan(tnp.nan) and tnp.pi == np.pi and tnp.e == np.e and tnp.newaxis is None
    assert np.asarray(tnp.where(x > 2, x, -tnp.inf))[0, 0] == -np.inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16])
def test_long_sorts_match_numpy_stable_order(rng, dtype):
    # Long lines take the integer-key path (a radix sort from 2048 elements): NaNs, -0.0 beside 0.0, infinities
    # and many ties must land where numpy's stable sort puts them, and argsort must agree position for position.
    n = 50_000
    if np.issubdtype(dtype, np.floating):
        x = np.round(rng.standard_normal(n) * 20).astype(dtype)  # many ties
        x[rng.integers(0, n, 500)] = np.nan
        x[rng.integers(0, n, 300)] = -0.0
        x[rng.integers(0, n, 300)] = 0.0
        x[:3] = [np.inf, -np.inf, np.nan]
    else:
        x = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(dtype)
        x[:1000] = x[1000:2000]  # ties
        x[0], x[1] = np.iinfo(dtype).min, np.iinfo(dtype).max
    got = np.asarray(tnp.sort(tnp.asarray(x)))
    np.testing.assert_array_equal(got, np.sort(x, kind="stable"))
    np.testing.assert_array_equal(np.asarray(tnp.argsort(tnp.asarray(x))), np.argsort(x, kind="stable"))
    # 2-D along each axis: lines are sorted independently.
    m = x[: 4 * 4096].reshape(4, 4096)
    for axis in (0, 1):
        np.testing.assert_array_equal(np.asarray(tnp.argsort(tnp.asarray(m), axis=axis)),
                                      np.argsort(m, axis=axis, kind="stable"))


def test_negative_integer_array_indices_count_from_the_end(rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    x = tnp.asarray(a)
    idx = np.array([-1, 0, -5, 2], dtype=np.int32)
    close(x[tnp.asarray(np.int32(-1))], a[-1])
    close(x[tnp.asarray(idx[:3] % 4 - 4)], a[idx[:3] % 4 - 4])
    close(x[:, tnp.asarray(idx)], a[:, idx])
    close(x[:, list(idx)], a[:, idx])
    close(x.at[:, tnp.asarray(idx)].get(), a[:, idx])
    close(tnp.take(x, tnp.asarray(idx)), np.take(a, idx))
    close(tnp.take(x, tnp.asarray(idx), axis=1), np.take(a, idx, axis=1))
    along = np.array([[-1], [0], [-2], [4]], dtype=np.int32)
    close(tnp.take_along_axis(x, tnp.asarray(along), 1), np.take_along_axis(a, along, 1))
    close(tessera.jit(lambda x, i: x[:, i])(x, tnp.asarray(idx)), a[:, idx])
    close(tessera.vmap(lambda i: x[i])(tnp.asarray(np.array([-1, -4, 3], np.int32))), a[[-1, -4, 3]])
    # A traced loop counter indexing from the end: digits of x reversed.
    v = np.arange(5, dtype=np.float32)
    out = tessera.lax.fori_loop(0, 5, lambda i, c: c * 10 + tnp.asarray(v)[-i - 1], 0.0)
    assert float(out) == float("".join(str(int(d)) for d in v[::-1]))


def test_true_divide_of_integers_gives_floats():
    a = np.array([1, 2, 3, -7], dtype=np.int32)
    b = np.array([2, 4, 2, 2], dtype=np.int32)
    x, y = tnp.asarray(a), tnp.asarray(b)
    for got, expected in [(x / 2, a / 2), (1 / x, 1 / a), (x / y, a / b), (tnp.true_divide(x, y), np.true_divide(a, b)),
                          (tnp.divide(x, 2), np.divide(a, 2)), (x / 2.5, a / 2.5),
                          (tessera.jit(lambda p, q: p / q)(x, y), a / b), (tnp.reciprocal(x), 1 / a),
                          (tnp.asarray([True, False]) / 2, np.array([True, False]) / 2)]:
        assert np.asarray(got).dtype == np.float32
        close(got, expected.astype(np.float32))
    assert np.asarray(x // y).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(x // y), a // b)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "all", "any", "var", "squeeze"])
def test_axis_empty_tuple_reduces_nothing(rng, name):
    a = rng.standard_normal((2, 1, 3)).astype(np.float32)
    for axis in ((), []):
        got, expected = getattr(tnp, name)(tnp.asarray(a), axis=axis), getattr(np, name)(a, axis=tuple(axis))
        close(got, expected)
        if name not in ("all", "any", "var", "squeeze"):
            close(getattr(tnp, name)(tnp.asarray(a), axis=axis, keepdims=True), getattr(np, name)(a, axis=(), keepdims=True))
    if name == "mean":
        i = np.array([1, 2], np.int32)
        got = tnp.mean(tnp.asarray(i), axis=())
        assert np.asarray(got).dtype == np.float32
        close(got, np.mean(i, axis=()))


def test_round_takes_halves_to_even():
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51, 0.0, 1e8, np.inf, -np.inf], dtype=np.float32)
    got = np.asarray(tnp.round(tnp.asarray(a)))
    np.testing.assert_array_equal(got, np.round(a))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.round(a)))  # -0.5 -> -0
    assert np.isnan(np.asarray(tnp.round(tnp.asarray(np.float32(np.nan)))))
    np.testing.assert_array_equal(np.asarray(round(tnp.asarray(a))), np.round(a))
    np.testing.assert_array_equal(np.asarray(tessera.jit(tnp.round)(tnp.asarray(a))), np.round(a))
    for dtype in (tnp.float16, tnp.bfloat16):
        h = np.array([0.5, 1.5, 2.5, -2.5, 6.5], np.float32)
        np.testing.assert_array_equal(np.asarray(tnp.round(tnp.asarray(h, dtype=dtype))).astype(np.float32), np.round(h))
    i = np.array([3, -4], np.int32)
    np.testing.assert_array_equal(np.asarray(tnp.round(tnp.asarray(i))), i)
    assert np.asarray(tnp.round(tnp.asarray(i))).dtype == np.int32


@pytest.mark.parametrize("decimals", [1, 2, -1, -2])
def test_round_with_decimals(rng, decimals):
    # numpy's float32 round scales, rounds halves to even and scales back, as jax.numpy does.
    a = np.concatenate([(rng.standard_normal(50) * 300).astype(np.float32),
                        np.array([0.25, 0.35, 2.675, -0.125, 125.0, 135.0, 250.0, -350.0], np.float32)])
    close(tnp.round(tnp.asarray(a), decimals), np.round(a, decimals), rtol=1e-6, atol=0)
    close(round(tnp.asarray(a), decimals), np.round(a, decimals), rtol=1e-6, atol=0)


def test_bools_are_counted_by_sum_and_cumsum():
    b = np.array([[True, False, True], [True, True, False]])
    x = tnp.asarray(b)
    for got, expected in [(tnp.sum(x), np.sum(b)), (tnp.sum(x, axis=0), np.sum(b, axis=0)), (x.sum(axis=1), b.sum(1)),
                          (tnp.cumsum(x), np.cumsum(b)), (tnp.cumsum(x, axis=1), np.cumsum(b, axis=1)),
                          (tnp.prod(x, axis=1), np.prod(b, axis=1)), (tnp.sum(x, axis=()), np.sum(b, axis=())),
                          (tessera.jit(tnp.sum)(x), np.sum(b))]:
        assert np.asarray(got).dtype == np.int32
        np.testing.assert_array_equal(np.asarray(got), expected)


@pytest.mark.parametrize("key", [slice(5, None), slice(3, 1), slice(None, 0), slice(2, 2), (slice(1, 1), 0)])
def test_at_with_an_empty_region_changes_nothing(rng, key):
    a = rng.standard_normal((5, 2)).astype(np.float32)
    x = tnp.asarray(a)
    for op in ("set", "add", "mul", "min", "max"):
        np.testing.assert_array_equal(np.asarray(getattr(x.at[key], op)(1.0)), a)
    assert np.asarray(x.at[key].get()).shape == a[key].shape


@pytest.mark.parametrize("name", ["sqrt", "exp", "exp2", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh"])
def test_transcendentals_take_integers_as_float32(name):
    a = np.array([1, 2, 4, 9], dtype=np.int32)
    got = getattr(tnp, name)(tnp.asarray(a))
    assert np.asarray(got).dtype == np.float32
    close(got, getattr(np, name)(a.astype(np.float32)), rtol=2e-6)
    close(getattr(tnp, name)(tnp.asarray(np.array([True]))), getattr(np, name)(np.array([1.0], np.float32)))
    close(tnp.arctan2(tnp.asarray(a), 3), np.arctan2(a, 3).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(tnp.floor(tnp.asarray(a))), a)
    np.testing.assert_array_equal(np.asarray(tnp.isfinite(tnp.asarray(a))), np.isfinite(a))


def test_integer_power_stays_integer():
    a = np.array([0, 1, -1, 2, 3, -3, 7], dtype=np.int32)
    e = np.array([0, 40, 33, 30, 5, 3, 2], dtype=np.int32)
    x = tnp.asarray(a)
    for got, expected in [(x ** 2, a ** 2), (x ** 0, a ** 0), (2 ** tnp.asarray(e[:4]), 2 ** e[:4]),
                          (x ** tnp.asarray(e), a ** e), (tnp.power(x, tnp.asarray(e)), np.power(a, e)),
                          (tessera.jit(lambda p, q: p ** q)(x, tnp.asarray(e)), a ** e),
                          (tnp.power(x, 3), np.power(a, 3))]:
        assert np.asarray(got).dtype == np.int32
        np.testing.assert_array_equal(np.asarray(got), expected)
    # 0 ** 64: the exponent's low 6 bits are zero, the result still 0 (the multiply loop starts from 0).
    np.testing.assert_array_equal(np.asarray(tnp.asarray([0, 1, -1]) ** tnp.asarray([64, 64, 65])), [0, 1, -1])
    # Negative exponents of an integer array: 1 // x ** |e| (XLA's integer pow); numpy raises for them.
    np.testing.assert_array_equal(np.asarray(tnp.asarray([1, -1, -1, 2, 5]) ** tnp.asarray([-3, -3, -2, -1, -2])),
                                  [1, -1, 1, 0, 0])
    with pytest.raises(ValueError, match="negative integer powers"):
        x ** -1
    root = tnp.asarray([4, 9]) ** 0.5  # a float exponent: float32, as numpy's int ** float
    assert np.asarray(root).dtype == np.float32
    close(root, np.array([2.0, 3.0], np.float32))
