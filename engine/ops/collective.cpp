// Collectives: the per-device ops of an SPMD program (all_reduce, all_gather, reduce_scatter, all_to_all,
// collective_permute) and device_table, which gives each device its own entry of a table. Their semantics are
// in engine/ir/attrs.h; the communicator (engine/dist) moves the bytes and sums in group order.
//
// The device a kernel runs for is dist::currentDevice(), set by dist::runOnDevices. Outside an SPMD run
// (no context) the program is position 0 of a one-device mesh: groups of one are the identity, and anything
// needing another device is an error. Kernels cannot return errors: a failure is recorded on the device
// (DeviceContext::fail, which aborts the run so that no other device waits for this one) and raised; the
// interpreter and the CPU executable turn the exception into the program's error.
//
// The communicator works on dense chunks in group order; an op along a dim other than 0 packs its operand into
// that order first, or unpacks its result after: a tensor seen as [outer, n, row] (the dim split into n chunks,
// row = the bytes of one chunk's slab) is rearranged to [n, outer, row] and back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/dist/communicator.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

using ir::AllGatherAttrs;
using ir::AllReduceAttrs;
using ir::AllToAllAttrs;
using ir::CollectivePermuteAttrs;
using ir::DeviceTableAttrs;

// ==== infer ====

Status checkGroups(std::string_view op, std::span<const Aval> ops, const ir::Ints& groups, int64_t groupSize) {
  if (groupSize < 1) return opError(op, ops, fmt::format("group_size {} must be at least 1", groupSize));
  if (groups.empty()) return opError(op, ops, "groups must name at least one group");
  if (static_cast<int64_t>(groups.size()) % groupSize != 0)
    return opError(op, ops, fmt::format("the {} positions of groups do not split into groups of {}", groups.size(),
                                        groupSize));
  std::vector<int64_t> sorted = groups;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || sorted.back() > std::numeric_limits<int>::max())
    return opError(op, ops,
                   fmt::format("groups name position {}", sorted.front() < 0 ? sorted.front() : sorted.back()));
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) return opError(op, ops, fmt::format("groups name position {} twice", *dup));
  return {};
}

Status checkSummable(std::string_view op, std::span<const Aval> ops) {
  if (ops[0].dtype == DType::Bool) return opError(op, ops, "cannot sum bool (numeric dtypes only)");
  return {};
}

Status checkDim(std::string_view op, std::span<const Aval> ops, std::string_view name, int64_t dim) {
  if (dim < 0 || dim >= ops[0].rank())
    return opError(op, ops, fmt::format("{} {} is out of range for rank {}", name, dim, ops[0].rank()));
  return {};
}

Status checkDivides(std::string_view op, std::span<const Aval> ops, std::string_view name, int64_t dim, int64_t n) {
  if (ops[0].shape[static_cast<int>(dim)] % n != 0)
    return opError(op, ops, fmt::format("{} {} has size {}, not divisible by the group size {}", name, dim,
                                        ops[0].shape[static_cast<int>(dim)], n));
  return {};
}

Result<std::vector<Aval>> inferAllReduce(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("all_reduce", ops, 1));
  const auto& at = attrsAs<AllReduceAttrs>(attrs);
  TSR_TRY(checkGroups("all_reduce", ops, at.groups, at.groupSize));
  TSR_TRY(checkSummable("all_reduce", ops));
  return std::vector<Aval>{ops[0]};
}

Result<std::vector<Aval>> inferAllGather(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("all_gather", ops, 1));
  const auto& at = attrsAs<AllGatherAttrs>(attrs);
  TSR_TRY(checkGroups("all_gather", ops, at.groups, at.groupSize));
  TSR_TRY(checkDim("all_gather", ops, "dim", at.dim));
  Aval out = ops[0];
  out.shape[static_cast<int>(at.dim)] *= at.groupSize;
  return std::vector<Aval>{out};
}

Result<std::vector<Aval>> inferReduceScatter(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("reduce_scatter", ops, 1));
  const auto& at = attrsAs<AllGatherAttrs>(attrs);
  TSR_TRY(checkGroups("reduce_scatter", ops, at.groups, at.groupSize));
  TSR_TRY(checkSummable("reduce_scatter", ops));
  TSR_TRY(checkDim("reduce_scatter", ops, "dim", at.dim));
  TSR_TRY(checkDivides("reduce_scatter", ops, "dim", at.dim, at.groupSize));
  Aval out = ops[0];
  out.shape[static_cast<int>(at.dim)] /= at.groupSize;
  return std::vector<Aval>{out};
}

Result<std::vector<Aval>> inferAllToAll(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("all_to_all", ops, 1));
  const auto& at = attrsAs<AllToAllAttrs>(attrs);
  TSR_TRY(checkGroups("all_to_all", ops, at.groups, at.groupSize));
  TSR_TRY(checkDim("all_to_all", ops, "split_dim", at.splitDim));
  TSR_TRY(checkDim("all_to_all", ops, "concat_dim", at.concatDim));
  TSR_TRY(checkDivides("all_to_all", ops, "split_dim", at.splitDim, at.groupSize));
  Aval out = ops[0];
  out.shape[static_cast<int>(at.splitDim)] /= at.groupSize;
  out.shape[static_cast<int>(at.concatDim)] *= at.groupSize;
  return std::vector<Aval>{out};
}

Result<std::vector<Aval>> inferCollectivePermute(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "collective_permute";
  TSR_TRY(checkArity(kOp, ops, 1));
  const ir::Ints& pairs = attrsAs<CollectivePermuteAttrs>(attrs).pairs;
  if (pairs.size() % 2 != 0)
    return opError(kOp, ops, fmt::format("pairs holds {} positions, not (source, target) pairs", pairs.size()));
  std::vector<int64_t> sources, targets;
  for (size_t i = 0; i < pairs.size(); i += 2) {
    if (pairs[i] < 0 || pairs[i + 1] < 0 || pairs[i] > std::numeric_limits<int>::max() ||
        pairs[i + 1] > std::numeric_limits<int>::max())
      return opError(kOp, ops, fmt::format("pair ({}, {}) names a position out of range", pairs[i], pairs[i + 1]));
    sources.push_back(pairs[i]);
    targets.push_back(pairs[i + 1]);
  }
  for (auto* v : {&sources, &targets}) {
    std::sort(v->begin(), v->end());
    auto dup = std::adjacent_find(v->begin(), v->end());
    if (dup != v->end())
      return opError(kOp, ops, fmt::format("position {} is the {} of more than one pair", *dup,
                                           v == &sources ? "source" : "target"));
  }
  return std::vector<Aval>{ops[0]};
}

bool fitsExactly(int64_t v, DType dtype) {
  return dispatchDType(dtype, [&]<class T>() -> bool {
    if constexpr (std::is_same_v<T, bool>) {
      return false;
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      return v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
    } else if constexpr (std::is_integral_v<T>) {
      return v >= 0 && static_cast<uint64_t>(v) <= std::numeric_limits<T>::max();
    } else {
      T converted;
      if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) converted = T(static_cast<float>(v));
      else converted = static_cast<T>(v);
      auto back = static_cast<double>(converted);
      return std::fabs(back) < 9.0e18 && static_cast<int64_t>(back) == v;
    }
  });
}

Result<std::vector<Aval>> inferDeviceTable(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "device_table";
  TSR_TRY(checkArity(kOp, ops, 0));
  const auto& at = attrsAs<DeviceTableAttrs>(attrs);
  if (at.table.empty()) return opError(kOp, ops, "the table must have an entry per device");
  if (at.dtype == DType::Bool) return opError(kOp, ops, "dtype must be numeric, got bool");
  // Every entry must survive the conversion to dtype exactly: an offset that rounds is a wrong offset.
  for (int64_t v : at.table)
    if (!fitsExactly(v, at.dtype))
      return opError(kOp, ops, fmt::format("entry {} does not fit {} exactly", v, dtypeName(at.dtype)));
  return std::vector<Aval>{Aval{Shape{}, at.dtype}};
}

// ==== cost: per device ====

ir::Cost costAllReduce(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  // Each member sums its 1/n of the elements over the n members: (n - 1) / n adds per element.
  const auto n = static_cast<double>(attrsAs<AllReduceAttrs>(attrs).groupSize);
  ir::Cost c = movementCost(in, out);
  c.flops = static_cast<double>(in[0].numel()) * (n - 1) / n;
  return c;
}

ir::Cost costReduceScatter(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  const auto n = static_cast<double>(attrsAs<AllGatherAttrs>(attrs).groupSize);
  ir::Cost c = movementCost(in, out);
  c.flops = static_cast<double>(out[0].numel()) * (n - 1);
  return c;
}

ir::Cost costMovement(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  return movementCost(in, out);
}

// ==== kernels ====

// Where this kernel runs: its device's position and communicator (none outside an SPMD run).
struct Device {
  int position = 0;
  dist::Communicator* comm = nullptr;
  dist::DeviceContext* ctx = nullptr;
};

Device thisDevice() {
  dist::DeviceContext* ctx = dist::currentDevice();
  if (!ctx) return {};
  return {ctx->position, ctx->comm, ctx};
}

// Messages name no op: the interpreter, the executable and eager execution name the op (and node) already.
[[noreturn]] void fail(const Device& d, Error e) {
  if (d.ctx) d.ctx->fail(e);
  raise(std::move(e));
}

void check(const Device& d, Status st) {
  if (!st.ok()) fail(d, st.takeError());
}

// My group (positions in chunk order); fails when I am in none, or when the group has other members but this
// thread runs no device of an SPMD run.
std::vector<int> groupOf(const Device& d, const ir::Ints& groups, int64_t groupSize) {
  auto it = std::find(groups.begin(), groups.end(), static_cast<int64_t>(d.position));
  if (it == groups.end())
    fail(d, makeError("device {} is in no group of [{}]{}", d.position, fmt::join(groups, ","),
                      d.ctx ? "" : " (outside an SPMD run the program runs as device 0)"));
  const auto first = (it - groups.begin()) / groupSize * groupSize;
  std::vector<int> group(groups.begin() + first, groups.begin() + first + groupSize);
  if (group.size() > 1 && !d.comm)
    fail(d, makeError("a group of {} devices needs an SPMD run (dist::runOnDevices); this thread runs no device",
                      group.size()));
  if (group.size() > 1) d.ctx->collectiveGroup = group;  // a profile links the members' spans
  return group;
}

// memcpy and memset with a zero size and a null pointer (an empty buffer) are undefined: skip them.
void copyBytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(bytes));
}
void zeroBytes(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

// src [outer, n, row] -> dst [n, outer, row] (bytes).
void splitChunks(const void* src, void* dst, int64_t outer, int64_t n, int64_t row) {
  const auto* s = static_cast<const char*>(src);
  auto* t = static_cast<char*>(dst);
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(t + (j * outer + a) * row, s + (a * n + j) * row, static_cast<size_t>(row));
}

// src [n, outer, row] -> dst [outer, n, row] (bytes).
void joinChunks(const void* src, void* dst, int64_t outer, int64_t n, int64_t row) {
  const auto* s = static_cast<const char*>(src);
  auto* t = static_cast<char*>(dst);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t a = 0; a < outer; ++a)
      std::memcpy(t + (a * n + j) * row, s + (j * outer + a) * row, static_cast<size_t>(row));
}

// The product of shape[0:dim].
int64_t outerSize(const Shape& s, int64_t dim) {
  int64_t n = 1;
  for (int d = 0; d < dim; ++d) n *= s[d];
  return n;
}

void allReduceKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<AllReduceAttrs>(args.attrs);
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  Device d = thisDevice();
  std::vector<int> group = groupOf(d, at.groups, at.groupSize);
  if (group.size() == 1) {
    copyBytes(out.data, x.data, x.aval.bytes());
    return;
  }
  check(d, d.comm->allReduce(d.position, group, x.data, out.data, x.aval.numel(), x.aval.dtype));
}

// x: [A, D, B] -> out: [A, n*D, B] with out[:, j*D:(j+1)*D, :] = member j's x.
void allGatherKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<AllGatherAttrs>(args.attrs);
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  Device d = thisDevice();
  std::vector<int> group = groupOf(d, at.groups, at.groupSize);
  const int64_t bytes = x.aval.bytes();
  if (group.size() == 1) {
    copyBytes(out.data, x.data, bytes);
    return;
  }
  const int64_t outer = outerSize(x.aval.shape, at.dim), n = at.groupSize;
  if (outer == 1 || bytes == 0) {
    check(d, d.comm->allGather(d.position, group, x.data, out.data, bytes));
    return;
  }
  std::vector<char> gathered(static_cast<size_t>(bytes * n));  // [n, A, D*B]
  check(d, d.comm->allGather(d.position, group, x.data, gathered.data(), bytes));
  joinChunks(gathered.data(), out.data, outer, n, bytes / outer);
}

// x: [A, n*D, B] -> out: [A, D, B] = sum over members of their x[:, me*D:(me+1)*D, :].
void reduceScatterKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<AllGatherAttrs>(args.attrs);
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  Device d = thisDevice();
  std::vector<int> group = groupOf(d, at.groups, at.groupSize);
  const int64_t bytes = x.aval.bytes();
  if (group.size() == 1) {
    copyBytes(out.data, x.data, bytes);
    return;
  }
  const int64_t outer = outerSize(x.aval.shape, at.dim), n = at.groupSize;
  const void* chunks = x.data;
  std::vector<char> packed;  // [n, A, D*B]
  if (outer > 1 && bytes > 0) {
    packed.resize(static_cast<size_t>(bytes));
    splitChunks(x.data, packed.data(), outer, n, bytes / (outer * n));
    chunks = packed.data();
  }
  check(d, d.comm->reduceScatter(d.position, group, chunks, out.data, out.aval.numel(), x.aval.dtype));
}

// x split along splitDim into n chunks (chunk j to member j); the chunks received, one per member, are
// concatenated along concatDim.
void allToAllKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<AllToAllAttrs>(args.attrs);
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  Device d = thisDevice();
  std::vector<int> group = groupOf(d, at.groups, at.groupSize);
  const int64_t bytes = x.aval.bytes(), n = at.groupSize;
  if (group.size() == 1) {
    copyBytes(out.data, x.data, bytes);
    return;
  }
  // Send: x as [As, n, rowS] -> [n, As, rowS], chunk j contiguous.
  const int64_t splitOuter = outerSize(x.aval.shape, at.splitDim);
  const void* send = x.data;
  std::vector<char> packed;
  if (splitOuter > 1 && bytes > 0) {
    packed.resize(static_cast<size_t>(bytes));
    splitChunks(x.data, packed.data(), splitOuter, n, bytes / (splitOuter * n));
    send = packed.data();
  }
  // Receive: n chunks of shape C (x's shape with splitDim / n), each [Ac, rowC] -> out [Ac, n, rowC].
  Shape chunk = x.aval.shape;
  chunk[static_cast<int>(at.splitDim)] /= n;
  const int64_t concatOuter = outerSize(chunk, at.concatDim);
  if (concatOuter == 1 || bytes == 0) {
    check(d, d.comm->allToAll(d.position, group, send, out.data, bytes / n));
    return;
  }
  std::vector<char> received(static_cast<size_t>(bytes));
  check(d, d.comm->allToAll(d.position, group, send, received.data(), bytes / n));
  joinChunks(received.data(), out.data, concatOuter, n, bytes / (n * concatOuter));
}

void collectivePermuteKernel(const ir::CpuKernelArgs& args) {
  const ir::Ints& flat = attrsAs<CollectivePermuteAttrs>(args.attrs).pairs;
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  Device d = thisDevice();
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i + 1 < flat.size(); i += 2)
    pairs.emplace_back(static_cast<int>(flat[i]), static_cast<int>(flat[i + 1]));
  if (d.comm) {
    // The group a profile links: every position named in a pair, when this device is one of them.
    std::vector<int> named;
    for (auto [s, t] : pairs) named.insert(named.end(), {s, t});
    std::sort(named.begin(), named.end());
    named.erase(std::unique(named.begin(), named.end()), named.end());
    if (named.size() > 1 && std::binary_search(named.begin(), named.end(), d.position))
      d.ctx->collectiveGroup = std::move(named);
    check(d, d.comm->permute(d.position, pairs, x.data, out.data, x.aval.bytes()));
    return;
  }
  // One device: only a pair from device 0 to itself moves anything; a pair with another device cannot run.
  zeroBytes(out.data, x.aval.bytes());
  for (auto [s, t] : pairs) {
    if (s == d.position && t == d.position) copyBytes(out.data, x.data, x.aval.bytes());
    else if (s == d.position || t == d.position)
      fail(d, makeError("pair ({}, {}) needs an SPMD run (dist::runOnDevices); this thread runs no device", s, t));
  }
}

void deviceTableKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<DeviceTableAttrs>(args.attrs);
  Device d = thisDevice();
  if (d.position >= static_cast<int64_t>(at.table.size()))
    fail(d, makeError("device {} has no entry in a table of {}", d.position, at.table.size()));
  const int64_t v = at.table[static_cast<size_t>(d.position)];
  dispatchDType(at.dtype, [&]<class T>() {
    T value;
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) value = T(static_cast<float>(v));
    else value = static_cast<T>(v);
    std::memcpy(args.outputs[0].data, &value, sizeof(T));
  });
}

// ==== vjp: each collective's transpose is a collective over the same groups ====

Array collective(ir::OpCode op, const Array& x, ir::Attrs attrs) {
  return bind1(op, {x}, std::move(attrs), std::source_location::current());
}

// all_reduce^T = all_reduce: sum_devices <ct, psum(x)> = sum_devices <psum(ct), x>.
std::vector<Array> vjpAllReduce(const ir::VjpArgs& a) {
  return {collective(ir::OpCode::AllReduce, cotangentOrZeros(a, 0), a.attrs)};
}

std::vector<Array> vjpAllGather(const ir::VjpArgs& a) {
  return {collective(ir::OpCode::ReduceScatter, cotangentOrZeros(a, 0), a.attrs)};
}

std::vector<Array> vjpReduceScatter(const ir::VjpArgs& a) {
  return {collective(ir::OpCode::AllGather, cotangentOrZeros(a, 0), a.attrs)};
}

// Chunk (me -> j) went from my split dim to j's concat dim: the cotangent goes back the other way.
std::vector<Array> vjpAllToAll(const ir::VjpArgs& a) {
  AllToAllAttrs at = attrsAs<AllToAllAttrs>(a.attrs);
  std::swap(at.splitDim, at.concatDim);
  return {collective(ir::OpCode::AllToAll, cotangentOrZeros(a, 0), at)};
}

std::vector<Array> vjpCollectivePermute(const ir::VjpArgs& a) {
  CollectivePermuteAttrs at = attrsAs<CollectivePermuteAttrs>(a.attrs);
  for (size_t i = 0; i + 1 < at.pairs.size(); i += 2) std::swap(at.pairs[i], at.pairs[i + 1]);
  return {collective(ir::OpCode::CollectivePermute, cotangentOrZeros(a, 0), at)};
}

// ==== batching: the same groups move more data per device ====

// Shape-preserving collectives keep the batch dim where it is.
ir::BatchResult batchInPlace(ir::OpCode op, const ir::BatchArgs& a) {
  return {{collective(op, a.operands[0], a.attrs)}, {a.batchDims[0]}};
}

// The batch dim goes in front and the collective's dims shift by one.
ir::BatchResult batchAllGather(ir::OpCode op, const ir::BatchArgs& a) {
  AllGatherAttrs at = attrsAs<AllGatherAttrs>(a.attrs);
  ++at.dim;
  return {{collective(op, moveBatchDim(a.operands[0], a.batchDims[0], 0, a.batchSize), at)}, {0}};
}

ir::BatchResult batchAllToAll(const ir::BatchArgs& a) {
  AllToAllAttrs at = attrsAs<AllToAllAttrs>(a.attrs);
  ++at.splitDim;
  ++at.concatDim;
  return {{collective(ir::OpCode::AllToAll, moveBatchDim(a.operands[0], a.batchDims[0], 0, a.batchSize), at)}, {0}};
}

ir::OpDef collectiveOp(ir::OpCode code, int numOperands) {
  return coreOp(code, "collective", ir::FusionKind::Opaque, numOperands);
}

}  // namespace

void registerCollectiveOps(ir::OpRegistry& reg) {
  ir::OpDef allReduce = collectiveOp(ir::OpCode::AllReduce, 1);
  allReduce.infer = inferAllReduce;
  allReduce.cost = costAllReduce;
  allReduce.cpu = allReduceKernel;
  allReduce.vjp = vjpAllReduce;
  allReduce.batch = [](const ir::BatchArgs& a) { return batchInPlace(ir::OpCode::AllReduce, a); };
  addCoreOp(reg, std::move(allReduce));

  ir::OpDef allGather = collectiveOp(ir::OpCode::AllGather, 1);
  allGather.infer = inferAllGather;
  allGather.cost = costMovement;
  allGather.cpu = allGatherKernel;
  allGather.vjp = vjpAllGather;
  allGather.batch = [](const ir::BatchArgs& a) { return batchAllGather(ir::OpCode::AllGather, a); };
  addCoreOp(reg, std::move(allGather));

  ir::OpDef reduceScatter = collectiveOp(ir::OpCode::ReduceScatter, 1);
  reduceScatter.infer = inferReduceScatter;
  reduceScatter.cost = costReduceScatter;
  reduceScatter.cpu = reduceScatterKernel;
  reduceScatter.vjp = vjpReduceScatter;
  reduceScatter.batch = [](const ir::BatchArgs& a) { return batchAllGather(ir::OpCode::ReduceScatter, a); };
  addCoreOp(reg, std::move(reduceScatter));

  ir::OpDef allToAll = collectiveOp(ir::OpCode::AllToAll, 1);
  allToAll.infer = inferAllToAll;
  allToAll.cost = costMovement;
  allToAll.cpu = allToAllKernel;
  allToAll.vjp = vjpAllToAll;
  allToAll.batch = batchAllToAll;
  addCoreOp(reg, std::move(allToAll));

  ir::OpDef permute = collectiveOp(ir::OpCode::CollectivePermute, 1);
  permute.infer = inferCollectivePermute;
  permute.cost = costMovement;
  permute.cpu = collectivePermuteKernel;
  permute.vjp = vjpCollectivePermute;
  permute.batch = [](const ir::BatchArgs& a) { return batchInPlace(ir::OpCode::CollectivePermute, a); };
  addCoreOp(reg, std::move(permute));

  // No operands, an integer-valued result: nothing to differentiate; vmap never batches it (like iota).
  ir::OpDef table = collectiveOp(ir::OpCode::DeviceTable, 0);
  table.differentiable = false;
  table.infer = inferDeviceTable;
  table.cost = costMovement;
  table.cpu = deviceTableKernel;
  table.batch = [](const ir::BatchArgs& a) -> ir::BatchResult {
    return {{bind1(ir::OpCode::DeviceTable, {}, a.attrs, std::source_location::current())}, {-1}};
  };
  addCoreOp(reg, std::move(table));
}

}  // namespace tsr::ops
