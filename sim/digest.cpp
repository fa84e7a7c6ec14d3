#include "sim/digest.h"

#include <unistd.h>

#include <cerrno>
#include <vector>

namespace mobisim {

namespace {
constexpr std::uint64_t kPrime = 0x100000001b3ULL;

std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

void Digest::word(std::uint64_t w) {
  auto& l = lane_[words_ & 3];
  l = (l ^ w) * kPrime;
  ++words_;
}

void Digest::update(const unsigned char* p, std::size_t n) {
  total_ += n;
  while (n > 0 && tail_n_ > 0) {  // complete a word started by the previous call
    tail_[tail_n_++] = *p++;
    --n;
    if (tail_n_ == 8) {
      word(load_le64(tail_));
      tail_n_ = 0;
    }
  }
  for (; n >= 8; p += 8, n -= 8) word(load_le64(p));
  while (n > 0) {
    tail_[tail_n_++] = *p++;
    --n;
  }
}

std::uint64_t Digest::finish() const {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto feed = [&](std::uint64_t v, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= kPrime;
    }
  };
  for (std::uint64_t l : lane_) feed(l, 8);
  for (std::size_t i = 0; i < tail_n_; ++i) feed(tail_[i], 1);
  feed(total_, 8);
  return h;
}

bool digest_fd(int fd, std::uint64_t offset, std::uint64_t& digest, std::uint64_t& bytes) {
  std::vector<unsigned char> buf(1 << 20);
  Digest d;
  bytes = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset + bytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) break;
    d.update(buf.data(), static_cast<std::size_t>(n));
    bytes += static_cast<std::uint64_t>(n);
  }
  digest = d.finish();
  return true;
}

}  // namespace mobisim
