#pragma once
// A QOpenGLWidget that draws with Dear ImGui (Debian's libimgui, OpenGL3 backend): our own small shim from Qt
// to ImGui. Each widget owns an ImGui context; Qt's input (mouse position, buttons, wheel, keys, modifiers,
// text, focus) goes into a queue that each frame hands to ImGui at most one transition per button and key, so
// a press and release that arrive between two frames (a quick click, QTest::mouseClick) are both seen, in order.
// Size and device pixel ratio follow the widget. Frames are drawn on demand only: an input event or
// requestFrames() schedules a repaint; an idle widget costs nothing.
#include <cstdint>
#include <deque>

#include <QElapsedTimer>
#include <QOpenGLWidget>

struct ImGuiContext;
struct ImFont;

namespace tsr::studio {

class ImGuiWidget : public QOpenGLWidget {
  Q_OBJECT
 public:
  explicit ImGuiWidget(QWidget* parent = nullptr);
  ~ImGuiWidget() override;

  // Asks for `n` more frames (an animation running, a state that settles on the next frame).
  void requestFrames(int n = 1);
  // Draws one frame into the widget's framebuffer now and waits for the GL to finish it; returns the time
  // taken in ms (build + render), for frame-time measurements. Returns -1 when there is no GL context.
  double renderNow();
  // Whether initializeGL has run and the ImGui backend is up; why not, otherwise.
  bool glReady() const { return m_backendReady; }
  QString glError() const { return m_glError; }
  int64_t frameCount() const { return m_frames; }
  double lastFrameMs() const { return m_lastFrameMs; }
  bool inputPending() const { return !m_queue.empty(); }

 protected:
  // One frame of content, between ImGui::NewFrame and ImGui::Render, with this widget's context current.
  virtual void drawFrame() = 0;
  // The clear colour behind the ImGui windows.
  virtual QColor background() const;
  ImFont* font() const { return m_font; }

  void initializeGL() override;
  void paintGL() override;

  void mousePressEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void wheelEvent(QWheelEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;
  void keyReleaseEvent(QKeyEvent* e) override;
  void focusInEvent(QFocusEvent* e) override;
  void focusOutEvent(QFocusEvent* e) override;
  void leaveEvent(QEvent* e) override;
  bool event(QEvent* e) override;

 private:
  struct Input {
    enum class Kind { MousePos, MouseButton, Wheel, Key, Char, Modifiers, FocusOut };
    Kind kind;
    float x = 0, y = 0;  // MousePos: position; Wheel: horizontal, vertical steps
    int code = 0;        // MouseButton: 0 left, 1 right, 2 middle; Key: index into io.KeysDown; Char: code point
    bool down = false;
    Qt::KeyboardModifiers mods;
  };

  void enqueue(Input in);
  void applyInput();  // queued input into ImGuiIO, stopping where a frame must come between two transitions
  void releaseBackend();
  void frame();

  ImGuiContext* m_ctx = nullptr;
  ImFont* m_font = nullptr;
  bool m_backendReady = false;
  QString m_glError;
  std::deque<Input> m_queue;
  int m_pendingFrames = 0;
  bool m_updateScheduled = false;
  QElapsedTimer m_clock;
  int64_t m_frames = 0;
  double m_lastFrameMs = 0;
  int m_cursor = -2;  // the ImGui cursor last set on the widget
};

}  // namespace tsr::studio
