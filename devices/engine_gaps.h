#pragma once
// What an engine profile neither sets nor inherits from the device profile (devices/engine.h):
// the (phase, weight dtype) pairs of one unit whose values are missing, each with the ConfigError
// message that names the engine, unit, phase, dtype, missing keys and file. A unit carries its gaps
// (ComputeUnitSpec::gaps, NpuSpec::gaps) and raises the error where the value is first needed, so no
// run ever takes a device value the engine did not name. A unit with no engine applied has none.
#include <map>
#include <string>
#include <utility>

#include "models/model_spec.h"

namespace mobisim::devices {

enum class Phase { kPrefill, kDecode };  // batched (GEMM) work, single-token (GEMV) work
const char* to_string(Phase p);          // "prefill", "decode"
inline constexpr Phase kPhases[] = {Phase::kPrefill, Phase::kDecode};

struct EngineGaps {
  std::map<std::pair<Phase, models::DType>, std::string> missing;  // -> the error message
  // The message of a gap, or null.
  const std::string* find(Phase phase, models::DType dtype) const {
    auto it = missing.find({phase, dtype});
    return it == missing.end() ? nullptr : &it->second;
  }
  // Throws ConfigError when (phase, dtype) is a gap.
  void check(Phase phase, models::DType dtype) const;
};

}  // namespace mobisim::devices
