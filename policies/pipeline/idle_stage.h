#pragma once
// The idle-work stage: what an app does on the phone between its requests (PerCache's cache
// scheduler, Sleep-time Compute: work moved out of the critical path into idle time). One
// implementation = one file pair in this folder, registered with
//   MOBISIM_REGISTER(IdleStage, MyIdle, "my_idle", "doc");
// and chosen in a pipeline app's YAML as `idle: {impl: my_idle, ...}` (default: none).
//
//   prefetch   promote the K/V the next request will most likely reuse from flash to DRAM
#include <cstdint>
#include <string>

#include "devices/device.h"
#include "policies/pipeline/kv_reuse.h"
#include "policies/pipeline/request.h"

namespace mobisim::policies::pipeline {

class IdleStage {
 public:
  static constexpr const char* kRegistryKind = "idle";
  virtual ~IdleStage() = default;
  // Started in the background once request `r` has been served and stored; runs while the app is
  // idle (it must give up what it holds when claim() is called). `reuse` is the app's KV-reuse
  // stage; `owner` its DRAM owner prefix.
  virtual sim::Task<void> after(devices::Device& device, const std::string& owner, KvReuse& reuse, const Request& r,
                                double kv_bytes_per_token) = 0;
  // At the start of the next request `r`: ends the idle work and returns how many of r's leading
  // prompt tokens have their K/V in DRAM thanks to it (read back from DRAM, not flash).
  virtual std::int64_t claim(devices::Device& device, const std::string& owner, const Request& r) = 0;
};

}  // namespace mobisim::policies::pipeline
