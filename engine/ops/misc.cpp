// constant: a literal array as an op. threefry2x32: the Threefry-2x32 block cipher (20 rounds), the counter-based
// random bit generator JAX uses; key and counter are elementwise operands.
#include <cstring>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/shard_rules.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

// ---- constant ----

Result<std::vector<Aval>> inferConstant(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("constant", ops, 0));
  const ir::Literal& lit = attrsAs<ir::ConstantAttrs>(attrs).value;
  auto held = lit.data ? static_cast<int64_t>(lit.data->size()) : 0;
  if (held != lit.aval.bytes())
    return opError("constant", ops,
                   fmt::format("literal {} holds {} bytes, expected {}", lit.aval.toString(), held, lit.aval.bytes()));
  return std::vector<Aval>{lit.aval};
}

void constantKernel(const ir::CpuKernelArgs& args) {
  const ir::Literal& lit = attrsAs<ir::ConstantAttrs>(args.attrs).value;
  const ir::MutableTensorView& out = args.outputs[0];
  if (out.aval.bytes()) std::memcpy(out.data, lit.bytes(), static_cast<size_t>(out.aval.bytes()));
}

// A constant has no operands, so vmap never batches it; the rule completes the table: the value is shared.
ir::BatchResult batchConstant(const ir::BatchArgs& a) {
  return {{bind1(ir::OpCode::Constant, {}, a.attrs, std::source_location::current())}, {-1}};
}

// ---- threefry2x32 ----

Result<std::vector<Aval>> inferThreefry(std::span<const Aval> ops, const ir::Attrs&) {
  constexpr const char* kOp = "threefry2x32";
  TSR_TRY(checkArity(kOp, ops, 4));
  for (const Aval& a : ops)
    if (a.dtype != DType::U32) return opError(kOp, ops, "operands (k0, k1, x0, x1) must all be u32");
  for (const Aval& a : ops)
    if (!(a.shape == ops[0].shape))
      return opError(kOp, ops, "operands (k0, k1, x0, x1) must have equal shapes (broadcast the keys first)");
  return std::vector<Aval>{ops[0], ops[0]};
}

inline uint32_t rotl32(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

// Threefry-2x32 with 20 rounds, as Random123's threefry2x32_R(20, ...) and jax.random's threefry_2x32:
// a key injection before the first round and after every fourth.
void threefry2x32(uint32_t k0, uint32_t k1, uint32_t& x0, uint32_t& x1) {
  static constexpr int kRotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  x0 += ks[0];
  x1 += ks[1];
  for (int round = 0; round < 20; ++round) {
    x0 += x1;
    x1 = rotl32(x1, kRotations[round % 8]);
    x1 ^= x0;
    if (round % 4 == 3) {
      uint32_t s = static_cast<uint32_t>(round / 4 + 1);  // injection number 1..5
      x0 += ks[s % 3];
      x1 += ks[(s + 1) % 3] + s;
    }
  }
}

void threefryKernel(const ir::CpuKernelArgs& args) {
  const uint32_t* k0 = args.inputs[0].as<uint32_t>();
  const uint32_t* k1 = args.inputs[1].as<uint32_t>();
  const uint32_t* x0 = args.inputs[2].as<uint32_t>();
  const uint32_t* x1 = args.inputs[3].as<uint32_t>();
  uint32_t* y0 = args.outputs[0].as<uint32_t>();
  uint32_t* y1 = args.outputs[1].as<uint32_t>();
  const int64_t n = args.outputs[0].aval.numel();
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a = x0[i], b = x1[i];
    threefry2x32(k0[i], k1[i], a, b);
    y0[i] = a;
    y1[i] = b;
  }
}

}  // namespace

void registerMiscOps(ir::OpRegistry& reg) {
  // Elementwise: out[i] = value[i] is an elementwise map with no inputs (like iota), so a fuser may inline a
  // constant into its consumers' loop instead of materialising a buffer and launching a kernel for it.
  ir::OpDef constant = coreOp(ir::OpCode::Constant, "misc", ir::FusionKind::Elementwise, 0);
  constant.differentiable = false;
  constant.infer = inferConstant;
  constant.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return movementCost(in, out);
  };
  constant.cpu = constantKernel;
  constant.batch = batchConstant;
  constant.shard = replicatedShardRule();
  addCoreOp(reg, std::move(constant));

  ir::OpDef threefry = coreOp(ir::OpCode::Threefry2x32, "random", ir::FusionKind::Elementwise, 4, 2);
  threefry.differentiable = false;
  threefry.infer = inferThreefry;
  // Per element: 20 rounds of add, rotate, xor, plus 5 key injections (2 adds each, 3 for the second word) and
  // the initial one: about 80 integer ops, split over the two results.
  threefry.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return elementwiseCost(in, out, 40);
  };
  threefry.cpu = threefryKernel;
  // Elementwise in all four operands: batch them all on dim 0 (shared keys or counters broadcast).
  threefry.batch = [](const ir::BatchArgs& a) { return batchElementwise(ir::OpCode::Threefry2x32, a); };
  threefry.shard = elementwiseShardRule();
  addCoreOp(reg, std::move(threefry));
}

}  // namespace tsr::ops
