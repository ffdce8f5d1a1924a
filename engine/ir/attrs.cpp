#include "engine/ir/attrs.h"

#include <cstring>

#include "engine/ir/graph.h"

namespace tsr::ir {

bool Literal::operator==(const Literal& o) const {
  if (!(aval == o.aval)) return false;
  if (data == o.data) return true;
  if (!data || !o.data) return false;
  return *data == *o.data;
}

double Literal::elementAsDouble(int64_t i) const {
  return dispatchDType(aval.dtype, [&]<class T>() -> double {
    T v;
    std::memcpy(&v, data->data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return static_cast<float>(v);
    else return static_cast<double>(v);
  });
}

Literal Literal::scalar(DType dtype, double value) {
  Literal l;
  l.aval = Aval{Shape{}, dtype};
  auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(dtypeSize(dtype)));
  dispatchDType(dtype, [&]<class T>() {
    T v;
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) v = T(static_cast<float>(value));
    else v = static_cast<T>(value);
    std::memcpy(bytes->data(), &v, sizeof(T));
  });
  l.data = std::move(bytes);
  return l;
}

Literal Literal::fromBytes(Aval aval, const void* src) {
  Literal l;
  auto n = static_cast<size_t>(aval.bytes());
  auto bytes = std::make_shared<std::vector<uint8_t>>(n);
  if (n) std::memcpy(bytes->data(), src, n);
  l.aval = std::move(aval);
  l.data = std::move(bytes);
  return l;
}

bool ScanAttrs::operator==(const ScanAttrs& o) const {
  return length == o.length && numConsts == o.numConsts && numCarry == o.numCarry && reverse == o.reverse &&
         sameGraph(body, o.body);
}

bool CondAttrs::operator==(const CondAttrs& o) const {
  return sameGraph(trueBranch, o.trueBranch) && sameGraph(falseBranch, o.falseBranch);
}

bool WhileAttrs::operator==(const WhileAttrs& o) const {
  return numConsts == o.numConsts && sameGraph(cond, o.cond) && sameGraph(body, o.body);
}

bool CustomVjpAttrs::operator==(const CustomVjpAttrs& o) const {
  return numPrimals == o.numPrimals && sameGraph(primal, o.primal) && sameGraph(fwd, o.fwd) && sameGraph(bwd, o.bwd);
}

bool RematAttrs::operator==(const RematAttrs& o) const {
  return numConsts == o.numConsts && numSaved == o.numSaved && policy == o.policy && sameGraph(body, o.body);
}

namespace {
const char* const kAttrsNames[] = {"NoAttrs",        "ConvertAttrs",     "BroadcastInDimAttrs", "ReshapeAttrs",
                                   "TransposeAttrs", "SliceAttrs",       "DynamicSliceAttrs",   "ConcatenateAttrs",
                                   "PadAttrs",       "IotaAttrs",        "RevAttrs",            "ReduceAttrs",
                                   "ArgReduceAttrs", "DotGeneralAttrs",  "GatherAttrs",         "ConstantAttrs",
                                   "ScanAttrs",      "CondAttrs",
                                   "WhileAttrs",     "CustomVjpAttrs", "RematAttrs",
                                   "AllReduceAttrs",      "AllGatherAttrs",
                                   "AllToAllAttrs",  "CollectivePermuteAttrs", "DeviceTableAttrs",
                                   "ShardingConstraintAttrs", "IntegerPowAttrs", "CumulativeAttrs", "SortAttrs", "TopKAttrs",
                                   "ConvAttrs", "WindowAttrs", "AttentionAttrs", "BatchNormAttrs",
                                   "TriangularSolveAttrs", "DecompositionAttrs", "HostCallbackAttrs"};
static_assert(sizeof(kAttrsNames) / sizeof(kAttrsNames[0]) == std::variant_size_v<Attrs>);
}  // namespace

const char* attrsTypeName(const Attrs& attrs) { return kAttrsNames[attrs.index()]; }

const char* attrsTypeNameAt(size_t index) {
  return index < std::variant_size_v<Attrs> ? kAttrsNames[index] : "?";
}

}  // namespace tsr::ir
