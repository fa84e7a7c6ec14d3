// Static-context NPU prefill graphs (issue 37, the QNN cell; devices/npu.h, engine keys npu.graph_context and
// npu.graph_logits): every pass of an AI Hub Genie prompt graph reads the whole static KV cache and computes the
// LM head of all its rows. Expected values are computed by hand from the model's shapes.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

#include "devices/engine.h"
#include "devices/npu.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "models/cost_model.h"
#include "sim/error.h"

namespace mobisim::devices {
namespace {

using models::DType;

models::ModelSpec static_graph_model(const std::string& name) {
  YAML::Node n;
  n["base"] = name;
  n["weight_dtype"] = "int4";
  n["activation_dtype"] = "fp16";
  return models::load_model_spec(n, ConfigSource{std::make_shared<std::string>("test"), ""});
}

// Compute-bound (bandwidth far above any pass's bytes), no per-pass overhead: a pass costs flops / rate.
NpuSpec static_graph_spec() {
  NpuSpec n;
  n.peak_tops_int8 = 40;
  n.peak_tflops_fp16 = 20;
  n.max_utilization = 0.5;
  n.half_utilization_chunk = 128;  // util(128) = 0.25
  n.mixed_precision_fraction = 0.5;  // W4A16: 20e12 x 0.25 = 5e12 op/s
  n.exec_overhead_ms = 0;
  n.mem_bandwidth_gbps = 1e9;
  return n;
}

TEST(NpuStaticGraphs, OnePassReadsTheWholeCacheAndComputesEveryRowsLogits) {
  const models::ModelSpec m = static_graph_model("llama-3.2-1b");  // 16 layers, 32 heads x 64, d 2048, vocab 128256
  const models::CostModel cost(m);
  NpuSpec dynamic = static_graph_spec();
  NpuSpec fixed = dynamic;
  fixed.graph_context = 4096;
  fixed.graph_logits_all_rows = true;
  const double rate = 5e12;
  // The first pass of a dynamic prefill attends 128 x 129 / 2 = 8256 pairs per head and layer and computes one logit
  // row. The static graph attends its 3968 past slots too: 128 x 3968 = 507904 more pairs, each costing
  // 2 x 64 (scores) + 5 (softmax) + 2 x 64 (context) = 261 flops per head, over 16 layers x 32 heads:
  // 16 x 32 x 261 x 507904 = 6.787e10 flops; and 127 more LM-head rows of 2 x 2048 x 128256 = 5.2534e8 flops each:
  // 6.6718e10 flops. Together 1.34588e11 flops = 26.92 ms at 5e12 op/s.
  const double extra_attention = 16.0 * 32 * 261 * 507904;
  const double extra_logits = 127.0 * 2 * 2048 * 128256;
  EXPECT_NEAR(extra_attention, 6.7870e10, 1e7);
  EXPECT_NEAR(extra_logits, 6.6718e10, 1e7);
  const double t_dynamic = dynamic.chunked_prefill_seconds(cost, 128, 0, 128);
  const double t_static = fixed.chunked_prefill_seconds(cost, 128, 0, 128);
  EXPECT_NEAR(t_static - t_dynamic, (extra_attention + extra_logits) / rate, 1e-4 * t_static);
  EXPECT_NEAR(t_static - t_dynamic, 26.92e-3, 0.01e-3);
}

TEST(NpuStaticGraphs, AFullContextPromptIsThirtyTwoIdenticalPasses) {
  const models::CostModel cost(static_graph_model("llama-3.2-1b"));
  NpuSpec n = static_graph_spec();
  n.exec_overhead_ms = 2;  // a fixed cost per pass changes nothing: every pass is the same
  n.graph_context = 4096;
  n.graph_logits_all_rows = true;
  // AI Hub's model cards: TTFT max = min x 4096 / 128.
  EXPECT_NEAR(n.chunked_prefill_seconds(cost, 4096, 0, 128), 32 * n.chunked_prefill_seconds(cost, 128, 0, 128), 1e-12);
  // A 200-token prompt is two padded passes.
  EXPECT_NEAR(n.chunked_prefill_seconds(cost, 200, 0, 128), 2 * n.chunked_prefill_seconds(cost, 128, 0, 128), 1e-12);
  // Without a static context later passes attend more: 32 passes cost more than 32 first passes.
  NpuSpec d = static_graph_spec();
  d.exec_overhead_ms = 2;
  EXPECT_GT(d.chunked_prefill_seconds(cost, 4096, 0, 128), 32 * d.chunked_prefill_seconds(cost, 128, 0, 128) * 1.01);
  // A graph whose context equals its chunk (the 2024 exports: one 1024-token pass, 1024-token context, one logit
  // row) has no past slots: the dynamic cost.
  NpuSpec one_pass = static_graph_spec();
  one_pass.graph_context = 1024;
  EXPECT_DOUBLE_EQ(one_pass.chunked_prefill_seconds(cost, 1024, 0, 1024),
                   static_graph_spec().chunked_prefill_seconds(cost, 1024, 0, 1024));
}

TEST(NpuStaticGraphs, PathsThatDoNotModelThemRefuseThem) {
  const models::CostModel cost(static_graph_model("llama-3.2-1b"));
  NpuSpec n = static_graph_spec();
  n.graph_context = 4096;
  n.prefill_backend = NpuBackend::kHvx;
  n.hvx_peak_tops_int8 = 2;
  try {
    (void)n.chunked_prefill_seconds(cost, 128, 0, 128);
    FAIL() << "an hvx prefill with a static context must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_context"), std::string::npos) << e.what();
  }
  n.prefill_backend = NpuBackend::kHtp;
  EXPECT_THROW((void)n.overlapped_prefill_seconds(cost, 128, 0, 128, [](const models::Work&) { return 0.0; }),
               ConfigError);
}

TEST(NpuStaticGraphs, QnnEngineStatesItsExportsGraphsAndProbesOverrideThem) {
  const EngineProfile qnn = load_engine_profile("qnn");
  const DeviceProfile d = qnn.apply(load_device_profile("snapdragon-8-elite-qrd"));
  ASSERT_TRUE(d.npu);
  EXPECT_EQ(d.npu->graph_context, 4096);
  EXPECT_TRUE(d.npu->graph_logits_all_rows);
  // A probe of a 2024 export (1024-token context and prompt graph, last logit row only) costs what the dynamic
  // curve costs: no past slots, one row.
  fidelity::OnDeviceQuery q;
  q.device = "snapdragon-8-elite-qrd";
  q.engine = "qnn";
  q.model = "llama-2-7b";
  q.unit = "npu";
  q.phase = "prefill";
  q.tokens = 1024;
  q.chunk = 1024;
  q.dtype = "int4";
  q.activation_dtype = "fp16";
  q.metric = "ms";
  q.context = 1024;
  q.graph_logits = "last";
  const double export_2024 = fidelity::ondevice_prediction(q, {});
  const double dynamic = fidelity::ondevice_prediction(q, {"engine.npu.graph_context=1", "engine.npu.graph_logits=last"});
  EXPECT_DOUBLE_EQ(export_2024, dynamic);
  // The same probe with every row's logits is slower by the 1023 extra LM-head rows alone.
  q.graph_logits = "all";
  EXPECT_GT(fidelity::ondevice_prediction(q, {}), export_2024);
  // A bad value names the key.
  YAML::Node bad = YAML::Load("{name: bad-static, npu: {graph_logits: some}}");
  try {
    (void)load_engine_profile(bad, ConfigSource{std::make_shared<std::string>("test"), ""});
    FAIL() << "graph_logits: some must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_logits"), std::string::npos) << e.what();
  }
}

}  // namespace

// ExecuTorch's QNN decode reads the whole context's K/V every step (issue 37, H3): the registry's probe of
// executorch #7411 was corrected from 1024 to 128 positions (the default of both ExecuTorch QNN llama flows of
// that date, docs/npu_sources.md); this pins what that move is worth, by hand.
namespace executorch_npu_context_test {

fidelity::OnDeviceQuery llama3b_qnn_decode(std::int64_t context) {
  fidelity::OnDeviceQuery q;
  q.device = "snapdragon-8-gen3-device";
  q.engine = "executorch";
  q.model = "llama-3.2-3b";
  q.unit = "npu";
  q.phase = "decode";
  q.tokens = context;
  q.dtype = "int4";
  q.activation_dtype = "fp16";
  return q;
}

TEST(ExecutorchNpuContext, EachPositionCostsItsKvAndScoreBytesAtTheFittedShare) {
  const double step_128_s = 1.0 / fidelity::ondevice_prediction(llama3b_qnn_decode(128));
  const double step_1024_s = 1.0 / fidelity::ondevice_prediction(llama3b_qnn_decode(1024));
  // Per layer and past position (models/cost_model.cpp, decode: one query): K and V read, 2 x 1024 (8 KV heads x 128)
  // x 2 bytes (fp16) = 4096; scores written, softmaxed (read + write) and read by the context, 4 x 24 heads x 2 bytes
  // = 192. 4288 x 28 layers x 896 more positions = 107,577,344 bytes at 76.8 GB/s (the 8 Gen 3's NPU DRAM) x
  // 0.676249 (configs/engines/executorch.yaml npu.decode_bandwidth_efficiency) = 2.0713475 ms.
  EXPECT_NEAR(step_1024_s - step_128_s, 2.0713475e-3, 1e-9);
}

}  // namespace executorch_npu_context_test
}  // namespace mobisim::devices
