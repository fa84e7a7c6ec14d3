// Model specs and the transformer cost model, checked against numbers computed by hand
// from the source documents.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "models/cost_model.h"
#include "models/model_spec.h"
#include "sim/error.h"

namespace mobisim::models {
namespace {

// DynaKV Table 1: FP16 KV cache of Llama3.2-1B / 3B at 8K/16K/32K/64K tokens (GB, one decimal).
TEST(CostModel, DynaKvTable1KvCacheSizes) {
  const ModelSpec l1 = load_model_spec("llama-3.2-1b"), l3 = load_model_spec("llama-3.2-3b");
  // Per token: 2 (K,V) x layers x kv_heads x head_dim x 2 bytes.
  EXPECT_DOUBLE_EQ(l1.kv_bytes_per_token(DType::kF16), 2.0 * 16 * 8 * 64 * 2);   // 32768
  EXPECT_DOUBLE_EQ(l3.kv_bytes_per_token(DType::kF16), 2.0 * 28 * 8 * 128 * 2);  // 114688
  const double table_1b[] = {0.3, 0.5, 1.1, 2.1}, table_3b[] = {0.9, 1.9, 3.8, 7.5};
  const int tokens[] = {8192, 16384, 32768, 65536};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(std::round(l1.kv_bytes_per_token(DType::kF16) * tokens[i] / 1e8) / 10, table_1b[i], 1e-9) << i;
    EXPECT_NEAR(std::round(l3.kv_bytes_per_token(DType::kF16) * tokens[i] / 1e8) / 10, table_3b[i], 1e-9) << i;
  }
  // Weights at 8 bits: 1.2 GB and 3.2 GB in the same table.
  EXPECT_NEAR(std::round(l1.total_params() / 1e8) / 10, 1.2, 1e-9);
  EXPECT_NEAR(std::round(l3.total_params() / 1e8) / 10, 3.2, 1e-9);
}

// Qwen3-0.6B (configs/models/qwen3-0.6b.yaml, from its config.json): per layer Wq 1024x2048, Wk and Wv 1024x1024,
// Wo 2048x1024, three FFN matrices 1024x3072 and two RMSNorm vectors; the tied 151936 x 1024 embedding and the final
// norm outside. The model card's "0.44B" non-embedding and "0.6B" total parameters follow.
TEST(CostModel, Qwen3SmallestShapesByHand) {
  const ModelSpec m = load_model_spec("qwen3-0.6b");
  EXPECT_EQ(m.q_dim(), 2048);
  EXPECT_EQ(m.kv_dim(), 1024);
  const std::int64_t per_layer = 1024LL * 2048 + 2 * 1024LL * 1024 + 2048LL * 1024 + 3 * 1024LL * 3072 + 2 * 1024;
  EXPECT_EQ(per_layer, 15730688);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  EXPECT_EQ(m.total_params(), 28 * per_layer + 151936LL * 1024 + 1024);  // 596,042,752
  EXPECT_NEAR(std::round(28.0 * per_layer / 1e7) / 100, 0.44, 1e-9);
  EXPECT_NEAR(std::round(m.total_params() / 1e8) / 10, 0.6, 1e-9);
  // FP16 KV cache per token: 2 (K,V) x 28 layers x 8 heads x 128 x 2 bytes, as Qwen3-1.7B's.
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(DType::kF16), 2.0 * 28 * 8 * 128 * 2);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(DType::kF16), load_model_spec("qwen3-1.7b").kv_bytes_per_token(DType::kF16));
}

// The TinyLLMLeaderBoard models added for llama.cpp x cpu (configs/models/*.yaml, each from its config.json). A 7B
// Llama block (4096 wide, 32 heads of 128, SwiGLU 11008, no biases): 4 x 4096^2 = 67,108,864 attention weights,
// 3 x 4096 x 11008 = 135,266,304 FFN weights and 2 x 4096 RMSNorm weights = 202,383,360; the models differ in layers
// and vocabulary. Each total is checked by hand against the size its model card or README publishes.
constexpr std::int64_t kLlama7bBlock = 4 * 4096LL * 4096 + 3 * 4096LL * 11008 + 2 * 4096;

// Baichuan-7B: README "n_parameters 7000559616" = 32 blocks + untied 64000 x 4096 tables (embedding and head) + the
// final norm: 32 x 202,383,360 + 2 x 262,144,000 + 4096.
TEST(CostModel, Baichuan7bShapesGiveTheReadmesParameterCount) {
  const ModelSpec m = load_model_spec("baichuan-7b");
  EXPECT_EQ(kLlama7bBlock, 202383360);
  EXPECT_EQ(m.params_per_layer(), kLlama7bBlock);
  EXPECT_EQ(m.total_params(), 32 * kLlama7bBlock + 2 * 64000LL * 4096 + 4096);
  EXPECT_EQ(m.total_params(), 7000559616LL);
}

// Aquila-7B (and Aquila2-7B of 2023): 32 blocks + 2 x 100008 x 4096 + 4096 = 7,295,537,152, the "7B" of the name.
// Chinese-Alpaca-2-7B: 32 blocks + 2 x 55296 x 4096 + 4096 = 6,929,256,448 ("7B"). DeepSeek LLM 7B: 30 blocks +
// 2 x 102400 x 4096 + 4096 = 6,910,365,696 ("7B"). All three run Llama-2-7B's blocks.
TEST(CostModel, SevenBillionLlamaBlockModelsByHand) {
  const ModelSpec aquila = load_model_spec("aquila-7b"), chinese = load_model_spec("chinese-alpaca-2-7b"),
                  deepseek = load_model_spec("deepseek-llm-7b");
  const std::int64_t llama2_block = load_model_spec("llama-2-7b").params_per_layer();
  for (const ModelSpec* m : {&aquila, &chinese, &deepseek}) EXPECT_EQ(m->params_per_layer(), llama2_block) << m->name;
  EXPECT_EQ(llama2_block, kLlama7bBlock);
  EXPECT_EQ(aquila.total_params(), 32 * kLlama7bBlock + 2 * 100008LL * 4096 + 4096);  // 7,295,537,152
  EXPECT_EQ(chinese.total_params(), 32 * kLlama7bBlock + 2 * 55296LL * 4096 + 4096);  // 6,929,256,448
  EXPECT_EQ(deepseek.total_params(), 30 * kLlama7bBlock + 2 * 102400LL * 4096 + 4096);  // 6,910,365,696
  for (const ModelSpec* m : {&aquila, &chinese, &deepseek})
    EXPECT_EQ(std::llround(m->total_params() / 1e9), 7) << m->name;
}

// Yi-6B: grouped-query attention, 4 KV heads of 128 (kv_dim 512). Per block Wq and Wo 4096 x 4096, Wk and Wv
// 4096 x 512, FFN 3 x 4096 x 11008, 2 norms: 173,023,232; 32 blocks + 2 x 64000 x 4096 + 4096 = 6,061,035,520, "6B".
// Its FP16 KV cache per token is an eighth of Llama-2-7B's: 2 x 32 layers x 512 x 2 bytes.
TEST(CostModel, Yi6bGroupedQueryShapesByHand) {
  const ModelSpec m = load_model_spec("yi-6b");
  EXPECT_EQ(m.kv_dim(), 512);
  const std::int64_t block = 2 * 4096LL * 4096 + 2 * 4096LL * 512 + 3 * 4096LL * 11008 + 2 * 4096;
  EXPECT_EQ(block, 173023232);
  EXPECT_EQ(m.params_per_layer(), block);
  EXPECT_EQ(m.total_params(), 32 * block + 2 * 64000LL * 4096 + 4096);
  EXPECT_EQ(m.total_params(), 6061035520LL);
  EXPECT_EQ(std::llround(m.total_params() / 1e9), 6);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(DType::kF16), 2.0 * 32 * 512 * 2);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(DType::kF16) * 8, load_model_spec("llama-2-7b").kv_bytes_per_token(DType::kF16));
}

// Qwen-7B (v1) and Qwen1.5-7B share qwen-7b: a 7B Llama block plus the Q, K and V biases (3 x 4096), 202,395,648;
// 32 blocks + 2 x 151936 x 4096 + 4096 = 7,721,324,544, the count of Qwen-7B's weights (7.72B; the "7B" of the name
// rounds it down). Qwen1.5-4B: per block 4 x 2560^2 + 3 x 2560 biases + 3 x 2560 x 6912 + 2 x 2560 = 79,311,360;
// 40 blocks + 2 x 151936 x 2560 + 2560 = 3,950,369,280, the "4B" of its name.
TEST(CostModel, QwenSevenAndFourBillionShapesByHand) {
  const ModelSpec q7 = load_model_spec("qwen-7b"), q4 = load_model_spec("qwen1.5-4b");
  EXPECT_EQ(q7.params_per_layer(), kLlama7bBlock + 3 * 4096);
  EXPECT_EQ(q7.total_params(), 32 * (kLlama7bBlock + 3 * 4096) + 2 * 151936LL * 4096 + 4096);
  EXPECT_EQ(q7.total_params(), 7721324544LL);
  const std::int64_t block4 = 4 * 2560LL * 2560 + 3 * 2560 + 3 * 2560LL * 6912 + 2 * 2560;
  EXPECT_EQ(block4, 79311360);
  EXPECT_EQ(q4.params_per_layer(), block4);
  EXPECT_EQ(q4.total_params(), 40 * block4 + 2 * 151936LL * 2560 + 2560);  // 3,950,369,280
  EXPECT_EQ(std::llround(q4.total_params() / 1e9), 4);
}

// StableLM-3B-4E1T: head_dim 80, per block 4 x 2560^2 + 3 x 2560 x 6912 + 2 x 2560 = 79,303,680; 32 blocks +
// 2 x 50304 x 2560 + 2560 = 2,795,276,800. The model card's 2,795,443,200 also counts its LayerNorms' biases, which
// this format (RMSNorm weights only) leaves out: 32 x 2 x 2560 + 2560 = 166,400.
TEST(CostModel, StableLm3bShapesGiveTheCardsCountLessTheNormBiases) {
  const ModelSpec m = load_model_spec("stablelm-3b-4e1t");
  EXPECT_EQ(m.q_dim(), 2560);
  const std::int64_t block = 4 * 2560LL * 2560 + 3 * 2560LL * 6912 + 2 * 2560;
  EXPECT_EQ(block, 79303680);
  EXPECT_EQ(m.params_per_layer(), block);
  EXPECT_EQ(m.total_params(), 32 * block + 2 * 50304LL * 2560 + 2560);
  EXPECT_EQ(2795443200LL - m.total_params(), 32 * 2 * 2560 + 2560);
}

// ChatGLM-6B v1 (configs/models/chatglm-6b.yaml, THUDM/chatglm-6b config.json): per block query_key_value 4096 x
// 3 x 4096 with its bias, dense 4096 x 4096, a plain FFN of two matrices 4096 x 16384 (no gate) and two norm vectors;
// the embedding table of 130528 x 4096, tied (counted once), and the final norm outside.
TEST(CostModel, ChatGlm6bPlainFfnShapesByHand) {
  const ModelSpec m = load_model_spec("chatglm-6b");
  EXPECT_EQ(m.ffn, FfnKind::kPlain);
  EXPECT_EQ(m.linear_layers_per_block(), 6);
  // 4 x 16,777,216 (Wq, Wk, Wv, Wo) + 2 x 67,108,864 (up, down) + 8,192 (norms) + 12,288 (QKV bias) = 201,347,072.
  const std::int64_t per_layer = 4 * 4096LL * 4096 + 2 * 4096LL * 16384 + 2 * 4096 + 3 * 4096;
  EXPECT_EQ(per_layer, 201347072);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  // 28 x 201,347,072 = 5,637,718,016, + 534,642,688 (130528 x 4096) + 4,096 = 6,172,364,800.
  EXPECT_EQ(m.total_params(), 28 * per_layer + 130528LL * 4096 + 4096);
  EXPECT_EQ(m.total_params(), 6172364800LL);
  // The model card's 6.2 B. Not counted: the biases of dense, dense_h_to_4h and dense_4h_to_h (4,096 + 16,384 +
  // 4,096) and of the two LayerNorms (8,192) per block and the final LayerNorm's (4,096): 921,600 more, still 6.2 B.
  EXPECT_NEAR(std::round(m.total_params() / 1e8) / 10, 6.2, 1e-9);
  EXPECT_NEAR(std::round((m.total_params() + 28 * (24576 + 8192) + 4096) / 1e8) / 10, 6.2, 1e-9);
  // An untied head would add the table again: 6.71 B, not the card's count.
  EXPECT_NEAR(std::round((m.total_params() + 130528LL * 4096) / 1e7) / 100, 6.71, 1e-9);
}

// ChatGLM2-6B (configs/models/chatglm2-6b.yaml): multi-query groups 2 x 128 (kv_dim 256), a gated FFN of 13696
// (dense_h_to_4h outputs 2 x 13696), QKV bias, untied output_layer over 65024 tokens.
TEST(CostModel, ChatGlm2_6bShapesByHand) {
  const ModelSpec m = load_model_spec("chatglm2-6b");
  EXPECT_EQ(m.ffn, FfnKind::kGated);
  EXPECT_EQ(m.kv_dim(), 256);
  // Wq, Wo 2 x 16,777,216 + Wk, Wv 2 x 1,048,576 + FFN 3 x 56,098,816 + norms 8,192 + QKV bias 4,608 = 203,960,832.
  const std::int64_t per_layer = 2 * 4096LL * 4096 + 2 * 4096LL * 256 + 3 * 4096LL * 13696 + 2 * 4096 + (4096 + 2 * 256);
  EXPECT_EQ(per_layer, 203960832);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  // 28 x 203,960,832 = 5,710,903,296, + 2 x 266,338,304 (65024 x 4096, embedding and output_layer) + 4,096 =
  // 6,243,584,000: every parameter of the checkpoint (add_bias_linear false: no other bias; RMSNorm has no bias),
  // the model card's 6.2 B.
  EXPECT_EQ(m.total_params(), 28 * per_layer + 2 * 65024LL * 4096 + 4096);
  EXPECT_EQ(m.total_params(), 6243584000LL);
  EXPECT_NEAR(std::round(m.total_params() / 1e8) / 10, 6.2, 1e-9);
}

// Phi-2 (configs/models/phi-2.yaml): MHA 32 x 80, a plain FFN fc1/fc2 of 10240, Q/K/V biases, untied head.
TEST(CostModel, Phi2PlainFfnShapesByHand) {
  const ModelSpec m = load_model_spec("phi-2");
  EXPECT_EQ(m.ffn, FfnKind::kPlain);
  EXPECT_EQ(m.q_dim(), 2560);
  // 4 x 6,553,600 (Wq, Wk, Wv, dense) + 2 x 26,214,400 (fc1, fc2) + 5,120 (the LayerNorm's weight and bias,
  // counted as two norm vectors) + 7,680 (Q/K/V bias) = 78,656,000.
  const std::int64_t per_layer = 4 * 2560LL * 2560 + 2 * 2560LL * 10240 + 2 * 2560 + 3 * 2560;
  EXPECT_EQ(per_layer, 78656000);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  // 32 x 78,656,000 = 2,516,992,000, + 2 x 131,072,000 (51200 x 2560, embedding and lm_head) + 2,560 = 2,779,138,560.
  EXPECT_EQ(m.total_params(), 32 * per_layer + 2 * 51200LL * 2560 + 2560);
  EXPECT_EQ(m.total_params(), 2779138560LL);
  // Not counted: dense, fc1 and fc2 biases (2,560 + 10,240 + 2,560 per block), the final LayerNorm's bias (2,560) and
  // lm_head's (51,200): 545,280. With them, 2,779,683,840, the checkpoint's count; the model card says 2.7 B.
  EXPECT_EQ(m.total_params() + 32 * (2560 + 10240 + 2560) + 2560 + 51200, 2779683840LL);
  EXPECT_NEAR(std::floor(m.total_params() / 1e8) / 10, 2.7, 1e-9);
}

// Falcon-7B (configs/models/falcon-7b.yaml): 71 query heads of 64 over ONE key/value head, plain GELU FFN 18176,
// tied 65024-token table, no biases.
TEST(CostModel, Falcon7bMultiQueryPlainFfnByHand) {
  const ModelSpec m = load_model_spec("falcon-7b");
  EXPECT_EQ(m.ffn, FfnKind::kPlain);
  EXPECT_EQ(m.q_dim(), 4544);
  EXPECT_EQ(m.kv_dim(), 64);  // query_key_value: 4544 -> 4672 = 4544 + 2 x 64
  // Wq, dense 2 x 20,647,936 (4544^2) + Wk, Wv 2 x 290,816 (4544 x 64) + FFN 2 x 82,591,744 (4544 x 18176)
  // + norms 9,088 = 207,070,080.
  const std::int64_t per_layer = 2 * 4544LL * 4544 + 2 * 4544LL * 64 + 2 * 4544LL * 18176 + 2 * 4544;
  EXPECT_EQ(per_layer, 207070080);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  // 32 x 207,070,080 = 6,626,242,560, + 295,469,056 (65024 x 4544, tied) + 4,544 = 6,921,716,160.
  EXPECT_EQ(m.total_params(), 32 * per_layer + 65024LL * 4544 + 4544);
  EXPECT_EQ(m.total_params(), 6921716160LL);
  // Not counted: ln_f's bias (4,544): 6,921,720,704, the checkpoint's count; the card says 7B.
  EXPECT_EQ(m.total_params() + 4544, 6921720704LL);
  EXPECT_NEAR(std::round(m.total_params() / 1e9), 7.0, 1e-9);
}

// Persimmon-8B (configs/models/persimmon-8b.yaml): 64 heads of 64, plain squared-ReLU FFN 16384, untied 262144-token
// table and head, Q/K/V bias.
TEST(CostModel, Persimmon8bPlainFfnByHand) {
  const ModelSpec m = load_model_spec("persimmon-8b");
  EXPECT_EQ(m.ffn, FfnKind::kPlain);
  EXPECT_EQ(m.q_dim(), 4096);
  // 4 x 16,777,216 (Wq, Wk, Wv, dense) + 2 x 67,108,864 (4096 x 16384) + norms 8,192 + Q/K/V bias 12,288
  // = 201,347,072.
  const std::int64_t per_layer = 4 * 4096LL * 4096 + 2 * 4096LL * 16384 + 2 * 4096 + 3 * 4096;
  EXPECT_EQ(per_layer, 201347072);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  // 36 x 201,347,072 = 7,248,494,592, + 2 x 1,073,741,824 (262144 x 4096, embedding and head) + 4,096
  // = 9,395,982,336.
  EXPECT_EQ(m.total_params(), 36 * per_layer + 2 * 262144LL * 4096 + 4096);
  EXPECT_EQ(m.total_params(), 9395982336LL);
  // Not counted: dense, dense_h_to_4h, dense_4h_to_h biases (4,096 + 16,384 + 4,096), LayerNorm biases (8,192), q/k
  // LayerNorms (4 x 64) per block, final LayerNorm bias 4,096: 36 x 33,024 + 4,096 = 1,192,960 -> 9,397,175,296.
  // The name's "8B" is neither that total nor the blocks alone (7.25 B): it sits between.
  EXPECT_EQ(m.total_params() + 36 * (4096 + 16384 + 4096 + 8192 + 4 * 64) + 4096, 9397175296LL);
  EXPECT_GT(m.total_params(), 8e9);
  EXPECT_LT(36 * per_layer, 8e9);
}

// MPT-7B (configs/models/mpt-7b.yaml): MHA 32 x 128, plain GELU FFN 16384, tied 50432-token table, no biases at all.
TEST(CostModel, Mpt7bPlainFfnByHand) {
  const ModelSpec m = load_model_spec("mpt-7b");
  EXPECT_EQ(m.ffn, FfnKind::kPlain);
  EXPECT_EQ(m.linear_layers_per_block(), 6);
  // 4 x 16,777,216 + 2 x 67,108,864 + norms 8,192 = 201,334,784.
  const std::int64_t per_layer = 4 * 4096LL * 4096 + 2 * 4096LL * 16384 + 2 * 4096;
  EXPECT_EQ(per_layer, 201334784);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  // 32 x 201,334,784 = 6,442,713,088, + 206,569,472 (50432 x 4096, tied) + 4,096 = 6,649,286,656: every weight
  // (no_bias: true); the model card says 6.7 B.
  EXPECT_EQ(m.total_params(), 32 * per_layer + 50432LL * 4096 + 4096);
  EXPECT_EQ(m.total_params(), 6649286656LL);
  // The card's 6.7 B is 6.649 B rounded up (0.8% over; no weight is left out here: no_bias).
  EXPECT_NEAR(m.total_params() / 1e9, 6.7, 0.06);
}

// BLOOM (configs/models/bloom-*.yaml): MHA, plain GELU FFN 4d, tied 250880-token table, Q/K/V bias; the other
// biases (8d per block), ln_f's bias (d) and the embedding LayerNorm (2d) are not counted.
TEST(CostModel, BloomPlainFfnByHand) {
  struct Case {
    const char* name;
    int layers, d;
    std::int64_t published;  // Hugging Face's count: bloom-560m, bloom-1b1 (card), bloom-7b1
  };
  for (const Case c : {Case{"bloom-560m", 24, 1024, 559214592LL}, Case{"bloom-1b1", 24, 1536, 1065314304LL},
                       Case{"bloom-7b1", 30, 4096, 7069016064LL}}) {
    SCOPED_TRACE(c.name);
    const ModelSpec m = load_model_spec(c.name);
    EXPECT_EQ(m.ffn, FfnKind::kPlain);
    EXPECT_EQ(m.q_dim(), c.d);
    const std::int64_t d = c.d;
    // 4d^2 (query_key_value, dense) + 2 x 4d^2 (FFN) + 2d (norms) + 3d (Q/K/V bias) = 12d^2 + 5d.
    EXPECT_EQ(m.params_per_layer(), 12 * d * d + 5 * d);
    EXPECT_EQ(m.total_params(), c.layers * (12 * d * d + 5 * d) + 250880 * d + d);
    EXPECT_EQ(m.total_params() + c.layers * 8 * d + d + 2 * d, c.published);
  }
  // By hand for bloom-560m: 24 x (12,582,912 + 5,120) = 302,112,768, + 256,901,120 (250880 x 1024) + 1,024
  // = 559,014,912; with 24 x 8,192 + 1,024 + 2,048 = 199,680 more, 559,214,592.
  EXPECT_EQ(load_model_spec("bloom-560m").total_params(), 559014912LL);
  // bloom-1b1: 385,351,680 embedding weights (the card's figure) = 250880 x 1536.
  EXPECT_EQ(250880LL * 1536, 385351680LL);
  EXPECT_EQ(load_model_spec("bloom-7b1").total_params(), 7068020736LL);
}

// Gemma 2B (configs/models/gemma-2b.yaml): 8 query heads of 256 over one KV head, GeGLU of 16384, tied 256000-token
// table (half a billion of its parameters).
TEST(CostModel, Gemma2bShapesByHand) {
  const ModelSpec m = load_model_spec("gemma-2b");
  EXPECT_EQ(m.ffn, FfnKind::kGated);
  EXPECT_EQ(m.linear_layers_per_block(), 7);
  EXPECT_EQ(m.q_dim(), 2048);
  EXPECT_EQ(m.kv_dim(), 256);
  // Wq, Wo 2 x 4,194,304 + Wk, Wv 2 x 524,288 + FFN 3 x 33,554,432 + norms 4,096 = 110,104,576.
  const std::int64_t per_layer = 2 * 2048LL * 2048 + 2 * 2048LL * 256 + 3 * 2048LL * 16384 + 2 * 2048;
  EXPECT_EQ(per_layer, 110104576);
  EXPECT_EQ(m.params_per_layer(), per_layer);
  // 18 x 110,104,576 = 1,981,882,368, + 524,288,000 (256000 x 2048, tied) + 2,048 = 2,506,172,416: the model card's
  // "2B" is ~2.5 B (no biases to leave out).
  EXPECT_EQ(m.total_params(), 18 * per_layer + 256000LL * 2048 + 2048);
  EXPECT_EQ(m.total_params(), 2506172416LL);
  EXPECT_NEAR(std::round(m.total_params() / 1e8) / 10, 2.5, 1e-9);
}

// The prefix-caching note: "180 x 32 x 2560 x 2 x 2 bytes (FP16) = 74MB". Its own formula
// gives 58,982,400 bytes (59.0 MB / 56.25 MiB), not 74 MB; 74 MB would need ~226 tokens or
// 40 layers. We reproduce the formula and record the discrepancy.
TEST(CostModel, PrefixNoteKvFormula) {
  const ModelSpec g = load_model_spec("generic-3b");
  EXPECT_EQ(g.n_layers, 32);
  EXPECT_EQ(g.kv_dim(), 2560);
  EXPECT_DOUBLE_EQ(180 * g.kv_bytes_per_token(DType::kF16), 180.0 * 32 * 2560 * 2 * 2);
  EXPECT_DOUBLE_EQ(180 * g.kv_bytes_per_token(DType::kF16), 58982400.0);
  EXPECT_GT(74e6 / g.kv_bytes_per_token(DType::kF16), 225.0);
}

// PerCache Table 1: the QKV cache of one 100-word chunk of Llama-3.2-3B takes 87 MB. mllm keeps
// activations in fp32: Q+K+V per token = 28 x (3072 + 2 x 1024) x 4 B = 573,440 B, so 87 MB is
// 152 tokens (100 English words ~ 1.5 Llama-3 tokens per word of meeting/e-mail text).
TEST(CostModel, PerCacheQkvPerChunk) {
  const ModelSpec l3 = load_model_spec("llama-3.2-3b");
  EXPECT_DOUBLE_EQ(l3.qkv_bytes_per_token(DType::kF32), 28.0 * (3072 + 2 * 1024) * 4);
  const double chunk = 152 * l3.qkv_bytes_per_token(DType::kF32);
  EXPECT_NEAR(chunk / 1e6, 87.0, 0.5);
}

ModelSpec tiny() {
  ModelSpec m;
  m.name = "tiny";
  m.n_layers = 2;
  m.hidden = 8;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 2;
  m.ffn_hidden = 12;
  m.vocab = 10;
  m.weight_dtype = m.activation_dtype = m.kv_dtype = DType::kF32;
  return m;
}

TEST(CostModel, PrefillFlopsByHand) {
  const CostModel cm(tiny());
  // n = 3 new tokens after c = 2 cached: pairs = 3*2 + 3*4/2 = 12.
  EXPECT_EQ(CostModel::causal_pairs(3, 2), 12);
  const Work w = cm.prefill(PrefillShape{3, 2, 0, 1});
  const double L = 2;
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kQProj), L * 2 * 3 * 8 * 8);   // q_dim = 8
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kKProj), L * 2 * 3 * 8 * 4);   // kv_dim = 4
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kRope), L * 3 * 3 * (8 + 4));
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kAttnScore), L * 2 * 2 * 4 * 12);  // 2*head_dim*heads*pairs
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kSoftmax), L * 5 * 4 * 12);
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kAttnContext), L * 2 * 2 * 4 * 12);
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kFfnAct), L * 5 * 3 * 12);
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kLmHead), 2 * 1 * 8 * 10);
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kEmbed), 0.0);
}

// One decode step of the tiny model (L 2, d 8, q 8, kv 4, ffn 12, 4 heads of 2, vocab 10, fp32) after 3 cached
// tokens: 4 (query, key) pairs per head. Per layer, FLOPs: attention norm 32, Q 128, K 64, V 64, RoPE 36, scores 64,
// softmax 80, context 64, O 128, residuals 16, FFN norm 32, then the FFN:
//   plain: up 192, GELU 9 x 12 = 108, down 192                  -> 1,200 per layer
//   gated: gate 192, up 192, silu(g) * u 5 x 12 = 60, down 192   -> 1,344 per layer
// plus the final norm 32 and the LM head 160: plain 2 x 1,200 + 192 = 2,592, gated 2 x 1,344 + 192 = 2,880.
// Bytes (4 per value), per layer: attention norm 96, Q 320, K 176, V 176 (each with 16 of new K/V), RoPE 96,
// scores 160 (64 of K), softmax 128, context 160 (64 of V), O 320, residuals 192, FFN norm 96, then
//   plain: up 464 (384 weights + 80 activations), GELU 96 (reads u, writes), down 464  -> 2,944 per layer
//   gated: gate 464, up 464, silu(g) * u 144 (reads g and u, writes), down 464         -> 3,456 per layer
// plus the embedding row 64, the final norm 96 and the LM head 392 (320 weights + 72): plain 6,440, gated 7,464.
TEST(CostModel, PlainFfnDecodeCountsTwoMatricesByHand) {
  ModelSpec gated = tiny();
  ModelSpec plain = tiny();
  plain.ffn = FfnKind::kPlain;
  const Work p = CostModel(plain).decode(3);
  const Work g = CostModel(gated).decode(3);
  EXPECT_DOUBLE_EQ(p.flops(), 2592.0);
  EXPECT_DOUBLE_EQ(g.flops(), 2880.0);
  EXPECT_DOUBLE_EQ(p.bytes(), 6440.0);
  EXPECT_DOUBLE_EQ(g.bytes(), 7464.0);
  EXPECT_DOUBLE_EQ(p.flops_of(OpKind::kFfnGate), 0.0);
  EXPECT_TRUE(std::none_of(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kFfnGate; }));
  EXPECT_DOUBLE_EQ(p.flops_of(OpKind::kFfnAct), 2 * 108.0);
  EXPECT_DOUBLE_EQ(g.flops_of(OpKind::kFfnAct), 2 * 60.0);
  // The pass streams every stored weight but the embedding table (one row of it): 400 parameters per block
  // (Wq 64, Wk 32, Wv 32, Wo 64, up 96, down 96, norms 16; gated +96), 2 blocks, the final norm 8, the head 80.
  EXPECT_EQ(plain.params_per_layer(), 400);
  EXPECT_EQ(gated.params_per_layer(), 496);
  EXPECT_DOUBLE_EQ(p.weight_bytes(), 4.0 * (2 * 400 + 8 + 80 + 8));
  EXPECT_DOUBLE_EQ(plain.weight_bytes(), 4.0 * (2 * 400 + 8 + 80));  // tied table counted once
  EXPECT_EQ(plain.total_params(), 2 * 400 + 80 + 8);
  // Rank-2 adapters: r (in + out) over six linears, (16) + 2 (12) + (16) + (20) + (20) = 96 -> 192 (gated: + 40),
  // two kernels each: 12 calls per layer (gated 14).
  plain.lora_rank = gated.lora_rank = 2;
  EXPECT_EQ(plain.lora_params_per_layer(), 192);
  EXPECT_EQ(gated.lora_params_per_layer(), 232);
  auto lora_calls = [](const ModelSpec& m) {
    for (const Op& o : CostModel(m).decode(3).ops)
      if (o.kind == OpKind::kLora) return o.layers;
    return -1;
  };
  EXPECT_EQ(lora_calls(plain), 2 * 12);
  EXPECT_EQ(lora_calls(gated), 2 * 14);
}

TEST(CostModel, TheFfnKindIsReadCheckedAndDefaultsToGated) {
  const std::string base = "{name: x, n_layers: 2, hidden: 8, n_heads: 2, n_kv_heads: 2, head_dim: 4, ffn_hidden: 8, vocab: 10";
  EXPECT_EQ(load_model_spec(YAML::Load(base + "}"), ConfigSource{}).ffn, FfnKind::kGated);
  EXPECT_EQ(load_model_spec(YAML::Load(base + ", ffn: plain}"), ConfigSource{}).ffn, FfnKind::kPlain);
  EXPECT_EQ(load_model_spec(YAML::Load(base + ", ffn: gated}"), ConfigSource{}).linear_layers_per_block(), 7);
  auto message = [](const std::string& yaml) -> std::string {
    try {
      load_model_spec(YAML::Load(yaml), ConfigSource{});
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  // An unknown kind names the key and the allowed values.
  const std::string unknown = message(base + ", ffn: swiglu}");
  EXPECT_NE(unknown.find("ffn"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("'swiglu' is not one of: gated, plain"), std::string::npos) << unknown;
  // A plain FFN has no gate whose dtype a recipe could set; the other FFN projections can be.
  const std::string gate = message(base + ", ffn: plain, linear_dtypes: {ffn_gate: int6}}");
  EXPECT_NE(gate.find("linear_dtypes"), std::string::npos) << gate;
  EXPECT_NE(gate.find("ffn_gate"), std::string::npos) << gate;
  EXPECT_NE(gate.find("no gate projection"), std::string::npos) << gate;
  EXPECT_EQ(message(base + ", ffn: plain, linear_dtypes: {ffn_down: int6}}"), "(accepted)");
  EXPECT_EQ(message(base + ", ffn: gated, linear_dtypes: {ffn_gate: int6}}"), "(accepted)");
  // A built-in plain model takes a recipe on its two matrices: ffn_down in int6 over int4 adds 0.25 byte for each of
  // ChatGLM-6B's 28 x 16384 x 4096 = 1,879,048,192 down weights: 469,762,048 bytes.
  const ModelSpec q4 = load_model_spec(YAML::Load("{base: chatglm-6b, weight_dtype: int4}"), ConfigSource{});
  const ModelSpec q46 =
      load_model_spec(YAML::Load("{base: chatglm-6b, weight_dtype: int4, linear_dtypes: {ffn_down: int6}}"), ConfigSource{});
  EXPECT_DOUBLE_EQ(q46.weight_bytes() - q4.weight_bytes(), 469762048.0);
}

TEST(CostModel, QkvReuseSkipsOnlyProjectionsAndRope) {
  const CostModel cm(load_model_spec("llama-3.2-3b"));
  const Work full = cm.prefill(PrefillShape{500, 0, 0, 1});
  const Work reuse = cm.prefill(PrefillShape{500, 0, 300, 1});
  EXPECT_DOUBLE_EQ(reuse.flops_of(OpKind::kQProj), full.flops_of(OpKind::kQProj) * 200.0 / 500.0);
  EXPECT_DOUBLE_EQ(reuse.flops_of(OpKind::kRope), full.flops_of(OpKind::kRope) * 200.0 / 500.0);
  EXPECT_DOUBLE_EQ(reuse.flops_of(OpKind::kAttnNorm), full.flops_of(OpKind::kAttnNorm) * 200.0 / 500.0);
  for (OpKind k : {OpKind::kAttnScore, OpKind::kFfnGate, OpKind::kOProj, OpKind::kLmHead})
    EXPECT_DOUBLE_EQ(reuse.flops_of(k), full.flops_of(k));
  // prefix_skip (K/V cached) removes all per-position work of the cached part.
  const Work skip = cm.prefill(PrefillShape{200, 300, 0, 1});
  EXPECT_LT(skip.flops(), reuse.flops());
  EXPECT_DOUBLE_EQ(skip.flops_of(OpKind::kFfnGate), full.flops_of(OpKind::kFfnGate) * 200.0 / 500.0);
}

TEST(CostModel, GroupScalesAndAnEightBitClassifierAreStreamedWithTheWeights) {
  // ExecuTorch's SpinQuant export of Llama 3.2 1B: int4 linears with one fp32 scale per 32 weights
  // (0.5 + 4/32 = 0.625 bytes per weight), an 8-bit classifier tied to the embedding table.
  ModelSpec m = load_model_spec("llama-3.2-1b");
  m.weight_dtype = DType::kInt4;
  const double plain_block = CostModel(m).decode(0).ops[size_t(0)].weight_bytes;  // the embedding row
  m.weight_group_size = 32;
  m.classifier_dtype = DType::kInt8;
  EXPECT_DOUBLE_EQ(m.linear_weight_bytes(), 0.625);
  EXPECT_DOUBLE_EQ(m.classifier_weight_bytes(), 1.0);
  const Work d = CostModel(m).decode(0);
  const double d_ = m.hidden, ffn = m.ffn_hidden, q = m.q_dim(), kv = m.kv_dim();
  const double linears = m.n_layers * (d_ * q + 2 * d_ * kv + q * d_ + 3 * d_ * ffn + 2 * d_);
  EXPECT_DOUBLE_EQ(d.ops.front().weight_bytes, 2 * plain_block);  // the gathered row is 8-bit, not 4-bit
  EXPECT_NEAR(d.weight_bytes(), linears * 0.625 + d_ * 0.625 + double(m.vocab) * d_ * 1.0 + d_ * 1.0, 1.0);
  // The model's footprint counts the tied table once, at the classifier's precision.
  EXPECT_NEAR(m.weight_bytes(), linears * 0.625 + d_ * 0.625 + double(m.vocab) * d_, 1.0);
  // Group 128 streams 0.53125 bytes per linear weight: the linear layers' bytes shrink by 0.85.
  m.weight_group_size = 128;
  EXPECT_NEAR(CostModel(m).decode(0).weight_bytes() - double(m.vocab) * d_ - d_,
              (d.weight_bytes() - double(m.vocab) * d_ - d_) * 0.53125 / 0.625, 1.0);
}

TEST(CostModel, LoraAdaptersAddTheirWeightsFlopsAndCallsAtTheirOwnDtype) {
  // Meta's QAT+LoRA Llama 3.2 1B, as ExecuTorch exports it (`-lora 16`, `-d fp32`): rank-16 adapters on
  // Wq, Wk, Wv, Wo, gate, up and down of each of the 16 blocks. Llama 3.2 1B: d 2048, q 2048, kv 512,
  // ffn 8192, so r * (in + out) per block = 16 * (4096 + 2 * 2560 + 4096 + 2 * 10240 + 10240) = 704,512.
  ModelSpec m = load_model_spec("llama-3.2-1b");
  m.weight_dtype = DType::kInt4;
  m.weight_group_size = 32;
  m.classifier_dtype = DType::kInt8;
  const double plain_bytes = m.weight_bytes();
  const Work plain = CostModel(m).decode(63);
  m.lora_rank = 16;
  m.lora_dtype = DType::kF32;
  EXPECT_EQ(m.lora_params_per_layer(), 704512);
  // 16 blocks x 704,512 x 4 bytes = 45,088,768 bytes (43.0 MiB). The published PTE files differ by 44 MiB
  // (1B QAT+LoRA 1,127 MiB against SpinQuant 1,083 MiB, ExecuTorch's llama README): fp32 adapters.
  EXPECT_DOUBLE_EQ(m.weight_bytes() - plain_bytes, 45088768.0);
  const Work lora = CostModel(m).decode(63);
  ASSERT_EQ(lora.ops.size(), plain.ops.size() + 1);
  const auto it = std::find_if(lora.ops.begin(), lora.ops.end(), [](const Op& o) { return o.kind == OpKind::kLora; });
  ASSERT_NE(it, lora.ops.end());
  EXPECT_EQ(it->dtype, DType::kF32);
  EXPECT_EQ(it->layers, 16 * 14);  // A and B of seven linears, every block
  EXPECT_DOUBLE_EQ(it->weight_bytes, 45088768.0);
  // One token: 2 r (in + out) per adapted linear, plus the update's add (out: 2048 + 2*512 + 2048 + 2*8192 + 2048).
  EXPECT_DOUBLE_EQ(it->flops, 16 * (2.0 * 704512 + 23552));
  EXPECT_DOUBLE_EQ(lora.weight_bytes() - plain.weight_bytes(), 45088768.0);
  // Fully reused Q/K/V (PerCache) skips their adapters too; K/V recomputation (KVPR) runs only those two.
  auto lora_bytes = [](const Work& w) {
    double b = 0;
    for (const Op& o : w.ops)
      if (o.kind == OpKind::kLora) b += o.weight_bytes;
    return b;
  };
  const double r_bytes = 16 * 4;  // rank x fp32
  EXPECT_DOUBLE_EQ(lora_bytes(CostModel(m).prefill(PrefillShape{8, 0, 8, 1})),
                   16 * r_bytes * ((2048 + 2048) + 2 * (2048 + 8192) + (8192 + 2048)));  // Wo, gate, up, down
  EXPECT_DOUBLE_EQ(lora_bytes(CostModel(m).kv_recompute(10)), 16 * r_bytes * 2 * (2048 + 512));
  EXPECT_DOUBLE_EQ(lora_bytes(CostModel(m).q_projection(10)), 16 * r_bytes * (2048 + 2048));
  EXPECT_THROW(load_model_spec(YAML::Load("{base: llama-3.2-1b, lora_dtype: int3}"), ConfigSource{}), ConfigError);
  EXPECT_THROW(load_model_spec(YAML::Load("{base: llama-3.2-1b, lora_rank: -1}"), ConfigSource{}), ConfigError);
}

TEST(CostModel, RecipeProjectionsReadTheirOwnBytesAndRunAtTheirOwnDtype) {
  // mllm's Q4_K Llama-3.2-3B keeps v_proj and down_proj in Q6_K: {v_proj: int6, ffn_down: int6}.
  // Per block: V 3072 x 1024 = 3,145,728 weights, down 8192 x 3072 = 25,165,824; at 0.75 instead of
  // 0.5 bytes, 28 blocks x 28,311,552 x 0.25 = 198,180,864 more bytes.
  const ModelSpec plain = load_model_spec(YAML::Load("{base: llama-3.2-3b, weight_dtype: int4}"), ConfigSource{});
  const ModelSpec m = load_model_spec(
      YAML::Load("{base: llama-3.2-3b, weight_dtype: int4, linear_dtypes: {v_proj: int6, ffn_down: int6}}"), ConfigSource{});
  EXPECT_EQ(m.projection_dtype(Projection::kV), DType::kInt6);
  EXPECT_EQ(m.projection_dtype(Projection::kDown), DType::kInt6);
  EXPECT_FALSE(m.projection_dtype(Projection::kK));
  EXPECT_DOUBLE_EQ(m.projection_weight_bytes(Projection::kV), 0.75);
  EXPECT_DOUBLE_EQ(m.projection_weight_bytes(Projection::kK), 0.5);
  EXPECT_DOUBLE_EQ(m.weight_bytes() - plain.weight_bytes(), 198180864.0);
  auto op = [](const Work& w, OpKind k) {
    const auto it = std::find_if(w.ops.begin(), w.ops.end(), [&](const Op& o) { return o.kind == k; });
    EXPECT_NE(it, w.ops.end()) << to_string(k);
    return *it;
  };
  const Work w = CostModel(m).prefill(349), p = CostModel(plain).prefill(349);
  EXPECT_EQ(op(w, OpKind::kVProj).dtype, DType::kInt6);
  EXPECT_EQ(op(w, OpKind::kFfnDown).dtype, DType::kInt6);
  EXPECT_FALSE(op(w, OpKind::kKProj).dtype);
  EXPECT_DOUBLE_EQ(op(w, OpKind::kVProj).weight_bytes, 28 * 3145728 * 0.75);
  EXPECT_DOUBLE_EQ(op(w, OpKind::kVProj).flops, op(p, OpKind::kVProj).flops);  // the same arithmetic
  EXPECT_DOUBLE_EQ(w.flops(), p.flops());
  // KVPR's recomputation and Q projection use the same recipe.
  EXPECT_EQ(op(CostModel(m).kv_recompute(10), OpKind::kVProj).dtype, DType::kInt6);
  EXPECT_DOUBLE_EQ(op(CostModel(m).kv_recompute(10), OpKind::kVProj).weight_bytes, 28 * 3145728 * 0.75);
  EXPECT_FALSE(op(CostModel(m).q_projection(10), OpKind::kQProj).dtype);
  // Without a recipe a projection runs at the pass's dtype and bytes.
  EXPECT_FALSE(op(p, OpKind::kVProj).dtype);
  EXPECT_DOUBLE_EQ(op(p, OpKind::kVProj).weight_bytes, 28 * 3145728 * 0.5);
  for (const char* bad : {"{base: llama-3.2-3b, linear_dtypes: {w_proj: int6}}",
                          "{base: llama-3.2-3b, linear_dtypes: {v_proj: int5}}",
                          "{base: llama-3.2-3b, linear_dtypes: [v_proj]}"})
    EXPECT_THROW(load_model_spec(YAML::Load(bad), ConfigSource{}), ConfigError) << bad;
  try {
    load_model_spec(YAML::Load("{base: llama-3.2-3b, linear_dtypes: {w_proj: int6}}"), ConfigSource{});
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("linear_dtypes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown projection 'w_proj'"), std::string::npos) << e.what();
  }
}

TEST(CostModel, DecodeReadsEveryWeightOnceAndTheWholeKvCache) {
  ModelSpec m = load_model_spec("llama-3.2-3b");
  const CostModel cm(m);
  const Work d = cm.decode(1000);
  const double embed_table = double(m.vocab) * m.hidden * dtype_bytes(m.weight_dtype);
  // Every weight except the embedding table (only one row is gathered) is read once;
  // with tied embeddings the LM head reads the table again.
  EXPECT_NEAR(d.weight_bytes(), m.weight_bytes() - embed_table + embed_table + m.hidden * 2.0, 1.0);
  EXPECT_DOUBLE_EQ(d.kv_read_bytes(), 2.0 * m.n_layers * 1001 * m.kv_dim() * 2);
  // ~2 FLOPs per parameter (the tied table is used once, by the LM head) plus attention over 1001 keys.
  const double attention = d.flops_of(OpKind::kAttnScore) + d.flops_of(OpKind::kSoftmax) +
                           d.flops_of(OpKind::kAttnContext);
  EXPECT_DOUBLE_EQ(attention, m.n_layers * m.n_heads * 1001.0 * (2 * m.head_dim * 2 + 5));
  EXPECT_NEAR(d.flops() - attention, 2.0 * m.total_params(), 0.005 * 2.0 * m.total_params());
}

TEST(CostModel, VerifyChainEqualsPrefillWithAllLogits) {
  const CostModel cm(tiny());
  const Work v = cm.verify(4, 10);
  const Work p = cm.prefill(PrefillShape{4, 10, 0, 4});
  EXPECT_DOUBLE_EQ(v.flops(), p.flops());
  // A tree mask that allows fewer pairs costs less attention.
  EXPECT_LT(cm.verify(4, 10, 6).flops_of(OpKind::kAttnScore), v.flops_of(OpKind::kAttnScore));
}

TEST(CostModel, KvpRecomputeIsKAndVProjectionsOfTheRecomputedPrefix) {
  ModelSpec m = load_model_spec("generic-3b");  // MHA: h x h projections, as KVPR's 4 b l h^2
  const CostModel cm(m);
  const double l = 100, h = m.hidden;
  const Work w = cm.kv_recompute(100);
  EXPECT_DOUBLE_EQ(w.flops_of(OpKind::kKProj) + w.flops_of(OpKind::kVProj), m.n_layers * 4 * l * h * h);
  EXPECT_DOUBLE_EQ(cm.q_projection(200).flops_of(OpKind::kQProj), m.n_layers * 2 * 200 * h * h);
}

TEST(CostModel, BadModelSpecsAreRejected) {
  EXPECT_THROW(load_model_spec("no-such-model"), ConfigError);
  YAML::Node bad = YAML::Load("{name: x, n_layers: 2, hidden: 8, n_heads: 3, n_kv_heads: 2, head_dim: 2, "
                              "ffn_hidden: 8, vocab: 10}");
  EXPECT_THROW(load_model_spec(bad, ConfigSource{}), ConfigError);  // 3 heads not a multiple of 2 KV heads
  YAML::Node neg = YAML::Load("{name: x, n_layers: -2, hidden: 8, n_heads: 2, n_kv_heads: 2, head_dim: 2, "
                              "ffn_hidden: 8, vocab: 10}");
  EXPECT_THROW(load_model_spec(neg, ConfigSource{}), ConfigError);
  const std::string ok = "{name: x, n_layers: 2, hidden: 8, n_heads: 2, n_kv_heads: 2, head_dim: 4, ffn_hidden: 8, vocab: 10, ";
  EXPECT_THROW(load_model_spec(YAML::Load(ok + "classifier_dtype: int3}"), ConfigSource{}), ConfigError);
  EXPECT_THROW(load_model_spec(YAML::Load(ok + "weight_group_size: -32}"), ConfigSource{}), ConfigError);
  EXPECT_THROW(load_model_spec(YAML::Load(ok + "weight_scale_dtype: half}"), ConfigSource{}), ConfigError);
  EXPECT_NO_THROW(load_model_spec(YAML::Load(ok + "weight_group_size: 32, classifier_dtype: int8}"), ConfigSource{}));
}

}  // namespace
}  // namespace mobisim::models
