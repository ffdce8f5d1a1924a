"""Where tessera follows JAX rather than numpy (or fixed a difference from both): dtype promotion, pytree node
types, Flax's merge_param, and the elementwise, reduction and gather edge cases. References are numpy or
values worked out by hand; the promotion lattice is JAX's, written out here independently of the engine's."""
import collections

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import nn, random, tree_util

# ---- type promotion -----------------------------------------------------------------------------------

# JAX's type lattice (jax/_src/dtypes.py, _type_promotion_lattice), restricted to the kinds the engine has plus
# the ones they pass through: each type with the types directly above it. "i*" and "f*" are the weak (Python
# scalar) int and float.
_LATTICE = {
    "bool": ["i*"], "i*": ["u8", "i8"], "u8": ["u16", "i16"], "u16": ["u32", "i32"], "u32": ["u64", "i64"],
    "i8": ["i16"], "i16": ["i32"], "i32": ["i64"], "i64": ["f*"], "u64": ["f*"], "f*": ["bf16", "f16"],
    "bf16": ["f32"], "f16": ["f32"], "f32": ["f64"], "f64": [],
}


def _upper_set(t):
    seen, todo = {t}, [t]
    while todo:
        for up in _LATTICE[todo.pop()]:
            if up not in seen:
                seen.add(up)
                todo.append(up)
    return seen


def _jax_promote(a, b):
    """The least upper bound of a and b in JAX's lattice, then x64-off canonicalisation (i64 -> i32, u64 ->
    u32, f64 -> f32) unless an operand is itself 64-bit (the engine has i64 and f64 arrays; there it follows
    JAX's x64 mode)."""
    common = _upper_set(a) & _upper_set(b)
    lub = next(t for t in common if _upper_set(t) == common)
    if lub in ("i64", "u64", "f64") and lub not in (a, b):
        lub = {"i64": "i32", "u64": "u32", "f64": "f32"}[lub]
    return lub


_DTYPES = ["bool", "u8", "u32", "i32", "i64", "f16", "bf16", "f32", "f64"]
_PUBLIC = {"bool": "bool", "u8": "uint8", "u32": "uint32", "i32": "int32", "i64": "int64", "f16": "float16",
           "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def _zeros(t):
    return tnp.zeros((2,), "int32").astype(_PUBLIC[t])


def test_the_reference_lattice_gives_jaxs_documented_results():
    # jnp.promote_types with x64 off: the table in JAX's type promotion docs.
    assert _jax_promote("u32", "i32") == "i32"
    assert _jax_promote("u8", "i32") == "i32"
    assert _jax_promote("bf16", "f16") == "f32"
    assert _jax_promote("i32", "f16") == "f16"
    assert _jax_promote("bool", "u8") == "u8"
    assert _jax_promote("u32", "i64") == "i64"


@pytest.mark.parametrize("a", _DTYPES)
@pytest.mark.parametrize("b", _DTYPES)
def test_binary_ops_promote_every_pair_as_jax(a, b):
    want = _PUBLIC[_jax_promote(a, b)]
    x, y = _zeros(a), _zeros(b)
    assert str(tnp.promote_types(_PUBLIC[a], _PUBLIC[b])) == want
    assert str(tnp.result_type(x, y)) == want
    assert str((x - y).dtype if "bool" not in (a, b) else (x * y).dtype) == want
    assert str(tnp.maximum(x, y).dtype) == want
    assert str(tnp.where(True, x, y).dtype) == want
    assert str(tnp.concatenate([x, y]).dtype) == want


@pytest.mark.parametrize("t", _DTYPES)
@pytest.mark.parametrize("scalar, kind", [(True, "bool"), (2, "i*"), (1.5, "f*")])
def test_python_scalars_are_weak(t, scalar, kind):
    want = _PUBLIC[{"i*": "i32", "f*": "f32"}.get(_jax_promote(t, kind), _jax_promote(t, kind))]  # weak: default type
    x = _zeros(t)
    assert str(tnp.result_type(x, scalar)) == want
    assert str(tnp.result_type(scalar, x)) == want
    if t != "bool" or kind != "bool":
        assert str(tnp.add(x, scalar).dtype) == want
        assert str(tnp.maximum(scalar, x).dtype) == want


def test_result_type_of_scalars_and_numpy_arrays():
    assert tnp.result_type(1) == tnp.int32
    assert tnp.result_type(1, 2.0) == tnp.float32
    assert tnp.result_type(True, False) == tnp.bool_
    assert tnp.result_type(np.zeros(2, np.float64)) == tnp.float32  # as asarray makes it (x64 off)
    assert tnp.result_type(np.zeros(2, np.uint8), 300) == tnp.uint8
    assert tnp.result_type("bfloat16", np.float16) == tnp.float32


def test_uint32_with_int32_is_int32_and_wraps_as_jax():
    u = tnp.asarray(np.array([3_000_000_000, 5], np.uint32))
    i = tnp.asarray(np.array([0, -7], np.int32))
    r = u + i
    assert r.dtype == tnp.int32
    np.testing.assert_array_equal(np.asarray(r), [3_000_000_000 - 2**32, -2])


def test_clip_of_a_python_scalar_takes_the_bounds_dtype():
    lo = tnp.asarray(np.array([0, 3], np.uint8))
    r = tnp.clip(1, lo, 200)
    assert r.dtype == tnp.uint8
    np.testing.assert_array_equal(np.asarray(r), [1, 3])
    assert tnp.clip(2.5, tnp.zeros(2, tnp.bfloat16), 1.0).dtype == tnp.bfloat16


# ---- bool and unsigned operands -----------------------------------------------------------------------


def test_maximum_and_minimum_of_bools_are_or_and_and():
    a = tnp.asarray([True, True, False, False])
    b = tnp.asarray([True, False, True, False])
    assert tnp.maximum(a, b).dtype == tnp.bool_
    np.testing.assert_array_equal(np.asarray(tnp.maximum(a, b)), [True, True, True, False])
    np.testing.assert_array_equal(np.asarray(tnp.minimum(a, b)), [True, False, False, False])
    np.testing.assert_array_equal(np.asarray(tnp.clip(a, False, False)), [False] * 4)


def test_remainder_and_floor_divide_of_bools_give_int32():
    a = tnp.asarray([True, True, False])
    b = tnp.asarray([True, True, True])
    assert tnp.remainder(a, b).dtype == tnp.int32
    np.testing.assert_array_equal(np.asarray(tnp.remainder(a, b)), [0, 0, 0])
    np.testing.assert_array_equal(np.asarray(tnp.floor_divide(a, b)), [1, 1, 0])


def test_integer_power_of_unsigned_and_bool_bases():
    base = tnp.asarray(np.array([2, 3, 1, 0, 16], np.uint8))
    e = tnp.asarray(np.array([3, 2, 7, 0, 2], np.uint8))
    r = base ** e
    assert r.dtype == tnp.uint8
    np.testing.assert_array_equal(np.asarray(r), np.array([8, 9, 1, 1, 0], np.uint8))  # 16**2 wraps to 0
    r = tnp.power(tnp.asarray([True, False]), tnp.asarray(np.array([2, 0], np.uint8)))
    assert r.dtype == tnp.uint8
    np.testing.assert_array_equal(np.asarray(r), [1, 1])
    assert (tnp.asarray(np.array([3], np.uint32)) ** 3).dtype == tnp.uint32


def test_abs_and_sign_of_unsigned():
    u = tnp.asarray(np.array([0, 7, 255], np.uint8))
    assert tnp.abs(u).dtype == tnp.uint8
    np.testing.assert_array_equal(np.asarray(abs(u)), [0, 7, 255])
    np.testing.assert_array_equal(np.asarray(tnp.sign(u)), np.array([0, 1, 1], np.uint8))
    np.testing.assert_array_equal(np.asarray(tnp.abs(tnp.asarray([True, False]))), [True, False])


def test_right_shift_is_logical_on_unsigned_and_arithmetic_on_signed():
    u = tnp.asarray(np.array([240, 17], np.uint8))
    np.testing.assert_array_equal(np.asarray(tnp.right_shift(u, 1)), np.right_shift(np.array([240, 17], np.uint8), 1))
    w = tnp.asarray(np.array([0xFFFFFFF8], np.uint32))
    np.testing.assert_array_equal(np.asarray(w >> 1), [0x7FFFFFFC])
    s = tnp.asarray(np.array([-8, 8], np.int32))
    np.testing.assert_array_equal(np.asarray(s >> 1), [-4, 4])
    np.testing.assert_array_equal(np.asarray(s << 2), [-32, 32])
    np.testing.assert_array_equal(np.asarray(1 << tnp.asarray([0, 3])), [1, 8])
    assert tnp.left_shift(tnp.asarray([True]), tnp.asarray([True])).dtype == tnp.int32


def test_reflected_bitwise_operators_and_divmod():
    x = tnp.asarray([1, 2, 3])
    np.testing.assert_array_equal(np.asarray(6 & x), [0, 2, 2])
    np.testing.assert_array_equal(np.asarray(4 | x), [5, 6, 7])
    np.testing.assert_array_equal(np.asarray(1 ^ x), [0, 3, 2])
    q, r = divmod(tnp.asarray([7, -7]), 2)
    np.testing.assert_array_equal(np.asarray(q), [3, -4])
    np.testing.assert_array_equal(np.asarray(r), [1, 1])


def test_logical_not_of_numbers_and_square_of_bools():
    np.testing.assert_array_equal(np.asarray(tnp.logical_not(tnp.asarray([0.0, 2.5, np.nan]))), [True, False, False])
    r = tnp.logical_not(tnp.asarray([0, 3, -1]))
    assert r.dtype == tnp.bool_
    np.testing.assert_array_equal(np.asarray(r), [True, False, False])
    np.testing.assert_array_equal(np.asarray(tnp.logical_xor(tnp.asarray([1, 0, 2]), 1)), [False, True, False])
    s = tnp.square(tnp.asarray([True, False]))
    assert s.dtype == tnp.int32
    np.testing.assert_array_equal(np.asarray(s), [1, 0])


# ---- division by zero and the float floor division -------------------------------------------------------


def test_integer_remainder_and_floor_divide_by_zero():
    a = tnp.asarray([5, -5, 0, 7])
    b = tnp.asarray([0, 0, 0, 2])
    # jax.numpy: remainder divides by 1 where the divisor is 0; floor_divide gives XLA's quotient -1, one less
    # where the dividend is not 0.
    np.testing.assert_array_equal(np.asarray(tnp.remainder(a, b)), [0, 0, 0, 1])
    np.testing.assert_array_equal(np.asarray(tnp.floor_divide(a, b)), [-2, -2, -1, 3])
    u = tnp.asarray(np.array([5, 0, 9], np.uint8))
    v = tnp.asarray(np.array([0, 0, 4], np.uint8))
    np.testing.assert_array_equal(np.asarray(u // v), [255, 255, 2])
    np.testing.assert_array_equal(np.asarray(u % v), [0, 0, 1])


def test_floor_divide_and_remainder_of_mixed_dtypes_promote_first():
    u = tnp.asarray(np.array([7, 9], np.uint8))
    t = tnp.asarray([True, False])
    assert (u % t).dtype == tnp.uint8
    np.testing.assert_array_equal(np.asarray(u % t), [0, 0])
    assert (u ** t).dtype == tnp.uint8
    f = tnp.asarray([7.5, -3.0])
    np.testing.assert_array_equal(np.asarray(f // t), [7.0, -np.inf])  # x // 0.0 is x / 0.0, as numpy
    np.testing.assert_array_equal(np.asarray(tnp.floor_divide(1.0, t)), [1.0, np.inf])


def test_float_floor_divide_matches_numpy_on_infinities():
    special = np.array([1.0, -1.0, np.inf, -np.inf, 3.5, -2.5, 0.5, np.nan], np.float32)
    a, b = special[:, None], special[None, :]
    with np.errstate(all="ignore"):
        want = np.floor_divide(a, b)
    got = np.asarray(tnp.floor_divide(tnp.asarray(a), tnp.asarray(b)))
    np.testing.assert_array_equal(got, want)  # inf // 1 is NaN, 1 // -inf is -1; NaNs compare equal here


# ---- reductions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [tnp.max, tnp.min, tnp.amax, tnp.ptp])
def test_max_of_an_empty_axis_raises(fn):
    with pytest.raises(ValueError, match="zero-size"):
        fn(tnp.zeros((2, 0)), axis=1)
    with pytest.raises(ValueError, match="zero-size"):
        fn(tnp.zeros((0,)))
    assert fn(tnp.zeros((2, 0)), axis=0).shape == (0,)  # reduces an axis that is not empty
    np.testing.assert_array_equal(np.asarray(tnp.max(tnp.zeros((0,)), initial=3.0)), 3.0)


def test_var_with_no_degrees_of_freedom_is_nan():
    x = tnp.asarray([1.0, 2.0, 4.0])
    assert np.isnan(float(tnp.var(x, ddof=3)))
    assert np.isnan(float(tnp.std(x, ddof=4)))
    np.testing.assert_allclose(float(tnp.var(x, ddof=2)), np.var([1.0, 2.0, 4.0], ddof=2), rtol=1e-6)
    r = tnp.var(tnp.asarray([[1.0, 2.0], [3.0, 5.0]]), axis=0, ddof=2)
    assert np.isnan(np.asarray(r)).all()


# ---- layout and gathers ---------------------------------------------------------------------------------


def test_concatenate_axis_none_flattens():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(2.0).reshape(2, 1)
    np.testing.assert_array_equal(np.asarray(tnp.concatenate([a, b], axis=None)), np.concatenate([a, b], axis=None))


def test_take_fills_out_of_range_indices_by_default():
    x = np.arange(15.0, dtype=np.float32).reshape(3, 5)
    i = np.array([0, -1, 7, -6], np.int32)
    got = np.asarray(tnp.take(x, i, axis=1))
    want = np.stack([x[:, 0], x[:, 4], np.full(3, np.nan), np.full(3, np.nan)], axis=1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(tnp.take(x, i, axis=-1, fill_value=-1.0))[0], [0, 4, -1, -1])
    ints = np.asarray(tnp.take(np.arange(4, dtype=np.int32), np.array([9, 1])))
    np.testing.assert_array_equal(ints, [-2**31, 1])
    np.testing.assert_array_equal(np.asarray(tnp.take(np.arange(4, dtype=np.uint8), np.array([9]))), [255])
    # "clip" clamps, negative indices to 0 (jax.numpy's); "wrap" takes them modulo the size.
    np.testing.assert_array_equal(np.asarray(tnp.take(x[0], i, mode="clip")), [0, 0, 4, 0])
    np.testing.assert_array_equal(np.asarray(tnp.take(x[0], i, mode="wrap")), [0, 4, 2, 4])
    with pytest.raises(ValueError):
        tnp.take(x, i, mode="raise")


def test_take_along_axis_fills_out_of_range_indices_by_default():
    x = np.arange(4.0, dtype=np.float32)
    got = np.asarray(tnp.take_along_axis(x, np.array([5, -1, -7], np.int32), axis=0))
    np.testing.assert_array_equal(got, [np.nan, 3.0, np.nan])
    got = np.asarray(tnp.take_along_axis(x, np.array([5, -1], np.int32), axis=0, mode="clip"))
    np.testing.assert_array_equal(got, [3.0, 3.0])


def test_softmax_over_several_axes():
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    e = np.exp(x - x.max())
    np.testing.assert_allclose(np.asarray(nn.softmax(x, axis=(0, 1))), e / e.sum(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(nn.softmax(x, axis=None)), e / e.sum(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(nn.log_softmax(x, axis=(0, 1))), np.log(e / e.sum()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(nn.softmax(x, axis=(1,))), np.asarray(nn.softmax(x, axis=1)), rtol=1e-6)


# ---- pytrees --------------------------------------------------------------------------------------------


class _MyDict(dict):
    pass


class _MyList(list):
    pass


class _MyOrderedDict(collections.OrderedDict):
    pass


_Pair = collections.namedtuple("_Pair", "a b")


class _PairChild(_Pair):
    pass


def test_unregistered_subclasses_of_dict_list_and_tuple_are_leaves():
    d = _MyDict(a=1, b=2)
    assert tree_util.tree_leaves(d) == [d]
    assert tree_util.tree_leaves([d, 3]) == [d, 3]
    lst = _MyList([1, 2])
    assert tree_util.tree_leaves(lst) == [lst]
    od = _MyOrderedDict(a=1)
    assert tree_util.tree_leaves(od) == [od]
    # The node types themselves, and namedtuples (subclassed too), stay nodes.
    assert tree_util.tree_leaves(collections.OrderedDict(b=1, a=2)) == [1, 2]
    assert tree_util.tree_leaves(collections.defaultdict(int, b=1, a=2)) == [2, 1]
    assert tree_util.tree_leaves(_PairChild(1, 2)) == [1, 2]


def test_a_registered_dict_subclass_is_a_node():
    class Registered(dict):
        pass

    tree_util.register_pytree_node(Registered, lambda x: (list(x.values()), tuple(x.keys())),
                                   lambda keys, values: Registered(zip(keys, values)))
    assert tree_util.tree_leaves(Registered(a=1, b=2)) == [1, 2]


def test_tree_map_takes_trees_with_the_first_as_a_prefix():
    out = tree_util.tree_map(lambda x, y: (x, y), [1, 2], [(3, 4), {"a": 5}])
    assert out == [(1, (3, 4)), (2, {"a": 5})]
    assert tree_util.tree_map(lambda x, y: y, [1, 2], [None, 3]) == [None, 3]
    with pytest.raises(ValueError):
        tree_util.tree_map(lambda x, y: x, [1, None], [2, 3])  # None is a node: it needs None there
    with pytest.raises(ValueError):
        tree_util.tree_map(lambda x, y: x, {"a": 1}, {"b": 1})
    with pytest.raises(ValueError):
        tree_util.tree_map(lambda x, y: x, {"a": 1}, _MyDict(a=1))


def test_jit_treats_a_dict_subclass_as_a_leaf():
    d = _MyDict(a=1)
    with pytest.raises(TypeError):
        tessera.jit(lambda t: t)(d)


# ---- Flax's merge_param ---------------------------------------------------------------------------------


def test_dropout_given_deterministic_twice_raises():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="deterministic"):
        nn.Dropout(0.5, deterministic=True).apply({}, x, deterministic=True)
    with pytest.raises(ValueError, match="deterministic"):
        nn.Dropout(0.5, deterministic=False).apply({}, x, deterministic=True)
    with pytest.raises(ValueError, match="deterministic"):
        nn.Dropout(0.5).apply({}, x)
    np.testing.assert_array_equal(np.asarray(nn.Dropout(0.5, deterministic=True).apply({}, x)), x)


def test_batchnorm_given_use_running_average_twice_raises():
    x = np.ones((4, 3), np.float32)
    variables = nn.BatchNorm(use_running_average=True).init(random.PRNGKey(0), x)
    with pytest.raises(ValueError, match="use_running_average"):
        nn.BatchNorm(use_running_average=True).apply(variables, x, use_running_average=True)
    with pytest.raises(ValueError, match="use_running_average"):
        nn.BatchNorm().apply(variables, x)
    np.testing.assert_allclose(np.asarray(nn.BatchNorm().apply(variables, x, use_running_average=True)),
                               x / np.sqrt(1 + 1e-5), rtol=1e-6)


def test_dropout_of_rate_one_gives_zeros_and_zero_gradients():
    x = np.ones((3,), np.float32)
    drop = nn.Dropout(1.0)
    rngs = {"dropout": random.PRNGKey(1)}
    np.testing.assert_array_equal(np.asarray(drop.apply({}, x, deterministic=False, rngs=rngs)), np.zeros(3))
    g = tessera.grad(lambda v: tnp.sum(drop.apply({}, v, deterministic=False, rngs=rngs)))(x)
    np.testing.assert_array_equal(np.asarray(g), np.zeros(3))


def test_several_integer_arrays_and_ints_index_as_numpy():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    j, k = np.array([0, 2, -1]), np.array([[1], [2]])
    for key in [(0, j), (slice(None), 0, j), (0, slice(None), j), (j, slice(1, 3), np.array([4, 0, 1])), (k, j),
                (slice(None), k, j), (k, slice(None), j), (slice(None, None, -1), j, 1), (Ellipsis, j, 0)]:
        want = x[key]
        got = np.asarray(tnp.asarray(x)[key])
        assert got.shape == want.shape, key
        np.testing.assert_array_equal(got, want)
    for key in [(None, j), (j, None), (None, slice(None), j), (k, None, j), (slice(None), None, k, j), (0, None, j),
                (Ellipsis, None, j), (None, Ellipsis, j, 0)]:  # with new axes
        want = x[key]
        got = np.asarray(tnp.asarray(x)[key])
        assert got.shape == want.shape, key
        np.testing.assert_array_equal(got, want)
    # Out of range: clamped, as JAX's gather (numpy raises).
    np.testing.assert_array_equal(np.asarray(tnp.asarray(x[:, :, 0])[np.array([0, 5]), np.array([-1, 1])]), [15, 45])
    g = tessera.grad(lambda v: tnp.sum(v[np.array([0, 0, 2]), np.array([1, 1, 3])] ** 2))(x[:, :, 0])
    want = np.zeros((3, 4), np.float32)
    want[0, 1], want[2, 3] = 2 * 2 * 5.0, 2 * 55.0
    np.testing.assert_array_equal(np.asarray(g), want)


# ---- jax.nn's other functions and arguments ---------------------------------------------------------------


def test_more_activations_match_their_formulas():
    x = np.array([-3.0, -0.5, 0.0, 0.5, 2.0, 7.0], np.float32)
    sp = np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)
    elu = np.where(x > 0, x, np.expm1(x))
    want = {
        "softplus": sp, "soft_sign": x / (np.abs(x) + 1), "log_sigmoid": -(np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)),
        "leaky_relu": np.where(x >= 0, x, 0.01 * x), "elu": elu, "celu": np.maximum(x, 0) + np.expm1(np.minimum(x, 0)),
        "selu": 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
        "relu6": np.clip(x, 0, 6), "hard_sigmoid": np.clip(x + 3, 0, 6) / 6, "hard_silu": x * np.clip(x + 3, 0, 6) / 6,
        "hard_tanh": np.clip(x, -1, 1), "tanh": np.tanh(x), "mish": x * np.tanh(sp),
        "squareplus": (x + np.sqrt(x * x + 4)) / 2,
    }
    for name, w in want.items():
        np.testing.assert_allclose(np.asarray(getattr(nn, name)(x)), w, rtol=1e-5, atol=1e-6, err_msg=name)
    y = np.arange(8.0, dtype=np.float32).reshape(2, 4) / 4
    np.testing.assert_allclose(np.asarray(nn.glu(y)), y[:, :2] / (1 + np.exp(-y[:, 2:])), rtol=1e-6)
    m, v = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(nn.standardize(y)), (y - m) / np.sqrt(v + 1e-5), rtol=1e-5, atol=1e-6)


def test_relu_of_bools_and_unsigned():
    assert nn.relu(tnp.asarray([True, False])).dtype == tnp.int32
    u = nn.relu(tnp.asarray(np.array([0, 200], np.uint8)))
    assert u.dtype == tnp.uint8
    np.testing.assert_array_equal(np.asarray(u), [0, 200])


def test_softmax_where_logsumexp_b_and_one_hot_axis():
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], np.float32)
    w = np.array([[1, 1, 0], [1, 0, 1]], bool)
    e = np.where(w, np.exp(x), 0)
    np.testing.assert_allclose(np.asarray(nn.softmax(x, where=w)), e / e.sum(-1, keepdims=True), rtol=1e-6)
    ls = np.asarray(nn.log_softmax(x, where=w))
    assert np.isneginf(ls[~w]).all()
    np.testing.assert_allclose(ls[w], np.log((e / e.sum(-1, keepdims=True))[w]), rtol=1e-5)
    b = np.array([1.0, 0.0, 2.0], np.float32)
    np.testing.assert_allclose(float(nn.logsumexp(x[0], b=b)), np.log(np.sum(b * np.exp(x[0]))), rtol=1e-6)
    np.testing.assert_allclose(float(nn.logsumexp(x[0], where=w[0])), np.log(np.exp(1.0) + np.exp(2.0)), rtol=1e-6)
    oh = np.asarray(nn.one_hot(np.array([0, 2]), 3, axis=0))
    np.testing.assert_array_equal(oh, np.eye(3)[[0, 2]].T)


def test_at_get_fill_mode_and_uint8_indices():
    x = tnp.asarray([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(x.at[np.array([0, 5, -1])].get(mode="fill", fill_value=-1.0)), [1, -1, 3])
    np.testing.assert_array_equal(np.asarray(x.at[np.array([0, 5])].get()), [1, 3])  # clamped
    np.testing.assert_array_equal(np.asarray(x[tnp.asarray(np.array([2, 0], np.uint8))]), [3, 1])
    np.testing.assert_array_equal(np.asarray(x[np.array([2, 0], np.uint8)]), [3, 1])


def test_scan_accepts_unroll():
    carry, ys = tessera.lax.scan(lambda c, v: (c + v, c), 0.0, np.arange(4.0, dtype=np.float32), unroll=2)
    assert float(carry) == 6.0
    np.testing.assert_array_equal(np.asarray(ys), [0, 0, 1, 3])


# ---- vmap's axes as pytrees ------------------------------------------------------------------------------


def test_vmap_in_axes_may_be_pytree_prefixes_and_kwargs_are_mapped():
    w, s = np.arange(6.0, dtype=np.float32).reshape(2, 3), np.array([10.0, 100.0], np.float32)
    out = tessera.vmap(lambda p, q: p["w"] * q, in_axes=({"w": 1}, None))({"w": w}, s)
    np.testing.assert_array_equal(np.asarray(out), w.T * s)
    a, b = np.ones((3, 2), np.float32), np.arange(6.0, dtype=np.float32).reshape(2, 3)
    out = tessera.vmap(lambda p: p[0] + p[1], in_axes=((0, 1),))((a, b))
    np.testing.assert_array_equal(np.asarray(out), a + b.T)
    out = tessera.vmap(lambda v, scale: v * scale)(np.ones((3, 2), np.float32), scale=np.arange(3.0, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.ones((3, 2)) * np.arange(3.0)[:, None])


def test_vmap_out_axes_per_output():
    x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    doubled, const = tessera.vmap(lambda v: (v * 2, tnp.ones(4)), out_axes=(1, None))(x)
    np.testing.assert_array_equal(np.asarray(doubled), (x * 2).T)
    np.testing.assert_array_equal(np.asarray(const), np.ones(4))
    d = tessera.vmap(lambda v: {"a": v, "b": v.sum()}, out_axes={"a": -1, "b": 0})(x)
    np.testing.assert_array_equal(np.asarray(d["a"]), x.T)
    np.testing.assert_array_equal(np.asarray(d["b"]), x.sum(1))


def test_aux_values_that_are_not_arrays_come_back_as_they_are():
    (value, aux), g = tessera.value_and_grad(lambda v: (tnp.sum(v * v), (v.shape[0], "label", v * 2)),
                                             has_aux=True)(np.ones(3, np.float32))
    assert aux[0] == 3 and isinstance(aux[0], int) and aux[1] == "label"
    np.testing.assert_array_equal(np.asarray(aux[2]), [2, 2, 2])
    np.testing.assert_array_equal(np.asarray(g), [2, 2, 2])
    g, aux = tessera.grad(lambda v: (tnp.sum(v), {"n": 1.5}), has_aux=True)(np.ones(2, np.float32))
    assert aux == {"n": 1.5}
    out, fn, aux = tessera.vjp(lambda v: (v * 2, 7), np.ones(2, np.float32), has_aux=True)
    assert aux == 7
    np.testing.assert_array_equal(np.asarray(fn(np.ones(2, np.float32))[0]), [2, 2])


def test_at_updates_with_several_integer_arrays_and_ints():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    j, k = np.array([0, 2, -1]), np.array([[1], [2]])
    for key in [(0, j), (slice(None), 0, j), (0, slice(None), j), (k, j), (slice(None), k, j), (k, slice(None), j),
                (np.array([1, 1]), np.array([2, 2])), (Ellipsis, j, 0)]:
        want = x.copy()
        np.add.at(want, key, 100.0)  # repeated indices add up
        np.testing.assert_array_equal(np.asarray(tnp.asarray(x).at[key].add(100.0)), want)
        want = x.copy()
        want[key] = -1.0
        np.testing.assert_array_equal(np.asarray(tnp.asarray(x).at[key].set(-1.0)), want)
    # An entry out of range on any axis is dropped (JAX's scatter mode).
    np.testing.assert_array_equal(np.asarray(tnp.zeros((2, 3)).at[np.array([0, 5]), np.array([1, 1])].add(1.0)),
                                  [[0, 1, 0], [0, 0, 0]])
    g = tessera.grad(lambda v: tnp.sum(tnp.zeros((2, 3)).at[np.array([0, 1]), np.array([2, 0])].set(v) ** 2))(
        np.array([3.0, 4.0], np.float32))
    np.testing.assert_array_equal(np.asarray(g), [6, 8])


# ---- dot_product_attention, image.resize and 16-bit reductions -----------------------------------------


def _attention_reference(q, k, v, bias=None, mask=None, scale=None):
    """numpy: q [B, Q, H, D], k and v [B, K, Hk, D] with query head h reading key head h // (H / Hk)."""
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = np.where(mask, logits, -1e30)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", w, v)


def test_dot_product_attention_takes_jaxs_arguments():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 4, 8), (2, 5, 2, 8), (2, 5, 2, 8)])
    bias = rng.standard_normal((1, 1, 3, 5)).astype(np.float32)
    mask = rng.integers(0, 2, (2, 1, 3, 5)).astype(bool)
    mask[..., 0] = True
    close = lambda got, want: np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    close(nn.dot_product_attention(q, k, v), _attention_reference(q, k, v))  # grouped-query: 4 heads over 2
    close(nn.dot_product_attention(q, k, v, bias, mask), _attention_reference(q, k, v, bias, mask))
    close(nn.dot_product_attention(q, k, v, scale=0.1), _attention_reference(q, k, v, scale=0.1))
    close(nn.dot_product_attention(q[0], k[0], v[0]), _attention_reference(q[:1], k[:1], v[:1])[0])  # unbatched
    with pytest.raises(TypeError, match="mask="):
        nn.dot_product_attention(q, k, v, mask)  # the fourth argument is the bias, as JAX's
    with pytest.raises(ValueError):
        nn.dot_product_attention(q, k, v, bias, implementation="fused")


def test_resize_without_antialiasing_interpolates_plainly():
    x = np.arange(8.0, dtype=np.float32)
    # Shrinking 8 -> 4: half-pixel centres 0.5, 2.5, 4.5, 6.5, each between two inputs (no widened triangle).
    np.testing.assert_allclose(np.asarray(tessera.image.resize(x, (4,), "linear", antialias=False)), [0.5, 2.5, 4.5, 6.5])
    wide = np.asarray(tessera.image.resize(np.array([0, 0, 8, 0, 0, 0, 0, 0], np.float32), (4,), "linear"))
    plain = np.asarray(tessera.image.resize(np.array([0, 0, 8, 0, 0, 0, 0, 0], np.float32), (4,), "linear",
                                            antialias=False))
    np.testing.assert_allclose(plain, [0, 4, 0, 0])
    assert wide[0] > 0  # the antialiased triangle reaches further


def test_16_bit_reductions_are_computed_in_float32():
    x = np.full(4096, 1.0, np.float32) + np.linspace(0, 1e-3, 4096, dtype=np.float32)
    h = tnp.asarray(x).astype(tnp.float16)
    want = np.float16(x.astype(np.float16).astype(np.float32).sum())
    got = tnp.sum(h)
    assert got.dtype == tnp.float16
    assert float(got) == float(want)  # a float16 running sum would stall at 2048 + steps of 2
    np.testing.assert_allclose(float(tnp.mean(h)), float(np.float16(x.astype(np.float16).astype(np.float32).mean())))
    c = tnp.cumsum(h)
    assert c.dtype == tnp.float16 and float(c[-1]) == float(want)


def test_more_jax_array_methods_and_properties():
    m = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    x = tnp.asarray(m)
    assert x.block_until_ready() is x and x.is_ready()
    assert (x.itemsize, x.nbytes) == (4, 24)
    assert tnp.zeros(3, tnp.bfloat16).nbytes == 6
    np.testing.assert_array_equal(np.asarray(x.mT), m.T)
    np.testing.assert_array_equal(np.asarray(x.real), m)
    np.testing.assert_array_equal(np.asarray(x.imag), np.zeros((2, 3)))
    np.testing.assert_array_equal(np.asarray(x.conj()), m)
    np.testing.assert_array_equal(np.asarray(x.diagonal()), m.diagonal())
    assert float(x.trace()) == m.trace()
    assert int(tnp.arange(5.0).searchsorted(2.5)) == 3
    assert x.tobytes() == m.tobytes()
    assert x.weak_type is False


def test_python_ints_that_do_not_fit_int32_raise_and_full_wraps():
    with pytest.raises(OverflowError):
        tnp.asarray(3_000_000_000)
    with pytest.raises(OverflowError):
        tnp.asarray([1, 2**40])
    np.testing.assert_array_equal(np.asarray(tnp.asarray(np.array([2**40 + 5]))), [5])  # numpy int64: wraps, as JAX
    np.testing.assert_array_equal(np.asarray(tnp.full((2,), 2**40 + 3, tnp.int32)), [3, 3])
    np.testing.assert_array_equal(np.asarray(tnp.full((2,), -1, tnp.uint8)), [255, 255])
    np.testing.assert_array_equal(np.asarray(tnp.full((2,), 2**32 - 1, tnp.uint32)), [2**32 - 1] * 2)
    # A traced fill value is broadcast.
    np.testing.assert_array_equal(np.asarray(tessera.jit(lambda v: tnp.full((3,), v))(tnp.asarray(2.5))), [2.5] * 3)


def test_dropout_broadcast_dims_rng_and_rng_collection():
    x = np.ones((4, 6), np.float32)
    y = np.asarray(nn.Dropout(0.5, broadcast_dims=(0,)).apply({}, x, deterministic=False,
                                                               rngs={"dropout": random.PRNGKey(3)}))
    assert (y == y[0]).all()  # one mask for every row
    assert set(np.unique(y)) <= {0.0, 2.0}
    a = nn.Dropout(0.5).apply({}, x, deterministic=False, rng=random.PRNGKey(9))  # no "dropout" stream needed
    keep = np.asarray(random.bernoulli(random.PRNGKey(9), 0.5, (4, 6)))
    np.testing.assert_array_equal(np.asarray(a), np.where(keep, 2.0, 0.0))
    b = nn.Dropout(0.5, rng_collection="noise").apply({}, x, deterministic=False, rngs={"noise": random.PRNGKey(9)})
    assert set(np.unique(np.asarray(b))) <= {0.0, 2.0}
    with pytest.raises(Exception, match="noise"):
        nn.Dropout(0.5, rng_collection="noise").apply({}, x, deterministic=False, rngs={"dropout": random.PRNGKey(9)})


def test_sort_and_argsort_descending():
    a = np.array([1.0, np.nan, 2.0, 2.0, -1.0, 2.0], np.float32)
    np.testing.assert_array_equal(np.asarray(tnp.sort(a, descending=True)), [np.nan, 2, 2, 2, 1, -1])
    # Ties keep their order (stable), NaN first.
    np.testing.assert_array_equal(np.asarray(tnp.argsort(a, descending=True)), [1, 2, 3, 5, 0, 4])
    m = np.array([[0.0, 3.0], [0.0, 1.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(tnp.argsort(m, axis=0, descending=True)), [[0, 0], [1, 1]])
    np.testing.assert_array_equal(np.asarray(tnp.asarray(a).sort(descending=True)), [np.nan, 2, 2, 2, 1, -1])


def test_python_ints_must_fit_int32_and_wrap_into_the_array_dtype():
    # JAX (x64 off): a Python int beside an array is a weak int32; out of int32's range it is an OverflowError
    # (it was wrapped silently: int32 + 2**40 gave INT_MIN + 1), in range it wraps into the array's dtype.
    i32 = tnp.asarray(np.array([1, 2], np.int32))
    u8 = tnp.asarray(np.array([1], np.uint8))
    u32 = tnp.asarray(np.array([1], np.uint32))
    for f in (lambda: i32 + 2**40, lambda: 2**40 * i32, lambda: i32 - 2**31, lambda: u32 + 2**31,
              lambda: u8 + 2**31, lambda: u8 - 2**70):
        with pytest.raises(OverflowError, match="too large to convert to int32"):
            f()
    np.testing.assert_array_equal(np.asarray(u8 + 300), [45])       # 300 mod 256 = 44, plus 1
    np.testing.assert_array_equal(np.asarray(u8 + -1), [0])         # -1 is 255
    np.testing.assert_array_equal(np.asarray(u32 + -2), [2**32 - 1])
    np.testing.assert_array_equal(np.asarray(i32 + (2**31 - 2)), [2**31 - 1, -2**31])
    np.testing.assert_array_equal(np.asarray(tnp.asarray(np.array([1.5], np.float32)) + 2**70), [np.float32(2.0**70)])
