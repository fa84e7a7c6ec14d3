// Fuzz target: the JSON reader and the JSONL importer (traces/json.h, traces/jsonl.h).
#include <string>

#include "fuzz/fuzz_util.h"
#include "sim/error.h"
#include "traces/json.h"
#include "traces/jsonl.h"

using namespace mobisim;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::seeds_mode([](const std::string& dir) {
    fuzz::write_seed(dir, "object.json", R"({"a": [1, -2.5e2, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00"})");
    fuzz::write_seed(dir, "nested.json", R"([[[{"k": {"l": [0.5, 1e-3, "z"]}}]]])");
    fuzz::write_seed(dir, "import.jsonl", R"({"type": "user", "user_id": "alice", "topics": ["budget", "hiring"]}
{"type": "document", "user_id": "alice", "text": "alpha beta gamma delta epsilon"}
{"type": "chunk", "user_id": "alice", "text": "one pre-cut chunk"}
{"type": "query", "user_id": "alice", "text": "When is beta?", "answer": "Friday", "arrival_s": 3600.5, "kind": "email", "relevant_chunks": [0, 1]}
)");
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    traces::json::parse(text, "fuzz.json");
  } catch (const Error&) {
  }
  try {
    traces::JsonlOptions opt;
    opt.embed = false;
    traces::import_jsonl_text(text, "fuzz.jsonl", opt);
  } catch (const Error&) {
  }
  return 0;
}
