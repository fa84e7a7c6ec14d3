#pragma once
// The cost of one decode step on a unit, by context length, memoised: a step's cost depends on
// nothing but its context, and contexts recur across turns and requests (24 bytes per token of
// the longest context seen, no allocation per step).
#include <algorithm>
#include <string>
#include <vector>

#include "devices/device.h"
#include "models/cost_model.h"

namespace mobisim::policies::pipeline {

class DecodeCosts {
 public:
  DecodeCosts(const models::CostModel& cost, std::string unit) : cost_(cost), unit_(std::move(unit)) {}
  const devices::UnitCost& at(const devices::Device& device, std::int64_t context) {
    const auto i = static_cast<std::size_t>(context);
    if (i >= steps_.size()) steps_.resize(std::max(i + 1, 2 * steps_.size()), devices::UnitCost{-1, 0, 0});
    devices::UnitCost& c = steps_[i];
    if (c.seconds < 0) c = device.unit_cost(unit_, cost_.decode(context), cost_.spec().weight_dtype, "decode");
    return c;
  }

 private:
  const models::CostModel& cost_;
  std::string unit_;
  std::vector<devices::UnitCost> steps_;  // seconds < 0: not yet
};

}  // namespace mobisim::policies::pipeline
