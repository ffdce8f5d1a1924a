"""tessera.lax's option types, dimension numbers, convolution helpers, reduce_precision, the bit generators,
ragged_dot, XLA-style scatter and the small utilities, against JAX 0.10.2's values (stored below, computed on CPU
from the same inputs) and numpy loops; under jit, vmap and grad where they apply."""

import numpy as np
import pytest

import tessera as ts
import tessera.lax as lax
import tessera.numpy as tnp

NHWC = ("NHWC", "HWIO", "NHWC")
H = lax.Precision.HIGHEST


def arr(seed, *shape):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def close(got, want, tol=1e-4):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


# --- Precision, DotAlgorithm, DotAlgorithmPreset, RoundingMethod, dtype -----------------------------------------

def test_precision_parses_jax_strings():
    assert {s: lax.Precision(s).name for s in _JAX["prec_str"]} == _JAX["prec_str"]
    assert lax.Precision(None) is lax.Precision.DEFAULT
    assert [p.name for p in lax.Precision] == ["DEFAULT", "HIGH", "HIGHEST"]
    assert repr(lax.Precision.HIGHEST) == "Precision.HIGHEST" and str(lax.Precision.HIGH) == "HIGH"
    with pytest.raises(ValueError):
        lax.Precision("fast")


def test_dot_algorithm_types():
    assert [p.name for p in lax.DotAlgorithmPreset] == _JAX["presets"]
    alg = lax.DotAlgorithm(np.float32, np.float32, np.float32)
    assert alg.lhs_component_count == 1 and alg.allow_imprecise_accumulation is False
    assert int(lax.RoundingMethod.TO_NEAREST_EVEN) == 1 and int(lax.RoundingMethod.AWAY_FROM_ZERO) == 0


PRECISIONS = [None, "highest", "bfloat16", lax.Precision.HIGHEST, (lax.Precision.HIGH, "default"),
              lax.DotAlgorithmPreset.BF16_BF16_F32, "F32_F32_F32",
              lax.DotAlgorithm(np.float32, np.float32, np.float32)]


@pytest.mark.parametrize("precision", PRECISIONS, ids=str)
def test_precision_accepted_by_every_product(precision):
    a, b, v = arr(1, 3, 4), arr(2, 4, 5), arr(3, 4)
    p = {"precision": precision}
    close(tnp.dot(a, b, **p), a @ b)
    close(tnp.matmul(a, b, **p), a @ b)
    close(tnp.einsum("ij,jk->ik", a, b, **p), a @ b)
    close(tnp.tensordot(a, b, 1, **p), a @ b)
    close(tnp.inner(a, a, **p), a @ a.T)
    close(tnp.vdot(v, v, **p), v @ v)
    close(tnp.vecdot(a, a, **p), (a * a).sum(-1))
    close(tnp.convolve(v, v[:2], **p), np.convolve(v, v[:2]))
    close(tnp.correlate(v, v[:2], **p), np.correlate(v, v[:2]))
    close(tnp.linalg.matmul(a, b, **p), a @ b)
    close(tnp.linalg.multi_dot([a, b], **p), a @ b)
    close(lax.dot(a, b, **p), a @ b)
    close(lax.dot_general(a, b, (([1], [0]), ([], [])), **p), a @ b)
    close(lax.batch_matmul(a[None], b[None], **p)[0], a @ b)
    x, w = arr(4, 1, 2, 5, 5), arr(5, 3, 2, 3, 3)
    ref = lax.conv_general_dilated(x, w, (1, 1), "SAME")
    close(lax.conv_general_dilated(x, w, (1, 1), "SAME", **p), ref)
    close(lax.conv(x, w, (1, 1), "SAME", **p), ref)
    close(lax.conv_with_general_padding(x, w, (1, 1), "SAME", None, None, **p), ref)
    assert lax.conv_transpose(x, w, (1, 1), "SAME", **p).shape == (1, 3, 5, 5)
    close(ts.jit(lambda s, t: tnp.matmul(s, t, **p))(a, b), a @ b)


def test_precision_rejects_what_jax_rejects():
    a = arr(1, 2, 2)
    for bad in ("fastest-ish", 3, (lax.Precision.HIGH,)):
        with pytest.raises(ValueError):
            tnp.dot(a, a, precision=bad)
        with pytest.raises(ValueError):
            lax.dot_general(a, a, (([1], [0]), ([], [])), precision=bad)


def test_preferred_element_type_on_jnp_products():
    a = arr(1, 2, 3)
    assert tnp.matmul(a, a.T, preferred_element_type=tnp.float16).dtype == tnp.float16
    assert tnp.dot(a, a.T, precision=H, preferred_element_type=tnp.float16).dtype == tnp.float16


def test_dtype():
    values = (1.0, 1, True, np.int32(1), "float32", np.zeros(2, np.int8), np.float16, tnp.bfloat16)
    assert [str(lax.dtype(v)) for v in values] == _JAX["dtypes"]
    assert lax.dtype(tnp.zeros(3, tnp.int32)) == np.int32
    # 64-bit numpy types canonicalize as jax.lax.dtype's do without x64 (JAX 0.10.2: int32, float32, float32, int32)
    assert [str(lax.dtype(v)) for v in (np.int64(1), np.float64, np.zeros(2), "int64")] == ["int32", "float32",
                                                                                            "float32", "int32"]
    assert lax.dtype(tnp.zeros(2, np.float64)) == np.float64  # a tessera float64 array keeps its dtype


def test_round_takes_rounding_method():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 2.4999], np.float32)
    methods = (lax.RoundingMethod.AWAY_FROM_ZERO, lax.RoundingMethod.TO_NEAREST_EVEN)
    for method, want in zip(methods, _JAX["round"]):
        close(lax.round(x, method), want)
        close(lax.round(x, int(method)), want)
        close(ts.jit(lambda v, m=method: lax.round(v, m))(x), want)


def test_dot_with_dimension_numbers():
    a, b = arr(1, 2, 3, 4), arr(2, 2, 4, 5)
    dn = (([2], [1]), ([0], [0]))
    close(lax.dot(a, b, dimension_numbers=dn, precision=H), np.einsum("bik,bkj->bij", a, b))


# --- convolution dimension numbers and shapes --------------------------------------------------------------------

def test_conv_dimension_numbers_and_permutations():
    dns = [lax.conv_dimension_numbers((2, 4, 5, 3), (2, 3, 3, 4), NHWC),
           lax.conv_dimension_numbers((2, 3, 4, 5), (6, 3, 2, 1), ("NCWH", "OIWH", "NWHC")),
           lax.conv_dimension_numbers((2, 3, 4), (6, 3, 2), None)]
    assert [tuple(d) for d in dns] == [tuple(map(tuple, d)) for d in _JAX["conv_dn"]]
    assert all(isinstance(d, lax.ConvDimensionNumbers) for d in dns)
    assert lax.conv_dimension_numbers((1,), (1,), dns[0]) is dns[0]
    perms = [lax.conv_general_permutations(NHWC), lax.conv_general_permutations(("NCWH", "IOHW", "WHNC"))]
    assert [list(map(list, p)) for p in perms] == [list(map(list, p)) for p in _JAX["perms"]]
    with pytest.raises(TypeError):
        lax.conv_general_permutations(("NHWC", "HWIO", "NHWD"))
    with pytest.raises(TypeError):
        lax.conv_dimension_numbers((2, 4, 5, 3), (2, 3, 3), NHWC)


def test_conv_shape_helpers():
    got = [lax.conv_general_shape_tuple((2, 9, 7, 3), (3, 2, 3, 5), (2, 1), "SAME", NHWC),
           lax.conv_general_shape_tuple((2, 3, 9, 7), (5, 3, 3, 2), (2, 3), [(1, 0), (2, 2)], ("NCHW", "OIHW", "NCHW")),
           lax.conv_shape_tuple((4, 3, 9, 7), (5, 3, 3, 2), (2, 1), "VALID", batch_group_count=2),
           lax.conv_shape_tuple((4, 3, 9, 7), (5, 3, 3, 2), (2, 3), "SAME"),
           lax.conv_transpose_shape_tuple((2, 5, 6, 3), (3, 2, 3, 4), (2, 2), "SAME", NHWC),
           lax.conv_transpose_shape_tuple((2, 5, 6, 3), (3, 2, 3, 4), (2, 3), "VALID", NHWC),
           lax.conv_transpose_shape_tuple((2, 5, 6, 3), (3, 2, 3, 4), (2, 3), [(1, 2), (0, 1)], NHWC),
           lax.reduce_window_shape_tuple((9, 7), (3, 2), (2, 1), [(1, 1), (0, 2)], (2, 1), (1, 3)),
           lax.reduce_window_shape_tuple((9, 7), (3, 2), (2, 1), [(0, 0), (0, 0)])]
    assert [tuple(s) for s in got] == [tuple(s) for s in _JAX["shapes"]]
    pads = [lax.padtype_to_pads((9, 7, 4), (3, 2, 4), (2, 3, 1), p) for p in ("SAME", "SAME_LOWER", "VALID", "same")]
    assert [[tuple(p) for p in ps] for ps in pads] == [[tuple(p) for p in ps] for ps in _JAX["pads"]]
    with pytest.raises(RuntimeError):
        lax.padtype_to_pads((3,), (2,), (1,), "FULL")


def test_conv_takes_conv_dimension_numbers():
    x, w = arr(1, 2, 4, 5, 3), arr(2, 2, 3, 3, 4)
    dn = lax.conv_dimension_numbers(x.shape, w.shape, NHWC)
    close(lax.conv_general_dilated(x, w, (1, 2), "SAME", dimension_numbers=dn, precision=H), _JAX["conv_cdn"])
    close(ts.jit(lambda a, b: lax.conv_general_dilated(a, b, (1, 2), "SAME", dimension_numbers=dn))(x, w),
          _JAX["conv_cdn"])
    close(lax.conv_transpose(x, w, (2, 1), "SAME", dimension_numbers=dn), _JAX["conv_t"])
    close(lax.conv_general_dilated(x, w, (1, 1), "SAME_LOWER", dimension_numbers=NHWC), _JAX["conv_lower"])
    xc, wc = np.transpose(x, (0, 3, 1, 2)), np.transpose(w, (3, 2, 0, 1))
    close(lax.conv_with_general_padding(xc, wc, (1, 1), [(1, 0), (2, 1)], (2, 1), (1, 2)), _JAX["conv_gp"])


def test_conv_dimension_numbers_in_1d_and_3d():
    # JAX 0.10.2's results (rounded to 5 decimals); 3-D with the kernel's spatial dims in another order
    want_1d = [[[0.25684, -1.31954, 1.13601, 0.58074], [-2.71138, -1.72833, -0.23912, 0.1206], [0.40802,
        -1.74821, -4.12125, 0.42533], [-3.78856, 1.92044, 3.36279, 3.61661]], [[-1.00445, -1.85389, 2.48058,
        2.38341], [0.02297, -0.33048, -0.29168, -0.29201], [0.93697, -1.16801, 1.44951, 1.77672], [0.06351,
        1.42655, -1.99146, -0.14594]]]
    want_3d = [[[[[-3.18516, 4.10137, 7.41516, 5.34843]], [[-3.1843, 5.30029, 6.06457, 5.64963]], [[6.52414,
        -3.4822, -12.71056, -4.90541]]], [[[0.31485, -1.23841, -9.72885, 0.26244]], [[1.59451, 3.30904,
        -5.19437, 5.64076]], [[-2.14811, 5.15732, 9.054, 1.09559]]], [[[-5.11857, 1.72925, 3.46011,
        5.55294]], [[2.61337, 2.39737, 8.97481, -0.91283]], [[2.59527, 1.76736, -1.84728, -4.38736]]]]]
    x1, w1 = arr(1, 2, 7, 3), arr(2, 3, 3, 4)
    dn1 = lax.conv_dimension_numbers(x1.shape, w1.shape, ("NWC", "WIO", "NCW"))
    close(lax.conv_general_dilated(x1, w1, (2,), "SAME_LOWER", rhs_dilation=(2,), dimension_numbers=dn1), want_1d)
    x3, w3 = arr(3, 1, 2, 4, 5, 3), arr(4, 4, 2, 2, 3, 2)
    dn3 = lax.conv_dimension_numbers(x3.shape, w3.shape, ("NCDHW", "OIDWH", "NDHWC"))
    close(lax.conv_general_dilated(x3, w3, (1, 2, 1), "VALID", dimension_numbers=dn3, rhs_dilation=(1, 1, 2)),
          want_3d)

def test_conv_general_dilated_patches():
    x = arr(1, 2, 4, 5, 3)
    xp, xc = x[:1, :, :, :2], np.transpose(x, (0, 3, 1, 2))[:1, :2]

    def patches(v):
        return lax.conv_general_dilated_patches(v, (2, 3), (1, 2), "SAME", dimension_numbers=NHWC)

    close(patches(xp), _JAX["patches_nhwc"])
    close(ts.jit(patches)(xp), _JAX["patches_nhwc"])
    want = np.asarray(_JAX["patches_nhwc"])
    close(ts.vmap(patches)(np.stack([xp, 2 * xp])), np.stack([want, 2 * want]))
    close(lax.conv_general_dilated_patches(xc, (2, 2), (1, 1), "VALID", rhs_dilation=(1, 2)), _JAX["patches_nchw"])
    ct = arr(3, 1, 4, 3, 12)
    close(ts.grad(lambda v: tnp.sum(patches(v) * ct))(xp), _JAX["patches_grad"])


def test_conv_general_dilated_local():
    x = arr(1, 2, 4, 5, 3)
    close(lax.conv_general_dilated_local(x[:1], arr(4, 4, 3, 18, 5), (1, 2), "SAME", (2, 3), dimension_numbers=NHWC),
          _JAX["local"])
    xc = np.transpose(x, (0, 3, 1, 2))[:1]
    close(lax.conv_general_dilated_local(xc, arr(5, 5, 12, 3, 2), (1, 2), "VALID", (2, 2)), _JAX["local_nchw"])


# --- reduce_precision --------------------------------------------------------------------------------------------

def _bits(x):
    return np.asarray(x).view(np.uint32).tolist()


@pytest.mark.parametrize("fmt", ["8,7", "5,10", "4,3", "5,2", "8,23", "8,0", "3,1", "11,52"])
def test_reduce_precision_is_bit_exact(fmt):
    e, m = map(int, fmt.split(","))
    x = np.array(_JAX["rp_in"], np.uint32).view(np.float32)
    want = _JAX["rp"][fmt]
    assert _bits(lax.reduce_precision(x, e, m)) == want
    assert _bits(ts.jit(lambda v: lax.reduce_precision(v, e, m))(x)) == want
    assert _bits(ts.vmap(lambda v: lax.reduce_precision(v, e, m))(x.reshape(-1, 1)).reshape(-1)) == want


def test_reduce_precision_of_bf16_and_its_gradient():
    x = np.array(_JAX["rp_in"], np.uint32).view(np.float32)
    x = x[np.isfinite(x)]
    got = lax.reduce_precision(tnp.asarray(x).astype(tnp.bfloat16), 4, 3)
    assert got.dtype == tnp.bfloat16
    close(np.asarray(got.astype(tnp.float32)), _JAX["rp_bf16"], tol=0)
    v = np.array([1.0, 2.5, -3.0], np.float32)
    close(ts.grad(lambda t: tnp.sum(lax.reduce_precision(t, 5, 10) ** 2))(v), 2 * v)
    with pytest.raises(TypeError):
        lax.reduce_precision(np.arange(3, dtype=np.int32), 5, 10)


_F64_IN = [4607182418800017408, 4607182418800021504, 4607182418800023552, 4614256656552045848, 13836675482169661289,
           9094988921128908188, 118622047889322841, 5183635696913276845, 5183771782906367355, 4023340849777945987,
           9221120237041090560, 9218868437227405312, 4591870180066957722, 4599676419421066581]
# jax.lax.reduce_precision with jax_enable_x64, as float64 bits.
_F64_OUT = {
    (8, 23): [4607182418800017408, 4607182418800017408, 4607182418800017408, 4614256656748904448, 13836675481983778816,
              9218868437227405312, 0, 5183635696786604032, 9218868437227405312, 0, 9221120237041090560,
              9218868437227405312, 4591870180174331904, 4599676419600023552],
    (11, 40): [4607182418800017408, 4607182418800021504, 4607182418800025600, 4614256656552046592, 13836675482169659392,
               9094988921128906752, 118622047889321984, 5183635696913276928, 5183771782906368000, 4023340849777946624,
               9221120237041090560, 9218868437227405312, 4591870180066959360, 4599676419421065216],
    (5, 10): [4607182418800017408, 4607182418800017408, 4607182418800017408, 4614254477589872640, 13836676536398249984,
              9218868437227405312, 0, 9218868437227405312, 9218868437227405312, 0, 9221120237041090560,
              9218868437227405312, 4591868420848353280, 4599674953405562880]}


@pytest.mark.parametrize("fmt", sorted(_F64_OUT))
def test_reduce_precision_of_float64_is_bit_exact(fmt):
    x = np.array(_F64_IN, np.uint64).view(np.float64)
    got = lax.reduce_precision(tnp.asarray(x, dtype=tnp.float64), *fmt)
    assert got.dtype == np.float64
    assert np.asarray(got).view(np.uint64).tolist() == _F64_OUT[fmt]

# --- bit generators ----------------------------------------------------------------------------------------------

def test_rng_bit_generator():
    for key in (np.array([0, 0, 7, 1], np.uint32), np.array([3, 4], np.uint32)):
        new_key, bits = lax.rng_bit_generator(key, (400, 50))
        assert new_key.shape == key.shape and new_key.dtype == np.uint32 and bits.dtype == np.uint32
        assert bits.shape == (400, 50)
        assert not np.array_equal(np.asarray(new_key), key)
        u = np.asarray(bits).astype(np.float64) / 2.0 ** 32
        assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.01
        again = lax.rng_bit_generator(key, (400, 50))[1]
        assert np.array_equal(np.asarray(again), np.asarray(bits))  # a function of the key
        following = lax.rng_bit_generator(new_key, (400, 50))[1]
        assert not np.array_equal(np.asarray(following), np.asarray(bits))
    _, small = ts.jit(lambda k: lax.rng_bit_generator(k, (1000,), dtype=np.uint8))(np.zeros(4, np.uint32))
    assert small.dtype == np.uint8 and 100 < np.asarray(small).astype(float).mean() < 155
    with pytest.raises(TypeError):
        lax.rng_bit_generator(np.zeros(3, np.uint32), (2,))
    with pytest.raises(TypeError):
        lax.rng_bit_generator(np.zeros(4, np.uint32), (2,), dtype=np.float32)


def test_rng_uniform():
    ints = np.asarray(lax.rng_uniform(np.int32(-3), np.int32(4), (2000,)))
    assert ints.dtype == np.int32 and ints.min() == -3 and ints.max() == 3
    floats = lax.rng_uniform(np.float32(2.0), np.float32(2.5), (50, 40))
    assert floats.shape == (50, 40) and floats.dtype == np.float32
    f = np.asarray(floats)
    assert f.min() >= 2.0 and f.max() < 2.5 and abs(f.mean() - 2.25) < 0.02
    with pytest.raises(ValueError):
        lax.rng_uniform(np.zeros(2, np.float32), np.ones(2, np.float32), (2,))
    # Stateful, as XLA's: a jitted function draws new values at every call (its key comes from the host each run).
    draw = ts.jit(lambda: lax.rng_uniform(np.float32(0.0), np.float32(1.0), (64,)))
    first, second = np.asarray(draw()), np.asarray(draw())
    assert not np.array_equal(first, second) and first.min() >= 0.0 and second.max() < 1.0


# --- ragged_dot ----------------------------------------------------------------------------------------------------

def _ragged_loop(lhs, rhs, sizes):
    out, start = np.zeros((lhs.shape[0], rhs.shape[2])), 0
    for g, n in enumerate(sizes):
        out[start:start + n] = lhs[start:start + n].astype(np.float64) @ rhs[g]
        start += n
    return out


def test_ragged_dot_against_a_loop():
    lhs, rhs = arr(1, 9, 4), arr(2, 4, 4, 3)
    for sizes in ([2, 3, 0, 4], [0, 0, 9, 0], [1, 2, 3, 1], [0, 0, 0, 0]):
        gs = np.array(sizes, np.int32)
        close(lax.ragged_dot(lhs, rhs, gs, precision=H), _ragged_loop(lhs, rhs, sizes))
        close(ts.jit(lax.ragged_dot)(lhs, rhs, gs), _ragged_loop(lhs, rhs, sizes))
    gs = np.array([2, 3, 0, 4], np.int32)
    batched = ts.vmap(lambda a, g: lax.ragged_dot(a, rhs, g))(np.stack([lhs, -lhs]), np.stack([gs, gs[::-1]]))
    close(batched, np.stack([_ragged_loop(lhs, rhs, gs), _ragged_loop(-lhs, rhs, gs[::-1])]))


def test_ragged_dot_gradient_by_finite_differences():
    lhs, rhs, sizes = arr(3, 5, 3), arr(4, 3, 3, 2), [2, 1, 2]
    ct = arr(5, 5, 2).astype(np.float64)

    def f(a, b):
        return (_ragged_loop(a, b, sizes) * ct).sum()

    gs, ct32 = np.array(sizes, np.int32), ct.astype(np.float32)
    g_lhs, g_rhs = ts.grad(lambda a, b: tnp.sum(lax.ragged_dot(a, b, gs) * ct32), (0, 1))(lhs, rhs)
    eps = 1e-3
    for got, base, which in ((g_lhs, lhs, 0), (g_rhs, rhs, 1)):
        fd = np.zeros(base.shape)
        for i in np.ndindex(base.shape):
            up, down = base.astype(np.float64).copy(), base.astype(np.float64).copy()
            up[i] += eps
            down[i] -= eps
            args_up = (up, rhs) if which == 0 else (lhs, up)
            args_down = (down, rhs) if which == 0 else (lhs, down)
            fd[i] = (f(*args_up) - f(*args_down)) / (2 * eps)
        close(got, fd, tol=1e-3)


def test_ragged_dot_general_modes():
    RD = lax.RaggedDotDimensionNumbers
    close(lax.ragged_dot_general(arr(9, 3, 7), arr(10, 7, 4), np.array([2, 0, 4], np.int32),
                                 RD((([1], [0]), ([], [])), [1], [])), _JAX["rdg2"])
    close(lax.ragged_dot_general(arr(11, 5, 2, 3), arr(12, 5, 3, 4), np.array([1, 3], np.int32),
                                 RD((([2], [1]), ([0], [0])), [0], [])), _JAX["rdg3"])
    close(lax.ragged_dot_general(arr(13, 2, 6, 3), arr(14, 2, 3, 3, 4), np.array([1, 3, 2], np.int32),
                                 RD((([2], [2]), ([0], [0])), [1], [1])), _JAX["rdg1"])
    lhs, rhs, sizes = arr(15, 2, 3, 6), arr(16, 2, 6, 4), [2, 3, 1]  # ragged contracting dim with a batch dim
    want, start = np.zeros((3, 2, 3, 4)), 0
    for g, n in enumerate(sizes):
        want[g] = np.einsum("bmk,bkn->bmn", lhs[:, :, start:start + n], rhs[:, start:start + n])
        start += n
    close(lax.ragged_dot_general(lhs, rhs, np.array(sizes, np.int32), RD((([2], [1]), ([0], [0])), [2], [])), want)
    dn = RD((([1], [0]), ([], [])), [1], [])
    assert dn == RD([[[1], [0]], [[], []]], (1,), ()) and hash(dn) == hash(RD((([1], [0]), ([], [])), [1], []))


# --- scatter with ScatterDimensionNumbers ---------------------------------------------------------------------------

OPERAND = np.arange(24, dtype=np.float32).reshape(4, 6)


def _scatter_cases():
    SD = lax.ScatterDimensionNumbers
    return [(np.array([[1], [3], [1], [7], [-1]], np.int32), arr(6, 5, 6), SD((1,), (0,), (0,))),
            (np.array([[0, 1], [2, 4], [3, 5], [1, 0]], np.int32), arr(7, 4, 2, 3), SD((1, 2), (), (0, 1))),
            (np.array([[[2], [5]], [[0], [0]], [[1], [9]], [[3], [4]]], np.int32), arr(8, 4, 2),
             SD((), (1,), (1,), operand_batching_dims=(0,), scatter_indices_batching_dims=(0,)))]


@pytest.mark.parametrize("name", ["scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max",
                                  "scatter_sub"])
@pytest.mark.parametrize("case", [0, 1, 2])
@pytest.mark.parametrize("mode", [None, "clip"])
def test_scatter_with_dimension_numbers(name, case, mode):
    idx, upd, dn = _scatter_cases()[case]
    if name == "scatter" and case == 0:
        idx, upd = idx[[0, 1, 3, 4]], upd[[0, 1, 3, 4]]
    fn = getattr(lax, name)
    want = _JAX["sc"][f"{name},{case},{mode}"]
    close(fn(OPERAND, idx, upd, dn, mode=mode), want)
    close(fn(OPERAND, idx, upd, dimension_numbers=dn, mode=mode), want)
    close(ts.jit(lambda o, i, u: fn(o, i, u, dn, mode=mode))(OPERAND, idx, upd), want)


def test_scatter_dimension_numbers_grad_and_vmap():
    idx, upd, dn = _scatter_cases()[1]
    g_op, g_up = ts.grad(lambda o, u: tnp.sum(tnp.sin(lax.scatter_add(o, idx, u, dn))), (0, 1))(OPERAND, upd)
    close(g_op, _JAX["sc_grad"][0])
    close(g_up, _JAX["sc_grad"][1])
    batched = ts.vmap(lambda u: lax.scatter_add(OPERAND, idx, u, dn))(np.stack([upd, 2 * upd]))
    close(batched[1] - OPERAND, 2 * (np.asarray(_JAX["sc"]["scatter_add,1,None"]) - OPERAND))
    with pytest.raises(TypeError):
        lax.scatter_add(OPERAND, idx, upd[:, :, :1, None], dn)


def test_scatter_apply():
    idx, _, dn = _scatter_cases()[0]
    close(lax.scatter_apply(OPERAND, idx, lambda v: v * 2 + 1, dn, update_shape=(5, 6)), _JAX["sc_apply"])
    close(ts.jit(lambda o: lax.scatter_apply(o, idx, lambda v: v * 2 + 1, dn, update_shape=(5, 6)))(OPERAND),
          _JAX["sc_apply"])
    idx2, _, dn2 = _scatter_cases()[1]
    close(lax.scatter_apply(OPERAND, idx2[:3], tnp.sin, dn2, update_shape=(3, 2, 3), unique_indices=True),
          _JAX["sc_apply_u"])


# --- small utilities ------------------------------------------------------------------------------------------------

def test_platform_dependent_composite_shape_as_value():
    assert int(lax.platform_dependent(3, cpu=lambda v: v + 1, cuda=lambda v: v - 1)) == 4
    assert int(lax.platform_dependent(3, tpu=lambda v: v + 1, default=lambda v: v * 5)) == 15
    with pytest.raises(NotImplementedError):
        lax.platform_dependent(3, tpu=lambda v: v)

    def scaled(x, *, factor):
        return x * factor

    op = lax.composite(scaled, name="my.scaled")
    close(op(np.float32(3), factor=2.0), 6.0)
    close(ts.grad(lambda v: op(v, factor=2.0))(np.float32(1)), 2.0)
    got = lax.shape_as_value((2, 3, 5))
    assert got.dtype == np.int32 and np.asarray(got).tolist() == [2, 3, 5]


def test_igamma_grad_a_and_random_gamma_grad():
    a = np.array([0.5, 2., 3.5, 1., 10., 50., 0.1, 5.], np.float32)
    x = np.array([1.5, 1.5, 4., 0., 12., 40., 0.2, 3.], np.float32)
    close(lax.igamma_grad_a(a, x), _JAX["iga"], tol=2e-5)
    close(lax.random_gamma_grad(a, x), _JAX["rgg"], tol=2e-5)
    close(ts.jit(lax.igamma_grad_a)(a, x), _JAX["iga"], tol=2e-5)
    close(ts.vmap(lax.random_gamma_grad)(a, x), _JAX["rgg"], tol=2e-5)
    # igamma's own derivative in a agrees (its series stand-in kept NaN out where the fraction is used).
    close(ts.vmap(ts.grad(lax.igamma))(a, x), _JAX["iga"], tol=2e-4)
    close(ts.vmap(ts.grad(lax.igammac))(a, x), -np.asarray(_JAX["iga"]), tol=2e-4)


# JAX 0.10.2 on CPU, from the inputs above (floats rounded to 6 decimals; reduce_precision as float32 bits).
_JAX = {'conv_cdn': [[[[5.030304, -3.908771, -0.246044, -0.297641], [1.728616, -1.037918, 2.443174, -6.782362],
                [-0.314354, -0.651119, 0.800736, -9.556898]],
               [[5.441597, 0.631831, -1.79644, 2.989646], [-0.176216, 0.255793, 0.500986, -11.323397],
                [-0.437427, 0.642796, -2.691071, 4.460112]],
               [[-0.175387, 1.946797, -0.257245, -3.436135], [2.824407, 2.464994, -2.471118, -3.803315],
                [0.367367, 4.59996, -3.162998, -0.8605]],
               [[-3.523101, 0.518608, -0.078781, -0.052588], [-3.966242, -1.6393, 1.080333, 3.359426],
                [-2.596653, -2.08848, 1.719339, -0.577751]]],
              [[[-1.416589, 2.329844, -3.538406, -1.073635], [-0.110562, 0.478705, 0.725927, -6.027709],
                [1.420567, 3.301678, 1.533063, -3.854252]],
               [[-2.805945, 1.636538, -0.196479, 1.233529], [1.381314, 1.064997, -2.507824, 1.385306],
                [1.860049, -1.867866, 1.676816, -0.397706]],
               [[-0.686152, -2.467502, 1.903307, 2.830883], [-2.310847, 0.286512, 1.86851, 3.634785],
                [1.371805, -1.670411, -0.162114, 4.561855]],
               [[4.217391, 0.733073, -1.054908, -0.629293], [4.097282, 2.126347, -0.740354, -6.352242],
                [1.800711, 4.180076, -3.034856, 2.68953]]]],
 'conv_dn': [((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)), ((0, 1, 2, 3), (0, 1, 2, 3), (0, 3, 1, 2)),
             ((0, 1, 2), (0, 1, 2), (0, 1, 2))],
 'conv_gp': [[[[0.206987, -1.933464, 0.381805, -3.222686], [0.256843, 4.982356, -1.319541, 3.100729],
               [-0.522188, 1.397444, -2.176073, -2.188967], [-2.164207, 1.922772, 0.691913, 0.25998],
               [2.019114, 0.575869, -4.559601, -0.212148], [-3.413548, 2.171242, -2.057477, 2.383409],
               [1.419097, -1.191436, 3.136916, -0.272302]],
              [[-0.112007, -2.742801, -0.435209, 1.167504], [-2.711378, 2.178632, -1.728331, 3.743067],
               [-0.270233, -0.840445, 1.880402, 0.850628], [0.812209, 0.688119, 1.027974, -1.283734],
               [0.998639, -0.790306, 1.451571, -0.171649], [0.829549, -0.087729, 2.184798, -0.292013],
               [0.734574, 0.788846, 0.397359, 0.638198]],
              [[1.483996, -0.830789, 1.836746, -3.084567], [0.408025, -2.813658, -1.748206, -0.298389],
               [-2.349298, 0.564993, 1.302121, -1.183371], [-1.475556, -1.131499, 2.715741, 0.561393],
               [-2.211326, -0.458751, -1.486883, 1.713523], [1.011819, -0.70723, 0.587191, 1.776718],
               [0.915835, -0.484711, -0.804435, -0.742838]],
              [[1.513886, 1.871399, -1.031583, 6.599011], [-3.788561, 3.680802, 1.920436, -5.914361],
               [1.329059, 3.948933, -0.627413, -0.009909], [2.857663, -1.694238, -3.538124, -3.601093],
               [1.73021, -0.742211, -6.091358, -0.499326], [5.194944, -2.005825, 1.544353, -0.145941],
               [-2.181299, -0.020374, 0.046895, 0.41825]]],
             [[[-2.600251, 3.379145, -4.604218, 1.606898], [-8.370492, 3.798452, -6.444379, -0.25935],
               [1.184736, -1.013529, 0.317771, -0.233198], [-2.000698, 1.58679, -2.907102, -0.632425],
               [-1.095269, 1.583009, -1.299276, -1.52777], [1.939903, -2.68498, 1.780159, -1.612836],
               [-2.122585, 3.590173, -2.976709, -1.932229]],
              [[1.628863, -0.353871, 2.779312, 0.382264], [1.981057, 1.413705, -1.436303, -0.382482],
               [0.603073, -0.663457, 2.156276, 0.135469], [1.83636, 0.532211, 0.01784, -0.429204],
               [-0.50778, 0.739062, -1.923026, 1.556841], [-1.059404, 1.241363, 0.340606, -1.888118],
               [-1.159701, -0.859406, 0.842114, 0.819616]],
              [[-2.603157, 1.26068, -0.569967, -3.090847], [-1.532917, 0.546728, 2.337723, 1.038564],
               [-2.363091, 0.862074, 0.211501, -1.454401], [-0.418929, -0.909804, 4.624766, -0.38511],
               [1.587594, -0.96319, -0.737345, 0.025244], [0.389381, -0.512377, -3.874599, 2.644917],
               [0.259949, 0.351779, -2.433269, -1.126931]],
              [[0.958282, 2.077032, -1.709199, 0.304094], [4.972789, -1.992897, -2.249683, 0.047782],
               [-1.148224, 0.628011, -1.134973, 2.756378], [1.596337, -0.792269, 0.037275, -0.535136],
               [-0.219865, 2.543826, 0.646592, -2.72306], [-0.67933, 0.146318, 1.050796, -3.028725],
               [0.815363, 4.665872, 2.090793, -1.893058]]]],
 'conv_lower': [[[[-3.30425, -1.590751, 2.205072, -3.953855], [3.245813, -3.025839, -0.137274, 7.522758],
                  [-9.509648, 1.303402, -1.174455, -5.346658], [4.06078, -2.486574, 1.088577, 6.839847],
                  [-3.915129, 2.606092, -4.234796, -0.178228]],
                 [[5.030304, -3.908771, -0.246044, -0.297641], [-0.745118, 3.971485, -7.816622, 3.137948],
                  [1.728616, -1.037918, 2.443174, -6.782362], [1.800058, 2.963421, -5.888362, 9.551672],
                  [-0.314354, -0.651119, 0.800736, -9.556898]],
                 [[5.441597, 0.631831, -1.79644, 2.989646], [0.350923, 3.319896, -1.720177, -2.108539],
                  [-0.176216, 0.255793, 0.500986, -11.323397], [-4.351941, -2.339976, 0.009357, 1.083925],
                  [-0.437427, 0.642796, -2.691071, 4.460112]],
                 [[-0.175387, 1.946797, -0.257245, -3.436135], [2.196448, 1.404717, 4.602803, 3.908039],
                  [2.824407, 2.464994, -2.471118, -3.803315], [-4.592736, -2.197817, 5.114406, 4.569095],
                  [0.367367, 4.59996, -3.162998, -0.8605]]],
                [[[-1.082074, 0.107778, -0.370602, 0.071761], [-2.336506, 2.857285, -4.632116, 2.685456],
                  [-0.042488, 1.497962, 2.66786, -0.671611], [3.630443, -0.53717, -4.441341, 2.030235],
                  [-1.650663, 0.344106, 2.997447, -2.809176]],
                 [[-1.416589, 2.329844, -3.538406, -1.073635], [-10.41641, 0.566736, 2.862424, 3.37791],
                  [-0.110562, 0.478705, 0.725927, -6.027709], [-6.320474, -2.893721, -1.29907, 10.941913],
                  [1.420567, 3.301678, 1.533063, -3.854252]],
                 [[-2.805945, 1.636538, -0.196479, 1.233529], [-0.444905, -0.843195, 3.724356, 1.160666],
                  [1.381314, 1.064997, -2.507824, 1.385306], [-7.379448, -0.057893, 1.345148, -2.616144],
                  [1.860049, -1.867866, 1.676816, -0.397706]],
                 [[-0.686152, -2.467502, 1.903307, 2.830883], [-1.749291, 0.711716, -5.878104, 3.03059],
                  [-2.310847, 0.286512, 1.86851, 3.634785], [-1.168975, 0.089121, -2.679044, -6.254984],
                  [1.371805, -1.670411, -0.162114, 4.561855]]]],
 'conv_t': [[[[-3.30425, -1.590751, 2.205072, -3.953855], [3.245812, -3.025838, -0.137274, 7.522758],
              [-9.509649, 1.303403, -1.174455, -5.346658], [4.06078, -2.486574, 1.088577, 6.839847],
              [-3.915129, 2.606092, -4.234796, -0.178228]],
             [[5.280294, -2.59095, 0.796366, -0.375583], [2.652714, 3.220762, -6.67453, 1.801769],
              [4.159406, -1.868625, 2.052226, -8.718143], [-0.034219, 2.834498, -4.961663, 7.807526],
              [-1.340357, 0.387803, 0.536211, -7.884353]],
             [[-0.24999, -1.317821, -1.04241, 0.077942], [-3.397833, 0.750723, -1.142091, 1.336179],
              [-2.430789, 0.830707, 0.390948, 1.935782], [1.834277, 0.128922, -0.926698, 1.744147],
              [1.026003, -1.038922, 0.264525, -1.672546]],
             [[2.565606, 0.940822, -1.280631, 1.276065], [-0.239245, 1.462689, 0.296901, -1.197768],
              [0.656332, 0.086888, -0.768304, -7.113137], [-3.060726, -2.749421, 0.115808, 2.719689],
              [0.481339, 1.284932, -2.504022, 2.078442]],
             [[2.87599, -0.308991, -0.515809, 1.713582], [0.590168, 1.857207, -2.017078, -0.910772],
              [-0.832548, 0.168905, 1.26929, -4.21026], [-1.291215, 0.409446, -0.106451, -1.635764],
              [-0.918766, -0.642136, -0.187049, 2.38167]],
             [[1.853467, 0.715766, 0.462428, 0.576983], [-2.280163, 1.570685, 2.206452, 2.401483],
              [2.243488, 1.643075, 0.358861, -4.068635], [-3.172722, -2.636915, 3.7756, 6.846467],
              [0.865832, 3.742542, -3.826573, -0.168123]],
             [[-2.028854, 1.231031, -0.719673, -4.013117], [4.476611, -0.165968, 2.396351, 1.506556],
              [0.580918, 0.821919, -2.829979, 0.26532], [-1.420014, 0.439098, 1.338804, -2.277372],
              [-0.498465, 0.857419, 0.663574, -0.692376]],
             [[-3.5231, 0.518608, -0.078781, -0.052588], [0.024396, -1.270893, 2.697753, 0.562747],
              [-3.966242, -1.6393, 1.080333, 3.359426], [-1.067667, 1.926683, -0.693455, 0.079402],
              [-2.596653, -2.088481, 1.719339, -0.577751]]],
            [[[-1.082074, 0.107778, -0.370602, 0.071761], [-2.336506, 2.857285, -4.632117, 2.685456],
              [-0.042488, 1.497962, 2.66786, -0.671612], [3.630443, -0.53717, -4.441341, 2.030235],
              [-1.650663, 0.344106, 2.997447, -2.809177]],
             [[-0.915003, 2.222143, -1.181399, 1.295207], [-10.29534, -0.813516, 1.658144, 3.653901],
              [1.18064, 0.347698, 1.967074, -6.342232], [-7.164899, -3.523126, -0.470926, 8.485809],
              [3.418351, 2.553933, 1.490773, -2.048228]],
             [[-0.501586, 0.1077, -2.357006, -2.368842], [-0.121071, 1.380252, 1.204281, -0.275991],
              [-1.291201, 0.131008, -1.241147, 0.314523], [0.844425, 0.629405, -0.828144, 2.456103],
              [-1.997784, 0.747745, 0.04229, -1.806023]],
             [[-1.424821, 1.574985, -1.082755, 1.508886], [-0.489327, 0.356812, 4.34925, 0.264012],
              [-0.202696, -0.213477, -0.780377, -2.247017], [-3.140951, -0.475967, 0.7395, 2.283409],
              [-0.565004, 0.042666, -0.331385, -2.701031]],
             [[-1.381123, 0.061553, 0.886276, -0.275356], [0.044422, -1.200008, -0.624893, 0.896654],
              [1.58401, 1.278474, -1.727447, 3.632324], [-4.238496, 0.418074, 0.605648, -4.899553],
              [2.425053, -1.910532, 2.0082, 2.303325]],
             [[-0.197966, -0.969463, 0.733522, 1.466688], [1.026864, 1.322014, -3.338299, 0.846552],
              [-2.628259, 0.183582, 1.371846, -0.741172], [1.368886, -1.260879, 0.616809, -4.313796],
              [0.182371, -0.35833, -1.548063, 5.35603]],
             [[-0.488186, -1.498039, 1.169784, 1.364195], [-2.776156, -0.610298, -2.539806, 2.184038],
              [0.317412, 0.10293, 0.496664, 4.375957], [-2.537862, 1.35, -3.295853, -1.941189],
              [1.189434, -1.312082, 1.385949, -0.794173]],
             [[4.217391, 0.733073, -1.054908, -0.629293], [1.587661, 0.483559, -1.782575, -0.96856],
              [4.097282, 2.126347, -0.740354, -6.352242], [-2.707805, -1.620864, 1.318803, 2.28764],
              [1.800711, 4.180076, -3.034856, 2.68953]]]],
 'dtypes': ['float32', 'int32', 'bool', 'int32', 'float32', 'int8', 'float16', 'bfloat16'],
 'iga': [-0.230194, -0.313489, -0.197591, 0.0, -0.097178, -0.019822, -1.182868, -0.133057],
 'local': [[[[-7.107578, -2.457826, -0.16131, 1.6506, -5.161155],
             [6.375132, -2.369224, 0.866514, -5.993209, -1.330769],
             [-2.066533, -3.427749, 1.057807, -5.43245, -5.063281]],
            [[0.301142, -0.16617, 0.184202, -3.520723, -4.045928],
             [2.249308, -3.931221, -7.566917, 3.645873, 3.333712],
             [-1.47885, 2.482998, 1.567027, 3.701012, 0.123949]],
            [[2.828982, -0.214549, 0.861037, -1.356203, -0.369802],
             [-2.759937, 2.368506, 5.516539, 7.057832, 1.861264],
             [-2.458939, -0.896632, -0.45945, 0.974926, -0.005261]],
            [[-3.195194, 3.487469, 0.74208, 0.492918, 1.625408],
             [1.733818, 1.779686, -0.613111, -0.480747, -0.468951],
             [-1.09044, 2.162134, -1.379061, 0.70711, -1.270417]]]],
 'local_nchw': [[[[2.705125, -1.571554], [-1.766887, -2.814611], [2.294738, -1.691699]],
                 [[-0.248277, 7.059602], [3.34186, -1.679206], [4.622943, -0.595567]],
                 [[-7.422476, 1.391186], [1.898338, 2.090213], [-1.616556, 2.675336]],
                 [[-6.133199, 2.031013], [1.100928, -1.934327], [0.851805, 0.65443]],
                 [[-5.757402, 4.285252], [3.216066, 1.34278], [3.917441, -2.051151]]]],
 'pads': [[(1, 1), (0, 1), (1, 2)], [(1, 1), (1, 0), (2, 1)], [(0, 0), (0, 0), (0, 0)], [(1, 1), (0, 1), (1, 2)]],
 'patches_grad': [[[[0.43651, -0.627001], [0.977816, 0.938549], [1.709573, -1.101068], [-0.973751, -0.43999],
                    [-0.712993, 1.976111]],
                   [[-1.301264, -3.057006], [-1.883716, 1.569866], [-0.813122, 0.367848], [0.35434, 0.609078],
                    [0.564901, -1.867961]],
                   [[0.146342, 0.517781], [2.128325, -3.792923], [2.27607, -1.119303], [3.549003, -1.015231],
                    [-1.530165, -0.460445]],
                   [[0.956224, 1.100492], [-1.834431, 0.313461], [-2.489303, -0.29864], [1.247788, -1.134143],
                    [0.354294, -2.206217]]]],
 'patches_nchw': [[[[1.624345, -1.072969, 1.744812], [-1.099891, 0.042214, 1.144724],
                    [-0.691661, -0.845206, -1.11731]],
                   [[1.744812, -0.24937, -0.322417], [1.144724, 0.900856, -0.935769],
                    [-1.11731, 0.742044, -0.747158]],
                   [[-1.099891, 0.042214, 1.144724], [-0.691661, -0.845206, -1.11731],
                    [-0.636996, 0.120159, -0.35225]],
                   [[1.144724, 0.900856, -0.935769], [-1.11731, 0.742044, -0.747158],
                    [-0.35225, -0.208894, 0.931102]],
                   [[-0.611756, 0.865408, -0.761207], [-0.172428, 0.582815, 0.901591],
                    [-0.396754, -0.671246, 0.234416]],
                   [[-0.761207, 1.462108, -0.384054], [0.901591, -0.683728, -0.267888],
                    [0.234416, -0.191836, 1.692455]],
                   [[-0.172428, 0.582815, 0.901591], [-0.396754, -0.671246, 0.234416],
                    [0.190915, 0.617203, -1.142518]],
                   [[0.901591, -0.683728, -0.267888], [0.234416, -0.191836, 1.692455],
                    [-1.142518, 0.586623, 0.285587]]]],
 'patches_nhwc': [[[[0.0, 1.624345, -1.072969, 0.0, -1.099891, 0.042214, 0.0, -0.611756, 0.865408, 0.0, -0.172428,
                     0.582815],
                    [-1.072969, 1.744812, -0.24937, 0.042214, 1.144724, 0.900856, 0.865408, -0.761207, 1.462108,
                     0.582815, 0.901591, -0.683728],
                    [-0.24937, -0.322417, 0.0, 0.900856, -0.935769, 0.0, 1.462108, -0.384054, 0.0, -0.683728,
                     -0.267888, 0.0]],
                   [[0.0, -1.099891, 0.042214, 0.0, -0.691661, -0.845206, 0.0, -0.172428, 0.582815, 0.0, -0.396754,
                     -0.671246],
                    [0.042214, 1.144724, 0.900856, -0.845206, -1.11731, 0.742044, 0.582815, 0.901591, -0.683728,
                     -0.671246, 0.234416, -0.191836],
                    [0.900856, -0.935769, 0.0, 0.742044, -0.747158, 0.0, -0.683728, -0.267888, 0.0, -0.191836,
                     1.692455, 0.0]],
                   [[0.0, -0.691661, -0.845206, 0.0, -0.636996, 0.120159, 0.0, -0.396754, -0.671246, 0.0, 0.190915,
                     0.617203],
                    [-0.845206, -1.11731, 0.742044, 0.120159, -0.35225, -0.208894, -0.671246, 0.234416, -0.191836,
                     0.617203, -1.142518, 0.586623],
                    [0.742044, -0.747158, 0.0, -0.208894, 0.931102, 0.0, -0.191836, 1.692455, 0.0, 0.586623,
                     0.285587, 0.0]],
                   [[0.0, -0.636996, 0.120159, 0.0, 0.0, 0.0, 0.0, 0.190915, 0.617203, 0.0, 0.0, 0.0],
                    [0.120159, -0.35225, -0.208894, 0.0, 0.0, 0.0, 0.617203, -1.142518, 0.586623, 0.0, 0.0, 0.0],
                    [-0.208894, 0.931102, 0.0, 0.0, 0.0, 0.0, 0.586623, 0.285587, 0.0, 0.0, 0.0, 0.0]]]],
 'perms': [((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)), ((0, 1, 3, 2), (1, 0, 2, 3), (2, 3, 1, 0))],
 'prec_str': {'bfloat16': 'DEFAULT',
              'bfloat16_3x': 'HIGH',
              'default': 'DEFAULT',
              'fastest': 'DEFAULT',
              'float32': 'HIGHEST',
              'high': 'HIGH',
              'highest': 'HIGHEST',
              'tensorfloat32': 'HIGH'},
 'presets': ['DEFAULT', 'ANY_F8_ANY_F8_F32', 'ANY_F8_ANY_F8_F32_FAST_ACCUM', 'ANY_F8_ANY_F8_ANY',
             'ANY_F8_ANY_F8_ANY_FAST_ACCUM', 'F16_F16_F16', 'F16_F16_F32', 'BF16_BF16_BF16', 'BF16_BF16_F32',
             'BF16_BF16_F32_X3', 'BF16_BF16_F32_X6', 'BF16_BF16_F32_X9', 'TF32_TF32_F32', 'TF32_TF32_F32_X3',
             'F32_F32_F32', 'F64_F64_F64'],
 'rdg1': [[[-2.591114, 0.004377, -1.247179, 0.210007], [-0.019077, 1.781725, 0.136348, -1.576189],
           [-2.487, 2.773615, 1.044381, 1.120273], [1.963282, -2.340142, -0.897409, -0.787132],
           [0.897544, -1.38877, 0.413628, 0.405518], [2.681054, -2.282386, -0.892184, -0.070796]],
          [[-1.853096, -0.772741, -1.745455, -1.756144], [-3.057237, -1.549218, -2.008378, -2.943467],
           [-4.508314, -0.241817, 2.114308, -0.864629], [-4.800925, 0.107787, 1.464038, -1.249161],
           [-1.430343, 3.485299, 0.922804, -2.940629], [1.266863, 0.36992, -0.67631, 0.867422]]],
 'rdg2': [[[-0.178428, 0.209289, -0.07859, -0.031439], [-0.803182, -0.1778, 0.69469, -0.02201],
           [2.694889, 0.993631, -2.702606, 0.031477]],
          [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
          [[1.389245, 0.969286, -1.175939, -2.08734], [-3.181035, 0.484928, 2.527012, -1.667856],
           [-1.534527, -3.476243, 0.60379, 4.697769]]],
 'rdg3': [[[1.003049, -2.144665, 0.712354, -3.169903], [-1.003285, 0.902831, -0.452229, 4.362578]],
          [[-0.057458, 0.42232, -0.775271, 0.669156], [-2.303943, 2.038741, -0.82284, -1.192876]],
          [[-2.321828, -1.388031, -1.12493, -1.350855], [-0.003913, 1.395496, 1.093531, 2.088182]],
          [[0.051959, -0.546703, -1.03998, 2.259479], [-0.629292, -0.762459, 0.780499, 3.913884]],
          [[-1.950501, -0.031931, 0.257046, 0.437924], [2.13523, -0.309313, -0.356652, -0.46608]]],
 'rgg': [2.239531, 0.936639, 1.120394, 0.0, 1.112329, 0.89555, 3.228962, 0.791857],
 'round': [[1.0, 2.0, 3.0, -1.0, -3.0, 2.0], [0.0, 2.0, 2.0, -0.0, -2.0, 2.0]],
 'rp': {'11,52': [1065353216, 1065385984, 1065451520, 1065418752, 1065549824, 1078530000, 3224238164, 1199562752,
                  1199566592, 1199566848, 925353388, 947903040, 948045311, 2123789977, 2139081118, 2139095040,
                  4286578688, 2143289344, 0, 2147483648, 71362, 2148197272, 1131413504, 1138753536, 1138786304,
                  1140457472, 1015021568, 1012954615, 985963430, 1206984805, 3198855851],
        '3,1': [1065353216, 1065353216, 1065353216, 1065353216, 1065353216, 1077936128, 3225419776, 2139095040,
                2139095040, 2139095040, 0, 0, 0, 2139095040, 2139095040, 2139095040, 4286578688, 2143289344, 0,
                2147483648, 0, 2147483648, 2139095040, 2139095040, 2139095040, 2139095040, 0, 0, 0, 2139095040,
                3200253952],
        '4,3': [1065353216, 1065353216, 1065353216, 1065353216, 1065353216, 1078984704, 3224371200, 2139095040,
                2139095040, 2139095040, 0, 0, 0, 2139095040, 2139095040, 2139095040, 4286578688, 2143289344, 0,
                2147483648, 0, 2147483648, 1131413504, 2139095040, 2139095040, 2139095040, 1015021568, 0, 0,
                2139095040, 3199205376],
        '5,10': [1065353216, 1065385984, 1065451520, 1065418752, 1065549824, 1078525952, 3224240128, 1199562752,
                 1199562752, 2139095040, 0, 0, 948043776, 2139095040, 2139095040, 2139095040, 4286578688,
                 2143289344, 0, 2147483648, 0, 2147483648, 1131413504, 1138753536, 1138786304, 1140457472,
                 1015021568, 1012957184, 985964544, 2139095040, 3198853120],
        '5,2': [1065353216, 1065353216, 1065353216, 1065353216, 1065353216, 1077936128, 3223322624, 2139095040,
                2139095040, 2139095040, 0, 947912704, 947912704, 2139095040, 2139095040, 2139095040, 4286578688,
                2143289344, 0, 2147483648, 0, 2147483648, 1132462080, 1138753536, 1138753536, 1140850688,
                1015021568, 1012924416, 985661440, 2139095040, 3198156800],
        '8,0': [1065353216, 1065353216, 1065353216, 1065353216, 1065353216, 1082130432, 3221225472, 1199570944,
                1199570944, 1199570944, 922746880, 947912704, 947912704, 2122317824, 2139095040, 2139095040,
                4286578688, 2143289344, 0, 2147483648, 0, 2147483648, 1132462080, 1140850688, 1140850688,
                1140850688, 1015021568, 1015021568, 989855744, 1207959552, 3196059648],
        '8,23': [1065353216, 1065385984, 1065451520, 1065418752, 1065549824, 1078530000, 3224238164, 1199562752,
                 1199566592, 1199566848, 925353388, 947903040, 948045311, 2123789977, 2139081118, 2139095040,
                 4286578688, 2143289344, 0, 2147483648, 71362, 2148197272, 1131413504, 1138753536, 1138786304,
                 1140457472, 1015021568, 1012954615, 985963430, 1206984805, 3198855851],
        '8,7': [1065353216, 1065353216, 1065484288, 1065418752, 1065549824, 1078525952, 3224240128, 1199570944,
                1199570944, 1199570944, 925368320, 947912704, 948043776, 2123759616, 2139095040, 2139095040,
                4286578688, 2143289344, 0, 2147483648, 65536, 2148204544, 1131413504, 1138753536, 1138753536,
                1140457472, 1015021568, 1012924416, 985989120, 1206976512, 3198877696]},
 'rp_bf16': [1.0, 1.0, 1.0, 1.0, 1.0, 3.25, -2.75, np.inf, np.inf, np.inf, 0.0, 0.0, 0.0, np.inf, np.inf, 0.0, -0.0,
             0.0, -0.0, 240.0, np.inf, np.inf, np.inf, 0.015625, 0.0, 0.0, np.inf, -0.34375],
 'rp_in': [1065353216, 1065385984, 1065451520, 1065418752, 1065549824, 1078530000, 3224238164, 1199562752,
           1199566592, 1199566848, 925353388, 947903040, 948045311, 2123789977, 2139081118, 2139095040, 4286578688,
           2143289344, 0, 2147483648, 71362, 2148197272, 1131413504, 1138753536, 1138786304, 1140457472, 1015021568,
           1012954615, 985963430, 1206984805, 3198855851],
 'sc': {'scatter,0,None': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                           [-0.311784, 0.729004, 0.217821, -0.899092, -2.486781, 0.913252],
                           [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                           [1.127064, -1.514093, 1.639291, -0.429894, 2.631281, 0.601822]],
        'scatter,0,clip': [[0.824654, -1.176432, 1.56449, 0.712705, -0.181007, 0.5342],
                           [-0.311784, 0.729004, 0.217821, -0.899092, -2.486781, 0.913252],
                           [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                           [0.634225, 0.810655, 0.354809, 1.81259, -1.356476, -0.463632]],
        'scatter,1,None': [[0.0, 1.690526, -0.465937, 0.03282, 4.0, 5.0],
                           [0.27446, -1.526525, 1.6507, 0.002066, 10.0, 11.0],
                           [0.154336, -0.38714, 2.029072, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter,1,clip': [[0.0, 1.690526, -0.465937, 0.03282, 4.0, 5.0],
                           [0.27446, -1.526525, 1.6507, 0.002066, 10.0, 11.0],
                           [0.154336, -0.38714, 2.029072, 0.505299, -0.261356, -0.242749],
                           [18.0, 19.0, 20.0, -1.453241, 0.55458, 0.123881]],
        'scatter,2,None': [[0.0, 1.0, 0.091205, 3.0, 4.0, 1.091283], [-1.38635, 7.0, 8.0, 9.0, 10.0, 11.0],
                           [12.0, -2.296492, 14.0, 15.0, 16.0, 17.0],
                           [18.0, 19.0, 20.0, 1.727836, 2.204556, 23.0]],
        'scatter,2,clip': [[0.0, 1.0, 0.091205, 3.0, 4.0, 1.091283], [-1.38635, 7.0, 8.0, 9.0, 10.0, 11.0],
                           [12.0, -2.296492, 14.0, 15.0, 16.0, 2.409834],
                           [18.0, 19.0, 20.0, 1.727836, 2.204556, 23.0]],
        'scatter_add,0,None': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                               [5.352334, 8.966742, 8.328949, 8.23006, 7.589347, 11.758123],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [19.127064, 17.485907, 21.639292, 20.570107, 24.631281, 23.601822]],
        'scatter_add,0,clip': [[0.824654, -0.176432, 3.56449, 3.712705, 3.818993, 5.5342],
                               [5.352334, 8.966742, 8.328949, 8.23006, 7.589347, 11.758123],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [19.76129, 18.296562, 21.994101, 22.382696, 23.274805, 23.138189]],
        'scatter_add,1,None': [[0.0, 2.690526, 1.534063, 3.03282, 4.0, 5.0],
                               [6.27446, 5.880992, 8.861776, 9.002066, 10.0, 11.0],
                               [12.154336, 12.61286, 16.029072, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_add,1,clip': [[0.0, 2.690526, 1.534063, 3.03282, 4.0, 5.0],
                               [6.27446, 5.880992, 8.861776, 9.002066, 10.0, 11.0],
                               [12.154336, 12.61286, 16.029072, 15.504409, 13.983919, 17.77491],
                               [18.0, 19.0, 20.0, 20.147257, 21.929152, 22.952332]],
        'scatter_add,2,None': [[0.0, 1.0, 2.091205, 3.0, 4.0, 6.091283], [2.66668, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 10.703508, 14.0, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 22.727837, 24.204556, 23.0]],
        'scatter_add,2,clip': [[0.0, 1.0, 2.091205, 3.0, 4.0, 6.091283], [2.66668, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 10.703508, 14.0, 15.0, 16.0, 19.409834],
                               [18.0, 19.0, 20.0, 22.727837, 24.204556, 23.0]],
        'scatter_max,0,None': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_max,0,clip': [[0.824654, 1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_max,1,None': [[0.0, 1.690526, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_max,1,clip': [[0.0, 1.690526, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_max,2,None': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_max,2,clip': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_min,0,None': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                               [-0.335882, 0.729004, 0.111128, -0.899092, -2.486781, -0.155128],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [1.127064, -1.514093, 1.639291, -0.429894, 2.631281, 0.601822]],
        'scatter_min,0,clip': [[0.0, -1.176432, 1.56449, 0.712705, -0.181007, 0.5342],
                               [-0.335882, 0.729004, 0.111128, -0.899092, -2.486781, -0.155128],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [0.634225, -1.514093, 0.354809, -0.429894, -1.356476, -0.463632]],
        'scatter_min,1,None': [[0.0, 1.0, -0.465937, 0.03282, 4.0, 5.0],
                               [0.27446, -1.526525, -0.788923, 0.002066, 10.0, 11.0],
                               [0.154336, -0.38714, 2.029072, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_min,1,clip': [[0.0, 1.0, -0.465937, 0.03282, 4.0, 5.0],
                               [0.27446, -1.526525, -0.788923, 0.002066, 10.0, 11.0],
                               [0.154336, -0.38714, 2.029072, -0.00089, -1.754724, -0.242749],
                               [18.0, 19.0, 20.0, -1.453241, -0.625429, -0.171548]],
        'scatter_min,2,None': [[0.0, 1.0, 0.091205, 3.0, 4.0, 1.091283], [-1.94697, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, -2.296492, 14.0, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 1.727836, 2.204556, 23.0]],
        'scatter_min,2,clip': [[0.0, 1.0, 0.091205, 3.0, 4.0, 1.091283], [-1.94697, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, -2.296492, 14.0, 15.0, 16.0, 2.409834],
                               [18.0, 19.0, 20.0, 1.727836, 2.204556, 23.0]],
        'scatter_mul,0,None': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                               [0.628334, 6.31621, 0.193648, -1.04507, -1.893127, -1.558381],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [20.287148, -28.767773, 32.78582, -9.027766, 57.888176, 13.841912]],
        'scatter_mul,0,clip': [[0.0, -1.176432, 3.128979, 2.138115, -0.724026, 2.670998],
                               [0.628334, 6.31621, 0.193648, -1.04507, -1.893127, -1.558381],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [12.866624, -23.320738, 11.63269, -16.363642, -78.523911, -6.417553]],
        'scatter_mul,1,None': [[0.0, 1.690526, -0.931875, 0.09846, 4.0, 5.0],
                               [1.64676, -4.354585, -10.4182, 0.01859, 10.0, 11.0],
                               [1.852026, -5.032819, 28.407013, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_mul,1,clip': [[0.0, 1.690526, -0.931875, 0.09846, 4.0, 5.0],
                               [1.64676, -4.354585, -10.4182, 0.01859, 10.0, 11.0],
                               [1.852026, -5.032819, 28.407013, -0.006749, 7.337735, -4.199605],
                               [18.0, 19.0, 20.0, -18.326056, -7.630713, -0.488786]],
        'scatter_mul,2,None': [[0.0, 1.0, 0.182409, 3.0, 4.0, 5.456414], [16.195089, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, -29.854391, 14.0, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 36.284557, 48.500237, 23.0]],
        'scatter_mul,2,clip': [[0.0, 1.0, 0.182409, 3.0, 4.0, 5.456414], [16.195089, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, -29.854391, 14.0, 15.0, 16.0, 40.967186],
                               [18.0, 19.0, 20.0, 36.284557, 48.500237, 23.0]],
        'scatter_sub,0,None': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                               [6.647666, 5.033258, 7.671051, 9.76994, 12.410652, 10.241877],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [16.872936, 20.514093, 18.360708, 21.429893, 19.368719, 22.398178]],
        'scatter_sub,0,clip': [[-0.824654, 2.176432, 0.43551, 2.287295, 4.181006, 4.4658],
                               [6.647666, 5.033258, 7.671051, 9.76994, 12.410652, 10.241877],
                               [12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
                               [16.23871, 19.703438, 18.005899, 19.617304, 20.725195, 22.861811]],
        'scatter_sub,1,None': [[0.0, -0.690526, 2.465937, 2.96718, 4.0, 5.0],
                               [5.72554, 8.119008, 7.138224, 8.997934, 10.0, 11.0],
                               [11.845664, 13.38714, 11.970928, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
        'scatter_sub,1,clip': [[0.0, -0.690526, 2.465937, 2.96718, 4.0, 5.0],
                               [5.72554, 8.119008, 7.138224, 8.997934, 10.0, 11.0],
                               [11.845664, 13.38714, 11.970928, 14.495591, 18.016081, 16.22509],
                               [18.0, 19.0, 20.0, 21.852743, 22.070848, 23.047668]],
        'scatter_sub,2,None': [[0.0, 1.0, 1.908795, 3.0, 4.0, 3.908717], [9.33332, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 15.296492, 14.0, 15.0, 16.0, 17.0],
                               [18.0, 19.0, 20.0, 19.272163, 19.795444, 23.0]],
        'scatter_sub,2,clip': [[0.0, 1.0, 1.908795, 3.0, 4.0, 3.908717], [9.33332, 7.0, 8.0, 9.0, 10.0, 11.0],
                               [12.0, 15.296492, 14.0, 15.0, 16.0, 14.590166],
                               [18.0, 19.0, 20.0, 19.272163, 19.795444, 23.0]]},
 'sc_apply': [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [27.0, 31.0, 35.0, 39.0, 43.0, 47.0],
              [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [37.0, 39.0, 41.0, 43.0, 45.0, 47.0]],
 'sc_apply_u': [[0.0, 0.841471, 0.909297, 0.14112, 4.0, 5.0], [6.0, 0.656987, 0.989358, 0.412118, 10.0, 11.0],
                [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]],
 'sc_grad': [[[1.0, -0.899982, 0.036725, -0.99409, -0.653644, 0.283662],
              [0.999962, 0.920205, -0.845657, -0.91198, -0.839072, 0.004426],
              [0.916308, 0.99892, -0.948886, -0.759688, -0.957659, -0.275163],
              [0.660317, 0.988705, 0.408082, -0.547729, -0.999961, -0.532833]],
             [[[-0.899982, 0.036725, -0.99409], [0.920205, -0.845657, -0.91198]],
              [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
              [[0.999962, 0.920205, -0.845657], [0.916308, 0.99892, -0.948886]]]],
 'shapes': [(2, 5, 7, 5), (2, 5, 4, 4), (2, 5, 4, 6), (4, 5, 5, 3), (2, 10, 12, 4), (2, 11, 18, 4), (2, 10, 16, 4),
            (9, 6), (4, 6)]}
