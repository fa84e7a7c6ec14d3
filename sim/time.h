#pragma once
// Simulated time is an integer number of nanoseconds (never a double): event
// order is exact and runs are bit-reproducible. int64 ns spans 292 years.
#include <cmath>
#include <cstdint>

namespace mobisim::sim {

using Time = std::int64_t;

inline constexpr Time kNanosecond = 1;
inline constexpr Time kMicrosecond = 1'000;
inline constexpr Time kMillisecond = 1'000'000;
inline constexpr Time kSecond = 1'000'000'000;
inline constexpr Time kHour = 3600 * kSecond;
inline constexpr Time kTimeMax = INT64_MAX;
// The latest arrival a workload may have, in seconds (about 95 years). The
// clock reaches 292 years; the rest is room to serve what arrives, and a
// bound on the per-day work a trace reader does (idle windows per day).
inline constexpr double kMaxArrival_s = 3.0e9;

// Rounds to the nearest nanosecond; durations are never negative.
inline Time from_seconds(double s) { return static_cast<Time>(std::llround(s * 1e9)); }
inline Time from_ms(double ms) { return static_cast<Time>(std::llround(ms * 1e6)); }
inline double to_seconds(Time t) { return static_cast<double>(t) * 1e-9; }
inline double to_ms(Time t) { return static_cast<double>(t) * 1e-6; }

}  // namespace mobisim::sim
