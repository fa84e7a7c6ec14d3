#pragma once
// In-context distribution calibration (CoordGen section 3.3).
//
// After prefill the model has predicted the next token after every context
// position. For each context token x at position p:
//   1. sample: take the top-n predicted next tokens y after p (<x, y> pairs follow the model's
//      own distribution, not the context's wording);
//   2. search: find an occurrence q of y in the context (the nearest one after p, else the latest
//      before) and repeat step 1 from q, depth first, down to `max_depth`.
// The <x, y, ...> paths form a calibrated token tree per starting token, added to the drafting
// database: a pending token x drafts the tree under x (ranks first, breadth first).
// Cost (the document's figure): about 2 ms per input token, charged by the policies; memory is
// the tree's node count times `bytes_per_node`.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "models/kernel/drafters.h"
#include "models/kernel/transformer.h"

namespace mobisim::policies::specdec {

// Top-n next-token ids after each context position (rank order), e.g. from prefill logits.
struct PrefillPredictions {
  std::vector<std::vector<int>> next;  // [position][rank]
  // From a logits matrix with one row per context position. Throws InputError when the rows do
  // not match the context length or n < 1.
  static PrefillPredictions from_logits(const kernel::Mat& logits, std::size_t context_tokens, int vocab, int n);
};

struct CalibrationOptions {
  int top_n = 3;           // sampled next tokens per position
  int max_depth = 4;       // tokens below a root
  int max_nodes = 200000;  // node budget of the whole tree (memory bound)
  double bytes_per_node = 16;
};

class CalibratedTree {
 public:
  CalibratedTree() = default;
  CalibratedTree(std::span<const int> context, const PrefillPredictions& pred, const CalibrationOptions& opt);
  // The calibrated continuation of `pending` as a draft tree of at most max_tokens tokens.
  kernel::DraftTree propose(int pending, int max_tokens) const;
  std::size_t nodes() const { return nodes_.size(); }
  double memory_bytes() const { return static_cast<double>(nodes_.size()) * bytes_per_node_; }
  bool empty() const { return nodes_.empty(); }

 private:
  struct Node {
    int token = 0;
    std::vector<int> children;  // node indices, in rank order of first insertion
    bool expanded = false;
  };
  int child(int node, int token);
  void expand(int node, std::size_t pos, int depth, std::span<const int> context, const PrefillPredictions& pred,
              const std::unordered_map<int, std::vector<std::size_t>>& occurrences, const CalibrationOptions& opt);
  std::vector<Node> nodes_;
  std::unordered_map<int, int> roots_;  // token -> node
  double bytes_per_node_ = 16;
};

}  // namespace mobisim::policies::specdec
