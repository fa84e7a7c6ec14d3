#include "policies/kvsplit/split_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/error.h"

namespace mobisim::policies::kvsplit {

AnalyticSplitCosts::AnalyticSplitCosts(AnalyticRates r) : r_(r) {
  if (!(r_.v_gpu_flops > 0) || !(r_.v_com_bps > 0) || !(r_.h > 0) || !(r_.p_bytes > 0) || !(r_.b > 0))
    throw ConfigError(fmt::format("analytic split costs: v_gpu ({}), v_com ({}), h ({}), p ({}) and b ({}) must all be > 0",
                                  r_.v_gpu_flops, r_.v_com_bps, r_.h, r_.p_bytes, r_.b));
}

double AnalyticSplitCosts::x_transfer_s(std::int64_t l) const {
  return r_.b * static_cast<double>(std::max<std::int64_t>(l, 0)) * r_.h * r_.p_bytes / r_.v_com_bps;
}
double AnalyticSplitCosts::recompute_s(std::int64_t from, std::int64_t to) const {
  const double n = static_cast<double>(std::max<std::int64_t>(to - from, 0));
  return 4.0 * r_.b * n * r_.h * r_.h / r_.v_gpu_flops;
}
double AnalyticSplitCosts::load_s(std::int64_t n) const {
  return 2.0 * r_.b * static_cast<double>(std::max<std::int64_t>(n, 0)) * r_.h * r_.p_bytes / r_.v_com_bps;
}
double AnalyticSplitCosts::q_s(std::int64_t s) const {
  return 2.0 * r_.b * static_cast<double>(std::max<std::int64_t>(s, 0)) * r_.h * r_.h / r_.v_gpu_flops;
}
std::string AnalyticSplitCosts::describe() const {
  return fmt::format("analytic(v_gpu={:.3g} FLOP/s, v_com={:.3g} B/s, h={}, p={}, b={})", r_.v_gpu_flops, r_.v_com_bps,
                     r_.h, r_.p_bytes, r_.b);
}

DeviceSplitCosts::DeviceSplitCosts(const models::CostModel& cost, const devices::DeviceProfile& profile,
                                   DeviceCostOptions opt)
    : cost_(cost), profile_(profile), opt_(std::move(opt)) {
  const std::string who = "kv split costs";
  if (opt_.compute_unit == "npu")
    profile_.require_npu(who);
  else
    profile_.unit(opt_.compute_unit, who);
  if (opt_.link.empty())
    profile_.require_storage(who);
  else
    profile_.link(opt_.link, who);
  if (opt_.page_cache_fraction < 0 || opt_.page_cache_fraction >= 1)
    throw ConfigError(fmt::format("{}: page_cache_fraction {} must be in [0, 1)", who, opt_.page_cache_fraction));
  if (opt_.npu_chunk <= 0) throw ConfigError(fmt::format("{}: npu_chunk must be > 0", who));
}

double DeviceSplitCosts::compute_s(const models::Work& w) const {
  return profile_.unit(opt_.compute_unit, "kv split costs").seconds(w, cost_.spec().weight_dtype);
}

double DeviceSplitCosts::read_bytes_s(double bytes) const {
  if (bytes <= 0) return 0.0;
  if (!opt_.link.empty()) return profile_.link(opt_.link, "kv split costs").transfer_seconds(bytes);
  const auto& st = profile_.require_storage("kv split costs");
  // Bytes already in the page cache are a DRAM copy; the rest come from flash.
  const double cached = opt_.page_cache_fraction * bytes;
  return st.read_seconds(bytes - cached) + cached / (profile_.dram.bandwidth_gbps * 1e9);
}

double DeviceSplitCosts::bytes_per_token_loaded() const {
  const auto& m = cost_.spec();
  return opt_.payload == Payload::kKv ? m.kv_bytes_per_token() : m.qkv_bytes_per_token(m.kv_dtype);
}

double DeviceSplitCosts::x_transfer_s(std::int64_t l) const {
  if (l <= 0 || opt_.recompute == RecomputeKind::kPrefill) return 0.0;
  const auto& m = cost_.spec();
  return read_bytes_s(static_cast<double>(l) * m.hidden_bytes_per_token(m.activation_dtype));
}

double DeviceSplitCosts::recompute_s(std::int64_t from, std::int64_t to) const {
  if (to <= from) return 0.0;
  if (opt_.recompute == RecomputeKind::kHidden) return compute_s(cost_.kv_recompute(to - from));
  // Prefill-style: the block attends every earlier position; no logits are needed.
  models::PrefillShape shape{to - from, from, 0, 0};
  if (opt_.compute_unit != "npu") return compute_s(cost_.prefill(shape));
  // A static NPU graph of `npu_chunk` tokens runs ceil(n / chunk) padded executions.
  const auto& npu = profile_.require_npu("kv split costs");
  models::PrefillShape chunk{opt_.npu_chunk, from, 0, 0};
  return npu.run_seconds(to - from, opt_.npu_chunk, cost_.prefill(chunk), cost_.spec().weight_dtype);
}

double DeviceSplitCosts::load_s(std::int64_t n) const {
  return read_bytes_s(static_cast<double>(std::max<std::int64_t>(n, 0)) * bytes_per_token_loaded());
}

double DeviceSplitCosts::q_s(std::int64_t s) const {
  if (s <= 0) return 0.0;
  if (opt_.compute_unit == "npu") {
    const auto& npu = profile_.require_npu("kv split costs");
    return npu.run_seconds(s, opt_.npu_chunk, cost_.q_projection(opt_.npu_chunk), cost_.spec().weight_dtype);
  }
  return compute_s(cost_.q_projection(s));
}

AnalyticRates DeviceSplitCosts::rates() const {
  AnalyticRates r;
  const auto& m = cost_.spec();
  if (opt_.compute_unit == "npu") {
    const auto& npu = profile_.require_npu("kv split costs");
    r.v_gpu_flops = (npu.peak_tflops_fp16 > 0 ? npu.peak_tflops_fp16 : npu.peak_tops_int8) * 1e12 * npu.max_utilization;
  } else {
    const auto& u = profile_.unit(opt_.compute_unit, "kv split costs");
    r.v_gpu_flops = u.peak_flops(m.weight_dtype) * u.compute_efficiency;
  }
  if (!opt_.link.empty())
    r.v_com_bps = profile_.link(opt_.link, "kv split costs").bandwidth_gbps * 1e9;
  else
    r.v_com_bps = profile_.require_storage("kv split costs").seq_read_gbps * 1e9;
  r.h = m.hidden;
  r.p_bytes = models::dtype_bytes(m.kv_dtype);
  r.b = 1;
  return r;
}

std::string DeviceSplitCosts::describe() const {
  return fmt::format("{} on {} {} ({}), {} from {}", cost_.spec().name, profile_.name, opt_.compute_unit,
                     opt_.recompute == RecomputeKind::kHidden ? "K/V from hidden states" : "K/V by prefill",
                     opt_.payload == Payload::kKv ? "KV" : "QKV",
                     opt_.link.empty() ? profile_.require_storage("describe").kind : opt_.link);
}

}  // namespace mobisim::policies::kvsplit
