#include "policies/pipeline/pipeline.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "policies/kvsplit/split_costs.h"
#include "policies/pipeline/dram_residency.h"
#include "policies/pipeline/split_events.h"
#include "policies/pipeline/unit_prefill.h"
#include "policies/pipeline/vanilla_decode.h"
#include "sim/event.h"

namespace mobisim::policies::pipeline {

Pipeline::Pipeline(const models::CostModel& cost, PipelineOptions options, std::unique_ptr<KvReuse> reuse,
                   std::unique_ptr<kvsplit::KvSplitStrategy> split, std::unique_ptr<PrefillStage> prefill,
                   std::unique_ptr<AnswerCache> answers, std::unique_ptr<DecodeStage> decode,
                   std::unique_ptr<KvResidency> residency, std::unique_ptr<IdleStage> idle)
    : cost_(cost),
      options_(std::move(options)),
      reuse_(std::move(reuse)),
      split_(std::move(split)),
      prefill_(prefill ? std::move(prefill) : std::make_unique<UnitPrefill>(options_.unit)),
      answers_(std::move(answers)),
      decode_(decode ? std::move(decode) : std::make_unique<VanillaDecode>(options_.unit)),
      residency_(residency ? std::move(residency) : std::make_unique<DramResidency>()),
      idle_(std::move(idle)) {
  prefill_->pair(*decode_);  // `prefill: coordgen` issues the decode stage's policy's own prefill
  if (idle_) idle_->link(StageLinks{answers_.get(), reuse_.get()});  // a stage it needs but lacks: ConfigError
}

void Pipeline::use_workload(std::shared_ptr<const IdleWorkload> workload) {
  if (idle_) idle_->use_workload(std::move(workload), cost_);
}

kvsplit::DeviceCostOptions Pipeline::split_options() const {
  return kvsplit::DeviceCostOptions{options_.unit,      options_.link,      options_.recompute,
                                    options_.payload,   options_.npu_chunk, options_.page_cache_fraction};
}

sim::Task<void> Pipeline::start(devices::Device& device, const std::string& owner) {
  reuse_->begin_model(cost_.spec());
  // What a split costs on this phone, built once (it copies the model and the profile).
  split_costs_ = std::make_unique<kvsplit::DeviceSplitCosts>(cost_, device.profile(), split_options());
  owner_ = owner;
  residency_->begin(cost_);
  co_await prefill_->begin(device, cost_, owner);
  decode_->begin(device, cost_);
  if (idle_) idle_->begin(device, cost_, owner);
}

// The split strategy's plan is the estimate; its split point (or Cake's blocks) is then issued
// on the phone's queues (split_events.h).
sim::Task<void> Pipeline::bring_back(devices::Device& device, std::int64_t s, std::int64_t in_dram,
                                     const std::vector<std::int64_t>& files, Served& out) {
  sim::Simulator& sim = device.sim();
  const kvsplit::SplitPlan plan = split_->plan(*split_costs_, kvsplit::SplitRequest{s, options_.with_q});
  out.split_estimate_s = plan.time_s;
  // A store of separate files (PerCache's slices) loaded whole from flash: one read per file, each
  // whole (the estimate stays the strategy's plan of one read).
  if (!files.empty() && !split_->block_schedule() && plan.recomputed_tokens <= 0 && options_.link.empty() &&
      options_.page_cache_fraction <= 0 && in_dram <= 0) {
    const auto& m = cost_.spec();
    const double per_token =
        options_.payload == kvsplit::Payload::kKv ? m.kv_bytes_per_token() : m.qkv_bytes_per_token(m.kv_dtype);
    const sim::Time t0 = sim.now();
    const std::string label = "kv load";
    for (const std::int64_t tokens : files) {
      const double bytes = static_cast<double>(tokens) * per_token;
      co_await device.storage().read(bytes, label);
      out.loaded_bytes += bytes;
    }
    out.split_s = out.split_copy_s = sim::to_seconds(sim.now() - t0);
    out.recomputed_tokens = 0;
    out.loaded_tokens = s;
    co_return;
  }
  const SplitStreams streams{device, cost_, *split_costs_, split_options(), options_.priority, options_.with_q};
  SplitTally tally;
  const sim::Time t0 = sim.now();
  if (const kvsplit::CakeOptions* blocks = split_->block_schedule()) {
    co_await issue_blocks(streams, s, *blocks, tally);  // reads every loaded block from flash
  } else {
    const std::int64_t l = std::clamp<std::int64_t>(plan.recomputed_tokens, 0, s);
    co_await issue_split(streams, s, l, std::max<std::int64_t>(0, std::min(s, in_dram) - l), tally);
  }
  out.split_s = sim::to_seconds(sim.now() - t0);
  out.recomputed_tokens = tally.recomputed_tokens;
  out.loaded_tokens = s - tally.recomputed_tokens;
  out.loaded_bytes = static_cast<double>(out.loaded_tokens) * split_costs_->bytes_per_token_loaded();
  out.split_compute_s = sim::to_seconds(tally.compute_busy);
  out.split_copy_s = sim::to_seconds(tally.copy_busy);
  out.times.active_energy_j += tally.active_energy_j;
}

// A fixed cost of `ms` on the app's unit (none when 0), its marginal energy added to `active_energy_j`.
// `what` is a literal: a temporary std::string in a co_await expression is destroyed twice by g++ 12.
sim::Task<void> Pipeline::fixed_cost(devices::Device& device, double ms, const char* what, double& active_energy_j,
                                     double& seconds) {
  if (ms <= 0) co_return;
  const std::string label = what;
  const sim::Time t0 = device.sim().now();
  co_await device.busy(options_.unit, sim::from_ms(ms), label, options_.priority);
  seconds += sim::to_seconds(device.sim().now() - t0);
  active_energy_j += device.profile().marginal_energy_j(options_.unit, sim::to_seconds(sim::from_ms(ms)), label);
}

sim::Task<void> Pipeline::serve(devices::Device& device, const std::string& kv_owner, const Request& r, Served& out) {
  sim::Simulator& sim = device.sim();
  out.times.request = r.id;
  out.times.arrival_s = r.arrival_s;
  out.started = sim.now();
  out.times.start_s = sim::to_seconds(out.started);
  out.times.output_tokens = r.output_tokens;
  const double flops0 = device.flops(), energy0 = device.energy_j();
  // Measured when the request ends (answered or a hit): the phone's FLOPs and energy meanwhile.
  const auto measure_phone = [&] {
    out.device_flops = device.flops() - flops0;
    out.device_energy_j = device.energy_j() - energy0;
  };
  out.prompt_tokens = r.prompt_tokens();  // as laid out at arrival (a hit's record); retrieval may change it
  // The idle work since the last request ends; what it put in DRAM is this request's to use.
  const IdleClaim claimed = idle_ ? idle_->claim(device, owner_, r) : IdleClaim{};
  std::int64_t in_dram = claimed.in_dram_tokens;
  out.prefetched_tokens = in_dram;
  out.idle_work = claimed.work;
  out.cache_bytes = reuse_->stored_bytes() + (answers_ ? answers_->stored_bytes() : 0.0);
  if (answers_) {
    AnswerLookup hit;
    co_await answers_->lookup(device, options_.unit, options_.priority, r, hit);
    out.answer_similarity = hit.similarity;
    out.embed_s = hit.embed_s;
    out.qa_match_s = hit.match_s;
    if (hit.hit) {  // the cached answer is shown at once: first and last token now
      out.answer_hit = true;
      out.served_answer = hit.answer;
      out.answer_stale = hit.stale;
      if (r.kv_session >= 0 && r.kv_session_ends) residency_->end_session(device, kv_owner, r.kv_session);
      out.split_done = out.first_token = sim.now();
      out.times.first_token_s = out.times.end_s = sim::to_seconds(sim.now());
      measure_phone();
      if (idle_) sim.start(idle_->after(device, owner_, *reuse_, r, true, cost_.spec().kv_bytes_per_token()), "idle work");
      co_return;
    }
  }
  // Fixed costs of retrieving the context and of matching it against the store (PerCache's order).
  co_await fixed_cost(device, options_.retrieval_ms, "retrieve", out.times.active_energy_j, out.retrieval_s);
  // The retrieval's result: only chunks in the knowledge bank by now (a request without a ranking
  // keeps its prompt). What the idle stage put in DRAM counts as far as the prompt is unchanged.
  std::shared_ptr<const Request> retrieved;  // shared with the idle work that may read it later
  if (!r.ranked.empty()) {
    auto laid = std::make_shared<Request>(r);
    retrieve_at(*laid, sim.now());
    in_dram = std::min(in_dram, common_prefix_tokens(r.prompt, laid->prompt));
    retrieved = std::move(laid);
  }
  const Request& req = retrieved ? *retrieved : r;
  const std::int64_t n = req.prompt_tokens();
  out.prompt_tokens = n;
  out.retrieved_chunks = static_cast<std::int64_t>(chunk_ids(req).size());
  co_await fixed_cost(device, options_.kv_match_ms, "kv match", out.times.active_energy_j, out.kv_match_s);
  // KV residency: the request's K/V is held while it runs (in DRAM, as far as the stage keeps it
  // there); one that cannot be stops the run.
  // What the stage reads for the request counts from here (a session's turn may read while it
  // places the new prompt's K/V among the kept clusters).
  const double read_before = residency_->read_bytes();
  residency_->hold(device, kv_owner, KvTurn{n, req.output_tokens, req.kv_session, req.kv_session_ends});
  const KvMatch match = reuse_->match(req, out.times.start_s);
  out.reuse_rejected = match.rejected;
  out.matched_tokens = match.tokens;
  out.matched_chunks = match.chunks;
  // At least the last prompt token is computed: its logits give the first answer token.
  const std::int64_t s = std::min(match.tokens, n - 1);
  out.reused_tokens = s;
  const std::vector<std::int64_t> files = reuse_->matched_files();
  if (s > 0) co_await bring_back(device, s, in_dram, files, out);
  decode_->plan_request(req, n, cost_);
  const sim::Time t_prefill = out.split_done = sim.now();
  co_await prefill_->run(device, cost_, n - s, s, options_.priority, out.times.active_energy_j);
  out.prefill_s = sim::to_seconds(sim.now() - t_prefill);
  out.first_token = sim.now();
  out.times.first_token_s = sim::to_seconds(out.first_token);
  Decoded decoded;
  const DecodeJob job{device, cost_, req, n, options_.priority, owner_, *residency_, out.times.active_energy_j};
  co_await decode_->run(job, decoded);
  out.decode_steps = decoded.steps;
  out.accepted_per_step = decoded.accepted_per_step;
  out.decode_estimate_s = decoded.estimate_s;
  out.kv_read_bytes = residency_->read_bytes() - read_before;
  out.times.end_s = sim::to_seconds(sim.now());
  out.decode_s = out.times.end_s - out.times.first_token_s;
  measure_phone();
  residency_->release(device, kv_owner);
  // What the store keeps is written to flash in the background, after the answer (later flash
  // reads queue behind it).
  // (An idle stage that stores them itself defers both writes into idle time.)
  if (!(idle_ && idle_->stores_kv())) out.stored = reuse_->store(req, out.times.end_s);
  if (answers_ && !(idle_ && idle_->stores_answers())) answers_->insert(req);
  if (out.stored.bytes > 0)
    out.store_write = sim.start(device.storage().write(out.stored.bytes, "kv store write"), "kv store write");
  if (!idle_) co_return;
  if (retrieved) {
    sim.start(idle_after(device, retrieved), "idle work");
  } else {
    sim.start(idle_->after(device, owner_, *reuse_, r, false, cost_.spec().kv_bytes_per_token()), "idle work");
  }
}

// The idle stage's work after a request the pipeline laid out at retrieval (the LLM answered it):
// the request lives as long as the idle work may read it. Awaiting runs it inline: the same events
// as starting it directly.
sim::Task<void> Pipeline::idle_after(devices::Device& device, std::shared_ptr<const Request> r) {
  co_await idle_->after(device, owner_, *reuse_, *r, false, cost_.spec().kv_bytes_per_token());
}

}  // namespace mobisim::policies::pipeline
