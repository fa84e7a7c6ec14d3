#include "policies/specdec/retrieval_drafter.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"

namespace mobisim::policies::specdec {
namespace {
// Keeps the first `max_tokens` of a chain draft (a SAM draft: each token's parent is the one before it).
void truncate_chain(kernel::DraftTree& chain, int max_tokens) {
  if (chain.size() <= max_tokens) return;
  chain.tokens.resize(static_cast<std::size_t>(max_tokens));
  chain.parents.resize(static_cast<std::size_t>(max_tokens));
}
}  // namespace

Retriever parse_retriever(const std::string& name) {
  if (name == "pld") return Retriever::kPld;
  if (name == "sam") return Retriever::kSam;
  throw ConfigError(fmt::format("unknown retriever '{}' (expected pld or sam)", name));
}

SamDraftLength parse_sam_draft_length(const std::string& name) {
  if (name == "budget") return SamDraftLength::kBudget;
  if (name == "mllm") return SamDraftLength::kMllm;
  throw ConfigError(fmt::format("unknown sam_draft_length '{}' (expected budget or mllm)", name));
}

int mllm_sam_draft_tokens(int match_length) {
  // mllm/Draft.hpp: max_predicts = 40, alpha = 4.0f; modeling_qwen_sd.hpp passes minimum_length = 10.
  constexpr int kMaxPredicts = 40, kAlpha = 4, kMinimumLength = 10;
  if (match_length <= 0) return 0;  // n = min(40, 1) = 1: no token after the (empty) match
  const int n = std::max(kMinimumLength, std::min(kMaxPredicts, 1 + match_length * kAlpha));
  return n - 1;  // gen_draft copies input_ids[endpos + 1 .. endpos + n - 1]
}

void HistoryStore::add(std::span<const int> output) { tokens_.insert(tokens_.end(), output.begin(), output.end()); }

void DrafterOptions::validate() const {
  if (budget < 1) throw ConfigError(fmt::format("draft budget must be at least 1 token (got {})", budget));
  if (min_match < 1) throw ConfigError(fmt::format("min_match must be at least 1 token (got {})", min_match));
  if (calibrate && (calibration.top_n < 1 || calibration.max_depth < 1 || calibration.max_nodes < 1))
    throw ConfigError("calibration: top_n, max_depth and max_nodes must be at least 1");
  if (reuse && (reuse_options.min_segment < 1 || reuse_options.max_segments < 1 ||
                reuse_options.cumulative_threshold < 1 || reuse_options.max_lifetime < 1))
    throw ConfigError("draft reuse: min_segment, max_segments, cumulative_threshold and max_lifetime must be >= 1");
}

CoordGenDrafter::CoordGenDrafter(DrafterOptions opt, const HistoryStore* history)
    : opt_(opt), history_(history), pld_(std::max(3, opt.min_match), opt.min_match), reuse_(opt.reuse_options) {
  opt_.validate();
}

std::string CoordGenDrafter::name() const {
  std::string n = opt_.retriever == Retriever::kPld ? "pld" : "sam";
  if (opt_.calibrate) n += "+calibration";
  if (opt_.reuse) n += "+reuse";
  return n;
}

void CoordGenDrafter::calibrate(std::span<const int> context, const PrefillPredictions& pred) {
  if (opt_.calibrate) tree_.emplace(context, pred, opt_.calibration);
}

kernel::DraftTree CoordGenDrafter::propose(std::span<const int> context, int max_tokens) {
  const int budget = std::min(max_tokens, opt_.budget);
  kernel::DraftTree draft;
  if (budget <= 0 || context.empty()) return draft;
  kernel::DraftTree base;
  if (opt_.retriever == Retriever::kPld) {
    base = pld_.propose(context, budget);
  } else {
    // History first, then the request: the automaton grows incrementally as the context does.
    const std::vector<int>& h = history_ ? history_->tokens() : no_history_;
    if (joined_.size() < h.size() || !std::equal(h.begin(), h.end(), joined_.begin())) joined_.assign(h.begin(), h.end());
    joined_.resize(h.size());
    joined_.insert(joined_.end(), context.begin(), context.end());
    base = sam_.propose(joined_, budget);
    if (sam_.last_match_length() < opt_.min_match) base = {};
    if (opt_.sam_length == SamDraftLength::kMllm) truncate_chain(base, mllm_sam_draft_tokens(sam_.last_match_length()));
  }
  merge_tree(draft, base, budget);
  const int pending = context.back();
  if (opt_.reuse) reuse_.offer(pending, draft, draft.size(), budget);
  if (tree_ && draft.size() < budget) merge_tree(draft, tree_->propose(pending, budget - draft.size()), budget);
  return draft;
}

void CoordGenDrafter::observe(const kernel::DraftTree& draft, const kernel::VerifyResult& r) {
  if (opt_.reuse) reuse_.observe(draft, r);
}

double DecodeTrace::accepted_per_step() const {
  if (steps.empty()) return 0;
  double a = 0;
  for (const auto& s : steps) a += s.accepted;
  return a / static_cast<double>(steps.size());
}
double DecodeTrace::tokens_per_step() const { return steps.empty() ? 0 : accepted_per_step() + 1.0; }

kernel::VerifyResult verify_against_reference(std::span<const int> continuation, int pending,
                                              const kernel::DraftTree& draft) {
  if (continuation.empty()) throw InputError("reference verification needs the continuation of the pending token");
  kernel::VerifyResult r;
  const int k = draft.size();
  r.fed = k + 1;
  std::vector<int> depth(k + 1, 0);  // row 0 = pending
  for (int i = 0; i < k; ++i) depth[i + 1] = draft.parents[i] < 0 ? 1 : depth[draft.parents[i] + 1] + 1;
  const auto n = static_cast<int>(continuation.size());
  r.predicted.assign(k + 1, -1);
  r.predicted[0] = continuation[0];
  int u = -1;  // draft index of the last accepted token (-1: pending)
  std::vector<bool> on_path(k, false);
  for (int dpt = 0; dpt < n; ++dpt) {
    const int want = continuation[dpt];
    int next = -1;
    for (int i = u + 1; i < k; ++i)
      if (draft.parents[i] == u && draft.tokens[i] == want) {
        next = i;
        break;
      }
    if (next < 0) {
      r.bonus = want;
      break;
    }
    r.accepted.push_back(want);
    on_path[next] = true;
    r.predicted[next + 1] = dpt + 1 < n ? continuation[dpt + 1] : -1;
    u = next;
  }
  // Rows off the accepted path: the reference does not say what the model predicts there; the
  // proxy is the token that follows the row's token where it next occurs in the continuation
  // (within 16 tokens of its depth), which is what the model produces once it gets there.
  for (int i = 0; i < k; ++i) {
    if (on_path[i]) continue;
    for (int f = std::max(0, depth[i + 1] - 1); f + 1 < n && f < depth[i + 1] + 16; ++f)
      if (continuation[f] == draft.tokens[i]) {
        r.predicted[i + 1] = continuation[f + 1];
        break;
      }
  }
  (void)pending;
  return r;
}

DecodeTrace replay_decode(std::span<const int> prompt, std::span<const int> output, CoordGenDrafter& d,
                          const PrefillPredictions* pred) {
  DecodeTrace t;
  t.tokens.assign(prompt.begin(), prompt.end());
  if (output.empty()) return t;
  if (d.options().calibrate) {
    if (!pred) throw InputError("calibration needs the prompt's prefill predictions (none in this request)");
    d.calibrate(prompt, *pred);
  }
  std::size_t produced = 0;
  while (produced < output.size()) {
    const int pending = output[produced];
    t.tokens.push_back(pending);
    const int room = static_cast<int>(output.size() - produced) - 1;
    kernel::DraftTree draft = room > 0 ? d.propose(t.tokens, room) : kernel::DraftTree{};
    const auto cont = output.subspan(produced + 1);
    kernel::VerifyResult r;
    if (cont.empty()) {
      r.fed = 1;
    } else {
      r = verify_against_reference(cont, pending, draft);
    }
    d.observe(draft, r);
    t.tokens.insert(t.tokens.end(), r.accepted.begin(), r.accepted.end());
    produced += 1 + r.accepted.size();
    t.steps.push_back({draft.size(), static_cast<int>(r.accepted.size())});
  }
  return t;
}

DecodeTrace speculative_decode(const kernel::Model& m, std::span<const int> prompt, int steps, CoordGenDrafter& d) {
  DecodeTrace t;
  t.tokens.assign(prompt.begin(), prompt.end());
  if (prompt.empty() || steps <= 0) return t;
  kernel::KVCache cache(m.config);
  kernel::RunState st;
  kernel::ForwardOptions opt;
  opt.logits = d.options().calibrate ? kernel::Logits::kAll : kernel::Logits::kLast;
  const kernel::Mat& logits = kernel::forward(m, cache, st, prompt, opt);
  const int vocab = m.config.vocab_size;
  int pending = kernel::argmax(logits.row(logits.rows() - 1).data(), vocab);
  if (d.options().calibrate)
    d.calibrate(prompt, PrefillPredictions::from_logits(logits, prompt.size(), vocab, d.options().calibration.top_n));
  int produced = 0;
  while (produced < steps) {
    const int room = std::min(steps - produced - 1, m.config.seq_len - cache.length - 1);
    t.tokens.push_back(pending);
    if (room < 0) break;
    kernel::DraftTree draft = d.propose(t.tokens, room);
    t.tokens.pop_back();
    const kernel::VerifyResult r = kernel::verify_draft(m, cache, st, pending, draft);
    d.observe(draft, r);
    t.tokens.push_back(pending);
    t.tokens.insert(t.tokens.end(), r.accepted.begin(), r.accepted.end());
    produced += 1 + static_cast<int>(r.accepted.size());
    t.steps.push_back({draft.size(), static_cast<int>(r.accepted.size())});
    pending = r.bonus;
  }
  t.tokens.resize(prompt.size() + std::min<std::size_t>(steps, t.tokens.size() - prompt.size()));
  return t;
}

DecodeTrace retrieval_ceiling(std::span<const int> history, std::span<const int> prompt, std::span<const int> output,
                              int budget) {
  if (budget < 1) throw ConfigError(fmt::format("retrieval ceiling: draft budget must be at least 1 token (got {})", budget));
  DecodeTrace t;
  t.tokens.assign(prompt.begin(), prompt.end());
  std::vector<int> store(history.begin(), history.end());  // history, prompt, then the output so far
  store.insert(store.end(), prompt.begin(), prompt.end());
  kernel::SuffixAutomatonDrafter index;  // SAM drafting's automaton, used here as a substring index
  std::size_t produced = 0;
  while (produced < output.size()) {
    store.push_back(output[produced]);  // the pending token
    t.tokens.push_back(output[produced]);
    index.observe(store);
    const std::size_t room = std::min<std::size_t>(output.size() - produced - 1, static_cast<std::size_t>(budget));
    const int accepted = index.longest_occurring_prefix(output.subspan(produced + 1, room));
    for (int i = 1; i <= accepted; ++i) {
      store.push_back(output[produced + static_cast<std::size_t>(i)]);
      t.tokens.push_back(output[produced + static_cast<std::size_t>(i)]);
    }
    t.steps.push_back({accepted, accepted});
    produced += 1 + static_cast<std::size_t>(accepted);
  }
  return t;
}

}  // namespace mobisim::policies::specdec
