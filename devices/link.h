#pragma once
// Point-to-point links (PCIe 3.0/4.0 between host and GPU, DRAM-to-DRAM copies):
// a transfer of b bytes takes latency + b / bandwidth; transfers on one link
// are served in FIFO order.
#include <string>

#include "sim/params.h"

namespace mobisim::devices {

struct LinkSpec {
  std::string name;
  double bandwidth_gbps = 0;   // achieved bandwidth, GB/s
  double latency_us = 0;       // per transfer
  double active_power_w = 0;

  static ParamSchema schema();
  static LinkSpec from_params(const std::string& name, const Params& p);
  double transfer_seconds(double bytes) const { return bytes <= 0 ? 0.0 : latency_us * 1e-6 + bytes / (bandwidth_gbps * 1e9); }
};

}  // namespace mobisim::devices
