#pragma once
// `npu_graphs`: the prompt on the NPU's static compiled graphs (QNN, mllm's NPU path; CoordGen
// section 2.3). The graph is compiled for a chunk of `chunk` tokens: n tokens run as ceil(n/chunk)
// executions, each padded to the chunk and attending to every earlier position
// (NpuSpec::chunked_prefill_seconds). Before the first request the graph is loaded
// (graph_load_ms_per_layer x layers of NPU time) and its copy of the weights is held in DRAM for
// the whole run (graphs do not share weights with the CPU's copy): a phone that cannot hold it
// stops the run naming DRAM. A runtime that builds its graphs at run time (engine npu.graph_build:
// online) composes and finalises them in the first request's prefill, before its first chunk: that
// request holds the CPU for NpuSpec::graph_build_seconds (the HTP prepare library runs there), and
// later requests reuse the graphs (one shape: `chunk`).
//
// Parameters:
//   chunk   tokens per graph execution (0: the engine's graph_chunk)
#include "policies/pipeline/prefill_stage.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class NpuGraphPrefill : public PrefillStage {
 public:
  explicit NpuGraphPrefill(const Params& p) : chunk_(p.integer("chunk")) {}
  static ParamSchema schema();
  sim::Task<void> begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) override;
  sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                      std::int64_t n_cached, int priority, double& active_energy_j) override;
  std::string unit() const override { return "npu"; }

 private:
  std::int64_t chunk_;
  bool graphs_built_ = false;  // online graph build: done by the first request of this run
};

}  // namespace mobisim::policies::pipeline
