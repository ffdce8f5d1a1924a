// Tessera Studio on the offscreen platform: the window opens projects, the panels show what the engine
// computes (checked against the graph directly), selections sync, the form writes a valid project.toml,
// the metrics panel tails a store, and runs launched from the IDE report their errors.
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QImage>
#include <QProcess>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <QTableView>
#include <QTextBrowser>
#include <QTextBlock>
#include <QTreeView>

#include "app/studio/command_palette.h"
#include "app/studio/main_window.h"
#include "engine/inspect/graph_stages.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/inspect/run_configuration.h"
#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "tests/studio/studio_test_util.h"
#include "views/console_panel.h"
#include "views/graph_panel.h"
#include "engine/inspect/node_info.h"
#include "views/inspector_panel.h"
#include "views/memory_panel.h"
#include "views/roofline_panel.h"
#include "views/ir_panel.h"
#include "views/metrics_panel.h"
#include "views/new_project_dialog.h"
#include "views/param_tree_model.h"
#include "views/project_panel.h"
#include "views/run_configurations_dialog.h"
#include "views/run_controller.h"
#include "views/runs_panel.h"
#include "views/session.h"

using namespace tsr;
using namespace tsr::studio;
using namespace tsr::studio::test;

namespace {

const QString kSamples = QStringLiteral(TSR_SOURCE_DIR "/sample_projects");

// A 6-step MLP on synthetic digits: trains in a second or two.
const char* kTinyMlp =
    "[project]\nname = \"tiny\"\n[model]\nfamily = \"mlp\"\nsizes = [784, 16, 10]\n[data]\nkind = "
    "\"synthetic-digits\"\n[train]\nsteps = 6\nbatch_size = 32\noptimizer = \"sgd\"\nlr = 0.1\nwarmup_steps = "
    "0\neval_every = 0\nlog_every = 1\n";

}  // namespace

class TestStudio : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    initStudioTest("StudioTest");
  }

  void opensEverySampleProject_data() {
    QTest::addColumn<QString>("name");
    for (const char* n : {"gpt2_mini", "gpt2_124m", "vit_tiny", "vit_base", "mlp_sharding"}) QTest::newRow(n) << QString(n);
  }

  void opensEverySampleProject() {
    QFETCH(QString, name);
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/" + name));
    auto* model = w.projectPanel()->paramModel();
    QVERIFY(model->rowCount() > 0);
    QAbstractItemModelTester tester(model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    // The tree's top rows sum to the parameter count.
    qlonglong total = 0;
    for (const auto& p : w.session()->project()->params) total += p.numel;
    QCOMPARE(total, static_cast<qlonglong>(w.session()->project()->numParams));
    QVERIFY(w.graphPanel()->visibleGroups().size() + w.graphPanel()->visibleNodeCount() > 0);
    QVERIFY(!w.irPanel()->editor()->toPlainText().isEmpty());
    // Transformers open at their numbered blocks.
    QString block = name.startsWith("gpt2") ? "h.0" : name.startsWith("vit") ? "vit.encoder.layer.0" : QString();
    if (!block.isEmpty()) QVERIFY2(w.graphPanel()->visibleGroups().contains(block), qPrintable(w.graphPanel()->visibleGroups().join(", ")));
  }

  void graphShowsBlocksAndExpandsOne() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    GraphPanel* g = w.graphPanel();
    const ir::Graph& graph = *w.session()->stage()->graph;
    QStringList groups = g->visibleGroups();
    QVERIFY2(groups.contains("h.0") && groups.contains("h.1"), qPrintable(groups.join(",")));
    QVERIFY(!groups.contains("h.0.attn"));
    int before = g->visibleNodeCount();
    // Independently: the nodes whose module path is exactly h.0, and h.0's child modules.
    int direct = 0;
    QSet<QString> children;
    for (const auto& n : graph.nodes()) {
      QString p = QString::fromStdString(n.prov.modulePath);
      if (p == "h.0") ++direct;
      if (p.startsWith("h.0.")) children.insert("h.0." + p.mid(4).section('.', 0, 0));
    }
    g->setExpanded("h.0", true);
    QVERIFY(waitLayout(g));
    QCOMPARE(g->visibleNodeCount() - before, direct);
    for (const QString& c : children) QVERIFY2(g->visibleGroups().contains(c), qPrintable(c));
    const QStringList laidOut = g->lastLaidOut();
    QCOMPARE(QSet<QString>(laidOut.begin(), laidOut.end()), (QSet<QString>{"", "h", "h.0"}));
    g->setExpanded("h.0", false);
    QVERIFY(waitLayout(g));
    QCOMPARE(g->visibleNodeCount(), before);
  }

  void regexSearchFindsTheRightNodes() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    const ir::Graph& graph = *w.session()->stage()->graph;
    w.graphPanel()->search("^dot_general$");
    QCOMPARE(w.graphPanel()->searchHits().size(), graph.count(ir::OpCode::DotGeneral));
    // A shape: every node with a result of that aval.
    int expect = 0;
    for (const auto& n : graph.nodes()) {
      bool hit = false;
      for (ir::ValueId v : n.results) hit |= graph.aval(v).toString() == "f32[8,64,512]";
      expect += hit;
    }
    QVERIFY(expect > 0);
    w.graphPanel()->search(R"(f32\[8,64,512\])");
    QCOMPARE(w.graphPanel()->searchHits().size(), expect);
    w.graphPanel()->search("([");
    QVERIFY(!w.graphPanel()->searchError().isEmpty());
    QVERIFY(w.graphPanel()->searchHits().isEmpty());
  }

  void stagesSideBySide() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    int last = static_cast<int>(w.session()->stages()->size()) - 1;
    w.session()->setCurrentStage(last);
    QVERIFY(waitLayout(w.graphPanel()));
    w.graphPanel()->setCompareStage(0);
    GraphPanel* left = w.graphPanel()->comparePanel();
    QVERIFY(!left->isHidden());
    QVERIFY(waitLayout(left));
    QCOMPARE(left->currentStage(), &w.session()->stages()->front());
    const inspect::StageDiff* d = w.graphPanel()->diff();
    QVERIFY(d);
    int before = static_cast<int>(w.session()->stages()->front().graph->nodes().size());
    int after = static_cast<int>(w.session()->stages()->back().graph->nodes().size());
    QCOMPARE(d->removed - d->added, before - after);
    QVERIFY(!left->visibleGroups().isEmpty());
    w.graphPanel()->setCompareStage(-1);
    QVERIFY(left->isHidden());
    QVERIFY(!w.graphPanel()->diff());
  }

  void selectionIsSyncedAcrossPanels() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    const inspect::Stage* st = w.session()->stage();
    int node = -1;
    for (size_t i = 0; i < st->graph->nodes().size() && node < 0; ++i)
      if (st->graph->nodes()[i].op == ir::OpCode::DotGeneral && st->graph->nodes()[i].prov.modulePath.rfind("h.1", 0) == 0)
        node = static_cast<int>(i);
    QVERIFY(node >= 0);
    // From the graph: the node lies in a collapsed block, so the block opens down to it.
    w.session()->selectNode(node);
    QVERIFY(waitLayout(w.graphPanel()));
    QTRY_COMPARE(w.irPanel()->highlightedLine(), st->nodeLines[static_cast<size_t>(node)]);
    QString text = w.inspectorPanel()->plainText();
    QVERIFY(text.contains("dot_general"));
    QVERIFY(text.contains(QString::fromStdString(st->graph->nodes()[static_cast<size_t>(node)].prov.modulePath)));
    QVERIFY2(w.graphPanel()->visibleNodeCount() > 0, "the block holding the node opened");
    // From the IR text: a line selects its node everywhere.
    int other = node + 1;
    w.irPanel()->activateLine(st->nodeLines[static_cast<size_t>(other)]);
    QCOMPARE(w.session()->selectedNode(), other);
    QVERIFY(w.inspectorPanel()->plainText().contains(QString("node %1").arg(other)));
  }

  void fusionStageDrawsKernelClusters() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    int last = static_cast<int>(w.session()->stages()->size()) - 1;
    const inspect::Stage& fs = w.session()->stages()->back();
    QVERIFY2(fs.name.find("fusion") != std::string::npos && fs.fusion, fs.name.c_str());
    // Independently: the kernels of several ops that planning the stage's graph gives.
    passes::PassContext ctx(ops::registry());
    auto plan = passes::planFusion(*fs.graph, ops::registry(), &ctx);
    QVERIFY(plan.ok());
    QSet<QString> multi;
    for (const auto& k : plan->groups)
      if (k.nodes.size() > 1) multi.insert(QString("%1 (%2)").arg(QString::fromStdString(k.name), passes::groupKindName(k.kind)));
    w.session()->setCurrentStage(last);
    QVERIFY(waitLayout(w.graphPanel()));
    w.graphPanel()->expandAll(true);
    QVERIFY(waitLayout(w.graphPanel()));
    QStringList drawn = w.graphPanel()->visibleClusters();
    QCOMPARE(drawn.size(), static_cast<int>(multi.size()));
    QCOMPARE(QSet<QString>(drawn.begin(), drawn.end()), multi);
    // Earlier stages show no clusters.
    w.session()->setCurrentStage(0);
    QVERIFY(waitLayout(w.graphPanel()));
    QVERIFY(w.graphPanel()->visibleClusters().isEmpty());
    // The inspector names the node's kernel and the fusion decision about it.
    w.session()->setCurrentStage(last);
    QVERIFY(waitLayout(w.graphPanel()));
    const passes::Decision* fused = nullptr;
    for (const auto& d : ctx.log().all())
      if (!fused && d.reason == passes::FusionReason::Fused && d.message.rfind("fused into ", 0) == 0) fused = &d;
    QVERIFY(fused);
    int node = fused->nodes.front();
    w.session()->selectNode(node);
    const auto& k = plan->groups[static_cast<size_t>(plan->groupOfNode[static_cast<size_t>(node)])];
    QString text = w.inspectorPanel()->plainText();
    QVERIFY2(text.contains(QString::fromStdString(fused->message)), qPrintable(text));
    QVERIFY2(text.contains(QString::fromStdString(k.name)) && text.contains(QString::fromStdString(k.reason)), qPrintable(text));
  }

  // "Why not fused?": with nothing selected at the fusion stage, the inspector lists the costliest boundaries
  // between kernels; Ctrl+clicking two nodes (two boxes selected) asks about the pair.
  void whyNotFusedInTheInspector() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    const int last = static_cast<int>(w.session()->stages()->size()) - 1;
    const inspect::Stage& fs = w.session()->stages()->back();
    w.session()->setCurrentStage(last);
    QVERIFY(waitLayout(w.graphPanel()));
    w.session()->selectNode(-1);
    QString text = w.inspectorPanel()->plainText();
    QVERIFY2(text.contains("Fusion: the 10 costliest boundaries"), qPrintable(text));
    // The costliest boundary, found here by walking the plan: the largest value a kernel reads from another.
    int64_t most = 0;
    for (size_t gi = 0; gi < fs.fusion->groups.size(); ++gi)
      for (ir::ValueId v : fs.fusion->groups[gi].inputs) {
        const ir::NodeId p = fs.graph->value(v).producer;
        if (p < 0) continue;
        const int pg = fs.fusion->groupOfNode[static_cast<size_t>(p)];
        if (pg < 0 || pg == static_cast<int>(gi) || fs.fusion->groups[size_t(pg)].kind == passes::GroupKind::Constant ||
            fs.fusion->groups[gi].kind == passes::GroupKind::Constant || fs.fusion->groups[gi].kind == passes::GroupKind::Alias)
          continue;
        most = std::max(most, 2 * fs.graph->aval(v).bytes());
      }
    QVERIFY2(text.contains(QString::fromStdString(inspect::formatBytes(most))), qPrintable(text));
    // Two boxes of one kernel: fused. Two nodes across a boundary: not fused, with the pass's reason code.
    const auto boundary = inspect::unfusedBoundaries(fs, 1).front();
    w.graphPanel()->expandAll(true);
    QVERIFY(waitLayout(w.graphPanel()));
    QCOMPARE(w.graphPanel()->selectNodeBoxes(QVector<int>{boundary.producer, boundary.consumer}), 2);
    QCOMPARE(w.session()->selectedPair(),
             std::make_pair(std::min(boundary.producer, boundary.consumer), std::max(boundary.producer, boundary.consumer)));
    text = w.inspectorPanel()->plainText();
    QVERIFY2(text.contains("Not fused [" + QString(passes::fusionReasonName(boundary.verdict.reason)) + "]"), qPrintable(text));
    const passes::FusionGroup* multi = nullptr;
    for (const auto& g : fs.fusion->groups)
      if (!multi && g.nodes.size() > 1) multi = &g;
    QVERIFY(multi);
    w.session()->selectPair(multi->nodes[0], multi->nodes[1]);
    text = w.inspectorPanel()->plainText();
    QVERIFY2(text.contains("Fused [fused]") && text.contains(QString::fromStdString(multi->name)), qPrintable(text));
    // A single selection ends the comparison.
    w.session()->selectNode(multi->nodes[0]);
    QCOMPARE(w.session()->selectedPair().first, -1);
  }

  void screenshotOfTheFusionStage() {
    QTemporaryDir dir;
    QString file = dir.filePath("graph.png");
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QT_QPA_PLATFORM", "offscreen");
    p.setProcessEnvironment(env);
    p.start(TSR_STUDIO_BIN, {kSamples + "/gpt2_mini", "--stage", "-1", "--expand", "h.1.mlp", "--screenshot", file,
                             "--panel", "graph"});
    QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitCode(), 0);
    QImage img(file);
    QVERIFY(!img.isNull() && img.width() > 100 && img.height() > 100);
    // Not blank: the cluster tint and the boxes give many colours.
    QSet<QRgb> colours;
    for (int y = 0; y < img.height(); y += 3)
      for (int x = 0; x < img.width(); x += 3) colours.insert(img.pixel(x, y));
    QVERIFY(colours.size() > 20);
  }

  void settingsFormValidatesAndWritesBack() {
    QTemporaryDir dir;
    QVERIFY(QFile::copy(kSamples + "/gpt2_mini/project.toml", dir.filePath("project.toml")));
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    ProjectPanel* p = w.projectPanel();
    QLineEdit* lr = p->field("train", "lr");
    QVERIFY(lr);
    QCOMPARE(lr->text(), QString("1e-3"));
    QTest::keyClicks(lr, "x");  // "1e-3x"
    QVERIFY(!p->validationError().isEmpty());
    QVERIFY(!p->save());
    lr->clear();
    QTest::keyClicks(lr, "-1");
    QVERIFY2(p->validationError().contains("project.toml:"), qPrintable(p->validationError()));
    lr->clear();
    QTest::keyClicks(lr, "0.002");
    QVERIFY2(p->validationError().isEmpty(), qPrintable(p->validationError()));
    QLineEdit* layers = p->field("model", "n_layer");
    layers->clear();
    QTest::keyClicks(layers, "3");
    QVERIFY(p->save());
    auto proj = project::loadProject(dir.path().toStdString());
    QVERIFY2(proj.ok(), proj.ok() ? "" : proj.error().message.c_str());
    QCOMPARE(proj->train.lr, 0.002);
    QCOMPARE(proj->model.config.integer("n_layer"), int64_t(3));
    QString text = QString::fromStdString(proj->text);
    QVERIFY(text.contains("block_size = 64     # n_positions"));
    QVERIFY(text.contains("# A small GPT-2 trained on free-software license texts"));
    QVERIFY(text.contains("tokenizer = \"bpe\"   # trained on the corpus"));
  }

  void malformedProjectShowsFileAndLine() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), "[model]\nfamily = \"gpt2\"\n\n[train]\nstpes = 3\n");
    MainWindow w;
    QSignalSpy failed(w.session(), &Session::projectFailed);
    w.openProject(dir.path());
    QVERIFY(failed.wait(20000));
    QString msg = failed.front().front().toString();
    QVERIFY2(msg.contains("project.toml:5") && msg.contains("stpes"), qPrintable(msg));
    QVERIFY(w.consolePanel()->plainText().contains("project.toml:5"));
    QVERIFY(!w.session()->project());
    // The window still works: a good project opens afterwards.
    QVERIFY(openAndWait(w, kSamples + "/mlp_sharding"));
  }

  // A project.toml location in the console is a link; clicking it opens that file at that line.
  void consoleLinkOpensProjectTomlAtLine() {
    QTemporaryDir dir;
    QByteArray text = "[model]\nfamily = \"gpt2\"\n\n[train]\nstpes = 3\n";
    writeFile(dir.filePath("project.toml"), text);
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy failed(w.session(), &Session::projectFailed);
    w.openProject(dir.path());
    QVERIFY(failed.wait(20000));
    w.action("show_console")->trigger();
    auto* browser = w.consolePanel()->findChild<QTextBrowser*>();
    QVERIFY(browser);
    // Where the link is: the first anchor to a file.
    QTextCursor at;
    QString href;
    for (QTextBlock b = browser->document()->begin(); b.isValid() && href.isEmpty(); b = b.next())
      for (auto it = b.begin(); !it.atEnd(); ++it) {
        QTextCharFormat f = it.fragment().charFormat();
        if (f.isAnchor() && f.anchorHref().startsWith("file:")) {
          href = f.anchorHref();
          at = QTextCursor(browser->document());
          at.setPosition(it.fragment().position() + it.fragment().length() / 2);
          break;
        }
      }
    QVERIFY2(href.endsWith("project.toml#5"), qPrintable(href));
    QSignalSpy activated(w.consolePanel(), &ConsolePanel::fileLocationActivated);
    browser->setTextCursor(at);
    browser->ensureCursorVisible();
    QPoint p = browser->cursorRect(at).center();
    QTest::mouseClick(browser->viewport(), Qt::LeftButton, {}, p);
    QCOMPARE(activated.size(), 1);
    QCOMPARE(activated.front()[1].toInt(), 5);
    ProjectPanel* project = w.projectPanel();
    QVERIFY(project->fileViewShown());
    QCOMPARE(project->fileView()->toPlainText(), QString::fromUtf8(text));
    QCOMPARE(project->fileView()->textCursor().blockNumber(), 4);
    QCOMPARE(project->fileView()->textCursor().selectedText(), QString("stpes = 3"));
  }

  // Profile ▶ runs `tessera profile`; the time overlay and the inspector show the kernels' measured time at
  // the fusion stage, and say which stage to pick at the others.
  void profileFromTheIdeColoursTheGraphByTime() {
    qputenv("TESSERA_BIN", TSR_TESSERA_BIN);
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    Session* s = w.session();
    QVERIFY(!s->profile());
    QVERIFY2(s->profileError().contains("no run store yet"), qPrintable(s->profileError()));
    QSignalSpy finished(w.runController(), &RunController::finished);
    w.action("profile")->trigger();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString()));
    // The profile is read on a worker thread.
    QTRY_VERIFY2(s->profile(), qPrintable(s->profileError()));
    QCOMPARE(s->profile()->steps, int64_t(3));
    // Read again: reloadProfile returns before the store is read, and profileChanged brings it.
    {
      QSignalSpy changed(s, &Session::profileChanged);
      s->reloadProfile();
      QVERIFY(!s->profile() && s->busy());
      QCOMPARE(s->profileError(), QString("reading the profile"));
      QVERIFY(changed.wait(30000));
      QVERIFY2(s->profile() && !s->busy(), qPrintable(s->profileError()));
      QCOMPARE(s->profile()->steps, int64_t(3));
    }
    GraphPanel* g = w.graphPanel();
    QCOMPARE(g->overlay(), QString("time"));
    s->setCurrentStage(0);
    QVERIFY(waitLayout(g));
    QVERIFY2(g->overlayLegend().contains("choose that stage"), qPrintable(g->overlayLegend()));
    s->setCurrentStage(s->profileStage());
    QVERIFY(waitLayout(g));
    QVERIFY2(g->overlayLegend().contains("split evenly"), qPrintable(g->overlayLegend()));
    // A node with a kernel: the inspector shows that kernel's time.
    int node = -1;
    for (size_t n = 0; n < s->profile()->kernelOfNode.size() && node < 0; ++n)
      if (s->profile()->kernelOfNode[n] >= 0) node = static_cast<int>(n);
    QVERIFY(node >= 0);
    s->selectNode(node);
    QString text = w.inspectorPanel()->plainText();
    QVERIFY2(text.contains("Measured time") && text.contains(QString::fromStdString(s->profile()->kernelOf(node)->name)),
             qPrintable(text));
    // The Roofline panel: a point per kernel with FLOPs, bytes and time in the profile; a click selects its nodes.
    RooflinePanel* roofline = w.rooflinePanel();
    QVERIFY(QTest::qWaitFor([&] { return roofline->roofs().has_value() && !roofline->measuring(); }, 60000));
    int drawable = 0;
    for (const auto& k : s->profile()->kernels) drawable += k.flops > 0 && k.bytes > 0 && k.totalNs > 0;
    QCOMPARE(static_cast<int>(roofline->roofline().points.size()), drawable);
    QVERIFY(drawable > 0);
    const auto& first = roofline->roofline().points.front();
    const auto& k0 = s->profile()->kernels[static_cast<size_t>(first.kernel)];
    QCOMPARE(first.intensity, k0.flops / k0.bytes);
    QVERIFY2(roofline->summary().contains("Roofs: SGEMM"), qPrintable(roofline->summary()));
    roofline->selectPoint(0);
    // The Memory panel sets the profile's measured memory beside the plan.
    MemoryPanel* memory = w.memoryPanel();
    QVERIFY(QTest::qWaitFor([&] { return memory->measured().startsWith("measured (profile"); }, 60000));
    QVERIFY2(memory->summary().contains("the plan holds"), qPrintable(memory->summary()));
    QCOMPARE(s->selectedKernelNodes(), std::vector<int>(first.nodes.begin(), first.nodes.end()));
    QCOMPARE(s->currentStage(), s->profileStage());
  }

  void metricsPanelTailsAStore() {
    QTemporaryDir dir;
    QString path = dir.filePath("runs.db");
    auto s = store::RunStore::open(path.toStdString());
    QVERIFY(s.ok());
    int64_t a = *s->createRun("a", "p", "");
    int64_t b = *s->createRun("b", "p", "");
    for (int i = 0; i < 10; ++i) {
      QVERIFY(s->logMetrics(a, i, {{"loss", 10.0 - i}}, 1000.0 + i).ok());
      QVERIFY(s->logMetrics(b, i, {{"loss", 20.0 - i}}, 2000.0 + 2 * i).ok());
    }
    MainWindow w;
    MetricsPanel* m = w.metricsPanel();
    m->setDatabase(path);
    m->setSmoothing(0);
    // The store is read on the panel's reader thread.
    auto answered = [m] { return QTest::qWaitFor([m] { return !m->reading(); }, 30000); };
    QVERIFY(answered());
    QCOMPARE(static_cast<int>(m->points(a, "loss").size()), 10);
    QCOMPARE(m->shownRuns(), (QList<qint64>{a, b}));
    QList<QPointF> curve = m->curve(b, "loss");
    QCOMPARE(curve.size(), 10);
    QCOMPARE(curve[3], QPointF(3, 17));
    // Live: new points appear at the next poll.
    for (int i = 10; i < 15; ++i) QVERIFY(s->logMetrics(a, i, {{"loss", 0.5}}, 1000.0 + i).ok());
    m->poll();
    QTRY_COMPARE(static_cast<int>(m->points(a, "loss").size()), 15);
    QCOMPARE(m->curve(a, "loss").size(), 15);
    // Smoothing works on the full data; the raw points stay.
    m->setSmoothing(0.9);
    QVERIFY(m->curve(a, "loss").back().y() > 0.5);
    QCOMPARE(m->points(a, "loss").values.back(), 0.5);
    QCOMPARE(m->rawCurve(a, "loss").back().y(), 0.5);
    // Wall-time axis: seconds since each run started.
    m->setSmoothing(0);
    m->setXAxis(MetricsPanel::XAxis::WallTime);
    QVERIFY(std::abs(m->curve(b, "loss")[3].x() - (2006.0 - s->run(b)->startTime)) < 1e-6);
    m->setLogY(true);
    QCOMPARE(m->curve(a, "loss").size(), 15);
    // The runs table.
    RunsPanel* runs = w.runsPanel();
    runs->setDatabase(path);
    QAbstractItemModelTester tester(runs->model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(runsRead(runs));
    QCOMPARE(runs->model()->rowCount(), 2);
    runs->selectRuns({a, b});
    runs->compareSelected();
    QTRY_VERIFY(!runs->comparing());  // the profiles are read on the panel's reader thread
    QVERIFY(runs->comparisonText().contains("run 1"));
    QVERIFY(runs->comparisonText().contains("run 2"));
    QVERIFY2(runs->comparisonText().contains("run 1 has no profile"), qPrintable(runs->comparisonText()));
    // With a profile each (one step; one kernel of 2 ms in A, 1 ms in B, the same node), the two are compared.
    for (int64_t run : {a, b}) {
      const int64_t pid = *s->createProfile(run, "p", 0, 0);
      QVERIFY(s->addProfileKernels(pid, {{0, "train_step", "fusion.0 gemm[dot_general]", "gemm", {7}, {"dot_general"}, "h.0"}}).ok());
      QVERIFY(s->addKernelEvents(pid, {{"cpu:0", 0, "fusion.0", 0, 0, run == a ? 2'000'000 : 1'000'000, 0, 0}}).ok());
    }
    runs->compareSelected();
    QTRY_VERIFY(!runs->comparing());
    const QString text = runs->comparisonText();
    QVERIFY2(text.contains("Profiles: run 1 (A) against run 2 (B)") && text.contains("2.000 ms") &&
                 text.contains("1.000 ms (-50.0%)") && text.contains("h.0 dot_general #0"),
             qPrintable(text));
  }

  void runOfABogusProjectShowsItsError() {
    qputenv("TESSERA_BIN", TSR_TESSERA_BIN);
    MainWindow w;
    QSignalSpy finished(w.runController(), &RunController::finished);
    w.runController()->start("/nonexistent/project");
    QVERIFY(finished.wait(20000));
    QCOMPARE(finished.front()[0].toBool(), false);
    QString msg = finished.front()[1].toString();
    QVERIFY2(msg.contains("nonexistent"), qPrintable(msg));
    QVERIFY(w.consolePanel()->plainText().contains("nonexistent"));
  }

  void runFromTheIdeWritesMetrics() {
    qputenv("TESSERA_BIN", TSR_TESSERA_BIN);
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    QSignalSpy finished(w.runController(), &RunController::finished);
    w.startRun();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString()));
    w.metricsPanel()->poll();
    QTRY_COMPARE(static_cast<int>(w.metricsPanel()->points(1, "loss").size()), 6);
    QVERIFY(refreshRuns(w.runsPanel()));
    QCOMPARE(w.runsPanel()->model()->rowCount(), 1);
    // The run's compile events reach the console.
    QVERIFY2(w.consolePanel()->plainText().contains("[tessera] compile"), qPrintable(w.consolePanel()->plainText()));
  }

  // Run ▶ Train on mlp_sharding as shipped: its default configuration asks for the 8 CPU devices its mesh needs.
  void runTrainWorksOnAMeshProjectAsShipped() {
    qputenv("TESSERA_BIN", TSR_TESSERA_BIN);
    QTemporaryDir dir;
    for (const QString& f : QDir(kSamples + "/mlp_sharding").entryList(QDir::Files))
      QVERIFY(QFile::copy(kSamples + "/mlp_sharding/" + f, dir.filePath(f)));
    MainWindow w;
    w.resize(1280, 800);
    QVERIFY(openAndWait(w, dir.path()));
    QCOMPARE(w.configurationBox()->currentText(), QString("Local (8 CPU devices)"));
    QSignalSpy started(w.runController(), &RunController::started);
    QSignalSpy finished(w.runController(), &RunController::finished);
    w.startRun();
    QVERIFY(finished.wait(180000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString() + "\n" + w.consolePanel()->plainText()));
    QVERIFY2(started.front()[0].toString().startsWith("TESSERA_CPU_DEVICES=8 "), qPrintable(started.front()[0].toString()));
    QVERIFY(refreshRuns(w.runsPanel()));
    QCOMPARE(w.runsPanel()->model()->rowCount(), 1);
    QCOMPARE(w.runsPanel()->model()->runs().front().info.status, store::RunStatus::Finished);
    QCOMPARE(QString::fromStdString(w.runsPanel()->model()->runs().front().params.at("run.cpu_devices")), QString("8"));
    w.metricsPanel()->poll();
    QTRY_COMPARE(static_cast<int>(w.metricsPanel()->points(1, "loss").size()), 5);
    // A screenshot of the window after the run, for the record (build/screenshots).
    QDir().mkpath(TSR_BINARY_DIR "/screenshots");
    QVERIFY(w.grab().save(TSR_BINARY_DIR "/screenshots/run_mlp_sharding.png"));
  }

  // Resume continues the run selected in the Runs panel (or the latest); Evaluate reports its loss.
  void resumeAndEvaluateFromTheIde() {
    qputenv("TESSERA_BIN", TSR_TESSERA_BIN);
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    // A configuration that stops at 3 steps, made in the dialog as a user would.
    RunConfigurationsDialog dialog(w.runConfigurations(), dir.path(), TSR_TESSERA_BIN, 0);
    dialog.addConfiguration();
    dialog.nameField()->setText("three steps");
    dialog.stepsBox()->setValue(3);
    dialog.overridesField()->setPlainText("train.lr=0.05\n");
    QVERIFY2(dialog.commandPreview().endsWith("--steps 3 --set train.lr=0.05"), qPrintable(dialog.commandPreview()));
    dialog.overridesField()->setPlainText("lr=0.05");
    QVERIFY(dialog.problem().contains("expected SECTION.KEY=VALUE"));
    dialog.overridesField()->setPlainText("train.lr=0.05");
    QVERIFY(dialog.problem().isEmpty());
    QCOMPARE(static_cast<int>(dialog.configurations().size()), 2);
    QVERIFY(inspect::saveConfigurations(dir.path().toStdString(), dialog.configurations()).ok());
    QVERIFY(openAndWait(w, dir.path()));
    QCOMPARE(w.configurationBox()->count(), 2);
    w.configurationBox()->setCurrentIndex(1);
    QSignalSpy finished(w.runController(), &RunController::finished);
    w.startRun();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.back()[0].toBool(), qPrintable(finished.back()[1].toString()));
    // A resume keeps the run's own configuration: with the project's (no --steps), run 1 is 3 steps long and done.
    w.configurationBox()->setCurrentIndex(0);
    w.startResume();
    QVERIFY(finished.wait(120000));
    QVERIFY(!finished.back()[0].toBool());
    QVERIFY2(w.consolePanel()->plainText().contains("the run is 3 steps long"),
             qPrintable(w.consolePanel()->plainText()));
    // Its configuration raised to 6 steps (the same overrides), Resume continues run 1 to step 6.
    std::vector<inspect::RunConfiguration> configs = w.runConfigurations();
    configs[1].steps = 6;
    QVERIFY(inspect::saveConfigurations(dir.path().toStdString(), configs).ok());
    QVERIFY(openAndWait(w, dir.path()));
    w.configurationBox()->setCurrentIndex(1);
    w.startResume();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.back()[0].toBool(), qPrintable(finished.back()[1].toString()));
    QVERIFY2(w.consolePanel()->plainText().contains("resumed run 1 at step 3"), qPrintable(w.consolePanel()->plainText()));
    QVERIFY(refreshRuns(w.runsPanel()));
    QCOMPARE(w.runsPanel()->model()->rowCount(), 1);
    QCOMPARE(w.runsPanel()->model()->runs().front().info.status, store::RunStatus::Finished);
    w.startEval();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.back()[0].toBool(), qPrintable(finished.back()[1].toString()));
    QVERIFY(w.consolePanel()->plainText().contains(QRegularExpression("validation loss [0-9.]+ over")));
  }

  // A training process that dies (here: SIGKILL) leaves its run "running"; the IDE records it as crashed.
  void aKilledRunIsRecordedAsCrashed() {
    qputenv("TESSERA_BIN", TSR_TESSERA_BIN);
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"),
              "[project]\nname = \"long\"\n[model]\nfamily = \"mlp\"\nsizes = [784, 16, 10]\n[data]\nkind = "
              "\"synthetic-digits\"\n[train]\nsteps = 1000000\nbatch_size = 32\noptimizer = \"sgd\"\nlr = 0.1\n"
              "warmup_steps = 0\neval_every = 0\nlog_every = 1\n");
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    RunController* run = w.runController();
    QSignalSpy progress(run, &RunController::progress);
    QSignalSpy finished(run, &RunController::finished);
    w.startRun();
    QVERIFY(QTest::qWaitFor([&] { return progress.size() >= 2; }, 60000));
    QCOMPARE(run->runId(), qint64(1));
    QCOMPARE(QProcess::execute("pkill", {"-KILL", "-f", "tessera train " + dir.path()}), 0);
    QVERIFY(finished.wait(30000));
    QVERIFY(!finished.front()[0].toBool());
    QVERIFY2(finished.front()[1].toString().contains("crashed"), qPrintable(finished.front()[1].toString()));
    auto db = store::RunStore::openReadOnly(dir.filePath("runs.db").toStdString());
    QVERIFY(db.ok());
    QCOMPARE(db->run(1)->status, store::RunStatus::Crashed);
  }

  // The Runs panel sorts by a metric's latest value, filters by tag (a sweep's runs) and hides archived runs;
  // its edits reach the store, and Delete takes the checkpoint folder after a confirmation.
  void runsPanelSortsFiltersAndEdits() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.db").toStdString();
    {
      auto s = store::RunStore::open(db);
      QVERIFY(s.ok());
      const double losses[] = {2.5, 1.5, 3.5};
      for (int i = 0; i < 3; ++i) {
        auto id = s->createRun(QString("r%1").arg(i + 1).toStdString(), dir.path().toStdString(), "");
        QVERIFY(id.ok());
        QVERIFY(s->logMetrics(*id, 1, {{"loss", losses[i] + 1}}).ok());
        QVERIFY(s->logMetrics(*id, 2, {{"loss", losses[i]}}).ok());
        QVERIFY(s->finishRun(*id, store::RunStatus::Finished).ok());
      }
      QVERIFY(s->addTags(1, {"sweep=a"}).ok());
      QVERIFY(s->addTags(3, {"sweep=a"}).ok());
      QVERIFY(s->setArchived(2, true).ok());
    }
    QDir().mkpath(dir.filePath("checkpoints/run-3"));
    writeFile(dir.filePath("checkpoints/run-3/latest.safetensors"), "x");
    Session session;
    RunsPanel panel(&session);
    panel.setDatabase(dir.filePath("runs.db"));
    RunsTableModel* m = panel.model();
    QVERIFY(runsRead(&panel));
    QCOMPARE(m->rowCount(), 2);  // run 2 is archived
    auto ids = [&] {
      QList<qint64> out;
      for (const auto& r : m->runs()) out << r.info.id;
      return out;
    };
    panel.archivedBox()->setChecked(true);
    QCOMPARE(m->rowCount(), 3);
    int lossColumn = -1;
    for (int c = 0; c < m->columnCount(); ++c)
      if (m->headerData(c, Qt::Horizontal).toString() == "loss") lossColumn = c;
    QVERIFY(lossColumn > 0);
    panel.table()->sortByColumn(lossColumn, Qt::AscendingOrder);
    QCOMPARE(ids(), (QList<qint64>{2, 1, 3}));  // 1.5, 2.5, 3.5
    panel.table()->sortByColumn(lossColumn, Qt::DescendingOrder);
    QCOMPARE(ids(), (QList<qint64>{3, 1, 2}));
    QVERIFY(refreshRuns(&panel));  // a refresh keeps the order
    QCOMPARE(ids(), (QList<qint64>{3, 1, 2}));
    const int tagIndex = panel.tagFilter()->findData("sweep=a");
    QVERIFY(tagIndex > 0);
    panel.tagFilter()->setCurrentIndex(tagIndex);
    emit panel.tagFilter()->activated(tagIndex);
    QCOMPARE(ids(), (QList<qint64>{3, 1}));

    // Each edit is sent to the reader thread and answered there; one at a time.
    panel.selectRuns({1});
    QVERIFY(panel.renameSelected("baseline"));
    QVERIFY2(runsEdited(&panel), qPrintable(panel.lastError()));
    QVERIFY(panel.setTagsOfSelected({"sweep=a", " keep "}));
    QVERIFY2(runsEdited(&panel), qPrintable(panel.lastError()));
    QVERIFY(panel.setNotesOfSelected("the one to beat"));
    QVERIFY2(runsEdited(&panel), qPrintable(panel.lastError()));
    auto r = store::RunStore::openReadOnly(db);
    QCOMPARE(QString::fromStdString(r->run(1)->name), QString("baseline"));
    QCOMPARE(r->run(1)->tags, (std::vector<std::string>{"keep", "sweep=a"}));
    QCOMPARE(QString::fromStdString(r->run(1)->notes), QString("the one to beat"));
    QVERIFY(panel.renameSelected(""));
    QVERIFY(!runsEdited(&panel));
    QVERIFY2(panel.lastError().contains("empty"), qPrintable(panel.lastError()));
    QVERIFY2(panel.editStatus().contains("Run 1 was not renamed"), qPrintable(panel.editStatus()));

    panel.selectRuns({3});
    QString asked;
    panel.setConfirm([&](const QString& q) { asked = q; return false; });
    QVERIFY(panel.deleteSelected());
    QVERIFY(!runsEdited(&panel));
    QCOMPARE(panel.lastError(), QString("kept"));
    QVERIFY2(asked.contains("and its checkpoints"), qPrintable(asked));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-3/latest.safetensors")));
    panel.setConfirm([](const QString&) { return true; });
    QVERIFY(panel.deleteSelected());
    QVERIFY2(runsEdited(&panel), qPrintable(panel.lastError()));
    QVERIFY(!QFileInfo::exists(dir.filePath("checkpoints/run-3")));
    QCOMPARE(ids(), (QList<qint64>{1}));
    panel.selectRuns({1});
    QVERIFY(panel.archiveSelected(true));
    QVERIFY2(runsEdited(&panel), qPrintable(panel.lastError()));
    QCOMPARE(store::RunStore::openReadOnly(db)->run(1)->archived, true);
  }

  void stopInterruptsARun() {
    qputenv("TESSERA_BIN", TSR_TESSERA_BIN);
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"),
              "[project]\nname = \"long\"\n[model]\nfamily = \"mlp\"\nsizes = [784, 16, 10]\n[data]\nkind = "
              "\"synthetic-digits\"\n[train]\nsteps = 1000000\nbatch_size = 32\noptimizer = \"sgd\"\nlr = 0.1\n"
              "warmup_steps = 0\neval_every = 0\nlog_every = 1\n");
    MainWindow w;
    RunController* run = w.runController();
    QSignalSpy progress(run, &RunController::progress);
    QSignalSpy finished(run, &RunController::finished);
    run->start(dir.path());
    QVERIFY(QTest::qWaitFor([&] { return progress.size() >= 3; }, 60000));
    w.stopRun();
    QVERIFY(finished.wait(30000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString()));
    QVERIFY(finished.front()[1].toString().contains("stopped"));
    RunsPanel* runs = w.runsPanel();
    runs->setDatabase(dir.filePath("runs.db"));
    QVERIFY(runsRead(runs));
    QCOMPARE(runs->model()->rowCount(), 1);
    QCOMPARE(runs->model()->runs().front().info.status, store::RunStatus::Stopped);
  }

  void commandPaletteListsEveryAction() {
    MainWindow w;
    QList<QAction*> actions = w.allActions();
    QVERIFY(actions.size() >= 15);
    CommandPalette palette(actions);
    QCOMPARE(palette.visibleCommands().size(), static_cast<int>(std::count_if(actions.begin(), actions.end(), [](QAction* a) { return a->isEnabled(); })));
    palette.setFilter("opn prj");
    QVERIFY(palette.visibleCommands().front().startsWith(QString::fromUtf8("File \u203a Open Project")));
    QCOMPARE(fuzzyScore("xyz", "Open Project"), -1);
    QVERIFY(fuzzyScore("op", "Open Project") > fuzzyScore("op", "Stop"));
    QCOMPARE(w.action("commandPalette")->shortcut(), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
  }

  void themesAndRecentProjects() {
    {
      MainWindow w;
      w.setTheme("dark");
      QVERIFY(qApp->palette().color(QPalette::Window).lightness() < 128);
      QVERIFY(qApp->styleSheet().contains("dark theme"));
      QVERIFY(openAndWait(w, kSamples + "/mlp_sharding"));
      w.close();
    }
    MainWindow again;
    QCOMPARE(again.theme(), QString("dark"));
    QVERIFY(again.recentProjects().front().endsWith("mlp_sharding"));
    QVERIFY(again.action("recent:" + again.recentProjects().front()));
    QVERIFY(again.aboutText().contains("Graphviz"));
    QVERIFY(again.aboutText().contains("SQLite"));
    again.setTheme("light");
  }

  void newProjectFromTemplate() {
    QTemporaryDir dir;
    MainWindow w;
    QSignalSpy opened(w.session(), &Session::projectOpened);
    w.newProjectFromTemplate(kSamples + "/gpt2_mini", dir.filePath("mine"));
    QVERIFY(opened.wait(30000));
    QVERIFY(QFileInfo::exists(dir.filePath("mine/project.toml")));
    QVERIFY(QFileInfo::exists(dir.filePath("mine/data/corpus.txt")));
    QVERIFY(!QFileInfo::exists(dir.filePath("mine/runs.db")));
  }

  // The window fits a 1280x800 screen (a laptop's), with a project open and every panel docked.
  void windowFitsALaptopScreen() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.resize(1280, 800);
    QTest::qWait(50);
    const QSize min = w.minimumSizeHint().expandedTo(w.minimumSize());
    qInfo() << "size" << w.size() << "minimum" << min << "hint" << w.sizeHint();
    QVERIFY2(w.width() <= 1280 && w.height() <= 800,
             qPrintable(QString("the window stays %1 x %2 (minimum %3 x %4)").arg(w.width()).arg(w.height()).arg(min.width()).arg(min.height())));
  }

  // A template that reads its corpus from a sibling sample (gpt2_tp: "../gpt2_mini/data/corpus.txt") gives a
  // project that trains as copied: the corpus is copied in and the path rewritten; the folder is created.
  void newProjectFromATemplateWithOutsideData() {
    QTemporaryDir dir;
    MainWindow w;
    QSignalSpy opened(w.session(), &Session::projectOpened);
    w.newProjectFromTemplate(kSamples + "/gpt2_tp", dir.filePath("nested/tp"));
    QVERIFY(opened.wait(30000));
    auto p = project::loadProject(dir.filePath("nested/tp").toStdString());
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    QCOMPARE(p->data.path, std::string("data/corpus.txt"));
    QVERIFY(QFileInfo(dir.filePath("nested/tp/data/corpus.txt")).size() > 1000);
    QVERIFY(QString::fromStdString(p->text).contains("qkv_layout = \"heads\""));  // the rest as written
  }

  // File › New Project: the family's keys as a form, checked as the user types; Create writes a project that
  // opens, with the corpus of a text family copied in.
  void newProjectFromAFamily() {
    QTemporaryDir dir;
    NewProjectDialog d(dir.filePath("digits"));
    QComboBox* family = d.familyBox();
    family->setCurrentIndex(family->findData("mlp"));
    QVERIFY(d.keyField("sizes"));
    QVERIFY(!d.keyField("n_layer"));
    QCOMPARE(d.keyField("sizes")->placeholderText(), QString("[784, 1024, 1024, 1024, 10]"));
    QTest::keyClicks(d.keyField("sizes"), "[8, 0]");
    QVERIFY2(d.error().contains("'sizes' must be at least two positive sizes"), qPrintable(d.error()));
    QVERIFY(!d.createButton()->isEnabled());
    d.keyField("sizes")->clear();
    QTest::keyClicks(d.keyField("sizes"), "[8, 4]");
    QVERIFY2(d.error().isEmpty(), qPrintable(d.error()));
    QVERIFY(d.createButton()->isEnabled());
    QVERIFY(d.projectToml().contains("sizes = [8, 4]  # layer widths"));
    QVERIFY(d.createProject());
    auto mlp = project::loadProject(dir.filePath("digits").toStdString());
    QVERIFY2(mlp.ok(), mlp.ok() ? "" : mlp.error().message.c_str());
    QCOMPARE(mlp->model.config.sizes("sizes"), (std::vector<int64_t>{8, 4}));
    QCOMPARE(mlp->name, std::string("digits"));

    // A language model needs its corpus.
    family->setCurrentIndex(family->findData("gpt2"));
    d.folderField()->setText(dir.filePath("lm"));
    QVERIFY(d.corpusField()->isEnabled());
    QVERIFY2(d.error().contains("corpus"), qPrintable(d.error()));
    QTest::keyClicks(d.keyField("n_layer"), "2");
    QTest::keyClicks(d.keyField("n_embd"), "64");
    QTest::keyClicks(d.keyField("n_head"), "4");
    QTest::keyClicks(d.keyField("block_size"), "32");
    d.corpusField()->setText(kSamples + "/gpt2_mini/data/corpus.txt");
    QVERIFY2(d.error().isEmpty(), qPrintable(d.error()));
    QVERIFY(d.createProject());
    QVERIFY(QFileInfo::exists(dir.filePath("lm/data/corpus.txt")));
    auto lm = project::loadProject(dir.filePath("lm").toStdString());
    QVERIFY2(lm.ok(), lm.ok() ? "" : lm.error().message.c_str());
    QCOMPARE(lm->model.config.integer("n_layer"), int64_t(2));
    QCOMPARE(lm->train.seqLen, int64_t(32));
    // The folder holds a project now: a second one is refused.
    NewProjectDialog again(dir.filePath("lm"));
    again.familyBox()->setCurrentIndex(again.familyBox()->findData("mlp"));
    QVERIFY2(again.error().contains("already holds a project.toml"), qPrintable(again.error()));
    QVERIFY(!again.createButton()->isEnabled());
  }

  // The settings form shows the keys the project's family declares.
  void settingsFormFollowsTheFamily() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/vit_tiny"));
    ProjectPanel* p = w.projectPanel();
    QVERIFY(p->field("model", "image_size"));
    QVERIFY(!p->field("model", "n_layer"));
    QCOMPARE(p->field("model", "patch_size")->text(), QString::number(project::loadProject((kSamples + "/vit_tiny").toStdString())->model.config.integer("patch_size")));
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    QVERIFY(p->field("model", "n_layer"));
    QVERIFY(!p->field("model", "image_size"));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestStudio)
#include "test_studio.moc"
