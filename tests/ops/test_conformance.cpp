// Runs every op case through (1) the op's CPU kernel and (2) a one-node graph run by the CPU interpreter,
// comparing both with the independent reference. Also checks that every core op has cases.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <set>

#include "engine/backends/cpu/interpreter.h"
#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;

namespace {

std::vector<OpCase> allCases() {
  std::mt19937 rng(1234);
  std::vector<OpCase> cases;
  addElementwiseCases(cases, rng);
  addLayoutCases(cases, rng);
  addReductionCases(cases, rng);
  addContractionCases(cases, rng);
  addIndexingCases(cases, rng);
  addMiscCases(cases, rng);
  return cases;
}

void defaultTolerance(DType t, double& rtol, double& atol) {
  switch (t) {
    case DType::F32: rtol = 2e-5; atol = 1e-6; break;
    case DType::F64: rtol = 1e-12; atol = 1e-14; break;
    case DType::BF16: rtol = 1.6e-2; atol = 1e-3; break;
    case DType::F16: rtol = 2e-3; atol = 1e-4; break;
    default: rtol = 0; atol = 0; break;
  }
}

// Returns "" when equal within tolerance, else a description of the first mismatch.
std::string compare(const HostTensor& got, const HostTensor& want, const OpCase& c) {
  if (!(got.aval == want.aval)) return "aval " + got.aval.toString() + ", reference " + want.aval.toString();
  double rtol, atol;
  defaultTolerance(want.aval.dtype, rtol, atol);
  if (c.rtol >= 0) rtol = c.rtol;
  if (c.atol >= 0) atol = c.atol;
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

HostTensor fromBuffer(const runtime::BufferPtr& b, const Aval& a) {
  HostTensor t = HostTensor::zeros(a);
  if (a.bytes()) std::memcpy(t.bytes.data(), b->data(), static_cast<size_t>(a.bytes()));
  return t;
}

}  // namespace

class TestConformance : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { m_cases = allCases(); }

  void everyCoreOpHasCases() {
    std::set<ir::OpCode> covered;
    for (const auto& c : m_cases) covered.insert(c.op);
    QStringList missing;
    for (const auto& def : ops::registry().all())
      if (static_cast<uint32_t>(def.code) < ir::kNumCoreOps && !covered.count(def.code))
        missing << QString::fromStdString(def.name);
    QVERIFY2(missing.isEmpty(), qPrintable("ops without conformance cases: " + missing.join(", ")));
    QVERIFY(m_cases.size() > 500);
  }

  void kernelsMatchReference() {
    const auto& reg = ops::registry();
    int failures = 0;
    QStringList messages;
    for (const auto& c : m_cases) {
      const ir::OpDef* def = reg.find(c.op);
      QVERIFY2(def, qPrintable(QString::fromStdString(c.label) + ": op not registered"));
      std::vector<Aval> avals;
      std::vector<runtime::BufferPtr> bufs;
      for (const auto& in : c.inputs) {
        avals.push_back(in.aval);
        auto b = runtime::Buffer::allocate(in.aval.bytes());
        QVERIFY(b.ok());
        if (in.aval.bytes()) std::memcpy((*b)->data(), in.bytes.data(), in.bytes.size());
        bufs.push_back(*b);
      }
      std::vector<HostTensor> want = c.reference(c.inputs);

      // (1) the kernel directly.
      std::vector<Aval> outAvals;
      auto outs = runtime::runCpuOp(*def, bufs, avals, c.attrs, &outAvals);
      if (!outs.ok()) {
        ++failures;
        messages << QString::fromStdString(c.label + ": " + outs.error().message);
        continue;
      }
      if (outs->size() != want.size()) {
        ++failures;
        messages << QString::fromStdString(c.label + ": wrong number of results");
        continue;
      }
      for (size_t r = 0; r < want.size(); ++r) {
        std::string diff = compare(fromBuffer((*outs)[r], outAvals[r]), want[r], c);
        if (!diff.empty()) {
          ++failures;
          messages << QString::fromStdString(c.label + " result " + std::to_string(r) + ": " + diff);
        }
      }

      // (2) the same op as a graph, verified and interpreted.
      ir::Graph g;
      std::vector<ir::ValueId> ins;
      for (const auto& a : avals) ins.push_back(g.addInput(a));
      auto res = g.addNode(reg, c.op, ins, c.attrs);
      QVERIFY2(res.ok(), qPrintable(QString::fromStdString(c.label)));
      g.setOutputs(*res);
      auto st = ir::verify(g, reg);
      QVERIFY2(st.ok(), qPrintable(QString::fromStdString(c.label + ": " + (st.ok() ? "" : st.error().message))));
      auto gouts = cpu::interpret(g, reg, bufs);
      QVERIFY2(gouts.ok(), qPrintable(QString::fromStdString(c.label)));
      for (size_t r = 0; r < want.size(); ++r) {
        std::string diff = compare(fromBuffer((*gouts)[r], g.aval((*res)[r])), want[r], c);
        if (!diff.empty()) {
          ++failures;
          messages << QString::fromStdString(c.label + " (graph) result " + std::to_string(r) + ": " + diff);
        }
      }
    }
    if (failures) {
      for (int i = 0; i < std::min<int>(40, static_cast<int>(messages.size())); ++i) qWarning("%s", qPrintable(messages[i]));
    }
    QVERIFY2(failures == 0, qPrintable(QString("%1 of %2 op cases failed").arg(failures).arg(m_cases.size())));
  }

 private:
  std::vector<OpCase> m_cases;
};

QTEST_GUILESS_MAIN(TestConformance)
#include "test_conformance.moc"
