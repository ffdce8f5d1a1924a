#include "engine/project/trace_server.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

namespace tsr::project {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The server and our end of its socket. Guarded by its mutex; a trace holds it while it runs.
class TraceServer {
 public:
  ~TraceServer() { stop(); }

  std::optional<ProcessExit> run(const TraceServerRequest& r) {
    std::unique_lock lock(m_mutex, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;  // another thread's trace: that one keeps the server
    if (m_pid > 0 && (m_interpreter != r.interpreter || m_env != r.env)) stop();
    if (m_pid <= 0 && !start(r)) return std::nullopt;
    std::error_code ec;
    json request = {{"args", r.args}, {"log", r.log}, {"cwd", std::filesystem::current_path(ec).string()}};
    if (!send(request.dump() + "\n")) return failed();
    const auto deadline = r.timeoutSeconds > 0
                              ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(r.timeoutSeconds))
                              : Clock::time_point::max();
    std::optional<json> started = receive(Clock::time_point::max());
    if (!started || !started->contains("pid")) return failed();
    const pid_t child = started->at("pid").get<pid_t>();
    std::optional<json> ended = receive(deadline);
    if (ended && ended->contains("status")) return processExit(ended->at("status").get<int>());
    if (ended) return failed();
    if (!m_alive) return failed();
    // Past the deadline: stopped as waitProcess stops a child, SIGTERM and then SIGKILL; the server reaps it.
    ::kill(child, SIGTERM);
    ended = receive(Clock::now() + std::chrono::seconds(1));
    if (!ended && m_alive) {
      ::kill(child, SIGKILL);
      ended = receive(Clock::now() + std::chrono::seconds(10));
    }
    if (!ended) stop();
    ProcessExit e;
    e.timedOut = true;
    return e;
  }

 private:
  bool start(const TraceServerRequest& r) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
    SpawnOptions o;
    o.argv = {r.interpreter, "-m", "tessera.trace_server"};
    o.setEnv = r.env;
    o.channel = fds[1];  // the child's stdin and stdout; its stderr stays ours (a crash of the server says why)
    auto pid = spawnProcess(o);
    ::close(fds[1]);
    if (!pid.ok()) {
      ::close(fds[0]);
      return false;
    }
    m_pid = *pid;
    m_socket = fds[0];
    m_alive = true;
    m_buffer.clear();
    m_interpreter = r.interpreter;
    m_env = r.env;
    return true;
  }

  void stop() {
    if (m_pid <= 0) return;
    ::close(m_socket);  // the server ends at end of input
    m_socket = -1;
    waitProcess(m_pid, 2.0);
    m_pid = -1;
    m_alive = false;
  }

  std::optional<ProcessExit> failed() {
    stop();
    return std::nullopt;
  }

  bool send(const std::string& line) {
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::send(m_socket, line.data() + done, line.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // The next line of JSON, or nullopt at the deadline or when the server has gone (then m_alive is false).
  std::optional<json> receive(Clock::time_point deadline) {
    for (;;) {
      if (size_t nl = m_buffer.find('\n'); nl != std::string::npos) {
        std::string line = m_buffer.substr(0, nl);
        m_buffer.erase(0, nl + 1);
        json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
          m_alive = false;
          return std::nullopt;
        }
        return j;
      }
      int waitMs = -1;
      if (deadline != Clock::time_point::max()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return std::nullopt;
        waitMs = static_cast<int>(std::min<long long>(left, 1000));
      }
      pollfd p{m_socket, POLLIN, 0};
      const int ready = ::poll(&p, 1, waitMs);
      if (ready < 0 && errno != EINTR) {
        m_alive = false;
        return std::nullopt;
      }
      if (ready <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::recv(m_socket, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        m_alive = false;
        return std::nullopt;
      }
      m_buffer.append(chunk, static_cast<size_t>(n));
    }
  }

  std::mutex m_mutex;
  pid_t m_pid = -1;
  int m_socket = -1;
  bool m_alive = false;
  std::string m_buffer;
  std::string m_interpreter;
  std::vector<std::pair<std::string, std::string>> m_env;
};

}  // namespace

std::optional<ProcessExit> traceWithServer(const TraceServerRequest& request) {
  static TraceServer server;
  return server.run(request);
}

}  // namespace tsr::project
