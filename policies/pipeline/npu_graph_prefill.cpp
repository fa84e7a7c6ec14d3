#include "policies/pipeline/npu_graph_prefill.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema NpuGraphPrefill::schema() {
  ParamSchema s;
  s.integer("chunk", 0, "tokens per graph execution (0: the engine's graph_chunk)").non_negative();
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
  const double seconds = npu.graph_weight_dtype
                             ? npu.chunked_prefill_seconds(models::CostModel(npu.graph_model(cost.spec())), n_new,
                                                           n_cached, chunk_)
                             : npu.chunked_prefill_seconds(cost, n_new, n_cached, chunk_);
  const models::Work work = cost.prefill(models::PrefillShape{n_new, n_cached, 0, 1});
  co_await device.compute_for("npu", devices::UnitCost{seconds, work.flops(), work.bytes()}, "prefill (npu graphs)",
                              priority);
  active_energy_j += device.profile().marginal_energy_j("npu", seconds, "prefill: npu_graphs");
}

MOBISIM_REGISTER(PrefillStage, NpuGraphPrefill, "npu_graphs",
                 "The prompt on the NPU's static graphs: padded chunk executions, the graph loaded and held in DRAM.")

}  // namespace mobisim::policies::pipeline
