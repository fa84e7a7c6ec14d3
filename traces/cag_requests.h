#pragma once
// Context-augmented generation (CAG) request files (CoordGen, issue 10): what a real LLM saw and
// produced, so that its outputs and prefill predictions replay exactly in the `coordgen` driver.
// Two encodings of the same content, chosen by the file extension (.jsonl or .h5); the layout of
// both is in traces/SCHEMA.md, section "CAG request files".
//
// One request = context tokens (retrieved chunks, chat history, a document, a UI screen dump) +
// instruction tokens, then the output tokens the model produced, and optionally, for every prompt
// position (context then instruction), the model's top-n next-token ids and probabilities from the
// prefill (what CoordGen's in-context calibration, section 3.3, samples). Requests of one user
// come in order: earlier outputs form that user's history store.
//
// Reading validates everything and throws InputError naming the file, the line (JSONL) or
// dataset (HDF5), the request and what was expected; a file is never half-read.
#include <cstdint>
#include <string>
#include <vector>

namespace mobisim::traces {

inline constexpr const char* kCagRequestsFormat = "mobisim-cag-requests";
inline constexpr std::int64_t kCagRequestsSchemaVersion = 1;

struct CagRequestRecord {
  std::string user_id;
  std::string task;  // free text: summary, rag, ui, tweet, ...
  std::vector<int> context, instruction, output;
  // Optional (both empty or both prompt-length, each row the same width n >= 1):
  // top_ids[p][r] = the r-th most likely next token after prompt position p, top_probs its probability.
  std::vector<std::vector<int>> top_ids;
  std::vector<std::vector<float>> top_probs;
  std::size_t prompt_size() const { return context.size() + instruction.size(); }
  bool has_predictions() const { return !top_ids.empty(); }
};

struct CagRequestFile {
  std::string source;     // what produced it (e.g. "kernel:stories260K.bin greedy")
  std::int64_t vocab = 0;  // token ids are < vocab (0: unchecked)
  std::vector<CagRequestRecord> requests;
};

// By extension: .jsonl or .h5 / .hdf5 (anything else: InputError).
CagRequestFile read_cag_requests(const std::string& path);
void write_cag_requests(const std::string& path, const CagRequestFile& f);  // atomic

CagRequestFile read_cag_requests_jsonl_text(const std::string& text, const std::string& name);
std::string cag_requests_to_jsonl(const CagRequestFile& f);

// Checks one request (`where` prefixes errors, e.g. "file.jsonl:3: request 2 (user 'u0')").
void validate_cag_request(const CagRequestRecord& r, std::int64_t vocab, const std::string& where);

}  // namespace mobisim::traces
