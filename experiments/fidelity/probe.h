#pragma once
// A fidelity probe computes mobisim's value for one published point directly (for example straight from
// the cost model and a device + engine profile), without running a whole experiment. Points whose value
// comes out of an experiment's result file use an HDF5 extractor instead (see experiments/published/).
//
// A registry point names its probe and the probe's parameters:
//
//     probe: {impl: ondevice, device: oneplus-12, engine: llama.cpp, model: qwen2.5-1.5b,
//             unit: cpu, phase: prefill, tokens: 512, metric: tokens_per_s}
//
// Probes register by name like every plug-in:
//
//     MOBISIM_REGISTER(fidelity::Probe, OnDeviceProbe, "ondevice", "Throughput of one phase on one unit.");
//
// `mobisim calibrate` re-evaluates probes with candidate parameter values: `overrides` holds them as
// `-p`-style assignments relative to the probe's own configuration ("device.compute.cpu.compute_efficiency=0.31",
// "engine.cpu.prefill_efficiency=0.4"); a probe applies every override whose first path component it owns and
// reports any it does not recognise as a ConfigError.
#include <string>
#include <vector>

namespace mobisim::fidelity {

struct ProbeContext {
  std::vector<std::string> overrides;  // "path.to.key=value", applied in order
  std::string shared_dir;              // ../shared (data and models), for probes that need real inputs
};

class Probe {
 public:
  static constexpr const char* kRegistryKind = "fidelity_probe";
  virtual ~Probe() = default;
  // mobisim's value for the point, in the point's unit. Throws ConfigError on bad parameters/overrides.
  virtual double evaluate(const ProbeContext& context) const = 0;
};

}  // namespace mobisim::fidelity
