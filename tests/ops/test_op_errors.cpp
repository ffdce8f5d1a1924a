#include <QtTest>
class TestOpErrors : public QObject {
  Q_OBJECT
 private slots:
  void placeholder() {}
};
QTEST_GUILESS_MAIN(TestOpErrors)
#include "test_op_errors.moc"
