#pragma once
// Random numbers: splittable counter-based keys with Threefry-2x32, as jax.random does them with its default
// PRNG (threefry2x32, jax_threefry_partitionable=False: the classic algorithms of JAX 0.4). Every function is
// written with the Array API only (the one random primitive is the threefry2x32 block function; counters,
// padding and mantissa tricks are ordinary ops), so it works eagerly and under jit and gives the same numbers
// on every backend and device count.
//
// Agreement with JAX: keys, split, foldIn, bits, uniform (every dtype, with bounds too: JAX's numbers there
// come from an FMA, which we reproduce), bernoulli and categorical are bit-exact. normal, truncatedNormal and
// gumbel pass bit-exact uniforms through erf_inv, erf and log, whose last bits differ between
// implementations (XLA's CPU and GPU versions differ from each other too): most values are bit-identical,
// the rest a few ulp apart (more in normal's far tail, where XLA's own erf_inv loses accuracy).
//
// A key is a u32[2] array (jax.random.PRNGKey's raw form); split returns u32[n,2], whose rows are keys.
// Each function checks its key and raises tsr::Exception (turned into a Result by jit and capture()).
#include <cstdint>
#include <optional>

#include "engine/transform/api.h"

namespace tsr::random {

// jax.random.PRNGKey(seed) with jax_enable_x64: [seed >> 32, seed & 0xffffffff]; a negative seed cast to
// uint64 gives what that JAX gives for it (key(-1) == [0xffffffff, 0xffffffff]). Note: JAX in its default
// 32-bit mode first truncates a Python int seed to int32, so PRNGKey(s) for s >= 2^32 is [0, s & 0xffffffff]
// there; both modes agree for 0 <= s < 2^32.
Array key(uint64_t seed, TSR_LOC);
// A key from an integer scalar array (works on traced seeds): 32-bit seeds give [0, seed] as in JAX (its
// 32-bit shift right by 32 gives 0), i64 seeds give [seed >> 32, seed & 0xffffffff].
Array key(const Array& seed, TSR_LOC);

// jax.prng.threefry_2x32(key, count): hashes u32 counters (any shape) with the key. The flattened counts
// (padded with one zero when their number is odd) are cut into halves x0 | x1, and the result is
// concatenate(threefry(x0, x1)) cut back to the count's shape.
Array threefry2x32(const Array& key, const Array& count, TSR_LOC);

// jax.random.split(key, num): u32[num, 2], the hash of the counters 0 .. 2*num-1.
Array split(const Array& key, int64_t num = 2, TSR_LOC);
// jax.random.fold_in(key, data): the hash of the counters [0, data].
Array foldIn(const Array& key, uint32_t data, TSR_LOC);
Array foldIn(const Array& key, const Array& data, TSR_LOC);  // an integer scalar, cast to u32 as jnp.uint32

// jax.random.bits: uniform bits of dtype u32 or u8.
Array bits(const Array& key, const Shape& shape, DType dtype = DType::U32, TSR_LOC);

// jax.random.uniform: values in [minval, maxval) of a float dtype (f32, f64, bf16, f16). The bounds
// broadcast against shape.
Array uniform(const Array& key, const Shape& shape, DType dtype = DType::F32, double minval = 0.0,
              double maxval = 1.0, TSR_LOC);
Array uniform(const Array& key, const Shape& shape, DType dtype, const Array& minval, const Array& maxval,
              TSR_LOC);

// jax.random.normal: sqrt(2) * erf_inv(u) with u uniform in (-1, 1).
Array normal(const Array& key, const Shape& shape, DType dtype = DType::F32, TSR_LOC);

// jax.random.truncated_normal: standard normal values in the open interval (lower, upper), by inverting
// the CDF between erf(lower / sqrt 2) and erf(upper / sqrt 2). Without a shape, the bounds' broadcast shape.
Array truncatedNormal(const Array& key, double lower, double upper, const Shape& shape, DType dtype = DType::F32,
                      TSR_LOC);
Array truncatedNormal(const Array& key, const Array& lower, const Array& upper,
                      const std::optional<Shape>& shape = std::nullopt, DType dtype = DType::F32, TSR_LOC);

// jax.random.bernoulli: bool values, true with probability p (uniform(key, shape, dtype of p) < p).
// Without a shape, p's shape.
Array bernoulli(const Array& key, double p, const Shape& shape, TSR_LOC);
Array bernoulli(const Array& key, const Array& p, const std::optional<Shape>& shape = std::nullopt, TSR_LOC);

// jax.random.gumbel: -log(-log(u)) with u uniform in [tiny, 1).
Array gumbel(const Array& key, const Shape& shape, DType dtype = DType::F32, TSR_LOC);

// jax.random.categorical: i32 indices along `axis`, sampled with the Gumbel-max trick,
// argmax(logits + gumbel). The result has logits' shape without `axis`; a given shape may add leading
// dims (shape[-batch:] must broadcast with the batch shape).
Array categorical(const Array& key, const Array& logits, int64_t axis = -1,
                  const std::optional<Shape>& shape = std::nullopt, TSR_LOC);

}  // namespace tsr::random
