#pragma once
// A chunked NPU prefill with the final norm and LM head of the last chunk placed explicitly
// (NpuSpec::chunked_prefill_seconds is this with one logit row): a runtime that runs them outside its
// graphs (mllm: on the CPU after the last QNN graph, docs/coordgen.md "LM head on the CPU") gives 0.
#include <cstdint>

#include "devices/npu.h"
#include "models/cost_model.h"

namespace mobisim::devices {

// `n_new` tokens after `n_cached` on graphs of `chunk` tokens (0: the engine's graph_chunk), each chunk
// padded and attending to every earlier position, the last one with the final norm and LM head of
// `last_logit_tokens` rows (0: none). HTP graphs, or op by op on HVX (NpuSpec::prefill_backend).
double chunked_prefill_seconds(const NpuSpec& npu, const models::CostModel& cost, std::int64_t n_new,
                               std::int64_t n_cached, std::int64_t chunk, std::int64_t last_logit_tokens);

}  // namespace mobisim::devices
