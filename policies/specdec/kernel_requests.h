#pragma once
// CAG request files made by the real transformer (issue 10): `mobisim trace cag-generate`.
// Every token is the model's own: contexts are greedy passages from fixed seed tokens, outputs
// the model's greedy continuation of context + instruction, and the top-n next-token ids and
// probabilities at every prompt position come from the real prefill logits (softmax). Task
// styles shape the requests the way the document's tasks look (section 2.2), not their wording:
//   ui       one app per user, two screens alternating across requests, the same short command
//            each time (history similarity: the document's UI agents repeat commands); short outputs
//   tweet    the user's earlier posts as context, a new message to reply to per request
//   summary  one document per user, a few of its tokens as the instruction; longer outputs
// Deterministic: a fixed function of (model, options); no RNG.
#include <string>

#include "models/kernel/transformer.h"
#include "traces/cag_requests.h"

namespace mobisim::policies::specdec {

struct KernelRequestOptions {
  std::string task = "ui";  // ui | tweet | summary
  int users = 2;
  int requests = 3;          // per user
  int context_tokens = 96;
  int instruction_tokens = 6;
  int output_tokens = 24;
  int top_n = 4;             // prefill predictions kept per prompt position (0: none)
  void validate(int seq_len) const;  // ConfigError naming the option
};

traces::CagRequestFile make_kernel_requests(const kernel::Model& m, const KernelRequestOptions& o,
                                            const std::string& source);

// Top-n next-token ids and softmax probabilities of every row of `logits` (rank order).
void top_n_predictions(const kernel::Mat& logits, int vocab, int n, std::vector<std::vector<int>>& ids,
                       std::vector<std::vector<float>>& probs);

}  // namespace mobisim::policies::specdec
