#pragma once
// Model files: llama2.c's legacy checkpoint, GGUF (F32/F16 tensors, llama and
// qwen2 architectures), and a seeded synthetic model generator that writes
// either format. Every reader checks each size against the file before reading
// it, so a truncated or lying file gives an InputError naming the file and what
// was expected, never an out-of-bounds read.
#include <cstdint>
#include <string>
#include <vector>

#include "models/kernel/transformer.h"

namespace mobisim::kernel {

// llama2.c legacy format: int32 header {dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size (negative: separate classifier), seq_len}, then float32
// weights in Weights order, two RoPE tables of seq_len*head_dim/2 floats, and the
// classifier when not shared. The file length must match the header exactly.
Model load_llama2c(const std::string& path);
void write_llama2c(const std::string& path, const Model& m);

// GGUF (version 2 or 3). Architecture "llama" rotates adjacent pairs (llama.cpp's
// converter permutes Q/K for it), "qwen2" rotates half-split (NeoX) and has Q/K/V biases.
Model load_gguf(const std::string& path);
enum class GgufType : std::uint32_t { kF32 = 0, kF16 = 1 };
void write_gguf(const std::string& path, const Model& m, GgufType type = GgufType::kF32);

// Picks the reader by the file's first bytes ("GGUF" or a llama2.c header).
Model load_model(const std::string& path);

// A low-level GGUF writer (tests use it to write deliberately malformed files).
class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& value);
  void add_u32(const std::string& key, std::uint32_t value);
  void add_f32(const std::string& key, float value);
  // dims in GGUF order (innermost first); data already encoded in `type_id`'s format.
  void add_tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type_id,
                  std::vector<std::uint8_t> data);
  void add_f32_tensor(const std::string& name, std::vector<std::uint64_t> dims, const float* data, GgufType type);
  void write(const std::string& path) const;
  std::vector<std::uint8_t> bytes() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::vector<std::uint8_t> data;
  };
  std::vector<std::uint8_t> kv_;
  std::uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

std::uint16_t float_to_half(float f);
float half_to_float(std::uint16_t h);

// A model with seeded random weights (embeddings N(0,1), projections
// N(0, 1/in), norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2)).
Model make_synthetic(const Config& c, std::uint64_t seed);
// stories260K's dimensions (dim 64, 5 layers, 8 heads, 4 KV heads, ffn 172, vocab 512), seq_len 512.
Config tiny_config();

}  // namespace mobisim::kernel
