#pragma once
// Prefix fingerprints (seed 001): a rolling 64-bit FNV-1a hash over token ids,
// computed while the prompt is read. Each token id is fed as its 4 bytes in
// little-endian order, so the hash of a prefix is the hash state after its last
// token and every prefix of a prompt costs one pass.
#include <cstdint>
#include <span>
#include <vector>

namespace mobisim::policies::kvcache {

inline constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

class RollingFnv1a {
 public:
  void add_token(std::int32_t token) {
    const auto u = static_cast<std::uint32_t>(token);
    for (int b = 0; b < 4; ++b) {
      h_ ^= (u >> (8 * b)) & 0xffu;
      h_ *= kFnvPrime;
    }
    ++n_;
  }
  std::uint64_t value() const { return h_; }
  std::int64_t tokens() const { return n_; }

 private:
  std::uint64_t h_ = kFnvOffsetBasis;
  std::int64_t n_ = 0;
};

// Fingerprint of tokens[0:n).
std::uint64_t fingerprint(std::span<const std::int32_t> tokens);
// Fingerprints of tokens[0:g) for each g (ascending, g <= tokens.size()), in one pass.
std::vector<std::uint64_t> prefix_fingerprints(std::span<const std::int32_t> tokens,
                                               std::span<const std::int64_t> lengths);

}  // namespace mobisim::policies::kvcache
