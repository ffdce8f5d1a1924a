// Ctrl-C during a long engine call. Python's own SIGINT handler only sets a flag that the interpreter reads
// between bytecodes, which never come while the engine compiles or runs. The first InterruptWatch puts a handler
// in front of Python's that also asks the engine to stop (engine/core/interrupt.h); the engine stops at its next
// check (a pass, a kernel, a loop iteration) and the call raises what Python's handler says (KeyboardInterrupt).
// The handler stays (between calls it only passes the signal on, and each call starts with the request cleared):
// putting it in place and back around every call cost two system calls, a sixth of a small jitted call. When
// Python installs another handler (signal.signal), the next watch stands in front of that one.
#include <csignal>

#include "app/python/bindings.h"
#include "engine/core/interrupt.h"

namespace tsr::python {

namespace {

struct sigaction gPythonAction;  // the handler we stand in front of
int gDepth = 0;                   // nested watches (under the GIL): the outermost checks the handler

void onInterrupt(int sig, siginfo_t* info, void* context) {
  requestInterrupt();
  // Python's handler trips its own flag: a Python callback running now raises KeyboardInterrupt as usual.
  if (gPythonAction.sa_flags & SA_SIGINFO) gPythonAction.sa_sigaction(sig, info, context);
  else gPythonAction.sa_handler(sig);
}

}  // namespace

InterruptWatch::InterruptWatch() {
  // Python runs signal handlers on its main thread only; elsewhere a Ctrl-C is not this call's to take.
  if (!PyGILState_Check() || PyThread_get_thread_ident() != mainThread()) return;
  if (gDepth++ > 0) {
    m_active = true;
    return;
  }
  struct sigaction current{};
  sigaction(SIGINT, nullptr, &current);
  const bool ours = (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &onInterrupt;
  if (!ours) {
    const bool pythonHandles = (current.sa_flags & SA_SIGINFO) ||
                               (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
    if (!pythonHandles) {  // signal.signal(SIGINT, SIG_IGN) or SIG_DFL: the user's choice stands
      --gDepth;
      return;
    }
    gPythonAction = current;
    struct sigaction handler{};
    handler.sa_sigaction = &onInterrupt;
    handler.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&handler.sa_mask);
    sigaction(SIGINT, &handler, nullptr);
  }
  clearInterrupt();  // a Ctrl-C between calls went to Python alone
  m_active = true;
}

InterruptWatch::~InterruptWatch() {
  if (!m_active || --gDepth > 0) return;
  clearInterrupt();
}

void InterruptWatch::raiseIfInterrupted() {
  if (!m_active || !interruptRequested()) return;
  clearInterrupt();
  // Python's handler was called with the signal: running it now raises KeyboardInterrupt (or whatever the
  // user's handler raises). A handler that raises nothing leaves the engine's own "interrupted" error.
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

unsigned long InterruptWatch::mainThread() {
  static const unsigned long kMain =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  return kMain;
}

}  // namespace tsr::python
