#include "models/kernel/drafters.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"

namespace mobisim::kernel {

DraftTree DraftTree::chain(std::vector<int> tokens) {
  DraftTree t;
  t.parents.resize(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) t.parents[i] = static_cast<int>(i) - 1;
  t.tokens = std::move(tokens);
  return t;
}

DraftTree PromptLookupDrafter::propose(std::span<const int> ctx, int max_tokens) {
  const int n = static_cast<int>(ctx.size());
  for (int g = std::min(max_n_, n - 1); g >= std::max(min_n_, 1); --g) {
    // Most recent earlier occurrence of the last g tokens.
    for (int start = n - g - 1; start >= 0; --start) {
      if (!std::equal(ctx.begin() + start, ctx.begin() + start + g, ctx.end() - g)) continue;
      std::vector<int> out;
      for (int j = start + g; j < n && static_cast<int>(out.size()) < max_tokens; ++j) out.push_back(ctx[j]);
      return DraftTree::chain(std::move(out));
    }
  }
  return {};
}

int SuffixAutomatonDrafter::find(int s, int tok) const {
  const auto& nx = st_[s].next;
  auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(tok, -1));
  return it != nx.end() && it->first == tok ? it->second : -1;
}

void SuffixAutomatonDrafter::extend(int tok, int end_pos) {
  auto set_edge = [this](int s, int t, int to) {
    auto& nx = st_[s].next;
    auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(t, -1));
    if (it != nx.end() && it->first == t)
      it->second = to;
    else
      nx.insert(it, {t, to});
  };
  const int cur = static_cast<int>(st_.size());
  st_.push_back({st_[last_].len + 1, -1, -1, -1, {}});
  int p = last_;
  while (p != -1 && find(p, tok) < 0) {
    set_edge(p, tok, cur);
    p = st_[p].link;
  }
  if (p == -1) {
    st_[cur].link = 0;
  } else {
    const int q = find(p, tok);
    if (st_[p].len + 1 == st_[q].len) {
      st_[cur].link = q;
    } else {
      const int clone = static_cast<int>(st_.size());
      State c = st_[q];
      c.len = st_[p].len + 1;
      st_.push_back(std::move(c));
      while (p != -1 && find(p, tok) == q) {
        set_edge(p, tok, clone);
        p = st_[p].link;
      }
      st_[q].link = clone;
      st_[cur].link = clone;
    }
  }
  last_ = cur;
  // Every suffix of the text now also ends at end_pos: record it along the suffix-link chain.
  for (int s = cur; s > 0; s = st_[s].link) {
    if (st_[s].last_end != end_pos) {
      st_[s].prev_end = st_[s].last_end;
      st_[s].last_end = end_pos;
    }
  }
}

void SuffixAutomatonDrafter::observe(std::span<const int> ctx) {
  const bool continues = seen_.size() <= ctx.size() && std::equal(seen_.begin(), seen_.end(), ctx.begin());
  if (st_.empty() || !continues) {
    st_.assign(1, State{});
    seen_.clear();
    last_ = 0;
  }
  for (std::size_t i = seen_.size(); i < ctx.size(); ++i) {
    extend(ctx[i], static_cast<int>(i));
    seen_.push_back(ctx[i]);
  }
}

int SuffixAutomatonDrafter::longest_occurring_prefix(std::span<const int> pattern) const {
  if (st_.empty()) return 0;
  int s = 0, n = 0;  // every substring of the observed tokens is a path from the root
  for (const int tok : pattern) {
    s = find(s, tok);
    if (s < 0) break;
    ++n;
  }
  return n;
}

DraftTree SuffixAutomatonDrafter::propose(std::span<const int> ctx, int max_tokens) {
  observe(ctx);
  last_match_ = 0;
  const int s = st_[last_].link;
  if (s <= 0 || st_[s].prev_end < 0) return {};
  last_match_ = st_[s].len;
  std::vector<int> out;
  const int n = static_cast<int>(ctx.size());
  for (int j = st_[s].prev_end + 1; j < n && static_cast<int>(out.size()) < max_tokens; ++j) out.push_back(ctx[j]);
  return DraftTree::chain(std::move(out));
}

DraftTree RandomDrafter::propose(std::span<const int>, int max_tokens) {
  DraftTree t;
  const int b = std::max(branching_, 1);
  for (int i = 0; i < max_tokens; ++i) {
    t.tokens.push_back(static_cast<int>(rng_.uniform_int(static_cast<std::uint64_t>(vocab_))));
    t.parents.push_back(i < b ? -1 : (i - b) / b);  // a complete b-ary tree in breadth-first order
  }
  return t;
}

DraftTree ReplayDrafter::propose(std::span<const int> ctx, int max_tokens) {
  const std::size_t n = ctx.size();
  DraftTree t;
  if (n == 0 || n > ref_.size() || ref_[n - 1] != ctx[n - 1]) return t;
  int prev = -1;
  for (std::size_t j = n; j < ref_.size() && t.size() < max_tokens; ++j) {
    int tok = ref_[j];
    if (rng_.bernoulli(err_)) tok = static_cast<int>(rng_.uniform_int(static_cast<std::uint64_t>(vocab_)));
    t.tokens.push_back(tok);
    t.parents.push_back(prev);
    const int idx = t.size() - 1;
    if (tree_ && t.size() < max_tokens) {
      t.tokens.push_back(static_cast<int>(rng_.uniform_int(static_cast<std::uint64_t>(vocab_))));
      t.parents.push_back(prev);
    }
    prev = idx;
  }
  return t;
}

VerifyResult verify_draft(const Model& m, KVCache& cache, RunState& st, int pending, const DraftTree& draft,
                          FlopCounter* flops) {
  const int k = draft.size();
  if (static_cast<int>(draft.parents.size()) != k)
    throw InputError(fmt::format("draft has {} tokens but {} parents", k, draft.parents.size()));
  // Row 0 is the pending token; draft token i sits in row i + 1.
  std::vector<int> tokens(k + 1), parents(k + 1);
  tokens[0] = pending;
  parents[0] = -1;
  for (int i = 0; i < k; ++i) {
    const int p = draft.parents[i];
    if (p < -1 || p >= i) throw InputError(fmt::format("draft token {} has invalid parent {}", i, p));
    tokens[i + 1] = draft.tokens[i];
    parents[i + 1] = p + 1;
  }
  const int c0 = cache.length;
  ForwardOptions opt;
  opt.logits = Logits::kAll;
  opt.parents = parents;
  opt.flops = flops;
  const Mat& logits = forward(m, cache, st, tokens, opt);

  VerifyResult r;
  r.fed = k + 1;
  std::vector<int> depth(k + 1, 0);
  for (int i = 1; i <= k; ++i) depth[i] = depth[parents[i]] + 1;
  for (int i = 0; i <= k; ++i) r.draft_pairs += depth[i] + 1;
  r.predicted.resize(k + 1);
  for (int i = 0; i <= k; ++i) r.predicted[i] = argmax(logits.row(i).data(), m.config.vocab_size);
  // Greedy walk: follow the child whose token is the model's argmax at its parent.
  std::vector<int> path{0};
  int u = 0;
  for (;;) {
    const int pred = r.predicted[u];
    int next = -1;
    for (int i = u + 1; i <= k; ++i)
      if (parents[i] == u && tokens[i] == pred) {
        next = i;
        break;
      }
    if (next < 0) {
      r.bonus = pred;
      break;
    }
    r.accepted.push_back(pred);
    path.push_back(next);
    u = next;
  }
  // Accepted rows move to consecutive slots; their keys were rotated for position
  // c0 + depth, which is exactly the slot they move to. Rows only move left.
  for (int l = 0; l < m.config.n_layers; ++l)
    for (std::size_t d = 0; d < path.size(); ++d)
      if (path[d] != static_cast<int>(d)) {
        cache.k[l].row(c0 + d) = cache.k[l].row(c0 + path[d]);
        cache.v[l].row(c0 + d) = cache.v[l].row(c0 + path[d]);
      }
  cache.length = c0 + static_cast<int>(path.size());
  return r;
}

std::vector<int> speculative_greedy(const Model& m, std::span<const int> prompt, int steps, Drafter& drafter,
                                    int max_draft, SpeculativeStats* stats) {
  std::vector<int> out(prompt.begin(), prompt.end());
  if (prompt.empty() || steps <= 0) return out;
  KVCache cache(m.config);
  RunState st;
  int pending = argmax(forward(m, cache, st, prompt).data(), m.config.vocab_size);
  int produced = 0;
  while (produced < steps) {
    const int room = std::min(steps - produced - 1, m.config.seq_len - cache.length - 1);
    if (room < 0) {
      out.push_back(pending);
      break;
    }
    out.push_back(pending);
    DraftTree draft = drafter.propose(out, std::min(max_draft, room));
    out.pop_back();
    if (draft.size() > room) {
      draft.tokens.resize(room);
      draft.parents.resize(room);
    }
    const VerifyResult r = verify_draft(m, cache, st, pending, draft);
    out.push_back(pending);
    out.insert(out.end(), r.accepted.begin(), r.accepted.end());
    produced += 1 + static_cast<int>(r.accepted.size());
    pending = r.bonus;
    if (stats) {
      ++stats->verify_steps;
      stats->accepted_tokens += static_cast<int>(r.accepted.size());
    }
  }
  out.resize(prompt.size() + std::min<std::size_t>(steps, out.size() - prompt.size()));
  return out;
}

}  // namespace mobisim::kernel
