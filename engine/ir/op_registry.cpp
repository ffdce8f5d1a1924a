#include "engine/core/check.h"
#include "engine/core/checked_bytes.h"
#include "engine/ir/op_def.h"

namespace tsr::ir {

const char* fusionKindName(FusionKind k) {
  switch (k) {
    case FusionKind::Elementwise: return "elementwise";
    case FusionKind::Reduction: return "reduction";
    case FusionKind::Layout: return "layout";
    case FusionKind::Opaque: return "opaque";
  }
  return "?";
}

namespace {
template <class T, class V>
struct IndexOf;
template <class T, class... Ts>
struct IndexOf<T, std::variant<Ts...>> {
  static constexpr size_t value = [] {
    size_t i = 0;
    ((std::is_same_v<T, Ts> ? false : (++i, true)) && ...);
    return i;
  }();
};
}  // namespace

size_t coreAttrsIndex(OpCode code) {
  switch (code) {
#define TSR_OP(e, n, a) \
  case OpCode::e: return IndexOf<a, Attrs>::value;
#include "engine/ir/op_list.inc"
#undef TSR_OP
    default: return 0;
  }
}

const char* coreOpName(OpCode code) {
  switch (code) {
#define TSR_OP(e, n, a) \
  case OpCode::e: return n;
#include "engine/ir/op_list.inc"
#undef TSR_OP
    default: return "?";
  }
}

Status checkSignature(const OpDef& def, size_t numOperands, const Attrs& attrs) {
  if (def.numOperands >= 0 && numOperands != static_cast<size_t>(def.numOperands))
    return makeError("{}: expects {} operand{}, got {}", def.name, def.numOperands, def.numOperands == 1 ? "" : "s",
                     numOperands);
  if (def.numOperands < 0 && numOperands < static_cast<size_t>(def.minOperands))
    return makeError("{}: expects at least {} operands, got {}", def.name, def.minOperands, numOperands);
  if (attrs.index() != def.attrsIndex)
    return makeError("{}: expects {} but was given {}", def.name, attrsTypeNameAt(def.attrsIndex), attrsTypeName(attrs));
  return {};
}

Result<std::vector<Aval>> inferSafely(const OpDef& def, std::span<const Aval> in, const Attrs& attrs) {
  if (!def.infer) return makeError("{}: op has no infer rule", def.name);
  Result<std::vector<Aval>> out = makeError("{}: infer rule threw", def.name);
  try {
    out = def.infer(in, attrs);
  } catch (const std::exception& e) {
    return makeError("{}: infer rule threw: {}", def.name, e.what());
  }
  if (!out.ok()) return out;
  for (const Aval& a : *out) {
    for (int64_t d : a.shape.dims())
      if (d < 0) return makeError("{}: result {} has a negative dimension", def.name, a.toString());
    if (!checkedBytes(a))
      return makeError("{}: result {} is too large: its byte size overflows 64 bits", def.name, a.toString());
  }
  return out;
}

Result<OpCode> OpRegistry::add(OpDef def) {
  if (def.name.empty()) return makeError("op registration: empty name");
  if (find(def.name)) return makeError("op registration: an op named '{}' is already registered", def.name);
  uint32_t code = static_cast<uint32_t>(def.code);
  bool isCore = code < kNumCoreOps && def.name == coreOpName(def.code);
  if (!isCore) {
    code = kNumCoreOps;
    while (code < m_index.size() && m_index[code] != -1) ++code;
    def.code = static_cast<OpCode>(code);
  }
  if (m_index.size() <= code) m_index.resize(code + 1, -1);
  if (m_index[code] != -1) return makeError("op registration: code {} of '{}' is taken", code, def.name);
  m_index[code] = static_cast<int>(m_defs.size());
  m_defs.push_back(std::move(def));
  return static_cast<OpCode>(code);
}

const OpDef* OpRegistry::find(OpCode code) const {
  auto c = static_cast<size_t>(code);
  if (c >= m_index.size() || m_index[c] < 0) return nullptr;
  return &m_defs[static_cast<size_t>(m_index[c])];
}

OpDef* OpRegistry::mutableFind(OpCode code) { return const_cast<OpDef*>(find(code)); }

const OpDef* OpRegistry::find(std::string_view name) const {
  for (const auto& d : m_defs)
    if (d.name == name) return &d;
  return nullptr;
}

const OpDef& OpRegistry::get(OpCode code) const {
  const OpDef* d = find(code);
  TSR_CHECK_MSG(d != nullptr, "op code not registered");
  return *d;
}

}  // namespace tsr::ir
