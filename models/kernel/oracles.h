#pragma once
// The correctness oracles every reuse, split and speculation policy must pass,
// run on the real kernel. Each returns rows of a table: what is compared, the
// metric, its value, the threshold and pass/fail. `mobisim kernel check` prints
// them; the tests assert on the same functions (and add independent checks).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/kernel/transformer.h"

namespace mobisim::kernel {

struct OracleRow {
  std::string id;         // "1", "2", "3-neg", "7/prompt-lookup", ...
  std::string compared;   // what is compared with what
  std::string metric;     // e.g. "max |dlogit|"
  double value = 0;
  std::string threshold;  // e.g. "< 1e-4"; "report" for measured-only rows
  bool must_pass = true;
  bool pass = false;
  bool skipped = false;
  std::string note;       // extra numbers or the reason for a skip
};

std::string format_oracle_table(const std::vector<OracleRow>& rows);
bool all_must_pass(const std::vector<OracleRow>& rows);

struct OracleOptions {
  std::vector<int> expected_greedy;  // oracle 1: ids after BOS (empty: compare logits with the naive reference)
  std::string tokenizer_path;        // oracle 5 (SentencePiece model); empty or missing: skipped
  std::string qmsum_dir;             // oracle 5 (directory of qmsum *.json); empty or missing: skipped
  std::uint64_t seed = 7;
  int seq_tokens = 96;   // sequence length for oracles 2, 3, 6
  int long_tokens = 480; // generated sequence length for oracle 8
  int spec_steps = 160;  // greedy tokens for oracle 7
  int tokenization_pairs = 200;  // chunk pairs for oracle 5
};

// A sequence sampled from the model (temperature 1, seeded) starting at BOS = 1:
// realistic activations for stories260K, varied tokens for a random model.
std::vector<int> sample_sequence(const Model& m, int n, std::uint64_t seed);

// A scalar, token-at-a-time reference forward pass (llama2.c's run.c loops,
// independent of forward()): logits of every position of `tokens`.
std::vector<std::vector<float>> naive_reference_logits(const Model& m, const std::vector<int>& tokens);

OracleRow oracle_greedy_ids(const Model& m, const std::vector<int>& expected);
OracleRow oracle_reference_logits(const Model& m, const std::vector<int>& tokens);
OracleRow oracle_prefix_reuse(const Model& m, const std::vector<int>& tokens);
// With the RoPE offset (must match) and without it (must NOT match: the check can fail).
std::vector<OracleRow> oracle_percache(const Model& m, const std::vector<int>& tokens, std::uint64_t seed);
std::vector<OracleRow> oracle_nonprefix(const Model& m, std::uint64_t seed);
std::vector<OracleRow> oracle_tokenization(const std::string& tokenizer_path, const std::string& qmsum_dir,
                                           int pairs, std::uint64_t seed);
std::vector<OracleRow> oracle_kvpr_cake(const Model& m, const std::vector<int>& tokens);
std::vector<OracleRow> oracle_speculative(const Model& m, int steps, std::uint64_t seed);
std::vector<OracleRow> oracle_cluster_retrieval(const Model& m, int long_tokens, std::uint64_t seed);

std::vector<OracleRow> run_all_oracles(const Model& m, const OracleOptions& opt);

// Knowledge chunks from qmsum meetings: "speaker: content" per transcript turn,
// files in name order. Throws InputError for unreadable JSON.
std::vector<std::vector<std::string>> load_qmsum_meetings(const std::string& dir, int max_files);

}  // namespace mobisim::kernel
