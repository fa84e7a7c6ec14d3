#pragma once
// A device = a profile (static numbers from configs/devices/*.yaml) plus, inside
// one simulation, the queued units that work is submitted to.
//
//   co_await device.compute("cpu_big", work, dtype, "prefill q3");
//   co_await device.storage().read(bytes);
//   co_await device.transfer("pcie", bytes);
//
// Energy: every unit draws `active_power_w` while busy and `idle_power_w`
// otherwise, plus the SoC's `base_power_w` for the whole run; storage I/O also
// costs energy per byte read and per byte programmed. energy_j() sums them,
// battery_percent() converts joules to % of the battery (mAh x V).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/compute_unit.h"
#include "devices/dram.h"
#include "devices/link.h"
#include "devices/npu.h"
#include "devices/power_manager.h"
#include "devices/thermal.h"
#include "devices/storage.h"
#include "sim/resource.h"
#include "sim/stats.h"
#include "sim/timeline.h"

namespace mobisim::devices {

struct BatterySpec {
  double capacity_mah = 0;
  double voltage_v = 0;
  double joules() const { return capacity_mah * 1e-3 * voltage_v * 3600.0; }
};

struct DeviceProfile {
  std::string name, description, soc, origin;
  std::map<std::string, ComputeUnitSpec> compute;
  std::optional<NpuSpec> npu;
  DramSpec dram;
  std::optional<StorageSpec> storage;
  std::map<std::string, LinkSpec> links;
  std::optional<BatterySpec> battery;
  // Heat, operating points and trips (devices/thermal.h); absent: the phone has no thermal model
  // (thermal_declared_none: the profile says so, e.g. a server with forced-air cooling).
  std::optional<ThermalSpec> thermal;
  bool thermal_declared_none = false;
  double base_power_w = 0;
  // Every field with its effective value (bases expanded, defaults filled): stored with results,
  // and loading it again gives the same profile.
  YAML::Node resolved;
  // Set by EngineProfile::apply: the engine's name and the device values it inherits by its
  // `inherit_device` ("cpu.prefill: compute_efficiency=0.0387 ... of device pixel7 (reason)").
  std::string engine;
  std::vector<std::string> inherited_from_device;
  // Set by EngineProfile::apply: what the engine derived from this SoC's description, one line per
  // unit ("cpu int8 kernels: i8mm path, 8 threads, peak 2.46e+12 op/s (...)"), recorded in the result.
  std::vector<std::string> derived_from_soc;

  // Accessors that fail with a ConfigError naming the profile and who needed the unit.
  const ComputeUnitSpec& unit(const std::string& name, const std::string& needed_by) const;
  const NpuSpec& require_npu(const std::string& needed_by) const;
  const StorageSpec& require_storage(const std::string& needed_by) const;
  const LinkSpec& link(const std::string& name, const std::string& needed_by) const;
  const BatterySpec& require_battery(const std::string& needed_by) const;
  // Any unit work can be submitted to: a compute unit or "npu" (when the profile has one).
  void require_unit(const std::string& unit, const std::string& needed_by) const;
  // require_unit, and, when an engine profile was applied, every value running `model` on `unit` needs
  // (prefill and decode, each weight dtype the model uses: its weights, recipe projections, classifier,
  // adapters): the ConfigError of the first the engine neither sets nor inherits (devices/engine.h).
  // What `run` would raise mid-simulation, raised where the experiment is built (and so by validate).
  // `also`: other dtypes the driver runs on the unit (the coordgen drivers' CPU attention, at the
  // activations' dtype).
  void require_engine_values(const std::string& unit, const models::ModelSpec& model, const std::string& needed_by,
                             const std::vector<models::DType>& also = {}) const;
  // Time of `work` on `unit` (the npu runs it as compiled graphs, see NpuSpec::work_seconds).
  double compute_seconds(const std::string& unit, const models::Work& work, models::DType dtype,
                         const std::string& needed_by) const;
  // Active and idle power of `unit` (compute unit or npu).
  std::pair<double, double> unit_power_w(const std::string& unit, const std::string& needed_by) const;
  // Energy `unit` draws above its idle floor while busy for `seconds`: what doing the work costs
  // compared with staying idle (a request's own share of the phone's energy).
  double marginal_energy_j(const std::string& unit, double seconds, const std::string& needed_by) const;

  static DeviceProfile from_yaml(const YAML::Node& root, const ConfigSource& source);
};

// The declared fields of a device profile, section by section (for `mobisim list devices`).
struct ProfileSection {
  std::string path;  // "" (top level), "compute.<unit>", "storage", ...
  std::string doc;
  ParamSchema schema;
  bool keyed;  // one mapping per name (compute units, links)
};
std::vector<ProfileSection> device_profile_schema();

// A device: a built-in name, a YAML path, or a mapping (optionally `base: NAME` plus overrides).
DeviceProfile load_device_profile(const std::string& name_or_path);
DeviceProfile load_device_profile(const YAML::Node& node, const ConfigSource& source);
std::vector<std::string> builtin_device_names();
// Expands a `base: NAME` chain of profiles in configs/<folder>/ (maps merge key by key, the derived
// profile wins); used by device and engine profiles.
YAML::Node expand_profile_bases(const YAML::Node& node, const ConfigSource& source, const std::string& folder);
// Whether profile `name` of `folder` ("devices" or "engines") is `ancestor` or inherits from it
// through its `base:` chain (what expand_profile_bases would merge). False for an unknown name.
bool profile_inherits_from(const std::string& folder, const std::string& name, const std::string& ancestor);

// The cost of one piece of work on one unit when the unit and the DRAM bus are free.
struct UnitCost {
  double seconds = 0;     // roofline time (DeviceProfile::compute_seconds)
  double flops = 0;       // work.flops()
  double dram_bytes = 0;  // bytes the work moves through DRAM (work.bytes()); 0: none
};

class Device {
 public:
  // `sustained`: the experiment's `thermal:` setting; disabled (`none`, the default here): every
  // unit at its peak clock and constant power.
  Device(sim::Simulator& sim, const DeviceProfile& profile, sim::StatGroup& stats, sim::TimelineProcess* timeline = nullptr,
         const SustainedOptions& sustained = {});

  const DeviceProfile& profile() const { return profile_; }
  sim::Simulator& sim() { return sim_; }

  // Runs `work` on a compute unit, queued behind earlier work (lower priority value first).
  // The work streams its bytes over the DRAM bus shared with the other units (devices/dram.h):
  // alone it takes its roofline time; beside other bandwidth-bound work it takes longer.
  // With `preemptible`, a later request with `preempt` may take the unit: this call then throws
  // sim::Interrupt and the work is lost (the caller decides whether to retry).
  // The unit (and the link of transfer) is taken by value: a process started with sim.start() runs
  // later, after the caller's temporaries (a "npu" literal) are gone.
  sim::Task<void> compute(std::string unit, const models::Work& work, models::DType dtype,
                          std::string label, int priority = 0, bool preempt = false, bool preemptible = false);
  // The same for work whose cost the caller already has (memoised per shape): `cost` is what
  // unit_cost() gives for the work.
  sim::Task<void> compute_for(std::string unit, UnitCost cost, std::string label, int priority = 0,
                              bool preempt = false, bool preemptible = false);
  // compute_for() for work made of `layers` equal layers (a model's forward pass: mllm and llama.cpp
  // run the graph layer by layer) that gives the unit up between two layers: when a request of
  // better (smaller) priority starts waiting for the unit while this work runs, the work finishes
  // the layer in progress, releases the unit (the better request takes it), and queues again at its
  // own priority for the layers left. The better request waits at most one layer, and the work ends
  // later by the time the unit spent on others. Layer j (1-based) ends at round(j x alone / layers)
  // ns of the work's uncontended time. Nothing better waiting (e.g. foreground work at priority 0,
  // or any work of a phone running one app): exactly compute_for(), one busy span.
  sim::Task<void> compute_layers(std::string unit, UnitCost cost, int layers, std::string label, int priority = 0);
  // What `work` costs on `unit` when nothing else runs: its roofline time, FLOPs and DRAM bytes.
  UnitCost unit_cost(const std::string& unit, const models::Work& work, models::DType dtype,
                     const std::string& needed_by) const;
  // Holds a unit busy for a given duration (e.g. a profiled fixed-cost operation).
  sim::Task<void> busy(std::string unit, sim::Time duration, std::string label, int priority = 0,
                       bool preempt = false, bool preemptible = false);
  // As busy(), the unit drawing `active_power_w` instead of its own active power while it runs: work
  // that keeps only part of a unit busy, such as one thread on a CPU whose `active_power_w` is that of
  // the runtime's thread pool. The power manager's model has one power per unit and operating point,
  // so this needs `thermal: none` (ConfigError otherwise).
  sim::Task<void> busy_drawing(std::string unit, sim::Time duration, double active_power_w, std::string label,
                               int priority = 0);
  // `bytes` over a link, queued behind earlier transfers. `hold`: the link stays taken that much
  // longer (per-request issue work of a copy engine, e.g. a memcpy issue and event record).
  sim::Task<void> transfer(std::string link, double bytes, std::string label = "transfer", sim::Time hold = 0);
  Storage& storage();
  sim::Resource& unit_queue(const std::string& unit);

  // Main memory: the capacity ledger every component holds its bytes in, and the bus that
  // CPU, GPU and NPU work share (devices/dram.h).
  Dram& dram() { return dram_; }
  const Dram& dram() const { return dram_; }

  // The timeline this device's spans go to (null without --timeline): callers add spans of their
  // own, such as one per query, beside the units' tracks.
  sim::TimelineProcess* timeline() const { return timeline_; }

  // Heat, clocks and charge under sustained use; null with `thermal: none`.
  PowerManager* power() { return power_.get(); }
  const PowerManager* power() const { return power_.get(); }
  // Idle-time work may run now: always with `thermal: none`, else PowerManager::background_allowed().
  bool background_allowed() const { return !power_ || power_->background_allowed(); }

  double busy_seconds(const std::string& unit) const;
  // FLOPs every unit has executed since the start of the simulation.
  double flops() const;
  // Since the start of the simulation. With a thermal model, the SoC's power integrated over time
  // (operating points change it) plus flash I/O; with `thermal: none`, busy x active + idle x idle.
  double energy_j() const;
  double battery_percent(double joules) const;

 private:
  class BusyGuard;
  struct Unit {
    std::unique_ptr<sim::Resource> queue;
    bool shares_dram = true;  // streams over the phone's DRAM bus (false: its own memory)
    double active_w = 0, idle_w = 0;
    // busy_drawing(): energy drawn beyond (or short of) active_w x busy time, signed.
    double drawing_offset_j = 0;
    sim::Counter* flops = nullptr;
    sim::Counter* busy_s = nullptr;
  };
  Unit& unit_state(const std::string& name);
  // Runs `ns` of `cost`'s uncontended time (of `alone` in all) on a unit already held, as
  // compute_for does; interrupted, writes the uncontended ns it had still to run to `*remaining_ns`.
  sim::Task<void> run_on_unit(const std::string& unit, Unit& u, const UnitCost& cost, sim::Time alone, sim::Time ns,
                              double* remaining_ns);
  // compute_layers' accounting once the work is done: as compute_for's for `held` ns on the unit.
  void account_compute(Unit& u, const UnitCost& cost, sim::Time alone, sim::Time held);
  sim::Simulator& sim_;
  DeviceProfile profile_;
  sim::StatGroup& stats_;
  sim::TimelineProcess* timeline_;
  std::map<std::string, Unit> units_;
  std::unique_ptr<Storage> storage_;
  std::map<std::string, std::unique_ptr<sim::Resource>> links_;
  Dram dram_;
  std::unique_ptr<PowerManager> power_;  // after dram_: its clocks live on the DRAM bus
  sim::Counter* bus_wait_s_;  // time work took beyond its roofline because the DRAM bus was shared
};

}  // namespace mobisim::devices
