#include "policies/kvcache/fingerprint.h"

#include <fmt/format.h>

#include "sim/error.h"

namespace mobisim::policies::kvcache {

std::uint64_t fingerprint(std::span<const std::int32_t> tokens) {
  RollingFnv1a h;
  for (auto t : tokens) h.add_token(t);
  return h.value();
}

std::vector<std::uint64_t> prefix_fingerprints(std::span<const std::int32_t> tokens,
                                               std::span<const std::int64_t> lengths) {
  std::vector<std::uint64_t> out;
  out.reserve(lengths.size());
  RollingFnv1a h;
  std::size_t i = 0;
  std::int64_t prev = -1;
  for (const std::int64_t g : lengths) {
    if (g <= prev || g < 0 || g > static_cast<std::int64_t>(tokens.size()))
      throw Error(fmt::format("prefix_fingerprints: lengths must ascend within [0, {}] (got {})", tokens.size(), g));
    while (static_cast<std::int64_t>(i) < g) h.add_token(tokens[i++]);
    out.push_back(h.value());
    prev = g;
  }
  return out;
}

}  // namespace mobisim::policies::kvcache
