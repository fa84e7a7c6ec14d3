#include "policies/pipeline/speculative_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "policies/specdec/retrieval_drafter.h"
#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies::pipeline {

namespace {

const std::string kSpeculativeStage = "decode: speculative";

traces::CagSynthParams synth_params(const Params& p) {
  const YAML::Node given = p.has("outputs") ? p.node("outputs") : YAML::Node(YAML::NodeType::Map);
  const Params y(given, traces::cag_synth_schema(), p.source_of("outputs"), {});
  traces::CagSynthParams s = traces::cag_synth_params(y);
  s.validate(p.source_of("outputs").where(given));
  return s;
}

std::unique_ptr<specdec::SpecDecPolicy> make_policy(const Params& p) {
  if (!p.has("policy"))
    p.fail("policy", "the speculative decode stage needs a CoordGen-document policy, e.g. policy: {impl: coordgen}");
  return Registry<specdec::SpecDecPolicy>::instance().create(p.node("policy"), p.source_of("policy"));
}

// Main-chain phases of the prefill and of what follows it in closed form (this stage issues the
// exposed switch and calibration itself).
bool before_decoding(const specdec::Phase& ph) {
  return ph.background || ph.label == "prefill" || ph.label == "prefill attention" || ph.label == "prefill lm head" ||
         ph.label == "graph switch" || ph.label == "calibration";
}

// The cached positions each verification of `p` attends: the prompt plus what the steps before it
// produced, when the policy verifies once per step of its acceptance trace; otherwise (the
// closed-form policies: EAGLE, plain decoding) spread evenly over the answer.
std::vector<std::int64_t> verification_contexts(const SpeculativeDecode::Plan& p, std::int64_t prompt_tokens) {
  const specdec::RequestBreakdown& b = p.breakdown;
  std::int64_t verifies = 0;
  for (const specdec::Phase& ph : b.phases) verifies += !before_decoding(ph) && ph.label == "verify";
  const bool exact = static_cast<std::int64_t>(p.trace.steps.size()) == verifies;
  std::vector<std::int64_t> context;
  for (std::int64_t v = 0, c = prompt_tokens; v < verifies; ++v) {
    context.push_back(exact ? c : prompt_tokens + v * b.output_tokens / std::max<std::int64_t>(1, verifies));
    if (exact) c += 1 + p.trace.steps[static_cast<std::size_t>(v)].accepted;
  }
  return context;
}

}  // namespace

SpeculativeDecode::SpeculativeDecode(const Params& p)
    : policy_(make_policy(p)),
      synth_(synth_params(p)),
      rng_(synth_.seed, 0, "pipeline/decode/speculative", "outputs"),
      zipf_(static_cast<std::size_t>(synth_.vocab - 3), synth_.zipf_exponent) {}  // ids 0-2: specials

SpeculativeDecode::~SpeculativeDecode() = default;

ParamSchema SpeculativeDecode::schema() {
  ParamSchema s;
  s.node("policy",
         "the CoordGen-document policy: {impl: coordgen|npu_sam|npu_pld|npu_sam_graph|sam_ours|pld_ours|cpu_sam|"
         "npu_eagle|cpu_eagle|npu_vanilla|npu_graph|cpu_vanilla, ...} (required)");
  s.node("outputs",
         "answer tokens for the drafter (traces/cag_synth.h): {seed, copy_start_prob, mean_span_tokens, "
         "history_fraction, variant_prob, variant_in_top_n_prob, top_n, vocab, zipf_exponent} (default: its defaults)");
  return s;
}

void SpeculativeDecode::begin(devices::Device& device, const models::CostModel& cost) {
  const devices::DeviceProfile& phone = device.profile();
  specdec::require_energy_values(phone, "decode: speculative");
  env_ = std::make_unique<specdec::SpecDecEnv>(specdec::SpecDecEnv{
      phone.require_npu("decode: speculative"), phone.unit("cpu", "decode: speculative"), phone.base_power_w, cost,
      cost});
  // Where the policy verifies: its phases for a one-token request.
  specdec::DecodeTrace one;
  one.steps.push_back({0, 0});
  for (const specdec::Phase& ph : policy_->run(*env_, 1, one).phases)
    if (ph.label == "verify") unit_ = ph.unit;
}

SpeculativeDecode::Plan SpeculativeDecode::plan(const std::vector<std::int32_t>& prompt, std::int64_t output_tokens) {
  if (!env_) throw Error("internal: decode stage 'speculative' planned before begin()");
  traces::CagRequestRecord rec;
  rec.context.assign(prompt.begin(), prompt.end());
  traces::synthesize_output(rec, past_outputs_, static_cast<std::size_t>(output_tokens), synth_, rng_, zipf_);
  Plan out;
  if (std::optional<specdec::DrafterOptions> opt = policy_->drafter()) {
    // The prefill's top-n after every prompt position, as many ranks as calibration samples.
    specdec::PrefillPredictions pred;
    if (opt->calibrate)
      for (const auto& row : rec.top_ids)
        pred.next.emplace_back(row.begin(),
                               row.begin() + std::min<std::ptrdiff_t>(opt->calibration.top_n,
                                                                      static_cast<std::ptrdiff_t>(row.size())));
    specdec::CoordGenDrafter d(*opt, &history_);
    out.trace = specdec::replay_decode(rec.context, rec.output, d, opt->calibrate ? &pred : nullptr);
  } else {
    out.trace.steps.assign(rec.output.size(), {0, 0});
  }
  history_.add(rec.output);
  past_outputs_.push_back(rec.output);
  out.breakdown = policy_->run(*env_, static_cast<std::int64_t>(prompt.size()), out.trace);
  return out;
}

std::shared_ptr<PolicyPlan> SpeculativeDecode::pair_with_prefill() {
  if (!paired_) paired_ = std::make_shared<PolicyPlan>();
  return paired_;
}

void SpeculativeDecode::plan_request(const Request& r, std::int64_t prompt_tokens, const models::CostModel& cost) {
  if (!paired_) return;  // alone, the stage plans when it runs (after the pipeline's own prefill)
  current_ = plan(r.token_ids(), r.output_tokens);
  const specdec::RequestBreakdown& b = current_.breakdown;
  // What the policy holds beyond the K/V (the KV-residency stage's) and the CPU weight copy the app holds.
  const double kv = cost.spec().kv_bytes_per_token() * static_cast<double>(prompt_tokens + b.output_tokens);
  const double held = unit_ == "cpu" ? cost.spec().weight_bytes() : 0.0;
  paired_->set(b.phases, b.peak_memory_bytes - kv - held);
}

// The policy's phases after its prefill (the prefill stage issued the rest), as the coordgen
// driver's decode stage issues them; their marginal energy is the request's.
// A KV-residency stage that reads per step (DynaKV's clusters on flash) puts each verification's
// reads beside it, as alone.
sim::Task<void> SpeculativeDecode::run_paired(const DecodeJob& job, Decoded& out) {
  const specdec::RequestBreakdown& b = current_.breakdown;
  out.steps = b.steps;
  out.accepted_per_step = b.mean_accepted;
  out.estimate_s = b.total_s() - b.prefill_s;
  specdec::PhaseReplay::VerifyWrap with_reads;
  if (job.residency.reads_per_step())
    with_reads = [&job, context = verification_contexts(current_, job.prompt_tokens)](std::int64_t v,
                                                                                      sim::Task<void> compute) {
      if (v >= static_cast<std::int64_t>(context.size())) return compute;
      return with_step_reads(job.device, job.residency, context[static_cast<std::size_t>(v)], std::move(compute));
    };
  co_await paired_->rest(job.device, job.priority, std::move(with_reads));
  const specdec::PhaseReplay& replay = paired_->replay();
  for (std::size_t i = 0; i < replay.phases().size(); ++i) {
    const specdec::Phase& ph = replay.phases()[i];
    if (!ph.background && !replay.is_prefill_phase(i))
      job.active_energy_j +=
          phase_marginal_energy_j(job.device.profile(), ph.unit, ph.seconds, ph.power_w, kSpeculativeStage);
  }
}

sim::Task<void> SpeculativeDecode::run(const DecodeJob& job, Decoded& out) {
  if (paired_) {
    co_await run_paired(job, out);
    co_return;
  }
  devices::Device& device = job.device;
  const devices::DeviceProfile& phone = device.profile();
  const std::int64_t n = job.prompt_tokens;
  const Plan p = plan(job.request.token_ids(), job.request.output_tokens);
  const specdec::RequestBreakdown& b = p.breakdown;
  out.steps = b.steps;
  out.accepted_per_step = b.mean_accepted;
  out.estimate_s = b.total_s() - b.prefill_s;

  // What the policy holds beyond the K/V and the weight copies the app already holds.
  const std::string decoder = job.owner + "/decoder";
  const double kv = job.cost.spec().kv_bytes_per_token() * static_cast<double>(n + b.output_tokens);
  const double held = device.dram().held_by(job.owner + "/npu_graph") +
                      (unit_ == "cpu" ? job.cost.spec().weight_bytes() : 0.0);
  const double extra = std::max(0.0, b.peak_memory_bytes - kv - held);
  if (extra > 0) device.dram().reserve(decoder, extra);

  // (string_view arguments: a temporary std::string in a co_await expression is what g++ 12
  // destroys twice, see decode_stage.h)
  // Each phase at the power it draws (phase_marginal_energy_j), as the coordgen driver's replay.
  auto issue = [&](std::string_view unit_name, double seconds, std::string_view label,
                   std::optional<double> power_w) -> sim::Task<void> {
    const std::string unit(unit_name);
    const std::string what(label);
    if (power_w)
      co_await device.busy_drawing(unit, sim::from_seconds(seconds), *power_w, what, job.priority);
    else
      co_await device.busy(unit, sim::from_seconds(seconds), what, job.priority);
    job.active_energy_j += phase_marginal_energy_j(phone, unit, seconds, power_w, kSpeculativeStage);
  };
  // Calibration samples on the runtime's calling thread: one core (specdec_policy.h, Energy).
  const double sampling_w = env_->cpu.single_thread_power();
  if (b.switch_s > 0) co_await issue("npu", b.switch_s, "graph switch", std::nullopt);
  if (b.calibration_s > 0) co_await issue("cpu", b.calibration_s, "calibration", sampling_w);
  if (b.calibration_cpu_s > b.calibration_s)  // sampling hidden behind the prefill: CPU energy, no time
    job.active_energy_j += phase_marginal_energy_j(phone, "cpu", b.calibration_cpu_s - b.calibration_s, sampling_w,
                                                    kSpeculativeStage);

  const std::vector<std::int64_t> context = verification_contexts(p, n);
  const bool reads = job.residency.reads_per_step();
  std::size_t v = 0;
  for (const specdec::Phase& ph : b.phases) {
    if (before_decoding(ph)) continue;
    if (ph.label == "verify" && reads && v < context.size())  // the verification attends the cache
      co_await with_step_reads(device, job.residency, context[v++], issue(ph.unit, ph.seconds, ph.label, ph.power_w));
    else
      co_await issue(ph.unit, ph.seconds, ph.label, ph.power_w);
  }
  if (extra > 0) device.dram().release(decoder, extra);
}

MOBISIM_REGISTER(DecodeStage, SpeculativeDecode, "speculative",
                 "A CoordGen-document policy's decoding (coordgen, SAM, PLD, EAGLE, ...): its accept lengths and "
                 "draft/verify costs as NPU/CPU busy time, its drafter memory in DRAM.")

}  // namespace mobisim::policies::pipeline
