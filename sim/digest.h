#pragma once
// A 64-bit content digest for files mobisim writes and later reads back (HDF5 results and traces).
// It detects accidental damage (bit flips, truncation, partial copies), not deliberate forgery.
//
// Algorithm (the same as the KV store's, policies/kvcache/STORE_FORMAT.md): four FNV-1a-64 lanes over
// the little-endian 8-byte words (word i feeds lane i mod 4), then byte-wise FNV-1a-64 over the four
// lane values, the 0-7 tail bytes and the total byte count.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mobisim {

class Digest {
 public:
  void update(const unsigned char* p, std::size_t n);
  void update(const std::byte* p, std::size_t n) { update(reinterpret_cast<const unsigned char*>(p), n); }
  std::uint64_t finish() const;

 private:
  void word(std::uint64_t w);
  std::uint64_t lane_[4] = {0xcbf29ce484222325ULL, 0xcbf29ce484222326ULL, 0xcbf29ce484222327ULL,
                            0xcbf29ce484222328ULL};
  std::uint64_t words_ = 0, total_ = 0;
  unsigned char tail_[8]{};
  std::size_t tail_n_ = 0;
};

// Digest of the bytes [offset, end) of an open file descriptor; `bytes` receives their count.
// Returns false on a read error.
bool digest_fd(int fd, std::uint64_t offset, std::uint64_t& digest, std::uint64_t& bytes);

}  // namespace mobisim
