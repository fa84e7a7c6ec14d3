#pragma once
// NPU-optimized draft reuse (CoordGen section 3.4, equation 3).
//
// After a verification rejects part of a draft, the rejected branch d_r..d_m (the chain that
// continues the accepted path) may still hold the right words: the model wanted an extra token
// first (missing) or another word in place of d_r (synonym). The longest segment d_i..d_j of the
// rejected branch in which every token is what the model predicted after the token before it
// (pred(d_{k-1}) = d_k for i < k <= j: confidence-based, length first) is kept as draft material.
// A kept segment is offered after the next pending token (from where the pending token occurs in
// it, else whole) for at least one step, and dropped once the cumulative draft length of a step
// would exceed `cumulative_threshold`. Lifetimes (steps offered) are counted.
#include <cstdint>
#include <deque>
#include <vector>

#include "models/kernel/drafters.h"

namespace mobisim::policies::specdec {

struct ReuseOptions {
  int min_segment = 2;            // shorter segments are not worth a draft slot
  int max_segments = 4;           // kept at once (oldest dropped first)
  int cumulative_threshold = 32;  // draft tokens of one step beyond which kept segments are dropped
  int max_lifetime = 8;           // steps a segment is offered at most
};

// Adds `tokens` as a chain under draft row `parent` (-1: the pending token), sharing existing
// branches with the same tokens; stops at max_tokens. Returns the draft indices it added (new rows).
std::vector<int> merge_chain(kernel::DraftTree& draft, int parent, const std::vector<int>& tokens, int max_tokens);
// Adds a whole tree under the pending token the same way.
int merge_tree(kernel::DraftTree& draft, const kernel::DraftTree& extra, int max_tokens);

// Equation 3 on one rejected branch: tokens d and the model's predictions after each of them
// (pred[k] = argmax after d[k]); returns [i, j) of the longest agreeing run (earliest among ties).
std::pair<int, int> longest_agreeing_segment(const std::vector<int>& d, const std::vector<int>& pred);

class DraftReuse {
 public:
  explicit DraftReuse(ReuseOptions opt = {}) : opt_(opt) {}
  // Adds kept segments as chains under the pending token to `draft`, starting from `used` draft
  // tokens already in this step; drops segments (offered at least once) that would exceed the
  // threshold. Returns the number of tokens added.
  int offer(int pending, kernel::DraftTree& draft, int used, int max_tokens);
  // Learns from one verification of `draft` (rows as in kernel::verify_draft).
  void observe(const kernel::DraftTree& draft, const kernel::VerifyResult& r);
  std::size_t kept() const { return segments_.size(); }
  std::int64_t segments_created() const { return created_; }
  std::int64_t tokens_reused_accepted() const { return reused_accepted_; }
  double mean_lifetime_steps() const { return retired_ ? double(lifetime_sum_) / retired_ : 0.0; }

 private:
  struct Segment {
    std::vector<int> tokens;
    int offered = 0;  // steps it was offered in (lifetime)
  };
  void retire(std::size_t i);
  ReuseOptions opt_;
  std::deque<Segment> segments_;
  std::vector<bool> reused_rows_;  // draft indices added by the last offer()
  std::int64_t created_ = 0, reused_accepted_ = 0, lifetime_sum_ = 0, retired_ = 0;
};

}  // namespace mobisim::policies::specdec
