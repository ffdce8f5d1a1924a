// Runs every op case through (1) the op's CPU kernel and (2) a one-node graph run by the CPU interpreter,
// comparing both with the independent reference. Also checks that every core op has cases.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;

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
    int failures = 0;
    QStringList messages;
    for (const auto& c : m_cases) {
      for (const std::string& m : checkConformance(c, &m_graphRuns)) {
        ++failures;
        messages << QString::fromStdString(m);
      }
    }
    if (failures) {
      // The first messages, then a count per op so that one broken op cannot hide another.
      for (int i = 0; i < std::min<int>(40, static_cast<int>(messages.size())); ++i) qWarning("%s", qPrintable(messages[i]));
      std::map<std::string, int> perOp;
      for (const auto& m : messages) perOp[m.section(' ', 0, 0).toStdString()]++;
      for (const auto& [op, n] : perOp) qWarning("%s: %d failures", op.c_str(), n);
    }
    qInfo("%zu op cases, %d graph runs (direct, transposed and broadcast operands)", m_cases.size(), m_graphRuns);
    QVERIFY2(failures == 0, qPrintable(QString("%1 of %2 op cases failed").arg(failures).arg(m_cases.size())));
  }

 private:
  std::vector<OpCase> m_cases;
  int m_graphRuns = 0;
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestConformance)
#include "test_conformance.moc"
