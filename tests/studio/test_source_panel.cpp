// The Source panel on the offscreen platform, with a Python model project: model.py in the editor, a graph node's
// line marked and a line's node selected, the project traced again when the file is saved (from the panel or by
// another program) with the graph changed and the selection kept, and a model.py that fails (a syntax error, an
// abort, an endless loop) listed under Problems while the IDE stays up.
#include <QAction>
#include <QListWidget>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "app/studio/main_window.h"
#include "engine/core/env_options.h"
#include "engine/project/python_family.h"
#include "tests/studio/studio_test_util.h"
#include "views/code_edit.h"
#include "views/source_panel.h"

using namespace tsr;
using namespace tsr::studio;

namespace {

// Line 10 holds both matmuls, line 14 the loss's mean.
const char* kModel =
    "import tessera.numpy as tnp\n"
    "import tessera.nn as nn\n"
    "from tessera import random\n"
    "\n"
    "def init(key, cfg):\n"
    "    k = random.split(key, 2)\n"
    "    return {'w1': random.normal(k[0], (12, 16)) * 0.3, 'w2': random.normal(k[1], (16, 3)) * 0.3}\n"
    "\n"
    "def logits(params, x):\n"
    "    return tnp.maximum(x @ params['w1'], 0.0) @ params['w2']\n"
    "\n"
    "def loss(params, batch, key):\n"
    "    logp = nn.log_softmax(logits(params, batch[0]))\n"
    "    return -tnp.mean(tnp.take_along_axis(logp, batch[1][:, None], axis=1))\n";

const char* kProject =
    "[model]\npython = \"model.py\"\ninput_shape = [12]\nclasses = 3\n[data]\nkind = \"synthetic-digits\"\n"
    "[train]\nbatch_size = 8\n";

// The first node of the current stage with this op at this line of the file, or -1.
int nodeAt(Session* s, ir::OpCode op, const QString& file, int line) {
  const auto& nodes = s->stage()->graph->nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].op == op && nodes[i].prov.line == line && QString::fromStdString(nodes[i].prov.file) == file)
      return static_cast<int>(i);
  return -1;
}

int countOp(Session* s, ir::OpCode op) {
  int n = 0;
  for (const auto& node : s->stage()->graph->nodes()) n += node.op == op;
  return n;
}

// Waits for the re-trace a changed file starts, to its compiled stages.
bool waitRetrace(MainWindow& w, QSignalSpy& opened, int before) {
  return QTest::qWaitFor([&] { return opened.size() > before; }, 60000) &&
         QTest::qWaitFor([&] { return !w.session()->busy() && w.session()->stages()->size() > 1; }, 60000);
}

}  // namespace

class TestSourcePanel : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (auto fe = project::pythonFrontEnd(); !fe.ok()) QSKIP(fe.error().message.c_str());
  }

  void followsTheFile() {
    QTemporaryDir dir;
    const QString model = QDir(dir.path()).absoluteFilePath("model.py");
    test::writeFile(model, kModel);
    test::writeFile(dir.filePath("project.toml"), kProject);
    MainWindow w;
    QVERIFY(test::openAndWait(w, dir.path()));
    SourcePanel* src = w.sourcePanel();
    QCOMPARE(src->file(), model);
    QCOMPARE(src->editor()->toPlainText(), QString(kModel));
    Session* s = w.session();

    // A node's line is marked; a line's node is selected.
    const int dot = nodeAt(s, ir::OpCode::DotGeneral, model, 10);
    QVERIFY(dot >= 0);
    s->selectNode(dot);
    QCOMPARE(src->markedLine(), 10);
    s->selectNode(-1);
    QCOMPARE(src->markedLine(), 0);
    src->editor()->goToLine(14);
    QVERIFY(s->selectedNode() >= 0);
    QCOMPARE(s->stage()->graph->nodes()[static_cast<size_t>(s->selectedNode())].prov.line, 14);

    // Another program saves the file: traced again, the graph changes, the selected matmul stays selected.
    const int stage = s->currentStage();
    s->selectNode(dot);
    const int tanhBefore = countOp(s, ir::OpCode::Tanh);
    QSignalSpy opened(s, &Session::projectOpened);
    QByteArray edited = QByteArray(kModel).replace("tnp.maximum(x @ params['w1'], 0.0)", "tnp.tanh(x @ params['w1'])");
    test::writeFile(model, edited);
    QVERIFY(waitRetrace(w, opened, 0));
    QCOMPARE(src->editor()->toPlainText(), QString(edited));
    QCOMPARE(s->currentStage(), stage);
    QVERIFY(countOp(s, ir::OpCode::Tanh) > tanhBefore);
    QVERIFY(s->selectedNode() >= 0);
    const ir::Node& kept = s->stage()->graph->nodes()[static_cast<size_t>(s->selectedNode())];
    QCOMPARE(kept.op, ir::OpCode::DotGeneral);
    QCOMPARE(kept.prov.line, 10);

    // Saved from the panel: traced again.
    src->editor()->setPlainText(QString(kModel));
    QVERIFY(src->save());
    QVERIFY(waitRetrace(w, opened, 1));
    QCOMPARE(countOp(s, ir::OpCode::Tanh), tanhBefore);
  }

  void listsWhatFails() {
    QTemporaryDir dir;
    const QString model = QDir(dir.path()).absoluteFilePath("model.py");
    test::writeFile(model, kModel);
    test::writeFile(dir.filePath("project.toml"), kProject);
    MainWindow w;
    QVERIFY(test::openAndWait(w, dir.path()));
    SourcePanel* src = w.sourcePanel();
    QSignalSpy failed(w.session(), &Session::projectFailed);

    // A syntax error: listed, and a click goes to its line.
    test::writeFile(model, QByteArray(kModel).replace("def loss(params, batch, key):", "def loss(params, batch, key)"));
    QVERIFY(QTest::qWaitFor([&] { return failed.size() == 1; }, 60000));
    // The model as it was traced last is gone: what is on disk does not trace, and Run would train that.
    QVERIFY(!w.session()->project() && !w.session()->stages());
    QVERIFY(!w.action("run")->isEnabled() && !w.action("profile")->isEnabled());
    QCOMPARE(src->file(), model);  // still there to be fixed
    QVERIFY(src->problems()->count() >= 2);
    QVERIFY2(src->problems()->item(0)->text().contains("SyntaxError"), qPrintable(src->problems()->item(0)->text()));
    QCOMPARE(src->problems()->item(1)->data(Qt::UserRole).toInt(), 12);
    src->editor()->goToLine(1);
    emit src->problems()->itemActivated(src->problems()->item(1));
    QCOMPARE(src->editor()->textCursor().blockNumber() + 1, 12);

    // An exception names its line.
    test::writeFile(model, QByteArray(kModel).replace("    k = random.split(key, 2)\n", "    raise ValueError('no weights today')\n"));
    QVERIFY(QTest::qWaitFor([&] { return failed.size() == 2; }, 60000));
    QVERIFY2(src->problems()->item(0)->text().contains("ValueError: no weights today"),
             qPrintable(src->problems()->item(0)->text()));
    QCOMPARE(src->problems()->item(0)->data(Qt::UserRole).toInt(), 6);

    // The interpreter aborts: the IDE stays up and says so.
    test::writeFile(model, "import os\nos.abort()\n");
    QVERIFY(QTest::qWaitFor([&] { return failed.size() == 3; }, 60000));
    QVERIFY2(failed.last().first().toString().contains("signal 6"), qPrintable(failed.last().first().toString()));

    // An endless loop is stopped.
    qputenv("TESSERA_TRACE_TIMEOUT", "2");
    reloadEnvOptions();
    test::writeFile(model, "while True:\n    pass\n");
    QVERIFY(QTest::qWaitFor([&] { return failed.size() == 4; }, 60000));
    qunsetenv("TESSERA_TRACE_TIMEOUT");
    reloadEnvOptions();
    QVERIFY2(failed.last().first().toString().contains("longer than 2 s"), qPrintable(failed.last().first().toString()));

    // Fixed: it opens again.
    QSignalSpy opened(w.session(), &Session::projectOpened);
    test::writeFile(model, kModel);
    QVERIFY(waitRetrace(w, opened, 0));
    QCOMPARE(src->problems()->count(), 0);
    QVERIFY(w.action("run")->isEnabled());
  }
};

QTEST_MAIN(TestSourcePanel)
#include "test_source_panel.moc"
