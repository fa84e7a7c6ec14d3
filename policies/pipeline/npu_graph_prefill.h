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
// The final norm and LM head (`lm_head_unit`): mllm runs them on the CPU after its last QNN graph
// (docs/coordgen.md, "LM head"; policies/specdec/specdec_policy.h), once per prompt, after the last
// chunk: the norm of that chunk's `chunk` rows and the head of one row, at `lm_head_dtype` (fp32: its
// QNN export leaves lm_head unquantised), on the CPU's worker pool after the NPU's chunks, as the
// CoordGen-document policies charge it. `npu` keeps them inside the last chunk's graph execution (the
// earlier model). The graph's DRAM copy is the model's weights either way (cost.spec().weight_bytes()).
//
// Parameters:
//   chunk          tokens per graph execution (0: the engine's graph_chunk)
//   lm_head_unit   cpu (default, mllm) | npu
//   lm_head_dtype  the head's dtype when on the cpu (default fp32)
#include "models/model_spec.h"
#include "policies/pipeline/prefill_stage.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class NpuGraphPrefill : public PrefillStage {
 public:
  explicit NpuGraphPrefill(const Params& p);
  static ParamSchema schema();
  sim::Task<void> begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) override;
  sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                      std::int64_t n_cached, int priority, double& active_energy_j) override;
  std::string unit() const override { return "npu"; }

 private:
  std::int64_t chunk_;
  specdec::LmHeadUnit lm_head_unit_;
  models::DType lm_head_dtype_;
  bool graphs_built_ = false;  // online graph build: done by the first request of this run
};

}  // namespace mobisim::policies::pipeline
