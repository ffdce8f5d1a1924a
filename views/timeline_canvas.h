#pragma once
// The Timeline panel's canvas, drawn with Dear ImGui: rows per device and stream (and host thread) on a shared
// time axis, the profile's step spans above them. What is drawn comes from engine/inspect/timeline.h: kernels
// narrower than minPx() are folded into one box with a count, so a frame visits only what is on screen.
//
// A profile too large to hold is shown a window at a time: setWindowData() gives the canvas the last answer
// (launches, or each row's density drawn as filled bars as high as the row is busy), and windowNeeded() asks
// for the next one whenever the view leaves what the answer serves; the view never waits for it.
//
// Mouse: wheel zooms around the cursor (smoothly); drag pans (both ways); shift-drag or right-drag selects a
// time range; a click selects a kernel (or zooms into a fold); hovering shows a kernel's name, duration, flops,
// bytes and achieved GFLOP/s and GB/s. Keys: W/S zoom, A/D pan, F fits, Esc clears the range and selection.
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/inspect/timeline.h"
#include "engine/inspect/timeline_window.h"
#include "views/imgui_widget.h"

namespace tsr::studio {

class TimelineCanvas : public ImGuiWidget {
  Q_OBJECT
 public:
  // Change: on a timeline of two profiles, by how the kernel's time per step changed from A to B.
  enum class ColourBy { Kind, Family, Change };

  explicit TimelineCanvas(QWidget* parent = nullptr);

  // Shows a timeline (nullptr: none), fitted to the window.
  void setTimeline(std::shared_ptr<const inspect::Timeline> timeline);
  // A window of a profile read a window at a time (after setTimeline with its timeline): the view stays.
  void setWindowData(std::shared_ptr<const inspect::TimelineWindow> window);
  const inspect::TimelineWindow* windowData() const { return m_windowData.get(); }
  const inspect::Timeline* timeline() const { return m_timeline.get(); }
  void setColourBy(ColourBy c);
  ColourBy colourBy() const { return m_colourBy; }
  // Kernels narrower than this many pixels are folded (0: never).
  void setMinPx(double px);
  double minPx() const { return m_minPx; }

  // The view. Windows are in ns of the timeline; x is measured from the left of the event area.
  void fitAll();
  void setWindow(double startNs, double endNs);  // at once, without animation
  // Zooms (factor < 1: in) around pixel x of the event area, smoothly.
  void zoomAt(double factor, double x);
  inspect::TimeWindow window() const;
  bool animating() const;
  // The event area in widget coordinates, and the rows' layout in them (y includes the axis above).
  QRectF eventArea() const;
  inspect::TimelineLayout rowLayout() const;
  // The widget pixel where event `e` is drawn (its middle), if it is on screen.
  std::optional<QPointF> pixelOf(uint32_t event) const;

  int64_t selectedEvent() const { return m_selected; }
  void setSelectedEvent(int64_t event);
  // Kernels marked on the timeline (the graph's selection): every launch in view is outlined.
  void setHighlightedKernels(std::vector<int> kernels);
  const std::vector<int>& highlightedKernels() const { return m_highlighted; }
  std::optional<std::pair<int64_t, int64_t>> range() const { return m_range; }
  void setRange(int64_t fromNs, int64_t toNs);
  void clearRange();

  // What the last frame drew: boxes (events and folds), and the events they hold.
  size_t lastBoxCount() const { return m_lastBoxes; }
  size_t lastBoxEvents() const { return m_lastBoxEvents; }

 signals:
  void eventClicked(qint64 event);  // -1: a click on no kernel
  void rangeChanged(qint64 fromNs, qint64 toNs);  // from == to: cleared
  // The view needs a window of [fromNs, toNs] at nsPerPx (the view with a margin of a screen on each side).
  void windowNeeded(double fromNs, double toNs, double nsPerPx);

 protected:
  void drawFrame() override;
  QColor background() const override;

 private:
  struct View {
    double startNs = 0;
    double nsPerPx = 1;
  };
  void applyStyle();
  void handleInput(const QRectF& area);
  void animate(double width);
  void clampView(View& v, double width) const;
  void drawAxis(const QRectF& area);
  void drawRows(const QRectF& area);
  void drawDensity(const QRectF& area, size_t row, float y0);
  void requestWindow(double width);
  void drawSpans(const QRectF& area);
  void drawHighlights(const QRectF& area);
  void drawCollectives(const QRectF& area, const std::function<float(uint32_t, unsigned, float)>& outline);
  void drawRange(const QRectF& area);
  void drawLegend(const QRectF& area);
  void drawTooltip(const QRectF& area);
  void drawEmpty();
  unsigned colourOf(const inspect::TimelineEvent& e) const;
  double gutterWidth() const;

  std::shared_ptr<const inspect::Timeline> m_timeline;
  std::vector<unsigned> m_kindColours, m_familyColours;
  ColourBy m_colourBy = ColourBy::Kind;
  double m_minPx = 3;
  View m_view, m_target;
  double m_width = 0;   // event area width of the last frame
  double m_scrollY = 0;
  bool m_fitPending = true;
  bool m_fitted = false;  // the view shows the whole timeline and follows resizes
  int64_t m_selected = -1;
  std::vector<int> m_highlighted;
  std::optional<std::pair<int64_t, int64_t>> m_range;
  double m_gutter = 150;
  bool m_hovered = false;  // the mouse is over the event area (last frame)

  // A drag in progress.
  enum class Drag { None, Pending, Pan, Range };
  Drag m_drag = Drag::None;
  double m_pressX = 0, m_pressY = 0;
  View m_pressView;
  double m_pressScroll = 0;
  bool m_rangeDrag = false;

  std::shared_ptr<const inspect::TimelineWindow> m_windowData;
  std::vector<unsigned> m_kernelColours;           // density: the colour of each kernel's kind
  std::optional<inspect::TimelineWindow> m_asked;  // the window last asked for (its range and scale)

  std::vector<inspect::TimelineBox> m_boxes;  // scratch, reused every frame
  size_t m_lastBoxes = 0, m_lastBoxEvents = 0;
};

}  // namespace tsr::studio
