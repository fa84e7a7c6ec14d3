#include "policies/specdec/draft_reuse.h"

#include <algorithm>

namespace mobisim::policies::specdec {

std::vector<int> merge_chain(kernel::DraftTree& draft, int parent, const std::vector<int>& tokens, int max_tokens) {
  std::vector<int> added;
  int at = parent;
  for (int tok : tokens) {
    int found = -1;
    for (int i = std::max(at, -1) + 1; i < draft.size(); ++i)
      if (draft.parents[i] == at && draft.tokens[i] == tok) {
        found = i;
        break;
      }
    if (found < 0) {
      if (draft.size() >= max_tokens) break;
      draft.tokens.push_back(tok);
      draft.parents.push_back(at);
      found = draft.size() - 1;
      added.push_back(found);
    }
    at = found;
  }
  return added;
}

int merge_tree(kernel::DraftTree& draft, const kernel::DraftTree& extra, int max_tokens) {
  // Map each row of `extra` to a row of `draft` (parents precede children in both).
  std::vector<int> where(extra.size(), -2);
  int added = 0;
  for (int i = 0; i < extra.size(); ++i) {
    const int p = extra.parents[i] < 0 ? -1 : where[extra.parents[i]];
    if (p == -2) continue;  // its parent did not fit
    const auto rows = merge_chain(draft, p, {extra.tokens[i]}, max_tokens);
    added += static_cast<int>(rows.size());
    // The row now holding this token under p (new or shared), if any.
    for (int r = std::max(p, -1) + 1; r < draft.size(); ++r)
      if (draft.parents[r] == p && draft.tokens[r] == extra.tokens[i]) {
        where[i] = r;
        break;
      }
  }
  return added;
}

std::pair<int, int> longest_agreeing_segment(const std::vector<int>& d, const std::vector<int>& pred) {
  const int m = static_cast<int>(d.size());
  int best_i = 0, best_j = std::min(m, 1), i = 0;
  for (int k = 1; k <= m; ++k) {
    // The run [i, k) extends to k when the model predicted d[k] after d[k - 1].
    const bool extends = k < m && pred[k - 1] == d[k];
    if (!extends) {
      if (k - i > best_j - best_i) best_i = i, best_j = k;
      i = k;
    }
  }
  return {best_i, best_j};
}

void DraftReuse::retire(std::size_t i) {
  lifetime_sum_ += segments_[i].offered;
  ++retired_;
  segments_.erase(segments_.begin() + static_cast<std::ptrdiff_t>(i));
}

int DraftReuse::offer(int pending, kernel::DraftTree& draft, int used, int max_tokens) {
  reused_rows_.assign(draft.size(), false);
  int added_total = 0;
  for (std::size_t k = segments_.size(); k-- > 0;) {  // newest first
    Segment& s = segments_[k];
    std::vector<int> cont;
    auto it = std::find(s.tokens.rbegin() + 1, s.tokens.rend(), pending);
    if (!s.tokens.empty() && it != s.tokens.rend()) {
      const auto pos = static_cast<std::size_t>(s.tokens.rend() - it);  // index after the pending token
      cont.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(pos), s.tokens.end());
    } else {
      cont = s.tokens;
    }
    const bool over = used + added_total + static_cast<int>(cont.size()) > opt_.cumulative_threshold;
    if ((over && s.offered >= 1) || s.offered >= opt_.max_lifetime || cont.empty()) {
      retire(k);
      continue;
    }
    const auto rows = merge_chain(draft, -1, cont, max_tokens);
    reused_rows_.resize(draft.size(), false);
    for (int r : rows) reused_rows_[r] = true;
    added_total += static_cast<int>(rows.size());
    ++s.offered;
  }
  return added_total;
}

void DraftReuse::observe(const kernel::DraftTree& draft, const kernel::VerifyResult& r) {
  // Follow the accepted path (draft indices), counting tokens that reuse contributed.
  int u = -1;
  for (int tok : r.accepted) {
    int next = -1;
    for (int i = u + 1; i < draft.size(); ++i)
      if (draft.parents[i] == u && draft.tokens[i] == tok) {
        next = i;
        break;
      }
    if (next < 0) break;
    if (next < static_cast<int>(reused_rows_.size()) && reused_rows_[next]) ++reused_accepted_;
    u = next;
  }
  // The rejected branch: first child of the last accepted row, then first children.
  std::vector<int> d, pred;
  for (int at = u;;) {
    int c = -1;
    for (int i = at + 1; i < draft.size(); ++i)
      if (draft.parents[i] == at) {
        c = i;
        break;
      }
    if (c < 0) break;
    d.push_back(draft.tokens[c]);
    pred.push_back(c + 1 < static_cast<int>(r.predicted.size()) ? r.predicted[c + 1] : -1);
    at = c;
  }
  reused_rows_.clear();
  if (static_cast<int>(d.size()) < opt_.min_segment) return;
  const auto [i, j] = longest_agreeing_segment(d, pred);
  if (j - i < opt_.min_segment) return;
  segments_.push_back({std::vector<int>(d.begin() + i, d.begin() + j), 0});
  ++created_;
  while (static_cast<int>(segments_.size()) > opt_.max_segments) retire(0);
}

}  // namespace mobisim::policies::specdec
