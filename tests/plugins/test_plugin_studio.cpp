// Plugins in Tessera Studio (offscreen): the IDE loads the example plugins of the build tree, Help › Plugins
// lists them as `tessera plugins` does, the Op Mix panel (a plugin's) sits in a dock, and the gpt2_swiglu
// sample project opens with the plugin's swiglu op in its graph, counted by the panel as the graph holds it.
#include <QCryptographicHash>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTest>
#include <QTreeWidget>

#include "app/studio/main_window.h"
#include "engine/ops/registry.h"
#include "engine/plugin/trust.h"
#include "views/graph_panel.h"
#include "views/plugin_dialog.h"
#include "views/session.h"

using namespace tsr;
using namespace tsr::studio;

namespace {

bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy opened(w.session(), &Session::projectOpened);
  QSignalSpy failed(w.session(), &Session::projectFailed);
  w.openProject(path);
  if (!QTest::qWaitFor([&] { return !opened.isEmpty() || !failed.isEmpty(); }, 60000) || opened.isEmpty()) return false;
  return QTest::qWaitFor([&] {
    return !w.session()->busy() && !w.graphPanel()->layoutRunning() && w.session()->stages() &&
           w.session()->stages()->size() > 1;
  }, 60000);
}

}  // namespace

class TestPluginStudio : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("TesseraTest");
    QCoreApplication::setApplicationName("PluginStudioTest");
  }

  // A project with native code in its plugins/ folder: the IDE asks before loading it. No keeps it out and is
  // not asked again in this session; in a new window Yes loads it and puts the project in the trust list.
  void projectPluginsAskOnce() {
    QTemporaryDir home, proj;
    qputenv("XDG_CONFIG_HOME", home.path().toUtf8());
    QVERIFY(QDir().mkpath(proj.filePath("plugins")));
    QVERIFY(QFile::copy(TSR_PROBE_PLUGIN, proj.filePath("plugins/trust_probe.so")));
    QVERIFY(QFile::copy(TSR_SOURCE_DIR "/sample_projects/mlp_sharding/project.toml", proj.filePath("project.toml")));
    int asked = 0;
    {
      MainWindow w;
      w.setPluginTrustPrompt([&](const plugin::TrustRequest& r) {
        ++asked;
        return r.files.size() == 1 && r.files[0].name == "trust_probe.so" && false;
      });
      w.openProject(proj.path());
      QCOMPARE(asked, 1);
      QVERIFY(!ops::registry().find("trust_probe_op"));
      QVERIFY(QTest::qWaitFor([&] { return !w.session()->busy(); }, 60000));
      w.openProject(proj.path());
      QCOMPARE(asked, 1);
      QVERIFY(!ops::registry().find("trust_probe_op"));
      QVERIFY(QTest::qWaitFor([&] { return !w.session()->busy(); }, 60000));
    }
    QVERIFY(!QFile::exists(home.filePath("tessera/trusted.toml")));
    {
      MainWindow w;
      w.setPluginTrustPrompt([&](const plugin::TrustRequest&) { return ++asked > 0; });
      w.openProject(proj.path());
      QCOMPARE(asked, 2);
      QVERIFY(ops::registry().find("trust_probe_op"));
      QVERIFY(QTest::qWaitFor([&] { return !w.session()->busy(); }, 60000));
    }
    auto list = plugin::TrustList::load(home.filePath("tessera/trusted.toml").toStdString());
    QVERIFY(list.ok());
    QVERIFY(list->whyUntrusted(plugin::trustFolderName(proj.path().toStdString()),
                               plugin::pluginFiles(proj.filePath("plugins").toStdString())).empty());
    qunsetenv("XDG_CONFIG_HOME");
  }

  void dialogListsTheExamplesAndThePanelIsDocked() {
    MainWindow w;
    QVERIFY2(w.panels().contains("op_mix"), qPrintable(w.panels().keys().join(", ")));
    w.action("plugins")->trigger();
    auto* dialog = w.findChild<PluginDialog*>();
    QVERIFY(dialog);
    QStringList loaded;
    for (int i = 0; i < dialog->tree()->topLevelItemCount(); ++i) {
      QTreeWidgetItem* item = dialog->tree()->topLevelItem(i);
      if (item->text(2) == "loaded") loaded << item->text(0);
    }
    for (const char* name : {"swiglu", "op_stats", "op_mix_panel"})
      QVERIFY2(loaded.contains(name), qPrintable(loaded.join(", ")));
    // Each bundled plugin's SHA-256, as Qt computes it from the file.
    for (int i = 0; i < dialog->tree()->topLevelItemCount(); ++i) {
      QTreeWidgetItem* item = dialog->tree()->topLevelItem(i);
      if (item->text(2) != "loaded" || !QStringList{"swiglu", "op_stats", "op_mix_panel"}.contains(item->text(0))) continue;
      QString path = item->text(3).section(" (", 0, 0);
      QFile f(path);
      QVERIFY(f.open(QIODevice::ReadOnly));
      QString want = QString::fromLatin1(QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256).toHex());
      bool shown = false;
      for (int c = 0; c < item->childCount(); ++c)
        shown |= item->child(c)->text(0) == "SHA-256" && item->child(c)->text(3) == want;
      QVERIFY2(shown, qPrintable(path));
    }
    dialog->close();
  }

  void swigluProjectOpensWithItsOpInTheGraph() {
    MainWindow w;
    QVERIFY(openAndWait(w, TSR_SOURCE_DIR "/sample_projects/gpt2_swiglu"));
    const auto& stages = *w.session()->stages();
    const ir::OpDef* def = ops::registry().find("swiglu");
    QVERIFY(def);
    int inGraph = stages.front().graph->count(def->code);
    QVERIFY2(inGraph >= 2, qPrintable(QString::number(inGraph)));  // one per layer forward, at least
    // The graph panel finds it by op name.
    QSignalSpy searched(w.graphPanel(), &GraphPanel::searchFinished);
    w.graphPanel()->search("swiglu");
    QVERIFY(QTest::qWaitFor([&] { return !searched.isEmpty(); }, 30000));
    QVERIFY(searched.first().first().toInt() > 0);
    // The Op Mix panel's row for swiglu counts the nodes of the stage on screen.
    auto* table = w.panels()["op_mix"]->findChild<QTableWidget*>("opMixTable");
    QVERIFY(table);
    int shown = -1;
    int current = w.session()->currentStage();
    int want = stages[static_cast<size_t>(current < 0 ? stages.size() - 1 : current)].graph->count(def->code);
    for (int r = 0; r < table->rowCount(); ++r)
      if (table->item(r, 0)->text() == "swiglu") shown = table->item(r, 2)->data(Qt::DisplayRole).toInt();
    QCOMPARE(shown, want);
    // The op_stats pass's report reached the last stage, and the dialog shows it.
    QVERIFY(!stages.back().reports.empty());
    QCOMPARE(QString::fromStdString(stages.back().reports.front().name), QString("op_stats.txt"));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestPluginStudio)
#include "test_plugin_studio.moc"
