#include "sim/digest.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

namespace mobisim {

namespace {
constexpr std::uint64_t kPrime = 0x100000001b3ULL;

std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
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
  for (; n >= 8 && (words_ & 3) != 0; p += 8, n -= 8) word(load_le64(p));
  if (n >= 32) {
    // Whole rounds of four words, one per lane, with the lanes in registers: the four multiply
    // chains advance side by side (the same arithmetic as word(), so the same digest).
    std::uint64_t a = lane_[0], b = lane_[1], c = lane_[2], d = lane_[3];
    const std::size_t rounds = n / 32;
    for (std::size_t r = 0; r < rounds; ++r, p += 32) {
      a = (a ^ load_le64(p)) * kPrime;
      b = (b ^ load_le64(p + 8)) * kPrime;
      c = (c ^ load_le64(p + 16)) * kPrime;
      d = (d ^ load_le64(p + 24)) * kPrime;
    }
    lane_[0] = a, lane_[1] = b, lane_[2] = c, lane_[3] = d;
    words_ += 4 * rounds;
    n -= 32 * rounds;
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
