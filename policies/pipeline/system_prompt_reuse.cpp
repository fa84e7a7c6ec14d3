#include "policies/pipeline/system_prompt_reuse.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

std::int64_t SystemPromptReuse::system_tokens(const Request& r) {
  return !r.prompt.empty() && r.prompt.front().kind == "system" ? r.prompt.front().tokens : 0;
}

KvMatch SystemPromptReuse::match(const Request& r, double) {
  const std::int64_t n = std::min(stored_tokens_, system_tokens(r));
  return KvMatch{n, static_cast<double>(n) * bytes_per_token_};
}

KvStored SystemPromptReuse::store(const Request& r, double) {
  if (stored_tokens_ > 0) return {};  // stored once
  stored_tokens_ = system_tokens(r);
  return KvStored{stored_bytes(), stored_tokens_ > 0 ? 1 : 0, 0};
}

MOBISIM_REGISTER(KvReuse, SystemPromptReuse, "system_prompt",
                 "Keeps only the system prompt's K/V on flash and reuses it for every later request.")

}  // namespace mobisim::policies::pipeline
