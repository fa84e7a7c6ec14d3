#include "policies/apps/chat_app.h"

#include <fmt/format.h>

#include "sim/registry.h"

namespace mobisim::policies {

ParamSchema ChatApp::schema() {
  ParamSchema s;
  add_app_params(s);
  s.node("model", "model: built-in name, YAML path, or {base: NAME, field: override}");
  s.text("unit", std::string("cpu"), "compute unit that prefills and decodes (cpu, gpu, npu, ...)");
  s.integer("requests", 8, "turns of the conversation").range(1, 1 << 20);
  s.integer("prompt_tokens", 256, "new tokens per turn").range(1, 1 << 20);
  s.integer("output_tokens", 512, "tokens decoded per turn").range(1, 1 << 20);
  s.real("think_time_s", 5.0, "from an answer's last token to the next turn's arrival").non_negative().with_unit("s");
  s.boolean("keep_history", true, "keep the conversation's KV in DRAM between turns (else each turn starts afresh)");
  return s;
}

ChatApp::ChatApp(const Params& p)
    : App(p),
      cost_(models::load_model_spec(p.node("model"), p.source_of("model"))),
      unit_(p.text("unit")),
      requests_(p.integer("requests")),
      prompt_tokens_(p.integer("prompt_tokens")),
      output_tokens_(p.integer("output_tokens")),
      think_time_s_(p.real("think_time_s")),
      keep_history_(p.boolean("keep_history")),
      resolved_(p.resolved()) {
  resolved_["model"] = yaml_clone(cost_.spec().resolved);
}

void ChatApp::prepare(const AppEnvironment& env) {
  if (env.device) env.device->require_engine_values(unit_, cost_.spec(), "chat app 'unit'");
}

std::vector<std::pair<std::string, double>> ChatApp::resident_dram() const {
  return {{"weights", cost_.spec().weight_bytes()}};
}

std::int64_t ChatApp::hold_turn_kv(devices::Dram& dram, const std::string& owner, std::int64_t& context,
                                   std::int64_t& history, Turn& t) const {
  const double per_token = cost_.spec().kv_bytes_per_token();
  std::int64_t total = context + prompt_tokens_ + output_tokens_;
  if (dram.try_allocate(owner, static_cast<double>(total - history) * per_token)) return total;
  // No room beside the kept history: drop it, and keep of the conversation what fits (its most
  // recent tokens), recomputing it. A turn whose own tokens do not fit stops the run.
  dram.release(owner, static_cast<double>(history) * per_token);
  history = 0;
  t.history_dropped = true;
  const auto fits = static_cast<std::int64_t>(dram.free_bytes() / per_token);
  if (fits < total) {
    const std::int64_t cut = std::min(context, total - fits);
    t.truncated_tokens = cut;
    context -= cut;
    total -= cut;
  }
  dram.reserve(owner, static_cast<double>(total) * per_token);
  return total;
}

sim::Task<void> ChatApp::run(devices::Device& device, std::string owner, sim::StatGroup& stats) {
  (void)stats;
  device.profile().require_unit(unit_, "chat app 'unit'");
  sim::Simulator& sim = device.sim();
  const std::string kv_owner = owner + "/kv";
  if (sim.now() < sim::from_seconds(start_s())) co_await sim.timeout(sim::from_seconds(start_s()) - sim.now());
  std::int64_t context = 0;  // tokens of the conversation so far
  std::int64_t history = 0;  // of those, tokens whose KV is held in DRAM
  for (std::int64_t r = 0; r < requests_; ++r) {
    Turn t;
    t.times.request = r;
    t.times.arrival_s = sim::to_seconds(sim.now());
    co_await wait_for_headroom(device);  // a background chat defers while the phone is hot or low
    t.times.start_s = sim::to_seconds(sim.now());
    const std::int64_t total = hold_turn_kv(device.dram(), kv_owner, context, history, t);
    t.cached_tokens = history;
    t.computed_tokens = context + prompt_tokens_ - history;
    t.kv_bytes = static_cast<double>(total) * cost_.spec().kv_bytes_per_token();
    const devices::UnitCost prefill = device.unit_cost(
        unit_, cost_.prefill(models::PrefillShape{t.computed_tokens, t.cached_tokens, 0, 1}), cost_.spec().weight_dtype,
        "chat prefill");
    co_await device.compute_layers(unit_, prefill, cost_.spec().n_layers, "chat prefill", priority());
    t.times.active_energy_j += device.profile().marginal_energy_j(unit_, prefill.seconds, "chat prefill");
    t.times.first_token_s = sim::to_seconds(sim.now());
    const std::int64_t prompt_end = context + prompt_tokens_;
    for (std::int64_t i = 1; i < output_tokens_; ++i) {
      const devices::UnitCost step = decode_.at(device, prompt_end + i - 1);  // as Pipeline::serve
      co_await device.compute_layers(unit_, step, cost_.spec().n_layers, "chat decode", priority());
      t.times.active_energy_j += device.profile().marginal_energy_j(unit_, step.seconds, "chat decode");
    }
    t.times.output_tokens = output_tokens_;
    t.times.end_s = sim::to_seconds(sim.now());
    context = total;
    if (keep_history_) {
      history = context;
    } else {
      device.dram().release(kv_owner, t.kv_bytes);
      history = 0;
      context = 0;
    }
    turns_.push_back(t);
    if (r + 1 < requests_ && think_time_s_ > 0) co_await sim.timeout(sim::from_seconds(think_time_s_));
  }
  device.dram().release(kv_owner, device.dram().held_by(kv_owner));
}

void ChatApp::records(h5::Table& out) const {
  std::vector<RequestTimes> times;
  std::vector<std::int64_t> computed, cached, dropped, truncated;
  std::vector<double> kv;
  for (const Turn& t : turns_) {
    times.push_back(t.times);
    computed.push_back(t.computed_tokens);
    cached.push_back(t.cached_tokens);
    kv.push_back(t.kv_bytes);
    dropped.push_back(t.history_dropped ? 1 : 0);
    truncated.push_back(t.truncated_tokens);
  }
  add_request_columns(out, times);
  out.add("computed_tokens", computed, "tokens");
  out.add("cached_tokens", cached, "tokens");
  out.add("kv_bytes", kv, "bytes");
  out.add("history_dropped", dropped, "bool");
  out.add("truncated_tokens", truncated, "tokens");
}

AppTotals ChatApp::totals() const {
  AppTotals a;
  for (const Turn& t : turns_) a.add(t.times);
  return a;
}

MOBISIM_REGISTER(App, ChatApp, "chat",
                 "A long-decoding chat: turns of new tokens and long answers, its KV history kept in DRAM while it fits.")

}  // namespace mobisim::policies
