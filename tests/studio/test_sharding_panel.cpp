// The sharding panel on the offscreen platform: PartitionSpecs dropped on a parameter (through the parameter
// tree's drop handler, as a drag ends), on a graph input and on the panel's argument list change the argument's
// sharding, the collectives and the bytes per device (checked against sizes worked out by hand and against
// the tutorial's layout); undo and redo; stale plans dropped; conflicts found; Apply writes project.toml and
// the reopened project plans the same step, as `tessera shard plan`'s engine function does.
#include <QAbstractItemModelTester>
#include <QAction>
#include <QApplication>
#include <QDropEvent>
#include <QFile>
#include <QMimeData>
#include <QSignalSpy>
#include <QLabel>
#include <QTemporaryDir>
#include <QTest>
#include <QDockWidget>
#include <QHeaderView>
#include <QImage>
#include <QSet>
#include <QTreeView>
#include <QTreeWidget>
#include <QUndoStack>

#include "app/studio/main_window.h"
#include "engine/project/project.h"
#include "engine/train/sharding_plan.h"
#include "tests/studio/studio_test_util.h"
#include "views/graph_panel.h"
#include "views/param_tree_model.h"
#include "views/project_panel.h"
#include "views/session.h"
#include "views/shard_grid_widget.h"
#include "views/sharding_panel.h"

using namespace tsr;
using namespace tsr::studio;

namespace {

const QString kSamples = QStringLiteral(TSR_SOURCE_DIR "/sample_projects");
constexpr int64_t kMiB = 1024 * 1024;

// A copy of mlp_sharding (project.toml is all it needs: its digits are synthetic).
bool copyMlp(const QTemporaryDir& dir) {
  return QFile::copy(kSamples + "/mlp_sharding/project.toml", dir.filePath("project.toml"));
}

// Opens a project and waits for the sharding panel's first plan.
bool openAndPlan(MainWindow& w, const QString& path) {
  w.openProject(path);
  return QTest::qWaitFor([&] {
    return w.session()->project() && !w.session()->busy() && w.shardingPanel()->plan() && !w.shardingPanel()->planning();
  }, 120000);
}

bool waitPlan(ShardingPanel* p) {
  QTest::qWait(1);
  return QTest::qWaitFor([&] { return !p->planning(); }, 120000);
}

const train::PlannedArgument* argument(const ShardingPanel* p, const std::string& path) {
  for (const auto& a : p->plan()->arguments)
    if (a.path.toString() == path) return &a;
  return nullptr;
}

QString specOf(const ShardingPanel* p, const std::string& path) {
  const auto* a = argument(p, path);
  return a ? QString::fromStdString(a->sharding.toString(p->plan()->mesh)) : QString("(none)");
}

int collectivesOver(const ShardingPanel* p, const std::string& axes) {
  int n = 0;
  for (const auto& c : p->plan()->collectives) n += c.info.axisNames == axes;
  return n;
}

QModelIndex paramIndex(MainWindow& w, const QString& path) {
  ParamTreeModel* model = w.projectPanel()->paramModel();
  QModelIndex at;
  for (const QString& part : path.split('.')) {
    QModelIndex found;
    for (int r = 0; r < model->rowCount(at); ++r)
      if (model->index(r, 0, at).data().toString() == part) found = model->index(r, 0, at);
    if (!found.isValid()) return {};
    at = found;
  }
  return at;
}

// Drops a spec on a parameter of the project tree the way a finished drag does: the view hands the model the
// drag's QMimeData on the parameter's row.
bool dropOnParameterTree(MainWindow& w, const QString& path, const QString& spec) {
  ParamTreeModel* model = w.projectPanel()->paramModel();
  QModelIndex at = paramIndex(w, path);
  if (!at.isValid()) return false;
  std::unique_ptr<QMimeData> data(ShardingPanel::specMimeData(spec));
  if (!(model->flags(at) & Qt::ItemIsDropEnabled)) return false;
  if (!model->canDropMimeData(data.get(), Qt::CopyAction, -1, -1, at)) return false;
  return model->dropMimeData(data.get(), Qt::CopyAction, -1, -1, at);
}

// The events a drag that ends over `pos` of a view's viewport delivers: enter, move, drop. True when the view
// accepted the drop.
bool dragAndDrop(QWidget* viewport, QPoint pos, const QString& spec) {
  std::unique_ptr<QMimeData> data(ShardingPanel::specMimeData(spec));
  QDragEnterEvent enter(pos, Qt::CopyAction, data.get(), Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(viewport, &enter);
  QDragMoveEvent move(pos, Qt::CopyAction, data.get(), Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(viewport, &move);
  if (!move.isAccepted()) return false;
  QDropEvent drop(QPointF(pos), Qt::CopyAction, data.get(), Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(viewport, &drop);
  return drop.isAccepted();
}

}  // namespace

class TestShardingPanel : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    test::initStudioTest("ShardingPanelTest");
  }

  // The tutorial's layout (4 x 2: layer 0 column-parallel, layer 1 row-parallel), then a drop that replicates
  // layer 1's weight: its bytes per device, the parameters' bytes, and the collectives change.
  void dropOnParameterChangesThePlan() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    QCOMPARE(p->plan()->mesh.toString(), std::string("Mesh('data': 4, 'model': 2)"));
    QVERIFY(p->paletteSpecs().contains("None, model"));
    // By hand: layer 1's weight f32[1024, 1024] split 2 ways over 'model' is 2 MiB a device.
    QCOMPARE(specOf(p, "params.layers.1.weight"), QString("P('model', None)"));
    QCOMPARE(argument(p, "params.layers.1.weight")->bytes, 2 * kMiB);
    // The parameters per device: layer 0 (784 x 1024 + 1024) halved, layer 1's weight halved, the rest whole.
    const int64_t perDevice = 4 * ((784 * 1024 + 1024) / 2 + 1024 * 1024 / 2 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
    QCOMPARE(p->plan()->paramBytes, perDevice);
    // The row-parallel layer completes its partial sums over 'model'.
    QVERIFY(collectivesOver(p, "'model'") > 0);
    // The parameter tree shows the spec and the bytes a device holds.
    QTRY_VERIFY(paramIndex(w, "layers.1.weight").siblingAtColumn(ParamTreeModel::ShardingCol).data().toString().startsWith(
        "P('model', None)  2.0 MiB"));

    QVERIFY(dropOnParameterTree(w, "layers.1.weight", ""));
    QVERIFY(waitPlan(p));
    QVERIFY(p->planError().isEmpty());
    QCOMPARE(specOf(p, "params.layers.1.weight"), QString("P(None, None)"));
    QCOMPARE(argument(p, "params.layers.1.weight")->bytes, 4 * kMiB);
    QCOMPARE(p->plan()->paramBytes, perDevice + 2 * kMiB);
    QVERIFY(p->diff());
    QCOMPARE(p->diff()->paramBefore, perDevice);
    QCOMPARE(p->diff()->paramAfter, perDevice + 2 * kMiB);
    QVERIFY(!p->diff()->added.empty() || !p->diff()->removed.empty());
    QCOMPARE(p->shownArgument(), QString("params.layers.1.weight"));
    QVERIFY(p->grid()->tensorLayout());
    QCOMPARE(p->grid()->tensorLayout()->cells.size(), size_t(1));
    QCOMPARE(p->grid()->tensorLayout()->cells[0].devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));

    // Replicating layer 0 too leaves nothing split over 'model': pure data parallelism, no collective over it.
    QVERIFY(dropOnParameterTree(w, "layers.0.weight", "None, None"));
    QVERIFY(dropOnParameterTree(w, "layers.0.bias", ""));
    QVERIFY(waitPlan(p));
    QCOMPARE(collectivesOver(p, "'model'"), 0);
    QCOMPARE(p->plan()->paramBytes, int64_t(4) * (784 * 1024 + 1024 + 2 * (1024 * 1024 + 1024) + 1024 * 10 + 10));
    // The rows list what the last drop removed.
    bool removedModel = false;
    for (const QString& row : p->collectiveRows()) removedModel |= row.startsWith(QString::fromUtf8("−")) && row.contains("'model'");
    QVERIFY2(removedModel, qPrintable(p->collectiveRows().join("\n")));

    // Undo three times: the tutorial's layout again; redo once: layer 1 replicated again.
    QCOMPARE(p->undoStack()->count(), 3);
    p->undoStack()->undo();
    p->undoStack()->undo();
    p->undoStack()->undo();
    QVERIFY(waitPlan(p));
    QCOMPARE(specOf(p, "params.layers.1.weight"), QString("P('model', None)"));
    QCOMPARE(specOf(p, "params.layers.0.weight"), QString("P(None, 'model')"));
    QCOMPARE(p->plan()->paramBytes, perDevice);
    p->undoStack()->redo();
    QVERIFY(waitPlan(p));
    QCOMPARE(specOf(p, "params.layers.1.weight"), QString("P(None, None)"));
  }

  // A drop the panel refuses (a spec that does not parse, an argument the step does not have) says why in the
  // panel's status line, not only in the console behind another tab; the plan and the undo stack stay as they
  // were.
  void refusedDropSaysWhyInThePanel() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    auto* status = p->findChild<QLabel*>("shardingStatus");
    QVERIFY(status);
    QVERIFY(!p->dropSpec("params.layers.0.weight", "None, (model"));
    QVERIFY2(status->text().contains("Not set") && status->text().contains("None, (model"), qPrintable(status->text()));
    QVERIFY(!p->dropSpec("params.layers.9.weight", "None, model"));
    QVERIFY2(status->text().contains("no argument") && status->text().contains("params.layers.9.weight"),
             qPrintable(status->text()));
    QVERIFY(!p->dropSpecOnValue(1 << 30, "model"));
    QVERIFY2(status->text().contains("no value"), qPrintable(status->text()));
    QCOMPARE(p->undoStack()->count(), 0);
    QCOMPARE(specOf(p, "params.layers.0.weight"), QString("P(None, 'model')"));
  }

  // Drag events on the project panel's tree view and on the panel's argument list, as a drag from the palette
  // ends: the view finds the row under the cursor and hands the drop on.
  void dragEventsOnTheViews() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    QTreeView* view = w.projectPanel()->paramView();
    QModelIndex at = paramIndex(w, "layers.2.weight");
    QVERIFY(at.isValid());
    view->expandAll();
    view->scrollTo(at);
    QRect r = view->visualRect(at);
    QVERIFY(!r.isEmpty());
    QVERIFY(dragAndDrop(view->viewport(), r.center(), "model, None"));
    QVERIFY(waitPlan(p));
    QCOMPARE(specOf(p, "params.layers.2.weight"), QString("P('model', None)"));
    // By hand: f32[1024, 1024] in 2 pieces.
    QCOMPARE(argument(p, "params.layers.2.weight")->bytes, 2 * kMiB);
    QAbstractItemModelTester tester(w.projectPanel()->paramModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QTRY_VERIFY(at.siblingAtColumn(ParamTreeModel::ShardingCol).data().toString().startsWith("P('model', None)"));
    // A module row takes no drop.
    QModelIndex module = paramIndex(w, "layers");
    QVERIFY(!dragAndDrop(view->viewport(), view->visualRect(module).center(), "model"));

    // The panel's own argument list.
    auto* args = p->findChild<QTreeWidget*>("shardingArguments");
    QVERIFY(args);
    QTreeWidgetItem* row = nullptr;
    for (int i = 0; i < args->topLevelItemCount(); ++i)
      if (args->topLevelItem(i)->text(0) == "params.layers.3.weight") row = args->topLevelItem(i);
    QVERIFY(row);
    w.findChild<QDockWidget*>("shardingDock")->show();
    w.findChild<QDockWidget*>("shardingDock")->raise();
    QTest::qWait(50);
    args->scrollToItem(row);
    QVERIFY(dragAndDrop(args->viewport(), args->visualItemRect(row).center(), "data, None"));
    QVERIFY(waitPlan(p));
    QCOMPARE(specOf(p, "params.layers.3.weight"), QString("P('data', None)"));
    // By hand: f32[1024, 10] in 4 pieces.
    QCOMPARE(argument(p, "params.layers.3.weight")->bytes, 1024 * 10 * 4 / 4);
    QCOMPARE(p->undoStack()->count(), 2);
  }

  // The grid of a rank-3 array, worked out by hand: on a 2 x 2 x 2 mesh (a, b, c) over devices 0..7
  // row-major, P('a', 'b', 'c') on f32[4, 6, 8] lays out dims 0 and 1 (2 x 2 cells) with dim 2's two blocks
  // listed in each cell: cell (i, j) holds devices 4i + 2j and 4i + 2j + 1. Dims 1 and 2 can be picked instead.
  void layoutOfRankThree() {
    auto mesh = sharding::Mesh::create({2, 2, 2}, {"a", "b", "c"});
    QVERIFY(mesh.ok());
    auto spec = sharding::PartitionSpec::parse("a, b, c");
    QVERIFY(spec.ok());
    const Aval aval{Shape{4, 6, 8}, DType::F32};
    auto t = sharding::TensorSharding::fromSpec(*mesh, *spec, aval.shape);
    QVERIFY(t.ok());
    auto l = inspect::tensorLayout(*mesh, *t, aval, "x");
    QVERIFY(l.ok());
    QCOMPARE(l->rowDim, 0);
    QCOMPARE(l->colDim, 1);
    QCOMPARE(l->otherSplitDims, std::vector<int>{2});
    QCOMPARE(l->blockShape, (Shape{2, 3, 4}));
    QCOMPARE(l->blockBytes, int64_t(2 * 3 * 4 * 4));
    QCOMPARE(l->replicas, int64_t(1));
    for (const auto& c : l->cells) {
      const int d = static_cast<int>(4 * c.row + 2 * c.col);
      QCOMPARE(c.devices, (std::vector<int>{d, d + 1}));
      QCOMPARE(c.ranges.size(), size_t(2));
    }
    QCOMPARE(l->cells[3].ranges[1], std::string("[2:4, 3:6, 4:8] on 7"));
    auto picked = inspect::tensorLayout(*mesh, *t, aval, "x", 1, 2);
    QVERIFY(picked.ok());
    QCOMPARE(picked->otherSplitDims, std::vector<int>{0});
    // Cell (1, 0): b = 1, c = 0, either a: devices 2 and 6.
    QCOMPARE(picked->cells[2].devices, (std::vector<int>{2, 6}));
    QVERIFY(!inspect::tensorLayout(*mesh, *t, aval, "x", 1, 1).ok());
    // A replicated vector: one cell on every device.
    auto r = inspect::tensorLayout(*mesh, sharding::TensorSharding::replicated(1), Aval{Shape{10}, DType::F32}, "v");
    QVERIFY(r.ok());
    QCOMPARE(r->cells.size(), size_t(1));
    QCOMPARE(r->replicas, int64_t(8));
  }

  // A replicated block reads as one block, as jax.debug.visualize_array_sharding draws it: one colour over the
  // whole cell, whichever of its devices; the tutorial's P(None, 'model') on a 4 x 2 mesh is two columns, each
  // held by four devices. It was striped with one colour per device, which read as a split along the rows.
  void replicatedBlocksAreOneColour() {
    auto mesh = sharding::Mesh::create({4, 2}, {"data", "model"});
    QVERIFY(mesh.ok());
    auto spec = sharding::PartitionSpec::parse("None, model");
    QVERIFY(spec.ok());
    const Aval aval{Shape{784, 1024}, DType::F32};
    auto t = sharding::TensorSharding::fromSpec(*mesh, *spec, aval.shape);
    QVERIFY(t.ok());
    auto l = inspect::tensorLayout(*mesh, *t, aval, "params.layers.0.weight");
    QVERIFY(l.ok());
    QCOMPARE(l->cells.size(), size_t(2));
    QCOMPARE(l->cells[0].devices, (std::vector<int>{0, 2, 4, 6}));
    ShardGridWidget grid;
    grid.resize(480, 360);
    grid.setTensorLayout(*l, 8);
    // The header's lines whole (drawn cut to the width with an ellipsis): the name, the spec, the block count.
    const QStringList header = grid.headerLines();
    QCOMPARE(header.size(), 2);
    QVERIFY2(header[0].startsWith("params.layers.0.weight") && header[0].contains(QString::fromStdString(l->spec)),
             qPrintable(header[0]));
    QVERIFY2(header[1].startsWith("2 block(s) of "), qPrintable(header[1]));
    const QImage image = grid.grab().toImage();
    // Each cell's colour down its left side (clear of the label in its middle and of its border).
    auto coloursDown = [&](int cell) {
      QRect box;
      for (int y = 0; y < grid.height(); y += 2)
        for (int x = 0; x < grid.width(); x += 2)
          if (grid.cellAt(QPointF(x, y)) == cell) box |= QRect(x, y, 1, 1);
      QSet<QRgb> colours;
      for (double f : {0.08, 0.25, 0.42, 0.58, 0.75, 0.92})
        colours << image.pixel(box.left() + box.width() / 8, box.top() + static_cast<int>(f * box.height()));
      return colours;
    };
    const QSet<QRgb> left = coloursDown(0), right = coloursDown(1);
    QCOMPARE(left.size(), 1);
    QCOMPARE(right.size(), 1);
    QVERIFY(left != right);  // two blocks, two colours
    // Both blocks of a cell split along a dim off the grid keep a stripe each: rank 3 on 2 x 2 x 2.
    auto mesh3 = sharding::Mesh::create({2, 2, 2}, {"a", "b", "c"});
    auto t3 = sharding::TensorSharding::fromSpec(*mesh3, *sharding::PartitionSpec::parse("a, b, c"), Shape{4, 6, 8});
    QVERIFY(t3.ok());
    auto l3 = inspect::tensorLayout(*mesh3, *t3, Aval{Shape{4, 6, 8}, DType::F32}, "x");
    QVERIFY(l3.ok());
    QCOMPARE(ShardGridWidget::blockDevices(l3->cells[3]), (std::vector<std::vector<int>>{{6}, {7}}));
    QCOMPARE(ShardGridWidget::blockDevices(l->cells[1]), (std::vector<std::vector<int>>{{1, 3, 5, 7}}));
  }

  // The Arguments list keeps Shape, Sharding and Per device in sight at the size --screenshot renders the panel
  // (its dock floating at 1100 x 680, where the list is about 390 px wide): a long argument path gives way
  // (elided at the front). Per device was cut off at the list's right edge.
  void argumentColumnsFit() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(openAndPlan(w, dir.path()));
    auto* dock = w.findChild<QDockWidget*>("shardingDock");
    QVERIFY(dock);
    dock->setFloating(true);
    dock->resize(1100, 680);
    dock->show();
    auto* args = w.shardingPanel()->findChild<QTreeWidget*>("shardingArguments");
    QVERIFY(args && args->topLevelItemCount() > 0);
    QTRY_VERIFY(args->isVisible());
    QTRY_VERIFY(args->viewport()->width() < 500);
    QHeaderView* h = args->header();
    for (int column : {1, 2, 3}) {
      int widest = args->fontMetrics().horizontalAdvance(args->headerItem()->text(column));
      for (int i = 0; i < args->topLevelItemCount(); ++i)
        widest = std::max(widest, args->fontMetrics().horizontalAdvance(args->topLevelItem(i)->text(column)));
      QVERIFY2(h->sectionSize(column) >= widest, qPrintable(QString("column %1: %2 px for %3 px").arg(column).arg(h->sectionSize(column)).arg(widest)));
      QVERIFY2(h->sectionViewportPosition(column) + h->sectionSize(column) <= args->viewport()->width(),
               qPrintable(QString("column %1 ends at %2 of %3 px").arg(column)
                              .arg(h->sectionViewportPosition(column) + h->sectionSize(column))
                              .arg(args->viewport()->width())));
    }
  }

  // Edits faster than the planner: only the last one's plan is shown.
  void newerEditsWinOverRunningPlans() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    QSignalSpy ready(p, &ShardingPanel::planReady);
    QVERIFY(p->dropSpec("layers.2.weight", "model, None"));
    QVERIFY(p->dropSpec("layers.2.weight", "None, model"));
    QVERIFY(p->dropSpec("layers.2.weight", "data, model"));
    QVERIFY(waitPlan(p));
    QCOMPARE(specOf(p, "params.layers.2.weight"), QString("P('data', 'model')"));
    // By hand: f32[1024, 1024] over 8 devices.
    QCOMPARE(argument(p, "params.layers.2.weight")->bytes, 1024 * 1024 * 4 / 8);
    QVERIFY(ready.size() < 3);
    // The grid: 4 x 2 blocks, device d at row d / 2, column d % 2 of the row-major mesh.
    const auto& l = *p->grid()->tensorLayout();
    QCOMPARE(l.rows, int64_t(4));
    QCOMPARE(l.cols, int64_t(2));
    for (const auto& c : l.cells) QCOMPARE(c.devices, (std::vector<int>{static_cast<int>(c.row * 2 + c.col)}));
  }

  // The mesh editor: another shape re-plans; a wrong one is refused with a message.
  void meshEditsReplanAndUndo() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    QVERIFY(!p->setMesh("3, 2", "data"));
    QVERIFY(p->setMesh("2, 4", "data, model", "7 6 5 4 3 2 1 0"));
    QVERIFY(waitPlan(p));
    QCOMPARE(p->plan()->mesh.toString(), std::string("Mesh('data': 2, 'model': 4)"));
    // By hand: layer 0's weight f32[784, 1024] split 4 ways over 'model'; the batch 2 ways over 'data'.
    QCOMPARE(argument(p, "params.layers.0.weight")->bytes, int64_t(784) * 1024 * 4 / 4);
    QCOMPARE(argument(p, "inputs")->bytes, int64_t(8192) * 784 * 4 / 2);
    // The device order: mesh position 0 holds device 7, so block 0 of P(None, 'model') lies on 7 and 3.
    p->showArgument("params.layers.0.weight");
    QCOMPARE(p->grid()->tensorLayout()->cells[0].devices, (std::vector<int>{3, 7}));
    // Sharding › Undo Sharding Edit, as the menu runs it.
    QVERIFY(w.action("shardingUndo"));
    w.action("shardingUndo")->trigger();
    QVERIFY(waitPlan(p));
    QCOMPARE(p->plan()->mesh.toString(), std::string("Mesh('data': 4, 'model': 2)"));
  }

  // A mesh edited to lose an axis the project's rules name (mlp_sharding's 'model'): the plan is an error that
  // names the rule, and the panel lives on (it used to divide by the missing axis's size, zero).
  void meshWithoutARuleAxisIsAnError() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    QVERIFY(p->setMesh("8", "data"));
    QVERIFY(waitPlan(p));
    const QString error = p->planError();
    QVERIFY2(error.contains("rule 'layers\\.0\\.weight'") && error.contains("axis 'model' is not in Mesh('data': 8)"),
             qPrintable(error));
    // Back to a mesh with the axis: planned again.
    QVERIFY(p->setMesh("4, 2", "data, model"));
    QVERIFY(waitPlan(p));
    QVERIFY2(p->planError().isEmpty(), qPrintable(p->planError()));
  }

  // A drop on a graph input (the batch) and on an argument row; two explicit shardings that split one
  // contraction differently are a conflict, named with both specs and marked on the graph.
  void graphDropsAndConflicts() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    const auto& paths = w.session()->project()->inputPaths;
    int inputs = static_cast<int>(std::find(paths.begin(), paths.end(), "inputs") - paths.begin());
    QVERIFY(inputs < static_cast<int>(paths.size()));
    w.graphPanel()->expandAll(true);
    QTRY_VERIFY_WITH_TIMEOUT(!w.graphPanel()->layoutRunning(), 60000);
    w.graphPanel()->dropSpecOnInput(inputs, "");
    QVERIFY(waitPlan(p));
    // By hand: the whole batch f32[8192, 784] on every device.
    QCOMPARE(argument(p, "inputs")->bytes, int64_t(8192) * 784 * 4);

    // x: [B, 784] split over 'data' along 784, layer 0's weight [784, 1024] over 'model' along 784.
    QVERIFY(p->dropSpec("inputs", "None, data"));
    QVERIFY(p->dropSpec("layers.0.weight", "model, None"));
    QVERIFY(waitPlan(p));
    QVERIFY(!p->planError().isEmpty());
    QVERIFY2(p->planError().contains("conflicting"), qPrintable(p->planError()));
    QVERIFY(!p->conflicts().empty());
    const auto& c = p->conflicts().front();
    QCOMPARE(c.op, std::string("dot_general"));
    QString both = QString::fromStdString(c.first + " " + c.second);
    QVERIFY2(both.contains("P(None, 'data')") && both.contains("P('model', None)"), qPrintable(both));
    QTRY_VERIFY(w.graphPanel()->conflictNodes().contains(c.node));
    // Apply refuses a plan with an error; undo clears the conflict.
    QVERIFY(!p->apply());
    p->undoStack()->undo();
    QVERIFY(waitPlan(p));
    QVERIFY2(p->planError().isEmpty(), qPrintable(p->planError()));
  }

  // A spec dropped on an op's result in the graph (at the stage the panel plans): a sharding constraint. Layer
  // 0 is column-parallel, so its product x @ W0 is split over 'model' along its columns; asking for it whole
  // there needs an all_gather over 'model', which the tutorial's plan does not have.
  void dropOnAValueConstrainsIt() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    auto gathers = [&] {
      int n = 0;
      for (const auto& c : p->plan()->collectives) n += c.info.opName == "all_gather" && c.info.axisNames == "'model'";
      return n;
    };
    QCOMPARE(gathers(), 0);
    const ir::Graph& step = *w.session()->stages()->back().graph;
    QCOMPARE(p->plan()->step.get(), &step);
    ir::ValueId h = ir::kNone;
    for (const auto& n : step.nodes())
      if (n.op == ir::OpCode::DotGeneral && step.aval(n.results[0]).toString() == "f32[8192,1024]" && h == ir::kNone)
        h = n.results[0];
    QVERIFY(h != ir::kNone);
    QCOMPARE(QString::fromStdString(p->plan()->plan.values[static_cast<size_t>(h)].toString(p->plan()->mesh)),
             QString("P('data', 'model')"));
    // Through the graph panel's handler for that node's box: show the last stage with the node's group open.
    w.session()->setCurrentStage(static_cast<int>(w.session()->stages()->size()) - 1);
    w.graphPanel()->expandAll(true);
    QTRY_VERIFY_WITH_TIMEOUT(!w.graphPanel()->layoutRunning(), 60000);
    QVERIFY(w.graphPanel()->dropSpecOnNode(step.value(h).producer, "data, None"));
    QVERIFY(waitPlan(p));
    QVERIFY2(p->planError().isEmpty(), qPrintable(p->planError()));
    const ir::ValueId after = p->plan()->fromStep[static_cast<size_t>(h)];
    QCOMPARE(QString::fromStdString(p->plan()->plan.values[static_cast<size_t>(after)].toString(p->plan()->mesh)),
             QString("P('data', None)"));
    QVERIFY(QString::fromStdString(inspect::originText(*p->plan(), after)).contains("sharding_constraint"));
    QVERIFY(gathers() >= 1);
    bool added = false;
    for (const auto& c : p->diff()->added) added |= c.info.opName == "all_gather";
    QVERIFY(added);
    // Apply refuses: the constraint belongs in the model.
    QString error;
    QVERIFY(!p->apply(&error));
    QVERIFY2(error.contains("withShardingConstraint"), qPrintable(error));
    p->undoStack()->undo();
    QVERIFY(waitPlan(p));
    QCOMPARE(gathers(), 0);
  }

  // Apply writes the rules and the mesh into project.toml, keeping its comments; the reopened project plans
  // the same step, and so does the engine function behind `tessera shard plan`.
  void applyWritesProjectAndReopens() {
    QTemporaryDir dir;
    QVERIFY(copyMlp(dir));
    MainWindow w;
    QVERIFY(openAndPlan(w, dir.path()));
    ShardingPanel* p = w.shardingPanel();
    QVERIFY(p->dropSpec("params.layers.2.weight", "None, model"));
    QVERIFY(p->dropSpec("layers.3.weight", "model, None"));
    // layers.1.weight already has a rule ('layers\.1\.weight' = "model, None"): the applied one must win.
    QVERIFY(p->dropSpec("params.layers.1.weight", "None, model"));
    QVERIFY(waitPlan(p));
    QVERIFY(p->planError().isEmpty());
    QStringList before;
    for (const auto& a : p->plan()->arguments) before << QString::fromStdString(a.path.toString() + " " + a.sharding.toString(p->plan()->mesh));
    const auto collectives = p->plan()->collectives.size();
    const auto bytes = p->plan()->paramBytes;

    QSignalSpy opened(w.session(), &Session::projectOpened);
    QString error;
    QVERIFY2(p->apply(&error), qPrintable(error));
    QFile f(dir.filePath("project.toml"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(f.readAll());
    QVERIFY(text.contains("# column-parallel"));  // comments kept
    QVERIFY2(text.contains(R"('(^|\.)layers\.2\.weight$' = "None, model")"), qPrintable(text));
    QVERIFY2(text.contains(R"('(^|\.)layers\.3\.weight$' = "model, None")"), qPrintable(text));
    QVERIFY2(text.contains(R"('(^|\.)layers\.1\.weight$' = "None, model")"), qPrintable(text));
    QVERIFY(before.contains("params.layers.1.weight P(None, 'model')"));
    QVERIFY(text.contains("shape = [4, 2]"));

    QTRY_VERIFY_WITH_TIMEOUT(!opened.isEmpty(), 60000);
    QVERIFY(QTest::qWaitFor([&] { return p->plan() && !p->planning() && p->edit().overrides.empty(); }, 120000));
    QCOMPARE(p->undoStack()->count(), 0);
    QStringList after;
    for (const auto& a : p->plan()->arguments) after << QString::fromStdString(a.path.toString() + " " + a.sharding.toString(p->plan()->mesh));
    QCOMPARE(after, before);
    QCOMPARE(p->plan()->collectives.size(), collectives);
    QCOMPARE(p->plan()->paramBytes, bytes);

    // The CLI's path: the project read from disk, traced anew.
    auto project = project::loadProject(dir.path().toStdString());
    QVERIFY(project.ok());
    train::ShardPlanOptions options;
    options.compile = false;
    auto plan = train::planStepSharding(*project, options);
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    QStringList cli;
    for (const auto& a : plan->arguments) cli << QString::fromStdString(a.path.toString() + " " + a.sharding.toString(plan->mesh));
    QCOMPARE(cli, before);
    QCOMPARE(plan->collectives.size(), collectives);
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestShardingPanel)
#include "test_sharding_panel.moc"
