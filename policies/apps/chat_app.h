#pragma once
// `chat`: a long-decoding chat assistant. One conversation of `requests` turns: each turn sends
// `prompt_tokens` new tokens and decodes `output_tokens`; the user sends the next turn
// `think_time_s` after the previous answer ends. With `keep_history`, the conversation's KV stays
// in DRAM between turns and the next prefill attends to it (only the new tokens are computed);
// when the phone's DRAM cannot hold the history beside everything else, the app drops it and
// recomputes the conversation, keeping of it only the most recent tokens whose KV fits
// (history_dropped, truncated_tokens in its records). A turn whose own tokens do not fit stops
// the run (DramOverflow).
//
// Parameters (besides priority and start_s, see app.h):
//   model          built-in name, YAML path or {base: NAME, field: override}
//   unit           compute unit that prefills and decodes (cpu, gpu, npu, ...)
//   requests       turns of the conversation
//   prompt_tokens  new tokens per turn
//   output_tokens  tokens decoded per turn (>= 1: the first comes out of the prefill's logits)
//   think_time_s   from an answer's last token to the next turn's arrival
//   keep_history   keep the conversation's KV in DRAM between turns
#include <memory>
#include <vector>

#include "models/cost_model.h"
#include "policies/apps/app.h"
#include "policies/pipeline/decode_costs.h"

namespace mobisim::policies {

class ChatApp : public App {
 public:
  explicit ChatApp(const Params& p);
  static ParamSchema schema();

  void prepare(const AppEnvironment& env) override;
  std::vector<std::pair<std::string, double>> resident_dram() const override;
  sim::Task<void> run(devices::Device& device, std::string owner, sim::StatGroup& stats) override;
  void records(h5::Table& out) const override;
  AppTotals totals() const override;
  YAML::Node resolved() const override { return resolved_; }
  std::string model_name() const override { return cost_.spec().name; }
  std::string unit() const override { return unit_; }

 private:
  struct Turn {
    RequestTimes times;
    std::int64_t computed_tokens = 0, cached_tokens = 0, truncated_tokens = 0;
    double kv_bytes = 0;
    bool history_dropped = false;
  };
  // Holds the KV of this turn's conversation in DRAM (see above); returns its tokens, and may
  // drop the history and cut the oldest tokens of `context`.
  std::int64_t hold_turn_kv(devices::Dram& dram, const std::string& owner, std::int64_t& context,
                            std::int64_t& history, Turn& t) const;

  models::CostModel cost_;
  std::string unit_;
  std::int64_t requests_, prompt_tokens_, output_tokens_;
  double think_time_s_;
  bool keep_history_;
  YAML::Node resolved_;
  pipeline::DecodeCosts decode_{cost_, unit_};
  std::vector<Turn> turns_;
};

}  // namespace mobisim::policies
