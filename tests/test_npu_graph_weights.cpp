// Weights as a runtime's NPU graphs hold them (engine npu.graph_weight_dtype, NpuSpec::graph_model;
// issue 37: MNN's QNN backend dequantises asymmetric int4 weights into fp16 graph tensors).
// Expected values are computed by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/engine.h"
#include "devices/npu.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "models/cost_model.h"
#include "sim/error.h"

namespace mobisim::devices {
namespace {

using models::DType;

// 2 layers, d = 256, 4 query heads and 2 KV heads of 64, FFN 512, vocabulary 1000, tied embeddings.
models::ModelSpec tiny_int4_model() {
  models::ModelSpec m;
  m.name = "tiny";
  m.family = "llama";
  m.n_layers = 2;
  m.hidden = 256;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 64;
  m.ffn_hidden = 512;
  m.vocab = 1000;
  m.tied_embeddings = true;
  m.weight_dtype = DType::kInt4;
  m.activation_dtype = DType::kF16;
  m.kv_dtype = DType::kF16;
  return m;
}

TEST(NpuGraphWeights, GraphModelHoldsEveryLinearWeightInTheGraphDtype) {
  models::ModelSpec m = tiny_int4_model();
  m.weight_group_size = 32;                // fp32 scales: 0.5 + 4/32 = 0.625 bytes per weight in the file
  m.classifier_dtype = DType::kInt8;
  m.projection_dtypes[static_cast<int>(models::Projection::kV)] = DType::kInt6;
  NpuSpec n;
  // Unset: the model as it is.
  EXPECT_DOUBLE_EQ(n.graph_model(m).linear_weight_bytes(), 0.625);
  EXPECT_DOUBLE_EQ(n.graph_model(m).classifier_weight_bytes(), 1.0);
  n.graph_weight_dtype = DType::kF16;
  const models::ModelSpec g = n.graph_model(m);
  EXPECT_EQ(g.weight_dtype, DType::kF16);
  EXPECT_DOUBLE_EQ(g.linear_weight_bytes(), 2.0);   // no group scales in a plain fp16 tensor
  EXPECT_DOUBLE_EQ(g.classifier_weight_bytes(), 2.0);
  EXPECT_DOUBLE_EQ(g.projection_weight_bytes(models::Projection::kV), 2.0);
  EXPECT_EQ(g.activation_dtype, m.activation_dtype);  // only the weights change
  EXPECT_EQ(g.kv_dtype, m.kv_dtype);
}

TEST(NpuGraphWeights, DecodeStreamsTheGraphsWeightBytesByHand) {
  const models::ModelSpec m = tiny_int4_model();
  NpuSpec n;
  n.peak_tops_int8 = 1000;  // compute never binds here
  n.peak_tflops_fp16 = 500;
  n.max_utilization = 1.0;
  n.exec_overhead_ms = 1.0;
  n.mem_bandwidth_gbps = 10;
  n.decode_bandwidth_efficiency = 0.5;  // 5 GB/s achieved
  const std::int64_t context = 64;
  auto decode = [&](const NpuSpec& s) {
    const models::ModelSpec on_npu = s.graph_model(m);
    return s.decode_seconds(models::CostModel(on_npu).decode(context), on_npu.weight_dtype, on_npu.activation_dtype);
  };
  const double as_file = decode(n);
  n.graph_weight_dtype = DType::kF16;
  const double as_graph = decode(n);
  // Weights one decode step reads, by hand: per layer q 256x256, k 256x128, v 256x128, o 256x256 and the
  // FFN 3 x 256x512 (589824) plus two norms of 256; two layers; the final norm (256), the tied LM head
  // (1000 x 256) and the token's embedding row (256): 1437184 weights. Activations and K/V are the same
  // in both, so the two times differ by those weights at 2 - 0.5 bytes each over 5 GB/s.
  const double weights = 2 * (589824 + 2 * 256) + 256 + 1000 * 256 + 256;
  EXPECT_NEAR(as_graph - as_file, weights * (2.0 - 0.5) / 5e9, 1e-12);
  // And the graph's weights alone are four times the file's.
  const models::ModelSpec g = n.graph_model(m);
  EXPECT_DOUBLE_EQ(models::CostModel(g).decode(context).weight_bytes(), 2.0 * weights);
  EXPECT_DOUBLE_EQ(models::CostModel(m).decode(context).weight_bytes(), 0.5 * weights);
}

fidelity::OnDeviceQuery mnn_npu_decode() {
  fidelity::OnDeviceQuery q;
  q.device = "honor-magic7";
  q.engine = "mnn";
  q.model = "qwen3-1.7b";
  q.unit = "npu";
  q.phase = "decode";
  q.tokens = 256;
  q.dtype = "int4";
  q.activation_dtype = "fp16";
  return q;
}

TEST(NpuGraphWeights, MnnQnnRunsTheInt4FileAsAnFp16Model) {
  fidelity::OnDeviceQuery q = mnn_npu_decode();
  const double shipped = fidelity::ondevice_prediction(q);
  // Equivalent to the old path given an fp16 model.
  fidelity::OnDeviceQuery fp16 = q;
  fp16.dtype = "fp16";
  EXPECT_DOUBLE_EQ(shipped, fidelity::ondevice_prediction(fp16));
  // Holding the file's int4 instead streams a quarter of the weight bytes: faster.
  EXPECT_GT(fidelity::ondevice_prediction(q, {"engine.npu.graph_weight_dtype=int4"}), 2.0 * shipped);
  // The other units do not read it.
  q.unit = "cpu";
  q.activation_dtype = "int8";
  EXPECT_DOUBLE_EQ(fidelity::ondevice_prediction(q), fidelity::ondevice_prediction(q, {"engine.npu.graph_weight_dtype=int8"}));
}

TEST(NpuGraphWeights, WorkCostedOnTheFilesWeightsIsRefusedOnTheNpu) {
  // A simulation stage that submits already-costed work cannot be re-costed on the graphs' fp16 weights.
  const DeviceProfile mnn = load_engine_profile("mnn").apply(load_device_profile("honor-magic7"));
  const models::ModelSpec m = tiny_int4_model();
  const models::Work w = models::CostModel(m).decode(64);
  try {
    mnn.compute_seconds("npu", w, DType::kInt4, "test");
    FAIL() << "int4-costed work on fp16 graphs must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_weight_dtype"), std::string::npos) << e.what();
  }
  const models::ModelSpec g = mnn.require_npu("test").graph_model(m);
  EXPECT_GT(mnn.compute_seconds("npu", models::CostModel(g).decode(64), DType::kF16, "test"), 0.0);
}

TEST(NpuGraphWeights, UnknownGraphDtypeIsAConfigErrorNamingTheKey) {
  try {
    fidelity::ondevice_prediction(mnn_npu_decode(), {"engine.npu.graph_weight_dtype=fp7"});
    FAIL() << "an unknown dtype must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_weight_dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mobisim::devices
