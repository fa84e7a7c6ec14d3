#include "policies/specdec/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <numeric>

#include "sim/error.h"

namespace mobisim::policies::specdec {

PrefillPredictions PrefillPredictions::from_logits(const kernel::Mat& logits, std::size_t context_tokens, int vocab,
                                                   int n) {
  if (n < 1) throw InputError(fmt::format("calibration: top_n must be at least 1 (got {})", n));
  if (static_cast<std::size_t>(logits.rows()) != context_tokens)
    throw InputError(fmt::format("calibration: {} rows of prefill logits for a context of {} tokens",
                                 logits.rows(), context_tokens));
  if (logits.cols() < vocab)
    throw InputError(fmt::format("calibration: logits have {} columns, vocabulary is {}", logits.cols(), vocab));
  PrefillPredictions p;
  p.next.resize(context_tokens);
  std::vector<int> ids(vocab);
  const int top = std::min(n, vocab);
  for (std::size_t r = 0; r < context_tokens; ++r) {
    std::iota(ids.begin(), ids.end(), 0);
    const float* row = logits.row(static_cast<Eigen::Index>(r)).data();
    // Highest logit first; ties to the lower id (as kernel::argmax does).
    std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [row](int a, int b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    p.next[r].assign(ids.begin(), ids.begin() + top);
  }
  return p;
}

int CalibratedTree::child(int node, int token) {
  for (int c : nodes_[node].children)
    if (nodes_[c].token == token) return c;
  const int idx = static_cast<int>(nodes_.size());
  nodes_.push_back({token, {}, false});
  nodes_[node].children.push_back(idx);
  return idx;
}

void CalibratedTree::expand(int node, std::size_t pos, int depth, std::span<const int> context,
                            const PrefillPredictions& pred,
                            const std::unordered_map<int, std::vector<std::size_t>>& occurrences,
                            const CalibrationOptions& opt) {
  if (nodes_[node].expanded || depth >= opt.max_depth) return;
  nodes_[node].expanded = true;
  for (int y : pred.next[pos]) {
    if (static_cast<int>(nodes_.size()) >= opt.max_nodes) return;
    const int c = child(node, y);  // sample: <context token, predicted next token>
    // search: an occurrence of y in the context, nearest after pos, else the latest before it.
    auto it = occurrences.find(y);
    if (it == occurrences.end()) continue;
    const auto& occ = it->second;
    auto after = std::upper_bound(occ.begin(), occ.end(), pos);
    const std::size_t q = after != occ.end() ? *after : occ.back();
    expand(c, q, depth + 1, context, pred, occurrences, opt);
  }
}

CalibratedTree::CalibratedTree(std::span<const int> context, const PrefillPredictions& pred,
                               const CalibrationOptions& opt)
    : bytes_per_node_(opt.bytes_per_node) {
  if (pred.next.size() != context.size())
    throw InputError(fmt::format("calibration: predictions for {} positions, context has {} tokens",
                                 pred.next.size(), context.size()));
  if (opt.top_n < 1 || opt.max_depth < 1 || opt.max_nodes < 1)
    throw ConfigError("calibration: top_n, max_depth and max_nodes must be at least 1");
  std::unordered_map<int, std::vector<std::size_t>> occurrences;
  for (std::size_t i = 0; i < context.size(); ++i) occurrences[context[i]].push_back(i);
  // Later positions first: the most recent occurrence of a token defines its subtree first.
  for (std::size_t k = context.size(); k-- > 0;) {
    if (static_cast<int>(nodes_.size()) >= opt.max_nodes) break;
    const int tok = context[k];
    auto [it, inserted] = roots_.try_emplace(tok, static_cast<int>(nodes_.size()));
    if (inserted) nodes_.push_back({tok, {}, false});
    expand(it->second, k, 0, context, pred, occurrences, opt);
  }
}

kernel::DraftTree CalibratedTree::propose(int pending, int max_tokens) const {
  kernel::DraftTree t;
  auto it = roots_.find(pending);
  if (it == roots_.end() || max_tokens <= 0) return t;
  // Breadth first, children in rank order; (node, index of its draft row).
  std::deque<std::pair<int, int>> q{{it->second, -1}};
  while (!q.empty() && t.size() < max_tokens) {
    auto [node, row] = q.front();
    q.pop_front();
    for (int c : nodes_[node].children) {
      if (t.size() >= max_tokens) break;
      t.tokens.push_back(nodes_[c].token);
      t.parents.push_back(row);
      q.emplace_back(c, t.size() - 1);
    }
  }
  return t;
}

}  // namespace mobisim::policies::specdec
