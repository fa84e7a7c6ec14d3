#pragma once
// Shared fixture of the speculative-decoding tests: an NPU whose every execution costs ~1 s (its
// fixed overhead dwarfs any arithmetic at 1000 TOPS / 1000 GB/s), graph loads 0.5 s per layer, so
// counting executions and loads is reading seconds.
#include "devices/npu.h"

namespace mobisim::testing {

inline devices::NpuSpec one_second_per_execution_npu() {
  devices::NpuSpec n;
  n.peak_tops_int8 = 1000;
  n.peak_tflops_fp16 = 1000;
  n.max_utilization = 1;
  n.half_utilization_chunk = 1;
  n.exec_overhead_ms = 1000;
  n.mem_bandwidth_gbps = 1000;
  n.graph_load_ms_per_layer = 500;
  n.active_power_w = 2;
  return n;
}

}  // namespace mobisim::testing
