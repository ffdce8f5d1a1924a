#include "views/timeline_panel.h"

#include <QComboBox>
#include <QFrame>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QOpenGLContext>
#include <QPointer>
#include <QPushButton>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent>

#include "engine/inspect/timeline_compare.h"
#include "views/timeline_canvas.h"

namespace tsr::studio {

namespace {

QString fromStd(const std::string& s) { return QString::fromStdString(s); }

// A cell that sorts by a number while it shows text ("1.25 ms").
class NumberItem : public QTableWidgetItem {
 public:
  NumberItem(const QString& text, double value) : QTableWidgetItem(text) {
    setData(Qt::UserRole, value);
    setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  }
  bool operator<(const QTableWidgetItem& other) const override {
    return data(Qt::UserRole).toDouble() < other.data(Qt::UserRole).toDouble();
  }
};

// QOpenGLWidget draws nothing on the offscreen platform, and nothing anywhere without a GL context.
QString openGlMissing() {
  QString platform = QGuiApplication::platformName();
  if (platform == "offscreen" || platform == "minimal")
    return QObject::tr("The timeline canvas needs OpenGL, which the '%1' Qt platform does not offer (run on xcb, or "
                       "under xvfb-run).").arg(platform);
  QOpenGLContext probe;
  if (!probe.create()) return QObject::tr("The timeline canvas needs OpenGL, and no OpenGL context could be created.");
  return {};
}

}  // namespace

TimelinePanel::TimelinePanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_staleBanner(new QFrame),
      m_staleText(new QLabel),
      m_reprofile(new QPushButton(tr("Re-profile"))),
      m_source(new QLabel),
      m_info(new QLabel),
      m_colour(new QComboBox),
      m_compare(new QPushButton(tr("Compare…"))),
      m_rangeInfo(new QLabel),
      m_table(new QTableWidget(0, 6)),
      m_watcher(new QFutureWatcher<LoadResult>(this)),
      m_windowWatcher(new QFutureWatcher<WindowResult>(this)),
      m_statsWatcher(new QFutureWatcher<StatsResult>(this)) {
  setObjectName("timelinePanel");
  m_source->setObjectName("timelineSource");
  m_source->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_source->setText(tr("No profile"));
  m_colour->addItem(tr("Colour by fusion kind"), "kind");
  m_colour->addItem(tr("Colour by op family"), "family");
  auto* fit = new QPushButton(tr("Fit"));
  fit->setToolTip(tr("Show the whole timeline (F)"));
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(4, 2, 4, 2);
  bar->setSpacing(8);
  bar->addWidget(m_source, 1);
  auto* separator = new QFrame;  // the profile's name and the selection's info are two things
  separator->setFrameShape(QFrame::VLine);
  separator->setFrameShadow(QFrame::Sunken);
  bar->addWidget(separator);
  bar->addWidget(m_info, 2);
  bar->addWidget(m_colour);
  bar->addWidget(m_compare);
  bar->addWidget(fit);
  m_compare->setObjectName("timelineCompare");
  m_compare->setToolTip(tr("Put another run's profile beside this one: a step of each, kernels paired by graph node "
                           "and coloured by how their time changed"));
  auto* compareMenu = new QMenu(m_compare);
  m_compare->setMenu(compareMenu);
  connect(compareMenu, &QMenu::aboutToShow, this, [this, compareMenu] {
    compareMenu->clear();
    auto candidates = compareCandidates();
    if (candidates.empty()) compareMenu->addAction(tr("No other profiled run in this store"))->setEnabled(false);
    for (const auto& [run, label] : candidates)
      compareMenu->addAction(label, this, [this, run = run] { compareRuns(m_dbPath, m_runA, run); });
  });

  m_canvasError = openGlMissing();
  QWidget* canvasArea;
  if (m_canvasError.isEmpty()) {
    m_canvas = new TimelineCanvas;
    m_canvas->setToolTip(tr("Wheel: zoom · drag: pan · shift-drag or right-drag: range statistics · click: select a "
                            "kernel in the graph · W/S/A/D, F: fit, Esc: clear"));
    canvasArea = m_canvas;
    connect(m_canvas, &TimelineCanvas::eventClicked, this, &TimelinePanel::onEventClicked);
    connect(m_canvas, &TimelineCanvas::rangeChanged, this, &TimelinePanel::setRange);
    connect(m_canvas, &TimelineCanvas::windowNeeded, this, &TimelinePanel::requestWindow);
    connect(fit, &QPushButton::clicked, m_canvas, &TimelineCanvas::fitAll);
  } else {
    auto* label = new QLabel(m_canvasError);
    label->setObjectName("timelineNoCanvas");
    label->setWordWrap(true);
    label->setAlignment(Qt::AlignCenter);
    canvasArea = label;
    fit->setEnabled(false);
  }
  connect(m_colour, &QComboBox::currentIndexChanged, this, [this] { setColourBy(m_colour->currentData().toString()); });

  m_table->setObjectName("timelineStats");
  m_table->setHorizontalHeaderLabels({tr("Kernel"), tr("Kind"), tr("Count"), tr("Total"), tr("Mean"), tr("Share")});
  m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  m_table->verticalHeader()->setVisible(false);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setAlternatingRowColors(true);
  // A row picked in the table marks that kernel's launches on the canvas.
  connect(m_table, &QTableWidget::itemSelectionChanged, this, [this] {
    if (!m_canvas || !m_timeline) return;
    auto rows = m_table->selectionModel()->selectedRows();
    if (rows.isEmpty()) return;
    // A kernel of the range statistics, or a pair of a comparison (its kernels on both sides, named by A and B).
    std::string name = m_table->item(rows.front().row(), 0)->text().toStdString();
    std::string other = m_diff ? m_table->item(rows.front().row(), 1)->text().toStdString() : std::string();
    std::vector<int> kernels;
    for (size_t k = 0; k < m_timeline->kernels.size(); ++k) {
      const std::string& n = m_timeline->kernels[k].name;
      if ((!name.empty() && n == name) || (!other.empty() && n == other)) kernels.push_back(static_cast<int>(k));
    }
    m_canvas->setHighlightedKernels(kernels);
  });
  m_rangeInfo->setText(tr("Shift-drag (or right-drag) over the timeline for the statistics of a time range."));
  m_rangeInfo->setWordWrap(true);
  auto* statsBox = new QWidget;
  auto* statsLayout = new QVBoxLayout(statsBox);
  statsLayout->setContentsMargins(2, 2, 2, 2);
  statsLayout->addWidget(m_rangeInfo);
  statsLayout->addWidget(m_table, 1);

  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(canvasArea);
  split->addWidget(statsBox);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 1);
  split->setSizes({400, 200});
  m_staleBanner->setObjectName("timelineStaleBanner");
  m_staleBanner->setFrameShape(QFrame::StyledPanel);
  m_staleBanner->setStyleSheet("#timelineStaleBanner { background: #fff3cd; border: 1px solid #e0c060; }"
                               "#timelineStaleBanner QLabel { color: #5c4400; }");
  m_staleText->setWordWrap(true);
  m_reprofile->setObjectName("reprofileButton");
  m_reprofile->setToolTip(tr("Run ▶ Profile: profile the project as it is now"));
  auto* banner = new QHBoxLayout(m_staleBanner);
  banner->setContentsMargins(8, 4, 8, 4);
  banner->addWidget(m_staleText, 1);
  banner->addWidget(m_reprofile);
  m_staleBanner->setVisible(false);
  connect(m_reprofile, &QPushButton::clicked, this, &TimelinePanel::reprofileRequested);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addWidget(m_staleBanner);
  layout->addLayout(bar);
  layout->addWidget(split, 1);

  connect(m_watcher, &QFutureWatcherBase::finished, this, [this] {
    LoadResult r = m_watcher->result();
    if (!r->ok()) {
      if (!m_quiet) {
        m_session->log("error", "timeline: " + fromStd(r->error().message));
        m_source->setText(tr("Could not open: %1").arg(fromStd(r->error().message)));
      } else {
        // A project's store without a profile (or none the timeline can read): the label no longer says Loading.
        m_source->setText(m_timeline ? fromStd(m_timeline->source) : tr("No profile"));
        m_source->setToolTip(fromStd(r->error().message));
      }
      emit failed(fromStd(r->error().message));
      return;
    }
    inspect::OpenedProfile opened = std::move(*r).value();
    std::shared_ptr<std::optional<train::ProfileDiff>> diff = std::move(m_loadingDiff);
    showProfile(opened.timeline(), opened.windows, opened.first);
    if (diff && *diff) {
      m_diff = std::move(**diff);
      m_colour->addItem(tr("Colour by change, B against A"), "change");
      setColourBy("change");
      showDiff();
    }
    m_session->log("info", tr("timeline: %1: %2 kernel launches on %n row(s)%3", "", static_cast<int>(m_timeline->rows.size()))
                               .arg(fromStd(m_timeline->source))
                               .arg(m_windows ? m_windows->launches() : static_cast<int64_t>(m_timeline->events.size()))
                               .arg(m_windows ? tr(", read a window at a time") : QString()));
    emit loaded();
  });
  connect(m_windowWatcher, &QFutureWatcherBase::finished, this, &TimelinePanel::onWindow);
  connect(m_statsWatcher, &QFutureWatcherBase::finished, this, [this] {
    StatsResult r = m_statsWatcher->result();
    if (m_pendingStats) {
      auto [from, to] = *m_pendingStats;
      m_pendingStats.reset();
      setRange(from, to);
      return;
    }
    if (m_statsOf != m_windows.get()) return;  // of a profile no longer shown
    if (!r->ok()) {
      m_rangeInfo->setText(tr("Could not sum the range: %1").arg(fromStd(r->error().message)));
      return;
    }
    m_stats = std::move(*r).value();
    showStats();
  });
  // A project's latest profile shows when it opens; the link to its graph is made once it is compiled.
  connect(m_session, &Session::projectOpened, this, [this] {
    // The last project's profile is not this one's: it goes, whether or not this project has one.
    if (m_timeline) showProfile(nullptr, nullptr, nullptr);
    // Quiet: a project that was never profiled is not an error.
    if (QFileInfo::exists(m_session->runsDbPath())) openProfile(m_session->runsDbPath(), 0, true);
    relink();
  });
  connect(m_session, &Session::stagesReady, this, &TimelinePanel::relink);
  connect(m_session, &Session::projectClosed, this, [this] { showProfile(nullptr, nullptr, nullptr); });
  connect(m_session, &Session::nodeSelected, this, &TimelinePanel::onNodeSelected);
}

TimelinePanel::~TimelinePanel() {
  m_watcher->waitForFinished();
  m_windowWatcher->waitForFinished();
  m_statsWatcher->waitForFinished();
}

bool TimelinePanel::loading() const { return m_watcher->isRunning(); }

bool TimelinePanel::fetching() const { return m_windowWatcher->isRunning() || m_statsWatcher->isRunning(); }

void TimelinePanel::startLoad(std::function<Result<inspect::OpenedProfile>()> load, const QString& what, bool quiet) {
  if (m_watcher->isRunning()) m_watcher->waitForFinished();
  m_quiet = quiet;
  m_source->setText(tr("Loading %1…").arg(what));
  m_loadingDiff.reset();
  m_watcher->setFuture(QtConcurrent::run([load] { return std::make_shared<Result<inspect::OpenedProfile>>(load()); }));
}

void TimelinePanel::compareRuns(const QString& dbPath, qint64 runA, qint64 runB) {
  std::string db = dbPath.toStdString();
  auto diff = std::make_shared<std::optional<train::ProfileDiff>>();
  startLoad([db, runA, runB, diff]() -> Result<inspect::OpenedProfile> {
    TSR_ASSIGN(inspect::ComparedProfiles c, inspect::compareProfiles(db, runA, runB));
    *diff = std::move(c.diff);
    inspect::OpenedProfile out;
    out.whole = std::make_shared<const inspect::Timeline>(std::move(c.timeline));
    return out;
  }, tr("run %1 against run %2").arg(runA).arg(runB), false);
  m_loadingDiff = diff;  // after startLoad, which forgets the last load's
}

std::vector<std::pair<qint64, QString>> TimelinePanel::compareCandidates() const {
  std::vector<std::pair<qint64, QString>> out;
  if (m_dbPath.isEmpty() || m_runA <= 0) return out;
  auto runs = inspect::profiledRuns(m_dbPath.toStdString(), m_runA);
  if (!runs.ok()) return out;
  for (const inspect::ProfiledRun& r : *runs) out.emplace_back(r.run, fromStd(r.label));
  return out;
}

void TimelinePanel::openProfile(const QString& dbPath, qint64 profileId, bool quiet) {
  std::string db = dbPath.toStdString();
  double width = m_canvas ? std::max(200.0, m_canvas->eventArea().width()) : 1600;
  // A profile from before the levels of detail gets them once; the label shows how far that is.
  QPointer<QLabel> label = m_source;
  auto progress = [label, dbPath](double f) {
    QMetaObject::invokeMethod(label, [label, dbPath, f] {
      if (label) label->setText(tr("Summarising %1 for the timeline… %2%").arg(dbPath).arg(static_cast<int>(100 * f)));
    }, Qt::QueuedConnection);
  };
  qint64 limit = m_wholeLimit;
  startLoad([db, profileId, width, progress, limit] { return inspect::openProfile(db, profileId, width, progress, limit); },
            dbPath, quiet);
}

void TimelinePanel::openTrace(const QString& path) {
  std::string p = path.toStdString();
  startLoad([p]() -> Result<inspect::OpenedProfile> {
    TSR_ASSIGN(inspect::Timeline t, inspect::readTraceTimeline(p));
    inspect::OpenedProfile out;
    out.whole = std::make_shared<const inspect::Timeline>(std::move(t));
    return out;
  }, path, false);
}

void TimelinePanel::setTimeline(TimelinePtr timeline) { showProfile(std::move(timeline), nullptr, nullptr); }

void TimelinePanel::requestWindow(double fromNs, double toNs, double nsPerPx) {
  if (!m_windows) return;
  if (m_windowWatcher->isRunning()) {
    m_pendingWindow = std::array<double, 3>{fromNs, toNs, nsPerPx};  // the latest wins
    return;
  }
  startWindow(fromNs, toNs, nsPerPx);
}

void TimelinePanel::startWindow(double fromNs, double toNs, double nsPerPx) {
  std::shared_ptr<inspect::ProfileWindows> windows = m_windows;
  m_windowWatcher->setFuture(QtConcurrent::run([windows, fromNs, toNs, nsPerPx] {
    return std::make_shared<Result<inspect::TimelineWindow>>(windows->window(fromNs, toNs, nsPerPx));
  }));
}

void TimelinePanel::onWindow() {
  WindowResult r = m_windowWatcher->result();
  if (m_pendingWindow) {
    auto [from, to, nsPerPx] = *m_pendingWindow;
    m_pendingWindow.reset();
    startWindow(from, to, nsPerPx);
  }
  if (!r->ok()) {
    m_session->log("error", "timeline: " + fromStd(r->error().message));
    return;
  }
  if (!m_windows || r->value().timeline->profileId != m_windows->profileId()) return;  // another profile since
  m_window = std::make_shared<const inspect::TimelineWindow>(std::move(*r).value());
  m_timeline = m_window->timeline;
  if (m_canvas) m_canvas->setWindowData(m_window);
  // The selected launch, if this window holds it.
  m_selected = -1;
  if (m_selectedKey) {
    const auto& [row, start, duration] = *m_selectedKey;
    for (size_t i = 0; i < m_timeline->events.size(); ++i) {
      const inspect::TimelineEvent& e = m_timeline->events[i];
      if (e.row == row && e.startNs == start && e.durationNs == duration) m_selected = static_cast<qint64>(i);
    }
  }
  if (m_canvas) m_canvas->setSelectedEvent(m_selected);
  updateInfo();
}

void TimelinePanel::showProfile(TimelinePtr timeline, std::shared_ptr<inspect::ProfileWindows> windows,
                         std::shared_ptr<const inspect::TimelineWindow> first) {
  m_windowWatcher->waitForFinished();
  m_statsWatcher->waitForFinished();
  m_pendingWindow.reset();
  m_pendingStats.reset();
  m_windows = std::move(windows);
  m_window = std::move(first);
  m_selectedKey.reset();
  m_timeline = std::move(timeline);
  m_selected = -1;
  m_stats.reset();
  m_table->setRowCount(0);
  m_diff.reset();
  if (int i = m_colour->findData("change"); i >= 0) {
    if (m_colour->currentIndex() == i) m_colour->setCurrentIndex(0);
    m_colour->removeItem(i);
  }
  // The store and run of a stored profile (or of a comparison's A), for Compare….
  m_runA = m_timeline ? m_timeline->runId : 0;
  m_dbPath = m_timeline ? fromStd(m_timeline->storePath) : QString();
  m_compare->setEnabled(m_runA > 0);
  if (m_canvas) m_canvas->setTimeline(m_timeline);
  if (m_canvas && m_window) m_canvas->setWindowData(m_window);
  m_source->setText(m_timeline ? fromStd(m_timeline->source) : tr("No profile"));
  m_source->setToolTip(m_source->text());
  m_linkedGraph = nullptr;
  relink();
  // A profile opens with the statistics of its first step.
  if (m_timeline && !m_timeline->spans.empty())
    setRange(m_timeline->spans.front().startNs, m_timeline->spans.front().startNs + m_timeline->spans.front().durationNs);
  else
    setRange(0, 0);
}

void TimelinePanel::relink() {
  m_linked = false;
  m_linkError.clear();
  int fs = m_session->profileStage();
  if (!m_timeline) {
    m_linkError = tr("no timeline");
  } else if (fs < 0) {
    m_linkError = tr("the project is not compiled yet");
  } else {
    const inspect::Stage& stage = (*m_session->stages())[static_cast<size_t>(fs)];
    Status ok = inspect::checkGraph(*m_timeline, *stage.graph);
    m_linked = ok.ok();
    if (!ok.ok()) m_linkError = fromStd(ok.error().message);
    if (!ok.ok() && m_linkedGraph != stage.graph.get())
      m_session->log("warning", tr("timeline: clicks select nothing in the graph: %1").arg(m_linkError));
    m_linkedGraph = stage.graph.get();
  }
  updateInfo();
  updateStale();
}

void TimelinePanel::updateStale() {
  // Compared once the project is compiled: its project.toml and the kernels of its fusion stage.
  m_stale.clear();
  int fs = m_session->profileStage();
  ProjectPtr project = m_session->project();
  // A comparison holds two profiles' kernels: each was the project's at its time, which is the point.
  if (m_timeline && project && fs >= 0 && !m_timeline->comparison) {
    const inspect::Stage& stage = (*m_session->stages())[static_cast<size_t>(fs)];
    if (stage.kernels && stage.kernels->error.empty()) {
      std::vector<inspect::CompiledKernel> kernels;
      for (const auto& k : stage.kernels->kernels) kernels.push_back({k.nodes, k.flops, k.bytes});
      m_stale = fromStd(inspect::profileStaleness(*m_timeline, project->project.text, kernels));
    }
  }
  m_staleText->setText(tr("<b>This profile is stale:</b> %1. Its times may not be the project's any more.").arg(m_stale.toHtmlEscaped()));
  m_staleBanner->setVisible(!m_stale.isEmpty());
}

void TimelinePanel::setRunning(bool running) { m_reprofile->setEnabled(!running); }

void TimelinePanel::selectEvent(qint64 event) {
  if (m_canvas) m_canvas->setSelectedEvent(event);
  onEventClicked(event);
}

void TimelinePanel::focusWorstCollective() {
  if (!m_timeline || !m_canvas) return;
  const int worst = inspect::worstCollective(*m_timeline);
  if (worst < 0) return;
  const inspect::TimelineCollective& c = m_timeline->collectives[static_cast<size_t>(worst)];
  // The member that waited longest, and the call from its first arrival to the straggler's end, with a margin.
  int64_t selected = -1, longest = -1, from = INT64_MAX, to = INT64_MIN;
  for (size_t m = 0; m < c.events.size(); ++m) {
    if (c.events[m] < 0) continue;
    const inspect::TimelineEvent& e = m_timeline->events[static_cast<size_t>(c.events[m])];
    from = std::min(from, e.startNs);
    to = std::max(to, e.endNs());
    if (c.call.members[m].waitNs > longest) {
      longest = c.call.members[m].waitNs;
      selected = c.events[m];
    }
  }
  if (selected < 0) return;
  const double pad = 0.25 * static_cast<double>(std::max<int64_t>(to - from, 1000));
  m_canvas->setWindow(static_cast<double>(from) - pad, static_cast<double>(to) + pad);
  selectEvent(selected);
}

void TimelinePanel::onEventClicked(qint64 event) {
  m_selected = m_timeline && event >= 0 && static_cast<size_t>(event) < m_timeline->events.size() ? event : -1;
  m_selectedKey.reset();
  if (m_selected >= 0) {
    const inspect::TimelineEvent& e = m_timeline->events[static_cast<size_t>(m_selected)];
    m_selectedKey = std::array<int64_t, 3>{e.row, e.startNs, e.durationNs};
  }
  if (m_selected >= 0 && m_linked) {
    const inspect::TimelineKernel* k = m_timeline->kernelOf(static_cast<uint32_t>(m_selected));
    if (k && !k->nodes.empty() && inspect::kernelOfGraph(*k)) m_session->selectKernelNodes(k->nodes);
  }
  updateInfo();
}

void TimelinePanel::onNodeSelected(int node) {
  if (!m_canvas) return;
  bool here = m_linked && node >= 0 && m_session->stage() && m_session->profileMapsTo(*m_session->stage());
  m_canvas->setHighlightedKernels(here ? m_timeline->kernelsWithNode(node) : std::vector<int>{});
  updateInfo();
}

void TimelinePanel::updateInfo() {
  QString text;
  if (m_timeline && m_selected >= 0) {
    const inspect::TimelineEvent& e = m_timeline->events[static_cast<size_t>(m_selected)];
    text = QString("%1: %2").arg(fromStd(m_timeline->nameOf(static_cast<uint32_t>(m_selected))),
                                 fromStd(inspect::formatTime(static_cast<double>(e.durationNs))));
    if (std::string c = inspect::collectiveSummary(*m_timeline, static_cast<uint32_t>(m_selected)); !c.empty())
      text += " — " + fromStd(c);
    else if (!m_linked && m_timeline->kernelOf(static_cast<uint32_t>(m_selected)))
      text += " — " + tr("not linked to the graph: %1").arg(m_linkError);
  } else if (m_canvas && !m_canvas->highlightedKernels().empty() && m_timeline) {
    size_t launches = 0;
    for (int k : m_canvas->highlightedKernels()) launches += m_timeline->kernels[static_cast<size_t>(k)].events.size();
    text = tr("node %1: %2 launches of %3").arg(m_session->selectedNode()).arg(launches)
               .arg(fromStd(m_timeline->kernels[static_cast<size_t>(m_canvas->highlightedKernels().front())].name));
  } else if (m_timeline && !m_linked && !m_timeline->kernels.empty()) {
    text = tr("not linked to the graph: %1").arg(m_linkError);
  }
  m_info->setText(text);
  m_info->setToolTip(text);
}

void TimelinePanel::setRange(qint64 fromNs, qint64 toNs) {
  if (!m_timeline || toNs <= fromNs) {
    m_stats.reset();
    m_table->setRowCount(0);
    if (m_canvas && m_canvas->range()) m_canvas->clearRange();
    m_rangeInfo->setText(tr("Shift-drag (or right-drag) over the timeline for the statistics of a time range."));
    return;
  }
  if (m_canvas && m_canvas->range() != std::pair<int64_t, int64_t>(fromNs, toNs)) m_canvas->setRange(fromNs, toNs);
  if (m_windows) {
    // Summed by SQLite over the range's launches, off the UI thread; a range asked for meanwhile waits its turn.
    if (m_statsWatcher->isRunning()) {
      m_pendingStats = std::make_pair(static_cast<int64_t>(fromNs), static_cast<int64_t>(toNs));
      return;
    }
    m_rangeInfo->setText(tr("Summing the range's launches…"));
    std::shared_ptr<inspect::ProfileWindows> windows = m_windows;
    m_statsOf = windows.get();
    m_statsWatcher->setFuture(QtConcurrent::run([windows, fromNs, toNs] {
      return std::make_shared<Result<inspect::RangeStats>>(windows->rangeStats(fromNs, toNs));
    }));
    return;
  }
  m_stats = inspect::rangeStats(*m_timeline, fromNs, toNs);
  showStats();
}

void TimelinePanel::showStats() {
  const inspect::RangeStats& s = *m_stats;
  setStatsHeaders(false);
  double span = static_cast<double>(s.toNs - s.fromNs);
  m_rangeInfo->setText(tr("%1 to %2 (%3): %4 kernel launches, %5 of kernel time")
                           .arg(fromStd(inspect::formatTime(static_cast<double>(s.fromNs), span / 100)),
                                fromStd(inspect::formatTime(static_cast<double>(s.toNs), span / 100)),
                                fromStd(inspect::formatTime(span)))
                           .arg(s.count)
                           .arg(fromStd(inspect::formatTime(static_cast<double>(s.totalNs)))));
  m_table->setSortingEnabled(false);
  m_table->setRowCount(static_cast<int>(s.kernels.size()));
  for (int i = 0; i < static_cast<int>(s.kernels.size()); ++i) {
    const inspect::KernelStat& k = s.kernels[static_cast<size_t>(i)];
    auto* name = new QTableWidgetItem(fromStd(k.name));
    name->setToolTip(name->text());
    m_table->setItem(i, 0, name);
    m_table->setItem(i, 1, new QTableWidgetItem(fromStd(k.kind)));
    m_table->setItem(i, 2, new NumberItem(QString::number(k.count), static_cast<double>(k.count)));
    m_table->setItem(i, 3, new NumberItem(fromStd(inspect::formatTime(static_cast<double>(k.totalNs))),
                                          static_cast<double>(k.totalNs)));
    m_table->setItem(i, 4, new NumberItem(fromStd(inspect::formatTime(k.meanNs())), k.meanNs()));
    m_table->setItem(i, 5, new NumberItem(QString("%1%").arg(100.0 * k.share, 0, 'f', 1), k.share));
  }
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(3, Qt::DescendingOrder);
  m_table->resizeColumnsToContents();
  m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
}

void TimelinePanel::setColourBy(const QString& mode) {
  int i = m_colour->findData(mode);
  if (i >= 0 && i != m_colour->currentIndex()) m_colour->setCurrentIndex(i);
  if (m_canvas)
    m_canvas->setColourBy(mode == "family"   ? TimelineCanvas::ColourBy::Family
                          : mode == "change" ? TimelineCanvas::ColourBy::Change
                                             : TimelineCanvas::ColourBy::Kind);
}

void TimelinePanel::setStatsHeaders(bool diff) {
  if (diff)
    m_table->setHorizontalHeaderLabels({tr("Kernel (A)"), tr("Kernel (B)"), tr("Kind"), tr("A per step"),
                                        tr("B per step"), tr("Change")});
  else
    m_table->setHorizontalHeaderLabels({tr("Kernel"), tr("Kind"), tr("Count"), tr("Total"), tr("Mean"), tr("Share")});
}

void TimelinePanel::showDiff() {
  const train::ProfileDiff& d = *m_diff;
  m_rangeInfo->setText(tr("A: run %1, %2 per step · B: run %3, %4 per step (%5%6%) · kernels paired by the graph "
                          "nodes they ran%7; shift-drag for a range's statistics")
                           .arg(d.a.run)
                           .arg(fromStd(inspect::formatTime(d.a.stepNs)))
                           .arg(d.b.run)
                           .arg(fromStd(inspect::formatTime(d.b.stepNs)))
                           .arg(d.b.stepNs >= d.a.stepNs ? "+" : "")
                           .arg(d.a.stepNs > 0 ? 100.0 * (d.b.stepNs / d.a.stepNs - 1) : 0.0, 0, 'f', 1)
                           .arg(d.sameGraph ? tr(", the same graph") : tr(", different graphs")));
  setStatsHeaders(true);
  m_table->setSortingEnabled(false);
  m_table->setRowCount(static_cast<int>(d.kernels.size()));
  for (int i = 0; i < static_cast<int>(d.kernels.size()); ++i) {
    const train::KernelTimeDiff& k = d.kernels[static_cast<size_t>(i)];
    auto* a = new QTableWidgetItem(fromStd(k.nameA));
    auto* b = new QTableWidgetItem(fromStd(k.nameB));
    a->setToolTip(a->text());
    b->setToolTip(b->text());
    m_table->setItem(i, 0, a);
    m_table->setItem(i, 1, b);
    m_table->setItem(i, 2, new QTableWidgetItem(fromStd(k.kind)));
    m_table->setItem(i, 3, new NumberItem(fromStd(inspect::formatTime(k.nsA)), k.nsA));
    m_table->setItem(i, 4, new NumberItem(fromStd(inspect::formatTime(k.nsB)), k.nsB));
    const double delta = k.nsB - k.nsA;
    m_table->setItem(i, 5, new NumberItem(QString("%1%2").arg(delta >= 0 ? "+" : "−",
                                                             fromStd(inspect::formatTime(std::abs(delta)))),
                                          std::abs(delta)));
  }
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(5, Qt::DescendingOrder);
  m_table->resizeColumnsToContents();
  m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
}

}  // namespace tsr::studio
