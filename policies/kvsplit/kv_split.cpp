#include "policies/kvsplit/kv_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/error.h"
#include "sim/event.h"
#include "sim/resource.h"
#include "sim/simulator.h"

namespace mobisim::policies::kvsplit {

namespace {

void check_request(std::int64_t s, std::int64_t l) {
  if (s < 0) throw ConfigError(fmt::format("kv split: sequence length {} must be >= 0", s));
  if (l < 0 || l > s) throw ConfigError(fmt::format("kv split: split point {} outside [0, {}]", l, s));
}

struct SplitRun {
  sim::Time compute_end = 0, copy_end = 0;
  sim::Time compute_busy = 0, copy_busy = 0;
};

// Compute stream: X[0:l] crosses the link first, then Q (if needed) and the K/V rebuild.
sim::Task<void> split_compute(sim::Simulator& sim, sim::Resource& link, sim::Resource& gpu, sim::Event x_done,
                              sim::Time x, sim::Time work, SplitRun& run) {
  if (x > 0) {
    auto lease = co_await link.acquire();
    co_await sim.timeout(x);
    run.copy_busy += x;
  }
  x_done.succeed();
  if (work > 0) {
    auto lease = co_await gpu.acquire();
    co_await sim.timeout(work);
    run.compute_busy += work;
  }
  run.compute_end = sim.now();
}

// Copy stream: loads K/V[l:s] once the link has carried X.
sim::Task<void> split_copy(sim::Simulator& sim, sim::Resource& link, sim::Event x_done, sim::Time load, SplitRun& run) {
  co_await x_done;
  if (load > 0) {
    auto lease = co_await link.acquire();
    co_await sim.timeout(load);
    run.copy_busy += load;
  }
  run.copy_end = sim.now();
}

struct CakeRun {
  std::int64_t compute_idx = 0, load_idx = 0;
  std::vector<bool> computed;
  sim::Time compute_end = 0, copy_end = 0, compute_busy = 0, copy_busy = 0;
};

sim::Task<void> cake_compute(sim::Simulator& sim, sim::Resource& link, const SplitCosts& costs,
                             const SplitRequest& req, const CakeOptions& opt, CakeRun& st) {
  const sim::Time overhead = sim::from_seconds(opt.compute_block_overhead_us * 1e-6 * costs.layers());
  while (st.compute_idx <= st.load_idx) {
    const std::int64_t i = st.compute_idx++;
    st.computed[static_cast<std::size_t>(i)] = true;
    const std::int64_t from = i * opt.block_tokens, to = std::min(req.s, from + opt.block_tokens);
    if (i == 0 && req.with_q) {  // Algorithm 1 line 7: full Q from X before the first block
      const sim::Time q = sim::from_seconds(costs.q_s(req.s));
      co_await sim.timeout(q);
      st.compute_busy += q;
    }
    // The block's layer inputs share the copy link with the loads (zero for prefill-style recompute).
    const sim::Time x = sim::from_seconds(costs.x_transfer_s(to - from));
    if (x > 0) {
      auto lease = co_await link.acquire();
      co_await sim.timeout(x);
      st.copy_busy += x;
    }
    const sim::Time work = sim::from_seconds(costs.recompute_s(from, to)) + overhead;
    co_await sim.timeout(work);
    st.compute_busy += work;
    st.compute_end = sim.now();
  }
}

sim::Task<void> cake_copy(sim::Simulator& sim, sim::Resource& link, const SplitCosts& costs, const SplitRequest& req,
                          const CakeOptions& opt, CakeRun& st) {
  const sim::Time overhead = sim::from_seconds(opt.load_block_overhead_us * 1e-6 * costs.layers());
  // Let a compute stream that becomes free at this same instant claim first (ties go to compute).
  co_await sim.timeout(0);
  while (st.compute_idx <= st.load_idx) {
    const std::int64_t i = st.load_idx--;
    const std::int64_t from = i * opt.block_tokens, to = std::min(req.s, from + opt.block_tokens);
    {
      auto lease = co_await link.acquire();
      const sim::Time t = sim::from_seconds(costs.load_s(to - from)) + overhead;
      co_await sim.timeout(t);
      st.copy_busy += t;
    }
    st.copy_end = sim.now();
    co_await sim.timeout(0);
  }
}

}  // namespace

double split_objective_s(const SplitCosts& costs, std::int64_t s, std::int64_t l, bool with_q) {
  check_request(s, l);
  const double compute = (with_q ? costs.q_s(s) : 0.0) + costs.recompute_s(0, l);
  return costs.x_transfer_s(l) + std::max(compute, costs.load_s(s - l));
}

SplitPlan simulate_split(const SplitCosts& costs, std::int64_t s, std::int64_t l, bool with_q) {
  check_request(s, l);
  sim::Simulator sim;
  sim::Resource link(sim, "copy-stream"), gpu(sim, "compute-stream");
  sim::Event x_done(sim);
  SplitRun run;
  const sim::Time x = sim::from_seconds(costs.x_transfer_s(l));
  const sim::Time work = sim::from_seconds((with_q ? costs.q_s(s) : 0.0) + costs.recompute_s(0, l));
  const sim::Time load = sim::from_seconds(costs.load_s(s - l));
  sim.start(split_compute(sim, link, gpu, x_done, x, work, run), "compute");
  sim.start(split_copy(sim, link, x_done, load, run), "copy");
  sim.run();
  SplitPlan p;
  p.s = s;
  p.with_q = with_q;
  p.recomputed_tokens = l;
  p.time_s = sim::to_seconds(std::max(run.compute_end, run.copy_end));
  p.compute_busy_s = sim::to_seconds(run.compute_busy);
  p.copy_busy_s = sim::to_seconds(run.copy_busy);
  return p;
}

std::int64_t ilp_split(const SplitCosts& costs, std::int64_t s, bool q_aware) {
  check_request(s, 0);
  std::int64_t best = 0;
  double best_t = split_objective_s(costs, s, 0, q_aware);
  for (std::int64_t l = 1; l <= s; ++l) {
    const double t = split_objective_s(costs, s, l, q_aware);
    if (t < best_t) {
      best_t = t;
      best = l;
    }
  }
  return best;
}

double closed_form_real(const AnalyticRates& r, std::int64_t s, bool q_aware) {
  const double denom = 2.0 * r.h * r.v_com_bps + r.p_bytes * r.v_gpu_flops;
  if (!(denom > 0)) throw ConfigError("kv split closed form: rates give a zero denominator (2*h*v_com + p*v_gpu)");
  const double num = q_aware ? r.p_bytes * r.v_gpu_flops - r.h * r.v_com_bps : r.p_bytes * r.v_gpu_flops;
  return static_cast<double>(s) * num / denom;
}

namespace {
std::int64_t round_clamp(double x, std::int64_t s) {
  return std::clamp<std::int64_t>(std::llround(x), 0, s);
}
}  // namespace

std::int64_t closed_form_split(const AnalyticRates& r, std::int64_t s, double c1) {
  check_request(s, 0);
  return round_clamp(c1 * closed_form_real(r, s, false), s);
}

std::int64_t closed_form_split_q(const AnalyticRates& r, std::int64_t s, double c2) {
  check_request(s, 0);
  return round_clamp(c2 * closed_form_real(r, s, true), s);
}

SplitPlan simulate_cake(const SplitCosts& costs, const SplitRequest& req, const CakeOptions& opt) {
  check_request(req.s, 0);
  if (opt.block_tokens <= 0) throw ConfigError(fmt::format("cake: block_tokens {} must be > 0", opt.block_tokens));
  if (opt.compute_block_overhead_us < 0 || opt.load_block_overhead_us < 0)
    throw ConfigError("cake: per-block overheads must be >= 0");
  const std::int64_t n_blocks = (req.s + opt.block_tokens - 1) / opt.block_tokens;
  CakeRun st;
  st.load_idx = n_blocks - 1;
  st.computed.assign(static_cast<std::size_t>(n_blocks), false);
  sim::Simulator sim;
  sim::Resource link(sim, "copy-stream");
  if (n_blocks > 0) {
    sim.start(cake_compute(sim, link, costs, req, opt, st), "cake-compute");  // started first: claims block 0
    sim.start(cake_copy(sim, link, costs, req, opt, st), "cake-copy");
    sim.run();
  }
  SplitPlan p;
  p.s = req.s;
  p.with_q = req.with_q;
  p.block_tokens = opt.block_tokens;
  p.computed_blocks = st.computed;
  for (std::int64_t i = 0; i < n_blocks; ++i)
    if (st.computed[static_cast<std::size_t>(i)])
      p.recomputed_tokens += std::min(req.s, (i + 1) * opt.block_tokens) - i * opt.block_tokens;
  p.time_s = sim::to_seconds(std::max(st.compute_end, st.copy_end));
  p.compute_busy_s = sim::to_seconds(st.compute_busy);
  p.copy_busy_s = sim::to_seconds(st.copy_busy);
  return p;
}

}  // namespace mobisim::policies::kvsplit
