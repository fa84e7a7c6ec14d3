#pragma once
// The KV-reuse stage: which leading positions of a prompt already have their K/V stored (on
// flash), and what of a served prompt to store for later requests. Only a prefix can be reused
// exactly (a token's K/V depends on every token before it), so a match is a prefix length.
//
// One implementation = one file pair in this folder, registered with
//   MOBISIM_REGISTER(KvReuse, MyReuse, "my_reuse", "doc");
// and chosen in a pipeline app's YAML as `kv_reuse: {impl: my_reuse, ...}`.
#include <cstdint>
#include <vector>

#include "models/model_spec.h"
#include "policies/pipeline/request.h"

namespace mobisim::policies::pipeline {

struct KvMatch {
  std::int64_t tokens = 0;  // positions [0, tokens) have stored K/V
  double bytes = 0;         // what reading all of them would read
  std::int64_t chunks = 0;  // retrieved chunks among them (a store of chunk slices; 0 otherwise)
  bool rejected = false;    // a stored entry was found but failed verification (and was dropped)
};

// What storing a served prompt did.
struct KvStored {
  double bytes = 0;  // written to flash
  int inserted = 0, evicted = 0;
};

class KvReuse {
 public:
  static constexpr const char* kRegistryKind = "kv_reuse";
  virtual ~KvReuse() = default;
  // `kv_bytes_per_token` of the model whose K/V is stored; called once before any request.
  virtual void begin(double kv_bytes_per_token) { (void)kv_bytes_per_token; }
  // The same with the whole model (what the pipeline calls): a stage whose entries weigh more than
  // the K/V (PerCache's Q/K/V slices) reads it here; by default its K/V bytes per token go to begin().
  virtual void begin_model(const models::ModelSpec& spec) { begin(spec.kv_bytes_per_token()); }
  virtual KvMatch match(const Request& r, double now_s) = 0;
  // The stored files the last match() reads, in prompt order, as token counts, each read whole as
  // its own file (PerCache's slices: the last one may hold more than the match reuses); empty (the
  // default): the reused prefix is one contiguous read. Used when it is loaded from flash whole.
  virtual std::vector<std::int64_t> matched_files() const { return {}; }
  // After the request is served: what is stored for later requests (bytes written to flash).
  virtual KvStored store(const Request& r, double now_s) = 0;
  // Flash the store holds now.
  virtual double stored_bytes() const = 0;
  // Entries evicted so far (for room, or because they failed verification).
  virtual std::int64_t evictions() const { return 0; }
};

}  // namespace mobisim::policies::pipeline
