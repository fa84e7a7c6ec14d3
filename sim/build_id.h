#pragma once
// The identity of the running build: the content digest (sim/digest.h) of the executable's bytes
// (/proc/self/exe), 16 hex digits. A result file records the build that simulated it, so cached
// results (fidelity runs, resumed sweeps) are reused only by that build: a rebuilt binary with a
// changed model reruns them instead of reading numbers it did not produce. "unknown" when the
// executable cannot be read (then nothing is reused across processes).
#include <string>

namespace mobisim {

// Computed once per process (a few milliseconds for the mobisim binary); the same for every thread.
const std::string& build_id();
// Whether a result file's recorded `mobisim_build` is this build (never when this build is "unknown").
bool is_this_build(const std::string& recorded);

}  // namespace mobisim
