// The Timeline canvas's frame time with a million kernels (DESIGN: "a million events stay interactive").
// Draws F frames of a synthetic profile (engine/inspect's syntheticTimeline: 8 rows of a made-up training step)
// into the canvas's framebuffer, each a step of a zoom sweep from the whole run down to a few microseconds and
// back while panning, and times each frame from ImGui's NewFrame to glFinish (ImGuiWidget::renderNow). The peer,
// in the same run: the same frames with folding off (every kernel its own box), fewer of them.
//
// Needs an OpenGL platform: run under Xvfb, e.g.
//   xvfb-run -a -s "-screen 0 1920x1080x24" env QT_QPA_PLATFORM=xcb build/tests/bench/bench_timeline
// Prints JSON; exits 77 (skipped) without an OpenGL context. --trace FILE draws a trace file instead (and
// times its loading); --screenshot FILE saves the whole-timeline frame.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <vector>

#include <QApplication>
#include <QCommandLineParser>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QTest>

#include "engine/inspect/timeline.h"
#include "views/timeline_canvas.h"

using tsr::studio::TimelineCanvas;

namespace {

// CPU time of the whole process (llvmpipe rasterises on threads of its own): on a shared machine, unlike the
// wall time, it does not count the time other processes held the cores.
double processCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double meanOf(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double maxOf(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
double p95Of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(0.95 * static_cast<double>(v.size() - 1))];
}

struct Series {
  std::vector<double> ms;     // wall time per frame
  std::vector<double> cpuMs;  // process CPU time per frame
  std::vector<double> boxes;
  double mean() const { return meanOf(ms); }
  double max() const { return maxOf(ms); }
  double p95() const { return p95Of(ms); }
  double meanBoxes() const {
    return boxes.empty() ? 0 : std::accumulate(boxes.begin(), boxes.end(), 0.0) / static_cast<double>(boxes.size());
  }
};

// Frame i of n: the visible span shrinks geometrically from the whole run to `minSpan` and grows back, its
// centre wandering across the run.
Series sweep(TimelineCanvas& c, int frames, double extent, double minSpan) {
  Series s;
  for (int i = 0; i < frames; ++i) {
    double phase = frames > 1 ? static_cast<double>(i) / (frames - 1) : 0;  // 0 .. 1
    double depth = 1 - std::abs(2 * phase - 1);                          // 0 .. 1 .. 0
    double span = extent * std::pow(minSpan / extent, depth);
    double centre = extent * (0.1 + 0.8 * phase);
    double start = std::clamp(centre - span / 2, 0.0, extent - span);
    c.setWindow(start, start + span);
    double cpu0 = processCpuMs();
    double ms = c.renderNow();
    s.cpuMs.push_back(processCpuMs() - cpu0);
    s.ms.push_back(ms);
    s.boxes.push_back(static_cast<double>(c.lastBoxCount()));
  }
  return s;
}

void print(const char* name, const Series& s, bool comma) {
  std::printf("  \"%s\": {\"frames\": %zu, \"mean_ms\": %.3f, \"p95_ms\": %.3f, \"max_ms\": %.3f, \"cpu_mean_ms\": %.3f, "
              "\"cpu_p95_ms\": %.3f, \"cpu_max_ms\": %.3f, \"boxes_mean\": %.0f}%s\n",
              name, s.ms.size(), s.mean(), s.p95(), s.max(), meanOf(s.cpuMs), p95Of(s.cpuMs), maxOf(s.cpuMs),
              s.meanBoxes(), comma ? "," : "");
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QCommandLineParser parser;
  parser.addHelpOption();
  QCommandLineOption eventsOpt("events", "Kernel launches in the synthetic profile", "N", "1000000");
  QCommandLineOption framesOpt("frames", "Frames drawn with folding", "F", "200");
  QCommandLineOption peerOpt("peer-frames", "Frames drawn without folding (the peer; 0: none)", "P", "10");
  QCommandLineOption widthOpt("width", "Canvas width", "PX", "1600");
  QCommandLineOption heightOpt("height", "Canvas height", "PX", "500");
  QCommandLineOption traceOpt("trace", "Draw this Chrome/Perfetto trace JSON instead (its load time is reported)", "FILE");
  QCommandLineOption shotOpt("screenshot", "Save the first frame (the whole timeline) to FILE", "FILE");
  parser.addOptions({eventsOpt, framesOpt, peerOpt, widthOpt, heightOpt, traceOpt, shotOpt});
  parser.process(app);

  QOpenGLContext probe;
  if (QGuiApplication::platformName() == "offscreen" || !probe.create()) {
    std::fprintf(stderr, "bench_timeline: no OpenGL on the '%s' platform (run under xvfb-run with QT_QPA_PLATFORM=xcb)\n",
                 qPrintable(QGuiApplication::platformName()));
    return 77;
  }
  const int64_t n = parser.value(eventsOpt).toLongLong();
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const tsr::inspect::Timeline> timeline;
  if (parser.isSet(traceOpt)) {
    auto t = tsr::inspect::readTraceTimeline(parser.value(traceOpt).toStdString());
    if (!t.ok()) {
      std::fprintf(stderr, "bench_timeline: %s\n", t.error().message.c_str());
      return 1;
    }
    timeline = std::make_shared<const tsr::inspect::Timeline>(std::move(t).value());
  } else {
    timeline = std::make_shared<const tsr::inspect::Timeline>(tsr::inspect::syntheticTimeline(n, 2, 4));
  }
  double buildMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  TimelineCanvas c;
  c.resize(parser.value(widthOpt).toInt(), parser.value(heightOpt).toInt());
  c.show();
  if (!QTest::qWaitForWindowExposed(&c) || !QTest::qWaitFor([&] { return c.frameCount() > 0; }, 10000) || !c.glReady()) {
    std::fprintf(stderr, "bench_timeline: the canvas did not start: %s\n", qPrintable(c.glError()));
    return 77;
  }
  c.setTimeline(timeline);
  const double extent = static_cast<double>(timeline->endNs);
  const double minSpan = 20'000;  // 20 us: single kernels a few hundred pixels wide
  c.renderNow();                  // warm: font atlas, buffers
  if (parser.isSet(shotOpt)) c.grabFramebuffer().save(parser.value(shotOpt));
  Series folded = sweep(c, parser.value(framesOpt).toInt(), extent, minSpan);
  Series unfolded;
  if (int peer = parser.value(peerOpt).toInt(); peer > 0) {
    c.setMinPx(0);
    unfolded = sweep(c, peer, extent, minSpan);
  }
  std::printf("{\n  \"bench\": \"timeline\",\n  \"events\": %lld,\n  \"rows\": %zu,\n  \"canvas\": [%d, %d],\n",
              static_cast<long long>(timeline->events.size()), timeline->rows.size(), c.width(), c.height());
  c.makeCurrent();
  const auto* renderer = reinterpret_cast<const char*>(c.context()->functions()->glGetString(GL_RENDERER));
  std::printf("  \"gl_renderer\": \"%s\",\n", renderer ? renderer : "?");
  c.doneCurrent();
  std::printf("  \"%s_ms\": %.1f,\n", parser.isSet(traceOpt) ? "load" : "build", buildMs);
  print("folded", folded, !unfolded.ms.empty());
  if (!unfolded.ms.empty()) print("unfolded", unfolded, false);
  std::printf("}\n");
  return 0;
}
