#pragma once
// `stored_prefix`: the request says what is stored. The prompt's leading segments of kind `kind`
// (default "stored") have their K/V on flash already, put there before the run; nothing is
// written after a request. What a document's measurement of the split alone needs (the
// KVPR/Cake figures: a prefix of s tokens is stored, how fast does it come back?).
#include <string>

#include "policies/pipeline/kv_reuse.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class StoredPrefix : public KvReuse {
 public:
  explicit StoredPrefix(const Params& p);
  static ParamSchema schema();
  void begin(double kv_bytes_per_token) override { kv_bytes_per_token_ = kv_bytes_per_token; }
  KvMatch match(const Request& r, double now_s) override;
  KvStored store(const Request&, double) override { return {}; }
  double stored_bytes() const override { return 0; }

 private:
  std::string kind_;
  double kv_bytes_per_token_ = 0;
};

}  // namespace mobisim::policies::pipeline
