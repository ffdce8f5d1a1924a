#include "views/sharding_panel.h"

#include <set>

#include <QComboBox>
#include <QDragEnterEvent>
#include <QFile>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSaveFile>
#include <QSplitter>
#include <QTabWidget>
#include <QTreeWidget>
#include <QUndoStack>
#include <QVBoxLayout>
#include <QtConcurrent>

#include "views/shard_grid_widget.h"

namespace tsr::studio {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

QString bytes(int64_t b) { return q(inspect::formatBytes(b)); }

// "P('data', None)" for what a user types or drags ("data, None"); the text itself when it does not parse.
QString specLabel(const QString& spec) {
  auto p = sharding::PartitionSpec::parse(spec.toStdString());
  return p.ok() ? q(p->toString()) : spec;
}

// The palette: each entry carries its spec text; a drag carries kPartitionSpecMime.
class SpecPalette : public QListWidget {
 public:
  SpecPalette() {
    setDragEnabled(true);
    setDragDropMode(QAbstractItemView::DragOnly);
    setSelectionMode(QAbstractItemView::SingleSelection);
  }

 protected:
  QStringList mimeTypes() const override { return {kPartitionSpecMime}; }
  QMimeData* mimeData(const QList<QListWidgetItem*>& items) const override {
    if (items.isEmpty()) return nullptr;
    return ShardingPanel::specMimeData(items.front()->data(Qt::UserRole).toString());
  }
};

// One edit of the mesh or of an argument's spec.
class EditCommand : public QUndoCommand {
 public:
  EditCommand(ShardingPanel* panel, ShardingPanel::Edit before, ShardingPanel::Edit after, const QString& text)
      : QUndoCommand(text), m_panel(panel), m_before(std::move(before)), m_after(std::move(after)) {}
  void redo() override { m_panel->setEdit(m_after); }
  void undo() override { m_panel->setEdit(m_before); }

 private:
  ShardingPanel* m_panel;
  ShardingPanel::Edit m_before, m_after;
};

}  // namespace

// The arguments of the step, each a drop target for a spec.
class ArgumentTree : public QTreeWidget {
 public:
  explicit ArgumentTree(ShardingPanel* panel) : m_panel(panel) {
    setAcceptDrops(true);
    setDragDropMode(QAbstractItemView::DropOnly);
    setDropIndicatorShown(true);
    setRootIsDecorated(false);
    setUniformRowHeights(true);
    setHeaderLabels({QObject::tr("Argument"), QObject::tr("Shape"), QObject::tr("Sharding"), QObject::tr("Per device"),
                     QObject::tr("Why")});
    // Long argument paths give way, elided at the front ("…layers.0.weight": their ends tell them apart), so
    // that the shape, sharding and bytes per device stay in sight; the last column, Why, takes what is left.
    setTextElideMode(Qt::ElideLeft);
  }

  // Shape, Sharding and Per device as wide as their cells; Argument as wide as its paths when there is room,
  // else what is left (at least about 14 characters).
  void fitColumns() {
    QHeaderView* h = header();
    for (int c = 0; c < 4; ++c) resizeColumnToContents(c);
    const int rest = h->sectionSize(1) + h->sectionSize(2) + h->sectionSize(3);
    const int want = h->sectionSize(0);
    const int least = std::min(want, fontMetrics().averageCharWidth() * 14);
    h->resizeSection(0, std::max(least, std::min(want, viewport()->width() - rest)));
  }

 protected:
  void resizeEvent(QResizeEvent* e) override {
    QTreeWidget::resizeEvent(e);
    fitColumns();
  }
  QStringList mimeTypes() const override { return {kPartitionSpecMime}; }
  Qt::DropActions supportedDropActions() const override { return Qt::CopyAction; }
  void dragEnterEvent(QDragEnterEvent* e) override {
    if (e->mimeData()->hasFormat(kPartitionSpecMime)) e->acceptProposedAction();
  }
  void dragMoveEvent(QDragMoveEvent* e) override {
    if (e->mimeData()->hasFormat(kPartitionSpecMime) && itemAt(e->position().toPoint())) e->acceptProposedAction();
    else e->ignore();
  }
  void dropEvent(QDropEvent* e) override {
    QTreeWidgetItem* item = itemAt(e->position().toPoint());
    if (!item || !e->mimeData()->hasFormat(kPartitionSpecMime)) return e->ignore();
    m_panel->dropSpec(item->text(0), QString::fromUtf8(e->mimeData()->data(kPartitionSpecMime)));
    e->acceptProposedAction();
  }

 private:
  ShardingPanel* m_panel;
};

struct ShardingPanel::Outcome {
  int generation = 0;
  std::shared_ptr<Result<inspect::StepShardingPlan>> plan;
  std::vector<inspect::ShardingConflict> conflicts;
};

ShardingPanel::ShardingPanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_meshShape(new QLineEdit),
      m_meshAxes(new QLineEdit),
      m_meshDevices(new QLineEdit),
      m_meshInfo(new QLabel),
      m_palette(new SpecPalette),
      m_custom(new QLineEdit),
      m_applyButton(new QPushButton(tr("Apply to project.toml"))),
      m_busy(new QProgressBar),
      m_status(new QLabel),
      m_tabs(new QTabWidget),
      m_arguments(new ArgumentTree(this)),
      m_values(new QTreeWidget),
      m_grid(new ShardGridWidget),
      m_rowDim(new QComboBox),
      m_colDim(new QComboBox),
      m_summary(new QLabel),
      m_collectives(new QTreeWidget),
      m_undo(new QUndoStack(this)),
      m_watcher(new QFutureWatcher<OutcomePtr>(this)) {
  setObjectName("shardingPanel");
  // Left: the mesh, the palette, undo / redo / apply.
  auto* left = new QWidget;
  left->setMaximumWidth(280);
  auto* lv = new QVBoxLayout(left);
  lv->setContentsMargins(2, 2, 2, 2);
  auto* form = new QFormLayout;
  m_meshShape->setPlaceholderText("4, 2");
  m_meshAxes->setPlaceholderText("data, model");
  m_meshDevices->setPlaceholderText(tr("0 1 2 … (row-major)"));
  m_meshShape->setToolTip(tr("Devices per mesh axis"));
  m_meshDevices->setToolTip(tr("Which device sits at each mesh position, row-major (not written to project.toml)"));
  form->addRow(tr("Mesh"), m_meshShape);
  form->addRow(tr("Axes"), m_meshAxes);
  form->addRow(tr("Devices"), m_meshDevices);
  lv->addLayout(form);
  auto* setMeshButton = new QPushButton(tr("Set mesh"));
  lv->addWidget(setMeshButton);
  m_meshInfo->setWordWrap(true);
  lv->addWidget(m_meshInfo);
  auto* paletteLabel = new QLabel(tr("<b>PartitionSpecs</b> — drag onto a parameter, an argument or a graph input"));
  paletteLabel->setWordWrap(true);
  lv->addWidget(paletteLabel);
  m_palette->setObjectName("specPalette");
  lv->addWidget(m_palette, 1);
  m_custom->setPlaceholderText(tr("custom: (data, model), None"));
  auto* addCustom = new QPushButton(tr("Add"));
  auto* customRow = new QHBoxLayout;
  customRow->addWidget(m_custom, 1);
  customRow->addWidget(addCustom);
  lv->addLayout(customRow);
  auto* undoRow = new QHBoxLayout;
  auto* undoButton = new QPushButton(tr("Undo"));
  auto* redoButton = new QPushButton(tr("Redo"));
  undoButton->setObjectName("shardingUndo");
  redoButton->setObjectName("shardingRedo");
  undoRow->addWidget(undoButton);
  undoRow->addWidget(redoButton);
  lv->addLayout(undoRow);
  m_applyButton->setObjectName("shardingApply");
  m_applyButton->setToolTip(tr("Write the specs set here as [sharding] rules and the mesh as [mesh] (comments kept), "
                               "then reopen the project"));
  lv->addWidget(m_applyButton);
  m_busy->setRange(0, 0);
  m_busy->setMaximumHeight(10);
  m_busy->setTextVisible(false);
  m_busy->setVisible(false);
  lv->addWidget(m_busy);

  // Middle: the arguments (drop targets) and every value with its origin.
  m_values->setHeaderLabels({tr("Value"), tr("Op"), tr("Shape"), tr("Sharding"), tr("Where it came from")});
  m_values->setRootIsDecorated(false);
  m_values->setUniformRowHeights(true);
  m_arguments->setObjectName("shardingArguments");
  m_values->setObjectName("shardingValues");
  m_collectives->setObjectName("shardingCollectives");
  m_tabs->addTab(m_arguments, tr("Arguments"));
  m_tabs->addTab(m_values, tr("Values"));

  // Right: the grid, the summary and the collectives.
  m_summary->setWordWrap(true);
  m_summary->setTextFormat(Qt::RichText);
  m_summary->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  m_collectives->setHeaderLabels({"", tr("Collective"), tr("Over"), tr("Per device"), tr("ms"), tr("Why")});
  m_collectives->setRootIsDecorated(false);
  m_collectives->setUniformRowHeights(true);
  auto* gridBox = new QWidget;
  auto* gv = new QVBoxLayout(gridBox);
  gv->setContentsMargins(0, 0, 0, 0);
  auto* dimsRow = new QHBoxLayout;
  dimsRow->addWidget(new QLabel(tr("Grid rows")));
  dimsRow->addWidget(m_rowDim);
  dimsRow->addWidget(new QLabel(tr("columns")));
  dimsRow->addWidget(m_colDim);
  dimsRow->addStretch(1);
  m_rowDim->setToolTip(tr("The array dims laid out on the grid; blocks along other split dims are listed per cell"));
  m_colDim->setToolTip(m_rowDim->toolTip());
  m_rowDim->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_colDim->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  gv->addLayout(dimsRow);
  gv->addWidget(m_grid, 1);
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(gridBox);
  right->addWidget(m_summary);
  right->addWidget(m_collectives);
  right->setStretchFactor(0, 3);
  right->setStretchFactor(1, 0);
  right->setStretchFactor(2, 2);

  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(m_tabs);
  split->addWidget(right);
  split->setStretchFactor(0, 0);
  split->setStretchFactor(1, 2);
  split->setStretchFactor(2, 3);
  split->setSizes({240, 420, 480});
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(split, 1);
  m_status->setObjectName("shardingStatus");
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_status);

  connect(setMeshButton, &QPushButton::clicked, this,
          [this] { setMesh(m_meshShape->text(), m_meshAxes->text(), m_meshDevices->text()); });
  connect(addCustom, &QPushButton::clicked, this, [this] {
    QString text = m_custom->text().trimmed();
    auto p = sharding::PartitionSpec::parse(text.toStdString());
    if (!p.ok()) {
      m_status->setText(tr("<span style=\"color:#c03030\">%1</span>").arg(q(p.error().message).toHtmlEscaped()));
      return;
    }
    auto* item = new QListWidgetItem(q(p->toString()) + tr("  (custom)"));
    item->setData(Qt::UserRole, text);
    m_palette->addItem(item);
    m_custom->clear();
  });
  connect(undoButton, &QPushButton::clicked, m_undo, &QUndoStack::undo);
  connect(redoButton, &QPushButton::clicked, m_undo, &QUndoStack::redo);
  connect(m_undo, &QUndoStack::canUndoChanged, undoButton, &QPushButton::setEnabled);
  connect(m_undo, &QUndoStack::canRedoChanged, redoButton, &QPushButton::setEnabled);
  undoButton->setEnabled(false);
  redoButton->setEnabled(false);
  connect(m_applyButton, &QPushButton::clicked, this, [this] {
    QString error;
    if (!apply(&error)) m_status->setText(tr("<span style=\"color:#c03030\">Apply: %1</span>").arg(error.toHtmlEscaped()));
  });
  auto pickDims = [this] {
    if (m_rowDim->currentIndex() > 0 && m_colDim->currentIndex() > 0)
      showArgument(m_shown, m_rowDim->currentIndex() - 1, m_colDim->currentIndex() - 1);
  };
  connect(m_rowDim, &QComboBox::activated, this, pickDims);
  connect(m_colDim, &QComboBox::activated, this, pickDims);
  connect(m_arguments, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
    if (item) showArgument(item->text(0));
  });
  connect(m_session, &Session::projectOpened, this, &ShardingPanel::onProjectOpened);
  connect(m_session, &Session::projectClosed, this, [this] {
    onProjectOpened();  // everything of the last project goes
    m_status->setText(tr("No plan: the project did not open"));
  });
  connect(m_session, &Session::stagesReady, this, &ShardingPanel::onStagesReady);
  connect(m_session, &Session::specDropped, this, [this](const QString& path, const QString& spec) { dropSpec(path, spec); });
  connect(m_session, &Session::specDroppedOnValue, this, [this](int value, const QString& spec) { dropSpecOnValue(value, spec); });
  connect(m_watcher, &QFutureWatcherBase::finished, this, &ShardingPanel::onPlanDone);
}

ShardingPanel::~ShardingPanel() { m_watcher->waitForFinished(); }

QMimeData* ShardingPanel::specMimeData(const QString& spec) {
  auto* m = new QMimeData;
  m->setData(kPartitionSpecMime, spec.toUtf8());
  m->setText(specLabel(spec));
  return m;
}

QStringList ShardingPanel::paletteSpecs() const {
  QStringList out;
  for (int i = 0; i < m_palette->count(); ++i) out << m_palette->item(i)->data(Qt::UserRole).toString();
  return out;
}

bool ShardingPanel::planning() const { return m_running || m_pending; }

void ShardingPanel::onProjectOpened() {
  m_undo->clear();
  m_edit = Edit{};
  m_step.reset();
  m_plan.reset();
  m_before.reset();
  m_diff.reset();
  m_conflicts.clear();
  m_error.clear();
  ++m_generation;
  fillMeshEditor();
  fillPalette();
  m_arguments->clear();
  m_values->clear();
  m_collectives->clear();
  m_summary->clear();
  m_grid->setTensorLayout(std::nullopt, 1);
  m_status->setText(tr("Waiting for the compile's cleanup passes…"));
}

void ShardingPanel::onStagesReady() {
  ProjectPtr project = m_session->project();
  StagesPtr stages = m_session->stages();
  // The last stage is the graph after the cleanup passes (the fusion stage keeps it): until the compile is
  // done there is only the traced one.
  if (!project || !stages || stages->size() < 2 || m_step) return;
  m_step = std::make_shared<const inspect::PlannableStep>(inspect::plannableStep(*project, stages->back().graph));
  requestPlan();
}

sharding::Mesh ShardingPanel::currentMesh() const {
  if (m_edit.mesh) return *m_edit.mesh;
  ProjectPtr project = m_session->project();
  if (project) {
    auto m = inspect::projectMesh(project->project);
    if (m.ok()) return *m;
  }
  return sharding::Mesh{{1}, {"data"}, {0}};
}

void ShardingPanel::fillMeshEditor() {
  sharding::Mesh mesh = currentMesh();
  QStringList shape, axes, devices;
  for (int64_t s : mesh.shape) shape << QString::number(s);
  for (const auto& a : mesh.axes) axes << q(a);
  for (int d : mesh.devices) devices << QString::number(d);
  m_meshShape->setText(shape.join(", "));
  m_meshAxes->setText(axes.join(", "));
  m_meshDevices->setText(devices.join(" "));
  m_meshInfo->setText(tr("%1 — %2 devices").arg(q(mesh.toString())).arg(mesh.size()));
}

void ShardingPanel::fillPalette() {
  // Custom entries stay; the mesh's own are made anew.
  for (int i = m_palette->count() - 1; i >= 0; --i)
    if (!m_palette->item(i)->text().endsWith(tr("(custom)"))) delete m_palette->takeItem(i);
  int at = 0;
  for (const std::string& s : inspect::paletteSpecs(currentMesh())) {
    auto* item = new QListWidgetItem(specLabel(q(s)) + (s.empty() ? tr("  replicated") : QString()));
    item->setData(Qt::UserRole, q(s));
    item->setToolTip(tr("Drag onto a parameter (project tree), an argument here, or an input in the graph"));
    m_palette->insertItem(at++, item);
  }
}

const inspect::ArgumentPath* ShardingPanel::findArgument(const QString& name) const {
  if (!m_step || name.isEmpty()) return nullptr;
  const std::string n = name.toStdString();
  for (const inspect::ArgumentPath& p : m_step->paths) {
    const auto* param = p.as<inspect::ArgumentPath::Param>();
    if (p.toString() == n || (param && param->path == n)) return &p;
  }
  return nullptr;
}

// A drop that changes nothing says why where the user looks, the panel's status line, as well as in the console
// (it was only in the console, behind the Sharding tab: the drop seemed to do nothing).
void ShardingPanel::refuseDrop(const QString& why) {
  m_session->log("error", tr("sharding: %1").arg(why));
  m_status->setText(tr("<span style=\"color:#c03030\"><b>Not set:</b> %1</span>").arg(why.toHtmlEscaped()));
}

bool ShardingPanel::dropSpec(const QString& argument, const QString& spec) {
  auto parsed = sharding::PartitionSpec::parse(spec.toStdString());
  if (!parsed.ok()) {
    refuseDrop(tr("'%1': %2").arg(spec, q(parsed.error().message)));
    return false;
  }
  const inspect::ArgumentPath* found = findArgument(argument);
  if (!found) {
    refuseDrop(tr("no argument '%1' in the step").arg(argument));
    return false;
  }
  // Overrides are keyed by the argument's relative path: a parameter's covers its optimizer state.
  const QString key = q(found->relative());
  Edit after = m_edit;
  after.overrides[key.toStdString()] = spec.toStdString();
  if (after == m_edit) return true;
  m_shown = q(found->toString());
  m_undo->push(new EditCommand(this, m_edit, after, tr("%1 on %2").arg(specLabel(spec), key)));
  return true;
}

bool ShardingPanel::dropSpecOnValue(int value, const QString& spec) {
  auto parsed = sharding::PartitionSpec::parse(spec.toStdString());
  if (!parsed.ok()) {
    refuseDrop(tr("'%1': %2").arg(spec, q(parsed.error().message)));
    return false;
  }
  if (!m_step || value < 0 || value >= m_step->graph->numValues()) {
    refuseDrop(tr("no value %%1 in the planned step").arg(value));
    return false;
  }
  Edit after = m_edit;
  after.constraints[value] = spec.toStdString();
  if (after == m_edit) return true;
  m_undo->push(new EditCommand(this, m_edit, after, tr("%1 on %%2").arg(specLabel(spec)).arg(value)));
  return true;
}

bool ShardingPanel::setMesh(const QString& shape, const QString& axes, const QString& devices) {
  auto mesh = inspect::parseMesh(shape.toStdString(), axes.toStdString(), devices.toStdString());
  if (!mesh.ok()) {
    m_meshInfo->setText(tr("<span style=\"color:#c03030\">%1</span>").arg(q(mesh.error().message).toHtmlEscaped()));
    return false;
  }
  Edit after = m_edit;
  after.mesh = *mesh;
  if (after == m_edit || (!m_edit.mesh && m_plan && m_plan->mesh == *mesh)) return true;
  m_undo->push(new EditCommand(this, m_edit, after, tr("mesh %1").arg(q(mesh->toString()))));
  return true;
}

void ShardingPanel::setEdit(const Edit& edit) {
  bool meshChanged = edit.mesh != m_edit.mesh;
  m_edit = edit;
  if (meshChanged) {
    fillMeshEditor();
    fillPalette();
  }
  ++m_generation;
  requestPlan();
}

void ShardingPanel::requestPlan() {
  if (!m_step) return;
  if (m_running) {
    m_pending = true;  // started again when the running one ends; its result is dropped
    return;
  }
  startPlan();
}

void ShardingPanel::startPlan() {
  ProjectPtr project = m_session->project();
  m_pending = false;
  if (!project || !m_step) {
    m_busy->setVisible(false);
    return;
  }
  if (currentMesh().size() <= 1) {
    // Nothing to split: no plan until the user sets a mesh.
    m_busy->setVisible(false);
    m_status->setText(tr("The project's mesh is one device: set a mesh (e.g. 2, 4 over data, model) to plan a split."));
    emit planReady();
    return;
  }
  m_busy->setVisible(true);
  m_running = true;
  m_status->setText(tr("Propagating shardings and partitioning the step…"));
  inspect::ShardPlanOptions o;
  o.mesh = m_edit.mesh;
  o.overrides = m_edit.overrides;
  for (const auto& [v, spec] : m_edit.constraints) o.constraints[v] = spec;
  auto step = m_step;
  int generation = m_generation;
  m_watcher->setFuture(QtConcurrent::run([project, step, o, generation]() -> OutcomePtr {
    auto out = std::make_shared<Outcome>();
    out->generation = generation;
    out->plan = std::make_shared<Result<inspect::StepShardingPlan>>(inspect::planSharding(project->project, *step, o));
    if (!out->plan->ok()) {
      // Where propagation refused: the ops that read two explicit shardings that disagree.
      auto placed = inspect::placeArguments(project->project, *step, o);
      if (placed.ok()) out->conflicts = inspect::findConflicts(*step->graph, placed->mesh, placed->arguments);
    }
    return out;
  }));
}

void ShardingPanel::onPlanDone() {
  OutcomePtr r = m_watcher->result();
  m_running = false;
  if (m_pending || r->generation != m_generation) {
    // A newer edit came in: this result is stale.
    startPlan();
    return;
  }
  m_busy->setVisible(false);
  m_conflicts = r->conflicts;
  auto snapshot = std::make_shared<inspect::ShardingSnapshot>();
  snapshot->stepGraph = m_step ? m_step->graph : nullptr;
  if (!r->plan->ok()) {
    m_error = q(r->plan->error().message);
    QString text = tr("<span style=\"color:#c03030\"><b>No plan:</b> %1</span>").arg(m_error.toHtmlEscaped());
    for (const auto& c : m_conflicts)
      text += "<br><span style=\"color:#c03030\">" + q(c.message).toHtmlEscaped() + "</span>";
    m_status->setText(text);
    snapshot->plan = m_plan;
    snapshot->conflicts = m_conflicts;
    snapshot->error = r->plan->error().message;
    m_session->setSharding(std::move(snapshot));
    emit planReady();
    return;
  }
  m_error.clear();
  m_before = m_plan;
  m_plan = std::make_shared<const inspect::StepShardingPlan>(std::move(*r->plan).value());
  if (m_before) m_diff = inspect::diffPlans(*m_before, *m_plan);
  else m_diff.reset();
  snapshot->plan = m_plan;
  m_session->setSharding(std::move(snapshot));
  showPlan();
  emit planReady();
}

void ShardingPanel::showPlan() {
  fillArguments();
  fillValues();
  fillSummary();
  if (m_shown.isEmpty() && m_plan) {
    // The first argument the plan splits, else the first.
    for (const auto& a : m_plan->arguments)
      if (!a.sharding.isReplicated()) {
        m_shown = q(a.path.toString());
        break;
      }
    if (m_shown.isEmpty() && !m_plan->arguments.empty()) m_shown = q(m_plan->arguments.front().path.toString());
  }
  showArgument(m_shown);
  int overrides = static_cast<int>(m_edit.overrides.size() + m_edit.constraints.size());
  m_status->setText(tr("%1 over %2 devices; %3 spec(s) set here%4; %5 collectives, %6 ms of communication per step")
                        .arg(q(m_plan->mesh.toString()))
                        .arg(m_plan->mesh.size())
                        .arg(overrides)
                        .arg(m_undo->count() ? tr(" (not applied)") : QString())
                        .arg(m_plan->collectives.size())
                        .arg(m_plan->commSeconds * 1e3, 0, 'f', 3));
}

void ShardingPanel::fillArguments() {
  QSignalBlocker block(m_arguments);
  m_arguments->clear();
  std::set<size_t> changed;
  if (m_diff) changed.insert(m_diff->changedArguments.begin(), m_diff->changedArguments.end());
  const auto& g = *m_plan->global;
  for (size_t i = 0; i < m_plan->arguments.size(); ++i) {
    const auto& a = m_plan->arguments[i];
    const std::string name = a.path.toString();
    auto* item = new QTreeWidgetItem({name.empty() ? QString("%%1").arg(a.value) : q(name),
                                      q(g.aval(a.value).toString()), q(a.sharding.toString(m_plan->mesh)),
                                      bytes(a.bytes), q(a.source)});
    item->setTextAlignment(3, Qt::AlignRight | Qt::AlignVCenter);
    if (changed.count(i)) {
      QFont f = item->font(0);
      f.setBold(true);
      for (int c = 0; c < 5; ++c) {
        item->setFont(c, f);
        item->setForeground(c, QColor(30, 110, 200));
      }
    }
    m_arguments->addTopLevelItem(item);
  }
  m_arguments->fitColumns();
}

void ShardingPanel::fillValues() {
  m_values->clear();
  QList<QTreeWidgetItem*> items;
  for (const auto& v : inspect::planValues(*m_plan))
    items << new QTreeWidgetItem({QString("%%1").arg(v.value), q(v.op), q(v.aval), q(v.spec), q(v.origin)});
  m_values->addTopLevelItems(items);
  for (int c = 0; c < 4; ++c) m_values->resizeColumnToContents(c);
}

QStringList ShardingPanel::collectiveRows() const {
  QStringList out;
  for (int i = 0; i < m_collectives->topLevelItemCount(); ++i) {
    const QTreeWidgetItem* it = m_collectives->topLevelItem(i);
    QStringList cols;
    for (int c = 0; c < it->columnCount(); ++c) cols << it->text(c);
    out << cols.join(" ");
  }
  return out;
}

void ShardingPanel::fillSummary() {
  const auto& p = *m_plan;
  auto row = [&](const QString& what, int64_t before, int64_t after) {
    QString delta;
    if (m_diff && before != after)
      delta = QString(" <span style=\"color:%1\">(%2%3)</span>")
                  .arg(after > before ? "#c03030" : "#2a9d3a", after > before ? "+" : "−",
                       bytes(std::abs(after - before)));
    return QString("<tr><td>%1</td><td align=right>&nbsp;%2</td><td>%3</td></tr>").arg(what, bytes(after), delta);
  };
  const inspect::PlanDiff* d = diff();
  QString html = tr("<b>Per device</b> on %1<table>").arg(q(p.mesh.toString()).toHtmlEscaped());
  html += row(tr("parameters"), d ? d->paramBefore : p.paramBytes, p.paramBytes);
  html += row(tr("gradients"), d ? d->paramBefore : p.paramBytes, p.paramBytes);
  html += row(tr("optimizer state"), d ? d->optBefore : p.optBytes, p.optBytes);
  html += row(tr("batch"), d ? d->batchBefore : p.batchBytes, p.batchBytes);
  html += row(tr("activations (arena)"), d ? d->arenaBefore : p.arenaBytes, p.arenaBytes);
  html += "</table>";
  html += tr("<b>Communication</b>: %1 collectives, %2 ms per step at %3 GB/s per device")
              .arg(p.collectives.size())
              .arg(p.commSeconds * 1e3, 0, 'f', 3)
              .arg(p.bandwidthGBs, 0, 'g', 4);
  if (d)
    html += tr(" (was %1 ms; last edit: <span style=\"color:#c03030\">+%2</span> / <span style=\"color:#2a9d3a\">−%3</span>)")
                .arg(d->commBefore * 1e3, 0, 'f', 3)
                .arg(d->added.size())
                .arg(d->removed.size());
  m_summary->setText(html);

  m_collectives->clear();
  auto add = [&](const QString& mark, const train::PlannedCollective& c, QColor colour) {
    auto* item = new QTreeWidgetItem({mark, q(c.info.opName), q(c.info.axisNames), bytes(c.info.bytes),
                                      QString::number(c.seconds * 1e3, 'f', 3),
                                      q(c.info.reason) + (c.where.empty() ? QString() : " at " + q(c.where))});
    item->setTextAlignment(3, Qt::AlignRight | Qt::AlignVCenter);
    item->setTextAlignment(4, Qt::AlignRight | Qt::AlignVCenter);
    if (colour.isValid())
      for (int k = 0; k < 6; ++k) item->setForeground(k, colour);
    item->setToolTip(5, item->text(5));
    m_collectives->addTopLevelItem(item);
  };
  if (d) {
    for (const auto& c : d->added) add("+", c, QColor(200, 50, 50));
    for (const auto& c : d->removed) add(QString::fromUtf8("−"), c, QColor(40, 150, 60));
    // The rest: those in both plans.
    std::vector<train::PlannedCollective> kept = p.collectives;
    for (const auto& a : d->added)
      for (auto it = kept.begin(); it != kept.end(); ++it)
        if (it->info.opName == a.info.opName && it->info.axisNames == a.info.axisNames && it->info.bytes == a.info.bytes &&
            it->info.reason == a.info.reason && it->where == a.where) {
          kept.erase(it);
          break;
        }
    for (const auto& c : kept) add("", c, QColor());
  } else {
    for (const auto& c : p.collectives) add("", c, QColor());
  }
  for (int c = 0; c < 5; ++c) m_collectives->resizeColumnToContents(c);
}

void ShardingPanel::showArgument(const QString& path, int rowDim, int colDim) {
  if (!m_plan) return;
  for (const auto& a : m_plan->arguments) {
    const std::string name = a.path.toString();
    if (q(name) != path) continue;
    m_shown = path;
    const Aval& aval = m_plan->global->aval(a.value);
    auto l = inspect::tensorLayout(m_plan->mesh, a.sharding, aval, name, rowDim, colDim);
    if (!l.ok()) l = inspect::tensorLayout(m_plan->mesh, a.sharding, aval, name);
    m_grid->setTensorLayout(l.ok() ? std::optional<inspect::TensorLayout>(std::move(*l)) : std::nullopt, m_plan->mesh.size());
    // The dim pickers: the dims on the grid now.
    for (QComboBox* box : {m_rowDim, m_colDim}) {
      QSignalBlocker block(box);
      box->clear();
      box->addItem(tr("auto"));
      for (int d = 0; d < aval.shape.rank(); ++d) box->addItem(tr("dim %1 (%2)").arg(d).arg(aval.shape[d]));
      box->setEnabled(aval.shape.rank() >= 2);
    }
    if (const auto& t = m_grid->tensorLayout(); t && t->rowDim >= 0) {
      m_rowDim->setCurrentIndex(t->rowDim + 1);
      m_colDim->setCurrentIndex(t->colDim + 1);
    }
    for (int i = 0; i < m_arguments->topLevelItemCount(); ++i)
      if (m_arguments->topLevelItem(i)->text(0) == path) {
        QSignalBlocker block(m_arguments);
        m_arguments->setCurrentItem(m_arguments->topLevelItem(i));
        m_arguments->scrollToItem(m_arguments->topLevelItem(i));
      }
    return;
  }
}

bool ShardingPanel::apply(QString* error) {
  auto fail = [&](const QString& m) {
    if (error) *error = m;
    m_session->log("error", "sharding: " + m);
    return false;
  };
  ProjectPtr project = m_session->project();
  if (!project || !m_plan) return fail(tr("no plan to apply yet"));
  if (planning()) return fail(tr("the plan is still being computed"));
  if (!m_error.isEmpty()) return fail(tr("the plan has an error: %1").arg(m_error));
  if (!m_edit.constraints.empty())
    return fail(tr("a sharding set on a value inside the step (%%1) belongs in the model's code "
                   "(withShardingConstraint); undo it to apply the parameter rules")
                    .arg(m_edit.constraints.begin()->first));
  std::vector<std::pair<std::string, std::string>> rules;
  for (const auto& [key, spec] : m_edit.overrides) {
    if (key == "inputs" || key == "targets")
      return fail(tr("the batch is split over the mesh's first axis; project.toml has no rule for '%1'").arg(q(key)));
    rules.emplace_back(inspect::ruleForParameter(key), spec);
  }
  const project::Project& p = project->project;
  QFile in(q(p.file));
  if (!in.open(QIODevice::ReadOnly)) return fail(tr("cannot read %1").arg(q(p.file)));
  std::string text = in.readAll().toStdString();
  in.close();
  auto updated = inspect::applySharding(text, p.file, p.dir, m_plan->mesh, rules);
  if (!updated.ok()) return fail(q(updated.error().message));
  QSaveFile out(q(p.file));
  if (!out.open(QIODevice::WriteOnly) || out.write(updated->data(), static_cast<qint64>(updated->size())) < 0 || !out.commit())
    return fail(tr("cannot write %1").arg(q(p.file)));
  m_session->log("info", tr("sharding: wrote %1 rule(s) and %2 to %3")
                             .arg(rules.size())
                             .arg(q(m_plan->mesh.toString()), q(p.file)));
  m_session->openProject(q(p.dir));
  return true;
}

}  // namespace tsr::studio
