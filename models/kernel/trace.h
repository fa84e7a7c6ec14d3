#pragma once
// `mobisim kernel trace`: per-layer K/V and attention statistics of a real run,
// written to HDF5 for trace-driven policies (DynaKV, CoordGen). The layout is
// documented in models/kernel/TRACE_FORMAT.md.
#include <cstdint>
#include <string>
#include <vector>

#include "models/kernel/transformer.h"

namespace mobisim::kernel {

struct TraceOptions {
  int tokens = 256;           // sequence length, prompt included
  std::vector<int> prompt;    // empty: BOS = 1
  std::string mode = "sample";  // "greedy" or "sample" (temperature 1, seeded)
  std::uint64_t seed = 7;
  int top_k = 32;             // for the top-k attention mass column
  int recent = 32;            // for the recent-window attention mass column
};

// Writes the trace atomically; returns a short human-readable summary.
std::string write_trace(const Model& m, const std::string& path, const TraceOptions& opt);

}  // namespace mobisim::kernel
