"""tessera.nn.initializers (jax.nn.initializers): each makes an init_fn(key, shape, dtype)."""

import math

from . import numpy as tnp
from . import random


class initializers:
    """Parameter initializers, as jax.nn.initializers: each makes an init_fn(key, shape, dtype)."""

    @staticmethod
    def zeros(key, shape, dtype=tnp.float32):
        return tnp.zeros(shape, dtype)

    @staticmethod
    def ones(key, shape, dtype=tnp.float32):
        return tnp.ones(shape, dtype)

    @staticmethod
    def normal(stddev=1e-2):
        return lambda key, shape, dtype=tnp.float32: random.normal(key, shape, dtype) * stddev

    @staticmethod
    def constant(value, dtype=tnp.float32):
        return lambda key, shape, dtype=dtype: tnp.full(shape, value, dtype)

    @staticmethod
    def uniform(scale=1e-2, dtype=tnp.float32):
        """Uniform on [0, scale)."""
        return lambda key, shape, dtype=dtype: random.uniform(key, shape, dtype, 0.0, scale)

    @staticmethod
    def truncated_normal(stddev=1e-2, dtype=tnp.float32, lower=-2.0, upper=2.0):
        """stddev times a standard normal truncated to [lower, upper]."""
        return lambda key, shape, dtype=dtype: random.truncated_normal(key, lower, upper, shape, dtype) * stddev

    @staticmethod
    def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(), dtype=tnp.float32):
        """jax.nn.initializers.variance_scaling: samples with variance scale / n, n the fan in, the fan out, their
        mean (fan_avg) or geometric mean (fan_geo_avg). The fans are the in (out) axes' sizes times the receptive
        field (the product of the dims that are neither in, out nor batch axes); a 0-D or 1-D shape needs in_axis
        given. distribution: "truncated_normal" (at two standard deviations, rescaled to the variance), "normal"
        or "uniform"."""
        if mode not in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
            raise ValueError(f"variance_scaling: invalid mode {mode!r} (fan_in, fan_out, fan_avg or fan_geo_avg)")
        if distribution not in ("truncated_normal", "normal", "uniform"):
            raise ValueError(f"variance_scaling: invalid distribution {distribution!r} (truncated_normal, normal "
                             "or uniform)")

        def init(key, shape, dtype=dtype):
            shape = tuple(shape)
            fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
            n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2,
                 "fan_geo_avg": math.sqrt(fan_in * fan_out)}[mode]
            variance = scale / n
            if distribution == "truncated_normal":
                std = math.sqrt(variance) / 0.87962566103423978  # a unit normal cut at +-2 has this deviation
                return random.truncated_normal(key, -2.0, 2.0, shape, dtype) * std
            if distribution == "normal":
                return random.normal(key, shape, dtype) * math.sqrt(variance)
            return random.uniform(key, shape, dtype, -1.0, 1.0) * math.sqrt(3 * variance)

        return init

    @staticmethod
    def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=tnp.float32):
        return initializers.variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)

    @staticmethod
    def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=tnp.float32):
        return initializers.variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis, dtype)

    @staticmethod
    def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=tnp.float32):
        """Variance 1 / fan_in, truncated at two standard deviations (JAX's)."""
        return initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)

    @staticmethod
    def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=tnp.float32):
        return initializers.variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)

    @staticmethod
    def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=tnp.float32):
        return initializers.variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)

    @staticmethod
    def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=tnp.float32):
        return initializers.variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)

    xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
    kaiming_uniform, kaiming_normal = he_uniform, he_normal

    @staticmethod
    def orthogonal(scale=1.0, column_axis=-1, dtype=tnp.float32):
        """A (semi-)orthogonal matrix of the dims along column_axis against all the others (the Q of a normal
        matrix's QR, its signs set by R's diagonal), reshaped to shape and times scale."""

        def init(key, shape, dtype=dtype):
            shape = tuple(shape)
            if len(shape) < 2:
                raise ValueError(f"orthogonal initializer requires at least a 2D shape; got {shape}")
            axis = column_axis % len(shape)
            n_cols = shape[axis]
            n_rows = math.prod(shape) // n_cols
            q = random.orthogonal(key, max(n_rows, n_cols), (), dtype)[:, :min(n_rows, n_cols)]
            if n_rows < n_cols:
                q = q.T
            rest = shape[:axis] + shape[axis + 1:]
            # random.orthogonal's QR runs in float32 for half-precision dtypes
            return tnp.astype(scale * tnp.moveaxis(tnp.reshape(q, rest + (n_cols,)), -1, axis), dtype)

        return init

    @staticmethod
    def delta_orthogonal(scale=1.0, column_axis=-1, dtype=tnp.float32):
        """A convolution kernel [*spatial, in, out] (1 to 3 spatial dims, in <= out) that is zero but at the
        window's centre, which holds an orthogonal in x out matrix: the kernel preserves norms (Xiao et al.)."""

        def init(key, shape, dtype=dtype):
            shape = tuple(shape)
            if len(shape) not in (3, 4, 5):
                raise ValueError(f"delta_orthogonal initializer requires a 3D, 4D or 5D shape; got {shape}")
            if shape[-2] > shape[-1]:
                raise ValueError(f"delta_orthogonal: `fan_in` must be less or equal than `fan_out`; got {shape}")
            ortho = initializers.orthogonal(scale, column_axis, dtype)(key, shape[-2:], dtype)
            center = tuple(d // 2 for d in shape[:-2])
            return tnp.zeros(shape, dtype).at[center].set(ortho)

        return init


def _fans(shape, in_axis, out_axis, batch_axis):
    """(fan_in, fan_out) of a kernel of shape, as jax.nn.initializers computes them: the in (out) axes' sizes
    times the receptive field, which is the kernel's size over the in, out and batch axes' sizes (so an axis named
    twice, or in both in_axis and out_axis, divides twice; a 1-D kernel with in_axis named has fans 1). The
    default in_axis (-2) names no axis of a 0-D or 1-D kernel, which raises JAX's ValueError."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
        raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional weights tensor with "
                         "default in_axis. Must be at least 2D or specify in_axis explicitly.")

    def size(axes):  # out-of-range axes raise IndexError, as JAX's indexing does
        return shape[axes] if isinstance(axes, int) else math.prod(shape[i] for i in axes)

    ins, outs, batch = size(in_axis), size(out_axis), size(batch_axis)
    if math.prod(shape) == 0:  # an empty kernel: no samples to scale (JAX divides by zero here)
        return 1.0, 1.0
    receptive = math.prod(shape) / ins / outs / batch
    return ins * receptive, outs * receptive
