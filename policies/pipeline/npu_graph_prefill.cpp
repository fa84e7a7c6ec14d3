#include "policies/pipeline/npu_graph_prefill.h"

#include "devices/npu_prefill.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

NpuGraphPrefill::NpuGraphPrefill(const Params& p)
    : chunk_(p.integer("chunk")),
      lm_head_unit_(specdec::parse_lm_head_unit(p.text("lm_head_unit"))),
      lm_head_dtype_(models::parse_dtype(p.text("lm_head_dtype"))) {}

ParamSchema NpuGraphPrefill::schema() {
  ParamSchema s;
  s.integer("chunk", 0, "tokens per graph execution (0: the engine's graph_chunk)").non_negative();
  s.text("lm_head_unit", std::string("cpu"),
         "where the final norm and LM head run: cpu (mllm: after the last chunk's graph, one logit row, on the "
         "CPU's worker pool) or npu (inside the last chunk's graph execution: the earlier model)")
      .in({"cpu", "npu"});
  s.text("lm_head_dtype", std::string("fp32"),
         "the LM head's weights and activations on the cpu (mllm's QNN export leaves lm_head unquantised)")
      .in(models::dtype_names());
  return s;
}

sim::Task<void> NpuGraphPrefill::begin(devices::Device& device, const models::CostModel& cost,
                                       const std::string& owner) {
  const devices::NpuSpec& npu = device.profile().require_npu("prefill: npu_graphs");
  device.dram().reserve(owner + "/npu_graph", cost.spec().weight_bytes());
  co_await device.busy("npu", sim::from_seconds(npu.graph_load_seconds(cost.spec().n_layers)), "graph load");
}

sim::Task<void> NpuGraphPrefill::run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                                     std::int64_t n_cached, int priority, double& active_energy_j) {
  const devices::NpuSpec& npu = device.profile().require_npu("prefill: npu_graphs");
  if (npu.online_graph_build && !graphs_built_) {
    // Built on the phone's CPU when the graphs first run, inside this request (npu.h).
    graphs_built_ = true;
    const double build_s = npu.graph_build_seconds(cost.spec());
    co_await device.busy("cpu", sim::from_seconds(build_s), "graph build (online)", priority);
    active_energy_j += device.profile().marginal_energy_j("cpu", build_s, "prefill: npu_graphs graph build");
  }
  // The weights as the runtime's graphs hold them (engine npu.graph_weight_dtype; unset: `cost` itself).
  const bool head_on_cpu = lm_head_unit_ == specdec::LmHeadUnit::kCpu;
  const std::int64_t graph_logits = head_on_cpu ? 0 : 1;
  const double seconds =
      npu.graph_weight_dtype
          ? devices::chunked_prefill_seconds(npu, models::CostModel(npu.graph_model(cost.spec())), n_new, n_cached,
                                             chunk_, graph_logits)
          : devices::chunked_prefill_seconds(npu, cost, n_new, n_cached, chunk_, graph_logits);
  const models::Work work = cost.prefill(models::PrefillShape{n_new, n_cached, 0, graph_logits});
  co_await device.compute_for("npu", devices::UnitCost{seconds, work.flops(), work.bytes()}, "prefill (npu graphs)",
                              priority);
  active_energy_j += device.profile().marginal_energy_j("npu", seconds, "prefill: npu_graphs");
  if (!head_on_cpu || n_new <= 0) co_return;
  // The last chunk's final norm (its padded rows) and the LM head of its last real row, on the CPU.
  const std::int64_t rows = chunk_ > 0 ? chunk_ : npu.graph_chunk;
  const models::Work head = specdec::cpu_lm_head_work(cost.spec(), rows, 1, lm_head_dtype_);
  const double head_s = device.profile().unit("cpu", "prefill: npu_graphs").seconds(head, lm_head_dtype_);
  co_await device.compute_for("cpu", devices::UnitCost{head_s, head.flops(), head.bytes()}, "prefill lm head (cpu)",
                              priority);
  active_energy_j += device.profile().marginal_energy_j("cpu", head_s, "prefill: npu_graphs lm head");
}

MOBISIM_REGISTER(PrefillStage, NpuGraphPrefill, "npu_graphs",
                 "The prompt on the NPU's static graphs: padded chunk executions, the graph loaded and held in DRAM.")

}  // namespace mobisim::policies::pipeline
