#include "policies/specdec/graph_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/error.h"

namespace mobisim::policies::specdec {

void ScheduleProblem::validate() const {
  if (blocks <= 0 || chunks <= 0)
    throw InputError(fmt::format("graph schedule: need at least one block and one chunk (got {} blocks, {} chunks)",
                                 blocks, chunks));
  auto check_rows = [&](const std::vector<std::vector<double>>& m, const char* what) {
    if (static_cast<int>(m.size()) != blocks)
      throw InputError(fmt::format("graph schedule: {} has {} rows, expected {} blocks", what, m.size(), blocks));
    for (const auto& row : m) {
      if (static_cast<int>(row.size()) != chunks)
        throw InputError(fmt::format("graph schedule: {} has a row of {} entries, expected {} chunks", what,
                                     row.size(), chunks));
      for (double v : row)
        if (!(v >= 0)) throw InputError(fmt::format("graph schedule: {} has a negative or NaN time", what));
    }
  };
  check_rows(prefill_s, "prefill_s");
  check_rows(decode_s, "decode_s");
  if (static_cast<int>(load_s.size()) != blocks || static_cast<int>(weight_bytes.size()) != blocks)
    throw InputError(fmt::format("graph schedule: load_s and weight_bytes need {} entries", blocks));
  for (double v : load_s)
    if (!(v >= 0)) throw InputError("graph schedule: negative or NaN load time");
}

double ScheduleProblem::total_weight_bytes() const {
  return other_weight_bytes + std::accumulate(weight_bytes.begin(), weight_bytes.end(), 0.0);
}

const char* to_string(SwitchStrategy s) {
  switch (s) {
    case SwitchStrategy::kSynchronous: return "synchronous";
    case SwitchStrategy::kNaiveAsync: return "naive_async";
    case SwitchStrategy::kProgressive: return "progressive";
    case SwitchStrategy::kProgressiveLate: return "progressive_late";
    case SwitchStrategy::kExact: return "exact";
    case SwitchStrategy::kBothResident: return "both_resident";
  }
  return "?";
}

std::vector<std::string> switch_strategy_names() {
  return {"synchronous", "naive_async", "progressive", "progressive_late", "exact", "both_resident"};
}

SwitchStrategy parse_switch_strategy(const std::string& name) {
  for (auto s : {SwitchStrategy::kSynchronous, SwitchStrategy::kNaiveAsync, SwitchStrategy::kProgressive,
                 SwitchStrategy::kProgressiveLate, SwitchStrategy::kExact, SwitchStrategy::kBothResident})
    if (name == to_string(s)) return s;
  throw ConfigError(fmt::format("unknown graph switch strategy '{}' (expected one of: {})", name,
                                fmt::join(switch_strategy_names(), ", ")));
}

double GraphSchedule::exposed_switch_s(const ScheduleProblem& p) const {
  double all_on_prefill_graph = 0;
  for (const auto& row : p.prefill_s) all_on_prefill_graph += std::accumulate(row.begin(), row.end(), 0.0);
  return latency_s() - all_on_prefill_graph;
}

namespace {

double peak_bytes_switching(const ScheduleProblem& p) {
  // One graph per block, plus a second copy of the block being loaded (loads are serial).
  return p.total_weight_bytes() + *std::max_element(p.weight_bytes.begin(), p.weight_bytes.end());
}

}  // namespace

GraphSchedule simulate_triggers(const ScheduleProblem& p, const std::vector<int>& trigger) {
  p.validate();
  const int B = p.blocks, S = p.slots();
  if (static_cast<int>(trigger.size()) != B)
    throw InputError(fmt::format("graph schedule: {} triggers for {} blocks", trigger.size(), B));
  for (int t : trigger)
    if (t < 0 || t > S) throw InputError(fmt::format("graph schedule: trigger {} outside [0, {}]", t, S));

  GraphSchedule g;
  g.trigger = trigger;
  std::vector<int> order(B);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return trigger[a] < trigger[b]; });

  enum class State { kPrefillGraph, kLoading, kDecodeGraph };
  std::vector<State> state(B, State::kPrefillGraph);
  std::vector<double> load_end(B, 0), own_busy_until(B, 0), slot_end(S, 0);
  std::vector<int> load_index(B, -1);
  double compute_free = 0, load_free = 0;
  int s = 0;
  std::size_t q = 0;
  g.computes.reserve(S);
  while (s < S || q < order.size()) {
    if (q < order.size() && trigger[order[q]] <= s) {
      const int b = order[q];
      const double requested = trigger[b] == 0 ? 0.0 : slot_end[trigger[b] - 1];
      const double start = std::max({requested, load_free, own_busy_until[b]});
      // A load that can start before the next compute slot does (ties: the load, as requested) goes
      // first; otherwise that slot runs first (on G_p if it is this block's: loads never overlap
      // their own block's compute) and the load is reconsidered after it.
      if (s == S || start <= compute_free) {
        load_end[b] = start + p.load_s[b];
        load_free = load_end[b];
        state[b] = State::kLoading;
        load_index[b] = static_cast<int>(g.loads.size());
        g.loads.push_back({b, start, load_end[b], 0});
        ++q;
        continue;
      }
    }
    const int b = s % B, chunk = s / B;
    double start = compute_free;
    const bool on_decode = state[b] != State::kPrefillGraph;
    if (state[b] == State::kLoading) start = std::max(start, load_end[b]);
    const double end = start + (on_decode ? p.decode_s[b][chunk] : p.prefill_s[b][chunk]);
    g.computes.push_back({b, chunk, on_decode, start, end});
    if (on_decode) state[b] = State::kDecodeGraph;
    slot_end[s] = end;
    own_busy_until[b] = end;
    compute_free = end;
    ++s;
  }
  g.prefill_end_s = compute_free;
  g.switch_end_s = load_free;
  for (auto& l : g.loads)
    for (const auto& c : g.computes)
      if (c.start_s < l.end_s && c.end_s > l.start_s && c.end_s > c.start_s) ++l.overlapped_slots;
  g.peak_npu_bytes = peak_bytes_switching(p);
  return g;
}

int least_overlap_slots(const std::vector<double>& slot_seconds, int slot, double load_seconds) {
  double covered = 0;
  for (int k = 1; slot + k < static_cast<int>(slot_seconds.size()); ++k) {
    covered += slot_seconds[slot + k];
    if (covered >= load_seconds) return k;
  }
  return -1;
}

GraphSchedule schedule_synchronous(const ScheduleProblem& p) {
  GraphSchedule g = simulate_triggers(p, std::vector<int>(p.blocks, p.slots()));
  g.strategy = SwitchStrategy::kSynchronous;
  return g;
}

GraphSchedule schedule_naive_async(const ScheduleProblem& p) {
  std::vector<int> t(p.blocks);
  for (int b = 0; b < p.blocks; ++b) t[b] = (p.chunks - 1) * p.blocks + b + 1;
  GraphSchedule g = simulate_triggers(p, t);
  g.strategy = SwitchStrategy::kNaiveAsync;
  return g;
}

GraphSchedule schedule_progressive(const ScheduleProblem& p, int first_slot) {
  p.validate();
  const int B = p.blocks, S = p.slots();
  std::vector<int> trigger(B, S);
  std::vector<bool> requested(B, false);
  // Estimated slot times as the greedy sees them when deciding (profiled per block, eq. 1):
  // a block already requested is assumed to run on G_d from then on.
  auto estimate = [&] {
    std::vector<double> t(S);
    for (int s = 0; s < S; ++s) {
      const int b = s % B, c = s / B;
      t[s] = requested[b] ? p.decode_s[b][c] : p.prefill_s[b][c];
    }
    return t;
  };
  int next_candidate = std::max(0, first_slot);  // the first slot after which a new load may start
  for (int s = 0; s < S; ++s) {
    const int b = s % B;
    if (s < next_candidate || requested[b]) continue;
    // Block b has just finished its part of chunk s / B and is not switched: load it now,
    // hidden behind the least k next slots (eq. 2); the next candidate is the block of slot s + k.
    requested[b] = true;
    trigger[b] = s + 1;
    const int k = least_overlap_slots(estimate(), s, p.load_s[b]);
    next_candidate = k < 0 ? S : s + k;
  }
  GraphSchedule g = simulate_triggers(p, trigger);
  g.strategy = SwitchStrategy::kProgressive;
  return g;
}

GraphSchedule schedule_progressive_late(const ScheduleProblem& p) {
  GraphSchedule best = schedule_progressive(p, 0);
  for (int s = 1; s <= p.slots(); ++s) {
    GraphSchedule g = schedule_progressive(p, s);
    if (g.latency_s() < best.latency_s() - 1e-15) best = std::move(g);
  }
  best.strategy = SwitchStrategy::kProgressiveLate;
  return best;
}

GraphSchedule schedule_exact(const ScheduleProblem& p, std::int64_t max_evaluations) {
  p.validate();
  const int B = p.blocks, S = p.slots();
  double combos = std::pow(static_cast<double>(S + 1), B);
  if (combos > static_cast<double>(max_evaluations))
    throw ConfigError(fmt::format(
        "exact graph schedule: {} blocks x {} chunks gives {:.3g} trigger vectors, more than the limit {} "
        "(the problem is 2-partition-hard; use fewer blocks or the progressive greedy)",
        B, p.chunks, combos, max_evaluations));
  std::vector<int> t(B, 0);
  GraphSchedule best;
  bool have = false;
  std::int64_t evaluated = 0;
  for (;;) {
    GraphSchedule g = simulate_triggers(p, t);
    ++evaluated;
    if (!have || g.latency_s() < best.latency_s() - 1e-15) {
      best = std::move(g);
      have = true;
    }
    int i = 0;
    while (i < B && t[i] == S) t[i++] = 0;
    if (i == B) break;
    ++t[i];
  }
  best.strategy = SwitchStrategy::kExact;
  best.evaluated_schedules = evaluated;
  return best;
}

GraphSchedule schedule_both_resident(const ScheduleProblem& p) {
  p.validate();
  GraphSchedule g;
  g.strategy = SwitchStrategy::kBothResident;
  double t = 0;
  for (int c = 0; c < p.chunks; ++c)
    for (int b = 0; b < p.blocks; ++b) {
      g.computes.push_back({b, c, false, t, t + p.prefill_s[b][c]});
      t += p.prefill_s[b][c];
    }
  g.prefill_end_s = t;
  g.switch_end_s = 0;
  g.peak_npu_bytes = p.other_weight_bytes + 2.0 * std::accumulate(p.weight_bytes.begin(), p.weight_bytes.end(), 0.0);
  return g;
}

GraphSchedule schedule(const ScheduleProblem& p, SwitchStrategy s) {
  switch (s) {
    case SwitchStrategy::kSynchronous: return schedule_synchronous(p);
    case SwitchStrategy::kNaiveAsync: return schedule_naive_async(p);
    case SwitchStrategy::kProgressive: return schedule_progressive(p);
    case SwitchStrategy::kProgressiveLate: return schedule_progressive_late(p);
    case SwitchStrategy::kExact: return schedule_exact(p);
    case SwitchStrategy::kBothResident: return schedule_both_resident(p);
  }
  throw Error("unreachable switch strategy");
}

using models::is_attention;

models::Work npu_part(const models::Work& w) {
  models::Work out;
  for (const auto& op : w.ops)
    if (!is_attention(op.kind)) out.ops.push_back(op);
  return out;
}

models::Work cpu_attention_part(const models::Work& w) {
  models::Work out;
  for (const auto& op : w.ops)
    if (is_attention(op.kind)) out.ops.push_back(op);
  return out;
}

void validate_shapes(const GraphShapes& g, int n_layers) {
  if (g.blocks <= 0) throw ConfigError(fmt::format("graph blocks must be positive (got {})", g.blocks));
  if (g.prefill_chunk <= 0 || g.decode_chunk <= 0)
    throw ConfigError(fmt::format("graph chunks must be positive (got G_p {}, G_d {})", g.prefill_chunk,
                                  g.decode_chunk));
  if (g.decode_chunk > g.prefill_chunk)
    throw ConfigError(fmt::format("the decoding graph's chunk ({}) is larger than the prefill graph's ({}): "
                                  "G_d must run the prefill by repetition of sub-chunks",
                                  g.decode_chunk, g.prefill_chunk));
  if (g.blocks > n_layers)
    throw ConfigError(fmt::format("{} graph blocks for a model of {} layers: each block needs at least one layer",
                                  g.blocks, n_layers));
}

ScheduleProblem make_schedule_problem(const devices::NpuSpec& npu, const devices::ComputeUnitSpec& cpu,
                                      const models::CostModel& cost, std::int64_t prompt_tokens,
                                      const GraphShapes& shapes) {
  const auto& spec = cost.spec();
  validate_shapes(shapes, spec.n_layers);
  if (prompt_tokens <= 0) throw InputError(fmt::format("prompt of {} tokens", prompt_tokens));
  ScheduleProblem p;
  p.blocks = shapes.blocks;
  p.chunks = static_cast<int>((prompt_tokens + shapes.prefill_chunk - 1) / shapes.prefill_chunk);
  const double bytes = spec.linear_weight_bytes();
  const double adapters = spec.lora_bytes_per_layer();  // a block's graph holds its layers' adapters too
  p.other_weight_bytes = spec.weight_bytes() - static_cast<double>(spec.params_per_layer()) * spec.n_layers * bytes -
                         adapters * spec.n_layers;
  const int cp = shapes.prefill_chunk, cd = shapes.decode_chunk;
  const std::int64_t repeats = (cp + cd - 1) / cd;
  for (int b = 0; b < p.blocks; ++b) {
    const int layers = spec.n_layers / p.blocks + (b < spec.n_layers % p.blocks ? 1 : 0);
    const double frac = static_cast<double>(layers) / spec.n_layers;
    p.load_s.push_back(npu.graph_load_seconds(layers));
    p.weight_bytes.push_back(static_cast<double>(spec.params_per_layer()) * layers * bytes + adapters * layers);
    std::vector<double> pre, dec, att;
    for (int c = 0; c < p.chunks; ++c) {
      const std::int64_t cached = static_cast<std::int64_t>(c) * cp;
      // Linear layers of one G_p execution; attention of the chunk's real tokens on the CPU.
      const models::Work chunk_work = cost.prefill(models::PrefillShape{cp, cached, 0, 0}).scaled(frac);
      const double attn = cpu.seconds(cpu_attention_part(chunk_work), spec.activation_dtype);
      att.push_back(attn);
      pre.push_back(npu.exec_seconds(npu_part(chunk_work), cp, spec.weight_dtype, frac) + attn);
      const models::Work sub_work = cost.prefill(models::PrefillShape{cd, cached, 0, 0}).scaled(frac);
      dec.push_back(static_cast<double>(repeats) * npu.exec_seconds(npu_part(sub_work), cd, spec.weight_dtype, frac) +
                    attn);
    }
    p.prefill_s.push_back(std::move(pre));
    p.decode_s.push_back(std::move(dec));
    p.attention_s.push_back(std::move(att));
  }
  return p;
}

}  // namespace mobisim::policies::specdec
