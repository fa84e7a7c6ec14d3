#pragma once
// The on-device section of the fidelity registry (experiments/published/ondevice_*.yaml): each point
// a published throughput of one phone / runtime / model / unit / phase, its role (calibration or
// validation) and an `ondevice` probe. The fidelity tool (`mobisim fidelity`, and its view `mobisim
// ondevice`) reads the same files through its own loader; this one gives tests the typed queries.
#include <string>
#include <vector>

#include "experiments/fidelity/ondevice_probe.h"

namespace mobisim::fidelity {

struct OnDevicePoint {
  std::string id, source, quantity, unit, role, cause;
  double published = 0;
  OnDeviceQuery query;
  std::vector<std::string> fitted;  // parameter paths fitted to this point (calibration)
};

// Reads one registry file; ConfigError naming the file and point on a bad entry.
std::vector<OnDevicePoint> load_ondevice_points(const std::string& path);

struct OnDeviceRow {
  const OnDevicePoint* point;
  double simulated = 0;
  double error = 0;  // (simulated - published) / published
};
std::vector<OnDeviceRow> evaluate_ondevice(const std::vector<OnDevicePoint>& points,
                                           const std::vector<std::string>& overrides = {});

// The fit of the calibration points is `mobisim calibrate` (experiments/fidelity/calibrate.h, the
// on-device parameters of experiments/published/calibration.yaml); `mobisim ondevice --fit` calls it.

}  // namespace mobisim::fidelity
