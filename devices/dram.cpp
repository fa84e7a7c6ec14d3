#include "devices/dram.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace mobisim::devices {

namespace {
std::string gb(double bytes) { return fmt::format("{:.3f} GB", bytes / 1e9); }

// Every unit's work streams over this bus: a profile without it cannot be simulated.
double checked_bandwidth(const DramSpec& spec, const std::string& device_name) {
  if (!(spec.bandwidth_gbps > 0) || !(spec.capacity_gb > 0))
    throw ConfigError(fmt::format("device profile '{}' has no DRAM (dram.capacity_gb = {}, dram.bandwidth_gbps = {}); "
                                  "both must be positive",
                                  device_name, spec.capacity_gb, spec.bandwidth_gbps));
  return spec.bandwidth_gbps;
}
}  // namespace

Dram::Dram(sim::Simulator& sim, const DramSpec& spec, const std::string& device_name, sim::StatGroup& stats)
    : device_name_(device_name),
      capacity_(spec.available_bytes()),
      use_(&stats.time_weighted(sim, "used_bytes", "bytes", "DRAM held by simulated components")),
      bus_(sim, device_name + "/dram", checked_bandwidth(spec, device_name) * 1e9) {}

std::string Dram::overflow_message(const std::string& device_name, const std::string& owner, double bytes,
                                   double free, double capacity, const std::string& holders) {
  return fmt::format(
      "DRAM of {} is full: '{}' needs {} but {} of the usable {} are free (capacity_gb - reserved_gb); held: {}. "
      "Use a phone with more DRAM, a smaller model or lower precision, or lower dram.reserved_gb",
      device_name, owner, gb(bytes), gb(std::max(0.0, free)), gb(capacity), holders);
}

void Dram::reserve(const std::string& owner, double bytes) {
  if (try_allocate(owner, bytes)) return;
  throw DramOverflow(overflow_message(device_name_, owner, bytes, free_bytes(), capacity_, holders()));
}

void Dram::check_fits(const DramSpec& spec, const std::string& device_name,
                      const std::vector<std::pair<std::string, double>>& holdings) {
  const double capacity = spec.available_bytes();
  double used = 0;
  std::vector<std::string> held;
  for (const auto& [owner, bytes] : holdings) {
    if (used + bytes > capacity)
      throw DramOverflow(overflow_message(device_name, owner, bytes, capacity - used, capacity,
                                          held.empty() ? "nothing" : fmt::format("{}", fmt::join(held, ", "))));
    used += bytes;
    held.push_back(fmt::format("{} {}", owner, gb(bytes)));
  }
}

bool Dram::try_allocate(const std::string& owner, double bytes) {
  if (!(bytes >= 0)) throw Error(fmt::format("internal: DRAM allocation of {} bytes for '{}'", bytes, owner));
  if (used_ + bytes > capacity_) return false;
  hold(owner, bytes);
  return true;
}

void Dram::release(const std::string& owner, double bytes) {
  auto it = owners_.find(owner);
  if (it == owners_.end()) return;
  hold(owner, -std::min(bytes, it->second.bytes));
}

void Dram::hold(const std::string& name, double bytes) {
  for (Owner* o : {&owners_[name], &groups_[name.substr(0, name.find('/'))]}) {
    o->bytes += bytes;
    o->peak = std::max(o->peak, o->bytes);
  }
  used_ += bytes;
  use_->set(used_);
}

double Dram::peak_bytes() const { return use_->max(); }
double Dram::mean_used_bytes() const { return use_->mean(); }

double Dram::held_by(const std::string& owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0.0 : it->second.bytes;
}

std::map<std::string, double> Dram::owner_peaks() const {
  std::map<std::string, double> out;
  for (const auto& [name, o] : owners_) out[name] = o.peak;
  return out;
}

std::map<std::string, double> Dram::group_peaks() const {
  std::map<std::string, double> out;
  for (const auto& [name, g] : groups_) out[name] = g.peak;
  return out;
}

std::string Dram::holders() const {
  std::vector<std::string> parts;
  for (const auto& [name, o] : owners_)
    if (o.bytes > 0) parts.push_back(fmt::format("{} {}", name, gb(o.bytes)));
  return parts.empty() ? "nothing" : fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace mobisim::devices
