// Fuzz target: the model checkpoint loader (llama2.c and GGUF, picked by the first bytes).
#include <string>

#include "fuzz/fuzz_util.h"
#include "models/kernel/checkpoint.h"
#include "sim/error.h"

using namespace mobisim;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode([](const std::string& dir) {
    kernel::Config c = kernel::tiny_config();
    const kernel::Model m = kernel::make_synthetic(c, 1);
    const std::string p = fuzz::scratch_dir() + "/seed";
    kernel::write_llama2c(p, m);
    fuzz::write_seed(dir, "tiny.bin", fuzz::slurp(p));
    kernel::write_gguf(p, m, kernel::GgufType::kF32);
    fuzz::write_seed(dir, "tiny_f32.gguf", fuzz::slurp(p));
    kernel::write_gguf(p, m, kernel::GgufType::kF16);
    fuzz::write_seed(dir, "tiny_f16.gguf", fuzz::slurp(p));
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_scratch("model.bin", data, size);
  try {
    kernel::load_model(path);
  } catch (const Error&) {
  }
  return 0;
}
