// Fuzz target: the HDF5 trace readers (RAG traces and chat traces), through h5::Reader's digest
// check and, for files without a digest, its child-process probe and typed reads.
#include <yaml-cpp/yaml.h>

#include <string>

#include "fuzz/fuzz_util.h"
#include "policies/kvcache/chat_workload.h"
#include "sim/error.h"
#include "sim/params.h"
#include "traces/chat_trace.h"
#include "traces/generator.h"
#include "traces/rag_trace_io.h"

using namespace mobisim;

namespace {

// The same file without its 512-byte user block: a plain HDF5 file, as h5py writes them, so that
// mutations reach the HDF5 parsing instead of stopping at the digest.
std::string without_user_block(const std::string& bytes) { return bytes.size() > 512 ? bytes.substr(512) : bytes; }

void make_seeds(const std::string& dir) {
  const YAML::Node cfg = YAML::Load(R"(
users: 2
knowledge: {chunks_per_user: 6, chunk_words: 12, topics: 2, topic_vocab: 10}
queries: {per_user: 3, hot_chunks: 2}
embedder: {dim: 4}
retrieval: {k: 2}
)");
  const std::string rag = fuzz::scratch_dir() + "/rag.h5";
  traces::write_rag_trace(rag, traces::generate_rag_trace_from_yaml(cfg, "seed", 1));
  fuzz::write_seed(dir, "rag.h5", "R" + fuzz::slurp(rag));  // 'R' is even: the RAG reader
  fuzz::write_seed(dir, "rag_plain.h5", "R" + without_user_block(fuzz::slurp(rag)));

  policies::kvcache::ChatWorkloadConfig cc;
  cc.sessions = 3;
  cc.system_prompt_tokens = 8;
  const auto sessions = policies::kvcache::generate_chat_sessions(cc, 1, 0);
  const std::string chat = fuzz::scratch_dir() + "/chat.h5";
  traces::write_chat_trace(chat, policies::kvcache::to_chat_trace(sessions, cc, "fuzz seed", ""));
  fuzz::write_seed(dir, "chat.h5", "C" + fuzz::slurp(chat));  // 'C' is odd: the chat reader
  fuzz::write_seed(dir, "chat_plain.h5", "C" + without_user_block(fuzz::slurp(chat)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode(make_seeds);
  return 0;
}

// The first byte picks the reader (even: RAG trace, odd: chat trace); the rest is the file.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string path = fuzz::write_scratch("input.h5", data + 1, size - 1);
  try {
    if (data[0] % 2 == 0)
      traces::read_rag_trace(path);
    else
      traces::read_chat_trace(path);
  } catch (const Error&) {
  }
  return 0;
}
