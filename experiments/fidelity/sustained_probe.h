#pragma once
// The "sustained" fidelity probe: runs a phone experiment (impl: phone, one chat app doing
// back-to-back requests, or one long request as a continuous decode) on the unit and model a public
// sustained-use measurement names, with the thermal setting the source implies (ambient, cold or
// warm start), and reads one quantity of the run (experiments/published/sustained_public.yaml):
//
//   probe: {impl: sustained, device: galaxy-s24-ultra, unit: gpu, model: qwen2.5-1.5b, dtype: int4,
//           requests: 20, prompt_tokens: 250, output_tokens: 504, gap_s: 1, ambient_c: 22, start: cold,
//           metric: rate_ratio, requests_of: [6, 6], reference: [1, 5]}
//
// Metrics (requests are numbered from 1; "rate" is a request's decode tokens/s,
// (output_tokens - 1) / (end_s - first_token_s); "clock" the unit's clock in tables/thermal.<scenario>,
// a step series, as a fraction of its top; the simulated decode rate follows it, devices/thermal.h; a clock
// loss or floor counts only while a trip caps the clocks, never the frequency governor's idle clock):
//   rate_ratio          mean rate of `requests_of` [a, b] / `reference` ([a, b]: their mean; peak: the best request)
//   rate                mean rate of `requests_of`
//   first_request_below first request whose rate is below (1 - loss) x the peak request's
//   requests_before_floor requests finished before the unit's clock first reaches its lowest point (once it
//                       has been at its top: the governor's ramp from idle is no floor; the run's request
//                       count when it never does)
//   floor_mhz           the lowest clock of the unit during the run
//   junction_at_floor_c the junction when the clock first reaches its lowest point (the run's peak if never)
//   peak_junction_c / peak_skin_c   highest temperature of the node over the run
//   junction_max_mean   mean over `requests_of` of each request's highest junction temperature
//   heating_rate        (junction at `window_s` - junction at 0) / window_s  (C/s)
//   time_to_loss        first time the clock is below (1 - loss) of its top (s), counted once the clock has
//                       reached its top (the governor's ramp at the start is no loss); the run's end if never
//   clock_ratio         time-weighted mean clock over `window` [from_s, to_s] / over `reference_window`
//   window_rate_ratio   decode rate of the requests ending in `window` / of those ending in `reference_window`
//   minute_of_loss      the elapsed minute (1-based) in which the clock first falls below (1 - loss) x top
//   mean_power_w        mean SoC + platform power over `window` (default: the whole run), from the charge the
//                       battery lost (it integrates the power exactly)
// min_duration_s repeats the requests until the run lasts that long (a source whose loop ran longer than
// mobisim's faster one: the temperatures follow time, not the request count).
//   battery_drop_pct    battery percent at the start - at the end
//
// Calibration candidates arrive as ProbeContext overrides "device.PATH=V" (a field of the device
// profile: device.thermal.junction_capacity_j_per_k=18 overrides the thermal preset's value for this
// phone), "engine.PATH=V" (a field of the engine profile) and "thermal.KEY=V" (a key of the experiment's
// thermal: options).
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "experiments/fidelity/probe.h"
#include "sim/params.h"

namespace mobisim::fidelity {

// What the metrics read from one phone run.
struct SustainedRun {
  std::vector<double> first_token_s, end_s, output_tokens;  // per request (records)
  std::vector<double> t_s, junction_c, skin_c, power_w, battery_percent, mhz;  // thermal series; mhz of the unit
  std::vector<double> throttled;  // 1 while a trip caps a clock (empty: taken as capped throughout)
  double top_mhz = 0;  // the unit's top clock (0: no clock column: the unit runs at a fixed clock)
  double min_mhz = 0;  // the unit's lowest clock in the run
  double battery_capacity_j = 0;  // the phone's battery (mean_power_w reads the charge it lost)
  double end_time_s() const { return t_s.empty() ? 0.0 : t_s.back(); }
};

struct SustainedMetric {
  std::string metric;
  std::vector<double> requests_of, reference_requests, window, reference_window;
  bool reference_peak = false;
  double loss = 0.1, window_s = 0;
};

// Reads the records of the chat app (`/runs/<scenario>.chat/records`) and the series
// (`/tables/thermal.<scenario>`) of a result file; `unit`'s clock column when it has one.
SustainedRun read_sustained_run(const std::string& h5_path, const std::string& unit, const std::string& scenario = "shared");
// The metric's value on `run` (ConfigError when the run does not cover what the metric asks).
double sustained_metric(const SustainedRun& run, const SustainedMetric& m);

class SustainedProbe : public Probe {
 public:
  explicit SustainedProbe(const Params& p);
  static ParamSchema schema();
  double evaluate(const ProbeContext& context) const override;
  // The experiment this probe runs with `overrides` applied (written to `output`).
  YAML::Node experiment(const std::vector<std::string>& overrides, const std::string& output) const;
  const SustainedMetric& metric() const { return m_; }

 private:
  std::string device_, unit_, model_, dtype_, engine_, start_, governor_;
  std::vector<std::string> extra_units_;
  std::int64_t requests_ = 1, prompt_tokens_ = 1, output_tokens_ = 1;
  double gap_s_ = 0, ambient_c_ = 25, warm_c_ = 40, min_duration_s_ = 0;
  SustainedMetric m_;
};

// True when device profile `device` (built-in name) takes its `thermal:` section from preset `preset`
// (configs/thermal/<preset>.yaml), directly or through base: chains.
bool device_thermal_inherits_from(const std::string& device, const std::string& preset);

}  // namespace mobisim::fidelity
