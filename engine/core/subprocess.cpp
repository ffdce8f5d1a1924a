#include "engine/core/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace tsr {

Result<pid_t> spawnProcess(const SpawnOptions& o) {
  if (o.argv.empty()) return makeError("no program to run");
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : o.setEnv) replaced = replaced || name == k;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [k, v] : o.setEnv) env.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!o.log.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, o.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  if (o.channel >= 0) {
    posix_spawn_file_actions_adddup2(&actions, o.channel, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, o.channel, STDOUT_FILENO);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return makeError("cannot run '{}': {}", o.argv[0], std::strerror(rc));
  return pid;
}

ProcessExit processExit(int status) {
  ProcessExit e;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  }
  return e;
}

namespace {

// The child, or its group when it leads one (so a shell's or an interpreter's children go too).
void signalChild(pid_t pid, int sig) {
  if (::getpgid(pid) == pid) ::kill(-pid, sig);
  else ::kill(pid, sig);
}

}  // namespace

std::string ProcessExit::describe(double timeoutSeconds) const {
  if (timedOut) return fmt::format("no result within {:g} s", timeoutSeconds);
  if (cancelled) return "cancelled";
  if (exited) return fmt::format("exit status {}", code);
  return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
}

ProcessExit waitProcess(pid_t pid, double timeoutSeconds, const std::atomic<bool>* cancel) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto sleep = std::chrono::milliseconds(1);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return processExit(status);
    if (r < 0 && errno != EINTR) return ProcessExit{};  // not our child any more: nothing to wait for
    const bool late = timeoutSeconds > 0 && Clock::now() - start > std::chrono::duration<double>(timeoutSeconds);
    const bool stop = cancel && cancel->load();
    if (late || stop) {
      signalChild(pid, SIGTERM);
      bool reaped = false;
      for (int i = 0; i < 100 && !reaped; ++i) {
        reaped = ::waitpid(pid, &status, WNOHANG) == pid;
        if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!reaped) {
        signalChild(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
      }
      ProcessExit e;
      e.timedOut = late;
      e.cancelled = !late;
      return e;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(20));
  }
}

std::string logTail(const std::string& path, size_t maxBytes) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() <= maxBytes) return text;
  size_t from = text.size() - maxBytes;
  if (size_t nl = text.find('\n', from); nl != std::string::npos && nl - from < 200) from = nl + 1;
  return "...\n" + text.substr(from);
}

}  // namespace tsr
