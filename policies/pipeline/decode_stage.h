#pragma once
// The decode stage: how a request's answer is generated once the prefill has given its first
// token. One implementation = one file pair in this folder, registered with
//   MOBISIM_REGISTER(DecodeStage, MyDecode, "my_decode", "doc");
// and chosen in a pipeline app's YAML as `decode: {impl: my_decode, ...}`.
//
//   vanilla       one token per step on a unit (the default)
//   speculative   a CoordGen-document policy (coordgen, npu_sam, npu_pld, npu_eagle, ...): draft
//                 and verify, with the policy's own accept lengths and draft/verify costs (with
//                 `prefill: coordgen`, the policy's own prefill too)
//
// A stage issues its work as events on the Device (compute_for / busy on the unit it names, at
// the request's priority), calls the KV-residency stage before every step that attends the
// cache, and holds what it keeps in DRAM (graphs, drafters) in the ledger.
#include <cstdint>
#include <string>

#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/pipeline/kv_residency.h"
#include "policies/pipeline/request.h"

namespace mobisim::policies::pipeline {

// What a decode stage is handed for one request.
struct DecodeJob {
  devices::Device& device;
  const models::CostModel& cost;
  const Request& request;
  std::int64_t prompt_tokens = 0;  // cached positions when the first answer token is out
  int priority = 0;
  std::string owner;               // the app's DRAM owner prefix ("<app>")
  KvResidency& residency;
  double& active_energy_j;         // the request's marginal energy: the stage adds its own work's
};

// What it reports back (the app's records).
struct Decoded {
  std::int64_t steps = 0;      // verifications (vanilla: one per token after the first)
  double accepted_per_step = 0;  // mean draft tokens accepted per verification (vanilla: 0)
  double estimate_s = -1;        // the stage's closed-form time for the request, when it has one
};

class DecodeStage {
 public:
  static constexpr const char* kRegistryKind = "decode";
  virtual ~DecodeStage() = default;
  // Before the first request, on the phone: what the stage sets up.
  virtual void begin(devices::Device& device, const models::CostModel& cost) {
    (void)device;
    (void)cost;
  }
  // Before the prefill stage runs for `r` (`prompt_tokens` in all): a stage that plans the whole
  // request, its prefill included (`speculative` paired with `prefill: coordgen`), plans it here.
  virtual void plan_request(const Request& r, std::int64_t prompt_tokens, const models::CostModel& cost) {
    (void)r;
    (void)prompt_tokens;
    (void)cost;
  }
  // Generates the request's answer after its first token (output_tokens - 1 more tokens). `job`
  // must outlive the returned task (a named local of the awaiting coroutine: g++ 12 destroys a
  // temporary with a std::string in a co_await expression twice).
  virtual sim::Task<void> run(const DecodeJob& job, Decoded& out) = 0;
  // The unit that verifies / decodes (for the records).
  virtual std::string unit() const = 0;
};

}  // namespace mobisim::policies::pipeline
