#pragma once
// The on-device section of the fidelity registry (experiments/published/ondevice_*.yaml): each point
// a published throughput of one phone / runtime / model / unit / phase, its role (calibration or
// validation) and an `ondevice` probe. Used by `mobisim ondevice` (table + median error + the fit of
// the calibration points) and by tests; the Fidelity tool reads the same files.
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

// Fits every parameter named in the calibration points' `fitted` lists: each parameter, in the order
// first named, is solved (bisection on a log scale within [lo, hi]; up to 1e3 for _ms/_us overheads) so that the geometric mean of
// simulated/published over its calibration points is 1, with the parameters fitted before it held.
// Returns "path=value" assignments. Validation points are never used.
std::vector<std::string> fit_ondevice(const std::vector<OnDevicePoint>& points, double lo = 1e-4, double hi = 1.0);

}  // namespace mobisim::fidelity
