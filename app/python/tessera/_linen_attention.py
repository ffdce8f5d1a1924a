"""Attention for tessera.linen (which re-exports these): make_causal_mask, jax.nn's dot_product_attention (the
fused op, or einsum + softmax) and flax.linen's MultiHeadDotProductAttention."""

import math
from typing import Any, Optional

from . import _tessera as _C
from . import numpy as tnp
from . import random
from .linen import DenseGeneral, Module, _merge_param, compact, initializers

__all__ = ["make_causal_mask", "dot_product_attention", "MultiHeadDotProductAttention"]


def make_causal_mask(x):
    """[B, 1, L, L] booleans, true where key position <= query position, for x: [B, L]."""
    length = x.shape[1]
    rows = _C.iota([length, length], 0, "i32")
    cols = _C.iota([length, length], 1, "i32")
    return tnp.broadcast_to(cols <= rows, (x.shape[0], 1, length, length))


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
                          implementation=None):
    """jax.nn.dot_product_attention: softmax(q k^T * scale + bias) v per head; query: [B, Q, H, D] (or [Q, H, D]),
    key and value: [B, K, Hk, D] with Hk dividing H (grouped-query attention: query head h reads key head
    h // (H / Hk)); bias and mask broadcast to [B, H, Q, K] (mask false: not attended); scale defaults to
    1 / sqrt(D); is_causal: query q attends to keys <= q. Returns query's shape.
    implementation, as jax.nn.dot_product_attention's: "fused" (also "cudnn") is one dot_product_attention op,
    flash attention on the GPU with bf16 matmuls (no mask or bias, the default scale, as many key heads as query
    heads; is_causal instead of a mask, with as many keys as queries); "xla" is einsum + softmax, whose causal
    mask for Q != K is JAX's tril(ones((Q, K))): query q attends keys 0..q. None takes "fused" where
    TESSERA_FUSED_ATTENTION decides so (auto: the CPU, the GPU with bf16 matmuls) and the fused op can compute
    it."""
    if implementation not in (None, "fused", "cudnn", "xla"):
        raise ValueError(f"dot_product_attention: implementation {implementation!r} is not None, 'fused' or 'xla'")
    query, key, value = tnp.asarray(query), tnp.asarray(key), tnp.asarray(value)
    if bias is not None:
        bias = tnp.asarray(bias)
        if bias.dtype == tnp.bool_:
            raise TypeError("dot_product_attention: bias is a bool array; the mask is the fifth argument (JAX's "
                            "order is query, key, value, bias, mask): pass mask=")
    unbatched = query.ndim == 3
    if unbatched:
        query, key, value = query[None], key[None], value[None]
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise _C.ShapeError(f"dot_product_attention: query, key and value must be [B, T, H, D] or [T, H, D], got "
                            f"{query.shape}, {key.shape} and {value.shape}")
    heads, kv_heads = query.shape[2], key.shape[2]
    if kv_heads != heads:
        if kv_heads == 0 or heads % kv_heads:
            raise _C.ShapeError(f"dot_product_attention: {heads} query heads do not divide into {kv_heads} key heads")
        key = tnp.repeat(key, heads // kv_heads, axis=2)
        value = tnp.repeat(value, heads // kv_heads, axis=2)
    depth = query.shape[-1]
    # The fused op's causal mask is square: as many keys as queries.
    square = not is_causal or query.shape[1] == key.shape[1]
    plain = mask is None and bias is None and (scale is None or scale == 1.0 / math.sqrt(depth))
    if implementation is None:
        implementation = "fused" if plain and square and _C.fused_attention_default() else "xla"
    if implementation in ("fused", "cudnn"):
        if not plain:
            raise ValueError("dot_product_attention: the fused implementation takes is_causal, not a mask, a bias "
                             "or a scale")
        if not square:
            raise ValueError(f"dot_product_attention: the fused implementation's causal attention needs as many keys "
                             f"as queries, got {key.shape[1]} keys for {query.shape[1]} queries; use "
                             "implementation='xla' (or None)")
        out = _C.dot_product_attention(query, key, value, bool(is_causal))
        return out[0] if unbatched else out
    if is_causal:
        causal = tnp.arange(query.shape[1])[:, None] >= tnp.arange(key.shape[1])[None, :]
        mask = causal if mask is None else tnp.logical_and(mask, causal)
    logits = tnp.einsum("bqhd,bkhd->bhqk", query, key) * (1.0 / math.sqrt(depth) if scale is None else scale)
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = tnp.where(mask, logits, -1e30)
    weights = _C.softmax(logits, -1)
    out = tnp.einsum("bhqk,bkhd->bqhd", weights, value)
    return out[0] if unbatched else out


class MultiHeadDotProductAttention(Module):
    """flax.linen.MultiHeadDotProductAttention over [..., L, F] inputs: query, key and value projections
    (DenseGeneral to [num_heads, head_dim]: kernels [F, H, D], biases [H, D], Flax's layout, so Flax's parameters
    load as they are), dot_product_attention (the fused op), and the out projection (DenseGeneral over the heads:
    kernel [H, D, F]). Called as Flax's: inputs_k defaults to inputs_q and inputs_v to inputs_k (inputs_kv sets
    both); mask false: not attended. dropout_rate drops attention weights (the "dropout" rng stream, or
    dropout_rng) unless deterministic (given to the module or the call); broadcast_dropout shares one mask over
    the batch and the heads."""

    num_heads: int
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    qkv_features: Optional[int] = None
    out_features: Optional[int] = None
    broadcast_dropout: bool = True
    dropout_rate: float = 0.0
    deterministic: Optional[bool] = None
    precision: Any = None
    kernel_init: Any = initializers.lecun_normal()
    out_kernel_init: Any = None
    bias_init: Any = initializers.zeros
    out_bias_init: Any = None
    use_bias: bool = True

    @compact
    def __call__(self, inputs_q, inputs_k=None, inputs_v=None, *, inputs_kv=None, mask=None, deterministic=None,
                 dropout_rng=None):
        if inputs_kv is not None:
            if inputs_k is not None or inputs_v is not None:
                raise ValueError("MultiHeadDotProductAttention: give inputs_kv, or inputs_k and inputs_v, not both")
            inputs_k = inputs_v = inputs_kv
        inputs_q = tnp.asarray(inputs_q)
        inputs_k = inputs_q if inputs_k is None else tnp.asarray(inputs_k)
        inputs_v = inputs_k if inputs_v is None else tnp.asarray(inputs_v)
        features = self.qkv_features or inputs_q.shape[-1]
        if features % self.num_heads:
            raise ValueError(f"MultiHeadDotProductAttention: Memory dimension ({features}) must be divisible by "
                             f"number of heads ({self.num_heads}).")
        head_dim = features // self.num_heads
        common = dict(use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
                      precision=self.precision)
        project = dict(features=(self.num_heads, head_dim), axis=-1, kernel_init=self.kernel_init,
                       bias_init=self.bias_init, **common)
        q = DenseGeneral(name="query", **project)(inputs_q)  # [..., L, H, D]
        k = DenseGeneral(name="key", **project)(inputs_k)
        v = DenseGeneral(name="value", **project)(inputs_v)
        dropping = self.dropout_rate > 0.0 and not _merge_param(
            "MultiHeadDotProductAttention", "deterministic (True: no dropout)", self.deterministic, deterministic)
        if dropping:
            out = self._attention_with_dropout(q, k, v, mask, dropout_rng)
        else:
            out = dot_product_attention(q, k, v, mask=mask)  # [..., Q, H, D]
        out_features = self.out_features or inputs_q.shape[-1]
        return DenseGeneral(features=out_features, axis=(-2, -1), name="out",
                            kernel_init=self.out_kernel_init or self.kernel_init,
                            bias_init=self.out_bias_init or self.bias_init, **common)(out)

    def _attention_with_dropout(self, q, k, v, mask, rng):
        """softmax(q k^T / sqrt(D)) with dropped weights (scaled by 1 / (1 - rate)), times v."""
        logits = tnp.einsum("...qhd,...khd->...hqk", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            logits = tnp.where(tnp.asarray(mask), logits, -1e30)  # as dot_product_attention masks
        weights = _C.softmax(logits, -1)
        if rng is None:
            rng = self.make_rng("dropout")
        shape = list(weights.shape)
        if self.broadcast_dropout:
            shape = [1] * (len(shape) - 2) + shape[-2:]
        keep = random.bernoulli(rng, 1.0 - self.dropout_rate, tuple(shape))
        weights = tnp.where(keep, weights / (1.0 - self.dropout_rate), 0.0)
        return tnp.einsum("...hqk,...khd->...qhd", weights, v)
