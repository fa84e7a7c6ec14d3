#include "policies/pipeline/split_events.h"

#include <algorithm>
#include <utility>

#include "sim/event.h"

namespace mobisim::policies::pipeline {

namespace {

using kvsplit::RecomputeKind;

double loaded_bytes(const SplitStreams& st, std::int64_t tokens) {
  const auto& m = st.cost.spec();
  const double per_token =
      st.options.payload == kvsplit::Payload::kKv ? m.kv_bytes_per_token() : m.qkv_bytes_per_token(m.kv_dtype);
  return static_cast<double>(tokens) * per_token;
}

// Layer inputs X of `tokens` positions: only K/V rebuilt from hidden states needs them.
double x_bytes(const SplitStreams& st, std::int64_t tokens) {
  if (st.options.recompute != RecomputeKind::kHidden) return 0;
  const auto& m = st.cost.spec();
  return static_cast<double>(tokens) * m.hidden_bytes_per_token(m.activation_dtype);
}

// `bytes` over the copy stream: the link, or flash less the page-cached share (a DRAM copy), plus
// `dram_bytes` copied from DRAM. `hold` more on a link: a block's issue work keeps the copy engine.
sim::Task<void> read(const SplitStreams& st, double bytes, double dram_bytes, sim::Time hold = 0) {
  devices::Device& device = st.device;
  if (!st.options.link.empty()) {
    co_await device.transfer(st.options.link, bytes, "kv load", hold);
    co_return;
  }
  const double f = st.options.page_cache_fraction;
  if (bytes > 0 || dram_bytes <= 0) co_await device.storage().read(bytes * (1 - f), "kv load");
  const double copy = dram_bytes > 0 ? bytes * f + dram_bytes : bytes * f;
  if (copy > 0) co_await device.sim().timeout(sim::from_seconds(copy / (device.profile().dram.bandwidth_gbps * 1e9)));
  if (hold > 0) co_await device.sim().timeout(hold);
}

// The rebuild of [from, to) (and Q of `q_positions`): as long as the split costs say, streaming
// the work's bytes over the DRAM bus beside whatever else runs.
devices::UnitCost rebuild_cost(const SplitStreams& st, std::int64_t from, std::int64_t to, std::int64_t q_positions) {
  models::Work w;
  if (to > from)
    w += st.options.recompute == RecomputeKind::kHidden ? st.cost.kv_recompute(to - from)
                                                        : st.cost.prefill(models::PrefillShape{to - from, from, 0, 0});
  if (q_positions > 0) w += st.cost.q_projection(q_positions);
  // One sum, rounded once: what the strategies' plans charge the compute stream.
  const double seconds = st.costs.recompute_s(from, to) + (q_positions > 0 ? st.costs.q_s(q_positions) : 0.0);
  return devices::UnitCost{seconds, w.flops(), w.bytes()};
}

sim::Task<void> compute(const SplitStreams& st, devices::UnitCost c, SplitTally& out) {
  if (c.seconds <= 0) co_return;
  co_await st.device.compute_for(st.options.compute_unit, c, "kv recompute", st.priority);
  out.compute_busy += sim::from_seconds(c.seconds);
  out.active_energy_j += st.device.profile().marginal_energy_j(st.options.compute_unit, c.seconds, "recompute");
}

// `charged`: what the split costs say the piece takes alone.
sim::Task<void> copy(const SplitStreams& st, double bytes, double dram_bytes, double charged_s, SplitTally& out,
                     sim::Time hold = 0) {
  co_await read(st, bytes, dram_bytes, hold);
  out.copy_busy += sim::from_seconds(charged_s) + hold;
}

// Both streams at once; the unit's is started first (it claims first at equal times).
sim::Task<void> both(sim::Simulator& sim, sim::Task<void> unit, sim::Task<void> reader) {
  std::vector<sim::Event> streams{sim.start(std::move(unit), "kv recompute").done_event(),
                                  sim.start(std::move(reader), "kv load").done_event()};
  co_await sim::all_of(sim, streams);
}

// Cake's two pointers: block `next` is the unit's next, `last` the reader's.
struct Blocks {
  std::int64_t s = 0, size = 0, next = 0, last = -1;
  std::int64_t from(std::int64_t i) const { return i * size; }
  std::int64_t to(std::int64_t i) const { return std::min(s, (i + 1) * size); }
};

sim::Task<void> rebuild_blocks(const SplitStreams& st, const kvsplit::CakeOptions& opt, Blocks& b, SplitTally& out) {
  const sim::Time overhead = sim::from_seconds(opt.compute_block_overhead_us * 1e-6 * st.costs.layers());
  while (b.next <= b.last) {
    const std::int64_t i = b.next++;
    out.recomputed_tokens += b.to(i) - b.from(i);
    // Algorithm 1 line 7: Q of every position before the first block.
    if (i == 0 && st.with_q) co_await compute(st, rebuild_cost(st, 0, 0, b.s), out);
    if (const double x = x_bytes(st, b.to(i) - b.from(i)); x > 0)
      co_await copy(st, x, 0, st.costs.x_transfer_s(b.to(i) - b.from(i)), out);
    co_await compute(st, rebuild_cost(st, b.from(i), b.to(i), 0), out);
    if (overhead > 0) {  // pointer check, event record, relaunch: the unit stays taken
      co_await st.device.busy(st.options.compute_unit, overhead, "cake block overhead", st.priority);
      out.compute_busy += overhead;
    }
  }
}

sim::Task<void> load_blocks(const SplitStreams& st, const kvsplit::CakeOptions& opt, Blocks& b, SplitTally& out) {
  sim::Simulator& sim = st.device.sim();
  const sim::Time overhead = sim::from_seconds(opt.load_block_overhead_us * 1e-6 * st.costs.layers());
  co_await sim.timeout(0);  // a unit free at this same instant claims first
  while (b.next <= b.last) {
    const std::int64_t i = b.last--;
    const std::int64_t n = b.to(i) - b.from(i);
    co_await copy(st, loaded_bytes(st, n), 0, st.costs.load_s(n), out, overhead);
    co_await sim.timeout(0);
  }
}

}  // namespace

sim::Task<void> issue_split(const SplitStreams& st, std::int64_t s, std::int64_t l, std::int64_t from_dram,
                            SplitTally& out) {
  out.recomputed_tokens = l;
  // The layer inputs of [0, l) cross first; the rebuild needs them, the loads queue behind them.
  if (const double x = x_bytes(st, l); x > 0) co_await copy(st, x, 0, st.costs.x_transfer_s(l), out);
  const devices::UnitCost rebuild = rebuild_cost(st, 0, l, st.with_q ? s : 0);
  const double load = loaded_bytes(st, s - l - from_dram), dram = loaded_bytes(st, from_dram);
  if (rebuild.seconds > 0 && s - l > 0)
    co_await both(st.device.sim(), compute(st, rebuild, out), copy(st, load, dram, st.costs.load_s(s - l), out));
  else if (rebuild.seconds > 0)
    co_await compute(st, rebuild, out);
  else
    co_await copy(st, load, dram, st.costs.load_s(s - l), out);
}

sim::Task<void> issue_blocks(const SplitStreams& st, std::int64_t s, const kvsplit::CakeOptions& opt, SplitTally& out) {
  Blocks b{s, opt.block_tokens, 0, (s + opt.block_tokens - 1) / opt.block_tokens - 1};
  out.recomputed_tokens = 0;
  if (b.last < 0) co_return;
  co_await both(st.device.sim(), rebuild_blocks(st, opt, b, out), load_blocks(st, opt, b, out));
}

}  // namespace mobisim::policies::pipeline
