// The rule table: every core op that is differentiable has a vjp rule, and every core op has a batching rule.
// One failure lists every op that lacks a rule, so a missing rule cannot hide behind another.
#include <QtTest>

#include "engine/ops/registry.h"

using namespace tsr;

namespace {

bool isCore(const ir::OpDef& def) { return static_cast<uint32_t>(def.code) < ir::kNumCoreOps; }

QString opList(const QStringList& names) { return names.join(", "); }

}  // namespace

class TestRuleTable : public QObject {
  Q_OBJECT
 private slots:
  void everyCoreOpIsRegistered() {
    QStringList missing;
    for (uint32_t c = 0; c < ir::kNumCoreOps; ++c)
      if (!ops::registry().find(static_cast<ir::OpCode>(c))) missing << ir::coreOpName(static_cast<ir::OpCode>(c));
    QVERIFY2(missing.isEmpty(), qPrintable("core ops not registered: " + opList(missing)));
  }

  void differentiableOpsHaveVjpRules() {
    QStringList missing;
    int differentiable = 0;
    for (const auto& def : ops::registry().all()) {
      if (!isCore(def) || !def.differentiable) continue;
      ++differentiable;
      if (!def.vjp) missing << QString::fromStdString(def.name);
    }
    qInfo("%d differentiable core ops", differentiable);
    QVERIFY2(missing.isEmpty(), qPrintable(QString("%1 differentiable ops without a vjp rule: %2")
                                               .arg(missing.size())
                                               .arg(opList(missing))));
  }

  void everyOpHasABatchingRule() {
    QStringList missing;
    for (const auto& def : ops::registry().all())
      if (isCore(def) && !def.batch) missing << QString::fromStdString(def.name);
    QVERIFY2(missing.isEmpty(),
             qPrintable(QString("%1 ops without a batching rule: %2").arg(missing.size()).arg(opList(missing))));
  }

  // Ops marked non-differentiable get zero cotangents without their vjp rule running; a rule on one of them
  // is dead code and hints at a wrong flag. Reported, not failed: a zero rule there is harmless.
  void nonDifferentiableOpsWithVjpRules() {
    QStringList both;
    for (const auto& def : ops::registry().all())
      if (isCore(def) && !def.differentiable && def.vjp) both << QString::fromStdString(def.name);
    if (!both.isEmpty()) qWarning("ops marked non-differentiable whose vjp rule never runs: %s", qPrintable(opList(both)));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestRuleTable)
#include "test_rule_table.moc"
