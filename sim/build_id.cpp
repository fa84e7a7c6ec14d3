#include "sim/build_id.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "sim/digest.h"

namespace mobisim {

namespace {
std::string digest_of_executable() {
  const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "unknown";
  std::uint64_t digest = 0, bytes = 0;
  const bool ok = digest_fd(fd, 0, digest, bytes);
  ::close(fd);
  return ok ? fmt::format("{:016x}", digest) : "unknown";
}
}  // namespace

const std::string& build_id() {
  static const std::string id = digest_of_executable();  // immutable once made (thread-safe init)
  return id;
}

bool is_this_build(const std::string& recorded) { return build_id() != "unknown" && recorded == build_id(); }

}  // namespace mobisim
