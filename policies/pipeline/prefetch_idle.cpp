#include "policies/pipeline/prefetch_idle.h"

#include <algorithm>

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema PrefetchIdle::schema() {
  ParamSchema s;
  s.real("quiet_s", 5.0, "idle time after an answer before the prefetch starts").non_negative().with_unit("s");
  s.real("max_mb", 1024.0, "largest prefix promoted to DRAM").positive().with_unit("MB");
  return s;
}

sim::Task<void> PrefetchIdle::after(devices::Device& device, const std::string& owner, KvReuse& reuse, const Request& r,
                                    bool answer_hit, double kv_bytes_per_token) {
  if (answer_hit) co_return;  // no prompt reached the KV-reuse stage
  const std::int64_t generation = generation_;
  sim::Simulator& sim = device.sim();
  if (quiet_s_ > 0) co_await sim.timeout(sim::from_seconds(quiet_s_));
  if (generation != generation_ || kv_bytes_per_token <= 0) co_return;  // the next request came first
  // Idle-time work respects the phone: no prefetch on a low battery or without thermal headroom
  // (devices/power_manager.h; always allowed with thermal: none). It waits for the next idle period.
  if (!device.background_allowed()) co_return;
  const KvMatch m = reuse.match(r, sim::to_seconds(sim.now()));
  const auto cap = static_cast<std::int64_t>(max_bytes_ / kv_bytes_per_token);
  const std::int64_t n = std::min(m.tokens, cap);
  const double bytes = static_cast<double>(n) * kv_bytes_per_token;
  if (n <= 0 || !device.dram().try_allocate(owner + "/prefetch", bytes)) co_return;
  held_ = bytes;
  co_await device.storage().read(bytes, "kv prefetch");
  if (generation != generation_) co_return;  // claimed while reading: nothing promoted
  const std::vector<std::int32_t> ids = r.token_ids();
  tokens_.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
  ready_ = true;
}

IdleClaim PrefetchIdle::claim(devices::Device& device, const std::string& owner, const Request& r) {
  ++generation_;
  std::int64_t n = 0;
  if (ready_) {
    const std::vector<std::int32_t> ids = r.token_ids();
    const std::size_t limit = std::min(ids.size(), tokens_.size());
    while (static_cast<std::size_t>(n) < limit && ids[static_cast<std::size_t>(n)] == tokens_[static_cast<std::size_t>(n)]) ++n;
  }
  if (held_ > 0) device.dram().release(owner + "/prefetch", held_);
  held_ = 0;
  ready_ = false;
  tokens_.clear();
  return IdleClaim{n, {}};
}

MOBISIM_REGISTER(IdleStage, PrefetchIdle, "prefetch",
                 "In idle time, promotes the K/V the next request will most likely reuse (the last prompt's stored "
                 "prefix) from flash to DRAM.")

}  // namespace mobisim::policies::pipeline
