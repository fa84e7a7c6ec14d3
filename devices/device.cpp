#include "devices/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/builtin_configs.h"
#include "sim/error.h"

namespace mobisim::devices {

// ---------------------------------------------------------------------------
// Profile
// ---------------------------------------------------------------------------
const ComputeUnitSpec& DeviceProfile::unit(const std::string& n, const std::string& needed_by) const {
  auto it = compute.find(n);
  if (it == compute.end()) {
    std::vector<std::string> names;
    for (const auto& [k, v] : compute) names.push_back(k);
    throw ConfigError(fmt::format("device profile '{}' ({}) has no compute unit '{}', needed by {} (it has: {})", name,
                                  origin, n, needed_by, fmt::join(names, ", ")));
  }
  return it->second;
}

const NpuSpec& DeviceProfile::require_npu(const std::string& needed_by) const {
  if (!npu) throw ConfigError(fmt::format("device profile '{}' ({}) has no npu, needed by {}", name, origin, needed_by));
  return *npu;
}

const StorageSpec& DeviceProfile::require_storage(const std::string& needed_by) const {
  if (!storage)
    throw ConfigError(fmt::format("device profile '{}' ({}) has no storage, needed by {}", name, origin, needed_by));
  return *storage;
}

const LinkSpec& DeviceProfile::link(const std::string& n, const std::string& needed_by) const {
  auto it = links.find(n);
  if (it == links.end())
    throw ConfigError(fmt::format("device profile '{}' ({}) has no link '{}', needed by {}", name, origin, n, needed_by));
  return it->second;
}

const BatterySpec& DeviceProfile::require_battery(const std::string& needed_by) const {
  if (!battery)
    throw ConfigError(fmt::format("device profile '{}' ({}) has no battery, needed by {}", name, origin, needed_by));
  return *battery;
}

static bool is_npu(const DeviceProfile& d, const std::string& unit) {
  return unit == "npu" && !d.compute.count(unit);
}

void DeviceProfile::require_unit(const std::string& u, const std::string& needed_by) const {
  if (is_npu(*this, u))
    require_npu(needed_by);
  else
    unit(u, needed_by);
}

void DeviceProfile::require_engine_values(const std::string& u, const models::ModelSpec& m,
                                          const std::string& needed_by, const std::vector<models::DType>& also) const {
  require_unit(u, needed_by);
  const EngineGaps* gaps = is_npu(*this, u) ? npu->gaps.get() : unit(u, needed_by).gaps.get();
  if (!gaps) return;
  std::vector<models::DType> dtypes{m.weight_dtype};
  for (const auto& t : m.projection_dtypes)
    if (t) dtypes.push_back(*t);
  if (m.classifier_dtype) dtypes.push_back(*m.classifier_dtype);
  if (m.lora_rank > 0) dtypes.push_back(m.lora_dtype);
  dtypes.insert(dtypes.end(), also.begin(), also.end());
  for (Phase phase : kPhases)
    for (models::DType t : dtypes)
      if (const std::string* gap = gaps->find(phase, t)) throw ConfigError(fmt::format("{} (needed by {})", *gap, needed_by));
}

double DeviceProfile::compute_seconds(const std::string& u, const models::Work& work, models::DType dtype,
                                      const std::string& needed_by) const {
  // The NPU runs whatever is submitted to it as compiled graphs (W8A8 assumed: activations in the
  // weights' dtype); every other unit is a roofline.
  if (is_npu(*this, u)) {
    const NpuSpec& npu = require_npu(needed_by);
    // Work arrives already costed (its bytes fixed by the caller's model): it cannot be re-costed on the
    // weights the runtime's graphs hold, so work on other weights is refused rather than costed wrongly.
    if (npu.graph_weight_dtype && *npu.graph_weight_dtype != dtype)
      throw ConfigError(fmt::format(
          "{}: engine '{}' holds its NPU graphs' weights as {} (npu.graph_weight_dtype), but this NPU work was costed on "
          "{} weights; cost it on the graphs' model (NpuSpec::graph_model), as the on-device probe and the npu_graphs "
          "prefill stage do",
          needed_by, npu.engine_name, models::to_string(*npu.graph_weight_dtype), models::to_string(dtype)));
    return npu.work_seconds(work, dtype, dtype);
  }
  return unit(u, needed_by).seconds(work, dtype);
}

double DeviceProfile::marginal_energy_j(const std::string& u, double seconds, const std::string& needed_by) const {
  const auto [active_w, idle_w] = unit_power_w(u, needed_by);
  return (active_w - idle_w) * seconds;
}

std::pair<double, double> DeviceProfile::unit_power_w(const std::string& u, const std::string& needed_by) const {
  if (is_npu(*this, u)) {
    const NpuSpec& n = require_npu(needed_by);
    return {n.active_power_w, n.idle_power_w};
  }
  const ComputeUnitSpec& c = unit(u, needed_by);
  return {c.active_power_w, c.idle_power_w};
}

static ParamSchema profile_schema() {
  ParamSchema s;
  s.text("base", std::string(""), "inherit every field of this profile (built-in name or YAML path), then override");
  s.text("name", std::nullopt, "profile name");
  s.text("description", std::string(""), "what this device is");
  s.text("soc", std::string(""), "system on chip");
  s.real("base_power_w", std::nullopt, "SoC/platform power drawn whenever the simulation runs")
      .non_negative()
      .with_unit("W");
  s.node("compute", "compute units by name (cpu_big, cpu_mid, cpu_little, gpu, ...)");
  s.node("npu", "neural processing unit (static graphs)");
  s.node("dram", "main memory");
  s.node("storage", "flash storage");
  s.node("links", "links by name (pcie, ...)");
  s.node("battery", "battery");
  s.node("thermal", "heat, operating points and trips (devices/thermal.h), or none");
  return s;
}

static ParamSchema dram_schema() {
  ParamSchema s;
  s.real("capacity_gb", std::nullopt, "DRAM capacity").positive().with_unit("GB");
  s.real("bandwidth_gbps", std::nullopt, "peak DRAM bandwidth").positive().with_unit("GB/s");
  s.real("reserved_gb", std::nullopt, "held by the OS and other apps (not available to the workload)")
      .non_negative()
      .with_unit("GB");
  s.text("type", std::string(""), "e.g. LPDDR5");
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

static ParamSchema battery_schema() {
  ParamSchema s;
  s.real("capacity_mah", std::nullopt, "battery capacity").positive().with_unit("mAh");
  s.real("voltage_v", 3.87, "nominal cell voltage").positive().with_unit("V");
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

std::vector<ProfileSection> device_profile_schema() {
  return {{"", "the device", profile_schema(), false},
          {"compute.<unit>", "a compute unit (CPU cluster, GPU), one mapping per unit name", ComputeUnitSpec::schema(),
           true},
          {"npu", "a neural processing unit running static compiled graphs (optional)", NpuSpec::schema(), false},
          {"dram", "main memory (required)", dram_schema(), false},
          {"storage", "flash storage (optional; required by policies that read or write flash)",
           StorageSpec::schema(), false},
          {"links.<name>", "a point-to-point link (PCIe, ...), one mapping per link name", LinkSpec::schema(), true},
          {"battery", "battery (optional; required for battery %)", battery_schema(), false},
          {"thermal", "heat, operating points and trips (optional; required by experiments with a thermal model; "
                      "or none); see devices/thermal.h",
           ThermalSpec::schema(), false}};
}

namespace {

constexpr int kMaxBaseDepth = 8;

// Maps merge key by key (recursively); anything else in `over` replaces what `base` had, and so does a
// mapping with a `base:` of its own (`storage: {base: ufs4.0, max_transfer_kb: 4}` starts from the class,
// not from the base profile's storage).
YAML::Node merge_profile(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsMap() || !over.IsMap() || over["base"].IsDefined()) return yaml_clone(over);
  YAML::Node out = yaml_clone(base);
  for (const auto& kv : over) {
    const std::string key = kv.first.as<std::string>();
    out[key] = out[key].IsDefined() ? merge_profile(out[key], kv.second) : yaml_clone(kv.second);
  }
  return out;
}

// Expands `base:` chains into one mapping (the derived profile's keys win).
YAML::Node expand_bases(const YAML::Node& node, const ConfigSource& source, const std::string& folder, int depth) {
  if (!node.IsMap() || !node["base"]) return node;
  const YAML::Node b = node["base"];
  const std::string kind = folder == "devices" ? "device" : folder == "engines" ? "engine" : folder;
  if (!b.IsScalar() || b.Scalar().empty())
    throw ConfigError(fmt::format("{}: 'base' must name a {} profile (built-in: {})", source.child("base").where(b),
                                  kind, fmt::join(builtin_names(folder), ", ")));
  if (depth >= kMaxBaseDepth)
    throw ConfigError(fmt::format("{}: more than {} nested 'base:' profiles (a cycle?)", source.child("base").where(b),
                                  kMaxBaseDepth));
  std::string text, origin;
  if (!find_config(folder, b.Scalar(), text, origin))
    throw ConfigError(fmt::format("{}: unknown base {} '{}' (built-in: {}; or give a path to a YAML file)",
                                  source.child("base").where(b), kind, b.Scalar(), fmt::join(builtin_names(folder), ", ")));
  const YAML::Node base = expand_bases(load_yaml_string(text, origin),
                                       ConfigSource{std::make_shared<std::string>(origin), ""}, folder, depth + 1);
  YAML::Node derived = yaml_clone(node);
  derived.remove("base");
  return merge_profile(base, derived);
}

}  // namespace

YAML::Node expand_profile_bases(const YAML::Node& node, const ConfigSource& source, const std::string& folder) {
  return expand_bases(node, source, folder, 0);
}

bool profile_inherits_from(const std::string& folder, const std::string& name, const std::string& ancestor) {
  std::string current = name;
  for (int depth = 0; depth <= kMaxBaseDepth && !current.empty(); ++depth) {
    if (current == ancestor) return true;
    std::string text, origin;
    if (!find_config(folder, current, text, origin)) return false;
    const YAML::Node root = load_yaml_string(text, origin);
    // (A missing key of a const node is an invalid node: ask IsDefined before its type.)
    const YAML::Node base = root.IsMap() ? root["base"] : YAML::Node();
    current = base.IsDefined() && base.IsScalar() ? base.Scalar() : std::string();
  }
  return false;
}

// Units that stream over the phone's DRAM bus cannot read faster than the bus delivers.
static void check_units_within_dram_bandwidth(const DeviceProfile& d, const YAML::Node& compute, const YAML::Node& npu,
                                       const ConfigSource& source) {
  auto check = [&](double gbps, const YAML::Node& node, const ConfigSource& at, const std::string& what) {
    if (gbps <= d.dram.bandwidth_gbps * (1 + 1e-12)) return;
    const YAML::Node key = node.IsMap() && node["mem_bandwidth_gbps"] ? node["mem_bandwidth_gbps"] : node;
    throw ConfigError(fmt::format(
        "{}: {} reads DRAM at {} GB/s, above the DRAM's own bandwidth_gbps = {} GB/s (the bound for any unit on "
        "the shared bus); lower it, or set dedicated_memory: true for a unit with memory of its own",
        at.child("mem_bandwidth_gbps").where(key), what, gbps, d.dram.bandwidth_gbps));
  };
  for (const auto& [name, unit] : d.compute)
    if (!unit.dedicated_memory)
      check(unit.mem_bandwidth_gbps, compute[name], source.child("compute").child(name),
            fmt::format("compute unit '{}'", name));
  if (d.npu) check(d.npu->mem_bandwidth_gbps, npu, source.child("npu"), "the npu");
}

DeviceProfile DeviceProfile::from_yaml(const YAML::Node& given, const ConfigSource& source) {
  const YAML::Node root = expand_bases(given, source, "devices", 0);
  ParamSchema ps = profile_schema();
  Params p(root, ps, source, {});
  DeviceProfile d;
  d.name = p.text("name");
  d.description = p.text("description");
  d.soc = p.text("soc");
  d.base_power_w = p.real("base_power_w");
  d.origin = source.file ? *source.file : "<inline>";
  if (given.IsMap() && given["base"]) d.origin += " (base: " + given["base"].as<std::string>() + ")";
  YAML::Node& out = d.resolved;
  out = p.resolved();
  out.remove("base");
  auto resolved_of = [](const Params& section) {
    YAML::Node r = section.resolved();
    if (section.has("peak_tflops")) r["peak_tflops"] = yaml_clone(section.node("peak_tflops"));
    if (section.has("clusters")) r["clusters"] = yaml_clone(section.node("clusters"));
    return r;
  };

  YAML::Node compute = p.node("compute");
  if (compute.IsDefined() && !compute.IsNull()) {
    if (!compute.IsMap()) p.fail("compute", "expected a mapping of unit name -> unit parameters");
    ParamSchema us = ComputeUnitSpec::schema();
    for (const auto& kv : compute) {
      const std::string n = kv.first.as<std::string>();
      const Params up(kv.second, us, source.child("compute").child(n), {});
      d.compute.emplace(n, ComputeUnitSpec::from_params(n, up));
      out["compute"][n] = resolved_of(up);
    }
  }
  if (YAML::Node n = p.node("npu"); n.IsDefined() && !n.IsNull()) {
    ParamSchema s = NpuSpec::schema();
    const Params np(n, s, source.child("npu"), {});
    d.npu = NpuSpec::from_params(np);
    d.npu->device_name = d.name;
    out["npu"] = np.resolved();
  }
  {
    YAML::Node n = p.node("dram");
    if (!n.IsDefined() || n.IsNull()) p.fail("dram", "missing required key 'dram' (capacity_gb, bandwidth_gbps)");
    ParamSchema s = dram_schema();
    Params dp(n, s, source.child("dram"), {});
    d.dram = DramSpec{dp.real("capacity_gb"), dp.real("bandwidth_gbps"), dp.real("reserved_gb")};
    if (d.dram.reserved_gb >= d.dram.capacity_gb) dp.fail("reserved_gb", "must be smaller than capacity_gb");
    out["dram"] = dp.resolved();
  }
  check_units_within_dram_bandwidth(d, compute, p.node("npu"), source);
  if (YAML::Node n = p.node("storage"); n.IsDefined() && !n.IsNull()) {
    ParamSchema s = StorageSpec::schema();
    ConfigSource ssrc = source.child("storage");
    // A storage class by name (configs/storage/<name>.yaml), or `{base: CLASS, field: value, ...}`: the
    // class with those fields replaced (what `-p device.storage=ufs4.0 -p device.storage.max_transfer_kb=4`
    // writes).
    const bool is_class = n.IsScalar();
    const bool has_base = n.IsMap() && n["base"].IsDefined() && n["base"].IsScalar();
    if (is_class || has_base) {
      const std::string cls = is_class ? n.Scalar() : n["base"].Scalar();
      std::string text, origin;
      if (!find_config("storage", cls, text, origin))
        p.fail("storage", fmt::format("unknown storage class '{}' (built-in: {}; or a mapping of storage fields)", cls,
                                      fmt::join(builtin_names("storage"), ", ")));
      YAML::Node merged = load_yaml_string(text, origin);
      if (has_base) {
        YAML::Node fields = yaml_clone(n);
        fields.remove("base");
        merged = merge_profile(merged, fields);
        // Errors name the experiment's keys for the overridden fields, the class file for the rest.
        ssrc = fields.size() > 0 ? ssrc : ConfigSource{std::make_shared<std::string>(origin), ""};
      } else {
        ssrc = ConfigSource{std::make_shared<std::string>(origin), ""};
      }
      n = merged;
    }
    const Params sp(n, s, ssrc, {});
    d.storage = StorageSpec::from_params(sp);
    out["storage"] = sp.resolved();
  }
  if (YAML::Node n = p.node("links"); n.IsDefined() && !n.IsNull()) {
    if (!n.IsMap()) p.fail("links", "expected a mapping of link name -> link parameters");
    ParamSchema s = LinkSpec::schema();
    for (const auto& kv : n) {
      const std::string ln = kv.first.as<std::string>();
      const Params lp(kv.second, s, source.child("links").child(ln), {});
      d.links.emplace(ln, LinkSpec::from_params(ln, lp));
      out["links"][ln] = lp.resolved();
    }
  }
  if (YAML::Node n = p.node("battery"); n.IsDefined() && !n.IsNull()) {
    ParamSchema s = battery_schema();
    Params bp(n, s, source.child("battery"), {});
    d.battery = BatterySpec{bp.real("capacity_mah"), bp.real("voltage_v")};
    out["battery"] = bp.resolved();
  }
  if (YAML::Node n = p.node("thermal"); n.IsDefined() && !n.IsNull()) {
    if (n.IsScalar() && n.Scalar() == "none") {
      d.thermal_declared_none = true;
      out["thermal"] = "none";
    } else {
      if (!n.IsMap()) p.fail("thermal", "expected none or a mapping (base: <configs/thermal name>, units, trips, ...)");
      d.thermal = ThermalSpec::from_yaml(n, source.child("thermal"));
      for (const auto& [unit, points] : d.thermal->units)
        if (!d.compute.count(unit) && !(unit == "npu" && d.npu))
          p.fail("thermal", fmt::format("thermal.units names '{}', which is not a compute unit or the npu of this "
                                        "profile", unit));
      out["thermal"] = d.thermal->resolved;
    }
  }
  return d;
}

DeviceProfile load_device_profile(const std::string& name_or_path) {
  std::string text, origin;
  if (!find_config("devices", name_or_path, text, origin))
    throw ConfigError(fmt::format("unknown device '{}' (built-in: {}; or give a path to a YAML file)", name_or_path,
                                  fmt::join(builtin_device_names(), ", ")));
  return DeviceProfile::from_yaml(load_yaml_string(text, origin),
                                  ConfigSource{std::make_shared<std::string>(origin), ""});
}

DeviceProfile load_device_profile(const YAML::Node& node, const ConfigSource& source) {
  if (node.IsScalar()) return load_device_profile(node.Scalar());
  return DeviceProfile::from_yaml(node, source);
}

std::vector<std::string> builtin_device_names() { return builtin_names("devices"); }

// ---------------------------------------------------------------------------
// Runtime device
// ---------------------------------------------------------------------------
Device::Device(sim::Simulator& sim, const DeviceProfile& profile, sim::StatGroup& stats, sim::TimelineProcess* timeline,
               const SustainedOptions& sustained)
    : sim_(sim),
      profile_(profile),
      stats_(stats),
      timeline_(timeline),
      dram_(sim, profile_.dram, profile_.name, stats_.child("dram")),
      bus_wait_s_(&stats_.child("dram").counter("bus_wait_s", "s",
                                                "time work ran beyond its roofline because units shared the DRAM bus")) {
  for (const auto& [name, spec] : profile_.compute) {
    Unit u;
    u.queue = std::make_unique<sim::Resource>(sim_, profile_.name + "/" + name, 1);
    u.shares_dram = !spec.dedicated_memory;
    u.active_w = spec.active_power_w;
    u.idle_w = spec.idle_power_w;
    auto& g = stats_.child(name);
    u.flops = &g.counter("flops", "FLOP", "floating-point operations executed");
    u.busy_s = &g.counter("busy_s", "s", "time spent executing");
    units_.emplace(name, std::move(u));
  }
  if (profile_.npu) {
    Unit u;
    u.queue = std::make_unique<sim::Resource>(sim_, profile_.name + "/npu", 1);
    u.active_w = profile_.npu->active_power_w;
    u.idle_w = profile_.npu->idle_power_w;
    auto& g = stats_.child("npu");
    u.flops = &g.counter("flops", "FLOP", "operations executed");
    u.busy_s = &g.counter("busy_s", "s", "time spent executing");
    units_.emplace("npu", std::move(u));
  }
  if (profile_.storage)
    storage_ = std::make_unique<Storage>(sim_, *profile_.storage, profile_.name + "/storage", stats_.child("storage"),
                                         timeline_);
  for (const auto& [name, spec] : profile_.links)
    links_.emplace(name, std::make_unique<sim::Resource>(sim_, profile_.name + "/" + name, 1));
  if (sustained.enabled)
    power_ = std::make_unique<PowerManager>(sim_, profile_, sustained, dram_.bus(), stats_.child("thermal"), timeline_);
}

// Marks a unit busy with the power manager for as long as it runs work (exceptions included).
class Device::BusyGuard {
 public:
  BusyGuard(PowerManager* pm, const std::string& unit) : pm_(pm), unit_(unit) {
    if (pm_) pm_->set_busy(unit_, true);
  }
  ~BusyGuard() {
    if (pm_) pm_->set_busy(unit_, false);
  }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  PowerManager* pm_;
  const std::string& unit_;
};

Device::Unit& Device::unit_state(const std::string& name) {
  auto it = units_.find(name);
  if (it == units_.end()) {
    if (name == "npu") profile_.require_npu("a compute request");
    profile_.unit(name, "a compute request");  // throws with the list of units
  }
  return it->second;
}

sim::Resource& Device::unit_queue(const std::string& unit) { return *unit_state(unit).queue; }

UnitCost Device::unit_cost(const std::string& unit, const models::Work& work, models::DType dtype,
                           const std::string& needed_by) const {
  return UnitCost{profile_.compute_seconds(unit, work, dtype, needed_by), work.flops(), work.bytes()};
}

// Not a coroutine itself: the cost is known now, so the caller awaits compute_for's task
// directly (one coroutine frame per request, not two).
sim::Task<void> Device::compute(std::string unit, const models::Work& work, models::DType dtype,
                                std::string label, int priority, bool preempt, bool preemptible) {
  return compute_for(unit, unit_cost(unit, work, dtype, label), std::move(label), priority, preempt, preemptible);
}

sim::Task<void> Device::compute_for(std::string unit, UnitCost cost, std::string label, int priority,
                                    bool preempt, bool preemptible) {
  Unit& u = unit_state(unit);
  const UnitCost& c = cost;  // `cost` is taken by value: a lazily started coroutine owns its arguments
  auto lease = co_await u.queue->acquire(priority, preempt, preemptible);
  const sim::Time t0 = sim_.now();
  const sim::Time alone = sim::from_seconds(c.seconds);
  try {
    if (power_) {
      // On the unit's clock: a change of operating point re-plans the work in progress.
      const BusyGuard busy(power_.get(), unit);
      co_await dram_.bus().flow(u.shares_dram ? c.dram_bytes : 0.0, alone, power_->clock_of(unit));
    } else if (u.shares_dram && c.dram_bytes > 0) {
      co_await dram_.bus().flow(c.dram_bytes, alone);
    } else {
      co_await sim_.timeout(alone);
    }
  } catch (const sim::Interrupt&) {
    u.busy_s->add(sim::to_seconds(sim_.now() - t0));
    if (timeline_) timeline_->span(profile_.name + "/" + unit, label + " (preempted)", t0, sim_.now());
    throw;
  }
  account_compute(u, c, alone, sim_.now() - t0);
  if (timeline_) timeline_->span(profile_.name + "/" + unit, label, t0, sim_.now());
}

void Device::account_compute(Unit& u, const UnitCost& cost, sim::Time alone, sim::Time held) {
  u.flops->add(cost.flops);
  // Busy for the roofline time, or for as long as a crowded DRAM bus held the work.
  if (held == alone) {
    u.busy_s->add(cost.seconds);
  } else {
    u.busy_s->add(sim::to_seconds(held));
    // (With a thermal model the excess mixes a lowered clock with the shared bus: not counted.)
    if (!power_) bus_wait_s_->add(sim::to_seconds(held - alone));
  }
}

namespace {

// Where layer `j` of `layers` ends, in ns of the uncontended time of work taking `alone` ns.
sim::Time layer_end_ns(sim::Time alone, int layers, int j) {
  return static_cast<sim::Time>(std::llround(static_cast<long double>(alone) * j / layers));
}

// The end of the layer in progress after `done` ns of the work: the first layer end at or after it.
sim::Time end_of_layer_in_progress_ns(sim::Time alone, int layers, sim::Time done) {
  for (int j = 1; j < layers; ++j)
    if (const sim::Time end = layer_end_ns(alone, layers, j); end >= done) return end;
  return alone;
}

}  // namespace

sim::Task<void> Device::run_on_unit(const std::string& unit, Unit& u, const UnitCost& cost, sim::Time alone,
                                    sim::Time ns, double* remaining_ns) {
  // The share of the work's DRAM bytes these ns move (all of them for the whole work: compute_for's flow).
  const double bytes =
      ns == alone ? cost.dram_bytes : cost.dram_bytes * (static_cast<double>(ns) / static_cast<double>(alone));
  if (power_) {
    const BusyGuard busy(power_.get(), unit);
    co_await dram_.bus().flow(u.shares_dram ? bytes : 0.0, ns, power_->clock_of(unit), remaining_ns);
  } else if (u.shares_dram && bytes > 0) {
    co_await dram_.bus().flow(bytes, ns, -1, remaining_ns);
  } else {
    const sim::Time t0 = sim_.now();
    try {
      co_await sim_.timeout(ns);
    } catch (const sim::Interrupt&) {
      if (remaining_ns) *remaining_ns = static_cast<double>(ns - (sim_.now() - t0));
      throw;
    }
  }
}

sim::Task<void> Device::compute_layers(std::string unit, UnitCost cost, int layers, std::string label, int priority) {
  if (layers < 1) throw Error(fmt::format("internal: '{}' on {} issued as {} layers", label, unit, layers));
  Unit& u = unit_state(unit);
  const UnitCost& c = cost;  // taken by value: a lazily started coroutine owns its arguments
  const sim::Time alone = sim::from_seconds(c.seconds);
  const bool yields = layers > 1;
  const std::string track = profile_.name + "/" + unit;
  sim::Time done = 0;  // uncontended ns of the work done so far (at a layer end between two holds)
  sim::Time held = 0;  // ns the unit was held for the work
  while (true) {
    auto lease = co_await u.queue->acquire(priority, false, false, yields);
    // A better request that started waiting after the unit was granted, before this process ran:
    // it goes first (the work is at a layer end).
    if (yields && done < alone && u.queue->has_waiter_better_than(priority)) {
      lease.release();
      continue;
    }
    const sim::Time t0 = sim_.now();
    double remaining = 0;
    bool asked_to_yield = false;
    try {
      co_await run_on_unit(unit, u, c, alone, alone - done, &remaining);
    } catch (const sim::Interrupt& e) {
      if (e.cause != sim::kYieldRequest) {
        u.busy_s->add(sim::to_seconds(held + (sim_.now() - t0)));
        throw;
      }
      asked_to_yield = true;
    }
    if (!asked_to_yield) {
      held += sim_.now() - t0;
      if (timeline_) timeline_->span(track, label, t0, sim_.now());
      break;
    }
    // Finish the layer in progress, then let the better request have the unit.
    done = std::max(done, alone - static_cast<sim::Time>(std::llround(remaining)));
    const sim::Time layer_end = end_of_layer_in_progress_ns(alone, layers, done);
    if (layer_end > done) co_await run_on_unit(unit, u, c, alone, layer_end - done, nullptr);
    done = layer_end;
    held += sim_.now() - t0;
    if (done >= alone) {
      if (timeline_) timeline_->span(track, label, t0, sim_.now());
      break;
    }
    if (timeline_) timeline_->span(track, label + " (yields)", t0, sim_.now());
  }
  account_compute(u, c, alone, held);
}

sim::Task<void> Device::busy(std::string unit, sim::Time duration, std::string label, int priority,
                             bool preempt, bool preemptible) {
  Unit& u = unit_state(unit);
  auto lease = co_await u.queue->acquire(priority, preempt, preemptible);
  const sim::Time t0 = sim_.now();
  try {
    if (power_) {
      const BusyGuard busy(power_.get(), unit);
      co_await dram_.bus().flow(0.0, duration, power_->clock_of(unit));
    } else {
      co_await sim_.timeout(duration);
    }
  } catch (const sim::Interrupt&) {
    u.busy_s->add(sim::to_seconds(sim_.now() - t0));
    throw;
  }
  u.busy_s->add(sim::to_seconds(sim_.now() - t0));
  if (timeline_) timeline_->span(profile_.name + "/" + unit, label, t0, sim_.now());
}

sim::Task<void> Device::busy_drawing(std::string unit, sim::Time duration, double active_power_w, std::string label,
                                     int priority) {
  if (power_)
    throw ConfigError(fmt::format("{}: '{}' on {} draws {} W of its own, which the thermal model cannot charge "
                                  "(one power per unit and operating point); run it with thermal: none",
                                  profile_.name, label, unit, active_power_w));
  if (active_power_w < 0)
    throw ConfigError(fmt::format("{}: '{}' on {} draws {} W (expected >= 0)", profile_.name, label, unit,
                                  active_power_w));
  Unit& u = unit_state(unit);
  co_await busy(unit, duration, label, priority);
  u.drawing_offset_j += (active_power_w - u.active_w) * sim::to_seconds(duration);
}

sim::Task<void> Device::transfer(std::string link, double bytes, std::string label, sim::Time hold) {
  const LinkSpec& spec = profile_.link(link, label);
  auto& q = *links_.at(link);
  auto lease = co_await q.acquire();
  const sim::Time t0 = sim_.now();
  co_await sim_.timeout(sim::from_seconds(spec.transfer_seconds(bytes)) + hold);
  if (timeline_) timeline_->span(profile_.name + "/" + link, label, t0, sim_.now(), "io");
}

Storage& Device::storage() {
  if (!storage_) profile_.require_storage("a storage request");
  return *storage_;
}

double Device::busy_seconds(const std::string& unit) const {
  auto it = units_.find(unit);
  return it == units_.end() ? 0.0 : it->second.queue->busy_slot_seconds();
}

double Device::flops() const {
  double f = 0;
  for (const auto& [name, u] : units_) f += u.flops->value();
  return f;
}

double Device::energy_j() const {
  const double elapsed = sim::to_seconds(sim_.now());
  double e = power_ ? power_->energy_j() : profile_.base_power_w * elapsed;
  for (const auto& [name, u] : units_) {
    if (power_) break;  // the units' power is in the power manager's integral
    const double busy = u.queue->busy_slot_seconds();
    e += u.active_w * busy + u.idle_w * std::max(0.0, elapsed - busy) + u.drawing_offset_j;
  }
  if (storage_) {
    const double busy = storage_->busy_seconds();
    e += storage_->io_energy_j() + profile_.storage->idle_power_w * std::max(0.0, elapsed - busy);
  }
  return e;
}

double Device::battery_percent(double joules) const {
  return 100.0 * joules / profile_.require_battery("battery_percent").joules();
}

}  // namespace mobisim::devices
