#include "experiments/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "sim/error.h"

extern char** environ;

namespace mobisim::experiments {

std::string self_binary() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("mobisim") : p.string();
}

pid_t spawn_self(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all{self_binary()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(fmt::format("cannot start '{}': {}", argv[0], std::strerror(rc)));
  return pid;
}

void run_children(std::size_t n, int parallel, const std::function<pid_t(std::size_t)>& start,
                  const std::function<bool(std::size_t, int)>& finished) {
  std::map<pid_t, std::size_t> running;  // pid -> child index
  std::size_t next = 0;
  bool go_on = true;
  auto start_more = [&] {
    while (go_on && static_cast<int>(running.size()) < std::max(1, parallel) && next < n) {
      const std::size_t i = next++;
      const pid_t pid = start(i);
      if (pid > 0) running.emplace(pid, i);
    }
  };
  start_more();
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("waitpid failed: {}", std::strerror(errno)));
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;  // not one of ours
    const std::size_t i = it->second;
    running.erase(it);
    go_on = finished(i, status) && go_on;
    start_more();
  }
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return 1;
}

std::string describe_wait_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return fmt::format("killed by signal {}", WTERMSIG(wait_status));
  return fmt::format("exit {}", exit_code_of(wait_status));
}

}  // namespace mobisim::experiments
