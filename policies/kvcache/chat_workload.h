#pragma once
// Chat-session workload for the prefix cache (seed 001): sessions over a day
// that start with one of a few system prompts, then user context, conversation
// history and the user's message:
//
//   [system prompt (~180)] [user context] [history (some sessions)] [user message]
//
// The system prompts are `system_prompts` variants of one base prompt: variant 0
// is the base; variant v >= 1 replaces a span of round((1 - overlap) x length)
// tokens starting at `variant_diverge_at[v-1]`, so variants share the prefix up
// to their divergence point (~90% of tokens in common). `top_prompt_share` of the
// sessions (40%) use variant 0, `custom_prompt_share` a one-off prompt, the rest
// the other variants uniformly. Arrivals follow a diurnal rate over `day_s`
// (1 + amplitude x cos(2 pi (t - peak) / day)), sampled by rejection.
#include <cstdint>
#include <vector>

#include "sim/params.h"
#include "traces/chat_trace.h"

namespace mobisim::policies::kvcache {

struct ChatWorkloadConfig {
  std::int64_t sessions = 600;
  double day_s = 86400;
  double peak_hour = 20;           // local time of the busiest hour
  double diurnal_amplitude = 0.6;  // in [0, 1)
  std::int64_t system_prompts = 5;
  std::int64_t system_prompt_tokens = 180;
  double variant_overlap = 0.9;
  std::vector<std::int64_t> variant_diverge_at{40, 100, 140, 160};
  double top_prompt_share = 0.4;
  double custom_prompt_share = 0.05;
  double context_tokens_median = 24, context_tokens_sigma = 0.4;
  double history_prob = 0.3;
  double history_tokens_median = 120, history_tokens_sigma = 0.6;
  double user_tokens_median = 40, user_tokens_sigma = 0.5;
  std::int64_t vocab = 50000;

  static ParamSchema schema();
  static ChatWorkloadConfig from_params(const Params& p);
};

struct ChatSession {
  double arrival_s = 0;
  int variant = 0;                 // system prompt variant; -1 for a one-off custom prompt
  std::int64_t system_tokens = 0;  // the cacheable prefix: tokens[0, system_tokens)
  std::int64_t context_tokens = 0, history_tokens = 0, user_tokens = 0;
  std::vector<std::int32_t> tokens;
};

// Deterministic for (config, seed, run).
std::vector<ChatSession> generate_chat_sessions(const ChatWorkloadConfig& cfg, std::uint64_t seed, std::uint64_t run);

// Generator sessions as a chat trace (traces/SCHEMA.md): one trace session per
// generated session, user "user0", turns [system, context (if > 0 tokens),
// history (if > 0 tokens), user], all at the session's arrival, prefix_tokens 0
// (each generated session is one request). `source` and `params_yaml` are
// recorded as given.
traces::ChatTrace to_chat_trace(const std::vector<ChatSession>& sessions, const ChatWorkloadConfig& cfg,
                                const std::string& source, const std::string& params_yaml);

// The requests of a chat trace as ChatSessions, in arrival order (stable): one
// per `user` turn, whose prompt is the session's token stream up to the end of
// that turn; system_tokens = the leading system turns, context_tokens = the
// context turns before it, user_tokens = the turn, history_tokens = the rest.
// to_chat_trace followed by this gives back the generator's sessions exactly.
std::vector<ChatSession> sessions_from_chat_trace(const traces::ChatTrace& trace);

}  // namespace mobisim::policies::kvcache
