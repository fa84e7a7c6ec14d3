// Fuzz target: the tokenizer loader (a SentencePiece model file), then one encode/decode.
#include <sentencepiece_trainer.h>

#include <fstream>
#include <string>

#include "fuzz/fuzz_util.h"
#include "models/tokenizer.h"
#include "sim/error.h"

using namespace mobisim;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode([](const std::string& dir) {
    // A tiny model trained on generated text (no data file is downloaded or shipped).
    const std::string text = fuzz::scratch_dir() + "/corpus.txt";
    {
      std::ofstream out(text);
      const char* words[] = {"cache", "prefix", "token", "phone", "energy", "latency", "query", "chunk"};
      for (int i = 0; i < 400; ++i) out << words[i % 8] << ' ' << words[(i * 5 + 3) % 8] << " of the " << i << "\n";
    }
    const std::string prefix = fuzz::scratch_dir() + "/sp";
    const auto st = sentencepiece::SentencePieceTrainer::Train("--input=" + text + " --model_prefix=" + prefix +
                                                               " --vocab_size=60 --model_type=bpe --minloglevel=2");
    if (st.ok()) fuzz::write_seed(dir, "tiny.model", fuzz::slurp(prefix + ".model"));
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_scratch("tok.model", data, size);
  try {
    auto tok = models::load_sentencepiece(path);
    const auto ids = tok->encode("the phone caches a prefix");
    tok->decode(ids);
  } catch (const Error&) {
  }
  return 0;
}
