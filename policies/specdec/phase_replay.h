#pragma once
// A request's phases (SpecDecPolicy::run) replayed on the simulated phone: the main chain in
// order, each phase queued on its unit at its priority plus the caller's; the background stream
// (pipelined calibration) started beside it, each background phase once the main-chain phase it
// follows (`after`) has run; a main-chain phase with `join` waiting for the whole stream first.
//
// One implementation for every caller: replay_phases (specdec_policy.h: the whole request in one
// go) and the request pipeline's CoordGen stages (policies/pipeline/policy_phases.h: the prefill
// stage runs prefill(), the decode stage rest()). The pipeline depends on this folder, not the
// reverse.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "devices/device.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/event.h"

namespace mobisim::policies::specdec {

class PhaseReplay {
 public:
  // The next request's phases (the previous request's background stream must have ended).
  void set(std::vector<Phase> phases);
  const std::vector<Phase>& phases() const { return phases_; }
  // Starts the background stream (if any), then runs the main-chain phases of the prefill (the
  // leading prefill / prefill attention phases and the prefill lm head after them, which the policies
  // emit first).
  sim::Task<void> prefill(devices::Device& device, int priority);
  // Runs one main-chain verification (`compute`: its busy time on the unit) as the caller needs it
  // run; `verify_index` counts the request's verifications from 0. The request pipeline's decode
  // stage puts a KV-residency stage's reads for the step beside it (kv_residency.h).
  using VerifyWrap = std::function<sim::Task<void>(std::int64_t verify_index, sim::Task<void> compute)>;
  // The main chain after the prefill (joins honoured), then the end of the background stream;
  // each verification through `wrap` when one is given.
  sim::Task<void> rest(devices::Device& device, int priority, VerifyWrap wrap = {});
  // What the main chain waited at joins and at the end for the background stream.
  double join_wait_s() const { return join_wait_s_; }
  std::int64_t verifications() const;  // main-chain "verify" phases
  bool is_prefill_phase(std::size_t i) const { return i < split_; }

 private:
  sim::Task<void> phase(devices::Device& device, std::size_t i, int priority);
  sim::Task<void> background(devices::Device& device, int priority);
  sim::Task<void> wait_background(devices::Device& device);

  std::vector<Phase> phases_;
  std::size_t split_ = 0;  // first main-chain phase that is not the prefill's
  std::vector<sim::Event> done_;  // [i]: main-chain phase i finished (what background phases wait for)
  std::optional<sim::ProcessHandle> background_;
  double join_wait_s_ = 0;
};

}  // namespace mobisim::policies::specdec
