// Dense metrics, both ends (issue 21: "1M points per metric drawn in under 16 ms per frame; write overhead under
// 1% of a gpt2_mini step"). Prints one JSON object.
//
// Drawing: a run store with M metrics (loss, grad_norm, ...) of N points each (a point every step, with one-step
// spikes), opened in the Metrics panel (views/metrics_panel.h) as the IDE does, whose chart view is W x H. A frame
// is: set the visible x range (the panel reduces every curve to min/max per pixel column and hands Qt the
// result), let Qt lay the chart out, and render the chart view into a QImage, as a paint does. Timed:
//   - whole: every point visible in every frame (the reduction scans all N points of each metric);
//   - zoom: a sweep from the whole run down to ~2,000 steps and back while panning, as a user zooms;
//   - smoothed: the whole run with smoothing 0.6 (each metric drawn twice: the smoothed curve and the raw one).
// The peer, in the same run: the same chart with all N points of each metric given to its QLineSeries (what the
// panel did before, and what Qt Charts does unaided), a few frames of the same two kinds.
//
// Writing: 6 scalars a step (loss, lr, grad_norm, tokens_per_s, step_time, mfu) logged into a fresh run store
// (SQLite, WAL) for S steps, one transaction a step (RunStore::logMetrics) and B steps a transaction
// (RunStore::logMetricsBatch), per step in microseconds; and, with a tessera binary, gpt2_mini's median training
// step from `tessera bench` in the same run, so the write cost is given as a fraction of that step.
//
//   QT_QPA_PLATFORM=offscreen build/tests/bench/bench_metrics [--points 1000000] [--frames 60]
//       [--tessera build/app/cli/tessera] [--screenshot metrics.png]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineSeries>
#include <QPainter>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <QValueAxis>

#include "engine/store/run_store.h"
#include "views/metrics_panel.h"
#include "views/session.h"

using namespace tsr;
using tsr::studio::MetricsPanel;

namespace {

double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the whole process: on a shared machine, unlike the wall time, it does not count the time other
// processes held the cores.
double processCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }
double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

const char* const kMetricNames[] = {"loss", "grad_norm", "lr", "tokens_per_s", "step_time", "mfu"};

// Metric m at a step: a noisy curve with a one-step spike every 100,003 steps.
double metricAt(int m, int64_t step, std::mt19937& rng) {
  std::normal_distribution<double> noise(0, 0.02);
  const double t = static_cast<double>(step);
  double v = m == 0 ? 2.0 + 8.0 / (1.0 + 1e-4 * t) : 1.0 + 0.3 * std::cos(1e-4 * t * (m + 1));
  if (step % 100'003 == 50'000) v *= 4;
  return v + noise(rng);
}

// One finished run of `metrics` metrics, `points` steps, written in batches of 50,000 steps.
bool fillStore(const std::string& path, int64_t points, int metrics) {
  auto s = store::RunStore::open(path);
  if (!s.ok()) return false;
  auto run = s->createRun("dense", "bench", "");
  if (!run.ok()) return false;
  std::mt19937 rng(1);
  std::vector<store::StepMetrics> batch;
  for (int64_t step = 0; step < points; ++step) {
    store::StepMetrics sm{step, 1.7e9 + 0.1 * static_cast<double>(step), {}};
    for (int m = 0; m < metrics; ++m) sm.values.emplace_back(kMetricNames[m], metricAt(m, step, rng));
    batch.push_back(std::move(sm));
    if (batch.size() == 50'000 || step + 1 == points) {
      if (!s->logMetricsBatch(*run, batch).ok()) return false;
      batch.clear();
    }
  }
  return s->finishRun(*run, store::RunStatus::Finished).ok();
}

struct Frames {
  std::vector<double> ms, cpuMs, rangeMs, paintMs;
  double drawnPoints = 0;  // points handed to Qt per frame, mean
};

void print(const char* name, const Frames& f, bool comma) {
  std::printf("    \"%s\": {\"frames\": %zu, \"median_ms\": %.3f, \"p95_ms\": %.3f, \"max_ms\": %.3f, \"mean_ms\": %.3f, "
              "\"cpu_median_ms\": %.3f, \"range_median_ms\": %.3f, \"paint_median_ms\": %.3f, \"points_drawn\": %.0f}%s\n",
              name, f.ms.size(), median(f.ms), quantile(f.ms, 0.95), quantile(f.ms, 1.0), mean(f.ms), median(f.cpuMs),
              median(f.rangeMs), median(f.paintMs), f.drawnPoints, comma ? "," : "");
}

// Frame i of n of a zoom sweep over [0, extent]: the span shrinks geometrically to minSpan and grows back while
// its centre wanders across the run; `whole` keeps every frame at the whole run.
std::pair<double, double> frameRange(int i, int n, double extent, double minSpan, bool whole) {
  if (whole) return {0, extent};
  double phase = n > 1 ? static_cast<double>(i) / (n - 1) : 0;
  double depth = 1 - std::abs(2 * phase - 1);
  double span = extent * std::pow(minSpan / extent, depth);
  double centre = extent * (0.1 + 0.8 * phase);
  double start = std::clamp(centre - span / 2, 0.0, extent - span);
  return {start, start + span};
}

// Draws n frames: setRange(x0, x1) (the view's work for a new range), the events it posted (layout), and the
// chart view rendered into `image`. A budget in ms stops a slow peer early.
template <class SetRange, class Drawn>
Frames drawFrames(QChartView* view, QImage& image, int n, double extent, bool whole, double budgetMs,
                  SetRange setRange, Drawn drawn) {
  Frames f;
  double started = nowMs();
  for (int i = 0; i < n && nowMs() - started < budgetMs; ++i) {
    auto [x0, x1] = frameRange(i, n, extent, 2000, whole);
    double cpu0 = processCpuMs(), t0 = nowMs();
    setRange(x0, x1);
    QCoreApplication::processEvents();
    double t1 = nowMs();
    {
      QPainter p(&image);
      view->render(&p);
    }
    double t2 = nowMs();
    f.ms.push_back(t2 - t0);
    f.rangeMs.push_back(t1 - t0);
    f.paintMs.push_back(t2 - t1);
    f.cpuMs.push_back(processCpuMs() - cpu0);
    f.drawnPoints += static_cast<double>(drawn());
  }
  if (!f.ms.empty()) f.drawnPoints /= static_cast<double>(f.ms.size());
  return f;
}

// The peer: a chart like the panel's (same size, antialiased 2 px lines, legend below) with every point of each
// metric in its series.
struct NaiveChart {
  QChartView view;
  QChart* chart = new QChart;
  QValueAxis* x = new QValueAxis;
  QValueAxis* y = new QValueAxis;
  std::vector<QLineSeries*> series;
  double loadMs = 0;

  NaiveChart(const std::string& path, int metrics, QSize size) {
    chart->legend()->setAlignment(Qt::AlignBottom);
    chart->setMargins(QMargins(4, 4, 4, 4));
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
    view.setChart(chart);
    view.setRenderHint(QPainter::Antialiasing);
    view.setAttribute(Qt::WA_DontShowOnScreen);
    view.resize(size);
    view.show();
    auto s = store::RunStore::openReadOnly(path);
    const QColor colors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(214, 39, 40)};
    double t0 = nowMs();
    double ymin = INFINITY, ymax = -INFINITY;
    for (int m = 0; m < metrics && s.ok(); ++m) {
      auto pts = s->metrics(1, kMetricNames[m]);
      if (!pts.ok()) continue;
      QList<QPointF> list;
      list.reserve(static_cast<qsizetype>(pts->size()));
      for (const store::MetricPoint& p : *pts) {
        list.append(QPointF(static_cast<double>(p.step), p.value));
        ymin = std::min(ymin, p.value);
        ymax = std::max(ymax, p.value);
      }
      auto* line = new QLineSeries;
      line->setName(kMetricNames[m]);
      line->setPen(QPen(colors[m % 4], 2));
      line->replace(list);
      chart->addSeries(line);
      line->attachAxis(x);
      line->attachAxis(y);
      series.push_back(line);
    }
    y->setRange(ymin, ymax);
    QCoreApplication::processEvents();
    loadMs = nowMs() - t0;
  }
  int64_t points() const {
    int64_t n = 0;
    for (QLineSeries* s : series) n += s->count();
    return n;
  }
};

struct Writes {
  std::vector<double> perCallUs;  // logMetrics: one transaction per step
  double batchedPerStepUs = 0;    // logMetricsBatch: `batch` steps per transaction
};

Writes measureWrites(const std::string& dir, int steps, int batch) {
  Writes w;
  std::mt19937 rng(2);
  {
    auto s = store::RunStore::open(dir + "/per_step.db");
    if (!s.ok()) return w;
    int64_t run = *s->createRun("writes", "bench", "");
    for (int step = 0; step < steps; ++step) {
      std::vector<std::pair<std::string, double>> values;
      for (int m = 0; m < 6; ++m) values.emplace_back(kMetricNames[m], metricAt(m, step, rng));
      double t0 = nowMs();
      if (!s->logMetrics(run, step, values).ok()) return w;
      w.perCallUs.push_back((nowMs() - t0) * 1e3);
    }
  }
  auto s = store::RunStore::open(dir + "/batched.db");
  if (!s.ok()) return w;
  int64_t run = *s->createRun("writes", "bench", "");
  std::vector<store::StepMetrics> pending;
  double total = 0;
  for (int step = 0; step < steps; ++step) {
    store::StepMetrics sm{step, 0, {}};
    for (int m = 0; m < 6; ++m) sm.values.emplace_back(kMetricNames[m], metricAt(m, step, rng));
    pending.push_back(std::move(sm));
    if (static_cast<int>(pending.size()) == batch || step + 1 == steps) {
      double t0 = nowMs();
      if (!s->logMetricsBatch(run, pending).ok()) return w;
      total += nowMs() - t0;
      pending.clear();
    }
  }
  w.batchedPerStepUs = total * 1e3 / steps;
  return w;
}

// gpt2_mini's median training step (s) from `tessera bench PROJECT --json`, or why there is none.
QJsonObject gpt2MiniStep(const QString& tessera, const QString& project, int steps) {
  if (tessera.isEmpty() || !QFileInfo(tessera).isExecutable())
    return {{"skipped", QString("no tessera binary at '%1' (--tessera)").arg(tessera)}};
  QProcess p;
  p.start(tessera, {"bench", project, "--json", "--sgemm", "0", "--steps", QString::number(steps), "--warmup", "1"});
  if (!p.waitForFinished(600'000) || p.exitCode() != 0)
    return {{"failed", QString::fromUtf8(p.readAllStandardError().right(400))}};
  QList<QByteArray> lines = p.readAllStandardOutput().trimmed().split('\n');
  QJsonObject r = QJsonDocument::fromJson(lines.value(lines.size() - 1)).object();
  if (!r.contains("median_step_s")) return {{"failed", "no median_step_s in tessera bench's output"}};
  return {{"project", project},        {"median_step_s", r["median_step_s"]}, {"min_step_s", r["min_step_s"]},
          {"step_times_s", r["step_times_s"]}, {"threads", r["threads"]}};
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QCommandLineParser parser;
  parser.addHelpOption();
  QCommandLineOption pointsOpt("points", "Points per metric (one a step)", "N", "1000000");
  QCommandLineOption metricsOpt("metrics", "Metrics in the chart (1 to 6)", "M", "2");
  QCommandLineOption framesOpt("frames", "Frames of each kind drawn with level of detail", "F", "60");
  QCommandLineOption peerOpt("peer-frames", "Frames of each kind drawn with every point (the peer; 0: none)", "P", "3");
  QCommandLineOption widthOpt("width", "Chart view width", "PX", "1600");
  QCommandLineOption heightOpt("height", "Chart view height", "PX", "900");
  QCommandLineOption writeOpt("write-steps", "Training steps logged to time the store's writes (0: none)", "S", "20000");
  QCommandLineOption batchOpt("batch", "Steps per transaction of the batched writes", "B", "100");
  QCommandLineOption tesseraOpt("tessera", "The tessera binary, to time a gpt2_mini step (empty: skip)", "PATH",
                                TSR_TESSERA_BIN);
  QCommandLineOption projectOpt("project", "The project whose step the writes are compared with", "DIR",
                                TSR_SOURCE_DIR "/sample_projects/gpt2_mini");
  QCommandLineOption stepsOpt("step-steps", "Timed steps of tessera bench (0: skip the step)", "K", "10");
  QCommandLineOption shotOpt("screenshot", "Save the whole-run frame to FILE", "FILE");
  parser.addOptions({pointsOpt, metricsOpt, framesOpt, peerOpt, widthOpt, heightOpt, writeOpt, batchOpt, tesseraOpt,
                     projectOpt, stepsOpt, shotOpt});
  parser.process(app);
  const int64_t points = parser.value(pointsOpt).toLongLong();
  const int metrics = std::clamp(parser.value(metricsOpt).toInt(), 1, 6);
  const int frames = parser.value(framesOpt).toInt(), peerFrames = parser.value(peerOpt).toInt();
  const QSize size(parser.value(widthOpt).toInt(), parser.value(heightOpt).toInt());

  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  double t0 = nowMs();
  if (!fillStore(db, points, metrics)) {
    std::fprintf(stderr, "bench_metrics: could not write %s\n", db.c_str());
    return 1;
  }
  const double fillMs = nowMs() - t0;

  // The panel, its chart view W x H.
  studio::Session session;
  MetricsPanel panel(&session);
  panel.setAttribute(Qt::WA_DontShowOnScreen);  // laid out and visible, drawn only into the image
  panel.resize(size + QSize(200, 100));
  panel.show();
  QChartView* view = panel.chartView();
  panel.resize(panel.size() + (size - view->size()));
  QStringList keys;
  for (int m = 0; m < metrics; ++m) keys << kMetricNames[m];
  t0 = nowMs();
  panel.setSmoothing(0);
  panel.setDatabase(QString::fromStdString(db));
  panel.setMetrics(keys);
  // The store is read on the panel's reader thread: loaded once its answer is drawn.
  const bool laidOut = QTest::qWaitFor([&] {
    return !panel.reading() && panel.plotColumns() == static_cast<int>(std::lround(view->chart()->plotArea().width()));
  }, 60000);
  const double loadMs = nowMs() - t0;
  if (!laidOut) {
    std::fprintf(stderr, "bench_metrics: the panel reduced for %d columns, its plot is %.0f px wide\n",
                 panel.plotColumns(), view->chart()->plotArea().width());
    return 1;
  }
  if (static_cast<int64_t>(panel.points(1, "loss").size()) != points) {
    std::fprintf(stderr, "bench_metrics: the panel holds %zu points of loss, not %lld\n", panel.points(1, "loss").size(),
                 static_cast<long long>(points));
    return 1;
  }
  // Each frame is painted once, into the image: the widgets do not also repaint themselves.
  panel.setUpdatesEnabled(false);
  QImage image(view->size(), QImage::Format_ARGB32_Premultiplied);
  image.fill(Qt::white);
  const double extent = static_cast<double>(points - 1);
  auto lodRange = [&](double x0, double x1) { panel.setXRange(x0, x1); };
  auto lodDrawn = [&] {
    int64_t n = 0;
    for (const QString& k : keys) n += panel.curve(1, k).size() + panel.rawCurve(1, k).size();
    return n;
  };
  drawFrames(view, image, 3, extent, true, 1e9, lodRange, lodDrawn);  // warm: fonts, caches
  if (parser.isSet(shotOpt)) image.save(parser.value(shotOpt));
  Frames whole = drawFrames(view, image, frames, extent, true, 1e9, lodRange, lodDrawn);
  Frames zoom = drawFrames(view, image, frames, extent, false, 1e9, lodRange, lodDrawn);
  panel.setSmoothing(0.6);
  Frames smoothed = drawFrames(view, image, frames, extent, true, 1e9, lodRange, lodDrawn);
  const int columns = panel.plotColumns();
  panel.hide();

  Frames naiveWhole, naiveZoom;
  double naiveLoadMs = 0;
  if (peerFrames > 0) {
    NaiveChart naive(db, metrics, size);
    naiveLoadMs = naive.loadMs;
    auto naiveRange = [&](double x0, double x1) { naive.x->setRange(x0, x1); };
    auto naiveDrawn = [&] { return naive.points(); };
    naiveWhole = drawFrames(&naive.view, image, peerFrames, extent, true, 60'000, naiveRange, naiveDrawn);
    naiveZoom = drawFrames(&naive.view, image, peerFrames, extent, false, 60'000, naiveRange, naiveDrawn);
  }

  const int writeSteps = parser.value(writeOpt).toInt(), batch = std::max(1, parser.value(batchOpt).toInt());
  Writes writes = writeSteps > 0 ? measureWrites(dir.path().toStdString(), writeSteps, batch) : Writes{};
  QJsonObject step = parser.value(stepsOpt).toInt() > 0
                         ? gpt2MiniStep(parser.value(tesseraOpt), parser.value(projectOpt), parser.value(stepsOpt).toInt())
                         : QJsonObject{{"skipped", "--step-steps 0"}};

  double load[1] = {0};
  getloadavg(load, 1);  // other work on a shared machine slows every frame: keep the load with the figures
  std::printf("{\n  \"bench\": \"metrics\",\n  \"platform\": \"%s\",\n  \"load_average\": %.2f,\n",
              qPrintable(QGuiApplication::platformName()), load[0]);
  std::printf("  \"points_per_metric\": %lld,\n  \"metrics\": %d,\n", static_cast<long long>(points), metrics);
  std::printf("  \"chart_view\": [%d, %d],\n  \"plot_columns\": %d,\n  \"target_ms\": 16,\n", view->width(),
              view->height(), columns);
  std::printf("  \"store_fill_s\": %.3f,\n  \"panel_load_ms\": %.1f,\n", fillMs / 1e3, loadMs);
  std::printf("  \"lod\": {\n");
  print("whole", whole, true);
  print("zoom", zoom, true);
  print("smoothed_whole", smoothed, false);
  std::printf("  },\n");
  if (peerFrames > 0) {
    std::printf("  \"naive\": {\n    \"load_ms\": %.1f,\n", naiveLoadMs);
    print("whole", naiveWhole, true);
    print("zoom", naiveZoom, false);
    std::printf("  },\n  \"ratios\": {\"whole\": %.1f, \"zoom\": %.1f},\n", median(naiveWhole.ms) / median(whole.ms),
                median(naiveZoom.ms) / median(zoom.ms));
  }
  const double perCall = mean(writes.perCallUs);
  std::printf("  \"store_writes\": {\"steps\": %d, \"metrics_per_step\": 6, \"per_step_us\": {\"mean\": %.2f, "
              "\"median\": %.2f, \"p99\": %.2f, \"max\": %.2f}, \"batched\": {\"steps_per_transaction\": %d, "
              "\"per_step_us\": %.2f}},\n",
              writeSteps, perCall, median(writes.perCallUs), quantile(writes.perCallUs, 0.99),
              quantile(writes.perCallUs, 1.0), batch, writes.batchedPerStepUs);
  QJsonObject gpt2 = step;
  if (step.contains("median_step_s") && writeSteps > 0) {
    const double stepUs = step["median_step_s"].toDouble() * 1e6;
    gpt2["write_overhead_per_step"] = perCall / stepUs;
    gpt2["write_overhead_batched"] = writes.batchedPerStepUs / stepUs;
    gpt2["target"] = 0.01;
  }
  std::printf("  \"gpt2_mini\": %s\n}\n", QJsonDocument(gpt2).toJson(QJsonDocument::Compact).constData());
  return 0;
}
