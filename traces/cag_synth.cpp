#include "traces/cag_synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/error.h"

namespace mobisim::traces {

namespace {

constexpr int kFirstToken = 3;  // 0-2: unk, bos, eos in the Llama 2 tokenizer

void require(bool ok, const std::string& where, const std::string& key, const std::string& what, double value) {
  if (!ok) throw ConfigError(fmt::format("{}: {} = {} but {}", where, key, value, what));
}

std::uint64_t mix(std::uint64_t seed, std::uint64_t salt, int prev, int cur) {
  std::uint64_t s = seed ^ (salt * 0x9e3779b97f4a7c15ULL);
  s ^= sim::splitmix64(s) + static_cast<std::uint64_t>(static_cast<std::uint32_t>(prev));
  s ^= sim::splitmix64(s) + (static_cast<std::uint64_t>(static_cast<std::uint32_t>(cur)) << 1);
  return sim::splitmix64(s);
}

int zipf_token(sim::Rng& rng, const sim::ZipfSampler& zipf) { return kFirstToken + static_cast<int>(zipf.sample(rng)); }

// Geometric span length with mean m >= 1: P(L = k) = (1 - 1/m)^(k-1) / m.
std::size_t span_length(sim::Rng& rng, double mean) {
  const double stop = 1.0 / mean;
  std::size_t k = 1;
  while (!rng.bernoulli(stop)) ++k;
  return k;
}

void fill_top_n(CagRequestRecord& r, const CagSynthParams& p, sim::Rng& rng, const sim::ZipfSampler& zipf) {
  std::vector<int> prompt = r.context;
  prompt.insert(prompt.end(), r.instruction.begin(), r.instruction.end());
  const std::size_t n = static_cast<std::size_t>(p.top_n);
  r.top_ids.assign(prompt.size(), {});
  r.top_probs.assign(prompt.size(), {});
  for (std::size_t pos = 0; pos < prompt.size(); ++pos) {
    auto& ids = r.top_ids[pos];
    const bool last = pos + 1 == prompt.size();
    const int next = last ? (r.output.empty() ? zipf_token(rng, zipf) : r.output.front()) : prompt[pos + 1];
    // Variants exist for context positions only (the instruction is the user's, not the model's words).
    if (pos + 1 < r.context.size() && synth_variant_in_top_n(p, prompt[pos], next))
      ids.push_back(synth_variant(p, prompt[pos], next));
    if (ids.size() < n) ids.push_back(next);
    while (ids.size() < n) {
      const int t = zipf_token(rng, zipf);
      if (std::find(ids.begin(), ids.end(), t) == ids.end()) ids.push_back(t);
    }
    auto& probs = r.top_probs[pos];
    for (std::size_t k = 0; k < n; ++k) probs.push_back(static_cast<float>(std::ldexp(1.0, -static_cast<int>(k) - 1)));
  }
}

}  // namespace

void CagSynthParams::validate(const std::string& where) const {
  auto prob = [&](double v, const char* key) {
    require(std::isfinite(v) && v >= 0 && v <= 1, where, key, "a probability must be in [0, 1]", v);
  };
  prob(copy_start_prob, "copy_start_prob");
  prob(history_fraction, "history_fraction");
  prob(variant_prob, "variant_prob");
  prob(variant_in_top_n_prob, "variant_in_top_n_prob");
  require(std::isfinite(mean_span_tokens) && mean_span_tokens >= 1, where, "mean_span_tokens",
          "a geometric span length has a mean of at least 1 token", mean_span_tokens);
  require(mean_span_tokens <= 1e6, where, "mean_span_tokens", "spans longer than 1e6 tokens are not spans",
          mean_span_tokens);
  require(top_n >= 1 && top_n <= 64, where, "top_n", "expected 1..64 predictions per position", top_n);
  require(vocab > kFirstToken + top_n + 1 && vocab <= (std::int64_t{1} << 30), where, "vocab",
          "expected a vocabulary larger than the special tokens plus top_n (and below 2^30)", static_cast<double>(vocab));
  require(std::isfinite(zipf_exponent) && zipf_exponent >= 0 && zipf_exponent <= 4, where, "zipf_exponent",
          "expected 0 (uniform) .. 4", zipf_exponent);
  require(users >= 1, where, "users", "expected at least 1", users);
  require(requests_per_user >= 1, where, "requests_per_user", "expected at least 1", requests_per_user);
  require(context_tokens >= 2, where, "context_tokens", "a context to copy from needs at least 2 tokens", context_tokens);
  require(instruction_tokens >= 0, where, "instruction_tokens", "expected >= 0", instruction_tokens);
  require(output_tokens >= 1, where, "output_tokens", "expected at least 1", output_tokens);
  require(static_cast<std::int64_t>(context_tokens) + instruction_tokens + output_tokens <= (std::int64_t{1} << 22),
          where, "context_tokens", "context + instruction + output exceed 2^22 tokens", context_tokens);
}

void CagSynthStats::add(const CagSynthStats& o) {
  novel_tokens += o.novel_tokens;
  copied_tokens += o.copied_tokens;
  history_tokens += o.history_tokens;
  variant_tokens += o.variant_tokens;
  spans += o.spans;
  context_spans += o.context_spans;
  history_spans += o.history_spans;
  spans_cut += o.spans_cut;
}

int synth_variant(const CagSynthParams& p, int prev, int cur) {
  const auto range = static_cast<std::uint64_t>(p.vocab - kFirstToken - 1);
  int v = kFirstToken + static_cast<int>(mix(p.seed, 1, prev, cur) % range);
  if (v >= cur && cur >= kFirstToken) ++v;  // never the context token itself
  return v;
}

bool synth_variant_in_top_n(const CagSynthParams& p, int prev, int cur) {
  const double u = static_cast<double>(mix(p.seed, 2, prev, cur) >> 11) * 0x1.0p-53;
  return u < p.variant_in_top_n_prob;
}

CagSynthStats synthesize_output(CagRequestRecord& r, const std::vector<std::vector<int>>& history,
                                std::size_t output_tokens, const CagSynthParams& p, sim::Rng& rng,
                                const sim::ZipfSampler& zipf) {
  CagSynthStats s;
  const std::vector<int>& ctx = r.context;
  if (ctx.empty()) throw InputError("synthetic CAG output: the request has no context to copy from");
  std::size_t history_size = 0;
  for (const auto& h : history) history_size += h.size();
  r.output.clear();
  while (r.output.size() < output_tokens) {
    if (!rng.bernoulli(p.copy_start_prob)) {
      r.output.push_back(zipf_token(rng, zipf));
      ++s.novel_tokens;
      continue;
    }
    const std::size_t want = std::min(span_length(rng, p.mean_span_tokens), output_tokens - r.output.size());
    ++s.spans;
    if (history_size > 0 && rng.bernoulli(p.history_fraction)) {
      ++s.history_spans;
      std::size_t at = rng.uniform_int(history_size), h = 0;
      while (at >= history[h].size()) at -= history[h++].size();
      const std::size_t len = std::min(want, history[h].size() - at);
      s.spans_cut += len < want;
      r.output.insert(r.output.end(), history[h].begin() + static_cast<std::ptrdiff_t>(at),
                      history[h].begin() + static_cast<std::ptrdiff_t>(at + len));
      s.copied_tokens += static_cast<std::int64_t>(len);
      s.history_tokens += static_cast<std::int64_t>(len);
      continue;
    }
    ++s.context_spans;
    const std::size_t at = rng.uniform_int(ctx.size());
    const std::size_t len = std::min(want, ctx.size() - at);
    s.spans_cut += len < want;
    for (std::size_t j = at; j < at + len; ++j) {
      const bool variant = rng.bernoulli(p.variant_prob);
      r.output.push_back(variant ? synth_variant(p, j ? ctx[j - 1] : -1, ctx[j]) : ctx[j]);
      s.variant_tokens += variant;
    }
    s.copied_tokens += static_cast<std::int64_t>(len);
  }
  fill_top_n(r, p, rng, zipf);
  return s;
}

CagSynthStats synthesize_user(std::vector<CagRequestRecord>& requests, const std::vector<std::size_t>& output_lengths,
                              const std::vector<std::vector<int>>& prior, const CagSynthParams& p,
                              std::uint64_t user_index) {
  if (output_lengths.size() != requests.size())
    throw InputError(fmt::format("synthetic CAG user {}: {} output lengths for {} requests", user_index,
                                 output_lengths.size(), requests.size()));
  sim::Rng rng(p.seed, user_index, "traces/cag_synth", "outputs");
  const sim::ZipfSampler zipf(static_cast<std::size_t>(p.vocab - kFirstToken), p.zipf_exponent);
  std::vector<std::vector<int>> history = prior;
  CagSynthStats total;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    total.add(synthesize_output(requests[i], history, output_lengths[i], p, rng, zipf));
    history.push_back(requests[i].output);
  }
  return total;
}

ParamSchema cag_synth_schema() {
  ParamSchema s;
  s.integer("seed", 1, "stream seed (with the user index)").non_negative();
  s.real("copy_start_prob", 0.5, "outside a span: probability that a copied span starts (else one novel token)").range(0, 1);
  s.real("mean_span_tokens", 8, "mean of the geometric copied-span length").range(1, 1e6).with_unit("tokens");
  s.real("history_fraction", 0, "fraction of spans copied from the user's earlier outputs (SAM's history store)").range(0, 1);
  s.real("variant_prob", 0.1, "q: a token copied from the context is replaced by its model-preferred variant").range(0, 1);
  s.real("variant_in_top_n_prob", 0.5, "probability that the prefill top-n before a context token carries its variant")
      .range(0, 1);
  s.integer("top_n", 3, "prefill predictions stored per prompt position").range(1, 64);
  s.integer("vocab", 32000, "token ids in [3, vocab) (Llama 2: 32000)").at_least(8);
  s.real("zipf_exponent", 1.0, "Zipf exponent of context and novel tokens (0: uniform)").range(0, 4);
  s.integer("users", 8, "users (one generated context each)").at_least(1);
  s.integer("requests_per_user", 4, "requests per user, in order (earlier outputs: history)").at_least(1);
  s.integer("context_tokens", 2048, "context length per user").at_least(2).with_unit("tokens");
  s.integer("instruction_tokens", 16, "instruction length per request").non_negative().with_unit("tokens");
  s.integer("output_tokens", 136, "output length per request").at_least(1).with_unit("tokens");
  s.text("task", std::string("summary"), "task label stored with the requests");
  return s;
}

CagSynthParams cag_synth_params(const Params& y) {
  CagSynthParams p;
  p.seed = static_cast<std::uint64_t>(y.integer("seed"));
  p.copy_start_prob = y.real("copy_start_prob");
  p.mean_span_tokens = y.real("mean_span_tokens");
  p.history_fraction = y.real("history_fraction");
  p.variant_prob = y.real("variant_prob");
  p.variant_in_top_n_prob = y.real("variant_in_top_n_prob");
  p.top_n = static_cast<int>(y.integer("top_n"));
  p.vocab = y.integer("vocab");
  p.zipf_exponent = y.real("zipf_exponent");
  p.users = static_cast<int>(std::min<std::int64_t>(y.integer("users"), 1 << 20));
  p.requests_per_user = static_cast<int>(std::min<std::int64_t>(y.integer("requests_per_user"), 1 << 20));
  p.context_tokens = static_cast<int>(std::min<std::int64_t>(y.integer("context_tokens"), 1 << 23));
  p.instruction_tokens = static_cast<int>(std::min<std::int64_t>(y.integer("instruction_tokens"), 1 << 23));
  p.output_tokens = static_cast<int>(std::min<std::int64_t>(y.integer("output_tokens"), 1 << 23));
  p.task = y.text("task");
  p.validate(y.source().where(y.yaml()));
  return p;
}

CagRequestFile synthesize_cag_requests(const CagSynthParams& p, CagSynthStats* stats) {
  p.validate("synthetic CAG requests");
  CagRequestFile f;
  f.source = fmt::format(
      "mobisim cag-synth seed={} copy_start_prob={} mean_span_tokens={} history_fraction={} variant_prob={} "
      "variant_in_top_n_prob={} top_n={} zipf_exponent={}",
      p.seed, p.copy_start_prob, p.mean_span_tokens, p.history_fraction, p.variant_prob, p.variant_in_top_n_prob,
      p.top_n, p.zipf_exponent);
  f.vocab = p.vocab;
  const sim::ZipfSampler zipf(static_cast<std::size_t>(p.vocab - kFirstToken), p.zipf_exponent);
  CagSynthStats total;
  for (int u = 0; u < p.users; ++u) {
    sim::Rng ctx_rng(p.seed, static_cast<std::uint64_t>(u), "traces/cag_synth", "contexts");
    std::vector<int> context(static_cast<std::size_t>(p.context_tokens));
    for (auto& t : context) t = zipf_token(ctx_rng, zipf);
    std::vector<CagRequestRecord> reqs(static_cast<std::size_t>(p.requests_per_user));
    for (auto& r : reqs) {
      r.user_id = fmt::format("synth-u{}", u);
      r.task = p.task;
      r.context = context;
      r.instruction.resize(static_cast<std::size_t>(p.instruction_tokens));
      for (auto& t : r.instruction) t = zipf_token(ctx_rng, zipf);
    }
    const std::vector<std::size_t> lengths(reqs.size(), static_cast<std::size_t>(p.output_tokens));
    total.add(synthesize_user(reqs, lengths, {}, p, static_cast<std::uint64_t>(u)));
    for (auto& r : reqs) f.requests.push_back(std::move(r));
  }
  if (stats) *stats = total;
  return f;
}

}  // namespace mobisim::traces
