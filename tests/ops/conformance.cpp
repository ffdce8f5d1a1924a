// The conformance runner (harness.h: runConformance, checkConformance): the op's CPU kernel, and the op as a
// one-node graph with its operands fed directly, through a transpose and (binary elementwise ops) broadcast from
// one row, run on the reference interpreter and on every backend registered with the runtime, each against the
// case's independent reference. The list of targets is made here and nowhere else.
#include <cmath>
#include <cstring>

#include "engine/ops/registry.h"
#include "engine/runtime/executable.h"
#include "engine/runtime/interpreter.h"
#include "tests/ops/harness.h"

namespace tsr::test {

namespace {

void defaultTolerance(DType t, double& rtol, double& atol) {
  switch (t) {
    case DType::F32: rtol = 2e-5; atol = 1e-6; break;
    case DType::F64: rtol = 1e-12; atol = 1e-14; break;
    case DType::BF16: rtol = 1.6e-2; atol = 1e-3; break;
    case DType::F16: rtol = 2e-3; atol = 1e-4; break;
    default: rtol = 0; atol = 0; break;
  }
}

// A graph run on one target: the interpreter, or a registered backend's executable.
Result<std::vector<runtime::BufferPtr>> runOn(const std::string& target, const ir::Graph& g,
                                              const std::vector<runtime::BufferPtr>& feeds, const std::string& name) {
  const auto& reg = ops::registry();
  if (target == kInterpreter) return runtime::interpret(g, reg, feeds);
  runtime::CompileOptions o;
  o.name = name;
  TSR_ASSIGN(std::unique_ptr<runtime::Executable> exe, runtime::compileOn(target, g, reg, o));
  return exe->run(feeds);
}

}  // namespace

std::string compareTensors(const HostTensor& got, const HostTensor& want, double rtol, double atol) {
  if (!(got.aval == want.aval)) return "aval " + got.aval.toString() + ", reference " + want.aval.toString();
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.get(i), w = want.get(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    bool ok = isFloating(want.aval.dtype) ? std::fabs(g - w) <= atol + rtol * std::fabs(w)
                                          : got.getBits(i) == want.getBits(i);
    if (!ok) {
      return "element " + std::to_string(i) + " of " + want.aval.toString() + ": got " + std::to_string(g) +
             ", reference " + std::to_string(w);
    }
  }
  return "";
}

std::string compareWithReference(const HostTensor& got, const HostTensor& want, const OpCase& c) {
  double rtol, atol;
  defaultTolerance(want.aval.dtype, rtol, atol);
  if (c.rtol >= 0) rtol = c.rtol;
  if (c.atol >= 0) atol = c.atol;
  return compareTensors(got, want, rtol, atol);
}

HostTensor fromBuffer(const runtime::BufferPtr& b, const Aval& a) {
  HostTensor t = HostTensor::zeros(a);
  if (a.bytes()) std::memcpy(t.bytes.data(), b->data(), static_cast<size_t>(a.bytes()));
  return t;
}

runtime::BufferPtr toBuffer(const HostTensor& t) {
  auto b = runtime::Buffer::allocate(t.aval.bytes());
  if (t.aval.bytes()) std::memcpy((*b)->data(), t.bytes.data(), t.bytes.size());
  return *b;
}

ConformanceTargets conformanceTargets() {
  ConformanceTargets t;
  t.names.push_back(kInterpreter);
  for (const std::string& name : runtime::backends().names()) {
    const std::string why = runtime::backends().find(name)->unavailableReason();
    if (why.empty()) t.names.push_back(name);
    else t.unavailable.push_back(name + ": " + why);
  }
  return t;
}

void checkConformance(const OpCase& c, const ConformanceOptions& options, ConformanceReport& report) {
  const auto& reg = ops::registry();
  auto failed = [&](std::string m) { report.messages.push_back(std::move(m)); };
  const ir::OpDef* def = reg.find(c.op);
  if (!def) return failed(c.label + ": op not registered");
  std::vector<HostTensor> want = c.reference(c.inputs);
  if (c.canonical) c.canonical(want);
  // The results a target gave, in canonical form when the case has one.
  auto results = [&](const std::vector<runtime::BufferPtr>& outs, const std::vector<Aval>& avals) {
    std::vector<HostTensor> got;
    for (size_t r = 0; r < outs.size(); ++r) got.push_back(fromBuffer(outs[r], avals[r]));
    if (c.canonical) c.canonical(got);
    return got;
  };

  // (1) the kernel directly.
  if (options.kernel) {
    std::vector<Aval> avals;
    std::vector<runtime::BufferPtr> bufs;
    for (const auto& in : c.inputs) {
      avals.push_back(in.aval);
      bufs.push_back(toBuffer(in));
    }
    std::vector<Aval> outAvals;
    auto outs = runtime::runCpuOp(*def, bufs, avals, c.attrs, &outAvals);
    if (!outs.ok()) return failed(c.label + ": " + outs.error().message);
    if (outs->size() != want.size()) return failed(c.label + ": wrong number of results");
    const std::vector<HostTensor> got = results(*outs, outAvals);
    for (size_t r = 0; r < want.size(); ++r) {
      std::string diff = compareWithReference(got[r], want[r], c);
      if (!diff.empty()) failed(c.label + " result " + std::to_string(r) + ": " + diff);
    }
  }

  // (2) the same op as a graph, verified, then run on every target: operands fed directly, operand 0 produced
  // by a transpose of transposed data, and (binary elementwise ops) operand 1 broadcast from its first row.
  const std::vector<std::string> targets = options.targets.empty() ? conformanceTargets().names : options.targets;
  for (Feed feed : {Feed::Direct, Feed::Transposed, Feed::Broadcast}) {
    auto fed = fedCaseGraph(c, feed);
    if (!fed.ok()) return failed(fed.error().message);
    if (!*fed) continue;
    const FedGraph& f = **fed;
    auto st = ir::verify(f.graph, reg);
    if (!st.ok()) return failed(c.label + f.tag + ": " + st.error().message);
    std::vector<HostTensor> expect = want;
    if (feed == Feed::Broadcast) {
      expect = c.reference(f.operands);
      if (c.canonical) c.canonical(expect);
    }
    std::vector<HostTensor> flushed = expect;  // what a compiled backend gives
    for (HostTensor& t : flushed) flushSubnormals(t);
    std::vector<runtime::BufferPtr> feeds;
    for (const HostTensor& t : f.inputs) feeds.push_back(toBuffer(t));
    for (const std::string& target : targets) {
      // The interpreter's messages name no target (it is the graph's meaning); a backend's say which.
      const std::string where = c.label + (target == kInterpreter ? f.tag : f.tag + " on " + target);
      auto outs = runOn(target, f.graph, feeds, c.label);
      if (!outs.ok()) {
        failed(where + ": " + outs.error().message);
        continue;
      }
      const std::vector<HostTensor>& wanted = target == kInterpreter ? expect : flushed;
      std::vector<Aval> outAvals;
      for (ir::ValueId v : f.graph.outputs()) outAvals.push_back(f.graph.aval(v));
      const std::vector<HostTensor> got = results(*outs, outAvals);
      for (size_t r = 0; r < wanted.size(); ++r) {
        std::string diff = compareWithReference(got[r], wanted[r], c);
        if (!diff.empty()) failed(where + " result " + std::to_string(r) + ": " + diff);
      }
      ++report.graphRuns[target];
    }
  }
}

ConformanceReport runConformance(const std::vector<OpCase>& cases, const ConformanceOptions& options) {
  ConformanceReport report;
  ConformanceOptions o = options;
  if (o.targets.empty()) {
    ConformanceTargets t = conformanceTargets();
    o.targets = std::move(t.names);
    report.unavailable = std::move(t.unavailable);
  }
  for (const OpCase& c : cases) checkConformance(c, o, report);
  return report;
}

std::vector<std::string> checkConformance(const OpCase& c, int* graphRuns) {
  ConformanceReport report;
  checkConformance(c, {}, report);
  if (graphRuns)
    for (const auto& [target, n] : report.graphRuns) *graphRuns += n;
  return std::move(report.messages);
}

}  // namespace tsr::test
