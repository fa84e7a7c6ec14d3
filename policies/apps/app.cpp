#include "policies/apps/app.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"

namespace mobisim::policies {

void AppTotals::add(const RequestTimes& r) {
  ++requests;
  latency_s.add(r.end_s - r.arrival_s);
  ttft_s.add(r.first_token_s - r.arrival_s);
  if (r.output_tokens >= 2) tpot_s.add((r.end_s - r.first_token_s) / static_cast<double>(r.output_tokens - 1));
  active_energy_j += r.active_energy_j;
}

void add_request_columns(h5::Table& out, const std::vector<RequestTimes>& rows) {
  std::vector<std::int64_t> request, output;
  std::vector<double> arrival, start, first, end, latency, ttft, energy;
  for (const RequestTimes& r : rows) {
    request.push_back(r.request);
    arrival.push_back(r.arrival_s);
    start.push_back(r.start_s);
    first.push_back(r.first_token_s);
    end.push_back(r.end_s);
    latency.push_back(r.end_s - r.arrival_s);
    ttft.push_back(r.first_token_s - r.arrival_s);
    output.push_back(r.output_tokens);
    energy.push_back(r.active_energy_j);
  }
  out.add("request", request);
  out.add("arrival_s", arrival, "s");
  out.add("start_s", start, "s");
  out.add("first_token_s", first, "s");
  out.add("end_s", end, "s");
  out.add("latency_s", latency, "s");
  out.add("ttft_s", ttft, "s");
  out.add("output_tokens", output, "tokens");
  out.add("active_energy_j", energy, "J");
}

const traces::UserTrace& pick_user(const traces::RagTrace& trace, const std::string& user_id, const std::string& where) {
  if (trace.users.empty()) throw ConfigError(fmt::format("{}: the workload has no users", where));
  if (user_id.empty()) return trace.users.front();
  auto it = std::find_if(trace.users.begin(), trace.users.end(),
                         [&](const traces::UserTrace& u) { return u.user_id == user_id; });
  if (it == trace.users.end()) throw ConfigError(fmt::format("{}: no user '{}' in the workload", where, user_id));
  return *it;
}

void add_app_params(ParamSchema& s) {
  s.text("priority", std::string("foreground"),
         "foreground (its work goes first on a shared unit) or background (waits for foreground work; a model "
         "pass in flight gives the unit up at its next layer boundary)")
      .in({"foreground", "background"});
  s.real("start_s", 0.0, "when the app starts issuing requests").non_negative().with_unit("s");
  s.real("background_recheck_s", 30.0,
         "background app under a thermal model: how often a deferred request looks again for headroom and charge")
      .positive()
      .with_unit("s");
  s.real("background_max_wait_s", 600.0, "background app: the longest a request is deferred before it runs anyway")
      .non_negative()
      .with_unit("s");
}

int app_priority(const std::string& name) { return name == "background" ? 1 : 0; }

App::App(const Params& p)
    : priority_(app_priority(p.text("priority"))),
      start_s_(p.real("start_s")),
      background_recheck_s_(p.real("background_recheck_s")),
      background_max_wait_s_(p.real("background_max_wait_s")) {}

sim::Task<void> App::wait_for_headroom(devices::Device& device) const {
  if (priority_ == 0) co_return;
  sim::Simulator& sim = device.sim();
  const sim::Time give_up = sim.now() + sim::from_seconds(background_max_wait_s_);
  while (!device.background_allowed() && sim.now() < give_up)
    co_await sim.timeout(std::min(sim::from_seconds(background_recheck_s_), give_up - sim.now()));
}

}  // namespace mobisim::policies
