#include "policies/kvcache/chat_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "sim/error.h"
#include "sim/rng.h"

namespace mobisim::policies::kvcache {

ParamSchema ChatWorkloadConfig::schema() {
  ChatWorkloadConfig d;
  ParamSchema s;
  s.integer("sessions", d.sessions, "sessions over the day").range(0, 1000000);
  s.real("day_s", d.day_s, "length of the simulated day").positive().with_unit("s");
  s.real("peak_hour", d.peak_hour, "hour of the busiest time of day").range(0, 24).with_unit("h");
  s.real("diurnal_amplitude", d.diurnal_amplitude, "relative swing of the arrival rate").range(0, 0.99);
  s.integer("system_prompts", d.system_prompts, "number of system prompt variants").range(1, 10000);
  s.integer("system_prompt_tokens", d.system_prompt_tokens, "tokens of each system prompt").range(1, 1000000).with_unit("tokens");
  s.real("variant_overlap", d.variant_overlap, "share of tokens a variant has in common with the base prompt").range(0, 1);
  s.int_list("variant_diverge_at", d.variant_diverge_at, "first differing token of variants 1, 2, ...").range(0, 1000000);
  s.real("top_prompt_share", d.top_prompt_share, "share of sessions using the most popular prompt (variant 0)").range(0, 1);
  s.real("custom_prompt_share", d.custom_prompt_share, "share of sessions with a one-off system prompt").range(0, 1);
  s.real("context_tokens_median", d.context_tokens_median, "user context tokens (lognormal median)").range(0, 100000);
  s.real("context_tokens_sigma", d.context_tokens_sigma, "lognormal sigma of the user context").range(0, 4);
  s.real("history_prob", d.history_prob, "share of sessions that carry conversation history").range(0, 1);
  s.real("history_tokens_median", d.history_tokens_median, "history tokens (lognormal median)").range(0, 100000);
  s.real("history_tokens_sigma", d.history_tokens_sigma, "lognormal sigma of the history").range(0, 4);
  s.real("user_tokens_median", d.user_tokens_median, "user message tokens (lognormal median)").range(0, 100000).positive();
  s.real("user_tokens_sigma", d.user_tokens_sigma, "lognormal sigma of the user message").range(0, 4);
  s.integer("vocab", d.vocab, "token ids are drawn from [0, vocab)").range(2, 2147483648.0);
  return s;
}

ChatWorkloadConfig ChatWorkloadConfig::from_params(const Params& p) {
  ChatWorkloadConfig c;
  c.sessions = p.integer("sessions");
  c.day_s = p.real("day_s");
  c.peak_hour = p.real("peak_hour");
  c.diurnal_amplitude = p.real("diurnal_amplitude");
  c.system_prompts = p.integer("system_prompts");
  c.system_prompt_tokens = p.integer("system_prompt_tokens");
  c.variant_overlap = p.real("variant_overlap");
  c.variant_diverge_at = p.int_list("variant_diverge_at");
  c.top_prompt_share = p.real("top_prompt_share");
  c.custom_prompt_share = p.real("custom_prompt_share");
  c.context_tokens_median = p.real("context_tokens_median");
  c.context_tokens_sigma = p.real("context_tokens_sigma");
  c.history_prob = p.real("history_prob");
  c.history_tokens_median = p.real("history_tokens_median");
  c.history_tokens_sigma = p.real("history_tokens_sigma");
  c.user_tokens_median = p.real("user_tokens_median");
  c.user_tokens_sigma = p.real("user_tokens_sigma");
  c.vocab = p.integer("vocab");
  if (static_cast<std::int64_t>(c.variant_diverge_at.size()) < c.system_prompts - 1)
    p.fail("variant_diverge_at", fmt::format("needs {} entries (one per variant after the first), has {}",
                                             c.system_prompts - 1, c.variant_diverge_at.size()));
  for (auto d : c.variant_diverge_at)
    if (d < 0 || d >= c.system_prompt_tokens)
      p.fail("variant_diverge_at", fmt::format("{} is outside [0, system_prompt_tokens = {})", d, c.system_prompt_tokens));
  if (c.top_prompt_share + c.custom_prompt_share > 1)
    p.fail("custom_prompt_share", "top_prompt_share + custom_prompt_share must be <= 1");
  return c;
}

namespace {
std::int64_t lognormal_tokens(sim::Rng& rng, double median, double sigma) {
  if (median <= 0) return 0;
  // A sample is capped at 2^20 tokens (beyond every model's context), so a long tail cannot size
  // a prompt beyond memory; with the documented ranges the cap is practically never reached.
  constexpr double kMaxTokens = 1 << 20;
  return std::max<std::int64_t>(1, std::llround(std::min(rng.lognormal(std::log(median), sigma), kMaxTokens)));
}
std::int32_t token(sim::Rng& rng, std::int64_t vocab) { return static_cast<std::int32_t>(rng.uniform_int(static_cast<std::uint64_t>(vocab))); }
}  // namespace

std::vector<ChatSession> generate_chat_sessions(const ChatWorkloadConfig& cfg, std::uint64_t seed, std::uint64_t run) {
  sim::Rng prompts(seed, run, "chat_workload", "system_prompts");
  const std::int64_t n = cfg.system_prompt_tokens;
  std::vector<std::vector<std::int32_t>> variants(static_cast<std::size_t>(cfg.system_prompts));
  for (std::int64_t i = 0; i < n; ++i) variants[0].push_back(token(prompts, cfg.vocab));
  const auto span_len = static_cast<std::int64_t>(std::llround((1.0 - cfg.variant_overlap) * static_cast<double>(n)));
  for (std::size_t v = 1; v < variants.size(); ++v) {
    variants[v] = variants[0];
    const std::int64_t from = cfg.variant_diverge_at[v - 1];
    for (std::int64_t i = from; i < std::min(n, from + std::max<std::int64_t>(span_len, 1)); ++i) {
      std::int32_t t;
      do t = token(prompts, cfg.vocab);
      while (t == variants[0][static_cast<std::size_t>(i)]);  // really differs at the divergence point
      variants[v][static_cast<std::size_t>(i)] = t;
    }
  }
  sim::Rng arrivals(seed, run, "chat_workload", "arrivals");
  sim::Rng choice(seed, run, "chat_workload", "variant");
  sim::Rng body(seed, run, "chat_workload", "body");
  std::vector<double> times;
  const double peak_s = cfg.peak_hour / 24.0 * cfg.day_s;
  while (static_cast<std::int64_t>(times.size()) < cfg.sessions) {
    const double t = arrivals.uniform(0.0, cfg.day_s);
    const double rate = 1.0 + cfg.diurnal_amplitude * std::cos(2 * std::numbers::pi * (t - peak_s) / cfg.day_s);
    if (arrivals.uniform() * (1.0 + cfg.diurnal_amplitude) <= rate) times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  std::vector<ChatSession> out;
  out.reserve(times.size());
  for (double t : times) {
    ChatSession s;
    s.arrival_s = t;
    const double u = choice.uniform();
    if (u < cfg.top_prompt_share || cfg.system_prompts == 1) {
      s.variant = 0;
    } else if (u < cfg.top_prompt_share + cfg.custom_prompt_share) {
      s.variant = -1;
    } else {
      s.variant = 1 + static_cast<int>(choice.uniform_int(static_cast<std::uint64_t>(cfg.system_prompts - 1)));
    }
    if (s.variant >= 0) {
      s.tokens = variants[static_cast<std::size_t>(s.variant)];
    } else {
      for (std::int64_t i = 0; i < n; ++i) s.tokens.push_back(token(body, cfg.vocab));
    }
    s.system_tokens = n;
    s.context_tokens = lognormal_tokens(body, cfg.context_tokens_median, cfg.context_tokens_sigma);
    s.history_tokens = body.bernoulli(cfg.history_prob)
                           ? lognormal_tokens(body, cfg.history_tokens_median, cfg.history_tokens_sigma)
                           : 0;
    s.user_tokens = lognormal_tokens(body, cfg.user_tokens_median, cfg.user_tokens_sigma);
    for (std::int64_t i = 0; i < s.context_tokens + s.history_tokens + s.user_tokens; ++i)
      s.tokens.push_back(token(body, cfg.vocab));
    out.push_back(std::move(s));
  }
  return out;
}

traces::ChatTrace to_chat_trace(const std::vector<ChatSession>& sessions, const ChatWorkloadConfig& cfg,
                                const std::string& source, const std::string& params_yaml) {
  traces::ChatTrace t;
  t.source = source;
  t.tokenizer = "synthetic:uniform-ids";
  t.vocab = cfg.vocab;
  t.system_prompts = cfg.system_prompts;
  t.params_yaml = params_yaml;
  t.sessions.reserve(sessions.size());
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    const ChatSession& s = sessions[i];
    traces::ChatSessionTrace x;
    x.session_id = fmt::format("chat{:05d}", i);
    x.user_id = "user0";
    x.system_prompt_variant = s.variant;
    auto turn = [&](const char* role, std::int64_t tokens) {
      x.turns.push_back({role, "", static_cast<std::int32_t>(tokens), s.arrival_s, 0});
    };
    turn("system", s.system_tokens);
    if (s.context_tokens > 0) turn("context", s.context_tokens);
    if (s.history_tokens > 0) turn("history", s.history_tokens);
    turn("user", s.user_tokens);
    x.prompt_token_ids = s.tokens;
    t.sessions.push_back(std::move(x));
  }
  return t;
}

std::vector<ChatSession> sessions_from_chat_trace(const traces::ChatTrace& trace) {
  std::vector<ChatSession> out;
  for (const auto& s : trace.sessions) {
    const std::int64_t sys = s.system_tokens();
    std::int64_t end = 0, context = 0;
    for (const auto& turn : s.turns) {
      end += turn.tokens;
      if (turn.role == "context") context += turn.tokens;
      if (turn.role != "user") continue;
      ChatSession c;
      c.arrival_s = turn.arrival_s;
      c.variant = static_cast<int>(s.system_prompt_variant);
      c.system_tokens = sys;
      c.context_tokens = context;
      c.user_tokens = turn.tokens;
      c.history_tokens = end - sys - context - turn.tokens;
      c.tokens.assign(s.prompt_token_ids.begin(), s.prompt_token_ids.begin() + end);
      out.push_back(std::move(c));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ChatSession& a, const ChatSession& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

}  // namespace mobisim::policies::kvcache
