#include "views/imgui_widget.h"

#include <algorithm>
#include <cfloat>

#include <QFile>
#include <QFocusEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QTimer>
#include <QWheelEvent>

#include <imgui.h>
#include <backends/imgui_impl_opengl3.h>

namespace tsr::studio {

namespace {

// io.KeysDown[] indices: printable keys by their (upper-case) ASCII code, named keys above 256.
constexpr int kNamedKeyBase = 256;

int keyIndex(int qtKey) {
  if (qtKey >= Qt::Key_Space && qtKey <= Qt::Key_AsciiTilde) return qtKey;
  switch (qtKey) {
    case Qt::Key_Tab: return kNamedKeyBase + ImGuiKey_Tab;
    case Qt::Key_Left: return kNamedKeyBase + ImGuiKey_LeftArrow;
    case Qt::Key_Right: return kNamedKeyBase + ImGuiKey_RightArrow;
    case Qt::Key_Up: return kNamedKeyBase + ImGuiKey_UpArrow;
    case Qt::Key_Down: return kNamedKeyBase + ImGuiKey_DownArrow;
    case Qt::Key_PageUp: return kNamedKeyBase + ImGuiKey_PageUp;
    case Qt::Key_PageDown: return kNamedKeyBase + ImGuiKey_PageDown;
    case Qt::Key_Home: return kNamedKeyBase + ImGuiKey_Home;
    case Qt::Key_End: return kNamedKeyBase + ImGuiKey_End;
    case Qt::Key_Insert: return kNamedKeyBase + ImGuiKey_Insert;
    case Qt::Key_Delete: return kNamedKeyBase + ImGuiKey_Delete;
    case Qt::Key_Backspace: return kNamedKeyBase + ImGuiKey_Backspace;
    case Qt::Key_Return: return kNamedKeyBase + ImGuiKey_Enter;
    case Qt::Key_Enter: return kNamedKeyBase + ImGuiKey_KeyPadEnter;
    case Qt::Key_Escape: return kNamedKeyBase + ImGuiKey_Escape;
    default: return -1;
  }
}

Qt::CursorShape qtCursor(int imguiCursor) {
  switch (imguiCursor) {
    case ImGuiMouseCursor_TextInput: return Qt::IBeamCursor;
    case ImGuiMouseCursor_ResizeAll: return Qt::SizeAllCursor;
    case ImGuiMouseCursor_ResizeNS: return Qt::SizeVerCursor;
    case ImGuiMouseCursor_ResizeEW: return Qt::SizeHorCursor;
    case ImGuiMouseCursor_ResizeNESW: return Qt::SizeBDiagCursor;
    case ImGuiMouseCursor_ResizeNWSE: return Qt::SizeFDiagCursor;
    case ImGuiMouseCursor_Hand: return Qt::PointingHandCursor;
    case ImGuiMouseCursor_NotAllowed: return Qt::ForbiddenCursor;
    case ImGuiMouseCursor_None: return Qt::BlankCursor;
    default: return Qt::ArrowCursor;
  }
}

int buttonIndex(Qt::MouseButton b) {
  switch (b) {
    case Qt::LeftButton: return 0;
    case Qt::RightButton: return 1;
    case Qt::MiddleButton: return 2;
    default: return -1;
  }
}

}  // namespace

ImGuiWidget::ImGuiWidget(QWidget* parent) : QOpenGLWidget(parent) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  ImGuiContext* previous = ImGui::GetCurrentContext();
  m_ctx = ImGui::CreateContext();
  ImGui::SetCurrentContext(m_ctx);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini beside the user's files
  io.LogFilename = nullptr;
  io.BackendPlatformName = "tessera-qt";
  io.BackendFlags |= ImGuiBackendFlags_HasMouseCursors;
  io.ConfigWindowsMoveFromTitleBarOnly = true;
  for (int k = 0; k < ImGuiKey_COUNT; ++k) io.KeyMap[k] = kNamedKeyBase + k;
  io.KeyMap[ImGuiKey_Space] = ' ';
  io.KeyMap[ImGuiKey_A] = 'A';
  io.KeyMap[ImGuiKey_C] = 'C';
  io.KeyMap[ImGuiKey_V] = 'V';
  io.KeyMap[ImGuiKey_X] = 'X';
  io.KeyMap[ImGuiKey_Y] = 'Y';
  io.KeyMap[ImGuiKey_Z] = 'Z';
  io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  ImGui::SetCurrentContext(previous ? previous : m_ctx);
}

ImGuiWidget::~ImGuiWidget() {
  if (m_backendReady) releaseBackend();
  // QOpenGLWidget's destructor destroys the context after this part of the object is gone.
  if (context()) disconnect(context(), nullptr, this, nullptr);
  ImGui::DestroyContext(m_ctx);
}

QColor ImGuiWidget::background() const { return palette().color(QPalette::Base); }

void ImGuiWidget::initializeGL() {
  ImGui::SetCurrentContext(m_ctx);
  ImGuiIO& io = ImGui::GetIO();
  // A context may come again (the widget moved to another window, e.g. a floated dock): the backend's GL
  // objects belonged to the old one.
  connect(context(), &QOpenGLContext::aboutToBeDestroyed, this, &ImGuiWidget::releaseBackend, Qt::DirectConnection);
  QSurfaceFormat f = context()->format();
  bool es = context()->isOpenGLES();
  if (!es && f.majorVersion() < 3) {
    m_glError = tr("OpenGL 3 is needed; this context is %1.%2").arg(f.majorVersion()).arg(f.minorVersion());
    return;
  }
  if (!m_font) {
    // A font drawn at the screen's pixel density, shown at its logical size.
    float dpr = static_cast<float>(devicePixelRatioF());
    for (const char* path : {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"}) {
      if (QFile::exists(path)) {
        m_font = io.Fonts->AddFontFromFileTTF(path, 14.0f * dpr);
        break;
      }
    }
    if (!m_font) {
      ImFontConfig cfg;
      cfg.SizePixels = 13.0f * dpr;
      m_font = io.Fonts->AddFontDefault(&cfg);
    }
    io.FontGlobalScale = 1.0f / dpr;
  }
  m_backendReady = ImGui_ImplOpenGL3_Init(es ? "#version 300 es" : "#version 130");
  if (!m_backendReady) m_glError = tr("the ImGui OpenGL3 backend did not start");
}

void ImGuiWidget::releaseBackend() {
  if (!m_backendReady) return;
  makeCurrent();
  ImGui::SetCurrentContext(m_ctx);
  ImGui_ImplOpenGL3_Shutdown();
  m_backendReady = false;
  doneCurrent();
}

void ImGuiWidget::paintGL() {
  if (!m_backendReady) {
    QColor bg = background();
    QOpenGLFunctions* gl = context()->functions();
    gl->glClearColor(bg.redF(), bg.greenF(), bg.blueF(), 1.0f);
    gl->glClear(GL_COLOR_BUFFER_BIT);
    return;
  }
  frame();
}

double ImGuiWidget::renderNow() {
  if (!m_backendReady) return -1;
  makeCurrent();
  QElapsedTimer t;
  t.start();
  frame();
  context()->functions()->glFinish();
  double ms = static_cast<double>(t.nsecsElapsed()) * 1e-6;
  doneCurrent();
  return ms;
}

void ImGuiWidget::frame() {
  QElapsedTimer t;
  t.start();
  ImGui::SetCurrentContext(m_ctx);
  ImGuiIO& io = ImGui::GetIO();
  double dt = m_clock.isValid() ? static_cast<double>(m_clock.nsecsElapsed()) * 1e-9 : 1.0 / 60.0;
  m_clock.restart();
  io.DeltaTime = static_cast<float>(std::clamp(dt, 1e-4, 0.25));
  const float dpr = static_cast<float>(devicePixelRatioF());
  io.DisplaySize = ImVec2(static_cast<float>(width()), static_cast<float>(height()));
  io.DisplayFramebufferScale = ImVec2(dpr, dpr);
  applyInput();

  ImGui_ImplOpenGL3_NewFrame();
  ImGui::NewFrame();
  drawFrame();
  ImGui::Render();

  QOpenGLFunctions* gl = context()->functions();
  QColor bg = background();
  gl->glViewport(0, 0, static_cast<int>(static_cast<float>(width()) * dpr), static_cast<int>(static_cast<float>(height()) * dpr));
  gl->glClearColor(bg.redF(), bg.greenF(), bg.blueF(), 1.0f);
  gl->glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  ++m_frames;
  m_lastFrameMs = static_cast<double>(t.nsecsElapsed()) * 1e-6;

  int cursor = ImGui::GetMouseCursor();
  if (cursor != m_cursor) {
    m_cursor = cursor;
    setCursor(qtCursor(cursor));
  }
  // Input left in the queue, or a frame asked for: draw again soon (not from inside this paint).
  if (!m_queue.empty()) m_pendingFrames = std::max(m_pendingFrames, 1);
  if (m_pendingFrames > 0 && !m_updateScheduled) {
    --m_pendingFrames;
    m_updateScheduled = true;
    QTimer::singleShot(m_queue.empty() ? 8 : 0, this, [this] {
      m_updateScheduled = false;
      update();
    });
  }
}

void ImGuiWidget::requestFrames(int n) {
  m_pendingFrames = std::max(m_pendingFrames, n - 1);
  update();
}

void ImGuiWidget::enqueue(Input in) {
  m_queue.push_back(in);
  // One more frame after the one that takes the input: hover state and tooltips settle on it.
  requestFrames(2);
}

void ImGuiWidget::applyInput() {
  ImGuiIO& io = ImGui::GetIO();
  bool buttonChanged[5] = {};
  bool anyButton = false;
  std::vector<int> keysChanged;
  auto setMods = [&io](Qt::KeyboardModifiers m) {
    io.KeyCtrl = m.testFlag(Qt::ControlModifier);
    io.KeyShift = m.testFlag(Qt::ShiftModifier);
    io.KeyAlt = m.testFlag(Qt::AltModifier);
    io.KeySuper = m.testFlag(Qt::MetaModifier);
  };
  while (!m_queue.empty()) {
    const Input& in = m_queue.front();
    switch (in.kind) {
      case Input::Kind::MousePos:
        // A move after a press or release waits for the next frame: the click lands where it was made.
        if (anyButton) return;
        io.MousePos = ImVec2(in.x, in.y);
        setMods(in.mods);
        break;
      case Input::Kind::MouseButton:
        if (buttonChanged[in.code]) return;
        io.MouseDown[in.code] = in.down;
        buttonChanged[in.code] = anyButton = true;
        setMods(in.mods);
        break;
      case Input::Kind::Wheel:
        io.MouseWheelH += in.x;
        io.MouseWheel += in.y;
        setMods(in.mods);
        break;
      case Input::Kind::Key:
        if (std::find(keysChanged.begin(), keysChanged.end(), in.code) != keysChanged.end()) return;
        io.KeysDown[in.code] = in.down;
        keysChanged.push_back(in.code);
        setMods(in.mods);
        break;
      case Input::Kind::Char:
        io.AddInputCharacter(static_cast<unsigned>(in.code));
        break;
      case Input::Kind::Modifiers:
        setMods(in.mods);
        break;
      case Input::Kind::FocusOut:
        std::fill(std::begin(io.KeysDown), std::end(io.KeysDown), false);
        std::fill(std::begin(io.MouseDown), std::end(io.MouseDown), false);
        setMods({});
        break;
    }
    m_queue.pop_front();
  }
}

void ImGuiWidget::mousePressEvent(QMouseEvent* e) {
  int b = buttonIndex(e->button());
  if (b < 0) return;
  QPointF p = e->position();
  enqueue({Input::Kind::MousePos, static_cast<float>(p.x()), static_cast<float>(p.y()), 0, false, e->modifiers()});
  enqueue({Input::Kind::MouseButton, 0, 0, b, true, e->modifiers()});
}

void ImGuiWidget::mouseDoubleClickEvent(QMouseEvent* e) {
  // Qt sends press, release, double-click, release; ImGui finds double clicks from the timing itself.
  mousePressEvent(e);
}

void ImGuiWidget::mouseReleaseEvent(QMouseEvent* e) {
  int b = buttonIndex(e->button());
  if (b < 0) return;
  QPointF p = e->position();
  enqueue({Input::Kind::MousePos, static_cast<float>(p.x()), static_cast<float>(p.y()), 0, false, e->modifiers()});
  enqueue({Input::Kind::MouseButton, 0, 0, b, false, e->modifiers()});
}

void ImGuiWidget::mouseMoveEvent(QMouseEvent* e) {
  QPointF p = e->position();
  // Consecutive moves collapse into the last one.
  if (!m_queue.empty() && m_queue.back().kind == Input::Kind::MousePos) m_queue.pop_back();
  enqueue({Input::Kind::MousePos, static_cast<float>(p.x()), static_cast<float>(p.y()), 0, false, e->modifiers()});
}

void ImGuiWidget::wheelEvent(QWheelEvent* e) {
  QPointF p = e->position();
  enqueue({Input::Kind::MousePos, static_cast<float>(p.x()), static_cast<float>(p.y()), 0, false, e->modifiers()});
  QPoint a = e->angleDelta();
  enqueue({Input::Kind::Wheel, static_cast<float>(a.x()) / 120.0f, static_cast<float>(a.y()) / 120.0f, 0, false, e->modifiers()});
  e->accept();
}

void ImGuiWidget::keyPressEvent(QKeyEvent* e) {
  int k = keyIndex(e->key());
  if (k >= 0) enqueue({Input::Kind::Key, 0, 0, k, true, e->modifiers()});
  for (QChar c : e->text())
    if (c.unicode() >= 0x20 && c.unicode() != 0x7f) enqueue({Input::Kind::Char, 0, 0, c.unicode(), false, e->modifiers()});
  if (k < 0 && e->text().isEmpty()) enqueue({Input::Kind::Modifiers, 0, 0, 0, false, e->modifiers()});
  e->accept();
}

void ImGuiWidget::keyReleaseEvent(QKeyEvent* e) {
  if (e->isAutoRepeat()) return;
  int k = keyIndex(e->key());
  if (k >= 0) enqueue({Input::Kind::Key, 0, 0, k, false, e->modifiers()});
  else enqueue({Input::Kind::Modifiers, 0, 0, 0, false, e->modifiers()});
  e->accept();
}

void ImGuiWidget::focusInEvent(QFocusEvent* e) {
  QOpenGLWidget::focusInEvent(e);
  requestFrames(1);
}

void ImGuiWidget::focusOutEvent(QFocusEvent* e) {
  QOpenGLWidget::focusOutEvent(e);
  enqueue({Input::Kind::FocusOut, 0, 0, 0, false, Qt::NoModifier});
}

void ImGuiWidget::leaveEvent(QEvent* e) {
  QOpenGLWidget::leaveEvent(e);
  enqueue({Input::Kind::MousePos, -FLT_MAX, -FLT_MAX, 0, false, Qt::NoModifier});
}

bool ImGuiWidget::event(QEvent* e) {
  // Keys the canvas handles itself (arrows, letters) reach it before the window's shortcuts when it has focus.
  if (e->type() == QEvent::ShortcutOverride) {
    auto* k = static_cast<QKeyEvent*>(e);
    if (k->modifiers() == Qt::NoModifier && keyIndex(k->key()) >= 0 && k->key() != Qt::Key_Escape) {
      e->accept();
      return true;
    }
  }
  return QOpenGLWidget::event(e);
}

}  // namespace tsr::studio
