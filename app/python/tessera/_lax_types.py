"""jax.lax's option types and shape helpers (tessera.lax re-exports them): Precision, DotAlgorithm,
DotAlgorithmPreset, RoundingMethod, the dimension-number types of dot_general, conv and ragged_dot, and the shape
arithmetic of convolutions and windows (conv_general_shape_tuple, padtype_to_pads, ...), as JAX computes them.

Precision and the dot algorithms choose how accelerators multiply float32 (bfloat16 passes, tensorfloat32). The
engine multiplies float32 in float32 and accumulates in float32 whatever is asked, the HIGHEST of JAX's
choices, so they are checked and accepted by every function that takes precision= and change no result."""

import enum as _enum
from typing import NamedTuple as _NamedTuple, Sequence as _Sequence

import numpy as _np

__all__ = ["Precision", "PrecisionLike", "DotAlgorithm", "DotAlgorithmPreset", "RoundingMethod", "dtype",
           "DotDimensionNumbers", "RaggedDotDimensionNumbers", "ConvDimensionNumbers",
           "ConvGeneralDilatedDimensionNumbers", "conv_dimension_numbers", "conv_general_permutations",
           "conv_shape_tuple", "conv_general_shape_tuple", "conv_transpose_shape_tuple", "padtype_to_pads",
           "reduce_window_shape_tuple"]


class Precision(_enum.Enum):
    """jax.lax.Precision: DEFAULT ('default', 'fastest', 'bfloat16'), HIGH ('high', 'bfloat16_3x',
    'tensorfloat32'), HIGHEST ('highest', 'float32'); Precision(None) is DEFAULT. Every choice gives float32
    products here."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        return _PRECISION_STRINGS.get(value)

    def __repr__(self):
        return f"{self.__class__.__name__}.{self.name}"

    def __str__(self):
        return self.name


_PRECISION_STRINGS = {"highest": Precision.HIGHEST, "float32": Precision.HIGHEST, "high": Precision.HIGH,
                      "bfloat16_3x": Precision.HIGH, "tensorfloat32": Precision.HIGH,
                      "default": Precision.DEFAULT, "bfloat16": Precision.DEFAULT, "fastest": Precision.DEFAULT,
                      None: Precision.DEFAULT}


class DotAlgorithm(_NamedTuple):
    """jax.lax.DotAlgorithm: the operand and accumulation types of a dot product. Accepted as precision=; the
    engine computes float32 products with float32 accumulation whatever it names."""
    lhs_precision_type: object
    rhs_precision_type: object
    accumulation_type: object
    lhs_component_count: int = 1
    rhs_component_count: int = 1
    num_primitive_operations: int = 1
    allow_imprecise_accumulation: bool = False


class DotAlgorithmPreset(_enum.Enum):
    """jax.lax.DotAlgorithmPreset: JAX's named dot algorithms. Accepted as precision=; the result's dtype
    follows the operands (or preferred_element_type) and the products are float32 ones, whichever is named."""
    DEFAULT = _enum.auto()
    ANY_F8_ANY_F8_F32 = _enum.auto()
    ANY_F8_ANY_F8_F32_FAST_ACCUM = _enum.auto()
    ANY_F8_ANY_F8_ANY = _enum.auto()
    ANY_F8_ANY_F8_ANY_FAST_ACCUM = _enum.auto()
    F16_F16_F16 = _enum.auto()
    F16_F16_F32 = _enum.auto()
    BF16_BF16_BF16 = _enum.auto()
    BF16_BF16_F32 = _enum.auto()
    BF16_BF16_F32_X3 = _enum.auto()
    BF16_BF16_F32_X6 = _enum.auto()
    BF16_BF16_F32_X9 = _enum.auto()
    TF32_TF32_F32 = _enum.auto()
    TF32_TF32_F32_X3 = _enum.auto()
    F32_F32_F32 = _enum.auto()
    F64_F64_F64 = _enum.auto()

    def __repr__(self):
        return f"{self.__class__.__name__}.{self.name}"

    def __str__(self):
        return self.name


PrecisionLike = object  # None, a string, a Precision, a pair of them, a DotAlgorithm or a DotAlgorithmPreset


def canonicalize_precision(precision):
    """JAX's canonicalize_precision: None, a Precision (or its string), a pair of them, a DotAlgorithm or a
    DotAlgorithmPreset (or its name); raises ValueError for anything else, as JAX does."""
    if precision is None or isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)):
        return precision
    if isinstance(precision, Precision):
        return precision, precision
    if isinstance(precision, str):
        if precision in _PRECISION_STRINGS:
            p = Precision(precision)
            return p, p
        if precision in DotAlgorithmPreset.__members__:
            return DotAlgorithmPreset[precision]
    if isinstance(precision, (list, tuple)) and len(precision) == 2 and all(
            isinstance(p, (Precision, str)) and (isinstance(p, Precision) or p in _PRECISION_STRINGS)
            for p in precision):
        return Precision(precision[0]), Precision(precision[1])
    raise ValueError(f"Precision argument must be one of:\n- None,\n- a string in {sorted(_PRECISION_STRINGS, key=str)}"
                     f",\n- a lax.Precision value,\n- a tuple of two lax.Precision values or strings,\n- a "
                     f"lax.DotAlgorithmPreset or the name of one of these presets, or\n- a lax.DotAlgorithm value;"
                     f"\nbut got {precision}.")


class RoundingMethod(_enum.IntEnum):
    """jax.lax.RoundingMethod, lax.round's rounding_method: halves AWAY_FROM_ZERO (0) or TO_NEAREST_EVEN (1)."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


_CANONICAL_WIDTHS = {_np.dtype(_np.float64): _np.dtype(_np.float32), _np.dtype(_np.int64): _np.dtype(_np.int32),
                     _np.dtype(_np.uint64): _np.dtype(_np.uint32), _np.dtype(_np.complex128): _np.dtype(_np.complex64)}


def dtype(x):
    """jax.lax.dtype: the dtype of a tessera array as it is; of anything else (Python and numpy scalars and
    arrays, dtype-likes) canonicalized as JAX without x64 canonicalizes it: Python float, int, bool, complex give
    float32, int32, bool, complex64, and 64-bit numpy types their 32-bit ones (tnp.asarray's dtypes)."""
    from . import numpy as _tnp
    if isinstance(x, _tnp.ndarray):
        return x.dtype
    if isinstance(x, bool):
        return _np.dtype(bool)
    if isinstance(x, int) or x is int:
        return _np.dtype(_np.int32)
    if isinstance(x, float) or x is float:
        return _np.dtype(_np.float32)
    if isinstance(x, complex) or x is complex:
        return _np.dtype(_np.complex64)
    if x is _tnp.bfloat16 or getattr(x, "dtype", None) is _tnp.bfloat16 or str(x) == "bfloat16":
        return _tnp.bfloat16
    dt = _np.dtype(x.dtype) if hasattr(x, "dtype") and not isinstance(x, type) else _np.dtype(x)
    return _CANONICAL_WIDTHS.get(dt, dt)


# ((lhs_contracting_dims, rhs_contracting_dims), (lhs_batch_dims, rhs_batch_dims)), as JAX's alias.
DotDimensionNumbers = tuple[tuple[_Sequence[int], _Sequence[int]], tuple[_Sequence[int], _Sequence[int]]]


class RaggedDotDimensionNumbers:
    """jax.lax.RaggedDotDimensionNumbers: dot_general's dimension numbers, the lhs ragged dimension (one) and
    the rhs group dimension (none or one)."""
    __slots__ = ("dot_dimension_numbers", "lhs_ragged_dimensions", "rhs_group_dimensions")

    def __init__(self, dot_dimension_numbers, lhs_ragged_dimensions, rhs_group_dimensions):
        object.__setattr__(self, "dot_dimension_numbers",
                           tuple(tuple(map(tuple, t)) for t in dot_dimension_numbers))
        object.__setattr__(self, "lhs_ragged_dimensions", tuple(lhs_ragged_dimensions))
        object.__setattr__(self, "rhs_group_dimensions", tuple(rhs_group_dimensions))

    def __setattr__(self, name, value):
        raise AttributeError("RaggedDotDimensionNumbers is immutable")

    def __eq__(self, other):
        return isinstance(other, RaggedDotDimensionNumbers) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self):
        return hash(tuple(getattr(self, n) for n in self.__slots__))

    def __repr__(self):
        return ("RaggedDotDimensionNumbers(" + ", ".join(f"{n}={getattr(self, n)}" for n in self.__slots__) + ")")


class ConvDimensionNumbers(_NamedTuple):
    """jax.lax.ConvDimensionNumbers: lhs_spec (batch dim, feature dim, spatial dims), rhs_spec (out-feature
    dim, in-feature dim, spatial dims) and out_spec (batch, feature, spatial), each a tuple of dim indices."""
    lhs_spec: tuple
    rhs_spec: tuple
    out_spec: tuple


# None, three layout strings such as ("NHWC", "HWIO", "NHWC"), or a ConvDimensionNumbers.
ConvGeneralDilatedDimensionNumbers = tuple[str, str, str] | ConvDimensionNumbers | None


def conv_general_permutations(dimension_numbers):
    """The (lhs, rhs, out) permutations to N C spatial..., O I spatial..., N C spatial... of three layout strings;
    the spatial dims in the kernel's order."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    charpairs = ("N", "C"), ("O", "I"), ("N", "C")
    for i, (a, b) in enumerate(charpairs):
        if not dimension_numbers[i].count(a) == dimension_numbers[i].count(b) == 1:
            raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters '{a}' and '{b}' "
                            f"exactly once, got {dimension_numbers[i]}.")
        if len(dimension_numbers[i]) != len(set(dimension_numbers[i])):
            raise TypeError(f"convolution dimension_numbers[{i}] cannot have duplicate characters, got "
                            f"{dimension_numbers[i]}.")
    if not set(lhs_spec) - {"N", "C"} == set(rhs_spec) - {"O", "I"} == set(out_spec) - {"N", "C"}:
        raise TypeError(f"convolution dimension_numbers elements must each have the same set of spatial "
                        f"characters, got {dimension_numbers}.")

    def getperm(spec, charpair):
        spatial = [i for i, c in enumerate(spec) if c not in charpair]
        if spec is not rhs_spec:
            spatial = sorted(spatial, key=lambda i: rhs_spec.index(spec[i]))
        return (spec.index(charpair[0]), spec.index(charpair[1])) + tuple(spatial)

    return tuple(getperm(spec, pair) for spec, pair in zip(dimension_numbers, charpairs))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers):
    """dimension_numbers (None, three strings or a ConvDimensionNumbers) as a ConvDimensionNumbers."""
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    if len(lhs_shape) != len(rhs_shape):
        raise TypeError(f"convolution requires lhs and rhs ndim to be equal, got {len(lhs_shape)} and "
                        f"{len(rhs_shape)}.")
    if dimension_numbers is None:
        iota = tuple(range(len(lhs_shape)))
        return ConvDimensionNumbers(iota, iota, iota)
    if not isinstance(dimension_numbers, (list, tuple)):
        raise TypeError(f"convolution dimension_numbers must be tuple/list or None, got {type(dimension_numbers)}.")
    if len(dimension_numbers) != 3:
        raise TypeError(f"convolution dimension_numbers list/tuple must be length 3, got {len(dimension_numbers)}.")
    if not all(isinstance(s, str) for s in dimension_numbers):
        raise TypeError(f"convolution dimension_numbers elements must be strings, got "
                        f"{tuple(map(type, dimension_numbers))}.")
    for i, s in enumerate(dimension_numbers):
        if len(s) != len(lhs_shape):
            raise TypeError(f"convolution dimension_numbers[{i}] must have len equal to the ndim of lhs and rhs, "
                            f"got {len(s)} for lhs and rhs shapes {tuple(lhs_shape)} and {tuple(rhs_shape)}.")
    return ConvDimensionNumbers(*conv_general_permutations(dimension_numbers))


_SPATIAL_LETTERS = "DHWXYZABEFGJKLMPQRSTUV"


def conv_spec_strings(dimension_numbers, ndim):
    """Three layout strings (as the engine's conv reads them) for None, strings or a ConvDimensionNumbers."""
    if dimension_numbers is None or not isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    n = ndim - 2
    letters = _SPATIAL_LETTERS[3 - n:3] if n <= 3 else _SPATIAL_LETTERS[:n]

    def spec(perm, pair):
        chars = [""] * ndim
        chars[perm[0]], chars[perm[1]] = pair
        for i, d in enumerate(perm[2:]):
            chars[d] = letters[i]
        return "".join(chars)

    return (spec(dimension_numbers.lhs_spec, "NC"), spec(dimension_numbers.rhs_spec, "OI"),
            spec(dimension_numbers.out_spec, "NC"))


def _stride_dim(d, window, stride):
    return max((d - window) // stride + 1, 0)




def padtype_to_pads(in_shape, window_shape, window_strides, padding):
    """(low, high) pairs for 'SAME' (the odd cell high), 'SAME_LOWER' (the odd cell low) or 'VALID'."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode not in ("SAME", "SAME_LOWER", "VALID"):
            raise RuntimeError(f"Unrecognized padding type: expected 'VALID', 'SAME', or 'SAME_LOWER', got "
                               f"{padding}.")
    else:
        mode = getattr(padding, "name", None)
        if mode not in ("SAME", "SAME_LOWER", "VALID"):
            raise TypeError(f"Unknown padding type: {padding}.")
    if mode == "VALID":
        return [(0, 0)] * len(in_shape)
    pads = []
    for d, w, s in zip(in_shape, window_shape, window_strides):
        out = -(-int(d) // int(s))
        size = max((out - 1) * int(s) + int(w) - int(d), 0)
        pads.append((size // 2, size - size // 2) if mode == "SAME" else (size - size // 2, size // 2))
    return pads


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1):
    """The output shape of a conv whose shapes are in N C spatial... / O I spatial... order."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"Wrong number of explicit pads for convolution: expected {len(lhs_shape) - 2}, got "
                        f"{len(pads)}.")
    padded = [int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError(f"Negative padding is larger than the size of the corresponding dimension: got "
                         f"padding={pads} for lhs_shape[2:]={tuple(lhs_shape[2:])}")
    space = tuple(_stride_dim(p, int(k), int(s)) for p, k, s in zip(padded, rhs_shape[2:], strides))
    batch = int(lhs_shape[0]) // batch_group_count if batch_group_count > 1 else int(lhs_shape[0])
    return (batch, int(rhs_shape[0])) + space


def _permuted(shape, perm):
    return tuple(int(shape[p]) for p in perm)


def _unpermuted(shape, perm):
    out = [0] * len(perm)
    for s, p in zip(shape, perm):
        out[p] = s
    return tuple(out)


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """The output shape of conv_general_dilated (no dilation) for three layout strings."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    out = conv_shape_tuple(_permuted(lhs_shape, lhs_perm), _permuted(rhs_shape, rhs_perm), window_strides, padding)
    return _unpermuted(out, out_perm)


def conv_transpose_padding(k, s, padding):
    """The (low, high) padding of the dilated input of conv_transpose for one spatial dim (kernel extent k,
    stride s), as JAX's."""
    if padding == "SAME":
        pad_len = k + s - 2
        pad_a = k - 1 if s > k - 1 else -(-pad_len // 2)
    elif padding == "VALID":
        pad_len = k + s - 2 + max(k - s, 0)
        pad_a = k - 1
    else:
        raise ValueError(f"conv_transpose: padding must be 'SAME', 'VALID' or (low, high) pairs, got {padding!r}")
    return pad_a, pad_len - pad_a


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """The output shape of conv_transpose for three layout strings."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    lhs_t, rhs_t = _permuted(lhs_shape, lhs_perm), _permuted(rhs_shape, rhs_perm)
    if isinstance(padding, str):
        padding = [conv_transpose_padding(k, s, padding) for k, s in zip(rhs_t[2:], window_strides)]
    space = [(i - 1) * s - k + 2 + int(lo) + int(hi)
             for i, k, s, (lo, hi) in zip(lhs_t[2:], rhs_t[2:], window_strides, padding)]
    return _unpermuted((lhs_t[0], rhs_t[0]) + tuple(space), out_perm)


def _dilate_shape(shape, dilation):
    return tuple(0 if d == 0 else 1 + r * (d - 1) for d, r in zip(shape, dilation))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding, base_dilation=None,
                              window_dilation=None):
    """The output shape of reduce_window with explicit (low, high) padding."""
    if base_dilation is not None:
        operand_shape = _dilate_shape(operand_shape, base_dilation)
    if window_dilation is not None:
        window_dimensions = _dilate_shape(window_dimensions, window_dilation)
    padded = [int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(operand_shape, padding)]
    return tuple(_stride_dim(p, int(w), int(s)) for p, w, s in zip(padded, window_dimensions, window_strides))


def with_precision(fn):
    """fn with jax.numpy's keyword-only precision= (checked as canonicalize_precision checks it; products are
    float32 ones whatever it asks), preferred_element_type= (the result's dtype) and out_sharding= (ignored:
    one device)."""
    import functools

    @functools.wraps(fn)
    def call(*args, precision=None, preferred_element_type=None, out_sharding=None, **kwargs):
        canonicalize_precision(precision)
        out = fn(*args, **kwargs)
        if preferred_element_type is None:
            return out
        from .numpy import astype
        return astype(out, preferred_element_type)
    return call
