"""jax.lax's convolution helpers (conv_with_general_padding, conv_general_dilated_patches,
conv_general_dilated_local), reduce_precision, the stateless bit generators, ragged_dot, scatter_apply and the
small utilities (platform_dependent, composite, igamma_grad_a, random_gamma_grad, shape_as_value), composed
of tessera's ops; tessera.lax re-exports them."""

import enum as _enum
import functools as _functools
import math as _math
import os as _os

import numpy as _np

from . import _tessera as _C
from . import _lax_types
from . import numpy as _tnp
from .numpy import asarray

__all__ = ["conv_with_general_padding", "conv_general_dilated_patches", "conv_general_dilated_local",
           "reduce_precision", "rng_bit_generator", "rng_uniform", "RandomAlgorithm", "ragged_dot",
           "ragged_dot_general", "scatter_apply", "platform_dependent", "composite", "igamma_grad_a",
           "random_gamma_grad", "shape_as_value"]


def _lax():
    from . import lax
    return lax


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, precision=None,
                              preferred_element_type=None):
    """jax.lax.conv_with_general_padding: conv_general_dilated in NC.../OI.../NC... with both dilations."""
    return _lax().conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                       rhs_dilation=rhs_dilation, precision=precision,
                                       preferred_element_type=preferred_element_type)


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                                 dimension_numbers=None, precision=None, preferred_element_type=None):
    """jax.lax.conv_general_dilated_patches: each output position's receptive field of size filter_shape, laid
    out in the out_spec's feature dim as (channel, *filter_shape) flattened, C-major, as JAX's: a grouped conv
    (one group per channel) with an identity kernel, so the gradient is the conv's."""
    lhs = asarray(lhs)
    filter_shape = tuple(int(k) for k in filter_shape)
    dn = _lax_types.conv_dimension_numbers(lhs.shape, (1, 1) + filter_shape, dimension_numbers)
    spatial_size = _math.prod(filter_shape)
    n_channels = lhs.shape[dn.lhs_spec[1]]
    eye = _tnp.eye(spatial_size, dtype=lhs.dtype)  # [S, S]
    rhs = _tnp.broadcast_to(eye, (n_channels, spatial_size, spatial_size))
    rhs = _tnp.reshape(rhs, (n_channels * spatial_size, 1) + filter_shape)  # O I spatial...
    rhs = _tnp.moveaxis(rhs, (0, 1), (dn.rhs_spec[0], dn.rhs_spec[1]))
    return _lax().conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                       rhs_dilation=rhs_dilation, dimension_numbers=dn,
                                       feature_group_count=n_channels, precision=precision,
                                       preferred_element_type=preferred_element_type)


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape, lhs_dilation=None,
                               rhs_dilation=None, dimension_numbers=None, precision=None):
    """jax.lax.conv_general_dilated_local: an unshared convolution, each output position with its own kernel.
    rhs holds, in rhs_spec, O, I (= lhs channels * prod(filter_shape), C-major as the patches) and the output's
    spatial dims. The patches' dot_general with rhs, batched over the output positions."""
    lhs = asarray(lhs)
    patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
                                           dimension_numbers, precision=None)
    lhs_spec, rhs_spec, out_spec = _lax_types.conv_dimension_numbers(lhs.shape, (1, 1) + tuple(filter_shape),
                                                                     dimension_numbers)
    lhs_b, rhs_b = list(out_spec[2:]), list(rhs_spec[2:])
    rhs_b = [rhs_b[i] for i in sorted(range(len(rhs_b)), key=lambda k: lhs_b[k])]
    lhs_b = sorted(lhs_b)
    dn = (([out_spec[1]], [rhs_spec[1]]), (lhs_b, rhs_b))
    out = _lax().dot_general(patches, rhs, dn, precision=precision)  # [spatial..., N, O]
    return _tnp.moveaxis(out, (-2, -1), (out_spec[0], out_spec[1]))


# (total bits, exponent bits, mantissa bits, the signed integer of that width) of the formats reduced in place.
_FORMATS = {"f32": (32, 8, 23, "i32"), "f64": (64, 11, 52, "i64")}


def _reduce_precision_bits(x, exponent_bits, mantissa_bits):
    """XLA's ReducePrecision on the bits of x (f32 or f64): the mantissa rounded to nearest even at
    mantissa_bits, then exponents past the reduced range to signed infinity and below its normal range to signed
    zero; NaNs stay NaNs. Two's complement addition gives the unsigned sums XLA computes."""
    width, n_exp, n_man, int_dtype = _FORMATS[x._dtype_name]
    np_int = _np.int32 if int_dtype == "i32" else _np.int64
    bits = _lax().bitcast_convert_type(x, np_int)

    def const(v):  # v's low `width` bits as a signed integer of the format's width
        v &= (1 << width) - 1
        return asarray(np_int(v - (1 << width) if v >> (width - 1) else v), dtype=np_int)  # int64 kept as such

    if mantissa_bits < n_man:
        shift = n_man - mantissa_bits
        last_bit = 1 << shift
        last = _C.bitwise_and(_lax().shift_right_logical(bits, const(shift)), const(1))
        bits = bits + (last + const((last_bit >> 1) - 1))
        bits = _C.bitwise_and(bits, const(~(last_bit - 1)))
    if exponent_bits < n_exp:
        exp_mask = ((1 << n_exp) - 1) << n_man
        bias = (1 << (n_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = _C.bitwise_and(bits, const(exp_mask))
        overflows = _C.greater(exponent, const((bias + reduced_bias) << n_man))
        underflows = _C.less_equal(exponent, const((bias - reduced_bias) << n_man))
        signed_zero = _C.bitwise_and(bits, const(1 << (width - 1)))
        signed_inf = _C.bitwise_or(signed_zero, const(exp_mask))
        bits = _C.where(overflows, signed_inf, _C.where(underflows, signed_zero, bits))
    out = _lax().bitcast_convert_type(bits, str(x.dtype))
    return _C.where(_C.not_equal(x, x), x, out)  # NaNs stay NaNs, even with no mantissa bits to hold them


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """jax.lax.reduce_precision: operand rounded (to nearest even) to a float with exponent_bits and
    mantissa_bits, kept in operand's dtype; bit-exact with XLA for f32 and f64 (f16/bf16 via f32). Values past
    the format's range become infinities, those below its normal range zeros. Its derivative is the identity
    (JAX's rounds the tangent too, which is the identity up to that rounding)."""
    exponent_bits, mantissa_bits = int(exponent_bits), int(mantissa_bits)
    if exponent_bits < 1 or mantissa_bits < 0:
        raise ValueError(f"reduce_precision: exponent_bits must be positive and mantissa_bits non-negative, got "
                         f"{exponent_bits} and {mantissa_bits}")
    x = asarray(operand)
    if x._dtype_name not in ("f32", "f64", "f16", "bf16"):
        raise TypeError(f"reduce_precision: operand must have a floating dtype, got {x.dtype}")

    from . import custom_jvp

    @custom_jvp
    def rp(v):
        if v._dtype_name in _FORMATS:
            return _reduce_precision_bits(v, exponent_bits, mantissa_bits)
        return _C.astype(_reduce_precision_bits(_C.astype(v, "f32"), exponent_bits, mantissa_bits), v._dtype_name)

    @rp.defjvp
    def _rp_jvp(primals, tangents):
        return rp(primals[0]), tangents[0]

    return rp(x)


class RandomAlgorithm(_enum.IntEnum):
    """jax.lax.RandomAlgorithm: rng_bit_generator's algorithm. Every choice draws with the engine's threefry
    (JAX leaves the bits to the implementation)."""
    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2


_BIT_DTYPES = {"u8": "uint8", "u32": "uint32"}


def rng_bit_generator(key, shape, dtype=_np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *, out_sharding=None):
    """jax.lax.rng_bit_generator: (new key, uniform random bits of shape and dtype (uint8 or uint32)) from a
    uint32 key of 2 or 4 words (JAX's CPU keys have 4). The bits are the engine's threefry of the key folded to
    2 words, not XLA's: JAX leaves them to the implementation. The new key has the key's shape."""
    key = asarray(key)
    if key._dtype_name != "u32" or key.ndim != 1 or key.shape[0] not in (2, 4):
        raise TypeError(f"rng_bit_generator: key must be uint32[2] or uint32[4], got {key.dtype}{list(key.shape)}")
    want = _tnp._engine_dtype(dtype)
    if want not in _BIT_DTYPES:
        raise TypeError(f"rng_bit_generator: unsupported dtype {_np.dtype(dtype) if want != 'bf16' else dtype} "
                        "(uint8 or uint32 here; JAX also has uint16 and uint64)")
    from . import random as _random
    base = key if key.shape[0] == 2 else _C.bitwise_xor(key[:2], key[2:])
    keys = _random.split(base)
    new_key = keys[0] if key.shape[0] == 2 else _tnp.concatenate([_C.bitwise_xor(keys[0], key[2:]), key[2:]])
    return new_key, _random.bits(keys[1], tuple(int(s) for s in shape), want)



def rng_uniform(a, b, shape):
    """jax.lax.rng_uniform: samples in [a, b) of shape, of a's dtype (integers uniform over a..b-1); a and b
    scalars. Stateful as XLA's RngUniform: every run draws a fresh key from the host (os.urandom, through an
    io_callback, so a jitted function gives new values at each call, and a sharded one the same on every
    device); use tessera.random with explicit keys for values that can be reproduced."""
    a, b = asarray(a), asarray(b)
    if a.ndim or b.ndim:
        raise ValueError(f"Arguments to rng_uniform must be scalars; got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}.")
    if a.dtype != b.dtype:
        raise TypeError(f"Arguments to rng_uniform must have identical dtypes, got {a.dtype} and {b.dtype}.")
    from . import random as _random
    from .debug import io_callback
    from ._transforms import ShapeDtypeStruct

    def fresh():
        return _np.frombuffer(_os.urandom(8), _np.uint32)  # a Threefry key: any two words

    key = io_callback(fresh, ShapeDtypeStruct((2,), _np.uint32))
    shape = tuple(int(s) for s in shape)
    if a._dtype_name in ("i32", "i64", "u8", "u32"):
        return _random.randint(key, shape, a, b, dtype=a.dtype)
    u = _random.uniform(key, shape, dtype=a.dtype)
    return _tnp.minimum(a + u * (b - a), _tnp.nextafter(b, a))


def _group_mask(group_sizes, n, dtype):
    """[n, g]: 1 where row r lies in group j (groups are consecutive runs of group_sizes[j] rows from row 0;
    rows past their sum in none)."""
    sizes = _C.astype(asarray(group_sizes), "i32")
    if sizes.ndim != 1:
        raise NotImplementedError(f"ragged_dot: group_sizes of shape {tuple(sizes.shape)}; only [g] is supported")
    ends = _tnp.cumsum(sizes)
    starts = ends - sizes
    rows = _tnp.arange(n, dtype=_np.int32)[:, None]
    return _tnp.astype(_C.bitwise_and(_C.greater_equal(rows, starts[None, :]), _C.less(rows, ends[None, :])), dtype)


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=None,
                       preferred_element_type=None, group_offset=None, out_sharding=None):
    """jax.lax.ragged_dot_general's three modes, with group_sizes [g] (consecutive groups along the lhs ragged
    dim): ragged non-contracting dim -> each group's rows times its rhs group slice; ragged contracting dim ->
    a leading g dim, group j contracting only its run; ragged batch dim -> dot_general (JAX's result too). Composed of a 0/1 group mask and one dot_general (differentiable, batches)."""
    if group_offset is not None:
        raise NotImplementedError("ragged_dot_general: group_offset is not supported")
    _lax_types.canonicalize_precision(precision)
    lax = _lax()
    lhs, rhs = asarray(lhs), asarray(rhs)
    dn = ragged_dot_dimension_numbers
    (lc, rc), (lb, rb) = dn.dot_dimension_numbers
    lc, rc, lb, rb = list(lc), list(rc), list(lb), list(rb)
    if len(dn.lhs_ragged_dimensions) != 1:
        raise TypeError(f"ragged_dot_general requires one lhs ragged dimension, got {dn.lhs_ragged_dimensions}")
    ragged = dn.lhs_ragged_dimensions[0] % lhs.ndim
    g = asarray(group_sizes).shape[-1]
    if ragged in lc or ragged in lb:
        if dn.rhs_group_dimensions:
            raise TypeError("ragged_dot_general: an rhs group dimension needs a non-contracting lhs ragged dim")
    elif len(dn.rhs_group_dimensions) != 1:
        raise TypeError("ragged_dot_general: a non-contracting lhs ragged dim needs one rhs group dimension")

    def on_ragged(m, extra_at):  # mask [rows, g] as an array broadcasting against lhs with a g dim at extra_at
        shape = [1] * (lhs.ndim + 1)
        shape[ragged + (ragged >= extra_at)] = lhs.shape[ragged]
        shape[extra_at] = g
        return _tnp.reshape(m, shape) if ragged + (ragged >= extra_at) < extra_at else \
            _tnp.reshape(_tnp.transpose(m), shape)

    if ragged in lb:  # mode 3: batch entries are independent, so the groups change nothing (as JAX computes it)
        return lax.dot_general(lhs, rhs, ((lc, rc), (lb, rb)), preferred_element_type=preferred_element_type)
    mask = _group_mask(group_sizes, lhs.shape[ragged], lhs.dtype)  # [rows, g]
    if ragged in lc:  # mode 2: a new leading lhs dim g, masked along the ragged contraction
        lhs_g = _tnp.expand_dims(lhs, 0) * on_ragged(mask, 0)
        out = lax.dot_general(lhs_g, rhs, (([d + 1 for d in lc], rc), ([d + 1 for d in lb], rb)),
                              preferred_element_type=preferred_element_type)
        return _tnp.moveaxis(out, len(lb), 0)  # [b..., g, m..., n...] -> [g, b..., m..., n...]
    gdim = dn.rhs_group_dimensions[0] % rhs.ndim  # mode 1: contract the group dim with a masked g dim of lhs
    lhs_g = _tnp.expand_dims(lhs, lhs.ndim) * on_ragged(mask, lhs.ndim)
    return lax.dot_general(lhs_g, rhs, ((lc + [lhs.ndim], rc + [gdim]), (lb, rb)),
                           preferred_element_type=preferred_element_type)


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None, group_offset=None,
               out_sharding=None):
    """jax.lax.ragged_dot: lhs [m, k], rhs [g, k, n], group_sizes [g] -> [m, n]: the rows of group j (a run of
    group_sizes[j] rows) times rhs[j]; rows past sum(group_sizes) are zero."""
    dn = _lax_types.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])
    return ragged_dot_general(lhs, rhs, group_sizes, dn, precision, preferred_element_type, group_offset)


def scatter_apply(operand, scatter_indices, func, dimension_numbers, *, update_shape=(), indices_are_sorted=False,
                  unique_indices=False, mode=None):
    """jax.lax.scatter_apply: func applied to operand's elements at the scattered positions, once per update
    element that lands there (as XLA applies it; a position hit twice gets func(func(x))). With unique_indices
    a single where (differentiable); otherwise a while_loop over the hit counts (not differentiable)."""
    from ._lax_slicing import scatter_linear_indices
    x = asarray(operand)
    updates = _tnp.zeros(tuple(update_shape), dtype=x.dtype)
    linear = scatter_linear_indices(x, scatter_indices, updates, dimension_numbers, mode)
    ones = _tnp.ones(linear.shape, dtype=_np.int32)
    counts = _tnp.reshape(_C.scatter_add(_tnp.zeros((x.size,), dtype=_np.int32), _C.reshape(linear, [-1]),
                                         _C.reshape(ones, [-1]), 0, 0), x.shape)
    if unique_indices:
        return _tnp.where(counts > 0, func(x), x)

    def body(carry):
        v, c = carry
        return _tnp.where(c > 0, func(v), v), c - 1

    return _lax().while_loop(lambda carry: _tnp.any(carry[1] > 0), body, (x, counts))[0]


def platform_dependent(*args, default=None, **per_platform):
    """jax.lax.platform_dependent: the "cpu" branch (tessera's platform), else default, called on args."""
    fn = per_platform.get("cpu", default)
    if fn is None:
        raise NotImplementedError(f"platform_dependent: no branch for cpu (given {sorted(per_platform)}) and no "
                                  "default")
    return fn(*args)


def composite(decomposition, name, version=0):
    """jax.lax.composite: decomposition itself, named (the keyword arguments it is called with are the
    composite's attributes); the engine compiles the decomposition."""
    @_functools.wraps(decomposition)
    def call(*args, **kwargs):
        return decomposition(*args, **kwargs)
    call.composite_name, call.composite_version = name, version
    return call


_IGAMMA_TERMS = 512


def _igamma_grad_a64(a, x):
    """igamma_grad_a's float64 value for broadcast a and x."""
    a64, x64 = _tnp.astype(a, _np.float64)[..., None], _tnp.astype(x, _np.float64)[..., None]
    positive = x64 > 0
    logx = _tnp.log(_tnp.where(positive, x64, 1.0))
    n = _tnp.arange(_IGAMMA_TERMS, dtype=_np.float64)
    t = _tnp.exp((a64 + n) * logx - x64 - _lax().lgamma(a64 + n + 1))
    d = _tnp.sum(t * (logx - _lax().digamma(a64 + n + 1)), axis=-1)
    out = _tnp.where(positive[..., 0], d, 0.0)
    return _tnp.where(_tnp.logical_or(a <= 0, x < 0), _np.nan, out)


def igamma_grad_a(a, x):
    """d/da of the regularized lower incomplete gamma P(a, x), elementwise, from P's series in float64:
    P = sum_n t_n, t_n = exp((a + n) log x - x - lgamma(a + n + 1)), so dP/da = sum_n t_n (log x -
    digamma(a + n + 1)); 512 terms, accurate while x (and a) stay below a few hundred. 0 at x = 0."""
    a, x = _tnp.broadcast_arrays(asarray(a), asarray(x))
    return _tnp.astype(_igamma_grad_a64(a, x), _tnp.result_type(a.dtype, _np.float32))


def random_gamma_grad(a, x):
    """d sample / d a of a Gamma(a, 1) sample x, by implicit differentiation of P(a, x) = u:
    -(dP/da) / (dP/dx), dP/dx = x^(a-1) e^-x / Gamma(a), in float64; 0 at x = 0. Far in the upper tail
    (P within 1e-16 of 1) dP/da is lost to rounding, where JAX's asymptotic form still has digits."""
    a, x = _tnp.broadcast_arrays(asarray(a), asarray(x))
    a64, x64 = _tnp.astype(a, _np.float64), _tnp.astype(x, _np.float64)
    positive = x64 > 0
    xs = _tnp.where(positive, x64, 1.0)
    density = _tnp.exp((a64 - 1) * _tnp.log(xs) - xs - _lax().lgamma(a64))
    out = _tnp.where(positive, -_igamma_grad_a64(a, x) / density, 0.0)
    return _tnp.astype(out, _tnp.result_type(a.dtype, _np.float32))


def shape_as_value(shape):
    """jax.lax.shape_as_value: the shape as an int32 array of its sizes."""
    return asarray(_np.asarray(tuple(int(s) for s in shape), dtype=_np.int32))
