#pragma once
// `none`: no K/V is stored; every prompt is prefilled from its first token.
#include "policies/pipeline/kv_reuse.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class NoReuse : public KvReuse {
 public:
  explicit NoReuse(const Params&) {}
  static ParamSchema schema() { return {}; }
  KvMatch match(const Request&, double) override { return {}; }
  KvStored store(const Request&, double) override { return {}; }
  double stored_bytes() const override { return 0; }
};

}  // namespace mobisim::policies::pipeline
