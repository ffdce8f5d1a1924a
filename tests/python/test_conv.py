"""lax.conv_general_dilated and lax.conv against a numpy loop reference (NCHW and NHWC, SAME/VALID/explicit
padding, strides, dilations, groups), eagerly, under jit and under grad."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax


def ref_conv_nchw(x, w, strides, pads, lhs_dil=(1, 1), rhs_dil=(1, 1), groups=1):
    """x: [N, C, H, W], w: [O, I, KH, KW] -> [N, O, OH, OW], straight from the definition."""
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    hd, wdd = (h - 1) * lhs_dil[0] + 1, (wd - 1) * lhs_dil[1] + 1
    xd = np.zeros((n, c, hd, wdd), np.float64)
    xd[:, :, ::lhs_dil[0], ::lhs_dil[1]] = x
    (plo, phi), (qlo, qhi) = pads
    xp = np.zeros((n, c, hd + plo + phi, wdd + qlo + qhi), np.float64)
    xp[:, :, plo:plo + hd, qlo:qlo + wdd] = xd
    ekh, ekw = (kh - 1) * rhs_dil[0] + 1, (kw - 1) * rhs_dil[1] + 1
    oh = (xp.shape[2] - ekh) // strides[0] + 1
    ow = (xp.shape[3] - ekw) // strides[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b in range(n):
        for f in range(o):
            g = f // og
            for y in range(oh):
                for z in range(ow):
                    patch = xp[b, g * i:(g + 1) * i, y * strides[0]:y * strides[0] + ekh:rhs_dil[0],
                               z * strides[1]:z * strides[1] + ekw:rhs_dil[1]]
                    out[b, f, y, z] = np.sum(patch * w[f])
    return out


def close(a, b, tol=1e-4):
    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)


def test_conv_valid_and_same(rng):
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    close(lax.conv(x, w, (1, 1), "VALID"), ref_conv_nchw(x, w, (1, 1), ((0, 0), (0, 0))))
    # SAME with stride 2: out = ceil(in / 2); total padding (out-1)*2 + 3 - in (2 for H = 7, 1 for W = 6), the
    # extra on the high side.
    out = lax.conv(x, w, (2, 2), "SAME")
    assert out.shape == (2, 4, 4, 3)
    close(out, ref_conv_nchw(x, w, (2, 2), ((1, 1), (0, 1))))


def test_conv_general_dilated_nhwc_explicit_padding_dilations(rng):
    x = rng.standard_normal((2, 6, 5, 3)).astype(np.float32)  # NHWC
    w = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)  # HWIO
    out = lax.conv_general_dilated(x, w, (1, 2), [(2, 1), (0, 1)], lhs_dilation=(2, 1), rhs_dilation=(1, 2),
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
    ref = ref_conv_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (1, 2), ((2, 1), (0, 1)), (2, 1), (1, 2))
    close(out, ref.transpose(0, 2, 3, 1))


def test_depthwise_groups_under_jit(rng):
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    f = tessera.jit(lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", feature_group_count=4))
    close(f(x, w), ref_conv_nchw(x, w, (1, 1), ((1, 1), (1, 1)), groups=4))


def test_grad_matches_finite_differences(rng):
    x = rng.standard_normal((1, 2, 5, 4))
    w = rng.standard_normal((3, 2, 2, 3))
    loss = lambda a, b: tnp.sum(lax.conv(a, b, (2, 1), [(1, 0), (1, 1)]) ** 2)
    gx, gw = tessera.grad(loss, argnums=(0, 1))(x, w)
    ref = lambda a, b: np.sum(ref_conv_nchw(a, b, (2, 1), ((1, 0), (1, 1))) ** 2)
    eps = 1e-6
    for arr, g, which in ((x, gx, 0), (w, gw, 1)):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args_p = (plus, w) if which == 0 else (x, plus)
            args_m = (minus, w) if which == 0 else (x, minus)
            num[idx] = (ref(*args_p) - ref(*args_m)) / (2 * eps)
        close(g, num, tol=1e-3)


def test_bad_shapes_raise_a_shape_error():
    x = np.zeros((1, 3, 5, 5), np.float32)
    w = np.zeros((4, 2, 3, 3), np.float32)
    with pytest.raises(tessera.ShapeError, match="conv_general_dilated"):
        lax.conv(x, w, (1, 1), "VALID")
    with pytest.raises(tessera.ShapeError, match="padding"):
        lax.conv(x, np.zeros((4, 3, 3, 3), np.float32), (1, 1), "FULL")
