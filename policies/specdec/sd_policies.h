#pragma once
// The section 4.1 policies as configurable classes, registered under the document's names (each
// name sets its defaults; every knob is in its schema):
//
//   PlainDecodePolicy  npu_vanilla  NPU prefill on G_p, synchronous switch to G_d, NPU decode
//                      npu_graph    (+G) the same with progressive graph scheduling
//                      cpu_vanilla  NPU prefill, CPU decode (CPU keeps its own weights)
//   RetrievalSdPolicy  npu_pld, npu_sam, cpu_sam        retrieval SD (synchronous switch on NPU)
//                      npu_sam_graph (+G+SD)            SAM with progressive scheduling
//                      coordgen                          SAM + calibration + reuse + progressive
//                      pld_ours, sam_ours               Table 4's PLD+ours / SAM+ours (no +G)
//   EaglePolicy        npu_eagle, cpu_eagle             EAGLE-2 simulated as the document does:
//                      draft model = one transformer layer + the target's LM head, run `draft_depth`
//                      times per step, at most 5.5 tokens accepted per step.
#include <optional>
#include <string>

#include "policies/specdec/specdec_policy.h"
#include "sim/params.h"

namespace mobisim::policies::specdec {

enum class DecodeUnit { kNpu, kCpu };

class PlainDecodePolicy : public SpecDecPolicy {
 public:
  PlainDecodePolicy(const Params& p, std::string name, DecodeUnit unit, SwitchStrategy sw);
  static ParamSchema schema(SwitchStrategy default_switch);
  std::optional<DrafterOptions> drafter() const override { return std::nullopt; }
  RequestBreakdown run(const SpecDecEnv& env, std::int64_t prompt_tokens, const DecodeTrace& trace) const override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
  DecodeUnit unit_;
  SwitchStrategy switch_;
  PolicyKnobs k_;
};

class RetrievalSdPolicy : public SpecDecPolicy {
 public:
  RetrievalSdPolicy(const Params& p, std::string name, DecodeUnit unit);
  static ParamSchema schema(const std::string& retriever, SwitchStrategy sw, bool coordgen);
  std::optional<DrafterOptions> drafter() const override { return drafter_; }
  RequestBreakdown run(const SpecDecEnv& env, std::int64_t prompt_tokens, const DecodeTrace& trace) const override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
  DecodeUnit unit_;
  SwitchStrategy switch_;
  PolicyKnobs k_;
  DrafterOptions drafter_;
};

// Bytes EAGLE-2's drafter holds beside `target` (the model it drafts for, on the unit that decodes):
// one decoder layer and the [2 hidden -> hidden] fc at the target's linear dtype, and an embedding
// table of its own at k.embedding_dtype; it shares the target's LM head (docs/coordgen.md, Memory).
double eagle_drafter_bytes(const models::ModelSpec& target, const PolicyKnobs& k);

class EaglePolicy : public SpecDecPolicy {
 public:
  EaglePolicy(const Params& p, std::string name, DecodeUnit unit);
  static ParamSchema schema();
  std::optional<DrafterOptions> drafter() const override { return std::nullopt; }
  RequestBreakdown run(const SpecDecEnv& env, std::int64_t prompt_tokens, const DecodeTrace& trace) const override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
  DecodeUnit unit_;
  PolicyKnobs k_;
  double tokens_per_step_ = 5.5;
  int draft_depth_ = 6;
  int draft_topk_ = 10;
};

}  // namespace mobisim::policies::specdec
