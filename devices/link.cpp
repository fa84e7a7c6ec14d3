#include "devices/link.h"

namespace mobisim::devices {

ParamSchema LinkSpec::schema() {
  ParamSchema s;
  s.real("bandwidth_gbps", std::nullopt, "achieved transfer bandwidth").positive().with_unit("GB/s");
  s.real("latency_us", std::nullopt, "fixed cost per transfer").non_negative().with_unit("us");
  s.real("active_power_w", std::nullopt, "power while transferring").non_negative().with_unit("W");
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

LinkSpec LinkSpec::from_params(const std::string& name, const Params& p) {
  LinkSpec l;
  l.name = name;
  l.bandwidth_gbps = p.real("bandwidth_gbps");
  l.latency_us = p.real("latency_us");
  l.active_power_w = p.real("active_power_w");
  return l;
}

}  // namespace mobisim::devices
