#pragma once
// Retrieval-based drafting for CoordGen and its baselines, built on the kernel's drafters
// (models/kernel/drafters.h):
//   pld: prompt lookup over the local context only;
//   sam: suffix automaton over the user's history store followed by the local context;
// optionally extended with the calibrated token tree (section 3.3) and draft reuse (3.4), all
// merged into one draft tree of at most `budget` tokens. Any draft is lossless under greedy
// verification; these pieces only change how many tokens a step accepts.
//
// `speculative_decode` runs the draft-and-verify loop on the real kernel (calibration from the
// real prefill logits) and records every step (draft size, accepted tokens) for the cost model.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/kernel/drafters.h"
#include "policies/specdec/calibration.h"
#include "policies/specdec/draft_reuse.h"

namespace mobisim::policies::specdec {

enum class Retriever { kPld, kSam };
Retriever parse_retriever(const std::string& name);  // "pld" | "sam", ConfigError otherwise

// How many tokens a SAM draft takes from the automaton's match:
//   kBudget: the whole budget (what follows the longest suffix match, up to `budget` tokens);
//   kMllm:   mllm's SuffixAutomaton::gen_draft (mllm/Draft.hpp, called by the CPU speculative decoding of
//            mllm/models/qwen/modeling_qwen_sd.hpp with minimum_length 10; UbiquitousLearning/mllm 013e4cec,
//            added in a6a67052, 2025-06-10): n = min(max_predicts 40, 1 + alpha 4 x match length), raised
//            to 10 when there is a match, and the draft is the n - 1 tokens after it. Short matches give
//            short drafts, whatever the budget.
enum class SamDraftLength { kBudget, kMllm };
SamDraftLength parse_sam_draft_length(const std::string& name);  // "budget" | "mllm"
// Draft tokens mllm's rule takes after a suffix match of `match_length` tokens (0 without a match).
int mllm_sam_draft_tokens(int match_length);

// Earlier outputs of one user, across requests (SAM's historical context).
class HistoryStore {
 public:
  void add(std::span<const int> output);
  const std::vector<int>& tokens() const { return tokens_; }
  double memory_bytes() const { return static_cast<double>(tokens_.size()) * sizeof(int); }

 private:
  std::vector<int> tokens_;
};

struct DrafterOptions {
  Retriever retriever = Retriever::kSam;
  int budget = 31;  // draft tokens per step (G_d chunk minus the pending token)
  // Shortest context match a retrieval draft is taken from (PLD: n-gram length; SAM: suffix match
  // length). Shorter matches give no draft: the step verifies the pending token alone, as plain
  // decoding does (the document: strict suffix matching "frequently results in short or empty drafts").
  int min_match = 1;
  SamDraftLength sam_length = SamDraftLength::kBudget;  // SAM only; the draft never exceeds `budget`
  bool calibrate = false;
  bool reuse = false;
  CalibrationOptions calibration;
  ReuseOptions reuse_options;
  void validate() const;  // ConfigError: budget < 1, ...
};

class CoordGenDrafter : public kernel::Drafter {
 public:
  CoordGenDrafter(DrafterOptions opt, const HistoryStore* history);
  // Calibrated tree of this request's context (after prefill).
  void calibrate(std::span<const int> context, const PrefillPredictions& pred);
  kernel::DraftTree propose(std::span<const int> context, int max_tokens) override;
  void observe(const kernel::DraftTree& draft, const kernel::VerifyResult& r);
  std::string name() const override;
  const DrafterOptions& options() const { return opt_; }
  const CalibratedTree* calibrated() const { return tree_ ? &*tree_ : nullptr; }
  const DraftReuse& reuse() const { return reuse_; }

 private:
  DrafterOptions opt_;
  const HistoryStore* history_;
  kernel::PromptLookupDrafter pld_;
  kernel::SuffixAutomatonDrafter sam_;
  std::vector<int> joined_;  // history + context for SAM
  const std::vector<int> no_history_;
  std::optional<CalibratedTree> tree_;
  DraftReuse reuse_;
};

struct DecodeStep {
  int draft_tokens = 0;  // d: rows verified after the pending token
  int accepted = 0;      // draft tokens accepted
};
struct DecodeTrace {
  std::vector<int> tokens;  // prompt + output
  std::vector<DecodeStep> steps;
  double accepted_per_step() const;  // mean accepted draft tokens per verification
  double tokens_per_step() const;    // accepted + 1 (the bonus token)
};

// Greedy decoding of `steps` tokens with draft-and-verify on the real kernel; calibrates the
// drafter from the prompt's prefill logits when it asks for calibration. Output equals
// kernel::generate_greedy's.
// Verification against a known greedy continuation of the pending token (a trace's target output):
// accepted = the longest draft path along it; predictions off that path use a documented proxy.
kernel::VerifyResult verify_against_reference(std::span<const int> continuation, int pending,
                                              const kernel::DraftTree& draft);
// The draft-and-verify loop over a recorded output (output[0] is the prefill's prediction): what
// each step drafts and accepts, without a model. `pred` feeds calibration (required when it is on).
DecodeTrace replay_decode(std::span<const int> prompt, std::span<const int> output, CoordGenDrafter& d,
                          const PrefillPredictions* pred = nullptr);

DecodeTrace speculative_decode(const kernel::Model& m, std::span<const int> prompt, int steps, CoordGenDrafter& d);

// Retrieval ceiling of a recorded output: the draft-and-verify loop of replay_decode where every step
// drafts the longest prefix of the true continuation (at most `budget` tokens) that occurs anywhere in
// the store = history + prompt + the output up to the pending token. A PLD or SAM draft (and draft
// reuse, whose segments come from earlier drafts) is a set of paths each copied from that store, so no
// retrieval drafter without calibration accepts more per step on the same output; calibration's tree
// adds the model's own predictions and is not bounded by it. What the workload allows, not a policy.
DecodeTrace retrieval_ceiling(std::span<const int> history, std::span<const int> prompt, std::span<const int> output,
                              int budget);

}  // namespace mobisim::policies::specdec
