#include "views/timeline_canvas.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <QPalette>

#include <fmt/format.h>
#include <imgui.h>

#include "engine/inspect/timeline_compare.h"

namespace tsr::studio {

namespace {

constexpr double kAxisHeight = 26;
constexpr double kLaneHeight = 20;
constexpr double kRowGap = 6;
constexpr double kSpanHeight = 18;
constexpr double kClickSlop = 3;  // px a press may move and still be a click

ImU32 rgba(const QColor& c, int alpha = -1) {
  return IM_COL32(c.red(), c.green(), c.blue(), alpha < 0 ? c.alpha() : alpha);
}

ImU32 scaled(ImU32 c, float f, int alpha = -1) {
  auto ch = [&](int shift) { return std::min(255, static_cast<int>(static_cast<float>((c >> shift) & 0xff) * f)); };
  int a = alpha < 0 ? static_cast<int>((c >> IM_COL32_A_SHIFT) & 0xff) : alpha;
  return IM_COL32(ch(IM_COL32_R_SHIFT), ch(IM_COL32_G_SHIFT), ch(IM_COL32_B_SHIFT), a);
}

// Fixed colours for the names a Tessera profile uses; other keys take the next of a qualitative palette.
ImU32 colourFor(const std::string& key, size_t index) {
  static const std::map<std::string, ImU32> known = {
      {"loop", IM_COL32(78, 121, 167, 255)},        {"elementwise", IM_COL32(78, 121, 167, 255)},
      {"reduction", IM_COL32(242, 142, 43, 255)},   {"gemm", IM_COL32(89, 161, 79, 255)},
      {"contraction", IM_COL32(89, 161, 79, 255)},  {"conv", IM_COL32(89, 161, 79, 255)},
      {"opaque", IM_COL32(225, 87, 89, 255)},
      {"indexing", IM_COL32(225, 87, 89, 255)},     {"copy", IM_COL32(176, 122, 161, 255)},
      {"layout", IM_COL32(176, 122, 161, 255)},     {"collective", IM_COL32(118, 183, 178, 255)},
      {"random", IM_COL32(255, 157, 167, 255)},     {"control_flow", IM_COL32(237, 201, 72, 255)},
      {"misc", IM_COL32(156, 117, 95, 255)},        {"kernel", IM_COL32(140, 146, 156, 255)},
      {"other", IM_COL32(140, 146, 156, 255)}};
  static const ImU32 palette[] = {IM_COL32(78, 121, 167, 255),  IM_COL32(242, 142, 43, 255), IM_COL32(225, 87, 89, 255),
                                  IM_COL32(118, 183, 178, 255), IM_COL32(89, 161, 79, 255),  IM_COL32(237, 201, 72, 255),
                                  IM_COL32(176, 122, 161, 255), IM_COL32(255, 157, 167, 255), IM_COL32(156, 117, 95, 255),
                                  IM_COL32(186, 176, 172, 255)};
  auto it = known.find(key);
  return it != known.end() ? it->second : palette[index % std::size(palette)];
}

std::string formatNs(double ns, double step) { return inspect::formatTime(ns, step); }
std::string formatDuration(double ns) { return inspect::formatTime(ns); }

std::string formatCount(double v, const char* unit) {
  const char* prefix[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) v /= 1000, ++i;
  // Three significant digits: "125 k", "3.42 M".
  int digits = i == 0 || std::abs(v) >= 100 ? 0 : std::abs(v) >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}{}", v, digits, prefix[i], unit);
}

}  // namespace

TimelineCanvas::TimelineCanvas(QWidget* parent) : ImGuiWidget(parent) {
  setObjectName("timelineCanvas");
  setMinimumSize(320, 160);
}

QColor TimelineCanvas::background() const { return palette().color(QPalette::Base); }

void TimelineCanvas::setTimeline(std::shared_ptr<const inspect::Timeline> timeline) {
  m_timeline = std::move(timeline);
  m_windowData.reset();
  m_asked.reset();
  m_kindColours.clear();
  m_familyColours.clear();
  m_selected = -1;
  m_highlighted.clear();
  m_range.reset();
  m_scrollY = 0;
  if (m_timeline) {
    for (size_t i = 0; i < m_timeline->kinds.size(); ++i) m_kindColours.push_back(colourFor(m_timeline->kinds[i], i));
    for (size_t i = 0; i < m_timeline->families.size(); ++i)
      m_familyColours.push_back(colourFor(m_timeline->families[i], i));
    // The gutter fits the longest row label, within limits.
    size_t longest = 0;
    for (size_t r = 0; r < m_timeline->rows.size(); ++r)
      longest = std::max(longest, m_timeline->rowGroup(static_cast<int>(r)).size() + m_timeline->rows[r].label.size() + 3);
    m_gutter = std::clamp(static_cast<double>(longest) * 7.2 + 60, 150.0, 300.0);
  }
  m_fitPending = true;
  fitAll();
  requestFrames(2);
}

void TimelineCanvas::setWindowData(std::shared_ptr<const inspect::TimelineWindow> window) {
  m_windowData = std::move(window);
  if (!m_windowData) return;
  m_timeline = m_windowData->timeline;
  const inspect::Timeline& t = *m_timeline;
  m_kindColours.clear();
  m_familyColours.clear();
  for (size_t i = 0; i < t.kinds.size(); ++i) m_kindColours.push_back(colourFor(t.kinds[i], i));
  for (size_t i = 0; i < t.families.size(); ++i) m_familyColours.push_back(colourFor(t.families[i], i));
  m_kernelColours.clear();
  for (const inspect::TimelineKernel& k : t.kernels) {
    const std::string kind = k.kind.empty() ? "kernel" : k.kind;
    auto it = std::find(t.kinds.begin(), t.kinds.end(), kind);
    m_kernelColours.push_back(colourFor(kind, static_cast<size_t>(it - t.kinds.begin())));
  }
  requestFrames(1);
}

void TimelineCanvas::requestWindow(double width) {
  if (!m_windowData) return;
  const double start = m_view.startNs, end = m_view.startNs + m_view.nsPerPx * width;
  // Only once the view settles into the answer's scale range or leaves its time range; the request in flight
  // counts as the answer when it would serve.
  if (m_windowData->serves(start, end, m_view.nsPerPx)) return;
  if (m_asked && m_asked->serves(start, end, m_view.nsPerPx)) return;
  const double span = end - start;
  inspect::TimelineWindow ask;
  ask.timeline = m_timeline;
  ask.fromNs = static_cast<int64_t>(std::floor(start - span));
  ask.toNs = static_cast<int64_t>(std::ceil(end + span));
  ask.nsPerPx = m_view.nsPerPx;
  ask.raw = false;
  m_asked = ask;
  const double from = static_cast<double>(ask.fromNs), to = static_cast<double>(ask.toNs), nsPerPx = ask.nsPerPx;
  QMetaObject::invokeMethod(this, [this, from, to, nsPerPx] { emit windowNeeded(from, to, nsPerPx); },
                            Qt::QueuedConnection);
}

void TimelineCanvas::setColourBy(ColourBy c) {
  m_colourBy = c;
  requestFrames(1);
}

void TimelineCanvas::setMinPx(double px) {
  m_minPx = std::max(0.0, px);
  requestFrames(1);
}

double TimelineCanvas::gutterWidth() const { return m_gutter; }

QRectF TimelineCanvas::eventArea() const {
  double g = gutterWidth();
  return QRectF(g, kAxisHeight, std::max(1.0, width() - g), std::max(1.0, height() - kAxisHeight));
}

inspect::TimelineLayout TimelineCanvas::rowLayout() const {
  inspect::TimelineLayout l;
  if (m_timeline) l = inspect::layoutRows(*m_timeline, kAxisHeight + 4, kLaneHeight, kRowGap, kSpanHeight);
  l.scrollY = m_scrollY;
  return l;
}

inspect::TimeWindow TimelineCanvas::window() const {
  return inspect::TimeWindow{m_view.startNs, m_view.nsPerPx, eventArea().width()};
}

bool TimelineCanvas::animating() const {
  double w = eventArea().width();
  return std::abs(m_view.startNs - m_target.startNs) > 0.25 * m_view.nsPerPx ||
         std::abs((m_view.nsPerPx - m_target.nsPerPx) * w) > 0.25 * m_view.nsPerPx;
}

void TimelineCanvas::fitAll() {
  double w = eventArea().width();
  if (!m_timeline || w <= 1) return;
  double span = std::max<double>(1000, static_cast<double>(m_timeline->endNs - m_timeline->beginNs));
  m_target.startNs = static_cast<double>(m_timeline->beginNs) - 0.01 * span;
  m_target.nsPerPx = span * 1.02 / w;
  m_view = m_target;
  m_fitPending = false;
  m_fitted = true;
  requestFrames(1);
}

void TimelineCanvas::setWindow(double startNs, double endNs) {
  double w = eventArea().width();
  if (endNs <= startNs || w <= 1) return;
  m_target = {startNs, (endNs - startNs) / w};
  m_view = m_target;
  m_fitPending = false;
  m_fitted = false;
  requestFrames(1);
}

void TimelineCanvas::zoomAt(double factor, double x) {
  double w = eventArea().width();
  // Around the time under the cursor in the target view, so repeated wheel steps compound.
  double anchor = m_target.startNs + x * m_target.nsPerPx;
  m_target.nsPerPx *= factor;
  m_target.startNs = anchor - x * m_target.nsPerPx;
  clampView(m_target, w);
  m_fitted = false;
  requestFrames(1);
}

void TimelineCanvas::clampView(View& v, double width) const {
  if (!m_timeline || width <= 1) return;
  double span = std::max<double>(1000, static_cast<double>(m_timeline->endNs - m_timeline->beginNs));
  v.nsPerPx = std::clamp(v.nsPerPx, 0.01, 4.0 * span / width);
  // Some of the timeline stays in view.
  double visible = v.nsPerPx * width;
  v.startNs = std::clamp(v.startNs, static_cast<double>(m_timeline->beginNs) - visible * 0.9,
                         static_cast<double>(m_timeline->endNs) - visible * 0.1);
}

void TimelineCanvas::animate(double width) {
  if (!animating()) {
    m_view = m_target;
    return;
  }
  // Both edges approach the target exponentially: about 100 ms to settle.
  double k = 1.0 - std::exp(-static_cast<double>(ImGui::GetIO().DeltaTime) * 25.0);
  double s0 = m_view.startNs, e0 = m_view.startNs + m_view.nsPerPx * width;
  double s1 = m_target.startNs, e1 = m_target.startNs + m_target.nsPerPx * width;
  double s = s0 + (s1 - s0) * k, e = e0 + (e1 - e0) * k;
  m_view = {s, (e - s) / width};
  if (!animating()) m_view = m_target;
  requestFrames(2);
}

std::optional<QPointF> TimelineCanvas::pixelOf(uint32_t event) const {
  if (!m_timeline || event >= m_timeline->events.size()) return std::nullopt;
  const inspect::TimelineEvent& e = m_timeline->events[event];
  inspect::TimeWindow w = window();
  QRectF area = eventArea();
  double x = w.x(static_cast<double>(e.startNs) + static_cast<double>(e.durationNs) / 2);
  double y = rowLayout().laneY(e.row, e.lane) + kLaneHeight / 2;
  if (x < 0 || x >= area.width() || y < area.top() || y >= area.bottom()) return std::nullopt;
  return QPointF(area.left() + x, y);
}

void TimelineCanvas::setSelectedEvent(int64_t event) {
  m_selected = event;
  requestFrames(1);
}

void TimelineCanvas::setHighlightedKernels(std::vector<int> kernels) {
  m_highlighted = std::move(kernels);
  requestFrames(1);
}

void TimelineCanvas::setRange(int64_t fromNs, int64_t toNs) {
  if (toNs < fromNs) std::swap(fromNs, toNs);
  m_range = std::make_pair(fromNs, toNs);
  requestFrames(1);
}

void TimelineCanvas::clearRange() {
  m_range.reset();
  requestFrames(1);
}

namespace {

// B against A: green where B is faster, red where it is slower, full at a factor of 2; grey without a pair.
constexpr unsigned kNoPairColour = IM_COL32(150, 150, 150, 255);
unsigned changeColour(const inspect::TimelineKernel* k) {
  if (!k || k->pairNsA < 0) return kNoPairColour;
  const double r = inspect::kernelChange(*k);
  const double t = std::clamp(r > 0 ? std::log2(r) : -1.0, -1.0, 1.0);
  const auto mix = [&](int same, int full) { return static_cast<int>(same + (full - same) * std::abs(t)); };
  return t < 0 ? IM_COL32(mix(120, 40), mix(135, 170), mix(170, 70), 255)
               : IM_COL32(mix(120, 210), mix(135, 50), mix(170, 45), 255);
}

}  // namespace

unsigned TimelineCanvas::colourOf(const inspect::TimelineEvent& e) const {
  if (m_colourBy == ColourBy::Change)
    return changeColour(e.kernel >= 0 ? &m_timeline->kernels[static_cast<size_t>(e.kernel)] : nullptr);
  const auto& table = m_colourBy == ColourBy::Kind ? m_kindColours : m_familyColours;
  size_t key = m_colourBy == ColourBy::Kind ? e.kind : e.family;
  return key < table.size() ? table[key] : IM_COL32(140, 146, 156, 255);
}

void TimelineCanvas::applyStyle() {
  ImGuiStyle& s = ImGui::GetStyle();
  const QPalette& pal = palette();
  auto vec = [](const QColor& c, float a = 1.0f) {
    return ImVec4(static_cast<float>(c.redF()), static_cast<float>(c.greenF()), static_cast<float>(c.blueF()), a);
  };
  s.Colors[ImGuiCol_Text] = vec(pal.color(QPalette::ToolTipText));
  s.Colors[ImGuiCol_PopupBg] = vec(pal.color(QPalette::ToolTipBase), 0.97f);
  s.Colors[ImGuiCol_Border] = vec(pal.color(QPalette::Mid));
  s.Colors[ImGuiCol_WindowBg] = ImVec4(0, 0, 0, 0);
  s.WindowPadding = ImVec2(8, 6);
  s.WindowBorderSize = 0;
  s.PopupBorderSize = 1;
  s.WindowRounding = 0;
  s.PopupRounding = 3;
}

void TimelineCanvas::drawFrame() {
  applyStyle();
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, ImVec2(0, 0));
  ImGui::Begin("##timeline", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_NoBringToFrontOnFocus |
                   ImGuiWindowFlags_NoNav);
  ImGui::PopStyleVar();
  m_lastBoxes = m_lastBoxEvents = 0;
  if (!m_timeline) {
    drawEmpty();
    ImGui::End();
    return;
  }
  QRectF area = eventArea();
  // A fitted view stays fitted when the canvas is resized; a zoomed one keeps its scale.
  if (m_fitPending || (m_fitted && std::abs(area.width() - m_width) > 0.5)) fitAll();
  m_width = area.width();
  handleInput(area);
  animate(area.width());
  requestWindow(area.width());
  drawAxis(area);
  drawRows(area);
  drawSpans(area);
  drawHighlights(area);
  drawRange(area);
  drawLegend(area);
  drawTooltip(area);
  ImGui::End();
}

void TimelineCanvas::drawEmpty() {
  const ImGuiIO& io = ImGui::GetIO();
  const char* lines[] = {"No profile to show.", "Run > Profile records one for this project;",
                         "File > Open Trace... opens a Chrome/Perfetto trace JSON."};
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImU32 col = rgba(palette().color(QPalette::PlaceholderText));
  float y = io.DisplaySize.y / 2 - 30;
  for (const char* l : lines) {
    ImVec2 size = ImGui::CalcTextSize(l);
    dl->AddText(ImVec2((io.DisplaySize.x - size.x) / 2, y), col, l);
    y += size.y + 6;
  }
}

void TimelineCanvas::handleInput(const QRectF& area) {
  ImGuiIO& io = ImGui::GetIO();
  ImGui::SetCursorScreenPos(ImVec2(static_cast<float>(area.left()), static_cast<float>(area.top())));
  ImGui::InvisibleButton("##events", ImVec2(static_cast<float>(area.width()), static_cast<float>(area.height())),
                         ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
  const bool hovered = ImGui::IsItemHovered();
  m_hovered = hovered;
  const double mx = io.MousePos.x - area.left();
  const double my = io.MousePos.y;
  inspect::TimelineLayout layout = rowLayout();
  const double maxScroll = std::max(0.0, layout.contentHeight - (area.height() - 4));

  if (hovered && io.MouseWheel != 0) {
    if (io.KeyShift || io.KeyAlt) {
      m_scrollY = std::clamp(m_scrollY - io.MouseWheel * 3 * kLaneHeight, 0.0, maxScroll);
    } else {
      zoomAt(std::pow(0.8, static_cast<double>(io.MouseWheel)), mx);
    }
  }
  if (hovered && io.MouseWheelH != 0) {
    m_target.startNs -= io.MouseWheelH * 0.1 * area.width() * m_target.nsPerPx;
    clampView(m_target, area.width());
    m_fitted = false;
    requestFrames(1);
  }

  if (m_drag == Drag::None && hovered && (ImGui::IsMouseClicked(0) || ImGui::IsMouseClicked(1))) {
    m_drag = Drag::Pending;
    m_pressX = mx;
    m_pressY = my;
    m_pressView = m_view;
    m_pressScroll = m_scrollY;
    m_rangeDrag = io.KeyShift || ImGui::IsMouseClicked(1);
  }
  if (m_drag != Drag::None) {
    double dx = mx - m_pressX, dy = my - m_pressY;
    if (m_drag == Drag::Pending && (std::abs(dx) > kClickSlop || std::abs(dy) > kClickSlop))
      m_drag = m_rangeDrag ? Drag::Range : Drag::Pan;
    inspect::TimeWindow w = window();
    if (m_drag == Drag::Pan) {
      m_view.startNs = m_pressView.startNs - dx * m_view.nsPerPx;
      clampView(m_view, area.width());
      m_target = m_view;
      m_fitted = false;
      m_scrollY = std::clamp(m_pressScroll - dy, 0.0, maxScroll);
    } else if (m_drag == Drag::Range) {
      double a = w.ns(std::clamp(std::min(m_pressX, mx), 0.0, area.width()));
      double b = w.ns(std::clamp(std::max(m_pressX, mx), 0.0, area.width()));
      m_range = std::make_pair(static_cast<int64_t>(std::llround(a)), static_cast<int64_t>(std::llround(b)));
    }
    if (!io.MouseDown[0] && !io.MouseDown[1]) {
      if (m_drag == Drag::Pending) {
        // A click: a kernel is selected, a fold opens, empty space clears the selection.
        std::optional<inspect::TimelineHit> hit;
        if (my >= area.top() + layout.spanHeight)
          hit = inspect::hitTest(*m_timeline, layout, w, m_minPx, m_pressX, m_pressY);
        int64_t clicked = -1;
        if (!hit && m_windowData && !m_windowData->raw && my >= area.top() + layout.spanHeight) {
          // Density: a click zooms in around it, towards the launches themselves.
          zoomAt(0.125, m_pressX);
        } else if (hit && hit->event < 0) {
          double span = static_cast<double>(hit->box.endNs - hit->box.startNs);
          double pad = std::max(span * 0.05, 50.0);
          m_target = {static_cast<double>(hit->box.startNs) - pad, (span + 2 * pad) / area.width()};
          clampView(m_target, area.width());
          m_fitted = false;
          requestFrames(1);
        } else {
          clicked = hit ? hit->event : -1;
          m_selected = clicked;
          QMetaObject::invokeMethod(this, [this, clicked] { emit eventClicked(clicked); }, Qt::QueuedConnection);
        }
      } else if (m_drag == Drag::Range && m_range) {
        auto r = *m_range;
        QMetaObject::invokeMethod(this, [this, r] { emit rangeChanged(r.first, r.second); }, Qt::QueuedConnection);
      }
      m_drag = Drag::None;
    }
    requestFrames(1);
  }

  {
    // Keys reach ImGui only while the canvas has Qt's focus.
    double w = area.width();
    if (ImGui::IsKeyPressed('W')) zoomAt(0.7, w / 2);
    if (ImGui::IsKeyPressed('S')) zoomAt(1 / 0.7, w / 2);
    if (ImGui::IsKeyPressed('A') || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow))) {
      m_target.startNs -= 0.15 * w * m_target.nsPerPx;
      clampView(m_target, w);
      m_fitted = false;
    }
    if (ImGui::IsKeyPressed('D') || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))) {
      m_target.startNs += 0.15 * w * m_target.nsPerPx;
      clampView(m_target, w);
      m_fitted = false;
    }
    if (ImGui::IsKeyPressed('F') || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home))) {
      double span = std::max<double>(1000, static_cast<double>(m_timeline->endNs - m_timeline->beginNs));
      m_target = {static_cast<double>(m_timeline->beginNs) - 0.01 * span, span * 1.02 / w};
      m_fitted = true;
    }
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) {
      if (m_range) {
        m_range.reset();
        QMetaObject::invokeMethod(this, [this] { emit rangeChanged(0, 0); }, Qt::QueuedConnection);
      }
      m_selected = -1;
    }
  }
}

void TimelineCanvas::drawAxis(const QRectF& area) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const QPalette& pal = palette();
  inspect::TimeWindow w = window();
  const float left = static_cast<float>(area.left()), right = static_cast<float>(area.right());
  const float top = 0, bottom = static_cast<float>(kAxisHeight), contentBottom = static_cast<float>(area.bottom());
  dl->AddRectFilled(ImVec2(0, top), ImVec2(right, bottom), rgba(pal.color(QPalette::Window)));
  dl->AddLine(ImVec2(left, bottom - 0.5f), ImVec2(right, bottom - 0.5f), rgba(pal.color(QPalette::Mid)));
  // Ticks every 1, 2 or 5 times a power of ten, about 110 px apart.
  double raw = w.nsPerPx * 110;
  double p10 = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-3))));
  double step = p10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (p10 * m >= raw) {
      step = p10 * m;
      break;
    }
  ImU32 text = rgba(pal.color(QPalette::WindowText));
  ImU32 grid = rgba(pal.color(QPalette::Mid), 60);
  dl->PushClipRect(ImVec2(left, top), ImVec2(right, contentBottom), true);
  for (double t = std::ceil(w.startNs / step) * step; t <= w.endNs(); t += step) {
    float x = left + static_cast<float>(w.x(t));
    dl->AddLine(ImVec2(x, bottom - 7), ImVec2(x, bottom), text);
    dl->AddLine(ImVec2(x, bottom), ImVec2(x, contentBottom), grid);
    std::string label = formatNs(std::abs(t) < step * 1e-6 ? 0.0 : t, step);
    if (x + 3 + ImGui::CalcTextSize(label.c_str()).x <= right) dl->AddText(ImVec2(x + 3, top + 3), text, label.c_str());
  }
  dl->PopClipRect();
  // The scale in the gutter's corner.
  std::string scale = "1 px = " + formatDuration(w.nsPerPx);
  dl->AddText(ImVec2(6, top + 5), rgba(pal.color(QPalette::PlaceholderText)), scale.c_str());
}

void TimelineCanvas::drawRows(const QRectF& area) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const QPalette& pal = palette();
  const inspect::Timeline& t = *m_timeline;
  inspect::TimeWindow w = window();
  inspect::TimelineLayout layout = rowLayout();
  const float left = static_cast<float>(area.left()), right = static_cast<float>(area.right());
  const float rowsTop = static_cast<float>(area.top() + layout.spanHeight + (layout.spanHeight > 0 ? kRowGap / 2 : 0));
  const float bottom = static_cast<float>(area.bottom());
  const bool dark = pal.color(QPalette::Base).lightness() < 128;
  ImU32 stripe = dark ? IM_COL32(255, 255, 255, 10) : IM_COL32(0, 0, 0, 10);
  ImU32 labelCol = rgba(pal.color(QPalette::WindowText));
  ImU32 dimCol = rgba(pal.color(QPalette::PlaceholderText));
  ImU32 textOnBox = IM_COL32(255, 255, 255, 235);
  ImU32 foldCol = dark ? IM_COL32(150, 158, 172, 255) : IM_COL32(120, 128, 142, 255);
  ImFont* f = ImGui::GetFont();
  const float fontSize = ImGui::GetFontSize();

  // The gutter: one label per row.
  dl->PushClipRect(ImVec2(0, rowsTop), ImVec2(left, bottom), true);
  dl->AddRectFilled(ImVec2(0, rowsTop), ImVec2(left, bottom), rgba(pal.color(QPalette::Window)));
  for (size_t r = 0; r < t.rows.size(); ++r) {
    float y0 = static_cast<float>(layout.rowY[r] - layout.scrollY);
    if (y0 > bottom || y0 + kLaneHeight < rowsTop) continue;
    // "cpu:0  thread 2" ("rank 1 · cpu:1  thread 0" for a profile of several processes), and the row's kernel
    // count at the gutter's right edge. A device's rows form a group, separated by a rule.
    std::string n = formatCount(t.rows[r].numEvents, "");
    float nWidth = ImGui::CalcTextSize(n.c_str()).x * 0.85f;
    std::string label = t.rowGroup(static_cast<int>(r)) + "  " + t.rows[r].label;
    if (r > 0 && t.rows[r - 1].device != t.rows[r].device)
      dl->AddLine(ImVec2(0, y0 - 4), ImVec2(left, y0 - 4), dimCol, 1.0f);
    ImVec4 clip(0, y0, left - nWidth - 10, y0 + static_cast<float>(kLaneHeight));
    dl->AddText(f, fontSize, ImVec2(6, y0 + 3), labelCol, label.c_str(), nullptr, 0.0f, &clip);
    dl->AddText(f, fontSize * 0.85f, ImVec2(left - nWidth - 6, y0 + 4), dimCol, n.c_str());
  }
  dl->PopClipRect();

  dl->PushClipRect(ImVec2(left, rowsTop), ImVec2(right, bottom), true);
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const inspect::TimelineRow& row = t.rows[r];
    float y0 = static_cast<float>(layout.rowY[r] - layout.scrollY);
    float rowH = static_cast<float>(std::max<size_t>(1, row.lanes.size()) * kLaneHeight);
    if (y0 > bottom || y0 + rowH < rowsTop) continue;
    if (r % 2 == 1) dl->AddRectFilled(ImVec2(left, y0 - 2), ImVec2(right, y0 + rowH + 2), stripe);
    if (m_windowData && !m_windowData->raw) {
      drawDensity(area, r, y0);
      continue;
    }
    for (size_t l = 0; l < row.lanes.size(); ++l) {
      float ly = static_cast<float>(layout.laneY(static_cast<int>(r), static_cast<int>(l)));
      if (ly > bottom || ly + kLaneHeight < rowsTop) continue;
      m_boxes.clear();
      inspect::laneBoxes(t, static_cast<int>(r), static_cast<int>(l), w, m_minPx, m_boxes);
      m_lastBoxes += m_boxes.size();
      const float y1 = ly + 1, y2 = ly + static_cast<float>(kLaneHeight) - 1;
      for (const inspect::TimelineBox& b : m_boxes) {
        m_lastBoxEvents += b.count();
        float x0 = left + static_cast<float>(w.x(static_cast<double>(b.startNs)));
        float x1 = left + static_cast<float>(w.x(static_cast<double>(b.endNs)));
        x0 = std::max(x0, left - 2);
        x1 = std::min(x1, right + 2);
        if (x1 - x0 < 1) x1 = x0 + 1;
        if (b.count() == 1) {
          const inspect::TimelineEvent& e = t.events[b.first];
          ImU32 c = colourOf(e);
          dl->AddRectFilled(ImVec2(x0, y1), ImVec2(x1, y2), c);
          if (x1 - x0 >= 6) dl->AddRect(ImVec2(x0, y1), ImVec2(x1, y2), scaled(c, 0.7f));
          if (x1 - x0 > 28) {
            const std::string& name = t.nameOf(b.first);
            ImVec4 clip(std::max(x0, left) + 3, y1, x1 - 3, y2);
            dl->AddText(f, fontSize, ImVec2(clip.x, y1 + 2), textOnBox, name.c_str(), nullptr, 0.0f, &clip);
          }
        } else {
          // A fold: as opaque as the share of its span its kernels are busy.
          double span = std::max<double>(1, static_cast<double>(b.endNs - b.startNs));
          int alpha = 90 + static_cast<int>(150 * std::min(1.0, static_cast<double>(b.busyNs) / span));
          // A pixel apart from the next fold, which may start where this one ends.
          dl->AddRectFilled(ImVec2(x0, y1 + 2), ImVec2(x1 - (x1 - x0 > 4 ? 1.0f : 0.0f), y2 - 2),
                            scaled(foldCol, 1.0f, alpha));
          if (x1 - x0 > 24) {
            std::string n = formatCount(b.count(), "");
            ImVec2 sz = ImGui::CalcTextSize(n.c_str());
            if (sz.x + 6 < x1 - x0)
              dl->AddText(ImVec2((x0 + x1 - sz.x) / 2, y1 + 2), IM_COL32(255, 255, 255, 230), n.c_str());
          }
        }
      }
    }
  }
  dl->PopClipRect();
}

// One row of a window's density: per pixel column, a bar as high as the busiest bucket in it is busy, in the
// colour of the kind of that bucket's longest launch.
void TimelineCanvas::drawDensity(const QRectF& area, size_t row, float y0) {
  const inspect::TimelineWindow& d = *m_windowData;
  if (row >= d.density.size()) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  inspect::TimeWindow w = window();
  const float left = static_cast<float>(area.left()), right = static_cast<float>(area.right());
  const float y2 = y0 + static_cast<float>(kLaneHeight) - 1, h = static_cast<float>(kLaneHeight) - 2;
  const std::vector<inspect::DensityBucket>& buckets = d.density[row];
  const double width = static_cast<double>(d.bucketNs);
  // The buckets in view.
  size_t i = static_cast<size_t>(std::clamp((w.startNs - static_cast<double>(d.firstNs)) / width, 0.0,
                                            static_cast<double>(buckets.size())));
  size_t stop = static_cast<size_t>(std::clamp((w.endNs() - static_cast<double>(d.firstNs)) / width + 1, 0.0,
                                               static_cast<double>(buckets.size())));
  while (i < stop) {
    // Buckets that share a pixel column become one bar: the busiest of them.
    float x0 = left + static_cast<float>(w.x(static_cast<double>(d.firstNs) + static_cast<double>(i) * width));
    float x1 = left + static_cast<float>(w.x(static_cast<double>(d.firstNs) + static_cast<double>(i + 1) * width));
    const inspect::DensityBucket* best = &buckets[i];
    size_t j = i + 1;
    while (j < stop && x1 - x0 < 1) {
      if (buckets[j].busy > best->busy) best = &buckets[j];
      x1 = left + static_cast<float>(w.x(static_cast<double>(d.firstNs) + static_cast<double>(j + 1) * width));
      ++j;
    }
    i = j;
    if (best->count == 0 && best->busy <= 0) continue;
    if (x1 < left || x0 > right) continue;
    ImU32 c = best->kernel >= 0 && static_cast<size_t>(best->kernel) < m_kernelColours.size()
                  ? m_kernelColours[static_cast<size_t>(best->kernel)]
                  : IM_COL32(140, 146, 156, 255);
    float top = y2 - std::max(1.0f, h * std::min(1.0f, best->busy));
    dl->AddRectFilled(ImVec2(std::max(x0, left - 2), top), ImVec2(std::min(std::max(x1, x0 + 1), right + 2), y2), c);
  }
  ++m_lastBoxes;
}

void TimelineCanvas::drawSpans(const QRectF& area) {
  const inspect::Timeline& t = *m_timeline;
  if (t.spans.empty()) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  inspect::TimeWindow w = window();
  const float left = static_cast<float>(area.left()), right = static_cast<float>(area.right());
  // One track per rank with steps: "steps" alone for one process, "rank N steps" for each of several.
  const bool ranks = t.spanRanks.size() > 1 || t.spanRanks.front() != 0;
  for (size_t track = 0; track < t.spanRanks.size(); ++track) {
    const float y0 = static_cast<float>(area.top() + 2 + static_cast<double>(track) * kSpanHeight);
    const float y1 = static_cast<float>(area.top() + static_cast<double>(track + 1) * kSpanHeight);
    const std::string label = track < t.spanTrackNames.size() ? t.spanTrackNames[track] + " step"
                              : ranks                          ? fmt::format("rank {} steps", t.spanRanks[track])
                                                               : std::string("steps");
    dl->AddText(ImVec2(6, y0 + 1), rgba(palette().color(QPalette::WindowText)), label.c_str());
    dl->PushClipRect(ImVec2(left, y0), ImVec2(right, y1), true);
    int nth = 0;
    for (const inspect::TimelineSpan& s : t.spans) {
      if (s.rank != t.spanRanks[track]) continue;
      const bool odd = nth++ % 2;
      float x0 = left + static_cast<float>(w.x(static_cast<double>(s.startNs)));
      float x1 = left + static_cast<float>(w.x(static_cast<double>(s.startNs + s.durationNs)));
      if (x1 < left || x0 > right) continue;
      x1 = std::max(x1, x0 + 1);
      ImU32 c = odd ? IM_COL32(110, 120, 140, 200) : IM_COL32(130, 140, 162, 200);
      dl->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, y1), c, 2.0f);
      if (x1 - x0 > 40) {
        std::string text = s.name + "  " + formatDuration(static_cast<double>(s.durationNs));
        ImVec4 clip(std::max(x0, left) + 4, y0, x1 - 4, y1);
        dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(clip.x, y0 + 1), IM_COL32(255, 255, 255, 240),
                    text.c_str(), nullptr, 0.0f, &clip);
      }
    }
    dl->PopClipRect();
  }
}

void TimelineCanvas::drawHighlights(const QRectF& area) {
  const inspect::Timeline& t = *m_timeline;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  inspect::TimeWindow w = window();
  inspect::TimelineLayout layout = rowLayout();
  const float left = static_cast<float>(area.left()), right = static_cast<float>(area.right());
  const float rowsTop = static_cast<float>(area.top() + layout.spanHeight);
  dl->PushClipRect(ImVec2(left, rowsTop), ImVec2(right, static_cast<float>(area.bottom())), true);
  auto outline = [&](uint32_t i, ImU32 c, float thick) {
    const inspect::TimelineEvent& e = t.events[i];
    float x0 = left + static_cast<float>(w.x(static_cast<double>(e.startNs)));
    float x1 = left + static_cast<float>(w.x(static_cast<double>(e.endNs())));
    if (x1 - x0 < 3) {
      float mid = (x0 + x1) / 2;
      x0 = mid - 1.5f;
      x1 = mid + 1.5f;
    }
    float y = static_cast<float>(layout.laneY(e.row, e.lane));
    dl->AddRect(ImVec2(x0 - 1, y), ImVec2(x1 + 1, y + static_cast<float>(kLaneHeight)), c, 0, 0, thick);
    return x1;
  };
  // The graph's selection: every launch of its kernels in view, at most one mark per two pixels.
  ImU32 mark = IM_COL32(255, 160, 20, 255);
  for (int k : m_highlighted) {
    if (k < 0 || static_cast<size_t>(k) >= t.kernels.size()) continue;
    const std::vector<uint32_t>& ev = t.kernels[static_cast<size_t>(k)].events;
    for (size_t i = 0; i < ev.size();) {
      const inspect::TimelineEvent& e = t.events[ev[i]];
      const inspect::TimelineLane& lane = t.rows[static_cast<size_t>(e.row)].lanes[e.lane];
      // This lane's launches are ev[i .. laneEnd), by start.
      size_t laneEnd = static_cast<size_t>(std::lower_bound(ev.begin() + static_cast<long>(i), ev.end(), lane.end) - ev.begin());
      auto byEnd = [&](uint32_t idx, double v) { return static_cast<double>(t.events[idx].endNs()) <= v; };
      size_t j = static_cast<size_t>(std::lower_bound(ev.begin() + static_cast<long>(i), ev.begin() + static_cast<long>(laneEnd), w.startNs, byEnd) - ev.begin());
      while (j < laneEnd && static_cast<double>(t.events[ev[j]].startNs) < w.endNs()) {
        float x1 = outline(ev[j], mark, 2.0f);
        double next = w.ns(x1 - left + 2);
        auto byStart = [&](uint32_t idx, double v) { return static_cast<double>(t.events[idx].startNs) < v; };
        j = std::max(j + 1, static_cast<size_t>(std::lower_bound(ev.begin() + static_cast<long>(j), ev.begin() + static_cast<long>(laneEnd), next, byStart) - ev.begin()));
      }
      i = laneEnd;
    }
  }
  drawCollectives(area, outline);
  if (m_selected >= 0 && static_cast<size_t>(m_selected) < t.events.size())
    outline(static_cast<uint32_t>(m_selected), rgba(palette().color(QPalette::Highlight)), 3.0f);
  dl->PopClipRect();
}

// Collectives across devices: each member's launch linked to the straggler's (the last to arrive), the wait
// drawn as a red bar under each waiting member from its arrival to the straggler's, and the straggler outlined
// in red. The call of the hovered or selected launch is drawn strongly, the others faintly.
void TimelineCanvas::drawCollectives(const QRectF& area, const std::function<float(uint32_t, ImU32, float)>& outline) {
  const inspect::Timeline& t = *m_timeline;
  if (t.collectives.empty()) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  inspect::TimeWindow w = window();
  inspect::TimelineLayout layout = rowLayout();
  const float left = static_cast<float>(area.left());
  int64_t hovered = -1;
  if (m_hovered && m_drag == Drag::None) {
    const ImGuiIO& io = ImGui::GetIO();
    if (auto hit = inspect::hitTest(t, layout, w, m_minPx, io.MousePos.x - area.left(), io.MousePos.y)) hovered = hit->event;
  }
  const inspect::TimelineCollective* focus = nullptr;
  for (int64_t e : {hovered, m_selected})
    if (!focus && e >= 0 && static_cast<size_t>(e) < t.events.size()) focus = t.collectiveOf(static_cast<uint32_t>(e));
  auto x = [&](int64_t ns) { return left + static_cast<float>(w.x(static_cast<double>(ns))); };
  auto midY = [&](const inspect::TimelineEvent& e) {
    return static_cast<float>(layout.laneY(e.row, e.lane)) + static_cast<float>(kLaneHeight) / 2;
  };
  const ImU32 waitCol = IM_COL32(220, 40, 40, 200);
  for (const inspect::TimelineCollective& c : t.collectives) {
    const int64_t s = c.stragglerEvent();
    if (s < 0 || c.events.size() < 2) continue;
    const inspect::TimelineEvent& se = t.events[static_cast<size_t>(s)];
    int64_t first = se.startNs;
    for (int64_t e : c.events)
      if (e >= 0) first = std::min(first, t.events[static_cast<size_t>(e)].startNs);
    if (static_cast<double>(se.endNs()) < w.startNs || static_cast<double>(first) > w.endNs()) continue;
    const bool strong = &c == focus;
    // A call narrower than a few pixels is drawn only when it is the focus: links would hide the kernels.
    if (!strong && x(se.endNs()) - x(first) < 4) continue;
    const ImU32 link = strong ? IM_COL32(255, 140, 0, 255) : IM_COL32(255, 140, 0, 90);
    const float sx = x(se.startNs), sy = midY(se);
    for (int64_t e : c.events) {
      if (e < 0 || e == s) continue;
      const inspect::TimelineEvent& me = t.events[static_cast<size_t>(e)];
      const float mx = x(me.startNs), my = midY(me);
      dl->AddLine(ImVec2(mx, my), ImVec2(sx, sy), link, strong ? 2.0f : 1.0f);
      const float bottom = static_cast<float>(layout.laneY(me.row, me.lane) + kLaneHeight);
      if (sx - mx >= 1) dl->AddRectFilled(ImVec2(mx, bottom - 4), ImVec2(sx, bottom), waitCol);
    }
    outline(static_cast<uint32_t>(s), strong ? IM_COL32(230, 30, 30, 255) : IM_COL32(230, 30, 30, 160), strong ? 3.0f : 1.5f);
  }
}

void TimelineCanvas::drawRange(const QRectF& area) {
  if (!m_range) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  inspect::TimeWindow w = window();
  const float left = static_cast<float>(area.left()), right = static_cast<float>(area.right());
  float x0 = left + static_cast<float>(w.x(static_cast<double>(m_range->first)));
  float x1 = left + static_cast<float>(w.x(static_cast<double>(m_range->second)));
  QColor hl = palette().color(QPalette::Highlight);
  dl->PushClipRect(ImVec2(left, 0), ImVec2(right, static_cast<float>(area.bottom())), true);
  dl->AddRectFilled(ImVec2(x0, static_cast<float>(kAxisHeight)), ImVec2(x1, static_cast<float>(area.bottom())), rgba(hl, 45));
  dl->AddLine(ImVec2(x0, 0), ImVec2(x0, static_cast<float>(area.bottom())), rgba(hl, 220), 1.5f);
  dl->AddLine(ImVec2(x1, 0), ImVec2(x1, static_cast<float>(area.bottom())), rgba(hl, 220), 1.5f);
  std::string label = formatDuration(static_cast<double>(m_range->second - m_range->first));
  ImVec2 sz = ImGui::CalcTextSize(label.c_str());
  float cx = std::clamp((x0 + x1 - sz.x) / 2, left + 2, right - sz.x - 2);
  dl->AddRectFilled(ImVec2(cx - 4, 3), ImVec2(cx + sz.x + 4, 5 + sz.y), rgba(hl, 230), 3.0f);
  dl->AddText(ImVec2(cx, 4), rgba(palette().color(QPalette::HighlightedText)), label.c_str());
  dl->PopClipRect();
}

void TimelineCanvas::drawLegend(const QRectF& area) {
  const inspect::Timeline& t = *m_timeline;
  static const std::vector<std::string> kChangeNames = {"B 2x faster", "B the same", "B 2x slower", "no pair"};
  inspect::TimelineKernel faster, same, slower;
  faster.pairNsA = same.pairNsA = slower.pairNsA = same.pairNsB = 2;
  faster.pairNsB = 1;
  slower.pairNsB = 4;
  const std::vector<unsigned> changeColours = {changeColour(&faster), changeColour(&same), changeColour(&slower),
                                               kNoPairColour};
  const bool change = m_colourBy == ColourBy::Change;
  const auto& names = change ? kChangeNames : m_colourBy == ColourBy::Kind ? t.kinds : t.families;
  const auto& colours = change ? changeColours : m_colourBy == ColourBy::Kind ? m_kindColours : m_familyColours;
  if (names.empty()) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const QPalette& pal = palette();
  float width = 12;
  for (const auto& n : names) width += ImGui::CalcTextSize(n.c_str()).x + 26;
  float h = ImGui::GetFontSize() + 8;
  float x = static_cast<float>(area.right()) - width - 8, y = static_cast<float>(area.bottom()) - h - 6;
  dl->AddRectFilled(ImVec2(x, y), ImVec2(x + width, y + h), rgba(pal.color(QPalette::Window), 230), 3.0f);
  dl->AddRect(ImVec2(x, y), ImVec2(x + width, y + h), rgba(pal.color(QPalette::Mid)), 3.0f);
  x += 8;
  for (size_t i = 0; i < names.size(); ++i) {
    dl->AddRectFilled(ImVec2(x, y + 5), ImVec2(x + 12, y + h - 5), colours[i], 2.0f);
    dl->AddText(ImVec2(x + 16, y + 4), rgba(pal.color(QPalette::WindowText)), names[i].c_str());
    x += ImGui::CalcTextSize(names[i].c_str()).x + 26;
  }
}

void TimelineCanvas::drawTooltip(const QRectF& area) {
  if (m_drag == Drag::Pan || m_drag == Drag::Range || !m_hovered) return;
  const inspect::Timeline& t = *m_timeline;
  const ImGuiIO& io = ImGui::GetIO();
  inspect::TimeWindow w = window();
  inspect::TimelineLayout layout = rowLayout();
  double mx = io.MousePos.x - area.left(), my = io.MousePos.y;
  if (my < area.top() + layout.spanHeight) {
    // The step spans of the track under the cursor.
    const int track = static_cast<int>((my - area.top()) / kSpanHeight);
    if (track < 0 || track >= static_cast<int>(t.spanRanks.size())) return;
    const int rank = t.spanRanks[static_cast<size_t>(track)];
    double ns = w.ns(mx);
    for (const auto& s : t.spans)
      if (s.rank == rank && ns >= static_cast<double>(s.startNs) && ns < static_cast<double>(s.startNs + s.durationNs)) {
        ImGui::BeginTooltip();
        if (t.spanRanks.size() > 1 && t.spanTrackNames.empty())
          ImGui::Text("rank %d %s: %s", rank, s.name.c_str(), formatDuration(static_cast<double>(s.durationNs)).c_str());
        else
          ImGui::Text("%s: %s", s.name.c_str(), formatDuration(static_cast<double>(s.durationNs)).c_str());
        ImGui::EndTooltip();
        break;
      }
    return;
  }
  auto hit = inspect::hitTest(t, layout, w, m_minPx, mx, my);
  if (!hit && m_windowData && !m_windowData->raw) {
    // Density: the bucket under the cursor.
    const inspect::TimelineWindow& d = *m_windowData;
    for (size_t r = 0; r < t.rows.size() && r < d.density.size(); ++r) {
      double y0 = layout.rowY[r] - layout.scrollY;
      if (my < y0 || my >= y0 + kLaneHeight) continue;
      double at = (w.ns(mx) - static_cast<double>(d.firstNs)) / static_cast<double>(d.bucketNs);
      if (at < 0 || at >= static_cast<double>(d.density[r].size())) return;
      const inspect::DensityBucket& b = d.density[r][static_cast<size_t>(at)];
      if (b.count == 0 && b.busy <= 0) return;
      ImGui::BeginTooltip();
      ImGui::Text("%d launches in %s, busy %.0f%%", b.count, formatDuration(static_cast<double>(d.bucketNs)).c_str(),
                  100.0 * b.busy);
      if (b.kernel >= 0 && static_cast<size_t>(b.kernel) < t.kernels.size())
        ImGui::Text("longest: %s", t.kernels[static_cast<size_t>(b.kernel)].name.c_str());
      ImGui::TextDisabled("%lld launches in view: zoom in (or click) to see them", static_cast<long long>(d.launches));
      ImGui::EndTooltip();
      return;
    }
    return;
  }
  if (!hit) return;
  const inspect::TimelineRow& row = t.rows[static_cast<size_t>(hit->box.row)];
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 36);
  if (hit->event >= 0) {
    const inspect::TimelineEvent& e = t.events[static_cast<size_t>(hit->event)];
    ImGui::TextUnformatted(t.nameOf(static_cast<uint32_t>(hit->event)).c_str());
    ImGui::Separator();
    ImGui::Text("%s · %s    on %s %s", t.kinds[e.kind].c_str(), t.families[e.family].c_str(), row.device.c_str(),
                row.label.c_str());
    ImGui::Text("duration  %s    at %s", formatDuration(static_cast<double>(e.durationNs)).c_str(),
                formatNs(static_cast<double>(e.startNs), std::max(1.0, w.nsPerPx)).c_str());
    ImGui::Text("flops     %s    bytes %s", formatCount(e.flops, "FLOP").c_str(), formatCount(e.bytes, "B").c_str());
    ImGui::Text("achieved  %.2f GFLOP/s    %.2f GB/s", inspect::gflopsPerSecond(e), inspect::gbPerSecond(e));
    if (const inspect::TimelineKernel* k = t.kernelOf(static_cast<uint32_t>(hit->event))) {
      std::string ops;
      for (size_t i = 0; i < k->ops.size() && i < 8; ++i) ops += (i ? ", " : "") + k->ops[i];
      if (k->ops.size() > 8) ops += ", ...";
      ImGui::Text("fusion %lld: %zu nodes (%s)%s%s", static_cast<long long>(k->fusion), k->nodes.size(), ops.c_str(),
                  k->modulePath.empty() ? "" : " in ", k->modulePath.c_str());
      if (k->pairNsA >= 0)
        ImGui::Text("per step: A %s, B %s (%+.1f%%), paired by graph node", formatDuration(k->pairNsA).c_str(),
                    formatDuration(k->pairNsB).c_str(), 100.0 * (inspect::kernelChange(*k) - 1));
      ImGui::TextDisabled("click: select its nodes in the graph and the IR");
    }
    int member = 0;
    if (const inspect::TimelineCollective* c = t.collectiveOf(static_cast<uint32_t>(hit->event), &member)) {
      const store::CollectiveInstance& call = c->call;
      const store::CollectiveMember& me = call.members[static_cast<size_t>(member)];
      const store::CollectiveMember& last = call.members[static_cast<size_t>(call.straggler)];
      ImGui::Separator();
      ImGui::Text("collective call %lld over devices %s%s", static_cast<long long>(call.seq), call.group.c_str(),
                  call.complete ? "" : " (members missing)");
      if (member == call.straggler)
        ImGui::TextColored(ImVec4(0.9f, 0.2f, 0.2f, 1), "straggler: arrived last, %s after the first",
                           formatDuration(static_cast<double>(call.maxWaitNs)).c_str());
      else
        ImGui::TextColored(ImVec4(0.9f, 0.2f, 0.2f, 1), "waited %s for the straggler %s",
                           formatDuration(static_cast<double>(me.waitNs)).c_str(), last.device.c_str());
      for (const auto& m : call.members)
        ImGui::Text("  %-8s wait %s%s", m.device.c_str(), formatDuration(static_cast<double>(m.waitNs)).c_str(),
                    &m == &last ? "  (straggler)" : "");
    }
  } else {
    const inspect::TimelineBox& b = hit->box;
    double span = static_cast<double>(b.endNs - b.startNs);
    ImGui::Text("%u kernels folded", b.count());
    ImGui::Separator();
    ImGui::Text("busy %s of %s (%.0f%%)", formatDuration(static_cast<double>(b.busyNs)).c_str(),
                formatDuration(span).c_str(), span > 0 ? 100.0 * static_cast<double>(b.busyNs) / span : 100.0);
    ImGui::TextDisabled("each is narrower than %.0f px here: zoom in, or click to open", m_minPx);
  }
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

}  // namespace tsr::studio
