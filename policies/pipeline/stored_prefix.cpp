#include "policies/pipeline/stored_prefix.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

StoredPrefix::StoredPrefix(const Params& p) : kind_(p.text("kind")) {}

ParamSchema StoredPrefix::schema() {
  ParamSchema s;
  s.text("kind", std::string("stored"), "segment kind whose K/V is on flash when the prompt leads with it");
  return s;
}

KvMatch StoredPrefix::match(const Request& r, double) {
  KvMatch m;
  for (const Segment& seg : r.prompt) {
    if (seg.kind != kind_) break;  // only a prefix can be reused
    m.tokens += seg.tokens;
  }
  m.bytes = static_cast<double>(m.tokens) * kv_bytes_per_token_;
  return m;
}

MOBISIM_REGISTER(KvReuse, StoredPrefix, "stored_prefix",
                 "The prompt's leading segments of one kind (default 'stored') have K/V on flash already.")

}  // namespace mobisim::policies::pipeline
