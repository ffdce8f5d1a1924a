"""tessera.lax's elementwise, shape and indexing functions (tessera/_lax_ops.py) against numpy and hand
values: XLA's clamping of dynamic slices, C's integer division and shifts, switch and map under jit, vmap
and grad."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax


def _same(got, want):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6, atol=1e-7, equal_nan=True)


def test_lax_names_do_not_shadow_builtins_inside_the_module():
    assert lax.abs is not abs and lax.map is not map
    assert "dynamic_slice" in lax.__all__ and "dynamic_slice" in dir(lax)
    with pytest.raises(AttributeError):
        lax.no_such_function  # noqa: B018


def test_integer_div_and_rem_round_towards_zero():
    a, b = np.array([7, -7, 9, -1], np.int32), np.array([2, 2, -4, 3], np.int32)
    _same(lax.div(a, b), [3, -3, -2, 0])
    _same(lax.rem(a, b), np.fmod(a, b))


def test_shifts():
    x = np.array([-8, 8, -1], np.int32)
    _same(lax.shift_right_arithmetic(x, 1), [-4, 4, -1])
    _same(lax.shift_right_logical(x, 1), (x.view(np.uint32) >> 1).view(np.int32))
    _same(lax.shift_left(x, 2), x << 2)
    u = np.array([200, 7], np.uint8)
    _same(lax.shift_right_arithmetic(u, tnp.asarray(np.array([1, 1], np.uint8))), (u.view(np.int8) >> 1).view(np.uint8))


def test_round_clamp_select():
    x = np.array([0.5, 1.5, -0.5, 2.5, -2.7], np.float32)
    _same(lax.round(x), [1.0, 2.0, -1.0, 3.0, -3.0])  # halves away from zero
    _same(lax.round(x, 1), [0.0, 2.0, -0.0, 2.0, -3.0])  # to even
    _same(lax.clamp(-1.0, x, 1.0), np.clip(x, -1, 1))
    _same(lax.select_n(np.array([0, 2, 1]), x[:3], x[:3] * 10, x[:3] * 100), [0.5, 150.0, -5.0])
    _same(lax.select(np.array([True, False]), x[:2], x[2:4]), [0.5, 2.5])


def test_shape_functions_match_numpy():
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    _same(lax.broadcast_in_dim(x[0, :, 0], (2, 3, 4), (1,)), np.broadcast_to(x[0, :, 0][None, :, None], (2, 3, 4)))
    _same(lax.broadcast(x[0, 0], (2,)), np.broadcast_to(x[0, 0], (2, 4)))
    _same(lax.reshape(x[0], (12,), dimensions=(1, 0)), x[0].T.reshape(12))
    _same(lax.rev(x, (0, 2)), x[::-1, :, ::-1])
    _same(lax.pad(x[0, 0], -1.0, [(1, 2, 1)]), [-1, 0, -1, 1, -1, 2, -1, 3, -1, -1])
    _same(lax.slice(x, (0, 1, 0), (2, 3, 4), (1, 1, 3)), x[:, 1:3, ::3])
    _same(lax.slice_in_dim(x, -2, None, axis=1), x[:, -2:])
    _same(lax.reduce_sum(x, (0, 2)), x.sum((0, 2)))
    _same(lax.reduce_max(x, (1,)), x.max(1))
    _same(lax.argmax(x, 2, np.int32), x.argmax(2))
    _same(lax.cummin(np.array([5, 3, 9, 1], np.int32)), [5, 3, 3, 1])
    _same(lax.cummin(np.array([5, 3, 9, 1, 200], np.uint8), reverse=True), [1, 1, 1, 1, 200])
    _same(lax.iota(np.int32, 4), np.arange(4))
    _same(lax.dot(x[0], x[0, 0]), x[0] @ x[0, 0])


def test_dynamic_slice_clamps_and_counts_negative_starts_from_the_end():
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    _same(lax.dynamic_slice(x, (1, 2), (2, 2)), x[1:3, 2:4])
    _same(lax.dynamic_slice(x, (5, -3), (2, 2)), x[1:3, 1:3])  # 5 clamped to 1; -3 is 1
    _same(lax.dynamic_index_in_dim(x, -1, axis=0), x[2:3])
    _same(lax.dynamic_index_in_dim(x, 2, axis=1, keepdims=False), x[:, 2])
    traced = tessera.jit(lambda a, s: lax.dynamic_slice(a, (s, s), (2, 2)))(x, np.int32(2))
    _same(traced, x[1:3, 2:4])  # (2, 2) clamped to (1, 2)
    batched = tessera.vmap(lambda a, s: lax.dynamic_slice(a, (s,), (2,)))(x, np.array([0, 3, 1], np.int32))
    _same(batched, [x[0, 0:2], x[1, 2:4], x[2, 1:3]])
    g = tessera.grad(lambda a: (lax.dynamic_slice(a, (tnp.asarray(1),), (2,)) ** 2).sum())(x[0])
    _same(g, [0.0, 2.0, 4.0, 0.0])


def test_dynamic_update_slice():
    x = np.zeros((3, 4), np.float32)
    u = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    want = x.copy()
    want[1:3, 2:4] = u
    _same(lax.dynamic_update_slice(x, u, (1, 2)), want)
    _same(lax.dynamic_update_slice(x, u, (7, -1)), want)  # 7 clamped to 1, -1 is 3, clamped to 2
    traced = tessera.jit(lambda a, b, s: lax.dynamic_update_slice(a, b, (s, 0)))(x, np.ones((1, 4), np.float32), np.int32(2))
    want = x.copy()
    want[2] = 1
    _same(traced, want)
    ga, gb = tessera.grad(lambda a, b: (lax.dynamic_update_slice(a, b, (tnp.asarray(1),)) * np.arange(5.0)).sum(),
                          argnums=(0, 1))(np.ones(5, np.float32), np.ones(2, np.float32))
    _same(ga, [0, 0, 0, 3, 4])
    _same(gb, [1, 2])
    v = tessera.vmap(lambda a, b, s: lax.dynamic_update_slice(a, b, (s,)))(np.zeros((2, 3), np.float32),
                                                                           np.ones((2, 1), np.float32), np.array([2, 0]))
    _same(v, [[0, 0, 1], [1, 0, 0]])
    _same(lax.dynamic_update_index_in_dim(x, np.ones(4, np.float32), 2, 0), np.vstack([x[:2], np.ones((1, 4))]))


def test_switch_and_map():
    branches = [lambda a: a + 1, lambda a: a * 2, lambda a: -a]
    x = np.array([1.0, 2.0], np.float32)
    for k, want in [(0, x + 1), (1, x * 2), (2, -x), (7, -x), (-3, x + 1)]:
        _same(lax.switch(k, branches, x), want)
    _same(tessera.jit(lambda a, k: lax.switch(k, branches, a))(x, np.int32(1)), x * 2)
    _same(tessera.vmap(lambda a, k: lax.switch(k, branches, a))(np.stack([x, x, x]), np.array([0, 2, 1])),
          [x + 1, -x, x * 2])
    _same(lax.map(lambda v: v.sum() * v, np.arange(6.0, dtype=np.float32).reshape(3, 2)),
          [[0, 1], [10, 15], [36, 45]])
    assert lax.sort_key_val(np.array([3.0, 1.0, 2.0]), np.array([0, 1, 2]))[1].tolist() == [1, 2, 0]


def test_more_lax_functions_against_numpy_and_math():
    import math
    x = np.array([-3, -0.5, 0, 0.1, 1, 2, 3, 4, 6, 9], np.float32)
    want = np.array([math.erfc(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(np.asarray(lax.erfc(x)), want, rtol=3e-7 * 10)  # the tail keeps its digits
    np.testing.assert_allclose(np.asarray(lax.reciprocal(x[4:])), 1 / x[4:], rtol=1e-7)
    for name, ref in [("acosh", np.arccosh), ("asinh", np.arcsinh), ("atanh", np.arctanh), ("cbrt", np.cbrt)]:
        v = np.array([1.5, 2.0, 10.0], np.float32) if name == "acosh" else np.array([-0.5, 0.1, 0.9], np.float32)
        np.testing.assert_allclose(np.asarray(getattr(lax, name)(v)), ref(v), rtol=2e-6)
    ints = np.array([0, 1, 7, 255, -1, 2 ** 31 - 1, 2 ** 20, 12345], np.int32)
    np.testing.assert_array_equal(np.asarray(lax.population_count(ints)),
                                  [bin(int(v) & 0xFFFFFFFF).count("1") for v in ints])
    np.testing.assert_array_equal(np.asarray(lax.clz(ints)), [32 - (int(v) & 0xFFFFFFFF).bit_length() for v in ints])
    z = np.array([0, 1, 14, 16, 100, 1000], np.float32)
    z64 = z[:5].astype(np.float64)
    np.testing.assert_allclose(np.asarray(lax.bessel_i0e(z)[:5]), np.i0(z64) * np.exp(-z64),
                               rtol=2e-6)
    assert np.isfinite(np.asarray(lax.bessel_i0e(z))).all()
    a = np.arange(24).reshape(2, 3, 4).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(lax.index_take(a, (np.array([0, 2]), np.array([1, 3])), (1, 2))),
                                  np.moveaxis(a, 0, -1)[[0, 2], [1, 3]])
    np.testing.assert_array_equal(np.asarray(lax.index_in_dim(a, -1, axis=2, keepdims=False)), a[:, :, -1])
    np.testing.assert_array_equal(np.asarray(lax.collapse(a, 1)), a.reshape(2, 12))
    np.testing.assert_array_equal(np.asarray(lax.broadcasted_iota("int32", (2, 3), 1)), np.tile(np.arange(3), (2, 1)))
    assert lax.broadcast_to_rank(np.ones(3, np.float32), 3).shape == (1, 1, 3)
    pieces = lax.split(a, [1, 3], axis=2)
    np.testing.assert_array_equal(np.asarray(pieces[1]), a[:, :, 1:])
    b = np.array([[True, True, False], [True, False, False]])
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(b, (1,))), np.logical_xor.reduce(b, axis=1))
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(a, (2,))), np.bitwise_xor.reduce(a, axis=2))
    np.testing.assert_array_equal(np.asarray(lax.reduce_and(b, (1,))), b.all(1))
    np.testing.assert_array_equal(np.asarray(lax.reduce_or(b, (0,))), b.any(0))
    m = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(lax.batch_matmul(m, np.swapaxes(m, 1, 2))), m @ np.swapaxes(m, 1, 2),
                               rtol=1e-5)
    v, i = lax.approx_min_k(m[0], 2)
    np.testing.assert_allclose(np.asarray(v), np.sort(m[0], axis=-1)[:, :2], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(lax.scatter_sub(np.zeros(4, np.float32), np.array([1, 1, 3]),
                                                             np.ones(3, np.float32))), [0, -2, 0, -1])


def test_lax_names_of_numpy_and_scipy_functions():
    x = np.linspace(0.1, 4.0, 9).astype(np.float32)
    # closed forms: P(1, x) = 1 - e^-x, Q(1, x) = e^-x, I_x(2, 1) = x^2
    np.testing.assert_allclose(np.asarray(lax.igamma(np.float32(1.0), x)), 1 - np.exp(-x.astype(np.float64)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(lax.igammac(np.float32(1.0), x)), np.exp(-x.astype(np.float64)), rtol=1e-5)
    u = x / 4.5
    np.testing.assert_allclose(np.asarray(lax.betainc(np.float32(2.0), np.float32(1.0), u)), u.astype(np.float64) ** 2,
                               rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(lax.nextafter(x, np.float32(0))), np.nextafter(x, np.float32(0)))
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(lax.stack([m, 2 * m], 1)), np.stack([m, 2 * m], 1))
    parts = tessera.jit(lambda v: lax.unstack(v, 1))(m)
    assert len(parts) == 3
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(np.asarray(p), m[:, i])
    np.testing.assert_array_equal(np.asarray(lax.broadcast_like(np.float32(2), m)), np.full((2, 3), 2, np.float32))
    assert lax.empty(np.int32).shape == () and lax.empty(np.int32).dtype == np.int32
