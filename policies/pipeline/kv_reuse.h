#pragma once
// The KV-reuse stage: which leading positions of a prompt already have their K/V stored (on
// flash), and what of a served prompt to store for later requests. Only a prefix can be reused
// exactly (a token's K/V depends on every token before it), so a match is a prefix length.
//
// One implementation = one file pair in this folder, registered with
//   MOBISIM_REGISTER(KvReuse, MyReuse, "my_reuse", "doc");
// and chosen in a pipeline app's YAML as `kv_reuse: {impl: my_reuse, ...}`.
#include <cstdint>

#include "policies/pipeline/request.h"

namespace mobisim::policies::pipeline {

struct KvMatch {
  std::int64_t tokens = 0;  // positions [0, tokens) have stored K/V
  double bytes = 0;         // what reading all of them would read
};

class KvReuse {
 public:
  static constexpr const char* kRegistryKind = "kv_reuse";
  virtual ~KvReuse() = default;
  // `kv_bytes_per_token` of the model whose K/V is stored; called once before any request.
  virtual void begin(double kv_bytes_per_token) { (void)kv_bytes_per_token; }
  virtual KvMatch match(const Request& r, double now_s) = 0;
  // After the request is served: bytes written to flash for later requests (0: nothing stored).
  virtual double store(const Request& r, double now_s) = 0;
  // Flash the store holds now.
  virtual double stored_bytes() const = 0;
};

}  // namespace mobisim::policies::pipeline
