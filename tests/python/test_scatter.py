"""x.at[idx].set/add/mul/min/max and lax.scatter* against numpy: np.put-style assignment in a loop (the last
value of a repeated index stays), np.add.at, np.multiply.at, np.minimum.at, np.maximum.at; gradients by hand."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax


def close(actual, expected, rtol=1e-5, atol=1e-6):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def put_last(a, idx, v, axis=0):
    """a with v written at idx along axis, one index at a time in order (the last write stays)."""
    out = np.moveaxis(a.copy(), axis, 0)
    vs = np.moveaxis(v, axis, 0)
    for i, j in enumerate(idx):
        out[j] = vs[i]
    return np.moveaxis(out, 0, axis)


UFUNC_AT = {"add": np.add.at, "mul": np.multiply.at, "min": np.minimum.at, "max": np.maximum.at}


@pytest.mark.parametrize("mode", ["set", "add", "mul", "min", "max"])
def test_at_with_repeated_indices(rng, mode):
    a = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([4, 1, 4, 0, 4, -1, 1], dtype=np.int32)  # -1 is the last row, as in numpy
    v = rng.standard_normal((7, 3)).astype(np.float32)
    if mode == "set":
        ref = put_last(a, idx % 6, v)
    else:
        ref = a.copy()
        UFUNC_AT[mode](ref, idx, v)
    got = getattr(tnp.asarray(a).at[idx], mode)(tnp.asarray(v))
    close(got, ref)
    close(tessera.jit(lambda x, u: getattr(x.at[idx], mode)(u))(tnp.asarray(a), tnp.asarray(v)), ref)


@pytest.mark.parametrize("mode", ["set", "mul", "min", "max"])
def test_at_on_a_middle_axis_and_with_basic_indices(rng, mode):
    a = rng.standard_normal((2, 5, 3)).astype(np.float32)
    idx = np.array([3, 3, 0], dtype=np.int32)
    v = rng.standard_normal((2, 3, 3)).astype(np.float32)
    if mode == "set":
        ref = put_last(a, idx, v, axis=1)
    else:
        ref = a.copy()
        for i, j in enumerate(idx):  # ufunc.at along axis 1
            ref[:, j] = {"mul": np.multiply, "min": np.minimum, "max": np.maximum}[mode](ref[:, j], v[:, i])
    close(getattr(tnp.asarray(a).at[:, idx], mode)(tnp.asarray(v)), ref)
    # Basic indices: a slice of rows combined with a scalar.
    b = a.copy()
    region = b[:, 1:4]
    b[:, 1:4] = {"set": lambda r: np.full_like(r, 0.5), "mul": lambda r: r * 0.5,
                 "min": lambda r: np.minimum(r, 0.5), "max": lambda r: np.maximum(r, 0.5)}[mode](region)
    close(getattr(tnp.asarray(a).at[:, 1:4], mode)(0.5), b)


def test_at_integer_and_bool_dtypes():
    a = np.array([3, -2, 7, 1], dtype=np.int32)
    idx = np.array([0, 2, 0, 3], dtype=np.int32)
    v = np.array([5, -4, 2, 9], dtype=np.int32)
    for mode in ("mul", "min", "max"):
        ref = a.copy()
        UFUNC_AT[mode](ref, idx, v)
        got = np.asarray(getattr(tnp.asarray(a).at[idx], mode)(tnp.asarray(v)))
        assert got.dtype == np.int32 and (got == ref).all(), (mode, got, ref)
    got = np.asarray(tnp.asarray(a).at[idx].set(tnp.asarray(v)))
    assert (got == put_last(a, idx, v)).all()
    flags = np.array([True, False, True])
    got = np.asarray(tnp.asarray(flags).at[np.array([1, 0, 1])].set(tnp.asarray(np.array([True, False, False]))))
    assert got.dtype == np.bool_ and got.tolist() == [False, False, True]


def test_at_out_of_range_indices_are_dropped(rng):
    a = rng.standard_normal((4,)).astype(np.float32)
    idx = np.array([1, 7, -9, 1], dtype=np.int32)  # 7 and -9 (-> -5) stay out of range
    v = np.array([10.0, 20.0, 30.0, 40.0], dtype=np.float32)
    ref = a.copy()
    ref[1] = 40.0
    close(tnp.asarray(a).at[idx].set(tnp.asarray(v)), ref)
    ref = a.copy()
    ref[1] *= 400.0
    close(tnp.asarray(a).at[idx].mul(tnp.asarray(v)), ref)


def test_at_set_gradient_goes_to_the_last_update():
    x = tnp.asarray(np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32))
    v = tnp.asarray(np.array([10.0, 20.0, 30.0], dtype=np.float32))
    w = tnp.asarray(np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32))
    idx = np.array([2, 0, 2], dtype=np.int32)
    gx, gv = tessera.grad(lambda x, v: tnp.sum(x.at[idx].set(v) * w), argnums=(0, 1))(x, v)
    close(gx, [0.0, 2.0, 0.0, 4.0])
    close(gv, [0.0, 1.0, 3.0])  # the first update at 2 was overwritten


def test_at_mul_gradient_with_a_zero_update():
    x = tnp.asarray(np.array([2.0, 3.0], dtype=np.float32))
    v = tnp.asarray(np.array([0.0, 5.0, 4.0], dtype=np.float32))
    idx = np.array([0, 0, 1], dtype=np.int32)
    gx, gv = tessera.grad(lambda x, v: tnp.sum(x.at[idx].mul(v)), argnums=(0, 1))(x, v)
    close(gx, [0.0, 4.0])
    close(gv, [10.0, 0.0, 3.0])  # d/dv0 = x0 * v1


@pytest.mark.parametrize("name,ufunc", [("scatter_add", np.add.at), ("scatter_mul", np.multiply.at),
                                        ("scatter_min", np.minimum.at), ("scatter_max", np.maximum.at),
                                        ("scatter", None)])
def test_lax_scatter_with_batch_dims(rng, name, ufunc):
    # operand [B=2, A=5, C=3], indices [2, 4] per batch row, updates [2, 4, 3] (tf.gather's layout).
    a = rng.standard_normal((2, 5, 3)).astype(np.float32)
    idx = np.array([[1, 1, 4, 9], [0, 2, 0, 2]], dtype=np.int32)
    u = rng.standard_normal((2, 4, 3)).astype(np.float32)
    ref = a.copy()
    for b in range(2):
        keep = idx[b] < 5
        if ufunc is None:
            ref[b] = put_last(ref[b], idx[b][keep], u[b][keep])
        else:
            ufunc(ref[b], idx[b][keep], u[b][keep])
    close(getattr(lax, name)(tnp.asarray(a), tnp.asarray(idx), tnp.asarray(u), axis=1, batch_dims=1), ref)
    # vmap over the batch rows gives the same.
    per_row = tessera.vmap(lambda x, i, v: getattr(lax, name)(x, i, v, axis=0))
    close(per_row(tnp.asarray(a), tnp.asarray(idx), tnp.asarray(u)), ref)


def test_lax_scatter_errors_name_the_op():
    with pytest.raises(tessera.TesseraError, match="scatter_max"):
        lax.scatter_max(tnp.zeros((4, 3)), tnp.asarray(np.array([1, 2], dtype=np.int32)), tnp.zeros((2, 4)))
