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

}  // namespace mobisim::policies::kvcache
