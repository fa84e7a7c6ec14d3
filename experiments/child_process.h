#pragma once
// Child processes of mobisim itself: a sweep's points (`mobisim run`) and, with --threads, the
// figures of `mobisim reproduce`. A child has its own address space, so nothing it does (the HDF5
// library is not thread-safe) can disturb another; its console output goes to a log file that the
// parent reads back when it ends.
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace mobisim::experiments {

// The running mobisim executable (/proc/self/exe), or "mobisim" when it cannot be found.
std::string self_binary();

// Starts `self_binary() args...` with stdin from /dev/null and stdout and stderr into `log`
// (created or truncated). Throws Error when the process cannot be started.
pid_t spawn_self(const std::vector<std::string>& args, const std::string& log);

// Runs children 0..n-1, at most `parallel` at a time, started in index order: start(i) spawns
// child i and returns its pid, or -1 to skip it. finished(i, wait_status) is called as each one
// ends (in the order they end); when it returns false no further child is started (those running
// are still waited for).
void run_children(std::size_t n, int parallel, const std::function<pid_t(std::size_t)>& start,
                  const std::function<bool(std::size_t, int)>& finished);

// "exit 3" / "killed by signal 9" for a wait status; 0 when the child exited with 0.
int exit_code_of(int wait_status);
std::string describe_wait_status(int wait_status);

}  // namespace mobisim::experiments
