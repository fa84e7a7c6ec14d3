#pragma once
// An app on the simulated phone: a workload and the pipeline that serves it. Several apps run
// at once on one Device and feel each other: they queue on the same compute units (a foreground
// app's work goes before a background app's), hold their weights, KV and caches in one DRAM
// ledger, stream over one DRAM bus and read one flash device. The `phone` experiment
// (experiments/phone_experiment.cpp) lists them under `apps:`.
//
// One app = one file pair under policies/apps/, registered with
//   MOBISIM_REGISTER(mobisim::policies::App, MyApp, "my_app", "doc");
// Every app's schema starts with add_app_params() (priority, start_s).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "devices/device.h"
#include "sim/h5.h"
#include "sim/params.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "policies/pipeline/request.h"
#include "traces/rag_trace.h"

namespace mobisim::policies {

struct KnowledgeIndex;  // policies/rag/knowledge_index.h

// What the driver gives an app before any simulation: the run's random identity, the phone, and
// how to read a RAG workload node ({trace: FILE.h5} or {generate: ...}; the experiments layer owns
// file and generator resolution).
struct AppEnvironment {
  std::uint64_t seed = 1, run = 0;
  const devices::DeviceProfile* device = nullptr;  // the phone (apps check the units they name)
  std::function<traces::RagTrace(const YAML::Node& workload, const ConfigSource& source)> rag_workload;
  // Optional: a user's knowledge index the driver already built (shared by every app over that
  // user: an index is a pure function of the user's chunks); unset or null: the app builds its own.
  std::function<std::shared_ptr<const KnowledgeIndex>(const traces::UserTrace& user)> knowledge_index;
};

// The numbers every app reports (one row of the phone's summary), summed over its requests.
using pipeline::RequestTimes;

struct AppTotals {
  std::int64_t requests = 0;
  sim::Histogram latency_s;  // arrival to last token
  sim::Histogram ttft_s;     // arrival to first token
  sim::Histogram tpot_s;     // per output token after the first (requests with >= 2 tokens)
  double active_energy_j = 0;
  void add(const RequestTimes& r);
};

// The columns every app's records start with: request, arrival_s, start_s, first_token_s, end_s,
// latency_s, ttft_s, output_tokens, active_energy_j (one row per element of `rows`).
void add_request_columns(h5::Table& out, const std::vector<RequestTimes>& rows);

// The user a RAG-workload app replays: `user_id`, or the first user when it is empty (a
// ConfigError naming `where` when there is no such user).
const traces::UserTrace& pick_user(const traces::RagTrace& trace, const std::string& user_id, const std::string& where);

class App {
 public:
  static constexpr const char* kRegistryKind = "app";
  virtual ~App() = default;
  // Queue priority on shared units: foreground (0) before background (1). The app's model passes
  // (prefills, decode steps) run through Device::compute_layers: a background pass in flight gives
  // the unit up to foreground work at its next layer boundary.
  int priority() const { return priority_; }
  // When the app starts issuing work (seconds of simulated time).
  double start_s() const { return start_s_; }

  // Loads and checks the app's workload; no simulation.
  virtual void prepare(const AppEnvironment& env) = 0;
  // What the app keeps in DRAM for the whole run (its model's weights, drafters), by owner:
  // reserved before it starts; a phone that cannot hold them all stops the run.
  virtual std::vector<std::pair<std::string, double>> resident_dram() const = 0;
  // The app's requests, issued on `device`; `owner` prefixes its DRAM holdings ("<owner>/kv").
  virtual sim::Task<void> run(devices::Device& device, std::string owner, sim::StatGroup& stats) = 0;
  // After the run: one row per request, and the totals.
  virtual void records(h5::Table& out) const = 0;
  virtual AppTotals totals() const = 0;
  // Everything the app was configured with, defaults filled (stored with the results).
  virtual YAML::Node resolved() const = 0;
  // The model the app runs and the unit it runs on, for tables and plot titles.
  virtual std::string model_name() const = 0;
  virtual std::string unit() const = 0;
  // The workload's charging periods (start_s, end_s), e.g. a RAG trace's charging idle windows:
  // a phone experiment with thermal battery.trace_charging_w charges in them. None by default.
  virtual std::vector<std::pair<double, double>> charging_windows() const { return {}; }

 protected:
  explicit App(const Params& p);
  // Before each request of a background app: waits while the phone disallows background work (no
  // thermal headroom, a low battery: Device::background_allowed, always true with thermal: none),
  // looking again every background_recheck_s, at most background_max_wait_s (then it runs: the OS
  // defers background work, it does not drop it). Foreground apps never wait.
  sim::Task<void> wait_for_headroom(devices::Device& device) const;

 private:
  int priority_ = 0;
  double start_s_ = 0;
  double background_recheck_s_ = 30, background_max_wait_s_ = 600;
};

// The parameters every app has (priority, start_s); each app's schema() calls it first.
void add_app_params(ParamSchema& s);
// The queue priority of a `priority:` name.
int app_priority(const std::string& name);

}  // namespace mobisim::policies
