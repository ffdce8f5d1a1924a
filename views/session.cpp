#include "views/session.h"

#include <QDir>
#include <QFileInfo>
#include <QtConcurrent>

#include "engine/inspect/project_edit.h"

namespace tsr::studio {

// A profile read for reloadProfile()'s request `request`.
struct ProfileRead {
  quint64 request = 0;
  Result<inspect::ProfileTimes> times;
};

Session::Session(QObject* parent)
    : QObject(parent),
      m_openWatcher(new QFutureWatcher<std::shared_ptr<Result<inspect::ProjectSnapshot>>>(this)),
      m_compileWatcher(new QFutureWatcher<std::shared_ptr<Result<std::vector<inspect::Stage>>>>(this)),
      m_profileWatcher(new QFutureWatcher<std::shared_ptr<ProfileRead>>(this)) {
  connect(m_profileWatcher, &QFutureWatcherBase::finished, this, [this] {
    std::shared_ptr<ProfileRead> read = m_profileWatcher->result();
    if (read->request != m_profileRequest) return;  // asked again since, or the project changed
    m_profileReading = false;
    Result<inspect::ProfileTimes>& t = read->times;
    m_profileError = t.ok() ? QString() : QString::fromStdString(t.error().message);
    if (m_profileError.contains("another graph")) log("warning", "time overlay: " + m_profileError);
    if (t.ok()) {
      m_profile = std::make_shared<const inspect::ProfileTimes>(std::move(t).value());
      log("info", QString("profile %1 (%2): %3 kernels, %4 ms of kernel time over %5 steps")
                      .arg(m_profile->profile.id)
                      .arg(QString::fromStdString(m_profile->profile.name))
                      .arg(m_profile->kernels.size())
                      .arg(static_cast<double>(m_profile->totalNs) * 1e-6, 0, 'f', 1)
                      .arg(m_profile->steps));
    }
    emit profileChanged();
  });
  connect(m_openWatcher, &QFutureWatcherBase::finished, this, [this] {
    m_openRunning = false;
    if (!m_pendingOpen.isEmpty()) {
      // Stale already: the file changed again while this trace ran.
      const QString next = m_pendingOpen;
      m_pendingOpen.clear();
      openProject(next);
      return;
    }
    auto r = m_openWatcher->result();
    if (!r->ok()) {
      closeFailedProject(QString::fromStdString(r->error().message));
      return;
    }
    m_failedFile.clear();
    m_failedDir.clear();
    m_project = std::make_shared<const inspect::ProjectSnapshot>(std::move(*r).value());
    m_stages = std::make_shared<const std::vector<inspect::Stage>>(
        std::vector<inspect::Stage>{inspect::makeStage("traced", m_project->traced)});
    m_stage = 0;
    m_node = -1;
    m_kernelNodes.clear();
    log("info", QString("opened %1: %2 parameters, training step traced in %3 s (%4 nodes)")
                    .arg(QString::fromStdString(m_project->project.file))
                    .arg(m_project->numParams)
                    .arg(m_project->traceSeconds, 0, 'f', 2)
                    .arg(m_project->traced->nodes().size()));
    emit projectOpened();
    emit stagesReady();
    emit stageChanged(m_stage);
    compile();
  });
  connect(m_compileWatcher, &QFutureWatcherBase::finished, this, [this] {
    auto r = m_compileWatcher->result();
    // Compiled for a project that has gone since (it failed to open again): nothing to show.
    if (!m_project || m_compiling != m_project) return;
    if (!r->ok()) {
      log("error", "compile: " + QString::fromStdString(r->error().message));
      return;
    }
    m_stages = std::make_shared<const std::vector<inspect::Stage>>(std::move(*r).value());
    QStringList names;
    for (const auto& s : *m_stages) names << QString::fromStdString(s.name);
    log("info", QString("compiled: %1 stages (%2)").arg(m_stages->size()).arg(names.join(", ")));
    // Fusion's notes and rejections (one per kernel, one per node not fused) are many on a big model: the
    // fusion stage is summed up here, and each node's decisions are in the inspector.
    for (const auto& s : *m_stages) {
      int fusionRejected = 0;
      for (const auto& d : s.decisions) {
        if (d.pass == "fusion") {
          fusionRejected += d.kind == passes::Decision::Kind::Rejected;
          continue;
        }
        if (d.kind != passes::Decision::Kind::Applied) log("info", QString::fromStdString(d.toString()));
      }
      if (s.fusion) {
        int fused = 0;
        for (const auto& k : s.fusion->groups) fused += k.nodes.size() > 1;
        QString kernels = s.kernels && s.kernels->error.empty()
                              ? QString(", %1 CPU launches, arena %2")
                                    .arg(s.kernels->kernels.size())
                                    .arg(QString::fromStdString(inspect::formatBytes(s.kernels->memory.arenaBytes)))
                              : s.kernels ? ", CPU backend: " + QString::fromStdString(s.kernels->error) : QString();
        log("info", QString("fusion: %1 kernels, %2 of several ops%3; %4 decisions not to fuse (a node's are in the "
                            "inspector)")
                        .arg(s.fusion->numKernels())
                        .arg(fused)
                        .arg(kernels)
                        .arg(fusionRejected));
      }
    }
    restoreSelection();
    reloadProfile();
    emit stagesReady();
    if (m_node >= 0) {
      emit stageChanged(m_stage);
      emit nodeSelected(m_node);
    }
  });
}

void Session::closeFailedProject(const QString& message) {
  // The file the error names, or the project.toml of the folder that was opened.
  const std::string named = inspect::errorLocation(message.toStdString()).file;
  const QFileInfo opened(m_opening);
  m_failedFile = !named.empty() ? QString::fromStdString(named)
                 : opened.isDir() ? QDir(m_opening).filePath("project.toml") : m_opening;
  m_failedDir = QDir::cleanPath(opened.isDir() ? opened.absoluteFilePath() : opened.absolutePath());
  // The last project goes: its graph, stages, selection, profile and plan are not the new project's. A compile
  // of it still under way is let run out and dropped (see the compile watcher).
  m_project.reset();
  m_stages.reset();
  m_stage = 0;
  m_node = -1;
  m_kernelNodes.clear();
  m_pair = {-1, -1};
  dropProfileRead();
  m_profile.reset();
  m_profileError = tr("the project did not open");
  m_sharding.reset();
  log("error", message);
  emit projectClosed();
  emit nodeSelected(-1);
  emit profileChanged();
  emit shardingChanged();
  emit projectFailed(message);
}

void Session::restoreSelection() {
  if (!m_keep || !m_stages) return;
  const KeptSelection keep = *m_keep;
  m_keep.reset();
  for (size_t s = 0; s < m_stages->size(); ++s) {
    const inspect::Stage& stage = (*m_stages)[s];
    if (stage.name != keep.stage) continue;
    int seen = 0, found = -1;
    const auto& nodes = stage.graph->nodes();
    for (size_t i = 0; i < nodes.size() && seen <= keep.ordinal; ++i)
      if (nodes[i].op == keep.op && nodes[i].prov == keep.prov) {
        found = static_cast<int>(i);  // the kept one, or the last of the same kind when there are fewer now
        ++seen;
      }
    if (found < 0) return;
    m_stage = static_cast<int>(s);
    m_node = found;
    return;
  }
}

Session::~Session() {
  m_openWatcher->waitForFinished();
  m_compileWatcher->waitForFinished();
  m_profileWatcher->waitForFinished();
}

bool Session::opening() const { return m_openRunning; }

bool Session::busy() const {
  return m_openWatcher->isRunning() || m_compileWatcher->isRunning() || m_profileReading;
}

void Session::openProject(const QString& path) {
  if (m_openWatcher->isRunning()) {
    m_pendingOpen = path;
    return;
  }
  const QFileInfo info(path);
  const QString dir = QDir::cleanPath(info.isDir() ? info.absoluteFilePath() : info.absolutePath());
  // A selection kept through a failed open of the same project stays for the open that fixes it.
  if (m_keep && (m_project || m_keep->dir != dir)) m_keep.reset();
  if (const inspect::Stage* s = stage(); s && m_node >= 0 && m_node < static_cast<int>(s->graph->nodes().size()) &&
                                          dir == QDir::cleanPath(QFileInfo(projectDir()).absoluteFilePath())) {
    const ir::Node& n = s->graph->nodes()[static_cast<size_t>(m_node)];
    KeptSelection keep{dir, s->name, n.op, n.prov, 0};
    for (int i = 0; i < m_node; ++i) {
      const ir::Node& m = s->graph->nodes()[static_cast<size_t>(i)];
      keep.ordinal += m.op == n.op && m.prov == n.prov;
    }
    m_keep = keep;
  }
  log("info", "opening " + path);
  m_opening = path;
  dropProfileRead();
  m_profile.reset();
  m_profileError.clear();
  m_sharding.reset();
  std::string p = QDir::cleanPath(path).toStdString();
  m_openWatcher->setFuture(QtConcurrent::run([p] {
    return std::make_shared<Result<inspect::ProjectSnapshot>>(inspect::openProject(p));
  }));
  m_openRunning = true;
  emit projectOpening(path);
}

void Session::compile() {
  m_compiling = m_project;
  auto traced = m_project->traced;
  m_compileWatcher->setFuture(QtConcurrent::run([traced] {
    return std::make_shared<Result<std::vector<inspect::Stage>>>(inspect::compileStages(traced));
  }));
}

QString Session::projectDir() const { return m_project ? QString::fromStdString(m_project->project.dir) : QString(); }
QString Session::projectFile() const { return m_project ? QString::fromStdString(m_project->project.file) : QString(); }
QString Session::runsDbPath() const { return m_project ? QDir(projectDir()).filePath("runs.db") : QString(); }

const inspect::Stage* Session::stage() const {
  if (!m_stages || m_stage < 0 || m_stage >= static_cast<int>(m_stages->size())) return nullptr;
  return &(*m_stages)[static_cast<size_t>(m_stage)];
}

void Session::setCurrentStage(int index) {
  if (!m_stages || index < 0 || index >= static_cast<int>(m_stages->size()) || index == m_stage) return;
  m_stage = index;
  m_node = -1;
  m_kernelNodes.clear();
  emit stageChanged(index);
  emit nodeSelected(-1);
}

void Session::selectNode(int node) {
  if (node == m_node && m_pair.first < 0) return;
  m_node = node;
  m_kernelNodes.clear();
  m_pair = {-1, -1};
  emit nodeSelected(node);
}

void Session::selectPair(int a, int b) {
  m_pair = {a, b};
  m_node = a;
  m_kernelNodes.clear();
  emit pairSelected(a, b);
}

void Session::selectKernelNodes(const std::vector<int>& nodes) {
  int fs = profileStage();
  if (fs < 0 || nodes.empty()) return;
  setCurrentStage(fs);
  // Set before the signal: the panels read the kernel's nodes when they show the first one.
  m_kernelNodes = nodes;
  m_pair = {-1, -1};
  m_node = nodes.front();
  emit nodeSelected(m_node);
}

int Session::profileStage() const {
  if (!m_stages) return -1;
  for (size_t i = 0; i < m_stages->size(); ++i)
    if ((*m_stages)[i].fusion) return static_cast<int>(i);
  return -1;
}

bool Session::profileMapsTo(const inspect::Stage& stage) const {
  int fs = profileStage();
  return fs >= 0 && inspect::sameGraph((*m_stages)[static_cast<size_t>(fs)], stage);
}

std::vector<int> Session::profileStages() const {
  std::vector<int> out;
  if (profileStage() < 0) return out;
  for (size_t i = 0; i < m_stages->size(); ++i)
    if (profileMapsTo((*m_stages)[i])) out.push_back(static_cast<int>(i));
  return out;
}

void Session::dropProfileRead() {
  ++m_profileRequest;
  m_profileReading = false;
}

void Session::reloadProfile() {
  dropProfileRead();
  m_profile.reset();
  const int fs = profileStage();
  if (fs < 0) {
    m_profileError = tr("the project is not compiled yet");
    emit profileChanged();
    return;
  }
  // Every kernel and event of the latest profile, mapped onto the fusion stage's graph: read on a worker thread
  // with a connection of its own, once per compile or profile run (nothing to poll).
  m_profileError = tr("reading the profile");
  m_profileReading = true;
  m_profileWatcher->setFuture(QtConcurrent::run(
      [request = m_profileRequest, path = runsDbPath().toStdString(), stages = m_stages, fs] {
        const ir::Graph& graph = *(*stages)[static_cast<size_t>(fs)].graph;
        return std::make_shared<ProfileRead>(ProfileRead{request, inspect::loadProfileTimes(path, graph)});
      }));
}

void Session::log(const QString& level, const QString& text) { emit message(level, text); }

}  // namespace tsr::studio
