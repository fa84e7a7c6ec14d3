#pragma once
// `system_prompt`: keeps only the K/V of the system prompt that opens every prompt (what many
// assistants cache), stored once on flash; every later request reuses it.
#include "policies/pipeline/kv_reuse.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class SystemPromptReuse : public KvReuse {
 public:
  explicit SystemPromptReuse(const Params&) {}
  static ParamSchema schema() { return {}; }
  void begin(double kv_bytes_per_token) override { bytes_per_token_ = kv_bytes_per_token; }
  KvMatch match(const Request& r, double now_s) override;
  KvStored store(const Request& r, double now_s) override;
  double stored_bytes() const override { return static_cast<double>(stored_tokens_) * bytes_per_token_; }

 private:
  static std::int64_t system_tokens(const Request& r);
  double bytes_per_token_ = 0;
  std::int64_t stored_tokens_ = 0;  // 0 until the first request's system prompt is stored
};

}  // namespace mobisim::policies::pipeline
